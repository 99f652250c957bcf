//! Review (fresh eyes, safe code only) of typed device memory: in a bad fork child every
//! typed-memory entry point refuses with `MemoryError::Alloc(AllocError::BadFork)` at once,
//! as `MemoryError`'s docs say, also `copy_peer` and `memset_zeros` and for empty regions (the
//! parent's state is reproduced in a fresh process that then becomes a bad fork,
//! `simulate_bad_fork`). Skipped without a device unless `XPU_REQUIRE_DEVICE=1`.

use xpu_alloc::AllocError;
use xpu_kernel::memory::{copy_peer, memset_zeros};
use xpu_kernel::{DeviceBuffer, MemoryError, StreamMemoryExt};

mod common;
use common::Claimed;

#[test]
fn copy_peer_and_memset_zeros_refuse_in_a_bad_fork_child() {
    xpu_testing::bad_fork::bad_fork_test("memory-review-bad-fork", bad_fork_run);
}

fn bad_fork_run() {
    let s = xpu_stream::get_stream_from_pool(0, 0).expect("stream");
    let src = DeviceBuffer::<u32>::from_slice(&[1; 64], &s).expect("src");
    let mut dst = DeviceBuffer::<u32>::zeroed(64, &s).expect("dst");
    let empty = DeviceBuffer::<u32>::new(0, &s).expect("empty");
    let mut empty_dst = DeviceBuffer::<u32>::new(0, &s).expect("empty dst");
    s.synchronize().expect("synchronize");

    xpu_device::fork::simulate_bad_fork();

    let results = [
        ("copy_peer", copy_peer(&s, &src, &s, &mut dst)),
        (
            "copy_peer (empty)",
            copy_peer(&s, &empty, &s, &mut empty_dst),
        ),
        ("memset_zeros", memset_zeros(&s, &mut dst)),
        ("memset_zeros (empty)", memset_zeros(&s, &mut empty_dst)),
        ("Stream::memset_zeros", s.memset_zeros(&mut dst)),
        ("DeviceBuffer::to_device", src.to_device(&s, &s).map(drop)),
    ];
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, r)| !matches!(r, Err(MemoryError::Alloc(AllocError::BadFork))))
        .map(|(what, r)| format!("{what}: {r:?}"))
        .collect();
    assert!(
        wrong.is_empty(),
        "expected Err(Alloc(BadFork)) from every entry point: {wrong:?}"
    );
    xpu_testing::bad_fork::done();
}

/// A region (of a user's `DeviceRegion` impl) whose element offset overflows in bytes: the
/// typed copies refuse it with an error from the block's range check instead of panicking
/// on the overflow in `DeviceRegion::byte_offset` (it used to panic: "attempt to multiply
/// with overflow").
#[test]
fn a_region_whose_byte_offset_overflows_is_an_error_not_a_panic() {
    let Some(s) = xpu_testing::devices(1).then(|| xpu_stream::get_stream_from_pool(0, 0).unwrap())
    else {
        return;
    };
    let buf = DeviceBuffer::<f32>::from_slice(&[1.0; 16], &s).unwrap();
    let region = Claimed {
        ptr: buf.data_ptr(),
        offset: usize::MAX / 2,
        len: 1,
    };
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut out = [0f32; 1];
        xpu_kernel::memory::copy_dtoh(&s, &region, &mut out)
    }));
    let r = r.unwrap_or_else(|p| {
        panic!(
            "copy_dtoh panicked: {:?}",
            p.downcast_ref::<String>()
                .map(String::as_str)
                .or(p.downcast_ref::<&str>().copied())
        )
    });
    assert!(
        matches!(r, Err(MemoryError::Alloc(AllocError::OutOfRange { .. }))),
        "{r:?}"
    );
    assert_eq!(buf.to_vec(&s).unwrap(), vec![1.0; 16]);
}

/// xpu-host's whole-allocation pinned copies (`HostCopy::copy_from_host` /
/// `copy_to_host`) on a stream other than a `DataPtr`'s allocation stream record that
/// stream on the device block (as the typed copies do): freeing the pointer while the copy is
/// held back by a gate does not hand its block to a new allocation on the allocation stream,
/// so the late copy cannot land in (or read) the new owner's bytes. Before, the block was
/// reused at once and the gated upload overwrote the new allocation.
#[test]
fn pinned_host_copies_on_another_stream_record_it_on_the_device_block() {
    use xpu_alloc::host::{host_allocate_on, HostCopy};
    let Some((s1, s2, _queues)) = xpu_testing::devices(1).then(|| {
        let q1 = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
        let q2 = xpu_stream::ExternalStream::new(xpu_testing::fresh_queue(0), 0).unwrap();
        (q1.stream(), q2.stream(), (q1, q2))
    }) else {
        return;
    };
    const BYTES: usize = 4096;
    for upload in [true, false] {
        let p = xpu_alloc::allocate(BYTES as u64, &s1).unwrap();
        p.view().unwrap().write(&s1, 0, &[0x22; BYTES]).unwrap();
        let mut host = host_allocate_on(0, BYTES).unwrap();
        host.as_mut_slice().fill(0xAB);
        let gate = xpu_event::Gate::new(0).unwrap();
        gate.block(&s2).unwrap();
        if upload {
            s2.copy_from_host(&host, &p).unwrap();
        } else {
            s2.copy_to_host(&p, &mut host).unwrap();
        }
        let old = p.address();
        drop(p);
        // s1 is idle: a block freed without a record of s2 is reusable here at once.
        let q = xpu_alloc::allocate(BYTES as u64, &s1).unwrap();
        let reused = q.address() == old;
        q.view().unwrap().write(&s1, 0, &[0x11; BYTES]).unwrap();
        gate.open().unwrap();
        s2.synchronize().unwrap();
        let mut back = vec![0u8; BYTES];
        q.view().unwrap().read(&s1, 0, &mut back).unwrap();
        let what = if upload {
            "copy_from_host"
        } else {
            "copy_to_host"
        };
        assert!(
            !reused,
            "{what}: the block was reused while the gated copy on another stream was queued"
        );
        assert!(
            back.iter().all(|&b| b == 0x11),
            "{what}: the new allocation changed"
        );
        if !upload {
            assert!(
                host.iter().all(|&b| b == 0x22),
                "{what}: read the reused block"
            );
        }
    }
}
