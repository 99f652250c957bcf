//! Sizes and indices from the user at their limits: reservation sums near `u64::MAX`,
//! simulated devices with huge capacities and indices, fault plans far in the future.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use common::stream;
use xpu_alloc::{AllocConfig, AllocError, DeviceCore, Fault, SegmentSource, SimulatedSource};

const EIB: u64 = 1 << 60;

fn huge_core(device: usize) -> (DeviceCore, Arc<SimulatedSource>) {
    let source = Arc::new(SimulatedSource::new(device, u64::MAX, u64::MAX));
    (
        DeviceCore::new(Box::new(source.clone()), AllocConfig::default()),
        source,
    )
}

#[test]
fn reserving_more_than_the_statistics_can_count_is_out_of_memory() {
    let (core, source) = huge_core(0);
    let (_, s) = stream(0);
    let mut live = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..20 {
        match core.allocate(EIB, &s) {
            Ok(p) => live.push(p),
            Err(e) => refused.push(e),
        }
    }
    // Reserved bytes are i64 statistics: at most 7 segments of 2^60 bytes fit below 2^63.
    assert_eq!(live.len(), 7);
    assert!(
        refused
            .iter()
            .all(|e| matches!(e, AllocError::OutOfMemory(_))),
        "{refused:?}"
    );
    let st = core.memory_stats();
    assert_eq!(
        (
            st.reserved_bytes.all.current,
            st.allocated_bytes.all.current,
            st.reserved_bytes.all.peak
        ),
        (7 * EIB as i64, 7 * EIB as i64, 7 * EIB as i64)
    );
    assert_eq!(core.reserved_bytes(), 7 * EIB);
    assert_eq!(source.counters().used, 7 * EIB);
    drop(live);
    core.empty_cache();
    assert_eq!(core.memory_stats().reserved_bytes.all.current, 0);
    assert_eq!((core.reserved_bytes(), source.counters().used), (0, 0));
}

#[test]
fn a_simulated_device_never_counts_past_its_capacity() {
    let source = SimulatedSource::new(0, u64::MAX, u64::MAX);
    let mut ok = 0u64;
    for _ in 0..17 {
        if source.allocate(EIB).is_ok() {
            ok += 1;
        }
    }
    // 15 segments of 2^60 bytes fit below u64::MAX; the 16th would need 2^64 bytes.
    assert_eq!((ok, source.counters().used), (15, 15 * EIB));
}

#[test]
fn simulated_addresses_stay_unique_when_the_address_range_runs_out() {
    let source = SimulatedSource::new(0, u64::MAX, u64::MAX);
    let mut seen = HashSet::new();
    for _ in 0..40 {
        match source.allocate(EIB) {
            Ok(seg) => {
                assert!(
                    seg.address.checked_add(seg.size).is_some(),
                    "segment at {:#x} wraps around",
                    seg.address
                );
                assert!(
                    seen.insert(seg.address),
                    "address {:#x} reused",
                    seg.address
                );
                source.free(seg);
            }
            Err(e) => assert_eq!(e, xpu_alloc::SourceError::OutOfMemory),
        }
    }
}

#[test]
fn a_fault_planned_at_the_end_of_time_does_not_overflow() {
    let source = SimulatedSource::new(0, 1 << 30, 1 << 30);
    let seg = source.allocate(1 << 20).unwrap();
    source.fail_nth(u64::MAX, Fault::OutOfMemory);
    source.free(seg);
    assert!(source.allocate(1 << 20).is_ok());
}

#[test]
fn rounding_near_u64_max_stays_a_multiple_of_512() {
    use xpu_alloc::size::{checked_round_size, round_size, segment_size, MAX_ROUNDED};
    let plain = AllocConfig::default();
    let mut div4 = AllocConfig::default();
    div4.roundup_power2_divisions[15] = 4;
    for config in [&plain, &div4] {
        for size in [u64::MAX, u64::MAX - 1, MAX_ROUNDED, MAX_ROUNDED + 1] {
            let r = round_size(size, config);
            assert_eq!(r % 512, 0, "round_size({size}) = {r}");
            let seg = segment_size(r, config);
            assert_eq!(seg % (2 << 20), 0, "segment_size({r}) = {seg}");
        }
        for size in [u64::MAX, u64::MAX - 1, MAX_ROUNDED + 1] {
            assert_eq!(
                (round_size(size, config), checked_round_size(size, config)),
                (MAX_ROUNDED, None)
            );
        }
    }
    assert_eq!(checked_round_size(0, &plain), Some(512));
    assert_eq!(checked_round_size(MAX_ROUNDED, &plain), Some(MAX_ROUNDED));
    // With 4 divisions above 32 GiB, the step after 0xE000... would pass u64::MAX.
    assert_eq!(checked_round_size(MAX_ROUNDED, &div4), None);
    assert_eq!(checked_round_size(1 << 60, &div4), Some(1 << 60));
    assert_eq!(checked_round_size((1 << 60) + 1, &div4), Some(5 << 58));
}

/// Child-process scenario: a snapshot of a simulated device with index `u32::MAX`.
#[test]
fn snapshot_of_a_huge_device_index_is_a_typed_error() {
    if std::env::var("XPU_SCENARIO").as_deref() == Ok("huge_index_snapshot") {
        let (core, _) = huge_core(u32::MAX as usize);
        let snapshot = core.memory_snapshot();
        println!("RESULT {:?}", snapshot.as_ref().map(|s| s.segments.len()));
        return;
    }
    let exe = std::env::current_exe().unwrap();
    // The child runs under a 4 GiB address-space limit: an attempt to allocate ~100 GB
    // fails there instead of straining the machine.
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 4194304; exec \"$0\" --exact snapshot_of_a_huge_device_index_is_a_typed_error --nocapture")
        .arg(exe)
        .env("XPU_SCENARIO", "huge_index_snapshot")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {:?}\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    assert!(
        stdout.contains("RESULT Err(DeviceIndex { device: 4294967295, max: 1023 })"),
        "stdout: {stdout}"
    );
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use xpu_alloc::size::{checked_round_size, round_size, MAX_ROUNDED};

    fn any_size() -> impl Strategy<Value = u64> {
        prop_oneof![
            any::<u64>(),
            (0u64..4096),
            (0u64..4096).prop_map(|d| u64::MAX - d),
            (0u64..4096).prop_map(|d| (1u64 << 60).wrapping_add(d).wrapping_sub(2048)),
        ]
    }

    proptest! {
        #[test]
        fn rounding_is_a_multiple_of_512_at_or_above_the_size_or_checked(
            size in any_size(),
            log_div in 0u32..5,
            interval in 0usize..16,
        ) {
            let mut config = AllocConfig::default();
            config.roundup_power2_divisions[interval] = 1 << log_div;
            let r = round_size(size, &config);
            prop_assert_eq!(r % 512, 0);
            match checked_round_size(size, &config) {
                Some(c) => prop_assert!(c == r && c >= size),
                None => prop_assert!(r == MAX_ROUNDED && size > 1 << 63),
            }
        }

        #[test]
        fn any_request_size_is_served_or_a_typed_error(
            sizes in proptest::collection::vec(any_size(), 1..24),
        ) {
            let (core, source) = huge_core(0);
            let (_, s) = stream(0);
            let mut live = Vec::new();
            for size in sizes {
                match core.allocate(size, &s) {
                    Ok(p) => {
                        prop_assert_eq!(p.size(), size);
                        live.push(p);
                    }
                    Err(AllocError::TooLarge { requested, .. }) => {
                        prop_assert!(requested == size && size > 1 << 60);
                    }
                    Err(AllocError::OutOfMemory(_)) => {}
                    Err(e) => prop_assert!(false, "unexpected error {e:?}"),
                }
                let st = core.memory_stats();
                prop_assert!(st.reserved_bytes.all.current >= 0);
                prop_assert_eq!(st.reserved_bytes.all.current as u64, core.reserved_bytes());
                prop_assert_eq!(core.reserved_bytes(), source.counters().used);
                let handed: u64 = live.iter().map(|p| p.allocated_size()).sum();
                prop_assert_eq!(st.allocated_bytes.all.current as u64, handed);
            }
            drop(live);
            core.empty_cache();
            prop_assert_eq!((core.reserved_bytes(), source.counters().used), (0, 0));
        }
    }
}

#[test]
fn statistics_arithmetic_saturates_instead_of_wrapping() {
    use xpu_alloc::{MemoryStats, Stat};
    let mut st = Stat::default();
    st.increase(u64::MAX);
    st.increase(1 << 62);
    assert_eq!(
        (st.current, st.peak, st.allocated),
        (i64::MAX, i64::MAX, i64::MAX)
    );
    st.decrease(u64::MAX);
    st.decrease(u64::MAX);
    assert_eq!((st.current, st.freed), (i64::MIN + 1, i64::MAX));
    let mut a = MemoryStats {
        num_ooms: u64::MAX,
        num_alloc_retries: u64::MAX - 1,
        ..MemoryStats::default()
    };
    let b = MemoryStats {
        num_ooms: 5,
        num_alloc_retries: 5,
        ..MemoryStats::default()
    };
    a.merge(&b);
    assert_eq!((a.num_ooms, a.num_alloc_retries), (u64::MAX, u64::MAX));
}
