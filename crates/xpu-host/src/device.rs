//! The cache of one device: one free list per size class, each behind its own lock.

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;
use xpu_device::backend::{CommandQueue, Context, QueueOptions};

use super::block::Block;
use super::class::{MAX_HOST_ALLOC, NUM_CLASSES};
use super::error::HostError;

/// One size class's free list, on its own cache lines.
type FreeList = CachePadded<Mutex<Vec<Block>>>;

/// Free lists of one device. A cached allocation or free locks only its own size class's
/// list (cache-padded, so classes do not share cache lines): threads working on different
/// sizes never contend, and no driver call is made.
#[derive(Debug)]
pub(crate) struct DeviceCache {
    /// Device index.
    pub(crate) device: usize,
    /// Largest block size on this device, bytes: `CL_DEVICE_MAX_MEM_ALLOC_SIZE` capped at
    /// 2^48.
    pub(crate) max_block: u64,
    /// The device's context, which owns every block of this cache.
    pub(crate) context: &'static Context,
    /// A queue of the allocator's own, for the blocking map of new blocks (and their unmap),
    /// so that mapping never waits behind the work of a user's stream.
    pub(crate) queue: CommandQueue,
    /// LIFO free lists, indexed by size class.
    free: Box<[FreeList]>,
}

impl DeviceCache {
    /// The cache of `device`: creates its context if needed and a queue.
    pub(crate) fn new(device: usize) -> Result<DeviceCache, HostError> {
        let dev = xpu_device::device(device)?;
        let context = dev.context()?;
        let queue = dev.create_queue(QueueOptions::default())?;
        let free = (0..NUM_CLASSES)
            .map(|_| CachePadded::new(Mutex::new(Vec::new())))
            .collect();
        Ok(DeviceCache {
            device,
            max_block: dev.properties().max_alloc_size.min(MAX_HOST_ALLOC),
            context,
            queue,
            free,
        })
    }

    /// The most recently freed block of `class`, if any.
    #[inline]
    pub(crate) fn pop(&self, class: usize) -> Option<Block> {
        self.free.get(class)?.lock().pop()
    }

    /// Puts a reusable block on its free list.
    #[inline]
    pub(crate) fn push(&self, block: Block) {
        if let Some(list) = self.free.get(block.class()) {
            list.lock().push(block);
        }
    }

    /// Takes every cached block of every class (for release).
    pub(crate) fn drain(&self) -> Vec<Block> {
        let mut out = Vec::new();
        for list in self.free.iter() {
            out.append(&mut list.lock());
        }
        out
    }
}
