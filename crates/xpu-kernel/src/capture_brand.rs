//! Compile-time checks of [`crate::graph::Capture`]'s lifetime brand (doctests only, built
//! with `cargo test --doc`; nothing here is compiled into the library).
//!
//! Review h79 exchanged the handles of two nested captures with `std::mem::swap` (the inner
//! capture then ended the outer one and the outer built a device-0 graph holding a device-1
//! kernel); `Capture<'brand>` makes that a compile error. Review h80 tried the other safe ways
//! to move one capture's handle or launch into the other's place: each example below must
//! fail to compile, with the error code given. The controls after them must compile: nested
//! captures that use both handles legitimately.
//!
//! swap:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { std::mem::swap(outer, inner); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! option_take:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let mut slot = None; Graph::capture(&s2, |inner| { slot = Some(inner); Ok(()) })?; if let Some(inner) = slot.take() { std::mem::swap(outer, inner); } Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! option_take_outer:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let mut o = Some(outer); Graph::capture(&s2, |inner| { let x = o.take().unwrap(); std::mem::swap(x, inner); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! refcell_launch:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let cell = std::cell::RefCell::new(None); Graph::capture(&s2, |inner| { *cell.borrow_mut() = Some(inner.launch(&s2, &f, &[1], None)?); Ok(()) })?; drop(cell); Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! swap_launches:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { let mut a = outer.launch(&s1, &f, &[1], None)?; let mut b = inner.launch(&s2, &f, &[1], None)?; std::mem::swap(&mut a, &mut b); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! same_brand_helper:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! fn exchange<'x>(a: &mut Capture<'x>, b: &mut Capture<'x>) { std::mem::swap(a, b) } Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { exchange(outer, inner); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! any:
//!
//! ```compile_fail
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let a: &mut dyn std::any::Any = outer; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! boxed_closure:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let mut with: Box<dyn FnMut(&mut Capture<'_>) + '_> = Box::new(|c| std::mem::swap(outer, c)); Graph::capture(&s2, |inner| { with(inner); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! thread_local:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! thread_local! { static SLOT: std::cell::RefCell<Option<&'static mut Capture<'static>>> = const { std::cell::RefCell::new(None) }; } Graph::capture(&s1, |outer| { SLOT.with(|s| *s.borrow_mut() = Some(outer)); Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! scoped_thread_channel:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { let (tx, rx) = std::sync::mpsc::channel(); std::thread::scope(|sc| { sc.spawn(|| Graph::capture(&s2, |inner| { tx.send(inner).unwrap(); Ok(()) })); }); if let Ok(inner) = rx.recv() { std::mem::swap(outer, inner); } Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! panic_payload:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Graph::capture(&s1, |outer| { std::panic::panic_any(outer) })));
//! # Ok(())
//! # }
//! ```
//!
//! escape_to_caller:
//!
//! ```compile_fail,E0521
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! let mut out: Option<&mut Capture<'_>> = None; let _ = Graph::capture(&s1, |c| { out = Some(c); Ok(()) });
//! # Ok(())
//! # }
//! ```
//!
//! nested_use_of_both:
//!
//! ```no_run
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |outer| { Graph::capture(&s2, |inner| { let e = outer.record_event(&s1)?; let _ = inner.record_event(&s2)?; let _ = inner.wait_event(&s2, &e); Ok(()) })?; Ok(()) })?;
//! # Ok(())
//! # }
//! ```
//!
//! helper_over_the_brand:
//!
//! ```no_run
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! fn helper(c: &mut Capture<'_>, s: &Stream) -> Result<(), GraphError> { c.record_event(s).map(|_| ()) } Graph::capture(&s1, |outer| helper(outer, &s1))?;
//! # Ok(())
//! # }
//! ```
//!
//! same_capture_launch_swap:
//!
//! ```no_run
//! # use xpu_kernel::graph::{Capture, Graph, GraphError};
//! # use xpu_kernel::Function;
//! # use xpu_stream::Stream;
//! # fn probe(s1: Stream, s2: Stream, f: Function) -> Result<(), GraphError> {
//! Graph::capture(&s1, |c| { let mut a = c.launch(&s1, &f, &[1], None)?; let mut b = Some(a); let taken = b.take(); drop(taken); Ok(()) })?;
//! # Ok(())
//! # }
//! ```
