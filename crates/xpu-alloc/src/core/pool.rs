//! A free pool: free blocks of one shard ordered by (size, address) for best fit.
//!
//! Small pools (the common case) are a sorted vector: a best-fit search is a binary search
//! and an insert or removal a short move, much cheaper than tree operations. A pool that
//! grows past [`PROMOTE`] blocks becomes a B-tree, and returns to a vector below
//! [`DEMOTE`].

use std::collections::BTreeSet;

/// (size, address, block index).
pub(crate) type FreeKey = (u64, u64, u32);

/// Blocks above which a pool switches to a B-tree.
const PROMOTE: usize = 256;
/// Blocks below which a B-tree pool switches back to a vector.
const DEMOTE: usize = 64;

#[derive(Debug)]
enum Set {
    Sorted(Vec<FreeKey>),
    Tree(BTreeSet<FreeKey>),
}

/// Free blocks keyed by (size, address, block index).
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
    pub(crate) fn insert(&mut self, size: u64, addr: u64, block: u32) {
        let key = (size, addr, block);
        match &mut self.set {
            Set::Sorted(v) => {
                let at = v.partition_point(|k| *k < key);
                if at == v.len() {
                    v.push(key);
                } else {
                    v.insert(at, key);
                }
                if v.len() > PROMOTE {
                    self.set = Set::Tree(v.drain(..).collect());
                }
            }
            Set::Tree(t) => {
                t.insert(key);
            }
        }
    }

    pub(crate) fn remove(&mut self, size: u64, addr: u64, block: u32) {
        let key = (size, addr, block);
        match &mut self.set {
            Set::Sorted(v) => {
                if let Ok(at) = v.binary_search(&key) {
                    if at + 1 == v.len() {
                        v.pop();
                    } else {
                        v.remove(at);
                    }
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

    /// The smallest free block of at least `size` bytes (lowest address on ties).
    #[inline]
    pub(crate) fn best_fit(&self, size: u64) -> Option<FreeKey> {
        match &self.set {
            Set::Sorted(v) => v.get(v.partition_point(|k| k.0 < size)).copied(),
            Set::Tree(t) => t.range((size, 0, 0)..).next().copied(),
        }
    }

    /// Free blocks from the smallest.
    pub(crate) fn iter(&self) -> Box<dyn DoubleEndedIterator<Item = &FreeKey> + '_> {
        match &self.set {
            Set::Sorted(v) => Box::new(v.iter()),
            Set::Tree(t) => Box::new(t.iter()),
        }
    }

    /// Free blocks of at least `size` bytes, from the smallest.
    pub(crate) fn iter_from(
        &self,
        size: u64,
    ) -> Box<dyn DoubleEndedIterator<Item = &FreeKey> + '_> {
        match &self.set {
            Set::Sorted(v) => Box::new(v[v.partition_point(|k| k.0 < size)..].iter()),
            Set::Tree(t) => Box::new(t.range((size, 0, 0)..)),
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
        let left: Vec<FreeKey> = pool.iter().copied().collect();
        let mut want = keys[..10].to_vec();
        want.sort_unstable();
        assert_eq!(left, want);
        assert_eq!(pool.best_fit(1), Some((512, 4096, 1)));
        assert_eq!(pool.iter_from(512 * 9).count(), 1);
    }
}
