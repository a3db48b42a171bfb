//! What a tensor-parallel kind is expected to all-reduce (shared with `rdu-cli`'s tp conformance test).

use rdu_compiler::model::spec::{Mixer, ModelSpec};

/// All-reduce stages a layer's program has over `tp` chips: the mixer's and the FFN's, and for
/// MLA a third for its down-projections when each chip's columns of them hold whole Q8_0
/// blocks (the model dimension a multiple of 32 per chip); otherwise they are replicated.
pub fn all_reduces(spec: &ModelSpec, tp: usize) -> usize {
    let mla = spec.layers.iter().any(|l| matches!(l.mixer, Mixer::Mla { .. }));
    if mla && spec.d_model.is_multiple_of(tp * 32) {
        3
    } else {
        2
    }
}
