//! The storage a checkpoint's `quantization_config` declares, for a model lowered without
//! its weights (a preset or a bare config): which weights are stored in its block format.
//!
//! As the checkpoints that declare one store them: every layer projection the author
//! declares `q8` (its `in` axis holds whole blocks of 32) except the MoE router (`Wr`, kept
//! in high precision: DeepSeek-V3's and gpt-oss's routers are not quantised) and the modules
//! `modules_to_not_convert` names (`Quantization::leaves`: a module is a checkpoint tensor's
//! name without its last component); never the embedding or the head.

use crate::model::author::{embed_source, head_source, source_of};
use crate::model::naming::{checkpoint_source, TensorSource};
use crate::model::spec::{Cut, ModelSpec};
use crate::model::storage::Storage;
use rdu_spatial::names::TensorName;
use std::collections::BTreeSet;

/// The program name of the MoE router's weight.
const ROUTER: &str = "Wr";

/// Every weight of `spec` the author declares `q8`: the embedding's, the head's and every
/// layer's (of a decode step; every cut declares the same weights).
pub fn blockable_weights(spec: &ModelSpec) -> BTreeSet<String> {
    let (cut, all) = (Cut::Decode { ctx: 1 }, Storage::AllQ8);
    let mut declared: BTreeSet<String> = embed_source(spec, cut, &all).stored.into_keys().collect();
    declared.extend(head_source(spec, cut, &all).stored.into_keys());
    for l in 0..spec.n_layers() {
        declared.extend(source_of(spec, l, cut, &all).stored.into_keys());
    }
    declared
}

/// The storage `spec`'s `quantization_config` declares, or `None` when it declares none.
pub fn declared_storage(spec: &ModelSpec) -> Option<Storage> {
    let q = spec.quantization.as_ref()?;
    let stored = blockable_weights(spec)
        .into_iter()
        .filter(|name| {
            let parsed = TensorName::parse(name);
            parsed.layer.is_some() && parsed.base != ROUTER && !modules(spec, name).iter().any(|m| q.leaves(m))
        })
        .map(|name| (name, q.format))
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
    use crate::model::spec::Quantization;
    use crate::model::storage::Format;

    #[test]
    fn patterns_match_whole_module_paths_from_the_start() {
        let q = |p: &str| Quantization { format: Format::Mxfp4, not_converted: vec![p.to_string()] };
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
}
