//! `gpt_oss` (gpt-oss-20b / 120b): attention with sinks and biases on q, k, v and o, sliding
//! and full layers as `layer_types` says, YaRN as configured (`truncate` included), and a MoE
//! on every layer — a biased router whose top-k logits are softmaxed (the renormalised top-k of
//! the softmax, the same weights) and biased experts with gpt-oss's clamped SwiGLU.
//!
//! Defaults are `GptOssConfig`'s: `sliding_window` 128, `layer_types` sliding on even layers,
//! `attention_bias` true, `swiglu_limit` 7.0, `rms_norm_eps` 1e-5, `max_position_embeddings`
//! 131072, `head_dim` 64, 8 kv heads, `rope_theta` 150000 and, when the config says nothing
//! about RoPE, YaRN with factor 32 over 4096 positions, β 32 / 1, `truncate: false`.

use serde::Deserialize;
use serde_json::{json, Value};

use super::fields::{explicit, layer_kinds, norms, Common, Defaults, LayerKind};
use super::{rope, Ctx, Draft, LayerDraft};
use crate::error::Result;
use crate::model::spec::{Act, Family, Ffn, Mixer, RopeStyle, Router};

/// The alpha of gpt-oss's clamped SwiGLU, fixed by the activation (`experts act=swiglu_oai`).
const SWIGLU_ALPHA: f64 = 1.702;

/// The gpt-oss fields beside [`Common`].
#[derive(Deserialize)]
struct GptOss {
    num_local_experts: Option<usize>,
    /// `GptOssConfig`'s alias of `num_local_experts`.
    num_experts: Option<usize>,
    num_experts_per_tok: Option<usize>,
    /// The released configs' older name of `num_experts_per_tok`.
    experts_per_token: Option<usize>,
    /// Default 128; `null`: the sliding layers see every position.
    #[serde(default, deserialize_with = "explicit")]
    sliding_window: Option<Option<usize>>,
    /// Default 7.0.
    swiglu_limit: Option<f64>,
    /// Default 1.702, the only value supported.
    swiglu_alpha: Option<f64>,
}

pub(super) fn build(ctx: &Ctx, root: &Value) -> Result<Draft> {
    let common: Common = ctx.parse(root)?;
    let oss: GptOss = ctx.parse(root)?;
    let defaults = Defaults {
        vocab: None,
        head_dim: Some(64),
        kv_heads: Some(8),
        max_ctx: 131_072,
        eps: 1e-5,
        tied: false,
        bos: None,
        eos: None,
    };
    let core = common.core(ctx, &defaults, None)?;
    common.check_silu(ctx)?;
    if common.mlp_bias.is_some() {
        return Err(ctx.err("mlp_bias", "gpt_oss's experts always carry biases; remove the field"));
    }
    let rope_default = json!({
        "rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
        "truncate": false, "original_max_position_embeddings": 4096
    });
    let rope = rope::flat_or(ctx, &common, core.max_ctx, 150_000.0, 1.0, Some(&rope_default))?;
    let rotation = rope.rotation(ctx, core.head_dim, RopeStyle::Neox)?;
    let biased = common.attention_bias.unwrap_or(true);
    let mixer = Mixer::Attention {
        heads: core.heads,
        kv_heads: core.kv_heads,
        head_dim: core.head_dim,
        qk_norm: false,
        qk_norm_whole: false,
        output_gate: false,
        qkv_bias: biased,
        o_bias: biased,
        sinks: true,
        scale: 1.0 / (core.head_dim as f64).sqrt(),
        rotary_dim: rotation.dim,
    };
    let ffn = oss.ffn(ctx, &common)?;
    let window = match oss.sliding_window {
        None => Some(128),
        Some(w) => w.map(|w| ctx.positive(w, "sliding_window")).transpose()?,
    };
    let allowed = [LayerKind::Full, LayerKind::Sliding];
    let kinds = layer_kinds(ctx, common.layer_types.as_deref(), core.n_layers, &allowed, |layer_idx| {
        if layer_idx % 2 == 0 {
            LayerKind::Sliding
        } else {
            LayerKind::Full
        }
    })?;
    let layers = kinds
        .iter()
        .map(|kind| LayerDraft {
            mixer: mixer.clone(),
            rotation: Some(rotation.clone()),
            window: if *kind == LayerKind::Sliding { window } else { None },
            ffn: ffn.clone(),
            norms: norms(core.eps, false, false),
        })
        .collect();
    Ok(Draft::new(Family::GptOss, &core, layers, false))
}

impl GptOss {
    /// Every layer's MoE: `num_local_experts` experts of `intermediate_size` columns, top
    /// `num_experts_per_tok`, biased router and experts, the clamped SwiGLU.
    fn ffn(&self, ctx: &Ctx, common: &Common) -> Result<Ffn> {
        let experts = ctx.require(self.num_local_experts.or(self.num_experts), "num_local_experts")?;
        let experts = ctx.positive(experts, "num_local_experts")?;
        let top_k = ctx.require(self.num_experts_per_tok.or(self.experts_per_token), "num_experts_per_tok")?;
        if top_k == 0 || top_k > experts {
            return Err(ctx.err(
                "num_experts_per_tok",
                format!("must be between 1 and num_local_experts ({experts}), found {top_k}"),
            ));
        }
        if let (Some(a), Some(b)) = (self.num_experts_per_tok, self.experts_per_token) {
            if a != b {
                return Err(ctx.err("experts_per_token", format!("is {b} but num_experts_per_tok is {a}")));
            }
        }
        let limit = ctx.positive_f64(self.swiglu_limit.unwrap_or(7.0), "swiglu_limit")?;
        if let Some(alpha) = self.swiglu_alpha.filter(|&a| a != SWIGLU_ALPHA) {
            return Err(ctx.err("swiglu_alpha", format!("only {SWIGLU_ALPHA} is supported, found {alpha}")));
        }
        Ok(Ffn::Moe {
            experts,
            top_k,
            expert_hidden: common.dense_hidden(ctx)?,
            act: Act::SwigluOai { limit },
            shared: None,
            // softmax over the top-k logits = the top-k of the softmax, renormalised.
            router: Router::softmax(true, 1.0, 1, 1),
            bias: true,
        })
    }
}
