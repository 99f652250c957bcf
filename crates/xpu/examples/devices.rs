//! Layer 1, devices: the device table, the current device and a device guard.
//!
//! `cargo run -p xpu --example devices`

mod support;

fn run() -> Result<(), xpu::Error> {
    println!(
        "{} device(s), available: {}",
        xpu::device_count(),
        xpu::is_available()
    );
    for i in 0..xpu::device_count() {
        let p = xpu::get_device_properties(Some(i))?;
        println!(
            "  {i}: {} | {} | {} | {} MiB | max alloc {} MiB | align {} B | SVM {}",
            p.name,
            p.platform_name,
            p.device_type.as_str(),
            p.total_memory >> 20,
            p.max_alloc_size >> 20,
            p.mem_base_addr_align,
            p.supports_svm
        );
    }
    println!("current device: {}", xpu::current_device()?);
    if xpu::device_count() > 1 {
        let _guard = xpu::device(1)?;
        println!("inside the guard: {}", xpu::current_device()?);
    }
    println!("after: {}", xpu::current_device()?);
    Ok(())
}

fn main() -> std::process::ExitCode {
    support::main(run)
}
