//! A typed buffer whose element type cannot match the pointer parameter's is refused at the
//! launch (`KernelArgProblem::ElementType`), in a direct launch and in a graph capture; byte
//! buffers, untyped allocations and matching element types pass, and the kernel computes.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::sync::Arc;

use common::device0_stream;
use xpu_device::{DeviceError, KernelArgProblem};
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::{DeviceBuffer, Function, KernelError, LaunchExt, Program};
use xpu_stream::Stream;

const N: usize = 64;

const SOURCE: &str = r"
__kernel void scale(__global float *y, __global const uint *idx, __global float4 *v,
                    __global uchar *bytes, float a) {
    size_t i = get_global_id(0);
    y[i] = a * (float)idx[i];
    if (i == 0) { v[0] = v[0] * a; bytes[0] = (uchar)7; }
}
";

fn scale(device: usize) -> Function {
    Program::build(device, SOURCE, "")
        .unwrap()
        .function("scale")
        .unwrap()
}

/// The `ElementType` problem of argument `index` in `err`, as `(expected, found)`.
fn element_problem(err: &KernelError, index: u32) -> Option<(String, &'static str)> {
    match err {
        KernelError::Device(DeviceError::KernelArg {
            index: i,
            problem: KernelArgProblem::ElementType { expected, found },
            ..
        }) if *i == index => Some((expected.clone(), found)),
        _ => None,
    }
}

fn buffers(
    s: &Stream,
) -> (
    DeviceBuffer<f32>,
    DeviceBuffer<u32>,
    DeviceBuffer<f32>,
    DeviceBuffer<u8>,
) {
    let y = DeviceBuffer::<f32>::zeroed(N, s).unwrap();
    let idx = DeviceBuffer::from_slice(&(0..N as u32).collect::<Vec<_>>(), s).unwrap();
    let v = DeviceBuffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0], s).unwrap();
    let bytes = DeviceBuffer::<u8>::zeroed(4, s).unwrap();
    (y, idx, v, bytes)
}

#[test]
fn a_typed_buffer_of_another_element_type_than_the_pointer_parameter_is_refused() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = scale(0);
    let (y, idx, v, bytes) = buffers(&s);

    // f64 for `float *y`: the kernel would read pairs of floats out of each double.
    let doubles = DeviceBuffer::<f64>::zeroed(N, &s).unwrap();
    let err = s.launch(&f, &[N], None).unwrap().arg(&doubles).unwrap_err();
    println!("f64 for float*: {err}");
    assert_eq!(
        element_problem(&err, 0),
        Some(("float*".to_owned(), "f64")),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("f64") && err.to_string().contains("float*"),
        "{err}"
    );
    // f32 for `uint *idx`: same size, another kind.
    let err = s
        .launch(&f, &[N], None)
        .unwrap()
        .arg(&y)
        .unwrap()
        .arg(&y)
        .unwrap_err();
    assert_eq!(
        element_problem(&err, 1),
        Some(("uint*".to_owned(), "f32")),
        "{err:?}"
    );
    // u64 for `float4 *v`.
    let longs = DeviceBuffer::<u64>::zeroed(4, &s).unwrap();
    let err = s
        .launch(&f, &[N], None)
        .unwrap()
        .arg(&y)
        .unwrap()
        .arg(&idx)
        .unwrap()
        .arg(&longs)
        .unwrap_err();
    assert_eq!(
        element_problem(&err, 2),
        Some(("float4*".to_owned(), "u64")),
        "{err:?}"
    );

    // What may match passes: a byte buffer for `float *y`, an untyped allocation for `uint *`,
    // the component type for `float4 *`, any buffer for `uchar *`.
    let as_bytes = DeviceBuffer::<u8>::zeroed(N * 4, &s).unwrap();
    let launch = s
        .launch(&f, &[N], None)
        .unwrap()
        .arg(&as_bytes)
        .unwrap()
        .arg(idx.data_ptr())
        .unwrap()
        .arg(&v)
        .unwrap()
        .arg(&doubles)
        .unwrap();
    drop(launch);

    // The matching launch computes.
    // SAFETY: N work-items write y[0..N) and read idx[0..N) (both N long); item 0 touches
    // v[0] (4 floats) and bytes[0] (4 bytes); the kernel terminates.
    unsafe {
        s.launch(&f, &[N], None)
            .unwrap()
            .args((&y, &idx, &v, &bytes, 0.5f32))
            .unwrap()
            .enqueue()
            .unwrap();
    }
    let want: Vec<f32> = (0..N).map(|i| 0.5 * i as f32).collect();
    assert_eq!(y.to_vec(&s).unwrap(), want);
    assert_eq!(v.to_vec(&s).unwrap(), vec![0.5, 1.0, 1.5, 2.0]);
    assert_eq!(bytes.to_vec(&s).unwrap(), vec![7, 0, 0, 0]);
}

#[test]
fn a_captured_launch_refuses_a_typed_buffer_of_another_element_type_too() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let f = scale(0);
    let doubles = Arc::new(DeviceBuffer::<f64>::zeroed(N, &s).unwrap());
    let err = Graph::capture(&s, |c| {
        c.launch(&s, &f, &[N], None)?.arg(&doubles)?;
        Ok(())
    })
    .unwrap_err();
    match &err {
        GraphError::Kernel(k) => {
            assert_eq!(
                element_problem(k, 0),
                Some(("float*".to_owned(), "f64")),
                "{err:?}"
            );
        }
        other => panic!("{other:?}"),
    }
}
