//! The current stream per thread and device, and StreamGuard.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use xpu_device::{current_device, set_device};
use xpu_stream::{
    current_stream, current_stream_here, default_stream, get_stream_from_pool, set_stream, Stream,
    StreamGuard,
};

#[test]
fn every_thread_starts_on_the_default_stream() {
    if !common::devices(1) {
        return;
    }
    let n = xpu_device::device_count();
    let other = get_stream_from_pool(1, 0).unwrap();
    set_stream(other);
    assert_eq!(current_stream(0).unwrap(), other);
    let handles: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(move || {
                for d in 0..n {
                    let s = current_stream(d).unwrap();
                    assert!(s.is_default(), "{s:?}");
                    assert_eq!(s, default_stream(d).unwrap());
                }
                // Setting here changes only this thread.
                let mine = get_stream_from_pool(0, 0).unwrap();
                set_stream(mine);
                assert_eq!(current_stream(0).unwrap(), mine);
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    assert_eq!(current_stream(0).unwrap(), other);
    set_stream(default_stream(0).unwrap());
}

#[test]
fn set_stream_keeps_the_current_device() {
    if !common::devices(2) {
        return;
    }
    let s1 = get_stream_from_pool(0, 1).unwrap();
    set_stream(s1);
    assert_eq!(current_device(), 0);
    assert_eq!(current_stream(1).unwrap(), s1);
    assert!(current_stream_here().unwrap().is_default());
}

#[test]
fn guard_same_device_and_nesting() {
    if !common::devices(1) {
        return;
    }
    let a = get_stream_from_pool(0, 0).unwrap();
    let b = get_stream_from_pool(-1, 0).unwrap();
    set_stream(a);
    {
        let g = StreamGuard::new(b).unwrap();
        assert_eq!(g.stream(), b);
        assert_eq!(current_stream(0).unwrap(), b);
        {
            let _inner = StreamGuard::new(a).unwrap();
            assert_eq!(current_stream(0).unwrap(), a);
        }
        assert_eq!(current_stream(0).unwrap(), b);
    }
    assert_eq!(current_stream(0).unwrap(), a);
}

/// Device 0 current, and new pool streams (priority 0) current on devices 0 and 1, which
/// are returned.
fn two_device_scene() -> (Stream, Stream) {
    let src_prev = get_stream_from_pool(0, 0).unwrap();
    let dst_prev = get_stream_from_pool(0, 1).unwrap();
    set_device(0).unwrap();
    set_stream(src_prev);
    set_stream(dst_prev);
    (src_prev, dst_prev)
}

/// Asserts that [`two_device_scene`]'s state is back: device 0 current, `src_prev` and
/// `dst_prev` the current streams of devices 0 and 1.
fn assert_scene_restored(src_prev: Stream, dst_prev: Stream) {
    assert_eq!(current_device(), 0);
    assert_eq!(current_stream(0).unwrap(), src_prev);
    assert_eq!(current_stream(1).unwrap(), dst_prev);
}

#[test]
fn cross_device_guard_restores_both_devices_and_the_device() {
    if !common::devices(2) {
        return;
    }
    let (src_prev, dst_prev) = two_device_scene();
    let target = get_stream_from_pool(-1, 1).unwrap();
    {
        let _g = StreamGuard::new(target).unwrap();
        assert_eq!(current_device(), 1);
        assert_eq!(current_stream(1).unwrap(), target);
        assert_eq!(current_stream_here().unwrap(), target);
        // Changes made inside the guard on both devices are undone too.
        set_stream(get_stream_from_pool(1, 0).unwrap());
    }
    assert_scene_restored(src_prev, dst_prev);
}

#[test]
fn guards_restore_while_unwinding() {
    if !common::devices(2) {
        return;
    }
    let (src_prev, dst_prev) = two_device_scene();
    let r = catch_unwind(AssertUnwindSafe(|| {
        let _g = StreamGuard::new(get_stream_from_pool(1, 1).unwrap()).unwrap();
        let _h = StreamGuard::new(get_stream_from_pool(1, 0).unwrap()).unwrap();
        assert_eq!(current_device(), 0);
        panic!("boom");
    }));
    assert!(r.is_err());
    assert_scene_restored(src_prev, dst_prev);
}

#[test]
fn guard_restores_an_unset_slot_to_the_default_stream() {
    if !common::devices(1) {
        return;
    }
    std::thread::spawn(|| {
        let s = get_stream_from_pool(0, 0).unwrap();
        {
            let _g = StreamGuard::new(s).unwrap();
            assert_eq!(current_stream(0).unwrap(), s);
        }
        assert!(current_stream(0).unwrap().is_default());
    })
    .join()
    .unwrap();
}
