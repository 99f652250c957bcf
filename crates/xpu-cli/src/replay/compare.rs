//! PyTorch's figures for a trace, for `xpu replay --compare` and `xpu replay-all`: from
//! the trace's `.summary.json` when one sits beside it (and the expandable-segments run's
//! `.exp.gz.summary.json`), then from a `README.md` table in the trace's folder, then from
//! the table of the shared traces' README (embedded here); each source fills only the
//! figures the previous ones lacked.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;
use xpu_replay::ReplayReport;

use crate::plot::ReferenceLine;

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

/// PyTorch's reference lines for the plot: its peak reserved bytes and, where known, its peak
/// reserved bytes with `expandable_segments:True`.
#[must_use]
pub fn reference_lines(reference: Option<&Reference>) -> Vec<ReferenceLine> {
    let Some(r) = reference else {
        return Vec::new();
    };
    let mut lines = Vec::new();
    if let Some(b) = r.peak_reserved {
        lines.push(("PyTorch peak reserved".to_owned(), b));
    }
    if let Some(b) = r.expandable_peak_reserved {
        lines.push(("PyTorch peak reserved, expandable_segments".to_owned(), b));
    }
    lines
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

/// A byte count or a count: a non-negative integer, or a float from 0 to below 2^64
/// (truncated); a float that no `u64` holds (`1e300`) is no figure, not `u64::MAX`.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn as_u64(v: &Value) -> Option<u64> {
    // 2^64, exactly representable.
    const LIMIT: f64 = 18_446_744_073_709_551_616.0;
    v.as_u64().or_else(|| {
        v.as_f64()
            .filter(|f| (0.0..LIMIT).contains(f))
            .map(|f| f as u64)
    })
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

/// Candidate summary files of the expandable-segments run of `trace`:
/// `NAME.exp.gz.summary.json` and `NAME.exp.summary.json`.
fn expandable_summary_paths(trace: &Path) -> Vec<PathBuf> {
    let Some(name) = trace.file_name().map(|n| n.to_string_lossy().into_owned()) else {
        return Vec::new();
    };
    let stem = trace_stem(&name);
    let dir = trace.parent().unwrap_or_else(|| Path::new(""));
    vec![
        dir.join(format!("{stem}.exp.gz.summary.json")),
        dir.join(format!("{stem}.exp.summary.json")),
    ]
}

/// A trace file name without its `.gz` / `.trace` suffixes.
fn trace_stem(name: &str) -> &str {
    name.trim_end_matches(".gz").trim_end_matches(".trace")
}

/// An integer cell of a README table: digits with `,` / `_` separators, optionally
/// followed by a unit or a parenthesized note (`14,543,749,120 B (1.070)`); `None` for `-`
/// or text.
fn cell_number(cell: &str) -> Option<u64> {
    let first = cell.trim().split(['(', ' ']).next()?;
    let digits: String = first.chars().filter(|c| *c != ',' && *c != '_').collect();
    if digits.is_empty() || !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// PyTorch's figures for the trace `file_name` from the Markdown table(s) of a README
/// `text`: the row whose first cell names the trace (with or without `.trace.gz`, in
/// backquotes or not), columns found by their headers ("peak allocated", "peak reserved",
/// "segment allocations", and a header mentioning "expandable" for the
/// expandable-segments figure).
#[must_use]
pub fn from_readme(text: &str, file_name: &str, source: &str) -> Option<Reference> {
    let stem = trace_stem(file_name);
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().trim_matches('`').trim().to_owned())
            .collect()
    };
    let mut header: Vec<String> = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if !line.starts_with('|') {
            header.clear();
            continue;
        }
        let row = cells(line);
        if header.is_empty() {
            header = row.iter().map(|c| c.to_lowercase()).collect();
            continue;
        }
        let Some(first) = row.first() else { continue };
        if first.starts_with("---") || trace_stem(first) != stem {
            continue;
        }
        let column = |want: &dyn Fn(&str) -> bool| -> Option<u64> {
            let i = header.iter().position(|h| want(h))?;
            row.get(i).and_then(|c| cell_number(c))
        };
        let r = Reference {
            source: source.to_owned(),
            peak_allocated: column(&|h| h.contains("peak allocated") && !h.contains("expandable")),
            peak_reserved: column(&|h| h.contains("peak reserved") && !h.contains("expandable")),
            segment_allocs: column(&|h| h.contains("segment alloc")),
            expandable_peak_reserved: column(&|h| h.contains("expandable")),
        };
        if r.peak_allocated.is_some() || r.peak_reserved.is_some() {
            return Some(r);
        }
    }
    None
}

/// `a`'s figures, with the ones it lacks taken from `b`.
fn fill(a: Option<Reference>, b: Option<Reference>) -> Option<Reference> {
    match (a, b) {
        (Some(mut a), Some(b)) => {
            a.peak_allocated = a.peak_allocated.or(b.peak_allocated);
            a.peak_reserved = a.peak_reserved.or(b.peak_reserved);
            a.segment_allocs = a.segment_allocs.or(b.segment_allocs);
            a.expandable_peak_reserved = a.expandable_peak_reserved.or(b.expandable_peak_reserved);
            Some(a)
        }
        (a, b) => a.or(b),
    }
}

/// PyTorch's figures for the trace at `trace`: a readable `.summary.json` beside it (with
/// the expandable-segments figure from the `.exp.gz.summary.json` beside it), then the
/// `README.md` table of its folder, then the shared traces' README table entry for its
/// file name.
#[must_use]
pub fn reference_for(trace: &Path) -> Option<Reference> {
    let name = trace.file_name()?.to_string_lossy().into_owned();
    let mut found = summary_paths(trace).into_iter().find_map(|path| {
        let text = std::fs::read_to_string(&path).ok()?;
        from_summary(&text, &path.display().to_string())
    });
    let expandable = expandable_summary_paths(trace)
        .into_iter()
        .find_map(|path| {
            let text = std::fs::read_to_string(&path).ok()?;
            from_summary(&text, &path.display().to_string())?.peak_reserved
        });
    if let (Some(r), Some(e)) = (found.as_mut(), expandable) {
        r.expandable_peak_reserved = r.expandable_peak_reserved.or(Some(e));
    }
    let readme = trace
        .parent()
        .unwrap_or_else(|| Path::new(""))
        .join("README.md");
    if let Ok(text) = std::fs::read_to_string(&readme) {
        found = fill(
            found,
            from_readme(&text, &name, &readme.display().to_string()),
        );
    }
    fill(found, from_table(&name))
}

#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> String {
    if b == 0 {
        "-".to_owned()
    } else {
        format!("{:.3}", a as f64 / b as f64)
    }
}

/// Our figures next to PyTorch's as a small table, with PyTorch's expandable-segments
/// peak reserved bytes next to its default ones where known, and a verdict on peak reserved
/// (none for a replay whose allocations failed: it skipped them, so its peak is not the
/// trace's).
#[must_use]
pub fn render(ours: &ReplayReport, theirs: &Reference) -> String {
    let mut out = format!(
        "compared with PyTorch ({}):\n  {:<22}{:>18}{:>18}{:>10}{:>18}{:>10}\n",
        theirs.source, "", "xpu", "PyTorch", "ratio", "PyTorch expand.", "ratio"
    );
    let mut row = |name: &str, a: u64, b: Option<u64>, e: Option<u64>| {
        let (b_text, r) = b.map_or(("-".to_owned(), "-".to_owned()), |b| {
            (b.to_string(), ratio(a, b))
        });
        let (e_text, re) = e.map_or((String::new(), String::new()), |e| {
            (e.to_string(), ratio(a, e))
        });
        let line = format!("  {name:<22}{a:>18}{b_text:>18}{r:>10}{e_text:>18}{re:>10}");
        out.push_str(line.trim_end());
        out.push('\n');
    };
    row(
        "peak allocated (B)",
        ours.peak_allocated,
        theirs.peak_allocated,
        None,
    );
    row(
        "peak reserved (B)",
        ours.peak_reserved,
        theirs.peak_reserved,
        theirs.expandable_peak_reserved,
    );
    row(
        "segment allocations",
        ours.segment_allocs,
        theirs.segment_allocs,
        None,
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
    let verdict = match (theirs.peak_reserved, ours.ooms) {
        // Failed allocations were skipped: the peak is not the whole trace's.
        (_, 1) => {
            "peak reserved: not comparable: 1 allocation failed (out of memory) in this replay"
                .to_owned()
        }
        (_, n) if n > 1 => format!(
            "peak reserved: not comparable: {n} allocations failed (out of memory) in this replay"
        ),
        (Some(r), _) if ours.peak_reserved <= r => {
            "peak reserved: matches or beats PyTorch".to_owned()
        }
        (Some(_), _) => "peak reserved: ABOVE PyTorch's".to_owned(),
        (None, _) => "peak reserved: no PyTorch figure".to_owned(),
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
    fn readme_tables_give_default_and_expandable_figures() {
        let shared = "| file | workload | PyTorch peak allocated | PyTorch peak reserved | reserved/allocated | segment allocations | with expandable_segments: peak reserved |\n\
                      |---|---|---|---|---|---|---|\n\
                      | gpt2_train.trace.gz | GPT-2 | 13,614,942,720 B | 15,286,140,928 B | 1.123 | 154 | 14,543,749,120 B (1.070) |\n\
                      | resnet18_train_small.trace.gz | R18 | 329,989,120 B | 411,041,792 B | 1.246 | 32 | not recorded |\n";
        let r = from_readme(shared, "gpt2_train.trace.gz", "README").unwrap();
        assert_eq!(
            (
                r.peak_allocated,
                r.peak_reserved,
                r.segment_allocs,
                r.expandable_peak_reserved
            ),
            (
                Some(13_614_942_720),
                Some(15_286_140_928),
                Some(154),
                Some(14_543_749_120)
            )
        );
        let r = from_readme(shared, "resnet18_train_small.trace.gz", "README").unwrap();
        assert_eq!(
            (r.segment_allocs, r.expandable_peak_reserved),
            (Some(32), None)
        );
        // The validation README: names without suffix, expandable last.
        let validation = "| trace | workload | peak allocated | PyTorch peak reserved | segment allocations | expandable segments: peak reserved |\n\
                          |---|---|---|---|---|---|\n\
                          | vit_train | ViT | 3,561,254,912 | 3,892,314,112 | 135 | 3,659,530,240 |\n";
        let r = from_readme(validation, "vit_train.trace.gz", "README").unwrap();
        assert_eq!(
            (
                r.peak_reserved,
                r.segment_allocs,
                r.expandable_peak_reserved
            ),
            (Some(3_892_314_112), Some(135), Some(3_659_530_240))
        );
        assert!(from_readme(validation, "other.trace.gz", "README").is_none());
    }

    #[test]
    fn validation_folder_gives_the_expandable_figure() {
        // CARGO_MANIFEST_DIR at run time (a relocated nextest archive sets it), else at
        // build time.
        let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
        let dir = manifest.join("../../data/traces/validation");
        let Some(r) = reference_for(&dir.join("vit_train.trace.gz")) else {
            panic!("no figures for {}", dir.display());
        };
        assert_eq!(
            (
                r.peak_reserved,
                r.segment_allocs,
                r.expandable_peak_reserved
            ),
            (Some(3_892_314_112), Some(135), Some(3_659_530_240))
        );
    }

    #[test]
    fn summary_paths_strip_the_trace_suffixes() {
        let p = summary_paths(Path::new("/t/a.trace.gz"));
        assert_eq!(p[0], Path::new("/t/a.summary.json"));
        assert_eq!(p[1], Path::new("/t/a.trace.gz.summary.json"));
    }

    #[test]
    fn reference_lines_are_pytorchs_peak_reserved_and_the_expandable_figure() {
        let gpt2 = from_table("gpt2_train.trace.gz");
        assert_eq!(
            reference_lines(gpt2.as_ref()),
            vec![
                ("PyTorch peak reserved".to_owned(), 15_286_140_928),
                (
                    "PyTorch peak reserved, expandable_segments".to_owned(),
                    14_543_749_120
                ),
            ]
        );
        let small = from_table("resnet18_train_small.trace.gz");
        assert_eq!(
            reference_lines(small.as_ref()),
            vec![("PyTorch peak reserved".to_owned(), 411_041_792)]
        );
        assert!(reference_lines(None).is_empty());
    }
}
