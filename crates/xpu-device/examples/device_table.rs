//! Prints the device table.
fn main() {
    match xpu_device::devices() {
        Ok(devs) => {
            for d in devs {
                let p = d.properties();
                println!(
                    "{}: {} | {} | {:?} | {} MiB | align {} B | svm {} | timer {} ns",
                    d.index(),
                    p.name,
                    p.platform_name,
                    p.device_type,
                    p.total_memory >> 20,
                    p.mem_base_addr_align,
                    p.supports_svm,
                    p.profiling_timer_resolution_ns
                );
            }
        }
        Err(e) => println!("error: {e}"),
    }
}
