//! Programs built from OpenCL C source, kernels and build errors.

mod common;

use xpu_device::backend::{Buffer, Kernel, MemFlags, Program};
use xpu_device::DeviceError;

const SCALE: &str = r"
__kernel void scale_index(__global uint *out, uint k) {
    size_t i = get_global_id(0);
    out[i] = (uint)i * k;
}
";

const CL_BUILD_PROGRAM_FAILURE: i32 = -11;
const CL_INVALID_KERNEL_NAME: i32 = -46;
const CL_INVALID_ARG_SIZE: i32 = -51;

#[test]
fn kernel_from_source_writes_expected_values() {
    let Some(dev) = common::device0("kernel_from_source_writes_expected_values") else {
        return;
    };
    let ctx = dev.context().unwrap();
    let q = common::queue(dev);
    let program = Program::build(ctx, dev.id(), SCALE).unwrap();
    let mut kernel = Kernel::new(&program, "scale_index").unwrap();
    let out = Buffer::new(ctx, 256 * 4, MemFlags::default()).unwrap();
    kernel.set_arg_buffer(0, &out).unwrap();
    kernel.set_arg(1, 3u32).unwrap();
    let ev = q.enqueue_kernel(&kernel, &[256], None, &[]).unwrap();
    let mut bytes = vec![0u8; 256 * 4];
    q.read(&out, 0, &mut bytes).unwrap(); // in-order: after the kernel
    assert!(ev.is_complete().unwrap());
    let values: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let want: Vec<u32> = (0..256).map(|i| i * 3).collect();
    assert_eq!(values, want);

    // Argument and launch errors.
    assert_eq!(
        kernel.set_arg(1, 3u64).unwrap_err().code,
        CL_INVALID_ARG_SIZE
    );
    assert!(matches!(
        q.enqueue_kernel(&kernel, &[], None, &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    assert!(matches!(
        q.enqueue_kernel(&kernel, &[4, 4], Some(&[4]), &[]),
        Err(DeviceError::InvalidArgument(_))
    ));
    let err = Kernel::new(&program, "no_such_kernel").unwrap_err();
    assert_eq!(err.cl_error().unwrap().code, CL_INVALID_KERNEL_NAME);
    assert!(matches!(
        Kernel::new(&program, "nul\0name"),
        Err(DeviceError::InvalidArgument(_))
    ));
}

#[test]
fn syntax_error_gives_the_build_log() {
    let Some(dev) = common::device0("syntax_error_gives_the_build_log") else {
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
