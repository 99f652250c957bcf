//! The two-stream pipeline shown by `xpu demo`.

use std::fmt;

use xpu_device::backend::{Buffer, MemFlags};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

use xpu_event::{Event, EventError, StreamExt};

/// The 4-byte pattern stream A writes.
const PATTERN: [u8; 4] = [0xA5, 0x5A, 0xC3, 0x3C];

/// What [`two_stream_pipeline`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineReport {
    /// Device index.
    pub device: usize,
    /// Device name.
    pub device_name: String,
    /// Buffer size, bytes.
    pub bytes: usize,
    /// Stream A's fill, ms (profiling timestamps).
    pub fill_ms: f64,
    /// Stream B's copy, ms, from B's marker after its wait to the end of the copy.
    pub copy_ms: f64,
    /// From before the fill to the end of the copy, ms.
    pub total_ms: f64,
    /// Bytes of the copy that differ from the pattern, checked on the host (0 = correct).
    pub mismatched_bytes: usize,
}

impl fmt::Display for PipelineReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mib = self.bytes as f64 / (1024.0 * 1024.0);
        writeln!(
            f,
            "two-stream pipeline on device {} ({}), {mib:.1} MiB:",
            self.device, self.device_name
        )?;
        writeln!(
            f,
            "  stream A fills the buffer        {:9.3} ms",
            self.fill_ms
        )?;
        writeln!(
            f,
            "  stream B waits on A's event, copy {:8.3} ms",
            self.copy_ms
        )?;
        writeln!(
            f,
            "  total (fill start to copy end)   {:9.3} ms",
            self.total_ms
        )?;
        let verdict = if self.mismatched_bytes == 0 {
            "ok".to_string()
        } else {
            format!("{} bytes differ", self.mismatched_bytes)
        };
        write!(f, "  result checked on the host: {verdict}")
    }
}

/// Stream A fills a `bytes`-byte buffer with a pattern; stream B waits on A's event (no host
/// block), copies the buffer; the host reads the copy back and checks every byte. The stages
/// are timed with timing events. `bytes` is rounded down to a multiple of 4 (at least 4).
///
/// # Errors
/// Device, stream or event failures (buffer creation, enqueues, timing).
pub fn two_stream_pipeline(device: usize, bytes: usize) -> Result<PipelineReport, EventError> {
    let bytes = (bytes / 4).max(1) * 4;
    let dev = xpu_device::device(device)?;
    let a = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    let mut b = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    if b == a {
        b = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    }
    let ctx = dev.context()?;
    let src = Buffer::new(ctx, bytes, MemFlags::default())?;
    let dst = Buffer::new(ctx, bytes, MemFlags::default())?;

    let (mut start, mut filled) = (Event::timing(), Event::timing());
    start.record(&a)?;
    a.queue()?.fill(&src, &PATTERN, 0, bytes, &[])?;
    filled.record(&a)?;

    b.wait_event(&filled)?;
    let (mut copy_start, mut copied) = (Event::timing(), Event::timing());
    copy_start.record(&b)?;
    b.queue()?.copy(&src, 0, &dst, 0, bytes, &[])?;
    copied.record(&b)?;
    copied.synchronize()?;

    let mut host = vec![0u8; bytes];
    b.queue()?.read(&dst, 0, &mut host)?;
    let mismatched_bytes = host
        .iter()
        .enumerate()
        .filter(|(i, x)| **x != PATTERN[i % 4])
        .count();
    Ok(PipelineReport {
        device,
        device_name: dev.properties().name.clone(),
        bytes,
        fill_ms: start.elapsed_time(&filled)?,
        copy_ms: copy_start.elapsed_time(&copied)?,
        total_ms: start.elapsed_time(&copied)?,
        mismatched_bytes,
    })
}

#[cfg(test)]
mod tests;
