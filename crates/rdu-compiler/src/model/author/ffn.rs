//! Feed-forward blocks: the gated dense MLP and the mixture of experts (softmax or sigmoid
//! routing, an optional selection bias, top-k, optional renormalisation and scaling,
//! group-limited selection, shared expert with or without its sigmoid gate).

use super::split::Run;
use super::writer::Writer;
use super::LayerCtx;
use crate::graph::Op;
use crate::model::spec::{Act, Ffn, GroupScore, Scoring};
use rdu_spatial::op::{GroupScore as GroupWord, Score};

/// Writes the layer's feed-forward block over `hf`; returns its `[N, D]` output (on a chip of a
/// tensor-parallel layer, its partial sum: [`after_reduce`] adds what must be added once).
pub(super) fn write(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, hf: &str) -> String {
    let d = ctx.spec.d_model;
    match &ctx.layer.ffn {
        Ffn::Dense { hidden, act } => mlp(w, ["Wg", "Wu", "Wd"], ["fg", "fu", "fa", "fm", "fo"], hf, d, *hidden, *act),
        Ffn::Moe { experts, top_k, expert_hidden, act, shared, router, bias } => {
            // The router is replicated; each chip holds its columns of every expert.
            let wr = w.projection("Wr", &[*experts, d]);
            let br = bias.then(|| w.weight("br", &[*experts]));
            // Over chips that would split its MXFP4 blocks, zero-padded (`expert_width`).
            let width = w.expert_width(*expert_hidden);
            let cols = [Run::columns(width)];
            let weg = w.projection_split("Weg", &[*experts, width, d], 1, &cols);
            let weu = w.projection_split("Weu", &[*experts, width, d], 1, &cols);
            let wed = w.projection_split("Wed", &[*experts, d, width], 2, &cols);
            let mut args = vec![hf.to_string(), String::new(), String::new(), weg, weu, wed];
            if *bias {
                args.push(w.weight_split("beg", &[*experts, width], 1, &cols));
                args.push(w.weight_split("beu", &[*experts, width], 1, &cols));
            }
            if width != *expert_hidden {
                for name in &args[3..] {
                    w.padded(name, *expert_hidden);
                }
            }
            // The selection bias only chooses: `route` adds it to the scores it ranks.
            let bsel = router.bias.then(|| w.weight("bsel", &[*experts]));
            let rl = super::attention::linear(w, "rl", hf, &wr, br.as_deref());
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
            let ins: Vec<&str> = [Some(rl.as_str()), bsel.as_deref()].into_iter().flatten().collect();
            let (rw, ri) = w.op2(["rw", "ri"], route, &ins);
            (args[1], args[2]) = (rw, ri);
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let eo = w.op("eo", act.experts(), &refs);
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

/// What the feed-forward block adds once its chips' partial sums are summed (`out`): the
/// experts' down-projection biases (gpt-oss), `Σₖ w[n,k] · bd[idx[n,k]]`, from the route every
/// chip holds whole — their rows gathered by `embed` and weighted by one `linear_heads` over
/// the rows (each row a "head" of `K` inputs). Nothing for other blocks.
pub(super) fn after_reduce(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, out: &str) -> String {
    let Ffn::Moe { experts, top_k, bias: true, .. } = &ctx.layer.ffn else { return out.to_string() };
    let (n, d, k) = (ctx.rows, ctx.spec.d_model, *top_k);
    let bed = w.weight("bed", &[*experts, d]);
    let (rw, ri) = (w.name("rw"), w.name("ri"));
    let ids = w.op("bdi", Op::Reshape { shape: vec![n * k] }, &[&ri]);
    let rows = w.op("bdr", Op::Embed, &[&ids, &bed]);
    let rows = w.op("bdk", Op::Reshape { shape: vec![n, k, d] }, &[&rows]);
    let rows = w.op("bdt", Op::Transpose { perm: vec![0, 2, 1] }, &[&rows]);
    let weights = w.op("bdw", Op::Reshape { shape: vec![1, n, k] }, &[&rw]);
    let sum = w.op("bdh", Op::LinearHeads, &[&weights, &rows]);
    let sum = w.op("bds", Op::Reshape { shape: vec![n, d] }, &[&sum]);
    w.op("fb", Op::Add, &[out, &sum])
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
    let act = act.op().expect("dense MLPs and shared experts are imported silu or gelu_tanh only");
    let a = w.op(values[2], act, &[&g]);
    let m = w.op(values[3], Op::Mul, &[&a, &u]);
    w.op(values[4], Op::Linear, &[&m, &wd])
}
