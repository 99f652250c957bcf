//! Element types on the device: burn's [`DType`] to OpenCL C types, and the device features
//! each needs.

use burn_tensor::DType;

use crate::error::{Error, Result};

/// The OpenCL C type that stores elements of `dtype` (`bool` is stored as `uchar`, 0 or 1,
/// which is also how burn's `TensorData` lays bools out).
///
/// # Errors
/// [`Error::DType`] for bf16 and quantized types (OpenCL C has no bf16 type).
pub fn cl_type(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::F64 => "double",
        DType::F32 | DType::Flex32 => "float",
        DType::F16 => "half",
        DType::I64 => "long",
        DType::I32 => "int",
        DType::I16 => "short",
        DType::I8 => "char",
        DType::U64 => "ulong",
        DType::U32 => "uint",
        DType::U16 => "ushort",
        DType::U8 | DType::Bool => "uchar",
        other => return Err(Error::DType(other)),
    })
}

/// Bytes per element of `dtype` on the device.
pub fn size_of(dtype: DType) -> usize {
    match dtype {
        DType::F64 | DType::I64 | DType::U64 => 8,
        DType::F32 | DType::Flex32 | DType::I32 | DType::U32 => 4,
        DType::F16 | DType::BF16 | DType::I16 | DType::U16 => 2,
        _ => 1,
    }
}

/// Whether `dtype` is a floating-point type.
pub fn is_float(dtype: DType) -> bool {
    matches!(
        dtype,
        DType::F64 | DType::F32 | DType::Flex32 | DType::F16 | DType::BF16
    )
}

/// Whether `dtype` is a signed integer type.
pub fn is_signed_int(dtype: DType) -> bool {
    matches!(dtype, DType::I64 | DType::I32 | DType::I16 | DType::I8)
}

/// The canonical stored dtype (`Flex32` is stored as `F32`).
pub fn canonical(dtype: DType) -> DType {
    match dtype {
        DType::Flex32 => DType::F32,
        d => d,
    }
}

/// The `#pragma` lines a program using these OpenCL C types needs.
pub fn pragmas(types: &[&str]) -> String {
    let mut s = String::new();
    if types.contains(&"double") {
        s.push_str("#pragma OPENCL EXTENSION cl_khr_fp64 : enable\n");
    }
    if types.contains(&"half") {
        s.push_str("#pragma OPENCL EXTENSION cl_khr_fp16 : enable\n");
    }
    s
}
