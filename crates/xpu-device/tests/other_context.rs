//! Commands of a queue on a buffer of another context are refused with `CL_INVALID_CONTEXT`
//! by the runtime itself (OpenCL 3.0 §5.2.2-§5.2.3), before any driver call that could take
//! them: PoCL refuses them too, NVIDIA's enqueue calls were never checked for it (its kernel
//! arguments of another context abort). Nothing is written to either buffer, and the queue
//! stays usable.

mod common;

use xpu_device::backend::{Buffer, MemFlags, PinnedBuffer, PinnedBytes};
use xpu_device::DeviceError;

fn code(err: &DeviceError) -> Option<i32> {
    err.cl_error().map(|e| e.code)
}

#[test]
fn queue_commands_on_a_buffer_of_another_context_are_invalid_context() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let foreign = Buffer::new(d0.context().unwrap(), 256, MemFlags::default()).unwrap();
    let own = Buffer::new(d1.context().unwrap(), 256, MemFlags::default()).unwrap();
    let q0 = common::queue(d0);
    let q1 = common::queue(d1);
    q0.fill(&foreign, &[5u8], 0, 256, &[]).unwrap();
    q1.fill(&own, &[6u8], 0, 256, &[]).unwrap();
    let mut out = [0u8; 16];
    let cases: Vec<(&str, DeviceError)> = vec![
        ("write", q1.write(&foreign, 0, &[1u8; 16]).unwrap_err()),
        ("read", q1.read(&foreign, 0, &mut out).unwrap_err()),
        (
            "copy from",
            q1.copy(&foreign, 0, &own, 0, 16, &[]).unwrap_err(),
        ),
        (
            "copy to",
            q1.copy(&own, 0, &foreign, 0, 16, &[]).unwrap_err(),
        ),
        ("fill", q1.fill(&foreign, &[1u8], 0, 16, &[]).unwrap_err()),
    ];
    for (what, err) in &cases {
        assert_eq!(code(err), Some(-34), "{what}: {err}");
    }
    let mut pinned = PinnedBuffer::new(d1.context().unwrap(), &q1, 64).unwrap();
    let err = q1
        .copy_pinned(&foreign, 0, PinnedBytes::From(&pinned), 0, 16, &[])
        .unwrap_err();
    assert_eq!(code(&err), Some(-34), "pinned write: {err}");
    let err = q1
        .copy_pinned(&foreign, 0, PinnedBytes::Into(&mut pinned), 0, 16, &[])
        .unwrap_err();
    assert_eq!(code(&err), Some(-34), "pinned read: {err}");
    // Nothing was written, and both queues still work.
    assert_eq!(out, [0u8; 16]);
    assert_eq!(common::read_bytes(&q0, &foreign, 256), vec![5u8; 256]);
    assert_eq!(common::read_bytes(&q1, &own, 256), vec![6u8; 256]);
    println!("scenario-ok");
}
