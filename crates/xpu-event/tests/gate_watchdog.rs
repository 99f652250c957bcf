//! A `Gate`'s watchdog: a gate forgotten (`mem::forget`) or never opened by the thread that
//! synchronizes its stream is opened at its open limit, so no stream stays blocked for ever.
//!
//! Review h10: defects found by breaking the runtime through safe calls (each test fails on
//! the code it was written against). Real OpenCL (PoCL in CI).

mod common;

use std::sync::mpsc;
use std::time::Duration;

use xpu_event::{Gate, StreamExt};

/// A `Gate` opens itself on drop "so a failing test never leaves a queue blocked forever";
/// `std::mem::forget` (safe) skips that drop, and the user event behind it is never set nor
/// failed (its unset guard lives in the forgotten `Arc`): every later `synchronize` of the
/// blocked stream (or an event / host access waiting on its work) hangs for ever.
#[test]
fn a_forgotten_gate_does_not_block_its_stream_for_ever() {
    let Some([s]) = common::device_streams::<1>() else {
        return;
    };
    // Fixed: a gate's watchdog opens it at its limit (here 1 s instead of GATE_OPEN_LIMIT).
    let gate = Gate::with_open_limit(0, Duration::from_secs(1)).unwrap();
    gate.block(&s).unwrap();
    std::mem::forget(gate);
    let event = s.record_event().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(event.synchronize().map_err(|e| e.to_string()));
    });
    let outcome = rx.recv_timeout(Duration::from_secs(20));
    assert_eq!(
        outcome,
        Ok(Ok(())),
        "a safe sequence (Gate::block, mem::forget of the gate, Event::synchronize) hangs: \
         no answer after 20 s"
    );
}

/// The same thread blocks a stream and synchronizes it before opening the gate (the docs'
/// "never do this"): the watchdog opens the gate at its limit, and the synchronize returns.
#[test]
fn a_blocked_stream_synchronized_before_its_gate_opens_returns_at_the_limit() {
    let Some([s]) = common::device_streams::<1>() else {
        return;
    };
    let gate = Gate::with_open_limit(0, Duration::from_secs(1)).unwrap();
    gate.block(&s).unwrap();
    s.synchronize().unwrap();
    assert!(gate.is_open(), "opened by the watchdog");
}
