//! Layers 2-3, streams and events: stream A fills a buffer, stream B waits on A's event and
//! copies it, the host checks the result; events time each stage.
//!
//! `cargo run -p xpu --example stream_pipeline`

mod support;

use xpu::xpu_device::backend::{Buffer, MemFlags};
use xpu::{Event, EventFlags, StreamExt};

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let device = xpu::current_device()?;
    let ctx = xpu::xpu_device::device(device)?.context()?;
    let bytes = 16 << 20;
    let src = Buffer::new(ctx, bytes, MemFlags::default())?;
    let dst = Buffer::new(ctx, bytes, MemFlags::default())?;
    let a = xpu::new_stream(None, 0)?;
    let b = xpu::new_stream(None, -1)?;
    let timing = EventFlags {
        enable_timing: true,
        blocking: false,
    };
    let (mut t0, mut t1, mut t2) = (Event::new(timing), Event::new(timing), Event::new(timing));

    t0.record(&a)?;
    a.queue()?
        .fill(&src, &0x5au32.to_ne_bytes(), 0, bytes, &[])?;
    t1.record(&a)?;
    b.wait_event(&t1)?; // B's later work waits for A's fill; the host does not block.
    b.queue()?.copy(&src, 0, &dst, 0, bytes, &[])?;
    t2.record(&b)?;
    t2.synchronize()?;

    let mut out = vec![0u8; bytes];
    b.queue()?.read(&dst, 0, &mut out)?;
    let ok = out.chunks_exact(4).all(|w| w == 0x5au32.to_ne_bytes());
    println!(
        "fill on A: {:.3} ms, copy on B after waiting: {:.3} ms, result {}",
        t0.elapsed_time(&t1)?,
        t1.elapsed_time(&t2)?,
        if ok { "checked" } else { "WRONG" }
    );
    if !ok {
        return Err("pipeline result mismatch".into());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}
