//! `xpu-event`: see the crate description; the body comes with its issue.
#![forbid(unsafe_code)]
