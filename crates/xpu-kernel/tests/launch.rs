//! Programs, functions and launches on a real OpenCL device (PoCL in CI, two devices for the
//! cross-device cases), element types of typed buffers and work sizes checked at the launch. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::path::PathBuf;
use std::sync::Arc;

use xpu_alloc::{AllocConfig, DataPtr, DeviceAllocator};
use xpu_device::{DeviceError, KernelArgProblem};
use xpu_event::test_support::Gate;
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::{
    Arg, DeviceBuffer, Function, KernelCache, KernelError, LaunchExt, LocalMem, Program,
    ProgramOrigin,
};
use xpu_stream::Stream;
use xpu_testing::devices;

use common::{device0_stream, fresh_stream};

const SAXPY: &str = r"
__kernel void saxpy(__global float *y, __global const float *x, float a, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = a * x[i] + y[i];
}
__kernel void fill_k(__global uint *out, uint n) {
    size_t i = get_global_id(0);
    if (i < n) out[i] = (uint)i * K;
}
__kernel void with_local(__global uint *out, __local uint *tmp) {
    size_t i = get_global_id(0);
    tmp[get_local_id(0)] = (uint)i;
    barrier(CLK_LOCAL_MEM_FENCE);
    out[i] = tmp[get_local_id(0)] + 1;
}
";

/// A private allocator with split segments, whatever the platform's default (NVIDIA's is
/// unsplit, `split_segments`): the tests here watch blocks' sub-buffers.
fn allocator(device: usize) -> DeviceAllocator {
    DeviceAllocator::new(device, AllocConfig::parse("split_segments:True").unwrap()).unwrap()
}

/// A private allocator of device 0 and a fresh (leaked) stream of it; `None` (the test is
/// skipped) without a device.
fn allocator_and_stream() -> Option<(DeviceAllocator, Stream)> {
    devices(1).then(|| (allocator(0), fresh_stream(0).leak()))
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xpu-kernel-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn saxpy_program(device: usize) -> Program {
    Program::build_with_cache(device, SAXPY, "-D K=7", &KernelCache::disabled()).unwrap()
}

fn write_f32(p: &DataPtr, s: &Stream, v: &[f32]) {
    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_ne_bytes()).collect();
    p.view().unwrap().write(s, 0, &bytes).unwrap();
}

fn read_f32(p: &DataPtr, s: &Stream, n: usize) -> Vec<f32> {
    let mut bytes = vec![0u8; n * 4];
    p.view().unwrap().read(s, 0, &mut bytes).unwrap();
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn read_u32(p: &DataPtr, s: &Stream, n: usize) -> Vec<u32> {
    read_f32(p, s, n).into_iter().map(f32::to_bits).collect()
}

/// Launches `fill_k` (`f`, built with `-D K=7`) on `s` over `n` work-items: `out[i] = i * 7`
/// for `i < n`.
///
/// # Panics
/// When `out` holds fewer than `n` u32s (the launch would write past it), or on a failed
/// launch.
fn launch_fill_k(s: &Stream, f: &Function, out: &DataPtr, n: u32) {
    assert!(out.size() >= u64::from(n) * 4, "out holds {n} u32s");
    // SAFETY: n work-items (the kernel guards `i < n`) write out[0..n), inside `out` (asserted
    // above); nothing borrows it; the kernel terminates.
    unsafe {
        s.launch(f, &[n as usize], None)
            .unwrap()
            .arg(out)
            .unwrap()
            .arg(n)
            .unwrap()
            .enqueue()
            .unwrap();
    }
}

/// Passes `args` in order to a launch of `f` on `s` over 64 work-items and returns the error
/// of the first argument refused.
///
/// # Panics
/// When every argument is accepted.
fn refused_arg(s: &Stream, f: &Function, args: Vec<Arg<'_>>) -> KernelError {
    let mut launch = s.launch(f, &[64], None).unwrap();
    for arg in args {
        launch = match launch.arg(arg) {
            Ok(next) => next,
            Err(err) => return err,
        };
    }
    panic!("every argument was accepted");
}

/// Asserts that `err` refuses argument `index` of the launch for a problem that `is_problem`
/// accepts.
fn assert_arg_problem(err: &KernelError, index: u32, is_problem: fn(&KernelArgProblem) -> bool) {
    assert!(
        matches!(
            err,
            KernelError::Device(DeviceError::KernelArg { index: i, problem, .. })
                if *i == index && is_problem(problem)
        ),
        "{err:?}"
    );
}

/// Asserts that `out` holds what [`launch_fill_k`] over `n` work-items wrote.
fn assert_filled_k(out: &DataPtr, s: &Stream, n: usize) {
    let want: Vec<u32> = (0..n as u32).map(|i| i * 7).collect();
    assert_eq!(read_u32(out, s, n), want);
}

/// The sub-buffers live in the process (`xpu_device::live_objects`).
fn sub_buffers() -> usize {
    xpu_device::live_objects().sub_buffers
}

/// Held by each test that counts the process's sub-buffers or makes some: under `cargo test`
/// this binary's tests share the process, and one test's sub-buffers would move another's
/// count.
static SUB_BUFFER_COUNT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`SUB_BUFFER_COUNT`], also when a test that held it failed.
fn counting_sub_buffers() -> std::sync::MutexGuard<'static, ()> {
    SUB_BUFFER_COUNT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Asserts that `expected` sub-buffers are live in the process, saying `why` otherwise.
fn assert_sub_buffers(expected: usize, why: &str) {
    assert_eq!(sub_buffers(), expected, "{why}");
}

/// The scene of the sub-buffer tests: an allocator and a stream of device 0, `fill_k`, the
/// number of live sub-buffers before the block, and a block of 64 u32s (which has no
/// sub-buffer until its first use); `None` (the test is skipped) without a device.
fn fill_k_block() -> Option<(DeviceAllocator, Stream, Function, usize, DataPtr)> {
    let (alloc, s) = allocator_and_stream()?;
    let f = saxpy_program(0).function("fill_k").unwrap();
    let before = sub_buffers();
    let out = alloc.allocate(64 * 4, &s).unwrap();
    Some((alloc, s, f, before, out))
}

#[test]
fn saxpy_on_allocator_blocks_takes_one_argument_per_block() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    // Blocks at nonzero offsets of one segment: one argument each, indexed from 0.
    let _pad = alloc.allocate(512, &s).unwrap();
    let n = 1000usize;
    let x = alloc.allocate(n as u64 * 4, &s).unwrap();
    let y = alloc.allocate(n as u64 * 4, &s).unwrap();
    assert_eq!(x.stream(), y.stream());
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let ys: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
    write_f32(&x, &s, &xs);
    write_f32(&y, &s, &ys);
    let saxpy = saxpy_program(0).function("saxpy").unwrap();
    assert_eq!(saxpy.num_args(), 4);
    for _ in 0..2 {
        // SAFETY: n work-items read x[0..n) and write y[0..n), both n floats; nothing
        // borrows them; the kernel terminates.
        unsafe {
            s.launch(&saxpy, &[1024], Some(&[64]))
                .unwrap()
                .arg(&y)
                .unwrap()
                .arg(&x)
                .unwrap()
                .arg(2.0f32)
                .unwrap()
                .arg(n as u32)
                .unwrap()
                .enqueue()
                .unwrap();
        }
    }
    let got = read_f32(&y, &s, n);
    let want: Vec<f32> = (0..n).map(|i| 1.0 - i as f32 + 4.0 * i as f32).collect();
    assert_eq!(got, want);
}

#[test]
fn typed_buffers_are_one_argument_each() {
    if !devices(1) {
        return;
    }
    let s = fresh_stream(0).leak();
    let n = 777usize;
    let xs: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let ys: Vec<f32> = (0..n).map(|i| 3.0 - i as f32).collect();
    let x = xpu_kernel::DeviceBuffer::from_slice(&xs, &s).unwrap();
    let y = xpu_kernel::DeviceBuffer::from_slice(&ys, &s).unwrap();
    let saxpy = saxpy_program(0).function("saxpy").unwrap();
    // SAFETY: n work-items read x[0..n) and write y[0..n), both n floats; nothing borrows
    // them; the kernel terminates.
    unsafe {
        s.launch(&saxpy, &[1024], None)
            .unwrap()
            .arg(&y)
            .unwrap()
            .arg(&x)
            .unwrap()
            .arg(-2.0f32)
            .unwrap()
            .arg(n as u32)
            .unwrap()
            .enqueue()
            .unwrap();
    }
    let got = y.to_vec(&s).unwrap();
    let want: Vec<f32> = (0..n).map(|i| ys[i] - 2.0 * xs[i]).collect();
    assert_eq!(got, want);
}

#[test]
fn build_options_and_local_memory_reach_the_kernel() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    let p = saxpy_program(0);
    let out = alloc.allocate(64 * 4, &s).unwrap();
    let f = p.function("fill_k").unwrap();
    launch_fill_k(&s, &f, &out, 64);
    assert_filled_k(&out, &s, 64);
    let g = p.function("with_local").unwrap();
    // SAFETY: 64 work-items in groups of 16 write out[0..64) and tmp[0..16) (64 bytes).
    unsafe {
        s.launch(&g, &[64], Some(&[16]))
            .unwrap()
            .arg(&out)
            .unwrap()
            .arg(LocalMem(16 * 4))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    assert_eq!(read_u32(&out, &s, 64), (1..=64).collect::<Vec<u32>>());
}

#[test]
fn build_errors_carry_the_compiler_log() {
    if !devices(1) {
        return;
    }
    let bad = "__kernel void k(__global int *o) { o[0] = undeclared_name; }";
    let err = Program::build_with_cache(0, bad, "", &KernelCache::disabled()).unwrap_err();
    match &err {
        KernelError::Device(DeviceError::Build { log, .. }) => {
            assert!(log.contains("undeclared_name"), "log: {log}");
        }
        other => panic!("expected a build error, got {other:?}"),
    }
    assert!(err.to_string().contains("undeclared_name"));
    let err =
        Program::build_with_cache(0, SAXPY, "-D K=7 -no-such-option", &KernelCache::disabled())
            .unwrap_err();
    assert!(
        matches!(err, KernelError::Device(DeviceError::Build { .. })),
        "{err:?}"
    );
}

#[test]
fn programs_come_from_memory_then_disk_and_corrupt_entries_are_recompiled() {
    if !devices(1) {
        return;
    }
    let dir = temp_dir("cache");
    let src = format!("{SAXPY}\n// cache test {}\n", std::process::id());
    let cache = KernelCache::at(&dir);
    let a = Program::build_with_cache(0, &src, "-D K=7", &cache).unwrap();
    assert_eq!(a.origin(), ProgramOrigin::Compiled);
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one entry, no temporary left: {files:?}");
    // Same key in this process: the same program from memory.
    let b = Program::build_with_cache(0, &src, "-D K=7", &cache).unwrap();
    assert_eq!(b.origin(), ProgramOrigin::Compiled);
    // As a new process: from the disk cache, and it runs.
    let disk = cache.clone().memory(false);
    let c = Program::build_with_cache(0, &src, "-D K=7", &disk).unwrap();
    assert_eq!(c.origin(), ProgramOrigin::DiskCache);
    let alloc = allocator(0);
    let s = fresh_stream(0).leak();
    let out = alloc.allocate(16 * 4, &s).unwrap();
    launch_fill_k(&s, &c.function("fill_k").unwrap(), &out, 16);
    assert_filled_k(&out, &s, 16);
    // Other options: another entry.
    let d = Program::build_with_cache(0, &src, "-D K=8", &disk).unwrap();
    assert_eq!(d.origin(), ProgramOrigin::Compiled);
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    // A corrupt entry (right key, garbage binary) falls back to compiling and is rewritten.
    for f in &files {
        let mut bytes = std::fs::read(f).unwrap();
        let len = bytes.len();
        bytes.truncate(len - len / 2);
        bytes.extend_from_slice(&[0xA5; 64]);
        std::fs::write(f, bytes).unwrap();
    }
    let e = Program::build_with_cache(0, &src, "-D K=7", &disk).unwrap();
    assert_eq!(e.origin(), ProgramOrigin::Compiled);
    let f = Program::build_with_cache(0, &src, "-D K=7", &disk).unwrap();
    assert_eq!(f.origin(), ProgramOrigin::DiskCache);
    // An unreadable cache directory: compiled, no error.
    let blocked = dir.join("not-a-dir");
    std::fs::write(&blocked, b"x").unwrap();
    let g = Program::build_with_cache(0, &src, "-D K=9", &KernelCache::at(&blocked).memory(false))
        .unwrap();
    assert_eq!(g.origin(), ProgramOrigin::Compiled);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn eight_threads_launch_one_function_concurrently() {
    if !devices(1) {
        return;
    }
    let f: Function = saxpy_program(0).function("fill_k").unwrap();
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    assert_send_sync(&f);
    std::thread::scope(|scope| {
        for t in 0..8u32 {
            let f = f.clone();
            scope.spawn(move || {
                let alloc = allocator(0);
                let s = fresh_stream(0).leak();
                for round in 0..20u32 {
                    let n = 256 + t * 8 + round;
                    let out = alloc.allocate(u64::from(n) * 4, &s).unwrap();
                    launch_fill_k(&s, &f, &out, n);
                    let got = read_u32(&out, &s, n as usize);
                    assert_eq!(
                        got,
                        (0..n).map(|i| i * 7).collect::<Vec<u32>>(),
                        "thread {t}"
                    );
                }
            });
        }
    });
}

#[test]
fn misuse_is_a_typed_error_naming_kernel_and_argument() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    let f = saxpy_program(0).function("saxpy").unwrap();
    let x = alloc.allocate(256, &s).unwrap();

    // Too few arguments: refused at the enqueue.
    let l = s.launch(&f, &[64], None).unwrap().arg(&x).unwrap();
    // SAFETY: refused before reaching the driver.
    let err = unsafe { l.enqueue() }.unwrap_err();
    assert!(
        matches!(&err, KernelError::ArgCount { kernel, expected: 4, given: 1 } if kernel == "saxpy"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "kernel \"saxpy\" takes 4 arguments, 1 given"
    );

    // Too many.
    let args = vec![
        (&x).into(),
        (&x).into(),
        1.0f32.into(),
        1u32.into(),
        1u32.into(),
    ];
    let err = refused_arg(&s, &f, args);
    assert!(
        matches!(
            err,
            KernelError::ArgCount {
                expected: 4,
                given: 5,
                ..
            }
        ),
        "{err:?}"
    );

    // A scalar for a pointer.
    let err = refused_arg(&s, &f, vec![3u64.into()]);
    assert_eq!(err.arg().map(|(k, i, _)| (k, i)), Some(("saxpy", 0)));
    assert_arg_problem(&err, 0, |p| {
        matches!(p, KernelArgProblem::ScalarForPointer { .. })
    });

    // A scalar of the wrong size (u64 for uint n).
    let err = refused_arg(
        &s,
        &f,
        vec![(&x).into(), (&x).into(), 1.0f32.into(), 1u64.into()],
    );
    assert_arg_problem(&err, 3, |p| {
        matches!(
            p,
            KernelArgProblem::SizeMismatch {
                declared: Some(4),
                given: 8,
                ..
            }
        )
    });
    assert!(
        err.to_string().contains("kernel \"saxpy\", argument 3 (n)"),
        "{err}"
    );

    // A block for a scalar parameter.
    let err = refused_arg(&s, &f, vec![(&x).into(), (&x).into(), (&x).into()]);
    assert_arg_problem(&err, 2, |p| {
        matches!(p, KernelArgProblem::BufferForNonPointer { .. })
    });

    // An empty allocation.
    let empty = alloc.allocate(0, &s).unwrap();
    let err = refused_arg(&s, &f, vec![(&empty).into()]);
    assert!(
        matches!(err, KernelError::Block { index: 0, .. }),
        "{err:?}"
    );

    // Bad work sizes.
    let err = s.launch(&f, &[], None).unwrap_err();
    assert!(matches!(err, KernelError::WorkSize { .. }), "{err:?}");
    let err = s.launch(&f, &[64, 2], Some(&[8])).unwrap_err();
    assert!(matches!(err, KernelError::WorkSize { .. }), "{err:?}");
}

/// A scalar of the right size but the other kind (an integer for a `float` parameter, a float
/// for an integer one) is refused: the driver would read its bits, not convert it, so
/// `.arg(2)` (an `i32` literal) for `float a` would silently make `a` 2.8e-45.
#[test]
fn a_scalar_of_another_kind_than_the_parameter_is_refused() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    let f = saxpy_program(0).function("saxpy").unwrap();
    let x = alloc.allocate(64 * 4, &s).unwrap();
    // `2` is an i32: four bytes, like `float a`.
    let err = refused_arg(&s, &f, vec![(&x).into(), (&x).into(), 2.into()]);
    assert_arg_problem(
        &err,
        2,
        |p| matches!(p, KernelArgProblem::KindMismatch { type_name, given: "i32" } if type_name == "float"),
    );
    assert!(
        err.to_string().contains("argument 2 (a)") && err.to_string().contains("i32"),
        "{err}"
    );
    // A float for `uint n`.
    let err = refused_arg(
        &s,
        &f,
        vec![(&x).into(), (&x).into(), 2.0f32.into(), 64.0f32.into()],
    );
    assert_arg_problem(
        &err,
        3,
        |p| matches!(p, KernelArgProblem::KindMismatch { type_name, given: "f32" } if type_name == "uint"),
    );
    // Signedness may differ (the bits are C's conversion): i32 for `uint n` is accepted.
    let y = alloc.allocate(64 * 4, &s).unwrap();
    write_f32(&y, &s, &[1.0; 64]);
    write_f32(&x, &s, &[3.0; 64]);
    // SAFETY: 64 work-items (the kernel guards i < 64) touch y[0..64) and x[0..64), inside
    // both 256-byte allocations; nothing borrows them; the kernel terminates.
    unsafe {
        s.launch(&f, &[64], None)
            .unwrap()
            .args((&y, &x, 2.0f32, 64i32))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    assert_eq!(read_f32(&y, &s, 64), vec![7.0; 64]);
}

#[test]
fn blocks_and_functions_of_another_device_are_refused() {
    if !devices(2) {
        return;
    }
    let s0 = fresh_stream(0).leak();
    let s1 = fresh_stream(1).leak();
    let a1 = allocator(1);
    let x1 = a1.allocate(256, &s1).unwrap();
    let f0 = saxpy_program(0).function("saxpy").unwrap();
    let err = s0.launch(&f0, &[64], None).unwrap().arg(&x1).unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::OtherDevice {
                index: 0,
                block_device: 1,
                stream_device: 0,
                ..
            }
        ),
        "{err:?}"
    );
    let err = s1.launch(&f0, &[64], None).unwrap_err();
    assert!(
        matches!(
            err,
            KernelError::StreamDevice {
                function_device: 0,
                stream_device: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_block_used_on_another_stream_is_reused_only_after_the_launch() {
    let Some((alloc, s0)) = allocator_and_stream() else {
        return;
    };
    let s1 = fresh_stream(0).leak();
    let f = saxpy_program(0).function("fill_k").unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    let out = alloc.allocate(64 * 4, &s0).unwrap();
    let addr = out.address();
    launch_fill_k(&s1, &f, &out, 64);
    drop(out);
    // The launch on s1 is held by the gate: the block must not come back to s0 yet.
    let other = alloc.allocate(64 * 4, &s0).unwrap();
    assert_ne!(
        other.address(),
        addr,
        "block reused while its kernel is pending on s1"
    );
    gate.open().unwrap();
    s1.synchronize().unwrap();
    let again = alloc.allocate(64 * 4, &s0).unwrap();
    assert_eq!(again.address(), addr);
}

/// Blocks of one segment reach kernels and copies as the segment's buffer plus their byte
/// offset (the kernel's offset parameters, `xpu_device::backend::add_offset_params`): no
/// sub-buffer is made, the one thing NVIDIA's OpenCL does not survive under several threads.
#[test]
fn blocks_of_one_segment_reach_kernels_and_copies_without_a_sub_buffer() {
    let _counting = counting_sub_buffers();
    let Some((alloc, s, f, before, out)) = fill_k_block() else {
        return;
    };
    let second = alloc.allocate(64 * 4, &s).unwrap();
    assert_eq!(
        second.address() - out.address(),
        512,
        "two blocks of one segment"
    );
    for b in [&out, &second] {
        b.view().unwrap().fill(&s, &[0; 4], 0, 64 * 4).unwrap();
        for _ in 0..3 {
            launch_fill_k(&s, &f, b, 64);
        }
    }
    assert_filled_k(&out, &s, 64);
    assert_filled_k(&second, &s, 64);
    assert_sub_buffers(before, "no sub-buffer for kernels, fills or reads");
    let addr = second.address();
    drop(second);
    let again = alloc.allocate(64 * 4, &s).unwrap();
    assert_eq!(again.address(), addr, "the cached block is reused");
    launch_fill_k(&s, &f, &again, 64);
    assert_filled_k(&again, &s, 64);
    assert_sub_buffers(before, "nor for a reused block");
}

/// A segment's cache of sub-buffers never releases one while the segment lives (on NVIDIA, a
/// sub-buffer released while another one of the same bytes has commands queued crashes the
/// process); past its capacity, an allocation's own sub-buffer lives as long as the
/// allocation.
#[test]
fn a_full_segment_cache_keeps_its_sub_buffers_and_an_uncached_one_lives_with_its_allocation() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    if !xpu_alloc::sub_buffers_safe_on(&xpu_device::device(0).unwrap().properties().platform_name) {
        return; // `block_cl_mem` of a split block is refused there.
    }
    let _counting = counting_sub_buffers();
    // Sub-buffers come from `block_cl_mem` (and kernels built as written), not from copies.
    let before = sub_buffers();
    let cap = xpu_alloc::SUB_BUFFERS_PER_SEGMENT;
    // One small segment, a distinct (offset, size) per allocation: 4, 8, ... bytes.
    for k in 1..=cap {
        let p = alloc.allocate(4 * k as u64, &s).unwrap();
        p.block_cl_mem().unwrap();
    }
    s.synchronize().unwrap();
    assert_sub_buffers(
        before + cap,
        "the segment caches one sub-buffer per (offset, size), up to its capacity",
    );
    let past = alloc.allocate(4 * (cap as u64 + 1), &s).unwrap();
    past.block_cl_mem().unwrap();
    assert_sub_buffers(
        before + cap + 1,
        "a full cache releases none of its sub-buffers for a new one",
    );
    drop(past);
    assert_sub_buffers(
        before + cap,
        "the uncached sub-buffer went with its allocation",
    );
    alloc.empty_cache();
    assert_eq!(sub_buffers(), before);
}

/// A kernel of twelve parameters of every kind: it writes its ten non-pointer arguments to
/// `out[0..10)` as longs, in parameter order (`x` times 4, through `__local` memory).
const TWELVE: &str = r"
__kernel void twelve(__global long *out, uchar a, char b, ushort c, short d, uint e, int f,
                     ulong g, long h, float x, __local long *tmp, uint n) {
    tmp[0] = (long)(x * 4.0f);
    barrier(CLK_LOCAL_MEM_FENCE);
    long v[10] = {a, b, c, d, e, f, (long)g, h, tmp[0], n};
    for (int i = 0; i < 10; i++) out[i] = v[i];
}
";

/// A fresh (leaked) stream of device 0, the [`TWELVE`] kernel and a zeroed `out` of 10 longs
/// for it; `None` (the test is skipped) without a device.
fn twelve_and_out() -> Option<(Stream, Function, xpu_kernel::DeviceBuffer<i64>)> {
    devices(1).then(|| {
        let s = fresh_stream(0).leak();
        let program = Program::build_with_cache(0, TWELVE, "", &KernelCache::disabled()).unwrap();
        let out = xpu_kernel::DeviceBuffer::zeroed(10, &s).unwrap();
        (s, program.function("twelve").unwrap(), out)
    })
}

#[test]
fn a_tuple_of_twelve_arguments_of_every_kind_reaches_the_kernel_in_order() {
    let Some((s, f, out)) = twelve_and_out() else {
        return;
    };
    // SAFETY: one work-item writes out[0..10), the buffer's 10 longs, and tmp[0] of its 8
    // local bytes; nothing borrows `out`; the kernel terminates.
    unsafe {
        s.launch(&f, &[1], Some(&[1]))
            .unwrap()
            .args((
                &out,
                200u8,
                -100i8,
                60_000u16,
                -30_000i16,
                4_000_000_000u32,
                -2_000_000_000i32,
                1u64 << 40,
                -(1i64 << 40),
                2.5f32,
                LocalMem(8),
                12u32,
            ))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    let want = [
        200,
        -100,
        60_000,
        -30_000,
        4_000_000_000,
        -2_000_000_000,
        1 << 40,
        -(1 << 40),
        10,
        12,
    ];
    assert_eq!(out.to_vec(&s).unwrap(), want);
}

#[test]
fn a_tuple_of_arguments_is_refused_as_the_arg_chain_with_the_same_index() {
    let Some((s, f, out)) = twelve_and_out() else {
        return;
    };
    let launch = || s.launch(&f, &[64], None).unwrap();
    let assert_same = |tuple_err: &KernelError, chain_err: &KernelError, case: &str| {
        assert_eq!(
            format!("{tuple_err:?}"),
            format!("{chain_err:?}"),
            "{case}: the tuple's error and the .arg chain's"
        );
    };
    // The twelve parameters' arguments, as the `.arg` chains below take them: the first `n`,
    // then `last`.
    let good: Vec<Arg<'_>> = vec![
        (&out).into(),
        1u8.into(),
        1i8.into(),
        1u16.into(),
        1i16.into(),
        1u32.into(),
        1i32.into(),
        1u64.into(),
        1i64.into(),
        1.0f32.into(),
        LocalMem(8).into(),
        1u32.into(),
    ];
    let then = |n: usize, last| [&good[..n], &[last]].concat();
    type Problem = fn(&KernelArgProblem) -> bool;
    // Each case: the error of `.args(tuple)`, the same arguments as one `.arg` chain, the
    // index refused and its problem.
    let cases: Vec<(&str, KernelError, Vec<Arg<'_>>, u32, Problem)> = vec![
        (
            "a scalar for the pointer",
            launch().args((3u64,)).unwrap_err(),
            then(0, 3u64.into()),
            0,
            |p| matches!(p, KernelArgProblem::ScalarForPointer { .. }),
        ),
        (
            "a block for the uchar",
            launch().args((&out, &out)).unwrap_err(),
            then(1, (&out).into()),
            1,
            |p| matches!(p, KernelArgProblem::BufferForNonPointer { .. }),
        ),
        (
            "a uint for the ushort",
            launch().args((&out, 1u8, 1i8, 1u32)).unwrap_err(),
            then(3, 1u32.into()),
            3,
            |p| {
                matches!(
                    p,
                    KernelArgProblem::SizeMismatch {
                        declared: Some(2),
                        given: 4,
                        ..
                    }
                )
            },
        ),
        (
            // After one `.arg`, the tuple's elements are numbered from 1.
            "local memory for the float, after one .arg",
            launch()
                .arg(&out)
                .unwrap()
                .args((1u8, 1i8, 1u16, 1i16, 1u32, 1i32, 1u64, 1i64, LocalMem(8)))
                .unwrap_err(),
            then(9, LocalMem(8).into()),
            9,
            |p| matches!(p, KernelArgProblem::LocalForNonLocal { .. }),
        ),
    ];
    for (case, tuple_err, chain, index, is_problem) in cases {
        assert!(
            matches!(tuple_err.arg(), Some(("twelve", i, Some(p))) if i == index && is_problem(p)),
            "{case}: {tuple_err:?}"
        );
        assert_same(&tuple_err, &refused_arg(&s, &f, chain), case);
    }

    // A thirteenth argument, the tuple's twelfth after one `.arg`.
    let tuple_err = launch()
        .arg(&out)
        .unwrap()
        .args((
            1u8,
            1i8,
            1u16,
            1i16,
            1u32,
            1i32,
            1u64,
            1i64,
            1.0f32,
            LocalMem(8),
            1u32,
            1u32,
        ))
        .unwrap_err();
    assert!(
        matches!(&tuple_err, KernelError::ArgCount { kernel, expected: 12, given: 13 }
            if kernel == "twelve"),
        "{tuple_err:?}"
    );
    let chain_err = refused_arg(&s, &f, then(12, 1u32.into()));
    assert_same(&tuple_err, &chain_err, "a thirteenth argument");

    // Too few: refused at the enqueue, as the chain.
    // SAFETY: refused before reaching the driver.
    let tuple_err = unsafe { launch().args((&out,)).unwrap().enqueue() }.unwrap_err();
    // SAFETY: as above.
    let chain_err = unsafe { launch().arg(&out).unwrap().enqueue() }.unwrap_err();
    assert!(
        matches!(&tuple_err, KernelError::ArgCount { kernel, expected: 12, given: 1 }
            if kernel == "twelve"),
        "{tuple_err:?}"
    );
    assert_same(&tuple_err, &chain_err, "one argument of twelve");
}

// A typed buffer whose element type cannot match the pointer parameter's is refused at the
// launch (`KernelArgProblem::ElementType`), in a direct launch and in a graph capture; byte
// buffers, untyped allocations and matching element types pass, and the kernel computes.
// Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

const N: usize = 64;

const SOURCE: &str = r"
__kernel void scale(__global float *y, __global const uint *idx, __global float4 *v,
                    __global uchar *bytes, float a) {
    size_t i = get_global_id(0);
    y[i] = a * (float)idx[i];
    if (i == 0) { v[0] = v[0] * a; bytes[0] = (uchar)7; }
}
";

fn scale(device: usize) -> Function {
    Program::build(device, SOURCE, "")
        .unwrap()
        .function("scale")
        .unwrap()
}

/// The `ElementType` problem of argument `index` in `err`, as `(expected, found)`.
fn element_problem(err: &KernelError, index: u32) -> Option<(String, &'static str)> {
    match err {
        KernelError::Device(DeviceError::KernelArg {
            index: i,
            problem: KernelArgProblem::ElementType { expected, found },
            ..
        }) if *i == index => Some((expected.clone(), found)),
        _ => None,
    }
}

/// Asserts that `err` is the `ElementType` problem of argument `index`: a parameter of
/// type `expected` given a buffer of `found`.
fn assert_element_problem(err: &KernelError, index: u32, expected: &str, found: &'static str) {
    assert_eq!(
        element_problem(err, index),
        Some((expected.to_owned(), found)),
        "{err:?}"
    );
}

fn buffers(
    s: &Stream,
) -> (
    DeviceBuffer<f32>,
    DeviceBuffer<u32>,
    DeviceBuffer<f32>,
    DeviceBuffer<u8>,
) {
    let y = DeviceBuffer::<f32>::zeroed(N, s).unwrap();
    let idx = DeviceBuffer::from_slice(&(0..N as u32).collect::<Vec<_>>(), s).unwrap();
    let v = DeviceBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], s).unwrap();
    let bytes = DeviceBuffer::<u8>::zeroed(4, s).unwrap();
    (y, idx, v, bytes)
}

#[test]
fn a_typed_buffer_of_another_element_type_than_the_pointer_parameter_is_refused() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = scale(0);
    let (y, idx, v, bytes) = buffers(&s);

    // f64 for `float *y`: the kernel would read pairs of floats out of each double.
    let doubles = DeviceBuffer::<f64>::zeroed(N, &s).unwrap();
    let err = s.launch(&f, &[N], None).unwrap().arg(&doubles).unwrap_err();
    println!("f64 for float*: {err}");
    assert_element_problem(&err, 0, "float*", "f64");
    assert!(
        err.to_string().contains("f64") && err.to_string().contains("float*"),
        "{err}"
    );
    // The launch with `y` as its first argument, for the refusals of the next ones.
    let after_y = || s.launch(&f, &[N], None).unwrap().arg(&y).unwrap();
    // f32 for `uint *idx`: same size, another kind.
    let err = after_y().arg(&y).unwrap_err();
    assert_element_problem(&err, 1, "uint*", "f32");
    // u64 for `float4 *v`.
    let longs = DeviceBuffer::<u64>::zeroed(4, &s).unwrap();
    let err = after_y().arg(&idx).unwrap().arg(&longs).unwrap_err();
    assert_element_problem(&err, 2, "float4*", "u64");

    // What may match passes: a byte buffer for `float *y`, an untyped allocation for `uint *`,
    // the component type for `float4 *`, any buffer for `uchar *`.
    let as_bytes = DeviceBuffer::<u8>::zeroed(N * 4, &s).unwrap();
    let launch = s
        .launch(&f, &[N], None)
        .unwrap()
        .arg(&as_bytes)
        .unwrap()
        .arg(idx.data_ptr())
        .unwrap()
        .arg(&v)
        .unwrap()
        .arg(&doubles)
        .unwrap();
    drop(launch);

    // The matching launch computes.
    // SAFETY: N work-items write y[0..N) and read idx[0..N) (both N long); item 0 touches
    // v[0] (4 floats) and bytes[0] (4 bytes); the kernel terminates.
    unsafe {
        s.launch(&f, &[N], None)
            .unwrap()
            .args((&y, &idx, &v, &bytes, 0.5f32))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    let want: Vec<f32> = (0..N).map(|i| 0.5 * i as f32).collect();
    assert_eq!(y.to_vec(&s).unwrap(), want);
    assert_eq!(v.to_vec(&s).unwrap(), vec![0.5, 1.0, 1.5, 2.0]);
    assert_eq!(bytes.to_vec(&s).unwrap(), vec![7, 0, 0, 0]);
}

#[test]
fn a_captured_launch_refuses_a_typed_buffer_of_another_element_type_too() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = scale(0);
    let doubles = Arc::new(DeviceBuffer::<f64>::zeroed(N, &s).unwrap());
    let err = Graph::capture(&s, |c| {
        c.launch(&s, &f, &[N], None)?.arg(&doubles)?;
        Ok(())
    })
    .unwrap_err();
    match &err {
        GraphError::Kernel(k) => assert_element_problem(k, 0, "float*", "f64"),
        other => panic!("{other:?}"),
    }
}

// The launch layer's work-size checks: a global size
// whose work-item count overflows `size_t` is refused when the launch is built (PoCL wraps the
// product and its scheduler aborts the process), on a stream and in a capture. Skipped
// without a device unless `XPU_REQUIRE_DEVICE=1`.

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

/// A kernel defined by a function-like macro whose pointer is named by a macro parameter:
/// the added offset parameter keeps its name as written (`xpu_offset__OUT`, one token the
/// macro does not replace) while the pointer is named by the macro's argument (`out`). The
/// kernel still takes its block by offset, and callers see the parameters as written.
#[test]
fn a_kernel_from_a_macro_whose_pointer_is_a_macro_parameter_takes_blocks_by_offset() {
    let Some((alloc, s)) = allocator_and_stream() else {
        return;
    };
    let src = "#define FILL(NAME, OUT) __kernel void NAME(__global uint *OUT, uint n) { \\\n\
               size_t i = get_global_id(0); if (i < n) OUT[i] = (uint)i * 7; }\n\
               FILL(fill_m, out)\n";
    let f = Program::build_with_cache(0, src, "", &KernelCache::disabled())
        .unwrap()
        .function("fill_m")
        .unwrap();
    assert_eq!(f.num_args(), 2, "the parameters as written");
    let first = alloc.allocate(64 * 4, &s).unwrap();
    let out = alloc.allocate(64 * 4, &s).unwrap();
    assert_eq!(out.address() - first.address(), 512, "out is 512 bytes in");
    first
        .view()
        .unwrap()
        .fill(&s, &[0xAB; 4], 0, 64 * 4)
        .unwrap();
    launch_fill_k(&s, &f, &out, 64);
    assert_filled_k(&out, &s, 64);
    assert_eq!(
        read_u32(&first, &s, 64),
        vec![0xABAB_ABAB; 64],
        "the block before is untouched"
    );
}
