//! `ModelSpec`: everything about a model that decides the programs `rdu` writes for it —
//! the layers (mixer, rotation, window, feed-forward, norms), the rotations, the embedding
//! and the head — and nothing about weight values.
//!
//! Two equal [`Layer`]s author the same program up to names: the layer kinds of a model are
//! its distinct layers (plus storage), and equality here is what makes that true.

use serde::{Deserialize, Serialize};

/// Which family's conventions the model follows (checkpoint naming, projection layouts).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Llama,
    Qwen2,
    Qwen3,
    Qwen3Moe,
    Qwen3Next,
    Qwen35,
    Gemma3,
    DeepseekV2,
    /// DeepSeek-V3 / R1 / V3.1 and Kimi K2 (`kimi_k2`): DeepSeek-V2's MLA with `noaux_tc` routing.
    DeepseekV3,
    /// GLM-4.5 / 4.5-Air / 4.6 (`glm4_moe`).
    Glm4Moe,
    /// MiniMax-M2 (`minimax_m2`).
    MinimaxM2,
    Mistral,
    Mixtral,
    GptOss,
}

impl Family {
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Llama => "llama",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Qwen3Next => "qwen3_next",
            Family::Qwen35 => "qwen3_5",
            Family::Gemma3 => "gemma3",
            Family::DeepseekV2 => "deepseek_v2",
            Family::DeepseekV3 => "deepseek_v3",
            Family::Glm4Moe => "glm4_moe",
            Family::MinimaxM2 => "minimax_m2",
            Family::Mistral => "mistral",
            Family::Mixtral => "mixtral",
            Family::GptOss => "gpt_oss",
        }
    }
}

/// The checkpoint convention the weights come in. The author writes programs for the
/// weights AS STORED, so the dialect is part of the spec.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dialect {
    /// HF safetensors; tensor names start with `prefix` (`model.` or `model.language_model.`).
    Hf { prefix: String },
    /// llama.cpp GGUF: Gemma/Qwen3-Next norms stored w+1, llama q/k rows permuted to
    /// interleaved RoPE, `ssm_a = −exp(A_log)`, MLA `attn_k_b`/`attn_v_b`, stacked experts.
    Gguf,
}

/// The storage of carried state (`rdu lower --state`).
pub use rdu_spatial::manifest::StateDtype;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    pub name: String,
    pub family: Family,
    pub vocab: usize,
    pub d_model: usize,
    pub layers: Vec<Layer>,
    pub rotations: Vec<Rotation>,
    pub embed: Embed,
    pub head: Head,
    /// The longest context the model was configured for (`max_position_embeddings`).
    pub max_ctx: usize,
    pub dialect: Dialect,
    pub bos: Option<u32>,
    pub eos: Vec<u32>,
    /// How the deployment stores carried state (KV caches, latent caches, DeltaNet recurrent
    /// and conv state): bf16 (the default, as deployments do) or f32. A deployment choice, as
    /// Q8_0 weights are; the author declares every state with it (`state Kc0 : bf16[...]`).
    #[serde(default)]
    pub state: StateDtype,
    /// Multi-token-prediction layers the checkpoint holds after the decoder layers
    /// (`num_nextn_predict_layers`): not part of the forward, their weights are never read.
    #[serde(default)]
    pub mtp_layers: usize,
    /// What the checkpoint's `quantization_config` says its layer projections are stored as
    /// (`None`: as read, dense or a GGUF's own types). `rdu lower --storage auto` follows it
    /// for a config without weights (`model::quantization::declared_storage`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Set when this spec is a target's multi-token-prediction block, lowered as a draft of its
    /// own (`model::mtp::mtp_draft`): its one layer first fuses the token's embedding with the
    /// previous row's hidden state (`author::mtp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtp: Option<MtpBlock>,
}

/// A multi-token-prediction block drafting for the model it belongs to. Each family's block is
/// one author (`MtpAuthor`): how it fuses the embedded token with the hidden row and where its
/// tensors are in the target's checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MtpBlock {
    pub author: MtpAuthor,
    /// The target's tensor prefix (`model.`): the block shares its embedding table, or reads
    /// its own copy under it.
    pub target_prefix: String,
    /// The checkpoint index of the block's decoder layer: 0 (`mtp.layers.0`) for Qwen3-Next,
    /// `num_hidden_layers` (`model.layers.61`) for DeepSeek-V3 and GLM-4.5.
    #[serde(default)]
    pub layer: usize,
    /// The block reads its own embedding table (`model.layers.61.embed_tokens`) rather than the
    /// target's: DeepSeek-V3 and GLM-4.5 store one, GLM-4.6 does not.
    #[serde(default)]
    pub own_embed: bool,
    /// The block projects with its own output head (`shared_head.head`) rather than the
    /// target's `lm_head`.
    #[serde(default)]
    pub own_head: bool,
}

/// Which family's multi-token-prediction block.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MtpAuthor {
    /// Qwen3-Next (vLLM's `qwen3_next_mtp`): `fc(concat(norm_e(embed(t)), norm_h(h)))`, one
    /// full-attention MoE decoder layer, its own final norm, the target's output head.
    Qwen3Next,
    /// DeepSeek-V3 (vLLM's `deepseek_mtp`), GLM-4.5 alike (`glm4_moe_mtp`): the checkpoint's
    /// layer `num_hidden_layers`, `eh_proj(concat(enorm(embed(t)), hnorm(h)))`, one MoE decoder
    /// layer of the model's, `shared_head.norm` and `shared_head.head`; it drafts again from its
    /// rows before `shared_head.norm` (vLLM's forward returns those).
    NextN,
}

/// A checkpoint's `quantization_config`: the format its layer projections are stored in —
/// FP8 e4m3fn with its scales' grid (DeepSeek's `weight_block_size`, GLM's and MiniMax's;
/// compressed-tensors' `channel`, `block` and `tensor` strategies) or MXFP4 (gpt-oss) — and
/// the modules it leaves unconverted: transformers' `modules_to_not_convert`, or
/// compressed-tensors' `ignore` and `targets`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quantization {
    pub format: Declared,
    pub not_converted: Vec<String>,
    /// compressed-tensors' `ignore`: module names, or `re:` regular expressions matched from
    /// the name's start (Python's `re.match`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<String>,
    /// compressed-tensors' `targets` beside the class `Linear` (which names every projection):
    /// module names or `re:` expressions; empty when `Linear` is a target.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
}

/// The format a `quantization_config` declares: for FP8, how its scales tile each matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Declared {
    /// One scale per `rows × cols` block (DeepSeek's `weight_block_size`; compressed-tensors'
    /// `block` strategy and its `block_structure`).
    Fp8Block {
        rows: u32,
        cols: u32,
    },
    /// One scale per output row (compressed-tensors' `channel`): blocks of `1 × in`.
    Fp8Channel,
    /// One scale per matrix (compressed-tensors' `tensor`): one block of `out × in`.
    Fp8Tensor,
    Mxfp4,
}

impl Declared {
    /// The block format of a weight of `shape` (`[…, out, in]`, as the checkpoint stores it):
    /// FP8's blocks are the scales' grid on its matrices.
    pub fn format(self, shape: &[usize]) -> crate::model::storage::Format {
        use crate::model::storage::Format;
        let n = shape.len();
        let dim = |k: usize| {
            n.checked_sub(k).and_then(|i| shape.get(i)).map_or(1, |&d| u32::try_from(d.max(1)).unwrap_or(u32::MAX))
        };
        match self {
            Declared::Fp8Block { rows, cols } => Format::Fp8 { rows, cols },
            Declared::Fp8Channel => Format::Fp8 { rows: 1, cols: dim(1) },
            Declared::Fp8Tensor => Format::Fp8 { rows: dim(2), cols: dim(1) },
            Declared::Mxfp4 => Format::Mxfp4,
        }
    }

    pub fn is_fp8(self) -> bool {
        self != Declared::Mxfp4
    }

    /// Whether a weight's blocks follow from its shape (one scale per row or per matrix), not
    /// from the config alone.
    pub fn by_shape(self) -> bool {
        matches!(self, Declared::Fp8Channel | Declared::Fp8Tensor)
    }
}

impl Quantization {
    /// A `quantization_config` of `format` converting every module.
    pub fn all(format: Declared) -> Quantization {
        Quantization { format, not_converted: Vec::new(), ignore: Vec::new(), targets: Vec::new() }
    }

    /// Whether the config leaves the checkpoint module `module` (`model.layers.3.mlp.experts`)
    /// unconverted: as transformers' `should_convert_module` decides for
    /// `modules_to_not_convert` — a pattern that matches it from the start up to a `.` or its
    /// end, `*` standing for any run of characters (`model.layers.*.self_attn`), or that it ends
    /// with (`fc1`) — or as compressed-tensors matches `ignore` and `targets` (`Modules`).
    pub fn leaves(&self, module: &str) -> bool {
        self.leaver()(module)
    }

    /// [`Quantization::leaves`] with compressed-tensors' lists compiled once, for many modules.
    pub fn leaver(&self) -> impl Fn(&str) -> bool + '_ {
        let modules = Modules::of(self).ok();
        move |module: &str| {
            self.not_converted.iter().any(|p| module.ends_with(p.as_str()) || glob_prefix(p, module))
                || modules.as_ref().is_some_and(|m| m.leaves(module))
        }
    }

    /// Whether the checkpoint stores the module `module` in MXFP4 (`*_blocks`, `*_scales`).
    pub fn mxfp4(&self, module: &str) -> bool {
        self.format == Declared::Mxfp4 && !self.leaves(module)
    }
}

/// compressed-tensors' `ignore` and `targets`, compiled: an entry is a module's exact name or,
/// after `re:`, a regular expression that must match from the name's start (`re.match`).
pub struct Modules {
    ignore: (std::collections::BTreeSet<String>, Option<regex::RegexSet>),
    targets: Option<(std::collections::BTreeSet<String>, Option<regex::RegexSet>)>,
}

impl Modules {
    /// The config's lists compiled, or the first `re:` expression that does not compile.
    pub fn of(q: &Quantization) -> Result<Modules, String> {
        let targets = if q.targets.is_empty() { None } else { Some(compile(&q.targets)?) };
        Ok(Modules { ignore: compile(&q.ignore)?, targets })
    }

    /// Whether `module` is ignored, or not among the targets.
    pub fn leaves(&self, module: &str) -> bool {
        let hit = |(exact, res): &(std::collections::BTreeSet<String>, Option<regex::RegexSet>)| {
            exact.contains(module) || res.as_ref().is_some_and(|r| r.is_match(module))
        };
        hit(&self.ignore) || self.targets.as_ref().is_some_and(|t| !hit(t))
    }
}

/// Exact names and `re:` expressions, each anchored at the name's start.
fn compile(entries: &[String]) -> Result<(std::collections::BTreeSet<String>, Option<regex::RegexSet>), String> {
    let (res, exact): (Vec<&String>, Vec<&String>) = entries.iter().partition(|e| e.starts_with("re:"));
    let anchored: Vec<String> = res.iter().map(|e| format!("^(?:{})", &e[3..])).collect();
    let set = if anchored.is_empty() {
        None
    } else {
        Some(regex::RegexSet::new(&anchored).map_err(|e| {
            let first = res.iter().find(|r| regex::Regex::new(&format!("^(?:{})", &r[3..])).is_err());
            let line = e.to_string().lines().last().unwrap_or_default().trim().to_string();
            format!("`{}` is not a regular expression rdu reads: {line}", first.map_or("", |r| r.as_str()))
        })?)
    };
    Ok((exact.into_iter().cloned().collect(), set))
}

/// Whether `pattern` (`*` any run of characters) matches `text` from its start up to a `.` or
/// its end.
fn glob_prefix(pattern: &str, text: &str) -> bool {
    fn go(p: &[u8], t: &[u8]) -> bool {
        match p.split_first() {
            None => t.is_empty() || t[0] == b'.',
            Some((b'*', rest)) => (0..=t.len()).any(|k| go(rest, &t[k..])),
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    go(pattern.as_bytes(), text.as_bytes())
}

impl ModelSpec {
    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }
}

/// One decoder layer, exactly the fields the seed names.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layer {
    pub mixer: Mixer,
    /// Index into `ModelSpec::rotations`; `None` for mixers without RoPE (Gated DeltaNet).
    pub rotation: Option<usize>,
    /// Sliding-window size: query i sees key j iff j ≤ i and i − j < window.
    pub window: Option<usize>,
    pub ffn: Ffn,
    pub norms: Norms,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mixer {
    /// Multi-head attention with GQA (Llama, Qwen2/3, Gemma 3, Qwen3-Next/3.5 gated attention).
    Attention {
        heads: usize,
        kv_heads: usize,
        head_dim: usize,
        /// RMSNorm of q and k before RoPE: per head (Qwen3, Gemma 3, Qwen3-Next, GLM-4.5), or
        /// over the whole projection when `qk_norm_whole` (MiniMax-M2).
        qk_norm: bool,
        /// The q/k norms span every head's values at once (weights `[heads·head_dim]`).
        #[serde(default)]
        qk_norm_whole: bool,
        /// q_proj also emits a per-head gate; the attention output is multiplied by its sigmoid.
        output_gate: bool,
        /// Biases on q, k and v (Qwen2, gpt-oss).
        qkv_bias: bool,
        /// A bias on o_proj (gpt-oss), added once the heads' partial sums are summed.
        #[serde(default)]
        o_bias: bool,
        /// Attention sinks (gpt-oss): one learned logit per head that joins the softmax's
        /// denominator and attends to nothing.
        #[serde(default)]
        sinks: bool,
        /// Softmax scale (already including any YaRN correction).
        scale: f64,
        /// How many leading dims of each head RoPE rotates (partial rotary when < head_dim).
        rotary_dim: usize,
    },
    /// DeepSeek-V2 multi-head latent attention; decode uses the absorbed form.
    Mla {
        heads: usize,
        q_lora_rank: Option<usize>,
        kv_lora_rank: usize,
        qk_nope: usize,
        qk_rope: usize,
        v_dim: usize,
        scale: f64,
    },
    /// Gated DeltaNet (Qwen3-Next, Qwen3.5/3.6).
    GatedDeltaNet { k_heads: usize, v_heads: usize, k_dim: usize, v_dim: usize, conv_kernel: usize, layout: GdnLayout },
}

impl Mixer {
    /// A short word naming the mixer (used in kind names and `rdu kinds --json`).
    pub fn label(&self) -> &'static str {
        match self {
            Mixer::Attention { output_gate: true, .. } => "gated_attention",
            Mixer::Attention { .. } => "attention",
            Mixer::Mla { .. } => "mla",
            Mixer::GatedDeltaNet { .. } => "deltanet",
        }
    }
}

/// How a Gated DeltaNet layer's input projections are laid out in the checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GdnLayout {
    /// Qwen3-Next HF: `in_proj_qkvz` and `in_proj_ba`, grouped by key head.
    Grouped,
    /// Qwen3.5 HF: `in_proj_qkv` (q all | k all | v all), `in_proj_z`, `in_proj_b`, `in_proj_a`.
    Split,
    /// Qwen3-Next GGUF: `attn_qkv` (q all | k all | v all) and `attn_gate` (z) as in `Split`,
    /// but `ssm_ba` still grouped by key head as in `Grouped`.
    SplitGroupedBa,
    /// Qwen3.5 GGUF: the `Split` projections with the value heads reordered from grouped to
    /// tiled by llama.cpp's converter, so that value head `h` uses key head `h mod k_heads`
    /// (`kmap=tiled`) instead of `h / (v_heads / k_heads)`.
    SplitTiled,
}

/// How a gated MLP (or expert) makes its hidden unit of the gate `g` and up `u` projections.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Act {
    /// `silu(g) · u`.
    Silu,
    /// `gelu_tanh(g) · u`.
    GeluTanh,
    /// gpt-oss's clamped SwiGLU: `(clamp(u, −limit, limit) + 1) · g′ σ(1.702 g′)` with
    /// `g′ = min(g, limit)` (`swiglu_limit`); experts only.
    SwigluOai { limit: f64 },
}

impl Act {
    /// The elementwise op applying the activation to a dense MLP's gate; `None` for gpt-oss's,
    /// which reads the up projection too and exists in experts only.
    pub fn op(self) -> Option<crate::graph::Op> {
        match self {
            Act::Silu => Some(crate::graph::Op::Silu),
            Act::GeluTanh => Some(crate::graph::Op::GeluTanh),
            Act::SwigluOai { .. } => None,
        }
    }

    /// The `experts` op of the activation: its `act` (and gpt-oss's `limit`).
    pub fn experts(self) -> crate::graph::Op {
        use crate::graph::Act as A;
        let (act, limit) = match self {
            Act::Silu => (A::Silu, None),
            Act::GeluTanh => (A::GeluTanh, None),
            Act::SwigluOai { limit } => (A::SwigluOai, Some(limit)),
        };
        crate::graph::Op::Experts { act, limit }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ffn {
    /// Gated MLP: `down(act(gate(x)) ⊙ up(x))`.
    Dense { hidden: usize, act: Act },
    Moe {
        experts: usize,
        top_k: usize,
        expert_hidden: usize,
        act: Act,
        shared: Option<SharedExpert>,
        router: Router,
        /// Biases on the router and on every expert's gate, up and down projections (gpt-oss).
        #[serde(default)]
        bias: bool,
    },
}

impl Ffn {
    pub fn label(&self) -> &'static str {
        match self {
            Ffn::Dense { .. } => "dense",
            Ffn::Moe { .. } => "moe",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedExpert {
    pub hidden: usize,
    /// Multiplied by `sigmoid(x · w_sg)` (Qwen3-Next); DeepSeek's is ungated.
    pub gated: bool,
}

impl SharedExpert {
    /// DeepSeek's `n` shared experts of `expert_hidden` columns each, run as one ungated
    /// expert: `Ok(None)` for none, `Err` when the size overflows.
    pub fn ungated(n: usize, expert_hidden: usize) -> std::result::Result<Option<SharedExpert>, &'static str> {
        if n == 0 {
            return Ok(None);
        }
        let hidden = n.checked_mul(expert_hidden).ok_or("shared expert size overflows")?;
        Ok(Some(SharedExpert { hidden, gated: false }))
    }
}

/// Routing: scores `s = softmax(x W_gᵀ)` or `sigmoid(x W_gᵀ)`, experts chosen by `s` (plus the
/// selection bias, when there is one) top-k, group-limited when `groups > 1`; their weights
/// `s`, renormalised (`norm_topk`), times the scaling factor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Router {
    pub norm_topk: bool,
    pub scaling: f64,
    pub groups: usize,
    pub topk_groups: usize,
    #[serde(default)]
    pub scoring: Scoring,
    /// A per-expert bias added to the scores to choose, never to weigh
    /// (`e_score_correction_bias`: DeepSeek-V3, GLM-4.5, MiniMax-M2).
    #[serde(default)]
    pub bias: bool,
    /// How a group is scored for group-limited routing.
    #[serde(default)]
    pub group_score: GroupScore,
}

impl Router {
    /// Softmax routing without a bias (DeepSeek-V2, Qwen): a group scored by its best expert.
    pub fn softmax(norm_topk: bool, scaling: f64, groups: usize, topk_groups: usize) -> Router {
        Router {
            norm_topk,
            scaling,
            groups,
            topk_groups,
            scoring: Scoring::Softmax,
            bias: false,
            group_score: GroupScore::Max,
        }
    }

    /// DeepSeek-V3's `noaux_tc` routing: sigmoid scores, the selection bias, a group scored by
    /// the sum of its two best biased scores.
    pub fn noaux_tc(norm_topk: bool, scaling: f64, groups: usize, topk_groups: usize) -> Router {
        Router {
            norm_topk,
            scaling,
            groups,
            topk_groups,
            scoring: Scoring::Sigmoid,
            bias: true,
            group_score: GroupScore::Top2,
        }
    }
}

/// How the router scores each expert.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scoring {
    #[default]
    Softmax,
    Sigmoid,
}

/// How group-limited routing scores a group from its experts' (biased) scores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupScore {
    /// Its best expert's.
    #[default]
    Max,
    /// The sum of its two best experts'.
    Top2,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Norms {
    pub eps: f64,
    /// The `(1 + w)` convention (Gemma 3, Qwen3-Next as stored by HF).
    pub unit_offset: bool,
    pub pre_attn: bool,
    pub post_attn: bool,
    pub pre_ffn: bool,
    pub post_ffn: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopeStyle {
    /// rotate_half: pairs (i, i + R/2).
    Neox,
    /// adjacent pairs (2i, 2i + 1).
    Interleaved,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rotation {
    pub base: f64,
    /// Rotary dims R (the table has R/2 columns).
    pub dim: usize,
    pub style: RopeStyle,
    pub scaling: RopeScaling,
}

/// How a rotation's frequencies are scaled: the same description the RoPE table builder
/// (shared with the host, which computes the tables from the manifest) takes.
pub use rdu_spatial::rope::RopeScaling;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Embed {
    /// Multiply the looked-up row by this (Gemma: √d_model).
    pub scale: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Head {
    /// logits = norm(h) Eᵀ with the embedding matrix.
    pub tied: bool,
    pub norm_eps: f64,
    pub norm_unit_offset: bool,
    /// The head also outputs its normed rows `hn` (the output projection's input): the hidden
    /// state a multi-token-prediction draft reads after each row.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub hidden: bool,
}

/// What one step of a program processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cut {
    /// A whole sequence of `seq` tokens, causally, without a cache.
    Forward { seq: usize },
    /// One token against a cache of `ctx` positions.
    Decode { ctx: usize },
    /// `batch` sequences, one token each, every weight read once for all of them; each
    /// sequence its own cache of `ctx` positions.
    Batched { batch: usize, ctx: usize },
    /// One token over `tp` chips, every chip its share of the heads and FFN columns.
    Tp { tp: usize, ctx: usize },
    /// Both: `batch` sequences over `tp` chips (the serving shape).
    BatchedTp { batch: usize, tp: usize, ctx: usize },
    /// `chunk` tokens of one sequence, rows in order, over the decode step's own state.
    Prefill { chunk: usize, ctx: usize },
    /// A prefill chunk over `tp` chips, every chip its share of the heads and FFN columns, over
    /// the tensor-parallel decode step's own state.
    PrefillTp { chunk: usize, tp: usize, ctx: usize },
    /// Speculative decoding's verify step: `draft + 1` rows of each sequence — the last
    /// accepted token and `draft` drafted ones — over the decode step's own states, the head on
    /// every row; `batch` sequences stacked as a batched step stacks them (one, named as a
    /// single sequence, when `None`), over `tp` chips (split as `Tp` splits when `tp > 1`). A
    /// step that accepts `j` drafted tokens is continued from the state after its row `j`: the
    /// next step's positions overwrite the rows of a cache past it, and each sequence's
    /// `resume` (a recurrent layer: which row's state it resumes from) and `pend` (a ring
    /// cache: where its drafted rows' keys go) inputs say what the host accepted.
    Verify { draft: usize, batch: Option<usize>, tp: usize, ctx: usize },
}

impl Cut {
    /// The same cut over a context of `ctx` positions; `None` for a cut without a context, or a
    /// prefill chunk longer than `ctx`.
    pub fn with_ctx(self, ctx: usize) -> Option<Cut> {
        match self {
            Cut::Forward { .. } => None,
            Cut::Decode { .. } => Some(Cut::Decode { ctx }),
            Cut::Batched { batch, .. } => Some(Cut::Batched { batch, ctx }),
            Cut::Tp { tp, .. } => Some(Cut::Tp { tp, ctx }),
            Cut::BatchedTp { batch, tp, .. } => Some(Cut::BatchedTp { batch, tp, ctx }),
            Cut::Prefill { chunk, .. } => (chunk <= ctx).then_some(Cut::Prefill { chunk, ctx }),
            Cut::PrefillTp { chunk, tp, .. } => (chunk <= ctx).then_some(Cut::PrefillTp { chunk, tp, ctx }),
            Cut::Verify { draft, batch, tp, .. } => (draft < ctx).then_some(Cut::Verify { draft, batch, tp, ctx }),
        }
    }

    /// Hidden-state rows one step processes.
    pub fn rows(self) -> usize {
        match self {
            Cut::Forward { seq } => seq,
            Cut::Decode { .. } | Cut::Tp { .. } => 1,
            Cut::Batched { batch, .. } | Cut::BatchedTp { batch, .. } => batch,
            Cut::Prefill { chunk, .. } | Cut::PrefillTp { chunk, .. } => chunk,
            Cut::Verify { draft, batch, .. } => batch.unwrap_or(1) * (draft + 1),
        }
    }

    /// Rows of one sequence in a step: 1 for a decode step (batched or not), the chunk of a
    /// prefill, the last accepted and drafted tokens of a verify step, the forward sequence.
    pub fn sequence_rows(self) -> usize {
        match self {
            Cut::Verify { draft, .. } => draft + 1,
            Cut::Batched { .. } | Cut::BatchedTp { .. } => 1,
            cut => cut.rows(),
        }
    }

    /// The drafted tokens of a verify step.
    pub fn draft(self) -> Option<usize> {
        match self {
            Cut::Verify { draft, .. } => Some(draft),
            _ => None,
        }
    }

    /// The positions a carried cache holds; `None` for a forward step (no state).
    pub fn ctx(self) -> Option<usize> {
        match self {
            Cut::Forward { .. } => None,
            Cut::Decode { ctx }
            | Cut::Batched { ctx, .. }
            | Cut::Tp { ctx, .. }
            | Cut::BatchedTp { ctx, .. }
            | Cut::Prefill { ctx, .. }
            | Cut::PrefillTp { ctx, .. }
            | Cut::Verify { ctx, .. } => Some(ctx),
        }
    }

    /// Sequences per step when they are stacked (`_s{b}` states); `None` for one sequence.
    pub fn batch(self) -> Option<usize> {
        match self {
            Cut::Batched { batch, .. } | Cut::BatchedTp { batch, .. } => Some(batch),
            Cut::Verify { batch, .. } => batch,
            _ => None,
        }
    }

    /// Chips a layer program runs over (1 unless tensor-parallel).
    pub fn tp(self) -> usize {
        match self {
            Cut::Tp { tp, .. } | Cut::BatchedTp { tp, .. } | Cut::PrefillTp { tp, .. } | Cut::Verify { tp, .. } => tp,
            _ => 1,
        }
    }

    /// Whether every layer runs split over several chips (`Tp`, `BatchedTp`, `PrefillTp`, a
    /// `Verify` over more than one chip).
    pub fn is_split(self) -> bool {
        match self {
            Cut::Verify { tp, .. } => tp > 1,
            cut => matches!(cut, Cut::Tp { .. } | Cut::BatchedTp { .. } | Cut::PrefillTp { .. }),
        }
    }

    /// Rows of one prefill chunk.
    pub fn chunk(self) -> Option<usize> {
        match self {
            Cut::Prefill { chunk, .. } | Cut::PrefillTp { chunk, .. } => Some(chunk),
            _ => None,
        }
    }

    /// The cut in words, for program comments: `decode`, `batched decode`, ...
    pub fn word(self) -> &'static str {
        match self {
            Cut::Forward { .. } => "forward",
            Cut::Decode { .. } => "decode",
            Cut::Batched { .. } => "batched decode",
            Cut::Tp { .. } => "tensor-parallel decode",
            Cut::BatchedTp { .. } => "batched tensor-parallel decode",
            Cut::Prefill { .. } => "prefill",
            Cut::PrefillTp { .. } => "tensor-parallel prefill",
            Cut::Verify { .. } => "verify",
        }
    }

    /// The cut with its sizes, for a kind program's comment line.
    pub fn describe(self) -> String {
        match self {
            Cut::Forward { seq } => format!("forward over {seq} tokens"),
            Cut::Decode { ctx } => format!("decode against {ctx} positions"),
            Cut::Batched { batch, ctx } => format!("batched decode of {batch} sequences against {ctx} positions"),
            Cut::Tp { tp, ctx } => format!("decode over {tp} chips against {ctx} positions"),
            Cut::BatchedTp { batch, tp, ctx } => {
                format!("batched decode of {batch} sequences over {tp} chips against {ctx} positions")
            }
            Cut::Prefill { chunk, ctx } => format!("prefill of {chunk} rows against {ctx} positions"),
            Cut::PrefillTp { chunk, tp, ctx } => {
                format!("prefill of {chunk} rows over {tp} chips against {ctx} positions")
            }
            Cut::Verify { draft, batch, tp, ctx } => {
                let seqs = batch.map(|b| format!(" of {b} sequences")).unwrap_or_default();
                let chips = if tp > 1 { format!(" over {tp} chips") } else { String::new() };
                format!("verify of {} rows{seqs}{chips} against {ctx} positions", draft + 1)
            }
        }
    }
}

impl Rotation {
    /// The rotation as the RoPE table builder (shared with the host) describes it.
    pub fn rope_spec(&self) -> rdu_spatial::rope::RopeSpec {
        rdu_spatial::rope::RopeSpec { base: self.base, dim: self.dim, scaling: self.scaling.clone() }
    }
}
