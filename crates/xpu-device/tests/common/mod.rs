//! Shared helpers of the device integration tests: skipping without a device, and a user-event
//! gate that is always opened, even when a test fails while commands wait on it.
#![allow(dead_code)]

use xpu_device::backend::{
    Buffer, ClEvent, CommandQueue, Context, Kernel, MemFlags, Program, QueueOptions,
};
use xpu_device::Device;

/// True when at least `need` devices exist. Otherwise prints a skip message naming the running
/// test ([`child::test_name`]) and returns false, except that a test needing one device panics
/// under `XPU_REQUIRE_DEVICE=1` when there is none. A test needing two devices skips even then:
/// a GPU machine may have a single GPU.
pub fn have_devices(need: usize) -> bool {
    let test = child::test_name();
    let count = xpu_device::device_count();
    if count >= need {
        return true;
    }
    if count == 0 && xpu_device::require_device() {
        let why = xpu_device::devices().err().map(|e| e.to_string());
        panic!("{test}: XPU_REQUIRE_DEVICE=1 but no OpenCL device was found: {why:?}");
    }
    eprintln!("skipping {test}: needs {need} device(s), found {count}");
    false
}

/// Device 0, or `None` (after the skip message) when there is none.
pub fn device0() -> Option<&'static Device> {
    have_devices(1).then(|| xpu_device::device(0).expect("device 0 exists"))
}

/// Device 0, its context and an in-order queue with profiling on it ([`queue`]), or `None`
/// as [`device0`].
pub fn device0_queue() -> Option<(&'static Device, &'static Context, CommandQueue)> {
    device0().map(with_queue)
}

/// `dev`, its context and an in-order queue with profiling on it ([`queue`]).
fn with_queue(dev: &'static Device) -> (&'static Device, &'static Context, CommandQueue) {
    (
        dev,
        dev.context().expect("the device's context"),
        queue(dev),
    )
}

/// A kernel source: `scale_index(out, k)` writes `out[i] = i * k`.
pub const SCALE: &str = r"
__kernel void scale_index(__global uint *out, uint k) {
    size_t i = get_global_id(0);
    out[i] = (uint)i * k;
}
";

/// [`SCALE`] built for `dev`, and its `scale_index` kernel.
pub fn scale_index(dev: &Device) -> (Program, Kernel) {
    let program = Program::build(dev.context().unwrap(), dev.id(), SCALE).unwrap();
    let kernel = Kernel::new(&program, "scale_index").unwrap();
    (program, kernel)
}

/// [`scale_index`] with its arguments set: `out` a new buffer of `len` u32s in `dev`'s context
/// (returned too), and `k`.
pub fn scale_index_into(dev: &Device, len: usize, k: u32) -> (Program, Kernel, Buffer) {
    let (program, mut kernel) = scale_index(dev);
    let out = Buffer::new(dev.context().unwrap(), len * 4, MemFlags::default()).unwrap();
    kernel.set_arg_buffer(0, &out).unwrap();
    kernel.set_arg(1, k).unwrap();
    (program, kernel, out)
}

/// An in-order queue with profiling on device `dev`.
pub fn queue(dev: &Device) -> CommandQueue {
    dev.create_queue(QueueOptions {
        profiling: true,
        priority: None,
    })
    .expect("create queue")
}

/// A user event that is set complete on drop if the test did not open it, so that a failing
/// assertion never leaves commands blocked forever.
pub struct Gate {
    event: ClEvent,
    open: bool,
}

impl Gate {
    pub fn new(dev: &Device) -> Gate {
        Gate {
            event: dev.create_user_event().expect("create user event"),
            open: false,
        }
    }

    pub fn event(&self) -> &ClEvent {
        &self.event
    }

    pub fn open(&mut self) {
        self.open = true;
        self.event.set_complete().expect("set user event complete");
    }
}

/// A closed [`Gate`] on `dev` and a marker on `q` that waits for it.
pub fn gated_marker(dev: &Device, q: &CommandQueue) -> (Gate, ClEvent) {
    let gate = Gate::new(dev);
    let marker = q.enqueue_marker(&[gate.event()]).unwrap();
    (gate, marker)
}

impl Drop for Gate {
    fn drop(&mut self) {
        if !self.open {
            let _ = self.event.set_complete();
        }
    }
}

/// Re-running this test binary in a child process: xpu-testing's module, compiled here by path
/// (these tests cannot depend on xpu-testing, which depends on xpu-device).
#[path = "../../../xpu-testing/src/child.rs"]
mod child;

/// The environment variable that marks a child process started by [`in_child_scenario`].
pub const CHILD_SCENARIO: &str = "XPU_TEST_CHILD_SCENARIO";

/// True in the child process started by [`in_child_scenario`] for the running test.
pub fn is_child() -> bool {
    std::env::var(CHILD_SCENARIO).is_ok_and(|v| v == child::test_name())
}

/// How long a child scenario may run before [`in_child_scenario`] kills it.
pub const CHILD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// True in the child process that runs the running test's scenario. In the parent: runs the
/// test again in a child process (killed after [`CHILD_TIMEOUT`]), asserts that it exited with
/// status 0 after printing `scenario-ok`, and returns false (the test is done).
pub fn in_child_scenario() -> bool {
    if is_child() {
        return true;
    }
    let test = child::test_name();
    let out = child::rerun(&test, (CHILD_SCENARIO, &test), CHILD_TIMEOUT);
    assert!(
        out.status.is_some_and(|s| s.success()) && out.stdout.contains("scenario-ok"),
        "child scenario {test} failed: status {:?} (None: killed after {CHILD_TIMEOUT:?})\nstdout:\n{}\nstderr:\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    false
}

/// Device 0 in the child process that runs the test's scenario; `None` without a device
/// ([`device0`]) and in the parent, which ran the scenario in a child ([`in_child_scenario`]).
pub fn device0_in_child() -> Option<&'static Device> {
    let dev = device0()?;
    in_child_scenario().then_some(dev)
}

/// [`device0_queue`] in the child process that runs the test's scenario; `None` as
/// [`device0_in_child`].
pub fn device0_queue_in_child() -> Option<(&'static Device, &'static Context, CommandQueue)> {
    device0_in_child().map(with_queue)
}

/// Devices 0 and 1 in the child process that runs the test's scenario; `None` with fewer than
/// two devices ([`have_devices`]) and in the parent, which ran the scenario in a child
/// ([`in_child_scenario`]).
pub fn two_devices_in_child() -> Option<(&'static Device, &'static Device)> {
    if !have_devices(2) || !in_child_scenario() {
        return None;
    }
    Some((
        xpu_device::device(0).expect("device 0 exists"),
        xpu_device::device(1).expect("device 1 exists"),
    ))
}

/// The first `n` bytes of `b`, read on `q` (blocking, after the work enqueued before).
pub fn read_bytes(q: &CommandQueue, b: &Buffer, n: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; n];
    q.read(b, 0, &mut bytes).unwrap();
    bytes
}

/// The first `n` `u32`s of `b`, read on `q` (blocking, after the work enqueued before).
pub fn read_u32s(q: &CommandQueue, b: &Buffer, n: usize) -> Vec<u32> {
    read_bytes(q, b, n * 4)
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// Waits until `done` holds, asking again after each `yield_now`, for at most `limit`;
/// returns whether it held. For what a driver reports asynchronously (its completion
/// callbacks, OpenCL 3.0 §5.11.4), not for ordering work.
pub fn settles(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        xpu_device::backend::wait_for_callbacks();
        std::thread::yield_now();
    }
}

/// Whether a command's status is final: complete, or terminated with an error (PoCL fails the
/// commands behind a failed wait, NVIDIA may run them).
pub fn terminal(status: xpu_device::backend::EventStatus) -> bool {
    use xpu_device::backend::EventStatus;
    matches!(status, EventStatus::Complete | EventStatus::Error(_))
}

/// Runs `f` on a thread of its own and returns its result, or `None` when it has not returned
/// within `limit` (the thread is then left blocked). The limit only gives the verdict "it
/// never returned" on a call that should return at once; it orders nothing.
pub fn within<T: Send + 'static>(
    limit: std::time::Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// Helpers of the exit tests' child processes (review h37's and h44's).
pub mod exit_child {
    use std::io::Write;
    use std::time::{SystemTime, UNIX_EPOCH};

    /// Milliseconds since the Unix epoch.
    pub fn now_ms() -> u128 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis()
    }

    /// Writes `{tag}{now_ms()}` to stderr (unbuffered) right before a child's scenario
    /// returns: the parent measures the exit from it.
    pub fn returning(tag: &str) {
        eprintln!("{tag}{}", now_ms());
        let _ = std::io::stderr().flush();
    }

    /// `n` distinct kernels `h0`..`h{n-1}` with a long straight-line body: PoCL takes a while
    /// to build them and its worker seconds to generate each one's code when it first runs.
    pub fn heavy_source(n: usize, salt: u32) -> String {
        (0..n)
            .map(|i| {
                let body: String = (0..60)
                    .map(|j| {
                        format!(
                            "    x = sin(x * {j}.25f + {salt}.0f) + cos(x - {i}.5f) * exp(x * 0.001f);\n"
                        )
                    })
                    .collect();
                format!(
                    "__kernel void h{i}(__global float *out) {{\n    float x = (float)get_global_id(0);\n{body}    out[get_global_id(0)] = x;\n}}\n"
                )
            })
            .collect()
    }
}

/// Whether `dev` is PoCL's (the CPU driver most of these tests were written on): for the
/// scenarios that exist only there (kernels compiled lazily in its workers, its freeing of
/// failed events), which other drivers skip with a message.
pub fn is_pocl(dev: &Device) -> bool {
    dev.platform()
        .name()
        .is_ok_and(|n| n.contains("Portable Computing Language"))
}

/// Skips (with a message naming the running test) unless `dev` is PoCL's; `why` says what
/// only PoCL does.
pub fn pocl_only(dev: &Device, why: &str) -> bool {
    if is_pocl(dev) {
        return true;
    }
    let name = dev.platform().name().unwrap_or_default();
    eprintln!(
        "skipping {}: {why} (PoCL only; this platform is {name:?})",
        child::test_name()
    );
    false
}

/// Whether device 0 exists and is PoCL's (see [`pocl_only`]), for the scenarios reviews
/// h73-h77 built on PoCL's order after a failed wait: the commands after it fail at once
/// while an earlier one stays gated, and `clFinish` succeeds after it. NVIDIA keeps the later
/// commands queued behind the earlier one and reports the failure from `clFinish` (an H100,
/// 2026-12-07), so those scenarios do not arise there.
pub fn needs_pocl_failure_order() -> bool {
    device0().is_some_and(|dev| {
        pocl_only(
            dev,
            "a failed wait fails the later commands at once while an earlier one stays gated, \
             and clFinish succeeds after it",
        )
    })
}

/// `finish` of a queue on which a wait failed: NVIDIA's first `clFinish` after the failure
/// returns the failure's status (-5) once, PoCL's succeeds; the next one must succeed on
/// either (a hang is the test's own verdict).
pub fn finish_after_failure(q: &CommandQueue) {
    let _ = q.finish();
    q.finish()
        .expect("a second finish after a failed wait succeeds");
}

/// A chain `e_0 -> e_1 -> ... -> e_{n-1}` of forwards (`forward_to`) between pending user
/// events of `dev`, built from its start (each cycle check searches from a fresh target).
pub fn forward_chain(dev: &Device, n: usize) -> Vec<ClEvent> {
    let mut chain = vec![dev.create_user_event().unwrap()];
    for i in 1..n {
        let e = dev.create_user_event().unwrap();
        chain[i - 1].forward_to(&e).unwrap();
        chain.push(e);
    }
    chain
}

/// Whether `r` is the refusal of a forward that would close a cycle (`CODE_FORWARD_CYCLE`).
pub fn refused_as_cycle(r: &Result<(), xpu_device::ClError>) -> bool {
    matches!(r, Err(e) if e.code == xpu_device::CODE_FORWARD_CYCLE)
}

/// Asserts that the live objects (`xpu_device::backend::live_objects`) settle back to `base`
/// within 30 s (a driver's callbacks release their references a little after the statuses
/// they set are read).
pub fn assert_live_objects_back_to(base: xpu_device::backend::LiveObjects) {
    let limit = std::time::Duration::from_secs(30);
    assert!(
        settles(limit, || xpu_device::backend::live_objects() == base),
        "live objects {:?}, expected {base:?}",
        xpu_device::backend::live_objects()
    );
}

/// A closure for `on_complete` that sends the status it got on a channel; and the receiver.
pub fn reporter() -> (
    impl FnOnce(i32) + Send + 'static,
    std::sync::mpsc::Receiver<i32>,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    (
        move |status| {
            let _ = tx.send(status);
        },
        rx,
    )
}

/// Whether `ev` reads an error status.
pub fn failed(ev: &ClEvent) -> bool {
    matches!(ev.status(), Ok(xpu_device::backend::EventStatus::Error(_)))
}

/// Polls `done` until it holds or `limit` passed (as `xpu_testing::true_within`, which this
/// crate's tests cannot use: xpu-testing is built on xpu-device).
pub fn true_within(limit: std::time::Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + limit;
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::yield_now();
    }
    false
}

/// The calling thread's id in `/proc/self/task` (as `xpu_testing::thread_state::this_tid`).
pub fn this_tid() -> String {
    let link = std::fs::read_link("/proc/thread-self").expect("/proc/thread-self");
    link.file_name().unwrap().to_string_lossy().into_owned()
}

/// Whether thread `tid` of this process sleeps in a `futex` wait (a `clFinish` blocked on
/// PoCL's condition variable; as `xpu_testing::thread_state::blocked_in_futex`).
pub fn blocked_in_futex(tid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if state != Some("S") {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) {
        Ok(sc) => {
            let nr = sc.split_whitespace().next().unwrap_or("");
            nr == "202" || nr == "98"
        }
        Err(_) => true,
    }
}

/// An ordered marker's `(status, follows_failed_wait, orders_waiters)`.
pub fn marker_reading(
    m: &xpu_device::backend::OrderedMarker,
) -> (xpu_device::backend::EventStatus, bool, bool) {
    (
        m.status().unwrap(),
        m.follows_failed_wait(),
        m.orders_waiters(),
    )
}
