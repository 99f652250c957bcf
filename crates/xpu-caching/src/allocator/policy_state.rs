//! What the fragmentation policy ([`super::policy`]) remembers about one stream, kept in
//! the stream's state ([`super::stream_state`]); a leaf below both.

/// What the policy remembers about one stream.
#[derive(Debug, Default)]
pub(crate) struct PolicyState {
    /// Sizes in bytes of the segments released by consolidations and not regrown since
    /// (an entry is reduced by what a regrowth takes from it).
    released: Vec<u64>,
}

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
