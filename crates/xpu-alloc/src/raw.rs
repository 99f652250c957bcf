//! Live allocations of the raw interface (`raw_alloc` / `raw_delete`), keyed by address in
//! independent buckets so threads rarely share a lock.
//!
//! Entries are shared (`Arc`): an accessor clones the entry under the bucket lock and runs
//! the caller's code after releasing it, so no user code runs under the lock and a
//! `raw_delete` during the access frees the block when the access ends.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::data_ptr::DataPtr;

const BUCKETS: usize = 64;

pub(super) struct RawTable {
    buckets: Vec<Mutex<HashMap<u64, Arc<DataPtr>>>>,
}

impl Default for RawTable {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl RawTable {
    fn bucket(&self, address: u64) -> &Mutex<HashMap<u64, Arc<DataPtr>>> {
        // Addresses are multiples of 512: mix the bits above.
        let h = (address >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.buckets[usize::try_from(h).unwrap_or(0) % BUCKETS]
    }

    pub(crate) fn insert(&self, address: u64, ptr: DataPtr) {
        // A replaced entry (impossible: addresses are unique while live) drops unlocked.
        let old = self.bucket(address).lock().insert(address, Arc::new(ptr));
        drop(old);
    }

    pub(crate) fn remove(&self, address: u64) -> Option<Arc<DataPtr>> {
        self.bucket(address).lock().remove(&address)
    }

    /// A shared handle on the live allocation at `address` (the lock is released on return).
    pub(crate) fn get(&self, address: u64) -> Option<Arc<DataPtr>> {
        self.bucket(address).lock().get(&address).cloned()
    }
}
