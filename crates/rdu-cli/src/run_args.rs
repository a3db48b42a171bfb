//! The arguments of `rdu run` and what its two drivers share: `run_cmd` (one sequence) and
//! `batch_run` (`--batch-prompts`, several sequences through a batched bundle).

use crate::model_arg::{StateArg, StorageArg, Weights};
use anyhow::{anyhow, bail, Result};
use clap::{Args, ValueEnum};
use rdu_compiler::deploy::deploy;
use rdu_compiler::deploy::{LowerOptions, Progress, Storage};
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_host::WeightsSource;
use rdu_spatial::chip::Chip;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Lower (or load --bundle), and run the bundle on the host through the simulator
    Spatial,
    /// The reference interpreter over each layer's authored program (slow, obviously right)
    Reference,
}

/// How `rdu run` steps through a sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RunCut {
    /// The whole sequence at every step, causally, without a cache
    Forward,
    /// One token per step against the carried state
    Decode,
}

#[derive(Args)]
pub struct RunArgs {
    /// A HF model directory (config.json + safetensors), a .gguf file, a preset (seeded random weights), or a config.json
    pub(crate) model: String,
    /// Prompt token ids, comma-separated
    #[arg(long, value_delimiter = ',', required_unless_present_any = ["prompt", "batch_prompts"], conflicts_with = "prompt")]
    pub(crate) tokens: Vec<u32>,
    /// Prompt text, tokenized with the model's tokenizer (GGUF, or tokenizer.json in a HF directory);
    /// the generated text streams to stdout, then prompt and decode tokens/s to stderr
    #[arg(long)]
    pub(crate) prompt: Option<String>,
    /// Tokens to generate after the prompt (generation stops early at an end-of-sequence token)
    #[arg(short = 'n', default_value_t = 0)]
    pub(crate) n: usize,
    /// Sampling temperature; 0 (the default) is greedy
    #[arg(long, default_value_t = 0.0)]
    pub(crate) temp: f32,
    /// Sample among the K most likely tokens only (0: all)
    #[arg(long, default_value_t = 0)]
    pub(crate) top_k: usize,
    /// Sample among the smallest set of tokens whose probability reaches P
    #[arg(long, default_value_t = 1.0)]
    pub(crate) top_p: f32,
    /// Seed of the sampler (and of the random weights of a preset or a bare config)
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    #[arg(long, value_enum, default_value = "spatial")]
    pub(crate) engine: Engine,
    /// Run this bundle (from `rdu lower -o`) instead of lowering now
    #[arg(long)]
    pub(crate) bundle: Option<PathBuf>,
    /// forward: the whole sequence each step, no cache; decode (the default): one token at a
    /// time with the cache. With --bundle, the bundle's cut
    #[arg(long, value_enum)]
    pub(crate) cut: Option<RunCut>,
    /// KV-cache positions for the decode cut (default: prompt + generated tokens)
    #[arg(long)]
    pub(crate) ctx: Option<usize>,
    /// Prefill the prompt C tokens a step through a prefill bundle, then decode through a decode
    /// bundle over the same state (spatial engine; the rest of a prompt that is not a multiple
    /// of C is decoded token by token); --logits then holds the last row of each chunk
    #[arg(long, value_name = "C")]
    pub(crate) chunk: Option<usize>,
    /// Which weights are stored Q8_0 (auto: as the checkpoint stores them; Q8_0 for a preset)
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) storage: StorageArg,
    /// Target chip of the lowering: sn50 (the default), sn40l, or a chip file
    #[arg(long)]
    pub(crate) chip: Option<String>,
    /// The decode bundle a prefill --bundle continues into (default: lowered now for the
    /// prefill bundle's ctx and chip)
    #[arg(long, value_name = "DIR", requires = "bundle")]
    pub(crate) decode_bundle: Option<PathBuf>,
    /// Write the computed logits rows as float32 [rows, vocab] to this .npy file
    #[arg(long)]
    pub(crate) logits: Option<PathBuf>,
    /// Print one JSON object: {"prompt", "generated", "positions"} (with --batch-prompts:
    /// {"sequences": [{"prompt", "generated", "positions"}, ...]})
    #[arg(long)]
    pub(crate) json: bool,
    /// Time each op the spatial engine runs and print where the time went on stderr at the end:
    /// op, output shape, calls, milliseconds (wall time on the host, not the chip's; ops that
    /// run at once each count their own)
    #[arg(long)]
    pub(crate) profile: bool,
    /// Run several sequences at once through a batched bundle: FILE holds one prompt per line
    /// as comma-separated token ids; each sequence gets exactly what it would get alone.
    /// `{b}` in --logits is replaced by the sequence's index
    #[arg(long, value_name = "FILE", conflicts_with_all = ["tokens", "prompt"])]
    pub(crate) batch_prompts: Option<PathBuf>,
    /// Decode over T chips (tensor parallel): each layer's heads and FFN columns split over T
    /// threads with a real all-reduce (the spatial engine's decode cut; with --batch-prompts,
    /// the batched tensor-parallel cut)
    #[arg(long, value_name = "T")]
    pub(crate) tp: Option<usize>,
    /// Decode speculatively: DRAFT proposes --draft-tokens tokens and a verify bundle of MODEL
    /// checks them in one step (greedy: the same tokens as a plain run; sampling: the same
    /// distribution, by speculative sampling). DRAFT is `lookup` (n-gram matches in the
    /// sequence so far) or another model with the same vocabulary (a preset, config or
    /// checkpoint; a preset drafts with --seed's weights)
    #[arg(long, value_name = "DRAFT", conflicts_with_all = ["batch_prompts", "chunk", "decode_bundle"])]
    pub(crate) draft: Option<String>,
    /// Tokens the draft proposes a step (with --draft; a verify --bundle says its own)
    #[arg(long, value_name = "K", requires = "draft")]
    pub(crate) draft_tokens: Option<usize>,
    /// How carried state is stored: f32 when lowering here unless given (a run on a checkpoint
    /// is compared with transformers' float32 cache; `rdu lower` deploys bf16), as the bundle
    /// stores it with --bundle (a different --state is refused)
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
}

impl RunArgs {
    /// The chip to lower for.
    pub(crate) fn chip(&self) -> &str {
        self.chip.as_deref().unwrap_or("sn50")
    }
}

/// Refuses an output path that cannot be written (a missing or read-only folder, a directory)
/// before any work, by creating and removing a temporary file beside it.
pub(crate) fn check_writable(path: &Path) -> Result<()> {
    if path.is_dir() {
        bail!("cannot write {}: it is a directory", path.display());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        bail!("cannot write {}: the folder {} does not exist", path.display(), parent.display());
    }
    tempfile::NamedTempFile::new_in(parent)
        .map(drop)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), crate::model_arg::io_words(&e)))
}

/// Where the host reads the weights: the checkpoint MODEL names, or the seeded random weights
/// of a preset or a bare config.
pub(crate) fn host_weights(args: &RunArgs, spec: &ModelSpec, weights: &Weights) -> WeightsSource {
    host_weights_of(&args.model, args.seed, spec, weights)
}

/// [`host_weights`] for MODEL `model`, a preset's weights seeded with `seed`.
pub(crate) fn host_weights_of(model: &str, seed: u64, spec: &ModelSpec, weights: &Weights) -> WeightsSource {
    match weights {
        Weights::Hf(_) => WeightsSource::Hf(PathBuf::from(model)),
        Weights::Gguf(_) => WeightsSource::Gguf(PathBuf::from(model)),
        Weights::None => WeightsSource::Seeded { seed, unit_offset: spec.head.norm_unit_offset },
    }
}

/// Lowers `spec` for `cut` on `chip` (the lowering bar on stderr unless `quiet`) and writes
/// the bundle into `dir`.
pub(crate) fn lower_into(
    quiet: bool,
    spec: &ModelSpec,
    chip: &Chip,
    storage: &Storage,
    cut: Cut,
    dir: &Path,
) -> Result<()> {
    let bar = crate::progress::lowering_bar(quiet);
    let progress = &mut |p: Progress<'_>| crate::progress::show(&bar, &p);
    let opts = LowerOptions { chip: chip.clone(), storage: storage.clone(), seed: 0, progress };
    let model = deploy(spec, &cut, opts).map_err(|e| anyhow!("{e}"))?;
    model.bundle().map_err(|e| anyhow!(e))?.write(dir, true)?;
    Ok(())
}

/// float32 `[rows, vocab]`, C order.
pub(crate) fn write_npy(path: &Path, rows: &[Vec<f32>], vocab: usize) -> Result<()> {
    use npyz::WriterBuilder;
    let file = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut writer = npyz::WriteOptions::<f32>::new()
        .default_dtype()
        .shape(&[rows.len() as u64, vocab as u64])
        .writer(file)
        .begin_nd()?;
    for row in rows {
        writer.extend(row.iter().copied())?;
    }
    writer.finish()?;
    Ok(())
}
