//! The history records an `oom` entry only for an out-of-memory error returned to the
//! caller, as PyTorch traces `oom` where `malloc` raises `OutOfMemoryError`: an attempt of
//! [`CachingAllocator::allocate_or_retry`] that its retry then serves leaves none.

use super::{sim_core, stream, MIB};
use crate::error::CacheError;
use crate::history::TraceAction;

/// Actions of the recorded entries, oldest first.
fn actions(
    cache: &crate::allocator::CachingAllocator<crate::sim_stream::SimBackend>,
) -> Vec<TraceAction> {
    cache
        .memory_history()
        .entries()
        .iter()
        .map(|e| e.action)
        .collect()
}

/// A 64 MiB device with 40 MiB handed out: a 40 MiB request fails once; `before_retry`
/// frees the 40 MiB and releases the cache, and the retry serves the request. The history
/// holds no `oom` entry (and `num_ooms` is 0); a request that then fails for good without
/// a retry records exactly one, with the rounded size and the stream.
#[test]
fn an_allocation_served_by_its_retry_records_no_oom_in_the_history() {
    let (cache, _) = sim_core(64 * MIB, "");
    let (s, _) = stream(1);
    cache.memory_history().record_memory_history(true, 1000);
    let held = cache.alloc(40 * MIB, &s).unwrap();
    let mut retried = false;
    let served = cache
        .allocate_or_retry(
            40 * MIB,
            crate::stream::StreamKey::new(0, 1),
            || s.clone(),
            || {
                retried = true;
                drop(held);
                cache.empty_cache();
                true
            },
        )
        .unwrap()
        .expect("a non-zero size gives an allocation");
    assert!(retried, "the first attempt failed out of memory");
    assert_eq!(served.allocated_size(), 40 * MIB);
    assert_eq!(cache.memory_stats().num_ooms, 0);
    let recorded = actions(&cache);
    assert!(
        !recorded.contains(&TraceAction::Oom),
        "no out-of-memory error was raised, yet the history holds {recorded:?}"
    );
    // A failure returned to the caller is recorded once.
    let err = cache
        .allocate_or_retry(
            40 * MIB,
            crate::stream::StreamKey::new(0, 1),
            || s.clone(),
            || false,
        )
        .unwrap_err();
    assert!(matches!(err, CacheError::OutOfMemory { .. }), "{err}");
    assert_eq!(cache.memory_stats().num_ooms, 1);
    let ooms: Vec<_> = cache
        .memory_history()
        .entries()
        .into_iter()
        .filter(|e| e.action == TraceAction::Oom)
        .collect();
    assert_eq!(ooms.len(), 1, "{ooms:?}");
    assert_eq!((ooms[0].size, ooms[0].stream), (40 * MIB, 1));
}
