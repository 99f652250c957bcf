//! Criterion benches of the pinned-host allocator: the cached allocate + free pair (goal
//! <= 150 ns) and a small host-to-device copy through a cached block next to the bare
//! backend copy. Skipped with a message when no OpenCL device exists.
#![allow(missing_docs)] // criterion_group! generates an undocumented function

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xpu_device::backend::{Buffer, MemFlags, PinnedBuffer, PinnedBytes};
use xpu_host::{host_allocate_on, HostBytes, HostCopy};
use xpu_stream::{get_stream_from_pool, PRIORITY_NORMAL};

/// Copy size of the copy benches: small, PoCL is slow.
const COPY_BYTES: usize = 1 << 20;

fn host(c: &mut Criterion) {
    if !xpu_testing::have_device("the host allocator benches") {
        return;
    }
    let setup = || -> Result<_, Box<dyn std::error::Error>> {
        let stream = get_stream_from_pool(PRIORITY_NORMAL, 0)?;
        let ctx = xpu_device::device(0)?.context()?;
        let dst = Buffer::new(ctx, COPY_BYTES, MemFlags::default())?;
        let queue = stream.queue()?;
        let raw = PinnedBuffer::new(ctx, &queue, COPY_BYTES)?;
        drop(host_allocate_on(0, 4096)?);
        Ok((stream, dst, raw))
    };
    let (stream, dst, raw) = match setup() {
        Ok(v) => v,
        Err(e) => {
            eprintln!("skipping the host allocator benches: {e}");
            return;
        }
    };

    c.bench_function("host_cached_alloc_free_4k", |b| {
        b.iter(|| drop(black_box(host_allocate_on(0, black_box(4096)))))
    });

    let mut g = c.benchmark_group("h2d_1mib");
    g.throughput(Throughput::Bytes(COPY_BYTES as u64));
    let ours = host_allocate_on(0, COPY_BYTES);
    if let Ok(ours) = &ours {
        g.bench_function("pinned_host_ptr", |b| {
            b.iter(|| {
                let _ = stream.copy_pinned(&dst, 0, HostBytes::From(ours), 0, COPY_BYTES);
                let _ = stream.synchronize();
            })
        });
    }
    if let Ok(queue) = stream.queue() {
        g.bench_function("raw_pinned_buffer", |b| {
            b.iter(|| {
                let _ = queue.copy_pinned(&dst, 0, PinnedBytes::From(&raw), 0, COPY_BYTES, &[]);
                let _ = queue.finish();
            })
        });
    }
    g.finish();
}

criterion_group!(benches, host);
criterion_main!(benches);
