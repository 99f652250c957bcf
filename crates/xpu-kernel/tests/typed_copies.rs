//! Typed copies (`xpu_kernel::memory`: `to_vec`, `fill`, the pinned host copies) against user
//! regions and other streams: a `DeviceRegion` implemented outside the crate whose claimed
//! offset or length is over-long, overflows, or changes between two reads is a typed error,
//! never a panic or a host allocation sized from the claim; typed pinned uploads and downloads
//! keep their device and pinned blocks until the gated work that uses them ran, and misuse is
//! a typed error. Skipped without a device unless `XPU_REQUIRE_DEVICE=1` (PoCL:
//! `POCL_DEVICES="pthread pthread"`, the cross-device tests skip with one device).
//!
//! Merged from three files of two reviews (review h19: over-long and overflowing claims;
//! review h41: claims that change between reads, the typed pinned copies), each section below
//! as it was in its file.
//!
//! ## From `review_h19.rs`
//!
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
//!
//! ## From `review_h41.rs`
//!
//! Review h41 (fresh eyes, soundness of the typed copies in `xpu_kernel::memory`): findings,
//! each a test that fails on the code as reviewed. PoCL 3.1, `POCL_DEVICES="pthread pthread"`.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.
//!
//! ## From `review_h41_holds.rs`
//!
//! Review h41: what held in the typed pinned copies (`copy_htod_pinned`, `copy_dtoh_pinned`):
//! sequences expected to break them that pass on the code as reviewed. PoCL 3.1,
//! `POCL_DEVICES="pthread pthread"`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use common::{device0_stream, fresh_streams, ramp, Claimed};
use xpu_alloc::host::{host_allocate_on, HostPtr};
use xpu_alloc::DataPtr;
use xpu_event::test_support::Gate;
use xpu_kernel::memory;
use xpu_kernel::memory::{copy_dtoh_pinned, copy_htod_pinned, fill, to_vec};
use xpu_kernel::{ClRegion, DeviceBuffer, DeviceRegion, DeviceRegionMut, MemoryError};

// ---- Formerly review_h19.rs ----

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

// ---- Formerly review_h41.rs ----

/// A `DeviceRegion` written in safe code outside the crate (the traits are public) whose
/// `len()` answers `first` on its first call and `later` on every call after: a region whose
/// claim changes between two reads (a `Cell` counter, an `AtomicUsize` another thread moves,
/// ...). The crate already guards against regions that *claim* more than their block
/// (`check_claim`); this one passes that check and then claims more.
struct Shifty<'a> {
    ptr: &'a xpu_alloc::DataPtr,
    calls: Cell<usize>,
    first: usize,
    later: usize,
}

impl<'a> Shifty<'a> {
    fn new(ptr: &'a xpu_alloc::DataPtr, first: usize, later: usize) -> Self {
        Self {
            ptr,
            calls: Cell::new(0),
            first,
            later,
        }
    }
}

impl<T: bytemuck::Pod> DeviceRegion<T> for Shifty<'_> {
    fn data_ptr(&self) -> &xpu_alloc::DataPtr {
        self.ptr
    }
    fn offset(&self) -> usize {
        0
    }
    fn len(&self) -> usize {
        let n = self.calls.get();
        self.calls.set(n + 1);
        if n == 0 {
            self.first
        } else {
            self.later
        }
    }
}
impl<T: bytemuck::Pod> DeviceRegionMut<T> for Shifty<'_> {}

fn panic_text(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Finding 1 (time of check / time of use in `to_vec` and the staged `fill`).
///
/// Sequence: a 16-element `DeviceBuffer<f32>`; a user region over its block whose `len()` is
/// 4 on the first call and `usize::MAX / 2` on later calls; `to_vec(&s, &region)`.
/// `to_vec` runs `check_claim(src)` (first `len()`: 4 elements, inside the block: passes), then
/// sizes the host vector with a second `src.len()`: `vec![0f32; usize::MAX / 2]`.
///
/// Observed (1 of 1 runs, deterministic): a panic inside the library, "capacity overflow"
/// (alloc::raw_vec), instead of a `MemoryError` (the module promises "Panics: none on user
/// input"). With `later = usize::MAX / 8` (2^63 - 4 bytes, under `isize::MAX`) the same call
/// aborts the whole process instead ("memory allocation of 9223372036854775804 bytes failed",
/// SIGABRT, 1 of 1), so it is probed with the overflowing size only.
/// The staged `fill` (element size not a power of two: `[u8; 3]`) has the same two reads:
/// `check_claim(dst)`, then `vec![value; dst.len()]` (second test below).
#[test]
fn to_vec_sizes_its_vector_from_a_second_read_of_len_after_the_claim_check() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::<f32>::from_slice(&[1.0; 16], &s).unwrap();
    let region = Shifty::new(buf.data_ptr(), 4, usize::MAX / 2);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| to_vec::<f32>(&s, &region)));
    match r {
        Ok(res) => assert!(
            matches!(
                res,
                Err(MemoryError::OutOfRange { .. } | MemoryError::LengthMismatch { .. })
            ) || res.is_ok(),
            "{res:?}"
        ),
        Err(p) => panic!(
            "to_vec panicked in library code on a region whose len() changed after the claim \
             check: {:?}",
            panic_text(&*p)
        ),
    }
}

/// Finding 1, second entry point: `fill` of an element size that is not a power of two
/// (`[u8; 3]`, staged through the host) reads `dst.len()` for `check_claim`, then again for
/// `vec![value; dst.len()]`.
///
/// Observed (1 of 1 runs, deterministic): "capacity overflow" panic in library code.
#[test]
fn staged_fill_sizes_its_values_from_a_second_read_of_len_after_the_claim_check() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let buf = DeviceBuffer::<[u8; 3]>::new(16, &s).unwrap();
    let mut region = Shifty::new(buf.data_ptr(), 4, usize::MAX / 4);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        fill::<[u8; 3]>(&s, &mut region, [1, 2, 3])
    }));
    match r {
        Ok(res) => assert!(res.is_err() || res.is_ok(), "{res:?}"),
        Err(p) => panic!(
            "fill panicked in library code on a region whose len() changed after the claim \
             check: {:?}",
            panic_text(&*p)
        ),
    }
}

/// Finding 2 (xpu-host's host_copy_conflicts_across_streams.rs), through the typed API: the
/// module's table documents
/// `copy_htod_pinned` as not blocking, but behind a gated `copy_dtoh_pinned` of another device
/// into the same pinned block it waits on the host for that device's gate.
///
/// Sequence: a gate closes a stream of device 1; `copy_dtoh_pinned(&s1, &b1, &mut pinned)`
/// (pinned from device 0's allocator); `copy_htod_pinned(&s0, &pinned, &mut b0)` on the same
/// thread; a helper opens the gate when that call returned, or after 500 ms.
///
/// Observed (3 of 3 runs): the upload returns only after the helper opened the gate; the
/// bytes are right (b0 holds b1's elements). Opened by the same thread after the call (a gate
/// made with `Gate::with_open_limit(1, Duration::MAX)`), the program never ends.
#[test]
fn a_typed_pinned_upload_waits_for_another_devices_gated_download() {
    let Some(([s0, s1], _ext)) = common::fresh_streams([0, 1]) else {
        return;
    };
    let b1 = DeviceBuffer::<u32>::from_slice(&[7; 512], &s1).unwrap();
    let mut b0 = DeviceBuffer::<u32>::zeroed(512, &s0).unwrap();
    s1.synchronize().unwrap();
    let mut pinned = xpu_alloc::host::host_allocate_on(0, 2048).unwrap();
    let gate = xpu_event::test_support::Gate::new(1).unwrap();
    gate.block(&s1).unwrap();
    xpu_kernel::memory::copy_dtoh_pinned(&s1, &b1, &mut pinned).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let closed = std::thread::scope(|sc| {
        let gate = &gate;
        sc.spawn(move || {
            let _ = rx.recv_timeout(std::time::Duration::from_millis(500));
            gate.open().unwrap();
        });
        xpu_kernel::memory::copy_htod_pinned(&s0, &pinned, &mut b0).unwrap();
        let closed = !gate.is_open();
        let _ = tx.send(());
        closed
    });
    assert_eq!(b0.to_vec(&s0).unwrap(), vec![7; 512]);
    assert!(
        closed,
        "copy_htod_pinned (documented as not blocking) waited on the host for device 1's gated \
         copy_dtoh_pinned into the same block"
    );
}

// ---- Formerly review_h41_holds.rs ----

/// A typed download into pinned memory on a stream other than the buffer's allocation
/// stream, held back; the buffer dropped and a new one of its length allocated and written on
/// the allocation stream: the new buffer does not get the block, the pinned bytes are the old
/// buffer's elements, and the new buffer's elements are intact.
#[test]
fn a_gated_typed_download_on_another_stream_keeps_the_device_block() {
    let Some(([s0, s1], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let host = ramp(1024);
    let buf = DeviceBuffer::<f32>::from_slice(&host, &s0).unwrap();
    s0.synchronize().unwrap();
    let mut pinned = host_allocate_on(0, 1024 * 4).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s1).unwrap();
    copy_dtoh_pinned(&s1, &buf, &mut pinned).unwrap();
    let at = buf.data_ptr().address();
    drop(buf);
    let fresh = DeviceBuffer::<f32>::from_slice(&[9.0; 1024], &s0).unwrap();
    assert_ne!(
        fresh.data_ptr().address(),
        at,
        "block reused under the download"
    );
    s0.synchronize().unwrap();
    gate.open().unwrap();
    assert_eq!(bytemuck::cast_slice::<u8, f32>(&pinned), &host[..]);
    assert_eq!(fresh.to_vec(&s0).unwrap(), vec![9.0; 1024]);
}

/// A typed download into a pinned block of device 1's allocator on a stream of device 0, held
/// back; the pinned block dropped; new device-1 blocks allocated and written: none is the
/// block under the copy and their bytes survive it.
#[test]
fn a_typed_download_into_another_devices_block_keeps_it() {
    let Some(([s0], _ext)) = fresh_streams([0]) else {
        return;
    };
    if xpu_device::device_count() < 2 {
        return;
    }
    let buf = DeviceBuffer::<u32>::from_slice(&[0xDEAD_BEEF; 256], &s0).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s0).unwrap();
    let mut pinned = host_allocate_on(1, 1024).unwrap();
    copy_dtoh_pinned(&s0, &buf, &mut pinned).unwrap();
    let at = pinned.address();
    drop(pinned);
    let mut news: Vec<HostPtr> = Vec::new();
    for _ in 0..3 {
        let mut p = host_allocate_on(1, 1024).unwrap();
        assert_ne!(p.address(), at, "reused under the download");
        p.as_mut_slice().fill(0x12);
        news.push(p);
    }
    gate.open().unwrap();
    s0.synchronize().unwrap();
    for p in &news {
        assert!(p.iter().all(|&b| b == 0x12));
    }
}

/// Zero lengths, empty pointers, a wrong element count, a wrong device, an overflowing
/// user region: typed errors or `Ok(())`, never a panic, and nothing enqueued.
#[test]
fn typed_pinned_misuse_is_a_typed_error() {
    let Some((s, _ext)) = device0_stream() else {
        return;
    };
    let mut buf = DeviceBuffer::<u16>::from_slice(&[5; 10], &s).unwrap();
    let mut empty = HostPtr::empty(0);
    copy_dtoh_pinned(&s, &buf.slice(10..).unwrap(), &mut empty).unwrap();
    copy_htod_pinned(&s, &empty, &mut buf.slice_mut(3..3).unwrap()).unwrap();
    assert_eq!(
        copy_dtoh_pinned(&s, &buf, &mut empty).unwrap_err(),
        MemoryError::PinnedLength {
            bytes: 0,
            expected: 20
        }
    );
    let mut odd = host_allocate_on(0, 19).unwrap();
    assert!(matches!(
        copy_dtoh_pinned(&s, &buf, &mut odd),
        Err(MemoryError::PinnedLength { .. })
    ));
    assert!(matches!(
        copy_htod_pinned(&s, &odd, &mut buf),
        Err(MemoryError::PinnedLength { .. })
    ));
    let region = Claimed {
        ptr: buf.data_ptr(),
        offset: usize::MAX / 4,
        len: 1,
    };
    let mut four = host_allocate_on(0, 4).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        copy_dtoh_pinned(&s, &region, &mut four)
    }));
    assert!(matches!(r, Ok(Err(_))), "{r:?}");
    let region = Claimed {
        ptr: buf.data_ptr(),
        offset: 4,
        len: 1,
    };
    // Element 4 of f32 is bytes 16..20 of a 20-byte block: inside.
    copy_dtoh_pinned(&s, &region, &mut four).unwrap();
    assert_eq!(&four[..], &[5, 0, 5, 0]);
    let region = Claimed {
        ptr: buf.data_ptr(),
        offset: 5,
        len: 1,
    };
    assert!(copy_dtoh_pinned(&s, &region, &mut four).is_err());
    if xpu_device::device_count() >= 2 {
        let s1 = xpu_stream::get_stream_from_pool(0, 1).unwrap();
        let mut twenty = host_allocate_on(0, 20).unwrap();
        assert_eq!(
            copy_dtoh_pinned(&s1, &buf, &mut twenty).unwrap_err(),
            MemoryError::StreamDevice {
                stream: 1,
                device: 0
            }
        );
    }
    s.synchronize().unwrap();
}
