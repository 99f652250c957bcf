//! The per-stream capture state (see `capture.rs` for how it is used): a flag behind a
//! reader-writer lock whose shared side is the direct-enqueue permit.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::lock_api::ArcRwLockReadGuard;
use parking_lot::{RawRwLock, RwLock, RwLockReadGuard};

/// The capture state of one stream: whether a graph captures it, behind the lock whose
/// shared side is the direct-enqueue permit.
pub(crate) type StateLock = RwLock<AtomicBool>;

/// A stream's [`StateLock`]: in the device's pool (native streams, never freed) or shared
/// with the external stream's registry entry.
#[derive(Debug, Clone)]
pub(crate) enum StateRef {
    Native(&'static StateLock),
    External(Arc<StateLock>),
}

impl StateRef {
    pub(crate) fn lock(&self) -> &StateLock {
        match self {
            StateRef::Native(l) => l,
            StateRef::External(l) => l,
        }
    }

    /// Takes the direct-enqueue permit (shared, recursive: see `capture.rs`).
    pub(crate) fn permit(&self) -> Permit {
        match self {
            StateRef::Native(l) => Permit::Native(l.read_recursive()),
            StateRef::External(l) => Permit::External(l.read_arc_recursive()),
        }
    }

    /// Whether the stream is being captured (under a short shared lock).
    pub(crate) fn is_capturing(&self) -> bool {
        self.lock().read_recursive().load(Ordering::Acquire)
    }
}

/// A held direct-enqueue permit.
pub(crate) enum Permit {
    Native(RwLockReadGuard<'static, AtomicBool>),
    External(ArcRwLockReadGuard<RawRwLock, AtomicBool>),
}

impl Permit {
    pub(crate) fn is_capturing(&self) -> bool {
        match self {
            Permit::Native(g) => g.load(Ordering::Acquire),
            Permit::External(g) => g.load(Ordering::Acquire),
        }
    }
}
