//! The `xpu` binary alone, copied out of the build tree and run from elsewhere, runs the
//! demo: its trace is built in.

mod common;

use std::process::Command;

use common::{have_device, scratch, xpu_exe};

#[test]
fn demo_runs_from_another_directory_with_only_the_binary() {
    if !have_device() {
        return;
    }
    let dir = scratch("anywhere");
    let exe = dir.join("x");
    std::fs::copy(xpu_exe(), &exe).unwrap();
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let out = xpu_device::pass_icd_env(&mut Command::new(&exe))
        .args(["demo", "--quick"])
        // The working directory is the system's temporary directory (no source tree there);
        // TMPDIR keeps this test's output apart.
        .current_dir(std::env::temp_dir())
        .env("TMPDIR", &tmp)
        .env_remove("CARGO_MANIFEST_DIR")
        .output()
        .unwrap();
    let text = common::success(&out);
    assert!(
        text.contains("replay of resnet18_train_small.trace.gz (built into xpu)"),
        "{text}"
    );
    assert!(
        text.contains("real and simulated peaks agree: yes"),
        "{text}"
    );
    // The default output directory is under the temporary directory.
    assert!(tmp.join("xpu-demo/resnet18_replay.svg").is_file(), "{text}");
    std::fs::remove_dir_all(dir).unwrap();
}
