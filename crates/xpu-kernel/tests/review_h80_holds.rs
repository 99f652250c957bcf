//! Review h80 (fresh eyes on 9209a05: `Capture<'brand>`, an invariant lifetime brand per
//! capture, so that the handles of two nested captures cannot be exchanged): PASSING probes of
//! what was attacked and held.
//!
//! Compilation: [`safe_ways_to_exchange_handles_between_captures_do_not_compile`] compiles
//! small programs against this build's `xpu_kernel` with `rustc` (doctest-style, the
//! `compile_fail` examples of a test file): every safe way tried to move one capture's handle
//! or launch into the other capture's place is refused, with the error code expected, while
//! control programs that use both handles legitimately compile.
//!
//! Runtime (PoCL 3.1, `POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`; skipped without
//! a device unless `XPU_REQUIRE_DEVICE=1`): a nested capture of the same stream, a panic
//! caught in the middle of a nested capture, and another capture's event.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use common::fresh_streams;
use xpu_kernel::graph::{Graph, GraphError};
use xpu_kernel::{DeviceBuffer, Function, Program};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The newest `lib<name>-*.rlib` in `deps`.
fn rlib(deps: &Path, name: &str) -> PathBuf {
    let prefix = format!("lib{name}-");
    std::fs::read_dir(deps)
        .expect("deps dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".rlib"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .unwrap_or_else(|| panic!("no {prefix}*.rlib in {}", deps.display()))
}

/// Compiles `body` (the body of `fn probe()`, with `Graph`, `Capture`, `Stream` and
/// `Function` in scope) as a library against this build; `Ok(())` when it compiled, else the
/// compiler's messages.
fn compile(name: &str, body: &str) -> Result<(), String> {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let kernel = rlib(&deps, "xpu_kernel");
    let stream = rlib(&deps, "xpu_stream");
    let dir = std::env::temp_dir().join(format!("xpu-h80-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let src = dir.join("probe.rs");
    let text = format!(
        "#![allow(unused)]\n\
         use xpu_kernel::graph::{{Capture, Graph, GraphError}};\n\
         use xpu_kernel::Function;\n\
         use xpu_stream::Stream;\n\
         pub fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {{\n\
         {body}\n\
         Ok(())\n\
         }}\n"
    );
    std::fs::write(&src, text).expect("write probe");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let out = Command::new(rustc)
        .args([
            "--edition",
            "2021",
            "--crate-type",
            "lib",
            "--emit=metadata",
        ])
        .arg("--crate-name")
        .arg(format!("probe_{name}"))
        .arg("-L")
        .arg(format!("dependency={}", deps.display()))
        .arg("--extern")
        .arg(format!("xpu_kernel={}", kernel.display()))
        .arg("--extern")
        .arg(format!("xpu_stream={}", stream.display()))
        .arg("--out-dir")
        .arg(&dir)
        .arg(&src)
        .output()
        .expect("run rustc");
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Each attack: (name, body, what the refusal must say: an error code, or the message of a
/// lifetime error that has none).
const ATTACKS: &[(&str, &str, &str)] = &[
    // The fixed scenario itself (control of the harness: it must still fail).
    (
        "swap",
        "Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { \
         std::mem::swap(outer, inner); Ok(()) })?; Ok(()) })?;",
        "E0521",
    ),
    // The inner handle parked in an Option of the outer closure, swapped after the inner
    // capture returned (the Option::take pattern).
    (
        "option_take",
        "Graph::capture(&s1, |outer| { let mut slot = None; \
         Graph::capture(&s2, |inner| { slot = Some(inner); Ok(()) })?; \
         if let Some(inner) = slot.take() { std::mem::swap(outer, inner); } Ok(()) })?;",
        "E0521",
    ),
    // The outer handle taken out of an Option inside the inner closure.
    (
        "option_take_outer",
        "Graph::capture(&s1, |outer| { let mut o = Some(outer); \
         Graph::capture(&s2, |inner| { let x = o.take().unwrap(); std::mem::swap(x, inner); \
         Ok(()) })?; Ok(()) })?;",
        "E0521",
    ),
    // A launch of the inner capture stored in a RefCell of the outer closure, to outlive it.
    (
        "refcell_launch",
        "Graph::capture(&s1, |outer| { let cell = std::cell::RefCell::new(None); \
         Graph::capture(&s2, |inner| { *cell.borrow_mut() = Some(inner.launch(&s2, &f, &[1], None)?); \
         Ok(()) })?; drop(cell); Ok(()) })?;",
        "E0521",
    ),
    // Launches of the two captures swapped (each keeps `&mut` to its capture).
    (
        "swap_launches",
        "Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { \
         let mut a = outer.launch(&s1, &f, &[1], None)?; \
         let mut b = inner.launch(&s2, &f, &[1], None)?; \
         std::mem::swap(&mut a, &mut b); Ok(()) })?; Ok(()) })?;",
        "E0521",
    ),
    // A helper that exchanges two handles of one brand, given the two captures' handles.
    // (`std::mem::replace(outer, std::mem::replace(inner, todo!()))` compiles, but only
    // because borrow checking skips the unreachable code after `todo!()`: it never runs.)
    (
        "same_brand_helper",
        "fn exchange<'x>(a: &mut Capture<'x>, b: &mut Capture<'x>) { std::mem::swap(a, b) } \
         Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { \
         exchange(outer, inner); Ok(()) })?; Ok(()) })?;",
        "E0521",
    ),
    // The handle erased into a trait object (`Any` needs 'static).
    (
        "any",
        "Graph::capture(&s1, |outer| { let a: &mut dyn std::any::Any = outer; Ok(()) })?;",
        "lifetime may not live long enough",
    ),
    // A closure that swaps with the outer handle, given the inner one.
    (
        "boxed_closure",
        "Graph::capture(&s1, |outer| { \
         let mut with: Box<dyn FnMut(&mut Capture<'_>) + '_> = Box::new(|c| std::mem::swap(outer, c)); \
         Graph::capture(&s2, |inner| { with(inner); Ok(()) })?; Ok(()) })?;",
        "E0521",
    ),
    // A thread_local slot for a handle (a 'static type is required).
    (
        "thread_local",
        "thread_local! { static SLOT: std::cell::RefCell<Option<&'static mut Capture<'static>>> = const { std::cell::RefCell::new(None) }; } \
         Graph::capture(&s1, |outer| { SLOT.with(|s| *s.borrow_mut() = Some(outer)); Ok(()) })?;",
        "E0521",
    ),
    // A scoped thread running the inner capture sends its handle back over a channel.
    (
        "scoped_thread_channel",
        "Graph::capture(&s1, |outer| { let (tx, rx) = std::sync::mpsc::channel(); \
         std::thread::scope(|sc| { sc.spawn(|| Graph::capture(&s2, |inner| { tx.send(inner).unwrap(); Ok(()) })); }); \
         if let Ok(inner) = rx.recv() { std::mem::swap(outer, inner); } Ok(()) })?;",
        "E0521",
    ),
    // The handle carried out of the capture by a panic payload (needs 'static + Send).
    (
        "panic_payload",
        "let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| \
         Graph::capture(&s1, |outer| { std::panic::panic_any(outer) }))); ",
        "E0521",
    ),
    // The handle returned out of the capture through a generic return slot.
    (
        "escape_to_caller",
        "let mut out: Option<&mut Capture<'_>> = None; \
         let _ = Graph::capture(&s1, |c| { out = Some(c); Ok(()) }); ",
        "E0521",
    ),
];

/// What must compile: nested captures that use both handles legitimately (the outer handle
/// inside the inner closure, a helper generic over the brand, launches of one capture
/// swapped with each other, the outer handle on a scoped thread).
const CONTROLS: &[(&str, &str)] = &[
    (
        "nested_use_of_both",
        "Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { \
         let e = outer.record_event(&s1)?; let _ = inner.record_event(&s2)?; \
         let _ = inner.wait_event(&s2, &e); Ok(()) })?; Ok(()) })?;",
    ),
    (
        "helper_over_the_brand",
        "fn helper(c: &mut Capture<'_>, s: &Stream) -> Result<(), GraphError> { c.record_event(s).map(|_| ()) } \
         Graph::capture(&s1, |outer| helper(outer, &s1))?;",
    ),
    (
        "same_capture_launch_swap",
        "Graph::capture(&s1, |c| { let mut a = c.launch(&s1, &f, &[1], None)?; \
         let mut b = Some(a); let taken = b.take(); drop(taken); Ok(()) })?;",
    ),
];

/// Holds (SAFE code cannot exchange handles or launches between captures): every attack in
/// `ATTACKS` fails to compile with its expected error code, and every control in `CONTROLS`
/// compiles (so the refusals are the brand's, not the harness's).
#[test]
fn safe_ways_to_exchange_handles_between_captures_do_not_compile() {
    let _one = serial();
    for (name, body) in CONTROLS {
        if let Err(e) = compile(name, body) {
            panic!("control {name} does not compile:\n{e}");
        }
    }
    let mut compiled = Vec::new();
    let mut other = Vec::new();
    for (name, body, code) in ATTACKS {
        match compile(name, body) {
            Ok(()) => compiled.push(*name),
            Err(e) if e.contains(code) => {}
            Err(e) => other.push(format!("{name} (expected {code}):\n{e}")),
        }
    }
    assert!(compiled.is_empty(), "attacks that compiled: {compiled:?}");
    assert!(
        other.is_empty(),
        "attacks refused with another error:\n{}",
        other.join("\n")
    );
}

const N: usize = 64;
const SRC: &str = r"
__kernel void set(__global uint *y, uint v, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = v;
}
";

fn set_fn(device: usize) -> Function {
    Program::build(device, SRC, "")
        .unwrap()
        .function("set")
        .unwrap()
}

/// Holds (nested capture on the same stream): a capture nested in a capture of the same
/// stream is `AlreadyCapturing`, the outer capture goes on and its graph replays, and the
/// stream is released afterwards.
#[test]
fn a_nested_capture_of_the_same_stream_is_refused() {
    let _one = serial();
    let Some(([s], _ext)) = fresh_streams([0]) else {
        return;
    };
    let f = set_fn(0);
    let y = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s).unwrap());
    s.synchronize().unwrap();
    let g = Graph::capture(&s, |outer| {
        let inner = Graph::capture(&s, |_inner| Ok(()));
        assert!(
            matches!(inner, Err(GraphError::AlreadyCapturing { .. })),
            "{inner:?}"
        );
        // SAFETY: N work-items write y[0..N), the whole allocation; the kernel ends.
        unsafe {
            outer
                .launch(&s, &f, &[N], None)?
                .arg(&y)?
                .arg(3u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
    .unwrap();
    assert!(!s.is_capturing());
    g.replay(&s).unwrap();
    assert_eq!(y.to_vec(&s).unwrap(), vec![3u32; N]);
}

/// Holds (panics and catch_unwind mid-capture): inside an outer capture, an inner capture on
/// another stream panics after recording a launch of the OUTER capture that is left without
/// `enqueue`; the panic is caught in the outer closure. The inner stream is released, the
/// abandoned launch records nothing, the outer capture goes on and its graph holds only the
/// launch enqueued afterwards (one node), and replays it; an event of the inner capture is
/// a `ForeignEvent` to the outer one.
#[test]
fn a_panic_caught_mid_nested_capture_leaves_both_captures_consistent() {
    let _one = serial();
    let Some(([s1, s2], _ext)) = fresh_streams([0, 0]) else {
        return;
    };
    let f = set_fn(0);
    let y = Arc::new(DeviceBuffer::<u32>::zeroed(N, &s1).unwrap());
    s1.synchronize().unwrap();
    let g = Graph::capture(&s1, |outer| {
        let mut foreign = None;
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Graph::capture(&s2, |inner| {
                foreign = Some(inner.record_event(&s2)?);
                let _abandoned = outer.launch(&s1, &f, &[N], None)?.arg(&y)?;
                assert!(s2.is_capturing());
                panic!("mid-capture");
            })
        }));
        assert!(caught.is_err());
        assert!(!s2.is_capturing(), "the inner stream stays captured");
        assert!(s1.is_capturing());
        let e = foreign.expect("inner event");
        assert!(matches!(
            outer.wait_event(&s1, &e),
            Err(GraphError::ForeignEvent)
        ));
        // SAFETY: N work-items write y[0..N), the whole allocation; the kernel ends.
        unsafe {
            outer
                .launch(&s1, &f, &[N], None)?
                .arg(&y)?
                .arg(5u32)?
                .arg(N as u32)?
                .enqueue()
        }
    })
    .unwrap();
    assert_eq!(g.len(), 1, "{g:?}");
    assert!(!s1.is_capturing() && !s2.is_capturing());
    g.replay(&s1).unwrap();
    assert_eq!(y.to_vec(&s1).unwrap(), vec![5u32; N]);
}
