//! The example MLP (`examples/support/mlp.rs`) on a real OpenCL device against its CPU
//! reference. Skipped without a device
//! unless `XPU_REQUIRE_DEVICE=1`.

use std::sync::{Arc, Mutex};

use xpu_event::{Gate, StreamExt};
use xpu_kernel::memory::{copy_dtod, DeviceBuffer};

#[allow(dead_code)]
#[path = "../examples/support/mlp.rs"]
mod mlp;

use mlp::{
    compare_losses, CpuMlp, GpuMlp, MlpConfig, MlpError, MlpState, PipelinePoint, PipelineStage,
    Rng,
};
use xpu_stream::Stream;

fn have_device() -> bool {
    let count = xpu_device::device_count();
    assert!(
        !(count == 0 && xpu_device::require_device()),
        "XPU_REQUIRE_DEVICE=1 but no OpenCL device was found"
    );
    count > 0
}

fn small() -> MlpConfig {
    MlpConfig {
        inputs: 5,
        hidden: 7,
        outputs: 3,
        samples: 11,
        batch: 11,
        learning_rate: 0.1,
        seed: 7,
    }
}

#[test]
fn rng_is_splitmix64() {
    // SplitMix64's first outputs for seed 0 (reference implementation by Vigna).
    let mut r = Rng::new(0);
    assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
    assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    let v: Vec<f32> = (0..1000).map(|_| r.next_f32()).collect();
    assert!(v.iter().all(|x| (-1.0..1.0).contains(x)));
}

#[test]
fn cpu_reference_learns() {
    let losses = CpuMlp::new(MlpConfig::default()).train(200);
    assert!(
        losses[199] < losses[0] * 0.5,
        "{} -> {}",
        losses[0],
        losses[199]
    );
}

#[test]
fn device_losses_match_the_cpu_step_for_step() {
    if !have_device() {
        return;
    }
    let config = small();
    let mut gpu = GpuMlp::new(0, config).unwrap();
    let gpu_losses = gpu.train(20).unwrap();
    let mut cpu = CpuMlp::new(config);
    let cpu_losses = cpu.train(20);
    compare_losses(&gpu_losses, &cpu_losses, 1e-5).unwrap();
    assert!(gpu_losses[19] < gpu_losses[0]);
    // The parameters too, not only the loss.
    let [w1, b1, w2, b2] = gpu.parameters().unwrap();
    let s: &MlpState = cpu.state();
    for (g, c) in [(&w1, &s.w1), (&b1, &s.b1), (&w2, &s.w2), (&b2, &s.b2)] {
        assert_eq!(g.len(), c.len());
        for (a, b) in g.iter().zip(c.iter()) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
    // A second call continues from the trained state.
    let more = gpu.train(5).unwrap();
    compare_losses(&more, &cpu.train(5), 1e-5).unwrap();
}

/// The example's run (the default model, 300 steps): the final loss within 1e-4 relative of
/// the CPU's, every step too; part of the GPU archive's tests.
#[test]
fn default_model_trains_300_steps_to_the_cpu_loss() {
    if !have_device() {
        return;
    }
    let config = MlpConfig::default();
    let gpu = GpuMlp::new(0, config).unwrap().train(300).unwrap();
    let cpu = CpuMlp::new(config).train(300);
    compare_losses(&gpu, &cpu, 1e-4).unwrap();
    assert!(gpu[299] < gpu[0] * 0.5, "{} -> {}", gpu[0], gpu[299]);
    eprintln!("final loss: device {:e}, CPU {:e}", gpu[299], cpu[299]);
}

/// Minibatches of 64 of 256 samples: each step's rows are uploaded on the copy stream into
/// one of two slots while the previous step computes; losses and parameters follow the CPU,
/// across two `train` calls.
#[test]
fn minibatch_training_uploads_each_batch_and_matches_the_cpu() {
    if !have_device() {
        return;
    }
    let config = MlpConfig {
        batch: 64,
        ..MlpConfig::default()
    };
    let mut gpu = GpuMlp::new(0, config).unwrap();
    let mut cpu = CpuMlp::new(config);
    let host_before = xpu_alloc::host_memory_stats();
    let gpu_losses = gpu.train(30).unwrap();
    let cpu_losses = cpu.train(30);
    compare_losses(&gpu_losses, &cpu_losses, 1e-5).unwrap();
    // Four different batches: the losses of consecutive steps are of different rows.
    assert_ne!(gpu_losses[0].to_bits(), gpu_losses[1].to_bits());
    // Every step uploaded its x and y rows through pinned staging (two blocks a step).
    let host_after = xpu_alloc::host_memory_stats();
    assert!(
        host_after.allocation.allocated - host_before.allocation.allocated >= 60,
        "{} staging blocks for 30 steps",
        host_after.allocation.allocated - host_before.allocation.allocated
    );
    compare_losses(&gpu.train(7).unwrap(), &cpu.train(7), 1e-5).unwrap();
    let [w1, _, w2, _] = gpu.parameters().unwrap();
    let s = cpu.state();
    for (g, c) in [(&w1, &s.w1), (&w2, &s.w2)] {
        for (a, b) in g.iter().zip(c.iter()) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

#[test]
fn a_wrong_learning_rate_on_the_device_fails_the_check() {
    if !have_device() {
        return;
    }
    let config = small();
    let broken = MlpConfig {
        learning_rate: config.learning_rate * 1.01,
        ..config
    };
    let gpu_losses = GpuMlp::new(0, broken).unwrap().train(20).unwrap();
    let cpu_losses = CpuMlp::new(config).train(20);
    let err = compare_losses(&gpu_losses, &cpu_losses, 1e-4).unwrap_err();
    // Step 0 is before any update: equal; the first update makes them differ.
    assert_eq!(err.step, 1, "{err}");
    assert!(err.to_string().contains("relative difference"), "{err}");
}

#[test]
fn compare_losses_catches_length_and_nan() {
    assert!(compare_losses(&[1.0], &[1.0, 2.0], 1e-4).is_err());
    assert_eq!(
        compare_losses(&[f32::NAN], &[1.0], 1e-4).unwrap_err().step,
        0
    );
    assert!(compare_losses(&[1.00001], &[1.0], 1e-4).is_ok());
    assert!(compare_losses(&[1.001], &[1.0], 1e-4).is_err());
}

/// `MlpError` wraps only `KernelError`: a lower layer's error converts into the `KernelError`
/// variant of its layer, with the lower error's message (as xpu-kernel's `GraphError`).
#[test]
fn lower_layer_errors_reach_mlp_errors_through_kernel_error() {
    use xpu_alloc::HostError;
    use xpu_device::DeviceError;
    use xpu_kernel::{KernelError, MemoryError};
    use xpu_stream::StreamError;

    let m = MlpError::from(StreamError::ExternalNull);
    assert!(
        matches!(
            m,
            MlpError::Kernel(KernelError::Stream(StreamError::ExternalNull))
        ),
        "{m:?}"
    );
    assert_eq!(m.to_string(), "external queue must not be null");

    let oom = || {
        MemoryError::Host(HostError::OutOfMemory {
            device: 1,
            size: 4096,
            source: DeviceError::InvalidArgument("no room".into()),
        })
    };
    let m = MlpError::from(oom());
    assert!(
        matches!(m, MlpError::Kernel(KernelError::Memory(_))),
        "{m:?}"
    );
    assert_eq!(m.to_string(), oom().to_string());
}

#[test]
fn invalid_configs_are_typed_errors() {
    if !have_device() {
        return;
    }
    for bad in [
        MlpConfig {
            hidden: 0,
            ..small()
        },
        MlpConfig {
            samples: 1 << 20,
            inputs: 1 << 10,
            ..small()
        },
        MlpConfig {
            learning_rate: f32::NAN,
            ..small()
        },
        MlpConfig {
            batch: 0,
            ..small()
        },
        MlpConfig {
            batch: 4,
            ..small()
        },
    ] {
        let err = GpuMlp::new(0, bad).unwrap_err();
        assert!(matches!(err, MlpError::Config(_)), "{err}");
    }
}

/// Three minibatches of 4 rows cycling through two slots, so that every step uploads.
fn three_batches() -> MlpConfig {
    MlpConfig {
        samples: 12,
        batch: 4,
        ..small()
    }
}

/// What the compute stream read at each step (copied on the compute stream at the
/// [`PipelineStage::BeforeRead`] point, so in the order of the step's kernels) and whether a
/// held stream was seen held.
#[derive(Default)]
struct Observed {
    /// `(step, x, y)` copies of the slot as the step's kernels read it.
    reads: Vec<(usize, DeviceBuffer<f32>, DeviceBuffer<f32>)>,
    /// `(step, held)`: whether an event recorded at the checked point was incomplete.
    held: Vec<(usize, bool)>,
}

/// Copies the slot the compute stream is about to read into new buffers, on that stream.
fn probe(
    seen: &Mutex<Observed>,
    step: usize,
    stream: &Stream,
    x: &DeviceBuffer<f32>,
    y: &DeviceBuffer<f32>,
) -> Result<(), MlpError> {
    let mut px = DeviceBuffer::<f32>::new(x.len(), stream)?;
    let mut py = DeviceBuffer::<f32>::new(y.len(), stream)?;
    copy_dtod(stream, x, &mut px)?;
    copy_dtod(stream, y, &mut py)?;
    seen.lock().unwrap().reads.push((step, px, py));
    Ok(())
}

/// True when an event recorded on `stream` now is still incomplete.
fn is_held(stream: &Stream) -> Result<bool, MlpError> {
    Ok(!stream.record_event()?.query()?)
}

/// Every step read exactly its own minibatch's rows, and the losses follow the CPU.
fn check_reads_and_losses(config: MlpConfig, steps: usize, losses: &[f32], seen: &Observed) {
    let state = MlpState::new(&config);
    let s = xpu_stream::current_stream(0).unwrap();
    assert_eq!(
        seen.reads.iter().map(|r| r.0).collect::<Vec<_>>(),
        (0..steps).collect::<Vec<_>>()
    );
    for (step, px, py) in &seen.reads {
        let first = (step % (config.samples / config.batch)) * config.batch;
        let (i, o) = (config.inputs, config.outputs);
        assert_eq!(
            px.to_vec(&s).unwrap(),
            state.x[first * i..(first + config.batch) * i],
            "inputs read by step {step}"
        );
        assert_eq!(
            py.to_vec(&s).unwrap(),
            state.y[first * o..(first + config.batch) * o],
            "targets read by step {step}"
        );
    }
    compare_losses(losses, &CpuMlp::new(config).train(steps), 1e-5).unwrap();
}

/// Trains `steps` steps of [`three_batches`] with a hook that blocks the stream of the point
/// `block` with a gate (opened when the last step is about to read), records at the point
/// `check` whether its stream is held (an event recorded there is incomplete), and copies
/// every slot a step reads. Checks the reads and the losses; returns what `check` saw.
fn train_with_a_held_stream(
    steps: usize,
    block: (PipelineStage, usize),
    check: (PipelineStage, usize),
) -> Vec<(usize, bool)> {
    let config = three_batches();
    let mut gpu = GpuMlp::new(0, config).unwrap();
    let gate = Arc::new(Gate::new(0).unwrap());
    let seen = Arc::new(Mutex::new(Observed::default()));
    let (g, o) = (Arc::clone(&gate), Arc::clone(&seen));
    gpu.set_pipeline_hook(move |p: PipelinePoint<'_>| {
        if (p.stage, p.step) == block {
            g.block(&p.stream)?;
        }
        if (p.stage, p.step) == check {
            let held = is_held(&p.stream)?;
            o.lock().unwrap().held.push((p.step, held));
        }
        if p.stage == PipelineStage::BeforeRead {
            probe(&o, p.step, &p.stream, p.x, p.y)?;
            if p.step == steps - 1 {
                g.open()?;
            }
        }
        Ok(())
    });
    let losses = gpu.train(steps).unwrap();
    assert!(gate.is_open());
    let seen = seen.lock().unwrap();
    check_reads_and_losses(config, steps, &losses, &seen);
    seen.held.clone()
}

/// A slow copy stream: the upload of step 1's minibatch is held by a gate until every step is
/// enqueued. The compute stream must not get past its wait for that upload (an event
/// recorded there stays incomplete), and every step reads its own rows, not the slot's
/// earlier (here: uninitialized) contents.
#[test]
fn minibatch_compute_waits_for_a_held_upload() {
    if !have_device() {
        return;
    }
    let held = train_with_a_held_stream(
        6,
        (PipelineStage::BeforeUpload, 1),
        (PipelineStage::BeforeRead, 1),
    );
    assert_eq!(held, vec![(1, true)], "compute held at step 1");
}

/// A slow compute stream: it is held by a gate before step 0 reads its slot until every step
/// is enqueued. The copy stream must not get past its wait for step 0's "consumed" event
/// before it uploads step 2 into the same slot (an event recorded there stays incomplete),
/// and every step reads its own rows, not a later minibatch's.
#[test]
fn minibatch_upload_waits_until_a_held_step_consumed_its_slot() {
    if !have_device() {
        return;
    }
    let held = train_with_a_held_stream(
        6,
        (PipelineStage::BeforeRead, 0),
        (PipelineStage::BeforeUpload, 2),
    );
    assert_eq!(held, vec![(2, true)], "copy held before step 2");
}
