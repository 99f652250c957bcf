//! Review h26: probes of the caching allocator's stream order across streams, threads,
//! configurations and devices that pass (kept as regression tests). A block used on a gated
//! stream B is freed; its next owner on stream A must not see B's held work land in its
//! bytes. Skipped without a device unless `XPU_REQUIRE_DEVICE=1`; run on PoCL with
//! `POCL_DEVICES="pthread pthread"`.

mod common;

use xpu_alloc::{AllocConfig, DeviceAllocator};
use xpu_event::Gate;
use xpu_stream::Stream;

use common::{fill, fresh_stream, read, KIB, MIB};

fn private(device: usize, config: &str) -> DeviceAllocator {
    DeviceAllocator::new(device, AllocConfig::parse(config).unwrap()).unwrap()
}

/// How many bytes of `bytes` differ from `byte`.
fn wrong(bytes: &[u8], byte: u8) -> usize {
    bytes.iter().filter(|&&b| b != byte).count()
}

/// x (`size` bytes, on A) gets a fill of 0xAA on B held back by a gate, and is freed; `between`
/// runs; then y (same size, on A, allocated and filled with 0x55 on another thread when
/// `other_thread`) is filled and read back once the gate opened. Returns how many of y's
/// bytes are not 0x55 (B's late fill landing in y), and whether y took x's place.
fn held_fill_then_reuse(
    alloc: &DeviceAllocator,
    size: u64,
    (a, b): (&Stream, &Stream),
    between: impl FnOnce(),
    other_thread: bool,
) -> (usize, bool) {
    let x = alloc.allocate(size, a).unwrap();
    fill(&x, a, 0x11);
    a.synchronize().unwrap();
    let gate = Gate::new(a.device()).unwrap();
    gate.block(b).unwrap();
    fill(&x, b, 0xAA);
    let x_at = x.address();
    drop(x);
    between();
    let reuse = || {
        let y = alloc.allocate(size, a).unwrap();
        fill(&y, a, 0x55);
        a.synchronize().unwrap();
        y
    };
    let y = if other_thread {
        std::thread::scope(|s| s.spawn(reuse).join().unwrap())
    } else {
        reuse()
    };
    let same = y.address() == x_at;
    gate.open().unwrap();
    b.synchronize().unwrap();
    (wrong(&read(&y, a), 0x55), same)
}

const CONFIGS: [&str; 3] = ["relocation:off", "", "relocation:merge_all"];
const SIZES: [u64; 3] = [64 * KIB, 4 * MIB, 24 * MIB];

/// The matrix: every relocation mode, a small, a large and an oversize-ish block, the next
/// owner on this thread and on another, both devices.
#[test]
fn a_block_with_held_work_on_another_stream_is_not_reused_early() {
    for device in 0..2 {
        if !xpu_testing::devices(device + 1) {
            return;
        }
        for config in CONFIGS {
            for size in SIZES {
                for other_thread in [false, true] {
                    let alloc = private(device, config);
                    let (a, b) = (fresh_stream(device), fresh_stream(device));
                    let (bad, same) = held_fill_then_reuse(
                        &alloc,
                        size,
                        (&a.stream(), &b.stream()),
                        || {},
                        other_thread,
                    );
                    assert_eq!(
                        (bad, same),
                        (0, false),
                        "device {device} config {config:?} size {size} other thread \
                         {other_thread}: bytes of y overwritten by B's held fill, y at x's place"
                    );
                }
            }
        }
    }
}

/// The same with a configuration change, a fraction change, `empty_cache` (on another thread:
/// it waits for B's held work) and a relocation-mode switch between the free and the reuse.
#[test]
fn held_work_survives_config_fraction_and_cache_calls_between_free_and_reuse() {
    if !xpu_testing::devices(1) {
        return;
    }
    type Between = fn(&DeviceAllocator);
    let steps: [(&str, Between); 5] = [
        ("set_config merge_all", |a| {
            a.set_config(AllocConfig::parse("relocation:merge_all").unwrap());
        }),
        ("set_config off", |a| {
            a.set_config(AllocConfig::parse("relocation:off").unwrap());
        }),
        ("set_config max_split", |a| {
            a.set_config(AllocConfig::parse("max_split_size_mb:20").unwrap());
        }),
        ("fraction", |a| a.core().set_memory_fraction(0.5).unwrap()),
        ("memory_stats", |a| {
            let _ = a.memory_stats();
        }),
    ];
    for (name, step) in steps {
        for size in SIZES {
            let alloc = private(0, "");
            let (a, b) = (fresh_stream(0), fresh_stream(0));
            let (bad, _) = held_fill_then_reuse(
                &alloc,
                size,
                (&a.stream(), &b.stream()),
                || step(&alloc),
                false,
            );
            assert_eq!(bad, 0, "{name}, size {size}");
        }
    }
}

/// Statistics after a mix of held cross-stream uses on two threads, relocation on: once
/// every handle dropped, the gates opened and the stream allocated again (which processes
/// the completed free markers), allocated, active and requested currents are 0, the snapshot agrees with `memory_stats` at every step, and `empty_cache` returns every
/// reserved byte.
#[test]
fn statistics_return_to_zero_after_held_cross_stream_uses_on_two_threads() {
    if !xpu_testing::devices(1) {
        return;
    }
    let alloc = private(0, "");
    let (a, b) = (fresh_stream(0), fresh_stream(0));
    let (a, b) = (a.stream(), b.stream());
    let agree = |when: &str| {
        let st = alloc.memory_stats();
        let snap = alloc.core().snapshot();
        let reserved: u64 = snap.iter().map(|s| s.size).sum();
        let allocated: u64 = snap
            .iter()
            .flat_map(|s| &s.blocks)
            .filter(|b| b.state == xpu_alloc::BlockState::Allocated)
            .map(|b| b.size)
            .sum();
        assert_eq!(
            (reserved, allocated),
            (
                u64::try_from(st.reserved_bytes.all.current).unwrap(),
                u64::try_from(st.allocated_bytes.all.current).unwrap()
            ),
            "snapshot vs memory_stats {when}"
        );
    };
    let gate = Gate::new(0).unwrap();
    gate.block(&b).unwrap();
    std::thread::scope(|scope| {
        for seed in 0..2u8 {
            let alloc = &alloc;
            scope.spawn(move || {
                for (i, size) in [3 * MIB, 64 * KIB, 12 * MIB, 700 * KIB, 5 * MIB]
                    .into_iter()
                    .enumerate()
                {
                    let x = alloc.allocate(size, &a).unwrap();
                    fill(&x, &a, seed);
                    if i % 2 == 0 {
                        fill(&x, &b, 0xAA);
                    }
                    let keep = alloc.allocate(size / 2 + 512, &a).unwrap();
                    drop(x);
                    drop(alloc.allocate(size, &a).unwrap());
                    drop(keep);
                }
            });
        }
    });
    agree("with B's work held");
    gate.open().unwrap();
    b.synchronize().unwrap();
    a.synchronize().unwrap();
    // Blocks whose free waited for B's markers stay active (as torch's) until the stream's
    // next allocation processes the completed markers.
    assert!(alloc.memory_stats().active_bytes.all.current > 0);
    drop(alloc.allocate(512, &a).unwrap());
    let st = alloc.memory_stats();
    assert_eq!(
        (
            st.allocated_bytes.all.current,
            st.active_bytes.all.current,
            st.requested_bytes.all.current,
            st.allocation.all.current
        ),
        (0, 0, 0, 0)
    );
    agree("after the gate opened");
    alloc.empty_cache();
    let st = alloc.memory_stats();
    assert_eq!(
        (st.reserved_bytes.all.current, st.segment.all.current),
        (0, 0),
        "empty_cache returns every segment once nothing is live"
    );
    agree("after empty_cache");
}
