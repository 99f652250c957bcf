//! `XPU_ALLOC_CONF` is read once, at the first use of an allocator, and `set_config`
//! replaces it at run time (own test binary: it sets the process environment).

use xpu_alloc::{AllocError, ConfigError, CONFIG_ENV};

#[test]
fn environment_then_runtime_config() {
    // Before any allocator exists: an invalid environment string.
    std::env::set_var(CONFIG_ENV, "max_split_size_mb:64,bogus_key:1");
    let err = xpu_alloc::current_config().unwrap_err();
    assert!(matches!(&err, ConfigError::UnknownKey { key, .. } if key == "bogus_key"));
    // Read once: changing the variable now has no effect.
    std::env::set_var(CONFIG_ENV, "max_split_size_mb:64");
    assert!(xpu_alloc::current_config().is_err());
    if xpu_device::device_count() > 0 {
        assert!(matches!(
            xpu_alloc::device_allocator(0),
            Err(AllocError::Config(ConfigError::UnknownKey { .. }))
        ));
    } else {
        eprintln!("no device: checking the configuration only");
    }
    xpu_alloc::set_config("max_split_size_mb:64,roundup_power2_divisions:4").unwrap();
    let config = xpu_alloc::current_config().unwrap();
    assert_eq!(
        (config.max_split_size, config.roundup_power2_divisions[0]),
        (64 << 20, 4)
    );
    if xpu_device::device_count() > 0 {
        let alloc = xpu_alloc::device_allocator(0).unwrap();
        assert_eq!(alloc.core().config().max_split_size, 64 << 20);
        assert_eq!(xpu_alloc::memory_stats(0).unwrap().max_split_size, 64 << 20);
        // A runtime change reaches the existing allocator; a bad one changes nothing.
        xpu_alloc::set_config("").unwrap();
        assert_eq!(alloc.core().config().max_split_size, u64::MAX);
        assert!(xpu_alloc::set_config("max_split_size_mb:2").is_err());
        assert_eq!(alloc.core().config().max_split_size, u64::MAX);
    }
}
