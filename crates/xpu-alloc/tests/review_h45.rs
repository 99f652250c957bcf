//! Review h45: model_check's regression seed of fc3333e (`split_segments:False`, 96 MiB, then
//! `""` and `max_split_size_mb:24` at run time). Its last allocation, 11916468 bytes, got an
//! 11916800-byte block from the allocator and a 12 MiB one from the model. The allocator
//! regrew a 22 MiB segment: the 40 MiB a consolidation had released, capped by
//! `regrow_peak_fraction` (the default 0.25 since 263ea18) because it would raise the reserved
//! high-water mark, which is below `max_split_size`, so the oversize rule lets it serve the
//! request. The model had no `regrow_peak_fraction`: it checked the uncapped 40 MiB against
//! the oversize rule, refused the regrowth and made the request's own 12 MiB segment. The
//! model was wrong; these tests reproduce the scene on one stream.

mod common;
mod model;

use common::{segment_sizes_mib, sim_core, stream, GIB, MIB};
use model::{Model, ModelAlloc};
use xpu_alloc::AllocConfig;

/// The scene on one stream: 9, 9 and 9 MiB (two 20 MiB segments) freed; 39 MiB consolidates
/// them into one 40 MiB segment (released sizes 20 and 20 remembered) and stays live, so
/// reserved = high-water mark = 40 MiB; then an 11 MiB request (a 12 MiB segment of its
/// own), which a 20 MiB released segment would have served: a regrowth. Returns the
/// allocator's (block size, segment sizes in MiB) and the model's block size; the
/// allocator's and the model's statistics must be equal.
fn scene(config: &str) -> ((u64, Vec<u64>), u64, Result<(), String>) {
    let (core, _source) = sim_core(GIB, config);
    let (_s, s) = stream(0);
    let mut model = Model::new(AllocConfig::parse(config).unwrap(), GIB, GIB, 1);
    let mut live = Vec::new();
    let alloc = |size: u64, model: &mut Model| {
        let ptr = core.allocate(size, &s).unwrap();
        let ModelAlloc::Ok(id, addr, block) = model.alloc(0, size) else {
            panic!("model: allocate({size}) failed");
        };
        // Observed, as model_check does: the block never moves.
        assert_eq!(ptr.address(), addr, "address of allocate({size})");
        (ptr, id, block)
    };
    for _ in 0..3 {
        live.push(alloc(9 * MIB, &mut model));
    }
    assert_eq!(segment_sizes_mib(&core), [20, 20]);
    for (ptr, id, _) in live.drain(..) {
        model.free(id);
        drop(ptr);
    }
    let big = alloc(39 * MIB, &mut model);
    assert_eq!(segment_sizes_mib(&core), [40], "consolidated");
    assert_eq!(core.memory_reserved(), 40 * MIB);
    let (ptr, _id, model_block) = alloc(11 * MIB, &mut model);
    let got = (ptr.allocated_size(), segment_sizes_mib(&core));
    let stats = if core.memory_stats() == model.stats {
        Ok(())
    } else {
        Err(format!(
            "{:?}\nmodel {:?}",
            core.memory_stats(),
            model.stats
        ))
    };
    drop(big);
    (got, model_block, stats)
}

/// With the default `regrow_peak_fraction` (0.25) the regrowth of the 40 MiB released is
/// capped at the room below the mark (0), the request's segment (12 MiB) and a quarter of
/// the 40 MiB mark (10 MiB): 22 MiB, below `max_split_size` (24 MiB), so it serves the
/// request and is split: an 11 MiB block. The model must agree.
#[test]
fn a_regrowth_capped_below_max_split_size_serves_the_request_in_the_model_too() {
    let (got, model_block, stats) = scene("max_split_size_mb:24");
    assert_eq!(got, (11 * MIB, vec![40, 22]), "allocator");
    assert_eq!(model_block, 11 * MIB, "model");
    stats.unwrap();
}

/// Without the cap (`regrow_peak_fraction:0`) the regrowth would be the 40 MiB released, an
/// oversize segment for an 11 MiB request: refused, the request gets its own 12 MiB segment
/// (1 MiB left over is not split off). Allocator and model agree (they did before too).
#[test]
fn an_uncapped_oversize_regrowth_is_refused_in_both() {
    let (got, model_block, stats) = scene("max_split_size_mb:24,regrow_peak_fraction:0");
    assert_eq!(got, (12 * MIB, vec![40, 12]), "allocator");
    assert_eq!(model_block, 12 * MIB, "model");
    stats.unwrap();
}
