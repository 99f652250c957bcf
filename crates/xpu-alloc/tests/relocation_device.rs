//! `relocation:merge` over real OpenCL buffers (PoCL in CI): a moved block keeps its bytes
//! (the copy runs on its allocation stream, in order), a command on another stream through a
//! moved block waits for the copy (a user-event gate holds the allocation stream, so the
//! order is deterministic: no sleeps), and a block held by a live view does not move.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use common::{device_streams, MIB};
use xpu_alloc::{AllocConfig, BlockState, BufferSource, ClStream, DataPtr, DeviceCore, StreamRef};
use xpu_event::{Gate, StreamExt};
use xpu_stream::Stream;

/// Bytes that differ at every position for each seed (a copy from a wrong offset reads
/// back different).
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let i = u32::try_from(i).expect("test sizes fit u32");
            (i.wrapping_mul(0x9E37_79B1).rotate_right(13) as u8) ^ seed
        })
        .collect()
}

/// A relocating allocator over device 0's buffers.
fn relocating_core() -> DeviceCore {
    DeviceCore::new(
        Box::new(BufferSource::new(0).expect("buffer source")),
        AllocConfig::parse("relocation:merge").expect("config"),
    )
}

fn write(ptr: &DataPtr, stream: &Stream, seed: u8) {
    let data = pattern(seed, usize::try_from(ptr.size()).unwrap());
    ptr.view().unwrap().write(stream, 0, &data).unwrap();
}

fn read(ptr: &DataPtr, stream: &Stream) -> Vec<u8> {
    let mut out = vec![0; usize::try_from(ptr.size()).unwrap()];
    ptr.view().unwrap().read(stream, 0, &mut out).unwrap();
    out
}

/// Whether `ptr` holds the pattern of `seed` (compared here: a mismatch would print
/// megabytes).
fn holds(ptr: &DataPtr, stream: &Stream, seed: u8) -> bool {
    let got = read(ptr, stream);
    got == pattern(seed, got.len())
}

/// The addresses of the allocated blocks of `mib` MiB (a snapshot fixes no block's place).
fn allocated_at(core: &DeviceCore, mib: u64) -> Vec<u64> {
    core.snapshot()
        .iter()
        .flat_map(|seg| &seg.blocks)
        .filter(|b| b.size == mib * MIB && b.state == BlockState::Allocated)
        .map(|b| b.address)
        .collect()
}

/// The clearing layout of `relocation.rs` on `stream`: segment A (20 MiB) holds p 6, q 2,
/// r 6 and x 6 MiB, segment B y 6 and z 8 MiB (a 6 MiB free tail); every block holds its own
/// pattern. Returns (q, [x, y, z]) after p and r were freed.
fn layout(core: &DeviceCore, s: &Stream, sr: &StreamRef) -> (DataPtr, [DataPtr; 3]) {
    let a = |mib: u64| core.allocate(mib * MIB, sr).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    for (seed, ptr) in [&q, &x, &y, &z].into_iter().enumerate() {
        write(ptr, s, u8::try_from(seed).unwrap() + 1);
    }
    drop((p, r));
    (q, [x, y, z])
}

#[test]
fn a_moved_block_keeps_its_bytes() {
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, rest) = layout(&core, &s, &sr);
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
    let (q, rest) = layout(&core, &s, &sr);
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
    let (q, _rest) = layout(&core, &s, &sr);
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(core.relocation_stats().moves, 1);
    let out = core.allocate(2 * MIB, &tr).unwrap();
    let len = usize::try_from(2 * MIB).unwrap();
    out.view()
        .unwrap()
        .copy_from(&t, &q.view().unwrap(), 0, 0, len)
        .unwrap();
    let after = t.record_event().expect("event");
    assert!(
        !after.query().expect("query"),
        "T waits for the move's copy"
    );
    gate.open().expect("open");
    after.synchronize().expect("synchronize");
    assert!(holds(&out, &t, 1), "T copied the moved block's bytes");
    drop(big);
}
