//! Streams: `torch.xpu.current_stream`, `default_stream`, `set_stream`, `stream`,
//! `Stream(priority=...)`, `Stream.priority_range`.

use xpu_stream::{Stream, StreamGuard};

use crate::error::Result;

/// The calling thread's current stream on `device` (`None` = current device), as
/// `torch.xpu.current_stream`. Initializes the runtime; afterwards a thread-local read.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn current_stream(device: Option<usize>) -> Result<Stream> {
    xpu_lazy::lazy_init()?;
    let index = device.unwrap_or_else(xpu_device::current_device);
    Ok(xpu_stream::current_stream(index)?)
}

/// Makes `stream`'s device the calling thread's current device (when it is another), then
/// `stream` the current stream of that device, as torch.xpu's Python `set_stream` — so
/// implicit work (`allocate`, `current_stream(None)`, `synchronize(None)`) goes where the
/// stream is. The lower layer's [`xpu_stream::set_stream`] keeps the C++
/// `setCurrentXPUStream` semantics (the device is left unchanged). Use [`stream`] for a scoped
/// switch of both.
///
/// # Errors
/// Initialization errors; `InvalidDevice` (nothing is changed then).
pub fn set_stream(stream: Stream) -> Result<()> {
    xpu_lazy::lazy_init()?;
    if xpu_device::current_device() != stream.device() {
        xpu_device::set_device(stream.device())?;
    }
    xpu_stream::set_stream(stream);
    Ok(())
}

/// A guard making `stream` current (and its device current) until dropped, as the
/// `torch.xpu.stream(s)` context manager (`StreamContext`).
///
/// # Errors
/// Initialization errors; stream errors.
pub fn stream(stream: Stream) -> Result<StreamGuard> {
    xpu_lazy::lazy_init()?;
    Ok(StreamGuard::new(stream)?)
}

/// A stream from the device's pool with the given priority (1 low, 0 normal, -1 high; others
/// clamp), as `torch.xpu.Stream(device, priority)`.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn new_stream(device: Option<usize>, priority: i32) -> Result<Stream> {
    xpu_lazy::lazy_init()?;
    let index = device.unwrap_or_else(xpu_device::current_device);
    Ok(xpu_stream::get_stream_from_pool(priority, index)?)
}

/// The default stream of `device` (`None` = current device), as `torch.cuda.default_stream`:
/// a queue of normal priority that the pool never hands out, and every thread's initial
/// current stream. Initializes the runtime.
///
/// # Errors
/// Initialization errors; `InvalidDevice`.
pub fn default_stream(device: Option<usize>) -> Result<Stream> {
    xpu_lazy::lazy_init()?;
    let index = device.unwrap_or_else(xpu_device::current_device);
    Ok(xpu_stream::default_stream(index)?)
}

/// The `(lowest, highest)` stream priorities, as `torch.xpu.Stream.priority_range`: `(1, -1)`
/// (a lower number is a higher priority, as CUDA's; CUDA's own range is device-specific).
/// Needs no initialization.
pub fn priority_range() -> (i32, i32) {
    xpu_stream::priority_range()
}
