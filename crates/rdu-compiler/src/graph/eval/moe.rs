//! Mixture of experts: `route` (softmax or sigmoid in f64, a selection bias, group-limited
//! top-k) and `experts` (each row's chosen experts, fetched one stacked-weight row at a time).

use super::elementwise::{gelu_tanh, sigmoid, silu};
use super::gemm::{linear_f32, Weights};
use super::{evals, f32s, i32s, out, Kernel};
use crate::graph::{Act, Tensor};
pub(super) use rdu_spatial::op::attrs::Route as Rule;
use rdu_spatial::op::{GroupScore, Score};
use rdu_spatial::q8::Q8Weight;
use std::collections::BTreeMap;
use std::sync::Arc;

evals! {
    Route(ins, a) => route(ins[0], ins.get(1).copied(), a, None),
    // `Run::node` reads the chosen experts' rows as it goes.
    Experts(_ins, _) => Err("experts is evaluated row by row".into()),
}

/// The indices of the `k` largest of `values`, descending, ties to the lower index.
fn top_k(values: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]).then(a.cmp(&b)));
    order.truncate(k);
    order
}

/// A row's scores: its softmax, or each logit's sigmoid.
fn scores(rule: &Rule, row: &[f32]) -> Vec<f64> {
    let row = row.iter().map(|&v| f64::from(v));
    match rule.score {
        Score::Sigmoid => row.map(|v| 1.0 / (1.0 + (-v).exp())).collect(),
        Score::Softmax => {
            let max = row.clone().fold(f64::NEG_INFINITY, f64::max);
            let exps: Vec<f64> = row.map(|v| (v - max).exp()).collect();
            let total: f64 = exps.iter().sum();
            exps.iter().map(|x| x / total).collect()
        }
    }
}

/// A group's score from its experts' choice scores: the largest, or the sum of the two largest.
fn group_score(rule: &Rule, group: &[f64]) -> f64 {
    match rule.group_score {
        GroupScore::Max => group.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        GroupScore::Top2 => top_k(group, 2).iter().map(|&i| group[i]).sum(),
    }
}

/// Scores `s` (`softmax` or `sigmoid` of the logits); choice scores `c = s + bias` (`s` without
/// a bias); with `groups > 1` only the `topk_groups` groups with the largest group score (the
/// max, or the sum of the two largest, of their `c`) are eligible; the `k` eligible experts of
/// largest `c`; their weights `s`, `/ Σ` when `norm`, then `· scale`.
///
/// `tie`: another engine's choices (`[n, k]` expert indices) and a band. A row whose choice
/// differs takes the other one when it is a near-tie — each expert it chooses has `c` within
/// the band of the `k`-th largest eligible `c`, and with groups its group's score within the
/// band of the last group kept (`eval_breaking_all_ties`).
pub(super) fn route(logits: &Tensor, bias: Option<&Tensor>, rule: &Rule, tie: Option<(&[i32], f64)>) -> Kernel {
    let (n, e, k) = (logits.shape()[0], logits.shape()[1], rule.k);
    let ls = f32s(logits)?;
    let bias = bias.map(f32s).transpose()?;
    let (mut weights, mut indices) = (Vec::with_capacity(n * k), Vec::with_capacity(n * k));
    let size = e / rule.groups.max(1);
    for r in 0..n {
        let s = scores(rule, &ls[r * e..(r + 1) * e]);
        let c: Vec<f64> = match bias {
            Some(b) => s.iter().zip(b).map(|(v, &b)| v + f64::from(b)).collect(),
            None => s.clone(),
        };
        let group: Vec<f64> =
            if rule.groups > 1 { c.chunks(size).map(|g| group_score(rule, g)).collect() } else { vec![] };
        let kept = top_k(&group, rule.topk_groups);
        let group_bar = kept.iter().map(|&g| group[g]).fold(f64::INFINITY, f64::min);
        let eligible: Vec<f64> = c
            .iter()
            .enumerate()
            .map(|(i, &v)| if rule.groups <= 1 || kept.contains(&(i / size)) { v } else { f64::NEG_INFINITY })
            .collect();
        let mut chosen = top_k(&eligible, k);
        if let Some((other, band)) = tie {
            let theirs: Option<Vec<usize>> =
                other.get(r * k..(r + 1) * k).map(|o| o.iter().filter_map(|&i| usize::try_from(i).ok()).collect());
            if let Some(theirs) = theirs.filter(|t| t.len() == k && *t != chosen) {
                let bar = chosen.iter().map(|&i| eligible[i]).fold(f64::INFINITY, f64::min);
                let near = theirs
                    .iter()
                    .all(|&i| i < e && c[i] >= bar - band && (rule.groups <= 1 || group[i / size] >= group_bar - band));
                let distinct = theirs.iter().enumerate().all(|(a, x)| !theirs[..a].contains(x));
                if near && distinct {
                    chosen = theirs;
                }
            }
        }
        let mut w: Vec<f64> = chosen.iter().map(|&i| s[i]).collect();
        if rule.norm {
            let sum: f64 = w.iter().sum();
            w.iter_mut().for_each(|v| *v /= sum);
        }
        weights.extend(w.iter().map(|v| (v * rule.scale) as f32));
        for i in chosen {
            indices.push(i32::try_from(i).map_err(|_| format!("expert {i} does not fit i32"))?);
        }
    }
    let idx = Tensor::try_i32(vec![n, k], indices).ok_or("internal: wrong element count")?;
    Ok(vec![out(&[n, k], weights)?, idx])
}

/// Fetches row `e` of stacked weight `which` (0 = Wg, 1 = Wu, 2 = Wd, 3 = bg, 4 = bu).
pub(super) type Rows<'a> = dyn FnMut(usize, usize) -> Result<Expert, String> + 'a;

/// One expert's weight as `experts` reads it: values, or Q8_0 blocks (rows of whole blocks)
/// read as their exact values a block of rows at a time.
pub(super) enum Expert {
    Dense(Arc<Tensor>),
    Q8(Q8Weight),
}

impl Expert {
    /// A bias row's values.
    fn values(&self) -> Result<Vec<f32>, String> {
        match self {
            Expert::Dense(t) => Ok(f32s(t)?.to_vec()),
            Expert::Q8(_) => Err("an expert's bias is read dense, not as Q8_0 blocks".into()),
        }
    }

    /// The weight's rows and `[rows, width]`.
    fn weights(&self) -> Result<(Weights<'_>, usize, usize), String> {
        match self {
            Expert::Dense(t) => Ok((Weights::F32(f32s(t)?), t.shape()[0], t.shape()[1])),
            Expert::Q8(w) => Ok((Weights::Q8(&w.blocks), w.shape[0], w.shape[1])),
        }
    }
}

/// gpt-oss's `alpha`: the gate's sigmoid reads `alpha · gate`.
const SWIGLU_OAI_ALPHA: f64 = 1.702;

/// How an expert's hidden unit is made of its gate and up projections.
#[derive(Clone, Copy)]
pub(super) struct Gated {
    pub act: Act,
    /// `act=swiglu_oai`'s clamp.
    pub limit: Option<f64>,
    /// The gate and up projections carry biases (`bg`, `bu`).
    pub biased: bool,
}

impl Gated {
    /// The hidden unit of gate `g` and up `u` (biases added), in f64.
    fn apply(self, g: f64, u: f64) -> f64 {
        match (self.act, self.limit) {
            (Act::Silu, _) => silu(g) * u,
            (Act::GeluTanh, _) => gelu_tanh(g) * u,
            (Act::SwigluOai, limit) => {
                let limit = limit.unwrap_or(f64::INFINITY);
                let g = g.min(limit);
                (u.clamp(-limit, limit) + 1.0) * g * sigmoid(SWIGLU_OAI_ALPHA * g)
            }
        }
    }
}

/// `Σₖ w[n,k] · Wd[e] h` with `e = idx[n,k]` and `h = gated(Wg[e] x (+ bg[e]), Wu[e] x (+ bu[e]))`,
/// over `ins = [x, w, idx]`.
/// Experts are visited in index order, each fetched once through `rows` (`[I, D]`, `[I, D]`,
/// `[D, I]`, and the biases `[I]`), applied to every row that chose it and dropped before the
/// next: a long chunk holds one expert's weights at a time, not every expert its rows chose.
/// Each row's choices are then summed in their order, as a row-by-row evaluation would.
pub(super) fn experts(ins: &[&Tensor], gated: Gated, n_experts: usize, rows: &mut Rows<'_>) -> Kernel {
    let [x, w, idx] = ins else { return Err("experts takes x, w, idx and three stacked weights".into()) };
    let (n, d) = (x.shape()[0], x.shape()[1]);
    let k = w.shape()[1];
    let (xs, ws, is) = (f32s(x)?, f32s(w)?, i32s(idx)?);
    // Expert → the (row, choice) pairs that chose it.
    let mut users: BTreeMap<usize, Vec<(usize, usize)>> = BTreeMap::new();
    for r in 0..n {
        for c in 0..k {
            let id = is[r * k + c];
            let e = usize::try_from(id).ok().filter(|&e| e < n_experts);
            let e = e.ok_or_else(|| format!("row {r} chose expert {id}, outside the {n_experts} experts"))?;
            users.entry(e).or_default().push((r, c));
        }
    }
    // The down projection of each (row, choice), rounded to f32 as a `linear` would be.
    let mut down = vec![0f32; n * k * d];
    for (&e, who) in &users {
        let experts = [rows(0, e)?, rows(1, e)?, rows(2, e)?];
        let [(wg, hidden, _), (wu, _, _), (wd, _, _)] =
            [experts[0].weights()?, experts[1].weights()?, experts[2].weights()?];
        let biases = if gated.biased { Some((rows(3, e)?.values()?, rows(4, e)?.values()?)) } else { None };
        // The rows that chose expert e, stacked.
        let xe = rdu_spatial::view::gather(who.len() * d, who.iter().map(|&(r, _)| &xs[r * d..(r + 1) * d]));
        let m = who.len();
        // Each product rounded to f32 as a `linear` would be (its bias added in f64 first).
        let (bg, bu) = biases.as_ref().map_or((None, None), |(bg, bu)| (Some(&bg[..]), Some(&bu[..])));
        let gate = linear_f32(&xe, m, wg, hidden, d, bg);
        let up = linear_f32(&xe, m, wu, hidden, d, bu);
        let h: Vec<f32> = gate.iter().zip(&up).map(|(&g, &u)| gated.apply(f64::from(g), f64::from(u)) as f32).collect();
        let ye = linear_f32(&h, m, wd, d, hidden, None);
        for (u, &(r, c)) in who.iter().enumerate() {
            down[(r * k + c) * d..][..d].copy_from_slice(&ye[u * d..(u + 1) * d]);
        }
    }
    let mut data = Vec::with_capacity(n * d);
    for r in 0..n {
        let mut acc = vec![0f64; d];
        for c in 0..k {
            let weight = f64::from(ws[r * k + c]);
            for (o, &v) in acc.iter_mut().zip(&down[(r * k + c) * d..][..d]) {
                *o += weight * f64::from(v);
            }
        }
        data.extend(acc.iter().map(|&v| v as f32));
    }
    Ok(vec![out(x.shape(), data)?])
}
