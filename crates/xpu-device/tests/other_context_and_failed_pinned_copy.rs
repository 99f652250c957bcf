//! Objects of another context in command buffers and pinned buffers are typed errors
//! (`CL_INVALID_CONTEXT`, no abort), and a pinned buffer is usable again after its copy failed.
//!
//! Review h21's passing probes: mistakes with objects of another context are typed errors
//! (no abort), and a pinned buffer is usable again, without a hang, after its copy failed.

mod common;

use xpu_device::backend::{Buffer, CommandBuffer, MemFlags, PinnedBuffer, PinnedBytes};
use xpu_device::DeviceError;

/// The OpenCL code of a `DeviceError`'s driver error, if any.
fn code(err: &DeviceError) -> Option<i32> {
    err.cl_error().map(|e| e.code)
}

/// Recording a copy or fill of a buffer of another context into a command buffer is
/// `CL_INVALID_CONTEXT`, and the command buffer stays usable.
#[test]
fn command_buffer_commands_on_a_buffer_of_another_context_are_typed_errors() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let foreign = Buffer::new(d0.context().unwrap(), 256, MemFlags::default()).unwrap();
    let own = Buffer::new(d1.context().unwrap(), 256, MemFlags::default()).unwrap();
    let q1 = common::queue(d1);
    let Some(mut cb) = CommandBuffer::new(&q1).unwrap() else {
        println!("scenario-ok");
        return;
    };
    let err = cb.copy(&foreign, 0, &own, 0, 16).unwrap_err();
    assert_eq!(code(&err), Some(-34), "{err}");
    let err = cb.copy(&own, 0, &foreign, 0, 16).unwrap_err();
    assert_eq!(code(&err), Some(-34), "{err}");
    let err = cb.fill(&foreign, &[1u8], 0, 16).unwrap_err();
    assert_eq!(code(&err), Some(-34), "{err}");
    assert_eq!(cb.len(), 0);
    cb.fill(&own, &[7u8], 0, 256).unwrap();
    cb.finalize().unwrap();
    cb.enqueue().unwrap();
    q1.finish().unwrap();
    assert_eq!(common::read_bytes(&q1, &own, 256), vec![7u8; 256]);
    println!("scenario-ok");
}

/// A pinned buffer made on one device's context with another device's queue is
/// `CL_INVALID_CONTEXT` (from the map), not a pointer into nothing.
#[test]
fn a_pinned_buffer_with_a_queue_of_another_context_is_a_typed_error() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let q1 = common::queue(d1);
    let err = PinnedBuffer::new(d0.context().unwrap(), &q1, 4096).unwrap_err();
    assert_eq!(code(&err), Some(-34), "{err}");
    println!("scenario-ok");
}

/// After a pinned copy failed through its wait list, the host views return (no wait for a
/// copy that will never complete) and a new copy of the same buffer works.
#[test]
fn a_pinned_buffer_is_usable_after_its_copy_failed() {
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let dev_buf = Buffer::new(ctx, 64, MemFlags::default()).unwrap();
    let mut pinned = PinnedBuffer::new(ctx, &q, 64).unwrap();
    pinned.as_mut_slice().fill(9);
    let user = dev.create_user_event().unwrap();
    let failed = q
        .copy_pinned(&dev_buf, 0, PinnedBytes::Into(&mut pinned), 0, 64, &[&user])
        .unwrap();
    user.set_failed(-5).unwrap();
    // PoCL fails it at once; NVIDIA's driver reports the failure a little later.
    assert!(failed.wait().is_err());
    assert!(failed.is_complete().is_err());
    assert!(!pinned.has_copies_in_flight());
    assert_eq!(
        pinned.as_slice(),
        &[9u8; 64][..],
        "the failed copy wrote nothing"
    );
    // PoCL fails the later commands of a queue after a failed one: a fresh queue.
    let q2 = common::queue(dev);
    q2.write(&dev_buf, 0, &[3u8; 64]).unwrap();
    q2.copy_pinned(&dev_buf, 0, PinnedBytes::Into(&mut pinned), 0, 64, &[])
        .unwrap();
    assert_eq!(pinned.as_slice(), &[3u8; 64][..]);
    let _ = q.finish();
    q2.finish().unwrap();
    println!("scenario-ok");
}
