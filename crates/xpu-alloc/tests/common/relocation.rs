//! Helpers of the relocation tests (`relocation*.rs`): the clearing layout, byte patterns,
//! and where blocks sit.

use xpu_alloc::{
    AllocConfig, BlockState, BufferSource, DataPtr, DeviceCore, StreamRef, TraceAction, TraceEntry,
};
use xpu_event::{Event, Gate, StreamExt};
use xpu_stream::Stream;

use super::MIB;

/// Bytes that differ at every position for each seed (a copy from a wrong offset reads
/// back different).
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let i = u32::try_from(i).expect("test sizes fit u32");
            (i.wrapping_mul(0x9E37_79B1).rotate_right(13) as u8) ^ seed
        })
        .collect()
}

/// A relocating allocator over device 0's buffers.
pub fn relocating_core() -> DeviceCore {
    DeviceCore::new(
        Box::new(BufferSource::new(0).expect("buffer source")),
        AllocConfig::parse("relocation:merge").expect("config"),
    )
}

/// Writes the pattern of `seed` over the whole of `ptr` on `stream` (blocking).
pub fn write(ptr: &DataPtr, stream: &Stream, seed: u8) {
    let data = pattern(seed, usize::try_from(ptr.size()).unwrap());
    ptr.view().unwrap().write(stream, 0, &data).unwrap();
}

/// The bytes of `ptr`, read on `stream` (blocking).
pub fn read(ptr: &DataPtr, stream: &Stream) -> Vec<u8> {
    let mut out = vec![0; usize::try_from(ptr.size()).unwrap()];
    ptr.view().unwrap().read(stream, 0, &mut out).unwrap();
    out
}

/// Whether `ptr` holds the pattern of `seed` (compared here: a mismatch would print
/// megabytes).
pub fn holds(ptr: &DataPtr, stream: &Stream, seed: u8) -> bool {
    let got = read(ptr, stream);
    got == pattern(seed, got.len())
}

/// The addresses of the allocated blocks of `mib` MiB (a snapshot fixes no block's place).
pub fn allocated_at(core: &DeviceCore, mib: u64) -> Vec<u64> {
    core.snapshot()
        .iter()
        .flat_map(|seg| &seg.blocks)
        .filter(|b| b.size == mib * MIB && b.state == BlockState::Allocated)
        .map(|b| b.address)
        .collect()
}

/// The clearing layout on `sr`: segment A (20 MiB) holds p 6, q 2, r 6 and x 6 MiB, segment
/// B y 6 and z 8 MiB (a 6 MiB free tail). With `patterns`, q, x, y and z get the patterns of
/// seeds 1-4 on that stream. Returns (q, [x, y, z]) after p and r were freed: an 8 MiB
/// request then moves q into B's tail and takes q's old run.
pub fn layout(
    core: &DeviceCore,
    sr: &StreamRef,
    patterns: Option<&Stream>,
) -> (DataPtr, [DataPtr; 3]) {
    let a = |mib: u64| core.allocate(mib * MIB, sr).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    if let Some(s) = patterns {
        for (seed, ptr) in [&q, &x, &y, &z].into_iter().enumerate() {
            write(ptr, s, u8::try_from(seed).unwrap() + 1);
        }
    }
    drop((p, r));
    (q, [x, y, z])
}

/// Checks that `entries` (a history recorded from its start) are a consistent trace: no
/// `alloc` or `move_to` overlaps a block live in it; a `move_from` names a live block and is
/// followed at once by its `move_to` (same size); a `free_requested` names a live block and
/// a `free_completed` a requested one; nothing is live or requested at the end when
/// `all_freed`. The first violation, described.
pub fn check_history(entries: &[TraceEntry], all_freed: bool) -> Result<(), String> {
    let mut live: Vec<(u64, u64)> = Vec::new(); // (addr, size) allocated, not yet requested free
    let mut requested: Vec<u64> = Vec::new();
    let overlapping = |live: &[(u64, u64)], e: &TraceEntry| {
        live.iter()
            .find(|&&(a, n)| e.addr < a + n && a < e.addr + e.size)
            .copied()
    };
    let mut moving: Option<u64> = None; // the size of the block between its two move entries
    for (i, e) in entries.iter().enumerate() {
        let at = |what: &str| format!("entry {i} ({e:?}): {what}");
        if moving.is_some() && e.action != TraceAction::MoveTo {
            return Err(at("a move_from without its move_to"));
        }
        match e.action {
            TraceAction::Alloc | TraceAction::MoveTo => {
                if e.action == TraceAction::MoveTo && moving.take() != Some(e.size) {
                    return Err(at("a move_to without its move_from"));
                }
                if let Some((a, n)) = overlapping(&live, e) {
                    return Err(at(&format!("overlaps the live block {a:#x} of {n} B")));
                }
                live.push((e.addr, e.size));
            }
            TraceAction::MoveFrom | TraceAction::FreeRequested => {
                let Some(k) = live.iter().position(|&(a, n)| (a, n) == (e.addr, e.size)) else {
                    return Err(at("no live block there"));
                };
                live.remove(k);
                if e.action == TraceAction::MoveFrom {
                    moving = Some(e.size);
                } else {
                    requested.push(e.addr);
                }
            }
            TraceAction::FreeCompleted => {
                let Some(k) = requested.iter().position(|&a| a == e.addr) else {
                    return Err(at("never requested"));
                };
                requested.remove(k);
            }
            _ => {}
        }
    }
    if all_freed && !(live.is_empty() && requested.is_empty() && moving.is_none()) {
        return Err(format!(
            "left at the end: live {live:x?}, requested {requested:x?}"
        ));
    }
    Ok(())
}

/// The race of a vacated place's new owner against the move that vacated it. The allocation
/// stream `s` is held by `gate`, behind which the copy of `moved` (pattern 1) still reads the
/// place that `owner` now has; `t` is ordered after `s` only by `ready`, an event from before
/// the move. A fill of `owner` with `byte` on `t` must wait for that copy; once the gate
/// opens, `moved` keeps its bytes and `owner` holds the fill. `what` names the fill in the
/// messages.
pub fn a_fill_on_t_waits_for_the_gated_copy(
    (owner, moved): (&DataPtr, &DataPtr),
    (s, t): (&Stream, &Stream),
    ready: &Event,
    gate: &Gate,
    byte: u8,
    what: &str,
) {
    t.wait_event(ready).expect("wait");
    let len = usize::try_from(owner.size()).unwrap();
    owner
        .view()
        .unwrap()
        .fill(t, &[byte], 0, len)
        .expect("fill");
    let filled = t.record_event().expect("event");
    // A fill that did not wait for the copy completes at once (a few MiB on the device);
    // one that waits completes only after the gate opens. The bound detects the first
    // (it orders nothing): with the wait removed, the fill completes well within it.
    std::thread::scope(|scope| {
        let (tx, rx) = std::sync::mpsc::channel();
        let filled = &filled;
        let waiter = scope.spawn(move || {
            let done = filled.synchronize();
            let _ = tx.send(());
            done
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(500))
                .is_err(),
            "the fill on T completed with the gate closed: it did not wait for the gated copy"
        );
        gate.open().expect("open");
        waiter.join().expect("waiter").expect("synchronize");
    });
    s.synchronize().expect("synchronize");
    assert!(
        holds(moved, s, 1),
        "the moved block q lost its bytes to {what} on T"
    );
    let mut out = vec![0u8; len];
    owner.view().unwrap().read(t, 0, &mut out).expect("read");
    assert!(
        out.iter().all(|&b| b == byte),
        "{what}: the new owner holds the fill"
    );
}

/// Copies `moved` (a block that a relocation moved behind a copy on `s` held by `gate`) into
/// a new block of `core` on `t`, checks that the copy on `t` waits for the gated move, opens
/// the gate and returns the copy once it is over.
pub fn copy_on_t_behind_the_gated_move(
    core: &DeviceCore,
    moved: &DataPtr,
    (t, tr): (&Stream, &StreamRef),
    gate: &Gate,
) -> DataPtr {
    let out = core.allocate(moved.size(), tr).unwrap();
    let len = usize::try_from(moved.size()).unwrap();
    out.view()
        .unwrap()
        .copy_from(t, &moved.view().unwrap(), 0, 0, len)
        .unwrap();
    let after = t.record_event().expect("event");
    assert!(
        !after.query().expect("query"),
        "T waits for the move's copy"
    );
    gate.open().expect("open");
    after.synchronize().expect("synchronize");
    out
}
