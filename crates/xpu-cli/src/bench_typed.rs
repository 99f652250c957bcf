//! `xpu bench` figures of typed device memory: `htod_typed_gbps`, a typed upload of f32 from
//! an ordinary `Vec` (`xpu_kernel::memory::copy_htod`: staged through pinned blocks of the
//! caching host allocator by up to `STAGING_MAX_THREADS` threads, each block uploaded with
//! `clEnqueueWriteBuffer` as soon as it is filled), next to two raw floors measured in the
//! same run on the same stream and size:
//!
//! - `htod_typed_raw_h2d_pinned_gbps`: a bare `PinnedBuffer`, already filled, and
//!   `copy_pinned` into a plain buffer (no staging, no allocator): the link's bandwidth;
//!   `htod_typed_over_raw` = `htod_typed_gbps` / it (goal >= 0.95);
//! - `raw_h2d_pageable_gbps`: one blocking `clEnqueueWriteBuffer` from the same `Vec` into a
//!   plain buffer (the driver stages pageable memory itself): what a pageable upload costs
//!   without xpu; `htod_typed_over_raw_pageable` = `htod_typed_gbps` / it.
//!
//! Also `htod_typed_pinned_gbps` / `htod_typed_pinned_over_raw`: the typed upload from a pinned
//! `HostPtr` the caller filled (`copy_htod_pinned`, no staging copy). `htod_typed_threads` is
//! the number of staging threads `copy_htod` used.
//!
//! On PoCL the device's "transfer" is itself a `memcpy` run by PoCL's threads on the same
//! cores as the staging threads, so the staged ratio there says little about a GPU's.
//!
//! Sizes: 256 MiB (the figure), 32 MiB with `--quick`. Each figure is the best of
//! interleaved rounds (the copies take turns going first); a round times `COPIES` copies
//! from the first enqueue to `synchronize`. GB/s are 10^9 bytes per second.

use std::time::Instant;

use xpu::xpu_device::backend::{Buffer, MemFlags, PinnedBuffer, PinnedBytes};
use xpu::xpu_kernel::memory::{copy_htod, copy_htod_pinned, staging_threads, DeviceBuffer};
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
    pinned.copy_from_slice(bytemuck::cast_slice(&host));

    let raw_pageable_dst = Buffer::new(ctx, bytes, MemFlags::default())?;

    let mut raw = || -> anyhow::Result<()> {
        drop(queue.copy_pinned(&raw_dst, 0, PinnedBytes::From(&raw_src), 0, bytes, &[])?);
        Ok(())
    };
    let mut raw_pageable = || -> anyhow::Result<()> {
        Ok(queue.write(&raw_pageable_dst, 0, bytemuck::cast_slice(&host))?)
    };
    let mut ours = || -> anyhow::Result<()> { Ok(copy_htod(&stream, &host, &mut typed)?) };
    let mut ours_pinned =
        || -> anyhow::Result<()> { Ok(copy_htod_pinned(&stream, &pinned, &mut typed2)?) };

    // Warm-up: first touch of the destinations and of the staging blocks.
    gbps(&stream, bytes, &mut raw)?;
    gbps(&stream, bytes, &mut raw_pageable)?;
    gbps(&stream, bytes, &mut ours)?;
    gbps(&stream, bytes, &mut ours_pinned)?;
    let (mut best_raw, mut best_ours, mut best_pinned, mut best_pageable) =
        (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for round in 0..rounds {
        if round % 2 == 0 {
            best_raw = best_raw.max(gbps(&stream, bytes, &mut raw)?);
            best_ours = best_ours.max(gbps(&stream, bytes, &mut ours)?);
            best_pageable = best_pageable.max(gbps(&stream, bytes, &mut raw_pageable)?);
        } else {
            best_pageable = best_pageable.max(gbps(&stream, bytes, &mut raw_pageable)?);
            best_ours = best_ours.max(gbps(&stream, bytes, &mut ours)?);
            best_raw = best_raw.max(gbps(&stream, bytes, &mut raw)?);
        }
        best_pinned = best_pinned.max(gbps(&stream, bytes, &mut ours_pinned)?);
    }
    Ok(vec![
        ("htod_typed_bytes".to_owned(), bytes as f64),
        (
            "htod_typed_threads".to_owned(),
            staging_threads(bytes) as f64,
        ),
        ("htod_typed_gbps".to_owned(), best_ours),
        ("htod_typed_raw_h2d_pinned_gbps".to_owned(), best_raw),
        ("htod_typed_over_raw".to_owned(), best_ours / best_raw),
        ("raw_h2d_pageable_gbps".to_owned(), best_pageable),
        (
            "htod_typed_over_raw_pageable".to_owned(),
            best_ours / best_pageable,
        ),
        ("htod_typed_pinned_gbps".to_owned(), best_pinned),
        (
            "htod_typed_pinned_over_raw".to_owned(),
            best_pinned / best_raw,
        ),
    ])
}
