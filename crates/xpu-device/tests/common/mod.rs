//! Shared helpers of the device integration tests: skipping without a device, and a user-event
//! gate that is always opened, even when a test fails while commands wait on it.
#![allow(dead_code)]

use xpu_device::backend::{ClEvent, CommandQueue, QueueOptions};
use xpu_device::Device;

/// True when at least `need` devices exist. Otherwise prints a skip message and returns false,
/// except that a test needing one device panics under `XPU_REQUIRE_DEVICE=1` when there is
/// none. A test needing two devices skips even then: a GPU machine may have a single GPU.
pub fn have_devices(test: &str, need: usize) -> bool {
    let count = xpu_device::device_count();
    if count >= need {
        return true;
    }
    if count == 0 && xpu_device::require_device() {
        let why = xpu_device::devices().err().map(|e| e.to_string());
        panic!("{test}: XPU_REQUIRE_DEVICE=1 but no OpenCL device was found: {why:?}");
    }
    eprintln!("skipping {test}: needs {need} device(s), found {count}");
    false
}

/// Device 0, or `None` (after the skip message) when there is none.
pub fn device0(test: &str) -> Option<&'static Device> {
    have_devices(test, 1).then(|| xpu_device::device(0).expect("device 0 exists"))
}

/// An in-order queue with profiling on device `dev`.
pub fn queue(dev: &Device) -> CommandQueue {
    dev.create_queue(QueueOptions {
        profiling: true,
        priority: None,
    })
    .expect("create queue")
}

/// A user event that is set complete on drop if the test did not open it, so that a failing
/// assertion never leaves commands blocked forever.
pub struct Gate {
    event: ClEvent,
    open: bool,
}

impl Gate {
    pub fn new(dev: &Device) -> Gate {
        Gate {
            event: dev.create_user_event().expect("create user event"),
            open: false,
        }
    }

    pub fn event(&self) -> &ClEvent {
        &self.event
    }

    pub fn open(&mut self) {
        self.open = true;
        self.event.set_complete().expect("set user event complete");
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        if !self.open {
            let _ = self.event.set_complete();
        }
    }
}
