//! The thread-local current device, set_device / exchange_device errors, DeviceGuard and
//! device_of. Each test runs its checks in fresh threads, so tests never see each other's state.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Barrier;
use std::thread;

use xpu_device::{
    current_device, device_of, exchange_device, set_device, DeviceError, DeviceGuard, HasDevice,
};

/// Runs `f` on a new thread and returns its result (propagating its panic).
fn on_new_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    thread::scope(|s| s.spawn(f).join().unwrap())
}

/// Runs `f` on a new thread ([`on_new_thread`]) when at least `need` devices exist; otherwise
/// the test is skipped ([`common::have_devices`]).
fn on_new_thread_with_devices(need: usize, f: impl FnOnce() + Send) {
    if common::have_devices(need) {
        on_new_thread(f);
    }
}

/// Runs `a` and `b` on two new threads at once and returns their results (propagating a
/// panic). Each gets the same two-thread barrier: a `wait` on it returns once the other thread
/// waits too.
fn on_two_threads<A: Send, B: Send>(
    a: impl FnOnce(&Barrier) -> A + Send,
    b: impl FnOnce(&Barrier) -> B + Send,
) -> (A, B) {
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let a = s.spawn(|| a(&barrier));
        let b = s.spawn(|| b(&barrier));
        (a.join().unwrap(), b.join().unwrap())
    })
}

#[test]
fn every_thread_starts_at_device_0() {
    on_new_thread_with_devices(2, || {
        assert_eq!(current_device(), 0);
        set_device(1).unwrap();
        assert_eq!(current_device(), 1);
        // A thread started now does not inherit device 1.
        assert_eq!(on_new_thread(current_device), 0);
        assert_eq!(current_device(), 1);
    });
}

#[test]
fn set_device_in_one_thread_does_not_leak() {
    if !common::have_devices(2) {
        return;
    }
    let (set, seen) = on_two_threads(
        |barrier| {
            set_device(1).unwrap();
            barrier.wait(); // the other thread looks while device 1 is current here
            barrier.wait();
            current_device()
        },
        |barrier| {
            barrier.wait();
            let seen = current_device();
            barrier.wait();
            seen
        },
    );
    assert_eq!(set, 1);
    assert_eq!(seen, 0);
}

#[test]
fn set_device_out_of_range_errors_and_changes_nothing() {
    on_new_thread_with_devices(1, || {
        let n = xpu_device::device_count();
        let bad = n.max(7);
        let err = set_device(bad).unwrap_err();
        assert_eq!(
            err,
            DeviceError::InvalidDevice {
                index: bad,
                count: n
            }
        );
        assert_eq!(
            err.to_string(),
            format!("device {bad} is out of range: {n} device(s) available")
        );
        if n == 2 {
            assert_eq!(
                err.to_string(),
                "device 7 is out of range: 2 device(s) available"
            );
        }
        assert_eq!(current_device(), 0);
        assert_eq!(exchange_device(bad).unwrap_err(), err);
        assert_eq!(DeviceGuard::new(bad).unwrap_err(), err);
        assert_eq!(device_of(&bad).unwrap_err(), err);
        assert_eq!(xpu_device::check_device(bad).unwrap_err(), err);
        assert_eq!(current_device(), 0);
        xpu_device::check_device(n - 1).unwrap();
    });
}

#[test]
fn exchange_device_returns_the_previous_device() {
    on_new_thread_with_devices(2, || {
        assert_eq!(exchange_device(1).unwrap(), 0);
        assert_eq!(current_device(), 1);
        assert_eq!(exchange_device(1).unwrap(), 1);
        assert_eq!(exchange_device(0).unwrap(), 1);
        assert_eq!(current_device(), 0);
    });
}

#[test]
fn guard_restores_across_two_devices_and_nesting() {
    on_new_thread_with_devices(2, || {
        {
            let outer = DeviceGuard::new(1).unwrap();
            assert_eq!(outer.previous(), Some(0));
            assert_eq!(current_device(), 1);
            {
                let inner = DeviceGuard::new(0).unwrap();
                assert_eq!(inner.previous(), Some(1));
                assert_eq!(current_device(), 0);
            }
            assert_eq!(current_device(), 1);
        }
        assert_eq!(current_device(), 0);
        // Starting from device 1, a guard to 1 restores 1.
        set_device(1).unwrap();
        drop(DeviceGuard::new(1).unwrap());
        assert_eq!(current_device(), 1);
    });
}

#[test]
fn guard_restores_when_a_panic_unwinds() {
    on_new_thread_with_devices(2, || {
        let r = catch_unwind(AssertUnwindSafe(|| {
            let _g = DeviceGuard::new(1).unwrap();
            assert_eq!(current_device(), 1);
            panic!("boom inside the guard");
        }));
        assert!(r.is_err());
        assert_eq!(current_device(), 0);
    });
}

#[test]
fn guards_in_two_threads_are_independent() {
    if !common::have_devices(2) {
        return;
    }
    let run = |barrier: &Barrier, target: usize| {
        let start = current_device();
        let g = DeviceGuard::new(target).unwrap();
        barrier.wait(); // both guards are alive now
        let during = current_device();
        barrier.wait();
        drop(g);
        (start, during, current_device())
    };
    let (a, b) = on_two_threads(
        |barrier| run(barrier, 1),
        |barrier| {
            set_device(1).unwrap();
            run(barrier, 0)
        },
    );
    assert_eq!(a, (0, 1, 0));
    assert_eq!(b, (1, 0, 1));
}

struct NotRecorded;

impl HasDevice for NotRecorded {
    fn device_index(&self) -> Option<usize> {
        None
    }
}

#[test]
fn device_of_switches_to_the_objects_device() {
    on_new_thread_with_devices(2, || {
        {
            let g = device_of(&1usize).unwrap();
            assert_eq!(g.previous(), Some(0));
            assert_eq!(current_device(), 1);
            let noop = device_of(&NotRecorded).unwrap();
            assert_eq!(noop.previous(), None);
            assert_eq!(current_device(), 1);
            drop(noop); // a no-op guard restores nothing
            assert_eq!(current_device(), 1);
        }
        assert_eq!(current_device(), 0);
    });
}
