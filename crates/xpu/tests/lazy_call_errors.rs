//! A lazy call's error seen through the facade (`LazyError::CallFailed` / `QueuedCallFailed`
//! in `xpu::Error`): `is_out_of_memory` looks into the boxed error of every layer's type, the
//! message and `source()` chain are the function's own. Pure error values: no device, no
//! runtime state (the tests share a process safely).
//!
//! Merged from review h85's two files (its findings and the probes that held), each section
//! below as it was in its file.
//!
//! ## From `review_h85.rs`
//!
//! Review h85 of the facade at 1d56b4a (commit 1f6eea3: `Error::is_out_of_memory` looks into
//! the boxed error of a lazy call, `LazyError::CallFailed` / `QueuedCallFailed`). Each test
//! here failed on 1d56b4a (6 of 6) and passes since the box is looked into for every layer's
//! error the facade wraps; the comment above each says what it shows, what was expected and
//! why.
//! Probes that held are below (formerly review_h85_holds.rs).
//!
//! Found: `boxed_is_out_of_memory` (crates/xpu/src/error.rs:213-230) downcasts the box to
//! four types only (`xpu::Error`, `DeviceError`, `AllocError`, `HostError`). A lazy call's
//! function whose error is a kernel-layer error (`KernelError::Alloc`, `InteropError::Alloc`:
//! what a launch or a foreign call inside it returns with `?`) or a nested lazy call's
//! (`LazyError::CallFailed`) carrying an out-of-memory reads as no out-of-memory, while the
//! very same error converted into `xpu::Error` (`Error::from`) reads as one. torch raises
//! `torch.OutOfMemoryError` from `_lazy_call`'s function whatever layer raised it.
//!
//! Pure error values: no device, no runtime state.
//!
//! ## From `review_h85_holds.rs`
//!
//! Review h85 of the facade at 1d56b4a (commit 1f6eea3): probes of `LazyError::CallFailed`
//! seen through the facade that held (pass on 1d56b4a). Findings are above (formerly review_h85.rs). Pure
//! error values: no device, no runtime state.

use std::error::Error as _;

use xpu::Error;
use xpu_alloc::AllocError;
use xpu_lazy::LazyError;

// ---- Formerly review_h85.rs ----

/// An allocation that can never succeed: `AllocError::is_out_of_memory` is true for it.
fn oom() -> AllocError {
    AllocError::TooLarge {
        device: 0,
        requested: 1 << 62,
        max: 1 << 30,
    }
}

/// `e` boxed as a lazy call's function returns it, run at once (`LazyError::CallFailed`),
/// and seen through the facade.
fn lazy(e: impl std::error::Error + Send + Sync + 'static) -> Error {
    Error::Lazy(LazyError::CallFailed(Box::new(e)))
}

/// FINDING 1. What: a lazy call's function fails with `KernelError::Alloc(out of memory)` (a
/// kernel launch's allocation). Expected: `is_out_of_memory()` true, as for
/// `Error::from(KernelError::Alloc(..))`. Observed: false. Why: error.rs:213-230 never
/// downcasts to `xpu_kernel::KernelError`.
#[test]
fn a_lazy_calls_kernel_out_of_memory_is_not_out_of_memory() {
    assert!(Error::from(xpu_kernel::KernelError::Alloc(oom())).is_out_of_memory());
    let e = lazy(xpu_kernel::KernelError::Alloc(oom()));
    assert!(e.is_out_of_memory(), "{e}: is_out_of_memory false");
}

/// FINDING 2. What: as FINDING 1 with `InteropError::Alloc` (a foreign call's workspace).
/// Expected: true, as `Error::from(InteropError::Alloc(..))`. Observed: false. Why: as above.
#[test]
fn a_lazy_calls_interop_out_of_memory_is_not_out_of_memory() {
    assert!(Error::from(xpu_kernel::InteropError::Alloc(oom())).is_out_of_memory());
    let e = lazy(xpu_kernel::InteropError::Alloc(oom()));
    assert!(e.is_out_of_memory(), "{e}: is_out_of_memory false");
}

/// FINDING 3. What: a lazy call's function itself makes a lazy call (`xpu_lazy::lazy_call`
/// returns `LazyError`), whose function ran out of memory. Expected: true (the error is an
/// `AllocError` out of memory two boxes down, as one box down reads). Observed: false. Why:
/// error.rs:213-230 does not downcast to `LazyError`.
#[test]
fn a_nested_lazy_calls_out_of_memory_is_not_out_of_memory() {
    assert!(lazy(oom()).is_out_of_memory());
    let e = lazy(LazyError::CallFailed(Box::new(oom())));
    assert!(e.is_out_of_memory(), "{e}: is_out_of_memory false");
}

// ---- Formerly review_h85_holds.rs ----

/// Held: `CallFailed` is transparent: the facade's message is the function's own, and
/// `source()` skips no level of the function's chain (it is the function's error's source:
/// an `AllocError::Device` shows its `DeviceError`).
#[test]
fn a_call_failed_error_reads_as_the_functions_own() {
    let inner = oom();
    let e = Error::Lazy(LazyError::CallFailed(Box::new(oom())));
    assert_eq!(e.to_string(), inner.to_string());
    let with_source = AllocError::Device(Box::new(xpu_device::DeviceError::InvalidArgument(
        "x".into(),
    )));
    let expected = with_source.source().map(ToString::to_string);
    let e = LazyError::CallFailed(Box::new(with_source));
    assert_eq!(e.source().map(ToString::to_string), expected);
}

/// Held: out-of-memory is found one box down for the four types `boxed_is_out_of_memory`
/// downcasts to, through `CallFailed` and `QueuedCallFailed` alike; `is_bad_fork` is false
/// for a function's bad-fork error boxed in `CallFailed` (the routine ran: not the runtime's
/// refusal, as documented).
#[test]
fn boxed_out_of_memory_of_the_listed_types_is_found() {
    assert!(Error::Lazy(LazyError::CallFailed(Box::new(oom()))).is_out_of_memory());
    assert!(Error::Lazy(LazyError::CallFailed(Box::new(Error::from(oom())))).is_out_of_memory());
    assert!(Error::Lazy(LazyError::QueuedCallFailed {
        origin: "here".into(),
        source: Box::new(oom()),
    })
    .is_out_of_memory());
    let bf = Error::Lazy(LazyError::CallFailed(Box::new(AllocError::BadFork)));
    assert!(!bf.is_bad_fork());
    assert!(!bf.is_out_of_memory());
}
