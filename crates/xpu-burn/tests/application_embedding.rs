//! The backend embedded in an application: tensors shared between threads and devices, autodiff on
//! several threads, out of memory under a memory fraction, statistics across threads, configuration
//! changes, private pools and graph captures beside burn. nextest runs each test in its own process
//! (the allocator's figures are the test's own).
//!
//! Review h30 (fresh eyes, embedding the backend in an application): probes of burn's tensors
//! shared between threads and devices, autodiff on several threads, out-of-memory under a
//! memory fraction, and burn interleaved with xpu's allocator calls. Results are compared with
//! burn-ndarray or a host reference; memory with the allocator's statistics. On PoCL
//! (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`); nextest runs each test in its own
//! process, so the allocator's figures are this test's.

// burn's 1-d slices are `[a..b]`; the two devices' baselines are indexed by device.
#![allow(clippy::single_range_in_vec_init, clippy::needless_range_loop)]

use burn::backend::Autodiff;
use burn_ndarray::{NdArray, NdArrayDevice};
use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice};

type Nd = NdArray<f32>;

fn two_devices() -> (XpuDevice, XpuDevice) {
    assert!(
        xpu::device_count() >= 2,
        "these probes need two devices (POCL_DEVICES=\"pthread pthread\")"
    );
    (XpuDevice::new(0), XpuDevice::new(1))
}

fn vals<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

fn seq(n: usize, k: u64) -> Vec<f32> {
    let mut s = k.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) - 0.5
        })
        .collect()
}

fn close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-4 + 1e-4 * b.abs(),
            "{what}: [{i}] got {a}, want {b}"
        );
    }
}

/// Three SGD steps of a two-layer MLP (matmul, relu, log_softmax, cross-entropy by gather),
/// parameters returned as host vectors. Generic, so the same steps run on ndarray.
fn train<B: burn_tensor::backend::AutodiffBackend>(k: u64, d: &B::Device) -> Vec<Vec<f32>> {
    let x = Tensor::<B, 2>::from_data(TensorData::new(seq(8 * 6, k), [8, 6]), d);
    let y = Tensor::<B, 2, Int>::from_data(
        TensorData::new((0..8).map(|i| (i * 3 + k as i64) % 4).collect(), [8, 1]),
        d,
    );
    let mut w1 = Tensor::<B, 2>::from_data(TensorData::new(seq(6 * 10, k + 1), [6, 10]), d);
    let mut b1 = Tensor::<B, 1>::from_data(TensorData::new(seq(10, k + 2), [10]), d);
    let mut w2 = Tensor::<B, 2>::from_data(TensorData::new(seq(10 * 4, k + 3), [10, 4]), d);
    for _ in 0..3 {
        let (p1, q1, p2) = (
            w1.clone().require_grad(),
            b1.clone().require_grad(),
            w2.clone().require_grad(),
        );
        let h =
            burn_tensor::activation::relu(x.clone().matmul(p1.clone()) + q1.clone().unsqueeze());
        let logits = h.matmul(p2.clone());
        let lp = burn_tensor::activation::log_softmax(logits, 1);
        let loss = lp.gather(1, y.clone()).mean().neg();
        let g = loss.backward();
        let lr = 0.5;
        w1 = Tensor::from_inner(p1.clone().inner() - p1.grad(&g).unwrap() * lr);
        b1 = Tensor::from_inner(q1.clone().inner() - q1.grad(&g).unwrap() * lr);
        w2 = Tensor::from_inner(p2.clone().inner() - p2.grad(&g).unwrap() * lr);
    }
    vec![vals(w1), vals(b1), vals(w2)]
}

/// Training steps on four threads at once, two per device, against ndarray's.
#[test]
fn autodiff_training_on_four_threads_and_two_devices_matches_ndarray() {
    let (d0, d1) = two_devices();
    let want: Vec<_> = (0..4u64)
        .map(|k| train::<Autodiff<Nd>>(k, &NdArrayDevice::Cpu))
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..4u64)
            .map(|k| {
                let d = if k % 2 == 0 { d0 } else { d1 };
                s.spawn(move || train::<Autodiff<Xpu>>(k, &d))
            })
            .collect();
        for (k, h) in hs.into_iter().enumerate() {
            let got = h.join().unwrap();
            for (p, (g, w)) in got.iter().zip(&want[k]).enumerate() {
                close(g, w, &format!("thread {k} param {p}"));
            }
        }
    });
}

/// Tensors made on the main thread and shared: threads move them to the other device and
/// back, compute on both devices, read them and drop their clones in every order, while the
/// originals' producers may still be queued. Every value matches the host reference, and once
/// everything dropped both devices' allocated bytes are back at their baselines.
#[test]
fn shared_tensors_moved_between_devices_by_threads_keep_their_values() {
    let (d0, d1) = two_devices();
    let warm = |d: &XpuDevice| {
        let t = Tensor::<Xpu, 2>::from_data(TensorData::new(seq(12, 0), [3, 4]), d);
        let _ = vals(t.clone().exp().sum_dim(1).to_device(&d0).to_device(&d1));
    };
    warm(&d0);
    warm(&d1);
    Xpu::sync(&d0);
    Xpu::sync(&d1);
    let base = [
        xpu::memory_allocated(Some(0)).unwrap(),
        xpu::memory_allocated(Some(1)).unwrap(),
    ];
    let host: Vec<Vec<f32>> = (0..6).map(|k| seq(33 * 17, k)).collect();
    let src: Vec<Tensor<Xpu, 2>> = host
        .iter()
        .enumerate()
        .map(|(k, v)| {
            let d = if k % 2 == 0 { d0 } else { d1 };
            // Queued work behind the upload: the producer of the shared tensor.
            Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [33, 17]), &d) * 2.0 - 1.0
        })
        .collect();
    let want: Vec<Vec<f32>> = host
        .iter()
        .map(|v| v.iter().map(|x| x * 2.0 - 1.0).collect())
        .collect();
    std::thread::scope(|s| {
        for t in 0..6usize {
            let mine: Vec<Tensor<Xpu, 2>> = src.to_vec();
            let want = &want;
            s.spawn(move || {
                for (i, x) in mine.into_iter().enumerate() {
                    let x = if t % 2 == 0 { x } else { x.flip([1]).flip([1]) };
                    let other = if x.device() == d0 { d1 } else { d0 };
                    let moved = x.clone().to_device(&other);
                    drop(x);
                    let back = (moved.clone() + 1.0).to_device(&if other == d0 { d1 } else { d0 });
                    let w: Vec<f32> = want[i].iter().map(|v| v + 1.0).collect();
                    close(&vals(back), &w, &format!("thread {t} tensor {i}"));
                    close(
                        &vals(moved.transpose().swap_dims(0, 1)),
                        &want[i],
                        &format!("thread {t} tensor {i} moved"),
                    );
                }
            });
        }
        drop(src);
    });
    Xpu::sync(&d0);
    Xpu::sync(&d1);
    for d in 0..2 {
        assert_eq!(
            xpu::memory_allocated(Some(d)).unwrap(),
            base[d],
            "device {d}: allocated bytes after every tensor dropped"
        );
    }
}

/// Zero-sized tensors of every kind across devices, through autodiff and reads, on threads.
#[test]
fn zero_sized_tensors_move_between_devices_and_differentiate() {
    let (d0, d1) = two_devices();
    std::thread::scope(|s| {
        for t in 0..4usize {
            s.spawn(move || {
                let (a, b) = if t % 2 == 0 { (d0, d1) } else { (d1, d0) };
                let x = Tensor::<Autodiff<Xpu>, 3>::zeros([2, 0, 3], &a).require_grad();
                let y = x.clone().to_device(&b).exp().sum_dim(1) * 2.0;
                assert_eq!(y.dims(), [2, 1, 3]);
                assert_eq!(vals(y.clone()), vec![0.0; 6]);
                let g = y.sum().backward();
                let gx = x.grad(&g).unwrap();
                assert_eq!(gx.dims(), [2, 0, 3]);
                assert_eq!(gx.device(), a);
                assert!(vals(gx).is_empty());
                let i = Tensor::<Xpu, 2, Int>::zeros([0, 5], &a).to_device(&b);
                assert_eq!(i.dims(), [0, 5]);
                assert!(i.into_data().to_vec::<i64>().unwrap().is_empty());
                let m = Tensor::<Xpu, 1>::zeros([0], &a)
                    .equal_elem(0.0)
                    .to_device(&b);
                assert!(m.into_data().to_vec::<bool>().unwrap().is_empty());
            });
        }
    });
}

fn panic_text(e: Box<dyn std::any::Any + Send>) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Runs `f`, expecting a panic whose message says the allocator refused the memory.
fn expect_oom<R>(what: &str, f: impl FnOnce() -> R) {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    let msg = match r {
        Ok(_) => panic!("{what}: succeeded under the memory fraction"),
        Err(e) => panic_text(e),
    };
    assert!(
        msg.contains("XPU out of memory") || msg.contains("XPU memory fraction exceeded"),
        "{what}: panicked with {msg:?}"
    );
}

/// Under a memory fraction of 24 MiB on device 1: allocations and ops that need more fail
/// with the allocator's out-of-memory panic, on several threads at once, while the tensors
/// that fit keep their values; after everything dropped the allocated bytes are back at the
/// baseline, and with the fraction lifted the same ops succeed.
#[test]
fn out_of_memory_under_a_memory_fraction_panics_cleanly_and_frees_everything() {
    let (_, d1) = two_devices();
    let _ = vals(Tensor::<Xpu, 1>::ones([4], &d1).exp());
    Xpu::sync(&d1);
    let base = xpu::memory_allocated(Some(1)).unwrap();
    let (_, total) = xpu::mem_get_info(Some(1)).unwrap();
    let cap = 24u64 << 20;
    xpu::set_per_process_memory_fraction(cap as f64 / total as f64, Some(1)).unwrap();
    let keep_host = seq(1 << 20, 7); // 4 MiB
    let keep = Tensor::<Xpu, 1>::from_data(TensorData::new(keep_host.clone(), [1 << 20]), &d1);
    // 32 MiB at once: over the cap.
    expect_oom("a 32 MiB tensor", || {
        Tensor::<Xpu, 1>::zeros([8 << 20], &d1)
    });
    // An op whose inputs fit and whose output does not.
    expect_oom("a matmul with a 32 MiB output", || {
        let a = Tensor::<Xpu, 2>::ones([2048, 1], &d1);
        let b = Tensor::<Xpu, 2>::ones([1, 4096], &d1);
        a.matmul(b)
    });
    // Threads racing for the rest: each holds up to four 2 MiB tensors; whatever fits keeps
    // its values, the rest fails cleanly.
    let fails = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4usize {
            let fails = &fails;
            s.spawn(move || {
                let mut held = Vec::new();
                for i in 0..6usize {
                    let v = (t * 10 + i) as f32;
                    let r = std::panic::catch_unwind(|| {
                        Tensor::<Xpu, 1>::full([1 << 19], v, &d1).exp().log()
                    });
                    match r {
                        Ok(x) => held.push((v, x)),
                        Err(e) => {
                            let m = panic_text(e);
                            assert!(m.contains("XPU"), "thread {t}: {m:?}");
                            fails.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                    if held.len() > 4 {
                        held.remove(0);
                    }
                }
                for (v, x) in held {
                    let got = vals(x.slice([0..4]));
                    close(&got, &[v; 4], &format!("thread {t} value {v}"));
                }
            });
        }
    });
    assert!(fails.into_inner() > 0, "the cap refused nothing");
    close(
        &vals(keep.clone()),
        &keep_host,
        "the tensor kept under the cap",
    );
    drop(keep);
    Xpu::sync(&d1);
    assert_eq!(
        xpu::memory_allocated(Some(1)).unwrap(),
        base,
        "allocated bytes"
    );
    let stats = xpu::memory_stats(Some(1)).unwrap();
    assert!(stats.num_ooms > 0, "num_ooms {}", stats.num_ooms);
    xpu::set_per_process_memory_fraction(1.0, Some(1)).unwrap();
    let big = Tensor::<Xpu, 1>::ones([8 << 20], &d1).sum();
    assert_eq!(vals(big), vec![(8 << 20) as f32]);
}

/// The allocator's statistics against what is live: 1 MiB tensors made on threads that exit
/// before other threads drop them, while a third thread reads the statistics and empties the
/// cache. After each phase `allocated_bytes` and `allocation` (current) are the baseline plus
/// exactly the live tensors, `active` likewise, and the peaks are at least the current values.
#[test]
fn statistics_match_the_live_tensors_made_and_dropped_on_exited_threads() {
    let (d0, _) = two_devices();
    let mib = 1usize << 18; // f32 elements in 1 MiB
    let _ = vals(Tensor::<Xpu, 1>::full([mib], 1.0, &d0).slice([0..1]));
    Xpu::sync(&d0);
    let stats = || xpu::memory_stats(Some(0)).unwrap();
    let s0 = stats();
    let base_bytes = s0.allocated_bytes.all.current;
    let base_count = s0.allocation.all.current;
    let base_active = s0.active_bytes.all.current;
    let check = |live: i64, what: &str| {
        Xpu::sync(&d0);
        let s = stats();
        assert_eq!(
            s.allocated_bytes.all.current - base_bytes,
            live << 20,
            "{what}: allocated bytes"
        );
        assert_eq!(
            s.allocation.all.current - base_count,
            live,
            "{what}: allocations"
        );
        assert_eq!(
            s.active_bytes.all.current - base_active,
            live << 20,
            "{what}: active bytes"
        );
        assert_eq!(
            xpu::memory_allocated(Some(0)).unwrap() as i64,
            s.allocated_bytes.all.current,
            "{what}: memory_allocated"
        );
        assert!(s.allocated_bytes.all.peak >= s.allocated_bytes.all.current);
        assert!(s.reserved_bytes.all.current >= s.allocated_bytes.all.current);
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let made: Vec<Tensor<Xpu, 1>> = std::thread::scope(|s| {
        let stop = &stop;
        let (first_read, read) = std::sync::mpsc::channel();
        let reader = s.spawn(move || {
            let mut reads = 0;
            loop {
                let st = xpu::memory_stats(Some(0)).unwrap();
                assert!(st.allocated_bytes.all.current >= 0);
                assert!(st.allocation.all.current >= 0);
                assert!(st.allocated_bytes.all.peak >= st.allocated_bytes.all.current);
                xpu::empty_cache();
                reads += 1;
                if reads == 1 {
                    let _ = first_read.send(());
                }
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
            }
            reads
        });
        // The makers start once the reader read once (on 2 cores the makers could otherwise
        // all end before the reader's first read: a flake seen 2026-12-06).
        read.recv().unwrap();
        let makers: Vec<_> = (0..4)
            .map(|t| {
                s.spawn(move || {
                    (0..6)
                        .map(|i| Tensor::<Xpu, 1>::full([mib], (t * 6 + i) as f32, &d0))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let made: Vec<_> = makers.into_iter().flat_map(|h| h.join().unwrap()).collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(reader.join().unwrap() > 0);
        made
    });
    check(24, "24 tensors of exited threads");
    // Other threads drop two thirds of them, on two threads at once.
    let mut made = made;
    let keep: Vec<_> = made.drain(..8).collect();
    let (a, b): (Vec<_>, Vec<_>) = made.into_iter().enumerate().partition(|(i, _)| i % 2 == 0);
    std::thread::scope(|s| {
        s.spawn(move || drop(a));
        s.spawn(move || drop(b));
        s.spawn(xpu::empty_cache);
    });
    check(8, "8 left");
    for (i, t) in keep.iter().enumerate() {
        assert_eq!(vals(t.clone().slice([mib - 1..mib])), vec![i as f32]);
    }
    drop(keep);
    check(0, "all dropped");
}

/// The allocator's configuration replaced at run time (`xpu_alloc::set_config`, the grammar of
/// `XPU_ALLOC_CONF`) by one thread, over and over, while four threads compute with burn on
/// both devices, with blocks allocated under one configuration and freed under another:
/// every value matches its host reference, and once everything dropped the allocated bytes
/// of both devices are back at their baselines.
#[test]
fn configuration_changes_while_threads_compute_keep_values_and_accounting() {
    let (d0, d1) = two_devices();
    let configs = [
        "",
        "relocation:merge_all",
        "relocation:off,split_segments:False",
        "max_split_size_mb:20,roundup_power2_divisions:4",
        "garbage_collection_threshold:0.6,release_policy:before_grow",
        "large_segment_size_mb:12,regrow_factor:3",
        "relocation:merge,split_segments:True,roundup_power2_divisions:[256:2,512:4,>:8]",
    ];
    for c in configs {
        xpu::xpu_alloc::set_config(c).unwrap_or_else(|e| panic!("{c}: {e}"));
    }
    let job = |d: &XpuDevice, n: usize, k: u64| {
        let v = seq(n * 24, k);
        let a = Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [n, 24]), d);
        let b = a.clone().transpose().matmul(a.clone()); // [24, 24]
        let c = Tensor::cat(vec![a.clone(), a.clone() * 2.0], 0).sum_dim(0); // [1, 24]
        let big = Tensor::<Xpu, 1>::full([(n % 5 + 1) << 18], 1.0, d).sum();
        let mut want_b = vec![0f32; 24 * 24];
        for i in 0..24 {
            for j in 0..24 {
                want_b[i * 24 + j] = (0..n).map(|r| v[r * 24 + i] * v[r * 24 + j]).sum();
            }
        }
        let want_c: Vec<f32> = (0..24)
            .map(|j| (0..n).map(|r| 3.0 * v[r * 24 + j]).sum())
            .collect();
        close(&vals(b), &want_b, &format!("matmul n {n} k {k}"));
        close(&vals(c), &want_c, &format!("cat/sum n {n} k {k}"));
        assert_eq!(vals(big), vec![((n % 5 + 1) << 18) as f32]);
    };
    job(&d0, 3, 0);
    job(&d1, 3, 0);
    // The kernels' cached metadata (one block per distinct shape) is released with the
    // allocator's cache: measured without it.
    Xpu::memory_cleanup(&d0);
    Xpu::memory_cleanup(&d1);
    let base = [
        xpu::memory_allocated(Some(0)).unwrap(),
        xpu::memory_allocated(Some(1)).unwrap(),
    ];
    let done = std::sync::atomic::AtomicUsize::new(0);
    std::thread::scope(|s| {
        let done = &done;
        s.spawn(move || {
            let mut i = 0;
            while done.load(std::sync::atomic::Ordering::Acquire) < 4 {
                xpu::xpu_alloc::set_config(configs[i % configs.len()]).unwrap();
                if i % 5 == 0 {
                    xpu::empty_cache();
                }
                i += 1;
            }
        });
        for t in 0..4u64 {
            s.spawn(move || {
                let d = if t % 2 == 0 { d0 } else { d1 };
                for i in 0..6u64 {
                    job(&d, 5 + ((t * 13 + i * 7) % 60) as usize, t * 100 + i);
                }
                done.fetch_add(1, std::sync::atomic::Ordering::Release);
            });
        }
    });
    xpu::xpu_alloc::set_config("").unwrap();
    Xpu::memory_cleanup(&d0);
    Xpu::memory_cleanup(&d1);
    for d in 0..2 {
        assert_eq!(
            xpu::memory_allocated(Some(d)).unwrap(),
            base[d],
            "device {d}: allocated bytes"
        );
    }
}

/// CLBlast-sized f32 matmuls (plain, transposed, batched with broadcast) on six threads over
/// both devices at once, their first calls included (CLBlast compiles its kernels per device
/// then), against ndarray.
#[test]
fn concurrent_clblast_matmuls_on_two_devices_match_ndarray() {
    let (d0, d1) = two_devices();
    fn pipeline<B: Backend>(k: u64, d: &B::Device) -> Vec<Vec<f32>> {
        let a = Tensor::<B, 3>::from_data(TensorData::new(seq(2 * 48 * 72, k), [2, 48, 72]), d);
        let b = Tensor::<B, 2>::from_data(TensorData::new(seq(72 * 40, k + 1), [72, 40]), d);
        let c = a.clone().matmul(b.clone().unsqueeze()); // [2, 48, 40]
        let e = a.clone().swap_dims(1, 2).matmul(c.clone()); // [2, 72, 40]
        let f = c.clone().matmul(b.clone().transpose().unsqueeze()); // [2, 48, 72]
        vec![vals(c), vals(e), vals(f.flip([2]))]
    }
    let want: Vec<_> = (0..6u64)
        .map(|k| pipeline::<Nd>(k, &NdArrayDevice::Cpu))
        .collect();
    std::thread::scope(|s| {
        let hs: Vec<_> = (0..6u64)
            .map(|k| {
                let d = if k % 2 == 0 { d0 } else { d1 };
                s.spawn(move || pipeline::<Xpu>(k, &d))
            })
            .collect();
        for (k, h) in hs.into_iter().enumerate() {
            for (i, (g, w)) in h.join().unwrap().iter().zip(&want[k]).enumerate() {
                assert_eq!(g.len(), w.len(), "thread {k} result {i}: length");
                for (j, (a, b)) in g.iter().zip(w).enumerate() {
                    assert!(
                        (a - b).abs() <= 1e-3 + 1e-3 * b.abs(),
                        "thread {k} result {i} [{j}]: got {a}, want {b}"
                    );
                }
            }
        }
    });
}

/// Short-lived threads (their statistics cells retire and their slots are reused) make
/// tensors that outlive them and are dropped by other short-lived threads, while another
/// thread resets the peak and accumulated statistics and reads them. At the end the current
/// allocated bytes and allocation count are the baseline, and no current value is negative
/// at any read.
#[test]
fn statistics_stay_exact_across_short_lived_threads_and_resets() {
    let (d0, _) = two_devices();
    let _ = vals(Tensor::<Xpu, 1>::full([1000], 1.0, &d0).slice([0..1]));
    Xpu::sync(&d0);
    let s0 = xpu::memory_stats(Some(0)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        s.spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                xpu::reset_peak_memory_stats(Some(0)).unwrap();
                let st = xpu::memory_stats(Some(0)).unwrap();
                assert!(st.allocated_bytes.all.current >= 0, "{st:?}");
                assert!(st.allocation.all.current >= 0, "{st:?}");
                assert!(st.active.all.current >= 0, "{st:?}");
                assert!(
                    st.allocated_bytes.all.peak >= st.allocated_bytes.all.current,
                    "peak {} < current {}",
                    st.allocated_bytes.all.peak,
                    st.allocated_bytes.all.current
                );
                xpu::reset_accumulated_memory_stats(Some(0)).unwrap();
                std::thread::yield_now();
            }
        });
        let mut carried: Vec<Tensor<Xpu, 1>> = Vec::new();
        for round in 0..40usize {
            // A thread that drops what the previous round made and makes new tensors.
            carried = std::thread::spawn(move || {
                drop(carried);
                (0..3)
                    .map(|i| Tensor::<Xpu, 1>::full([100 + round * 7 + i], i as f32, &d0))
                    .collect()
            })
            .join()
            .unwrap();
        }
        for (i, t) in carried.into_iter().enumerate() {
            assert_eq!(vals(t.slice([0..1])), vec![i as f32]);
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    Xpu::sync(&d0);
    let s1 = xpu::memory_stats(Some(0)).unwrap();
    assert_eq!(
        s1.allocated_bytes.all.current, s0.allocated_bytes.all.current,
        "allocated bytes"
    );
    assert_eq!(
        s1.allocation.all.current, s0.allocation.all.current,
        "allocations"
    );
    assert_eq!(
        s1.active_bytes.all.current, s0.active_bytes.all.current,
        "active bytes"
    );
}

/// burn's tensors made while the thread routes its allocations to a private pool
/// (`xpu::use_mem_pool`), handed to other threads after the pool's handle and guard dropped,
/// used there while another thread empties the caches, and dropped: the values hold, and
/// once `memory_cleanup` released the kernels' metadata the device's allocated and reserved
/// bytes are back at their baselines (the dropped pool's segments released).
#[test]
fn tensors_of_a_dropped_private_pool_keep_their_values_and_release_it() {
    let (d0, _) = two_devices();
    let _ = vals((Tensor::<Xpu, 2>::ones([8, 8], &d0).transpose() + 1.0).sum_dim(1));
    Xpu::memory_cleanup(&d0);
    let base = (
        xpu::memory_allocated(Some(0)).unwrap(),
        xpu::memory_reserved(Some(0)).unwrap(),
    );
    let made: Vec<(Vec<f32>, Tensor<Xpu, 2>)> = std::thread::spawn(move || {
        let pool = xpu::mem_pool(Some(0)).unwrap();
        let guard = xpu::use_mem_pool(&pool).unwrap();
        let made = (0..4u64)
            .map(|k| {
                let v = seq(40 * 30, k);
                let t = Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [40, 30]), &d0);
                // A strided op: its metadata buffer comes from the pool too.
                let t = t.transpose().exp().transpose();
                (v.iter().map(|x| x.exp()).collect(), t)
            })
            .collect();
        assert!(pool.memory_allocated() > 0);
        drop(guard);
        drop(pool);
        made
    })
    .join()
    .unwrap();
    std::thread::scope(|s| {
        s.spawn(xpu::empty_cache);
        for (i, (want, t)) in made.into_iter().enumerate() {
            s.spawn(move || {
                close(&vals(t.clone()), &want, &format!("pool tensor {i}"));
                let w: Vec<f32> = want.iter().map(|x| x * 2.0).collect();
                close(
                    &vals(t.clone() + t),
                    &w,
                    &format!("pool tensor {i} doubled"),
                );
            });
        }
    });
    Xpu::memory_cleanup(&d0);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), base.0, "allocated");
    assert_eq!(xpu::memory_reserved(Some(0)).unwrap(), base.1, "reserved");
}

/// burn ops run by a thread inside a graph capture of another stream (their allocations go
/// to the graph's private pool): the tensors escape the capture, outlive the graph, keep
/// their values through replays and an `empty_cache`, and the graph's pool is released once
/// they and the metadata dropped.
#[test]
fn burn_tensors_made_during_a_capture_outlive_the_graph() {
    use xpu::xpu_kernel::graph::Graph;
    let (d0, _) = two_devices();
    let _ = vals((Tensor::<Xpu, 2>::ones([8, 8], &d0).transpose() + 1.0).sum_dim(1));
    Xpu::memory_cleanup(&d0);
    let base = (
        xpu::memory_allocated(Some(0)).unwrap(),
        xpu::memory_reserved(Some(0)).unwrap(),
    );
    let side = xpu::new_stream(Some(0), 0).unwrap();
    let v = seq(24 * 16, 3);
    let mut escaped = None;
    let graph = Graph::capture(&side, |c| {
        let t = Tensor::<Xpu, 2>::from_data(TensorData::new(v.clone(), [24, 16]), &d0);
        escaped = Some(t.transpose().sin());
        let buf = c.alloc::<f32>(&side, 64)?;
        c.fill(&side, &buf, 2.5f32)?;
        Ok(())
    })
    .unwrap();
    for _ in 0..3 {
        graph.replay(&side).unwrap();
    }
    let t = escaped.unwrap();
    drop(graph);
    xpu::empty_cache();
    let want: Vec<f32> = (0..16)
        .flat_map(|j| (0..24).map(move |i| (i, j)))
        .map(|(i, j)| v[i * 16 + j].sin())
        .collect();
    close(&vals(t.clone()), &want, "escaped tensor");
    drop(t);
    side.synchronize().unwrap();
    Xpu::memory_cleanup(&d0);
    assert_eq!(xpu::memory_allocated(Some(0)).unwrap(), base.0, "allocated");
    assert_eq!(xpu::memory_reserved(Some(0)).unwrap(), base.1, "reserved");
}
