//! Size classes: every request is rounded up to a power of two and served only by a block of
//! exactly that size (reference §5: blocks are never split or merged).

/// log2 of the largest size class: 2^48 bytes (256 TiB), far above any device's largest
/// allocation. Larger requests are rejected before any rounding can overflow.
pub const MAX_CLASS_LOG2: u32 = 48;

/// Number of size classes: 2^0 ..= 2^[`MAX_CLASS_LOG2`] bytes.
pub(crate) const NUM_CLASSES: usize = MAX_CLASS_LOG2 as usize + 1;

/// The largest request the host allocator accepts on any device, in bytes (2^48).
pub const MAX_HOST_ALLOC: u64 = 1 << MAX_CLASS_LOG2;

/// The size class of a non-zero request: `(index, rounded size in bytes)`, where the rounded
/// size is the next power of two `>= size` and `index` its log2. `None` when `size` is 0 or
/// above [`MAX_HOST_ALLOC`].
pub(crate) fn class_of(size: u64) -> Option<(usize, u64)> {
    if size == 0 || size > MAX_HOST_ALLOC {
        return None;
    }
    let rounded = size.next_power_of_two();
    Some((rounded.trailing_zeros() as usize, rounded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_up_to_powers_of_two() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(1), Some((0, 1)));
        assert_eq!(class_of(2), Some((1, 2)));
        assert_eq!(class_of(3), Some((2, 4)));
        assert_eq!(class_of(1000), Some((10, 1024)));
        assert_eq!(class_of(1024), Some((10, 1024)));
        assert_eq!(class_of(1025), Some((11, 2048)));
        assert_eq!(class_of(MAX_HOST_ALLOC), Some((48, MAX_HOST_ALLOC)));
        assert_eq!(class_of(MAX_HOST_ALLOC + 1), None);
        assert_eq!(class_of(u64::MAX), None);
    }
}
