//! Device checks shared by the tests of this crate (mostly the workspace's test crate).
#![allow(unused_imports)]

pub use xpu_testing::{devices, ever_true};

use xpu_event::{Event, EventError, Gate, StreamExt};
use xpu_stream::Stream;
use xpu_testing::thread_state::{blocked_in_futex, this_tid};

/// A stream on its own new queue (an external stream), so that gating it never holds back a
/// pool stream that another test running concurrently may use.
#[allow(dead_code)]
pub fn fresh_stream(device: usize) -> xpu_stream::ExternalStream {
    xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(device), device).unwrap()
}

/// `N` [`fresh_stream`]s of device 0, leaked (registered until the process exits); `None`
/// (the test is skipped) without a device ([`devices`]).
#[allow(dead_code)]
pub fn device_streams<const N: usize>() -> Option<[xpu_stream::Stream; N]> {
    devices(1).then(|| std::array::from_fn(|_| fresh_stream(0).leak()))
}

/// Asserts that `event` stays incomplete while `gate` is closed (2,000 queries), then opens
/// the gate and waits for the event.
#[allow(dead_code)]
pub fn assert_held_by(gate: &xpu_event::Gate, event: &xpu_event::Event) {
    assert!(!ever_true(2_000, || event.query().unwrap()));
    gate.open().unwrap();
    event.synchronize().unwrap();
}

/// Time a child scenario ([`in_child`]) gets before it is killed (it takes well under a
/// second).
#[allow(dead_code)]
pub const SCENARIO_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// What a child scenario prints once it ran to its end ([`in_child`]).
#[allow(dead_code)]
pub const SCENARIO_DONE: &str = "xpu-event scenario done";

/// Runs `body` as `scenario` in a child process (the calling test re-run) and asserts that
/// the child ran it to its end (exit 0, [`SCENARIO_DONE`] printed, within
/// [`SCENARIO_BOUND`]): an abort inside the driver, or a hang, fails the test instead of the
/// suite. Skipped (in the parent) without `devices` devices.
#[allow(dead_code)]
pub fn in_child(scenario: &str, devices: usize, body: fn()) {
    if xpu_testing::scenario().is_some() {
        body();
        println!("{SCENARIO_DONE}");
        return;
    }
    let test = xpu_testing::child::test_name();
    if xpu_testing::have_devices(devices, &test) {
        xpu_testing::assert_scenario_done(&test, scenario, SCENARIO_BOUND, SCENARIO_DONE);
    }
}

/// A fresh user event of device 0 adopted on a stream of its own: what a stream can be made
/// to wait on, then failed. Returns the adopted event and its user event.
#[allow(dead_code)]
pub fn failable() -> (xpu_event::Event, xpu_device::backend::ClEvent) {
    let other = fresh_stream(0).leak();
    let user = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let adopted =
        xpu_event::Event::from_cl_event(user.clone(), &other, xpu_event::EventFlags::default())
            .unwrap();
    (adopted, user)
}

/// Makes `s` wait on a fresh user event ([`failable`]) and fails it (-5): a failed wait of
/// `s`, not yet handled.
#[allow(dead_code)]
pub fn fail_a_wait(s: &xpu_stream::Stream) {
    let (adopted, user) = failable();
    s.wait_event(&adopted).unwrap();
    user.set_failed(-5).unwrap();
}

/// [`fail_a_wait`] on `s`, then a closed gate on `s` and an event recorded behind it: a
/// point still queued after a failed wait (PoCL fails its marker at once, NVIDIA keeps it
/// queued behind the gate).
#[allow(dead_code)]
pub fn gated_event_after_a_failed_wait(s: &xpu_stream::Stream) -> (Gate, Event) {
    fail_a_wait(s);
    let gate = Gate::new(0).unwrap();
    gate.block(s).unwrap();
    let e = s.record_event().unwrap();
    (gate, e)
}

/// Synchronizes `s` after a failed wait of it: PoCL's `clFinish` succeeds (`Ok`, required
/// there); NVIDIA's reports the failed commands once (an error), and the stream is drained
/// all the same (`CommandQueue::finish` called `clFinish` again): what the caller asserts
/// next holds on both.
#[allow(dead_code)]
pub fn synchronize_after_failure(s: &xpu_stream::Stream) {
    reported_at_most_once(s.synchronize());
}

/// What a stream synchronize after a failed wait returned ([`synchronize_after_failure`]):
/// `Ok` required on PoCL, NVIDIA's one report taken.
#[allow(dead_code)]
pub fn reported_at_most_once(r: Result<(), xpu_stream::StreamError>) {
    if let Err(e) = r {
        assert!(
            !is_pocl(),
            "PoCL's synchronize after a failed wait failed: {e}"
        );
        eprintln!("the synchronize reported the failed wait once: {e}");
    }
}

/// Whether device 0 is PoCL's (the driver most of these tests were written on).
#[allow(dead_code)]
pub fn is_pocl() -> bool {
    xpu_device::device(0).is_ok_and(|d| {
        d.platform()
            .name()
            .unwrap_or_default()
            .contains("Portable Computing Language")
    })
}

/// [`is_pocl`], or a skip message naming the running test and `why` (false): for a scenario
/// that exists only in PoCL's ways.
#[allow(dead_code)]
pub fn pocl_only(why: &str) -> bool {
    if is_pocl() {
        return true;
    }
    eprintln!(
        "skipping {}: {why} (PoCL only)",
        xpu_testing::child::test_name()
    );
    false
}

/// Review h90's scenes (pending_event_after_a_failed_wait.rs and
/// pending_event_after_a_failed_wait_probes.rs): the bound on a wait that
/// should end (it takes milliseconds).
#[allow(dead_code)]
pub const H90_LIMIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Spawns `s.synchronize()` on a thread and returns once that thread is blocked in it.
#[allow(dead_code)]
pub fn blocked_synchronize(
    s: Stream,
) -> std::thread::JoinHandle<Result<(), xpu_stream::StreamError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        s.synchronize()
    });
    let tid = rx.recv().unwrap();
    assert!(
        xpu_testing::true_within(H90_LIMIT, || blocked_in_futex(&tid)
            && blocked_in_futex(&tid)),
        "the synchronizing thread never blocked"
    );
    handle
}

/// The scenario of finding 1 and of its control: `s` gated by `g1`; a wait of `s` on a user
/// event that fails; thread B's `s.synchronize()` blocks behind `g1`; then `s` is gated by
/// `g2` and `e` recorded (after B's `clFinish` began). With `query_while_pending`, `e.query()`
/// is asked once now (pending: `Err(-14)` since 74df074). Then `g1` and `g2` open; B returns
/// `Ok` (PoCL); `e` has completed. Returns `e.query()` and `e.synchronize()` then.
#[allow(dead_code)]
pub fn covered_by_a_synchronize_begun_before_the_record(
    query_while_pending: bool,
) -> (Result<bool, EventError>, Result<(), EventError>, String) {
    let s = fresh_stream(0).leak();
    let g1 = Gate::new(0).unwrap();
    g1.block(&s).unwrap();
    fail_a_wait(&s);
    let b = blocked_synchronize(s);
    let g2 = Gate::new(0).unwrap();
    g2.block(&s).unwrap();
    let e = s.record_event().unwrap();
    let pending = if query_while_pending {
        format!("{:?}", e.query())
    } else {
        String::from("not asked")
    };
    g1.open().unwrap();
    g2.open().unwrap();
    let synced = b.join().unwrap();
    assert!(synced.is_ok(), "PoCL's clFinish succeeds: {synced:?}");
    // The marker is over (`clFinish` waits for the whole queue on PoCL).
    (query_once_over(&e), e.synchronize(), pending)
}

/// `e.query()` polled while it reads `Ok(false)` (bounded: the scene's work is over, only
/// a driver's status may lag): its first other answer. Safe code only (no `unsafe` outside
/// xpu-device, tests included), so the marker's own status is not read.
#[allow(dead_code)]
pub fn query_once_over(e: &Event) -> Result<bool, EventError> {
    let mut last = e.query();
    xpu_testing::true_within(H90_LIMIT, || {
        last = e.query();
        !matches!(last, Ok(false))
    });
    last
}

/// Builds failing_finish_layer/finish_layer.c (an OpenCL loader layer, see its comment) and sets
/// `OPENCL_LAYERS` and `H90_FAIL_FINISH_FLAG` for the child scenarios this test process
/// re-runs. The flag file is made by the child when its scenario wants one failed
/// `clFinish` that returns at once.
#[allow(dead_code)]
pub fn with_failing_finish_layer() {
    if xpu_testing::scenario().is_some() {
        return;
    }
    // Read at run time: an archive run on another machine has its sources elsewhere.
    let target_tmp = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = if target_tmp.is_dir() {
        target_tmp.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let so = dir.join(format!("h90_finish_layer_{}.so", std::process::id()));
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(
        || env!("CARGO_MANIFEST_DIR").into(),
        std::path::PathBuf::from,
    );
    let src = manifest.join("tests/failing_finish_layer/finish_layer.c");
    let built = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&so)
        .arg(&src)
        .status()
        .expect("cc");
    assert!(built.success(), "the layer did not build");
    std::env::set_var("OPENCL_LAYERS", &so);
    std::env::set_var(
        "H90_FAIL_FINISH_FLAG",
        dir.join(format!("h90_fail_finish_{}", std::process::id())),
    );
}

/// Makes the next `clFinish` of the process return -5 at once (the layer consumes the file).
#[allow(dead_code)]
pub fn fail_next_finish() -> std::path::PathBuf {
    let flag = std::path::PathBuf::from(std::env::var_os("H90_FAIL_FINISH_FLAG").unwrap());
    std::fs::write(&flag, b"").unwrap();
    flag
}
