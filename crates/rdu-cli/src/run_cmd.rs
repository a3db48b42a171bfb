//! `rdu run`: generate tokens with the spatial engine (a bundle run by the host through the
//! simulator) or the reference engine (each layer's program through the reference
//! interpreter), writing logits rows and a JSON summary on request.

use crate::model_arg::{resolve_with_weights, storage_of, with_state, StateArg, StorageArg, Weights};
use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use rdu_compiler::lower::streamed::{
    lower_decode_streamed, lower_forward_streamed, lower_prefill_streamed, lower_tp_decode_streamed, LowerOptions,
    Progress, Storage,
};
use rdu_compiler::model::spec::{ModelSpec, StateDtype};
use rdu_compiler::reference::{Reference, SeededWeights, WeightSource};
use rdu_host::{Host, Session, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::CutMode;
use serde_json::json;
use std::path::PathBuf;

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
    /// How carried state is stored: bf16 when lowering here (as `rdu lower` does), as the
    /// bundle stores it with --bundle (a different --state is refused)
    #[arg(long, value_enum)]
    pub(crate) state: Option<StateArg>,
}

/// The state storage a run uses: the bundle's, when it runs one (refusing a `--state` that
/// differs), else `--state`, bf16 by default like `rdu lower`.
pub(crate) fn run_state(args: &RunArgs) -> Result<StateArg> {
    let Some(dir) = &args.bundle else { return Ok(args.state.unwrap_or(StateArg::F32)) };
    let bundle = rdu_spatial::bundle::Bundle::read(dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    let stored: std::collections::BTreeSet<StateDtype> = bundle.manifest.states.iter().map(|s| s.dtype).collect();
    let stored = match stored.into_iter().collect::<Vec<_>>().as_slice() {
        [] => return Ok(args.state.unwrap_or(StateArg::F32)),
        [one] => *one,
        _ => bail!("{}: the bundle stores some states bf16 and others f32", dir.display()),
    };
    let stored = if stored == StateDtype::Bf16 { StateArg::Bf16 } else { StateArg::F32 };
    match args.state {
        Some(given) if given != stored => bail!(
            "{} stores its states {} but --state {} was given: lower the bundle with --state {}, or drop --state",
            dir.display(),
            stored.dtype().as_str(),
            given.dtype().as_str(),
            given.dtype().as_str()
        ),
        _ => Ok(stored),
    }
}

impl RunArgs {
    /// The chip to lower for.
    pub(crate) fn chip(&self) -> &str {
        self.chip.as_deref().unwrap_or("sn50")
    }
}

/// Computes the logits rows of `tokens`, the first of which is at position `pos`.
type StepFn<'a> = Box<dyn FnMut(&[u32], usize) -> Result<Vec<Vec<f32>>> + 'a>;

/// Seconds spent loading weights and lowering, wherever the engine does it (before the first
/// step, or inside a step for the forward cut), so that prompt and decode rates exclude them.
#[derive(Default)]
struct Clocks {
    load: std::cell::Cell<f64>,
    lower: std::cell::Cell<f64>,
}

impl Clocks {
    /// Runs `f`, adding its time to `clock`.
    fn time<T>(clock: &std::cell::Cell<f64>, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        clock.set(clock.get() + t.elapsed().as_secs_f64());
        out
    }

    fn total(&self) -> f64 {
        self.load.get() + self.lower.get()
    }
}

/// The longest prefill chunk `rdu run --prompt` lowers by itself.
const MAX_AUTO_CHUNK: usize = 512;

/// The chunk `rdu run --prompt` prefills with when `--chunk` is not given: the prompt in as few
/// equal chunks of at most `MAX_AUTO_CHUNK` rows as it takes (fewer than one chunk's count of
/// tokens are left to the decode bundle).
fn auto_chunk(prompt: usize) -> usize {
    let chunks = prompt.div_ceil(MAX_AUTO_CHUNK).max(1);
    (prompt / chunks).max(1)
}

pub fn run(args: &RunArgs) -> Result<()> {
    if let Some(file) = &args.batch_prompts {
        return crate::batch_run::run(args, file);
    }
    if let Some(path) = &args.logits {
        check_writable(path)?;
    }
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, run_state(args)?);
    let manifest = match &args.bundle {
        Some(dir) => {
            let m = crate::bundle_arg::manifest(dir)?;
            crate::bundle_arg::check(args, &spec, dir, &m, false)?;
            Some(m)
        }
        None => None,
    };
    // With a bundle, its cut rules: a forward bundle runs forward, a prefill bundle chunks.
    let lowered = manifest.as_ref().map(|m| &m.cut);
    let run_cut = match lowered.map(|c| c.mode) {
        Some(CutMode::Forward) => RunCut::Forward,
        Some(_) => RunCut::Decode,
        None => args.cut.unwrap_or(RunCut::Decode),
    };
    let chunk_arg = args.chunk.or(lowered.and_then(|c| c.chunk));
    // The tokenizer is built only when text must be tokenised: a --tokens run runs on ids.
    let tokenizer = if args.prompt.is_some() { tokenizer_of(&args.model)? } else { None };
    let prompt_ids: Vec<u32> = match (&args.prompt, &tokenizer) {
        (Some(text), Some(tok)) => tok.encode(text, tok.add_bos_default()).map_err(|e| anyhow!("{e}"))?,
        (Some(_), None) => bail!(
            "--prompt needs a tokenizer (a GGUF file, or tokenizer.json in a HF directory); give --tokens instead"
        ),
        (None, _) => args.tokens.clone(),
    };
    if prompt_ids.is_empty() {
        bail!("the prompt has no tokens");
    }
    if let Some(&bad) = prompt_ids.iter().find(|&&t| t as usize >= spec.vocab) {
        bail!("token id {bad} is out of range: {} has a vocabulary of {} tokens", spec.name, spec.vocab);
    }
    let mut sampler = rdu_host::Sampler::new(rdu_host::Sampling {
        temperature: args.temp,
        top_k: args.top_k,
        top_p: args.top_p,
        seed: args.seed,
    })
    .map_err(|e| anyhow!("{e}"))?;
    let eos: Vec<u32> = match &tokenizer {
        Some(t) => t.eos(),
        None => end_ids_of(&args.model)?,
    };
    let streaming = args.prompt.is_some() && !args.json;
    let mut stream = rdu_host::StreamDecoder::new();
    let total = prompt_ids.len().saturating_add(args.n);
    let ctx = args.ctx.or(lowered.and_then(|c| c.ctx)).unwrap_or(total);
    if ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    if run_cut == RunCut::Decode && total > ctx {
        let whose = if args.ctx.is_none() && lowered.is_some() { "the bundle's ctx" } else { "--ctx" };
        bail!("prompt ({}) plus -n {} needs {total} positions but {whose} is {ctx}", prompt_ids.len(), args.n);
    }
    if let Some(seq) = lowered.and_then(|c| c.seq) {
        if total > seq {
            bail!(
                "prompt ({}) plus -n {} needs {total} positions but the forward bundle steps {seq} tokens",
                prompt_ids.len(),
                args.n
            );
        }
    }
    if args.ctx.is_none() && ctx > crate::model_arg::MAX_SIZE {
        bail!(
            "-n {} is too large: the prompt plus -n may hold at most {} positions (2^32)",
            args.n,
            crate::model_arg::MAX_SIZE
        );
    }
    crate::model_arg::check_size("--ctx", ctx)?;
    let storage = storage_of(args.storage, &weights);
    if args.engine == Engine::Reference {
        // The reference engine holds every weight and the whole cache as f32: refuse what
        // this machine cannot hold before allocating it.
        let (params, state) = rdu_compiler::fit::decode_demand(&spec, ctx, &storage)?;
        let need = params.saturating_mul(4).saturating_add(state);
        if let Some(free) = crate::model_arg::free_memory() {
            if need > free {
                bail!(
                    "the reference engine would hold {:.1} GB ({} parameters as f32 and the caches of ctx {ctx}), more than the {:.1} GB this machine has free",
                    need as f64 / 1e9,
                    params,
                    free as f64 / 1e9
                );
            }
        }
    }
    if let Some(tp) = args.tp {
        if args.engine != Engine::Spatial || run_cut != RunCut::Decode {
            bail!("--tp runs the spatial engine's decode cut; drop --engine reference / --cut forward");
        }
        if args.bundle.is_none() {
            rdu_compiler::fit::admits_tp(&spec, tp, &storage)?;
        }
    }
    let vocab = spec.vocab;
    let seeded = SeededWeights { seed: args.seed, unit_offset: spec.head.norm_unit_offset };
    let (reference_weights, host_weights): (&dyn WeightSource, WeightsSource) = match &weights {
        Weights::Hf(w) => (w.as_ref(), WeightsSource::Hf(PathBuf::from(&args.model))),
        Weights::Gguf(w) => (w.as_ref(), WeightsSource::Gguf(PathBuf::from(&args.model))),
        Weights::None => (&seeded, WeightsSource::Seeded { seed: args.seed, unit_offset: spec.head.norm_unit_offset }),
    };
    let mut reference = Reference::new(&spec, storage.clone(), reference_weights);
    let mut prefill: Option<(usize, StepFn<'_>)> = None;
    // A text prompt is prefilled in chunks by default (spatial decode, nothing that needs every
    // prompt row's logits or a bundle of its own).
    let chunk = chunk_arg.or_else(|| {
        let default = args.prompt.is_some()
            && args.engine == Engine::Spatial
            && run_cut == RunCut::Decode
            && args.bundle.is_none()
            && args.tp.is_none()
            && args.logits.is_none()
            && prompt_ids.len() > 1;
        default.then(|| auto_chunk(prompt_ids.len()))
    });
    let clocks = std::rc::Rc::new(Clocks::default());
    if let Some(chunk) = chunk_arg {
        if chunk == 0 {
            bail!("--chunk must be at least 1");
        }
        if args.engine != Engine::Spatial || run_cut != RunCut::Decode {
            bail!("--chunk prefills through the spatial engine's decode cut: drop --engine reference / --cut forward");
        }
    }
    let mut step: StepFn<'_> = match (args.engine, run_cut) {
        (Engine::Reference, RunCut::Forward) => Box::new(|toks: &[u32], _pos: usize| {
            let out = reference.forward(toks).map_err(|e| anyhow!(e))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        }),
        (Engine::Reference, RunCut::Decode) => {
            let mut decoder = reference.decoder(ctx).map_err(|e| anyhow!(e))?;
            Box::new(move |toks: &[u32], pos: usize| {
                let out = decoder.step(toks[0], pos).map_err(|e| anyhow!(e))?;
                Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
            })
        }
        (Engine::Spatial, _) if chunk.is_some() => {
            let chunk = chunk.unwrap_or(1);
            let (chunked, decode) = chunked_engine(args, &spec, storage, ctx, chunk, host_weights, &clocks)?;
            prefill = Some((chunk, chunked));
            decode
        }
        (Engine::Spatial, cut) => spatial_engine(args, &spec, storage, cut, ctx, host_weights, clocks.clone())?,
    };
    let mut logits: Vec<Vec<f32>> = Vec::new();
    // Every row is kept for --logits; otherwise only the last (the one sampled from).
    let keep_all = args.logits.is_some();
    let keep = |logits: &mut Vec<Vec<f32>>, row: Vec<f32>| {
        if !keep_all {
            logits.clear();
        }
        logits.push(row);
    };
    let mut positions = Vec::new();
    let mut generated = Vec::new();
    let mut seq = prompt_ids.clone();
    let started = std::time::Instant::now();
    // Loading and lowering done inside steps (the forward cut) is not prompt or decode time.
    let engine_at_start = clocks.total();
    let mut prompt_seconds = 0f64;
    let mut engine_in_prompt = 0f64;
    let mut choose = |row: &[f32], generated: &mut Vec<u32>| -> Result<bool> {
        let next = sampler.sample(row).map_err(|e| anyhow!("{e}"))?;
        if eos.contains(&next) {
            return Ok(false);
        }
        generated.push(next);
        if streaming {
            use std::io::Write;
            print!("{}", stream.push(tokenizer.as_ref().expect("streaming has a tokenizer"), next));
            let _ = std::io::stdout().flush();
        }
        Ok(true)
    };
    match run_cut {
        RunCut::Forward => loop {
            let all = step(&seq, 0)?;
            let first_new = if logits.is_empty() { 0 } else { seq.len() - 1 };
            for (p, row) in all.into_iter().enumerate().skip(first_new) {
                positions.push(p);
                keep(&mut logits, row);
            }
            if prompt_seconds == 0.0 {
                (prompt_seconds, engine_in_prompt) =
                    (started.elapsed().as_secs_f64(), clocks.total() - engine_at_start);
            }
            if generated.len() == args.n || !choose(logits.last().expect("a row"), &mut generated)? {
                break;
            }
            if generated.len() == args.n {
                break;
            }
            seq.push(*generated.last().expect("just generated"));
        },
        RunCut::Decode => {
            let mut pos = 0;
            if let Some((chunk, prefill)) = prefill.as_mut() {
                // Whole chunks of the prompt: one logits row each, the chunk's last.
                while pos + *chunk <= prompt_ids.len() {
                    let row = prefill(&seq[pos..pos + *chunk], pos)?.remove(0);
                    pos += *chunk;
                    positions.push(pos - 1);
                    keep(&mut logits, row);
                }
                if pos > 0 && pos == prompt_ids.len() {
                    (prompt_seconds, engine_in_prompt) =
                        (started.elapsed().as_secs_f64(), clocks.total() - engine_at_start);
                    if generated.len() < args.n
                        && choose(logits.last().expect("a row"), &mut generated)?
                        && generated.len() < args.n
                    {
                        seq.push(*generated.last().expect("just generated"));
                    }
                }
            }
            while pos < seq.len() {
                let row = step(&seq[pos..pos + 1], pos)?.remove(0);
                positions.push(pos);
                keep(&mut logits, row);
                pos += 1;
                if pos == prompt_ids.len() {
                    (prompt_seconds, engine_in_prompt) =
                        (started.elapsed().as_secs_f64(), clocks.total() - engine_at_start);
                }
                if pos == seq.len()
                    && generated.len() < args.n
                    && choose(logits.last().expect("a row"), &mut generated)?
                    && generated.len() < args.n
                {
                    seq.push(*generated.last().expect("just generated"));
                }
            }
        }
    }
    if let Some(path) = &args.logits {
        write_npy(path, &logits, vocab).with_context(|| format!("writing {}", path.display()))?;
    }
    let engine_in_decode = clocks.total() - engine_at_start - engine_in_prompt;
    let decode_seconds = (started.elapsed().as_secs_f64() - prompt_seconds - engine_in_decode).max(0.0);
    let prompt_seconds = (prompt_seconds - engine_in_prompt).max(0.0);
    // Every generated token but the last is fed back through the model: those are the decode steps.
    let decode_steps = generated.len().saturating_sub(1);
    let rate = |n: usize, s: f64| if n == 0 { 0.0 } else { n as f64 / s.max(1e-9) };
    if args.json {
        let timing = json!({
            "load_s": clocks.load.get(),
            "lower_s": clocks.lower.get(),
            "prompt_tokens": prompt_ids.len(),
            "prompt_s": prompt_seconds,
            "prompt_tok_s": rate(prompt_ids.len(), prompt_seconds),
            "decode_tokens": decode_steps,
            "decode_s": decode_seconds,
            "decode_tok_s": rate(decode_steps, decode_seconds),
        });
        println!("{}", json!({"prompt": prompt_ids, "generated": generated, "positions": positions, "timing": timing}));
    } else if streaming {
        println!("{}", stream.finish());
        // With `--bundle` (and its decode bundle) nothing was lowered: no lowering time to report.
        let lowering = if clocks.lower.get() > 0.0 || args.bundle.is_none() {
            format!("lowering: {:.2}s; ", clocks.lower.get())
        } else {
            String::new()
        };
        eprintln!(
            "load: {:.2}s; {lowering}prompt: {} tokens in {:.2}s ({:.1} tok/s); decode: {} tokens, {decode_steps} steps in {:.2}s ({:.1} tok/s)",
            clocks.load.get(),
            prompt_ids.len(),
            prompt_seconds,
            rate(prompt_ids.len(), prompt_seconds),
            generated.len(),
            decode_seconds,
            rate(decode_steps, decode_seconds)
        );
    } else {
        println!("prompt:    {prompt_ids:?}");
        println!("generated: {generated:?}");
    }
    Ok(())
}

/// The model's tokenizer, when it has one: a GGUF file's, or `tokenizer.json` in a HF directory.
fn tokenizer_of(model: &str) -> Result<Option<rdu_host::Tokenizer>> {
    let path = std::path::Path::new(model);
    if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let gguf = rdu_checkpoint::Gguf::open(path)?;
        if gguf.get("tokenizer.ggml.model").is_none() {
            // Weights only: --tokens works, --prompt is refused below.
            return Ok(None);
        }
        return Ok(Some(rdu_host::Tokenizer::from_gguf(&gguf).map_err(|e| anyhow!("{e}"))?));
    }
    let json = path.join("tokenizer.json");
    if path.is_dir() && json.exists() {
        return Ok(Some(rdu_host::Tokenizer::from_tokenizer_json(&json).map_err(|e| anyhow!("{e}"))?));
    }
    Ok(None)
}

/// The ids that end generation, read off the model's tokenizer files without building the
/// tokenizer (empty when there is none). A GGUF file whose tokenizer rdu cannot build still
/// runs on ids; one line on stderr says that text output is unavailable.
fn end_ids_of(model: &str) -> Result<Vec<u32>> {
    let path = std::path::Path::new(model);
    if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let gguf = rdu_checkpoint::Gguf::open(path)?;
        if gguf.get("tokenizer.ggml.model").is_none() {
            return Ok(Vec::new());
        }
        if let Err(e) = rdu_host::Tokenizer::check_gguf(&gguf) {
            eprintln!("note: {e}; running on token ids, text output is unavailable");
        }
        return rdu_host::Tokenizer::gguf_end_ids(&gguf).map_err(|e| anyhow!("{e}"));
    }
    let json = path.join("tokenizer.json");
    if path.is_dir() && json.exists() {
        return rdu_host::Tokenizer::tokenizer_json_end_ids(&json).map_err(|e| anyhow!("{e}"));
    }
    Ok(Vec::new())
}

/// The spatial engine: a bundle (given, or lowered now into a temporary directory and read
/// back), run by the host.
fn spatial_engine<'a>(
    args: &'a RunArgs,
    spec: &'a ModelSpec,
    storage: Storage,
    cut: RunCut,
    ctx: usize,
    weights: WeightsSource,
    clocks: std::rc::Rc<Clocks>,
) -> Result<StepFn<'a>> {
    let vocab = spec.vocab;
    let json = args.json;
    let load_clocks = clocks.clone();
    let given = args.bundle.is_some();
    let load = move |dir: &std::path::Path, weights: &WeightsSource| -> Result<Host> {
        let bar = load_bar(json);
        let host = Clocks::time(&load_clocks.load, || {
            Host::load(dir, weights, &mut |done, total, name| {
                bar.set_length(total as u64);
                bar.set_position(done as u64);
                bar.set_message(name.to_string());
            })
        });
        bar.finish_and_clear();
        host.map_err(|e| crate::bundle_arg::load_error(e, given))
    };
    if let Some(dir) = &args.bundle {
        let mut host = load(dir, &weights)?;
        if cut == RunCut::Forward {
            // A forward bundle steps exactly its `seq` tokens. Its layers are causal (a row
            // reads only the rows before it), so the prompt padded with token 0 gives the
            // prompt's own rows exactly; the padding's rows are dropped.
            let seq = host.rows();
            return Ok(Box::new(move |toks: &[u32], _pos: usize| {
                let mut padded = toks.to_vec();
                padded.resize(seq, 0);
                let out = host.step(&padded, 0).map_err(|e| anyhow!("{e}"))?;
                let mut all = rows(out.logits.as_f32().unwrap_or_default(), vocab);
                all.truncate(toks.len());
                Ok(all)
            }));
        }
        return Ok(Box::new(move |toks: &[u32], pos: usize| {
            let out = host.step(toks, pos).map_err(|e| anyhow!("{e}"))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        }));
    }
    let chip = Chip::resolve(args.chip())?;
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let lower_into = move |dir: &std::path::Path, seq: Option<usize>| -> Result<()> {
        Clocks::time(&clocks.lower, || {
            let bar = crate::progress::lowering_bar(args.json);
            let progress = &mut |p: Progress<'_>| crate::progress::show(&bar, &p);
            let opts = LowerOptions { chip: chip.clone(), storage: storage.clone(), seed: 0, progress };
            let model = match (seq, args.tp) {
                (Some(seq), _) => lower_forward_streamed(spec, seq, opts),
                (None, Some(tp)) => lower_tp_decode_streamed(spec, tp, ctx, opts),
                (None, None) => lower_decode_streamed(spec, ctx, opts),
            }
            .map_err(|e| anyhow!("{e}"))?;
            model.bundle().map_err(|e| anyhow!(e))?.write(dir, true)?;
            Ok(())
        })
    };
    match cut {
        RunCut::Decode => {
            let dir = tmp.path().join("decode");
            lower_into(&dir, None)?;
            let mut host = load(&dir, &weights)?;
            Ok(Box::new(move |toks: &[u32], pos: usize| {
                let _keep = &tmp;
                let out = host.step(toks, pos).map_err(|e| anyhow!("{e}"))?;
                Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
            }))
        }
        RunCut::Forward => Ok(Box::new(move |toks: &[u32], _pos: usize| {
            // A forward bundle serves one sequence length: lower one per length.
            let dir = tmp.path().join(format!("forward-{}", toks.len()));
            lower_into(&dir, Some(toks.len()))?;
            let out = load(&dir, &weights)?.step(toks, 0).map_err(|e| anyhow!("{e}"))?;
            Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
        })),
    }
}

/// A bar over the checkpoint tensors the host loads (read, dequantised or quantised, checked):
/// drawn on stderr only when it is a terminal, never with `--json`.
fn load_bar(json: bool) -> ProgressBar {
    let bar = if json { ProgressBar::hidden() } else { ProgressBar::new(0) };
    let style = ProgressStyle::with_template("{bar:30} loading weights {pos}/{len} tensors {msg} [{elapsed}]");
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar
}

/// The spatial engine with chunked prefill: a prefill bundle of `chunk` rows and a decode
/// bundle, both over `ctx` positions, lowered now and run by one `rdu_host::Session` (the
/// hosts share the weights and hand the sequence's states to each other). Returns the chunk
/// step (the logits of the chunk's last row) and the one-token step.
fn chunked_engine<'a>(
    args: &'a RunArgs,
    spec: &'a ModelSpec,
    storage: Storage,
    ctx: usize,
    chunk: usize,
    weights: WeightsSource,
    clocks: &Clocks,
) -> Result<(StepFn<'a>, StepFn<'a>)> {
    use std::cell::RefCell;
    use std::rc::Rc;
    let vocab = spec.vocab;
    // A given prefill bundle's chip; the decode bundle it continues into is lowered for it.
    let chip = match &args.bundle {
        Some(dir) => Chip::resolve(&crate::bundle_arg::manifest(dir)?.chip)?,
        None => Chip::resolve(args.chip())?,
    };
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let prefill_dir = match &args.bundle {
        Some(dir) => dir.clone(),
        None => {
            let dir = tmp.path().join("prefill");
            Clocks::time(&clocks.lower, || -> Result<()> {
                let bar = crate::progress::lowering_bar(args.json);
                let progress = &mut |p: Progress<'_>| crate::progress::show(&bar, &p);
                let opts = LowerOptions { chip: chip.clone(), storage: storage.clone(), seed: 0, progress };
                let model = lower_prefill_streamed(spec, chunk, ctx, opts).map_err(|e| anyhow!("{e}"))?;
                model.bundle().map_err(|e| anyhow!(e))?.write(&dir, true)?;
                Ok(())
            })?;
            dir
        }
    };
    let decode_dir = match &args.decode_bundle {
        Some(dir) => {
            let m = crate::bundle_arg::manifest(dir)?;
            if m.cut.mode != rdu_spatial::manifest::CutMode::Decode || m.model != spec.name || m.cut.ctx != Some(ctx) {
                bail!(
                    "--decode-bundle {} must be a decode bundle of `{}` for ctx {ctx}, but it is a {} bundle of `{}` for ctx {}",
                    dir.display(),
                    spec.name,
                    crate::bundle_arg::mode_word(m.cut.mode),
                    m.model,
                    m.cut.ctx.map_or("-".to_string(), |c| c.to_string())
                );
            }
            dir.clone()
        }
        None => {
            let dir = tmp.path().join("decode");
            Clocks::time(&clocks.lower, || -> Result<()> {
                let bar = crate::progress::lowering_bar(args.json);
                let progress = &mut |p: Progress<'_>| crate::progress::show(&bar, &p);
                let opts = LowerOptions { chip, storage, seed: 0, progress };
                let model = lower_decode_streamed(spec, ctx, opts).map_err(|e| anyhow!("{e}"))?;
                model.bundle().map_err(|e| anyhow!(e))?.write(&dir, true)?;
                Ok(())
            })?;
            dir
        }
    };
    let (prefill, decode) = Clocks::time(&clocks.load, || -> Result<(Host, Host)> {
        let load_error = |e| crate::bundle_arg::load_error(e, args.bundle.is_some());
        let prefill = Host::load(&prefill_dir, &weights, &mut |_, _, _| {}).map_err(load_error)?;
        let decode = Host::load_sharing(&decode_dir, &prefill, &weights, &mut |_, _, _| {}).map_err(load_error)?;
        Ok((prefill, decode))
    })?;
    drop(tmp);
    let session = Rc::new(RefCell::new(Session::new(prefill, decode).map_err(|e| anyhow!("{e}"))?));
    let chunks = Rc::clone(&session);
    let prefill_step: StepFn<'a> = Box::new(move |toks: &[u32], pos: usize| {
        let out = chunks.borrow_mut().prefill(toks, pos).map_err(|e| anyhow!("{e}"))?;
        Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
    });
    let decode_step: StepFn<'a> = Box::new(move |toks: &[u32], pos: usize| {
        let out = session.borrow_mut().decode(toks[0], pos).map_err(|e| anyhow!("{e}"))?;
        Ok(rows(out.logits.as_f32().unwrap_or_default(), vocab))
    });
    Ok((prefill_step, decode_step))
}

/// Refuses an output path that cannot be written (a missing or read-only folder, a directory)
/// before any work, by creating and removing a temporary file beside it.
pub(crate) fn check_writable(path: &std::path::Path) -> Result<()> {
    if path.is_dir() {
        bail!("cannot write {}: it is a directory", path.display());
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => std::path::Path::new("."),
    };
    if !parent.is_dir() {
        bail!("cannot write {}: the folder {} does not exist", path.display(), parent.display());
    }
    tempfile::NamedTempFile::new_in(parent)
        .map(drop)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), crate::model_arg::io_words(&e)))
}

pub(crate) fn rows(flat: &[f32], vocab: usize) -> Vec<Vec<f32>> {
    flat.chunks(vocab).map(<[f32]>::to_vec).collect()
}

/// float32 `[rows, vocab]`, C order.
pub(crate) fn write_npy(path: &std::path::Path, rows: &[Vec<f32>], vocab: usize) -> Result<()> {
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
