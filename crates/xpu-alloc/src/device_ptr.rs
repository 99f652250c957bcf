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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DevicePtr {
    device: usize,
    address: u64,
}

impl DevicePtr {
    /// The pointer `address` on `device`.
    #[must_use]
    pub const fn new(device: usize, address: u64) -> Self {
        Self { device, address }
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
