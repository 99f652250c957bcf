//! A device's allocator serves only streams of its device: the allocation's device is the
//! memory's device.

mod common;

use xpu_alloc::{AllocConfig, BufferSource, ClStream, DeviceCore};

#[test]
fn a_device_core_refuses_a_stream_of_another_device() {
    if !xpu_testing::devices(2) {
        return;
    }
    let core = DeviceCore::new(
        Box::new(BufferSource::new(0).unwrap()),
        AllocConfig::default(),
    );
    let other = common::fresh_stream(1);
    let s1 = other.stream();
    let result = core.allocate(4096, &ClStream::shared(s1));
    match result {
        Ok(ptr) => {
            let dev = ptr.device();
            let write = ptr.view().unwrap().write(&s1, 0, &[1u8; 64]);
            panic!(
                "allocated on device 0's memory for a stream of device 1: DataPtr device \
                 {dev}, write on device 1's stream: {write:?}"
            );
        }
        Err(e) => assert!(
            matches!(
                e,
                xpu_alloc::AllocError::StreamDevice {
                    stream: 1,
                    device: 0
                }
            ),
            "{e}"
        ),
    }
    assert_eq!(
        core.memory_reserved(),
        0,
        "nothing reserved for the refused stream"
    );
    // The device's own streams are served.
    let own = common::fresh_stream(0);
    let ptr = core
        .allocate(4096, &ClStream::shared(own.stream()))
        .unwrap();
    assert_eq!(ptr.device(), 0);
}

/// `record_stream` refuses a stream a graph is capturing through every entry point, as
/// `DataPtr::record_stream` does: the captured work runs at replay, after any marker the
/// allocator could record at the free, so no marker could order the block's reuse after it.
#[test]
fn record_stream_refuses_a_capturing_stream_through_the_device_allocator() {
    let Some([s, c]) = common::device_streams() else {
        return;
    };
    let ptr = xpu_alloc::allocate(4096, &s).unwrap();
    let capture = xpu_stream::CaptureGuard::begin(&c).unwrap();
    let direct = ptr.record_stream(&c).unwrap_err();
    let through_device = xpu_alloc::record_stream(&ptr, &c);
    drop(capture);
    assert!(
        matches!(direct, xpu_alloc::AllocError::Capturing { .. }),
        "{direct}"
    );
    match through_device {
        Err(xpu_alloc::AllocError::Capturing {
            device,
            stream,
            operation,
        }) => assert_eq!((device, stream, operation), (0, c.id(), "record_stream")),
        other => panic!("xpu_alloc::record_stream on a capturing stream: {other:?}"),
    }
    // Nothing was recorded: the block is reusable at once on its stream after the free.
    let address = ptr.address();
    drop(ptr);
    let again = xpu_alloc::allocate(4096, &s).unwrap();
    assert_eq!(again.address(), address);
}
