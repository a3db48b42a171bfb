//! `minimax-m2` (MiniMax-M2) as llama.cpp's converter writes it: grouped-query attention whose
//! q and k norms span the whole projection (`attn_q_norm` of `head_count · key_length`), neox
//! RoPE over `rope.dimension_count` dims, and stacked experts in every layer chosen by sigmoid
//! scores plus the layer's `exp_probs_b.bias`, renormalised always and never scaled (what
//! llama.cpp's loader and graph for this architecture do; `experts.rs`).

use super::experts::{routed, ExpertRules};
use super::{attention, basics, finish, rope_scaling, Attention, Basics, Meta, Shape};
use crate::error::Result;
use crate::model::spec::{Embed, Family, Layer, Mixer, ModelSpec, Norms, RopeStyle, Rotation, Scoring};

const ARCH: &str = "minimax-m2";

/// llama.cpp's `minimax-m2`: sigmoid, the weights always renormalised, `expert_weights_scale` not read.
const RULES: ExpertRules = ExpertRules { scoring: Scoring::Sigmoid, always_norm: true, reads_scale: false };

pub(super) fn build(m: &Meta, name: &str) -> Result<ModelSpec> {
    let Basics { d_model, blocks: n_layers, eps, max_ctx, vocab } = basics(m, ARCH)?;
    let Attention { heads, kv_heads, head_dim, rotary_dim, base, scale } = attention(m, ARCH, d_model)?;
    let norm = "blk.0.attn_q_norm.weight";
    match m.gguf.tensor(norm).map(|t| t.shape.clone()) {
        Some(shape) if shape == [heads * head_dim] => {}
        Some(shape) => {
            let message = format!("is {shape:?}; minimax-m2 norms q over all {heads} heads of {head_dim} at once");
            return Err(m.err(norm, message));
        }
        None => return Err(m.err(norm, "missing: minimax-m2 norms q and k over the whole projection")),
    }
    let rotation = Rotation { base, dim: rotary_dim, style: RopeStyle::Neox, scaling: rope_scaling(m, ARCH)? };
    let mixer = Mixer::Attention {
        heads,
        kv_heads,
        head_dim,
        qk_norm: true,
        qk_norm_whole: true,
        output_gate: false,
        qkv_bias: false,
        o_bias: false,
        sinks: false,
        scale,
        rotary_dim,
    };
    let norms = Norms { eps, unit_offset: false, pre_attn: true, post_attn: false, pre_ffn: true, post_ffn: false };
    let layers = (0..n_layers)
        .map(|il| {
            let ffn = routed(m, ARCH, &RULES, il)?;
            Ok(Layer { mixer: mixer.clone(), rotation: Some(0), window: None, ffn, norms: norms.clone() })
        })
        .collect::<Result<Vec<_>>>()?;
    let shape = Shape { family: Family::MinimaxM2, vocab, d_model, eps, max_ctx };
    finish(m, name, shape, layers, vec![rotation], Embed { scale: None })
}
