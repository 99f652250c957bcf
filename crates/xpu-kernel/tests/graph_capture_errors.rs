//! Commands of the lower layers (stream, events, allocator views, pinned host copies, raw
//! queue access) on a stream a graph is capturing: each is a typed error and nothing runs
//! (the capturing state lives in xpu-stream, so every layer sees it), and the stream is usable
//! once the capture ends, even when the closure failed or panicked. Skipped without a device
//! unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::Arc;

use common::device0_stream;
use xpu_alloc::host::{HostAllocator, HostCopy, HostError};
use xpu_alloc::AllocError;
use xpu_event::{Event, EventError, Gate};
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::DeviceBuffer;
use xpu_stream::StreamError;

fn is_capturing_error(e: &StreamError) -> bool {
    matches!(e, StreamError::Capturing { .. })
}

#[test]
fn lower_layer_commands_on_a_capturing_stream_are_typed_errors() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = Arc::new(DeviceBuffer::from_slice(&[7.0f32; 64], &s).unwrap());
    let other = DeviceBuffer::from_slice(&[1.0f32; 64], &s).unwrap();
    let mut host = HostAllocator::global().allocate_on(0, 256).unwrap();
    host.as_mut_slice().fill(0);
    let gate = Gate::new(0).unwrap();
    let graph = Graph::capture(&s, |c| {
        assert!(s.is_capturing());
        // xpu-stream: synchronize, query, device-wide synchronize, raw queue access.
        let e = s.synchronize().unwrap_err();
        assert!(is_capturing_error(&e), "{e}");
        let e = s.query().unwrap_err();
        assert!(is_capturing_error(&e), "{e}");
        let e = xpu_stream::synchronize(0).unwrap_err();
        assert!(is_capturing_error(&e), "{e}");
        let e = s.as_raw().unwrap_err();
        assert!(is_capturing_error(&e), "{e}");
        // xpu-event: record, wait, gate.
        let e = Event::default().record(&s).unwrap_err();
        assert!(
            matches!(e, EventError::Stream(StreamError::Capturing { .. })),
            "{e}"
        );
        let e = gate.block(&s).unwrap_err();
        assert!(
            matches!(e, EventError::Stream(StreamError::Capturing { .. })),
            "{e}"
        );
        // xpu-alloc: block copies, fills, writes and record_stream.
        let view = buf.data_ptr().view()?;
        let e = view.fill(&s, &[0, 0, 0, 0], 0, 256).unwrap_err();
        assert!(matches!(e, AllocError::Capturing { .. }), "{e}");
        let e = view
            .copy_from(&s, &other.data_ptr().view()?, 0, 0, 256)
            .unwrap_err();
        assert!(matches!(e, AllocError::Capturing { .. }), "{e}");
        let e = view.write(&s, 0, &[0u8; 4]).unwrap_err();
        assert!(matches!(e, AllocError::Capturing { .. }), "{e}");
        let e = other.data_ptr().record_stream(&s).unwrap_err();
        assert!(matches!(e, AllocError::Capturing { .. }), "{e}");
        // xpu-host: record_stream names the device and the stream, and records nothing
        // (else freeing the block would record its marker on the capturing stream).
        let e = host.record_stream(&s).unwrap_err();
        assert_eq!(
            e,
            HostError::Stream(StreamError::Capturing {
                device: 0,
                id: s.id(),
                operation: "pinned host record_stream",
            })
        );
        assert!(host.recorded_streams().is_empty());
        let e = xpu_alloc::host::host_record_event(&host, &s).unwrap_err();
        assert!(
            matches!(e, HostError::Stream(StreamError::Capturing { .. })),
            "{e}"
        );
        assert!(host.recorded_streams().is_empty());
        // xpu-host: pinned copies both ways.
        let e = s.copy_from_host(&host, buf.data_ptr()).unwrap_err();
        assert!(
            matches!(e, HostError::Stream(StreamError::Capturing { .. })),
            "{e}"
        );
        let e = s.copy_to_host(buf.data_ptr(), &mut host).unwrap_err();
        assert!(
            matches!(e, HostError::Stream(StreamError::Capturing { .. })),
            "{e}"
        );
        c.fill(&s, &buf, 2.0f32)
    })
    .unwrap();
    // Nothing of the above ran: the buffer and the host block are untouched.
    assert!(!s.is_capturing());
    assert_eq!(buf.to_vec(&s).unwrap(), vec![7.0f32; 64]);
    assert!(host.as_slice().iter().all(|&b| b == 0));
    // The stream is usable directly again, at every layer.
    s.synchronize().unwrap();
    s.query().unwrap();
    xpu_stream::synchronize(0).unwrap();
    s.as_raw().unwrap();
    Event::default().record(&s).unwrap();
    other.data_ptr().record_stream(&s).unwrap();
    assert!(host.record_stream(&s).unwrap());
    assert_eq!(host.recorded_streams(), vec![s]);
    s.copy_to_host(buf.data_ptr(), &mut host).unwrap();
    assert_eq!(&host.as_slice()[..4], &7.0f32.to_ne_bytes());
    graph.replay(&s).unwrap();
    assert_eq!(buf.to_vec(&s).unwrap(), vec![2.0f32; 64]);
}

#[test]
fn a_failing_or_panicking_capture_clears_the_capturing_state() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let e = Graph::capture(&s, |_| Err(GraphError::ForeignEvent)).unwrap_err();
    assert!(matches!(e, GraphError::ForeignEvent));
    assert!(!s.is_capturing());
    s.synchronize().unwrap();
    let r = std::panic::catch_unwind(|| {
        let _ = Graph::capture(&s, |_| panic!("in the closure"));
    });
    assert!(r.is_err());
    assert!(!s.is_capturing());
    s.synchronize().unwrap();
    xpu_stream::synchronize(0).unwrap();
}
