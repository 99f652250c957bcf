//! Re-running the test binary in a child process, for a scenario that could abort or hang the
//! process, or that needs a process in which nothing is initialized yet.
//!
//! Standard library and `xpu_device` only: xpu-device's own tests, which cannot depend on this
//! crate (it depends on xpu-device), compile this file by path (`#[path]`).

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The running test's name: libtest runs each test on a thread named after it
/// (`module::test` below the crate root), the name that [`rerun`] selects it by.
#[must_use]
pub fn test_name() -> String {
    let thread = std::thread::current();
    thread.name().unwrap_or("this test").to_owned()
}

/// How a re-run test ended.
#[derive(Debug)]
pub struct ChildOutput {
    /// Its exit status; `None` when it was killed after the bound.
    pub status: Option<ExitStatus>,
    /// What it printed on stdout.
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
}

/// Runs this test binary again with only `test` selected (exactly, output not captured, one
/// test thread) and the environment variable `env.0` set to `env.1`, waits at most `bound` for
/// it (then kills it, so that a hang is a failed assertion, not a hung suite) and returns how
/// it ended.
///
/// # Panics
/// When the test binary cannot be re-run.
#[must_use]
pub fn rerun(test: &str, env: (&str, &str), bound: Duration) -> ChildOutput {
    let mut command = Command::new(std::env::current_exe().expect("test binary path"));
    // The ICD variables as this process had them before its enumeration: some loaders
    // truncate this process's `OCL_ICD_FILENAMES` in place.
    xpu_device::pass_icd_env(&mut command);
    let mut child = command
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(env.0, env.1)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("re-run the test binary");
    let out = read_all(child.stdout.take().expect("piped stdout"));
    let err = read_all(child.stderr.take().expect("piped stderr"));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if start.elapsed() >= bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        // A bound on the wait, not an ordering.
        std::thread::sleep(Duration::from_millis(10));
    };
    ChildOutput {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
    }
}

/// Reads `pipe` to its end on a thread of its own (so that a child filling one pipe never
/// blocks while the other is read), as text.
fn read_all(mut pipe: impl Read + Send + 'static) -> JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}
