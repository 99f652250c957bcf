//! Op arguments that safe calls can pass (a repeated flip axis, a kernel registered under a library
//! key, an unfold step past the dimension, a `cat` whose length overflows) are checked: no view
//! outside its storage, no crash, a typed error. Crashing scenarios run in child processes of this
//! binary.
//!
//! Review h57 (fresh eyes, a newcomer's calls): defects of xpu-burn shown with safe calls
//! only. Each test fails on the reviewed commit (754f83b); the comment above each says what
//! it shows and what was observed. Scenarios that crash the process run in a child process
//! (this binary re-run with `XPU_REVIEW_H57_CHILD` set), bounded in time.
//!
//! Most of them call burn's `Backend` trait methods (`FloatTensorOps::float_flip`, ...) or
//! xpu-burn's public op layer (`xpu_burn::ops`, `xpu_burn::runtime`) directly: both are safe,
//! public API, and the soundness rule covers every safe call, not only the ones burn's
//! `Tensor` wrapper checks first. The two overflow tests go through `Tensor` only.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`), where device memory is
//! host memory: a kernel's out-of-bounds access is an access of this process's heap.
//!
//! Fixed in 58ddd84 (flips compose, views checked against their storage, `MapSpec::new`
//! unsafe, callers' kernels cached apart, checked arithmetic): every test here passes now.

use std::sync::mpsc;
use std::time::Duration;

use burn_tensor::ops::FloatTensorOps;
use burn_tensor::{Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice, XpuTensor};

const CHILD: &str = "XPU_REVIEW_H57_CHILD";

fn dev() -> XpuDevice {
    XpuDevice::default()
}

/// The value of a future that is ready at once (the backend's `*_into_data` futures are
/// `async move { data }` over a blocking download).
fn ready<F: std::future::Future>(f: F) -> F::Output {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(f).poll(&mut cx) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("the backend's into_data future was pending"),
    }
}

fn floats(t: &XpuTensor) -> Vec<f32> {
    ready(Xpu::float_into_data(t.clone()))
        .to_vec::<f32>()
        .unwrap()
}

fn upload(v: &[f32]) -> XpuTensor {
    Xpu::float_from_data(TensorData::new(v.to_vec(), [v.len()]), &dev())
}

fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    e.downcast_ref::<String>()
        .cloned()
        .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Runs `test` of this binary again in a child process with `CHILD=scenario`, bounded by
/// `secs` (then killed): its output when it exited with success, else why not.
fn run_child(test: &str, scenario: &str, secs: u64) -> Result<String, String> {
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(&exe)
        .args([test, "--exact", "--test-threads=1", "--nocapture"])
        .env(CHILD, scenario)
        .env("RUST_BACKTRACE", "0")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(out) => {
            let _ = waiter.join();
            let out = out.unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            if out.status.success() {
                Ok(text)
            } else {
                Err(format!("child exited with {}:\n{text}", out.status))
            }
        }
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            let _ = waiter.join();
            Err(format!("child did not finish in {secs} s (killed)"))
        }
    }
}

/// `float_flip` with a repeated axis (`&[0, 0, 0]`) builds a view outside its storage.
/// burn's `Tensor::flip` refuses repeated axes, but the backend method is safe public API and
/// xpu-burn's `layout::flip` (crates/xpu-burn/src/ops/layout.rs:138) checks only that each
/// axis is in range: it adds `(n - 1) * t.strides[a]` to the offset once per occurrence,
/// always with the *original* stride (`t.strides`, line 149), while it negates `strides[a]`
/// each time. For `[1, 2, 3, 4]` and `[0, 0, 0]` the view is offset 9, stride -1: elements
/// 9, 8, 7, 6 of a 4-element storage. `into_data` then copies it through the element-wise
/// kernel, which reads outside the tensor's block.
///
/// Expected: a typed error (the `xpu backend: ...` panic) or the flip of an odd number of
/// flips, `[4, 3, 2, 1]`. Observed (5 of 5 runs): `[0.0, 0.0, 0.0, 0.0]` — bytes past the
/// block's end (the rest of its 512-byte rounding).
#[test]
fn flip_with_a_repeated_axis_views_outside_its_storage() {
    let t = upload(&[1.0, 2.0, 3.0, 4.0]);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let f = Xpu::float_flip(t.clone(), &[0, 0, 0]);
        let view = (f.offset(), f.strides().to_vec());
        (view, floats(&f))
    }));
    match r {
        Err(e) => {
            let m = panic_text(&*e);
            assert!(m.starts_with("xpu backend:"), "not a typed error: {m}");
        }
        Ok((view, v)) => assert_eq!(
            v,
            vec![4.0, 3.0, 2.0, 1.0],
            "float_flip(&[0, 0, 0]) of a 4-element tensor gave the view (offset, strides) = \
             {view:?}, outside its storage, and read these values from beyond the block"
        ),
    }
}

/// The same view of a 64 MiB tensor (2^24 `f32`): `into_data`'s copy kernel reads from 128 to
/// 192 MiB past the block's start, and the process dies. Observed (5 of 5 runs): the child
/// exits with `signal: 11 (SIGSEGV)` inside the `into_data` of a safe `float_flip`.
#[test]
fn flip_with_a_repeated_axis_of_a_large_tensor_crashes_the_process() {
    if std::env::var(CHILD).is_ok() {
        let n = 1usize << 24;
        let t = Xpu::float_from_data(TensorData::new(vec![1.0f32; n], [n]), &dev());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let f = Xpu::float_flip(t.clone(), &[0, 0, 0]);
            floats(&f).len()
        }));
        println!(
            "flip returned or panicked: {:?}",
            r.map_err(|e| panic_text(&*e))
        );
        println!("h57 child done");
        return;
    }
    let out = run_child(
        "flip_with_a_repeated_axis_of_a_large_tensor_crashes_the_process",
        "flip",
        120,
    );
    match out {
        Ok(text) => assert!(text.contains("h57 child done"), "{text}"),
        Err(e) => panic!("a safe float_flip + into_data killed the process: {e}"),
    }
}

// `map_runs_caller_written_opencl_c_from_safe_code` (failed 5 of 5 at 754f83b: a safe
// `MapSpec::new` with an expression that wrote into input `b`'s storage, run by the safe
// `ops::elementwise::map`) cannot be written any more: `MapSpec::new` is `unsafe` with its
// contract in `# Safety`, pinned by the `compile_fail` doctest on `MapSpec`.

/// The key burn's `a + b` of two contiguous `f32` tensors uses in `runtime::function`'s cache
/// (`MapKernel::key`, crates/xpu-burn/src/ops/elementwise.rs:217).
const ADD_KEY: &str = "map\0c\0a0 + a1\0\0float,float,\0\0float";

/// A kernel with the signature of that `map` that also writes its second input.
const WRITES_B: &str = r#"
__kernel void map(__global float *out, long n, __global const float *in0, long off0,
                  __global const float *in1, long off1) {
  long i = get_global_id(0);
  if (i >= n) return;
  out[i] = in0[off0 + i] + in1[off1 + i];
  ((__global float *)in1)[off1 + i] = 42.0f;
}
"#;

/// `xpu_burn::runtime::function(device, key, name, source)` is a safe `pub fn` that caches
/// the built kernel under `(device, name, key)` and never looks at `source` again
/// (crates/xpu-burn/src/runtime.rs:51-78): whoever calls it first for a key decides the code
/// every later op with that key launches. A caller that registers its own source under the
/// key of burn's float add makes burn's ordinary, safe `a + b` run it, under `map`'s
/// `// SAFETY:` argument, which assumes the library's template. In a child process (the cache
/// is process-wide). Observed (5 of 5 runs): after `let c = a + b.clone()`, `c` is right
/// (`[11, 22, 33, 44]`) but `b` reads back `[42.0, 42.0, 42.0, 42.0]` instead of
/// `[10, 20, 30, 40]`: the child's assertion fails (exit status 101).
#[test]
fn a_kernel_registered_under_a_library_key_runs_in_burn_add() {
    if std::env::var(CHILD).is_ok() {
        xpu_burn::runtime::function(0, ADD_KEY, "map", || WRITES_B.to_owned())
            .expect("build the kernel");
        let d = dev();
        let a = Tensor::<Xpu, 1>::from_floats([1.0, 2.0, 3.0, 4.0], &d);
        let b = Tensor::<Xpu, 1>::from_floats([10.0, 20.0, 30.0, 40.0], &d);
        let c = a + b.clone();
        let cv = c.into_data().to_vec::<f32>().unwrap();
        let bv = b.into_data().to_vec::<f32>().unwrap();
        println!("c = {cv:?}, b = {bv:?}");
        assert_eq!(
            bv,
            vec![10.0, 20.0, 30.0, 40.0],
            "burn's safe `a + b` wrote into b"
        );
        println!("h57 child done");
        return;
    }
    let out = run_child(
        "a_kernel_registered_under_a_library_key_runs_in_burn_add",
        "poison",
        120,
    );
    match out {
        Ok(text) => assert!(text.contains("h57 child done"), "{text}"),
        Err(e) => panic!("{e}"),
    }
}

/// `Tensor::unfold` with a step past the dimension (burn checks only the ranks,
/// `TensorCheck::unfold`): `layout::unfold` computes the window stride as
/// `t.strides[dim] * step as isize` unchecked (crates/xpu-burn/src/ops/layout.rs:174). With
/// a `[2, 3]` tensor, dim 0 (stride 3), size 1 and step 2^62 there is one window, the rows
/// `[[1, 2, 3]]`; a debug build panics instead. Observed (5 of 5 runs): "attempt to multiply
/// with overflow" at crates/xpu-burn/src/ops/layout.rs:174:20 (a release build wraps the
/// stride, harmlessly here since the window dimension has size 1).
#[test]
fn unfold_with_a_step_past_the_dimension_does_not_overflow() {
    let d = dev();
    let r = std::panic::catch_unwind(|| {
        let t = Tensor::<Xpu, 2>::from_floats([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], &d);
        let u: Tensor<Xpu, 3> = t.unfold(0, 1, 1usize << 62);
        (u.dims(), u.into_data().to_vec::<f32>().unwrap())
    });
    match r {
        Ok(v) => assert_eq!(v, ([1, 3, 1], vec![1.0, 2.0, 3.0])),
        Err(e) => panic!(
            "unfold(0, 1, 2^62) of a [2, 3] tensor panicked: {}",
            panic_text(&*e)
        ),
    }
}

/// `Tensor::cat` of two broadcast views whose lengths along the cat dimension sum past
/// `usize::MAX` (two `[1]` tensors expanded, without memory, to `[2^63]`): `index::cat` adds
/// the lengths unchecked (`shape[dim] += t.shape[dim]`, crates/xpu-burn/src/ops/index.rs:810).
/// Expected: a typed error (the `xpu backend: ...` panic, as for any shape no allocation can
/// hold). Observed (5 of 5 runs): "attempt to add with overflow" at
/// crates/xpu-burn/src/ops/index.rs:810:9 in a debug build (a release build wraps the output
/// length to 0 and then fails on a slice error that names the wrong cause).
#[test]
fn cat_whose_length_overflows_is_a_typed_error() {
    let d = dev();
    let r = std::panic::catch_unwind(|| {
        let e = Tensor::<Xpu, 1>::from_floats([1.0], &d).expand([1usize << 63]);
        Tensor::cat(vec![e.clone(), e], 0).dims()
    });
    match r {
        Ok(v) => panic!("cat of two [2^63] tensors returned a tensor of shape {v:?}"),
        Err(e) => {
            let m = panic_text(&*e);
            assert!(m.starts_with("xpu backend:"), "not a typed error: {m}");
        }
    }
}
