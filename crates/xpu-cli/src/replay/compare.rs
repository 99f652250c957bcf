//! PyTorch's figures for a trace, for `xpu replay --compare`: from the trace's
//! `.summary.json` when one sits beside it, else from the table of the shared traces'
//! README (embedded here).

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use xpu_alloc::replay::ReplayReport;

/// PyTorch's figures for one trace. Bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Reference {
    /// Where the figures come from (a file path or "traces README").
    pub source: String,
    /// PyTorch's peak allocated bytes.
    pub peak_allocated: Option<u64>,
    /// PyTorch's peak reserved bytes.
    pub peak_reserved: Option<u64>,
    /// Segments PyTorch allocated.
    pub segment_allocs: Option<u64>,
    /// PyTorch's peak reserved bytes with `expandable_segments:True`.
    pub expandable_peak_reserved: Option<u64>,
}

/// The README table: file, peak allocated, peak reserved, segment allocations, peak
/// reserved with expandable segments.
const TABLE: [(&str, u64, u64, u64, Option<u64>); 7] = [
    (
        "gpt2_train.trace.gz",
        13_614_942_720,
        15_286_140_928,
        154,
        Some(14_543_749_120),
    ),
    (
        "resnet50_train.trace.gz",
        3_215_639_040,
        3_797_942_272,
        104,
        Some(3_246_391_296),
    ),
    (
        "resnet18_train_small.trace.gz",
        329_989_120,
        411_041_792,
        32,
        None,
    ),
    (
        "prefetch_multistream_train.trace.gz",
        490_673_152,
        503_316_480,
        18,
        None,
    ),
    (
        "bert_varlen_infer.trace.gz",
        1_006_901_760,
        2_610_954_240,
        43,
        Some(1_182_793_728),
    ),
    (
        "llama_generate.trace.gz",
        393_634_304,
        452_984_832,
        31,
        Some(432_013_312),
    ),
    (
        "gpt_tiny_train.trace.gz",
        1_057_201_152,
        1_191_182_336,
        73,
        None,
    ),
];

/// PyTorch's figures from the README table for a trace file name.
#[must_use]
pub fn from_table(file_name: &str) -> Option<Reference> {
    TABLE.iter().find(|row| row.0 == file_name).map(
        |&(_, alloc, reserved, segments, expandable)| Reference {
            source: "shared traces README".to_owned(),
            peak_allocated: Some(alloc),
            peak_reserved: Some(reserved),
            segment_allocs: Some(segments),
            expandable_peak_reserved: expandable,
        },
    )
}

/// Candidate summary files beside `trace`: `NAME.summary.json` for the trace's name without
/// its `.gz` / `.trace` suffixes, and the full file name with `.summary.json` appended.
fn summary_paths(trace: &Path) -> Vec<PathBuf> {
    let Some(name) = trace.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let stem = name
        .trim_end_matches(".gz")
        .trim_end_matches(".trace")
        .to_owned();
    let dir = trace.parent().unwrap_or_else(|| Path::new(""));
    vec![
        dir.join(format!("{stem}.summary.json")),
        dir.join(format!("{name}.summary.json")),
    ]
}

/// The first of `keys` found as a non-negative integer in `v` or one level below it.
fn find(v: &Value, keys: &[&str]) -> Option<u64> {
    let direct = |obj: &Value| keys.iter().find_map(|k| obj.get(*k).and_then(as_u64));
    direct(v).or_else(|| {
        v.as_object()?
            .values()
            .find_map(|inner| inner.is_object().then(|| direct(inner)).flatten())
    })
}

#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}

/// PyTorch's figures from a summary JSON text, looking for the usual key names
/// (`peak_allocated` / `max_memory_allocated` / `allocated_bytes.all.peak`, and likewise
/// for reserved bytes and segment allocations) at the top level or one level down.
#[must_use]
pub fn from_summary(text: &str, source: &str) -> Option<Reference> {
    let v: Value = serde_json::from_str(text).ok()?;
    let r = Reference {
        source: source.to_owned(),
        peak_allocated: find(
            &v,
            &[
                "peak_allocated",
                "max_allocated",
                "max_memory_allocated",
                "allocated_bytes.all.peak",
            ],
        ),
        peak_reserved: find(
            &v,
            &[
                "peak_reserved",
                "max_reserved",
                "max_memory_reserved",
                "reserved_bytes.all.peak",
            ],
        ),
        segment_allocs: find(
            &v,
            &[
                "segment_allocs",
                "segment_allocations",
                "num_device_alloc",
                "segment.all.allocated",
            ],
        ),
        expandable_peak_reserved: find(
            &v,
            &[
                "expandable_peak_reserved",
                "expandable_segments_peak_reserved",
            ],
        ),
    };
    (r.peak_allocated.is_some() || r.peak_reserved.is_some()).then_some(r)
}

/// PyTorch's figures for the trace at `trace`: a readable `.summary.json` beside it, else
/// the README table entry for its file name.
#[must_use]
pub fn reference_for(trace: &Path) -> Option<Reference> {
    for path in summary_paths(trace) {
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Some(r) = from_summary(&text, &path.display().to_string()) {
                return Some(r);
            }
        }
    }
    from_table(&trace.file_name()?.to_string_lossy())
}

#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

/// Our figures next to PyTorch's as a small table.
#[must_use]
pub fn render(ours: &ReplayReport, theirs: &Reference) -> String {
    let mut out = format!(
        "compared with PyTorch ({}):\n  {:<22}{:>18}{:>18}{:>10}\n",
        theirs.source, "", "xpu", "PyTorch", "ratio"
    );
    let mut row = |name: &str, a: u64, b: Option<u64>| {
        let (b_text, r) = b.map_or(("-".to_owned(), "-".to_owned()), |b| {
            (b.to_string(), ratio(a, b))
        });
        out.push_str(&format!("  {name:<22}{a:>18}{b_text:>18}{r:>10}\n"));
    };
    row(
        "peak allocated (B)",
        ours.peak_allocated,
        theirs.peak_allocated,
    );
    row(
        "peak reserved (B)",
        ours.peak_reserved,
        theirs.peak_reserved,
    );
    row(
        "segment allocations",
        ours.segment_allocs,
        theirs.segment_allocs,
    );
    let their_ratio = match (theirs.peak_reserved, theirs.peak_allocated) {
        (Some(r), Some(a)) => ratio(r, a),
        _ => "-".to_owned(),
    };
    out.push_str(&format!(
        "  {:<22}{:>18}{:>18}\n",
        "reserved/allocated",
        ratio(ours.peak_reserved, ours.peak_allocated),
        their_ratio
    ));
    if let Some(e) = theirs.expandable_peak_reserved {
        out.push_str(&format!(
            "  {:<22}{:>18}{:>18}{:>10}\n",
            "  (expandable segs)",
            "",
            e,
            ratio(ours.peak_reserved, e)
        ));
    }
    let verdict = match theirs.peak_reserved {
        Some(r) if ours.peak_reserved <= r => "peak reserved: matches or beats PyTorch",
        Some(_) => "peak reserved: ABOVE PyTorch's",
        None => "peak reserved: no PyTorch figure",
    };
    out.push_str(&format!("  {verdict}\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_knows_the_shared_traces() {
        let r = from_table("resnet18_train_small.trace.gz").unwrap();
        assert_eq!(r.peak_reserved, Some(411_041_792));
        assert_eq!(r.segment_allocs, Some(32));
        assert_eq!(
            from_table("gpt2_train.trace.gz")
                .unwrap()
                .expandable_peak_reserved,
            Some(14_543_749_120)
        );
        assert_eq!(
            from_table("llama_generate.trace.gz")
                .unwrap()
                .expandable_peak_reserved,
            Some(432_013_312)
        );
        assert!(from_table("other.trace.gz").is_none());
    }

    #[test]
    fn summary_keys_are_found_at_top_level_or_nested() {
        let r = from_summary(
            r#"{"peak_allocated": 10, "peak_reserved": 20, "num_device_alloc": 3}"#,
            "s",
        )
        .unwrap();
        assert_eq!(
            (r.peak_allocated, r.peak_reserved, r.segment_allocs),
            (Some(10), Some(20), Some(3))
        );
        let r = from_summary(
            r#"{"stats": {"allocated_bytes.all.peak": 5, "reserved_bytes.all.peak": 8}}"#,
            "s",
        )
        .unwrap();
        assert_eq!(
            (r.peak_allocated, r.peak_reserved, r.segment_allocs),
            (Some(5), Some(8), None)
        );
        // The keys `record_trace.py` writes.
        let r = from_summary(
            r#"{"max_reserved": 30, "max_allocated": 20, "segment_allocs": 4, "wall_s": 1.5}"#,
            "s",
        )
        .unwrap();
        assert_eq!(
            (r.peak_allocated, r.peak_reserved, r.segment_allocs),
            (Some(20), Some(30), Some(4))
        );
        assert!(from_summary(r#"{"x": 1}"#, "s").is_none());
        assert!(from_summary("not json", "s").is_none());
    }

    #[test]
    fn summary_paths_strip_the_trace_suffixes() {
        let p = summary_paths(Path::new("/t/a.trace.gz"));
        assert_eq!(p[0], Path::new("/t/a.summary.json"));
        assert_eq!(p[1], Path::new("/t/a.trace.gz.summary.json"));
    }
}
