//! `fit`: which tensor-parallel widths a model admits, and why a width is refused.
//!
//! A width `tp` splits every layer Megatron-style (see `model::author`): each chip its
//! attention / MLA heads, its DeltaNet key heads with their value heads, its columns of the
//! dense FFN, of every expert and of the shared expert. So `tp` must divide each of those
//! counts — except kv heads, which are replicated when `tp` is a multiple of them. A product
//! whose `in` axis is split (o, down, out projections) keeps whole Q8_0 blocks on each chip
//! only when `(in / tp) % 32 == 0`: for a weight stored Q8_0 that is required too.

use crate::model::author::Q8_BLOCK;
use crate::model::spec::{Ffn, Mixer, ModelSpec};
use crate::model::storage::Storage;

/// Why a model does not admit a width: one line naming the dimension and its size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--tp {tp} {reason}")]
pub struct TpRefusal {
    pub tp: usize,
    /// Layer whose dimension refuses the width (`None` for model-wide reasons).
    pub layer: Option<usize>,
    pub reason: String,
}

/// Does `spec` admit `tp` chips with its weights stored as `storage`? Every layer is checked;
/// the first refusal is returned.
pub fn admits_tp(spec: &ModelSpec, tp: usize, storage: &Storage) -> Result<(), TpRefusal> {
    let refuse = |layer: Option<usize>, reason: String| Err(TpRefusal { tp, layer, reason });
    if tp == 0 {
        return refuse(None, "is not a width: a deployment needs at least one chip".into());
    }
    let name = &spec.name;
    for (l, layer) in spec.layers.iter().enumerate() {
        let at = |what: &str, n: usize| format!("does not divide the {n} {what} of {name} (layer {l})");
        let divides = |n: usize| n.is_multiple_of(tp);
        // (name of the weight whose `in` axis is split, its full `in` extent)
        let mut row_split: Vec<(&str, usize)> = Vec::new();
        match &layer.mixer {
            Mixer::Attention { heads, kv_heads, head_dim, .. } => {
                if !divides(*heads) {
                    return refuse(Some(l), at("attention heads", *heads));
                }
                if !divides(*kv_heads) && !tp.is_multiple_of(*kv_heads) {
                    let why = format!(
                        "does not divide the {kv_heads} kv heads of {name} (layer {l}), nor is it a multiple of them"
                    );
                    return refuse(Some(l), why);
                }
                row_split.push(("Wo", heads * head_dim));
            }
            Mixer::Mla { heads, v_dim, .. } => {
                if !divides(*heads) {
                    return refuse(Some(l), at("MLA heads", *heads));
                }
                row_split.push(("Wo", heads * v_dim));
            }
            Mixer::GatedDeltaNet { k_heads, v_heads, v_dim, .. } => {
                if !divides(*k_heads) {
                    return refuse(Some(l), at("DeltaNet key heads", *k_heads));
                }
                if !divides(*v_heads) {
                    return refuse(Some(l), at("DeltaNet value heads", *v_heads));
                }
                row_split.push(("Wo", v_heads * v_dim));
            }
        }
        match &layer.ffn {
            Ffn::Dense { hidden, .. } => {
                if !divides(*hidden) {
                    return refuse(Some(l), at("FFN intermediate columns", *hidden));
                }
                row_split.push(("Wd", *hidden));
            }
            Ffn::Moe { expert_hidden, shared, .. } => {
                if !divides(*expert_hidden) {
                    return refuse(Some(l), at("expert intermediate columns", *expert_hidden));
                }
                row_split.push(("Wed", *expert_hidden));
                if let Some(s) = shared {
                    if !divides(s.hidden) {
                        return refuse(Some(l), at("shared-expert intermediate columns", s.hidden));
                    }
                    row_split.push(("Wsd", s.hidden));
                }
            }
        }
        for (base, extent) in row_split {
            let weight = format!("{base}{l}");
            // A projection is declared `q8` (may be stored Q8_0) when its `in` axis holds whole blocks.
            let stored_q8 = extent.is_multiple_of(Q8_BLOCK) && storage.stores_q8(&weight);
            if stored_q8 && !(extent / tp).is_multiple_of(Q8_BLOCK) {
                return refuse(
                    Some(l),
                    format!(
                        "splits the Q8_0 blocks of {weight}: its {extent} input columns over {tp} chips are {} each, \
                         not a multiple of {Q8_BLOCK}",
                        extent / tp
                    ),
                );
            }
        }
    }
    Ok(())
}

/// Every width up to `max` that `spec` admits with `storage`, in increasing order.
pub fn admitted_widths(spec: &ModelSpec, max: usize, storage: &Storage) -> Vec<usize> {
    (1..=max).filter(|&tp| admits_tp(spec, tp, storage).is_ok()).collect()
}
