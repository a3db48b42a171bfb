//! Mixture of experts: `route` (softmax or sigmoid scores, an optional selection bias,
//! group-limited top-k, ties to the lower index, renormalisation, scaling) and `experts`, which
//! reads only the experts a step selects, one expert at a time, folding Q8_0, FP8 and MXFP4
//! slabs block by block; tileable along the model dim.

use std::collections::BTreeMap;

use super::call::{kernels, ArgVal, Call, Outs};
use super::elementwise::{gelu_tanh, sigmoid};
use super::matmul::products;
use super::region::{region, untiled, Axes};
use super::rows::Rows;
use super::tensor::SimTensor;
use super::{invalid, SimBindings, SimError, WeightSlab};
use crate::op::{attrs, Act, GroupScore, Score};
use crate::program::Storage;
use crate::q8::QK8_0;
use rdu_checkpoint::{Fp8View, GgmlType};

kernels! {
    Route(call, a) => route(call, a),
    Experts(call, a) => experts(call, a),
}

/// `w [N, K]`, `idx i32[N, K]`: each row's `K` chosen experts and their weights. Scores are
/// `softmax(logits)` or `sigmoid(logits)` (`score`); the experts are chosen by the scores plus
/// the optional `bias` operand, within the `topk_groups` groups whose `group_score` (the max,
/// or the sum of the two largest, of their biased scores) is largest; the weights are the
/// unbiased scores, renormalised when `norm`, times `scale`.
fn route(call: &Call<'_>, a: &attrs::Route) -> Outs {
    untiled(call.tiling())?;
    let (t, logits) = call.f32(0)?;
    let &[n, e] = t.shape.as_slice() else { return invalid(format!("expects logits [N, E], given {:?}", t.shape)) };
    let (k, groups, keep) = (a.k, a.groups, a.topk_groups);
    if k == 0 || k > e || e > i32::MAX as usize {
        return invalid(format!("k={k} must satisfy 1 <= k <= {e}"));
    }
    if groups == 0 || !e.is_multiple_of(groups) || keep == 0 || keep > groups {
        return invalid(format!("{e} experts cannot be split into {groups} groups keeping {keep}"));
    }
    if a.group_score == GroupScore::Top2 && groups > 1 && e / groups < 2 {
        return invalid(format!("group_score=top2 needs groups of 2 experts or more, not {}", e / groups));
    }
    let bias = match call.args.len() {
        2 => match call.f32(1)? {
            (b, data) if b.shape == [e] => Some(data),
            (b, _) => return invalid(format!("expects a bias [{e}], given {:?}", b.shape)),
        },
        _ => None,
    };
    let (mut w, mut idx) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
    for row in logits.chunks_exact(e) {
        let scores = scores(a.score, row);
        let mut choice: Vec<f32> = match bias {
            Some(b) => scores.iter().zip(b).map(|(s, b)| s + b).collect(),
            None => scores.clone(),
        };
        if groups > 1 {
            let size = e / groups;
            let best: Vec<f32> = choice.chunks_exact(size).map(|g| group_score(a.group_score, g)).collect();
            let kept = descending(&best, keep);
            for (gi, group) in choice.chunks_exact_mut(size).enumerate() {
                if !kept.contains(&gi) {
                    group.fill(f32::NEG_INFINITY);
                }
            }
        }
        let top = descending(&choice, k);
        let mut chosen: Vec<f32> = top.iter().map(|&i| scores[i]).collect();
        if a.norm {
            let sum: f32 = chosen.iter().sum();
            chosen.iter_mut().for_each(|v| *v /= sum);
        }
        w.extend(chosen.iter().map(|v| v * a.scale as f32));
        idx.extend(top.iter().map(|&i| i as i32));
    }
    Ok(vec![SimTensor::f32(vec![n, k], w), SimTensor::i32(vec![n, k], idx)])
}

/// A row's scores: its softmax, or each logit's sigmoid.
fn scores(score: Score, row: &[f32]) -> Vec<f32> {
    if score == Score::Sigmoid {
        return row.iter().map(|&v| sigmoid(v)).collect();
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = row.iter().map(|v| super::mathf::exp(v - max)).collect();
    let total: f32 = exps.iter().sum();
    exps.iter().map(|v| v / total).collect()
}

/// A group's score: its largest choice score, or the sum of its two largest.
fn group_score(how: GroupScore, group: &[f32]) -> f32 {
    match how {
        GroupScore::Max => group.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        GroupScore::Top2 => descending(group, 2).iter().map(|&i| group[i]).sum(),
    }
}

/// gpt-oss's `alpha`: the gate's sigmoid reads `alpha · gate`.
const SWIGLU_OAI_ALPHA: f32 = 1.702;

/// How an expert's hidden unit is made of its gate `g` and up `u` projections (biases added).
#[derive(Clone, Copy)]
enum Gated {
    /// `act(g) · u`.
    Act(fn(f32) -> f32),
    /// gpt-oss: `(clamp(u, −l, l) + 1) · g′ σ(α g′)` with `g′ = min(g, l)`.
    SwigluOai { limit: f32 },
}

impl Gated {
    fn of(a: &attrs::Experts) -> Result<Gated, SimError> {
        let gated = match (a.act, a.limit.map(|l| l as f32)) {
            (Act::Silu, None) => Gated::Act(|v| v * sigmoid(v)),
            (Act::GeluTanh, None) => Gated::Act(gelu_tanh),
            (Act::SwigluOai, Some(limit)) if limit.is_finite() && limit > 0.0 => Gated::SwigluOai { limit },
            (Act::SwigluOai, _) => return invalid("act=swiglu_oai needs limit=L, a finite number above 0"),
            (Act::Silu | Act::GeluTanh, Some(_)) => return invalid("limit goes with act=swiglu_oai only"),
        };
        Ok(gated)
    }

    fn apply(self, g: f32, u: f32) -> f32 {
        match self {
            Gated::Act(act) => act(g) * u,
            Gated::SwigluOai { limit } => {
                let g = g.min(limit);
                (u.clamp(-limit, limit) + 1.0) * (g * sigmoid(SWIGLU_OAI_ALPHA * g))
            }
        }
    }
}

/// `Σₖ w[n,k] · Wd[e] h` with `e = idx[n,k]` and `h = gated(Wg[e] x (+ bg[e]), Wu[e] x (+ bu[e]))`.
fn experts(call: &Call<'_>, a: &attrs::Experts) -> Outs {
    let (tx, x) = call.f32(0)?;
    let (tw, w) = call.f32(1)?;
    let (ti, idx) = call.i32(2)?;
    let gated = Gated::of(a)?;
    if call.args.len() == 7 {
        return invalid("takes the gate and up biases together: 6 or 8 arguments, given 7");
    }
    let biased = call.args.len() == 8;
    let (gs, us, ds) = (stacked_shape(call, 3)?, stacked_shape(call, 4)?, stacked_shape(call, 5)?);
    let (&[n, d], &[wn, kk], &[n_e, hid, gd]) = (tx.shape.as_slice(), tw.shape.as_slice(), gs.as_slice()) else {
        return invalid(format!(
            "expects x [N, D], w [N, K], Wg [E, I, D], given {:?}, {:?}, {gs:?}",
            tx.shape, tw.shape
        ));
    };
    if wn != n || ti.shape != tw.shape || gd != d || us != gs || ds != [n_e, d, hid] {
        let shapes = [&tx.shape, &tw.shape, &ti.shape, &gs, &us, &ds];
        return invalid(format!("x, w, idx, Wg, Wu, Wd shapes {shapes:?} do not agree"));
    }
    if biased && (stacked_shape(call, 6)? != [n_e, hid] || stacked_shape(call, 7)? != [n_e, hid]) {
        return invalid(format!("the biases bg, bu must be [{n_e}, {hid}]"));
    }
    let mut users: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for (flat, &e) in idx.iter().enumerate() {
        match usize::try_from(e) {
            Ok(e) if e < n_e => users.entry(e).or_default().push((flat / kk, flat % kk)),
            _ => return invalid(format!("expert index {e} is out of range for {n_e} experts")),
        }
    }
    let reg = region(call.tiling(), &[n, d], Axes::Only(1), 1)?;
    let mut contrib = vec![0.0f32; n * kk * d];
    let Some(per) = hid.checked_mul(d) else { return invalid("expert weights are too large") };
    for (&e, who) in &users {
        let (sg, su, sd) = (fetch(call, 3, e, per, hid)?, fetch(call, 4, e, per, hid)?, fetch(call, 5, e, per, d)?);
        let biases = if biased { Some((dense_row(call, 6, e, hid)?, dense_row(call, 7, e, hid)?)) } else { None };
        let m = who.len();
        let xs = crate::view::gather(who.len() * d, who.iter().map(|&(r, _)| &x[r * d..(r + 1) * d]));
        let gate = products(rows(&sg, d)?, &xs, m, &[(0, hid)]);
        let up = products(rows(&su, d)?, &xs, m, &[(0, hid)]);
        let mut h = vec![0.0f32; m * hid];
        for i in 0..hid {
            let (bg, bu) = biases.as_ref().map_or((0.0, 0.0), |(bg, bu)| (bg[i], bu[i]));
            for u in 0..m {
                h[u * hid + i] = gated.apply(gate[i * m + u] + bg, up[i * m + u] + bu);
            }
        }
        let down = products(rows(&sd, hid)?, &h, m, &reg.tiles);
        let mut at = 0;
        for &(s, t) in &reg.tiles {
            for (u, &(r, slot)) in who.iter().enumerate() {
                for j in s..t {
                    contrib[(r * kk + slot) * d + j] = down[(at + j - s) * m + u];
                }
            }
            at += t - s;
        }
    }
    let mut y = vec![0.0f32; n * d];
    for r in 0..n {
        for &(s, t) in &reg.tiles {
            for slot in 0..kk {
                let weight = w[r * kk + slot];
                let c = &contrib[(r * kk + slot) * d..(r * kk + slot + 1) * d];
                for j in s..t {
                    y[r * d + j] += weight * c[j];
                }
            }
        }
    }
    Ok(vec![SimTensor::f32(vec![n, d], y)])
}

/// Expert `e`'s row of the dense stacked bias at argument `i`: `len` values.
fn dense_row(call: &Call<'_>, i: usize, e: usize, len: usize) -> Result<Vec<f32>, SimError> {
    match fetch(call, i, e, len, 1)? {
        WeightSlab::Dense(v) => Ok(v.into_owned()),
        _ => invalid(format!("the bias at argument {i} must be dense, not stored quantised")),
    }
}

fn stacked_shape(call: &Call<'_>, i: usize) -> Result<Vec<usize>, SimError> {
    match call.args.get(i) {
        Some(ArgVal::Stacked(decl)) => Ok(decl.shape.clone()),
        Some(ArgVal::Q8(w)) => Ok(w.shape.clone()),
        Some(ArgVal::Fp8(w)) => Ok(w.shape.clone()),
        Some(ArgVal::Packed(w, _)) => Ok(w.shape.to_vec()),
        _ => Ok(call.dense(i)?.shape.clone()),
    }
}

/// Expert `e` of the stacked weight argument `i`: a slab of `per` values (`rows` rows), as
/// its declaration stores it.
fn fetch<'e>(call: &Call<'e>, i: usize, e: usize, per: usize, rows: usize) -> Result<WeightSlab<'e>, SimError> {
    let slab = match call.args.get(i) {
        Some(ArgVal::Q8(w)) => w.blocks.get(e * per / QK8_0..(e + 1) * per / QK8_0).map(|b| WeightSlab::Q8(b.into())),
        Some(ArgVal::Fp8(w)) => crate::sim::bind::fp8_expert(std::borrow::Cow::Borrowed(*w), e),
        Some(ArgVal::Packed(w, _)) => {
            w.expert_bytes(e).map(|bytes| WeightSlab::Packed { format: w.format, bytes: bytes.into() })
        }
        Some(ArgVal::Stacked(decl)) => {
            let found = SimBindings::expert(call.bindings, &decl.name, e).ok_or_else(|| SimError::Missing {
                name: format!("{} (expert {e})", decl.name),
                role: decl.role.as_str().to_string(),
            })?;
            let stored = match &found {
                WeightSlab::Dense(_) => Storage::Dense,
                WeightSlab::Q8(_) => Storage::Q8_0,
                WeightSlab::Fp8 { block, .. } => Storage::Fp8 { rows: block[0] as u32, cols: block[1] as u32 },
                WeightSlab::Packed { format: GgmlType::MXFP4, .. } => Storage::Mxfp4,
                WeightSlab::Packed { .. } => Storage::Dense,
            };
            if stored != decl.storage {
                let message = format!("expert {e} is stored {}", stored.word());
                return Err(SimError::Binding { name: decl.name.clone(), message });
            }
            Some(found)
        }
        _ => call.f32(i)?.1.get(e * per..(e + 1) * per).map(|s| WeightSlab::Dense(s.into())),
    };
    let len_ok = match &slab {
        Some(WeightSlab::Dense(v)) => v.len() == per,
        Some(WeightSlab::Q8(b)) => b.len() * QK8_0 == per && per.is_multiple_of(QK8_0),
        Some(WeightSlab::Fp8 { block, values, scales }) => {
            let cols = per.checked_div(rows).unwrap_or(0);
            let grid = rdu_checkpoint::Fp8Grid::of(&[rows, cols], *block).ok().and_then(|g| g.len());
            values.len() == per && grid == Some(scales.len())
        }
        Some(WeightSlab::Packed { format, bytes }) => {
            let (block, size) = (format.block_size() as usize, format.type_size() as usize);
            per.is_multiple_of(block) && bytes.len() == per / block * size
        }
        None => false,
    };
    match slab {
        Some(s) if len_ok => Ok(s),
        _ => invalid(format!("expert {e} of argument {i} does not hold {per} values")),
    }
}

fn rows<'a>(slab: &'a WeightSlab<'_>, cols: usize) -> Result<Rows<'a>, SimError> {
    match slab {
        WeightSlab::Dense(data) => Ok(Rows::Dense { data, cols }),
        WeightSlab::Q8(blocks) if cols.is_multiple_of(QK8_0) => Ok(Rows::Q8 { blocks, cols }),
        WeightSlab::Q8(_) => invalid(format!("a q8_0 expert's rows of {cols} values are not whole blocks")),
        WeightSlab::Fp8 { block, values, scales } => {
            let n_rows = values.len().checked_div(cols).unwrap_or(0);
            let view = Fp8View { rows: n_rows, cols, block: *block, values, scales };
            Ok(Rows::Fp8 { view, first: 0 })
        }
        WeightSlab::Packed { format, bytes } if cols.is_multiple_of(format.block_size() as usize) => {
            Ok(Rows::Packed { format: *format, bytes, cols })
        }
        WeightSlab::Packed { format, .. } => {
            invalid(format!("a {format} expert's rows of {cols} values are not whole blocks"))
        }
    }
}

/// Indices of the `k` largest values, descending, ties to the lower index.
fn descending(values: &[f32], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}
