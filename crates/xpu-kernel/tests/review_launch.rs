//! Review (fresh eyes, safe code only) of the launch layer's work-size checks: a global size
//! whose work-item count overflows `size_t` is refused when the launch is built (PoCL wraps the
//! product and its scheduler aborts the process), on a stream and in a capture. Skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use common::device0_stream;
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::{KernelError, LaunchExt, Program};

const K: &str = "__kernel void k(__global uint *x) { x[0] = 1; }";

fn is_work_size(r: &Result<(), KernelError>) -> bool {
    matches!(r, Err(KernelError::WorkSize { kernel, reason }) if kernel == "k" && reason.contains("work-items"))
}

#[test]
fn a_global_size_whose_work_item_count_overflows_is_refused() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let k = Program::build(0, K, "").unwrap().function("k").unwrap();
    for global in [
        &[usize::MAX, 2][..],
        &[1 << 32, 1 << 32, 1][..],
        &[2, 3, usize::MAX / 5][..],
    ] {
        let r = s.launch(&k, global, None).map(drop);
        assert!(is_work_size(&r), "global {global:?}: {r:?}");
        let r = s.launch(&k, global, Some(&vec![1; global.len()])).map(drop);
        assert!(
            is_work_size(&r),
            "global {global:?} with a local size: {r:?}"
        );
    }
    let mut captured = None;
    Graph::capture(&s, |c| {
        captured = Some(c.launch(&s, &k, &[usize::MAX, 2], None).map(drop));
        Ok(())
    })
    .unwrap();
    let r = captured.unwrap();
    assert!(
        matches!(&r, Err(GraphError::Kernel(KernelError::WorkSize { .. }))),
        "captured: {r:?}"
    );
    // The largest count that fits is not refused here (the driver judges it at the enqueue).
    s.launch(&k, &[usize::MAX, 1, 1], None).map(drop).unwrap();
}
