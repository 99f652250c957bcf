//! Findings of the soundness review of the backend: each test failed before its fix.
#![allow(unsafe_code)]

mod common;

use std::time::Duration;

use xpu_device::backend::{wait_for_callbacks, ClEvent, EventStatus};
use xpu_device::fork::{self, ChildExit};

/// `CL_INVALID_EVENT`.
const INVALID_EVENT: i32 = -58;

/// A raw user event wrapped with `from_raw_retained` / `from_raw_owned` can be set, as the
/// docs say (`CL_EVENT_COMMAND_TYPE` is `CL_COMMAND_USER`); a wrapped command event cannot.
/// Before: the wrappers queried `CL_EVENT_REFERENCE_COUNT` (0x11D2) instead of
/// `CL_EVENT_COMMAND_TYPE` (0x11D1), so every wrapped user event was refused.
#[test]
fn a_wrapped_raw_user_event_can_be_set_and_a_wrapped_command_event_cannot() {
    let Some((dev, _ctx, q)) = common::device0_queue() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    // SAFETY: a live event, retained by the wrapper.
    let wrapped = unsafe { ClEvent::from_raw_retained(user.as_raw()) }.unwrap();
    wrapped
        .set_complete()
        .expect("a wrapped user event can be set");
    assert_eq!(user.status().unwrap(), EventStatus::Complete);

    let user2 = dev.create_user_event().unwrap();
    // SAFETY: `into_raw` hands over one reference, which the wrapper takes.
    let owned = unsafe { ClEvent::from_raw_owned(user2.clone().into_raw()) };
    owned
        .set_failed(-5)
        .expect("an owned wrapped user event can fail");
    assert_eq!(user2.status().unwrap(), EventStatus::Error(-5));

    let marker = q.enqueue_marker(&[]).unwrap();
    // SAFETY: a live event, retained by the wrapper.
    let wrapped_marker = unsafe { ClEvent::from_raw_retained(marker.as_raw()) }.unwrap();
    let e = wrapped_marker.set_complete().unwrap_err();
    assert_eq!(e.code, INVALID_EVENT, "{e}");
    q.finish().unwrap();
}

/// `wait_for_callbacks` in a bad-fork child returns at once, like every entry point there.
/// Before: the child had the parent's channel but no callback thread, so the wait never
/// returned (the child was killed at the bound).
#[test]
fn wait_for_callbacks_returns_at_once_in_a_bad_fork_child() {
    let Some((dev, _ctx, _q)) = common::device0_queue() else {
        return;
    };
    // Start the callback thread in the parent.
    let user = dev.create_user_event().unwrap();
    user.on_complete(|_| {}).unwrap();
    user.set_complete().unwrap();
    wait_for_callbacks();
    // SAFETY: in the bad-fork child, `is_in_bad_fork` and `wait_for_callbacks` must only make
    // an atomic load before returning (what this test checks); a hang is bounded.
    let exit = unsafe {
        fork::run_in_forked_child(
            || {
                if !fork::is_in_bad_fork() {
                    return 2;
                }
                wait_for_callbacks();
                0
            },
            Duration::from_secs(20),
        )
    }
    .unwrap();
    assert_eq!(exit, ChildExit::Exited(0));
}

/// `Clblast::open` loads a caller-chosen library and calls its symbols with CLBlast's C
/// signatures, so it is an `unsafe fn` (its `compile_fail` doctest shows a safe call is
/// refused); a missing library is still a typed `NotAvailable` error. (Moved here from
/// xpu-kernel's tests, which may not hold `unsafe`.)
#[test]
fn a_missing_foreign_library_is_a_typed_not_available_error() {
    use xpu_device::foreign::{clblast::Clblast, ForeignError};
    // SAFETY: no library of that name exists, so nothing is loaded or called.
    let e = unsafe { Clblast::open("libxpu-no-such-blas.so.9") }.unwrap_err();
    assert!(
        matches!(&e, ForeignError::NotAvailable { library, .. } if library == "libxpu-no-such-blas.so.9"),
        "{e:?}"
    );
    assert_eq!(e.code(), None);
}

/// `CL_QUEUE_REFERENCE_COUNT` of `q` (OpenCL 3.0 §5.1, table 19). A command's event holds a
/// reference to its queue, so the count grows by one when a command is enqueued: the one thing
/// outside the driver that shows a blocking call has enqueued its command (the call itself
/// returns only once the command is over).
fn queue_reference_count(q: &xpu_device::backend::CommandQueue) -> u32 {
    const QUEUE_REFERENCE_COUNT: u32 = 0x1092;
    let v = opencl3::command_queue::get_command_queue_data(q.as_raw(), QUEUE_REFERENCE_COUNT)
        .expect("clGetCommandQueueInfo(CL_QUEUE_REFERENCE_COUNT)");
    u32::from_ne_bytes([v[0], v[1], v[2], v[3]])
}

/// A blocking transfer queued behind a command that then fails: the driver terminates the
/// transfer without running it (PoCL returns `CL_SUCCESS` from the blocking call all the
/// same), so `read`/`write` must report the failure instead of `Ok` with nothing transferred.
///
/// The order is made, not hoped for: on a fresh queue, a marker waits on a user event; another
/// thread fails that event only once the blocking call has enqueued its command, which it sees
/// as one more reference to the queue ([`queue_reference_count`]; nothing else on that queue
/// can take or drop one meanwhile: its only other command, the marker, cannot complete).
/// Failing the event before the call would test nothing: PoCL then runs the transfer normally.
/// A driver whose events hold no queue reference (checked with the marker first) skips.
/// Before (the code before d51564e, or with its status check reverted): `read` returned
/// `Ok(())` with the output never written and `write` returned `Ok(())` with the buffer
/// unchanged, on every run.
#[test]
fn a_blocking_transfer_terminated_by_a_failed_earlier_command_is_an_error() {
    use xpu_device::backend::{Buffer, MemFlags};
    let Some((dev, ctx, setup)) = common::device0_queue() else {
        return;
    };
    let buf = Buffer::new(ctx, 16, MemFlags::default()).unwrap();
    for read in [true, false] {
        setup.write(&buf, 0, &[5u8; 16]).unwrap();
        setup.finish().unwrap();
        let q = common::queue(dev);
        let user = dev.create_user_event().unwrap();
        let alone = queue_reference_count(&q);
        // Kept to the end: the marker's event holds its queue reference all along.
        let marker = q.enqueue_marker(&[&user]).unwrap();
        if queue_reference_count(&q) != alone + 1 {
            eprintln!("skipping: this driver's events hold no reference to their queue");
            user.set_complete().unwrap();
            return;
        }
        let watched = q.clone();
        let before = queue_reference_count(&q);
        let failer = {
            let user = user.clone();
            std::thread::spawn(move || {
                while queue_reference_count(&watched) == before {
                    std::thread::yield_now();
                }
                user.set_failed(-5).unwrap();
            })
        };
        let mut out = [0u8; 16];
        let r = if read {
            q.read(&buf, 0, &mut out)
        } else {
            q.write(&buf, 0, &[9u8; 16])
        };
        failer.join().unwrap();
        assert!(
            matches!(marker.status().unwrap(), EventStatus::Error(_)),
            "the earlier command failed"
        );
        q.finish().unwrap();
        let mut now = [0u8; 16];
        setup.read(&buf, 0, &mut now).unwrap();
        let what = if read { "read" } else { "write" };
        let e = r.expect_err(&format!(
            "a {what} terminated without running returned Ok (read output {out:?}, buffer now {now:?})"
        ));
        assert!(e.to_string().contains("clEnqueue"), "{e}");
        assert_eq!(
            now, [5u8; 16],
            "the terminated transfer left the buffer as it was"
        );
        if read {
            assert_eq!(out, [0u8; 16], "nothing was read");
        }
    }
}

/// Zero-byte copies and fills behave the same on every driver: a command that completes
/// after its wait list and moves nothing (as the blocking `read`/`write` of no bytes, which
/// return at once). Drivers disagree (OpenCL 3.0 §5.2 leaves size 0 to `CL_INVALID_VALUE`;
/// PoCL refuses it for `clEnqueueCopyBuffer` but runs it for `clEnqueueFillBuffer` and
/// `clEnqueueReadBuffer`). Ranges are still checked: an offset past the end is an error.
/// Before: `copy` of 0 bytes failed with `CL_INVALID_VALUE` while `fill` and `copy_pinned`
/// of 0 bytes succeeded; a command buffer refused a 0-byte copy.
#[test]
fn zero_byte_copies_and_fills_are_no_ops_ordered_after_their_wait_list() {
    use xpu_device::backend::{
        Buffer, CommandBuffer, EventStatus, MemFlags, PinnedBuffer, PinnedBytes,
    };
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let buf = Buffer::new(ctx, 64, MemFlags::default()).unwrap();
    let data: Vec<u8> = (0..64).collect();
    q.write(&buf, 0, &data).unwrap();
    let mut pinned = PinnedBuffer::new(ctx, &q, 16).unwrap();
    pinned.as_mut_slice().fill(7);

    let mut gate = common::Gate::new(dev);
    let events = vec![
        q.copy(&buf, 0, &buf, 16, 0, &[gate.event()]).unwrap(),
        q.copy(&buf, 64, &buf, 64, 0, &[gate.event()]).unwrap(),
        q.fill(&buf, &[1, 2, 3, 4], 8, 0, &[gate.event()]).unwrap(),
        q.copy_pinned(&buf, 64, PinnedBytes::From(&pinned), 16, 0, &[gate.event()])
            .unwrap(),
        q.copy_pinned(
            &buf,
            0,
            PinnedBytes::Into(&mut pinned),
            0,
            0,
            &[gate.event()],
        )
        .unwrap(),
    ];
    for e in &events {
        assert_ne!(
            e.status().unwrap(),
            EventStatus::Complete,
            "ordered after the gate"
        );
    }
    gate.open();
    for e in &events {
        e.wait().unwrap();
    }
    let mut now = vec![0u8; 64];
    q.read(&buf, 0, &mut now).unwrap();
    assert_eq!(now, data, "nothing moved");
    assert_eq!(pinned.as_slice(), &[7u8; 16]);
    assert!(
        q.copy(&buf, 65, &buf, 0, 0, &[]).is_err(),
        "offset past the end"
    );
    assert!(
        q.fill(&buf, &[1], 65, 0, &[]).is_err(),
        "offset past the end"
    );

    if let Some(mut cb) = CommandBuffer::new(&q).unwrap() {
        cb.copy(&buf, 0, &buf, 16, 0)
            .expect("a 0-byte copy records nothing");
        cb.fill(&buf, &[1, 2], 2, 0)
            .expect("a 0-byte fill records nothing");
        assert!(
            cb.copy(&buf, 65, &buf, 0, 0).is_err(),
            "offset past the end"
        );
        assert_eq!(cb.len(), 0);
    }
    q.finish().unwrap();
}

/// `CL_DEVICE_LOCAL_MEM_SIZE`.
const DEVICE_LOCAL_MEM_SIZE: u32 = 0x1023;

const TWO_LOCALS: &str = r"
__kernel void two_locals(__local uint *a, __local uint *b, __global uint *out) {
    a[0] = 1;
    b[0] = 2;
    out[0] = a[0] + b[0];
}
";

/// `__local` argument sizes beyond the device's local memory are refused before the driver
/// sees them (each at `set_arg_local`, their sum at the launch), although the kernel's
/// accesses stay inside the sizes given. Runs in a child process: the bug aborts it.
/// Before: PoCL aborted the process at the launch (`setup_kernel_arg_array_with_locals:
/// Assertion (size_t) (start - local_mem) <= local_mem_size failed`, SIGABRT).
#[test]
fn local_arguments_beyond_the_device_local_memory_are_refused_not_a_driver_abort() {
    use xpu_device::backend::{Buffer, Kernel, MemFlags, Program};
    use xpu_device::{DeviceError, KernelArgProblem};
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let local = usize::try_from(dev.id().info_u64(DEVICE_LOCAL_MEM_SIZE).unwrap()).unwrap();
    let out = Buffer::new(ctx, 4, MemFlags::default()).unwrap();
    let program = Program::build(ctx, dev.id(), TWO_LOCALS).unwrap();
    let mut k = Kernel::new(&program, "two_locals").unwrap();
    k.set_arg_buffer(2, &out).unwrap();
    let exceeded = |e: DeviceError| {
        assert!(
            matches!(
                e,
                DeviceError::KernelArg {
                    problem: KernelArgProblem::LocalMemoryExceeded { .. },
                    ..
                }
            ),
            "{e:?}"
        );
    };
    // One argument larger than the whole local memory.
    k.set_arg_local(1, 64).unwrap();
    match k.set_arg_local(0, local + 1) {
        Err(e) => exceeded(e),
        // SAFETY: the kernel touches element 0 of each argument and of `out` only.
        Ok(()) => exceeded(unsafe { q.enqueue_kernel(&k, &[1], None, &[]) }.unwrap_err()),
    }
    // Two arguments that fit one by one, not together.
    k.set_arg_local(0, local / 2 + 4096).unwrap();
    k.set_arg_local(1, local / 2 + 4096).unwrap();
    // SAFETY: as above.
    exceeded(unsafe { q.enqueue_kernel(&k, &[1], None, &[]) }.unwrap_err());
    // Half the local memory: runs. (Exactly all of it runs on PoCL; NVIDIA keeps some local
    // memory for the kernel itself and answers `CL_OUT_OF_RESOURCES`, a typed error, there.)
    k.set_arg_local(0, local / 4).unwrap();
    k.set_arg_local(1, local / 4).unwrap();
    // SAFETY: as above.
    unsafe { q.enqueue_kernel(&k, &[1], None, &[]) }
        .unwrap()
        .wait()
        .unwrap();
    let mut got = [0u8; 4];
    q.read(&out, 0, &mut got).unwrap();
    assert_eq!(u32::from_ne_bytes(got), 3);
    println!("scenario-ok");
}

/// A user event whose every wrapper dropped unset can never be set (OpenCL 3.0 §5.11.2, on
/// `clReleaseEvent`): the commands waiting on it, and every later `finish` of their queue,
/// would wait forever. The last wrapper's drop fails it instead; a clone still alive keeps
/// it unset, and `into_raw` hands the duty to the raw handle's owner. Runs in a child
/// process: the bug hangs it.
/// Before: `marker.wait()` never returned (the child was killed at its bound).
#[test]
fn a_user_event_dropped_unset_fails_so_its_waiters_do_not_hang() {
    use xpu_device::backend::DROPPED_UNSET_STATUS;
    let Some((dev, _, q)) = common::device0_queue_in_child() else {
        return;
    };
    let user = dev.create_user_event().unwrap();
    let kept = user.clone();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    drop(user);
    assert_eq!(
        kept.status().unwrap(),
        EventStatus::Submitted,
        "a clone still lives: unset"
    );
    drop(kept);
    assert!(marker.wait().is_err(), "the waiting marker terminated");
    q.finish().unwrap();
    assert!(matches!(marker.status().unwrap(), EventStatus::Error(_)));

    // Handed out raw: its owner sets it later.
    let user = dev.create_user_event().unwrap();
    let marker = q.enqueue_marker(&[&user]).unwrap();
    let raw = user.clone().into_raw();
    drop(user);
    // SAFETY: `into_raw` gave one reference, taken over here.
    let rewrapped = unsafe { ClEvent::from_raw_owned(raw) };
    assert_eq!(rewrapped.status().unwrap(), EventStatus::Submitted);
    rewrapped.set_complete().unwrap();
    marker.wait().unwrap();

    // Set, then dropped: the status stays.
    let user = dev.create_user_event().unwrap();
    user.set_complete().unwrap();
    let done = q.enqueue_marker(&[&user]).unwrap();
    drop(user);
    done.wait().unwrap();
    assert_eq!(DROPPED_UNSET_STATUS, -14);
    println!("scenario-ok");
}
