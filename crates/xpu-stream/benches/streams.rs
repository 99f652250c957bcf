//! Criterion benchmarks of the stream hot paths (goals: current_stream <= 10 ns,
//! get_stream_from_pool <= 50 ns; PyTorch: 104 ns).
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use xpu_stream::{current_stream, get_stream_from_pool};

fn streams(c: &mut Criterion) {
    if !xpu_testing::have_device("the stream benches") {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    c.bench_function("current_stream", |b| {
        b.iter(|| current_stream(black_box(0)).unwrap())
    });
    c.bench_function("get_stream_from_pool", |b| {
        b.iter(|| get_stream_from_pool(black_box(0), 0).unwrap())
    });
    c.bench_function("stream_queue_lookup", |b| {
        b.iter(|| black_box(s).queue().unwrap())
    });
    c.bench_function("stream_synchronize_idle", |b| {
        b.iter(|| s.synchronize().unwrap())
    });
}

criterion_group!(benches, streams);
criterion_main!(benches);
