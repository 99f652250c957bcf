//! [`memory_summary`]: the statistics as a table a person reads, laid out as
//! `torch.cuda.memory_summary` lays them out (reference §4.14).

use std::fmt::Write as _;

use crate::device_core::DeviceCore;
use crate::stats::{MemoryStats, Stat, StatArray};

/// Width of every line inside the surrounding `|` characters.
const WIDTH: usize = 75;
/// Byte-cell prefixes, each padded to three characters.
const SIZE_PREFIXES: [&str; 6] = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"];
/// Count-cell prefixes.
const COUNT_PREFIXES: [&str; 3] = [" ", "K", "M"];
/// A byte column switches to the next prefix while its reference is at least this.
const SIZE_SWITCH: i64 = 768 * 1024;
/// A count column switches to the next prefix while its reference is at least this.
const COUNT_SWITCH: i64 = 750_000;

/// How a row's cells are written.
#[derive(Clone, Copy)]
enum Unit {
    Bytes,
    Count,
}

impl Unit {
    /// One 10-character cell: `value` scaled by the prefix chosen for `reference` (the
    /// column's "all" value), with integer (floor) division.
    fn cell(self, value: i64, reference: i64) -> String {
        let (prefixes, switch, step): (&[&str], i64, i64) = match self {
            Unit::Bytes => (&SIZE_PREFIXES, SIZE_SWITCH, 1024),
            Unit::Count => (&COUNT_PREFIXES, COUNT_SWITCH, 1000),
        };
        let (mut value, mut reference, mut p) = (value, reference, 0);
        while p + 1 < prefixes.len() && reference >= switch {
            value = value.div_euclid(step);
            reference = reference.div_euclid(step);
            p += 1;
        }
        match self {
            Unit::Bytes => format!("{value:6} {}", prefixes[p]),
            Unit::Count => format!("{value:7} {} ", prefixes[p]),
        }
    }
}

/// The nine arrays in the summary's order: key, label, unit.
fn arrays(stats: &MemoryStats) -> [(&'static str, &StatArray, Unit); 9] {
    [
        ("Allocated memory", &stats.allocated_bytes, Unit::Bytes),
        ("Active memory", &stats.active_bytes, Unit::Bytes),
        ("Requested memory", &stats.requested_bytes, Unit::Bytes),
        ("GPU reserved memory", &stats.reserved_bytes, Unit::Bytes),
        (
            "Non-releasable memory",
            &stats.inactive_split_bytes,
            Unit::Bytes,
        ),
        ("Allocations", &stats.allocation, Unit::Count),
        ("Active allocs", &stats.active, Unit::Count),
        ("GPU reserved segments", &stats.segment, Unit::Count),
        ("Non-releasable allocs", &stats.inactive_split, Unit::Count),
    ]
}

/// One row: label, then current, peak, allocated and freed against the reference stat.
fn row(label: &str, stat: &Stat, reference: &Stat, unit: Unit) -> String {
    format!(
        " {label:<21} | {} | {} | {} | {} ",
        unit.cell(stat.current, reference.current),
        unit.cell(stat.peak, reference.peak),
        unit.cell(stat.allocated, reference.allocated),
        unit.cell(stat.freed, reference.freed),
    )
}

/// `text` padded with spaces to [`WIDTH`] columns.
fn padded(text: String) -> String {
    format!("{text:<WIDTH$}")
}

/// The statistics of device `device` as a 75-column table, as `torch.cuda.memory_summary`
/// prints it: a title, the OOM and retry counts, then current / peak / total allocated /
/// total freed for allocated, active, requested, reserved and non-releasable bytes and the
/// matching counts, each with "from large pool" and "from small pool" rows unless
/// `abbreviated`, then the oversize allocations and segments. Byte cells use B, KiB, MiB,
/// GiB, TiB, PiB (the next prefix while the column's "all" value is at least 768 KiB); count
/// cells use no prefix, K or M (the next while it is at least 750,000). Every line is
/// wrapped in `|` and ends with a newline.
#[must_use]
pub fn memory_summary(stats: &MemoryStats, device: usize, abbreviated: bool) -> String {
    let heavy = "=".repeat(WIDTH);
    let light = "-".repeat(WIDTH);
    let mut lines = vec![
        heavy.clone(),
        padded(format!(" {:16} xpu memory summary, device ID {device}", "")),
        light.clone(),
        padded(format!(
            "  {:9} XPU OOMs: {:<13} | {:6} alloc retries: {}",
            "", stats.num_ooms, "", stats.num_alloc_retries
        )),
        heavy.clone(),
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ".to_owned(),
    ];
    for (label, array, unit) in arrays(stats) {
        lines.push(light.clone());
        lines.push(row(label, &array.all, &array.all, unit));
        if !abbreviated {
            lines.push(row(
                "      from large pool",
                &array.large_pool,
                &array.all,
                unit,
            ));
            lines.push(row(
                "      from small pool",
                &array.small_pool,
                &array.all,
                unit,
            ));
        }
    }
    for (label, stat) in [
        ("Oversize allocations", &stats.oversize_allocations),
        ("Oversize GPU segments", &stats.oversize_segments),
    ] {
        lines.push(light.clone());
        lines.push(row(label, stat, stat, Unit::Count));
    }
    lines.push(heavy);
    let mut out = String::new();
    for line in lines {
        // Writing to a String cannot fail.
        let _ = writeln!(out, "|{line}|");
    }
    out
}

impl DeviceCore {
    /// This allocator's statistics as [`memory_summary`] lays them out (as
    /// `torch.cuda.memory_summary(device, abbreviated)`).
    #[must_use]
    pub fn memory_summary(&self, abbreviated: bool) -> String {
        memory_summary(&self.memory_stats(), self.device(), abbreviated)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_cells_switch_on_the_reference() {
        assert_eq!(Unit::Bytes.cell(0, 0), "     0 B  ");
        assert_eq!(Unit::Bytes.cell(786_431, 786_431), "786431 B  ");
        assert_eq!(Unit::Bytes.cell(786_432, 786_432), "   768 KiB");
        assert_eq!(Unit::Bytes.cell(2 << 20, 2 << 20), "  2048 KiB");
        assert_eq!(Unit::Bytes.cell(1 << 20, 20 << 20), "  1024 KiB");
        assert_eq!(Unit::Bytes.cell(1 << 30, 1 << 30), "  1024 MiB");
        assert_eq!(Unit::Bytes.cell(1000, 20 << 20), "     0 KiB");
        assert_eq!(Unit::Bytes.cell(3 << 50, 3 << 50), "  3072 TiB");
        assert_eq!(Unit::Bytes.cell(1 << 62, 1 << 62), "  4096 PiB");
    }

    #[test]
    fn count_cells_switch_on_the_reference() {
        assert_eq!(Unit::Count.cell(12, 12), "     12   ");
        assert_eq!(Unit::Count.cell(749_999, 749_999), " 749999   ");
        assert_eq!(Unit::Count.cell(750_000, 750_000), "    750 K ");
        assert_eq!(Unit::Count.cell(9, 800_000_000), "      0 M ");
    }

    #[test]
    fn every_line_is_75_columns() {
        let stats = MemoryStats {
            num_ooms: 3,
            num_alloc_retries: 12_345,
            ..MemoryStats::default()
        };
        for abbreviated in [false, true] {
            let text = memory_summary(&stats, 7, abbreviated);
            assert!(text.ends_with('\n'));
            for line in text.lines() {
                assert_eq!(line.chars().count(), WIDTH + 2, "{line:?}");
                assert!(line.starts_with('|') && line.ends_with('|'));
            }
            let rows = if abbreviated { 9 } else { 27 } + 2;
            assert_eq!(text.lines().count(), 6 + 11 + rows + 1);
        }
        let text = memory_summary(&stats, 7, true);
        assert!(text.contains("xpu memory summary, device ID 7"));
        assert!(text.contains("XPU OOMs: 3 "));
        assert!(text.contains("alloc retries: 12345 "));
    }
}
