//! The stream and event figures of `xpu bench`, as one JSON-like line per figure:
//! `cargo run --release -p xpu-event --example figures [device]`.

fn main() {
    if xpu_device::device_count() == 0 {
        eprintln!("no OpenCL device: {}", xpu_device::INSTALL_HINT);
        return;
    }
    let device: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(0);
    let name = xpu_device::get_device_name(device).unwrap_or_default();
    println!("device {device}: {name}");
    match xpu_event::bench::run(device) {
        Ok(figs) => {
            for (n, v) in figs {
                println!("{n:>26} {v:10.2}");
            }
        }
        Err(e) => {
            eprintln!("bench failed: {e}");
            std::process::exit(1);
        }
    }
}
