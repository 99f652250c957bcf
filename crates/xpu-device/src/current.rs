//! The current device of each thread, and `DeviceGuard`.

use std::cell::Cell;

use crate::discovery::{device, device_count};
use crate::error::{DeviceError, Result};

thread_local! {
    static CURRENT: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's current device index. Every thread starts at 0, whatever other
/// threads chose (as torch.xpu: a plain thread-local, not inherited).
pub fn current_device() -> usize {
    CURRENT.with(Cell::get)
}

/// Sets the calling thread's current device, as `torch.xpu.set_device`.
///
/// # Errors
/// `InvalidDevice { index, count }` ("device 3 is out of range: 1 device(s) available").
pub fn set_device(index: usize) -> Result<()> {
    device(index)?;
    CURRENT.with(|c| c.set(index));
    Ok(())
}

/// Sets the current device and returns the previous one (torch's `exchange_device`).
///
/// # Errors
/// As [`set_device`].
pub fn exchange_device(index: usize) -> Result<usize> {
    // Validate even when `index` is already current: with no device, the "current" 0 is no
    // device, and a guard to it must fail like `set_device(0)`.
    device(index)?;
    Ok(CURRENT.with(|c| c.replace(index)))
}

/// Anything that lives on one device (streams, events, allocations).
pub trait HasDevice {
    /// The device index, or `None` when the object is not tied to a device yet (an event
    /// never recorded).
    fn device_index(&self) -> Option<usize>;
}

impl HasDevice for usize {
    fn device_index(&self) -> Option<usize> {
        Some(*self)
    }
}

/// RAII switch of the current device: restores the previous device on drop, also while a
/// panic unwinds (as `torch.xpu.device` / C++ `DeviceGuard`).
#[derive(Debug)]
#[must_use = "the previous device is restored when the guard drops"]
pub struct DeviceGuard {
    previous: Option<usize>,
    // Guards restore thread-local state: they must stay on the thread that made them.
    _not_send: std::marker::PhantomData<*const ()>,
}

impl DeviceGuard {
    /// Makes `index` current until the guard drops.
    ///
    /// # Errors
    /// `InvalidDevice` when out of range (nothing is changed).
    pub fn new(index: usize) -> Result<DeviceGuard> {
        let previous = exchange_device(index)?;
        Ok(DeviceGuard {
            previous: Some(previous),
            _not_send: std::marker::PhantomData,
        })
    }

    /// A guard that changes nothing (for objects without a device).
    pub fn noop() -> DeviceGuard {
        DeviceGuard {
            previous: None,
            _not_send: std::marker::PhantomData,
        }
    }

    /// The device that was current before the guard, if it changed anything.
    pub fn previous(&self) -> Option<usize> {
        self.previous
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        if let Some(p) = self.previous {
            // The previous index was valid when saved and devices never disappear, so this
            // cannot fail; set directly to avoid any fallible path in Drop.
            CURRENT.with(|c| c.set(p));
        }
    }
}

/// A guard switching to the device of `obj`, as `torch.xpu.device_of`; a no-op guard when
/// `obj` has no device yet.
///
/// # Errors
/// `InvalidDevice` when the object's device index is out of range.
pub fn device_of(obj: &impl HasDevice) -> Result<DeviceGuard> {
    match obj.device_index() {
        Some(i) => DeviceGuard::new(i),
        None => Ok(DeviceGuard::noop()),
    }
}

/// Checks an index without changing anything.
///
/// # Errors
/// `InvalidDevice` when out of range; `BadFork` in a bad-fork child.
pub fn check_device(index: usize) -> Result<()> {
    if crate::fork_state::is_in_bad_fork() {
        return Err(DeviceError::BadFork);
    }
    let count = device_count();
    if index < count {
        Ok(())
    } else {
        Err(DeviceError::InvalidDevice { index, count })
    }
}
