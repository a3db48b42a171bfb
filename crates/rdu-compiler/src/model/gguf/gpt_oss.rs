//! `gpt-oss` as llama.cpp's converter writes it and llama.cpp runs it: attention with sinks
//! (`attn_sinks`) and biases on q, k, v and the output, NeoX RoPE with YaRN as
//! `rope.scaling.*` says — its correction range rounded to whole dims as llama.cpp does, where
//! the HF config of gpt-oss says `truncate: false` — sliding layers by
//! `attention.sliding_window_pattern` (llama.cpp's default for the architecture: period 2, the
//! even layers) with `attention.sliding_window` (and `rope.freq_base_swa`), the pre-FFN norm stored as
//! `post_attention_norm`, and on every layer a MoE of `expert_count` experts of
//! `expert_feed_forward_length` columns, the top `expert_used_count` of the biased router's
//! logits softmaxed, gate and up split from the interleaved `gate_up_proj` by the converter,
//! every expert projection biased, and gpt-oss's clamped SwiGLU at llama.cpp's fixed limit 7
//! (a GGUF file carries no `swiglu_limit`).

use super::deepseek2::rope_scaling;
use super::{attention, basics, finish, swa_pattern, Attention, Basics, Meta, Shape};
use crate::error::Result;
use crate::model::spec::{Act, Embed, Family, Ffn, Layer, Mixer, ModelSpec, Norms, RopeStyle, Rotation, Router};

const ARCH: &str = "gpt-oss";

/// The clamp llama.cpp applies (`LLM_FFN_SWIGLU_OAI_MOE`: alpha 1.702, limit 7).
const LLAMA_CPP_SWIGLU_LIMIT: f64 = 7.0;

fn key(k: &str) -> String {
    format!("{ARCH}.{k}")
}

pub(super) fn build(m: &Meta, name: &str) -> Result<ModelSpec> {
    let Basics { d_model, blocks: n_layers, eps, max_ctx, vocab } = basics(m, ARCH)?;
    let Attention { heads, kv_heads, head_dim, rotary_dim, base, scale } = attention(m, ARCH, d_model)?;
    if m.f32_as_f64(&key("rope.scaling.yarn_log_multiplier"))?.is_some() {
        return Err(m.err(&key("rope.scaling.yarn_log_multiplier"), "is not read for gpt-oss; remove it"));
    }
    let scaling = rope_scaling(m, ARCH)?;
    let rotation = Rotation { base, dim: rotary_dim, style: RopeStyle::Neox, scaling };
    // The biases of q, k, v and o come together in gpt-oss (`attention_bias`).
    let biased = m.has_tensor("blk.0.attn_q.bias");
    let mixer = Mixer::Attention {
        heads,
        kv_heads,
        head_dim,
        qk_norm: false,
        qk_norm_whole: false,
        output_gate: false,
        qkv_bias: biased,
        o_bias: biased,
        sinks: true,
        scale,
        rotary_dim,
    };
    let experts = m.req_usize(&key("expert_count"))?;
    let top_k = m.req_usize(&key("expert_used_count"))?;
    if top_k > experts {
        return Err(m.err(&key("expert_used_count"), format!("{top_k} exceeds expert_count {experts}")));
    }
    let ffn = Ffn::Moe {
        experts,
        top_k,
        expert_hidden: m.req_usize(&key("expert_feed_forward_length"))?,
        act: Act::SwigluOai { limit: LLAMA_CPP_SWIGLU_LIMIT },
        shared: None,
        // llama.cpp's SOFTMAX_WEIGHT gating: the softmax of the top-k logits.
        router: Router::softmax(true, 1.0, 1, 1),
        bias: true,
    };
    let window = m.req_usize(&key("attention.sliding_window"))?;
    let sliding = swa_pattern(m, &key("attention.sliding_window_pattern"), n_layers, 2)?;
    let norms = Norms { eps, unit_offset: false, pre_attn: true, post_attn: false, pre_ffn: true, post_ffn: false };
    // Sliding layers rotate with `rope.freq_base_swa` when the file gives one (llama.cpp's
    // default: the same base), with the same scaling.
    let mut rotations = vec![rotation.clone()];
    if let Some(swa_base) = m.f32_as_f64(&key("rope.freq_base_swa"))?.filter(|&b| b != base) {
        rotations.push(Rotation { base: swa_base, ..rotation });
    }
    let layers = sliding
        .into_iter()
        .map(|slides| Layer {
            mixer: mixer.clone(),
            rotation: Some(if slides { rotations.len() - 1 } else { 0 }),
            window: slides.then_some(window),
            ffn: ffn.clone(),
            norms: norms.clone(),
        })
        .collect();
    let shape = Shape { family: Family::GptOss, vocab, d_model, eps, max_ctx };
    finish(m, name, shape, layers, rotations, Embed { scale: None })
}
