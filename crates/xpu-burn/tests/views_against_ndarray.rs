//! Differential tests of views against burn-ndarray (the CPU reference): reductions, scans,
//! elementwise ops, matmuls (small and CLBlast-sized), convolutions and pools of permuted inputs,
//! indexing and sorting, float ops on edge values.
//!
//! Review h25: differential probes, xpu against burn-ndarray (CPU) as the reference. Each
//! runs the same generic pipeline on both backends and compares every result (relative 1e-4
//! element-wise, looser for long reductions; integers and bools exactly). On PoCL
//! (`POCL_DEVICES="pthread pthread" XPU_REQUIRE_DEVICE=1`).

// burn's 1-d slices are `[a..b]`; sizes are written as the shapes' products; pipelines push
// one result per line.
#![allow(
    clippy::single_range_in_vec_init,
    clippy::identity_op,
    clippy::int_plus_one,
    clippy::vec_init_then_push
)]

use burn_ndarray::{NdArray, NdArrayDevice};
use burn_tensor::backend::Backend;
use burn_tensor::{DType, Int, Slice, Tensor, TensorData};
use xpu_burn::{Xpu, XpuDevice};

type Nd = NdArray<f32>;

/// A fixed-seed generator (64-bit LCG, upper bits).
struct Rng(u64);

impl Rng {
    fn u(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    /// Uniform in [lo, hi).
    fn f(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * (self.u() as f32 / (1u64 << 31) as f32)
    }
    fn vec(&mut self, n: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..n).map(|_| self.f(lo, hi)).collect()
    }
    fn ints(&mut self, n: usize, lo: i64, hi: i64) -> Vec<i64> {
        (0..n).map(|_| lo + (self.u() as i64) % (hi - lo)).collect()
    }
}

/// Results of one pipeline: (what, data).
type Out = Vec<(String, TensorData)>;

fn f64s(d: &TensorData) -> Vec<f64> {
    d.clone().convert::<f64>().to_vec::<f64>().unwrap()
}

/// Compares the pipelines' results; one line per mismatch.
fn diff(got: &Out, want: &Out, rtol: f64, atol: f64) -> Vec<String> {
    let mut bad = Vec::new();
    assert_eq!(got.len(), want.len());
    for ((name, g), (_, w)) in got.iter().zip(want) {
        if g.shape != w.shape {
            bad.push(format!("{name}: shape {:?} vs {:?}", g.shape, w.shape));
            continue;
        }
        let exact = !matches!(w.dtype, DType::F32 | DType::F64 | DType::F16);
        if exact {
            let i = |d: &TensorData| d.clone().convert::<i64>().to_vec::<i64>().unwrap();
            let (gi, wi) = (i(g), i(w));
            if let Some(k) = (0..gi.len()).find(|&k| gi[k] != wi[k]) {
                bad.push(format!(
                    "{name}: [{k}] got {} want {} (shape {:?})",
                    gi[k], wi[k], w.shape
                ));
            }
            continue;
        }
        let (gv, wv) = (f64s(g), f64s(w));
        for (i, (a, b)) in gv.iter().zip(&wv).enumerate() {
            let ok = if exact {
                a == b
            } else {
                a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= atol + rtol * b.abs()
            };
            if !ok {
                bad.push(format!(
                    "{name}: [{i}] got {a} want {b} (shape {:?})",
                    w.shape
                ));
                break;
            }
        }
    }
    bad
}

fn xd() -> XpuDevice {
    XpuDevice::default()
}

fn nd() -> NdArrayDevice {
    NdArrayDevice::Cpu
}

fn ft<B: Backend, const D: usize>(v: &[f32], s: [usize; D], d: &B::Device) -> Tensor<B, D> {
    Tensor::from_data(TensorData::new(v.to_vec(), s), d)
}

fn it<B: Backend, const D: usize>(v: &[i64], s: [usize; D], d: &B::Device) -> Tensor<B, D, Int> {
    Tensor::from_data(TensorData::new(v.to_vec(), s), d)
}

/// Views of `t` that no copy makes: permuted, swapped, flipped, stepped slices, narrowed.
fn views<B: Backend, const D: usize>(t: Tensor<B, D>) -> Vec<(String, Tensor<B, D>)> {
    let dims = t.dims();
    let mut v = vec![("id".to_string(), t.clone())];
    let mut rev = [0usize; D];
    for (i, r) in rev.iter_mut().enumerate() {
        *r = D - 1 - i;
    }
    v.push(("rev".into(), t.clone().permute(rev)));
    if D > 1 {
        let mut rot = [0usize; D];
        for (i, r) in rot.iter_mut().enumerate() {
            *r = (i + 1) % D;
        }
        v.push(("rot".into(), t.clone().permute(rot)));
    }
    let all: Vec<isize> = (0..D as isize).collect();
    let all: [isize; D] = all.try_into().unwrap();
    v.push(("flip".into(), t.clone().flip(all)));
    if dims.contains(&0) {
        return v;
    }
    // Stepped slices: 2 on the first dim, -1 on the last, 3 on the middle.
    let mut sl = [Slice::full(); D];
    sl[0] = Slice::new(0, None, 2);
    sl[D - 1] = Slice::new(0, None, -1);
    if D > 2 {
        sl[D / 2] = Slice::new((dims[D / 2] > 1) as isize, None, 3);
    }
    v.push(("step".into(), t.clone().slice(sl)));
    let mut sl = [Slice::full(); D];
    sl[D - 1] = Slice::new(0, None, -2);
    v.push(("negstep".into(), t.clone().slice(sl)));
    if dims[0] > 2 {
        v.push(("narrow".into(), t.clone().narrow(0, 1, dims[0] - 2)));
    }
    v
}

/// Element-wise ops, reductions and scans of every view along every dim.
fn reduce_pipeline<B: Backend, const D: usize>(data: &[f32], s: [usize; D], d: &B::Device) -> Out {
    let t = ft::<B, D>(data, s, d);
    let mut out = Out::new();
    for (vn, v) in views(t) {
        let n = v.shape().num_elements();
        out.push((format!("{vn} copy"), v.clone().into_data()));
        out.push((
            format!("{vn} exp*2-v"),
            (v.clone().exp() * 2.0 - v.clone()).into_data(),
        ));
        if n > 0 {
            out.push((format!("{vn} sum"), v.clone().sum().into_data()));
            out.push((format!("{vn} max"), v.clone().max().into_data()));
            out.push((format!("{vn} min"), v.clone().min().into_data()));
        }
        for dim in 0..D {
            let p = format!("{vn} d{dim}");
            out.push((format!("{p} sum"), v.clone().sum_dim(dim).into_data()));
            out.push((
                format!("{p} any>1"),
                v.clone().greater_elem(1.0).any_dim(dim).into_data(),
            ));
            out.push((
                format!("{p} all>-1"),
                v.clone().greater_elem(-1.0).all_dim(dim).into_data(),
            ));
            out.push((
                format!("{p} prod"),
                (v.clone() * 0.1 + 1.0).prod_dim(dim).into_data(),
            ));
            if v.dims()[dim] > 0 {
                out.push((format!("{p} mean"), v.clone().mean_dim(dim).into_data()));
                out.push((format!("{p} max"), v.clone().max_dim(dim).into_data()));
                out.push((format!("{p} min"), v.clone().min_dim(dim).into_data()));
                out.push((format!("{p} argmax"), v.clone().argmax(dim).into_data()));
                out.push((format!("{p} argmin"), v.clone().argmin(dim).into_data()));
                let (m, i) = v.clone().max_dim_with_indices(dim);
                out.push((format!("{p} maxwi v"), m.into_data()));
                out.push((format!("{p} maxwi i"), i.into_data()));
                let (m, i) = v.clone().min_dim_with_indices(dim);
                out.push((format!("{p} minwi v"), m.into_data()));
                out.push((format!("{p} minwi i"), i.into_data()));
            }
            out.push((format!("{p} cumsum"), v.clone().cumsum(dim).into_data()));
            out.push((
                format!("{p} cumprod"),
                (v.clone() * 0.01 + 1.0).cumprod(dim).into_data(),
            ));
            out.push((format!("{p} cummax"), v.clone().cummax(dim).into_data()));
            out.push((format!("{p} cummin"), v.clone().cummin(dim).into_data()));
        }
    }
    out
}

fn run_reduce<const D: usize>(s: [usize; D], seed: u64) -> Vec<String> {
    let n: usize = s.iter().product();
    let data = Rng(seed).vec(n, -2.0, 2.0);
    let g = reduce_pipeline::<Xpu, D>(&data, s, &xd());
    let w = reduce_pipeline::<Nd, D>(&data, s, &nd());
    // Sums of up to ~4k elements of [-2, 2): absolute slack.
    diff(&g, &w, 1e-4, 2e-3)
        .into_iter()
        .map(|e| format!("{s:?}: {e}"))
        .collect()
}

#[test]
fn reductions_scans_and_elementwise_of_views_match_ndarray() {
    let mut bad = Vec::new();
    for n in [1, 2, 255, 256, 257, 1023, 1025, 4097] {
        bad.extend(run_reduce([n], n as u64));
    }
    for s in [
        [1, 4097],
        [4097, 1],
        [257, 3],
        [3, 1025],
        [0, 5],
        [5, 0],
        [2, 2],
    ] {
        bad.extend(run_reduce(s, 7));
    }
    for s in [[2, 257, 3], [3, 1, 1025], [4, 0, 3]] {
        bad.extend(run_reduce(s, 8));
    }
    bad.extend(run_reduce([2, 3, 1, 5], 9));
    bad.extend(run_reduce([2, 1, 3, 1, 4], 10));
    bad.extend(run_reduce([1, 2, 1, 3, 2, 2], 11));
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// `a @ b` for operands made contiguous, transposed (stored as their transposes) and
/// stepped, batch dims broadcast.
fn matmul_pipeline<B: Backend>(
    a: &[f32],
    b: &[f32],
    (bat, m, k, n): (usize, usize, usize, usize),
    d: &B::Device,
) -> Out {
    let mut out = Out::new();
    let ta = ft::<B, 3>(a, [bat, m, k], d);
    let tb = ft::<B, 3>(b, [bat, k, n], d);
    out.push(("plain".into(), ta.clone().matmul(tb.clone()).into_data()));
    // Transposed storage: the same values read through swapped strides.
    let at = ta.clone().swap_dims(1, 2).into_data();
    let at = Tensor::<B, 3>::from_data(at, d).swap_dims(1, 2);
    let bt = tb.clone().swap_dims(1, 2).into_data();
    let bt = Tensor::<B, 3>::from_data(bt, d).swap_dims(1, 2);
    out.push(("tt".into(), at.clone().matmul(bt.clone()).into_data()));
    out.push(("tn".into(), at.matmul(tb.clone()).into_data()));
    out.push(("nt".into(), ta.clone().matmul(bt).into_data()));
    // Batch permuted to the middle of the storage.
    let ap = ta.clone().swap_dims(0, 1).into_data();
    let ap = Tensor::<B, 3>::from_data(ap, d).swap_dims(0, 1);
    out.push(("batch-mid".into(), ap.matmul(tb.clone()).into_data()));
    // Broadcast batch: lhs's first matrix against every rhs matrix, and the 4-d broadcast.
    let a0 = ta.clone().narrow(0, 0, 1);
    out.push((
        "bcast-lhs".into(),
        a0.clone().matmul(tb.clone()).into_data(),
    ));
    let a4 = ta.clone().unsqueeze_dim::<4>(1); // [bat, 1, m, k]
    let b4 = tb.clone().unsqueeze_dim::<4>(0); // [1, bat, k, n]
    out.push(("bcast-4d".into(), a4.matmul(b4).into_data()));
    // Expanded (stride-0) lhs rows and flipped rhs.
    let arow = ta.clone().narrow(1, 0, 1).expand([bat, m, k]);
    out.push(("expand-rows".into(), arow.matmul(tb.clone()).into_data()));
    out.push((
        "flip".into(),
        ta.clone()
            .flip([0, 1, 2])
            .matmul(tb.clone().flip([2]))
            .into_data(),
    ));
    // Stepped: every other column of a wider lhs.
    let wide = Tensor::cat(vec![ta.clone(), ta.clone()], 2).slice([
        Slice::full(),
        Slice::full(),
        Slice::new(0, None, 2),
    ]);
    let twice = Tensor::cat(vec![tb.clone(), tb.clone()], 1).slice([
        Slice::full(),
        Slice::new(0, None, 2),
        Slice::full(),
    ]);
    let _ = twice; // rows of b interleave differently; compare only the lhs view
    let wide_ref = Tensor::cat(vec![ta.clone(), ta], 2).into_data();
    let wide2 = Tensor::<B, 3>::from_data(wide_ref, d).slice([
        Slice::full(),
        Slice::full(),
        Slice::new(1, None, 2),
    ]);
    let _ = wide2;
    out.push(("step-cols".into(), wide.matmul(tb).into_data()));
    out
}

fn run_matmul(dims: (usize, usize, usize, usize), seed: u64) -> Vec<String> {
    let (bat, m, k, n) = dims;
    let mut r = Rng(seed);
    let a = r.vec(bat * m * k, -1.0, 1.0);
    let b = r.vec(bat * k * n, -1.0, 1.0);
    let g = matmul_pipeline::<Xpu>(&a, &b, dims, &xd());
    let w = matmul_pipeline::<Nd>(&a, &b, dims, &nd());
    let tol = 1e-5 * (k as f64).sqrt().max(1.0) * 10.0;
    diff(&g, &w, 1e-4, tol)
        .into_iter()
        .map(|e| format!("{dims:?}: {e}"))
        .collect()
}

#[test]
fn matmuls_of_views_small_and_clblast_sized_match_ndarray() {
    let mut bad = Vec::new();
    for (i, dims) in [
        (1, 1, 1, 1),
        (2, 1, 7, 1),
        (3, 17, 1, 5),
        (2, 16, 16, 16),
        (2, 17, 33, 15),
        (2, 65, 64, 63),
        (1, 32, 32, 32),
        (2, 129, 70, 257),
        (1, 1, 4097, 9),
        (3, 257, 2, 255),
        (9, 40, 40, 40),
    ]
    .into_iter()
    .enumerate()
    {
        bad.extend(run_matmul(dims, 100 + i as u64));
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

use burn_tensor::module;
use burn_tensor::ops::{ConvOptions, ConvTransposeOptions, InterpolateMode, InterpolateOptions};

/// Kernel, stride, padding, dilation, groups.
type ConvCase = ([usize; 2], [usize; 2], [usize; 2], [usize; 2], usize);

/// Convolutions, transposed convolutions and pools of an NHWC-stored (permuted) input.
fn nn_pipeline<B: Backend>(
    x: &[f32],
    w: &[f32],
    bias: &[f32],
    xs: [usize; 4],
    cfg: ConvCase,
    d: &B::Device,
) -> Out {
    let [n, c, h, wd] = xs;
    let (kern, stride, pad, dil, groups) = cfg;
    let oc = 2 * groups;
    let mut out = Out::new();
    // Stored NHWC, viewed NCHW.
    let xt = ft::<B, 4>(x, [n, h, wd, c], d).permute([0, 3, 1, 2]);
    let wt = ft::<B, 4>(
        &w[..oc * (c / groups) * kern[0] * kern[1]],
        [oc, c / groups, kern[0], kern[1]],
        d,
    );
    let bt = ft::<B, 1>(&bias[..oc], [oc], d);
    out.push((
        "conv2d".into(),
        module::conv2d(
            xt.clone(),
            wt,
            Some(bt),
            ConvOptions::new(stride, pad, dil, groups),
        )
        .into_data(),
    ));
    // Transposed: weight [c, oc/groups, kh, kw].
    let tw = ft::<B, 4>(&w[..c * 2 * kern[0] * kern[1]], [c, 2, kern[0], kern[1]], d);
    let pad_out = [stride[0].min(dil[0]) - 1, stride[1].min(dil[1]) - 1];
    out.push((
        "conv_t2d".into(),
        module::conv_transpose2d(
            xt.clone(),
            tw,
            Some(ft::<B, 1>(&bias[..2 * groups], [2 * groups], d)),
            ConvTransposeOptions::new(stride, pad, pad_out, dil, groups),
        )
        .into_data(),
    ));
    let pk = [kern[0].max(2 * pad[0]), kern[1].max(2 * pad[1])];
    if h + 2 * pad[0] >= dil[0] * (pk[0] - 1) + 1 && wd + 2 * pad[1] >= dil[1] * (pk[1] - 1) + 1 {
        out.push((
            "maxpool".into(),
            module::max_pool2d(xt.clone(), pk, stride, pad, dil).into_data(),
        ));
        let (v, i) = module::max_pool2d_with_indices(xt.clone(), pk, stride, pad, dil);
        out.push(("maxpool v".into(), v.into_data()));
        // burn-ndarray 0.19.1 numbers the index `ih * height + iw` (not `* width`): compare
        // only square inputs, where the two agree.
        if h == wd {
            out.push(("maxpool i".into(), i.into_data()));
        }
    }
    if h + 2 * pad[0] >= pk[0] && wd + 2 * pad[1] >= pk[1] {
        out.push((
            "avgpool incl".into(),
            module::avg_pool2d(xt.clone(), pk, stride, pad, true).into_data(),
        ));
        out.push((
            "avgpool excl".into(),
            module::avg_pool2d(xt.clone(), pk, stride, pad, false).into_data(),
        ));
    }
    out.push((
        "adaptive".into(),
        module::adaptive_avg_pool2d(xt.clone(), [3, 5]).into_data(),
    ));
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        out.push((
            format!("interp {mode:?}"),
            module::interpolate(
                xt.clone(),
                [h * 2 + 1, wd.max(2) - 1],
                InterpolateOptions::new(mode),
            )
            .into_data(),
        ));
    }
    out
}

#[test]
fn convolutions_and_pools_of_permuted_inputs_match_ndarray() {
    let mut bad = Vec::new();
    let cases: &[([usize; 4], ConvCase)] = &[
        ([1, 1, 5, 5], ([3, 3], [1, 1], [0, 0], [1, 1], 1)),
        ([2, 4, 7, 6], ([3, 2], [2, 1], [1, 0], [1, 2], 2)),
        ([1, 6, 9, 8], ([2, 3], [3, 2], [1, 1], [2, 1], 3)),
        ([2, 2, 17, 3], ([1, 3], [1, 2], [0, 1], [1, 1], 1)),
        ([1, 4, 6, 6], ([3, 3], [2, 2], [1, 1], [2, 2], 4)),
        ([2, 2, 7, 7], ([2, 3], [2, 1], [1, 1], [1, 2], 2)),
        ([1, 3, 8, 8], ([3, 3], [1, 3], [1, 0], [3, 1], 1)),
        ([3, 1, 1, 1], ([1, 1], [1, 1], [0, 0], [1, 1], 1)),
    ];
    for (i, &(xs, cfg)) in cases.iter().enumerate() {
        let mut r = Rng(200 + i as u64);
        let x = r.vec(xs.iter().product(), -1.0, 1.0);
        let w = r.vec(4096, -1.0, 1.0);
        let b = r.vec(64, -1.0, 1.0);
        let g = nn_pipeline::<Xpu>(&x, &w, &b, xs, cfg, &xd());
        let wnt = nn_pipeline::<Nd>(&x, &w, &b, xs, cfg, &nd());
        bad.extend(
            diff(&g, &wnt, 1e-4, 1e-4)
                .into_iter()
                .map(|e| format!("{xs:?} {cfg:?}: {e}")),
        );
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Gather, scatter, select, select_assign, masks, slice_assign, sort/topk of permuted views.
fn index_pipeline<B: Backend>(
    x: &[f32],
    s: [usize; 3],
    idx: &[i64],
    mask: &[i64],
    d: &B::Device,
) -> Out {
    let mut out = Out::new();
    // Stored as [s2, s0, s1], viewed [s0, s1, s2].
    let base = ft::<B, 3>(x, [s[2], s[0], s[1]], d).permute([1, 2, 0]);
    let flipped = base.clone().flip([1]);
    for (vn, v) in [("perm", base), ("flip", flipped)] {
        let sh = v.dims();
        let n = sh.iter().product::<usize>();
        let maskt = it::<B, 3>(&mask[..n], [sh[2], sh[1], sh[0]], d)
            .permute([2, 1, 0])
            .greater_elem(0);
        out.push((
            format!("{vn} mask_fill"),
            v.clone().mask_fill(maskt.clone(), -7.5).into_data(),
        ));
        out.push((
            format!("{vn} mask_where"),
            v.clone()
                .mask_where(maskt.clone(), v.clone().flip([0, 2]) * 3.0)
                .into_data(),
        ));
        for dim in 0..3 {
            let p = format!("{vn} d{dim}");
            let len = sh[dim] as i64;
            // Indices shaped as v, values in range along dim, stored transposed.
            let ii: Vec<i64> = idx[..n].iter().map(|i| i.rem_euclid(len)).collect();
            let it3 = it::<B, 3>(&ii, [sh[2], sh[1], sh[0]], d).permute([2, 1, 0]);
            out.push((
                format!("{p} gather"),
                v.clone().gather(dim, it3.clone()).into_data(),
            ));
            out.push((
                format!("{p} scatter"),
                v.clone()
                    .scatter(dim, it3.clone(), v.clone().flip([1]) + 1.0)
                    .into_data(),
            ));
            let sel: Vec<i64> = idx[..5].iter().map(|i| i.rem_euclid(len)).collect();
            let sel = it::<B, 1>(&sel, [5], d);
            out.push((
                format!("{p} select"),
                v.clone().select(dim, sel.clone()).into_data(),
            ));
            let vals = v.clone().select(dim, sel.clone()).flip([0, 1, 2]) * 2.0;
            out.push((
                format!("{p} select_assign"),
                v.clone().select_assign(dim, sel, vals).into_data(),
            ));
            out.push((format!("{p} sort"), v.clone().sort(dim).into_data()));
            out.push((
                format!("{p} sort desc"),
                v.clone().sort_descending(dim).into_data(),
            ));
            out.push((format!("{p} argsort"), v.clone().argsort(dim).into_data()));
            out.push((
                format!("{p} argsort desc"),
                v.clone().argsort_descending(dim).into_data(),
            ));
            let k = sh[dim].min(3);
            let (tv, ti) = v.clone().topk_with_indices(k, dim);
            out.push((format!("{p} topk v"), tv.into_data()));
            out.push((format!("{p} topk i"), ti.into_data()));
            out.push((
                format!("{p} repeat"),
                v.clone().repeat_dim(dim, 2).into_data(),
            ));
            out.push((format!("{p} roll"), v.clone().roll_dim(-2, dim).into_data()));
        }
        // Slice-assign through a stepped window.
        let win = [
            Slice::new(0, None, 2),
            Slice::new(1.min(sh[1] as isize - 1), None, 1),
            Slice::new(0, None, -3),
        ];
        let part = v.clone().slice(win);
        let vals = part.clone().neg() - 1.0;
        out.push((
            "slice_assign step".into(),
            v.clone().slice_assign(win, vals).into_data(),
        ));
        out.push((
            "slice_fill step".into(),
            v.clone().slice_fill(win, 9.0).into_data(),
        ));
        out.push((
            "cat".into(),
            Tensor::cat(vec![v.clone(), v.clone().flip([2])], 2).into_data(),
        ));
        out.push(("tril".into(), v.clone().tril(-1).into_data()));
        out.push(("triu".into(), v.clone().triu(1).into_data()));
    }
    out
}

#[test]
fn indexing_and_sorting_of_views_match_ndarray() {
    let mut bad = Vec::new();
    for (i, s) in [[2, 3, 4], [1, 257, 3], [5, 1, 256], [3, 4, 1], [2, 1025, 2]]
        .into_iter()
        .enumerate()
    {
        let n: usize = s.iter().product();
        let mut r = Rng(300 + i as u64);
        // Distinct values (unstable sorts may order ties either way).
        let mut x: Vec<f32> = (0..n).map(|j| j as f32 * 0.37 - 50.0).collect();
        for j in (1..n).rev() {
            x.swap(j, r.u() as usize % (j + 1));
        }
        let idx = r.ints(n.max(5), -1000, 1000);
        let mask = r.ints(n, -1, 1);
        let g = index_pipeline::<Xpu>(&x, s, &idx, &mask, &xd());
        let w = index_pipeline::<Nd>(&x, s, &idx, &mask, &nd());
        bad.extend(
            diff(&g, &w, 1e-5, 1e-4)
                .into_iter()
                .map(|e| format!("{s:?}: {e}")),
        );
    }
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

use burn_tensor::activation;

const EDGE: [f32; 22] = [
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    -0.0,
    0.0,
    1e-40,
    -1e-40,
    f32::MIN_POSITIVE,
    f32::MAX,
    -f32::MAX,
    0.5,
    -0.5,
    1.5,
    -1.5,
    2.5,
    -2.5,
    1.0,
    -1.0,
    3.0,
    -7.25,
    88.0,
    -104.0,
];

/// Float ops on edge values, in a flipped view.
fn float_edge_pipeline<B: Backend>(d: &B::Device) -> Out {
    let n = EDGE.len();
    let v = ft::<B, 1>(&EDGE, [n], d).flip([0]).flip([0]);
    let mut out = Out::new();
    macro_rules! un {
        ($($name:ident),*) => {$(
            out.push((stringify!($name).into(), v.clone().$name().into_data()));
        )*};
    }
    un!(
        exp, log, log1p, sqrt, abs, sign, round, floor, ceil, trunc, erf, tanh, recip, sin, cos,
        neg, is_nan, is_inf, is_finite
    );
    out.push(("sigmoid".into(), activation::sigmoid(v.clone()).into_data()));
    out.push(("relu".into(), activation::relu(v.clone()).into_data()));
    out.push(("gelu".into(), activation::gelu(v.clone()).into_data()));
    out.push(("silu".into(), activation::silu(v.clone()).into_data()));
    out.push((
        "softplus".into(),
        activation::softplus(v.clone(), 1.0).into_data(),
    ));
    out.push((
        "log_sigmoid".into(),
        activation::log_sigmoid(v.clone()).into_data(),
    ));
    for p in [2.0f32, 0.5, -1.0, 0.0, 3.0, -2.0, 1.0 / 3.0] {
        out.push((
            format!("powf_scalar {p}"),
            v.clone().powf_scalar(p).into_data(),
        ));
    }
    for p in [2i32, 3, -1, 0, 1, -2] {
        out.push((
            format!("powi_scalar {p}"),
            v.clone().powi_scalar(p).into_data(),
        ));
    }
    let w = v.clone().flip([0]);
    out.push(("powf".into(), v.clone().powf(w.clone()).into_data()));
    out.push(("div".into(), (v.clone() / w.clone()).into_data()));
    // Finite operands only: ndarray's `x - floor(x / y) * y` gives NaN for an infinite
    // divisor and -0 for a denormal dividend, where xpu (as torch) gives x and y + x.
    let fin = |t: Tensor<B, 1>| t.slice([10..n]);
    let fw = fin(v.clone()).flip([0]);
    out.push(("rem".into(), fin(v.clone()).remainder(fw).into_data()));
    out.push((
        "rem_scalar".into(),
        fin(v.clone()).remainder_scalar(-1.5).into_data(),
    ));
    out.push(("max_pair".into(), v.clone().max_pair(w.clone()).into_data()));
    out.push(("min_pair".into(), v.clone().min_pair(w.clone()).into_data()));
    out.push(("clamp".into(), v.clone().clamp(-1.0, 2.0).into_data()));
    out.push(("eq".into(), v.clone().equal(w.clone()).into_data()));
    out.push(("lt".into(), v.clone().lower(w.clone()).into_data()));
    out.push((
        "ge_elem".into(),
        v.clone().greater_equal_elem(0.0).into_data(),
    ));
    out.push(("bool".into(), v.clone().bool().into_data()));
    out.push(("to f64".into(), v.clone().cast(DType::F64).into_data()));
    // Without +-MAX: which small terms they absorb depends on the summation order.
    out.push(("sum".into(), v.clone().slice([10..n]).sum().into_data()));
    out.push((
        "max_abs".into(),
        v.clone().slice([3..n]).max_abs().into_data(),
    ));
    out.push((
        "softmax".into(),
        activation::softmax(v.clone().slice([3..n]).reshape([1, n - 3]), 1).into_data(),
    ));
    out.push((
        "log_softmax".into(),
        activation::log_softmax(v.clone().slice([3..n]).reshape([1, n - 3]), 1).into_data(),
    ));
    // In-range values only: out-of-range float -> int conversions differ by definition.
    out.push(("int".into(), v.clone().slice([10..n]).int().into_data()));
    out
}

#[test]
fn float_ops_on_edge_values_match_ndarray() {
    let g = float_edge_pipeline::<Xpu>(&xd());
    let w = float_edge_pipeline::<Nd>(&nd());
    // Edge values: OpenCL's math built-ins are allowed a few ulp.
    let bad = diff(&g, &w, 1e-5, 1e-30);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

const IEDGE: [i64; 16] = [
    i64::MIN,
    i64::MAX,
    -1,
    0,
    1,
    -7,
    7,
    3,
    -3,
    1 << 40,
    -(1 << 40),
    (1 << 31) - 1,
    -(1 << 31),
    255,
    -129,
    1 << 53 | 1,
];

/// Integer ops on edge values (wrapping as ndarray's release build does), in a flipped view.
fn int_edge_pipeline<B: Backend<IntElem = i64>>(d: &B::Device) -> Out {
    let n = IEDGE.len();
    let v = it::<B, 1>(&IEDGE, [n], d).flip([0]).flip([0]);
    let w = v.clone().flip([0]);
    let mut out = Out::new();
    out.push(("add".into(), (v.clone() + w.clone()).into_data()));
    out.push(("sub".into(), (v.clone() - w.clone()).into_data()));
    out.push(("mul".into(), (v.clone() * w.clone()).into_data()));
    out.push(("add_scalar".into(), (v.clone() + 5).into_data()));
    out.push(("mul_scalar".into(), (v.clone() * -3).into_data()));
    // abs(i64::MIN): ndarray saturates to MAX, xpu wraps (torch's result); ndarray's abs of
    // 2^53 + 1 rounds through f64: the values between only.
    out.push(("abs".into(), v.clone().slice([1..n - 1]).abs().into_data()));
    out.push(("neg".into(), v.clone().neg().into_data()));
    out.push(("sign".into(), v.clone().sign().into_data()));
    out.push(("clamp".into(), v.clone().clamp(-5, 300).into_data()));
    out.push(("eq".into(), v.clone().equal(w.clone()).into_data()));
    out.push(("gt".into(), v.clone().greater(w.clone()).into_data()));
    out.push(("lt_elem".into(), v.clone().lower_elem(0).into_data()));
    out.push(("bool".into(), v.clone().bool().into_data()));
    out.push(("float".into(), v.clone().float().into_data()));
    out.push(("and".into(), v.clone().bitwise_and(w.clone()).into_data()));
    out.push((
        "xor_scalar".into(),
        v.clone().bitwise_xor_scalar(0x5555).into_data(),
    ));
    out.push(("not".into(), v.clone().bitwise_not().into_data()));
    let sh = it::<B, 1>(
        &[0, 1, 3, 7, 31, 32, 40, 62, 63, 2, 5, 8, 1, 0, 9, 17],
        [n],
        d,
    );
    out.push((
        "shl".into(),
        v.clone().bitwise_left_shift(sh.clone()).into_data(),
    ));
    out.push(("shr".into(), v.clone().bitwise_right_shift(sh).into_data()));
    out.push((
        "shr_scalar".into(),
        v.clone().bitwise_right_shift_scalar(3).into_data(),
    ));
    out.push(("sum".into(), v.clone().sum().into_data()));
    out.push(("prod".into(), v.clone().slice([2..9]).prod().into_data()));
    out.push(("max".into(), v.clone().max().into_data()));
    out.push(("min".into(), v.clone().min().into_data()));
    out.push(("argmax".into(), v.clone().argmax(0).into_data()));
    out.push(("argmin".into(), v.clone().argmin(0).into_data()));
    out.push(("cumsum".into(), v.clone().cumsum(0).into_data()));
    out.push(("cummax".into(), v.clone().cummax(0).into_data()));
    out.push(("sort".into(), v.clone().sort(0).into_data()));
    out.push((
        "mean small".into(),
        v.clone().slice([2..9]).mean().into_data(),
    ));
    out.push((
        "powi small".into(),
        v.clone().slice([2..9]).powi_scalar(3).into_data(),
    ));
    out.push(("div_scalar".into(), v.clone().div_scalar(-2).into_data()));
    out.push((
        "rem_scalar".into(),
        v.clone().remainder_scalar(-2).into_data(),
    ));
    // Matrix products of small ints, transposed.
    let m = it::<B, 2>(&[1, -2, 3, -4, 5, -6], [2, 3], d);
    out.push((
        "matmul".into(),
        m.clone().matmul(m.clone().transpose()).into_data(),
    ));
    out
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "the reference, burn-ndarray, panics on integer overflow in debug builds: run with --release"
)]
fn int_ops_on_edge_values_match_ndarray() {
    let g = int_edge_pipeline::<Xpu>(&xd());
    let w = int_edge_pipeline::<Nd>(&nd());
    let bad = diff(&g, &w, 0.0, 0.0);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Long lines: split reductions (two levels over millions of elements) and chunked scans,
/// on small integers (exact) with many ties (first index wins) and floats.
fn long_pipeline<B: Backend>(ints: &[i64], floats: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let n = ints.len();
    let iv = it::<B, 1>(ints, [n], d);
    out.push(("sum".into(), iv.clone().sum().into_data()));
    out.push(("argmax".into(), iv.clone().argmax(0).into_data()));
    out.push(("argmin".into(), iv.clone().argmin(0).into_data()));
    out.push(("max".into(), iv.clone().max().into_data()));
    out.push(("mean".into(), iv.clone().mean().into_data()));
    out.push(("any".into(), iv.clone().greater_elem(3).any().into_data()));
    out.push(("all".into(), iv.clone().greater_elem(-6).all().into_data()));
    let rows = iv.clone().reshape([4, n / 4]);
    out.push(("rows argmax".into(), rows.clone().argmax(1).into_data()));
    let (m, i) = rows.clone().min_dim_with_indices(1);
    out.push(("rows min v".into(), m.into_data()));
    out.push(("rows min i".into(), i.into_data()));
    out.push(("rows cumsum".into(), rows.clone().cumsum(1).into_data()));
    out.push(("rows cummax".into(), rows.clone().cummax(1).into_data()));
    out.push(("rows cummin".into(), rows.clone().cummin(1).into_data()));
    let cols = rows.clone().transpose(); // [n/4, 4], long strided lines along 0
    out.push(("cols argmax".into(), cols.clone().argmax(0).into_data()));
    out.push(("cols sum".into(), cols.clone().sum_dim(0).into_data()));
    out.push(("cols cumsum".into(), cols.clone().cumsum(0).into_data()));
    out.push((
        "cols sort".into(),
        cols.clone().narrow(0, 0, 5000).sort(0).into_data(),
    ));
    let fv = ft::<B, 1>(floats, [floats.len()], d);
    out.push(("f sum".into(), fv.clone().sum().into_data()));
    out.push(("f mean".into(), fv.clone().mean().into_data()));
    out.push(("f max_abs".into(), (fv.clone() - 0.5).max_abs().into_data()));
    let fr = fv.reshape([3, floats.len() / 3]);
    out.push(("f rows mean".into(), fr.clone().mean_dim(1).into_data()));
    out.push(("f rows argmax".into(), fr.clone().argmax(1).into_data()));
    out.push(("f rows cummax".into(), fr.clone().cummax(1).into_data()));
    out
}

#[test]
fn long_reductions_and_scans_match_ndarray() {
    let mut r = Rng(400);
    let ints = r.ints(1 << 21, -5, 5);
    let floats = r.vec(3 * 400_000, 0.0, 1.0);
    let g = long_pipeline::<Xpu>(&ints, &floats, &xd());
    let w = long_pipeline::<Nd>(&ints, &floats, &nd());
    // Float sums over 10^6 elements: relative slack.
    let bad = diff(&g, &w, 2e-4, 0.0);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Other element types (i32, i16, i8, u8, f64, bool) through views and ops.
fn dtype_pipeline<B: Backend>(ints: &[i64], floats: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let n = ints.len();
    let base = it::<B, 2>(ints, [n / 6, 6], d);
    for dt in [DType::I32, DType::I16, DType::I8, DType::U8] {
        // (ndarray's cast panics on a negative value for u8.)
        let src = if dt == DType::U8 {
            base.clone().abs()
        } else {
            base.clone()
        };
        let v = src.cast(dt).transpose().flip([1]);
        let w = v.clone().flip([0]);
        let p = format!("{dt:?}");
        out.push((format!("{p} copy"), v.clone().into_data()));
        out.push((format!("{p} add"), (v.clone() + w.clone()).into_data()));
        out.push((format!("{p} mul"), (v.clone() * w.clone()).into_data()));
        out.push((format!("{p} div"), (v.clone() / w.clone()).into_data()));
        // (Not `remainder` of two int tensors: ndarray's truncates, `x - floor(x / y) * y` in
        // integer division, where its scalar form and xpu take the divisor's sign.)
        out.push((
            format!("{p} rem_scalar"),
            v.clone().remainder_scalar(7).into_data(),
        ));
        out.push((format!("{p} sum_dim"), v.clone().sum_dim(1).into_data()));
        out.push((format!("{p} cumsum"), v.clone().cumsum(1).into_data()));
        out.push((format!("{p} argmax"), v.clone().argmax(1).into_data()));
        out.push((format!("{p} max_dim"), v.clone().max_dim(0).into_data()));
        out.push((format!("{p} gt"), v.clone().greater(w.clone()).into_data()));
        out.push((format!("{p} float"), v.clone().float().into_data()));
        out.push((
            format!("{p} to i64"),
            v.clone().cast(DType::I64).into_data(),
        ));
        out.push((
            format!("{p} matmul"),
            v.clone().matmul(w.clone().transpose()).into_data(),
        ));
    }
    let fv = ft::<B, 2>(floats, [n / 6, 6], d)
        .cast(DType::F64)
        .transpose();
    out.push(("f64 exp".into(), fv.clone().exp().into_data()));
    out.push(("f64 sum".into(), fv.clone().sum_dim(1).into_data()));
    out.push((
        "f64 matmul".into(),
        fv.clone().matmul(fv.clone().transpose()).into_data(),
    ));
    out.push((
        "f64 cumprod".into(),
        (fv.clone() * 0.01 + 1.0).cumprod(1).into_data(),
    ));
    out.push(("f64 to f32".into(), fv.clone().cast(DType::F32).into_data()));
    out.push(("f64 int".into(), (fv.clone() * 100.0).int().into_data()));
    let b = base.clone().greater_elem(0).transpose();
    let c = base.clone().lower_elem(2).transpose().flip([0]);
    out.push(("bool and".into(), b.clone().bool_and(c.clone()).into_data()));
    out.push(("bool or".into(), b.clone().bool_or(c.clone()).into_data()));
    out.push(("bool xor".into(), b.clone().bool_xor(c.clone()).into_data()));
    out.push(("bool not".into(), b.clone().bool_not().into_data()));
    out.push(("bool eq".into(), b.clone().equal(c.clone()).into_data()));
    out.push(("bool int".into(), b.clone().int().into_data()));
    out.push(("bool float".into(), b.clone().float().into_data()));
    out.push(("bool any_dim".into(), b.clone().any_dim(1).into_data()));
    out.push(("bool all_dim".into(), c.clone().all_dim(0).into_data()));
    out.push((
        "bool argwhere-free nonzero count".into(),
        b.clone().int().sum().into_data(),
    ));
    out.push((
        "bool cat".into(),
        Tensor::cat(vec![b.clone(), c.clone()], 1).into_data(),
    ));
    out.push((
        "bool select".into(),
        b.clone()
            .select(1, it::<B, 1>(&[0, 2, 2, 1], [4], d))
            .into_data(),
    ));
    out.push(("bool repeat".into(), b.clone().repeat_dim(0, 3).into_data()));
    out
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "the reference, burn-ndarray, panics on integer overflow in debug builds: run with --release"
)]
fn other_element_types_match_ndarray() {
    let mut r = Rng(500);
    // Odd: no zero divisor (ndarray's narrow int division panics on one).
    let ints: Vec<i64> = r.ints(6 * 43, -30, 30).iter().map(|i| 2 * i + 1).collect();
    let floats = r.vec(6 * 43, -2.0, 2.0);
    let g = dtype_pipeline::<Xpu>(&ints, &floats, &xd());
    let w = dtype_pipeline::<Nd>(&ints, &floats, &nd());
    let bad = diff(&g, &w, 1e-6, 1e-9);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

use burn_autodiff::Autodiff;
use burn_tensor::backend::AutodiffBackend;

/// Gradients of small compositions over views (matmul, activations, nn, indexing, scans).
fn grad_pipeline<B: AutodiffBackend>(x: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let leaf = |n: usize, s: [usize; 4]| ft::<B, 4>(&x[..n], s, d).require_grad();
    // 1: matmul of a transposed view, tanh, exp, mean.
    let a = leaf(2 * 3 * 5 * 4, [2, 3, 5, 4]);
    let b = leaf(2 * 3 * 5 * 4, [2, 3, 5, 4]);
    let y = a.clone().matmul(b.clone().swap_dims(2, 3)).tanh() * a.clone().narrow(3, 0, 1).exp();
    let loss = y.mean() + (b.clone().flip([1]) * a.clone()).powf_scalar(2.0).sum() * 0.01;
    let g = loss.backward();
    out.push(("mm a".into(), a.grad(&g).unwrap().into_data()));
    out.push(("mm b".into(), b.grad(&g).unwrap().into_data()));
    // 2: softmax / log_softmax along every dim of a permuted view.
    for dim in 0..4 {
        let a = leaf(2 * 3 * 5 * 4, [2, 3, 5, 4]);
        let v = a.clone().permute([3, 1, 0, 2]);
        let w = ft::<B, 4>(&x[7..7 + 120], [4, 3, 2, 5], d);
        let loss = (activation::softmax(v.clone(), dim) * w.clone()).sum()
            + (activation::log_softmax(v, dim) * w.flip([0])).sum();
        let g = loss.backward();
        out.push((format!("softmax d{dim}"), a.grad(&g).unwrap().into_data()));
    }
    // 3: conv2d + max pool + avg pool on an NHWC-stored input, grouped and dilated.
    let xi = leaf(2 * 6 * 7 * 4, [2, 6, 7, 4]);
    let wt = leaf(4 * 2 * 3 * 2, [4, 2, 3, 2]);
    let c = module::conv2d(
        xi.clone().permute([0, 3, 1, 2]),
        wt.clone(),
        None,
        ConvOptions::new([2, 1], [1, 1], [1, 2], 2),
    );
    // Max pool of a square part (ndarray's indices are `ih * height + iw`).
    let p = module::max_pool2d(c.clone().narrow(3, 2, 3), [2, 2], [1, 2], [1, 0], [1, 1]);
    let q = module::avg_pool2d(c, [2, 2], [2, 1], [1, 1], false);
    let loss = (p.clone() * p).sum() + q.sum();
    let g = loss.backward();
    out.push(("conv x".into(), xi.grad(&g).unwrap().into_data()));
    out.push(("conv w".into(), wt.grad(&g).unwrap().into_data()));
    // 4: conv_transpose2d with output padding, adaptive pool, interpolate (nearest: ndarray
    // has no bilinear backward).
    let xi = leaf(1 * 4 * 5 * 3, [1, 4, 5, 3]);
    let wt = leaf(4 * 1 * 3 * 3, [4, 1, 3, 3]);
    let c = module::conv_transpose2d(
        xi.clone(),
        wt.clone(),
        None,
        ConvTransposeOptions::new([2, 3], [1, 0], [1, 2], [1, 1], 2),
    );
    let loss = module::adaptive_avg_pool2d(c.clone(), [3, 4]).sum()
        + module::interpolate(c, [7, 5], InterpolateOptions::new(InterpolateMode::Nearest))
            .powf_scalar(2.0)
            .sum();
    let g = loss.backward();
    out.push(("convt x".into(), xi.grad(&g).unwrap().into_data()));
    out.push(("convt w".into(), wt.grad(&g).unwrap().into_data()));
    // 5: gather, select, scatter, mask_fill, slice_assign, cat, expand, cumsum, cumprod, max_dim.
    let a = leaf(3 * 4 * 5, [1, 3, 4, 5]);
    let v = a.clone().squeeze_dim::<3>(0).swap_dims(0, 2); // [5, 4, 3]
    let idx = it::<B, 3>(&[0, 3, 1, 2, 2, 0, 3, 3, 1, 0, 0, 1], [1, 4, 3], d);
    let ga = v.clone().gather(1, idx.clone().expand([5, 4, 3]));
    let se = v.clone().select(2, it::<B, 1>(&[2, 0, 2], [3], d));
    let sc = v
        .clone()
        .scatter(1, idx.expand([5, 4, 3]), se.clone() * 2.0);
    let mask = v.clone().greater_elem(0.3);
    let mf = v.clone().mask_fill(mask, 0.0);
    let sa = v
        .clone()
        .slice_assign([0..2, 1..3, 0..3], se.clone().slice([3..5, 0..2, 0..3]));
    let ct = Tensor::cat(vec![v.clone().flip([0]), se.clone()], 1);
    let ex = v.clone().narrow(1, 1, 1).expand([5, 4, 3]);
    let cs = v.clone().cumsum(0);
    let cp = (v.clone() * 0.1 + 1.0).cumprod(1);
    let mx = v.clone().max_dim(2);
    let loss = ga.sum()
        + (sc * ct.clone().narrow(1, 0, 4)).sum()
        + (mf * 3.0).sum()
        + (sa * ex).sum()
        + (cs * cp).sum()
        + mx.sum()
        + ct.powf_scalar(3.0).mean();
    let g = loss.backward();
    out.push(("index".into(), a.grad(&g).unwrap().into_data()));
    // 6: elementwise zoo.
    let a = leaf(60, [3, 4, 5, 1]);
    let v = a.clone().abs() + 0.5;
    let loss = (v.clone().sqrt() * v.clone().log()
        + v.clone().recip()
        + activation::gelu(a.clone())
        + activation::sigmoid(a.clone()) * a.clone().sin()
        + v.clone().powf(a.clone().flip([0]))
        + a.clone().erf()
        + a.clone().clamp(-0.5, 0.5) * 2.0
        + activation::silu(a.clone().transpose()).transpose())
    .sum();
    let g = loss.backward();
    out.push(("zoo".into(), a.grad(&g).unwrap().into_data()));
    out
}

#[test]
fn gradients_of_compositions_over_views_match_ndarray() {
    let x = Rng(600).vec(400, -1.0, 1.0);
    let g = grad_pipeline::<Autodiff<Xpu>>(&x, &xd());
    let w = grad_pipeline::<Autodiff<Nd>>(&x, &nd());
    let bad = diff(&g, &w, 1e-4, 1e-5);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

use burn_tensor::ops::{DeformConvOptions, UnfoldOptions};

/// 1-d and 3-d convolutions, deformable convolution, 1-d pools, unfold4d, embedding,
/// down-sampling interpolation and a few composite ops, over views.
fn nn2_pipeline<B: Backend>(x: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let t = |n: usize, off: usize| &x[off..off + n];
    // conv1d: [2, 4, 11] stored [11, 2, 4].
    let x1 = ft::<B, 3>(t(88, 0), [11, 2, 4], d).permute([1, 2, 0]);
    let w1 = ft::<B, 3>(t(4 * 2 * 3, 100), [4, 2, 3], d);
    out.push((
        "conv1d".into(),
        module::conv1d(
            x1.clone(),
            w1.clone(),
            Some(ft::<B, 1>(t(4, 7), [4], d)),
            ConvOptions::new([2], [2], [2], 2),
        )
        .into_data(),
    ));
    out.push((
        "conv_t1d".into(),
        module::conv_transpose1d(
            x1.clone(),
            w1.clone().narrow(1, 0, 1),
            None,
            ConvTransposeOptions::new([3], [1], [1], [2], 4),
        )
        .into_data(),
    ));
    out.push((
        "maxpool1d".into(),
        module::max_pool1d(x1.clone(), 3, 2, 1, 2).into_data(),
    ));
    out.push((
        "avgpool1d".into(),
        module::avg_pool1d(x1.clone(), 4, 3, 2, false).into_data(),
    ));
    out.push((
        "adaptive1d".into(),
        module::adaptive_avg_pool1d(x1.clone(), 4).into_data(),
    ));
    // conv3d: [1, 2, 5, 4, 6] stored reversed.
    let x3 = ft::<B, 5>(t(240, 0), [6, 4, 5, 2, 1], d).permute([4, 3, 2, 1, 0]);
    let w3 = ft::<B, 5>(t(3 * 2 * 2 * 3 * 2, 30), [3, 2, 2, 3, 2], d);
    out.push((
        "conv3d".into(),
        module::conv3d(
            x3.clone(),
            w3.clone(),
            None,
            ConvOptions::new([1, 2, 2], [1, 0, 1], [2, 1, 1], 1),
        )
        .into_data(),
    ));
    out.push((
        "conv_t3d".into(),
        module::conv_transpose3d(
            x3,
            w3.swap_dims(0, 1),
            Some(ft::<B, 1>(t(3, 3), [3], d)),
            ConvTransposeOptions::new([2, 1, 2], [0, 1, 1], [1, 0, 0], [1, 2, 1], 1),
        )
        .into_data(),
    ));
    // deform_conv2d: offsets and mask from the data.
    let x2 = ft::<B, 4>(t(2 * 4 * 5 * 5, 0), [2, 5, 5, 4], d).permute([0, 3, 1, 2]);
    let wd = ft::<B, 4>(t(4 * 2 * 3 * 3, 50), [4, 2, 3, 3], d);
    let (oh, ow) = (3, 3);
    let off = ft::<B, 4>(t(2 * 2 * 18 * oh * ow, 0), [2, 2 * 18, oh, ow], d) * 1.7;
    let mask = activation::sigmoid(ft::<B, 4>(
        t(2 * 2 * 9 * oh * ow, 17),
        [2, 2 * 9, oh, ow],
        d,
    ));
    out.push((
        "deform".into(),
        module::deform_conv2d(
            x2.clone(),
            off,
            wd,
            Some(mask),
            None,
            DeformConvOptions::new([2, 2], [1, 1], [1, 1], 2, 2),
        )
        .into_data(),
    ));
    out.push((
        "unfold4d".into(),
        module::unfold4d(
            x2.clone(),
            [2, 3],
            UnfoldOptions::new([2, 1], [1, 0], [1, 2]),
        )
        .into_data(),
    ));
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        out.push((
            format!("down {mode:?}"),
            module::interpolate(x2.clone(), [2, 3], InterpolateOptions::new(mode.clone()))
                .into_data(),
        ));
        out.push((
            format!("same {mode:?}"),
            module::interpolate(x2.clone(), [5, 1], InterpolateOptions::new(mode)).into_data(),
        ));
    }
    let emb = ft::<B, 2>(t(7 * 3, 0), [3, 7], d).transpose();
    out.push((
        "embedding".into(),
        module::embedding(emb, it::<B, 2>(&[6, 0, 3, 3, 1, 5], [2, 3], d)).into_data(),
    ));
    // Composites.
    let v = ft::<B, 2>(t(5 * 6, 0), [6, 5], d).transpose();
    out.push(("var".into(), v.clone().var(1).into_data()));
    out.push(("var_bias".into(), v.clone().var_bias(0).into_data()));
    out.push((
        "cross".into(),
        v.clone()
            .narrow(1, 0, 3)
            .cross(v.clone().narrow(1, 3, 3), 1)
            .into_data(),
    ));
    out.push(("pad".into(), v.clone().pad((1, 2, 0, 3), -1.0).into_data()));
    out.push((
        "one_hot".into(),
        it::<B, 1>(&[3, 0, 4], [3], d).one_hot::<2>(5).into_data(),
    ));
    out.push((
        "dot".into(),
        v.clone()
            .narrow(0, 1, 1)
            .reshape([6])
            .dot(v.clone().narrow(0, 2, 1).reshape([6]))
            .into_data(),
    ));
    out.push((
        "topk long".into(),
        ft::<B, 1>(x, [x.len()], d).flip([0]).topk(7, 0).into_data(),
    ));
    out.push((
        "is_close".into(),
        v.clone().is_close(v.clone() + 1e-6, None, None).into_data(),
    ));
    out.push(("roll".into(), v.clone().roll(&[2, -1], &[0, 1]).into_data()));
    out.push((
        "arange_step".into(),
        Tensor::<B, 1, Int>::arange_step(-3..17, 4, d).into_data(),
    ));
    out
}

#[test]
fn more_nn_ops_and_composites_match_ndarray() {
    let mut x = Rng(700).vec(2000, -1.0, 1.0);
    // Distinct values for topk.
    x.iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v += i as f32 * 1e-4);
    let g = nn2_pipeline::<Xpu>(&x, &xd());
    let w = nn2_pipeline::<Nd>(&x, &nd());
    let bad = diff(&g, &w, 1e-4, 1e-5);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Degenerate windows: size-1 interpolation sources and targets, adaptive pools that grow,
/// kernels larger than the input, depthwise and strided-past-kernel transposed convolutions.
fn degenerate_nn_pipeline<B: Backend>(x: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let t = |n: usize, off: usize| &x[off..off + n];
    let x4 = ft::<B, 4>(t(2 * 3 * 4 * 5, 0), [2, 4, 5, 3], d).permute([0, 3, 1, 2]); // [2,3,4,5]
    for mode in [
        InterpolateMode::Nearest,
        InterpolateMode::Bilinear,
        InterpolateMode::Bicubic,
    ] {
        for size in [[1, 1], [1, 7], [9, 1]] {
            out.push((
                format!("interp {mode:?} to {size:?}"),
                module::interpolate(x4.clone(), size, InterpolateOptions::new(mode.clone()))
                    .into_data(),
            ));
        }
        let one = x4.clone().narrow(2, 1, 1).narrow(3, 2, 1); // [2,3,1,1]
        out.push((
            format!("interp {mode:?} from 1x1"),
            module::interpolate(one, [3, 4], InterpolateOptions::new(mode)).into_data(),
        ));
    }
    out.push((
        "adaptive grow".into(),
        module::adaptive_avg_pool2d(x4.clone(), [7, 11]).into_data(),
    ));
    out.push((
        "adaptive 1x1".into(),
        module::adaptive_avg_pool2d(x4.clone(), [1, 1]).into_data(),
    ));
    let wbig = ft::<B, 4>(t(6 * 1 * 5 * 6, 100), [6, 1, 5, 6], d);
    out.push((
        "depthwise big kernel".into(),
        module::conv2d(
            x4.clone(),
            wbig,
            None,
            ConvOptions::new([1, 2], [2, 1], [1, 1], 3),
        )
        .into_data(),
    ));
    let wt = ft::<B, 4>(t(3 * 2 * 2 * 2, 300), [3, 2, 2, 2], d);
    out.push((
        "conv_t stride > kernel".into(),
        module::conv_transpose2d(
            x4.clone(),
            wt,
            None,
            ConvTransposeOptions::new([3, 4], [0, 1], [2, 3], [1, 1], 3),
        )
        .into_data(),
    ));
    out.push((
        "maxpool whole".into(),
        module::max_pool2d(x4.clone(), [4, 5], [1, 1], [0, 0], [1, 1]).into_data(),
    ));
    out.push((
        "avgpool pad".into(),
        module::avg_pool2d(x4, [3, 4], [3, 3], [1, 2], true).into_data(),
    ));
    out
}

#[test]
fn degenerate_windows_match_ndarray() {
    let x = Rng(800).vec(500, -1.0, 1.0);
    let g = degenerate_nn_pipeline::<Xpu>(&x, &xd());
    let w = degenerate_nn_pipeline::<Nd>(&x, &nd());
    let bad = diff(&g, &w, 1e-4, 1e-5);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// NaN through sorts, clamps and pairwise extremes. (Not max/min/arg*/cummax/cummin along a
/// dim: xpu propagates NaN there as torch does, documented in `ops::reduce`; ndarray skips it.)
fn nan_pipeline<B: Backend>(d: &B::Device) -> Out {
    let n = f32::NAN;
    let v = ft::<B, 2>(
        &[1.0, n, 3.0, n, -1.0, 2.0, n, n, n, 0.0, 5.0, -2.0],
        [3, 4],
        d,
    )
    .transpose();
    let mut out = Out::new();
    for dim in 0..2 {
        out.push((format!("sort d{dim}"), v.clone().sort(dim).into_data()));
        out.push((
            format!("sort desc d{dim}"),
            v.clone().sort_descending(dim).into_data(),
        ));
    }
    out.push(("clamp".into(), v.clone().clamp(0.0, 2.0).into_data()));
    out.push((
        "max_pair".into(),
        v.clone().max_pair(v.clone().flip([0])).into_data(),
    ));
    out
}

#[test]
fn nan_through_sorts_and_clamps_matches_ndarray() {
    let g = nan_pipeline::<Xpu>(&xd());
    let w = nan_pipeline::<Nd>(&nd());
    let bad = diff(&g, &w, 0.0, 0.0);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// Overlapping views (unfold windows) and stride-0 views through reshape, reductions,
/// matmul (CLBlast-sized too), cat and slice_assign.
fn overlap_pipeline<B: Backend>(x: &[f32], d: &B::Device) -> Out {
    let mut out = Out::new();
    let v = ft::<B, 2>(&x[..3 * 300], [3, 300], d);
    let w = v.clone().unfold::<3, _>(1, 100, 7); // [3, 29, 100], windows overlap
    out.push(("unfold copy".into(), w.clone().into_data()));
    out.push(("unfold sum d2".into(), w.clone().sum_dim(2).into_data()));
    out.push(("unfold cumsum d1".into(), w.clone().cumsum(1).into_data()));
    out.push((
        "unfold reshape".into(),
        w.clone().reshape([3 * 29, 100]).into_data(),
    ));
    let wt = w.clone().swap_dims(1, 2); // [3, 100, 29]
    out.push((
        "unfold matmul".into(),
        w.clone().matmul(wt.clone()).into_data(),
    ));
    out.push((
        "unfold matmul small".into(),
        w.clone()
            .narrow(2, 0, 5)
            .matmul(wt.clone().narrow(1, 0, 5))
            .into_data(),
    ));
    out.push((
        "unfold slice_assign".into(),
        w.clone()
            .slice_assign([0..2, 3..5, 10..20], w.clone().slice([1..3, 0..2, 0..10]))
            .into_data(),
    ));
    let e = v.clone().narrow(0, 1, 1).expand([64, 300]);
    out.push((
        "expand matmul".into(),
        e.clone().matmul(v.clone().transpose()).into_data(),
    ));
    out.push((
        "expand reshape".into(),
        e.clone().reshape([300, 64]).into_data(),
    ));
    out.push(("expand argmax".into(), e.clone().argmax(0).into_data()));
    out.push((
        "cat".into(),
        Tensor::cat(
            vec![
                e.clone().narrow(0, 0, 2),
                v.clone(),
                w.clone().narrow(1, 0, 1).reshape([3, 100]).repeat_dim(1, 3),
            ],
            0,
        )
        .into_data(),
    ));
    out
}

#[test]
fn overlapping_and_broadcast_views_match_ndarray() {
    let x = Rng(900).vec(1000, -1.0, 1.0);
    let g = overlap_pipeline::<Xpu>(&x, &xd());
    let w = overlap_pipeline::<Nd>(&x, &nd());
    let bad = diff(&g, &w, 1e-4, 1e-4);
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}
