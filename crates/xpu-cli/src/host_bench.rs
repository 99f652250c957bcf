//! Figures for `xpu bench`: the cached allocation path in nanoseconds, and host-to-device
//! copy bandwidth through the allocator next to the bare OpenCL pinned copy, measured in the
//! same run with rounds interleaved so that machine noise hits both alike.

use std::hint::black_box;
use std::time::Instant;

use xpu_device::backend::{Buffer, MemFlags, PinnedBuffer, PinnedBytes};
use xpu_stream::{get_stream_from_pool, Stream, PRIORITY_NORMAL};

use xpu_host::{host_allocate_on, HostBytes, HostCopy, HostError};

/// What [`run_with`] measures. [`Default`]: the `xpu bench` sizes (256 MiB copies).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchConfig {
    /// Bytes per copy (default 256 MiB).
    pub copy_bytes: usize,
    /// Copies per timed round, finished with one `clFinish` (default 10).
    pub copies: u32,
    /// Interleaved rounds, the two pinned copies taking turns going first; each figure is
    /// the best round (default 4).
    pub rounds: u32,
    /// Allocate + free pairs per timed batch of the cached path (default 100,000; best of 5
    /// batches).
    pub alloc_iters: u32,
    /// Request size of the cached path, bytes (default 4096).
    pub alloc_size: usize,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            copy_bytes: 256 << 20,
            copies: 10,
            rounds: 4,
            alloc_iters: 100_000,
            alloc_size: 4096,
        }
    }
}

/// Mean nanoseconds of one cached allocate + free pair (best batch of five) through
/// [`host_allocate_on`].
fn cached_alloc_free_ns(device: usize, cfg: &BenchConfig) -> Result<f64, HostError> {
    drop(host_allocate_on(device, cfg.alloc_size)?); // the block is now cached
    let iters = cfg.alloc_iters.max(1);
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        for _ in 0..iters {
            drop(black_box(host_allocate_on(
                device,
                black_box(cfg.alloc_size),
            )?));
        }
        best = best.min(t.elapsed().as_nanos() as f64 / f64::from(iters));
    }
    Ok(best)
}

/// GB/s (bytes per ns) of `copies` enqueues of `bytes` each, finished on `stream`.
fn bandwidth(
    stream: &Stream,
    bytes: usize,
    copies: u32,
    mut copy: impl FnMut() -> Result<(), HostError>,
) -> Result<f64, HostError> {
    let t = Instant::now();
    for _ in 0..copies {
        copy()?;
    }
    stream.synchronize()?;
    let ns = t.elapsed().as_nanos().max(1) as f64;
    Ok(bytes as f64 * f64::from(copies) / ns)
}

/// Measures every figure on `device` with `cfg` and returns `(name, value)` pairs:
/// `host_cached_alloc_free_ns` (ns), then, in GB/s (bytes/ns) for `cfg.copy_bytes` copies:
/// `raw_h2d_pinned_gbps` (a bare [`PinnedBuffer`] and `copy_pinned` on the stream's
/// queue, no caching layer), `h2d_pinned_gbps` (a [`HostPtr`](xpu_host::HostPtr) from the
/// allocator and [`HostCopy::copy_pinned`]), `h2d_pageable_gbps`
/// ([`HostCopy::copy_from_pageable`] from a `Vec`), and `h2d_pinned_over_raw` (ratio).
///
/// # Errors
/// Any failed allocation, copy or synchronization; `OutOfRange` for `copy_bytes == 0`.
pub fn run_with(device: usize, cfg: &BenchConfig) -> Result<Vec<(String, f64)>, HostError> {
    let n = cfg.copy_bytes;
    if n == 0 {
        return Err(HostError::OutOfRange {
            what: "bench copy size",
            offset: 0,
            len: 0,
            size: 0,
        });
    }
    let alloc_ns = cached_alloc_free_ns(device, cfg)?;

    let stream = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    let queue = stream.queue()?;
    let ctx = xpu_device::device(device)?.context()?;
    let dst = Buffer::new(ctx, n, MemFlags::default())?;
    let mut raw = PinnedBuffer::new(ctx, &queue, n)?;
    raw.as_mut_slice().fill(1);
    let mut ours = host_allocate_on(device, n)?;
    ours.fill(2);
    let pageable = vec![3u8; n];

    let raw_copy = || -> Result<(), HostError> {
        drop(queue.copy_pinned(&dst, 0, PinnedBytes::From(&raw), 0, n, &[])?);
        Ok(())
    };
    let ours_copy = || stream.copy_pinned(&dst, 0, HostBytes::From(&ours), 0, n);
    let pageable_copy = || stream.copy_from_pageable(&pageable, &dst, 0);

    // Warm-up: first touch of the destination and of every source.
    bandwidth(&stream, n, 1, raw_copy)?;
    bandwidth(&stream, n, 1, ours_copy)?;
    bandwidth(&stream, n, 1, pageable_copy)?;

    let (mut best_raw, mut best_ours, mut best_pageable) = (0.0f64, 0.0f64, 0.0f64);
    for round in 0..cfg.rounds.max(1) {
        // Alternate which pinned copy goes first, so that neither always follows the other.
        if round % 2 == 0 {
            best_raw = best_raw.max(bandwidth(&stream, n, cfg.copies, raw_copy)?);
            best_ours = best_ours.max(bandwidth(&stream, n, cfg.copies, ours_copy)?);
        } else {
            best_ours = best_ours.max(bandwidth(&stream, n, cfg.copies, ours_copy)?);
            best_raw = best_raw.max(bandwidth(&stream, n, cfg.copies, raw_copy)?);
        }
        best_pageable = best_pageable.max(bandwidth(&stream, n, cfg.copies, pageable_copy)?);
    }
    drop(ours);

    Ok(vec![
        ("host_cached_alloc_free_ns".to_owned(), alloc_ns),
        ("raw_h2d_pinned_gbps".to_owned(), best_raw),
        ("h2d_pinned_gbps".to_owned(), best_ours),
        ("h2d_pageable_gbps".to_owned(), best_pageable),
        ("h2d_pinned_over_raw".to_owned(), best_ours / best_raw),
    ])
}
