//! Typed errors of the pinned-host allocator and its copies.

use xpu_device::DeviceError;
use xpu_stream::StreamError;

/// A failure of the pinned-host allocator or of a host<->device copy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// This process is a child forked after its parent initialized OpenCL
    /// ([`xpu_device::fork::is_in_bad_fork`]); the pinned-host allocator and its copies
    /// cannot be used here (as torch's "Cannot re-initialize CUDA in forked subprocess").
    #[error("{}", xpu_device::fork::BAD_FORK_MESSAGE)]
    BadFork,
    /// The request can never be served: its power-of-two size class is above the device's
    /// largest single allocation (`CL_DEVICE_MAX_MEM_ALLOC_SIZE`) or above 2^48 bytes.
    #[error(
        "pinned host allocation of {requested} bytes can never succeed on device {device}: {}",
        too_large_reason(*rounded, *max)
    )]
    TooLarge {
        /// Device index.
        device: usize,
        /// Requested size in bytes.
        requested: u64,
        /// The size class the request rounds up to, in bytes (0 when above 2^48).
        rounded: u64,
        /// Largest possible block on the device, in bytes.
        max: u64,
    },
    /// The driver had no memory for a new pinned block, even after releasing this device's
    /// cached blocks.
    #[error(
        "out of pinned host memory on device {device}: a block of {size} bytes could not be \
         allocated ({source})"
    )]
    OutOfMemory {
        /// Device index.
        device: usize,
        /// The block size tried, in bytes.
        size: u64,
        /// The driver's failure.
        source: DeviceError,
    },
    /// A copy range outside the host block or the device buffer.
    #[error("{what}: range {offset}..{offset}+{len} exceeds the {size} bytes available")]
    OutOfRange {
        /// Which side of which copy.
        what: &'static str,
        /// Start of the range, bytes.
        offset: u64,
        /// Length of the range, bytes.
        len: u64,
        /// Size of the memory, bytes.
        size: u64,
    },
    /// The device memory has no OpenCL buffer behind it (an empty or simulated allocation).
    #[error("device memory without an OpenCL buffer cannot be copied to or from")]
    NoBuffer,
    /// A copy of a device allocation was asked on a stream of another device (its buffer
    /// belongs to another context: OpenCL 3.0 §5.2.2 refuses the enqueue with
    /// `CL_INVALID_CONTEXT`); refused before anything is enqueued or recorded.
    #[error("a copy of device {device}'s memory on a stream of device {stream}")]
    StreamDevice {
        /// The stream's device.
        stream: usize,
        /// The memory's device.
        device: usize,
    },
    /// A device-layer failure (bad index, context or queue creation, a failed copy...).
    #[error(transparent)]
    Device(#[from] DeviceError),
    /// A stream-layer failure (e.g. a released external stream).
    #[error(transparent)]
    Stream(#[from] StreamError),
}

xpu_device::impl_from_via!(HostError::Device(DeviceError) <- xpu_device::ClError);

impl HostError {
    /// True for a bad fork (see `xpu_device::fork`): [`HostError::BadFork`], or a `BadFork`
    /// of the device or stream layer this error holds (its [`HostError::Device`],
    /// [`HostError::Stream`], or the source of [`HostError::OutOfMemory`]).
    pub fn is_bad_fork(&self) -> bool {
        match self {
            HostError::BadFork => true,
            HostError::Device(e) | HostError::OutOfMemory { source: e, .. } => e.is_bad_fork(),
            HostError::Stream(e) => e.is_bad_fork(),
            _ => false,
        }
    }
}

impl HostError {
    /// True when no memory was had: [`HostError::OutOfMemory`] (the driver refused a new
    /// pinned block after the cached ones were released, as torch's caching host allocator
    /// reports a failed `cudaHostAlloc`), or a driver out-of-memory code
    /// ([`DeviceError::is_out_of_memory`]) in a device-layer failure. Not
    /// [`HostError::TooLarge`], which no amount of free memory serves.
    pub fn is_out_of_memory(&self) -> bool {
        match self {
            HostError::OutOfMemory { .. } => true,
            HostError::Device(e) => e.is_out_of_memory(),
            _ => false,
        }
    }
}

/// `Err(BadFork)` in a bad fork child (see `xpu_device::fork::refuse_in_bad_fork`).
pub(crate) fn check_fork() -> Result<(), HostError> {
    xpu_device::fork::refuse_in_bad_fork(HostError::BadFork)
}

/// Why a request is [`HostError::TooLarge`]: the size class it rounds up to, or, when it has
/// none (`rounded == 0`: above the 2^48-byte limit), that limit.
fn too_large_reason(rounded: u64, max: u64) -> String {
    if rounded == 0 {
        format!(
            "it is above the largest pinned request, {} bytes (2^48), and the largest pinned block \
             on the device is {max} bytes",
            super::class::MAX_HOST_ALLOC
        )
    } else {
        format!("it rounds up to {rounded} bytes and the largest pinned block is {max} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_above_the_limit_reports_its_size_not_a_zero_rounding() {
        let e = HostError::TooLarge {
            device: 0,
            requested: u64::MAX,
            rounded: 0,
            max: 8 << 30,
        };
        let text = e.to_string();
        assert!(!text.contains("rounds up to 0"), "{text}");
        assert_eq!(
            text,
            format!(
                "pinned host allocation of {} bytes can never succeed on device 0: it is above \
                 the largest pinned request, {} bytes (2^48), and the largest pinned block on \
                 the device is {} bytes",
                u64::MAX,
                1u64 << 48,
                8u64 << 30
            )
        );
        let e = HostError::TooLarge {
            device: 1,
            requested: 5,
            rounded: 8,
            max: 4,
        };
        assert!(e.to_string().ends_with(
            "of 5 bytes can never succeed on device 1: it rounds up to 8 bytes and the largest \
             pinned block is 4 bytes"
        ));
    }
}
