//! `relocation:merge` (xpu_caching's `Relocation::Merge`) judged by replays: live blocks move
//! before a growth. The small layouts show each step on simulated segments; the golden test
//! holds every trace of `data/traces` to the figures of the simulated experiment the rule was
//! measured with (branch `experiment/relocation-sim`, docs/relocation.md). The allocator's own
//! relocation tests (which blocks never move, the configuration key) are xpu-alloc's
//! `tests/relocation.rs`; moves of real memory (PoCL) are in its `relocation_device.rs`.

mod common;

use std::collections::BTreeMap;

use common::{manifest_dir, MIB};
use xpu_alloc::RelocationStats;
use xpu_replay::{self as replay, ReplayOptions, ReplayReport};

/// Replays the trace text `text` on the simulated H200 with `config`.
fn replay_text(text: &str, config: &str) -> ReplayReport {
    replay::run_reader(
        "relocation",
        text.as_bytes(),
        &ReplayOptions {
            config: Some(config.to_owned()),
            ..ReplayOptions::default()
        },
    )
    .unwrap()
    .report
}

fn alloc(addr: u64, mib: u64) -> String {
    format!("alloc {addr} {} 0\n", mib * MIB)
}

fn free(addr: u64, mib: u64) -> String {
    format!(
        "free_requested {addr} {size} 0\nfree_completed {addr} {size} 0\n",
        size = mib * MIB
    )
}

/// Segment A (20 MiB) holds p 6, q 2, r 6, s 6 MiB; segment B holds t 6 and u 8 MiB and a
/// 6 MiB free tail. p and r are freed: A has two free 6 MiB pieces around the live q. An
/// 8 MiB request then fits no free block. Relocation moves q (2 MiB) into B's free tail, so
/// A's first 14 MiB are free and serve the request: two segments instead of three. Then
/// every block is freed (q at its new place) and two 20 MiB requests take the two whole
/// idle segments.
fn clearing_trace() -> String {
    let (p, q, r, s, t, u, big, last) = (
        0x1000_0000_u64,
        0x1060_0000_u64,
        0x1080_0000_u64,
        0x10e0_0000_u64,
        0x2000_0000_u64,
        0x2060_0000_u64,
        0x3000_0000_u64,
        0x4000_0000_u64,
    );
    [
        alloc(p, 6),
        alloc(q, 2),
        alloc(r, 6),
        alloc(s, 6),
        alloc(t, 6),
        alloc(u, 8),
        free(p, 6),
        free(r, 6),
        alloc(big, 8),
        free(q, 2),
        free(s, 6),
        free(t, 6),
        free(u, 8),
        free(big, 8),
        alloc(last, 20),
        alloc(last + 20 * MIB, 20),
    ]
    .concat()
}

#[test]
fn a_request_that_fits_after_moving_a_live_block_takes_no_new_segment() {
    let off = replay_text(&clearing_trace(), "relocation:off");
    assert_eq!((off.peak_reserved, off.segment_allocs), (60 * MIB, 3));
    assert_eq!(off.relocation, None);
    let on = replay_text(&clearing_trace(), "relocation:merge");
    assert_eq!((on.unmatched_frees, on.ooms), (0, 0));
    // The segment count also says that the moved block's free found it at its new place:
    // else B would stay split and the second 20 MiB request would grow a third segment.
    assert_eq!((on.peak_reserved, on.segment_allocs), (40 * MIB, 2));
    assert_eq!(
        on.relocation,
        Some(RelocationStats {
            relocations: 1,
            moves: 1,
            moved_bytes: 2 * MIB,
            ..RelocationStats::default()
        })
    );
}

/// Two 20 MiB segments each hold one live 2 MiB block and 18 MiB free; two 12 MiB
/// segments are idle. A 40 MiB request fits nowhere, no run of one segment spans it, and
/// the idle segments (24 MiB) are too few to merge. Relocation empties one 20 MiB segment
/// (its 2 MiB block moves into the other's free space), so the idle segments add up to
/// 44 MiB and the release policy merges them into one segment that serves the request:
/// the reserved bytes stay at 64 MiB where growing takes them to 104 MiB.
fn emptying_trace() -> String {
    let (x1, f1, x2, f2, a, b, d) = (
        0x1000_0000_u64,
        0x1020_0000_u64,
        0x2000_0000_u64,
        0x2020_0000_u64,
        0x3000_0000_u64,
        0x4000_0000_u64,
        0x5000_0000_u64,
    );
    [
        alloc(x1, 2),
        alloc(f1, 18),
        alloc(x2, 2),
        alloc(f2, 18),
        alloc(a, 12),
        alloc(b, 12),
        free(a, 12),
        free(b, 12),
        free(f1, 18),
        free(f2, 18),
        alloc(d, 40),
        free(d, 40),
        free(x1, 2),
        free(x2, 2),
    ]
    .concat()
}

#[test]
fn emptying_a_segment_lets_the_release_policy_merge_instead_of_growing() {
    let off = replay_text(&emptying_trace(), "relocation:off");
    assert_eq!((off.peak_reserved, off.segment_allocs), (104 * MIB, 5));
    let on = replay_text(&emptying_trace(), "relocation:merge");
    assert_eq!((on.unmatched_frees, on.ooms), (0, 0));
    assert_eq!((on.peak_reserved, on.segment_allocs), (64 * MIB, 5));
    assert_eq!(
        on.relocation,
        Some(RelocationStats {
            moves: 1,
            moved_bytes: 2 * MIB,
            emptied_segments: 1,
            emptied_bytes: 20 * MIB,
            ..RelocationStats::default()
        })
    );
}

#[test]
fn pytorch_s_policy_never_relocates() {
    let on = replay_text(&clearing_trace(), "release_policy:on_oom,relocation:merge");
    assert_eq!((on.peak_reserved, on.segment_allocs), (60 * MIB, 3));
    // A configuration that never relocates reports no relocation figures.
    assert_eq!(on.relocation, None);
}

/// The figures of one trace under `relocation:merge_all` (the golden file's entry).
#[derive(Debug, PartialEq, Eq, serde::Deserialize)]
#[allow(dead_code)] // every figure is read from the file; the test compares some
struct Golden {
    peak_reserved: u64,
    segment_allocs: u64,
    relocations: u64,
    moves: u64,
    moved_bytes: u64,
    emptied_segments: u64,
    emptied_bytes: u64,
}

#[derive(serde::Deserialize)]
struct GoldenFile {
    traces: BTreeMap<String, Golden>,
}

/// Replays every trace of the folder `sub` of `data/traces` named in the golden file with
/// `relocation:merge_all` (the experiment moved blocks of both pools; the default `merge`
/// moves large blocks only) and compares peak reserved bytes and segment allocations exactly;
/// returns how many it compared. The move counts are not compared: 4 of the 38 traces make
/// a relocation or a few moves more or fewer than the experiment, with the same peaks and
/// segment counts. Threads' caches play no part in that: the replay reads the statistics
/// after every event, which flushes them, so none serves a hand-out in a replay (letting
/// relocating blocks into them changed no trace's figures).
fn matches_the_experiment(sub: &str) -> usize {
    let root = manifest_dir().join("../../data/traces");
    let text = std::fs::read_to_string(root.join("relocation_merge_golden.json")).unwrap();
    let golden: GoldenFile = serde_json::from_str(&text).unwrap();
    let mut compared = 0;
    for (name, want) in &golden.traces {
        let (folder, file) = name.rsplit_once('/').unwrap_or(("", name));
        if folder != sub {
            continue;
        }
        // The experiment's regrowth had no cap on the high-water mark, and its consolidations
        // took idle segments only.
        let options = ReplayOptions {
            config: Some(
                "relocation:merge_all,regrow_peak_fraction:0,consolidate_live:False".to_owned(),
            ),
            ..ReplayOptions::default()
        };
        let r = replay::run(&root.join(name), &options).unwrap().report;
        let moved = r.relocation.expect("relocation figures");
        assert_eq!(
            (r.peak_reserved, r.segment_allocs),
            (want.peak_reserved, want.segment_allocs),
            "{file}"
        );
        // Where the experiment moved blocks, so does the allocator.
        assert_eq!(moved.moves > 0, want.moves > 0, "{file}");
        assert_eq!(
            moved.emptied_segments > 0,
            want.emptied_segments > 0,
            "{file}"
        );
        compared += 1;
    }
    compared
}

/// One test per folder: `golden::$name` compares that folder's traces and checks how many.
macro_rules! golden {
    ($($name:ident: $sub:literal, $count:literal;)*) => {
        mod golden {
            $(
                #[test]
                fn $name() {
                    assert_eq!(crate::matches_the_experiment($sub), $count);
                }
            )*
        }
    };
}

golden! {
    design: "", 6;
    validation: "validation", 4;
    varshape: "varshape", 4;
    varshape_validation: "varshape/validation", 4;
    heldout: "varshape/heldout", 4;
    heldout2: "varshape/heldout2", 4;
    heldout3: "varshape/heldout3", 6;
    heldout4: "varshape/heldout4", 6;
}

/// A summary file's field (`max_reserved`, `segment_allocs`) beside a trace.
fn summary(path: &std::path::Path, field: &str) -> u64 {
    let text = std::fs::read_to_string(path).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v[field].as_u64().unwrap()
}

/// Issue 27's goals, on the fifth held-out set (`data/traces/varshape/heldout5`, judged once
/// on 2026-12-04 at 18:36 UTC, after `merge` was final): with `relocation:merge` every trace
/// stays within PyTorch's default on peak reserved bytes and on segment allocations, the
/// geometric mean of peak reserved over PyTorch's expandable-segments figure is at most
/// 1.03, and every inference trace is at most 1.10 of it. The figures are pinned too.
#[test]
fn the_fifth_held_out_set_meets_issue_27_s_goals_with_relocation() {
    held_out_goals(
        "heldout5",
        &[
            ("debertav2_varlen_infer", true, 2_644_508_672, 50),
            ("electra_mlm_varlen_infer", true, 3_057_647_616, 30),
            ("fcn_varsize_infer", true, 2_118_123_520, 32),
            ("qwen2_generate_varprompt", true, 645_922_816, 29),
            ("regnet_varres_train", false, 4_443_865_088, 196),
            (
                "transformer_seq2seq_varlen_train",
                false,
                7_581_204_480,
                137,
            ),
        ],
        &[],
    );
}

/// Issue 27's goals on the sixth held-out set (`data/traces/varshape/heldout6`, judged once
/// on 2026-12-04 at 21:33 UTC): with `relocation:merge` every trace stays within PyTorch's
/// default and the geometric mean over expandable is at most 1.03 (1.018), but two inference
/// traces are above 1.10, both where a sequence length grows over the run and a request
/// exceeds every free piece: longformer_growlen_infer (1.152) and wav2vec2_varlen_infer
/// (1.106). Those two misses of the third goal are pinned here as figures, not as goals.
/// Since a regrowth's rise of the high-water mark is capped (`regrow_peak_fraction:0.25`, the
/// default after the eleventh set's judgement): longformer 1.049, one segment allocation
/// more (49, PyTorch's default 50). Since occupied segments join consolidations
/// (`consolidate_live`, the default after the twelfth set's judgement): dinov2_varres_infer
/// 0.931 to 0.872, and wav2vec2 1.106 to 1.247 (the merged segment keeps the moved blocks,
/// so the next, larger request finds nothing idle to merge).
#[test]
fn the_sixth_held_out_set_with_relocation() {
    held_out_goals(
        "heldout6",
        &[
            ("detr_varsize_infer", true, 2_533_359_616, 41),
            ("dinov2_varres_infer", true, 1_690_304_512, 45),
            ("gemma_generate_growprompt", true, 941_621_248, 34),
            ("longformer_growlen_infer", true, 2_426_404_864, 49),
            ("mobilevit_varres_train", false, 6_140_461_056, 124),
            ("wav2vec2_varlen_infer", true, 3_592_421_376, 38),
        ],
        &["wav2vec2_varlen_infer"],
    );
}

/// The seventh held-out set (`data/traces/varshape/heldout7`), judged once on 2026-12-05 at
/// 03:57 UTC, misses issue 27's goals with `relocation:merge`: a geometric mean of 1.053 over
/// expandable, bilstm_packed_infer (1.191) and yolos_varsize_infer (1.135) over 1.10, and
/// phi_generate_varprompt one segment allocation over PyTorch's 49 (as without relocation).
/// Since small blocks stay put under `merge` (moving them is `merge_all`), the geometric mean
/// is 1.054 and phi makes PyTorch's 49 segment allocations: one small segment of 2 MiB
/// fewer released and regrown. Since relocation's search for segments to empty tries each
/// start in turn (issue 27's tenth round, judged on the tenth set): 1.036, yolos 1.004.
#[test]
fn the_seventh_held_out_set_with_relocation() {
    held_out_misses(
        "heldout7",
        &[
            ("bilstm_packed_infer", true, 11_744_051_200, 37),
            ("clip_varbatch_infer", true, 1_256_194_048, 69),
            ("gptbigcode_generate_growbatch", true, 553_648_128, 35),
            ("phi_generate_varprompt", true, 1_017_118_720, 49),
            ("resnext_varres_train", false, 6_996_099_072, 142),
            ("segformer_varres_infer", true, 9_577_693_184, 37),
            ("yolos_varsize_infer", true, 499_122_176, 36),
        ],
        &["bilstm_packed_infer"],
        &[],
        Some(1.036),
    );
}

/// The eighth held-out set (`data/traces/varshape/heldout8`), judged once on 2026-12-05 at
/// 05:25 UTC with `relocation:merge` as the default: every trace within PyTorch's default, a
/// geometric mean of 1.053 over expandable, fasterrcnn_mobilenet_varsize_infer (1.123) and
/// vgg16bn_varres_infer (1.112) over 1.10. Since relocation's search for segments to empty
/// tries each start in turn: 0.978, fasterrcnn_mobilenet 0.847, gru_lm_varbptt_train 1.235
/// to 0.977.
#[test]
fn the_eighth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout8",
        &[
            ("albert_varlen_train", false, 24_853_348_352, 133),
            ("bloom_generate_varprompt", true, 2_126_512_128, 45),
            (
                "fasterrcnn_mobilenet_varsize_infer",
                true,
                2_839_543_808,
                39,
            ),
            ("gru_lm_varbptt_train", false, 15_571_353_600, 22),
            ("lraspp_varsize_infer", true, 1_851_785_216, 17),
            ("marian_translate_varbatch", true, 2_252_341_248, 122),
            ("vgg16bn_varres_infer", true, 3_107_979_264, 20),
        ],
        &["vgg16bn_varres_infer"],
        &[],
        Some(0.978),
    );
}

/// The ninth held-out set (`data/traces/varshape/heldout9`), judged once on 2026-12-05 at
/// 12:36 UTC by the test fixed in advance in its README (the default `relocation:merge` kept:
/// `merge_all` gives the same geometric mean and the same trace over PyTorch's default):
/// a geometric mean of 1.115 over expandable, modernbert_varlen_infer (1.225) and
/// shufflenet_varres_infer (1.409) over 1.10, and pegasus_summarize_varbatch 0.9% over
/// PyTorch's default peak reserved (1.000 with relocation off). Since relocation's search for
/// segments to empty tries each start in turn (a change measured on this set, among others,
/// before the tenth set judged it): 1.074, shufflenet 1.083. Since a regrowth's rise of the
/// high-water mark is capped (`regrow_peak_fraction:0.25`): 1.059, modernbert 1.225 to
/// 1.112, one segment allocation more (29).
#[test]
fn the_ninth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout9",
        &[
            (
                "deeplabv3_mobilenet_varres_train",
                false,
                4_896_849_920,
                129,
            ),
            ("embbag_recsys_varbatch_infer", true, 553_648_128, 22),
            ("falcon_generate_varprompt", true, 1_298_137_088, 37),
            ("modernbert_varlen_infer", true, 1_807_745_024, 29),
            ("pegasus_summarize_varbatch", true, 673_185_792, 50),
            ("shufflenet_varres_infer", true, 576_716_800, 12),
            ("tcn_ctc_varlen_train", false, 4_127_195_136, 50),
        ],
        &["modernbert_varlen_infer"],
        &["pegasus_summarize_varbatch"],
        Some(1.059),
    );
}

/// The tenth held-out set (`data/traces/varshape/heldout10`, recorded on an H100), judged
/// once on 2026-12-05 at 17:49 UTC by the test fixed in advance in `varshape/README.md`: the
/// candidate (relocation's search for segments to empty tries each start in turn) is kept:
/// a geometric mean of 1.027 over expandable (one greedy order: 1.041), the same two traces
/// over PyTorch's default segment allocations under both (funnel_mlm_varlen_train 241
/// against 218, xlnet_varlen_infer 59 against 47: issue 27's first goal missed), and
/// gcn_varnodes_infer (1.124) and r3d18_varclip_infer (1.437) over 1.10.
/// ssdlite_varbatch_infer's recording lost its first events (the recorder keeps 5,000,000
/// history entries): its figures are pinned, but are not comparable with PyTorch's; on the
/// six other traces the geometric mean is 1.047 (one greedy order: 1.063). Since a
/// regrowth's rise of the high-water mark is capped (`regrow_peak_fraction:0.25`): 1.016,
/// r3d18 1.437 to 1.331.
#[test]
fn the_tenth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout10",
        &[
            ("codegen_generate_varprompt", true, 2_092_957_696, 43),
            ("funnel_mlm_varlen_train", false, 28_644_999_168, 241),
            ("gcn_varnodes_infer", true, 2_078_277_632, 12),
            ("r3d18_varclip_infer", true, 2_805_989_376, 20),
            ("raft_small_varres_infer", true, 1_038_090_240, 27),
            ("ssdlite_varbatch_infer", true, 1_136_656_384, 22),
            ("xlnet_varlen_infer", true, 2_529_165_312, 59),
        ],
        &["gcn_varnodes_infer", "r3d18_varclip_infer"],
        &["funnel_mlm_varlen_train", "xlnet_varlen_infer"],
        Some(1.016),
    );
}

/// The eleventh held-out set (`data/traces/varshape/heldout11`, recorded on an H100), judged
/// once on 2026-12-06 at 03:25 UTC by the test fixed in advance in `varshape/README.md`: the
/// candidate (`regrow_peak_fraction:0.25`) gives exactly the default's figures on all seven
/// traces, so it is at or below it and puts no new trace over PyTorch's default, and became
/// the default. A geometric mean of 1.146 over expandable; gptneo_generate_varbatch (29
/// segment allocations against 27) and mpnet_mlm_varlen_train (210 against 203) over PyTorch's
/// default (issue 27's first goal missed); googlenet_varres_infer (1.205),
/// nystromformer_varlen_infer (1.602) and s3d_varclip_infer (1.312) over 1.10. Since
/// occupied segments join consolidations (`consolidate_live`, the default after the twelfth
/// set's judgement): 1.093, nystromformer 1.150 (peak reserved 0.718 of PyTorch's default),
/// mnasnet_varres_train 1.023 to 1.018.
#[test]
fn the_eleventh_held_out_set_with_relocation() {
    held_out_misses(
        "heldout11",
        &[
            ("googlenet_varres_infer", true, 1_134_559_232, 18),
            ("gptneo_generate_varbatch", true, 761_266_176, 29),
            ("maxvit_varbatch_infer", true, 2_130_706_432, 50),
            ("mnasnet_varres_train", false, 5_127_536_640, 146),
            ("mpnet_mlm_varlen_train", false, 35_995_516_928, 210),
            ("nystromformer_varlen_infer", true, 23_358_078_976, 36),
            ("s3d_varclip_infer", true, 5_779_750_912, 19),
        ],
        &[
            "googlenet_varres_infer",
            "nystromformer_varlen_infer",
            "s3d_varclip_infer",
        ],
        &["gptneo_generate_varbatch", "mpnet_mlm_varlen_train"],
        Some(1.093),
    );
}

/// The twelfth held-out set (`data/traces/varshape/heldout12`, recorded on an H100), judged
/// once on 2026-12-06 at 05:49 UTC by the test fixed in advance in `varshape/README.md`: the
/// candidate (`consolidate_live:True`) gives exactly the default's figures on all seven
/// traces, so it is at or below it and puts no new trace over PyTorch's default, and became
/// the default. A geometric mean of 1.004 over expandable, no inference trace over 1.10, and
/// swin3d_varclip_infer one segment allocation over PyTorch's default (36 against 35: issue
/// 27's first goal missed; peak reserved 0.765 of PyTorch's).
#[test]
fn the_twelfth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout12",
        &[
            ("bigbird_varlen_infer", true, 11_039_408_128, 51),
            ("distilbert_mlm_varlen_train", false, 21_795_700_736, 99),
            ("fnet_mlm_varlen_train", false, 22_223_519_744, 136),
            ("gptj_generate_varprompt", true, 1_149_239_296, 27),
            ("mixtral_generate_varbatch", true, 2_409_627_648, 37),
            ("squeezenet_varres_infer", true, 2_818_572_288, 9),
            ("swin3d_varclip_infer", true, 3_657_433_088, 36),
        ],
        &[],
        &["swin3d_varclip_infer"],
        Some(1.004),
    );
}

/// The thirteenth held-out set (`data/traces/varshape/heldout13`, recorded on an H100), judged
/// once on 2026-12-06 at 09:30 UTC against the default as it was (no new candidate that
/// round; the test written in `varshape/README.md` before the recording): a geometric mean of
/// 1.058 over expandable (issue 27's 1.03 missed), two inference traces over 1.10
/// (ssd300_varbatch_infer 1.263, hubert_varlen_infer 1.116, where PyTorch's default is 2.174
/// and 1.126) and stablelm_generate_varprompt one segment allocation over PyTorch's default
/// (39 against 38; peak reserved 0.940 of PyTorch's).
#[test]
fn the_thirteenth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout13",
        &[
            ("efficientnetv2_varres_train", false, 9_686_745_088, 326),
            ("hubert_varlen_infer", true, 2_394_947_584, 26),
            ("mbart_translate_varbatch", true, 515_899_392, 47),
            ("mobilebert_varlen_infer", true, 631_242_752, 48),
            ("olmo_generate_varbatch", true, 637_534_208, 24),
            ("ssd300_varbatch_infer", true, 3_196_059_648, 26),
            ("stablelm_generate_varprompt", true, 819_986_432, 39),
        ],
        &["hubert_varlen_infer", "ssd300_varbatch_infer"],
        &["stablelm_generate_varprompt"],
        Some(1.058),
    );
}

/// The fourteenth held-out set (`data/traces/varshape/heldout14`, recorded on an H100), judged
/// once on 2026-12-06 at 13:12 UTC against the default as it was (the fifteenth round kept no
/// candidate; the test written in `varshape/README.md` before the recording): a geometric mean
/// of 1.050 over expandable (issue 27's 1.03 missed), two inference traces over 1.10
/// (squeezebert_varlen_infer 1.141, canine_varlen_infer 1.107, where PyTorch's default is
/// 2.221 and 1.510) and canine_varlen_infer two segment allocations over PyTorch's default (54
/// against 52; peak reserved 0.733 of PyTorch's).
#[test]
fn the_fourteenth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout14",
        &[
            ("alexnet_varres_train", false, 3_164_602_368, 22),
            ("biogpt_generate_varbatch", true, 505_413_632, 26),
            ("canine_varlen_infer", true, 7_793_016_832, 54),
            ("inception_v3_varres_infer", true, 3_120_562_176, 32),
            ("rembert_mlm_varlen_train", false, 19_717_423_104, 78),
            ("squeezebert_varlen_infer", true, 2_332_033_024, 34),
            ("starcoder2_generate_varprompt", true, 482_344_960, 35),
        ],
        &["canine_varlen_infer", "squeezebert_varlen_infer"],
        &["canine_varlen_infer"],
        Some(1.050),
    );
}

/// The fifteenth held-out set (`data/traces/varshape/heldout15`, recorded on an H100 before the
/// sixteenth round wrote a rule), judged once on 2026-12-06 at 16:33 UTC against the default
/// as it is (the round kept no candidate; the test written in `varshape/README.md` before the
/// recording): every trace within PyTorch's default (peak reserved and segment allocations),
/// mamba_varlen_infer 1.330 over expandable (issue 27's 1.10 for inference missed; PyTorch's
/// default 3.098) and a geometric mean of 1.052 (1.03 missed).
#[test]
fn the_fifteenth_held_out_set_with_relocation() {
    held_out_misses(
        "heldout15",
        &[
            ("convbert_mlm_varlen_train", false, 20_977_811_456, 226),
            ("esm_varlen_infer", true, 1_417_674_752, 47),
            ("m2m100_translate_varbatch", true, 364_904_448, 35),
            ("mamba_varlen_infer", true, 3_458_203_648, 49),
            ("phi3_generate_varbatch", true, 715_128_832, 37),
            ("poolformer_varres_infer", true, 3_116_367_872, 16),
            ("retinanet_v2_varsize_train", false, 19_088_277_504, 168),
        ],
        &["mamba_varlen_infer"],
        &[],
        Some(1.052),
    );
}

/// Replays each `(trace, inference, peak reserved, segment allocations)` of the held-out set
/// `set` with `relocation:merge`: the figures are exactly the pinned ones, every trace is
/// within PyTorch's default (peak reserved and segment allocations), every inference trace
/// but those in `over_1_10` is at most 1.10 of PyTorch's expandable-segments figure (and
/// those are above it: a fixed miss fails this test), and the geometric mean is at most 1.03.
fn held_out_goals(set: &str, pinned: &[(&str, bool, u64, u64)], over_1_10: &[&str]) {
    held_out_misses(set, pinned, over_1_10, &[], None);
}

/// As [`held_out_goals`], for a set where issue 27's goals are missed: exactly the traces in
/// `over_default` are above PyTorch's default (in peak reserved or segment allocations), and
/// the geometric mean over expandable is `geomean` (to 0.0005) when given, else at most 1.03.
fn held_out_misses(
    set: &str,
    pinned: &[(&str, bool, u64, u64)],
    over_1_10: &[&str],
    over_default: &[&str],
    geomean: Option<f64>,
) {
    let dir = manifest_dir().join("../../data/traces/varshape").join(set);
    let mut log_sum = 0.0f64;
    for &(name, inference, reserved, segments) in pinned {
        let trace = dir.join(format!("{name}.trace.gz"));
        let options = ReplayOptions {
            config: Some("relocation:merge".to_owned()),
            ..ReplayOptions::default()
        };
        let r = replay::run(&trace, &options).unwrap().report;
        assert_eq!(
            (r.peak_reserved, r.segment_allocs),
            (reserved, segments),
            "{name}"
        );
        let default = dir.join(format!("{name}.trace.gz.summary.json"));
        let expandable = dir.join(format!("{name}.exp.gz.summary.json"));
        assert_eq!(
            r.peak_reserved > summary(&default, "max_reserved")
                || r.segment_allocs > summary(&default, "segment_allocs"),
            over_default.contains(&name),
            "{name}: above PyTorch's default, or a recorded miss fixed"
        );
        #[allow(clippy::cast_precision_loss)]
        let over = r.peak_reserved as f64 / summary(&expandable, "max_reserved") as f64;
        if inference {
            assert_eq!(
                over > 1.10,
                over_1_10.contains(&name),
                "{name}: {over:.3} of expandable"
            );
        }
        log_sum += over.ln();
    }
    #[allow(clippy::cast_precision_loss)]
    let measured = (log_sum / pinned.len() as f64).exp();
    match geomean {
        None => assert!(
            measured <= 1.03,
            "{set}: geometric mean {measured:.4} over expandable"
        ),
        Some(expected) => assert!(
            (measured - expected).abs() < 0.0005,
            "{set}: geometric mean {measured:.4} over expandable, pinned {expected}"
        ),
    }
}
