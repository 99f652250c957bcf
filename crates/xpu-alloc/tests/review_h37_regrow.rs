//! Review h37 of 34913af (`regrow_peak_fraction`): odd values of the key, and allocation
//! sequences on simulated segments with it set. All held up: these tests pin the behaviour.

mod common;

use common::{
    allocate_mib, cache_three_idle_segments, segment_sizes_mib, sim_core, stream, GIB, MIB,
};
use xpu_alloc::size::{round_size, segment_size};
use xpu_alloc::AllocConfig;

fn parsed(text: &str) -> Result<f64, String> {
    AllocConfig::parse(&format!("regrow_peak_fraction:{text}"))
        .map(|c| c.regrow_peak_fraction)
        .map_err(|e| e.to_string())
}

/// Odd spellings: tiny shares, `1.0`, spaces, signs; infinities rejected. `-0` reads as 0 (no
/// limit), as `0` does.
#[test]
fn regrow_peak_fraction_odd_values_parse_or_are_rejected() {
    for (text, want) in [
        ("0", 0.0),
        ("1", 1.0),
        ("1.0", 1.0),
        ("1e0", 1.0),
        ("1e-300", 1e-300),
        ("4.9e-324", 4.9e-324),
        ("0.0000001", 1e-7),
        (" 0.25 ", 0.25),
        ("+0.5", 0.5),
        (".5", 0.5),
        ("1.0000000000000001", 1.0),
    ] {
        assert_eq!(parsed(text), Ok(want), "{text:?}");
    }
    let minus_zero = parsed("-0").unwrap();
    assert!(minus_zero == 0.0 && minus_zero <= 0.0, "{minus_zero}");
    for text in [
        "inf",
        "infinity",
        "-inf",
        "1.0000001",
        "2",
        "-1e-300",
        "NaN",
        "0.25x",
    ] {
        let e = parsed(text).expect_err(text);
        assert!(e.contains("regrow_peak_fraction"), "{text:?}: {e}");
    }
}

/// A regrowth that the memory fraction refuses falls back to the request's own segment, with
/// and without a share (1 GiB device, 60 MiB allowed: 42 MiB live, a 14 MiB request).
#[test]
fn a_regrowth_over_the_memory_fraction_falls_back_to_the_requests_segment() {
    for cfg in [
        "",
        "regrow_peak_fraction:0.25",
        "regrow_peak_fraction:1e-300",
        "regrow_peak_fraction:1",
    ] {
        let (_, s) = stream(0);
        let (core, source) = sim_core(GIB, cfg);
        cache_three_idle_segments(&core, &s);
        core.set_memory_fraction(60.0 / 1024.0).unwrap();
        let live = allocate_mib(&core, &s, &[30, 12]);
        assert_eq!(segment_sizes_mib(&core), vec![42], "{cfg:?}");
        let p = core.allocate(14 * MIB, &s);
        assert!(p.is_ok(), "{cfg:?}: {:?}", p.err().map(|e| e.to_string()));
        assert_eq!(segment_sizes_mib(&core), vec![42, 14], "{cfg:?}");
        assert!(core.memory_reserved() <= 60 * MIB, "{cfg:?}");
        drop((live, p));
        common::assert_empty_cache_releases_everything(&core, &source);
    }
}

/// Random allocate/free sequences of large blocks (1 to 64 MiB, some not whole pages) on two
/// streams, with tiny, small and whole shares: no allocation fails (a 1 GiB device, at most
/// 256 MiB live), every allocation raises the reserved peak by at most its own segment plus the
/// share of the mark before it (the rule's bound; a consolidation or a plain growth adds at
/// most its segment), and emptying the cache releases everything. Without the share
/// (`regrow_peak_fraction:0`) the bound fails at once (seed 1: a 224 MiB regrowth for a 55 MiB
/// request), so it is live.
#[test]
fn random_sequences_with_a_share_keep_the_peak_bound_and_release_everything() {
    for share in ["1e-300", "0.0000001", "0.25", "1"] {
        let cfg = format!("regrow_peak_fraction:{share}");
        let x: f64 = share.parse().unwrap();
        let config = AllocConfig::parse(&cfg).unwrap();
        for seed in 1..40u64 {
            let (core, source) = sim_core(GIB, &cfg);
            let streams = [stream(0).1, stream(1).1];
            let mut next = common::lcg(seed);
            let mut live: Vec<(u64, xpu_alloc::DataPtr)> = Vec::new();
            for step in 0..400 {
                let total: u64 = live.iter().map(|(n, _)| n).sum();
                if next() % 3 == 0 || total > 256 * MIB {
                    if !live.is_empty() {
                        let i = usize::try_from(next() % live.len() as u64).unwrap();
                        live.swap_remove(i);
                    }
                    continue;
                }
                let n = (1 + next() % 64) * MIB - (next() % 4) * 4096;
                let s = &streams[usize::from(next() % 2 == 1)];
                let peak = u64::try_from(core.memory_stats().reserved_bytes.all.peak).unwrap();
                let reserved = core.memory_reserved();
                let p = core
                    .allocate(n, s)
                    .unwrap_or_else(|e| panic!("{cfg} seed {seed} step {step}: {n}: {e}"));
                let seg = segment_size(round_size(n, &config), &config);
                let after = u64::try_from(core.memory_stats().reserved_bytes.all.peak).unwrap();
                #[allow(
                    clippy::cast_possible_truncation,
                    clippy::cast_sign_loss,
                    clippy::cast_precision_loss
                )]
                let bet = (peak as f64 * x) as u64;
                // The rule: a regrowth takes at most the room below the mark, its own segment
                // and the share, so the mark rises by at most the segment and the share. (Until
                // 2026-12-06 this read `reserved + seg + bet`: tighter than the rule, and held
                // only while no regrowth came with room below the mark; a consolidation that
                // counts occupied segments in, `consolidate_live`, the default since, remembers
                // them as released too, and seed 3 then regrew 84 MiB for 24 with 60 below the
                // mark.)
                let bound = peak + seg + bet;
                assert!(
                    after <= bound,
                    "{cfg} seed {seed} step {step}: {n} B: peak {peak} -> {after} > {bound} \
                     (reserved before {reserved}, segment {seg}; segments {:?})",
                    segment_sizes_mib(&core)
                );
                live.push((n, p));
            }
            drop(live);
            common::assert_empty_cache_releases_everything(&core, &source);
        }
    }
}
