//! Review (h19): defects found by a newcomer through safe calls. Each test failed on the
//! reviewed commit (ac89e9f) and passes since `memory::check_claim` bounds a claimed region
//! before host memory is sized from it and `ClRegion::make` refuses a region whose end in its
//! buffer overflows. Skipped without a device
//! unless `XPU_REQUIRE_DEVICE=1`.
//!
//! The typed-memory and interop entry points take any `DeviceRegion` (a public trait, so a
//! user's impl may claim any offset and length); `ClRegion::new` checks the claim against the
//! allocation ("not taken on trust"), but `memory::to_vec` and the staged `memory::fill`
//! size a host `Vec` from the claim before any check, and `ClRegion::offset` adds the claim
//! to the block's place without overflow checks.
//!
//! Suggested fixes: in `memory::to_vec` (memory.rs:834) and the staged branch of
//! `memory::fill` (memory.rs:891), check the region against its allocation first (offset +
//! len within `data_ptr().size() / size_of::<T>()`, as `ClRegion::make` does, else
//! `MemoryError::OutOfRange`), or build the host buffer with `Vec::try_reserve_exact` and
//! return an error; in `ClRegion::make` (interop.rs) keep the range check for zero-sized `T`
//! (`offset.checked_add(len)` and `base.checked_add(offset)` must fit), and compute
//! `ClRegion::offset` / `offset_as` with `checked_add` (`OffsetOverflow` on overflow).

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{device0_stream, Claimed};
use xpu_alloc::DataPtr;
use xpu_kernel::memory;
use xpu_kernel::{ClRegion, DeviceBuffer, DeviceRegion, DeviceRegionMut};

/// A writable region implemented outside the crate, of any `Pod` element type, whose offset
/// and length are whatever it says.
struct ClaimedMut<'a, T> {
    ptr: &'a DataPtr,
    offset: usize,
    len: usize,
    _t: std::marker::PhantomData<T>,
}

impl<'a, T> ClaimedMut<'a, T> {
    fn new(ptr: &'a DataPtr, offset: usize, len: usize) -> Self {
        ClaimedMut {
            ptr,
            offset,
            len,
            _t: std::marker::PhantomData,
        }
    }
}

impl<T: bytemuck::Pod> DeviceRegion<T> for ClaimedMut<'_, T> {
    fn data_ptr(&self) -> &DataPtr {
        self.ptr
    }
    fn offset(&self) -> usize {
        self.offset
    }
    fn len(&self) -> usize {
        self.len
    }
}
impl<T: bytemuck::Pod> DeviceRegionMut<T> for ClaimedMut<'_, T> {}

/// `memory::to_vec` of a region claiming `usize::MAX` elements of a 64-byte block: a typed
/// error is due (the block holds 16 floats); the library panics instead ("capacity
/// overflow" in `vec![T::zeroed(); src.len()]`, memory.rs `to_vec`, before `copy_dtoh`'s
/// range check). With a claim that fits `isize` bytes but not the host (2^40 floats), the
/// same line aborts the process on allocation failure instead of returning the error.
#[test]
fn to_vec_of_an_over_long_claimed_region_is_an_error_not_a_panic() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::<f32>::zeroed(16, &s).unwrap();
    let claim = Claimed {
        ptr: buf.data_ptr(),
        offset: 0,
        len: usize::MAX,
    };
    let r = catch_unwind(AssertUnwindSafe(|| memory::to_vec(&s, &claim)));
    match r {
        Ok(Err(_)) => {}
        Ok(Ok(v)) => panic!("read {} elements from a 16-element block", v.len()),
        Err(p) => panic!(
            "memory::to_vec panicked on a claimed region instead of returning an error: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
        ),
    }
}

/// `memory::fill` of a 3-byte element type (staged path: `vec![value; dst.len()]`, then
/// `copy_htod`) on a region claiming `usize::MAX` elements of a 48-byte block: the library
/// panics ("capacity overflow") before any range check, instead of a typed error.
#[test]
fn staged_fill_of_an_over_long_claimed_region_is_an_error_not_a_panic() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::<[u8; 3]>::zeroed(16, &s).unwrap();
    let mut claim = ClaimedMut::<[u8; 3]>::new(buf.data_ptr(), 0, usize::MAX);
    let r = catch_unwind(AssertUnwindSafe(|| {
        memory::fill(&s, &mut claim, [1u8, 2, 3])
    }));
    match r {
        Ok(Err(_)) => {}
        Ok(Ok(())) => panic!("filled usize::MAX elements of a 16-element block"),
        Err(p) => panic!(
            "memory::fill panicked on a claimed region instead of returning an error: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| p.downcast_ref::<&str>().copied())
        ),
    }
}

/// A `ClRegion` of a zero-sized element type is made without a range check (`make` skips it
/// when `size_of::<T>()` is 0), so a claimed offset of `usize::MAX` is accepted; then
/// `ClRegion::offset` (`self.base + self.offset`, interop.rs) overflows for a block that is
/// not its segment's first (base > 0): a panic in debug builds, a wrapped offset handed to
/// foreign code in release builds. `offset_as` panics the same way instead of returning
/// `OffsetOverflow`.
#[test]
fn cl_region_offset_of_a_zero_sized_claim_does_not_overflow() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    // Two small blocks: the second lies past the first in its segment (base > 0).
    let first = DeviceBuffer::<u8>::zeroed(512, &s).unwrap();
    let second = DeviceBuffer::<u8>::zeroed(512, &s).unwrap();
    let (_, at) = second.data_ptr().cl_mem_and_offset().unwrap();
    let (_, at0) = first.data_ptr().cl_mem_and_offset().unwrap();
    let ptr = if at > 0 {
        second.data_ptr()
    } else {
        first.data_ptr()
    };
    assert!(at > 0 || at0 > 0, "both blocks start a segment");
    let claim = ClaimedMut::<()>::new(ptr, usize::MAX, 0);
    let r = catch_unwind(AssertUnwindSafe(|| match ClRegion::<()>::new(&claim) {
        Err(_) => None,
        Ok(region) => Some((region.offset(), region.offset_as::<usize>().is_err())),
    }));
    match r {
        Ok(None) => {}
        Ok(Some((offset, refused))) => assert!(
            refused,
            "offset_as::<usize> accepted a region at element offset {offset} (wrapped)"
        ),
        Err(_) => panic!("ClRegion::offset overflowed (panicked) for a zero-sized claim"),
    }
}
