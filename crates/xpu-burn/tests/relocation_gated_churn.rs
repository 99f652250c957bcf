//! Relocation (`relocation:merge`) under burn behind a gate: blocks whose producers have not run
//! yet are moved and their vacated places reused, and every tensor holds its values once the gate
//! opens. Its own process.
//!
//! Review h15 (burn under `relocation:merge`, the default): passing probe. With burn's stream
//! held by a user-event gate, tensors are created, transformed, sliced, assigned into and
//! dropped, so that the allocator moves blocks whose producers have not run yet and hands
//! vacated places to new tensors, all queued behind the gate; once it opens, every surviving
//! tensor holds its host reference. Only ops that enqueue without a host wait (no f32
//! matmul: CLBlast's regions wait, see `relocation_matmul.rs`; no reads). Its own process.

use std::time::Duration;

use burn_tensor::{Tensor, TensorData};
use xpu::xpu_event::Gate;
use xpu_burn::{Xpu, XpuDevice};

const COLS: usize = 1024;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        usize::try_from(self.next() % n as u64).unwrap()
    }
}

struct Held {
    t: Tensor<Xpu, 2>,
    want: Vec<f32>,
    rows: usize,
}

#[test]
fn tensors_moved_behind_a_gate_keep_their_values() {
    let dev = XpuDevice::new(0);
    let core = || {
        xpu::xpu_alloc::device_allocator(0)
            .unwrap()
            .core()
            .relocation_stats()
            .moves
    };
    let _ = Tensor::<Xpu, 1>::ones([4], &dev).into_data(); // the device's stream exists
    let stream = xpu::xpu_stream::default_stream(0).unwrap();
    let gate = Gate::with_open_limit(0, Duration::from_secs(120)).unwrap();
    gate.block(&stream).unwrap();
    let before = core();
    let mut rng = Rng(0xDEAD_BEEF);
    let mut live: Vec<Held> = Vec::new();
    for _ in 0..1200 {
        let total: usize = live.iter().map(|h| h.rows).sum();
        if total > 24_000 || (live.len() > 6 && rng.below(3) == 0) {
            let k = rng.below(live.len());
            live.swap_remove(k);
            continue;
        }
        match rng.below(6) {
            0 | 1 => {
                let rows = 16 + rng.below(2300);
                let seed = rng.next();
                let want: Vec<f32> = (0..rows * COLS)
                    .map(|i| {
                        ((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) % 251) as f32
                    })
                    .collect();
                let t = Tensor::from_data(TensorData::new(want.clone(), [rows, COLS]), &dev);
                live.push(Held { t, want, rows });
            }
            2 if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                let t = h.t.clone() * 2.0 - 3.0;
                let want = h.want.iter().map(|v| v * 2.0 - 3.0).collect();
                live.push(Held {
                    t,
                    want,
                    rows: h.rows,
                });
            }
            3 if !live.is_empty() => {
                let a = &live[rng.below(live.len())];
                let b = &live[rng.below(live.len())];
                let n = a.rows.min(b.rows);
                let t = a.t.clone().slice([0..n, 0..COLS])
                    - b.t.clone().slice([b.rows - n..b.rows, 0..COLS]);
                let want = (0..n * COLS)
                    .map(|i| a.want[i] - b.want[(b.rows - n) * COLS + i])
                    .collect();
                live.push(Held { t, want, rows: n });
            }
            4 if live.len() >= 2 => {
                let k = rng.below(live.len());
                let src = &live[rng.below(live.len())];
                let n = 1 + rng.below(src.rows.min(live[k].rows));
                let at = rng.below(live[k].rows - n + 1);
                let value = src.t.clone().slice([0..n, 0..COLS]);
                let mut want = live[k].want.clone();
                want[at * COLS..(at + n) * COLS].copy_from_slice(&src.want[..n * COLS]);
                let t = live[k].t.clone().slice_assign([at..at + n, 0..COLS], value);
                live[k] = Held {
                    t,
                    want,
                    rows: live[k].rows,
                };
            }
            5 if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                let r0 = rng.below(h.rows);
                let t = h.t.clone().slice([r0..h.rows, 0..COLS]);
                let want = h.want[r0 * COLS..].to_vec();
                live.push(Held {
                    t,
                    want,
                    rows: h.rows - r0,
                });
            }
            _ => {}
        }
    }
    let moved = core() - before;
    let closed = !gate.is_open();
    gate.open().unwrap();
    println!("{moved} moves behind the gate; {} survivors", live.len());
    assert!(closed, "everything was enqueued with the gate closed");
    assert!(moved > 0, "the probe moved no block");
    for (i, h) in live.iter().enumerate() {
        let got = h.t.clone().into_data().to_vec::<f32>().unwrap();
        if let Some(e) = got.iter().zip(&h.want).position(|(a, b)| a != b) {
            panic!(
                "survivor {i} ({} rows): element {e} is {} instead of {}",
                h.rows, got[e], h.want[e]
            );
        }
    }
}
