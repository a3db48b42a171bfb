//! RoPE from either layout: the hub's `rope_theta` + `rope_scaling` (+ top-level
//! `partial_rotary_factor`) or transformers-5 `rope_parameters`; scaling types default,
//! linear, llama3 and yarn, anything else is an error naming the field.

use serde::Deserialize;
use serde_json::Value;

use super::fields::Common;
use super::Ctx;
use crate::error::Result;
use crate::model::spec::{RopeScaling, RopeStyle, Rotation};

/// The base, partial factor and scaling of one rotary embedding, before the head size
/// turns it into a [`Rotation`].
#[derive(Debug)]
pub(super) struct Rope {
    pub base: f64,
    pub partial: f64,
    pub scaling: RopeScaling,
}

impl Rope {
    /// The rotation of heads of `head_dim`: `int(head_dim · partial_rotary_factor)` dims, as
    /// transformers computes it.
    pub fn rotation(&self, ctx: &Ctx, head_dim: usize, style: RopeStyle) -> Result<Rotation> {
        if !(self.partial > 0.0 && self.partial <= 1.0) {
            return Err(ctx.err("partial_rotary_factor", format!("must be in (0, 1], found {}", self.partial)));
        }
        let dim = (head_dim as f64 * self.partial) as usize;
        if dim < 2 || !dim.is_multiple_of(2) {
            return Err(ctx.err(
                "partial_rotary_factor",
                format!("rotates {dim} of {head_dim} head dims; the rotary dim must be even and at least 2"),
            ));
        }
        Ok(Rotation { base: self.base, dim, style, scaling: self.scaling.clone() })
    }
}

/// One rope parameter object: a hub `rope_scaling`, a transformers-5 `rope_parameters`, or
/// one per-layer-type entry of Gemma's. Unknown keys (`mrope_section`, …) are ignored.
#[derive(Default, Deserialize)]
struct RopeParams {
    rope_type: Option<String>,
    /// The hub's older spelling of `rope_type`.
    #[serde(rename = "type")]
    legacy_type: Option<String>,
    rope_theta: Option<f64>,
    partial_rotary_factor: Option<f64>,
    factor: Option<f64>,
    low_freq_factor: Option<f64>,
    high_freq_factor: Option<f64>,
    original_max_position_embeddings: Option<usize>,
    beta_fast: Option<f64>,
    beta_slow: Option<f64>,
    mscale: Option<f64>,
    mscale_all_dim: Option<f64>,
    attention_factor: Option<f64>,
    /// YaRN: round the correction range to whole dims (transformers' default true).
    truncate: Option<bool>,
}

/// The single rope of a family with one rotary embedding. `rope_scaling` wins over
/// `rope_parameters` (as in transformers' conversion); the theta and partial factor come
/// from the parameter object, else the top level, else the family default.
pub(super) fn flat(
    ctx: &Ctx,
    common: &Common,
    max_ctx: usize,
    default_theta: f64,
    default_partial: f64,
) -> Result<Rope> {
    flat_or(ctx, common, max_ctx, default_theta, default_partial, None)
}

/// [`flat`] with the family's default parameter object (gpt-oss's YaRN) for a config that has
/// neither `rope_scaling` nor `rope_parameters`.
pub(super) fn flat_or(
    ctx: &Ctx,
    common: &Common,
    max_ctx: usize,
    default_theta: f64,
    default_partial: f64,
    default: Option<&Value>,
) -> Result<Rope> {
    let source = match (&common.rope_scaling, &common.rope_parameters) {
        (Some(value), _) => Some((value, "rope_scaling")),
        (None, Some(value)) => Some((value, "rope_parameters")),
        (None, None) => default.map(|value| (value, "rope_parameters")),
    };
    let theta = common.rope_theta.unwrap_or(default_theta);
    let partial = common.partial_rotary_factor.unwrap_or(default_partial);
    read(ctx, source, theta, partial, max_ctx)
}

/// Gemma 3's two rotary embeddings, `(sliding, full)`. Hub layout: sliding layers use
/// `rope_local_base_freq` without scaling, full layers `rope_theta` with `rope_scaling`.
/// transformers-5 layout: `rope_parameters.{sliding_attention, full_attention}`; a flat
/// `rope_parameters` applies to the full layers only.
pub(super) fn gemma(ctx: &Ctx, common: &Common, local_base: Option<f64>, max_ctx: usize) -> Result<(Rope, Rope)> {
    const FULL: &str = "full_attention";
    const SLIDING: &str = "sliding_attention";
    let nested = common
        .rope_parameters
        .as_ref()
        .and_then(Value::as_object)
        .filter(|m| m.contains_key(FULL) || m.contains_key(SLIDING));
    let entry = |key: &str| nested.and_then(|m| m.get(key)).filter(|v| !v.is_null());
    let full_source = match (&common.rope_scaling, entry(FULL), nested, &common.rope_parameters) {
        (Some(value), ..) => Some((value, "rope_scaling".to_string())),
        (None, Some(value), ..) => Some((value, format!("rope_parameters.{FULL}"))),
        (None, None, None, Some(flat)) => Some((flat, "rope_parameters".to_string())),
        _ => None,
    };
    let sliding_source = entry(SLIDING).map(|value| (value, format!("rope_parameters.{SLIDING}")));
    // Gemma rotates whole heads: transformers ignores any partial_rotary_factor here.
    let full = read(ctx, full_source, common.rope_theta.unwrap_or(1e6), 1.0, max_ctx)?;
    let sliding = read(ctx, sliding_source, local_base.unwrap_or(1e4), 1.0, max_ctx)?;
    Ok((Rope { partial: 1.0, ..sliding }, Rope { partial: 1.0, ..full }))
}

fn read(
    ctx: &Ctx,
    source: Option<(&Value, impl AsRef<str>)>,
    theta: f64,
    partial: f64,
    max_ctx: usize,
) -> Result<Rope> {
    let (params, at) = match source {
        Some((value, at)) => (ctx.parse_at::<RopeParams>(value, at.as_ref())?, at.as_ref().to_string()),
        None => (RopeParams::default(), "rope_scaling".to_string()),
    };
    let base = ctx.positive_f64(params.rope_theta.unwrap_or(theta), "rope_theta")?;
    let partial = params.partial_rotary_factor.unwrap_or(partial);
    let scaling = scaling(ctx, &params, &at, max_ctx)?;
    Ok(Rope { base, partial, scaling })
}

fn scaling(ctx: &Ctx, p: &RopeParams, at: &str, max_ctx: usize) -> Result<RopeScaling> {
    let (kind, kind_field) = match (&p.rope_type, &p.legacy_type) {
        (Some(kind), _) => (kind.as_str(), format!("{at}.rope_type")),
        (None, Some(kind)) => (kind.as_str(), format!("{at}.type")),
        (None, None) => ("default", format!("{at}.rope_type")),
    };
    let field = |name: &str| format!("{at}.{name}");
    let need = |value: Option<f64>, name: &str| -> Result<f64> {
        ctx.positive_f64(ctx.require(value, &field(name))?, &field(name))
    };
    match kind {
        // `mrope` (Qwen-VL) is plain RoPE for text, where all position components agree.
        "default" | "none" | "mrope" => Ok(RopeScaling::None),
        "linear" => Ok(RopeScaling::Linear { factor: need(p.factor, "factor")? }),
        "llama3" => {
            let original_max =
                ctx.require(p.original_max_position_embeddings, &field("original_max_position_embeddings"))?;
            let low_freq_factor = need(p.low_freq_factor, "low_freq_factor")?;
            let high_freq_factor = need(p.high_freq_factor, "high_freq_factor")?;
            if high_freq_factor <= low_freq_factor {
                return Err(ctx.err(&field("high_freq_factor"), "must be greater than low_freq_factor"));
            }
            Ok(RopeScaling::Llama3 {
                factor: need(p.factor, "factor")?,
                low_freq_factor,
                high_freq_factor,
                original_max: ctx.positive(original_max, &field("original_max_position_embeddings"))?,
            })
        }
        "yarn" => {
            if p.attention_factor.is_some() {
                return Err(ctx.err(&field("attention_factor"), "an explicit yarn attention_factor is not supported"));
            }
            let original_max = p.original_max_position_embeddings.unwrap_or(max_ctx);
            let mscale_all_dim = p.mscale_all_dim.unwrap_or(0.0);
            if !mscale_all_dim.is_finite() || mscale_all_dim < 0.0 {
                return Err(ctx.err(&field("mscale_all_dim"), "must be a finite number, at least 0"));
            }
            Ok(RopeScaling::Yarn {
                factor: need(p.factor, "factor")?,
                original_max: ctx.positive(original_max, &field("original_max_position_embeddings"))?,
                beta_fast: need(p.beta_fast.or(Some(32.0)), "beta_fast")?,
                beta_slow: need(p.beta_slow.or(Some(1.0)), "beta_slow")?,
                mscale: need(p.mscale.or(Some(1.0)), "mscale")?,
                mscale_all_dim,
                truncate: p.truncate.unwrap_or(true),
            })
        }
        other => {
            Err(ctx.err(&kind_field, format!("unknown rope type `{other}`; supported: default, linear, llama3, yarn")))
        }
    }
}

/// DeepSeek's YaRN correction of the softmax scale: `m²` with
/// `m = 0.1·mscale_all_dim·ln(factor) + 1` when the rope is YaRN with `mscale_all_dim` set
/// and `factor > 1`, else 1.
pub(super) fn yarn_attention_factor(scaling: &RopeScaling) -> f64 {
    match *scaling {
        RopeScaling::Yarn { factor, mscale_all_dim, .. } if mscale_all_dim != 0.0 && factor > 1.0 => {
            let m = 0.1 * mscale_all_dim * factor.ln() + 1.0;
            m * m
        }
        _ => 1.0,
    }
}
