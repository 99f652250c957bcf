//! `xpu plot-scaling`: the thread-scaling curve of the allocator as an SVG, from the JSON of
//! `xpu bench --json` (keys `threads{N}_pair_ns`) and, optionally, PyTorch's figures from
//! `torch_alloc_bench.py` (keys `threads{N}_ns_per_pair_wall`). Throughput is in million
//! alloc+free pairs per second, all threads together.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use plotters::prelude::*;
use serde_json::Value;

/// Arguments of `xpu plot-scaling`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// A file holding `xpu bench --json` output (its `threads{N}_pair_ns` figures).
    #[arg(long)]
    pub ours: PathBuf,
    /// A file holding PyTorch's `torch_alloc_bench.py` output; without it only xpu's curve is
    /// drawn.
    #[arg(long)]
    pub torch: Option<PathBuf>,
    /// SVG file to write (its directory must exist).
    #[arg(long)]
    pub out: PathBuf,
}

const THREADS: [u32; 5] = [1, 2, 4, 8, 16];

/// The chart's y axis ends this much above the highest throughput.
const HEADROOM: f64 = 1.15;

fn read(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

/// `(threads, million pairs per second)` for every thread count present under `key(n)`.
///
/// # Errors
/// A positive figure so small that its throughput, or the top of the chart's axis above it
/// ([`HEADROOM`]), is not a finite number (a chart of it would never finish drawing), naming
/// its key.
fn curve(v: &Value, key: impl Fn(u32) -> String) -> anyhow::Result<Vec<(f64, f64)>> {
    let mut points = Vec::new();
    for n in THREADS {
        let name = key(n);
        let Some(ns) = v.get(&name).and_then(Value::as_f64) else {
            continue;
        };
        if ns > 0.0 {
            let throughput = 1e3 / ns;
            anyhow::ensure!(
                (throughput * HEADROOM).is_finite(),
                "{name} is {ns:e} ns: too small for a throughput to plot"
            );
            points.push((f64::from(n), throughput));
        }
    }
    Ok(points)
}

/// Draws the curves.
///
/// # Errors
/// Unreadable inputs, no thread figures, or a drawing failure.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    crate::check_parent("--out", &args.out)?;
    let ours = curve(&read(&args.ours)?, |n| format!("threads{n}_pair_ns"))?;
    anyhow::ensure!(
        !ours.is_empty(),
        "{} has no threads{{N}}_pair_ns figures",
        args.ours.display()
    );
    let torch = match &args.torch {
        Some(p) => curve(&read(p)?, |n| format!("threads{n}_ns_per_pair_wall"))?,
        None => Vec::new(),
    };
    let top = ours.iter().chain(&torch).map(|p| p.1).fold(1.0, f64::max) * HEADROOM;
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::new(&args.out, (900, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "alloc+free throughput, N threads on N streams",
                ("sans-serif", 22),
            )
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..17f64, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("million pairs / s (all threads)")
            .draw()?;
        for (name, points, color) in [("xpu", &ours, BLUE), ("PyTorch (CUDA)", &torch, RED)] {
            if points.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            chart.draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", args.out.display()))?;
    crate::print_out(&format!("wrote {}\n", args.out.display()))?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_turns_ns_per_pair_into_throughput() {
        let v: Value = serde_json::json!({"threads1_pair_ns": 250.0, "threads16_pair_ns": 25.0});
        assert_eq!(
            curve(&v, |n| format!("threads{n}_pair_ns")).unwrap(),
            vec![(1.0, 4.0), (16.0, 40.0)]
        );
    }
}
