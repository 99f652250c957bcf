//! The two-stream pipeline of `xpu demo`: `cargo run -p xpu-event --example pipeline [MiB]`.

fn main() {
    if xpu_device::device_count() == 0 {
        eprintln!("no OpenCL device: {}", xpu_device::INSTALL_HINT);
        return;
    }
    let mib: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(16);
    match xpu_event::demo::two_stream_pipeline(0, mib << 20) {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("pipeline failed: {e}");
            std::process::exit(1);
        }
    }
}
