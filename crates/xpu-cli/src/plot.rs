//! SVG plots of a replay: allocated and reserved bytes over the trace's events, with both
//! peaks marked, so a reader sees where the reserved bytes outgrow the allocated ones
//! (fragmentation), and PyTorch's peak reserved bytes as horizontal reference lines when
//! known. The x axis is the trace's event index: the trace format
//! (`ACTION ADDR SIZE STREAM`) records no times, and the axis says so.

use std::path::Path;

use plotters::prelude::*;
use xpu_replay::ReplaySeries;

/// Most points drawn per line; longer series are reduced to the maximum of each bucket
/// (so peaks survive).
const MAX_POINTS: usize = 2000;

/// `(x, y)` points of `values`, at most [`MAX_POINTS`], each the maximum of its bucket of
/// consecutive events, `y` divided by `scale`.
#[allow(clippy::cast_precision_loss)]
fn reduced(values: &[u64], scale: f64) -> Vec<(f64, f64)> {
    let bucket = values.len().div_ceil(MAX_POINTS).max(1);
    values
        .chunks(bucket)
        .enumerate()
        .map(|(i, chunk)| {
            (
                (i * bucket) as f64,
                chunk.iter().copied().max().unwrap_or(0) as f64 / scale,
            )
        })
        .collect()
}

/// Label of the x axis: the trace format records no times, so events are counted.
pub const X_LABEL: &str = "trace event (the trace records no timestamps)";

/// A horizontal reference line: its legend label and its height in bytes.
pub type ReferenceLine = (String, u64);

/// Index and value of the first maximum of `values`.
fn peak(values: &[u64]) -> (usize, u64) {
    values.iter().copied().enumerate().fold(
        (0, 0),
        |best, (i, v)| if v > best.1 { (i, v) } else { best },
    )
}

/// Draws `series` (allocated and reserved bytes after each event) into the SVG file
/// `path`, titled `title`, with each peak marked by a dot and given in the legend, and each
/// of `references` as a dashed horizontal line with its label and value in the legend.
///
/// # Errors
/// An empty series, a missing directory of `path` (none is created), or a failure to write
/// the file.
#[allow(clippy::cast_precision_loss)]
pub fn replay_svg(
    path: &Path,
    series: &ReplaySeries,
    title: &str,
    references: &[ReferenceLine],
) -> anyhow::Result<()> {
    anyhow::ensure!(
        !series.reserved.is_empty(),
        "nothing to plot: the replay recorded no events"
    );
    crate::check_parent("plot", path)?;
    let (alloc_at, alloc_peak) = peak(&series.allocated);
    let (res_at, res_peak) = peak(&series.reserved);
    let ref_peak = references.iter().map(|r| r.1).max().unwrap_or(0);
    let (scale, unit) = if res_peak.max(ref_peak) >= 4 << 30 {
        ((1u64 << 30) as f64, "GiB")
    } else {
        ((1u64 << 20) as f64, "MiB")
    };
    let events = series.reserved.len() as f64;
    let top = (res_peak.max(alloc_peak).max(ref_peak) as f64 / scale * 1.12).max(1.0);
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        let root = SVGBackend::new(path, (1100, 560)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..events, 0f64..top)?;
        chart
            .configure_mesh()
            .x_desc(X_LABEL)
            .y_desc(format!("bytes ({unit})"))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .draw()?;
        let lines = [
            ("reserved", &series.reserved, res_at, res_peak, RED),
            ("allocated", &series.allocated, alloc_at, alloc_peak, BLUE),
        ];
        for (name, values, at, value, color) in lines {
            let label = format!(
                "{name} (peak {:.1} {unit} at event {at})",
                value as f64 / scale
            );
            chart
                .draw_series(LineSeries::new(
                    reduced(values, scale),
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
            let point = (at as f64, value as f64 / scale);
            chart.draw_series(std::iter::once(Circle::new(point, 5, color.filled())))?;
        }
        let ref_colors = [GREEN.mix(0.9), MAGENTA.mix(0.9)];
        for (i, (name, bytes)) in references.iter().enumerate() {
            let color = ref_colors[i % ref_colors.len()];
            let y = *bytes as f64 / scale;
            let label = format!("{name} ({:.1} {unit}, {bytes} B)", y);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, y), (events, y)],
                    8,
                    5,
                    color.stroke_width(2),
                ))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .border_style(BLACK)
            .background_style(WHITE)
            .draw()?;
        root.present()?;
        Ok(())
    };
    draw().map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reduction_keeps_bucket_maxima() {
        let values: Vec<u64> = (0..10_000)
            .map(|i| if i == 4321 { 1_000_000 } else { i })
            .collect();
        let points = reduced(&values, 1.0);
        assert!(points.len() <= MAX_POINTS);
        assert!(points.iter().any(|p| p.1 == 1_000_000.0));
        assert_eq!(peak(&values), (4321, 1_000_000));
        assert_eq!(reduced(&[3, 1], 1.0), vec![(0.0, 3.0), (1.0, 1.0)]);
    }

    #[test]
    fn writes_an_svg_with_both_lines() {
        let dir = std::env::temp_dir().join(format!("xpu-plot-test-{}", std::process::id()));
        let path = dir.join("p.svg");
        let series = ReplaySeries {
            allocated: vec![0, 512, 1024, 0],
            reserved: vec![0, 2 << 20, 2 << 20, 2 << 20],
            requested: vec![0; 4],
        };
        std::fs::create_dir_all(&dir).unwrap();
        replay_svg(
            &path,
            &series,
            "test",
            &[("PyTorch peak reserved".to_owned(), 3 << 20)],
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("<svg"), "{}", &text[..40.min(text.len())]);
        assert!(
            text.contains("reserved (peak 2.0 MiB at event 1)"),
            "{text}"
        );
        assert!(text.contains("allocated (peak 0.0 MiB at event 2)"));
        assert!(
            text.contains("PyTorch peak reserved (3.0 MiB, 3145728 B)"),
            "{text}"
        );
        assert!(text.contains(X_LABEL), "{text}");
        std::fs::remove_dir_all(dir).unwrap();
        assert!(replay_svg(&path, &ReplaySeries::default(), "empty", &[]).is_err());
    }
}
