//! `xpu replay-all DIR...`: replays every trace of one or more folders on a simulated H200
//! and prints xpu's peak reserved bytes and segment allocations next to PyTorch's (default
//! settings and expandable segments), with the geometric mean of xpu's peak reserved bytes
//! over PyTorch's expandable-segments figure: per folder, and over all the folders' traces
//! when there are several (with the traces above PyTorch's default and the worst ratio),
//! the figures issue 27 judges a policy by. A replay whose allocations failed (out of
//! memory) skipped them: it is not within PyTorch's default and its peak is in no ratio or
//! mean.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use serde::Serialize;
use xpu_replay::ReplayReport;

use crate::alloc_conf::AllocConfArg;
use crate::replay::{compare, replay_file, Mode, Record, TraceSource};

/// Arguments of `xpu replay-all`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Folders of traces (`*.trace.gz` or `*.trace`), one or more; PyTorch's figures come
    /// from `*.summary.json` files beside them, the folder's `README.md` table, or the shared
    /// traces' table (see `xpu replay --compare`)
    #[arg(required = true, num_args = 1..)]
    pub dirs: Vec<PathBuf>,
    /// The allocator configuration.
    #[command(flatten)]
    pub alloc: AllocConfArg,
    /// Print one JSON object instead of the table: a folder's table, or with several
    /// folders `{"folders": [{"dir", "table"}], "overall": ...}`
    #[arg(long)]
    pub json: bool,
}

/// One folder's table, in the output for several folders.
#[derive(Debug, Clone, Serialize)]
pub struct Folder {
    /// The folder as given.
    pub dir: PathBuf,
    /// Its table.
    pub table: Table,
}

/// The trace furthest above its expandable-segments figure.
#[derive(Debug, Clone, Serialize)]
pub struct Worst {
    /// The trace, as `folder/file`.
    pub trace: String,
    /// xpu's peak reserved over its expandable-segments figure.
    pub over_expandable: f64,
}

/// The figures over every trace of several folders.
#[derive(Debug, Clone, Serialize)]
pub struct Overall {
    /// Traces replayed.
    pub traces: usize,
    /// Traces with an expandable-segments figure (those the geometric means are over).
    pub with_expandable: usize,
    /// Geometric mean of xpu's peak reserved over the expandable-segments figure.
    pub geomean_over_expandable: Option<f64>,
    /// The same for PyTorch's default peak reserved, over the same traces.
    pub pytorch_geomean_over_expandable: Option<f64>,
    /// The trace with the highest ratio over the expandable-segments figure.
    pub worst_over_expandable: Option<Worst>,
    /// Traces above PyTorch's default on peak reserved or on segment allocations
    /// (`within_pytorch` false), as `folder/file`.
    pub not_within_pytorch: Vec<String>,
    /// Traces without PyTorch's default figures (no summary file and no table row), as
    /// `folder/file`: neither within nor above.
    pub without_pytorch: Vec<String>,
}

impl Overall {
    /// The figures over every row of `folders`.
    #[must_use]
    pub fn of(folders: &[Folder]) -> Overall {
        let rows = || {
            folders
                .iter()
                .flat_map(|f| f.table.rows.iter().map(move |r| (f, r)))
        };
        let name = |f: &Folder, r: &Row| f.dir.join(&r.trace).display().to_string();
        let ours: Vec<f64> = rows().filter_map(|(_, r)| r.over_expandable).collect();
        let theirs: Vec<f64> = rows()
            .filter_map(|(_, r)| r.pytorch_over_expandable())
            .collect();
        Overall {
            traces: rows().count(),
            with_expandable: ours.len(),
            geomean_over_expandable: geomean(&ours),
            pytorch_geomean_over_expandable: geomean(&theirs),
            worst_over_expandable: rows()
                .filter_map(|(f, r)| {
                    Some(Worst {
                        trace: name(f, r),
                        over_expandable: r.over_expandable?,
                    })
                })
                .max_by(|a, b| a.over_expandable.total_cmp(&b.over_expandable)),
            not_within_pytorch: rows()
                .filter(|(_, r)| r.within_pytorch == Some(false))
                .map(|(f, r)| name(f, r))
                .collect(),
            without_pytorch: rows()
                .filter(|(_, r)| r.within_pytorch.is_none())
                .map(|(f, r)| name(f, r))
                .collect(),
        }
    }
}

/// One trace's row. Bytes.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Trace file name.
    pub trace: String,
    /// xpu's peak reserved bytes.
    pub peak_reserved: u64,
    /// xpu's segment allocations.
    pub segment_allocs: u64,
    /// Allocations that failed for lack of memory in xpu's replay. A replay with any ran
    /// less than the trace: its peak is no figure to set beside PyTorch's (no ratios) and it
    /// is not within PyTorch's default, which ran the whole trace.
    pub ooms: u64,
    /// PyTorch's figures for the trace, where known (the `pytorch` object of
    /// `xpu replay --compare --json`).
    pub pytorch: Option<compare::Reference>,
    /// xpu's peak reserved over PyTorch's default (`None` as well when `ooms` is not 0).
    pub over_pytorch: Option<f64>,
    /// xpu's peak reserved over PyTorch's expandable-segments figure (`None` as well when
    /// `ooms` is not 0).
    pub over_expandable: Option<f64>,
    /// No allocation failed, and peak reserved and segment allocations both at most
    /// PyTorch's default.
    pub within_pytorch: Option<bool>,
    /// What relocation did (under `relocation:merge`, the default); absent when it was off.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relocation: Option<xpu_alloc::RelocationStats>,
}

impl Row {
    /// PyTorch's default peak reserved over its expandable-segments figure, for a row whose
    /// own ratio to that figure is in the geometric mean ([`Row::over_expandable`]): the
    /// reference mean is over the same traces as xpu's.
    fn pytorch_over_expandable(&self) -> Option<f64> {
        self.over_expandable?;
        let t = self.pytorch.as_ref()?;
        ratio(t.peak_reserved?, t.expandable_peak_reserved?)
    }

    /// The row of the replay report `r`, next to PyTorch's figures `pytorch` for its trace.
    fn new(r: &ReplayReport, pytorch: Option<compare::Reference>) -> Row {
        let theirs = pytorch.as_ref();
        let torch_reserved = theirs.and_then(|t| t.peak_reserved);
        let torch_segments = theirs.and_then(|t| t.segment_allocs);
        let expandable = theirs.and_then(|t| t.expandable_peak_reserved);
        // The peak of a replay that skipped failed allocations is not the trace's.
        let complete = r.ooms == 0;
        Row {
            trace: r.trace.clone(),
            peak_reserved: r.peak_reserved,
            segment_allocs: r.segment_allocs,
            ooms: r.ooms,
            over_pytorch: torch_reserved
                .filter(|_| complete)
                .and_then(|t| ratio(r.peak_reserved, t)),
            over_expandable: expandable
                .filter(|_| complete)
                .and_then(|e| ratio(r.peak_reserved, e)),
            within_pytorch: torch_reserved
                .zip(torch_segments)
                .map(|(t, s)| complete && r.peak_reserved <= t && r.segment_allocs <= s),
            relocation: r.relocation,
            pytorch,
        }
    }
}

/// The table of a folder.
#[derive(Debug, Clone, Serialize)]
pub struct Table {
    /// One row per trace, by file name.
    pub rows: Vec<Row>,
    /// Geometric mean of xpu's peak reserved over the expandable-segments figure, over the
    /// traces that have one.
    pub geomean_over_expandable: Option<f64>,
    /// The same for PyTorch's default peak reserved (the reference point), over the same
    /// traces.
    pub pytorch_geomean_over_expandable: Option<f64>,
}

#[allow(clippy::cast_precision_loss)]
fn ratio(a: u64, b: u64) -> Option<f64> {
    (b > 0).then(|| a as f64 / b as f64)
}

/// Geometric mean of positive values; `None` when there are none.
#[must_use]
pub fn geomean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    #[allow(clippy::cast_precision_loss)]
    let n = values.len() as f64;
    Some((values.iter().map(|v| v.ln()).sum::<f64>() / n).exp())
}

/// The traces of `dir`, by file name.
fn traces(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the folder {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.is_file()
                && p.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.ends_with(".trace.gz") || n.ends_with(".trace")
                })
        })
        .collect();
    files.sort();
    anyhow::ensure!(
        !files.is_empty(),
        "no *.trace.gz or *.trace files in {}",
        dir.display()
    );
    Ok(files)
}

/// Replays the trace files `files` (a folder's, from [`traces`]) on a simulated H200 with
/// `config` and builds the table.
///
/// # Errors
/// A trace that cannot be replayed.
fn table(files: &[PathBuf], config: Option<&str>) -> anyhow::Result<Table> {
    let mut rows = Vec::new();
    for path in files {
        let replayed = replay_file(
            TraceSource::File(path),
            Mode::H200,
            config,
            Record::default(),
        )?;
        rows.push(Row::new(
            &replayed.outcome.report,
            compare::reference_for(path),
        ));
    }
    let ours: Vec<f64> = rows.iter().filter_map(|r| r.over_expandable).collect();
    let theirs: Vec<f64> = rows
        .iter()
        .filter_map(Row::pytorch_over_expandable)
        .collect();
    Ok(Table {
        rows,
        geomean_over_expandable: geomean(&ours),
        pytorch_geomean_over_expandable: geomean(&theirs),
    })
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn opt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// The table as Markdown.
#[must_use]
pub fn render(table: &Table) -> String {
    let mut out = String::from(
        "| trace | xpu peak reserved (B) / segments | PyTorch default (B) / segments | \
         PyTorch expandable (B) | xpu / PyTorch | xpu / expandable | within PyTorch |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for r in &table.rows {
        let theirs = r.pytorch.as_ref();
        let within = match (r.within_pytorch, r.ooms) {
            (Some(true), _) => "yes".to_owned(),
            (Some(false), 0) => "NO".to_owned(),
            (Some(false), 1) => "NO (1 OOM)".to_owned(),
            (Some(false), n) => format!("NO ({n} OOMs)"),
            (None, 0) => "-".to_owned(),
            (None, 1) => "- (1 OOM)".to_owned(),
            (None, n) => format!("- ({n} OOMs)"),
        };
        let _ = writeln!(
            out,
            "| {} | {} / {} | {} / {} | {} | {} | {} | {} |",
            r.trace,
            r.peak_reserved,
            r.segment_allocs,
            opt(theirs.and_then(|t| t.peak_reserved)),
            opt(theirs.and_then(|t| t.segment_allocs)),
            opt(theirs.and_then(|t| t.expandable_peak_reserved)),
            opt_ratio(r.over_pytorch),
            opt_ratio(r.over_expandable),
            within
        );
    }
    let counted = table
        .rows
        .iter()
        .filter(|r| r.over_expandable.is_some())
        .count();
    let _ = writeln!(
        out,
        "\ngeometric mean of peak reserved / expandable-segments figure over {counted} traces: \
         xpu {}, PyTorch default {}",
        opt_ratio(table.geomean_over_expandable),
        opt_ratio(table.pytorch_geomean_over_expandable)
    );
    out
}

/// The figures over several folders as text, after their tables.
#[must_use]
pub fn render_overall(o: &Overall) -> String {
    let worst = o.worst_over_expandable.as_ref().map_or_else(
        || "-".to_owned(),
        |w| format!("{} {:.3}", w.trace, w.over_expandable),
    );
    let outside = if o.not_within_pytorch.is_empty() {
        "none".to_owned()
    } else {
        o.not_within_pytorch.join(", ")
    };
    let mut out = format!(
        "all {} traces: geometric mean of peak reserved / expandable-segments figure over {} \
         traces: xpu {}, PyTorch default {}; worst {worst}; above PyTorch's default (peak or \
         segments): {outside}\n",
        o.traces,
        o.with_expandable,
        opt_ratio(o.geomean_over_expandable),
        opt_ratio(o.pytorch_geomean_over_expandable),
    );
    if !o.without_pytorch.is_empty() {
        let _ = writeln!(
            out,
            "without PyTorch's figures (not judged): {}",
            o.without_pytorch.join(", ")
        );
    }
    out
}

/// Runs `xpu replay-all`.
///
/// # Errors
/// An unreadable folder, a folder without traces or given twice, a trace that cannot be
/// replayed, a bad configuration.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let config = args.alloc.replay_text()?;
    // Every folder is read, and none given twice, before anything is replayed.
    let mut seen = Vec::with_capacity(args.dirs.len());
    let mut files = Vec::with_capacity(args.dirs.len());
    for dir in &args.dirs {
        files.push(traces(dir)?);
        let canonical = dir
            .canonicalize()
            .with_context(|| format!("reading the folder {}", dir.display()))?;
        anyhow::ensure!(
            !seen.contains(&canonical),
            "the folder {} is given twice: its traces would count twice in the figures over all folders",
            dir.display()
        );
        seen.push(canonical);
    }
    let mut folders = Vec::with_capacity(args.dirs.len());
    for (dir, files) in args.dirs.iter().zip(&files) {
        folders.push(Folder {
            dir: dir.clone(),
            table: table(files, config.as_deref())?,
        });
    }
    let text = match (&folders[..], args.json) {
        ([one], true) => serde_json::to_string(&one.table)? + "\n",
        ([one], false) => render(&one.table),
        (_, true) => {
            let overall = Overall::of(&folders);
            serde_json::to_string(&serde_json::json!({ "folders": folders, "overall": overall }))?
                + "\n"
        }
        (_, false) => {
            let mut out = String::new();
            for f in &folders {
                let _ = writeln!(out, "{}:\n", f.dir.display());
                out.push_str(&render(&f.table));
                out.push('\n');
            }
            out + &render_overall(&Overall::of(&folders))
        }
    };
    crate::print_out(&text)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geomean_of_ratios() {
        assert_eq!(geomean(&[]), None);
        let g = geomean(&[1.0, 4.0]).unwrap();
        assert!((g - 2.0).abs() < 1e-12, "{g}");
    }
}
