//! Review h41: what held in the typed pinned copies (`copy_htod_pinned`, `copy_dtoh_pinned`):
//! sequences expected to break them that pass on the code as reviewed. PoCL 3.1,
//! `POCL_DEVICES="pthread pthread"`; skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

mod common;

use common::{device0_stream, fresh_streams, ramp, Claimed};
use xpu_alloc::host::{host_allocate_on, HostPtr};
use xpu_event::test_support::Gate;
use xpu_kernel::memory::{copy_dtoh_pinned, copy_htod_pinned};
use xpu_kernel::{DeviceBuffer, MemoryError};

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
