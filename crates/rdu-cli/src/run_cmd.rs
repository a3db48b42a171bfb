//! `rdu run`: generate tokens with the reference engine (and, once bundles land, the spatial
//! engine), writing logits rows and a JSON summary on request.

use crate::model_arg::{resolve_with_weights, CutArg, Weights};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use rdu_compiler::lower::streamed::Storage;
use rdu_compiler::reference::{Reference, SeededWeights, WeightSource};
use serde_json::json;
use std::path::PathBuf;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Engine {
    /// The reference interpreter over each layer's authored program (slow, obviously right)
    Reference,
}

#[derive(Args)]
pub struct RunArgs {
    /// A HF model directory (config.json + safetensors), a preset (seeded random weights), or a config.json
    model: String,
    /// Prompt token ids, comma-separated
    #[arg(long, value_delimiter = ',', required = true)]
    tokens: Vec<u32>,
    /// Tokens to generate greedily after the prompt
    #[arg(short = 'n', default_value_t = 0)]
    n: usize,
    #[arg(long, value_enum, default_value = "reference")]
    engine: Engine,
    /// forward: the whole sequence each step, no cache; decode: one token at a time with the cache
    #[arg(long, value_enum, default_value = "decode")]
    cut: CutArg,
    /// KV-cache positions for the decode cut (default: prompt + generated tokens)
    #[arg(long)]
    ctx: Option<usize>,
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

pub fn run(args: &RunArgs) -> Result<()> {
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let seeded;
    let hf;
    let source: &dyn WeightSource = match weights {
        Weights::Hf(w) => {
            hf = w;
            hf.as_ref()
        }
        Weights::None => {
            seeded = SeededWeights { seed: args.seed, unit_offset: spec.head.norm_unit_offset };
            &seeded
        }
    };
    if args.tokens.is_empty() {
        bail!("--tokens needs at least one token id");
    }
    if let Some(&bad) = args.tokens.iter().find(|&&t| t as usize >= spec.vocab) {
        bail!("token id {bad} is out of range: {} has a vocabulary of {} tokens", spec.name, spec.vocab);
    }
    let total = args.tokens.len() + args.n;
    let mut reference = Reference::new(&spec, Storage::Dense, source);
    let mut rows: Vec<Vec<f32>> = Vec::new();
    let mut positions = Vec::new();
    let mut generated = Vec::new();
    match args.cut {
        CutArg::Forward => {
            let mut seq = args.tokens.clone();
            let out = reference.forward(&seq).map_err(anyhow::Error::msg)?;
            let vocab = spec.vocab;
            for (p, row) in out.logits.as_f32().unwrap_or_default().chunks(vocab).enumerate() {
                rows.push(row.to_vec());
                positions.push(p);
            }
            while generated.len() < args.n {
                let next = argmax(rows.last().expect("at least one row"));
                generated.push(next);
                seq.push(next);
                if generated.len() == args.n {
                    break;
                }
                let out = reference.forward(&seq).map_err(anyhow::Error::msg)?;
                rows.push(out.logits.as_f32().unwrap_or_default()[(seq.len() - 1) * vocab..].to_vec());
                positions.push(seq.len() - 1);
            }
        }
        CutArg::Decode => {
            let ctx = args.ctx.unwrap_or(total);
            if ctx == 0 {
                bail!("--ctx must be at least 1");
            }
            if total > ctx {
                bail!("prompt ({}) plus -n {} needs {total} positions but --ctx is {ctx}", args.tokens.len(), args.n);
            }
            let mut decoder = reference.decoder(ctx).map_err(anyhow::Error::msg)?;
            let mut feed: Vec<u32> = args.tokens.clone();
            let mut pos = 0;
            while pos < feed.len() {
                let out = decoder.step(feed[pos], pos).map_err(anyhow::Error::msg)?;
                rows.push(out.logits.into_f32());
                positions.push(pos);
                pos += 1;
                if pos == feed.len() && generated.len() < args.n {
                    let next = argmax(rows.last().expect("a row per step"));
                    generated.push(next);
                    if generated.len() < args.n {
                        feed.push(next);
                    }
                }
            }
        }
    }
    if let Some(path) = &args.logits {
        write_npy(path, &rows, spec.vocab).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", json!({"prompt": args.tokens, "generated": generated, "positions": positions}));
    } else {
        println!("prompt:    {:?}", args.tokens);
        println!("generated: {generated:?}");
    }
    Ok(())
}

fn argmax(row: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in row.iter().enumerate() {
        if *v > row[best] {
            best = i;
        }
    }
    best as u32
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
