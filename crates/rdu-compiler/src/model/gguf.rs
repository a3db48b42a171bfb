//! Import of a llama.cpp GGUF file's metadata into a [`ModelSpec`] with [`Dialect::Gguf`]:
//! the programs are written for the weights as the converter stored them (llama q/k rows
//! permuted to interleaved RoPE, Gemma norms holding w+1, stacked experts).
//!
//! Handled `general.architecture` values: `llama`, `qwen3`, `qwen3moe`, `gemma3` here, and
//! `deepseek2` (absorbed MLA: `attn_k_b`/`attn_v_b`, YaRN, leading dense blocks, stacked
//! experts, V3's sigmoid routing with its selection bias), `glm4moe`, `minimax-m2` and the
//! Gated DeltaNet hybrids `qwen3next`, `qwen35`, `qwen35moe` in the submodules. Every failure
//! is an [`Error::Config`] whose field is the metadata key (or tensor) at fault, except a file
//! that cannot be read as GGUF at all ([`Error::Checkpoint`]).
//!
//! Defaults follow llama.cpp's loader: `head_count_kv` = `head_count`, `key_length` =
//! `embedding_length / head_count`, `rope.dimension_count` = `key_length`, `rope.freq_base`
//! 10000; Gemma 3 slides on layer `il` iff `il % 6 < 5` unless the file carries
//! `attention.sliding_window_pattern` (a period, or one bool per layer), and its sliding
//! layers use `rope.freq_base_swa` (default 10000) without scaling.

mod deepseek2;
mod experts;
mod glm4moe;
mod gpt_oss;
mod hybrid;
mod minimax_m2;

use std::path::Path;

use rdu_checkpoint::Gguf;

use crate::error::{Error, Result};
use crate::model::spec::{
    Act, Dialect, Embed, Family, Ffn, Head, Layer, Mixer, ModelSpec, Norms, RopeScaling, RopeStyle, Rotation, Router,
    StateDtype,
};

/// The `general.architecture` values [`from_gguf`] understands.
pub const ARCHITECTURES: &[&str] = &[
    "llama",
    "qwen3",
    "qwen3moe",
    "gemma3",
    "deepseek2",
    "glm4moe",
    "minimax-m2",
    "qwen3next",
    "qwen35",
    "qwen35moe",
    "gpt-oss",
];

/// Reads the GGUF file at `path` and builds its spec, named after the file's stem.
pub fn from_gguf_path(path: impl AsRef<Path>) -> Result<ModelSpec> {
    let path = path.as_ref();
    // The reader's error names the file (`Error::Checkpoint`).
    let gguf = Gguf::open(path)?;
    let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or("model");
    from_gguf(&gguf, name)
}

/// Builds the spec of the model a GGUF file describes; reads no weights except the small
/// `rope_freqs.weight` table of llama3-style scaling.
pub fn from_gguf(gguf: &Gguf, name: &str) -> Result<ModelSpec> {
    let m = Meta { gguf };
    let supported = ARCHITECTURES.join(", ");
    let arch = match m.str("general.architecture")? {
        Some(a) => a.to_string(),
        None => return Err(m.missing("general.architecture")),
    };
    let family = match arch.as_str() {
        "llama" => Family::Llama,
        "qwen3" => Family::Qwen3,
        "qwen3moe" => Family::Qwen3Moe,
        "gemma3" => Family::Gemma3,
        "deepseek2" => return deepseek2::build(&m, name),
        "glm4moe" => return glm4moe::build(&m, name),
        "minimax-m2" => return minimax_m2::build(&m, name),
        "gpt-oss" => return gpt_oss::build(&m, name),
        "qwen3next" | "qwen35" | "qwen35moe" => return hybrid::build(&m, &arch, name),
        other => {
            return Err(m.err("general.architecture", format!("unknown architecture `{other}`; supported: {supported}")))
        }
    };
    let key = |k: &str| format!("{arch}.{k}");

    let Basics { d_model, blocks: n_layers, eps, max_ctx, vocab } = basics(&m, &arch)?;
    let Attention { heads, kv_heads, head_dim, rotary_dim, base, scale } = attention(&m, &arch, d_model)?;
    let style = if family == Family::Llama { RopeStyle::Interleaved } else { RopeStyle::Neox };
    let scaling = rope_scaling_or_factors(&m, &arch, rotary_dim)?;
    let rotation = Rotation { base, dim: rotary_dim, style, scaling };

    // Attention and feed-forward.
    let gemma = family == Family::Gemma3;
    let mixer = Mixer::Attention {
        heads,
        kv_heads,
        head_dim,
        qk_norm: family != Family::Llama,
        qk_norm_whole: false,
        output_gate: false,
        qkv_bias: false,
        o_bias: false,
        sinks: false,
        scale,
        rotary_dim,
    };
    let act = if gemma { Act::GeluTanh } else { Act::Silu };
    let ffn = ffn(&m, &arch, family, act)?;
    let norms = Norms { eps, unit_offset: false, pre_attn: true, post_attn: gemma, pre_ffn: true, post_ffn: gemma };

    // Per-layer rotation and window.
    let (rotations, layer_rope) = if gemma {
        gemma_rotations(&m, &arch, rotation, n_layers)?
    } else if let Some(w) = m.usize(&key("attention.sliding_window"))? {
        return Err(m.err(
            &key("attention.sliding_window"),
            format!("a sliding window ({w}) is only supported for gemma3 files"),
        ));
    } else {
        (vec![rotation], vec![(0, None); n_layers])
    };
    let layers = layer_rope
        .into_iter()
        .map(|(rot, window)| Layer {
            mixer: mixer.clone(),
            rotation: Some(rot),
            window,
            ffn: ffn.clone(),
            norms: norms.clone(),
        })
        .collect();

    // √d_model computed in f32, as the runtime does.
    let embed = Embed { scale: gemma.then(|| f64::from((d_model as f32).sqrt())) };
    let shape = Shape { family, vocab, d_model, eps, max_ctx };
    finish(&m, name, shape, layers, rotations, embed)
}

/// The feed-forward block of `llama`, `qwen3`, `gemma3` (dense), `qwen3moe` (top-k MoE) and
/// `llama` with `expert_count` (Mixtral: top-k MoE of `feed_forward_length` columns, as
/// llama.cpp's llama graph reads it).
fn ffn(m: &Meta, arch: &str, family: Family, act: Act) -> Result<Ffn> {
    let key = |k: &str| format!("{arch}.{k}");
    let hidden_key = match family {
        Family::Qwen3Moe => "expert_feed_forward_length",
        _ => "feed_forward_length",
    };
    let moe = family == Family::Qwen3Moe || (family == Family::Llama && m.u64(&key("expert_count"))?.unwrap_or(0) > 0);
    if !moe {
        return Ok(Ffn::Dense { hidden: m.req_usize(&key(hidden_key))?, act });
    }
    let experts = m.req_usize(&key("expert_count"))?;
    let top_k = m.req_usize(&key("expert_used_count"))?;
    if top_k > experts {
        return Err(m.err(&key("expert_used_count"), format!("{top_k} is more than the {experts} experts")));
    }
    Ok(Ffn::Moe {
        experts,
        top_k,
        expert_hidden: m.req_usize(&key(hidden_key))?,
        act,
        shared: None,
        // llama.cpp's qwen3moe and llama (Mixtral) renormalise the selected softmax weights.
        router: Router::softmax(true, 1.0, 1, 1),
        bias: false,
    })
}

/// The attention sizes of an `{arch}` header, as llama.cpp's loader reads them.
struct Attention {
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    rotary_dim: usize,
    base: f64,
    scale: f64,
}

/// `{arch}.attention.*` and the RoPE dimensions and base: `head_count_kv` (default
/// `head_count`) dividing `head_count`, `key_length` (default `embedding_length / head_count`)
/// equal to `value_length`, `rope.dimension_count` (default `key_length`) even and within it,
/// `rope.freq_base` (default 10000), `attention.scale` (default `1/√key_length`).
fn attention(m: &Meta, arch: &str, d_model: usize) -> Result<Attention> {
    let key = |k: &str| format!("{arch}.{k}");
    let heads = m.req_usize(&key("attention.head_count"))?;
    let kv_heads = m.usize(&key("attention.head_count_kv"))?.unwrap_or(heads);
    if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
        return Err(m.err(&key("attention.head_count_kv"), format!("{kv_heads} does not divide {heads} heads")));
    }
    let head_dim = match m.usize(&key("attention.key_length"))? {
        Some(hd) => hd,
        None if d_model.is_multiple_of(heads) => d_model / heads,
        None => return Err(m.missing(&key("attention.key_length"))),
    };
    if let Some(v) = m.usize(&key("attention.value_length"))? {
        if v != head_dim {
            return Err(m.err(&key("attention.value_length"), format!("{v} differs from key_length {head_dim}")));
        }
    }
    let rotary_dim = m.usize(&key("rope.dimension_count"))?.unwrap_or(head_dim);
    if rotary_dim < 2 || !rotary_dim.is_multiple_of(2) || rotary_dim > head_dim {
        return Err(m.err(
            &key("rope.dimension_count"),
            format!("{rotary_dim} must be even, at least 2 and at most key_length {head_dim}"),
        ));
    }
    let base = m.f32_as_f64(&key("rope.freq_base"))?.unwrap_or(10_000.0);
    let scale = m.f32_as_f64(&key("attention.scale"))?.unwrap_or(1.0 / (head_dim as f64).sqrt());
    Ok(Attention { heads, kv_heads, head_dim, rotary_dim, base, scale })
}

/// `{arch}.rope.scaling.*`, or llama3-style per-frequency divisors from the `rope_freqs.weight`
/// table (one per rotated pair), never both.
fn rope_scaling_or_factors(m: &Meta, arch: &str, rotary_dim: usize) -> Result<RopeScaling> {
    let scaling = rope_scaling(m, arch)?;
    if m.gguf.tensor("rope_freqs.weight").is_none() {
        return Ok(scaling);
    }
    if scaling != RopeScaling::None {
        return Err(m.err("rope_freqs.weight", "given together with rope.scaling.type; use one"));
    }
    let factors = m.gguf.read_f32("rope_freqs.weight").map_err(|e| m.err("rope_freqs.weight", e.to_string()))?;
    if factors.len() != rotary_dim / 2 {
        return Err(m.err(
            "rope_freqs.weight",
            format!("has {} entries, expected rope.dimension_count / 2 = {}", factors.len(), rotary_dim / 2),
        ));
    }
    Ok(RopeScaling::Factors { factors })
}

/// Gemma 3's rotations and each layer's (rotation, window): sliding layers use
/// `rope.freq_base_swa` (default 10000) without scaling and `attention.sliding_window`.
#[allow(clippy::type_complexity)]
fn gemma_rotations(
    m: &Meta,
    arch: &str,
    global: Rotation,
    n_layers: usize,
) -> Result<(Vec<Rotation>, Vec<(usize, Option<usize>)>)> {
    let key = |k: &str| format!("{arch}.{k}");
    if m.f32_as_f64(&key("final_logit_softcapping"))?.is_some() {
        return Err(m.err(&key("final_logit_softcapping"), "logit soft-capping is not supported"));
    }
    let window = m.req_usize(&key("attention.sliding_window"))?;
    let sliding = swa_pattern(m, &key("attention.sliding_window_pattern"), n_layers, 6)?;
    let local_base = m.f32_as_f64(&key("rope.freq_base_swa"))?.unwrap_or(10_000.0);
    let local = Rotation { base: local_base, dim: global.dim, style: global.style, scaling: RopeScaling::None };
    let mut rotations: Vec<Rotation> = Vec::new();
    let mut layer_rope = Vec::with_capacity(n_layers);
    for slides in sliding {
        let rot = if slides { &local } else { &global };
        let idx = match rotations.iter().position(|r| r == rot) {
            Some(i) => i,
            None => {
                rotations.push(rot.clone());
                rotations.len() - 1
            }
        };
        layer_rope.push((idx, slides.then_some(window)));
    }
    Ok((rotations, layer_rope))
}

/// What every architecture's spec needs besides its layers and rotations.
struct Shape {
    family: Family,
    vocab: usize,
    d_model: usize,
    eps: f64,
    max_ctx: usize,
}

/// The spec: a GGUF file's head is tied iff it has no `output.weight`; its norms hold their
/// weights as stored (never `1 + w`); BOS and EOS come from the tokenizer metadata.
fn finish(
    m: &Meta,
    name: &str,
    shape: Shape,
    layers: Vec<Layer>,
    rotations: Vec<Rotation>,
    embed: Embed,
) -> Result<ModelSpec> {
    let tied = m.gguf.tensor("output.weight").is_none();
    let eos = m.u32("tokenizer.ggml.eos_token_id")?.into_iter().collect();
    Ok(ModelSpec {
        name: name.to_string(),
        family: shape.family,
        vocab: shape.vocab,
        d_model: shape.d_model,
        layers,
        rotations,
        embed,
        head: Head { tied, norm_eps: shape.eps, norm_unit_offset: false, hidden: false },
        max_ctx: shape.max_ctx,
        dialect: Dialect::Gguf,
        bos: m.u32("tokenizer.ggml.bos_token_id")?,
        eos,
        state: StateDtype::default(),
        mtp_layers: 0,
        quantization: None,
        mtp: None,
    })
}

/// The fields every architecture reads first.
struct Basics {
    /// `{arch}.embedding_length`.
    d_model: usize,
    /// `{arch}.block_count`: decoder blocks and any trailing multi-token-prediction ones.
    blocks: usize,
    /// `{arch}.attention.layer_norm_rms_epsilon`.
    eps: f64,
    /// `{arch}.context_length`.
    max_ctx: usize,
    /// [`vocab`].
    vocab: usize,
}

fn basics(m: &Meta, arch: &str) -> Result<Basics> {
    let key = |k: &str| format!("{arch}.{k}");
    Ok(Basics {
        d_model: m.req_usize(&key("embedding_length"))?,
        blocks: m.block_count(&key("block_count"))?,
        eps: m.req_f32_as_f64(&key("attention.layer_norm_rms_epsilon"))?,
        max_ctx: m.req_usize(&key("context_length"))?,
        vocab: vocab(m, arch)?,
    })
}

/// The vocabulary: rows of `token_embd.weight`, else `{arch}.vocab_size`, else the tokenizer's
/// token count.
fn vocab(m: &Meta, arch: &str) -> Result<usize> {
    if let Some(t) = m.gguf.tensor("token_embd.weight") {
        return match t.shape.as_slice() {
            [rows, _] if *rows > 0 => Ok(*rows),
            other => Err(m.err("token_embd.weight", format!("expected a [vocab, d_model] matrix, found {other:?}"))),
        };
    }
    if let Some(v) = m.usize(&format!("{arch}.vocab_size"))? {
        return Ok(v);
    }
    match m.gguf.get_str_array("tokenizer.ggml.tokens").map_err(|e| m.err("tokenizer.ggml.tokens", e.to_string()))? {
        Some(tokens) if !tokens.is_empty() => Ok(tokens.len()),
        _ => Err(m.missing(&format!("{arch}.vocab_size"))),
    }
}

/// `{arch}.rope.scaling.*`: none or linear (yarn and others are not supported here).
fn rope_scaling(m: &Meta, arch: &str) -> Result<RopeScaling> {
    let type_key = format!("{arch}.rope.scaling.type");
    let factor_key = format!("{arch}.rope.scaling.factor");
    match m.str(&type_key)? {
        None | Some("none") => Ok(RopeScaling::None),
        Some("linear") => {
            let factor = m.req_f32_as_f64(&factor_key)?;
            if !(factor.is_finite() && factor > 0.0) {
                return Err(m.err(&factor_key, format!("must be a finite number greater than 0, found {factor}")));
            }
            Ok(RopeScaling::Linear { factor })
        }
        Some(other) => {
            Err(m.err(&type_key, format!("rope scaling `{other}` is not supported; supported: none, linear")))
        }
    }
}

/// Which layers slide: one bool per layer (true = sliding), a period `n` (layer il slides iff
/// il % n < n − 1), or the architecture's default period in llama.cpp (Gemma 3: 6, gpt-oss: 2).
fn swa_pattern(m: &Meta, key: &str, n_layers: usize, default_period: usize) -> Result<Vec<bool>> {
    let Some(value) = m.gguf.get(key) else {
        return Ok((0..n_layers).map(|il| il % default_period < default_period - 1).collect());
    };
    if let Some(items) = value.as_array() {
        let flags: Option<Vec<bool>> = items.iter().map(|v| v.as_bool()).collect();
        return match flags {
            Some(flags) if flags.len() == n_layers => Ok(flags),
            Some(flags) => Err(m.err(key, format!("has {} entries for {n_layers} layers", flags.len()))),
            None => Err(m.err(key, "expected an array of bools")),
        };
    }
    match value.as_u32() {
        Some(0) => Err(m.err(key, "the period must be at least 1")),
        Some(n) => {
            let n = n as usize;
            Ok((0..n_layers).map(|il| il % n < n - 1).collect())
        }
        None => {
            Err(m.err(key, format!("expected a period or an array of bools, found a {}", value.value_type().name())))
        }
    }
}

/// Typed metadata access whose errors name the key.
struct Meta<'a> {
    gguf: &'a Gguf,
}

impl Meta<'_> {
    fn err(&self, field: &str, message: impl Into<String>) -> Error {
        Error::Config { origin: self.gguf.file().to_string(), field: field.to_string(), message: message.into() }
    }

    fn missing(&self, key: &str) -> Error {
        self.err(key, "required metadata key is missing")
    }

    fn str(&self, key: &str) -> Result<Option<&str>> {
        self.gguf.get_str(key).map_err(|e| self.err(key, e.to_string()))
    }

    fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.gguf.get_bool(key).map_err(|e| self.err(key, e.to_string()))
    }

    /// An unsigned count that may be 0.
    fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.gguf.get_u64(key).map_err(|e| self.err(key, e.to_string()))
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.gguf.tensor(name).is_some()
    }

    fn u32(&self, key: &str) -> Result<Option<u32>> {
        self.gguf.get_u32(key).map_err(|e| self.err(key, e.to_string()))
    }

    fn usize(&self, key: &str) -> Result<Option<usize>> {
        match self.gguf.get_u64(key).map_err(|e| self.err(key, e.to_string()))? {
            Some(0) => Err(self.err(key, "must be at least 1")),
            Some(v) => usize::try_from(v).map(Some).map_err(|_| self.err(key, format!("{v} is too large"))),
            None => Ok(None),
        }
    }

    fn req_usize(&self, key: &str) -> Result<usize> {
        self.usize(key)?.ok_or_else(|| self.missing(key))
    }

    /// `{arch}.block_count`, at most the config import's bound on layers: the importer holds
    /// a few entries per layer, so an absurd count would allocate without bound (found by
    /// fuzzing: `rdu-fuzz gguf`).
    fn block_count(&self, key: &str) -> Result<usize> {
        let n = self.req_usize(key)?;
        if n > crate::model::config::MAX_LAYERS {
            return Err(self.err(key, format!("{n} is more than {} layers", crate::model::config::MAX_LAYERS)));
        }
        Ok(n)
    }

    /// A number as the file stores it, read through f32 and its shortest decimal so that an
    /// f32 `1e-6` becomes the f64 `1e-6` a config.json would give.
    fn f32_as_f64(&self, key: &str) -> Result<Option<f64>> {
        let Some(v) = self.gguf.get_f64(key).map_err(|e| self.err(key, e.to_string()))? else {
            return Ok(None);
        };
        let narrow = v as f32;
        let shortest = if f64::from(narrow) == v { narrow.to_string().parse::<f64>().unwrap_or(v) } else { v };
        if !shortest.is_finite() {
            return Err(self.err(key, format!("must be finite, found {v}")));
        }
        Ok(Some(shortest))
    }

    fn req_f32_as_f64(&self, key: &str) -> Result<f64> {
        self.f32_as_f64(key)?.ok_or_else(|| self.missing(key))
    }
}
