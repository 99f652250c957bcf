//! In a bad fork child every layer's entry points return `BadFork` at once: no driver call,
//! no wait, no lock. The parent's state is reproduced in a fresh process — a stream blocked by
//! a closed gate (so `synchronize` there would wait forever), a live allocation, a thread
//! allocating and emptying the cache in a loop — and the process then becomes a bad fork
//! (`simulate_bad_fork` sets the flag the `pthread_atfork` child handler sets; the tests of
//! this crate may not fork). A hang is a failed assertion, caught by the bound.
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use xpu::xpu_event::Gate;

#[test]
fn every_layer_refuses_at_once_in_a_bad_fork_child() {
    common::scenario_test(
        "every_layer_refuses_at_once_in_a_bad_fork_child",
        "bad-fork",
        Duration::from_secs(30),
        "SCENARIO DONE",
        run,
    );
}

fn show<T: std::fmt::Debug, E: std::fmt::Debug>(name: &str, r: &Result<T, E>) -> String {
    let s = match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({e:?})"),
    };
    println!("{name} = {s}");
    s
}

/// Asserts that the entry point `name` returned `Err(BadFork)` (printing what it returned).
fn assert_bad_fork<T: std::fmt::Debug, E: std::fmt::Debug>(name: &str, r: &Result<T, E>) {
    assert_eq!(show(name, r), "Err(BadFork)", "{name}");
}

fn run() {
    let n = xpu::device_count();
    let s = xpu::xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let p = xpu::xpu_alloc::allocate(1000, &s).unwrap();
    // Typed memory and CLBlast regions of the parent (a region's sub-buffer is made here).
    let a = xpu::DeviceBuffer::<f32>::zeroed(4, &s).unwrap();
    let mut c = xpu::DeviceBuffer::<f32>::zeroed(4, &s).unwrap();
    let clblast = xpu::xpu_device::foreign::clblast::Clblast::get().is_ok();
    let ra = xpu::ClRegion::new(&a).unwrap();
    let rc = xpu::ClRegion::new_mut(&mut c).unwrap();
    let gate = Gate::new(0).unwrap();
    gate.block(&s).unwrap();
    let mut gated = xpu::Event::new(xpu::EventFlags::default());
    gated.record(&s).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let st = Arc::clone(&stop);
    let other = xpu::xpu_stream::get_stream_from_pool(0, 0).unwrap();
    let busy = std::thread::spawn(move || {
        while !st.load(Ordering::Relaxed) {
            if let Ok(q) = xpu::xpu_alloc::allocate(3 << 20, &other) {
                drop(q);
            }
            xpu::xpu_alloc::empty_cache();
        }
    });

    xpu::xpu_device::fork::simulate_bad_fork();

    // xpu-stream
    assert_bad_fork("Stream::query", &s.query());
    assert_bad_fork("Stream::synchronize", &s.synchronize());
    assert_bad_fork("xpu_stream::synchronize", &xpu::xpu_stream::synchronize(0));
    assert_bad_fork("current_stream", &xpu::xpu_stream::current_stream(0));
    assert_bad_fork(
        "get_stream_from_pool",
        &xpu::xpu_stream::get_stream_from_pool(0, 0),
    );
    assert_bad_fork("default_stream", &xpu::xpu_stream::default_stream(0));
    assert_bad_fork("StreamGuard::new", &xpu::StreamGuard::new(s).map(|_| ()));
    // xpu-event
    assert_bad_fork("Event::query", &gated.query());
    assert_bad_fork("Event::synchronize", &gated.synchronize());
    assert_bad_fork("Event::wait", &gated.wait(&other));
    let mut fresh = xpu::Event::new(xpu::EventFlags::default());
    assert_bad_fork("Event::record", &fresh.record(&s));
    drop(gated); // leaked, not released
                 // xpu-alloc
    assert_bad_fork("xpu_alloc::allocate", &xpu::xpu_alloc::allocate(1000, &s));
    assert_bad_fork(
        "xpu_alloc::allocate_current",
        &xpu::xpu_alloc::allocate_current(1000),
    );
    assert_bad_fork("xpu_alloc::raw_alloc", &xpu::xpu_alloc::raw_alloc(1000));
    assert_bad_fork(
        "xpu_alloc::device_allocator",
        &xpu::xpu_alloc::device_allocator(0).map(|_| ()),
    );
    assert_bad_fork(
        "xpu_alloc::record_stream",
        &xpu::xpu_alloc::record_stream(&p, &s),
    );
    assert_bad_fork(
        "xpu_alloc::memory_stats",
        &xpu::xpu_alloc::memory_stats(0).map(|_| ()),
    );
    assert_bad_fork(
        "xpu_alloc::memory_reserved",
        &xpu::xpu_alloc::memory_reserved(0),
    );
    assert_bad_fork("xpu_alloc::mem_get_info", &xpu::xpu_alloc::mem_get_info(0));
    xpu::xpu_alloc::empty_cache();
    drop(p); // returns at once: the block is left to the parent's allocator
             // xpu-device
    assert_bad_fork(
        "xpu_device::devices",
        &xpu::xpu_device::devices().map(|d| d.len()),
    );
    assert_bad_fork("xpu_device::set_device", &xpu::xpu_device::set_device(0));
    assert_eq!(
        xpu::xpu_device::device_count(),
        n,
        "the parent's count, not 0"
    );
    // xpu-lazy and the facade
    assert_bad_fork("xpu_lazy::lazy_init", &xpu::lazy_init());
    assert!(!xpu::is_initialized());
    assert!(xpu::is_in_bad_fork());
    assert_eq!(xpu::device_count(), n);
    for (name, r) in [
        ("xpu::current_device", xpu::current_device().map(|_| ())),
        ("xpu::current_stream", xpu::current_stream(None).map(|_| ())),
        ("xpu::set_stream", xpu::set_stream(s)),
        ("xpu::synchronize", xpu::synchronize(None)),
        (
            "xpu::get_device_properties",
            xpu::get_device_properties(None).map(|_| ()),
        ),
        ("xpu::allocate", xpu::allocate(1000).map(|_| ())),
        (
            "xpu::memory_reserved",
            xpu::memory_reserved(None).map(|_| ()),
        ),
        ("xpu::memory_stats", xpu::memory_stats(None).map(|_| ())),
    ] {
        let e = r.expect_err(name);
        println!("{name} = Err({e:?})");
        assert!(e.is_bad_fork(), "{name}: {e:?}");
    }
    xpu::empty_cache();
    // Typed memory, kernel and interop layers through the facade's error: a bad fork
    // however the layer error wraps it.
    let mut facade: Vec<(&str, xpu::Result<()>)> = vec![
        (
            "DeviceBuffer::zeroed",
            xpu::DeviceBuffer::<f32>::zeroed(4, &s)
                .map(|_| ())
                .map_err(Into::into),
        ),
        (
            "Program::build",
            xpu::Program::build(0, "kernel void k(void) {}", "")
                .map(|_| ())
                .map_err(Into::into),
        ),
    ];
    if clblast {
        let gemm = xpu::xpu_kernel::RowMajorSgemm::new((2, 2, 2), &ra, &ra, &rc);
        facade.push((
            "clblast_sgemm",
            xpu::xpu_kernel::clblast_sgemm(&s, &gemm, xpu::xpu_kernel::TempBuffer::AsNeeded)
                .map(|_| ())
                .map_err(Into::into),
        ));
    } else {
        println!("CLBlast not installed: clblast_sgemm not checked");
    }
    for (name, r) in facade {
        let e = r.expect_err(name);
        println!("{name} = Err({e:?})");
        assert!(e.is_bad_fork(), "{name}: {e:?}");
    }
    drop((a, c)); // leaked, not returned to the parent's allocator

    // Leave the process cleanly (the driver still works here: the fork is simulated).
    stop.store(true, Ordering::Relaxed);
    busy.join().unwrap();
    // The gate is the parent's driver state: it refuses to open, and dropping it leaks it
    // (the blocked queue is left as it is at exit).
    assert_bad_fork("Gate::open", &gate.open());
    assert_bad_fork("Gate::new", &Gate::new(0).map(|_| ()));
    drop(gate);
    println!("SCENARIO DONE");
}
