//! Layer 4, the caching device allocator: blocks are cached and reused, statistics follow
//! torch.cuda.memory_stats, empty_cache returns the segments.
//!
//! `cargo run -p xpu --example caching_allocator`

mod support;

fn run() -> Result<(), xpu::Error> {
    let a = xpu::allocate(1 << 20)?; // small pool: a 2 MiB segment is reserved
    let address = a.address();
    let b = xpu::allocate(30 << 20)?; // large pool: its own segment
    println!(
        "allocated {} B, reserved {} B",
        xpu::memory_allocated(None)?,
        xpu::memory_reserved(None)?
    );
    drop(a);
    let c = xpu::allocate(1 << 20)?;
    println!(
        "freed and allocated again: same address? {}",
        c.address() == address
    );
    drop((b, c));
    println!("{}", xpu::memory_summary(None, true)?);
    xpu::empty_cache();
    println!(
        "after empty_cache: reserved {} B (peak {} B)",
        xpu::memory_reserved(None)?,
        xpu::max_memory_reserved(None)?
    );
    let flat = xpu::memory_stats_flat(None)?;
    println!(
        "allocation.all.allocated = {}",
        flat["allocation.all.allocated"]
    );
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}
