//! `consolidate_live`'s window between its choice and the move: what other calls do there (observe,
//! record_stream, view, free, replace, allocate, switch relocation off, empty_cache, memory
//! fraction) and what the moves leave in the statistics, snapshot and history.
//!
//! Review h47 of `consolidate_live` (the default): a consolidation that counts in an
//! occupied segment releases the stream's lock between its choice and the move (the source's
//! allocation of the merged segment, the frees of what it released). What other calls do in
//! that window, run deterministically from a segment source hook that fires on the merged
//! segment's allocation (another thread joined inside the hook where the call must not be
//! the allocating thread's), and what the moves leave in the statistics, the snapshot and the
//! history; real bytes on PoCL (skipped without a device unless `XPU_REQUIRE_DEVICE=1`).

mod common;

use std::sync::{Arc, Mutex};

use xpu_alloc::{
    AllocConfig, BlockState, BufferSource, DataPtr, DeviceCore, HookedSource, SegmentSource,
    SimulatedSource, SourceError, SourceHooks, SourceSegment, StreamRef,
};
use xpu_event::Gate;

use common::relocation::{check_history, copy_on_t_behind_the_gated_move, holds, write};
use common::{device_streams, stream, MIB};

type Action = Box<dyn FnOnce() + Send>;

/// Runs `action` (once) when a segment of `at` bytes is allocated, before the allocation;
/// `readdress`: the address to give the next segment of that many bytes instead (undone at
/// its free).
#[derive(Default)]
struct Window {
    at: Mutex<u64>,
    action: Mutex<Option<Action>>,
    readdress: Mutex<Option<(u64, u64)>>,
    shifted: Mutex<Vec<(u64, u64)>>,
}

struct Hook(Arc<Window>);

impl<S: SegmentSource<Memory = xpu_alloc::SegmentMemory>> SourceHooks<S> for Hook {
    fn allocate(&self, inner: &S, size: u64) -> Result<SourceSegment, SourceError> {
        if size == *self.0.at.lock().unwrap() {
            let action = self.0.action.lock().unwrap().take();
            if let Some(action) = action {
                action();
            }
        }
        let mut segment = inner.allocate(size)?;
        let mut re = self.0.readdress.lock().unwrap();
        if let Some((bytes, address)) = *re {
            if bytes == size {
                *re = None;
                self.0
                    .shifted
                    .lock()
                    .unwrap()
                    .push((address, segment.address));
                segment.address = address;
            }
        }
        Ok(segment)
    }
    fn free(&self, inner: &S, mut segment: SourceSegment) {
        let mut shifted = self.0.shifted.lock().unwrap();
        if let Some(k) = shifted.iter().position(|s| s.0 == segment.address) {
            segment.address = shifted.remove(k).1;
        }
        inner.free(segment);
    }
}

/// A simulated device of 1 GiB under `config` whose source runs the window's action.
fn hooked_core(config: &str) -> (DeviceCore, Arc<SimulatedSource>, Arc<Window>) {
    let source = Arc::new(SimulatedSource::new(0, 1 << 30, 1 << 30));
    let window = Arc::new(Window::default());
    let hooked = HookedSource::new(source.clone(), Hook(window.clone()));
    let core = DeviceCore::new(
        Box::new(hooked),
        AllocConfig::parse(config).expect("config"),
    );
    core.memory_history()
        .record_memory_history(true, usize::MAX);
    (core, source, window)
}

/// consolidate_live's layout: segment A (40 MiB) holds y (4 MiB, returned) and 36 free MiB,
/// segment B (60 MiB) is idle. A 90 MiB request then releases B, allocates a 100 MiB merged
/// segment (the window's action runs then) and moves y there.
fn layout(core: &DeviceCore, s: &StreamRef) -> DataPtr {
    let a = |mib: u64| core.allocate(mib * MIB, s).unwrap();
    let (x, z) = (a(40), a(60));
    drop((x, z));
    a(4)
}

/// The statistics agree with the snapshot (currents), and the source holds what is reserved.
fn assert_consistent(core: &DeviceCore, source: &SimulatedSource, what: &str) {
    let st = core.memory_stats();
    let snap = core.snapshot();
    let sum = |f: &dyn Fn(&xpu_alloc::BlockSnapshot) -> bool| -> (i64, i64) {
        let blocks: Vec<_> = snap
            .iter()
            .flat_map(|s| s.blocks.iter().filter(|b| f(b)))
            .collect();
        (
            blocks.len() as i64,
            blocks.iter().map(|b| b.size as i64).sum(),
        )
    };
    let allocated = sum(&|b| b.state == BlockState::Allocated);
    let active = sum(&|b| b.state != BlockState::Inactive);
    let inactive_split: (i64, i64) = snap
        .iter()
        .filter(|s| s.blocks.len() > 1)
        .flat_map(|s| s.blocks.iter())
        .filter(|b| b.state == BlockState::Inactive)
        .fold((0, 0), |(n, m), b| (n + 1, m + b.size as i64));
    let reserved: i64 = snap.iter().map(|s| s.size as i64).sum();
    assert_eq!(
        (
            st.segment.all.current,
            st.reserved_bytes.all.current,
            (st.allocation.all.current, st.allocated_bytes.all.current),
            (st.active.all.current, st.active_bytes.all.current),
            (
                st.inactive_split.all.current,
                st.inactive_split_bytes.all.current
            ),
        ),
        (
            snap.len() as i64,
            reserved,
            allocated,
            active,
            inactive_split
        ),
        "{what}: statistics against the snapshot"
    );
    let held = source.counters();
    assert_eq!(
        (held.used as i64, held.live_segments as i64),
        (reserved, snap.len() as i64),
        "{what}: the source holds the reserved segments"
    );
    assert_eq!(
        st.num_device_alloc - st.num_device_free,
        snap.len() as u64,
        "{what}"
    );
}

/// The history recorded so far is a consistent trace.
fn assert_history(core: &DeviceCore, all_freed: bool, what: &str) {
    let entries = core.memory_history().entries();
    if let Err(e) = check_history(&entries, all_freed) {
        panic!("{what}: {e}");
    }
}

/// Frees everything `live` holds, empties the cache: nothing stays anywhere.
fn assert_ends_clean(core: &DeviceCore, source: &SimulatedSource, live: Vec<DataPtr>) {
    drop(live);
    core.empty_cache();
    assert_consistent(core, source, "at the end");
    assert_history(core, true, "at the end");
    let held = source.counters();
    assert_eq!(
        (held.used, held.live_segments, core.memory_reserved()),
        (0, 0, 0)
    );
}

/// (moves, segments allocated, segments freed, reserved MiB)
fn figures(core: &DeviceCore) -> (u64, u64, u64, u64) {
    let st = core.memory_stats();
    (
        core.relocation_stats().moves,
        st.num_device_alloc,
        st.num_device_free,
        core.memory_reserved() / MIB,
    )
}

/// Where y sits: in A (its hand-out place) or elsewhere.
fn y_place(core: &DeviceCore, y: &DataPtr) -> u64 {
    let _ = core;
    y.address()
}

#[test]
fn without_interference_y_moves_and_a_is_released() {
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert_eq!(figures(&core), (1, 3, 2, 100));
    assert_consistent(&core, &source, "after the move");
    assert_history(&core, false, "after the move");
    // y now lies in the merged segment, past the request.
    assert_eq!(y_place(&core, &y), big.address() + 90 * MIB);
    assert_ends_clean(&core, &source, vec![y, big]);
}

#[test]
fn y_observed_in_the_window_stays_in_a() {
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = Arc::new(layout(&core, &s));
    let seen = Arc::new(Mutex::new(0u64));
    *window.at.lock().unwrap() = 100 * MIB;
    let (y2, seen2) = (y.clone(), seen.clone());
    *window.action.lock().unwrap() = Some(Box::new(move || {
        // Another thread reads y's address (as torch's data_ptr) while the allocator's
        // lock is released.
        let y3 = y2.clone();
        let at = std::thread::spawn(move || y3.address()).join().unwrap();
        *seen2.lock().unwrap() = at;
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    let seen = *seen.lock().unwrap();
    assert_ne!(seen, 0, "the window's action ran");
    assert_eq!(y.address(), seen, "an observed block does not move");
    // B released, the merged segment allocated, A kept: 40 + 100.
    assert_eq!(figures(&core), (0, 3, 1, 140));
    assert_consistent(&core, &source, "y observed");
    assert_history(&core, false, "y observed");
    let y = Arc::try_unwrap(y).unwrap();
    assert_ends_clean(&core, &source, vec![y, big]);
}

#[test]
fn y_recorded_on_another_stream_in_the_window_stays_in_a() {
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let (_t, t) = stream(2);
    let y = Arc::new(layout(&core, &s));
    let before = Arc::new(Mutex::new(None));
    *window.at.lock().unwrap() = 100 * MIB;
    let (c, y2, b2) = (core.clone(), y.clone(), before.clone());
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let y3 = y2.clone();
        std::thread::spawn(move || c.record_stream(&y3, &t))
            .join()
            .unwrap()
            .unwrap();
        *b2.lock().unwrap() = Some(());
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert!(before.lock().unwrap().is_some());
    assert_eq!(figures(&core), (0, 3, 1, 140));
    assert_consistent(&core, &source, "y recorded");
    let y = Arc::try_unwrap(y).unwrap();
    assert_ends_clean(&core, &source, vec![y, big]);
}

#[test]
fn y_viewed_in_the_window_stays_in_a() {
    // PoCL: a view of y (a pin of its place) taken by another thread in the window (after
    // the consolidation counted y's segment in) and held until the allocation returned: y
    // does not move and keeps its bytes. The window's action waits (bounded) until the view
    // is taken; the holder waits (bounded) for the window, so a run whose allocation never
    // reaches the window fails its assertions instead of hanging (it hung once under load
    // when the holder, free to view y at any time, did so before the allocation began: y
    // pinned, no consolidation, no window).
    let Some([s]) = device_streams::<1>() else {
        return;
    };
    let sr = xpu_alloc::ClStream::shared(s);
    let window = Arc::new(Window::default());
    let core = DeviceCore::new(
        Box::new(HookedSource::new(
            BufferSource::new(0).expect("buffer source"),
            Hook(window.clone()),
        )),
        AllocConfig::default(),
    );
    let y = Arc::new(layout(&core, &sr));
    write(&y, &s, 3);
    let bound = std::time::Duration::from_secs(60);
    let (in_window, window_rx) = std::sync::mpsc::channel::<()>();
    let (viewed, viewed_rx) = std::sync::mpsc::channel::<()>();
    let (done, done_rx) = std::sync::mpsc::channel::<()>();
    *window.at.lock().unwrap() = 100 * MIB;
    let y2 = y.clone();
    let holder = std::thread::spawn(move || {
        let reached = window_rx.recv_timeout(bound).is_ok();
        let view = y2.view().unwrap();
        let _ = viewed.send(());
        let _ = done_rx.recv_timeout(bound);
        drop(view);
        reached
    });
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let _ = in_window.send(());
        let _ = viewed_rx.recv_timeout(bound);
    }));
    let big = core.allocate(90 * MIB, &sr).unwrap();
    let _ = done.send(());
    assert!(holder.join().unwrap(), "the allocation reached the window");
    assert_eq!(
        core.relocation_stats().moves,
        0,
        "a viewed block does not move"
    );
    assert_eq!(core.memory_reserved(), 140 * MIB);
    write(&big, &s, 9);
    assert!(holds(&y, &s, 3), "y keeps its bytes");
}

#[test]
fn y_freed_in_the_window_lets_a_go() {
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let slot = Arc::new(Mutex::new(Some(y)));
    let s2 = slot.clone();
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let y = s2.lock().unwrap().take();
        std::thread::spawn(move || drop(y)).join().unwrap();
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert!(slot.lock().unwrap().is_none());
    // Nothing to move; A, whole and idle, is released.
    assert_eq!(figures(&core), (0, 3, 2, 100));
    assert_consistent(&core, &source, "y freed");
    assert_ends_clean(&core, &source, vec![big]);
}

#[test]
fn y_freed_into_the_allocating_thread_s_cache_in_the_window() {
    // The hook runs on the allocating thread: y goes into that thread's freed-block cache.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let slot = Arc::new(Mutex::new(Some(y)));
    let s2 = slot.clone();
    *window.action.lock().unwrap() = Some(Box::new(move || {
        drop(s2.lock().unwrap().take());
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert_eq!(figures(&core).0, 0, "a cached block does not move");
    assert_consistent(&core, &source, "y in a thread cache");
    // The cache hands y's place back to the same thread for the same size.
    let again = core.allocate(4 * MIB, &s).unwrap();
    assert_consistent(&core, &source, "y's place handed again");
    assert_ends_clean(&core, &source, vec![big, again]);
}

#[test]
fn a_replaced_at_its_index_and_address_in_the_window() {
    // In the window: y is freed, empty_cache releases A, and a new 40 MiB segment takes A's
    // slab index and (from the source) A's address, holding a live block w; w was never
    // observed, so it may move (or stay): the statistics, the snapshot and the history
    // stay consistent either way, and w keeps its size and stays allocated.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    let a_addr = core
        .snapshot()
        .iter()
        .find(|seg| seg.size == 40 * MIB)
        .unwrap()
        .address;
    *window.at.lock().unwrap() = 100 * MIB;
    let slot = Arc::new(Mutex::new(Some(y)));
    let w = Arc::new(Mutex::new(None));
    let (c, s2, w2, win, sr) = (
        core.clone(),
        slot.clone(),
        w.clone(),
        window.clone(),
        s.clone(),
    );
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let y = s2.lock().unwrap().take();
        let got = std::thread::spawn(move || {
            drop(y);
            c.empty_cache();
            *win.readdress.lock().unwrap() = Some((40 * MIB, a_addr));
            // 38 MiB: a 40 MiB segment (rounded to 2 MiB: 38), so 6 MiB of it free.
            c.allocate(38 * MIB, &sr).unwrap()
        })
        .join()
        .unwrap();
        *w2.lock().unwrap() = Some(got);
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    let w = w.lock().unwrap().take().unwrap();
    assert_eq!(w.size(), 38 * MIB);
    assert_consistent(&core, &source, "A replaced");
    assert_history(&core, false, "A replaced");
    assert_ends_clean(&core, &source, vec![big, w]);
}

#[test]
fn the_window_s_allocation_on_the_stream_lands_in_a() {
    // In the window another thread allocates 30 MiB on the same stream: it lands in A's free
    // run; A then holds 34 live MiB that cannot all go into the merged segment's 10 free MiB.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let w = Arc::new(Mutex::new(None));
    let (c, w2, sr) = (core.clone(), w.clone(), s.clone());
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let got = std::thread::spawn(move || c.allocate(30 * MIB, &sr).unwrap())
            .join()
            .unwrap();
        *w2.lock().unwrap() = Some(got);
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    let w = w.lock().unwrap().take().unwrap();
    assert_eq!(figures(&core), (0, 3, 1, 140));
    assert_consistent(&core, &source, "a block landed in A");
    assert_history(&core, false, "a block landed in A");
    assert_ends_clean(&core, &source, vec![big, w, y]);
}

#[test]
fn a_nested_growth_on_the_stream_in_the_window() {
    // In the window the hook's own thread allocates 50 MiB on the same stream (a plain
    // growth, re-entering the allocator from the source): the evacuation the outer
    // consolidation set is still pending then.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let w = Arc::new(Mutex::new(None));
    let (c, w2, sr) = (core.clone(), w.clone(), s.clone());
    *window.action.lock().unwrap() = Some(Box::new(move || {
        *w2.lock().unwrap() = Some(c.allocate(50 * MIB, &sr).unwrap());
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    let w = w.lock().unwrap().take().unwrap();
    assert_eq!(w.size(), 50 * MIB);
    assert_consistent(&core, &source, "nested growth");
    assert_history(&core, false, "nested growth");
    assert_ends_clean(&core, &source, vec![big, w, y]);
}

#[test]
fn relocation_switched_off_in_the_window() {
    // set_config in the window: relocation off (and consolidate_live off). A block handed
    // out afterwards never moves; y, handed out before, may still move.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let c = core.clone();
    *window.action.lock().unwrap() = Some(Box::new(move || {
        std::thread::spawn(move || {
            c.set_config(AllocConfig::parse("relocation:off,consolidate_live:False").unwrap());
        })
        .join()
        .unwrap();
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert_consistent(&core, &source, "relocation off");
    assert_history(&core, false, "relocation off");
    assert_ends_clean(&core, &source, vec![big, y]);
}

#[test]
fn empty_cache_in_the_window() {
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let c = core.clone();
    *window.action.lock().unwrap() = Some(Box::new(move || {
        std::thread::spawn(move || c.empty_cache()).join().unwrap();
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    assert_eq!(figures(&core), (1, 3, 2, 100));
    assert_consistent(&core, &source, "empty_cache");
    assert_ends_clean(&core, &source, vec![big, y]);
}

#[test]
fn the_merged_segment_fails_under_the_memory_fraction() {
    // Total 1 GiB; reserved 100 MiB (A 40, B 60). A fraction letting 150 MiB: the merged
    // segment (100 MiB beside A's 40 after B's release: 140) fits; one of 130 MiB
    // (0.127 GiB) refuses it, and the request's own 90 MiB segment (40 + 90 = 130) fits.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = layout(&core, &s);
    let _ = window;
    core.set_memory_fraction(130.0 / 1024.0).unwrap();
    let big = core.allocate(90 * MIB, &s).unwrap();
    let (moves, allocs, frees, reserved) = figures(&core);
    assert_eq!((moves, reserved), (0, 130), "{allocs} {frees}");
    assert_consistent(&core, &source, "fraction");
    // A later growth counts in no stale evacuation: y stays where it is.
    let at = y.address();
    drop(big);
    let again = core.allocate(90 * MIB, &s).unwrap();
    assert_eq!(y.address(), at);
    assert_consistent(&core, &source, "fraction, again");
    assert_ends_clean(&core, &source, vec![again, y]);
}

#[test]
fn a_moved_block_read_on_another_stream_and_the_released_segment() {
    // PoCL: the move's copy is gated on S; T reads y (a copy into a block of its own)
    // before the gate opens, and A (released) is followed by new segments written on T.
    let Some([s, t]) = device_streams::<2>() else {
        return;
    };
    let (sr, tr) = (
        xpu_alloc::ClStream::shared(s),
        xpu_alloc::ClStream::shared(t),
    );
    let core = DeviceCore::new(
        Box::new(BufferSource::new(0).expect("buffer source")),
        AllocConfig::default(),
    );
    let y = layout(&core, &sr);
    write(&y, &s, 7);
    let gate = Gate::new(0).expect("gate");
    gate.block(&s).expect("block");
    let big = core.allocate(90 * MIB, &sr).unwrap();
    assert_eq!(
        (
            core.relocation_stats().moves,
            core.memory_stats().num_device_free
        ),
        (1, 2)
    );
    // New segments on T, written at once: the driver may give them A's memory only once
    // nothing uses it (the gated copy reads it).
    let others: Vec<DataPtr> = (0..4)
        .map(|_| core.allocate(40 * MIB, &tr).unwrap())
        .collect();
    for o in &others {
        let len = usize::try_from(o.size()).unwrap();
        o.view().unwrap().fill(&t, &[0x5a], 0, len).unwrap();
    }
    let out = copy_on_t_behind_the_gated_move(&core, &y, (&t, &tr), &gate);
    assert!(holds(&out, &t, 7), "T read y's bytes");
    assert!(holds(&y, &s, 7), "y at its new place");
    write(&big, &s, 9);
    assert!(holds(&y, &s, 7), "y apart from the request");
    for o in &others {
        let mut got = vec![0u8; usize::try_from(o.size()).unwrap()];
        o.view().unwrap().read(&t, 0, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == 0x5a));
    }
}

/// The layout with a 1.5 MiB y (it fits in the 1.5 MiB that a 44.5 MiB request leaves of its
/// 46 MiB segment): A 40 MiB (y and 38.5 free MiB), B 60 MiB idle.
fn small_y_layout(core: &DeviceCore, s: &StreamRef) -> DataPtr {
    let a = |bytes: u64| core.allocate(bytes, s).unwrap();
    let (x, z) = (a(40 * MIB), a(60 * MIB));
    drop((x, z));
    a(3 * MIB / 2)
}

#[test]
fn a_merged_allocation_that_panicked_leaves_no_evacuation_behind() {
    // The source panics while allocating the merged segment (user code). The consolidation
    // that counted A in is over: a later, unrelated growth of the stream must not move y
    // into its own segment (as after an OOM of the merged segment, which forgets A).
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = small_y_layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    *window.action.lock().unwrap() = Some(Box::new(|| panic!("the source's hook panics")));
    let c = core.clone();
    let sr = s.clone();
    let failed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| c.allocate(90 * MIB, &sr)));
    assert!(failed.is_err(), "the hook's panic reaches the caller");
    // B was released before the merged allocation; A holds y.
    assert_eq!(figures(&core), (0, 2, 1, 40));
    let w = core.allocate(89 * MIB / 2, &s).unwrap();
    assert_eq!(
        core.relocation_stats().moves,
        0,
        "a growth that counted no occupied segment moved y"
    );
    assert_consistent(&core, &source, "after the panic");
    assert_ends_clean(&core, &source, vec![w, y]);
}

#[test]
fn a_growth_in_the_window_does_not_take_the_consolidation_s_evacuation() {
    // While the merged segment is allocated, another thread's growth on the same stream
    // (44.5 MiB: a new segment of its own) completes first. The blocks of A, counted into
    // the merged segment, belong there: y moves into the merged segment, not into the other
    // thread's segment.
    let (core, source, window) = hooked_core("");
    let (_s, s) = stream(1);
    let y = small_y_layout(&core, &s);
    *window.at.lock().unwrap() = 100 * MIB;
    let w = Arc::new(Mutex::new(None));
    let (c, w2, sr) = (core.clone(), w.clone(), s.clone());
    *window.action.lock().unwrap() = Some(Box::new(move || {
        let got = std::thread::spawn(move || c.allocate(89 * MIB / 2, &sr).unwrap())
            .join()
            .unwrap();
        *w2.lock().unwrap() = Some(got);
    }));
    let big = core.allocate(90 * MIB, &s).unwrap();
    let w = w.lock().unwrap().take().unwrap();
    let merged = core
        .snapshot()
        .into_iter()
        .find(|seg| seg.address == big.address())
        .unwrap();
    assert_eq!(merged.size, 100 * MIB);
    let at = y.address();
    assert!(
        (merged.address..merged.address + merged.size).contains(&at),
        "y at {at:#x}, outside the merged segment at {:#x} (w at {:#x})",
        merged.address,
        w.address()
    );
    assert_consistent(&core, &source, "growth in the window");
    assert_history(&core, false, "growth in the window");
    assert_ends_clean(&core, &source, vec![big, w, y]);
}
