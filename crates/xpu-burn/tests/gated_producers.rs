//! Reading tensors whose producers are held behind a gate, across two devices (`into_data` and
//! `to_device` wait for them), and more ops mixing devices failing with a typed error.
//!
//! Review (h12): reading tensors whose producers are held behind a gate, across two devices;
//! more ops mixing devices.
use std::sync::mpsc;
use std::time::Duration;

use burn_tensor::{Bool, Int, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice};

fn panic_message(r: std::thread::Result<()>) -> String {
    match r {
        Ok(()) => "no panic".into(),
        Err(e) => e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default(),
    }
}

/// Ops on device 1 behind a gate on its default stream; `into_data` and `to_device(0)` must
/// wait for them and read the right values. Run on a thread: a hang is detected.
#[test]
fn into_data_and_to_device_wait_for_gated_producers() {
    if xpu::device_count() < 2 {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let d1 = XpuDevice::new(1);
        let d0 = XpuDevice::new(0);
        let v: Vec<f32> = (0..4096).map(|i| i as f32 * 0.5).collect();
        let x = Tensor::<Xpu, 1>::from_data(TensorData::new(v.clone(), [4096]), &d1);
        let _ = x.clone().into_data(); // x is resident before the gate
        let s = xpu::xpu_stream::default_stream(1).unwrap();
        let gate = xpu::xpu_event::Gate::with_open_limit(1, Duration::from_secs(90)).unwrap();
        gate.block(&s).unwrap();
        let y = x.clone() * 2.0 + 1.0;
        let z = y.clone().sum();
        let t0 = std::time::Instant::now();
        let (got, moved) = gate
            .open_when_waited_on(|| {
                let moved = y.clone().to_device(&d0);
                (y.into_data().to_vec::<f32>().unwrap(), moved)
            })
            .unwrap();
        println!("waited {:?}", t0.elapsed());
        let want: Vec<f32> = v.iter().map(|a| a * 2.0 + 1.0).collect();
        assert_eq!(got, want, "into_data of a gated producer");
        assert_eq!(
            moved.into_data().to_vec::<f32>().unwrap(),
            want,
            "to_device"
        );
        let sum: f32 = want.iter().sum();
        assert_eq!(z.into_data().to_vec::<f32>().unwrap(), vec![sum]);
        tx.send(()).unwrap();
    });
    let r = rx.recv_timeout(Duration::from_secs(120));
    assert!(
        r.is_ok() || worker.is_finished(),
        "hang: into_data of gated work"
    );
    worker.join().unwrap();
}

#[test]
fn more_ops_mixing_devices_fail_with_a_typed_error() {
    if xpu::device_count() < 2 {
        return;
    }
    let d0 = XpuDevice::new(0);
    let d1 = XpuDevice::new(1);
    let a = Tensor::<Xpu, 2>::ones([4, 4], &d0);
    let b = Tensor::<Xpu, 2>::ones([4, 4], &d1);
    let ai = Tensor::<Xpu, 2, Int>::ones([4, 4], &d0);
    let bi = Tensor::<Xpu, 2, Int>::ones([4, 4], &d1);
    let ab = Tensor::<Xpu, 2, Bool>::from_data(TensorData::new(vec![true; 16], [4, 4]), &d0);
    let bb = Tensor::<Xpu, 2, Bool>::from_data(TensorData::new(vec![true; 16], [4, 4]), &d1);
    type Case = (&'static str, Box<dyn FnOnce()>);
    let cases: Vec<Case> = vec![
        (
            "powf",
            Box::new({
                let (a, b) = (a.clone(), b.clone());
                move || {
                    let _ = a.powf(b).into_data();
                }
            }),
        ),
        (
            "equal",
            Box::new({
                let (a, b) = (a.clone(), b.clone());
                move || {
                    let _ = a.equal(b).into_data();
                }
            }),
        ),
        (
            "mask_fill",
            Box::new({
                let (a, bb) = (a.clone(), bb.clone());
                move || {
                    let _ = a.mask_fill(bb, 3.0).into_data();
                }
            }),
        ),
        (
            "mask_where",
            Box::new({
                let (a, b, ab) = (a.clone(), b.clone(), ab.clone());
                move || {
                    let _ = a.mask_where(ab, b).into_data();
                }
            }),
        ),
        (
            "int add",
            Box::new({
                let (ai, bi) = (ai.clone(), bi.clone());
                move || {
                    let _ = (ai + bi).into_data();
                }
            }),
        ),
        (
            "int matmul",
            Box::new({
                let (ai, bi) = (ai.clone(), bi.clone());
                move || {
                    let _ = ai.matmul(bi).into_data();
                }
            }),
        ),
        (
            "bool and",
            Box::new({
                let (ab, bb) = (ab.clone(), bb.clone());
                move || {
                    let _ = ab.bool_and(bb).into_data();
                }
            }),
        ),
        (
            "stack",
            Box::new({
                let (a, b) = (a.clone(), b.clone());
                move || {
                    let _ = Tensor::stack::<3>(vec![a, b], 0).into_data();
                }
            }),
        ),
        (
            "select small",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 1, Int>::zeros([2], &XpuDevice::new(1));
                    let _ = a.select(1, i).into_data();
                }
            }),
        ),
        (
            "select_assign small",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 1, Int>::zeros([2], &XpuDevice::new(1));
                    let v = Tensor::<Xpu, 2>::ones([4, 2], &XpuDevice::new(0));
                    let _ = a.select_assign(1, i, v).into_data();
                }
            }),
        ),
        (
            "scatter small",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 2, Int>::zeros([4, 2], &XpuDevice::new(0));
                    let v = Tensor::<Xpu, 2>::ones([4, 2], &XpuDevice::new(1));
                    let _ = a.scatter(1, i, v).into_data();
                }
            }),
        ),
        (
            "embedding",
            Box::new({
                let a = a.clone();
                move || {
                    let i = Tensor::<Xpu, 2, Int>::zeros([2, 3], &XpuDevice::new(1));
                    let _ = burn_tensor::module::embedding(a, i).into_data();
                }
            }),
        ),
        (
            "cross",
            Box::new({
                let _ = 0;
                let x = Tensor::<Xpu, 2>::ones([2, 3], &XpuDevice::new(0));
                let y = Tensor::<Xpu, 2>::ones([2, 3], &XpuDevice::new(1));
                move || {
                    let _ = x.cross(y, 1).into_data();
                }
            }),
        ),
    ];
    for (name, f) in cases {
        let msg = panic_message(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
        assert!(
            msg.starts_with("xpu backend:") || msg.starts_with("=== Tensor Operation Error"),
            "{name}: {msg}"
        );
    }
    assert_eq!(
        Tensor::<Xpu, 1>::ones([3], &d0)
            .into_data()
            .to_vec::<f32>()
            .unwrap(),
        vec![1.0; 3]
    );
}
