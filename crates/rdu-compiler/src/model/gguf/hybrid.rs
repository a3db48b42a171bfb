//! The Gated DeltaNet hybrids as llama.cpp's converter writes them: `qwen3next` (Qwen3-Next),
//! `qwen35` (Qwen3.5 / 3.6 dense) and `qwen35moe` (Qwen3.5 / 3.6 MoE).
//!
//! - Layer schedule: `{arch}.attention.recurrent_layers` (one flag per block) if present, else
//!   layer `i` is a DeltaNet layer iff `(i + 1) % full_attention_interval != 0` (default 4).
//!   `{arch}.nextn_predict_layers` trailing MTP blocks are counted in `block_count` and skipped.
//! - DeltaNet sizes: `ssm.group_count` key heads, `ssm.time_step_rank` value heads,
//!   `ssm.state_size` key head dim, `ssm.inner_size / time_step_rank` value head dim,
//!   `ssm.conv_kernel`. The projection layout is read off the tensors of each layer:
//!   `attn_qkv` + `attn_gate` + `ssm_ba` ([`GdnLayout::SplitGroupedBa`], qwen3next),
//!   `attn_qkv` + `attn_gate` + `ssm_beta` + `ssm_alpha` with value heads tiled
//!   ([`GdnLayout::SplitTiled`], qwen35 / qwen35moe), or the legacy `ssm_in` + `ssm_ba`
//!   ([`GdnLayout::Grouped`]). `ssm_a` holds −exp(A_log).
//! - Gated attention every few layers: `attn_q` emits query and gate per head, q/k norms,
//!   NEOX RoPE over `rope.dimension_count` dims (qwen35's interleaved MRoPE reduces to it for
//!   text, all position components being equal), scale `1/√key_length`.
//! - Every norm is stored `w+1` (read as a plain weight), except `ssm_norm`.
//! - FFN: qwen35 a dense SwiGLU; qwen3next / qwen35moe a softmax top-k MoE whose weights are
//!   renormalised (llama.cpp always does for these) and scaled by `expert_weights_scale`, plus
//!   a shared expert gated by `sigmoid(x · ffn_gate_inp_shexp)`.

use super::{attention, basics, finish, rope_scaling, Attention, Basics, Meta, Shape};
use crate::error::Result;
use crate::model::spec::{
    Act, Embed, Family, Ffn, GdnLayout, Layer, Mixer, ModelSpec, Norms, RopeStyle, Rotation, Router, SharedExpert,
};

pub(super) fn build(m: &Meta, arch: &str, name: &str) -> Result<ModelSpec> {
    let key = |k: &str| format!("{arch}.{k}");
    let family = if arch == "qwen3next" { Family::Qwen3Next } else { Family::Qwen35 };
    let Basics { d_model, blocks, eps, max_ctx, vocab } = basics(m, arch)?;
    let nextn = usize::try_from(m.u64(&key("nextn_predict_layers"))?.unwrap_or(0)).unwrap_or(usize::MAX);
    if nextn >= blocks {
        return Err(m.err(&key("nextn_predict_layers"), format!("{nextn} leaves no layer of block_count {blocks}")));
    }
    let n_layers = blocks - nextn;

    // Gated full attention.
    let Attention { heads, kv_heads, head_dim, rotary_dim, base, scale } = attention(m, arch, d_model)?;
    let rotation = Rotation { base, dim: rotary_dim, style: RopeStyle::Neox, scaling: rope_scaling(m, arch)? };
    let attention = Mixer::Attention {
        heads,
        kv_heads,
        head_dim,
        qk_norm: true,
        qk_norm_whole: false,
        output_gate: true,
        qkv_bias: false,
        o_bias: false,
        sinks: false,
        scale,
        rotary_dim,
    };

    let deltanet = deltanet(m, arch)?;
    let recurrent = schedule(m, arch, blocks)?;
    let moe = if arch == "qwen35" { None } else { Some(moe(m, arch)?) };
    let norms = Norms { eps, unit_offset: false, pre_attn: true, post_attn: false, pre_ffn: true, post_ffn: false };
    let mut layers = Vec::with_capacity(n_layers);
    for (il, &recurrent) in recurrent.iter().enumerate().take(n_layers) {
        let (mixer, rotation) =
            if recurrent { (deltanet(gdn_layout(m, arch, il)?), None) } else { (attention.clone(), Some(0)) };
        let ffn = layer_ffn(m, arch, moe.as_ref(), il)?;
        layers.push(Layer { mixer, rotation, window: None, ffn, norms: norms.clone() });
    }
    let shape = Shape { family, vocab, d_model, eps, max_ctx };
    finish(m, name, shape, layers, vec![rotation], Embed { scale: None })
}

/// The Gated DeltaNet sizes from `{arch}.ssm.*`: a DeltaNet mixer given its projection layout.
fn deltanet(m: &Meta, arch: &str) -> Result<impl Fn(GdnLayout) -> Mixer> {
    let key = |k: &str| format!("{arch}.{k}");
    let k_heads = m.req_usize(&key("ssm.group_count"))?;
    let v_heads = m.req_usize(&key("ssm.time_step_rank"))?;
    if !v_heads.is_multiple_of(k_heads) {
        let message = format!("{v_heads} value heads are not a multiple of ssm.group_count {k_heads}");
        return Err(m.err(&key("ssm.time_step_rank"), message));
    }
    let k_dim = m.req_usize(&key("ssm.state_size"))?;
    let inner = m.req_usize(&key("ssm.inner_size"))?;
    if !inner.is_multiple_of(v_heads) {
        return Err(m.err(&key("ssm.inner_size"), format!("{inner} is not a multiple of {v_heads} value heads")));
    }
    let conv_kernel = m.req_usize(&key("ssm.conv_kernel"))?;
    if conv_kernel < 2 {
        return Err(m.err(&key("ssm.conv_kernel"), format!("{conv_kernel} must be at least 2")));
    }
    let v_dim = inner / v_heads;
    Ok(move |layout| Mixer::GatedDeltaNet { k_heads, v_heads, k_dim, v_dim, conv_kernel, layout })
}

/// The projection layout of linear-attention layer `il`, read off its tensors.
fn gdn_layout(m: &Meta, arch: &str, il: usize) -> Result<GdnLayout> {
    let has = |t: &str| m.has_tensor(&format!("blk.{il}.{t}.weight"));
    Ok(if has("attn_qkv") && arch == "qwen3next" {
        GdnLayout::SplitGroupedBa
    } else if has("attn_qkv") {
        GdnLayout::SplitTiled
    } else if has("ssm_in") {
        GdnLayout::Grouped
    } else {
        let tensor = format!("blk.{il}.attn_qkv.weight");
        return Err(m.err(&tensor, "missing (nor is there a legacy ssm_in) for a linear-attention layer"));
    })
}

/// Layer `il`'s feed-forward block: the file's MoE (without its shared expert where the layer
/// has none), or a dense SwiGLU.
fn layer_ffn(m: &Meta, arch: &str, moe: Option<&Ffn>, il: usize) -> Result<Ffn> {
    let has = |t: &str| m.has_tensor(&format!("blk.{il}.{t}.weight"));
    let ffn = match moe {
        // A MoE file's layer without a router is a dense SwiGLU (llama.cpp's fallback).
        Some(moe) if has("ffn_gate_inp") || !has("ffn_gate") => moe.clone(),
        _ => Ffn::Dense { hidden: m.req_usize(&format!("{arch}.feed_forward_length"))?, act: Act::Silu },
    };
    Ok(match ffn {
        Ffn::Moe { experts, top_k, expert_hidden, act, shared: Some(_), router, bias } if !has("ffn_up_shexp") => {
            Ffn::Moe { experts, top_k, expert_hidden, act, shared: None, router, bias }
        }
        ffn => ffn,
    })
}

/// Which of the `blocks` layers are linear-attention (recurrent) layers.
fn schedule(m: &Meta, arch: &str, blocks: usize) -> Result<Vec<bool>> {
    let flags_key = format!("{arch}.attention.recurrent_layers");
    if let Some(value) = m.gguf.get(&flags_key) {
        let Some(items) = value.as_array() else {
            return Err(m.err(&flags_key, "expected one flag per block"));
        };
        let flags: Option<Vec<bool>> =
            items.iter().map(|v| v.as_bool().or_else(|| v.as_u64().map(|n| n != 0))).collect();
        return match flags {
            Some(flags) if flags.len() == blocks => Ok(flags),
            Some(flags) => Err(m.err(&flags_key, format!("has {} flags for block_count {blocks}", flags.len()))),
            None => Err(m.err(&flags_key, "expected an array of bools or integers")),
        };
    }
    let interval_key = format!("{arch}.full_attention_interval");
    let interval = m.usize(&interval_key)?.unwrap_or(4);
    Ok((0..blocks).map(|i| !(i + 1).is_multiple_of(interval)).collect())
}

/// The routed + shared expert block of qwen3next / qwen35moe.
fn moe(m: &Meta, arch: &str) -> Result<Ffn> {
    let key = |k: &str| format!("{arch}.{k}");
    let (experts, top_k, expert_hidden) = super::experts::sizes(m, arch)?;
    let shared_hidden = match m.usize(&key("expert_shared_feed_forward_length"))? {
        Some(h) => h,
        None => m.req_usize(&key("feed_forward_length"))?,
    };
    let scaling = super::experts::weights_scale(m, arch)?;
    Ok(Ffn::Moe {
        experts,
        top_k,
        expert_hidden,
        act: Act::Silu,
        shared: Some(SharedExpert { hidden: shared_hidden, gated: true }),
        router: Router::softmax(true, scaling, 1, 1),
        bias: false,
    })
}
