//! Live allocations of the raw interface (`raw_alloc` / `raw_delete`), keyed by address in
//! independent buckets so threads rarely share a lock.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::data_ptr::DataPtr;

const BUCKETS: usize = 64;

pub(super) struct RawTable {
    buckets: Vec<Mutex<HashMap<u64, DataPtr>>>,
}

impl Default for RawTable {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }
}

impl RawTable {
    fn bucket(&self, address: u64) -> &Mutex<HashMap<u64, DataPtr>> {
        // Addresses are multiples of 512: mix the bits above.
        let h = (address >> 9).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 58;
        &self.buckets[usize::try_from(h).unwrap_or(0) % BUCKETS]
    }

    pub(super) fn insert(&self, address: u64, ptr: DataPtr) {
        self.bucket(address).lock().insert(address, ptr);
    }

    pub(super) fn remove(&self, address: u64) -> Option<DataPtr> {
        self.bucket(address).lock().remove(&address)
    }

    pub(super) fn with<R>(&self, address: u64, f: impl FnOnce(&DataPtr) -> R) -> Option<R> {
        self.bucket(address).lock().get(&address).map(f)
    }
}
