//! The cache of one device: one free list per size class, each behind its own lock, with
//! the threads' cache bins of that class registered on it (`thread_cache`).

use std::sync::Arc;

use crossbeam::utils::CachePadded;
use parking_lot::Mutex;
use xpu_device::backend::{CommandQueue, Context, QueueOptions};

use super::block::Block;
use super::class::{MAX_HOST_ALLOC, NUM_CLASSES};
use super::error::HostError;
use super::thread_cache::BinSlots;

/// One size class's reusable blocks: its free list and the threads' bins of the class.
#[derive(Debug, Default)]
struct ClassList {
    /// LIFO free list. A block keeps its box for life: it moves between a `HostPtr`, the
    /// threads' one-word cache slots and this list without being reallocated.
    #[allow(clippy::vec_box)]
    blocks: Vec<Box<Block>>,
    /// The bins of the threads' caches that hold blocks of this class (`thread_cache`).
    bins: Vec<Arc<BinSlots>>,
}

impl ClassList {
    /// Moves the blocks of every registered bin onto the free list.
    fn flush_bins(&mut self) {
        let Self { blocks, bins } = self;
        for slots in bins.iter() {
            blocks.extend(slots.take_all());
        }
    }
}

/// One size class's list, on its own cache lines.
type FreeList = CachePadded<Mutex<ClassList>>;

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
            .map(|_| CachePadded::new(Mutex::new(ClassList::default())))
            .collect();
        Ok(DeviceCache {
            device,
            max_block: dev.properties().max_alloc_size.min(MAX_HOST_ALLOC),
            context,
            queue,
            free,
        })
    }

    /// The most recently freed block of `class`, if any; when the free list is empty, the
    /// blocks the threads' bins of the class hold are moved onto it first (a cached block
    /// never makes an allocation ask the driver).
    #[inline]
    pub(crate) fn pop(&self, class: usize) -> Option<Box<Block>> {
        let mut list = self.free.get(class)?.lock();
        if let Some(block) = list.blocks.pop() {
            return Some(block);
        }
        list.flush_bins();
        list.blocks.pop()
    }

    /// Puts a reusable block on its free list.
    #[inline]
    pub(crate) fn push(&self, block: Box<Block>) {
        if let Some(list) = self.free.get(block.class()) {
            list.lock().blocks.push(block);
        }
    }

    /// Takes every cached block of every class, those of the threads' bins included (for
    /// release).
    #[allow(clippy::vec_box)] // the blocks keep their boxes (see `ClassList::blocks`)
    pub(crate) fn drain(&self) -> Vec<Box<Block>> {
        let mut out = Vec::new();
        for list in self.free.iter() {
            let mut list = list.lock();
            list.flush_bins();
            out.append(&mut list.blocks);
        }
        out
    }

    /// Registers a thread's bin of `class`.
    pub(crate) fn bind(&self, class: usize, slots: Arc<BinSlots>) {
        if let Some(list) = self.free.get(class) {
            list.lock().bins.push(slots);
        }
    }

    /// Unregisters a thread's bin of `class`; its blocks join the free list.
    pub(crate) fn unbind(&self, class: usize, slots: &Arc<BinSlots>) {
        if let Some(list) = self.free.get(class) {
            let mut list = list.lock();
            list.blocks.extend(slots.take_all());
            list.bins.retain(|s| !Arc::ptr_eq(s, slots));
        }
    }
}

impl Drop for DeviceCache {
    /// The blocks still in the threads' bins are released with the free lists (the
    /// allocator is gone; the bins' owners never reach them again). Leaked in a bad fork
    /// child.
    fn drop(&mut self) {
        if xpu_device::fork::is_in_bad_fork() {
            return;
        }
        for list in self.free.iter_mut() {
            list.get_mut().flush_bins();
        }
    }
}
