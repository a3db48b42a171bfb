//! A model's multi-token-prediction (MTP) block as a draft of its own: a one-layer model over
//! the target's embedding and output head whose layer first fuses the drafted-after token with
//! the hidden state of the row before it (`author::mtp`). The target's verify step exports that
//! hidden state (`Head::hidden`); the block's head exports its own, so it drafts again from its
//! own output (as vLLM runs an MTP block for several drafted tokens).
//!
//! Each family's block is one [`MtpAuthor`]:
//! - Qwen3-Next's (vLLM's `qwen3_next_mtp`): `mtp.pre_fc_norm_embedding`,
//!   `mtp.pre_fc_norm_hidden`, `mtp.fc`, `mtp.layers.0` — a full-attention MoE decoder layer —,
//!   `mtp.norm`, the shared `lm_head`;
//! - DeepSeek-V3's and GLM-4.5's (vLLM's `deepseek_mtp`, `glm4_moe_mtp`): the checkpoint's layer
//!   `num_hidden_layers` — `enorm`, `hnorm`, `eh_proj`, a MoE decoder layer of the model's under
//!   the same prefix, `shared_head.norm`, and the block's own copies of the embedding
//!   (`embed_tokens`) and output head (`shared_head.head`) where the checkpoint stores them
//!   (DeepSeek-V3 and GLM-4.5 do; GLM-4.6 does not, and the target's are read:
//!   [`falling_back`]). Of several such layers (`num_nextn_predict_layers` > 1) the first drafts.
//!
//! vLLM zeroes the embedding of a DeepSeek MTP row at position 0; rdu does not (neither does
//! the block's definition, nor Qwen3-Next's path): it changes only the block's cache row 0.

use crate::model::spec::{Dialect, Family, Ffn, Head, Mixer, ModelSpec, MtpAuthor, MtpBlock};

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
        Family::DeepseekV3 | Family::Glm4Moe if target.mtp_layers == 0 => {
            return Err(format!(
                "--draft mtp: {} ({}) has no multi-token-prediction block (its num_nextn_predict_layers is 0); draft with `lookup` or a model",
                target.name,
                target.family.as_str()
            ))
        }
        Family::DeepseekV3 | Family::Glm4Moe => MtpAuthor::NextN,
        other => {
            return Err(format!(
                "--draft mtp: {} ({}) has no multi-token-prediction block rdu lowers (Qwen3-Next's, DeepSeek-V3's and GLM-4.5's are); draft with `lookup` or a model",
                target.name,
                other.as_str()
            ))
        }
    };
    let target_prefix = match &target.dialect {
        Dialect::Hf { prefix } => prefix.clone(),
        Dialect::Gguf => {
            return Err(format!(
                "--draft mtp: {} is a GGUF file, whose multi-token-prediction block rdu does not read; use the HF checkpoint",
                target.name
            ))
        }
    };
    let (layer, dialect, block) = match author {
        // Qwen3-Next's block is one full-attention decoder layer with the model's MoE: the
        // target's own full-attention layer, as vLLM builds it (`layer_type="full_attention"`).
        MtpAuthor::Qwen3Next => (
            target.layers.iter().find(|l| matches!(l.mixer, Mixer::Attention { .. })),
            QWEN3_NEXT_PREFIX.to_string(),
            MtpBlock { author, target_prefix, layer: 0, own_embed: false, own_head: false },
        ),
        // DeepSeek-V3's and GLM-4.5's is a MoE decoder layer of the model's (its last layer's
        // shape), at checkpoint index `num_hidden_layers`.
        MtpAuthor::NextN => (
            target.layers.iter().rev().find(|l| matches!(l.ffn, Ffn::Moe { .. })),
            target_prefix.clone(),
            MtpBlock { author, target_prefix, layer: target.n_layers(), own_embed: true, own_head: true },
        ),
    };
    let layer = layer.cloned().ok_or_else(|| {
        format!("--draft mtp: {} has no decoder layer of the kind its MTP layer is to shape it on", target.name)
    })?;
    Ok(ModelSpec {
        name: format!("{}-mtp", target.name),
        layers: vec![layer],
        head: Head { hidden: true, tied: target.head.tied && !block.own_head, ..target.head.clone() },
        dialect: Dialect::Hf { prefix: dialect },
        mtp: Some(block),
        ..target.clone()
    })
}

/// The MTP block `block` reading the target's embedding table and output head where the
/// checkpoint (`has`: whether it holds a tensor) stores no copy of its own.
pub fn falling_back(block: ModelSpec, has: &dyn Fn(&str) -> bool) -> ModelSpec {
    let Some(mtp) = &block.mtp else { return block };
    let own = |name: &str| has(&own_tensor(mtp, name));
    let mtp = MtpBlock {
        own_embed: mtp.own_embed && own("embed_tokens.weight"),
        own_head: mtp.own_head && own("shared_head.head.weight"),
        ..mtp.clone()
    };
    ModelSpec { mtp: Some(mtp), ..block }
}

/// `target` with its head exporting the hidden rows an MTP draft reads (`Head::hidden`).
pub fn exporting_hidden(target: &ModelSpec) -> ModelSpec {
    ModelSpec { head: Head { hidden: true, ..target.head.clone() }, ..target.clone() }
}

/// The checkpoint tensor `rest` of a DeepSeek-V3-style block's layer (`model.layers.61.enorm.weight`).
fn own_tensor(block: &MtpBlock, rest: &str) -> String {
    format!("{}layers.{}.{rest}", block.target_prefix, block.layer)
}

/// The checkpoint tensor of an MTP block's own weight (`E` the embedding table, the fusion's
/// norms and projection, the head's norm and projection), or `None` for a weight named as any
/// layer's (the decoder layer's sit at checkpoint index `MtpBlock::layer`: `naming`).
pub(crate) fn checkpoint_name(block: &MtpBlock, name: &str) -> Option<String> {
    match block.author {
        MtpAuthor::Qwen3Next => match name {
            "E" => Some(format!("{}embed_tokens.weight", block.target_prefix)),
            "ne0" => Some(format!("{QWEN3_NEXT_PREFIX}pre_fc_norm_embedding.weight")),
            "nh0" => Some(format!("{QWEN3_NEXT_PREFIX}pre_fc_norm_hidden.weight")),
            "Wfc0" => Some(format!("{QWEN3_NEXT_PREFIX}fc.weight")),
            _ => None,
        },
        MtpAuthor::NextN => match name {
            "E" if block.own_embed => Some(own_tensor(block, "embed_tokens.weight")),
            "E" => Some(format!("{}embed_tokens.weight", block.target_prefix)),
            "ne0" => Some(own_tensor(block, "enorm.weight")),
            "nh0" => Some(own_tensor(block, "hnorm.weight")),
            "Wfc0" => Some(own_tensor(block, "eh_proj.weight")),
            "nf" => Some(own_tensor(block, "shared_head.norm.weight")),
            "Wout" if block.own_head => Some(own_tensor(block, "shared_head.head.weight")),
            _ => None,
        },
    }
}
