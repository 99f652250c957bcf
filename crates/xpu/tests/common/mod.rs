//! Shared helpers for facade tests.

/// True when a device exists; otherwise prints a skip message, or panics under
/// `XPU_REQUIRE_DEVICE=1`.
pub fn have_device(test: &str) -> bool {
    if xpu::device_count() > 0 {
        return true;
    }
    assert!(
        !xpu::xpu_device::require_device(),
        "{test}: no OpenCL device found and XPU_REQUIRE_DEVICE=1"
    );
    eprintln!("{test}: skipped, no OpenCL device");
    false
}

/// The scenario this process must run, when a test re-executed its own binary for it.
#[allow(dead_code)]
pub fn scenario() -> Option<String> {
    std::env::var("XPU_TEST_SCENARIO").ok()
}

/// Runs this test binary again with only `test` selected and `XPU_TEST_SCENARIO=scenario` (a
/// fresh process: nothing initialized), waits at most `bound` for it (then kills it, so a hang
/// is a failed assertion, not a hung suite) and returns its exit code (`None` when killed)
/// and its output (stdout then stderr).
#[allow(dead_code)]
pub fn run_scenario(
    test: &str,
    scenario: &str,
    bound: std::time::Duration,
) -> (Option<i32>, String) {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let mut child = Command::new(std::env::current_exe().expect("test binary path"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("XPU_TEST_SCENARIO", scenario)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("re-run the test binary");
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = std::time::Instant::now();
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait for the scenario") {
            break status.code();
        }
        if start.elapsed() >= bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        // A bound on the wait, not an ordering.
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    (code, text)
}
