//! Review h85 of the facade at 1d56b4a (commit 1f6eea3): probes of `LazyError::CallFailed`
//! seen through the facade that held (pass on 1d56b4a). Findings are in review_h85.rs. Pure
//! error values: no device, no runtime state.

use std::error::Error as _;

use xpu::Error;
use xpu_alloc::AllocError;
use xpu_lazy::LazyError;

fn oom() -> AllocError {
    AllocError::TooLarge {
        device: 0,
        requested: 1 << 62,
        max: 1 << 30,
    }
}

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
