//! Float to integer casts of values no integer holds (NaN, infinities, out of range) are
//! defined, and the same on every driver: OpenCL C leaves a plain conversion of such a value
//! to the implementation (OpenCL 3.0 C §6.4.3.3), so a device could answer anything. xpu
//! follows Rust's `as`: truncation toward zero, saturation at the type's bounds, NaN to 0
//! (`convert_<type>_sat`). In range, a cast truncates toward zero as before.
//!
//! On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use burn_tensor::{Int, Tensor};
use xpu_burn::{Xpu, XpuDevice};

const VALUES: [f32; 10] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    3e19,
    -3e19,
    3e10,
    2.7,
    -2.7,
    300.0,
    -0.0,
];

#[test]
fn float_to_int_casts_saturate_and_map_nan_to_zero() {
    let dev = XpuDevice::default();
    let t = Tensor::<Xpu, 1>::from_floats(VALUES, &dev);
    let ints: Tensor<Xpu, 1, Int> = t.int();
    assert_eq!(
        ints.into_data().convert::<i64>().to_vec::<i64>().unwrap(),
        VALUES.iter().map(|&v| v as i64).collect::<Vec<_>>(),
        "f32 -> burn's int (i64), as Rust's `as`"
    );
}
