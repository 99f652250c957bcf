//! Relocation (`relocation:merge`) under burn: threads create, transform, slice and drop tensors
//! while the allocator moves their blocks; every surviving tensor keeps its values. One test per
//! process (the global allocators' figures).
//!
//! Review h15 (burn under `relocation:merge`, the default): passing probes. Threads create,
//! transform, slice, assign into and drop burn tensors of many sizes on both devices, so that
//! the allocator moves live tensors' blocks between launches (growth events with fragmented
//! segments); every surviving tensor is checked against a host reference. The relocation
//! counts are printed and required to be nonzero. One test per process (the global
//! allocators' figures).

use burn_tensor::{Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice};

const COLS: usize = 1024;

/// xorshift64*.
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

fn moves(device: usize) -> u64 {
    xpu::xpu_alloc::device_allocator(device)
        .unwrap()
        .core()
        .relocation_stats()
        .moves
}

/// A tensor of `rows` x 1,024 with its expected values (small integers: exact in f32).
struct Held {
    t: Tensor<Xpu, 2>,
    want: Vec<f32>,
    rows: usize,
}

fn make(rows: usize, seed: u64, device: &XpuDevice) -> Held {
    let want: Vec<f32> = (0..rows * COLS)
        .map(|i| ((i as u64).wrapping_mul(2_654_435_761).wrapping_add(seed) % 251) as f32)
        .collect();
    let t = Tensor::from_data(TensorData::new(want.clone(), [rows, COLS]), device);
    Held { t, want, rows }
}

fn check(h: &Held, what: &str) {
    let got = h.t.clone().into_data().to_vec::<f32>().unwrap();
    assert_eq!(got.len(), h.want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(&h.want).position(|(a, b)| a != b) {
        panic!(
            "{what}: element {i} (row {}) is {} instead of {} ({} x {COLS})",
            i / COLS,
            got[i],
            h.want[i],
            h.rows
        );
    }
}

/// One thread's churn on `device`: returns how many checks it made. `shared` is read by
/// every thread's ops (its block may move while another thread launches on it).
fn churn(device: usize, seed: u64, iters: usize, cap_rows: usize, shared: &Held) -> usize {
    let dev = XpuDevice::new(device);
    let other = XpuDevice::new(1 - device.min(1));
    let mut rng = Rng(seed | 1);
    // Another device's thread reads its own copy of the shared tensor.
    let copy;
    let shared = if device == 0 {
        shared
    } else {
        copy = Held {
            t: shared.t.clone().to_device(&dev),
            want: shared.want.clone(),
            rows: shared.rows,
        };
        &copy
    };
    let mut live: Vec<Held> = Vec::new();
    let mut checks = 0;
    for it in 0..iters {
        let total: usize = live.iter().map(|h| h.rows).sum();
        if total > cap_rows || (live.len() > 6 && rng.below(3) == 0) {
            let k = rng.below(live.len());
            live.swap_remove(k);
            continue;
        }
        match rng.below(10) {
            // New tensors of 64 KiB to 9 MiB (both pools; large ones round to 2 MiB
            // multiples or share 20 MiB segments).
            0..=2 => {
                let rows = 16 + rng.below(2300);
                live.push(make(rows, rng.next(), &dev));
            }
            // An elementwise op on a live tensor (its block may have moved since its last
            // use; the output's allocation may move it before the launch).
            3 if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                let t = h.t.clone() * 2.0 + 1.0;
                let want = h.want.iter().map(|v| v * 2.0 + 1.0).collect();
                live.push(Held {
                    t,
                    want,
                    rows: h.rows,
                });
            }
            // Two live tensors (or one and the shared one), row ranges of each.
            4 if !live.is_empty() => {
                let a = &live[rng.below(live.len())];
                let b = if rng.below(2) == 0 {
                    shared
                } else {
                    &live[rng.below(live.len())]
                };
                let n = a.rows.min(b.rows);
                let (oa, ob) = (rng.below(a.rows - n + 1), rng.below(b.rows - n + 1));
                let t = a.t.clone().slice([oa..oa + n, 0..COLS])
                    + b.t.clone().slice([ob..ob + n, 0..COLS]);
                let want = (0..n * COLS)
                    .map(|i| a.want[oa * COLS + i] + b.want[ob * COLS + i])
                    .collect();
                live.push(Held { t, want, rows: n });
            }
            // A view (no copy) kept live: it shares its storage's block.
            5 if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                let r0 = rng.below(h.rows);
                let r1 = r0 + 1 + rng.below(h.rows - r0);
                let t = h.t.clone().slice([r0..r1, 0..COLS]);
                let want = h.want[r0 * COLS..r1 * COLS].to_vec();
                live.push(Held {
                    t,
                    want,
                    rows: r1 - r0,
                });
            }
            // Assign rows into a live tensor (burn's slice_assign; xpu writes a fresh copy).
            6 if live.len() >= 2 => {
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
            // A reduction over rows, a transpose-and-back and a cast round trip.
            7 if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                let t = h.t.clone().transpose().int().float().transpose().sum_dim(1);
                let want = h
                    .want
                    .chunks(COLS)
                    .map(|r| r.iter().sum::<f32>())
                    .collect::<Vec<_>>();
                let got = t.into_data().to_vec::<f32>().unwrap();
                assert_eq!(got, want, "thread {seed}: sum_dim at iteration {it}");
                checks += 1;
            }
            // A round trip through the other device.
            8 if !live.is_empty() && xpu::device_count() > 1 => {
                let k = rng.below(live.len());
                let there = live[k].t.clone().to_device(&other) - 1.0;
                let back = there.to_device(&dev) + 1.0;
                let want = live[k].want.clone();
                live.push(Held {
                    t: back,
                    want,
                    rows: live[k].rows,
                });
            }
            _ if !live.is_empty() => {
                let h = &live[rng.below(live.len())];
                check(h, &format!("thread {seed}, iteration {it}"));
                checks += 1;
            }
            _ => {}
        }
    }
    for (i, h) in live.iter().enumerate() {
        check(h, &format!("thread {seed}, survivor {i}"));
        checks += 1;
    }
    check(shared, "the shared tensor");
    checks + 1
}

#[test]
fn tensors_of_many_threads_keep_their_values_while_their_blocks_move() {
    let two = xpu::device_count() > 1;
    let shared = make(700, 99, &XpuDevice::new(0));
    let (m0, m1) = (moves(0), if two { moves(1) } else { 0 });
    let checks: usize = std::thread::scope(|s| {
        let shared = &shared;
        let mut hs = vec![
            s.spawn(move || churn(0, 0x1234_5678, 600, 12_000, shared)),
            s.spawn(move || churn(0, 0x8765_4321, 600, 12_000, shared)),
        ];
        if two {
            hs.push(s.spawn(move || churn(1, 0x0F0F_0F0F, 600, 12_000, shared)));
        }
        hs.into_iter().map(|h| h.join().expect("no panic")).sum()
    });
    let (d0, d1) = (moves(0) - m0, if two { moves(1) - m1 } else { 0 });
    println!("{checks} checks; moves: device 0 {d0}, device 1 {d1}");
    assert!(d0 > 0, "the probe moved no block on device 0");
}
