//! The storage a checkpoint's `quantization_config` declares, for a model lowered without
//! its weights (a preset or a bare config): which weights are stored in its block format.
//!
//! As the checkpoints that declare one store them: every layer projection the author
//! declares `q8` (its `in` axis holds whole blocks of 32) except the MoE router (`Wr`, kept
//! in high precision: DeepSeek-V3's and gpt-oss's routers are not quantised) and the modules
//! `modules_to_not_convert` names (`Quantization::leaves`: a module is a checkpoint tensor's
//! name without its last component; compressed-tensors' `ignore` and `targets`, exact names or
//! `re:` expressions); never the embedding or the head.

use crate::lang::Source;
use crate::model::author::{embed_source, head_source, source_of};
use crate::model::naming::{checkpoint_source, TensorSource};
use crate::model::spec::{Cut, ModelSpec};
use crate::model::storage::Storage;
use rdu_spatial::names::TensorName;
use std::collections::{BTreeMap, BTreeSet};

/// The program name of the MoE router's weight.
const ROUTER: &str = "Wr";

/// Every layer's program (of a decode step; every cut declares the same weights), the
/// embedding's and the head's, each storing every weight the author declares `q8`.
fn blockable_sources(spec: &ModelSpec) -> impl Iterator<Item = Source> + '_ {
    let (cut, all) = (Cut::Decode { ctx: 1 }, Storage::AllQ8);
    let ends = [embed_source(spec, cut, &all), head_source(spec, cut, &all)];
    ends.into_iter().chain((0..spec.n_layers()).map(move |l| source_of(spec, l, cut, &Storage::AllQ8)))
}

/// Every weight of `spec` the author declares `q8`: the embedding's, the head's and every
/// layer's (of a decode step; every cut declares the same weights).
pub fn blockable_weights(spec: &ModelSpec) -> BTreeSet<String> {
    blockable_sources(spec).flat_map(|s| s.stored.into_keys()).collect()
}

/// [`blockable_weights`] with each one's shape, as its program declares it.
fn blockable_shapes(spec: &ModelSpec) -> BTreeMap<String, Vec<usize>> {
    let mut shapes = BTreeMap::new();
    for source in blockable_sources(spec) {
        let Ok(program) = source.program() else { continue };
        for decl in program.decls().filter(|d| source.stored.contains_key(&d.name.text)) {
            shapes.insert(decl.name.text.clone(), decl.ty.shape.clone());
        }
    }
    shapes
}

/// The storage `spec`'s `quantization_config` declares, or `None` when it declares none. An
/// FP8 weight's blocks are the config's (`weight_block_size`, `block_structure`) or follow its
/// shape: `1 × in` for one scale per output row, the matrix for one per tensor.
pub fn declared_storage(spec: &ModelSpec) -> Option<Storage> {
    let q = spec.quantization.as_ref()?;
    let leaves = q.leaver();
    let shapes = if q.format.by_shape() {
        blockable_shapes(spec)
    } else {
        blockable_weights(spec).into_iter().map(|n| (n, Vec::new())).collect()
    };
    let stored = shapes
        .into_iter()
        .filter(|(name, _)| {
            let parsed = TensorName::parse(name);
            parsed.layer.is_some() && parsed.base != ROUTER && !modules(spec, name).iter().any(|m| leaves(m))
        })
        .map(|(name, shape)| (name, q.format.format(&shape)))
        .collect();
    Some(Storage::Exactly(stored))
}

/// The checkpoint modules a program weight is read from (its tensors' names without the last
/// component: `model.layers.3.self_attn.q_proj`).
fn modules(spec: &ModelSpec, name: &str) -> Vec<String> {
    let names = match checkpoint_source(spec, name) {
        Some(
            TensorSource::Tensor(t)
            | TensorSource::Transposed(t)
            | TensorSource::Slice { name: t, .. }
            | TensorSource::Strided { name: t, .. },
        ) => vec![t],
        Some(TensorSource::Stack(parts)) => parts,
        None => Vec::new(),
    };
    names.into_iter().map(|t| t.rsplit_once('.').map_or(t.clone(), |(m, _)| m.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use crate::model::spec::{Declared, Quantization};

    #[test]
    fn patterns_match_whole_module_paths_from_the_start() {
        let q = |p: &str| Quantization { not_converted: vec![p.to_string()], ..Quantization::all(Declared::Mxfp4) };
        assert!(q("model.layers.*.self_attn").leaves("model.layers.12.self_attn.q_proj"));
        assert!(q("model.layers.*.self_attn").leaves("model.layers.12.self_attn"));
        assert!(!q("model.layers.*.self_attn").leaves("model.layers.12.mlp.experts"));
        assert!(!q("model.layers.1").leaves("model.layers.12.mlp"), "a prefix ends at a dot");
        assert!(q("lm_head").leaves("lm_head"));
        assert!(q("fc1").leaves("model.decoder.layers.23.fc1"), "a suffix");
        assert!(!q("mlp").leaves("model.layers.3.mlp.experts"), "neither a prefix nor a suffix");
        assert!(q("model.layers.*.mlp.router").mxfp4("model.layers.3.mlp.experts"));
        assert!(!q("model.layers.*.mlp").mxfp4("model.layers.3.mlp.experts"));
    }

    /// compressed-tensors' `ignore`: a name exactly, or an `re:` expression matched from the
    /// name's start (Python's `re.match`: anchored at the start, not at the end).
    #[test]
    fn ignore_matches_names_exactly_and_expressions_from_the_start() {
        let ct = |ignore: &[&str]| Quantization {
            ignore: ignore.iter().map(|s| s.to_string()).collect(),
            ..Quantization::all(Declared::Fp8Channel)
        };
        let q = ct(&["lm_head", "model.layers.0.self_attn.o_proj", "re:.*mlp\\.gate$", "re:model\\.layers\\.1\\."]);
        assert!(q.leaves("lm_head") && q.leaves("model.layers.0.self_attn.o_proj"));
        assert!(!q.leaves("model.layers.10.self_attn.o_proj"), "an exact name is not a prefix");
        assert!(q.leaves("model.layers.7.mlp.gate") && !q.leaves("model.layers.7.mlp.gate_proj"));
        assert!(q.leaves("model.layers.1.mlp.experts.3.up_proj"), "`re:` without `$` matches a prefix");
        assert!(!q.leaves("model.layers.11.mlp.experts.3.up_proj") && !q.leaves("xmodel.layers.1.mlp"));
    }
}
