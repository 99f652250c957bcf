//! Device-wide state shared by all shards: the segment source, configuration, reserved
//! bytes and memory fraction. Touched on the cached path only by reading the config epoch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::stats_registry::StatsRegistry;
use crate::backend::Backend;
use crate::config::AllocConfig;
use crate::history::History;
use crate::source::{SegmentSource, SourceError, SourceSegment};

/// The segment source of an allocator over backend `B`.
pub type BoxedSource<B> = Box<dyn SegmentSource<Memory = <B as Backend>::Memory>>;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Most bytes one allocator reserves: the statistics count bytes in `i64` (as PyTorch's),
/// so a reservation past `i64::MAX` bytes is refused as out of memory rather than wrapping
/// the counters.
pub(crate) const MAX_RESERVED: u64 = i64::MAX as u64;

/// Why a segment could not be obtained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SegmentFailure {
    /// The device has no room.
    OutOfMemory,
    /// The memory fraction forbids it.
    Fraction,
    /// The size can never be allocated (no retry).
    TooLarge,
    /// Another device error.
    Device(String),
}

#[derive(Debug, Default)]
struct Reserved {
    bytes: u64,
    high_water: u64,
    fraction: Option<f64>,
    allowed: Option<u64>,
}

/// State of one device allocator shared by its shards.
pub(crate) struct DeviceShared<B: Backend> {
    /// Unique id of this allocator instance (keys the thread-local caches).
    pub id: u64,
    pub source: BoxedSource<B>,
    /// `source.max_alloc_size()`, read once.
    pub max_alloc: u64,
    /// `source.device()`, read once.
    pub device: usize,
    config_epoch: AtomicU64,
    config: Mutex<Arc<AllocConfig>>,
    gc_enabled: AtomicBool,
    reserved: Mutex<Reserved>,
    pub stats: StatsRegistry,
    /// Recorded allocator events (off by default; see [`crate::history`]).
    pub history: Arc<History>,
}

impl<B: Backend> DeviceShared<B> {
    pub(crate) fn new(source: BoxedSource<B>, config: AllocConfig) -> Self {
        Self {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            max_alloc: source.max_alloc_size(),
            device: source.device(),
            source,
            config_epoch: AtomicU64::new(1),
            config: Mutex::new(Arc::new(config)),
            gc_enabled: AtomicBool::new(false),
            reserved: Mutex::new(Reserved::default()),
            stats: StatsRegistry::default(),
            history: Arc::default(),
        }
    }

    pub(crate) fn device(&self) -> usize {
        self.device
    }

    /// Current config epoch (a load of a read-mostly word).
    pub(crate) fn config_epoch(&self) -> u64 {
        self.config_epoch.load(Ordering::Acquire)
    }

    pub(crate) fn config(&self) -> Arc<AllocConfig> {
        self.config.lock().clone()
    }

    pub(crate) fn set_config(&self, config: AllocConfig) {
        let gc = config.garbage_collection_threshold > 0.0;
        *self.config.lock() = Arc::new(config);
        let fraction_below_one = self.reserved.lock().fraction.is_some_and(|f| f < 1.0);
        self.gc_enabled
            .store(gc && fraction_below_one, Ordering::Release);
        self.config_epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Garbage collection is active: a fraction below 1 and a threshold are set.
    pub(crate) fn gc_enabled(&self) -> bool {
        self.gc_enabled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_fraction(&self, fraction: f64) {
        let total = self.source.total_memory();
        let mut reserved = self.reserved.lock();
        reserved.fraction = Some(fraction);
        // Truncation is the intended rounding of an allowed byte count.
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let allowed = (fraction * total as f64) as u64;
        reserved.allowed = Some(allowed);
        let gc = self.config.lock().garbage_collection_threshold > 0.0;
        self.gc_enabled
            .store(gc && fraction < 1.0, Ordering::Release);
    }

    /// Bytes allowed by the memory fraction (`None` when none is set).
    pub(crate) fn allowed(&self) -> Option<u64> {
        self.reserved.lock().allowed
    }

    pub(crate) fn fraction(&self) -> Option<f64> {
        self.reserved.lock().fraction
    }

    /// Device-wide reserved bytes.
    pub(crate) fn reserved(&self) -> u64 {
        self.reserved.lock().bytes
    }

    /// Whether a new segment of `size` bytes would raise the reserved bytes above their
    /// highest value so far.
    pub(crate) fn would_raise_high_water(&self, size: u64) -> bool {
        let r = self.reserved.lock();
        r.bytes.saturating_add(size) > r.high_water
    }

    /// Obtains a segment, enforcing the memory fraction (reserved + size <= allowed) and
    /// [`MAX_RESERVED`] (out of memory beyond it).
    pub(crate) fn allocate_segment(
        &self,
        size: u64,
    ) -> Result<SourceSegment<B::Memory>, SegmentFailure> {
        {
            let mut r = self.reserved.lock();
            let Some(total) = r.bytes.checked_add(size).filter(|&t| t <= MAX_RESERVED) else {
                return Err(SegmentFailure::OutOfMemory);
            };
            if r.allowed.is_some_and(|allowed| total > allowed) {
                return Err(SegmentFailure::Fraction);
            }
            r.bytes = total;
        }
        match self.source.allocate(size) {
            Ok(segment) => {
                let mut r = self.reserved.lock();
                r.high_water = r.high_water.max(r.bytes);
                Ok(segment)
            }
            Err(e) => {
                let mut r = self.reserved.lock();
                r.bytes = r.bytes.saturating_sub(size);
                drop(r);
                Err(match e {
                    SourceError::OutOfMemory => SegmentFailure::OutOfMemory,
                    SourceError::TooLarge { .. } => SegmentFailure::TooLarge,
                    SourceError::Device(msg) => SegmentFailure::Device(msg),
                })
            }
        }
    }

    /// Returns a segment to the source.
    pub(crate) fn release_segment(&self, segment: SourceSegment<B::Memory>) {
        let size = segment.size;
        self.source.free(segment);
        let mut r = self.reserved.lock();
        r.bytes = r.bytes.saturating_sub(size);
    }
}
