//! Programs built from OpenCL C source, kernels and build errors; `__local` arguments beyond
//! the device's local memory.

mod common;

use opencl3::error_codes::{
    CL_BUILD_PROGRAM_FAILURE, CL_INVALID_ARG_SIZE, CL_INVALID_ARG_VALUE, CL_INVALID_CONTEXT,
    CL_INVALID_KERNEL_NAME,
};
use xpu_device::backend::{Buffer, Kernel, MemFlags, Program};
use xpu_device::{DeviceError, KernelArgProblem};

#[test]
fn kernel_from_source_writes_expected_values() {
    let Some((dev, _, q)) = common::device0_queue() else {
        return;
    };
    let (program, mut kernel, out) = common::scale_index_into(dev, 256, 3);
    // SAFETY: 256 work-items write out[0..256), the 1024-byte buffer; nothing borrows it.
    let ev = unsafe { q.enqueue_kernel(&kernel, &[256], None, &[]) }.unwrap();
    let values = common::read_u32s(&q, &out, 256); // in-order: after the kernel
    assert!(ev.is_complete().unwrap());
    let want: Vec<u32> = (0..256).map(|i| i * 3).collect();
    assert_eq!(values, want);

    // Argument and launch errors.
    let err = kernel.set_arg(1, 3u64).unwrap_err();
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_ARG_SIZE);
    assert_eq!(
        err.to_string(),
        "kernel \"scale_index\", argument 1 (k): a 8-byte value for a parameter of type uint \
         (4 bytes) (CL_INVALID_ARG_SIZE)"
    );
    let err = kernel.set_arg(2, 3u32).unwrap_err();
    assert!(matches!(
        err,
        DeviceError::KernelArg {
            index: 2,
            problem: KernelArgProblem::IndexOutOfRange { count: 2 },
            ..
        }
    ));
    // SAFETY: both launches are refused before reaching the driver.
    unsafe {
        assert!(matches!(
            q.enqueue_kernel(&kernel, &[], None, &[]),
            Err(DeviceError::InvalidArgument(_))
        ));
        assert!(matches!(
            q.enqueue_kernel(&kernel, &[4, 4], Some(&[4]), &[]),
            Err(DeviceError::InvalidArgument(_))
        ));
    }
    // A launch with an argument never set is refused, naming it.
    let mut fresh = Kernel::new(&program, "scale_index").unwrap();
    fresh.set_arg(1, 1u32).unwrap();
    // SAFETY: refused before reaching the driver (argument 0 is not set).
    let err = unsafe { q.enqueue_kernel(&fresh, &[4], None, &[]) }.unwrap_err();
    assert!(
        matches!(
            &err,
            DeviceError::KernelArg { index: 0, name, problem: KernelArgProblem::NotSet, .. }
                if name == "out"
        ),
        "{err:?}"
    );
    let err = Kernel::new(&program, "no_such_kernel").unwrap_err();
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_KERNEL_NAME);
    assert!(matches!(
        Kernel::new(&program, "nul\0name"),
        Err(DeviceError::InvalidArgument(_))
    ));
}

#[test]
fn a_scalar_set_again_reaches_the_kernel_with_the_value_last_set_across_resets() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let (_program, mut kernel) = common::scale_index(dev);
    let out = Buffer::new(ctx, 256 * 4, MemFlags::default()).unwrap();
    let mut launch_with = |k: u32| {
        kernel.reset_args();
        kernel.set_arg_buffer(0, &out).unwrap();
        kernel.set_arg(1, k).unwrap();
        // SAFETY: 256 work-items write out[0..256), the 1024-byte buffer; nothing borrows it.
        unsafe { q.enqueue_kernel_without_event(&kernel, &[256], None, &[]) }.unwrap();
        common::read_u32s(&q, &out, 256) // in-order: after the kernel
    };
    // The same value twice (the second set is no driver call), then another, then back.
    for k in [3u32, 3, 5, 3, 3] {
        let want: Vec<u32> = (0..256).map(|i| i * k).collect();
        assert_eq!(launch_with(k), want, "k = {k}");
    }
}

#[test]
fn syntax_error_gives_the_build_log() {
    let Some(dev) = common::device0() else {
        return;
    };
    let bad = "__kernel void broken(__global int *p) { p[0] = ; }";
    let err = Program::build(dev.context().unwrap(), dev.id(), bad).unwrap_err();
    match &err {
        DeviceError::Build { source, log } => {
            assert_eq!(source.function, "clBuildProgram");
            assert_eq!(source.code, CL_BUILD_PROGRAM_FAILURE);
            assert!(!log.trim().is_empty(), "empty build log");
            assert!(!log.contains('\0'));
        }
        other => panic!("expected a build error, got {other:?}"),
    }
    assert!(err.to_string().starts_with(
        "OpenCL program build failed (clBuildProgram failed: CL_BUILD_PROGRAM_FAILURE (-11)):\n"
    ));
}

#[test]
fn build_options_and_program_binaries_round_trip() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let src = "__kernel void k(__global uint *out) { out[get_global_id(0)] = K; }";
    // Without the option the macro is undefined: a build error with the log.
    assert!(matches!(
        Program::build(ctx, dev.id(), src),
        Err(DeviceError::Build { .. })
    ));
    let program = Program::build_with_options(ctx, dev.id(), src, "-D K=41").unwrap();
    let binary = program.binary().unwrap();
    assert!(!binary.is_empty());
    // SAFETY: exactly the bytes `binary()` returned for this device a moment ago.
    let again = unsafe { Program::from_binary(ctx, dev.id(), &binary, "-D K=41") }.unwrap();
    let out = Buffer::new(ctx, 16, MemFlags::default()).unwrap();
    for p in [&program, &again] {
        // Arguments are checked on the reloaded program too (-cl-kernel-arg-info applies).
        let mut kernel = Kernel::new(p, "k").unwrap();
        assert!(kernel.set_arg(0, 1u32).is_err());
        kernel.set_arg_buffer(0, &out).unwrap();
        // SAFETY: 4 work-items write out[0..4), the 16-byte buffer.
        drop(unsafe { q.enqueue_kernel(&kernel, &[4], None, &[]) }.unwrap());
        assert_eq!(common::read_u32s(&q, &out, 4), vec![41; 4]);
        // Reset: every argument must be set again before a launch.
        kernel.reset_args();
        // SAFETY: refused before reaching the driver.
        let err = unsafe { q.enqueue_kernel(&kernel, &[4], None, &[]) }.unwrap_err();
        assert!(matches!(
            err,
            DeviceError::KernelArg {
                problem: KernelArgProblem::NotSet,
                ..
            }
        ));
    }
    assert!(matches!(
        // SAFETY: refused before reaching the driver (empty).
        unsafe { Program::from_binary(ctx, dev.id(), &[], "") },
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        Program::build_with_options(ctx, dev.id(), src, "-D K=1\0"),
        Err(DeviceError::InvalidArgument(_))
    ));
}

#[test]
fn a_buffer_dropped_after_set_arg_stays_alive_for_the_launch() {
    let Some((dev, ctx, q)) = common::device0_queue_in_child() else {
        return;
    };
    let (_program, mut kernel, out) = common::scale_index_into(dev, 1 << 18, 3);
    drop(out);
    // Churn the allocator so that freed memory would be reused.
    let others: Vec<Buffer> = (0..8)
        .map(|_| Buffer::new(ctx, 1 << 20, MemFlags::default()).unwrap())
        .collect();
    // SAFETY: the kernel writes out[0..256), inside the 1 MiB argument buffer.
    unsafe { q.enqueue_kernel(&kernel, &[256], None, &[]) }.unwrap();
    q.finish().unwrap();
    // Gated launch, then the kernel (and its buffers) dropped before the launch runs.
    let out2 = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    kernel.set_arg_buffer(0, &out2).unwrap();
    let mut gate = common::Gate::new(dev);
    // SAFETY: as above, 256 u32 = 1024 bytes.
    unsafe { q.enqueue_kernel(&kernel, &[256], None, &[gate.event()]) }.unwrap();
    let check = out2.clone();
    drop((kernel, out2));
    gate.open();
    assert_eq!(common::read_u32s(&q, &check, 256)[10], 30);
    drop(others);
    println!("scenario-ok");
}

#[test]
fn a_scalar_for_a_pointer_parameter_is_refused() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let ctx = dev.context().unwrap();
    let (_program, mut kernel) = common::scale_index(dev);
    let err = kernel.set_arg(0, 0xdead_beef_u64).unwrap_err();
    match &err {
        DeviceError::KernelArg {
            kernel,
            index: 0,
            name,
            problem: KernelArgProblem::ScalarForPointer { type_name },
        } => {
            assert_eq!((kernel.as_str(), name.as_str()), ("scale_index", "out"));
            assert_eq!(type_name, "uint*");
        }
        other => panic!("expected ScalarForPointer, got {other:?}"),
    }
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_ARG_VALUE);
    // Every scalar type is refused for the pointer, and a buffer for the scalar.
    assert!(kernel.set_arg(0, 1u32).is_err());
    assert!(kernel.set_arg(0, 1.0f64).is_err());
    let buf = Buffer::new(ctx, 64, MemFlags::default()).unwrap();
    assert!(matches!(
        kernel.set_arg_buffer(1, &buf),
        Err(DeviceError::KernelArg {
            index: 1,
            problem: KernelArgProblem::BufferForNonPointer { .. },
            ..
        })
    ));
    assert!(matches!(
        kernel.set_arg_local(1, 64),
        Err(DeviceError::KernelArg {
            problem: KernelArgProblem::LocalForNonLocal { .. },
            ..
        })
    ));
    println!("scenario-ok");
}

/// A scalar of the declared size but the other kind is refused: OpenCL reads the bytes as the
/// declared type (§5.9.2), so an integer for a `float` (or a float for a `uint`) would
/// silently be another number. Signedness may differ.
#[test]
fn a_scalar_of_another_kind_than_the_parameter_is_refused() {
    let Some(dev) = common::device0_in_child() else {
        return;
    };
    let (_program, mut kernel) = common::scale_index(dev);
    let err = kernel.set_arg(1, 2.0f32).unwrap_err();
    match &err {
        DeviceError::KernelArg {
            index: 1,
            name,
            problem: KernelArgProblem::KindMismatch { type_name, given },
            ..
        } => assert_eq!(
            (name.as_str(), type_name.as_str(), *given),
            ("k", "uint", "f32")
        ),
        other => panic!("expected KindMismatch, got {other:?}"),
    }
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_ARG_VALUE);
    assert!(
        err.to_string()
            .contains("Rust type f32 for a parameter of type uint"),
        "{err}"
    );
    kernel.set_arg(1, 7u32).unwrap();
    kernel.set_arg(1, 7i32).unwrap();

    const FLOATS: &str = "__kernel void axpb(__global float *y, float a, float b) {
        y[get_global_id(0)] = a * y[get_global_id(0)] + b; }";
    let program = Program::build(dev.context().unwrap(), dev.id(), FLOATS).unwrap();
    let mut kernel = Kernel::new(&program, "axpb").unwrap();
    for (given, err) in [
        ("i32", kernel.set_arg(1, 2i32).unwrap_err()),
        ("u32", kernel.set_arg(2, 2u32).unwrap_err()),
    ] {
        assert!(
            matches!(&err, DeviceError::KernelArg {
                problem: KernelArgProblem::KindMismatch { type_name, given: g },
                ..
            } if type_name == "float" && *g == given),
            "{err:?}"
        );
    }
    kernel.set_arg(1, 2.0f32).unwrap();
    println!("scenario-ok");
}

#[test]
fn a_buffer_of_another_context_is_refused() {
    let Some((d0, d1)) = common::two_devices_in_child() else {
        return;
    };
    let foreign = Buffer::new(d0.context().unwrap(), 1024, MemFlags::default()).unwrap();
    let ctx1 = d1.context().unwrap();
    let (_program, mut kernel) = common::scale_index(d1);
    let q1 = common::queue(d1);
    let err = kernel.set_arg_buffer(0, &foreign).unwrap_err();
    assert!(
        matches!(
            &err,
            DeviceError::KernelArg {
                index: 0,
                problem: KernelArgProblem::OtherContext,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_CONTEXT);
    assert!(err.to_string().contains("another OpenCL context"), "{err}");
    // The kernel stays usable with a buffer of its own context.
    let own = Buffer::new(ctx1, 1024, MemFlags::default()).unwrap();
    kernel.set_arg_buffer(0, &own).unwrap();
    kernel.set_arg(1, 2u32).unwrap();
    // SAFETY: 256 u32 fit the 1024-byte buffer.
    unsafe { q1.enqueue_kernel(&kernel, &[256], None, &[]) }.unwrap();
    assert_eq!(common::read_u32s(&q1, &own, 256)[2], 4);
    // A queue of another context: the driver's typed error, no abort.
    let q0 = common::queue(d0);
    // SAFETY: refused by the driver (CL_INVALID_CONTEXT); otherwise in bounds as above.
    let r = unsafe { q0.enqueue_kernel(&kernel, &[256], None, &[]) };
    println!("queue of another context: {r:?}");
    assert!(r.is_err());
    // A wait-list event of another context.
    let foreign_event = q0.enqueue_marker(&[]).unwrap();
    // SAFETY: as above.
    let r = unsafe { q1.enqueue_kernel(&kernel, &[256], None, &[&foreign_event]) };
    println!("event of another context: {r:?}");
    assert!(r.is_err());
    q1.finish().unwrap();
    println!("scenario-ok");
}

// Local-memory arguments beyond the device's local memory.

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
    // 0 bytes: refused by the runtime (CL_INVALID_ARG_SIZE; NVIDIA's driver accepts it).
    let zero = k.set_arg_local(1, 0).unwrap_err();
    assert!(
        matches!(
            zero,
            DeviceError::KernelArg {
                problem: KernelArgProblem::LocalSizeZero,
                ..
            }
        ),
        "{zero:?}"
    );
    assert_eq!(zero.cl_error().unwrap().code, -51);
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

/// A pooled kernel's pointer set at a byte offset of one buffer, then as a whole other
/// buffer, then at the offset again after `reset_args` (the offset scalar then set again from
/// the kernel's record, no driver call): each launch writes from the first byte it was
/// given, and nothing outside. Errors name the pointer as written (index 0, `out`) also when
/// its hidden offset parameter is what is missing.
#[test]
fn a_pointer_at_an_offset_then_as_a_whole_buffer_writes_from_each_ones_first_byte() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let (_program, mut kernel) = common::scale_index(dev);
    assert_eq!(kernel.num_args(), 2, "the offset parameter is hidden");
    assert!(kernel.takes_offset(0) && !kernel.takes_offset(1) && !kernel.takes_offset(2));
    let segment = std::sync::Arc::new(Buffer::new(ctx, 4096, MemFlags::default()).unwrap());
    let plain = Buffer::new(ctx, 1024, MemFlags::default()).unwrap();
    q.write(&segment, 0, &[0xEE; 4096]).unwrap();
    q.write(&plain, 0, &[0xEE; 1024]).unwrap();
    let scaled = |k: u32| (0..256).map(|i| i * k).collect::<Vec<u32>>();
    for round in 0..2u32 {
        let k = 3 + round;
        kernel.reset_args();
        kernel.set_arg_shared_buffer_at(0, &segment, 2048).unwrap();
        kernel.set_arg(1, k).unwrap();
        // SAFETY: 256 work-items write 1024 bytes from byte 2048 of the 4096-byte buffer.
        unsafe { q.enqueue_kernel_without_event(&kernel, &[256], None, &[]) }.unwrap();
        let got = common::read_u32s(&q, &segment, 1024);
        assert_eq!(
            got[..512],
            vec![0xEEEE_EEEE; 512],
            "round {round}: before the offset"
        );
        assert_eq!(got[512..768], scaled(k), "round {round}: at the offset");
        assert_eq!(got[768..], vec![0xEEEE_EEEE; 256], "round {round}: after");
        kernel.reset_args();
        kernel.set_arg_buffer(0, &plain).unwrap();
        kernel.set_arg(1, k + 10).unwrap();
        // SAFETY: 256 work-items write the 1024-byte buffer.
        unsafe { q.enqueue_kernel_without_event(&kernel, &[256], None, &[]) }.unwrap();
        assert_eq!(
            common::read_u32s(&q, &plain, 256),
            scaled(k + 10),
            "round {round}"
        );
        let got = common::read_u32s(&q, &segment, 1024);
        assert_eq!(
            got[512..768],
            scaled(k),
            "round {round}: the segment is left alone"
        );
    }
    let names_out = |e: &DeviceError, p: fn(&KernelArgProblem) -> bool| {
        matches!(e, DeviceError::KernelArg { index: 0, name, problem, .. }
            if name == "out" && p(problem))
    };
    let e = kernel
        .set_arg_shared_buffer_at(0, &segment, 4096)
        .unwrap_err();
    assert!(
        names_out(&e, |p| matches!(
            p,
            KernelArgProblem::OffsetOutOfRange {
                offset: 4096,
                size: 4096
            }
        )),
        "{e:?}"
    );
    let e = kernel.set_arg(0, 1u64).unwrap_err();
    assert!(
        names_out(&e, |p| matches!(
            p,
            KernelArgProblem::ScalarForPointer { .. }
        )),
        "{e:?}"
    );
    let e = kernel.set_arg_shared_buffer_at(1, &segment, 8).unwrap_err();
    assert!(
        matches!(&e, DeviceError::KernelArg { index: 1, name, problem: KernelArgProblem::NoOffsetParameter, .. } if name == "k"),
        "{e:?}"
    );
    kernel.reset_args();
    kernel.set_arg(1, 1u32).unwrap();
    // SAFETY: refused before reaching the driver (argument 0 and its offset are not set).
    let e = unsafe { q.enqueue_kernel(&kernel, &[4], None, &[]) }.unwrap_err();
    assert!(
        names_out(&e, |p| matches!(p, KernelArgProblem::NotSet)),
        "{e:?}"
    );
}

/// A kernel declared first with unnamed parameters, then defined: the program is rewritten
/// as a whole (the prototype's pointers get unnamed offsets too), not built as written, so
/// the kernel takes a buffer at an offset.
#[test]
fn a_kernel_prototyped_with_unnamed_pointers_takes_offsets() {
    let Some((dev, ctx, q)) = common::device0_queue() else {
        return;
    };
    let src = "__kernel void scale_index(__global uint *, uint);\n\
               __kernel void scale_index(__global uint *out, uint k) {\n\
                   out[get_global_id(0)] = (uint)get_global_id(0) * k;\n\
               }\n";
    let program = Program::build(ctx, dev.id(), src).unwrap();
    let mut kernel = Kernel::new(&program, "scale_index").unwrap();
    assert!(
        kernel.takes_offset(0),
        "the pointer has its offset parameter"
    );
    let buffer = std::sync::Arc::new(Buffer::new(ctx, 2048, MemFlags::default()).unwrap());
    q.write(&buffer, 0, &[0; 2048]).unwrap();
    kernel.set_arg_shared_buffer_at(0, &buffer, 1024).unwrap();
    kernel.set_arg(1, 3u32).unwrap();
    // SAFETY: 256 work-items write 1024 bytes from byte 1024 of the 2048-byte buffer.
    unsafe { q.enqueue_kernel_without_event(&kernel, &[256], None, &[]) }.unwrap();
    let got = common::read_u32s(&q, &buffer, 512);
    assert_eq!(got[..256], vec![0; 256]);
    assert_eq!(got[256..], (0..256).map(|i| i * 3).collect::<Vec<u32>>());
}
