//! Reductions and scans over empty lines or beside empty dimensions: no panic, no division by zero,
//! no hang, and a scan along an empty dimension returns at once (checked in a child process of this
//! binary, bounded in time).
//!
//! Review h17 (fresh eyes, edge cases through burn's public API): defects found in
//! xpu-burn's line kernels (reductions and scans, crates/xpu-burn/src/ops/reduce.rs). Each
//! test here failed on the reviewed commit (b862d28: a division by zero, a process abort, a
//! hang) and passes since `splits` shares no line when there is none and a scan with no
//! element returns its empty output without a launch (`runtime::launch` also refuses more
//! work-items than the kernels' 64-bit index can count).
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use std::sync::mpsc;
use std::time::Duration;

use burn_tensor::{Int, Tensor};
use xpu_burn::{Xpu, XpuDevice};

fn dev() -> XpuDevice {
    XpuDevice::default()
}

/// The panic message of `f`, or `None` when it returns.
fn panic_of<R>(f: impl FnOnce() -> R) -> Option<String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .err()
        .map(|p| {
            p.downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default()
        })
}

/// A reduction along a dimension longer than `LINE_MAX` (1024) of a tensor with no line (a
/// 0 in another dimension: an empty batch of long rows, `[0, 2000]`). `reduce_lines` and
/// `scan_into` ask `splits(lines = 0, len = 2000)` how to share the lines
/// (crates/xpu-burn/src/ops/reduce.rs:88), which computes `TARGET_ITEMS.div_ceil(lines)`: a
/// division by zero, so the backend panics with "attempt to divide by zero" (in release
/// builds too) inside library code. burn-ndarray returns the empty `[0, 1]` results (and a
/// `[0, 2000]` cumsum). Every op of the line family goes through it: sum/mean/prod/max/min
/// along the dim, argmax/argmin, max_dim_with_indices, any/all along the dim, and the scans.
#[test]
fn reductions_and_scans_of_an_empty_batch_of_long_lines_do_not_panic() {
    let d = dev();
    let t = || Tensor::<Xpu, 2>::zeros([0, 2000], &d);
    type Op<'a> = (&'a str, Box<dyn Fn() -> Vec<usize> + 'a>);
    let ops: Vec<Op<'_>> = vec![
        ("sum_dim", Box::new(|| t().sum_dim(1).dims().to_vec())),
        ("mean_dim", Box::new(|| t().mean_dim(1).dims().to_vec())),
        ("prod_dim", Box::new(|| t().prod_dim(1).dims().to_vec())),
        ("max_dim", Box::new(|| t().max_dim(1).dims().to_vec())),
        ("argmax", Box::new(|| t().argmax(1).dims().to_vec())),
        (
            "min_dim_with_indices",
            Box::new(|| t().min_dim_with_indices(1).1.dims().to_vec()),
        ),
        ("any_dim", Box::new(|| t().any_dim(1).dims().to_vec())),
        (
            "int sum_dim",
            Box::new(|| t().int().sum_dim(1).dims().to_vec()),
        ),
        ("cumsum", Box::new(|| t().cumsum(1).dims().to_vec())),
        ("cummax", Box::new(|| t().cummax(1).dims().to_vec())),
    ];
    let mut failures = Vec::new();
    for (name, op) in &ops {
        match panic_of(op) {
            None => {}
            Some(msg) => failures.push(format!("{name}: {msg}")),
        }
    }
    assert!(
        failures.is_empty(),
        "ops along dim 1 of a [0, 2000] tensor panicked: {failures:?}"
    );
    // And the values are right (empty results of the right shapes).
    assert_eq!(t().sum_dim(1).dims(), [0, 1]);
    assert_eq!(t().cumsum(1).dims(), [0, 2000]);
    assert!(t()
        .sum_dim(1)
        .into_data()
        .to_vec::<f32>()
        .unwrap()
        .is_empty());
    let i: Tensor<Xpu, 2, Int> = t().argmax(1);
    assert!(i.into_data().to_vec::<i64>().unwrap().is_empty());
}

/// The same in three dimensions: the empty dimension is not next to the reduced one.
#[test]
fn a_long_reduction_beside_an_empty_dimension_does_not_panic() {
    let d = dev();
    let r = panic_of(|| {
        Tensor::<Xpu, 3>::ones([3, 0, 1500], &d)
            .permute([2, 0, 1])
            .sum_dim(0)
            .dims()
    });
    assert_eq!(r, None, "sum_dim(0) of a [1500, 3, 0] view panicked");
}

/// Set in the child processes of [`a_scan_along_an_empty_dimension_returns_at_once`]: the
/// `[dims]` of the tensor the child scans (`a,b` or `a,b,c`).
const CHILD: &str = "XPU_REVIEW_H17_SCAN_CHILD";

/// The child: `cumsum` along the last (empty) dimension of a zero tensor of the dims in
/// [`CHILD`], then a read of the device's stream (which waits for the scan). Does nothing
/// outside a child.
#[test]
fn child_scans_along_an_empty_dimension() {
    let Some(spec) = std::env::var_os(CHILD) else {
        return;
    };
    let dims: Vec<usize> = spec
        .to_str()
        .unwrap()
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let d = dev();
    let out_dims = match dims.len() {
        2 => Tensor::<Xpu, 2>::zeros([dims[0], dims[1]], &d)
            .cumsum(1)
            .dims()
            .to_vec(),
        _ => Tensor::<Xpu, 3>::zeros([dims[0], dims[1], dims[2]], &d)
            .cumsum(2)
            .dims()
            .to_vec(),
    };
    assert_eq!(out_dims, dims);
    // Reading anything from the device waits for the stream, behind the scan.
    let probe = Tensor::<Xpu, 1>::ones([1], &d).into_data();
    assert_eq!(probe.to_vec::<f32>().unwrap(), vec![1.0]);
}

/// Runs the child on `dims`; `Ok` when it exits successfully within `secs` seconds, else what
/// happened (its exit status and the end of its stderr, or "did not finish": then it is
/// killed, by its process id).
fn run_child(dims: &str, secs: u64) -> Result<(), String> {
    let exe = std::env::current_exe().unwrap();
    let child = std::process::Command::new(&exe)
        .args([
            "child_scans_along_an_empty_dimension",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD, dims)
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
            if out.status.success() {
                return Ok(());
            }
            let err = String::from_utf8_lossy(&out.stderr);
            let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            Err(format!("exited with {} ({tail})", out.status))
        }
        Err(_) => {
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
            let _ = waiter.join();
            Err(format!("did not finish in {secs} s (killed)"))
        }
    }
}

/// A scan along an empty dimension (length 0) has an empty output and nothing to do. But
/// `scan_into` (crates/xpu-burn/src/ops/reduce.rs:596, the `n == 1` branch) still calls
/// `launch_lines`, which launches one work-item per line (reduce.rs:430), and the line count
/// (`lines_along`, the product of the other dimensions) need not be small when the tensor is
/// empty: burn makes `zeros([2^62, 0])` without memory, and its `cumsum(1)` launches 2^62
/// work-items. PoCL's scheduler then aborts the whole process (`get_wg_index_range:
/// Assertion 'max_wgs > 0' failed`, SIGABRT). When the other dimensions multiply past
/// `usize` (`[2^32, 2^32, 0]`), `elem_count` saturates to `usize::MAX`: 2^64 - 1 work-items,
/// which PoCL runs for centuries (each returns at once: the kernel's guard `w >= lines * S`
/// reads `lines` as the `long` -1), so the next read of the stream never returns. The
/// launch is non-blocking: the op itself returns and the process hangs or dies later.
/// burn-ndarray returns the empty tensor at once. `sort` already returns early for
/// `len == 0 || lines == 0` (reduce.rs:757); the scan should return its empty output when
/// `o.numel() == 0`, and `launch_lines` (or `runtime::launch`) should refuse global sizes the
/// kernel's `long` arithmetic cannot represent.
#[test]
fn a_scan_along_an_empty_dimension_returns_at_once() {
    let mut failures = Vec::new();
    for dims in ["4611686018427387904,0", "4294967296,4294967296,0"] {
        if let Err(e) = run_child(dims, 15) {
            failures.push(format!(
                "cumsum of zeros([{dims}]) along its empty last dim: {e}"
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
