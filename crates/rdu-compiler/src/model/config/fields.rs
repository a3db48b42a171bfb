//! The config fields every family shares (shape, norms, tokens, RoPE, layer types) and the
//! per-family transformers defaults they fall back to; family-specific fields live with
//! their family.

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::Ctx;
use crate::error::Result;
use crate::model::spec::{Mixer, Norms};

/// Largest `num_hidden_layers` accepted: far above any real model, low enough that a typo
/// cannot make the importer allocate without bound.
pub(crate) const MAX_LAYERS: usize = 100_000;

/// The fields of a decoder config.json that every family reads. A field that is absent or
/// `null` falls back to the family's [`Defaults`] (or is reported missing).
#[derive(Deserialize)]
pub(super) struct Common {
    pub hidden_size: Option<usize>,
    pub num_hidden_layers: Option<usize>,
    pub num_attention_heads: Option<usize>,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub intermediate_size: Option<usize>,
    pub vocab_size: Option<usize>,
    pub max_position_embeddings: Option<usize>,
    pub rms_norm_eps: Option<f64>,
    pub tie_word_embeddings: Option<bool>,
    /// Absent → the family default; `null` → no token.
    #[serde(default, deserialize_with = "explicit")]
    pub bos_token_id: Option<Option<TokenIds>>,
    #[serde(default, deserialize_with = "explicit")]
    pub eos_token_id: Option<Option<TokenIds>>,
    pub hidden_act: Option<String>,
    pub attention_bias: Option<bool>,
    pub mlp_bias: Option<bool>,
    pub layer_types: Option<Vec<String>>,
    /// Hub layout.
    pub rope_theta: Option<f64>,
    pub partial_rotary_factor: Option<f64>,
    pub rope_scaling: Option<Value>,
    /// transformers-5 layout.
    pub rope_parameters: Option<Value>,
}

/// The top level of a multimodal wrapper (`gemma3`, `qwen3_5`, `qwen3_5_moe`): what it may
/// say about the language model besides its `text_config`.
#[derive(Deserialize)]
pub(super) struct Outer {
    pub tie_word_embeddings: Option<bool>,
    #[serde(default, deserialize_with = "explicit")]
    pub bos_token_id: Option<Option<TokenIds>>,
    #[serde(default, deserialize_with = "explicit")]
    pub eos_token_id: Option<Option<TokenIds>>,
}

/// `eos_token_id` may be one id or a list.
#[derive(Clone, Deserialize)]
#[serde(untagged)]
pub(super) enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

/// Tells a present `null` (`Some(None)`) from an absent field (`None`, via `default`).
pub(super) fn explicit<'de, D, T>(deserializer: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// A family's transformers defaults for the [`Common`] fields.
pub(super) struct Defaults {
    /// `None`: `vocab_size` is required.
    pub vocab: Option<usize>,
    /// `None`: `hidden_size / num_attention_heads`, which must divide exactly.
    pub head_dim: Option<usize>,
    /// `None`: `num_attention_heads`.
    pub kv_heads: Option<usize>,
    pub max_ctx: usize,
    pub eps: f64,
    pub tied: bool,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
}

/// The resolved, validated [`Common`] fields.
pub(super) struct Core {
    pub d_model: usize,
    pub n_layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub vocab: usize,
    pub max_ctx: usize,
    pub eps: f64,
    pub tied: bool,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
}

impl Core {
    /// Attention over these heads at the usual `1/√head_dim` scale, rotating `rotary_dim` dims.
    pub fn attention(&self, qk_norm: bool, output_gate: bool, qkv_bias: bool, rotary_dim: usize) -> Mixer {
        Mixer::Attention {
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            qk_norm,
            qk_norm_whole: false,
            output_gate,
            qkv_bias,
            o_bias: false,
            sinks: false,
            scale: 1.0 / (self.head_dim as f64).sqrt(),
            rotary_dim,
        }
    }
}

impl Common {
    /// Applies `defaults`, then the wrapper's top level (`outer`) where the text config is
    /// silent, and checks that the numbers fit together.
    pub fn core(&self, ctx: &Ctx, defaults: &Defaults, outer: Option<&Outer>) -> Result<Core> {
        let d_model = ctx.positive(ctx.require(self.hidden_size, "hidden_size")?, "hidden_size")?;
        let n_layers = ctx.require(self.num_hidden_layers, "num_hidden_layers")?;
        let n_layers = ctx.positive(n_layers, "num_hidden_layers")?;
        if n_layers > MAX_LAYERS {
            return Err(ctx.err("num_hidden_layers", format!("{n_layers} is more than {MAX_LAYERS}")));
        }
        let heads = ctx.require(self.num_attention_heads, "num_attention_heads")?;
        let heads = ctx.positive(heads, "num_attention_heads")?;
        let kv_heads = self.num_key_value_heads.or(defaults.kv_heads).unwrap_or(heads);
        let kv_heads = ctx.positive(kv_heads, "num_key_value_heads")?;
        if !heads.is_multiple_of(kv_heads) {
            return Err(ctx.err(
                "num_key_value_heads",
                format!("{kv_heads} key/value heads do not divide {heads} attention heads"),
            ));
        }
        let head_dim = match self.head_dim.or(defaults.head_dim) {
            Some(head_dim) => ctx.positive(head_dim, "head_dim")?,
            None if d_model.is_multiple_of(heads) => d_model / heads,
            None => {
                return Err(ctx.err(
                    "num_attention_heads",
                    format!("{heads} heads do not divide hidden_size {d_model}; set head_dim"),
                ))
            }
        };
        let vocab = ctx.positive(ctx.require(self.vocab_size.or(defaults.vocab), "vocab_size")?, "vocab_size")?;
        let max_ctx = self.max_position_embeddings.unwrap_or(defaults.max_ctx);
        let max_ctx = ctx.positive(max_ctx, "max_position_embeddings")?;
        let eps = ctx.positive_f64(self.rms_norm_eps.unwrap_or(defaults.eps), "rms_norm_eps")?;
        let outer_tied = outer.and_then(|o| o.tie_word_embeddings);
        let tied = match (self.tie_word_embeddings, outer_tied) {
            (Some(inner), Some(top)) if inner != top => {
                return Err(ctx.err(
                    "tie_word_embeddings",
                    format!("is {inner} here but {top} at the top level; make them agree"),
                ))
            }
            (inner, top) => inner.or(top).unwrap_or(defaults.tied),
        };
        let pick = |inner: &Option<Option<TokenIds>>, top: Option<&Option<Option<TokenIds>>>| {
            inner.clone().or_else(|| top.and_then(Clone::clone))
        };
        let bos = match pick(&self.bos_token_id, outer.map(|o| &o.bos_token_id)) {
            None => defaults.bos,
            Some(None) => None,
            Some(Some(TokenIds::One(id))) => Some(id),
            Some(Some(TokenIds::Many(_))) => return Err(ctx.err("bos_token_id", "expected one token id, found a list")),
        };
        // The wrapper's end ids are the ones generation stops at (gemma-3's [1, 106]; transformers 5
        // also writes the language model's own [1] into `text_config`): the top level wins.
        let outer_eos = outer.and_then(|o| o.eos_token_id.clone());
        let eos = match outer_eos.or_else(|| self.eos_token_id.clone()) {
            None => defaults.eos.into_iter().collect(),
            Some(None) => Vec::new(),
            Some(Some(TokenIds::One(id))) => vec![id],
            Some(Some(TokenIds::Many(ids))) => ids,
        };
        Ok(Core { d_model, n_layers, heads, kv_heads, head_dim, vocab, max_ctx, eps, tied, bos, eos })
    }

    /// The MLP activation must be SiLU (the only one these families ship with).
    pub fn check_silu(&self, ctx: &Ctx) -> Result<()> {
        match self.hidden_act.as_deref() {
            None | Some("silu") | Some("swish") => Ok(()),
            Some(other) => Err(ctx.err("hidden_act", format!("`{other}` is not supported; expected `silu`"))),
        }
    }

    /// Rejects biases the spec cannot express: `attention_bias` puts a bias on o_proj too
    /// (and on every projection of MLA), `mlp_bias` on the MLP.
    pub fn check_no_bias(&self, ctx: &Ctx) -> Result<()> {
        if self.attention_bias == Some(true) {
            return Err(ctx.err("attention_bias", "biased attention projections are not supported"));
        }
        if self.mlp_bias == Some(true) {
            return Err(ctx.err("mlp_bias", "biased MLP projections are not supported"));
        }
        Ok(())
    }

    /// The intermediate size of dense MLP layers.
    pub fn dense_hidden(&self, ctx: &Ctx) -> Result<usize> {
        ctx.positive(ctx.require(self.intermediate_size, "intermediate_size")?, "intermediate_size")
    }
}

/// What the mixer of one layer is, as `layer_types` spells it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LayerKind {
    Full,
    Sliding,
    Linear,
}

impl LayerKind {
    fn as_str(self) -> &'static str {
        match self {
            LayerKind::Full => "full_attention",
            LayerKind::Sliding => "sliding_attention",
            LayerKind::Linear => "linear_attention",
        }
    }
}

/// The explicit `layer_types` when present (each one of `allowed`), else `default(layer_idx)`.
pub(super) fn layer_kinds(
    ctx: &Ctx,
    explicit: Option<&[String]>,
    n_layers: usize,
    allowed: &[LayerKind],
    default: impl Fn(usize) -> LayerKind,
) -> Result<Vec<LayerKind>> {
    let Some(names) = explicit else {
        return Ok((0..n_layers).map(default).collect());
    };
    if names.len() != n_layers {
        return Err(ctx.err("layer_types", format!("lists {} layers but num_hidden_layers is {n_layers}", names.len())));
    }
    names
        .iter()
        .enumerate()
        .map(|(layer_idx, name)| {
            allowed.iter().copied().find(|kind| kind.as_str() == name).ok_or_else(|| {
                let expected: Vec<_> = allowed.iter().map(|k| format!("`{}`", k.as_str())).collect();
                ctx.err(
                    &format!("layer_types[{layer_idx}]"),
                    format!("unknown layer type `{name}`; expected {}", expected.join(" or ")),
                )
            })
        })
        .collect()
}

/// Pre-norms before the mixer and the FFN, plus the Gemma "sandwich" post-norms.
pub(super) fn norms(eps: f64, unit_offset: bool, sandwich: bool) -> Norms {
    Norms { eps, unit_offset, pre_attn: true, post_attn: sandwich, pre_ffn: true, post_ffn: sandwich }
}
