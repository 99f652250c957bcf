//! Relocation: observing a moved block's place (copies through a delegating `DeviceMemory`, pinned
//! copies, uploads into the vacated place) is ordered after the move's copy without a host wait.
//!
//! Review h14 of "relocation: observing a moved block's place never waits on the host where
//! the command's stream is known" (7f354a5), by a helper with fresh eyes: attempts to break
//! it through safe calls only. Device tests run on PoCL:
//! `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`. Each test says whether it found a
//! defect (it failed until the fix, and now guards it) or probes a risk found sound.
//!
//! The scene of most tests (`common::relocation::layout`): q (2 MiB, pattern 1) on stream S;
//! S is held by a user-event gate; an 8 MiB request on S moves q (its copy, on S behind the
//! gate, reads q's old place A and writes the new place B) and takes A ("big"). Another
//! stream T is not gated: a command on T that is not ordered after the move's copy runs at
//! once, while the gate is closed.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::relocation::{holds, layout, pattern, read, relocating_core, write};
use common::{device_streams, MIB};
use xpu_alloc::{ClStream, DataPtr, DeviceMemory, DeviceRegion, HostCopy, HostPtr};
use xpu_event::{Event, Gate, StreamExt};
use xpu_stream::Stream;

/// Whether `done` (an event recorded on an ungated stream after a command) stays incomplete
/// for `limit` while `gate` is closed; the gate is opened afterwards and `done` waited for.
/// A command that was not ordered after the gated copy completes well within the limit (a
/// few MiB on the device); the limit only detects that, it orders nothing.
fn waits_for_gate(done: &Event, gate: &Gate, limit: Duration) -> bool {
    std::thread::scope(|scope| {
        let (tx, rx) = mpsc::channel();
        let waiter = scope.spawn(move || {
            let r = done.synchronize();
            let _ = tx.send(());
            r
        });
        let waited = rx.recv_timeout(limit).is_err();
        gate.open().expect("open");
        waiter.join().expect("waiter").expect("synchronize");
        waited
    })
}

/// Runs `issue` (commands on ungated streams, then an event recorded after them) on another
/// thread; returns whether it returned within 10 s (a host wait behind `gate` would not), and
/// whether its event then stayed incomplete for 500 ms with the gate closed
/// ([`waits_for_gate`]). The gate is opened either way.
fn issued_without_host_wait_and_ordered(
    gate: &Gate,
    issue: impl FnOnce() -> Event + Send,
) -> (bool, bool) {
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let h = scope.spawn(move || {
            let done = issue();
            let _ = tx.send(());
            done
        });
        if rx.recv_timeout(Duration::from_secs(10)).is_err() {
            gate.open().expect("open");
            drop(h.join());
            return (false, false);
        }
        let done = h.join().expect("no panic");
        (
            true,
            waits_for_gate(&done, gate, Duration::from_millis(500)),
        )
    })
}

/// A tensor-like type that lends its block to pinned copies by delegating
/// `DeviceMemory::device_region` to its `DataPtr`, and keeps `record_use`'s provided default
/// (a safe, natural impl: the trait's docs describe `record_use` as noting a use for the
/// block's reuse).
struct Tensor<'a>(&'a DataPtr);

impl DeviceMemory for Tensor<'_> {
    fn device_region(&self) -> Option<DeviceRegion<'_>> {
        self.0.device_region()
    }
}

/// The layout with S gated and q moved (its copy pending behind the gate). Returns
/// (q, rest, big, gate).
fn moved_behind_gate(
    core: &xpu_alloc::DeviceCore,
    s: Stream,
) -> (DataPtr, [DataPtr; 3], DataPtr, Gate) {
    let sr = ClStream::shared(s);
    let (q, rest) = layout(core, &sr, Some(&s));
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    let before = core.relocation_stats().moves;
    let big = core.allocate(8 * MIB, &sr).unwrap();
    assert_eq!(
        core.relocation_stats().moves,
        before + 1,
        "the request moved q"
    );
    (q, rest, big, gate)
}

fn host_with(seed: u8, len: usize) -> HostPtr {
    let mut h = xpu_alloc::host_allocate_on(0, len).unwrap();
    h.copy_from_slice(&pattern(seed, len));
    h
}

/// DEFECT, fixed (failed 6 of 6 before the region carried its lender; a regression of
/// 7f354a5). `DataPtr::device_region` no longer waits
/// for the relocation copies that may still use the block's bytes: the ordering moved into
/// `DataPtr::record_use`, a *provided* method of the public, safe `DeviceMemory` trait whose
/// default does nothing. A safe type that lends a block to pinned copies by delegating
/// `device_region` (here `Tensor`) keeps the default `record_use`; before the change its
/// copies read the block's bytes (the region's observation waited on the host for the move),
/// now `T.copy_to_host(&Tensor(&q), ..)` reads q's new place B before the move's copy (on S,
/// behind the gate) has written it: the host gets stale bytes, not q's.
#[test]
fn a_copy_through_a_delegating_device_memory_reads_the_moved_block_s_bytes() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let core = relocating_core();
    let (q, rest, big, gate) = moved_behind_gate(&core, s);
    let len = usize::try_from(q.size()).unwrap();
    let mut host = xpu_alloc::host_allocate_on(0, len).unwrap();
    t.copy_to_host(&Tensor(&q), &mut host).expect("copy");
    // T is not gated: its copy ran (or waits for the move's copy, if ordered).
    let done = t.record_event().expect("event");
    let ordered = waits_for_gate(&done, &gate, Duration::from_millis(500));
    s.synchronize().expect("synchronize");
    let got_q = host[..] == pattern(1, len)[..];
    assert!(holds(&q, &s, 1), "q keeps its bytes after the move");
    for (seed, ptr) in rest.iter().enumerate() {
        assert!(holds(ptr, &s, u8::try_from(seed).unwrap() + 2));
    }
    drop(big);
    assert!(
        ordered && got_q,
        "T's copy through a DeviceMemory delegating device_region was not ordered after the \
         move's gated copy (completed with the gate closed: {}), and read {} bytes",
        !ordered,
        if got_q { "q's" } else { "stale" }
    );
}

/// DEFECT, fixed (failed 6 of 6; same cause as above, the other direction). A copy *into* q's new
/// place through the delegating `Tensor`, on T, runs before the move's copy writes that place:
/// once the gate opens the move's copy overwrites it with q's old bytes, and the upload is
/// lost.
#[test]
fn an_upload_through_a_delegating_device_memory_into_a_moved_block_is_not_lost() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let core = relocating_core();
    let (q, _rest, big, gate) = moved_behind_gate(&core, s);
    let len = usize::try_from(q.size()).unwrap();
    let host = host_with(0x33, len);
    t.copy_from_host(&host, &Tensor(&q)).expect("copy");
    let done = t.record_event().expect("event");
    let ordered = waits_for_gate(&done, &gate, Duration::from_millis(500));
    s.synchronize().expect("synchronize");
    t.synchronize().expect("synchronize");
    let got = read(&q, &s);
    drop(big);
    assert!(
        got == pattern(0x33, len),
        "q does not hold the upload (ordered after the move: {ordered}; holds q's old bytes: {})",
        got == pattern(1, len)
    );
}

/// DEFECT, fixed (failed 6 of 6; same cause). The old place's new owner ("big", handed out of q's
/// vacated run A) gets an upload on T through the delegating `Tensor`: it writes A while the
/// move's copy (behind the gate) has yet to read A, so q's new place receives the upload's
/// bytes instead of q's.
#[test]
fn an_upload_through_a_delegating_device_memory_into_the_vacated_place_spares_the_moved_block() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let core = relocating_core();
    let (q, _rest, big, gate) = moved_behind_gate(&core, s);
    let len = usize::try_from(big.size()).unwrap();
    let host = host_with(0x44, len);
    t.copy_from_host(&host, &Tensor(&big)).expect("copy");
    let done = t.record_event().expect("event");
    let ordered = waits_for_gate(&done, &gate, Duration::from_millis(500));
    s.synchronize().expect("synchronize");
    assert!(
        holds(&q, &s, 1),
        "q lost its bytes to an upload into its vacated place on T (ordered after the move: \
         {ordered})"
    );
    assert!(holds(&big, &s, 0x44), "big holds the upload");
}

/// DEFECT, fixed, older than 7f354a5 (failed 6 of 6). The same delegating `Tensor`, with no move at
/// all: `T.copy_to_host(&Tensor(&q), ..)` records no use of T on q (`record_use`'s default),
/// so dropping q right after the call, as `HostCopy`'s docs say is safe for a whole-allocation
/// copy, hands its block to the next request on S at once while T's copy (held by a gate on T)
/// has yet to read it: the host gets the new owner's bytes.
#[test]
fn a_copy_through_a_delegating_device_memory_keeps_its_block_until_it_ran() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let q = core.allocate(2 * MIB, &sr).unwrap();
    write(&q, &s, 1);
    let at = q.address();
    let len = usize::try_from(q.size()).unwrap();
    let gate = Gate::new(0).expect("gate");
    gate.block(&t).expect("block");
    let mut host = xpu_alloc::host_allocate_on(0, len).unwrap();
    t.copy_to_host(&Tensor(&q), &mut host).expect("copy");
    drop(q);
    let next = core.allocate(2 * MIB, &sr).unwrap();
    let reused = next.address() == at;
    write(&next, &s, 0xEE);
    gate.open().expect("open");
    t.synchronize().expect("synchronize");
    assert!(
        host[..] == pattern(1, len)[..],
        "T's copy read the block's next owner's bytes (block reused at once: {reused})"
    );
}

/// Passing probe. The same copies through `DataPtr` itself (whose `record_use` orders T after
/// the move): a download of q and an upload into q on T, issued while S's gate is closed, do
/// not wait on the host, wait on the device for the move's copy, and see / keep q's bytes.
#[test]
fn pinned_copies_of_a_moved_block_on_another_stream_are_ordered_after_its_move() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let core = relocating_core();
    let (q, rest, big, gate) = moved_behind_gate(&core, s);
    let len = usize::try_from(q.size()).unwrap();
    let mut down = xpu_alloc::host_allocate_on(0, len).unwrap();
    let up = host_with(0x33, len);
    let (returned, ordered) = issued_without_host_wait_and_ordered(&gate, || {
        t.copy_to_host(&q, &mut down).expect("download");
        t.copy_from_host(&up, &q).expect("upload");
        t.record_event().expect("event")
    });
    assert!(
        returned,
        "pinned copies on T waited on the host for S's gate"
    );
    assert!(ordered, "T's copies completed with S's gate closed");
    t.synchronize().expect("synchronize");
    s.synchronize().expect("synchronize");
    assert!(
        down[..] == pattern(1, len)[..],
        "T's download read q's bytes"
    );
    assert!(holds(&q, &s, 0x33), "T's upload into q survived the move");
    for (seed, ptr) in rest.iter().enumerate() {
        assert!(holds(ptr, &s, u8::try_from(seed).unwrap() + 2));
    }
    drop(big);
}

/// Passing probe. An upload on T into the vacated place's new owner (big), through `DataPtr`:
/// it waits on the device for the move's copy that still reads that place.
#[test]
fn an_upload_into_the_vacated_place_waits_for_the_move_s_copy_out_of_it() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let core = relocating_core();
    let (q, _rest, big, gate) = moved_behind_gate(&core, s);
    let len = usize::try_from(big.size()).unwrap();
    let host = host_with(0x44, len);
    t.copy_from_host(&host, &big).expect("copy");
    let done = t.record_event().expect("event");
    assert!(
        waits_for_gate(&done, &gate, Duration::from_millis(500)),
        "the upload on T completed with the gate closed"
    );
    s.synchronize().expect("synchronize");
    assert!(holds(&q, &s, 1), "q kept its bytes");
    assert!(holds(&big, &s, 0x44), "big holds the upload");
}

/// Passing probe (`record_use` after other observations). q's place is first fixed by
/// `address()` (no wait for the marker), then by a pinned download on S itself (`record_use`
/// returns at once for the allocation stream; `device_region` observes without waiting);
/// a third observation, a pinned download on T, must still order T after the move's copy:
/// the marker is kept with the block, not consumed by the first observations.
#[test]
fn a_copy_on_another_stream_after_earlier_observations_is_still_ordered() {
    let Some([s, t, u]) = device_streams::<3>() else {
        return;
    };
    let core = relocating_core();
    let (q, _rest, big, gate) = moved_behind_gate(&core, s);
    let _ = q.address();
    let len = usize::try_from(q.size()).unwrap();
    let mut on_s = xpu_alloc::host_allocate_on(0, len).unwrap();
    let mut on_t = xpu_alloc::host_allocate_on(0, len).unwrap();
    let (returned, ordered) = issued_without_host_wait_and_ordered(&gate, || {
        s.copy_to_host(&q, &mut on_s).expect("download on S");
        t.copy_to_host(&q, &mut on_t).expect("download on T");
        t.record_event().expect("event")
    });
    assert!(returned, "the downloads waited on the host");
    assert!(ordered, "T's download completed with S's gate closed");
    s.synchronize().expect("synchronize");
    t.synchronize().expect("synchronize");
    assert!(
        on_s[..] == pattern(1, len)[..],
        "S's download read q's bytes"
    );
    assert!(
        on_t[..] == pattern(1, len)[..],
        "T's download read q's bytes"
    );
    let mut out = vec![0u8; len];
    q.view().unwrap().read(&u, 0, &mut out).expect("read on U");
    assert!(out == pattern(1, len), "U's read");
    drop(big);
}

/// Passing probe (a move of the block that sits in the vacated place). After q's move (copy
/// M1 behind the gate), big, in q's old run A, is freed and the run is handed out again
/// (2 MiB requests split it); those blocks carry M1; one of them gets an upload on T, which
/// must wait for M1, and q keeps its bytes.
#[test]
fn blocks_handed_out_of_a_vacated_place_again_wait_for_the_copy_out_of_it() {
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let sr = ClStream::shared(s);
    let core = relocating_core();
    let (q, _rest, big, gate) = moved_behind_gate(&core, s);
    let at = big.address();
    drop(big);
    let parts: Vec<DataPtr> = (0..4)
        .map(|_| core.allocate(2 * MIB, &sr).unwrap())
        .collect();
    let inside: Vec<&DataPtr> = parts
        .iter()
        .filter(|p| p.address() >= at && p.address() < at + 8 * MIB)
        .collect();
    assert!(
        !inside.is_empty(),
        "a 2 MiB block was handed out of the old run"
    );
    let len = 2 * MIB as usize;
    let hosts: Vec<HostPtr> = (0..inside.len())
        .map(|i| host_with(0x50 + i as u8, len))
        .collect();
    for (p, h) in inside.iter().zip(&hosts) {
        t.copy_from_host(h, *p).expect("copy");
    }
    let done = t.record_event().expect("event");
    assert!(
        waits_for_gate(&done, &gate, Duration::from_millis(500)),
        "an upload on T into the old run completed with the gate closed"
    );
    s.synchronize().expect("synchronize");
    assert!(holds(&q, &s, 1), "q kept its bytes");
    for (i, p) in inside.iter().enumerate() {
        assert!(holds(p, &s, 0x50 + i as u8), "part {i} holds its upload");
    }
}
