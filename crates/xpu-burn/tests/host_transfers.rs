//! Host transfers of burn tensors: every dtype round-trips in odd shapes, mismatched bytes and
//! unsupported dtypes are errors, non-contiguous views read back in row-major order, bools hold
//! only 0 and 1, and `to_device` across devices round-trips.
//!
//! Review h16 (fresh eyes, data transfer): PASSING probes of xpu-burn's host transfers, kept as
//! regression tests. On PoCL (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

use burn_tensor::{Bool, DType, Int, Tensor, TensorData};
use xpu_burn::ops::data::{from_bytes, to_bytes, to_device};
use xpu_burn::{Xpu, XpuDevice};

fn bytes_of(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// Every stored dtype through `from_bytes` / `to_bytes`, in odd shapes (rank 0, ones, primes,
/// zero dims), byte for byte.
#[test]
fn every_dtype_round_trips_in_odd_shapes() {
    let shapes: [&[usize]; 7] = [
        &[],
        &[1],
        &[7],
        &[3, 1, 5],
        &[0],
        &[2, 0, 3],
        &[1, 1, 1, 13],
    ];
    let dtypes = [
        DType::F32,
        DType::I64,
        DType::I32,
        DType::I16,
        DType::I8,
        DType::U64,
        DType::U32,
        DType::U16,
        DType::U8,
    ];
    for dtype in dtypes {
        for shape in shapes {
            let n: usize = shape.iter().product::<usize>() * xpu_burn::dtype::size_of(dtype);
            let b = bytes_of(n, 5);
            let t = from_bytes(0, &b, shape, dtype).unwrap();
            assert_eq!(to_bytes(&t).unwrap(), b, "{dtype:?} {shape:?}");
        }
    }
}

/// A byte count that does not match the shape, an unsupported dtype: errors, no panic.
#[test]
fn mismatched_bytes_and_unsupported_dtypes_are_errors() {
    assert!(from_bytes(0, &[0u8; 3], &[1], DType::F32).is_err());
    assert!(from_bytes(0, &[0u8; 8], &[1], DType::F32).is_err());
    assert!(from_bytes(0, &[], &[usize::MAX, 2], DType::F32).is_err());
    assert!(from_bytes(0, &[0u8; 2], &[1], DType::BF16).is_err());
    assert!(from_bytes(99, &[0u8; 4], &[1], DType::F32).is_err());
}

/// Non-contiguous views (transposed, flipped, sliced with an offset, broadcast) read back in
/// row-major order.
#[test]
fn non_contiguous_views_read_back_in_row_major_order() {
    let d = XpuDevice::default();
    let v: Vec<i64> = (0..24).collect();
    let t = Tensor::<Xpu, 3, Int>::from_data(TensorData::new(v.clone(), [2, 3, 4]), &d);
    let tt = t.clone().swap_dims(0, 2);
    let got = tt.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    let mut want = Vec::new();
    for k in 0..4 {
        for j in 0..3 {
            for i in 0..2 {
                want.push(v[i * 12 + j * 4 + k]);
            }
        }
    }
    assert_eq!(got, want);
    let s = t.clone().slice([1..2, 1..3, 2..4]);
    let got = s.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    assert_eq!(got, vec![18, 19, 22, 23]);
    let f = t.clone().flip([2]);
    let got = f.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    assert_eq!(&got[..4], &[3, 2, 1, 0]);
    let one = Tensor::<Xpu, 1, Int>::from_data(TensorData::new(vec![7i64], [1]), &d);
    let e = one.expand([5]);
    let got = e.into_data().convert::<i64>().to_vec::<i64>().unwrap();
    assert_eq!(got, vec![7; 5]);
}

/// Bool tensors: from_data of bools and of u8 (converted), into_data as valid bools; empty
/// bool tensors are all false.
#[test]
fn bool_transfers_hold_only_zero_and_one() {
    let d = XpuDevice::default();
    let b = Tensor::<Xpu, 1, Bool>::from_data(TensorData::new(vec![true, false, true], [3]), &d);
    assert_eq!(
        b.into_data().to_vec::<bool>().unwrap(),
        vec![true, false, true]
    );
    // A float tensor's bytes left in the cache: an empty bool tensor must still be 0/1.
    drop(Tensor::<Xpu, 1>::from_data(
        TensorData::new(vec![3.5f32; 64], [64]),
        &d,
    ));
    let e = Tensor::<Xpu, 1, Bool>::empty([256], &d);
    let raw = e.into_data();
    assert!(raw.as_bytes().iter().all(|&x| x <= 1));
}

/// Across the two PoCL devices and back, including empty tensors.
#[test]
fn to_device_across_devices_round_trips() {
    if xpu::device_count() < 2 {
        return;
    }
    let b = bytes_of(4 * 37, 1);
    let t = from_bytes(0, &b, &[37], DType::F32).unwrap();
    let u = to_device(&t, 1).unwrap();
    assert_eq!(u.device(), 1);
    assert_eq!(to_bytes(&u).unwrap(), b);
    let e = from_bytes(0, &[], &[0, 4], DType::F32).unwrap();
    let f = to_device(&e, 1).unwrap();
    assert_eq!(f.dims(), &[0, 4]);
    assert!(to_bytes(&f).unwrap().is_empty());
}
