//! Review h41 (fresh eyes, soundness of the typed copies in `xpu_kernel::memory`): findings,
//! each a test that fails on the code as reviewed. PoCL 3.1, `POCL_DEVICES="pthread pthread"`.
//! Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use std::cell::Cell;

use common::device0_stream;
use xpu_kernel::memory::{fill, to_vec};
use xpu_kernel::{DeviceBuffer, DeviceRegion, DeviceRegionMut, MemoryError};

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
