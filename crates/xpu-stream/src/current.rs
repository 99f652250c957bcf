//! The current stream of each thread, per device.
//!
//! A thread-local array of stream ids indexed by device (0 = not set yet, meaning the device's
//! default stream): `current_stream` is a thread-local load when set, with no lock and no
//! driver call.

use std::cell::Cell;

use crate::error::{check_fork, StreamError};
use crate::id;
use crate::pool::{self, MAX_DEVICES};
use crate::stream::Stream;

thread_local! {
    static CURRENT: [Cell<u64>; MAX_DEVICES] = const { [const { Cell::new(0) }; MAX_DEVICES] };
}

/// The calling thread's current stream on `device`, as `torch.xpu.current_stream(device)`.
/// Every thread starts on the device's [default stream](crate::default_stream), whatever other
/// threads chose. After the first call for a device on a thread, this is a thread-local read
/// (a few ns).
///
/// # Errors
/// `Device(InvalidDevice)` for a bad index; pool creation failures on the first touch of the
/// device; `BadFork` in a bad fork child.
#[inline]
pub fn current_stream(device: usize) -> Result<Stream, StreamError> {
    check_fork()?;
    let id = CURRENT.with(|c| c.get(device).map(Cell::get));
    match id {
        Some(id) if id != 0 => Ok(Stream::from_parts(device, id)),
        _ => init_current(device),
    }
}

#[cold]
fn init_current(device: usize) -> Result<Stream, StreamError> {
    pool::get(device)?;
    set_raw(device, id::DEFAULT_ID);
    Ok(Stream::from_parts(device, id::DEFAULT_ID))
}

/// The calling thread's current stream on its current device
/// ([`xpu_device::current_device`]).
///
/// # Errors
/// As [`current_stream`].
pub fn current_stream_here() -> Result<Stream, StreamError> {
    current_stream(xpu_device::current_device())
}

/// Makes `stream` the calling thread's current stream of the stream's device, as C++
/// `setCurrentXPUStream`. It does not change the current device (Python's
/// `torch.xpu.set_stream` also switches the device; use [`StreamGuard`](crate::StreamGuard)
/// or [`xpu_device::set_device`] for that). Never fails: a `Stream` is valid by construction.
pub fn set_stream(stream: Stream) {
    set_raw(stream.device(), stream.id());
}

/// The raw slot value (0 = unset) of `device`.
pub(crate) fn get_raw(device: usize) -> u64 {
    CURRENT.with(|c| c.get(device).map_or(0, Cell::get))
}

/// Sets the raw slot value of `device` (ignored beyond `MAX_DEVICES`).
pub(crate) fn set_raw(device: usize, stream_id: u64) {
    CURRENT.with(|c| {
        if let Some(slot) = c.get(device) {
            slot.set(stream_id);
        }
    });
}
