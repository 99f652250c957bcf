//! Timing figures for `xpu bench`: each runtime operation next to its raw OpenCL floor,
//! measured in the same run, in nanoseconds per operation.
//!
//! Every figure is the median of several batch means; a runtime figure and its floor are
//! measured in alternating batches so that machine noise hits both alike.

use std::hint::black_box;
use std::time::Instant;

use xpu_stream::{current_stream, get_stream_from_pool, PRIORITY_NORMAL};

use xpu_event::{Event, EventError, EventFlags, StreamExt};

type Step<'a> = Box<dyn FnMut() -> Result<(), EventError> + 'a>;

/// Mean ns per call of `f` over `iters` calls.
fn mean_ns(iters: u32, f: &mut Step<'_>) -> Result<f64, EventError> {
    let t = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(t.elapsed().as_nanos() as f64 / f64::from(iters))
}

/// Median batch mean of each step. Steps run in alternating order from batch to batch (forward,
/// then backward) so that neither side of a comparison always runs first; `after` runs after
/// every batch (untimed), e.g. to drain queues.
fn median(
    iters: u32,
    batches: u32,
    steps: &mut [Step<'_>],
    mut after: impl FnMut() -> Result<(), EventError>,
) -> Result<Vec<f64>, EventError> {
    let mut all = vec![Vec::with_capacity(batches as usize); steps.len()];
    for b in 0..batches {
        let order: Vec<usize> = if b % 2 == 0 {
            (0..steps.len()).collect()
        } else {
            (0..steps.len()).rev().collect()
        };
        for i in order {
            all[i].push(mean_ns(iters, &mut steps[i])?);
            after()?;
        }
    }
    Ok(all
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect())
}

/// Runs every figure on `device` (one to two seconds on PoCL) and returns `(name, ns)` pairs:
/// `current_stream_ns` (goal <= 10), `stream_from_pool_ns` (goal <= 50; PyTorch 104),
/// `event_new_ns` (goal <= 20), `event_record_query_ns` with its floor `raw_marker_query_ns`
/// (goal: ratio <= 1.10, given as `event_record_query_over_raw`), `event_query_done_ns`
/// with `raw_status_done_ns`, `event_record_sync_ns` with `raw_marker_wait_ns`,
/// `stream_sync_idle_ns` with `raw_finish_idle_ns`, `cross_stream_wait_ns` with
/// `raw_cross_queue_wait_ns`.
///
/// # Errors
/// Any failed call of the measured operations.
pub fn run(device: usize) -> Result<Vec<(String, f64)>, EventError> {
    let s = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    let other = get_stream_from_pool(PRIORITY_NORMAL, device)?;
    let q = s.queue()?;
    let oq = other.queue()?;
    let drain = || -> Result<(), EventError> {
        q.finish()?;
        oq.finish()?;
        Ok(())
    };
    let mut figs: Vec<(String, f64)> = Vec::new();
    let mut push = |names: &[&str], v: Vec<f64>| {
        for (n, x) in names.iter().zip(v) {
            figs.push(((*n).to_string(), x));
        }
    };

    let cheap: Vec<Step<'_>> = vec![
        Box::new(|| {
            black_box(current_stream(black_box(device))?);
            Ok(())
        }),
        Box::new(|| {
            black_box(get_stream_from_pool(black_box(PRIORITY_NORMAL), device)?);
            Ok(())
        }),
        Box::new(|| {
            drop(black_box(Event::new(black_box(EventFlags::default()))));
            Ok(())
        }),
    ];
    let mut cheap = cheap;
    let v = median(200_000, 5, &mut cheap, || Ok(()))?;
    push(
        &["current_stream_ns", "stream_from_pool_ns", "event_new_ns"],
        v,
    );

    let mut rq: Vec<Step<'_>> = vec![
        Box::new(|| {
            let mut e = Event::default();
            e.record(&s)?;
            black_box(e.query()?);
            Ok(())
        }),
        Box::new(|| {
            let m = q.enqueue_marker(&[])?;
            black_box(m.status()?);
            Ok(())
        }),
    ];
    let v = median(1_000, 15, &mut rq, drain)?;
    let ratio = v[0] / v[1];
    push(&["event_record_query_ns", "raw_marker_query_ns"], v);

    let mut done = Event::default();
    done.record(&s)?;
    done.synchronize()?;
    let raw_done = q.enqueue_marker(&[])?;
    raw_done.wait()?;
    let mut dq: Vec<Step<'_>> = vec![
        Box::new(|| {
            black_box(done.query()?);
            Ok(())
        }),
        Box::new(|| {
            black_box(raw_done.status()?);
            Ok(())
        }),
    ];
    let v = median(5_000, 5, &mut dq, || Ok(()))?;
    push(&["event_query_done_ns", "raw_status_done_ns"], v);

    let mut sync: Vec<Step<'_>> = vec![
        Box::new(|| s.record_event()?.synchronize()),
        Box::new(|| Ok(q.enqueue_marker(&[])?.wait()?)),
        Box::new(|| Ok(s.synchronize()?)),
        Box::new(|| Ok(q.finish()?)),
    ];
    let v = median(200, 5, &mut sync, drain)?;
    push(
        &[
            "event_record_sync_ns",
            "raw_marker_wait_ns",
            "stream_sync_idle_ns",
            "raw_finish_idle_ns",
        ],
        v,
    );

    let mut cross: Vec<Step<'_>> = vec![
        Box::new(|| s.wait_stream(&other)),
        Box::new(|| {
            let m = oq.enqueue_marker(&[])?;
            oq.flush()?;
            q.enqueue_barrier(&[&m])?;
            Ok(())
        }),
    ];
    let v = median(500, 7, &mut cross, drain)?;
    push(&["cross_stream_wait_ns", "raw_cross_queue_wait_ns"], v);
    figs.push(("event_record_query_over_raw".to_string(), ratio));
    Ok(figs)
}

#[cfg(test)]
mod tests;
