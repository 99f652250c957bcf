//! `relocation:merge` over real OpenCL buffers (PoCL in CI): a moved block keeps its bytes
//! (the copy runs on its allocation stream, in order), a command on another stream through a
//! moved block waits for the copy (a user-event gate holds the allocation stream, so the
//! order is deterministic: no sleeps), and a block held by a live view does not move.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use common::relocation::{
    allocated_at, copy_on_t_behind_the_gated_move, holds, layout, relocating_core, write,
};
use common::{device_streams, MIB};
use xpu_alloc::ClStream;
use xpu_event::Gate;

#[test]
fn a_moved_block_keeps_its_bytes() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, rest) = layout(&core, &sr, Some(&s));
    let q_before = allocated_at(&core, 2);
    // 8 MiB fits no free block: q moves into B's free tail and its old run serves the request.
    let big = core.allocate(8 * MIB, &sr).unwrap();
    let moved = core.relocation_stats();
    assert_eq!((moved.moves, moved.moved_bytes), (1, 2 * MIB));
    assert_eq!(core.memory_stats().num_device_alloc, 2);
    assert_ne!(allocated_at(&core, 2), q_before, "q moved");
    // The new owner of q's old bytes writes them; q, read at its new place, is intact.
    write(&big, &s, 9);
    assert!(holds(&q, &s, 1), "q at its new place");
    for (seed, ptr) in rest.iter().enumerate() {
        assert!(holds(ptr, &s, u8::try_from(seed).unwrap() + 2));
    }
    assert!(holds(&big, &s, 9));
}

#[test]
fn a_block_held_by_a_view_does_not_move() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, rest) = layout(&core, &sr, Some(&s));
    let q_before = allocated_at(&core, 2);
    let view = q.view().unwrap();
    let big = core.allocate(8 * MIB, &sr).unwrap();
    // The next cheapest run (r's free 6 MiB and x) was cleared instead: x moved.
    assert_eq!(core.relocation_stats().moved_bytes, 6 * MIB);
    assert_eq!(allocated_at(&core, 2), q_before);
    drop(view);
    write(&big, &s, 9);
    assert!(holds(&q, &s, 1));
    assert!(holds(&rest[0], &s, 2), "x at its new place");
}

/// The move's copy is enqueued on the allocation stream S behind a closed gate. A copy from
/// the moved block on another stream T then waits for it: an event recorded on T after that
/// copy stays incomplete until the gate opens, and the bytes copied are the block's. Without
/// the wait, T's copy would read the new place before the move's copy filled it.
#[test]
fn a_command_on_another_stream_waits_for_the_move_s_copy() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let (sr, tr) = (ClStream::shared(s), ClStream::shared(t));
    let core = relocating_core();
    let (q, _rest) = layout(&core, &sr, Some(&s));
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    let out = copy_on_t_behind_the_gated_move(&core, &q, (&t, &tr), &gate);
    assert!(holds(&out, &t, 1), "T copied the moved block's bytes");
    drop(big);
}
