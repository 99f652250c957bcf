//! `StreamGuard`: RAII switch of the current stream, as `torch.xpu.StreamContext`.

use xpu_device::DeviceGuard;

use crate::current::{get_raw, set_raw, set_stream};
use crate::error::StreamError;
use crate::stream::Stream;

/// Makes a stream current until dropped, as `torch.xpu.stream(s)` (`StreamContext`):
/// - on creation: saves the current stream of the current device and, when the stream is on
///   another device, that device's current stream too; switches the current device to the
///   stream's device; makes the stream current there;
/// - on drop (also while a panic unwinds): restores the stream's device's previous stream,
///   then the original device's previous stream, then the original current device.
///
/// Nesting works through the saved values. Not `Send`: it restores thread-local state.
#[derive(Debug)]
#[must_use = "the previous stream is restored when the guard drops"]
pub struct StreamGuard {
    stream: Stream,
    dst_prev: u64,
    src_device: usize,
    src_prev: u64,
    // Dropped after `Drop::drop` restored the streams: restores the current device last.
    _device: DeviceGuard,
}

impl StreamGuard {
    /// Switches to `stream` (and its device) until the guard drops.
    ///
    /// # Errors
    /// `Device(InvalidDevice)` if the stream's device cannot be made current (nothing is
    /// changed then).
    pub fn new(stream: Stream) -> Result<StreamGuard, StreamError> {
        let src_device = xpu_device::current_device();
        let src_prev = get_raw(src_device);
        let dst_prev = get_raw(stream.device());
        let device = DeviceGuard::new(stream.device())?;
        set_stream(stream);
        Ok(StreamGuard {
            stream,
            dst_prev,
            src_device,
            src_prev,
            _device: device,
        })
    }

    /// The stream made current.
    pub fn stream(&self) -> Stream {
        self.stream
    }
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        set_raw(self.stream.device(), self.dst_prev);
        if self.src_device != self.stream.device() {
            set_raw(self.src_device, self.src_prev);
        }
    }
}
