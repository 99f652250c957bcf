//! In a bad fork child the program and launch layer returns `KernelError::BadFork` at once
//! (typed memory `MemoryError::Alloc(AllocError::BadFork)`),
//! without a driver call (`clCreateKernel`, `clSetKernelArg`, `clGetProgramInfo`...) or the
//! function's kernel-pool lock. The parent's state (a built program, a function, a stream, an
//! allocation) is reproduced in a fresh process that then becomes a bad fork
//! (`simulate_bad_fork`, the flag the `pthread_atfork` child handler sets: this crate may not
//! fork). A hang is caught by the bound.
mod common;

use std::time::Duration;

use xpu_kernel::{KernelError, LaunchExt, Program};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

const SOURCE: &str = "__kernel void fill(__global uint* out, uint n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = (uint)i;
}";

#[test]
fn programs_and_launches_refuse_in_a_bad_fork_child() {
    xpu_testing::scenario_test(
        "programs_and_launches_refuse_in_a_bad_fork_child",
        "kernel-bad-fork",
        Duration::from_secs(60),
        "SCENARIO DONE",
        run,
    );
}

fn bad_fork<T>(what: &str, r: Result<T, KernelError>) {
    let shown = r.as_ref().map(|_| ()).map_err(|e| format!("{e:?}"));
    println!("{what} = {shown:?}");
    assert!(
        matches!(r, Err(KernelError::BadFork)),
        "{what}: expected KernelError::BadFork, got {shown:?}"
    );
}

fn run() {
    let program = Program::build(0, SOURCE, "").expect("build");
    let function = program.function("fill").expect("function");
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let out = xpu_alloc::allocate(64 * 4, &stream).expect("allocation");
    let launch = stream.launch(&function, &[64], None).expect("launch");
    let mut typed = xpu_kernel::DeviceBuffer::<u32>::from_slice(&[1; 64], &stream).expect("typed");
    // Regions for a foreign library: one allocation whose exact `cl_mem` (a sub-buffer) the
    // parent never made, and one whose sub-buffer it made and cached.
    let mut fresh = xpu_kernel::DeviceBuffer::<f32>::zeroed(64, &stream).expect("fresh");
    let cached = xpu_kernel::DeviceBuffer::<f32>::zeroed(64, &stream).expect("cached");
    xpu_kernel::ClRegion::new(&cached).expect("region");

    xpu_device::fork::simulate_bad_fork();

    bad_fork("Program::build", Program::build(0, SOURCE, "-D OTHER=1"));
    bad_fork("Program::function", program.function("fill"));
    bad_fork("Program::binary", program.binary());
    bad_fork("LaunchExt::launch", stream.launch(&function, &[64], None));
    bad_fork("Launch::arg", launch.arg(&out));
    for (what, r) in [
        (
            "DeviceBuffer::new",
            xpu_kernel::DeviceBuffer::<u32>::new(64, &stream).map(|_| ()),
        ),
        (
            "copy_htod",
            xpu_kernel::memory::copy_htod(&stream, &[2u32; 64], &mut typed),
        ),
        ("to_vec", typed.to_vec(&stream).map(|_| ())),
        ("fill", xpu_kernel::memory::fill(&stream, &mut typed, 3u32)),
    ] {
        println!("{what} = {r:?}");
        let e = r.expect_err(what);
        assert!(
            matches!(
                e,
                xpu_kernel::MemoryError::Alloc(xpu_alloc::AllocError::BadFork)
                    | xpu_kernel::MemoryError::Host(xpu_alloc::HostError::BadFork)
            ),
            "{what}: {e:?}"
        );
    }
    // No `clCreateSubBuffer` (nor any other call) before refusing, cached sub-buffer or not.
    for (what, r) in [
        ("ClRegion::new", xpu_kernel::ClRegion::new(&fresh).map(drop)),
        (
            "ClRegion::new (cached)",
            xpu_kernel::ClRegion::new(&cached).map(drop),
        ),
        (
            "ClRegion::new_mut",
            xpu_kernel::ClRegion::new_mut(&mut fresh).map(drop),
        ),
    ] {
        println!("{what} = {r:?}");
        assert!(
            matches!(
                &r,
                Err(xpu_kernel::InteropError::Block(
                    xpu_alloc::BlockArgError::Alloc(xpu_alloc::AllocError::BadFork)
                ))
            ),
            "{what}: {r:?}"
        );
    }
    assert!(KernelError::BadFork.to_string().contains("spawn"));
    drop(out);
    println!("SCENARIO DONE");
}
