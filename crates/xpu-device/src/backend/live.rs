//! Counts of the live OpenCL objects the backend holds, for leak tests and diagnostics.
//!
//! Every wrapper counts one per reference it owns: creation, `Clone` (a retain) and wrapping a
//! raw handle add one; `Drop` (a release) subtracts one. Relaxed atomics: a count is exact once
//! the threads that create and drop objects have synchronized with the reader.

use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    Buffer,
    SubBuffer,
    Event,
    Queue,
    Program,
    Kernel,
}

static COUNTS: [AtomicUsize; 6] = [
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
    AtomicUsize::new(0),
];

#[inline]
pub(crate) fn created(kind: Kind) {
    COUNTS[kind as usize].fetch_add(1, Ordering::Relaxed);
}

#[inline]
pub(crate) fn released(kind: Kind) {
    COUNTS[kind as usize].fetch_sub(1, Ordering::Relaxed);
}

/// How many references to OpenCL objects the backend's wrappers hold right now
/// ([`live_objects`]). A reference count per wrapper, not per driver object: two clones of a
/// buffer count two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LiveObjects {
    /// Buffers (`clCreateBuffer`, including the buffers behind pinned host memory).
    pub buffers: usize,
    /// Sub-buffers (`clCreateSubBuffer`).
    pub sub_buffers: usize,
    /// Events: commands' events, markers, barriers and user events.
    pub events: usize,
    /// Command queues.
    pub queues: usize,
    /// Programs.
    pub programs: usize,
    /// Kernels.
    pub kernels: usize,
    /// Closures registered with `ClEvent::on_complete` that have not run yet.
    pub callbacks: usize,
}

/// The live object counts (relaxed atomic loads), read after releasing what the runtime holds
/// only until a command is over (markers and barriers whose wrappers dropped, and cross-device
/// forwards: one non-blocking `clGetEventInfo` each; not in a bad fork child). After every
/// queue has been finished and every completion callback has run
/// ([`super::wait_for_callbacks`]), a leak-free program returns to the counts it had before,
/// also after forwards and `on_complete` closures whose commands failed on a driver that never
/// calls back for a failed command (PoCL): the sweep that passes such a failure on releases
/// what the callback would have.
pub fn live_objects() -> LiveObjects {
    if !crate::fork::is_in_bad_fork() {
        // Forwards and markers the runtime holds until their sources and commands are over
        // (see the `forwards`, `held` and `notify_lists` modules): what is over is released
        // now.
        super::forwards::sweep();
        for _ in 0..super::held::prune() {
            released(Kind::Event);
        }
        // Uncounted references (the events' own wrappers are counted).
        super::notify_lists::prune();
        // Dropped queues kept for the exit's drain until their last command is over.
        super::at_exit::prune_retired();
    }
    let c = |k: Kind| COUNTS[k as usize].load(Ordering::Relaxed);
    LiveObjects {
        buffers: c(Kind::Buffer),
        sub_buffers: c(Kind::SubBuffer),
        events: c(Kind::Event),
        queues: c(Kind::Queue),
        programs: c(Kind::Program),
        kernels: c(Kind::Kernel),
        callbacks: super::callbacks::pending(),
    }
}
