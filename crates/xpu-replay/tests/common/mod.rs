//! Helpers shared by the replay tests: replays held to PyTorch's figures, and the allocator
//! helpers of xpu-alloc's integration tests (its `tests/common`, one file for both crates:
//! `manifest_dir`, `sim_core`, `stream`, the relocation helpers, ...).
#![allow(dead_code)]

#[path = "../../../xpu-alloc/tests/common/mod.rs"]
mod alloc;

use std::path::Path;

pub use alloc::*;
use xpu_replay::{self as replay, ReplayOptions, ReplayReport};

/// Replays the trace at `path` (named `file` in messages) in simulation with the default
/// policy and asserts that it never does worse than PyTorch: no OOM, peak reserved bytes at
/// most `torch_reserved` and segment allocations at most `torch_segments`. Returns the
/// report.
pub fn replay_never_worse_than_pytorch(
    path: &Path,
    file: &str,
    torch_reserved: u64,
    torch_segments: u64,
) -> ReplayReport {
    replay_within(path, file, (torch_reserved, torch_segments), "PyTorch's")
}

/// Replays the trace at `path` (named `file` in messages) in simulation with the default
/// policy and asserts no OOM, peak reserved bytes at most `bound.0` and segment allocations
/// at most `bound.1`; `whose` names the bound in messages ("PyTorch's", "today's"). Returns
/// the report.
pub fn replay_within(path: &Path, file: &str, bound: (u64, u64), whose: &str) -> ReplayReport {
    let (reserved, segments) = bound;
    let ours = replay::run(path, &ReplayOptions::default()).unwrap().report;
    assert_eq!(ours.ooms, 0, "{file}");
    assert!(
        ours.peak_reserved <= reserved,
        "{file}: peak reserved {} > {whose} {reserved}",
        ours.peak_reserved
    );
    assert!(
        ours.segment_allocs <= segments,
        "{file}: {} segment allocations > {whose} {segments}",
        ours.segment_allocs
    );
    ours
}

/// The report of replaying the trace at `path` in simulation with PyTorch's own policy
/// (`release_policy:on_oom`).
pub fn replay_with_pytorch_policy(path: &Path) -> ReplayReport {
    let options = ReplayOptions {
        config: Some("release_policy:on_oom".to_owned()),
        ..ReplayOptions::default()
    };
    replay::run(path, &options).unwrap().report
}
