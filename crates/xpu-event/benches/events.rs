//! Criterion benchmarks of events, each next to its raw OpenCL floor (goal: record + query
//! <= 1.10 x the bare marker + status query + release).
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use xpu_event::{Event, EventFlags, StreamExt};
use xpu_stream::get_stream_from_pool;

fn events(c: &mut Criterion) {
    if !xpu_testing::have_device("the event benches") {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let other = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    c.bench_function("event_new", |b| {
        b.iter(|| Event::new(black_box(EventFlags::default())))
    });
    let mut g = c.benchmark_group("record_query");
    g.bench_function("event_record_query", |b| {
        b.iter(|| {
            let mut e = Event::default();
            e.record(&s).unwrap();
            e.query().unwrap()
        })
    });
    g.bench_function("raw_marker_query", |b| {
        b.iter(|| q.enqueue_marker(&[]).unwrap().status().unwrap())
    });
    g.finish();
    s.synchronize().unwrap();
    let mut g = c.benchmark_group("record_sync");
    g.bench_function("event_record_sync", |b| {
        b.iter(|| s.record_event().unwrap().synchronize().unwrap())
    });
    g.bench_function("raw_marker_wait", |b| {
        b.iter(|| q.enqueue_marker(&[]).unwrap().wait().unwrap())
    });
    g.finish();
    c.bench_function("cross_stream_wait", |b| {
        b.iter(|| s.wait_stream(&other).unwrap())
    });
    s.synchronize().unwrap();
    other.synchronize().unwrap();
}

criterion_group!(benches, events);
criterion_main!(benches);
