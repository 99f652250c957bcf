//! The program gate: no program is built while a kernel is being enqueued, and no kernel is
//! enqueued while a program is built.
//!
//! NVIDIA's OpenCL driver (580, H200) crashes inside `clEnqueueNDRangeKernel` when another
//! thread compiles a program at the same moment (burn's conformance suite on a cold kernel
//! cache: test threads build their kernels while others launch theirs), although OpenCL 3.0
//! appendix A.2 makes both calls thread-safe. So every call that makes or inspects a
//! program's code (`clCreateProgramWith*` with `clBuildProgram`, `clCreateKernel`, the binary
//! query) holds the gate exclusively, and every launch holds it shared. The gate is
//! crossbeam's `ShardedLock`: a launch locks only its own thread's shard, so launches on
//! different threads do not contend; a build, rare once a program cache is warm, takes
//! every shard.
//!
//! DIAGNOSTIC while it is measured: `XPU_DIAG_BUILD_GATE=off` (no gate) or `serial` (builds
//! exclusive among themselves only).

use std::sync::{OnceLock, PoisonError, TryLockError};

use crossbeam::sync::{ShardedLock, ShardedLockWriteGuard};

fn gate() -> &'static ShardedLock<()> {
    static GATE: OnceLock<ShardedLock<()>> = OnceLock::new();
    GATE.get_or_init(|| ShardedLock::new(()))
}

fn mode() -> u8 {
    static MODE: OnceLock<u8> = OnceLock::new();
    *MODE.get_or_init(|| match std::env::var("XPU_DIAG_BUILD_GATE").as_deref() {
        Ok("off") => 0,
        Ok("serial") => 1,
        _ => 2,
    })
}

/// Runs `f`, a call that makes or inspects a program's code, holding the gate exclusively.
/// In a bad fork child (see [`crate::fork`]) no gate is taken: a thread of the parent may
/// have held it at the fork.
pub(crate) fn build<R>(f: impl FnOnce() -> R) -> R {
    let _held = (mode() != 0 && !crate::fork::is_in_bad_fork()).then(exclusive);
    hook::fire(hook::Point::BuildHeld);
    f()
}

/// The gate, exclusively (a poisoned gate still excludes: the guard is all it protects).
fn exclusive() -> ShardedLockWriteGuard<'static, ()> {
    match gate().try_write() {
        Ok(g) => g,
        Err(TryLockError::Poisoned(p)) => p.into_inner(),
        Err(TryLockError::WouldBlock) => {
            hook::fire(hook::Point::BuildBlocked);
            gate().write().unwrap_or_else(PoisonError::into_inner)
        }
    }
}

/// Runs `f`, a launch, holding the gate shared; as [`build`] in a bad fork child.
pub(crate) fn launch<R>(f: impl FnOnce() -> R) -> R {
    let _held = (mode() == 2 && !crate::fork::is_in_bad_fork())
        .then(|| gate().read().unwrap_or_else(PoisonError::into_inner));
    hook::fire(hook::Point::LaunchHeld);
    f()
}

/// Test hooks at the gate's points (nothing outside tests).
mod hook {
    /// Where a hook fires.
    #[cfg_attr(not(test), allow(dead_code))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(crate) enum Point {
        /// A launch holds the gate (shared) and is about to enqueue.
        LaunchHeld,
        /// A build found the gate held and waits for it.
        BuildBlocked,
        /// A build holds the gate (exclusively) and is about to run.
        BuildHeld,
    }

    #[cfg(test)]
    pub(crate) type Hook = std::sync::Arc<dyn Fn(Point) + Send + Sync>;

    #[cfg(test)]
    static HOOK: parking_lot::Mutex<Option<Hook>> = parking_lot::Mutex::new(None);

    #[cfg(test)]
    pub(crate) fn set(hook: Option<Hook>) {
        *HOOK.lock() = hook;
    }

    #[inline(always)]
    pub(crate) fn fire(_point: Point) {
        #[cfg(test)]
        {
            let hook = HOOK.lock().clone();
            if let Some(hook) = hook {
                hook(_point);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::sync::{Arc, Mutex};

    use super::hook::{self, Point};
    use crate::backend::{Buffer, Kernel, MemFlags, Program, QueueOptions};

    const SRC: &str = "__kernel void one(__global uint *out) { out[0] = 1; }";

    /// A launch that holds the gate waits (in the hook) for the first gate point of a build
    /// started meanwhile on another thread: that build must find the gate held
    /// (`BuildBlocked`), not run (`BuildHeld`). Deterministic both ways: the launch thread
    /// waits for whichever point comes first.
    #[test]
    fn a_program_build_waits_for_a_launch_in_progress() {
        let Ok(dev) = crate::device(0) else {
            assert!(
                std::env::var_os("XPU_REQUIRE_DEVICE").is_none(),
                "no device"
            );
            return;
        };
        let ctx = dev.context().unwrap();
        let program = Program::build(ctx, dev.id(), SRC).unwrap();
        let mut kernel = Kernel::new(&program, "one").unwrap();
        let out = Buffer::new(ctx, 4, MemFlags::default()).unwrap();
        kernel.set_arg_buffer(0, &out).unwrap();
        let queue = dev.create_queue(QueueOptions::default()).unwrap();

        let (held_tx, held_rx) = mpsc::channel::<()>();
        let (build_tx, build_rx) = mpsc::channel::<Point>();
        let (held_tx, build_tx) = (Mutex::new(held_tx), Mutex::new(build_tx));
        let build_rx = Mutex::new(build_rx);
        let first_build_point = Arc::new(Mutex::new(None));
        let seen = first_build_point.clone();
        hook::set(Some(Arc::new(move |point| {
            let name = std::thread::current().name().map(str::to_owned);
            match (name.as_deref(), point) {
                (Some("gate-launch"), Point::LaunchHeld) => {
                    held_tx.lock().unwrap().send(()).unwrap();
                    let first = build_rx.lock().unwrap().recv().unwrap();
                    *seen.lock().unwrap() = Some(first);
                }
                (Some("gate-build"), Point::BuildBlocked | Point::BuildHeld) => {
                    let _ = build_tx.lock().unwrap().send(point);
                }
                _ => {}
            }
        })));
        let queue = &queue;
        std::thread::scope(|s| {
            let launch = std::thread::Builder::new()
                .name("gate-launch".into())
                .spawn_scoped(s, move || {
                    // SAFETY: one work-item writes out[0], inside the 4-byte buffer; nothing
                    // borrows the buffer.
                    unsafe { queue.enqueue_kernel(&kernel, &[1], None, &[]) }.map(drop)
                })
                .unwrap();
            held_rx.recv().unwrap();
            let build = std::thread::Builder::new()
                .name("gate-build".into())
                .spawn_scoped(s, || Program::build(ctx, dev.id(), SRC).map(drop))
                .unwrap();
            launch.join().unwrap().unwrap();
            build.join().unwrap().unwrap();
        });
        hook::set(None);
        queue.finish().unwrap();
        assert_eq!(
            *first_build_point.lock().unwrap(),
            Some(Point::BuildBlocked),
            "a program build ran while another thread's launch was being enqueued"
        );
    }
}
