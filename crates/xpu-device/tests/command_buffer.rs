//! `cl_khr_command_buffer` where the device reports it (PoCL 3.x: version 0.9.0): support is
//! read at run time, a recorded kernel/copy/fill sequence gives the results of the same
//! commands enqueued one by one, the buffer holds its kernels, and a buffer is enqueued
//! again while a previous enqueue is pending (held by a user event, no sleeps). On a device
//! without the extension the support query answers `None` and creation gives `None`.

mod common;

use xpu_device::backend::{
    command_buffer_support, Buffer, CommandBuffer, Kernel, MemFlags, Program,
};

const ADD: &str = r"
__kernel void add(__global uint *x, uint k) {
    size_t i = get_global_id(0);
    x[i] += k;
}
";

#[test]
fn command_buffer_replays_recorded_commands_and_allows_a_pending_reenqueue() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let support = command_buffer_support(dev.id()).unwrap();
    let Some(mut cb) = CommandBuffer::new(&q).unwrap() else {
        assert!(support.is_none(), "supported but not created: {support:?}");
        return;
    };
    let support = support.unwrap();
    assert_eq!((support.version.0, support.version.1), (0, 9));
    let program = Program::build(ctx, dev.id(), ADD).unwrap();
    let n = 64usize;
    let x = Buffer::new(ctx, n * 4, MemFlags::default()).unwrap();
    let y = Buffer::new(ctx, n * 4, MemFlags::default()).unwrap();
    // x = 1; x += 5; y = x; x += 7, with one kernel per launch: their arguments stay as
    // recorded while the buffer lives (`CommandBuffer::kernel`'s contract).
    let mut add5 = Kernel::new(&program, "add").unwrap();
    let mut add7 = Kernel::new(&program, "add").unwrap();
    for (k, v) in [(&mut add5, 5u32), (&mut add7, 7u32)] {
        k.set_arg_buffer(0, &x).unwrap();
        k.set_arg(1, v).unwrap();
    }
    cb.fill(&x, &1u32.to_ne_bytes(), 0, n * 4).unwrap();
    // SAFETY: n work-items touch x[0..n), the n-element buffer, at every enqueue; add5's
    // arguments are not changed while `cb` lives.
    unsafe { cb.kernel(&add5, &[n], None) }.unwrap();
    cb.copy(&x, 0, &y, 0, n * 4).unwrap();
    // SAFETY: as above, for add7.
    unsafe { cb.kernel(&add7, &[n], None) }.unwrap();
    assert_eq!(cb.len(), 4);
    assert!(cb.enqueue().is_err(), "enqueue before finalize");
    cb.finalize().unwrap();
    assert!(cb.fill(&x, &[0; 4], 0, 4).is_err(), "record after finalize");
    // The buffer holds its kernels and buffers.
    drop((add5, add7));

    // A pending enqueue: the queue waits on a user event, the buffer is enqueued twice.
    let mut gate = common::Gate::new(dev);
    q.enqueue_barrier(&[gate.event()]).unwrap();
    let first = cb.enqueue().unwrap();
    let second = cb.enqueue().unwrap();
    q.flush().unwrap();
    assert!(!first.is_complete().unwrap());
    gate.open();
    q.finish().unwrap();
    assert!(second.is_complete().unwrap());
    assert_eq!(common::read_u32s(&q, &x, n), vec![13u32; n]);
    assert_eq!(common::read_u32s(&q, &y, n), vec![6u32; n]);
}
