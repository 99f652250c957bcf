//! A free pool: free blocks of one shard ordered by (size, address) for best fit.
//!
//! Small pools (the common case) are a sorted vector of packed (size, address) keys: a
//! best-fit search is a binary search of 128-bit compares and an insert, removal or
//! replacement a short move, much cheaper than tree operations. A pool that
//! grows past [`PROMOTE`] blocks becomes a B-tree, and returns to a vector below
//! [`DEMOTE`].

use std::collections::BTreeMap;

/// (size, address, block index).
pub(crate) type FreeKey = (u64, u64, u32);

/// Blocks above which a pool switches to a B-tree.
const PROMOTE: usize = 256;
/// Blocks below which a B-tree pool switches back to a vector.
const DEMOTE: usize = 64;

/// The order of a pool: size, then address (unique among the free blocks of one shard, so
/// the block index never decides), packed so that a comparison is one 128-bit compare.
#[inline]
fn order(size: u64, addr: u64) -> u128 {
    (u128::from(size) << 64) | u128::from(addr)
}

#[inline]
fn unpack(key: u128, block: u32) -> FreeKey {
    // The low half is the address, the high half the size.
    #[allow(clippy::cast_possible_truncation)]
    let addr = key as u64;
    #[allow(clippy::cast_possible_truncation)]
    let size = (key >> 64) as u64;
    (size, addr, block)
}

#[derive(Debug)]
enum Set {
    /// Sorted by key.
    Sorted(Vec<(u128, u32)>),
    Tree(BTreeMap<u128, u32>),
}

/// Free blocks ordered by (size, address).
#[derive(Debug)]
pub(crate) struct FreePool {
    set: Set,
    /// Searches made in this pool while garbage collection is enabled (block age clock).
    pub searches: u64,
}

impl Default for FreePool {
    fn default() -> Self {
        Self {
            set: Set::Sorted(Vec::new()),
            searches: 0,
        }
    }
}

impl FreePool {
    #[inline]
    pub(crate) fn insert(&mut self, size: u64, addr: u64, block: u32) {
        let key = order(size, addr);
        match &mut self.set {
            Set::Sorted(v) => {
                let at = v.partition_point(|k| k.0 < key);
                v.insert(at, (key, block));
                if v.len() > PROMOTE {
                    self.set = Set::Tree(v.drain(..).collect());
                }
            }
            Set::Tree(t) => {
                t.insert(key, block);
            }
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, size: u64, addr: u64, block: u32) {
        let key = order(size, addr);
        match &mut self.set {
            Set::Sorted(v) => {
                if let Ok(at) = v.binary_search_by(|k| k.0.cmp(&key)) {
                    debug_assert_eq!(v[at].1, block);
                    v.remove(at);
                }
            }
            Set::Tree(t) => {
                t.remove(&key);
                if t.len() < DEMOTE {
                    self.set = Set::Sorted(std::mem::take(t).into_iter().collect());
                }
            }
        }
    }

    /// Replaces the entry (`old_size`, `old_addr`) by (`size`, `addr`, `block`): one removal
    /// and one insertion, moving only the entries between the two positions. `hint` is
    /// where `FreePool::best_fit` found the old entry, if it did (checked).
    #[inline(always)]
    pub(crate) fn replace(
        &mut self,
        (old_size, old_addr): (u64, u64),
        hint: Option<usize>,
        size: u64,
        addr: u64,
        block: u32,
    ) {
        let old = order(old_size, old_addr);
        let key = order(size, addr);
        match &mut self.set {
            Set::Sorted(v) => {
                let found = match hint {
                    Some(i) if v.get(i).is_some_and(|k| k.0 == old) => Some(i),
                    // A linear scan beats a binary search on the short vectors of the
                    // common case.
                    _ if v.len() <= 16 => v.iter().position(|k| k.0 == old),
                    _ => {
                        let i = v.partition_point(|k| k.0 < old);
                        v.get(i).is_some_and(|k| k.0 == old).then_some(i)
                    }
                };
                let Some(mut i) = found else {
                    self.insert(size, addr, block);
                    return;
                };
                // Shift the entries between the old and the new position by one.
                if key > old {
                    while let Some(&next) = v.get(i + 1).filter(|k| k.0 < key) {
                        v[i] = next;
                        i += 1;
                    }
                } else {
                    while let Some(&prev) = i
                        .checked_sub(1)
                        .and_then(|p| v.get(p))
                        .filter(|k| k.0 > key)
                    {
                        v[i] = prev;
                        i -= 1;
                    }
                }
                v[i] = (key, block);
            }
            Set::Tree(t) => {
                t.remove(&old);
                t.insert(key, block);
            }
        }
    }

    /// The smallest free block of at least `size` bytes (lowest address on ties).
    #[cfg(test)]
    pub(crate) fn best_fit(&self, size: u64) -> Option<FreeKey> {
        self.best_fit_at(size).map(|(k, _)| k)
    }

    /// As `FreePool::best_fit`, with the block's position in a vector pool (a hint for
    /// [`FreePool::replace`]).
    #[inline]
    pub(crate) fn best_fit_at(&self, size: u64) -> Option<(FreeKey, Option<usize>)> {
        let key = order(size, 0);
        match &self.set {
            Set::Sorted(v) => {
                let at = v.partition_point(|k| k.0 < key);
                v.get(at).map(|&(k, b)| (unpack(k, b), Some(at)))
            }
            Set::Tree(t) => t.range(key..).next().map(|(&k, &b)| (unpack(k, b), None)),
        }
    }

    /// Free blocks from the smallest.
    pub(crate) fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = FreeKey> + '_> {
        match &self.set {
            Set::Sorted(v) => Box::new(v.iter().map(|&(k, b)| unpack(k, b))),
            Set::Tree(t) => Box::new(t.iter().map(|(&k, &b)| unpack(k, b))),
        }
    }

    /// Free blocks of at least `size` bytes, from the smallest.
    pub(crate) fn iter_from(&self, size: u64) -> Box<dyn DoubleEndedIterator<Item = FreeKey> + '_> {
        let key = order(size, 0);
        match &self.set {
            Set::Sorted(v) => Box::new(
                v[v.partition_point(|k| k.0 < key)..]
                    .iter()
                    .map(|&(k, b)| unpack(k, b)),
            ),
            Set::Tree(t) => Box::new(t.range(key..).map(|(&k, &b)| unpack(k, b))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_and_tree_agree() {
        let mut pool = FreePool::default();
        let keys: Vec<FreeKey> = (0..600u32)
            .map(|i| (u64::from(i % 37) * 512, u64::from(i) * 4096, i))
            .collect();
        for &(s, a, b) in &keys {
            pool.insert(s, a, b);
        }
        assert!(matches!(pool.set, Set::Tree(_)));
        assert_eq!(pool.best_fit(512 * 36 + 1), None);
        assert_eq!(pool.best_fit(512 * 36), Some((512 * 36, 36 * 4096, 36)));
        for &(s, a, b) in keys.iter().skip(10) {
            pool.remove(s, a, b);
        }
        assert!(matches!(pool.set, Set::Sorted(_)));
        let left: Vec<FreeKey> = pool.iter().collect();
        let mut want = keys[..10].to_vec();
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(pool.best_fit(1), Some((512, 4096, 1)));
        assert_eq!(pool.iter_from(512 * 9).count(), 1);
    }

    #[test]
    fn replace_moves_an_entry_in_both_directions() {
        for n in [8u32, 300] {
            let mut pool = FreePool::default();
            for i in 0..n {
                pool.insert(u64::from(i) * 1024, u64::from(i) << 20, i);
            }
            // Grow block 2 past block 5, then shrink block 7 below block 1.
            pool.replace((2 * 1024, 2 << 20), Some(0), 5 * 1024 + 512, 2 << 20, 2);
            pool.replace((7 * 1024, 7 << 20), Some(7), 512, 7 << 20, 7);
            let order: Vec<u32> = pool.iter().map(|k| k.2).take(8).collect();
            assert_eq!(order, [0, 7, 1, 3, 4, 5, 2, 6]);
            assert_eq!(
                pool.best_fit(5 * 1024 + 1),
                Some((5 * 1024 + 512, 2 << 20, 2))
            );
            assert_eq!(pool.iter().count(), n as usize);
        }
    }
}
