//! `memory_summary` after a known sequence on a simulated device: exact rows.

use xpu_alloc::observe::memory_summary;
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::stream::StreamKey;
use xpu_alloc::StreamRef;
use xpu_alloc::{AllocConfig, DeviceCore, MemoryStats, SimulatedSource};

const GIB: u64 = 1 << 30;

fn rows(text: &str, label: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with(&format!("| {label} ")))
        .unwrap_or_else(|| panic!("{label} missing:\n{text}"));
    lines[at..(at + 3).min(lines.len())]
        .iter()
        .map(|l| (*l).to_owned())
        .collect()
}

#[test]
fn rows_after_a_small_and_a_large_allocation_and_one_free() {
    let core = DeviceCore::new(
        Box::new(SimulatedSource::new(3, 80 * GIB, 20 * GIB)),
        AllocConfig::default(),
    );
    let stream = StreamRef::from(SimStream::new(StreamKey::new(3, 0)));
    // 1000 B -> 1024 B block of a 2 MiB small segment; 3 MiB -> 3 MiB block of a 20 MiB
    // large segment; then the small block is freed.
    let a = core.allocate(1000, &stream).unwrap();
    let b = core.allocate(3 << 20, &stream).unwrap();
    drop(a);
    let text = core.memory_summary(false);
    assert_eq!(text, memory_summary(&core.memory_stats(), 3, false));
    assert!(
        text.lines()
            .nth(1)
            .unwrap()
            .contains("xpu memory summary, device ID 3"),
        "{text}"
    );
    assert!(text.contains("XPU OOMs: 0 "), "{text}");
    // Each block of rows: the total, then the large and the small pool.
    for (label, want) in [
        (
            "Allocated memory",
            [
                "| Allocated memory      |   3072 KiB |   3073 KiB |   3073 KiB |   1024 B   |",
                "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |",
                "|       from small pool |      0 KiB |      1 KiB |      1 KiB |   1024 B   |",
            ],
        ),
        (
            "Requested memory",
            [
                "| Requested memory      |   3072 KiB |   3072 KiB |   3072 KiB |   1000 B   |",
                "|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |",
                "|       from small pool |      0 KiB |      0 KiB |      0 KiB |   1000 B   |",
            ],
        ),
        (
            "GPU reserved memory",
            [
                "| GPU reserved memory   |  22528 KiB |  22528 KiB |  22528 KiB |      0 B   |",
                "|       from large pool |  20480 KiB |  20480 KiB |  20480 KiB |      0 B   |",
                "|       from small pool |   2048 KiB |   2048 KiB |   2048 KiB |      0 B   |",
            ],
        ),
        (
            "Allocations",
            [
                "| Allocations           |       1    |       2    |       2    |       1    |",
                "|       from large pool |       1    |       1    |       1    |       0    |",
                "|       from small pool |       0    |       1    |       1    |       1    |",
            ],
        ),
        (
            "GPU reserved segments",
            [
                "| GPU reserved segments |       2    |       2    |       2    |       0    |",
                "|       from large pool |       1    |       1    |       1    |       0    |",
                "|       from small pool |       1    |       1    |       1    |       0    |",
            ],
        ),
    ] {
        assert_eq!(rows(&text, label), want, "{label}");
    }
    assert_eq!(
        rows(&text, "Oversize allocations")[0],
        "| Oversize allocations  |       0    |       0    |       0    |       0    |"
    );
    drop(b);
    let short = core.memory_summary(true);
    assert!(!short.contains("from large pool"));
    assert!(
        short.contains(
            "| Allocations           |       0    |       2    |       2    |       2    |"
        ),
        "{short}"
    );
}

#[test]
fn large_values_switch_units_per_column() {
    let mut stats = MemoryStats::default();
    stats.reserved_bytes.all.current = 15_286_140_928;
    stats.reserved_bytes.large_pool.current = 15_286_140_928 - (40 << 20);
    stats.reserved_bytes.small_pool.current = 40 << 20;
    stats.allocation.all.allocated = 2_500_000;
    stats.allocation.large_pool.allocated = 2_000_000;
    stats.allocation.small_pool.allocated = 500_000;
    let text = memory_summary(&stats, 0, false);
    let reserved = rows(&text, "GPU reserved memory");
    assert_eq!(
        reserved[0],
        "| GPU reserved memory   |  14578 MiB |      0 B   |      0 B   |      0 B   |"
    );
    assert_eq!(
        reserved[1],
        "|       from large pool |  14538 MiB |      0 B   |      0 B   |      0 B   |"
    );
    assert_eq!(
        reserved[2],
        "|       from small pool |     40 MiB |      0 B   |      0 B   |      0 B   |"
    );
    let allocations = rows(&text, "Allocations");
    assert_eq!(
        allocations[0],
        "| Allocations           |       0    |       0    |    2500 K  |       0    |"
    );
    assert_eq!(
        allocations[2],
        "|       from small pool |       0    |       0    |     500 K  |       0    |"
    );
}
