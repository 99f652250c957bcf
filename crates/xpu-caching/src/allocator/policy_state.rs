//! What the fragmentation policy ([`super::policy`]) remembers about one stream, kept in
//! the stream's state ([`super::stream_state`]); a leaf below both.

/// What the policy remembers about one stream.
#[derive(Debug, Default)]
pub(crate) struct PolicyState {
    /// Sizes in bytes of the segments released by consolidations and not regrown since
    /// (an entry is reduced by what a regrowth takes from it).
    released: Vec<u64>,
    /// Sizes in bytes of the unsplit segments released before growing
    /// ([`super::policy::release_idle_before_grow`]), at most [`UNSPLIT_RELEASED_SIZES`].
    unsplit_released: std::collections::BTreeSet<u64>,
}

/// The most released unsplit segment sizes remembered per stream; past it the record starts
/// over (a training step's distinct sizes number in the hundreds).
const UNSPLIT_RELEASED_SIZES: usize = 4096;

impl PolicyState {
    /// Whether a segment of at least `bytes` bytes was released by a consolidation and not
    /// regrown since.
    pub(super) fn released_any_at_least(&self, bytes: u64) -> bool {
        self.released.iter().any(|&r| r >= bytes)
    }

    /// Remembers the sizes in bytes of the segments a consolidation released.
    pub(super) fn note_released(&mut self, sizes: impl IntoIterator<Item = u64>) {
        self.released.extend(sizes);
    }

    /// Remembers that an unsplit segment of `bytes` bytes was released before growing.
    pub(super) fn note_unsplit_released(&mut self, bytes: u64) {
        if self.unsplit_released.len() >= UNSPLIT_RELEASED_SIZES {
            self.unsplit_released.clear();
        }
        self.unsplit_released.insert(bytes);
    }

    /// Whether an unsplit segment of exactly `bytes` bytes was released before growing: a
    /// request that needs one again shows the workload still uses that size.
    pub(super) fn unsplit_released_before(&self, bytes: u64) -> bool {
        self.unsplit_released.contains(&bytes)
    }

    /// Bytes released by consolidations and not regrown since.
    pub(super) fn released_total(&self) -> u64 {
        self.released.iter().sum()
    }

    /// Takes `bytes` from the released entries, largest first.
    pub(super) fn take_released(&mut self, bytes: u64) {
        self.released.sort_unstable();
        let mut left = bytes;
        while left > 0 {
            let Some(last) = self.released.pop() else {
                break;
            };
            if last > left {
                self.released.push(last - left);
                left = 0;
            } else {
                left -= last;
            }
        }
    }
}
