//! A vector of slots addressed by `u32` indices, reusing freed slots.

/// Slot storage; indices stay valid until the slot is removed.
#[derive(Debug)]
pub(crate) struct Slab<T> {
    items: Vec<Option<T>>,
    vacant: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            vacant: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    #[inline(always)]
    pub(crate) fn insert(&mut self, value: T) -> u32 {
        if let Some(index) = self.vacant.pop() {
            self.items[index as usize] = Some(value);
            index
        } else {
            self.items.push(Some(value));
            u32::try_from(self.items.len() - 1).unwrap_or(u32::MAX)
        }
    }

    #[inline]
    pub(crate) fn remove(&mut self, index: u32) -> Option<T> {
        let value = self.items.get_mut(index as usize)?.take();
        if value.is_some() {
            self.vacant.push(index);
        }
        value
    }

    /// Drops the value at `index` in place, if any (as [`Slab::remove`] without moving
    /// it out).
    #[inline(always)]
    pub(crate) fn discard(&mut self, index: u32) {
        if let Some(slot) = self.items.get_mut(index as usize) {
            if slot.is_some() {
                // Dropped in place.
                *slot = None;
                self.vacant.push(index);
            }
        }
    }

    #[inline]
    pub(crate) fn get(&self, index: u32) -> Option<&T> {
        self.items.get(index as usize)?.as_ref()
    }

    /// Swaps the values at two indices (a relocated block's index keeps naming it at its
    /// new place, `relocate`).
    pub(crate) fn swap(&mut self, a: u32, b: u32) {
        self.items.swap(a as usize, b as usize);
    }

    /// One past the highest index ever handed out: every live index is below it.
    #[inline]
    pub(crate) fn slots(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (u32, &T)> {
        self.items
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((u32::try_from(i).ok()?, v.as_ref()?)))
    }
}

impl<T> std::ops::Index<u32> for Slab<T> {
    type Output = T;
    #[inline(always)]
    fn index(&self, index: u32) -> &T {
        // Internal invariant: indices come from live blocks/segments of the same shard.
        self.items[index as usize]
            .as_ref()
            .expect("slab index of a live entry")
    }
}

impl<T> std::ops::IndexMut<u32> for Slab<T> {
    #[inline(always)]
    fn index_mut(&mut self, index: u32) -> &mut T {
        self.items[index as usize]
            .as_mut()
            .expect("slab index of a live entry")
    }
}
