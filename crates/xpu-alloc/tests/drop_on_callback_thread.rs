//! No `Drop` waits for device work on the runtime's completion-callback thread
//! (`xpu-callbacks`): a private allocator's last block dropped inside a completion callback
//! hands the teardown of its stream's cached segments (which waits for the stream's work)
//! elsewhere, so later callbacks still run while that stream is held back by a gate.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.
mod common;

use std::sync::mpsc;
use std::sync::Mutex;
use std::time::Duration;

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_event::Gate;

#[test]
fn the_last_block_of_a_dropped_allocator_freed_in_a_completion_callback_does_not_block_later_callbacks(
) {
    let Some(s) = common::device_stream() else {
        return;
    };
    let device = xpu_device::device(0).unwrap();
    // A private allocator, dropped while its one block lives on: the block holds the stream's
    // shard, whose teardown (waiting for the stream's work, then releasing its segments)
    // runs when the block is freed.
    let alloc = DeviceAllocator::new(0, AllocConfig::parse("").unwrap()).unwrap();
    let block = alloc.allocate(1 << 20, &s).unwrap();
    drop(alloc);
    // The stream's work is held back until the gate opens.
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();

    // The first callback frees the block on the callback thread.
    let first = device.create_user_event().unwrap();
    let block = Mutex::new(Some(block));
    let (freed_tx, freed_rx) = mpsc::channel::<()>();
    first
        .on_complete(move |_| {
            drop(block.lock().unwrap().take());
            let _ = freed_tx.send(());
        })
        .unwrap();
    // A later callback only reports that it ran.
    let second = device.create_user_event().unwrap();
    let (ran_tx, ran_rx) = mpsc::channel::<()>();
    second
        .on_complete(move |_| {
            let _ = ran_tx.send(());
        })
        .unwrap();
    first.set_complete().unwrap();
    second.set_complete().unwrap();

    // The bound only turns a hang into a failure: with the gate closed, a teardown waiting
    // on the callback thread never lets either report arrive.
    let freed = freed_rx.recv_timeout(Duration::from_secs(20));
    let ran = ran_rx.recv_timeout(Duration::from_secs(5));
    println!("with the stream held: first callback returned {freed:?}, second ran {ran:?}");
    gate.open().unwrap();
    assert!(
        freed.is_ok() && ran.is_ok(),
        "the block's drop waited for the gated stream on the xpu-callbacks thread"
    );
    s.synchronize().unwrap();
    xpu_device::backend::wait_for_callbacks();
}
