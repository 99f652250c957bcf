//! No user code runs under an allocator lock: closures given to the allocator may call it.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use common::{sim_core, stream, MIB};

/// Runs `f` on a child thread; a hang is an assertion failure (the thread is abandoned).
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|e| panic!("{what}: no answer after 20 s ({e}): deadlock"))
}

#[test]
fn the_stream_closure_of_allocate_with_may_allocate() {
    let (core, _) = sim_core(64 * MIB, "");
    let c = core.clone();
    let (outer, inner) = within("allocate inside allocate_with's closure", move || {
        let (_, s1) = stream(1);
        let (_, s2) = stream(2);
        let mut nested = None;
        let outer = c
            .allocate_with(4096, s1.key(), || {
                nested = Some(c.allocate(1024, &s2));
                s1.clone()
            })
            .unwrap();
        (outer, nested.expect("closure called").unwrap())
    });
    assert_eq!((outer.size(), inner.size()), (4096, 1024));
    assert_eq!(core.memory_allocated(), 4096 + 1024);
}

#[test]
fn with_raw_closure_may_call_the_allocator() {
    let (core, _) = sim_core(64 * MIB, "");
    let c = core.clone();
    let freed = within("raw_delete inside with_raw", move || {
        let (_, s) = stream(1);
        let a = c.raw_alloc(1024, s.key(), || s.clone()).unwrap();
        let b = c.raw_alloc(1024, s.key(), || s.clone()).unwrap();
        c.with_raw(a, |p| {
            assert_eq!(p.size(), 1024);
            c.raw_delete(b).unwrap();
            c.raw_delete(a).unwrap();
            c.memory_allocated()
        })
        .unwrap()
    });
    // `b` was freed at once; `a` stays allocated while the closure holds it.
    assert_eq!(freed, 1024);
    assert_eq!(core.memory_allocated(), 0);
}
