//! [`DataPtr`]: an allocation that frees itself on drop.

use std::sync::Arc;

use xpu_device::backend::{raw, Buffer};

use crate::core::shard::Shard;
use crate::error::AllocError;
use crate::source::SegmentMemory;
use crate::stream::{StreamKey, StreamRef};

/// A sub-buffer viewing an allocation (see [`DataPtr::sub_buffer`]).
#[derive(Debug)]
pub struct SubBuffer {
    /// The sub-buffer; its origin is aligned to the device's base address alignment.
    pub buffer: Buffer,
    /// Where the allocation starts inside `buffer`, in bytes (0 when the allocation itself
    /// is aligned).
    pub offset: u64,
}

pub(crate) struct Live {
    pub shard: Arc<Shard>,
    pub block: u32,
    pub address: u64,
    pub block_size: u64,
}

/// A device allocation from the caching allocator; returns its block to the allocator when
/// dropped (as PyTorch's `DataPtr` with the allocator's deleter). Zero-size allocations are
/// empty: no block, address 0.
pub struct DataPtr {
    pub(crate) live: Option<Live>,
    device: u32,
    size: u64,
}

impl DataPtr {
    pub(crate) fn new(
        shard: Arc<Shard>,
        block: u32,
        address: u64,
        block_size: u64,
        size: u64,
    ) -> Self {
        let device = shard.key.device;
        Self {
            live: Some(Live {
                shard,
                block,
                address,
                block_size,
            }),
            device,
            size,
        }
    }

    /// An empty pointer (zero-size allocation) on `device`.
    #[must_use]
    pub fn empty(device: u32) -> Self {
        Self {
            live: None,
            device,
            size: 0,
        }
    }

    /// Requested size in bytes.
    #[must_use]
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Size in bytes of the block backing the allocation (rounded; may exceed the request
    /// when the block was not split). 0 when empty.
    #[must_use]
    pub fn allocated_size(&self) -> u64 {
        self.live.as_ref().map_or(0, |l| l.block_size)
    }

    /// Device index.
    #[must_use]
    pub fn device(&self) -> u32 {
        self.device
    }

    /// Device address of the first byte: unique on the device while the allocation lives
    /// (0 when empty).
    #[must_use]
    pub fn address(&self) -> u64 {
        self.live.as_ref().map_or(0, |l| l.address)
    }

    /// Whether this is a zero-size allocation.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.live.is_none()
    }

    /// The stream the block was allocated on (its allocation stream).
    #[must_use]
    pub fn stream(&self) -> Option<StreamKey> {
        self.live.as_ref().map(|l| l.shard.key)
    }

    /// The buffer holding this allocation and the allocation's byte offset in it, for
    /// kernel arguments (`clSetKernelArg` with the buffer, the offset as a separate
    /// argument). No driver call.
    ///
    /// # Errors
    /// [`AllocError::Unsupported`] for an empty pointer or memory that is not an OpenCL
    /// buffer (SVM: pass [`DataPtr::address`] with `clSetKernelArgSVMPointer`; simulated).
    pub fn cl_mem_and_offset(&self) -> Result<(raw::cl_mem, u64), AllocError> {
        self.with_buffer(|buffer, offset| (buffer.as_raw(), offset))
    }

    /// A retained handle to the buffer holding this allocation and the allocation's byte
    /// offset in it (one `clRetainMemObject`), for enqueueing copies.
    ///
    /// # Errors
    /// As [`DataPtr::cl_mem_and_offset`].
    pub fn buffer_and_offset(&self) -> Result<(Buffer, u64), AllocError> {
        self.with_buffer(|buffer, offset| (buffer.clone(), offset))
    }

    /// A sub-buffer covering the allocation (`clCreateSubBuffer`), created only when asked:
    /// its origin is the allocation's offset rounded down to the device's base address
    /// alignment, and [`SubBuffer::offset`] says where the allocation starts inside it.
    ///
    /// # Errors
    /// As [`DataPtr::cl_mem_and_offset`]; [`AllocError::Device`] when the driver refuses.
    pub fn sub_buffer(&self) -> Result<SubBuffer, AllocError> {
        let size = self.size;
        let align = self
            .live
            .as_ref()
            .map_or(1, |l| l.shard.shared.source.base_addr_align().max(1));
        self.with_buffer(|buffer, offset| {
            let origin = offset - offset % align;
            let inner = offset - origin;
            let to_usize = |v: u64| {
                usize::try_from(v).map_err(|_| {
                    AllocError::Unsupported(format!("offset {v} exceeds the address space"))
                })
            };
            let sub = buffer
                .sub_buffer(to_usize(origin)?, to_usize(inner + size)?)
                .map_err(|e| AllocError::Device(e.to_string()))?;
            Ok(SubBuffer {
                buffer: sub,
                offset: inner,
            })
        })?
    }

    fn with_buffer<R>(&self, f: impl FnOnce(&Buffer, u64) -> R) -> Result<R, AllocError> {
        let live = self.live.as_ref().ok_or_else(|| {
            AllocError::Unsupported("an empty allocation has no buffer".to_owned())
        })?;
        live.shard
            .with_segment(live.block, |segment, address| match &segment.memory {
                SegmentMemory::Buffer(buffer) => Ok(f(buffer, address - segment.address)),
                SegmentMemory::Svm(_) => Err(AllocError::Unsupported(
                    "SVM memory has no cl_mem: pass address() with clSetKernelArgSVMPointer"
                        .to_owned(),
                )),
                SegmentMemory::Simulated => Err(AllocError::Unsupported(
                    "simulated memory has no cl_mem".to_owned(),
                )),
            })
            .unwrap_or_else(|| {
                Err(AllocError::InvalidDevicePointer {
                    address: live.address,
                })
            })
    }

    pub(crate) fn record_stream_ref(&self, stream: &StreamRef) {
        if let Some(live) = &self.live {
            live.shard.record_stream(live.block, stream);
        }
    }
}

impl std::fmt::Debug for DataPtr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DataPtr")
            .field("device", &self.device)
            .field("address", &format_args!("{:#x}", self.address()))
            .field("size", &self.size)
            .field("stream", &self.stream())
            .finish()
    }
}

impl Drop for DataPtr {
    fn drop(&mut self) {
        if xpu_device::fork::is_in_bad_fork() {
            // A child forked after OpenCL was initialized: the block stays with the parent's
            // copy of the allocator (leaked here); taking its lock could hang.
            std::mem::forget(self.live.take());
            return;
        }
        if let Some(live) = self.live.take() {
            live.shard.shared.history.record(
                crate::observe::TraceAction::FreeRequested,
                live.address,
                self.size,
                live.shard.key.id,
            );
            live.shard.free(live.block);
        }
    }
}
