//! In a bad fork child the program and launch layer returns `KernelError::BadFork` at once
//! (typed memory `MemoryError::Alloc(AllocError::BadFork)`),
//! without a driver call (`clCreateKernel`, `clSetKernelArg`, `clGetProgramInfo`...) or the
//! function's kernel-pool lock; dropping the last handle of a parent's function or program
//! there leaks its kernels or program (no `clReleaseKernel`/`clReleaseProgram`). Graphs return `GraphError::BadFork` from every entry point,
//! and dropping a parent's graph, capture or captured launch there leaks its kernels, command
//! buffers, blocks and pool. The parent's state (a built program, a function, a stream, an
//! allocation, replayed graphs, captures in progress) is reproduced in a fresh process that
//! then becomes a bad fork (`simulate_bad_fork`, the flag the `pthread_atfork` child handler
//! sets: this crate may not fork). A hang is caught by the bound.

mod common;

use std::sync::Arc;
use std::time::Duration;

use xpu_alloc::{AllocError, MemPool, MemPoolId};
use xpu_device::LiveObjects;
use xpu_kernel::graph::{graph_pool_handle, Capture, Graph, GraphError, ReplayMode};
use xpu_kernel::memory::{copy_peer, memset_zeros};
use xpu_kernel::{
    DeviceBuffer, Function, KernelError, LaunchExt, MemoryError, Program, StreamMemoryExt,
};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};

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
                Err(xpu_kernel::InteropError::Alloc(
                    xpu_alloc::AllocError::BadFork
                ))
            ),
            "{what}: {r:?}"
        );
    }
    assert!(KernelError::BadFork.to_string().contains("spawn"));
    drop(out);
    println!("SCENARIO DONE");
}

/// Graphs captured and replayed by the parent (one through command buffers where the device
/// has them, one recorded in a shared pool) and two captures whose closures run at the fork:
/// in the child every graph entry point is `GraphError::BadFork`, and the drops of the graphs,
/// of the captures and of the launches being built release no driver object and no pool.
#[test]
fn graphs_refuse_in_a_bad_fork_child_and_their_drops_leak() {
    xpu_testing::bad_fork::bad_fork_test("graph-bad-fork", graph_run);
}

/// The results of the graph entry points called in the child: each printed, the ones that
/// are not the graph layer's own `BadFork` (or do not answer `is_bad_fork`) collected, so
/// that one run lists every entry point that does not refuse.
#[derive(Default)]
struct Refusals(Vec<String>);

impl Refusals {
    fn check<T: std::fmt::Debug>(&mut self, what: &str, r: Result<T, GraphError>) {
        println!("{what} = {r:?}");
        match &r {
            Err(e @ GraphError::BadFork) if e.is_bad_fork() => {}
            _ => self
                .0
                .push(format!("{what}: expected GraphError::BadFork, got {r:?}")),
        }
    }

    /// Listing the device's private pools must refuse (its registry lock may have been held
    /// at the fork); that the graph's pool `id` was not torn down shows in
    /// [`Refusals::same_objects`] (its segments are not released).
    fn pools_refused(&mut self, what: &str, allocator: &xpu_alloc::DeviceAllocator, id: MemPoolId) {
        let listed = allocator
            .mem_pools()
            .map(|p| p.iter().map(MemPool::id).collect::<Vec<_>>());
        println!("{what}: pool {id:?}, mem_pools = {listed:?}");
        if !matches!(listed, Err(xpu_alloc::AllocError::BadFork)) {
            self.0
                .push(format!("{what}: mem_pools {listed:?}, expected BadFork"));
        }
    }

    /// The driver objects the backend holds now must be those `before` counted: nothing was
    /// created or released (a drop leaked them).
    fn same_objects(&mut self, what: &str, before: LiveObjects) {
        let now = xpu_device::live_objects();
        let held = |o: LiveObjects| (o.kernels, o.buffers, o.sub_buffers, o.programs, o.queues);
        println!(
            "{what}: (kernels, buffers, sub-buffers, programs, queues) = {:?}",
            held(now)
        );
        if held(now) != held(before) {
            self.0.push(format!(
                "{what}: driver objects {:?}, before {:?}",
                held(now),
                held(before)
            ));
        }
    }
}

/// Captures on `stream` a fill of `out` with 7, then `fill(out, 64)` (`out[i] = i`).
fn capture_fill(
    c: &mut Capture<'_>,
    stream: &Stream,
    f: &Function,
    out: &Arc<DeviceBuffer<u32>>,
) -> Result<(), GraphError> {
    c.fill(stream, out, 7u32)?;
    // SAFETY: 64 work-items write out[0..64), the buffer's 64 elements, at every replay.
    unsafe {
        c.launch(stream, f, &[64], None)?
            .arg(out)?
            .arg(64u32)?
            .enqueue()
    }
}

fn graph_run() {
    let function = Program::build(0, SOURCE, "")
        .and_then(|p| p.function("fill"))
        .expect("function");
    let s = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let [s2, s3, s4, s5] =
        [0; 4].map(|_| get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream"));
    let out = Arc::new(DeviceBuffer::<u32>::zeroed(64, &s).expect("out"));
    let side = Arc::new(DeviceBuffer::<u32>::zeroed(64, &s).expect("side"));
    // Replayed graphs of the parent: through a command buffer where the device has one (one
    // per replay queue), and a recorded one in a shared pool, with an upload.
    let auto = Graph::capture_with(&s, ReplayMode::Auto, |c| {
        capture_fill(c, &s, &function, &out)?;
        c.copy(&s, &out, 0, &side, 0, 64)
    })
    .expect("capture");
    let handle = graph_pool_handle(0).expect("pool handle");
    let recorded = Graph::capture_in_pool_with(&s, &handle, ReplayMode::Recorded, |c| {
        let scratch = c.alloc::<u32>(&s, 64)?;
        c.write(&s, &scratch, 0, &[5; 64])?;
        capture_fill(c, &s, &function, &scratch)
    })
    .expect("capture in pool");
    for g in [&auto, &recorded] {
        g.replay(&s).expect("replay");
        g.replay(&s2).expect("replay on another stream");
    }
    for st in [s, s2] {
        st.synchronize().expect("synchronize");
    }
    let want: Vec<u32> = (0..64).collect();
    assert_eq!(
        side.to_vec(&s).expect("read"),
        want,
        "the parent's replays ran"
    );
    xpu_device::backend::wait_for_callbacks();
    let allocator = xpu_alloc::device_allocator(0).expect("device allocator");
    let pools = [auto.pool().id(), handle.id()];

    let mut refusals = Refusals::default();
    let mut in_child = None;
    // Captures in progress at the fork (the child continues the closure): the outer one holds
    // a captured launch, a captured allocation and an event; each holds a launch being built.
    let outer = Graph::capture(&s3, |c| {
        capture_fill(c, &s3, &function, &out)?;
        let kept = c.alloc::<u32>(&s3, 16)?;
        let event = c.record_event(&s3)?;
        let inner = Graph::capture(&s4, |c4| {
            let building = c4.launch(&s4, &function, &[64], None)?.arg(&out)?;
            let complete = c
                .launch(&s3, &function, &[64], None)?
                .arg(&out)?
                .arg(64u32)?;

            xpu_device::fork::simulate_bad_fork();
            let before = xpu_device::live_objects();

            refusals.check("CaptureLaunch::arg", building.arg(64u32).map(drop));
            // SAFETY: 64 work-items write out[0..64) of the 64-element buffer (not run: the
            // call is refused).
            refusals.check("CaptureLaunch::enqueue", unsafe { complete.enqueue() });
            refusals.check(
                "Capture::launch",
                c.launch(&s3, &function, &[64], None).map(drop),
            );
            refusals.check("Capture::alloc", c.alloc::<u32>(&s3, 64).map(drop));
            refusals.check("Capture::fill", c.fill(&s3, &out, 1u32));
            refusals.check("Capture::copy", c.copy(&s3, &out, 0, &kept, 0, 16));
            refusals.check("Capture::write", c.write(&s3, &kept, 0, &[1; 16]));
            refusals.check("Capture::record_event", c.record_event(&s3));
            refusals.check("Capture::wait_event", c.wait_event(&s2, &event));
            refusals.check("Capture::synchronize", c.synchronize(&s3));
            refusals.check("Graph::capture", Graph::capture(&s, |_| Ok(())));
            refusals.check(
                "Graph::capture_with",
                Graph::capture_with(&s, ReplayMode::Recorded, |_| Ok(())),
            );
            refusals.check(
                "Graph::capture_in_pool",
                Graph::capture_in_pool(&s, &handle, |_| Ok(())),
            );
            refusals.check(
                "Graph::capture_in_pool_with",
                Graph::capture_in_pool_with(&s, &handle, ReplayMode::Auto, |_| Ok(())),
            );
            refusals.check("graph_pool_handle", graph_pool_handle(0));
            for (name, g) in [("auto", &auto), ("recorded", &recorded)] {
                refusals.check(&format!("Graph::replay ({name})"), g.replay(&s));
                refusals.check(
                    &format!("Graph::replay ({name}, a stream it never ran on)"),
                    g.replay(&s5),
                );
                println!("{name}: {} commands, {g:?}", g.len());
            }
            let supported = xpu_kernel::graph::command_buffer_supported(0);
            println!("command_buffer_supported = {supported:?}");
            if !matches!(supported, Err(xpu_device::DeviceError::BadFork)) {
                refusals
                    .0
                    .push(format!("command_buffer_supported: {supported:?}"));
            }
            refusals.same_objects("after the refused calls", before);
            drop(auto);
            refusals.same_objects("after dropping the Auto graph", before);
            refusals.pools_refused("after dropping the Auto graph", allocator, pools[0]);
            drop(recorded);
            refusals.same_objects("after dropping the recorded graph", before);
            in_child = Some(before);
            Ok(())
        });
        refusals.check("Graph::capture (forked in the closure)", inner);
        Ok(())
    });
    refusals.check("Graph::capture (outer, forked in the closure)", outer);
    let before = in_child.expect("the inner closure ran");
    refusals.same_objects("after the captures ended", before);
    drop(handle);
    refusals.pools_refused(
        "after dropping the recorded graph and the pool handle",
        allocator,
        pools[1],
    );
    refusals.same_objects("after dropping the pool handle", before);
    assert!(GraphError::BadFork.to_string().contains("spawn"));
    assert!(
        refusals.0.is_empty(),
        "graph entry points that did not refuse:\n{}",
        refusals.0.join("\n")
    );
    xpu_testing::bad_fork::done();
}

/// The parent's programs and functions, dropped in the child: the last `Function` handle
/// leaks its pooled kernels and the last `Program` handle its program (no
/// `clReleaseKernel`/`clReleaseProgram`, as the live driver objects show). Looking up a
/// program the parent cached in memory, and building one through the disk cache, refuse
/// first: nothing is read from or written to the cache directory.
#[test]
fn dropping_functions_and_programs_in_a_bad_fork_child_leaks_them() {
    xpu_testing::bad_fork::bad_fork_test("kernel-drops-bad-fork", drops_run);
}

fn drops_run() {
    use xpu_kernel::KernelCache;
    let dir = std::env::temp_dir().join(format!("xpu-kernel-bad-fork-{}", std::process::id()));
    let disk = KernelCache::at(&dir).memory(false);
    // One program only this scenario holds (not in the in-memory cache), one the in-memory
    // cache also holds; each function's pool holds two kernels (two launches built at once).
    let private = Program::build_with_cache(0, SOURCE, "-D PRIVATE=1", &disk).expect("build");
    let cached = Program::build(0, SOURCE, "").expect("build");
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let functions = [&private, &cached].map(|p| p.function("fill").expect("function"));
    for f in &functions {
        let launches = [0; 2].map(|_| stream.launch(f, &[64], None).expect("launch"));
        drop(launches);
    }
    let files = |what: &str| {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        println!("{what}: cache files {names:?}");
        names
    };
    let parent_files = files("parent");
    assert_eq!(parent_files.len(), 1, "the parent wrote its program binary");

    xpu_device::fork::simulate_bad_fork();
    let before = xpu_device::live_objects();

    let mut refusals = Vec::new();
    for (what, r) in [
        (
            "Program::build (in the in-memory cache)",
            Program::build(0, SOURCE, ""),
        ),
        (
            "Program::build_with_cache (on disk)",
            Program::build_with_cache(0, SOURCE, "-D PRIVATE=1", &disk),
        ),
        (
            "Program::build_with_cache (new)",
            Program::build_with_cache(0, SOURCE, "-D NEW=1", &disk),
        ),
    ] {
        println!("{what} = {:?}", r.as_ref().map(drop));
        if !matches!(r, Err(KernelError::BadFork)) {
            refusals.push(format!("{what}: {:?}", r.map(drop)));
        }
    }
    let mut same = |what: &str| {
        let now = xpu_device::live_objects();
        let held = |o: LiveObjects| (o.kernels, o.programs);
        println!("{what}: (kernels, programs) = {:?}", held(now));
        if held(now) != held(before) {
            refusals.push(format!(
                "{what}: (kernels, programs) {:?}, before {:?}",
                held(now),
                held(before)
            ));
        }
    };
    same("after the refused builds");
    let [private_function, cached_function] = functions;
    drop(private_function);
    same("after dropping the last handle of a function");
    drop(private);
    same("after dropping the last handle of a program");
    drop(cached_function);
    drop(cached);
    same("after dropping a function and a program the in-memory cache holds");
    if files("child") != parent_files {
        refusals.push("the child changed the disk cache".to_owned());
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        refusals.is_empty(),
        "program-layer entry points that did not refuse or drops that released:\n{}",
        refusals.join("\n")
    );
    xpu_testing::bad_fork::done();
}

// Typed memory in a bad fork child: `copy_peer` and `memset_zeros` refuse too, also for empty
// regions.

#[test]
fn copy_peer_and_memset_zeros_refuse_in_a_bad_fork_child() {
    xpu_testing::bad_fork::bad_fork_test("typed-memory-bad-fork", typed_memory_run);
}

fn typed_memory_run() {
    let s = xpu_stream::get_stream_from_pool(0, 0).expect("stream");
    let src = DeviceBuffer::<u32>::from_slice(&[1; 64], &s).expect("src");
    let mut dst = DeviceBuffer::<u32>::zeroed(64, &s).expect("dst");
    let empty = DeviceBuffer::<u32>::new(0, &s).expect("empty");
    let mut empty_dst = DeviceBuffer::<u32>::new(0, &s).expect("empty dst");
    s.synchronize().expect("synchronize");

    xpu_device::fork::simulate_bad_fork();

    let results = [
        ("copy_peer", copy_peer(&s, &src, &s, &mut dst)),
        (
            "copy_peer (empty)",
            copy_peer(&s, &empty, &s, &mut empty_dst),
        ),
        ("memset_zeros", memset_zeros(&s, &mut dst)),
        ("memset_zeros (empty)", memset_zeros(&s, &mut empty_dst)),
        ("Stream::memset_zeros", s.memset_zeros(&mut dst)),
        ("DeviceBuffer::to_device", src.to_device(&s, &s).map(drop)),
    ];
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, r)| !matches!(r, Err(MemoryError::Alloc(AllocError::BadFork))))
        .map(|(what, r)| format!("{what}: {r:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected Err(Alloc(BadFork)) from every entry point: {wrong:?}"
    );
    xpu_testing::bad_fork::done();
}
