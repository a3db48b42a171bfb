//! Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6): projections, causal depthwise conv + SiLU,
//! l2-normalised q/k, the gated delta rule, a gated RMSNorm and the output projection.

use super::attention::slice;
use super::deltanet_gguf::{grouped_ba, kmap_of, split_grouped_ba, Dims};
use super::split::Run;
use super::verify::{self, row_base};
use super::writer::Writer;
use super::{LayerCtx, Sequence};
use crate::graph::Op;
use crate::model::spec::{Dialect, GdnLayout, Mixer};

/// q/k l2-norm epsilon (transformers' `l2norm` default).
const L2_EPS: f64 = 1e-6;

/// Writes the Gated DeltaNet mixer over `hn`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hn: &str) -> String {
    let Mixer::GatedDeltaNet { k_heads: nk, v_heads: nv, k_dim: dk, v_dim: dv, layout, .. } = ctx.layer.mixer else {
        unreachable!("deltanet::write on a non-DeltaNet layer")
    };
    let gguf = matches!(ctx.spec.dialect, Dialect::Gguf);
    let decl = declare(w, ctx, gguf);
    let n = ctx.rows;
    let (nk, nv) = (ctx.local(nk), ctx.local(nv));
    let vd = nv * dv;
    let dims = Dims { rows: n, k_heads: nk, v_heads: nv, v_dim: dv };
    let (mixed, z, b, a) = match &decl.projections {
        Projections::Grouped(wqkvz, wba) => grouped(w, hn, &dims, dk, [wqkvz, wba]),
        Projections::SplitGroupedBa(wqkv, wz, wba) => split_grouped_ba(w, hn, &dims, [wqkv, wz, wba]),
        Projections::Split(wqkv, wz, wb, wa) => {
            let mixed = w.op("mix", Op::Linear, &[hn, wqkv]);
            let zf = w.op("zf", Op::Linear, &[hn, wz]);
            let z = w.op("z", Op::Reshape { shape: vec![n, nv, dv] }, &[&zf]);
            let b = w.op("b", Op::Linear, &[hn, wb]);
            let a = w.op("a", Op::Linear, &[hn, wa]);
            (mixed, z, b, a)
        }
    };
    let (qs, kl, vh) = conv_qkv(w, ctx, &decl, &dims, dk, &mixed);

    // Gates: β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias).
    let beta = w.op("bt", Op::Sigmoid, &[&b]);
    let neg_a = if gguf {
        decl.alog.clone()
    } else {
        let ea = w.op("ea", Op::Exp, &[&decl.alog]);
        w.op("na", Op::Neg, &[&ea])
    };
    let ad = w.op("ad", Op::Add, &[&a, &decl.dtb]);
    let sp = w.op("sp", Op::Softplus, &[&ad]);
    let g = w.op("g", Op::Mul, &[&sp, &neg_a]);

    let inputs = [("qs", qs.as_str()), ("kl", &kl), ("vh", &vh), ("g", &g), ("bt", &beta)];
    let kmap = kmap_of(layout);
    let o = ctx.per_sequence(w, "o", &inputs, |w, seq, x| {
        match ctx.decode().then(|| w.state_split("Sd", &[decl.full_nv, dk, dv], 0, &decl.state_heads)) {
            Some(sd) if ctx.verify().is_some() => delta_verify(w, ctx, &decl, seq, &sd, x),
            Some(sd) => w.update_with("o", &sd, Op::DeltaStep { kmap }, &[&sd, &x[0], &x[1], &x[2], &x[3], &x[4]]),
            None => w.op("o", Op::DeltaScan { kmap }, &[&x[0], &x[1], &x[2], &x[3], &x[4]]),
        }
    });
    // Gated RMSNorm: plain weight, normalise first, then multiply by silu(z).
    let on = w.op("on", super::norm_op(ctx.layer.norms.eps, false), &[&o, &decl.gn]);
    let zs = w.op("zs", Op::Silu, &[&z]);
    let og = w.op("og", Op::Mul, &[&on, &zs]);
    let of = w.op("of", Op::Reshape { shape: vec![n, vd] }, &[&og]);
    w.op("mo", Op::Linear, &[&of, &decl.wo])
}

/// A layer's weights, declared with their splits before its statements, and the runs of its
/// states.
struct Decl {
    projections: Projections,
    cw: String,
    dtb: String,
    /// `A_log` (HF) or `ssm_a = −exp(A_log)` (GGUF).
    alog: String,
    gn: String,
    wo: String,
    full_nv: usize,
    full_conv: usize,
    conv_runs: Vec<Run>,
    state_heads: Vec<Run>,
}

/// Declares the layer's weights. Each chip its key heads and their value heads. The conv
/// channels are q | k | v heads in every layout (`mix` concatenates them), so a chip holds
/// three runs of them. Value head `h` uses key head `h / r` (grouped: one run of value heads)
/// or `h mod nk` (tiled: `r` runs of `nk` value heads, chip `c` taking the same share of each).
fn declare(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, gguf: bool) -> Decl {
    let Mixer::GatedDeltaNet { k_heads: nk, v_heads: nv, k_dim: dk, v_dim: dv, conv_kernel: kernel, layout } =
        ctx.layer.mixer
    else {
        unreachable!("deltanet::declare on a non-DeltaNet layer")
    };
    let d = ctx.spec.d_model;
    let r = nv / nk;
    let (full_kd, full_vd) = (nk * dk, nv * dv);
    let full_conv = 2 * full_kd + full_vd;
    let value_runs = |offset: usize, unit: usize| -> Vec<Run> {
        match layout {
            GdnLayout::SplitTiled => (0..r).map(|t| Run { offset: offset + t * nk * unit, count: nk, unit }).collect(),
            _ => vec![Run { offset, count: nv, unit }],
        }
    };
    let mut conv_runs = vec![Run::heads(nk, dk), Run { offset: full_kd, count: nk, unit: dk }];
    conv_runs.extend(value_runs(2 * full_kd, dv));
    let (v_heads, per_v_head) = (value_runs(0, dv), value_runs(0, 1));
    let projections = match layout {
        GdnLayout::Grouped => Projections::Grouped(
            w.projection_split("Wqkvz", &[full_conv + full_vd, d], 0, &[Run::heads(nk, 2 * dk + 2 * r * dv)]),
            w.projection_split("Wba", &[2 * nv, d], 0, &[Run::heads(nk, 2 * r)]),
        ),
        GdnLayout::SplitGroupedBa => Projections::SplitGroupedBa(
            w.projection_split("Wqkv", &[full_conv, d], 0, &conv_runs),
            w.projection_split("Wz", &[full_vd, d], 0, &v_heads),
            w.projection_split("Wba", &[2 * nv, d], 0, &[Run::heads(nk, 2 * r)]),
        ),
        GdnLayout::Split | GdnLayout::SplitTiled => Projections::Split(
            w.projection_split("Wqkv", &[full_conv, d], 0, &conv_runs),
            w.projection_split("Wz", &[full_vd, d], 0, &v_heads),
            w.projection_split("Wb", &[nv, d], 0, &per_v_head),
            w.projection_split("Wa", &[nv, d], 0, &per_v_head),
        ),
    };
    // HF stores conv1d as [conv, 1, K]; GGUF squeezes it to [conv, K].
    let cw = if gguf {
        w.weight_split("cw", &[full_conv, kernel], 0, &conv_runs)
    } else {
        w.weight_split("cw", &[full_conv, 1, kernel], 0, &conv_runs)
    };
    let dtb = w.weight_split("dtb", &[nv], 0, &per_v_head);
    // HF stores A_log; GGUF stores ssm_a = −exp(A_log).
    let alog = w.weight_split(if gguf { "ssma" } else { "Alog" }, &[nv], 0, &per_v_head);
    let gn = w.weight("gn", &[dv]);
    let wo = w.projection_split("Wo", &[d, full_vd], 1, &v_heads);
    Decl { projections, cw, dtb, alog, gn, wo, full_nv: nv, full_conv, conv_runs, state_heads: per_v_head }
}

/// HF Qwen3-Next's `Wqkvz` and `Wba`, grouped by key head: mixed qkv `[N, conv]`, z
/// `[N, nv, dv]`, b and a `[N, nv]`.
fn grouped(
    w: &mut Writer<'_>,
    hn: &str,
    dims: &Dims,
    dk: usize,
    [wqkvz, wba]: [&str; 2],
) -> (String, String, String, String) {
    let Dims { rows: n, k_heads: nk, v_heads: nv, v_dim: dv } = *dims;
    let r = nv / nk;
    let (kd, vd) = (nk * dk, nv * dv);
    let p = w.op("p", Op::Linear, &[hn, wqkvz]);
    let pg = w.op("pg", Op::Reshape { shape: vec![n, nk, 2 * dk + 2 * r * dv] }, &[&p]);
    let qg = w.op("qg", slice(2, 0, dk), &[&pg]);
    let kg = w.op("kg", slice(2, dk, dk), &[&pg]);
    let vg = w.op("vg", slice(2, 2 * dk, r * dv), &[&pg]);
    let zg = w.op("zg", slice(2, 2 * dk + r * dv, r * dv), &[&pg]);
    let qf = w.op("qf", Op::Reshape { shape: vec![n, kd] }, &[&qg]);
    let kf = w.op("kf", Op::Reshape { shape: vec![n, kd] }, &[&kg]);
    let vf = w.op("vf", Op::Reshape { shape: vec![n, vd] }, &[&vg]);
    let mixed = w.op("mix", Op::Concat { axis: 1 }, &[&qf, &kf, &vf]);
    let z = w.op("z", Op::Reshape { shape: vec![n, nv, dv] }, &[&zg]);
    let (b, a) = grouped_ba(w, hn, dims, wba);
    (mixed, z, b, a)
}

/// Causal depthwise conv + SiLU over mixed qkv (each sequence's own conv state), split into
/// scaled l2-normalised q, l2-normalised k `[N, nk, dk]` and v `[N, nv, dv]`.
fn conv_qkv(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    decl: &Decl,
    dims: &Dims,
    dk: usize,
    mixed: &str,
) -> (String, String, String) {
    let Dims { rows: n, k_heads: nk, v_heads: nv, v_dim: dv } = *dims;
    let Mixer::GatedDeltaNet { conv_kernel: kernel, .. } = ctx.layer.mixer else {
        unreachable!("deltanet::conv_qkv on a non-DeltaNet layer")
    };
    let (kd, vd) = (nk * dk, nv * dv);
    let conv = 2 * kd + vd;
    let gguf = matches!(ctx.spec.dialect, Dialect::Gguf);
    let cwk = if gguf { decl.cw.clone() } else { w.op("cwk", Op::Reshape { shape: vec![conv, kernel] }, &[&decl.cw]) };
    // The conv and recurrent states are each sequence's own.
    let cv = ctx.per_sequence(w, "cv", &[("mix", mixed)], |w, seq, x| {
        let mixed = &x[0];
        match ctx.decode().then(|| w.state_split("Cv", &[kernel - 1, decl.full_conv], 1, &decl.conv_runs)) {
            Some(cstate) if ctx.verify().is_some() => conv_verify(w, ctx, decl, seq, [mixed, &cwk, &cstate], conv),
            Some(cstate) => {
                let cv = w.op("cv", Op::ConvStep, &[mixed, &cwk, &cstate]);
                w.update(&cstate, Op::ConvShift, &[&cstate, mixed]);
                cv
            }
            None => w.op("cv", Op::ConvStep, &[mixed, &cwk]),
        }
    });
    let cs = w.op("cs", Op::Silu, &[&cv]);
    let qc = w.op("qc", slice(1, 0, kd), &[&cs]);
    let kc = w.op("kc", slice(1, kd, kd), &[&cs]);
    let vc = w.op("vc", slice(1, 2 * kd, vd), &[&cs]);
    let qh = w.op("qh", Op::Reshape { shape: vec![n, nk, dk] }, &[&qc]);
    let kh = w.op("kh", Op::Reshape { shape: vec![n, nk, dk] }, &[&kc]);
    let vh = w.op("vh", Op::Reshape { shape: vec![n, nv, dv] }, &[&vc]);
    let ql = w.op("ql", Op::L2Norm { eps: L2_EPS }, &[&qh]);
    let kl = w.op("kl", Op::L2Norm { eps: L2_EPS }, &[&kh]);
    let qs = w.op("qs", Op::Scale { by: 1.0 / (dk as f64).sqrt() }, &[&ql]);
    (qs, kl, vh)
}

/// The in-projections of each layout, declared (with their splits) before the statements.
enum Projections {
    /// `Wqkvz`, `Wba`: grouped by key head (HF Qwen3-Next).
    Grouped(String, String),
    /// `Wqkv`, `Wz`, `Wba` (llama.cpp's Qwen3-Next).
    SplitGroupedBa(String, String, String),
    /// `Wqkv`, `Wz`, `Wb`, `Wa` (Qwen3.5/3.6, HF and llama.cpp).
    Split(String, String, String, String),
}

/// A verify step's conv over one sequence's rows, from the state its `resume` input names: the
/// windows after rows `0..draft` kept in `Ch` (written once, so stored as a decode step stores
/// its state), each row convolved over the window the row before left, as stored, and the last
/// window left in `Cv` (`author::verify`). `conv` is this chip's channels.
fn conv_verify(
    w: &mut Writer<'_>,
    ctx: &LayerCtx<'_>,
    decl: &Decl,
    seq: &Sequence,
    [mixed, cwk, cstate]: [&str; 3],
    conv: usize,
) -> String {
    let Mixer::GatedDeltaNet { conv_kernel: kernel, .. } = ctx.layer.mixer else {
        unreachable!("deltanet::conv_verify on a non-DeltaNet layer")
    };
    let draft = ctx.verify().expect("a verify step");
    let (shape, flat) = ([kernel - 1, conv], (kernel - 1) * conv);
    let history = w.state_split("Ch", &[draft, kernel - 1, decl.full_conv], 2, &decl.conv_runs);
    let hf = w.op("cvhf", Op::Reshape { shape: vec![draft, flat] }, &[&history]);
    let start = verify::resume(w, seq, "cvh", cstate, &[hf], &shape);
    // The window after row `i`: rows `i + 1 ..= i + K − 1` of the state followed by the rows.
    let all = w.op("vcu", Op::Concat { axis: 0 }, &[&start, mixed]);
    let windows: Vec<String> = (0..draft)
        .map(|i| {
            let window = w.op(&row_base("vcw", i), slice(0, i + 1, kernel - 1), &[&all]);
            verify::snapshot(w, "vcs", i, &window, &shape)
        })
        .collect();
    verify::keep(w, "vch", &history, &windows, &shape);
    let mut outs = Vec::new();
    for i in 0..=draft {
        let state = match i {
            0 => start.clone(),
            _ => {
                let kept = w.op(&row_base("vck", i), slice(0, i - 1, 1), &[&history]);
                w.op(&row_base("vcp", i), Op::Reshape { shape: shape.to_vec() }, &[&kept])
            }
        };
        let row = w.op(&row_base("vm", i), slice(0, i, 1), &[mixed]);
        outs.push(w.op(&row_base("vc", i), Op::ConvStep, &[&row, cwk, &state]));
    }
    w.update(cstate, slice(0, draft + 1, kernel - 1), &[&all]);
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    w.op("cv", Op::Concat { axis: 0 }, &refs)
}

/// A verify step's delta rule over one sequence's rows (`x`: q, k, v, g, beta), from the state
/// its `resume` input names: the rows stepped one at a time, each from the state the row before
/// stored (`Sh{i}r` after row `i < draft`, each written once, so rounded as a decode step
/// stores its state), the last into `Sd` (`author::verify`).
fn delta_verify(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, decl: &Decl, seq: &Sequence, sd: &str, x: &[String]) -> String {
    let Mixer::GatedDeltaNet { v_heads, k_dim: dk, v_dim: dv, layout, .. } = ctx.layer.mixer else {
        unreachable!("deltanet::delta_verify on a non-DeltaNet layer")
    };
    let draft = ctx.verify().expect("a verify step");
    let shape = [ctx.local(v_heads), dk, dv];
    let flat: usize = shape.iter().product();
    let kept: Vec<String> =
        (0..draft).map(|i| w.state_split(&row_base("Sh", i), &[decl.full_nv, dk, dv], 0, &decl.state_heads)).collect();
    let flats: Vec<String> = kept
        .iter()
        .enumerate()
        .map(|(i, s)| w.op(&row_base("vdf", i), Op::Reshape { shape: vec![1, flat] }, &[s]))
        .collect();
    let mut state = verify::resume(w, seq, "sdh", sd, &flats, &shape);
    let kmap = kmap_of(layout);
    let mut outs = Vec::new();
    for i in 0..=draft {
        let row: Vec<String> = ["vq", "vk", "vv", "vg", "vb"]
            .iter()
            .zip(x)
            .map(|(base, t)| w.op(&row_base(base, i), slice(0, i, 1), &[t]))
            .collect();
        let args = [state.as_str(), &row[0], &row[1], &row[2], &row[3], &row[4]];
        let target = kept.get(i).map_or(sd, String::as_str);
        outs.push(w.update_with(&row_base("vo", i), target, Op::DeltaStep { kmap }, &args));
        state = target.to_string();
    }
    let refs: Vec<&str> = outs.iter().map(String::as_str).collect();
    w.op("o", Op::Concat { axis: 0 }, &refs)
}
