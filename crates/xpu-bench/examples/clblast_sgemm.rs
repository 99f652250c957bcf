//! The CLBlast figures of `xpu bench --json` ([`xpu_bench::launch::clblast_with`]: CLBlast's
//! SGEMM on xpu streams and caching-allocator blocks vs on a plain queue) for a chosen size,
//! on device 0, as one JSON line.
//!
//! `cargo run --release -p xpu-bench --example clblast_sgemm [N] [REPS]` (default 512 20:
//! `REPS` row-major `N^3` SGEMMs per round). Fails without CLBlast (`libclblast.so.1`).

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n = args.first().and_then(|v| v.parse().ok()).unwrap_or(512);
    let reps = args.get(1).and_then(|v| v.parse().ok()).unwrap_or(20);
    match xpu_bench::launch::clblast_with(0, n, reps) {
        Ok(figures) => {
            let fields: Vec<String> = figures
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v}"))
                .collect();
            println!("{{{}}}", fields.join(", "));
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
