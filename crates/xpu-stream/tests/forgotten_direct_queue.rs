//! A direct queue's guard forgotten with `std::mem::forget`: a graph capture begun on another
//! thread afterwards does not hang.
//!
//! Review h9 (a newcomer's review): a guard forgotten with `std::mem::forget` (a safe call) must not
//! hang later safe calls of other threads.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_stream::{CaptureGuard, ExternalStream, StreamError, PERMIT_DRAIN_LIMIT};

/// Hang detection only (never an ordering): a call that should return at once.
const HANG: Duration = Duration::from_secs(20);

/// A direct-enqueue permit ([`xpu_stream::DirectQueue`], from the public
/// `Stream::enqueue_queue`) holds a shared lock of the stream's capture state, and a capture's
/// beginning takes that lock exclusively to drain the permits in flight. A permit forgotten
/// with `std::mem::forget` (safe) never releases its share: `CaptureGuard::begin` on another
/// thread (which holds no permit, so it is not refused with `PermitHeld`) marks the stream
/// capturing and then waits for ever for the exclusive lock. A hang from safe calls, as the
/// forgotten place pin's leak was (2522198); the forgetting thread's own count of permits
/// (`HELD`) also stays raised, so every capture it begins later is refused.
#[test]
fn a_forgotten_direct_queue_does_not_hang_a_capture_begun_on_another_thread() {
    if !common::devices(1) {
        return;
    }
    let s = ExternalStream::new(xpu_testing::fresh_queue(0), 0)
        .unwrap()
        .leak();
    std::mem::forget(s.enqueue_queue("review").unwrap());
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let began = CaptureGuard::begin(&s).map(drop);
        let _ = tx.send(began);
    });
    let began = rx
        .recv_timeout(HANG)
        .expect("CaptureGuard::begin on another thread hangs on the forgotten permit");
    // Fixed: the capture fails after `PERMIT_DRAIN_LIMIT` with a typed error, and leaves the
    // stream as it was: not capturing, direct enqueues accepted.
    assert!(
        matches!(
            began,
            Err(StreamError::PermitNotReleased { waited_ms, .. })
                if waited_ms == PERMIT_DRAIN_LIMIT.as_millis() as u64
        ),
        "{began:?}"
    );
    assert!(!s.is_capturing());
    assert!(s.check_not_capturing("after").is_ok());
}
