//! `relocation:merge` (xpu_caching's `Relocation::Merge`): live blocks move before a growth,
//! on simulated segments: which blocks never move, and the configuration key. The replays of
//! small layouts and of every trace of `data/traces` under relocation are in xpu-replay's
//! `tests/relocation.rs`. Moves of real memory (PoCL) are in `relocation_device.rs`.

mod common;

use common::relocation::allocated_at;
use common::{sim_core, stream, MIB};
use xpu_alloc::{AllocConfig, ConfigError, RelocationStats};

/// The clearing layout on an allocator of its own, after the 8 MiB request: (segments
/// allocated, relocation figures, whether q's 2 MiB block is still where it was handed
/// out). `record` first records a use of q on another stream.
fn clearing_layout(record: bool) -> (u64, RelocationStats, bool) {
    let (core, _source) = sim_core(1 << 30, "relocation:merge");
    let (_s, s) = stream(1);
    let (_t, t) = stream(2);
    let a = |mib: u64| core.allocate(mib * MIB, &s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    let q_before = allocated_at(&core, 2);
    assert_eq!(q_before.len(), 1);
    if record {
        core.record_stream(&q, &t).unwrap();
    }
    drop((p, r));
    let big = a(8);
    let figures = (
        core.memory_stats().num_device_alloc,
        core.relocation_stats(),
        allocated_at(&core, 2) == q_before,
    );
    drop((q, x, y, z, big));
    figures
}

#[test]
fn a_block_used_on_another_stream_never_moves() {
    // Unrecorded, q (2 MiB, the cheapest run's only live block) moves.
    let (segments, moved, q_in_place) = clearing_layout(false);
    assert_eq!(
        (segments, moved.moves, moved.moved_bytes, q_in_place),
        (2, 1, 2 * MIB, false)
    );
    // Recorded on another stream, q stays; the next cheapest run (r's free 6 MiB and the
    // live 6 MiB block after it) is cleared instead.
    let (segments, moved, q_in_place) = clearing_layout(true);
    assert_eq!(
        (segments, moved.moves, moved.moved_bytes, q_in_place),
        (2, 1, 6 * MIB, true)
    );
}

#[test]
fn a_block_whose_address_was_read_never_moves() {
    let (core, _source) = sim_core(1 << 30, "relocation:merge");
    let (_s, s) = stream(1);
    let a = |mib: u64| core.allocate(mib * MIB, &s).unwrap();
    let (p, q, r, x, y, z) = (a(6), a(2), a(6), a(6), a(6), a(8));
    // As torch's data_ptr: the address, once read, holds for the allocation's life (read
    // before p and r are freed, so the layout helper, which frees them, does not fit here).
    let address = q.address();
    drop((p, r));
    let big = a(8);
    assert_eq!(q.address(), address);
    assert_eq!(allocated_at(&core, 2), vec![address]);
    // The next cheapest run (x after r's free 6 MiB) was cleared instead.
    assert_eq!(core.relocation_stats().moved_bytes, 6 * MIB);
    drop((q, x, y, z, big));
}

#[test]
fn the_relocation_key_parses() {
    assert_eq!(
        AllocConfig::parse("relocation:merge").unwrap().relocation,
        xpu_alloc::Relocation::Merge
    );
    assert_eq!(
        AllocConfig::parse("relocation:off").unwrap().relocation,
        xpu_alloc::Relocation::Off
    );
    // The default (issue 27): `merge`.
    assert_eq!(
        AllocConfig::default().relocation,
        xpu_alloc::Relocation::Merge
    );
    assert!(AllocConfig::default().relocates());
    assert!(!AllocConfig::parse("release_policy:on_oom")
        .unwrap()
        .relocates());
    assert!(!AllocConfig::parse("split_segments:False")
        .unwrap()
        .relocates());
    assert!(!AllocConfig::parse("relocation:off").unwrap().relocates());
    // `merge` moves large blocks only; `merge_all` small ones too.
    assert_eq!(
        AllocConfig::parse("relocation:merge_all")
            .unwrap()
            .relocation,
        xpu_alloc::Relocation::MergeAll
    );
    for (text, small, large) in [
        ("relocation:merge", false, true),
        ("relocation:merge_all", true, true),
        ("relocation:off", false, false),
        ("relocation:merge_all,release_policy:on_oom", false, false),
        ("relocation:merge_all,split_segments:False", false, false),
    ] {
        let config = AllocConfig::parse(text).unwrap();
        assert_eq!(
            (config.relocates_small(), config.relocates()),
            (small, large),
            "{text}"
        );
    }
    assert!(matches!(
        AllocConfig::parse("relocation:always"),
        Err(ConfigError::InvalidValue { ref key, .. }) if key == "relocation"
    ));
}
