//! [`Keyed`]: values waiting for a driver callback, each under a key that the driver is given
//! as `user_data` instead of a pointer to the value. Whoever takes the key first (the callback,
//! or a sweep that sees the command failed: PoCL never calls back for a failed command, see
//! `callbacks` and `forwards`) gets the value, so it is handed over, and released, once.

use std::collections::BTreeMap;

/// Values by key (held under the caller's lock).
pub(super) struct Keyed<T> {
    map: BTreeMap<usize, T>,
    next: usize,
}

impl<T> Keyed<T> {
    /// Empty; usable in a `static`.
    pub(super) const fn new() -> Self {
        Keyed {
            map: BTreeMap::new(),
            next: 1,
        }
    }

    /// Keeps `value`; returns its key (never 0, unique among the values kept).
    pub(super) fn insert(&mut self, value: T) -> usize {
        let key = self.next;
        self.next = self.next.wrapping_add(1).max(1);
        self.map.insert(key, value);
        key
    }

    /// Takes the value of `key`, if nobody took it yet.
    pub(super) fn take(&mut self, key: usize) -> Option<T> {
        self.map.remove(&key)
    }

    /// Whether a value is kept under `key`.
    pub(super) fn contains(&self, key: usize) -> bool {
        self.map.contains_key(&key)
    }

    /// The values kept, by key.
    pub(super) fn iter(&self) -> impl Iterator<Item = (usize, &T)> {
        self.map.iter().map(|(&k, v)| (k, v))
    }

    /// How many values are kept.
    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}
