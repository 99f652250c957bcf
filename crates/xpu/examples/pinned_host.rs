//! Layer 4, the pinned-host allocator: a non-blocking round trip host -> device -> host.
//!
//! `cargo run -p xpu --example pinned_host`

mod support;

use xpu::xpu_alloc::{host_allocate, host_memory_stats, HostCopy};

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let bytes = 4 << 20;
    let stream = xpu::current_stream(None)?;
    let mut src = host_allocate(bytes)?;
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    let device = xpu::allocate(bytes as u64)?;
    let mut back = host_allocate(bytes)?;
    stream.copy_from_host(&src, &device)?; // returns at once; the use is recorded
    drop(src); // safe: the block is not reused before the copy completes
    stream.copy_to_host(&device, &mut back)?;
    stream.synchronize()?; // optional: reading `back` waits for the copy into it anyway
    let ok = back.iter().enumerate().all(|(i, b)| *b == (i % 251) as u8);
    let stats = host_memory_stats();
    println!(
        "round trip of {bytes} B: {}; pinned reserved {} B in {} segment(s)",
        if ok { "checked" } else { "WRONG" },
        stats.reserved_bytes.current,
        stats.segment.current
    );
    if !ok {
        return Err("round trip mismatch".into());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}
