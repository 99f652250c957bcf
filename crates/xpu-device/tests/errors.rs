//! Error values and their messages, and a missing foreign library's typed error (no device
//! needed).

use xpu_device::{ClError, DeviceError, INSTALL_HINT};

#[test]
fn cl_error_names_known_codes() {
    let e = ClError::new("clCreateBuffer", -4);
    assert_eq!(
        e.to_string(),
        "clCreateBuffer failed: CL_MEM_OBJECT_ALLOCATION_FAILURE (-4)"
    );
    assert_eq!(e.code_name(), Some("CL_MEM_OBJECT_ALLOCATION_FAILURE"));
    assert!(e.is_out_of_memory());
    assert!(!e.is_runtime_missing());
    assert_eq!(
        ClError::new("clGetPlatformIDs", -1001).to_string(),
        "clGetPlatformIDs failed: CL_PLATFORM_NOT_FOUND_KHR (-1001)"
    );
    assert!(ClError::new("clGetPlatformIDs", -1001).is_runtime_missing());
    assert!(ClError::new("clGetPlatformIDs", -2000).is_runtime_missing());
    assert!(ClError::new("clCreateBuffer", -5).is_out_of_memory());
    assert!(ClError::new("clCreateBuffer", -61).is_out_of_memory());
    assert!(!ClError::new("clCreateBuffer", -30).is_out_of_memory());
}

#[test]
fn cl_error_keeps_unknown_codes_as_numbers() {
    let e = ClError::new("clFoo", -9999);
    assert_eq!(e.code_name(), None);
    assert_eq!(e.code, -9999);
    assert_eq!(
        e.to_string(),
        "clFoo failed: unknown OpenCL error code (-9999)"
    );
}

#[test]
fn device_error_messages() {
    assert_eq!(
        DeviceError::InvalidDevice { index: 7, count: 2 }.to_string(),
        "device 7 is out of range: 2 device(s) available"
    );
    let no_rt = DeviceError::NoRuntime {
        source: ClError::new("clGetPlatformIDs", -1001),
    };
    let msg = no_rt.to_string();
    assert!(
        msg.contains("apt-get install pocl-opencl-icd ocl-icd-libopencl1"),
        "{msg}"
    );
    assert!(msg.contains(INSTALL_HINT));
    assert_eq!(no_rt.cl_error().unwrap().code, -1001);
    let wrapped = DeviceError::from(ClError::new("clEnqueueReadBuffer", -5));
    assert_eq!(
        wrapped.to_string(),
        "clEnqueueReadBuffer failed: CL_OUT_OF_RESOURCES (-5)"
    );
    assert!(wrapped.is_out_of_memory());
    assert_eq!(DeviceError::InvalidArgument("x".into()).cl_error(), None);
    assert_eq!(
        DeviceError::InvalidEnv {
            name: "XPU_DEVICE_TYPE",
            value: "bogus".into(),
            expected: "gpu, cpu or all",
        }
        .to_string(),
        "invalid value \"bogus\" for XPU_DEVICE_TYPE: expected gpu, cpu or all"
    );
}

// A missing foreign library.

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
