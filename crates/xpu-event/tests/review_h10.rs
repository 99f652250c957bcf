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
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    std::mem::forget(gate);
    let event = s.record_event().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(event.synchronize().map_err(|e| e.to_string()));
    });
    let outcome = rx.recv_timeout(Duration::from_secs(20));
    assert!(
        outcome.is_ok(),
        "a safe sequence (Gate::block, mem::forget of the gate, Event::synchronize) hangs: \
         no answer after 20 s"
    );
}
