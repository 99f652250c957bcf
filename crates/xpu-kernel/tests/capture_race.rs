//! A capture begun on another thread between a direct command's capture check and its
//! enqueue: the command is either refused with `Capturing` or enqueued before the capture
//! began, never run directly on the capturing stream. The interleaving is made exact with
//! xpu-stream's test hooks: the hook after the check (on the commanding thread) starts the
//! capture on another thread and waits until that capture has either begun or is waiting for
//! the command's enqueue to finish. Where the command lands is then read from the stream's
//! order: the capturing thread, as soon as `begin` returned, puts a marker and then a closed
//! user event in the stream's queue; once the marker completed, a command enqueued before the
//! capture began has run, and one enqueued after it has not. Skipped without a device unless
//! `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::cell::RefCell;
use std::sync::{mpsc, Arc, Mutex};
use std::thread;

use common::{device0_stream, fresh_stream};
use xpu_device::backend::ClEvent;
use xpu_event::test_support::Gate;
use xpu_event::{Event, EventFlags};
use xpu_kernel::{DeviceBuffer, LaunchExt, Program};
use xpu_stream::{hooks, CaptureGuard, Stream};

const SET: &str = "__kernel void set(__global uint *x, uint v) { x[get_global_id(0)] = v; }";
const N: usize = 16;
const V: u32 = 7;

/// What the capturing thread reports to the commanding thread's hook.
enum Report {
    /// `begin` marked the stream and waits for the direct enqueue in flight.
    Draining,
    /// `begin` returned; the marker after which the stream is held closed.
    Began(ClEvent),
}

/// What [`race`] saw: the command's outcome (an error as text), whether its effect was there
/// once everything enqueued before the capture began had run (and nothing enqueued after it
/// could have), and whether it was there at the end, after the capture and all the stream's
/// work.
struct Seen<T> {
    outcome: Result<T, String>,
    before_capture: bool,
    at_end: bool,
}

/// Runs `direct` on `s` with a capture of `s` begun between its capture check and its enqueue
/// (on another thread); `probe` tells whether the command's effect is there.
fn race<T, E: std::fmt::Debug>(
    s: Stream,
    direct: impl FnOnce() -> Result<T, E>,
    mut probe: impl FnMut() -> bool,
) -> Seen<T> {
    // The stream is held closed while the command is enqueued, so nothing it holds runs early.
    let g1 = Gate::new(0).unwrap();
    g1.block(&s).unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (report_tx, report_rx) = mpsc::channel::<Report>();
    let (end_tx, end_rx) = mpsc::channel::<()>();
    let hold = xpu_device::device(0).unwrap().create_user_event().unwrap();
    let hold_t = hold.clone();
    let capturer = thread::spawn(move || {
        if go_rx.recv().is_err() {
            return;
        }
        let tx = report_tx.clone();
        hooks::before_capture_drain(move || {
            tx.send(Report::Draining).unwrap();
        });
        let guard = CaptureGuard::begin(&s).unwrap();
        // As soon as the capture has begun: a marker, then the stream held closed.
        let q = s.queue().unwrap();
        let marker = q.enqueue_marker(&[]).unwrap();
        drop(q.enqueue_barrier(&[&hold_t]).unwrap());
        q.flush().unwrap();
        report_tx.send(Report::Began(marker)).unwrap();
        end_rx.recv().unwrap();
        drop(guard);
    });
    let report_rx = Arc::new(Mutex::new(report_rx));
    let first = Arc::new(Mutex::new(None::<Report>));
    let (rx, seen) = (Arc::clone(&report_rx), Arc::clone(&first));
    // The hook, on this thread, between the command's capture check and its enqueue: begins
    // the capture, and returns once it has either begun or waits for this command's enqueue
    // (then it cannot begin before the command is enqueued).
    hooks::after_capture_check(move || {
        go_tx.send(()).unwrap();
        *seen.lock().unwrap() = Some(rx.lock().unwrap().recv().unwrap());
    });
    let outcome = direct();
    let first = first.lock().unwrap().take().expect("the hook ran");
    let marker = match first {
        Report::Began(m) => m,
        Report::Draining => match report_rx.lock().unwrap().recv().unwrap() {
            Report::Began(m) => m,
            Report::Draining => unreachable!("one drain per begin"),
        },
    };
    g1.open().unwrap();
    // Everything enqueued before the capture began has run; the stream is held after it.
    marker.wait().unwrap();
    let before_capture = probe();
    hold.set_complete().unwrap();
    end_tx.send(()).unwrap();
    capturer.join().unwrap();
    s.synchronize().unwrap();
    Seen {
        outcome: outcome.map_err(|e| format!("{e:?}")),
        before_capture,
        at_end: probe(),
    }
}

/// The verdict: refused with a `Capturing` error and never run, or enqueued (and run) before
/// the capture began.
fn assert_refused_or_before_capture<T>(what: &str, seen: Seen<T>) {
    match seen.outcome {
        Err(e) => {
            assert!(
                e.contains("Capturing"),
                "{what}: refused, but not as capturing: {e}"
            );
            assert!(
                !seen.at_end,
                "{what}: refused as capturing ({e}), yet it ran on the stream"
            );
        }
        Ok(_) => assert!(
            seen.before_capture,
            "{what}: enqueued directly on the stream after its capture began (outside the graph)"
        ),
    }
}

fn zeroed(s: &Stream) -> DeviceBuffer<u32> {
    let buf = DeviceBuffer::<u32>::zeroed(N, s).unwrap();
    s.synchronize().unwrap();
    buf
}

/// Whether `buf` holds `V` everywhere, read on another stream (the raced stream is held).
fn holds_v(buf: &DeviceBuffer<u32>) -> bool {
    let other = fresh_stream(0);
    let v = buf.to_vec(&other.stream()).unwrap();
    assert!(v == vec![0; N] || v == vec![V; N], "torn contents {v:?}");
    v == vec![V; N]
}

/// [`race`] of `direct`, a write of `V` over a zeroed buffer (given to it) on device 0's
/// stream (also given), judged by [`assert_refused_or_before_capture`] as `what`; skipped
/// without a device.
fn race_a_write_of_v<T, E: std::fmt::Debug>(
    what: &str,
    direct: impl FnOnce(Stream, &RefCell<DeviceBuffer<u32>>) -> Result<T, E>,
) {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = RefCell::new(zeroed(&s));
    let outcome = race(s, || direct(s, &buf), || holds_v(&buf.borrow()));
    assert_refused_or_before_capture(what, outcome);
}

#[test]
fn a_launch_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let set = Program::build(0, SET, "").unwrap().function("set").unwrap();
    let buf = zeroed(&s);
    let launch = s
        .launch(&set, &[N], None)
        .unwrap()
        .arg(&buf)
        .unwrap()
        .arg(V)
        .unwrap();
    // SAFETY: N work-items write x[0..N), the allocation's bytes; nothing borrows them on
    // the host meanwhile; the kernel terminates.
    #[allow(unsafe_code)]
    let outcome = race(s, || unsafe { launch.enqueue() }, || holds_v(&buf));
    assert_refused_or_before_capture("kernel launch", outcome);
}

#[test]
fn a_typed_fill_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    race_a_write_of_v("typed fill", |s, buf| {
        xpu_kernel::memory::fill(&s, &mut buf.borrow_mut().as_slice_mut(), V)
    });
}

#[test]
fn an_allocator_fill_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    let pattern = V.to_ne_bytes();
    race_a_write_of_v("allocator fill", |s, buf| {
        buf.borrow()
            .data_ptr()
            .view()
            .unwrap()
            .fill(&s, &pattern, 0, N * 4)
    });
}

#[test]
fn a_pinned_copy_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = zeroed(&s);
    let mut host = xpu_alloc::host_allocate_on(0, N * 4).unwrap();
    for c in host.as_mut_slice().chunks_mut(4) {
        c.copy_from_slice(&V.to_ne_bytes());
    }
    let outcome = race(
        s,
        || {
            buf.data_ptr()
                .view()
                .unwrap()
                .write_from_host(&s, &host, 0, 0, N * 4)
        },
        || holds_v(&buf),
    );
    assert_refused_or_before_capture("pinned copy", outcome);
}

#[test]
fn an_event_record_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let event = RefCell::new(Event::new(EventFlags::default()));
    let outcome = race(
        s,
        || event.borrow_mut().record(&s),
        // Complete only when its marker came before the capture.
        || {
            let e = event.borrow();
            e.is_recorded() && e.query().unwrap()
        },
    );
    assert_refused_or_before_capture("event record", outcome);
}

#[test]
fn a_foreign_call_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    use xpu_device::backend::{Buffer, CommandQueue};
    use xpu_kernel::interop::{ClRegion, ForeignQueue};
    use xpu_kernel::ForeignExt;
    race_a_write_of_v("foreign call", |s, buf| {
        {
            let mut b = buf.borrow_mut();
            let mut view = b.as_slice_mut();
            let region = ClRegion::new_mut(&mut view).unwrap();
            // The region is elements `offset..offset + N` of its segment's buffer.
            let (mem, offset) = (region.cl_mem(), region.offset() * 4);
            let size = offset + N * 4;
            let library = |q: &ForeignQueue<'_>| {
                // SAFETY: `q.queue()` is the stream's live queue and `mem` the region's live
                // segment buffer, of at least `size` bytes, both valid during the call.
                let (queue, buffer) = unsafe {
                    (
                        CommandQueue::from_raw_borrowed(q.queue()).map_err(|_| -1)?,
                        Buffer::from_raw_retained(mem, size).map_err(|_| -2)?,
                    )
                };
                queue
                    .fill(&buffer, &V.to_ne_bytes(), offset, N * 4, &[])
                    .map_err(|_| -3)?;
                Ok(None)
            };
            // SAFETY: `library` fills the region's N elements (writable) on the given queue,
            // keeps no handle, begins no capture and waits for nothing.
            unsafe { s.foreign().uses_elements(&region, N).unwrap().call(library) }
        }
    });
}

/// The permit covers a blocking read's enqueue, not its wait: a capture begun while a read
/// waits for a gated stream returns (and the capturing thread then opens the gate), where a
/// permit held across the wait would deadlock the two threads.
#[test]
fn a_capture_begins_while_a_blocking_read_waits_for_its_stream() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::from_slice(&[V; N], &s).unwrap();
    s.synchronize().unwrap();
    let gate = Arc::new(Gate::new(0).unwrap());
    gate.block(&s).unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let g = Arc::clone(&gate);
    let capturer = thread::spawn(move || {
        go_rx.recv().unwrap();
        let guard = CaptureGuard::begin(&s).unwrap();
        // Begun: the reader's enqueue is done, and it waits for the gate.
        g.open().unwrap();
        drop(guard);
    });
    // Between the read's capture check and its enqueue: the capture begins on the other thread.
    hooks::after_capture_check(move || go_tx.send(()).unwrap());
    let mut out = vec![0u8; N * 4];
    let read = buf.data_ptr().view().unwrap().read(&s, 0, &mut out);
    capturer.join().unwrap();
    match read {
        Ok(()) => assert_eq!(out, V.to_ne_bytes().repeat(N)),
        Err(e) => assert!(format!("{e:?}").contains("Capturing"), "{e:?}"),
    }
    s.synchronize().unwrap();
}

#[test]
fn a_graph_replay_racing_a_capture_begin_is_refused_or_enqueued_before_it() {
    use xpu_kernel::graph::Graph;
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = Arc::new(zeroed(&s));
    let graph = Graph::capture(&s, |c| c.fill(&s, &buf, V)).unwrap();
    let outcome = race(s, || graph.replay(&s), || holds_v(&buf));
    assert_refused_or_before_capture("graph replay", outcome);
}
