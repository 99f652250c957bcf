//! An `XPU_ALLOC_CONF` that is not UTF-8 is a configuration error, as any other invalid
//! value: it was read as if unset, and the defaults silently replaced what the user wrote
//! (review h23's note on the library side). Own test binary: it sets the process
//! environment, which is read once.

use std::os::unix::ffi::OsStringExt;

use xpu_alloc::{AllocError, ConfigError, CONFIG_ENV};

#[test]
fn a_non_utf8_config_is_an_error_not_the_defaults() {
    std::env::set_var(
        CONFIG_ENV,
        std::ffi::OsString::from_vec(b"max_split_size_mb:\xff64".to_vec()),
    );
    let err = xpu_alloc::current_config().unwrap_err();
    assert_eq!(
        err,
        ConfigError::NotUtf8 {
            text: "max_split_size_mb:\u{fffd}64".to_owned()
        },
        "{err}"
    );
    assert!(err.to_string().contains("not UTF-8"), "{err}");
    if xpu_device::device_count() > 0 {
        assert!(matches!(
            xpu_alloc::device_allocator(0),
            Err(AllocError::Config(ConfigError::NotUtf8 { .. }))
        ));
    }
    // A valid configuration set at run time replaces it.
    xpu_alloc::set_config("max_split_size_mb:64").unwrap();
    assert_eq!(
        xpu_alloc::current_config().unwrap().max_split_size,
        64 << 20
    );
}
