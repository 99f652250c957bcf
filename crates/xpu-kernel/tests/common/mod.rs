//! Helpers shared by the device tests of this crate.
#![allow(dead_code)]

pub mod relocation;

use xpu_event::test_support::Gate;
use xpu_kernel::DeviceBuffer;
use xpu_stream::{ExternalStream, Stream};

/// A stream on a queue of its own, so gating it never holds back another test's stream.
pub fn fresh_stream(device: usize) -> ExternalStream {
    ExternalStream::new(xpu_testing::fresh_queue(device), device).unwrap()
}

/// The handle of a [`fresh_stream`] of device 0, and the stream (which keeps it registered);
/// `None` (the test is skipped) without a device ([`xpu_testing::devices`]).
pub fn device0_stream() -> Option<(Stream, ExternalStream)> {
    xpu_testing::devices(1)
        .then(|| fresh_stream(0))
        .map(|ext| (ext.stream(), ext))
}

/// `n` distinct floats, each exact in f32, to upload and compare.
pub fn ramp(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 7.25).collect()
}

/// The handles of [`fresh_stream`]s of `devices` (one each, in order), and the streams (which
/// keep them registered); `None` (the test is skipped) without enough devices
/// ([`xpu_testing::devices`]).
pub fn fresh_streams<const K: usize>(
    devices: [usize; K],
) -> Option<([Stream; K], [ExternalStream; K])> {
    let needed = devices.iter().max().map_or(0, |d| d + 1);
    xpu_testing::devices(needed).then(|| {
        let streams = devices.map(fresh_stream);
        (streams.each_ref().map(ExternalStream::stream), streams)
    })
}

/// Frees `buf`, which `work` queued on another stream behind `gate` still uses, asserts that a
/// new buffer of its length on `stream` does not get its block, then opens `gate`.
pub fn assert_block_not_reused(buf: DeviceBuffer<u32>, stream: &Stream, gate: &Gate, work: &str) {
    let (n, addr) = (buf.len(), buf.data_ptr().address());
    drop(buf);
    let again = DeviceBuffer::<u32>::new(n, stream).unwrap();
    assert_ne!(
        again.data_ptr().address(),
        addr,
        "the block was reused while {work} was still queued"
    );
    gate.open().unwrap();
}

/// A `DeviceRegion` implemented outside the crate (the trait is public) whose offset and
/// length are whatever it says.
pub struct Claimed<'a> {
    /// The allocation.
    pub ptr: &'a xpu_alloc::DataPtr,
    /// Element offset, as claimed.
    pub offset: usize,
    /// Length in elements, as claimed.
    pub len: usize,
}

impl xpu_kernel::DeviceRegion<f32> for Claimed<'_> {
    fn data_ptr(&self) -> &xpu_alloc::DataPtr {
        self.ptr
    }
    fn offset(&self) -> usize {
        self.offset
    }
    fn len(&self) -> usize {
        self.len
    }
}
