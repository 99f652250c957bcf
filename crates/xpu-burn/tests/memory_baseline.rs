//! Device memory after burn's tensors drop: the allocator's `memory_allocated` returns to its
//! baseline, with tensors made on several threads and dropped on another. Its own test binary:
//! no other test allocates while it measures.
use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor};
use xpu_burn::{Xpu, XpuDevice};

/// The tests of this file measure the device's allocated bytes: one at a time.
static MEASURING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn vals<const D: usize>(t: Tensor<Xpu, D>) -> Vec<f32> {
    t.into_data().to_vec::<f32>().unwrap()
}

fn workload(d: &XpuDevice, k: usize) -> f32 {
    let a = Tensor::<Xpu, 2>::full([16, 24], k as f32, d);
    let b = a.clone().transpose().matmul(a.clone()).sum_dim(0);
    let idx = Tensor::<Xpu, 2, Int>::zeros([16, 24], d);
    let s = a.clone().scatter(0, idx.clone(), a.clone()).gather(0, idx);
    let c = Tensor::cat(vec![a.clone(), s], 0).sort(1).cumsum(0);
    let m = c
        .clone()
        .slice_assign([0..2, 0..24], Tensor::zeros([2, 24], d));
    let (v, _) = m.max_dim_with_indices(1);
    let _ = b.clone().argsort(1);
    let r = v.sum() + b.sum();
    vals(r)[0]
}

#[test]
fn allocated_memory_returns_to_its_baseline_after_threads_drop_their_tensors() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let d = XpuDevice::default();
    workload(&d, 1);
    Xpu::sync(&d);
    let base = xpu::memory_allocated(Some(d.index)).unwrap();
    let want: Vec<f32> = (0..4).map(|k| workload(&d, k)).collect();
    let (tx, rx) = std::sync::mpsc::channel::<Tensor<Xpu, 2>>();
    std::thread::scope(|s| {
        // A thread that drops tensors other threads made, while their kernels may be queued.
        s.spawn(move || {
            for t in rx {
                drop(t);
            }
        });
        for t in 0..6 {
            let tx = tx.clone();
            let want = &want;
            s.spawn(move || {
                for i in 0..10 {
                    let k = (t + i) % 4;
                    let x = Tensor::<Xpu, 2>::ones([64, 64], &d).matmul(Tensor::ones([64, 64], &d));
                    tx.send(x.clone()).unwrap();
                    tx.send(x.exp()).unwrap();
                    assert_eq!(workload(&d, k), want[k]);
                    if i % 3 == 0 {
                        Xpu::sync(&d);
                    }
                }
            });
        }
        drop(tx);
    });
    Xpu::sync(&d);
    let after = xpu::memory_allocated(Some(d.index)).unwrap();
    assert_eq!(after, base, "allocated bytes after every tensor dropped");
}

/// The kernels' metadata buffers (shapes and strides, cached per distinct value) are device
/// memory the allocator counts; `Backend::memory_cleanup` releases them with the allocator's
/// cache, so after a workload of many distinct shapes the allocated bytes return to the
/// baseline once its tensors dropped.
#[test]
fn memory_cleanup_releases_the_metadata_of_many_distinct_shapes() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let d = XpuDevice::default();
    let _ = vals(Tensor::<Xpu, 1>::ones([1], &d));
    Xpu::sync(&d);
    Xpu::memory_cleanup(&d);
    let base = xpu::memory_allocated(Some(d.index)).unwrap();
    for n in 1..200usize {
        // A strided op (transpose) of a shape seen once: one metadata buffer each.
        let t = Tensor::<Xpu, 2>::ones([n, 3], &d).transpose().exp();
        assert_eq!(t.dims(), [3, n]);
    }
    Xpu::sync(&d);
    let held = xpu::memory_allocated(Some(d.index)).unwrap();
    Xpu::memory_cleanup(&d);
    let after = xpu::memory_allocated(Some(d.index)).unwrap();
    println!("baseline {base}, after the workload {held}, after memory_cleanup {after}");
    assert_eq!(after, base, "allocated bytes after memory_cleanup");
}

/// A thread that panics with work of its tensors still queued: the tensors it drops while
/// unwinding free their memory, and other threads read correct values afterwards.
#[test]
fn a_thread_panicking_with_queued_work_leaves_the_device_usable_and_frees_its_tensors() {
    let _one = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let d = XpuDevice::default();
    let run = |k: f32| {
        let a = Tensor::<Xpu, 2>::full([96, 96], k, &d);
        let b = a.clone().matmul(a.clone().transpose()).sum_dim(1).cumsum(0);
        vals(b.slice([95..96, 0..1]))[0]
    };
    let want = run(1.0);
    Xpu::sync(&d);
    let base = xpu::memory_allocated(Some(d.index)).unwrap();
    let r = std::thread::scope(|s| {
        s.spawn(|| {
            let a = Tensor::<Xpu, 2>::full([96, 96], 1.0, &d);
            let mut held = Vec::new();
            for _ in 0..8 {
                held.push(a.clone().matmul(a.clone().transpose()).sort(1));
            }
            panic!(
                "a framework's worker panics with {} tensors queued",
                held.len()
            );
        })
        .join()
    });
    assert!(r.is_err());
    assert_eq!(run(1.0), want);
    Xpu::sync(&d);
    assert_eq!(xpu::memory_allocated(Some(d.index)).unwrap(), base);
}
