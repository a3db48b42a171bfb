//! Feed-forward blocks: the gated dense MLP and the mixture of experts (softmax or sigmoid
//! routing, an optional selection bias, top-k, optional renormalisation and scaling,
//! group-limited selection, shared expert with or without its sigmoid gate).

use super::split::Run;
use super::writer::Writer;
use super::LayerCtx;
use crate::graph::Op;
use crate::model::spec::{Act, Ffn, GroupScore, Scoring};
use rdu_spatial::op::{GroupScore as GroupWord, Score};

/// Writes the layer's feed-forward block over `hf`; returns its `[N, D]` output.
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hf: &str) -> String {
    let d = ctx.spec.d_model;
    match &ctx.layer.ffn {
        Ffn::Dense { hidden, act } => mlp(w, ["Wg", "Wu", "Wd"], ["fg", "fu", "fa", "fm", "fo"], hf, d, *hidden, *act),
        Ffn::Moe { experts, top_k, expert_hidden, act, shared, router } => {
            // The router is replicated; each chip holds its columns of every expert.
            let wr = w.projection("Wr", &[*experts, d]);
            let cols = [Run::columns(*expert_hidden)];
            let weg = w.projection_split("Weg", &[*experts, *expert_hidden, d], 1, &cols);
            let weu = w.projection_split("Weu", &[*experts, *expert_hidden, d], 1, &cols);
            let wed = w.projection_split("Wed", &[*experts, d, *expert_hidden], 2, &cols);
            // The selection bias only chooses: `route` adds it to the scores it ranks.
            let bias = router.bias.then(|| w.weight("br", &[*experts]));
            let rl = w.op("rl", Op::Linear, &[hf, &wr]);
            let route = Op::Route {
                k: *top_k,
                norm: router.norm_topk,
                scale: router.scaling,
                groups: router.groups,
                topk_groups: router.topk_groups,
                score: if router.scoring == Scoring::Sigmoid { Score::Sigmoid } else { Score::Softmax },
                // One group has no rival: its score is never read.
                group_score: if router.group_score == GroupScore::Top2 && router.groups > 1 {
                    GroupWord::Top2
                } else {
                    GroupWord::Max
                },
            };
            let ins: Vec<&str> = [Some(rl.as_str()), bias.as_deref()].into_iter().flatten().collect();
            let (rw, ri) = w.op2(["rw", "ri"], route, &ins);
            let eo = w.op("eo", Op::Experts { act: act.experts() }, &[hf, &rw, &ri, &weg, &weu, &wed]);
            let Some(shared) = shared else { return eo };
            let so = mlp(w, ["Wsg", "Wsu", "Wsd"], ["sg", "su", "sa", "sm", "so"], hf, d, shared.hidden, *act);
            let so = if shared.gated {
                let wsgate = w.projection("Wsgate", &[1, d]);
                let sl = w.op("sgl", Op::Linear, &[hf, &wsgate]);
                let ss = w.op("sgs", Op::Sigmoid, &[&sl]);
                w.op("sgo", Op::Mul, &[&so, &ss])
            } else {
                so
            };
            w.op("fo", Op::Add, &[&eo, &so])
        }
    }
}

/// `down(act(gate(x)) ⊙ up(x))` with the given weight and value base names; on a chip of a
/// tensor-parallel layer, its columns of `hidden` (a partial sum of the output).
fn mlp(
    w: &mut Writer<'_>,
    weights: [&str; 3],
    values: [&str; 5],
    x: &str,
    d: usize,
    hidden: usize,
    act: Act,
) -> String {
    let cols = [Run::columns(hidden)];
    let wg = w.projection_split(weights[0], &[hidden, d], 0, &cols);
    let wu = w.projection_split(weights[1], &[hidden, d], 0, &cols);
    let wd = w.projection_split(weights[2], &[d, hidden], 1, &cols);
    let g = w.op(values[0], Op::Linear, &[x, &wg]);
    let u = w.op(values[1], Op::Linear, &[x, &wu]);
    let a = w.op(values[2], act.op(), &[&g]);
    let m = w.op(values[3], Op::Mul, &[&a, &u]);
    w.op(values[4], Op::Linear, &[&m, &wd])
}
