//! Resolving the MODEL argument and the storage and cut flags shared by several commands.

use anyhow::{anyhow, bail, Result};
use clap::ValueEnum;
use rdu_compiler::deploy::Storage;
use rdu_compiler::model::mtp::{falling_back, mtp_draft};
use rdu_compiler::model::naming::{checkpoint_source, TensorSource};
use rdu_compiler::model::presets;
use rdu_compiler::model::quantization::declared_storage;
use rdu_compiler::model::spec::{Cut, ModelSpec, StateDtype};
use rdu_spatial::manifest::CutMode;

/// Which weights are stored in a block format (Q8_0, FP8, MXFP4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StorageArg {
    /// As the checkpoint stores them (Q8_0 and MXFP4 GGUF tensors; FP8 and MXFP4 safetensors);
    /// for a config or preset without weights, as its quantization_config declares (FP8,
    /// MXFP4), else Q8_0
    Auto,
    /// Every projection stored Q8_0
    Q8,
    /// Nothing stored Q8_0
    Dense,
}

impl StorageArg {
    pub fn storage(self) -> Storage {
        match self {
            StorageArg::Auto | StorageArg::Q8 => Storage::AllQ8,
            StorageArg::Dense => Storage::Dense,
        }
    }
}

/// What one step processes (`--cut`): a bundle's cut mode, by the word `rdu lower` takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutArg(pub CutMode);

/// Every cut mode with its `--cut` word and what it lowers, in the order `--help` lists them.
const CUTS: [(CutArg, &str, &str); 8] = [
    (CutArg(CutMode::Forward), "forward", "A whole sequence at once, causally, without a cache"),
    (CutArg(CutMode::Decode), "decode", "One token against a KV cache / carried state"),
    (CutArg(CutMode::Batched), "batched", "--batch sequences per step, one token each, every weight read once for all"),
    (CutArg(CutMode::Tp), "tp", "One token over --tp chips (tensor parallel)"),
    (CutArg(CutMode::BatchedTp), "batched-tp", "--batch sequences over --tp chips: the serving shape"),
    (CutArg(CutMode::Prefill), "prefill", "--chunk tokens of one sequence per step, over the decode step's state"),
    (CutArg(CutMode::PrefillTp), "prefill-tp", "--chunk tokens over --tp chips, over the tp decode step's state"),
    (
        CutArg(CutMode::Verify),
        "verify",
        "Speculative decoding's check: the last token and --draft-tokens drafted ones, logits on every row (with --batch, --tp)",
    ),
];

/// The word `rdu lower --cut` takes for a manifest's cut.
pub fn mode_word(mode: CutMode) -> &'static str {
    CUTS.iter().find(|(c, ..)| c.0 == mode).map_or("", |(_, word, _)| word)
}

impl ValueEnum for CutArg {
    fn value_variants<'a>() -> &'a [CutArg] {
        static ALL: std::sync::LazyLock<Vec<CutArg>> = std::sync::LazyLock::new(|| CUTS.iter().map(|c| c.0).collect());
        &ALL
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let (_, word, help) = CUTS.iter().find(|(c, ..)| c == self)?;
        Some(clap::builder::PossibleValue::new(*word).help(*help))
    }
}

/// The sizes of a cut: `--ctx --seq --batch --tp --chunk --draft-tokens`.
#[derive(Clone, Copy, Debug, clap::Args)]
pub struct CutSizes {
    /// KV-cache positions of the decode, batched, tp, prefill and verify cuts
    #[arg(long, default_value_t = 4096)]
    pub ctx: usize,
    /// Tokens of one forward step
    #[arg(long, default_value_t = 128)]
    pub seq: usize,
    /// Sequences per step of the batched cuts (default 8); a verify step's sequences, each
    /// with its own draft (default: one)
    #[arg(long)]
    pub batch: Option<usize>,
    /// Chips of the tensor-parallel cuts (default 8); a verify step's (default 1)
    #[arg(long)]
    pub tp: Option<usize>,
    /// Rows per step of the prefill cut
    #[arg(long, default_value_t = 512)]
    pub chunk: usize,
    /// Drafted tokens a verify step checks (it steps one more row: the last accepted token)
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub draft_tokens: usize,
}

/// The batch and tp of the batched and tensor-parallel cuts when not given.
const DEFAULT_BATCH: usize = 8;
const DEFAULT_TP: usize = 8;

impl CutArg {
    pub fn cut(self, sizes: &CutSizes) -> Result<Cut> {
        let CutSizes { ctx, seq, batch, tp, chunk, draft_tokens: draft } = *sizes;
        let verify = self.0 == CutMode::Verify;
        let given_batch = batch;
        let batch = batch.unwrap_or(DEFAULT_BATCH);
        let tp = tp.unwrap_or(if verify { 1 } else { DEFAULT_TP });
        let sizes = [
            ("--ctx", ctx),
            ("--seq", seq),
            ("--batch", batch),
            ("--tp", tp),
            ("--chunk", chunk),
            ("--draft-tokens", draft),
        ];
        for (flag, value) in sizes {
            if value == 0 {
                bail!("{flag} must be at least 1");
            }
            check_size(flag, value)?;
        }
        Ok(match self.0 {
            CutMode::Forward => Cut::Forward { seq },
            CutMode::Decode => Cut::Decode { ctx },
            CutMode::Batched => Cut::Batched { batch, ctx },
            CutMode::Tp => Cut::Tp { tp, ctx },
            CutMode::BatchedTp => Cut::BatchedTp { batch, tp, ctx },
            CutMode::Prefill => Cut::Prefill { chunk, ctx },
            CutMode::PrefillTp => Cut::PrefillTp { chunk, tp, ctx },
            CutMode::Verify => Cut::Verify { draft, batch: given_batch, tp, ctx },
        })
    }
}

/// The target of a lowering: `--chip --storage --state` (`rdu lower`, `rdu fit`, `rdu plan`).
#[derive(Clone, Debug, clap::Args)]
pub struct TargetArgs {
    /// Target chip: sn50, sn40l, or a chip description file (TOML)
    #[arg(long, default_value = "sn50")]
    pub chip: String,
    /// Which weights are stored Q8_0
    #[arg(long, value_enum, default_value = "auto")]
    pub storage: StorageArg,
    /// How carried state (KV caches, latent caches, recurrent state) is stored: bf16, as
    /// deployments store it, by default; f32 to match transformers' float32 cache
    #[arg(long, value_enum, default_value = "bf16")]
    pub state: StateArg,
}

/// The largest `--ctx`, `--batch`, `--seq` or `--chunk` rdu authors: sizes are written into
/// program text and multiplied into element counts, which must stay far inside 64 bits.
pub const MAX_SIZE: usize = 1 << 32;

/// Refuses a size beyond [`MAX_SIZE`], naming the flag, the number and the limit.
pub fn check_size(flag: &str, value: usize) -> Result<()> {
    if value > MAX_SIZE {
        bail!("{flag} {value} is too large: rdu lowers at most {MAX_SIZE} (2^32)");
    }
    Ok(())
}

/// A preset name, a config.json, a directory holding one, or a `.gguf` file.
pub fn resolve(model: &str) -> Result<ModelSpec> {
    Ok(presets::resolve(model)?)
}

/// Where a run's weights come from.
pub enum Weights {
    /// A HF checkpoint directory.
    Hf(Box<rdu_compiler::reference::HfWeights>),
    /// A llama.cpp GGUF file (the path is the MODEL argument).
    Gguf(Box<rdu_compiler::reference::GgufWeights>),
    /// No checkpoint: seeded random weights.
    None,
}

/// The spec and, for a HF directory with safetensors or a GGUF file, its weights.
pub fn resolve_with_weights(model: &str) -> Result<(ModelSpec, Weights)> {
    let spec = resolve(model)?;
    let dir = std::path::Path::new(model);
    if dir.is_file() && dir.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let weights = rdu_compiler::reference::GgufWeights::open(&spec, dir).map_err(anyhow::Error::msg)?;
        return Ok((spec, Weights::Gguf(Box::new(weights))));
    }
    let has_weights =
        dir.is_dir() && (dir.join("model.safetensors").exists() || dir.join("model.safetensors.index.json").exists());
    if !has_weights {
        return Ok((spec, Weights::None));
    }
    let weights = rdu_compiler::reference::HfWeights::open(&spec, dir).map_err(anyhow::Error::msg)?;
    Ok((spec, Weights::Hf(Box::new(weights))))
}

/// The storage a command lowers for: `auto` is as the checkpoint stores its weights (a
/// safetensors checkpoint's FP8 and MXFP4 tensors, the rest dense; a GGUF's Q8_0 and MXFP4
/// tensors), and for a preset or a bare config as its `quantization_config` declares, else Q8_0.
pub fn storage_of(arg: StorageArg, spec: &ModelSpec, weights: &Weights) -> Storage {
    match (arg, weights) {
        (StorageArg::Auto, Weights::Hf(w)) => w.storage(),
        (StorageArg::Auto, Weights::Gguf(w)) => w.storage(),
        (StorageArg::Auto, Weights::None) => {
            rdu_compiler::model::quantization::declared_storage(spec).unwrap_or(Storage::AllQ8)
        }
        (s, _) => s.storage(),
    }
}

/// An I/O error in a user's words, without the `(os error N)` tail.
pub fn io_words(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::NotFound => "no such file or folder".to_string(),
        _ => {
            let text = e.to_string();
            text.split(" (os error").next().unwrap_or(&text).to_string()
        }
    }
}

/// How the deployment stores carried state (KV caches, latent caches, DeltaNet state).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// bfloat16, as deployments store them: every value written is rounded (2 bytes an element)
    Bf16,
    /// f32 (4 bytes an element): what transformers' own float32 cache holds
    F32,
}

impl StateArg {
    pub fn dtype(self) -> StateDtype {
        match self {
            StateArg::Bf16 => StateDtype::Bf16,
            StateArg::F32 => StateDtype::F32,
        }
    }
}

/// `spec` declaring its states as `state` says.
pub fn with_state(mut spec: ModelSpec, state: StateArg) -> ModelSpec {
    spec.state = state.dtype();
    spec
}

/// The MTP block of `target` as the checkpoint `weights` of `model` holds it (its own embedding
/// and output head, or the target's where it stores none); refused in one line when there is
/// none, or when the checkpoint lacks the block's tensors.
pub fn mtp_of(target: &ModelSpec, weights: &Weights, model: &str) -> Result<ModelSpec> {
    let mtp = mtp_draft(target).map_err(anyhow::Error::msg)?;
    let Weights::Hf(w) = weights else { return Ok(mtp) };
    if let Some(TensorSource::Tensor(fc)) = checkpoint_source(&mtp, "Wfc0") {
        if !w.contains(&fc) {
            bail!("--draft mtp: {model} has no multi-token-prediction block (its checkpoint has no `{fc}`)");
        }
    }
    Ok(falling_back(mtp, &|name| w.contains(name)))
}

/// The storage of an MTP block: the target's policy, or — a checkpoint stored weight by weight
/// in block formats, whose map names the target's layers — what its `quantization_config`
/// declares for the block's own weights (DeepSeek-V3 stores its block FP8 as its layers).
pub fn mtp_storage(target: &Storage, block: &ModelSpec) -> Result<Storage> {
    match target {
        Storage::Exactly(map) if !map.is_empty() => declared_storage(block).ok_or_else(|| {
            anyhow!("--draft mtp: {} stores its weights in block formats its config does not declare, so its MTP block's are unknown; use --storage q8 or dense", block.name)
        }),
        other => Ok(other.clone()),
    }
}
