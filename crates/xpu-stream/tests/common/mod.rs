//! Device checks shared by the tests of this crate: those of the workspace's test crate.
#![allow(dead_code)]

pub use xpu_testing::devices;

/// Synchronizes (`sync`) after a command failed through its wait list: NVIDIA's `clFinish`
/// returns the failure once (as `CommandQueue::finish` documents; seen on an H100), and once
/// more per batch of commands that failed since (queries polling on other threads enqueue
/// markers that fail with it: review h52's pollers saw a second -5 on an H100, 2026-12-06);
/// PoCL's succeeds. Within 20 tries one must succeed.
pub fn synchronize_after_failure(sync: impl Fn() -> Result<(), xpu_stream::StreamError>) {
    let mut last = sync();
    for _ in 0..20 {
        if last.is_ok() {
            return;
        }
        last = sync();
    }
    last.unwrap();
}

/// The bound of a wait that should end at once: only "it never ended" is judged by it.
pub const BOUND: std::time::Duration = std::time::Duration::from_secs(60);

/// How long a polling loop over a stream that should answer `true` is given.
pub const POLL: std::time::Duration = std::time::Duration::from_secs(10);

/// Spawns `sync` on a thread and returns once that thread is blocked (inside it), with its
/// handle. `sync` must block until a gate opens.
pub fn blocked_synchronize<F>(
    sync: F,
) -> std::thread::JoinHandle<Result<(), xpu_stream::StreamError>>
where
    F: FnOnce() -> Result<(), xpu_stream::StreamError> + Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        tx.send(xpu_testing::thread_state::this_tid()).unwrap();
        sync()
    });
    let tid = rx.recv().unwrap();
    // Two readings in a row: the thread is parked, not passing through a lock.
    assert!(
        xpu_testing::true_within(BOUND, || xpu_testing::thread_state::blocked_in_futex(&tid)
            && xpu_testing::thread_state::blocked_in_futex(&tid)),
        "the synchronizing thread never blocked"
    );
    handle
}

/// A pool stream of `device`, synchronized, whose queue holds a barrier on a user event set
/// failed (-5), and a query that reported it.
pub fn failed_pool_stream_of(device: usize) -> xpu_stream::Stream {
    let dev = xpu_device::device(device).unwrap();
    let s = xpu_stream::get_stream_from_pool(0, device).unwrap();
    s.synchronize().unwrap();
    let q = s.queue().unwrap();
    let g = dev.create_user_event().unwrap();
    drop(q.enqueue_barrier(&[&g]).unwrap());
    g.set_failed(-5).unwrap();
    assert!(
        xpu_testing::true_within(BOUND, || s.query().is_err()),
        "a query reports the failed wait"
    );
    s
}

/// Polls `s.query()` for `Ok(true)` up to [`POLL`]: whether it came, the last answer, and the
/// markers the polls enqueued.
pub fn polls_true(s: &xpu_stream::Stream) -> (bool, String, u64) {
    let m0 = xpu_device::backend::markers_enqueued_on_this_thread();
    let mut last = String::new();
    let ok = xpu_testing::true_within(POLL, || {
        let r = s.query();
        last = format!("{r:?}");
        matches!(r, Ok(true))
    });
    (
        ok,
        last,
        xpu_device::backend::markers_enqueued_on_this_thread() - m0,
    )
}

/// An external stream over a queue of its own on device 0 (its own wait log and query marker:
/// no other test shares it).
pub fn own_stream() -> (xpu_stream::ExternalStream, xpu_stream::Stream) {
    let dev = xpu_device::device(0).unwrap();
    let q = dev
        .create_queue(xpu_device::backend::QueueOptions {
            profiling: true,
            priority: None,
        })
        .unwrap();
    let ext = xpu_stream::ExternalStream::new(q, 0).unwrap();
    let s = ext.stream();
    (ext, s)
}
