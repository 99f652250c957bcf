//! In a bad fork child every entry point of the event layer, the test `Gate` included,
//! returns `EventError::BadFork` at once, without a driver call; dropping a parent's closed
//! gate there leaves its user event alone (the parent owns it). The parent's state is
//! reproduced in a fresh process that then becomes a bad fork (`simulate_bad_fork`, the flag
//! the `pthread_atfork` child handler sets: this crate may not fork). A hang is caught by the
//! bound.
mod common;

use std::time::Duration;

use xpu_event::{Event, EventError, EventFlags, Gate};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

#[test]
fn events_and_gates_refuse_in_a_bad_fork_child() {
    xpu_testing::scenario_test(
        "events_and_gates_refuse_in_a_bad_fork_child",
        "event-bad-fork",
        Duration::from_secs(30),
        "SCENARIO DONE",
        run,
    );
}

fn bad_fork<T: std::fmt::Debug>(what: &str, r: Result<T, EventError>) {
    println!("{what} = {r:?}");
    assert!(
        matches!(r, Err(EventError::BadFork)),
        "{what}: expected EventError::BadFork, got {r:?}"
    );
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

    bad_fork("Gate::new", Gate::new(0));
    bad_fork("Gate::block", gate.block(&stream));
    bad_fork("Gate::open", gate.open());
    assert!(
        !gate.is_open(),
        "a refused open must not mark the gate open"
    );
    bad_fork("Gate::open (already open)", opened.open());
    bad_fork("Event::elapsed_time", start.elapsed_time(&end));
    bad_fork("Event::query", end.query());
    bad_fork("Event::synchronize", end.synchronize());
    bad_fork("Event::wait", end.wait(&stream));
    bad_fork("Event::record", Event::new(timing).record(&stream));
    bad_fork("Event::record_current", Event::new(timing).record_current());
    assert!(EventError::BadFork.to_string().contains("spawn"));
    // Dropping the closed gate does not set the parent's user event.
    drop(gate);
    println!("SCENARIO DONE");
}
