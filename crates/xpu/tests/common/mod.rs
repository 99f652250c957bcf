//! Shared helpers for facade tests: those of the workspace's test crate.
#![allow(unused_imports)]

pub use xpu_testing::{have_device, run_scenario, scenario, scenario_test};
