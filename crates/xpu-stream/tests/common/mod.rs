//! Device checks shared by the tests of this crate: those of the workspace's test crate.

pub use xpu_testing::devices;
