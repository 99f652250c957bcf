//! Review h48 (of 25874a8: `Stream::query` answers `true` on the marker an earlier query kept
//! once it completed, when nothing was noted as enqueued through the queue's wrappers after
//! it): the commands a foreign library enqueues through the safe [`clblast_sgemm`] (on the
//! native stream's raw queue, its event adopted by `ForeignCall::call`) are never noted, so a
//! query of an idle native stream right after the call answers `true` on the old marker while
//! the SGEMM is still queued or running. Skipped without a device or CLBlast.

use xpu_device::foreign::clblast::Clblast;
use xpu_kernel::{clblast_sgemm, ClRegion, RowMajorSgemm, StreamMemoryExt, TempBuffer};

/// Polls `s.query()` until it answers `true`, for up to 60 s.
fn query_until_true(s: &xpu_stream::Stream) -> bool {
    xpu_testing::true_within(std::time::Duration::from_secs(60), || s.query().unwrap())
}

/// `Stream::query() == true` means every command submitted to the stream before the call
/// completed: the SGEMM's adopted event, read after such a `true`, must read complete too.
/// The SGEMM (1024^3, seconds on a CPU device) is long enough that it is still pending when
/// the query runs; the assertion itself needs no timing: an event that reads pending after the
/// query returned was pending during the whole query.
#[test]
fn a_query_after_a_clblast_sgemm_on_an_idle_native_stream_does_not_answer_true_early() {
    if !xpu_testing::devices(1) || Clblast::get().is_err() {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let n = 1024;
    let a = s.htod_copy(&vec![1.0f32; n * n]).unwrap();
    let b = s.htod_copy(&vec![0.5f32; n * n]).unwrap();
    let mut c = s.htod_copy(&vec![0.0f32; n * n]).unwrap();
    let (ra, rb) = (ClRegion::new(&a).unwrap(), ClRegion::new(&b).unwrap());
    let rc = ClRegion::new_mut(&mut c).unwrap();
    let g = RowMajorSgemm::new((n, n, n), &ra, &rb, &rc);

    // A first SGEMM, waited for (CLBlast builds its kernels on first use).
    clblast_sgemm(&s, &g, TempBuffer::AsNeeded)
        .unwrap()
        .event
        .synchronize()
        .unwrap();
    s.synchronize().unwrap();
    // The stream is idle: its query turns true (and keeps its marker).
    assert!(query_until_true(&s), "the idle stream's query turns true");

    let done = clblast_sgemm(&s, &g, TempBuffer::AsNeeded).unwrap();
    let stream_idle = s.query().unwrap();
    let sgemm_complete = done.event.query().unwrap();
    assert!(
        !stream_idle || sgemm_complete,
        "Stream::query() answered true while the SGEMM enqueued on the stream before the query \
         (clblast_sgemm, workspace {} bytes) was still pending",
        done.workspace_bytes
    );
    done.event.synchronize().unwrap();
    s.synchronize().unwrap();
    let got = c.to_vec(&s).unwrap();
    assert!(got.iter().all(|&x| x == 0.5 * n as f32), "C = A . B");
}
