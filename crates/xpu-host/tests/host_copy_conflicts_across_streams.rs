//! Pinned-host copies of one block on two streams or devices (conflicting copies): an upload does
//! not wait on the host for another device's gated download, and a failed download does not
//! silently drop an upload on another stream.
//!
//! Review h41 (fresh eyes, soundness of host memory the device reads or writes): findings in
//! the pinned-host allocator's copies, each a test that fails on the code as reviewed.
//! PoCL 3.1 on the CPU, `POCL_DEVICES="pthread pthread"`; skipped without devices unless
//! `XPU_REQUIRE_DEVICE=1`. Ordering is by user-event gates; where a call must not wait, a
//! helper thread opens the gate once the call returned, or after a timeout while it is blocked
//! (the outcome does not depend on the timeout, only on whether the call waits).

mod host_common;

use std::sync::mpsc;
use std::time::Duration;

use host_common::{device_buffer, have_devices, read_back, test_name, TestResult};
use xpu_event::Gate;
use xpu_host::{HostAllocator, HostCopy};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

const N: usize = 4096;
/// How long the helper waits for the main thread before opening the gate anyway.
const OPEN_AFTER: Duration = Duration::from_millis(500);

/// Runs `call` while `gate` is closed; a helper opens the gate once `call` returned, or after
/// [`OPEN_AFTER`]. Returns `call`'s value and whether the gate was still closed when `call`
/// returned (false: `call` waited for the gate).
fn returned_while_closed<R: Send>(gate: &Gate, call: impl FnOnce() -> R + Send) -> (R, bool) {
    let (tx, rx) = mpsc::channel::<()>();
    std::thread::scope(|s| {
        s.spawn(move || {
            let _ = rx.recv_timeout(OPEN_AFTER);
            gate.open().expect("open the gate");
        });
        let r = call();
        let closed = !gate.is_open();
        let _ = tx.send(());
        (r, closed)
    })
}

/// Finding 2: a pinned host-to-device copy documented as non-blocking ("the copy is enqueued
/// on the stream's queue and the call returns at once", `HostCopy`; "blocking? no" for
/// `copy_htod_pinned` in xpu-kernel) is a host wait for queued work of *another device*.
///
/// Sequence: a gate closes stream s1 of device 1; `s1.copy_to_host(&d1, &mut h)` (a block of
/// device 0's allocator; device-to-host, queued behind the gate); then, on the same thread,
/// `s0.copy_from_host(&h, &d0)` on device 0.
///
/// Observed (3 of 3 runs): `copy_from_host` does not return until the helper opens the gate
/// after 500 ms (`order_after_conflicts` waits on the host, `settle`, for a conflicting copy
/// of another context, before anything is enqueued). The ordering itself is right (d0 gets
/// the bytes of d1). With `Gate::with_open_limit(1, Duration::MAX)` and the gate opened by the
/// same thread after the copy call, as a CUDA-style program does, the call never returns: a
/// hang from safe calls (the gate's default watchdog ends it after 120 s). The event layer
/// already has the non-blocking way across contexts (`ClEvent::forward_to` a user event of the
/// queue's context), which the copy could put in its wait list instead.
#[test]
fn a_pinned_upload_waits_on_the_host_for_another_devices_gated_download() -> TestResult {
    if !have_devices(2, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let s0 = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
    let s1 = get_stream_from_pool(PRIORITY_NORMAL, 1)?;
    let d0 = device_buffer(0, N)?;
    let d1 = device_buffer(1, N)?;
    s1.queue()?.write(&d1, 0, &[0x5A; N])?;
    s0.queue()?.write(&d0, 0, &[0x11; N])?;
    let mut h = alloc.allocate_on(0, N)?;
    h.as_mut_slice().fill(0xEE);
    let gate = Gate::new(1)?;
    gate.block(&s1)?;
    s1.copy_to_host(&d1, &mut h)?;
    let (r, closed) = returned_while_closed(&gate, || s0.copy_from_host(&h, &d0));
    r?;
    s0.synchronize()?;
    s1.synchronize()?;
    assert_eq!(
        read_back(&s0, &d0, 0, N)?,
        vec![0x5A; N],
        "the upload did not see the download"
    );
    assert!(
        closed,
        "copy_from_host on device 0 (documented to return at once) waited on the host for \
         device 1's gated copy into the same block"
    );
    Ok(())
}

/// Finding 3 (a failure imported into an unrelated stream, silently): the runtime orders a
/// pinned upload after the unfinished download into the same block made on another stream of
/// the same device (the download's event goes into the upload's wait list). When that
/// download terminates (its stream's gate fails), the upload on the healthy stream terminates
/// too, and nothing on that stream reports it.
///
/// Sequence: streams a and b of device 0 (queues of their own); a gate closes a;
/// `a.copy_to_host(&da, &mut h)` (h holds 0x22); `b.copy_from_host(&h, &db)` (db holds
/// 0x11); the gate's event set failed (-5); `b.synchronize()`, a blocking write on b, and
/// the reads back all return `Ok`.
///
/// Observed (3 of 3 runs): `h` reads 0x22 (the failed download wrote nothing), `db` still
/// reads 0x11: the upload the user enqueued on b, which depends on nothing the user failed,
/// never ran, and no call on b returned an error (a's `synchronize` is `Ok` too). Not a memory
/// safety break; wrong device bytes after only successful calls on b.
#[test]
fn a_failed_download_on_one_stream_silently_drops_an_upload_on_another() -> TestResult {
    if !have_devices(1, &test_name()) {
        return Ok(());
    }
    let alloc = HostAllocator::new();
    let ea = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0)?;
    let eb = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0)?;
    let (a, b) = (ea.stream(), eb.stream());
    let da = device_buffer(0, N)?;
    let db = device_buffer(0, N)?;
    a.queue()?.write(&da, 0, &[0x5A; N])?;
    b.queue()?.write(&db, 0, &[0x11; N])?;
    let mut h = alloc.allocate_on(0, N)?;
    h.as_mut_slice().fill(0x22);
    let gate = Gate::new(0)?;
    gate.block(&a)?;
    a.copy_to_host(&da, &mut h)?;
    b.copy_from_host(&h, &db)?;
    gate.as_cl_event().set_failed(-5)?;
    let synced = b.synchronize();
    let on_device = read_back(&b, &db, 0, N)?;
    let on_host = h.as_slice().to_vec();
    assert!(
        synced.is_err() || on_device == on_host,
        "stream b reported no error, yet its upload of the block never ran: the block holds \
         {:#x}, the device buffer {:#x}",
        on_host[0],
        on_device[0]
    );
    Ok(())
}
