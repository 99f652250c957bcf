//! A raw queue's state shared by its wrappers (`CommandQueue`'s `SHARED`, kept after the last
//! wrapper while its wait log matters): an ordered marker through a new wrapper of the queue,
//! made after the last one dropped, still knows a failed wait enqueued through the old one,
//! also when an ordered marker or an idle probe outlived that wrapper.
//!
//! Review h61 (device part; fresh eyes on 99f3f47, `CommandQueue`'s state shared per raw
//! queue). Fails on the reviewed commit (fe07bcb). PoCL 3.1, `POCL_DEVICES="pthread
//! pthread" XPU_REQUIRE_DEVICE=1` (`cargo test -p xpu-device --test queue_state_across_wrappers`). Ordering
//! by user-event gates; `common::settles` only bounds the wait for a marker PoCL completes
//! on its own.
//!
//! Review h63 (fresh eyes on 108da10 / 99f3f47, a raw queue's state shared through `SHARED`
//! and kept after its last wrapper while its wait log matters). PoCL 3.1,
//! `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1` (`cargo test -p xpu-device --test
//! queue_state_across_wrappers`). Ordering by user-event gates; `common::settles` only bounds the wait for a
//! marker PoCL completes on its own.
//!
//! (Reviews h61's and h63's tests, merged here.)

mod common;

use std::time::Duration;

use xpu_device::backend::{Buffer, CommandQueue, EventStatus, MemFlags};

/// Finding (root of crates/xpu-host/tests/host_reuse_after_a_failed_wait.rs and
/// crates/xpu-alloc/tests/reuse_after_a_failed_wait.rs). 99f3f47 shares what the runtime knows of a raw queue between its wrappers
/// through `SHARED`, but only while one lives: the last wrapper's drop removes the entry
/// (src/backend/queue.rs:1370-1382) although the queue lives on (other code holds a
/// reference: the case `from_raw_borrowed` and external streams are for), and a wrapper made
/// again from the raw handle gets a fresh state (`shared_of`, queue.rs:84-93).
///
/// Sequence: a queue `Q` with one reference of other code's (`clRetainCommandQueue`); `w1`,
/// a wrapper: `w1.fill(buf, 0xAA, wait [g])` (held back, `g` closed), `w1.enqueue_barrier(
/// [f])`, `f.set_failed(-5)`; an ordered marker through `w1` reads `Error(-5)` (rightly: the
/// fill before it is still queued); `drop(w1)`; `w2 = from_raw_borrowed(Q)`; `m2 =
/// w2.enqueue_ordered_marker()`.
///
/// Observed (PoCL, 5 of 5 runs): through `w1`: driver `Complete`, ordered `Error(-5)`,
/// `follows_failed_wait` true; through `w2`: driver `Complete`, ordered `Complete`,
/// `follows_failed_wait` false, `orders_waiters` true, `w2.follows_failed_wait()` false, while
/// the fill enqueued before it on the same queue is `Queued` (it runs once `g` opens: the
/// buffer then reads 0xAA). Every allocator trusts `OrderedMarker::status` `Complete` for
/// reuse (the two tests named above reuse a block recorded on the queue).
#[test]
fn an_ordered_marker_through_a_new_wrapper_of_a_queue_knows_its_failed_wait() {
    let Some(d0) = common::device0() else { return };
    if !common::pocl_only(d0, "the scenario needs a driver that ends a marker after a failed wait while an earlier command stays queued (PoCL 3.1; NVIDIA keeps the order: the marker stays queued behind the gate, an H100 2026-12-06)") {
        return;
    }
    let ctx = d0.context().unwrap();
    let w1 = common::queue(d0);
    let raw = w1.as_raw();
    // SAFETY: `w1` holds a reference to the live queue; this is other code's own, released
    // at the end.
    unsafe { opencl3::command_queue::retain_command_queue(raw).unwrap() };
    let buf = Buffer::new(ctx, 4096, MemFlags::default()).unwrap();
    w1.fill(&buf, &[0x11], 0, 4096, &[]).unwrap();
    w1.finish().unwrap();
    let mut g = common::Gate::new(d0);
    let held = w1.fill(&buf, &[0xAA], 0, 4096, &[g.event()]).unwrap();
    let f = d0.create_user_event().unwrap();
    drop(w1.enqueue_barrier(&[&f]).unwrap());
    f.set_failed(-5).unwrap();
    let m1 = w1.enqueue_ordered_marker().unwrap();
    w1.flush().unwrap();
    assert!(common::settles(Duration::from_secs(20), || {
        common::terminal(m1.event().status().unwrap())
    }));
    let through_w1 = (m1.status().unwrap(), m1.follows_failed_wait());
    drop(m1);
    drop(w1);
    // SAFETY: `raw` is live (other code's reference).
    let w2 = unsafe { CommandQueue::from_raw_borrowed(raw) }.unwrap();
    let m2 = w2.enqueue_ordered_marker().unwrap();
    w2.flush().unwrap();
    assert!(common::settles(Duration::from_secs(20), || {
        common::terminal(m2.event().status().unwrap())
    }));
    let through_w2 = (
        m2.status().unwrap(),
        m2.follows_failed_wait(),
        m2.orders_waiters(),
        w2.follows_failed_wait(),
    );
    let held_status = held.status().unwrap();
    println!(
        "through w1: {through_w1:?}; through w2: {through_w2:?}; fill before both: \
         {held_status:?}"
    );
    g.open();
    common::finish_after_failure(&w2);
    let bytes = common::read_bytes(&w2, &buf, 4);
    drop(w2);
    // SAFETY: the reference taken above, released once.
    unsafe { opencl3::command_queue::release_command_queue(raw).unwrap() };
    assert_eq!(
        bytes,
        vec![0xAA; 4],
        "the held fill ran once the gate opened"
    );
    assert!(
        matches!(held_status, EventStatus::Queued | EventStatus::Submitted),
        "the fill was held back: {held_status:?}"
    );
    assert_eq!(
        through_w2.0, through_w1.0,
        "an ordered marker through a new wrapper of the queue reads {:?} (follows_failed_wait \
         {}, orders_waiters {}, queue follows_failed_wait {}) while a fill enqueued before it \
         is {held_status:?}; through the dropped wrapper it read {:?}",
        through_w2.0, through_w2.1, through_w2.2, through_w2.3, through_w1.0
    );
}

// Review h63: the same with an ordered marker or an idle probe alive across the last
// wrapper's drop.

/// Finding 1 (root of crates/xpu-host/tests/host_reuse_after_a_failed_wait.rs). 108da10 keeps a
/// queue's state
/// when its last wrapper drops only if `Arc::strong_count(&self.1) == 1` at that drop
/// (crates/xpu-device/src/backend/queue.rs:1519-1521, and again under the lock at
/// queue.rs:146). But `OrderedMarker` (queue.rs:254, 904) and `IdleProbe` (queue.rs:214, 866)
/// hold the same `Arc<QueueShared>`: while one of them lives, the last wrapper's drop does
/// not keep the state, the entry stays `Live(weak)`, and once the marker drops the state is
/// gone; a wrapper made again over the raw handle gets a fresh one (review h61's bug again).
///
/// Sequence: other code's queue `Q` (its own reference held); `w1` a wrapper: `w1.fill(buf,
/// 0xAA, wait [g])` (held back), `w1.enqueue_barrier([f])`, `f.set_failed(-5)`; `m1 =
/// w1.enqueue_ordered_marker()` (reads `Error(-5)`, rightly); `drop(w1)` **before**
/// `drop(m1)` (the only difference from review h61's test); `w2 = from_raw_borrowed(Q)`;
/// `m2 = w2.enqueue_ordered_marker()`.
///
/// Observed (PoCL, 5 of 5 runs): through `w1` `Error(-5)`; through `w2` ordered `Complete`,
/// `follows_failed_wait` false, `orders_waiters` true, while the fill enqueued before it is
/// `Queued` (it runs once `g` opens: the buffer reads 0xAA).
#[test]
fn an_ordered_marker_alive_across_the_last_wrappers_drop_does_not_lose_the_failed_wait() {
    let Some(d0) = common::device0() else { return };
    if !common::pocl_only(d0, "the scenario needs a driver that ends a marker after a failed wait while an earlier command stays queued (PoCL 3.1; NVIDIA keeps the order: the marker stays queued behind the gate, an H100 2026-12-06)") {
        return;
    }
    let ctx = d0.context().unwrap();
    let w1 = common::queue(d0);
    let theirs = w1.foreign_reference().unwrap();
    let buf = Buffer::new(ctx, 4096, MemFlags::default()).unwrap();
    w1.fill(&buf, &[0x11], 0, 4096, &[]).unwrap();
    w1.finish().unwrap();
    let mut g = common::Gate::new(d0);
    let held = w1.fill(&buf, &[0xAA], 0, 4096, &[g.event()]).unwrap();
    let f = d0.create_user_event().unwrap();
    drop(w1.enqueue_barrier(&[&f]).unwrap());
    f.set_failed(-5).unwrap();
    let m1 = w1.enqueue_ordered_marker().unwrap();
    w1.flush().unwrap();
    assert!(common::settles(Duration::from_secs(20), || {
        common::terminal(m1.event().status().unwrap())
    }));
    let through_w1 = m1.status().unwrap();
    // The last wrapper drops while its ordered marker still lives (an allocator's free
    // marker, a stream's kept query marker), then the marker.
    drop(w1);
    drop(m1);
    let w2 = theirs.wrap().unwrap();
    let m2 = w2.enqueue_ordered_marker().unwrap();
    w2.flush().unwrap();
    assert!(common::settles(Duration::from_secs(20), || {
        common::terminal(m2.event().status().unwrap())
    }));
    let through_w2 = (
        m2.status().unwrap(),
        m2.follows_failed_wait(),
        m2.orders_waiters(),
        w2.follows_failed_wait(),
    );
    let held_status = held.status().unwrap();
    println!(
        "through w1: {through_w1:?}; through w2: {through_w2:?}; fill before both: \
         {held_status:?}"
    );
    g.open();
    common::finish_after_failure(&w2);
    let bytes = common::read_bytes(&w2, &buf, 4);
    drop(m2);
    drop(w2);
    drop(theirs);
    assert_eq!(
        bytes,
        vec![0xAA; 4],
        "the held fill ran once the gate opened"
    );
    assert!(
        matches!(held_status, EventStatus::Queued | EventStatus::Submitted),
        "the fill was held back: {held_status:?}"
    );
    assert_eq!(
        through_w2.0, through_w1,
        "an ordered marker through a new wrapper of the queue reads {:?} (follows_failed_wait \
         {}, orders_waiters {}, queue follows_failed_wait {}) while a fill enqueued before it \
         is {held_status:?}; through the dropped wrapper (whose marker outlived it) it read \
         {through_w1:?}",
        through_w2.0, through_w2.1, through_w2.2, through_w2.3
    );
}

/// Finding 1b: the same with an `IdleProbe` (what `Stream::query` keeps in its
/// `TrackedQueue`, dropped after the queue field) alive across the last wrapper's drop.
/// Sequence: `w1.fill(wait [g])`, `p = w1.enqueue_idle_probe()`, `w1.enqueue_barrier([f])`,
/// `f.set_failed(-5)`, `drop(w1)`, `drop(p)`, `w2 = wrap(Q)`, `m2 =
/// w2.enqueue_ordered_marker()`.
///
/// Observed (PoCL, 5 of 5 runs): `m2.status()` `Complete` while the fill before it is
/// `Queued`.
#[test]
fn an_idle_probe_alive_across_the_last_wrappers_drop_does_not_lose_the_failed_wait() {
    let Some(d0) = common::device0() else { return };
    if !common::pocl_only(d0, "the scenario needs a driver that ends a marker after a failed wait while an earlier command stays queued (PoCL 3.1; NVIDIA keeps the order: the marker stays queued behind the gate, an H100 2026-12-06)") {
        return;
    }
    let ctx = d0.context().unwrap();
    let w1 = common::queue(d0);
    let theirs = w1.foreign_reference().unwrap();
    let buf = Buffer::new(ctx, 4096, MemFlags::default()).unwrap();
    let mut g = common::Gate::new(d0);
    let held = w1.fill(&buf, &[0xAA], 0, 4096, &[g.event()]).unwrap();
    let probe = w1.enqueue_idle_probe().unwrap();
    let f = d0.create_user_event().unwrap();
    drop(w1.enqueue_barrier(&[&f]).unwrap());
    f.set_failed(-5).unwrap();
    w1.flush().unwrap();
    drop(w1);
    drop(probe);
    let w2 = theirs.wrap().unwrap();
    let m2 = w2.enqueue_ordered_marker().unwrap();
    w2.flush().unwrap();
    assert!(common::settles(Duration::from_secs(20), || {
        common::terminal(m2.event().status().unwrap())
    }));
    let through_w2 = m2.status().unwrap();
    let held_status = held.status().unwrap();
    println!("through w2: {through_w2:?}; fill before it: {held_status:?}");
    g.open();
    common::finish_after_failure(&w2);
    drop(m2);
    drop(w2);
    drop(theirs);
    assert!(
        !(through_w2 == EventStatus::Complete
            && matches!(held_status, EventStatus::Queued | EventStatus::Submitted)),
        "an ordered marker through a new wrapper of the queue reads Complete while a fill \
         enqueued before it (before the failed wait) is {held_status:?}"
    );
}
