//! `rdu run --batch-prompts FILE [--tp T]`: several sequences stepped together through one
//! batched bundle (`lower_batched_decode_streamed`, or `lower_batched_tp_decode_streamed` over
//! `T` chips), each with its own position and states.
//!
//! All sequences start at position 0 and advance one position per step; a sequence whose
//! prompt is shorter starts generating earlier, and a finished sequence keeps stepping
//! (its rows are computed and ignored) until every sequence is done. Each sequence has its
//! own sampler with the same seed, so it gets exactly what it would get alone.

use crate::model_arg::{resolve_with_weights, storage_of, with_state, Weights};
use crate::run_cmd::{rows, write_npy, Engine, RunArgs, RunCut};
use anyhow::{anyhow, bail, Context, Result};
use rdu_compiler::lower::streamed::{lower_batched_decode_streamed, lower_batched_tp_decode_streamed, LowerOptions};
use rdu_host::{Host, Sampler, Sampling, WeightsSource};
use rdu_spatial::chip::Chip;
use serde_json::json;
use std::path::{Path, PathBuf};

/// One sequence of the batch: its prompt, what it generated, and the logits rows it computed.
struct Sequence {
    prompt: Vec<u32>,
    generated: Vec<u32>,
    positions: Vec<usize>,
    logits: Vec<Vec<f32>>,
    sampler: Sampler,
    done: bool,
}

impl Sequence {
    /// The token this sequence feeds at position `pos`.
    fn token_at(&self, pos: usize) -> u32 {
        match self.prompt.get(pos) {
            Some(&t) => t,
            None => self.generated.get(pos - self.prompt.len()).copied().unwrap_or_else(|| self.last()),
        }
    }

    fn last(&self) -> u32 {
        *self.generated.last().or(self.prompt.last()).expect("a prompt has at least one token")
    }
}

pub fn run(args: &RunArgs, file: &Path) -> Result<()> {
    if args.engine != Engine::Spatial {
        bail!("--batch-prompts runs the spatial engine (a batched bundle); drop --engine reference");
    }
    if args.cut == Some(RunCut::Forward) {
        bail!("--batch-prompts decodes token by token; drop --cut forward");
    }
    let prompts = read_prompts(file)?;
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, crate::run_cmd::run_state(args)?);
    let lowered = match &args.bundle {
        Some(dir) => {
            let m = crate::bundle_arg::manifest(dir)?;
            crate::bundle_arg::check(args, &spec, dir, &m, true)?;
            Some(m.cut)
        }
        None => None,
    };
    for (b, prompt) in prompts.iter().enumerate() {
        if let Some(&bad) = prompt.iter().find(|&&t| t as usize >= spec.vocab) {
            bail!("{}: prompt {b}: token id {bad} is out of range for a vocabulary of {}", file.display(), spec.vocab);
        }
    }
    let logits_path = |b: usize| -> Option<PathBuf> {
        args.logits.as_ref().map(|p| PathBuf::from(p.to_string_lossy().replace("{b}", &b.to_string())))
    };
    if let Some(path) = &args.logits {
        if prompts.len() > 1 && !path.to_string_lossy().contains("{b}") {
            bail!("--logits {} would hold every sequence's rows in one file: put {{b}} in the path", path.display());
        }
    }
    let batch = prompts.len();
    for b in 0..batch {
        if let Some(path) = logits_path(b) {
            crate::run_cmd::check_writable(&path)?;
        }
    }
    let total = prompts.iter().map(|p| p.len()).max().unwrap_or(0).saturating_add(args.n);
    crate::model_arg::check_size("--ctx", args.ctx.unwrap_or(total))?;
    let ctx = args.ctx.or(lowered.and_then(|c| c.ctx)).unwrap_or(total);
    if total > ctx {
        bail!("the longest prompt plus -n {} needs {total} positions but --ctx is {ctx}", args.n);
    }
    let storage = storage_of(args.storage, &weights);
    let host_weights = match &weights {
        Weights::Hf(_) => WeightsSource::Hf(PathBuf::from(&args.model)),
        Weights::Gguf(_) => WeightsSource::Gguf(PathBuf::from(&args.model)),
        Weights::None => WeightsSource::Seeded { seed: args.seed, unit_offset: spec.head.norm_unit_offset },
    };
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let dir = match &args.bundle {
        Some(dir) => dir.clone(),
        None => {
            let chip = Chip::resolve(args.chip())?;
            let bar = crate::progress::lowering_bar(args.json);
            let progress = &mut |p: rdu_compiler::lower::streamed::Progress<'_>| crate::progress::show(&bar, &p);
            let opts = LowerOptions { chip, storage, seed: 0, progress };
            let model = match args.tp {
                Some(tp) => lower_batched_tp_decode_streamed(&spec, batch, tp, ctx, opts),
                None => lower_batched_decode_streamed(&spec, batch, ctx, opts),
            }
            .map_err(|e| anyhow!("{e}"))?;
            let dir = tmp.path().join("batched");
            model.bundle().map_err(|e| anyhow!(e))?.write(&dir, true)?;
            dir
        }
    };
    let mut host = Host::load(&dir, &host_weights, &mut |_, _, _| {})
        .map_err(|e| crate::bundle_arg::load_error(e, args.bundle.is_some()))?;
    if host.sequences() != batch {
        bail!(
            "the bundle {} steps {} sequence(s) at a time but {} holds {batch} prompt(s); lower it with --cut batched --batch {batch}",
            dir.display(),
            host.sequences(),
            file.display()
        );
    }
    let sampling = Sampling { temperature: args.temp, top_k: args.top_k, top_p: args.top_p, seed: args.seed };
    let mut seqs = prompts
        .into_iter()
        .map(|prompt| {
            let sampler = Sampler::new(sampling).map_err(|e| anyhow!("{e}"))?;
            Ok(Sequence {
                prompt,
                generated: Vec::new(),
                positions: Vec::new(),
                logits: Vec::new(),
                sampler,
                done: false,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let vocab = spec.vocab;
    let mut pos = 0;
    while seqs.iter().any(|s| !s.done) && pos < ctx {
        let tokens: Vec<u32> = seqs.iter().map(|s| s.token_at(pos)).collect();
        let out = host.step_at(&tokens, &vec![pos; batch]).map_err(|e| anyhow!("{e}"))?;
        for (s, row) in seqs.iter_mut().zip(rows(out.logits.as_f32().unwrap_or_default(), vocab)) {
            // A sequence's row counts while it still reads its prompt or its own last token.
            if s.done || pos >= s.prompt.len() + s.generated.len() {
                continue;
            }
            s.positions.push(pos);
            s.logits.push(row);
            let fed_all = pos + 1 == s.prompt.len() + s.generated.len();
            if !fed_all {
                continue;
            }
            if s.generated.len() == args.n {
                s.done = true;
                continue;
            }
            let next = s.sampler.sample(s.logits.last().expect("a row")).map_err(|e| anyhow!("{e}"))?;
            s.generated.push(next);
            if s.generated.len() == args.n {
                s.done = true;
            }
        }
        pos += 1;
    }
    for (b, s) in seqs.iter().enumerate() {
        if let Some(path) = logits_path(b) {
            write_npy(&path, &s.logits, vocab).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    if args.json {
        let sequences: Vec<_> = seqs
            .iter()
            .map(|s| json!({"prompt": s.prompt, "generated": s.generated, "positions": s.positions}))
            .collect();
        println!("{}", json!({ "sequences": sequences }));
    } else {
        for (b, s) in seqs.iter().enumerate() {
            println!("sequence {b}: prompt {:?} generated {:?}", s.prompt, s.generated);
        }
    }
    Ok(())
}

/// One prompt per non-empty line, comma-separated token ids.
fn read_prompts(file: &Path) -> Result<Vec<Vec<u32>>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut prompts = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let ids = line
            .split(',')
            .map(|t| {
                let t = t.trim();
                t.parse::<u32>().map_err(|_| anyhow!("{}:{}: `{t}` is not a token id", file.display(), i + 1))
            })
            .collect::<Result<Vec<u32>>>()?;
        prompts.push(ids);
    }
    if prompts.is_empty() {
        bail!("{} holds no prompts: write one per line as comma-separated token ids", file.display());
    }
    Ok(prompts)
}
