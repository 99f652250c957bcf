//! The allocator configuration grammar (reference §4.18) and its typed errors.

use xpu_alloc::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy};

const MIB: u64 = 1 << 20;

#[test]
fn defaults() {
    let c = AllocConfig::parse("").unwrap();
    assert_eq!(c, AllocConfig::default());
    assert_eq!(c.max_split_size, u64::MAX);
    assert_eq!(c.max_non_split_rounding, 20 * MIB);
    assert_eq!(c.roundup_power2_divisions, [0; 16]);
    assert_eq!(
        (c.memory_kind, c.release_policy, c.expandable_segments),
        (MemoryKind::Buffer, ReleasePolicy::BeforeGrow, false)
    );
    assert_eq!(c.regrow_factor, 4);
    assert_eq!(c.regrow_peak_fraction, 0.25);
}

#[test]
fn values() {
    let c = AllocConfig::parse(" max_split_size_mb : 256 , garbage_collection_threshold:0.6,memory_kind:buffer,release_policy:on_oom,expandable_segments:False").unwrap();
    assert_eq!(c.max_split_size, 256 * MIB);
    assert_eq!(c.max_split_size_mb(), Some(256));
    assert!((c.garbage_collection_threshold - 0.6).abs() < 1e-12);
    assert_eq!(
        (c.memory_kind, c.release_policy),
        (MemoryKind::Buffer, ReleasePolicy::OnOom)
    );
    assert_eq!(
        AllocConfig::parse("regrow_factor:2").unwrap().regrow_factor,
        2
    );
    for (text, share) in [("0", 0.0), ("0.25", 0.25), ("1", 1.0)] {
        let c = AllocConfig::parse(&format!("regrow_peak_fraction:{text}")).unwrap();
        assert_eq!(c.regrow_peak_fraction, share);
    }
    let c = AllocConfig::parse("large_segment_size_mb:32").unwrap();
    assert_eq!(
        (c.large_segment_size, c.max_non_split_rounding),
        (32 * MIB, 32 * MIB)
    );
    // PyTorch's pinned-host keys parse (values checked) and change nothing.
    let c = AllocConfig::parse("max_non_split_rounding_mb:64,pinned_use_background_threads:True,pinned_num_register_threads:8,pinned_reserve_segment_size_mb:16").unwrap();
    let plain = AllocConfig::parse("max_non_split_rounding_mb:64").unwrap();
    assert_eq!(c, plain);
    assert_eq!(c.max_non_split_rounding, 64 * MIB);
}

#[test]
fn roundup_power2_divisions() {
    assert_eq!(
        AllocConfig::parse("roundup_power2_divisions:4")
            .unwrap()
            .roundup_power2_divisions,
        [4; 16]
    );
    let c = AllocConfig::parse("roundup_power2_divisions:[64:8,256:4,1024:4,>:1]").unwrap();
    assert_eq!(
        c.roundup_power2_divisions,
        [8, 8, 8, 8, 8, 8, 8, 0, 4, 0, 4, 1, 1, 1, 1, 1]
    );
    let c = AllocConfig::parse("roundup_power2_divisions:[1:2, 2:0, 65536:16]").unwrap();
    assert_eq!(c.roundup_power2_divisions[..3], [2, 0, 0]);
    assert_eq!(c.roundup_power2_divisions[15], 16);
}

fn invalid_key(text: &str) -> String {
    match AllocConfig::parse(text) {
        Err(ConfigError::InvalidValue { key, .. }) => key,
        other => panic!("{text}: expected InvalidValue, got {other:?}"),
    }
}

#[test]
fn bad_values_name_the_key_and_allowed_values() {
    for (text, key) in [
        ("max_split_size_mb:19", "max_split_size_mb"),
        ("max_split_size_mb:abc", "max_split_size_mb"),
        ("max_split_size_mb:99999999999999999", "max_split_size_mb"),
        (
            "large_segment_size_mb:32,max_split_size_mb:31",
            "max_split_size_mb",
        ),
        ("max_non_split_rounding_mb:10", "max_non_split_rounding_mb"),
        ("large_segment_size_mb:10", "large_segment_size_mb"),
        (
            "garbage_collection_threshold:0",
            "garbage_collection_threshold",
        ),
        (
            "garbage_collection_threshold:1.0",
            "garbage_collection_threshold",
        ),
        ("roundup_power2_divisions:3", "roundup_power2_divisions"),
        ("roundup_power2_divisions:0", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[3:4]", "roundup_power2_divisions"),
        ("roundup_power2_divisions:[4:3]", "roundup_power2_divisions"),
        ("expandable_segments:true", "expandable_segments"),
        (
            "pinned_use_background_threads:1",
            "pinned_use_background_threads",
        ),
        (
            "pinned_num_register_threads:256",
            "pinned_num_register_threads",
        ),
        ("memory_kind:usm", "memory_kind"),
        ("release_policy:never", "release_policy"),
        ("regrow_factor:0", "regrow_factor"),
        ("regrow_factor:x", "regrow_factor"),
        ("regrow_peak_fraction:1.5", "regrow_peak_fraction"),
        ("regrow_peak_fraction:-0.25", "regrow_peak_fraction"),
        ("regrow_peak_fraction:NaN", "regrow_peak_fraction"),
        ("regrow_peak_fraction:x", "regrow_peak_fraction"),
        ("max_split_size_mb:[1:2]", "max_split_size_mb"),
    ] {
        assert_eq!(invalid_key(text), key, "{text}");
    }
    let msg = AllocConfig::parse("memory_kind:usm")
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "invalid value 'usm' for allocator config key 'memory_kind': expected buffer"
    );
    // SVM segments were removed (their blocks could be neither copied nor passed to kernels):
    // asking for them is a typed error naming the replacement, not a silent fallback.
    let err = AllocConfig::parse("memory_kind:svm").unwrap_err();
    assert!(
        matches!(&err, xpu_alloc::ConfigError::Unsupported { key, value, .. } if key == "memory_kind" && value == "svm"),
        "{err:?}"
    );
    assert!(err.to_string().contains("use memory_kind:buffer"), "{err}");
    assert!(xpu_alloc::set_config("memory_kind:svm").is_err());
    let msg = AllocConfig::parse("expandable_segments:TRUE")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("True or False (case-sensitive)"), "{msg}");
}

#[test]
fn unknown_key_lists_the_allowed_keys() {
    let err = AllocConfig::parse("max_split_size_mb:64,backend:cudaMallocAsync").unwrap_err();
    let ConfigError::UnknownKey { key, allowed } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(key, "backend");
    assert!(allowed.contains("max_split_size_mb") && allowed.contains("memory_kind"));
    assert!(err
        .to_string()
        .starts_with("unknown key 'backend' in the allocator config; allowed keys: "));
}

#[test]
fn expandable_segments_true_is_unsupported() {
    let err = AllocConfig::parse("expandable_segments:True").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Unsupported { key, value, .. } if key == "expandable_segments" && value == "True")
    );
}

#[test]
fn syntax_errors() {
    for text in [
        "max_split_size_mb",
        "max_split_size_mb:",
        "max_split_size_mb:64,",
        ":64",
        "roundup_power2_divisions:[64:8",
        "a:1:2",
        "roundup_power2_divisions:[64]",
    ] {
        assert!(
            matches!(AllocConfig::parse(text), Err(ConfigError::Syntax { .. })),
            "{text}: {:?}",
            AllocConfig::parse(text)
        );
    }
}
