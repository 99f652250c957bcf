//! In a bad fork child every entry point of the event layer, the test `Gate` included,
//! returns `EventError::BadFork` at once, without a driver call; dropping a parent's closed
//! gate there leaves its user event alone (the parent owns it). The parent's state is
//! reproduced in a fresh process that then becomes a bad fork (`simulate_bad_fork`, the flag
//! the `pthread_atfork` child handler sets: this crate may not fork). A hang is caught by the
//! bound.
mod common;

use xpu_event::{Event, EventError, EventFlags, Gate};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};
use xpu_testing::bad_fork::{assert_bad_fork, bad_fork_test, done};

#[test]
fn events_and_gates_refuse_in_a_bad_fork_child() {
    bad_fork_test("event-bad-fork", run);
}

fn run() {
    let stream = get_stream_from_pool(PRIORITY_NORMAL, 0).expect("stream");
    let timing = EventFlags {
        enable_timing: true,
        ..EventFlags::default()
    };
    let mut start = Event::new(timing);
    let mut end = Event::new(timing);
    start.record(&stream).expect("record");
    end.record(&stream).expect("record");
    stream.synchronize().expect("synchronize");
    let gate = Gate::new(0).expect("gate");
    let opened = Gate::new(0).expect("gate");
    opened.open().expect("open");

    xpu_device::fork::simulate_bad_fork();

    assert_bad_fork("Gate::new", Gate::new(0));
    assert_bad_fork("Gate::block", gate.block(&stream));
    assert_bad_fork("Gate::open", gate.open());
    assert!(
        !gate.is_open(),
        "a refused open must not mark the gate open"
    );
    assert_bad_fork("Gate::open (already open)", opened.open());
    assert_bad_fork("Event::elapsed_time", start.elapsed_time(&end));
    assert_bad_fork("Event::query", end.query());
    assert_bad_fork("Event::synchronize", end.synchronize());
    assert_bad_fork("Event::wait", end.wait(&stream));
    assert_bad_fork("Event::record", Event::new(timing).record(&stream));
    assert_bad_fork("Event::record_current", Event::new(timing).record_current());
    assert!(EventError::BadFork.to_string().contains("spawn"));
    // Dropping the closed gate does not set the parent's user event.
    drop(gate);
    done();
}
