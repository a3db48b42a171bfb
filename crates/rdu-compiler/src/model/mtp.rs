//! A model's multi-token-prediction (MTP) block as a draft of its own: a one-layer model over
//! the target's embedding and output head whose layer first fuses the drafted-after token with
//! the hidden state of the row before it (`author::mtp`). The target's verify step exports that
//! hidden state (`Head::hidden`); the block's head exports its own, so it drafts again from its
//! own output (as vLLM runs an MTP block for several drafted tokens).
//!
//! Each family's block is one [`MtpAuthor`]: Qwen3-Next's today (vLLM's `qwen3_next_mtp`:
//! `mtp.pre_fc_norm_embedding`, `mtp.pre_fc_norm_hidden`, `mtp.fc`, `mtp.layers.0` — a
//! full-attention MoE decoder layer —, `mtp.norm`, the shared `lm_head`). DeepSeek-V3's and
//! GLM-4.5's (`enorm`, `hnorm`, `eh_proj`, `shared_head`) would be a second author here.

use crate::model::spec::{Dialect, Family, Head, Mixer, ModelSpec, MtpAuthor, MtpBlock};

/// The name `--draft` gives a model's own multi-token-prediction block.
pub const MTP_DRAFT: &str = "mtp";

/// The checkpoint prefix of a Qwen3-Next MTP block's tensors.
const QWEN3_NEXT_PREFIX: &str = "mtp.";

/// The MTP block of `target` as a model of its own, or why `target` has none rdu lowers.
pub fn mtp_draft(target: &ModelSpec) -> Result<ModelSpec, String> {
    if target.mtp.is_some() {
        return Err(format!("{} is itself a multi-token-prediction block", target.name));
    }
    let author = match target.family {
        Family::Qwen3Next => MtpAuthor::Qwen3Next,
        other => {
            return Err(format!(
                "--draft mtp: {} ({}) has no multi-token-prediction block rdu lowers (Qwen3-Next's is; draft with `lookup` or a model)",
                target.name,
                other.as_str()
            ))
        }
    };
    let target_prefix = match &target.dialect {
        Dialect::Hf { prefix } => prefix.clone(),
        Dialect::Gguf => {
            return Err(format!(
                "--draft mtp: {} is a GGUF file, whose converter leaves out the multi-token-prediction block; use the HF checkpoint",
                target.name
            ))
        }
    };
    // Qwen3-Next's block is one full-attention decoder layer with the model's MoE: the
    // target's own full-attention layer, as vLLM builds it (`layer_type="full_attention"`).
    let layer =
        target.layers.iter().find(|l| matches!(l.mixer, Mixer::Attention { .. })).cloned().ok_or_else(|| {
            format!("--draft mtp: {} has no full-attention layer to shape its MTP layer on", target.name)
        })?;
    Ok(ModelSpec {
        name: format!("{}-mtp", target.name),
        layers: vec![layer],
        head: Head { hidden: true, ..target.head.clone() },
        dialect: Dialect::Hf { prefix: QWEN3_NEXT_PREFIX.to_string() },
        mtp: Some(MtpBlock { author, target_prefix }),
        ..target.clone()
    })
}

/// `target` with its head exporting the hidden rows an MTP draft reads (`Head::hidden`).
pub fn exporting_hidden(target: &ModelSpec) -> ModelSpec {
    ModelSpec { head: Head { hidden: true, ..target.head.clone() }, ..target.clone() }
}

/// The checkpoint tensor of an MTP block's own weight (`E` is the target's embedding table,
/// the fusion's norms and projection the block's), or `None` for a weight named as any layer's.
pub(crate) fn checkpoint_name(block: &MtpBlock, name: &str) -> Option<String> {
    match block.author {
        MtpAuthor::Qwen3Next => match name {
            "E" => Some(format!("{}embed_tokens.weight", block.target_prefix)),
            "ne0" => Some(format!("{QWEN3_NEXT_PREFIX}pre_fc_norm_embedding.weight")),
            "nh0" => Some(format!("{QWEN3_NEXT_PREFIX}pre_fc_norm_hidden.weight")),
            "Wfc0" => Some(format!("{QWEN3_NEXT_PREFIX}fc.weight")),
            _ => None,
        },
    }
}
