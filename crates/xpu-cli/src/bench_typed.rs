//! `xpu bench` figures of typed device memory: `htod_typed_gbps`, a typed upload of f32 from
//! an ordinary `Vec` (`xpu_kernel::memory::copy_htod`: staged through pinned blocks of the
//! caching host allocator, then `clEnqueueWriteBuffer`), next to the raw floor
//! `htod_typed_raw_h2d_pinned_gbps` measured in the same run on the same stream and size (a
//! bare `PinnedBuffer`, already filled, and `write_from_pinned` into a plain buffer: no
//! staging, no allocator), and their ratio `htod_typed_over_raw` (goal >= 0.95). Also
//! `htod_typed_pinned_gbps` / `htod_typed_pinned_over_raw`: the typed upload from a pinned
//! `HostPtr` the caller filled (`copy_htod_pinned`, no staging copy).
//!
//! Sizes: 256 MiB (the figure), 32 MiB with `--quick`. Each figure is the best of
//! interleaved rounds (the two copies take turns going first); a round times `COPIES` copies
//! from the first enqueue to `synchronize`. GB/s are 10^9 bytes per second.

use std::time::Instant;

use xpu::xpu_device::backend::{Buffer, MemFlags, PinnedBuffer};
use xpu::xpu_kernel::memory::{copy_htod, copy_htod_pinned, DeviceBuffer};
use xpu::xpu_stream::{get_stream_from_pool, Stream};

const COPIES: usize = 2;

fn gbps(
    stream: &Stream,
    bytes: usize,
    mut copy: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<f64> {
    stream.synchronize()?;
    let start = Instant::now();
    for _ in 0..COPIES {
        copy()?;
    }
    stream.synchronize()?;
    Ok((bytes * COPIES) as f64 / start.elapsed().as_secs_f64() / 1e9)
}

/// The typed-upload figures for `device` (see the module docs).
///
/// # Errors
/// Any failed allocation, copy or synchronization.
pub fn figures(device: usize, quick: bool) -> anyhow::Result<Vec<(String, f64)>> {
    let bytes: usize = if quick { 32 << 20 } else { 256 << 20 };
    let rounds = if quick { 2 } else { 3 };
    let len = bytes / std::mem::size_of::<f32>();
    let stream = get_stream_from_pool(0, device)?;
    let queue = stream.queue()?;
    let ctx = xpu::xpu_device::device(device)?.context()?;

    let raw_dst = Buffer::new(ctx, bytes, MemFlags::default())?;
    let mut raw_src = PinnedBuffer::new(ctx, &queue, bytes)?;
    raw_src.as_mut_slice().fill(1);
    let host: Vec<f32> = (0..len).map(|i| i as f32).collect();
    let mut typed = DeviceBuffer::<f32>::new(len, &stream)?;
    let mut typed2 = DeviceBuffer::<f32>::new(len, &stream)?;
    let mut pinned = xpu::xpu_alloc::host::host_allocate_on(device, bytes)?;
    pinned.copy_from_slice(&bytemuck_bytes(&host));

    let mut raw = || -> anyhow::Result<()> {
        drop(queue.write_from_pinned(&raw_src, 0, &raw_dst, 0, bytes, &[])?);
        Ok(())
    };
    let mut ours = || -> anyhow::Result<()> { Ok(copy_htod(&stream, &host, &mut typed)?) };
    let mut ours_pinned =
        || -> anyhow::Result<()> { Ok(copy_htod_pinned(&stream, &pinned, &mut typed2)?) };

    // Warm-up: first touch of both destinations and of the staging blocks.
    gbps(&stream, bytes, &mut raw)?;
    gbps(&stream, bytes, &mut ours)?;
    gbps(&stream, bytes, &mut ours_pinned)?;
    let (mut best_raw, mut best_ours, mut best_pinned) = (0.0f64, 0.0f64, 0.0f64);
    for round in 0..rounds {
        if round % 2 == 0 {
            best_raw = best_raw.max(gbps(&stream, bytes, &mut raw)?);
            best_ours = best_ours.max(gbps(&stream, bytes, &mut ours)?);
        } else {
            best_ours = best_ours.max(gbps(&stream, bytes, &mut ours)?);
            best_raw = best_raw.max(gbps(&stream, bytes, &mut raw)?);
        }
        best_pinned = best_pinned.max(gbps(&stream, bytes, &mut ours_pinned)?);
    }
    Ok(vec![
        ("htod_typed_bytes".to_owned(), bytes as f64),
        ("htod_typed_gbps".to_owned(), best_ours),
        ("htod_typed_raw_h2d_pinned_gbps".to_owned(), best_raw),
        ("htod_typed_over_raw".to_owned(), best_ours / best_raw),
        ("htod_typed_pinned_gbps".to_owned(), best_pinned),
        (
            "htod_typed_pinned_over_raw".to_owned(),
            best_pinned / best_raw,
        ),
    ])
}

/// The bytes of a slice of `f32` (the CLI has no bytemuck dependency).
fn bytemuck_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}
