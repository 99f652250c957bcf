//! A hand-run probe (ignored; run it with `--ignored --nocapture` on the driver to study):
//! how many polls and how long an idle stream's query takes to turn `true`, and whether a
//! marker polled with a flush before each poll, or waited on, behaves otherwise. On an H100
//! with NVIDIA's driver (2026-12-06), with the suite running beside it, idle streams' query
//! loops gave up after 100,000 and 1,000,000 polls (about 2 s) in three tests; this measures
//! it, it asserts nothing about the driver.

mod common;

use std::time::{Duration, Instant};

use xpu_stream::get_stream_from_pool;

/// Polls `done` until it answers true or 10 s pass: (polls, elapsed, finished).
fn poll(mut done: impl FnMut() -> bool) -> (u64, Duration, bool) {
    let start = Instant::now();
    let mut polls = 0u64;
    while start.elapsed() < Duration::from_secs(10) {
        polls += 1;
        if done() {
            return (polls, start.elapsed(), true);
        }
        std::thread::yield_now();
    }
    (polls, start.elapsed(), false)
}

#[test]
#[ignore = "a hand-run probe of the driver's marker status (prints, asserts nothing)"]
fn idle_stream_query_latency() {
    if !common::devices(1) {
        return;
    }
    let s = get_stream_from_pool(0, 0).unwrap();
    let q = s.queue().unwrap();
    for mode in ["query", "marker", "marker+flush"] {
        let mut worst = (0u64, Duration::ZERO, true);
        let mut unfinished = 0;
        let mut total = Duration::ZERO;
        for _ in 0..50 {
            s.synchronize().unwrap();
            let r = match mode {
                "query" => poll(|| s.query().unwrap()),
                _ => {
                    let m = q.enqueue_marker(&[]).unwrap();
                    q.flush().unwrap();
                    let reflush = mode == "marker+flush";
                    poll(|| {
                        if reflush {
                            q.flush().unwrap();
                        }
                        m.is_complete().unwrap()
                    })
                }
            };
            total += r.1;
            unfinished += usize::from(!r.2);
            if r.1 > worst.1 {
                worst = r;
            }
        }
        println!(
            "probe {mode}: 50 rounds, mean {:?}, worst {} polls in {:?} (finished {}), {unfinished} unfinished in 10 s",
            total / 50,
            worst.0,
            worst.1,
            worst.2
        );
    }
}

#[test]
#[ignore = "a hand-run probe of an external stream's polling loop (prints, asserts nothing)"]
fn idle_external_stream_query_polls() {
    if !common::devices(1) {
        return;
    }
    let dev = xpu_device::device(0).unwrap();
    let q = dev
        .create_queue(xpu_device::backend::QueueOptions {
            profiling: false,
            priority: None,
        })
        .unwrap();
    let external = xpu_stream::ExternalStream::new(q, 0).unwrap();
    let s = external.stream();
    let mut rounds = Vec::new();
    for _ in 0..50 {
        s.synchronize().unwrap();
        // A tight loop: no yield between polls.
        let start = Instant::now();
        let mut polls = 0u64;
        let mut finished = false;
        while start.elapsed() < Duration::from_secs(10) {
            polls += 1;
            if s.query().unwrap() {
                finished = true;
                break;
            }
        }
        rounds.push((polls, start.elapsed(), finished));
    }
    let unfinished = rounds.iter().filter(|r| !r.2).count();
    let worst = rounds.iter().max_by_key(|r| r.1).unwrap();
    let mean = rounds.iter().map(|r| r.1).sum::<Duration>() / 50;
    println!(
        "probe external tight: 50 rounds, mean {mean:?}, worst {} polls in {:?}, {unfinished} unfinished in 10 s",
        worst.0, worst.1
    );
}
