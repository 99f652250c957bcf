//! Review (fresh eyes, safe code only) of the interop layer: `clblast_sgemm`, a safe
//! function, refuses an output region that aliases an input before CLBlast runs. Skipped
//! without a device unless `XPU_REQUIRE_DEVICE=1`, and without CLBlast unless
//! `XPU_REQUIRE_CLBLAST=1`.

use xpu_device::foreign::clblast::Clblast;
use xpu_kernel::{
    clblast_sgemm, ClRegion, DeviceBuffer, InteropError, RowMajorSgemm, StreamMemoryExt, TempBuffer,
};

mod common;
use common::Claimed;

fn clblast_stream() -> Option<xpu_stream::Stream> {
    let have = match Clblast::get() {
        Ok(_) => true,
        Err(e) if std::env::var("XPU_REQUIRE_CLBLAST").is_ok_and(|v| v == "1") => {
            panic!("XPU_REQUIRE_CLBLAST=1 but {e}")
        }
        Err(_) => false,
    };
    (xpu_testing::devices(1) && have).then(|| xpu_stream::get_stream_from_pool(0, 0).unwrap())
}

/// C passed as A (the same writable region for both, which the borrow rules allow since
/// `RowMajorSgemm` takes shared references to regions): `C = A·B` would read A while
/// overwriting it. Refused with `InteropError::Aliased` before CLBlast sees the regions, and C
/// keeps its values; as B likewise. It used to be handed to CLBlast.
#[test]
fn clblast_sgemm_refuses_an_output_that_aliases_an_input() {
    let Some(s) = clblast_stream() else {
        return;
    };
    let n = 64;
    let c0: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
    let b = DeviceBuffer::from_slice(&vec![1.0f32; n * n], &s).unwrap();
    let mut c = DeviceBuffer::from_slice(&c0, &s).unwrap();
    {
        let rb = ClRegion::new(&b).unwrap();
        let rc = ClRegion::new_mut(&mut c).unwrap();
        for (name, g) in [
            ("A", RowMajorSgemm::new((n, n, n), &rc, &rb, &rc)),
            ("B", RowMajorSgemm::new((n, n, n), &rb, &rc, &rc)),
        ] {
            let r = clblast_sgemm(&s, &g, TempBuffer::AsNeeded);
            assert!(
                matches!(
                    &r,
                    Err(InteropError::Aliased { written: "C", read, start: 0, end })
                        if *read == name && *end == n * n
                ),
                "C aliasing {name}: {r:?}"
            );
        }
    }
    assert_eq!(s.dtoh_sync_copy(&c).unwrap(), c0, "C was written");
}

/// `ClRegion::new` checks the region against its allocation (element range within
/// `DataPtr::size`) rather than trusting the `DeviceRegion` impl, so `require` /
/// `require_matrix` (what `clblast_sgemm`'s safety rests on) hold for the memory really
/// there. A region claiming 2^20 elements of a 16-element allocation used to become a
/// `ClRegion` of 2^20 elements.
#[test]
fn a_region_beyond_its_allocation_is_refused() {
    if !xpu_testing::devices(1) {
        return;
    }
    let s = xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let buf = DeviceBuffer::<f32>::from_slice(&[1.0; 16], &s).unwrap();
    for (offset, len) in [(0, 1 << 20), (10, 7), (17, 0), (usize::MAX / 2, 1)] {
        let claimed = Claimed {
            ptr: buf.data_ptr(),
            offset,
            len,
        };
        let r = ClRegion::new(&claimed).map(|r| r.len());
        assert!(
            matches!(
                &r,
                Err(InteropError::OutsideAllocation { offset: o, len: l, elements: 16 })
                    if (*o, *l) == (offset, len)
            ),
            "elements {offset}+{len} of 16: {r:?}"
        );
    }
    // The whole allocation and an empty range at its end are fine.
    for (offset, len) in [(0, 16), (16, 0), (3, 13)] {
        let claimed = Claimed {
            ptr: buf.data_ptr(),
            offset,
            len,
        };
        assert_eq!(ClRegion::new(&claimed).unwrap().len(), len);
    }
}
