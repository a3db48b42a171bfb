//! `rdu run`: generate tokens with the spatial engine (a bundle run by the host through the
//! simulator) or the reference engine (each layer's program through the reference
//! interpreter), writing logits rows and a JSON summary on request.

use crate::model_arg::{resolve_with_weights, CutArg, StorageArg, Weights};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use rdu_compiler::lower::streamed::{lower_decode_streamed, lower_forward_streamed, LowerOptions, Storage};
use rdu_compiler::model::spec::ModelSpec;
use rdu_compiler::reference::{Reference, SeededWeights, WeightSource};
use rdu_host::{Host, WeightsSource};
use rdu_spatial::chip::Chip;
use serde_json::json;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// Lower (or load --bundle), and run the bundle on the host through the simulator
    Spatial,
    /// The reference interpreter over each layer's authored program (slow, obviously right)
    Reference,
}

#[derive(Args)]
pub struct RunArgs {
    /// A HF model directory (config.json + safetensors), a .gguf file, a preset (seeded random weights), or a config.json
    model: String,
    /// Prompt token ids, comma-separated
    #[arg(long, value_delimiter = ',', required = true)]
    tokens: Vec<u32>,
    /// Tokens to generate greedily after the prompt
    #[arg(short = 'n', default_value_t = 0)]
    n: usize,
    #[arg(long, value_enum, default_value = "spatial")]
    engine: Engine,
    /// Run this bundle (from `rdu lower -o`) instead of lowering now
    #[arg(long)]
    bundle: Option<PathBuf>,
    /// forward: the whole sequence each step, no cache; decode: one token at a time with the cache
    #[arg(long, value_enum, default_value = "decode")]
    cut: CutArg,
    /// KV-cache positions for the decode cut (default: prompt + generated tokens)
    #[arg(long)]
    ctx: Option<usize>,
    /// Which weights are stored Q8_0 (auto: as the checkpoint stores them; Q8_0 for a preset)
    #[arg(long, value_enum, default_value = "auto")]
    storage: StorageArg,
    /// Target chip of the lowering: sn50, sn40l, or a chip file
    #[arg(long, default_value = "sn50")]
    chip: String,
    /// Seed of the random weights of a preset or a bare config
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Write the computed logits rows as float32 [rows, vocab] to this .npy file
    #[arg(long)]
    logits: Option<PathBuf>,
    /// Print one JSON object: {"prompt", "generated", "positions"}
    #[arg(long)]
    json: bool,
}

/// Computes the logits rows of `tokens`, the first of which is at position `pos`.
type StepFn<'a> = Box<dyn FnMut(&[u32], usize) -> Result<Vec<Vec<f32>>> + 'a>;

pub fn run(args: &RunArgs) -> Result<()> {
    let (spec, weights) = resolve_with_weights(&args.model)?;
    if args.tokens.is_empty() {
        bail!("--tokens needs at least one token id");
    }
    if let Some(&bad) = args.tokens.iter().find(|&&t| t as usize >= spec.vocab) {
        bail!("token id {bad} is out of range: {} has a vocabulary of {} tokens", spec.name, spec.vocab);
    }
    let total = args.tokens.len() + args.n;
    let ctx = args.ctx.unwrap_or(total);
    if ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    if args.cut == CutArg::Decode && total > ctx {
        bail!("prompt ({}) plus -n {} needs {total} positions but --ctx is {ctx}", args.tokens.len(), args.n);
    }
    let storage = match (args.storage, &weights) {
        (StorageArg::Auto, Weights::Hf(_)) => Storage::Dense,
        (StorageArg::Auto, Weights::Gguf(w)) => w.storage(),
        (s, _) => s.storage(),
    };
    let vocab = spec.vocab;
    let seeded = SeededWeights { seed: args.seed, unit_offset: spec.head.norm_unit_offset };
    let (reference_weights, host_weights): (&dyn WeightSource, WeightsSource) = match &weights {
        Weights::Hf(w) => (w.as_ref(), WeightsSource::Hf(PathBuf::from(&args.model))),
        Weights::Gguf(w) => (w.as_ref(), WeightsSource::Gguf(PathBuf::from(&args.model))),
        Weights::None => (&seeded, WeightsSource::Seeded { seed: args.seed, unit_offset: spec.head.norm_unit_offset }),
    };
    let mut reference = Reference::new(&spec, storage.clone(), reference_weights);
    let mut step: StepFn<'_> = match (args.engine, args.cut) {
        (Engine::Reference, CutArg::Forward) => Box::new(|toks: &[u32], _pos: usize| {
            let out = reference.forward(toks).map_err(|e| anyhow!(e))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        }),
        (Engine::Reference, CutArg::Decode) => {
            let mut decoder = reference.decoder(ctx).map_err(|e| anyhow!(e))?;
            Box::new(move |toks: &[u32], pos: usize| {
                let out = decoder.step(toks[0], pos).map_err(|e| anyhow!(e))?;
                Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
            })
        }
        (Engine::Spatial, cut) => spatial_engine(args, &spec, storage, cut, ctx, host_weights)?,
    };
    let mut logits: Vec<Vec<f32>> = Vec::new();
    let mut positions = Vec::new();
    let mut generated = Vec::new();
    let mut seq = args.tokens.clone();
    match args.cut {
        CutArg::Forward => loop {
            let all = step(&seq, 0)?;
            let first_new = if logits.is_empty() { 0 } else { seq.len() - 1 };
            for (p, row) in all.into_iter().enumerate().skip(first_new) {
                positions.push(p);
                logits.push(row);
            }
            if generated.len() == args.n {
                break;
            }
            let next = rdu_host::greedy(logits.last().expect("a row")).map_err(|e| anyhow!("{e}"))?;
            generated.push(next);
            if generated.len() == args.n {
                break;
            }
            seq.push(next);
        },
        CutArg::Decode => {
            let mut pos = 0;
            while pos < seq.len() {
                let row = step(&seq[pos..pos + 1], pos)?.remove(0);
                positions.push(pos);
                logits.push(row);
                pos += 1;
                if pos == seq.len() && generated.len() < args.n {
                    let next = rdu_host::greedy(logits.last().expect("a row")).map_err(|e| anyhow!("{e}"))?;
                    generated.push(next);
                    if generated.len() < args.n {
                        seq.push(next);
                    }
                }
            }
        }
    }
    if let Some(path) = &args.logits {
        write_npy(path, &logits, vocab).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", json!({"prompt": args.tokens, "generated": generated, "positions": positions}));
    } else {
        println!("prompt:    {:?}", args.tokens);
        println!("generated: {generated:?}");
    }
    Ok(())
}

/// The spatial engine: a bundle (given, or lowered now into a temporary directory and read
/// back), run by the host.
fn spatial_engine<'a>(
    args: &'a RunArgs,
    spec: &'a ModelSpec,
    storage: Storage,
    cut: CutArg,
    ctx: usize,
    weights: WeightsSource,
) -> Result<StepFn<'a>> {
    let vocab = spec.vocab;
    let load = |dir: &std::path::Path, weights: &WeightsSource| -> Result<Host> {
        Host::load(dir, weights, &mut |_, _, _| {}).map_err(|e| anyhow!("{e}"))
    };
    if let Some(dir) = &args.bundle {
        let mut host = load(dir, &weights)?;
        return Ok(Box::new(move |toks: &[u32], pos: usize| {
            let out = host.step(toks, pos).map_err(|e| anyhow!("{e}"))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        }));
    }
    let chip = Chip::resolve(&args.chip)?;
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let lower_into = move |dir: &std::path::Path, seq: Option<usize>| -> Result<()> {
        let opts = LowerOptions { chip: chip.clone(), storage: storage.clone(), seed: 0, progress: &mut |_| {} };
        let model = match seq {
            Some(seq) => lower_forward_streamed(spec, seq, opts),
            None => lower_decode_streamed(spec, ctx, opts),
        }
        .map_err(|e| anyhow!("{e}"))?;
        model.bundle().map_err(|e| anyhow!(e))?.write(dir, true)?;
        Ok(())
    };
    match cut {
        CutArg::Decode => {
            let dir = tmp.path().join("decode");
            lower_into(&dir, None)?;
            let mut host = load(&dir, &weights)?;
            Ok(Box::new(move |toks: &[u32], pos: usize| {
                let _keep = &tmp;
                let out = host.step(toks, pos).map_err(|e| anyhow!("{e}"))?;
                Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
            }))
        }
        CutArg::Forward => Ok(Box::new(move |toks: &[u32], _pos: usize| {
            // A forward bundle serves one sequence length: lower one per length.
            let dir = tmp.path().join(format!("forward-{}", toks.len()));
            lower_into(&dir, Some(toks.len()))?;
            let out = load(&dir, &weights)?.step(toks, 0).map_err(|e| anyhow!("{e}"))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        })),
    }
}

fn rows(flat: &[f32], vocab: usize) -> Vec<Vec<f32>> {
    flat.chunks(vocab).map(<[f32]>::to_vec).collect()
}

/// float32 `[rows, vocab]`, C order.
fn write_npy(path: &std::path::Path, rows: &[Vec<f32>], vocab: usize) -> Result<()> {
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
