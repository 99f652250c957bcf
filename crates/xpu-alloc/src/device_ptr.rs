//! [`DevicePtr`]: an address handed out by the raw interface.

/// A device address from [`crate::raw_alloc`], freed by [`crate::raw_delete`] (as
/// `caching_allocator_alloc` / `caching_allocator_delete`). Address 0 is the null pointer
/// (zero-size allocation).
///
/// A plain value (`Copy`), like the C pointer it models: it owns nothing and grants no
/// access by itself. Its bytes are reached through [`crate::with_raw_view`] (bounds-checked,
/// and only while the allocation is live: after `raw_delete` every accessor returns
/// [`crate::AllocError::InvalidDevicePointer`], until a later `raw_alloc` hands out the same
/// address again) or, for interop, as raw values from [`crate::raw_cl_mem_and_offset`].
///
/// A pointer handed out by an allocator also names that allocator ([`DevicePtr::owner`]):
/// every allocator of a device numbers its addresses from the same base, so an address alone
/// could be another allocator's live allocation; an allocator refuses a pointer that names
/// another one as "invalid device pointer".
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevicePtr {
    device: usize,
    address: u64,
    owner: u64,
}

impl DevicePtr {
    /// The pointer `address` on `device`, naming no allocator (as a C pointer cast from an
    /// integer): any allocator of the device with a live raw allocation at `address` takes it.
    #[must_use]
    pub const fn new(device: usize, address: u64) -> Self {
        Self {
            device,
            address,
            owner: 0,
        }
    }

    /// The pointer `address` on `device` handed out by the allocator `owner`
    /// ([`DeviceCore::id`](crate::DeviceCore::id)).
    #[must_use]
    pub(crate) const fn owned(device: usize, address: u64, owner: u64) -> Self {
        Self {
            device,
            address,
            owner,
        }
    }

    /// The identity of the allocator that handed the pointer out; 0 for a pointer made with
    /// [`DevicePtr::new`].
    #[must_use]
    pub const fn owner(&self) -> u64 {
        self.owner
    }

    /// Whether the allocator `id` may take this pointer as its own (it names that allocator,
    /// or none).
    pub(crate) const fn may_belong_to(&self, id: u64) -> bool {
        self.owner == 0 || self.owner == id
    }

    /// Device index.
    #[must_use]
    pub const fn device(&self) -> usize {
        self.device
    }

    /// Device address (unique on the device while allocated).
    #[must_use]
    pub const fn address(&self) -> u64 {
        self.address
    }

    /// Whether this is the null pointer.
    #[must_use]
    pub const fn is_null(&self) -> bool {
        self.address == 0
    }
}
