//! Statistics after known sequences (reference §4.13), resets, flat keys, and aggregation of
//! per-thread cells.

mod common;

use common::{sim_core, stream, GIB, MIB};
use xpu_alloc::{Stat, StatArray};

fn stat(current: u64, peak: u64, allocated: u64, freed: u64) -> Stat {
    Stat {
        current: current as i64,
        peak: peak as i64,
        allocated: allocated as i64,
        freed: freed as i64,
    }
}

#[test]
fn stats_after_a_known_sequence() {
    let (core, _) = sim_core(GIB, "release_policy:on_oom");
    let (_, s) = stream(0);
    let a = core.allocate(1000, &s).unwrap(); // small: 1024 bytes from a 2 MiB segment
    let b = core.allocate(3 * MIB, &s).unwrap(); // large: 3 MiB from a 20 MiB segment
    drop(a);
    let st = core.memory_stats();
    let counts = StatArray {
        all: stat(1, 2, 2, 1),
        small_pool: stat(0, 1, 1, 1),
        large_pool: stat(1, 1, 1, 0),
    };
    assert_eq!(st.allocation, counts);
    assert_eq!(st.active, counts);
    assert_eq!(
        st.segment,
        StatArray {
            all: stat(2, 2, 2, 0),
            small_pool: stat(1, 1, 1, 0),
            large_pool: stat(1, 1, 1, 0)
        }
    );
    assert_eq!(
        st.inactive_split,
        StatArray {
            all: stat(1, 2, 2, 1),
            small_pool: stat(0, 1, 1, 1),
            large_pool: stat(1, 1, 1, 0)
        }
    );
    let small_rest = 2 * MIB - 1024;
    assert_eq!(
        st.inactive_split_bytes,
        StatArray {
            all: stat(
                17 * MIB,
                small_rest + 17 * MIB,
                small_rest + 17 * MIB,
                small_rest
            ),
            small_pool: stat(0, small_rest, small_rest, small_rest),
            large_pool: stat(17 * MIB, 17 * MIB, 17 * MIB, 0),
        }
    );
    let bytes = StatArray {
        all: stat(3 * MIB, 3 * MIB + 1024, 3 * MIB + 1024, 1024),
        small_pool: stat(0, 1024, 1024, 1024),
        large_pool: stat(3 * MIB, 3 * MIB, 3 * MIB, 0),
    };
    assert_eq!(st.allocated_bytes, bytes);
    assert_eq!(st.active_bytes, bytes);
    assert_eq!(
        st.reserved_bytes,
        StatArray {
            all: stat(22 * MIB, 22 * MIB, 22 * MIB, 0),
            small_pool: stat(2 * MIB, 2 * MIB, 2 * MIB, 0),
            large_pool: stat(20 * MIB, 20 * MIB, 20 * MIB, 0)
        }
    );
    assert_eq!(
        st.requested_bytes,
        StatArray {
            all: stat(3 * MIB, 3 * MIB + 1000, 3 * MIB + 1000, 1000),
            small_pool: stat(0, 1000, 1000, 1000),
            large_pool: stat(3 * MIB, 3 * MIB, 3 * MIB, 0)
        }
    );
    assert_eq!(
        (
            st.num_device_alloc,
            st.num_device_free,
            st.num_alloc_retries,
            st.num_ooms,
            st.num_sync_all_streams
        ),
        (2, 0, 0, 0, 0)
    );
    assert_eq!(st.max_split_size, -1);
    assert_eq!(core.memory_allocated(), 3 * MIB);
    assert_eq!(core.max_memory_allocated(), 3 * MIB + 1024);
    assert_eq!(core.memory_reserved(), 22 * MIB);
    assert_eq!(core.max_memory_reserved(), 22 * MIB);

    let flat = st.flat();
    assert_eq!(flat.len(), 9 * 3 * 4 + 5 + 2 * 4 + 1);
    assert_eq!(flat["allocated_bytes.all.current"], 3 * MIB as i64);
    assert_eq!(flat["allocation.small_pool.freed"], 1);
    assert_eq!(flat["num_device_alloc"], 2);
    assert_eq!(flat["max_split_size"], -1);
    assert_eq!(flat["oversize_segments.peak"], 0);

    core.reset_peak_stats();
    assert_eq!(core.max_memory_allocated(), 3 * MIB);
    assert_eq!(
        core.memory_stats().inactive_split_bytes.all.peak,
        17 * MIB as i64
    );
    core.reset_accumulated_stats();
    let st = core.memory_stats();
    assert_eq!(st.allocation.all, stat(1, 1, 0, 0));
    assert_eq!(st.num_device_alloc, 0);
    drop(b);
    core.empty_cache();
    let st = core.memory_stats();
    assert_eq!(st.reserved_bytes.all, stat(0, 22 * MIB, 0, 22 * MIB));
    assert_eq!((st.num_device_free, st.num_sync_all_streams), (2, 1));
}

#[test]
fn max_split_size_is_reported() {
    let (core, _) = sim_core(GIB, "max_split_size_mb:64");
    assert_eq!(core.memory_stats().max_split_size, 64 * MIB as i64);
    assert_eq!(
        core.memory_stats().flat()["max_split_size"],
        64 * MIB as i64
    );
}

#[test]
fn zero_size_allocation_touches_nothing() {
    let (core, source) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let p = core.allocate(0, &s).unwrap();
    assert!(p.is_empty());
    assert_eq!(
        (p.address(), p.size(), p.allocated_size(), p.stream()),
        (0, 0, 0, None)
    );
    drop(p);
    assert_eq!(core.memory_stats().allocation.all.allocated, 0);
    assert_eq!(source.counters().attempts, 0);
}

#[test]
fn frees_from_other_threads_aggregate_exactly() {
    let (core, _) = sim_core(GIB, "");
    let (_, s) = stream(0);
    let ptrs: Vec<_> = (0..8).map(|_| core.allocate(MIB, &s).unwrap()).collect();
    assert_eq!(core.memory_allocated(), 8 * MIB);
    std::thread::spawn(move || drop(ptrs)).join().unwrap();
    let st = core.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.allocated_bytes.all.allocated, 8 * MIB as i64);
    assert_eq!(st.allocated_bytes.all.freed, 8 * MIB as i64);
    assert_eq!(st.active.all.current, 0);
    // Single-threaded allocation: the peak is exact.
    assert_eq!(st.allocated_bytes.all.peak, 8 * MIB as i64);
}

#[test]
fn peaks_are_exact_across_streams_on_one_thread() {
    let (core, _) = sim_core(GIB, "");
    let (_, s0) = stream(0);
    let (_, s1) = stream(1);
    let a = core.allocate(4 * MIB, &s0).unwrap();
    let b = core.allocate(4 * MIB, &s1).unwrap();
    drop(a);
    let c = core.allocate(4 * MIB, &s1).unwrap();
    // Live never exceeded 8 MiB even though each stream peaked at 8 MiB... of its own.
    assert_eq!(core.max_memory_allocated(), 8 * MIB);
    drop((b, c));
}
