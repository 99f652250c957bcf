//! Property test: random multi-stream sequences of allocate / free / record_stream /
//! empty_cache / gate open-close / set_config (splitting, release policy and max_split_size
//! changed while blocks are live or cached), checked after every step against the reference model in
//! `model/`: same results and addresses, same segments and blocks, every statistic equal,
//! no overlapping live blocks, reserved = sum of segment sizes; finally, freeing everything
//! and emptying the cache leaves nothing reserved.

mod model;

use std::sync::Arc;

use model::{Model, ModelAlloc};
use proptest::prelude::*;
use xpu_alloc::sim_stream::SimStream;
use xpu_alloc::{
    AllocConfig, AllocError, DataPtr, DeviceCore, SimulatedSource, StreamKey, StreamRef,
};

const MIB: u64 = 1 << 20;
const STREAMS: usize = 4; // streams 0..3 allocate; stream 3 is also used by record_stream

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        stream: usize,
        size: u64,
    },
    Free {
        pick: usize,
    },
    RecordStream {
        pick: usize,
        stream: usize,
    },
    CloseGate {
        stream: usize,
    },
    OpenGate {
        stream: usize,
    },
    EmptyCache,
    /// `set_config` with [`RUNTIME_CONFIGS`]`[idx % len]` while blocks are live or cached.
    SetConfig {
        idx: usize,
    },
}

/// Configurations a run switches to at run time: splitting and the release policy toggled,
/// `max_split_size` changed under live oversize blocks.
const RUNTIME_CONFIGS: [&str; 8] = [
    "",
    "split_segments:False",
    "release_policy:on_oom",
    "split_segments:False,release_policy:on_oom",
    "max_split_size_mb:24",
    "split_segments:False,max_split_size_mb:24,roundup_power2_divisions:4",
    "regrow_factor:1,large_segment_size_mb:32",
    "split_segments:False,large_segment_size_mb:32,max_non_split_rounding_mb:40",
];

fn size_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 1u64..=4096,
        3 => 4097u64..=MIB,
        2 => (MIB + 1)..=(12 * MIB),
        1 => (12 * MIB)..=(40 * MIB),
    ]
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..3usize, size_strategy()).prop_map(|(stream, size)| Op::Alloc { stream, size }),
        6 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        2 => (any::<usize>(), 0..STREAMS).prop_map(|(pick, stream)| Op::RecordStream { pick, stream }),
        1 => (0..STREAMS).prop_map(|stream| Op::CloseGate { stream }),
        2 => (0..STREAMS).prop_map(|stream| Op::OpenGate { stream }),
        1 => Just(Op::EmptyCache),
        2 => any::<usize>().prop_map(|idx| Op::SetConfig { idx }),
    ]
}

fn config_strategy() -> impl Strategy<Value = (&'static str, u64)> {
    let configs = prop_oneof![
        Just(""),
        Just("release_policy:on_oom"),
        Just("max_split_size_mb:20,release_policy:on_oom"),
        Just("max_split_size_mb:24"),
        Just("roundup_power2_divisions:4"),
        Just(
            "roundup_power2_divisions:[2:8,>:2],max_non_split_rounding_mb:20,max_split_size_mb:32"
        ),
        // Unsplit segments (NVIDIA's OpenCL default): every block a whole segment.
        Just("split_segments:False"),
        Just("split_segments:False,roundup_power2_divisions:4,max_split_size_mb:24"),
    ];
    // A small device exercises the OOM path (cross-stream reuse, release and retry).
    (
        configs,
        prop_oneof![Just(96 * MIB), Just(160 * MIB), Just(1024 * MIB)],
    )
}

struct Live {
    id: u64,
    ptr: DataPtr,
}

fn check(core: &DeviceCore, model: &Model, live: &[Live]) -> Result<(), TestCaseError> {
    prop_assert_eq!(core.memory_stats(), model.stats);
    let snapshot = core.snapshot();
    let view: Vec<_> = snapshot
        .iter()
        .map(|s| {
            let blocks: Vec<_> = s
                .blocks
                .iter()
                .map(|b| (b.address, b.size, b.requested, b.state))
                .collect();
            (s.stream.id as usize, s.address, s.size, blocks)
        })
        .collect();
    prop_assert_eq!(view, model.view());
    let reserved: u64 = snapshot.iter().map(|s| s.size).sum();
    prop_assert_eq!(reserved, core.memory_reserved());
    prop_assert_eq!(reserved, model.used());
    for s in &snapshot {
        let mut at = s.address;
        for b in &s.blocks {
            prop_assert_eq!(b.address, at, "blocks of a segment are contiguous");
            at += b.size;
        }
        prop_assert_eq!(at, s.address + s.size);
    }
    let mut ranges: Vec<(u64, u64)> = live
        .iter()
        .map(|l| (l.ptr.address(), l.ptr.address() + l.ptr.allocated_size()))
        .collect();
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        prop_assert!(w[0].1 <= w[1].0, "live blocks overlap: {:?}", w);
    }
    Ok(())
}

fn run(config_text: &str, capacity: u64, ops: &[Op]) -> Result<(), TestCaseError> {
    let config = AllocConfig::parse(config_text).expect("valid test config");
    let source = Arc::new(SimulatedSource::new(0, capacity, capacity));
    let core = DeviceCore::new(Box::new(source.clone()), config.clone());
    let mut model = Model::new(config, capacity, capacity, STREAMS);
    let streams: Vec<Arc<SimStream>> = (0..STREAMS)
        .map(|i| SimStream::new(StreamKey::new(0, i as u64)))
        .collect();
    let refs: Vec<StreamRef> = streams.iter().map(|s| StreamRef::from(s.clone())).collect();
    let mut live: Vec<Live> = Vec::new();
    for op in ops {
        match *op {
            Op::Alloc { stream, size } => {
                let got = core.allocate(size, &refs[stream]);
                let want = model.alloc(stream, size);
                match (got, want) {
                    (Ok(ptr), ModelAlloc::Ok(id, addr, block_size)) => {
                        prop_assert_eq!(ptr.address(), addr);
                        prop_assert_eq!(ptr.allocated_size(), block_size);
                        prop_assert_eq!(ptr.size(), size);
                        live.push(Live { id, ptr });
                    }
                    (Err(AllocError::OutOfMemory(r)), ModelAlloc::OutOfMemory) => {
                        prop_assert_eq!(r.requested, size);
                        prop_assert_eq!(r.total, capacity);
                    }
                    (Err(AllocError::TooLarge { .. }), ModelAlloc::TooLarge) => {}
                    (got, want) => prop_assert!(
                        false,
                        "allocate({size}) on {stream}: got {got:?}, model {want:?}"
                    ),
                }
            }
            Op::Free { pick } => {
                if !live.is_empty() {
                    let l = live.swap_remove(pick % live.len());
                    model.free(l.id);
                    drop(l.ptr);
                }
            }
            Op::RecordStream { pick, stream } => {
                if !live.is_empty() {
                    let l = &live[pick % live.len()];
                    core.record_stream(&l.ptr, &refs[stream])
                        .expect("own pointer");
                    model.record_stream(l.id, stream);
                }
            }
            Op::CloseGate { stream } => {
                streams[stream].close_gate();
                model.close_gate(stream);
            }
            Op::OpenGate { stream } => {
                streams[stream].open_gate();
                model.open_gate(stream);
            }
            Op::EmptyCache => {
                core.empty_cache();
                model.empty_cache();
            }
            Op::SetConfig { idx } => {
                let text = RUNTIME_CONFIGS[idx % RUNTIME_CONFIGS.len()];
                let config = AllocConfig::parse(text).expect("valid test config");
                core.set_config(config.clone());
                model.set_config(config);
            }
        }
        check(&core, &model, &live)?;
    }
    for l in live.drain(..) {
        model.free(l.id);
        drop(l.ptr);
        prop_assert_eq!(
            core.memory_stats(),
            model.stats,
            "after final free of {}",
            l.id
        );
    }
    core.empty_cache();
    model.empty_cache();
    check(&core, &model, &live)?;
    prop_assert_eq!(core.memory_reserved(), 0);
    prop_assert_eq!(core.memory_allocated(), 0);
    prop_assert_eq!(source.counters().live_segments, 0);
    prop_assert_eq!(source.counters().used, 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn allocator_matches_model((config, capacity) in config_strategy(), ops in prop::collection::vec(op_strategy(), 1..160)) {
        run(config, capacity, &ops)?;
    }
}

/// Found by the property test: a stream's emptied marker FIFO must not keep its place
/// (pending frees are processed in FIFO creation order).
#[test]
fn regression_fifo_order_after_empty_cache() {
    use Op::*;
    #[rustfmt::skip]
    let ops = vec![Alloc{stream:0,size:1,},
Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Free{pick:0,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Alloc{stream:0,size:1,},Free{pick:0,},Free{pick:0,},Free{pick:0,},Free{pick:0,},Alloc{stream:0,size:1,},Free{pick:0,},Alloc{stream:1,size:1,},Alloc{stream:0,size:4098,},RecordStream{pick:12458836689875301794,stream:2,},Alloc{stream:1,size:270309,},Free{pick:16462849308746256034,},Alloc{stream:1,size:1023,},Alloc{stream:2,size:548415,},Free{pick:7719188053326376640,},Alloc{stream:1,size:7900132,},Free{pick:15426317503022533738,},Alloc{stream:2,size:837058,},Alloc{stream:1,size:18187547,},Free{pick:4732095249485559614,},Alloc{stream:1,size:412122,},Free{pick:17436230144254987901,},RecordStream{pick:9146348313040123885,stream:2,},Free{pick:295667860338284299,},Free{pick:8960487160525697672,},Alloc{stream:0,size:32664759,},Free{pick:2579709362481744335,},Alloc{stream:2,size:845651,},Free{pick:5369110546393882112,},Alloc{stream:1,size:252235,},Free{pick:13331537738155586875,},Alloc{stream:1,size:2961,},Free{pick:5978424067629169331,},Alloc{stream:0,size:907,},RecordStream{pick:912404198461531770,stream:3,},EmptyCache,Free{pick:15248951793553226062,},Free{pick:1851373686624439007,},Free{pick:14612188603854643179,},Free{pick:17937156033670038665,},Free{pick:14561640726231992585,}];
    run("", 100663296, &ops).unwrap();
}
