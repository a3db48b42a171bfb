//! `rdu run`: generate tokens with the spatial engine (a bundle run by the host through the
//! simulator) or the reference engine (each layer's program through the reference
//! interpreter), writing logits rows and a JSON summary on request. This module checks the
//! arguments, builds the engine (`run_engine`), generates with `rdu_host::generate` and prints.

mod spec;

use crate::bundle_arg::run_state;
use crate::model_arg::{resolve_with_weights, storage_of, with_state, Weights, MAX_SIZE};
use crate::run_args::{check_writable, host_weights, write_npy, Engine, RunArgs, RunCut};
use crate::run_engine::{engine, Clocks, Setup};
use anyhow::{anyhow, bail, Context, Result};
use rdu_compiler::deploy::Storage;
use rdu_compiler::model::spec::ModelSpec;
use rdu_compiler::reference::{Reference, SeededWeights, WeightSource};
use rdu_host::{generate, Generate, Generated, Observer, Sampler, Sampling, StreamDecoder, Tokenizer};
use rdu_spatial::manifest::{Cut as LoweredCut, CutMode};
use serde_json::json;
use std::io::Write;
use std::rc::Rc;
use std::time::Instant;

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
    if let Some(path) = &args.logits {
        check_writable(path)?;
    }
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, run_state(args)?);
    if let Some(draft) = &args.draft {
        return spec::run(args, &spec, &weights, draft);
    }
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
    let cut = match lowered.map(|c| c.mode) {
        Some(CutMode::Forward) => RunCut::Forward,
        Some(_) => RunCut::Decode,
        None => args.cut.unwrap_or(RunCut::Decode),
    };
    let (tokenizer, prompt) = prompt_of(args, &spec)?;
    // Refused before anything is lowered or loaded.
    Sampler::new(sampling(args)).map_err(|e| anyhow!("{e}"))?;
    let stop = match &tokenizer {
        Some(t) => t.eos(),
        None => end_ids_of(&args.model)?,
    };
    let ctx = context(args, lowered, cut, prompt.len())?;
    let storage = storage_of(args.storage, &spec, &weights);
    check_engine(args, &spec, &storage, cut, ctx)?;
    let seeded = SeededWeights { seed: args.seed, unit_offset: spec.head.norm_unit_offset };
    let reference_weights: &dyn WeightSource = match &weights {
        Weights::Hf(w) => w.as_ref(),
        Weights::Gguf(w) => w.as_ref(),
        Weights::None => &seeded,
    };
    let mut reference = Reference::new(&spec, storage.clone(), reference_weights);
    let chunk = chunk_of(args, lowered, cut, prompt.len())?;
    let clocks = Rc::new(Clocks::default());
    let weights = host_weights(args, &spec, &weights);
    let setup = Setup { args, spec: &spec, storage, cut, ctx, chunk, weights, clocks: clocks.clone() };
    let mut engine = engine(setup, &mut reference)?;
    let streaming = args.prompt.is_some() && !args.json;
    let mut watch = Watch::new(&clocks, if streaming { tokenizer.as_ref() } else { None });
    let how = Generate { n: args.n, stop, sampling: sampling(args), keep_all: args.logits.is_some() };
    let out = generate(&mut engine, vec![prompt], &how, &mut watch)?.remove(0);
    if let Some(path) = &args.logits {
        write_npy(path, &out.logits, spec.vocab).with_context(|| format!("writing {}", path.display()))?;
    }
    print(args, &out, &mut watch, None);
    Ok(())
}

fn sampling(args: &RunArgs) -> Sampling {
    Sampling { temperature: args.temp, top_k: args.top_k, top_p: args.top_p, seed: args.seed }
}

/// The prompt's ids (`--prompt` tokenized, or `--tokens`), checked against the vocabulary, and
/// the tokenizer when text must be tokenized (a `--tokens` run runs on ids).
fn prompt_of(args: &RunArgs, spec: &ModelSpec) -> Result<(Option<Tokenizer>, Vec<u32>)> {
    let tokenizer = if args.prompt.is_some() { tokenizer_of(&args.model)? } else { None };
    let ids: Vec<u32> = match (&args.prompt, &tokenizer) {
        (Some(text), Some(tok)) => tok.encode(text, tok.add_bos_default()).map_err(|e| anyhow!("{e}"))?,
        (Some(_), None) => bail!(
            "--prompt needs a tokenizer (a GGUF file, or tokenizer.json in a HF directory); give --tokens instead"
        ),
        (None, _) => args.tokens.clone(),
    };
    if ids.is_empty() {
        bail!("the prompt has no tokens");
    }
    if let Some(&bad) = ids.iter().find(|&&t| t as usize >= spec.vocab) {
        bail!("token id {bad} is out of range: {} has a vocabulary of {} tokens", spec.name, spec.vocab);
    }
    Ok((tokenizer, ids))
}

/// The positions the run holds: `--ctx`, the bundle's, or the prompt plus `-n`; refused when
/// the prompt and `-n` do not fit in it (or in a forward bundle's `seq`).
fn context(args: &RunArgs, lowered: Option<&LoweredCut>, cut: RunCut, prompt: usize) -> Result<usize> {
    let total = prompt.saturating_add(args.n);
    let ctx = args.ctx.or(lowered.and_then(|c| c.ctx)).unwrap_or(total);
    if ctx == 0 {
        bail!("--ctx must be at least 1");
    }
    if cut == RunCut::Decode && total > ctx {
        let whose = if args.ctx.is_none() && lowered.is_some() { "the bundle's ctx" } else { "--ctx" };
        bail!("prompt ({prompt}) plus -n {} needs {total} positions but {whose} is {ctx}", args.n);
    }
    if let Some(seq) = lowered.and_then(|c| c.seq) {
        if total > seq {
            bail!(
                "prompt ({prompt}) plus -n {} needs {total} positions but the forward bundle steps {seq} tokens",
                args.n
            );
        }
    }
    if args.ctx.is_none() && ctx > MAX_SIZE {
        bail!("-n {} is too large: the prompt plus -n may hold at most {MAX_SIZE} positions (2^32)", args.n);
    }
    crate::model_arg::check_size("--ctx", ctx)?;
    Ok(ctx)
}

/// Refuses a reference engine this machine cannot hold, and `--tp` outside the spatial decode
/// cut or on a model that does not admit it.
fn check_engine(args: &RunArgs, spec: &ModelSpec, storage: &Storage, cut: RunCut, ctx: usize) -> Result<()> {
    if args.engine == Engine::Reference {
        // The reference engine holds every weight and the whole cache as f32: refuse what
        // this machine cannot hold before allocating it.
        let (params, state) = rdu_compiler::fit::decode_demand(spec, ctx, storage)?;
        let need = params.saturating_mul(4).saturating_add(state);
        if let Some(free) = rdu_compiler::deploy::free_memory() {
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
        if args.engine != Engine::Spatial || cut != RunCut::Decode {
            bail!("--tp runs the spatial engine's decode cut; drop --engine reference / --cut forward");
        }
        if args.bundle.is_none() {
            rdu_compiler::fit::admits_tp(spec, tp, storage)?;
        }
    }
    Ok(())
}

/// The prefill chunk: `--chunk` or the bundle's; by default, a text prompt is prefilled in
/// chunks (spatial decode, nothing that needs every prompt row's logits or a bundle of its own).
fn chunk_of(args: &RunArgs, lowered: Option<&LoweredCut>, cut: RunCut, prompt: usize) -> Result<Option<usize>> {
    let given = args.chunk.or(lowered.and_then(|c| c.chunk));
    if let Some(chunk) = given {
        if chunk == 0 {
            bail!("--chunk must be at least 1");
        }
        if args.engine != Engine::Spatial || cut != RunCut::Decode {
            bail!("--chunk prefills through the spatial engine's decode cut: drop --engine reference / --cut forward");
        }
        return Ok(Some(chunk));
    }
    let default = args.prompt.is_some()
        && args.engine == Engine::Spatial
        && cut == RunCut::Decode
        && args.bundle.is_none()
        && args.tp.is_none()
        && args.logits.is_none()
        && prompt > 1;
    Ok(default.then(|| auto_chunk(prompt)))
}

/// What `rdu run` watches while it generates: the text as it streams (with `--prompt`, unless
/// `--json`), and when the prompt was done, so that prompt and decode rates can be told apart
/// (loading and lowering done inside steps, as the forward cut does, is neither).
struct Watch<'t> {
    clocks: Rc<Clocks>,
    started: Instant,
    engine_at_start: f64,
    /// Seconds to the end of the prompt, and the loading and lowering among them.
    prompt: (f64, f64),
    /// Tokens generated when the prompt was done (a speculative run's first step makes some).
    tokens: usize,
    at_prompt: usize,
    stream: Option<(&'t Tokenizer, StreamDecoder)>,
}

impl<'t> Watch<'t> {
    fn new(clocks: &Rc<Clocks>, tokenizer: Option<&'t Tokenizer>) -> Watch<'t> {
        Watch {
            clocks: clocks.clone(),
            started: Instant::now(),
            engine_at_start: clocks.total(),
            prompt: (0.0, 0.0),
            tokens: 0,
            at_prompt: 0,
            stream: tokenizer.map(|t| (t, StreamDecoder::new())),
        }
    }
}

impl Observer for Watch<'_> {
    fn prompt_done(&mut self, _seq: usize) {
        self.prompt = (self.started.elapsed().as_secs_f64(), self.clocks.total() - self.engine_at_start);
        self.at_prompt = self.tokens;
    }

    fn token(&mut self, _seq: usize, token: u32) {
        self.tokens += 1;
        if let Some((tokenizer, stream)) = &mut self.stream {
            print!("{}", stream.push(tokenizer, token));
            let _ = std::io::stdout().flush();
        }
    }
}

/// This process's peak resident set (`VmHWM` of `/proc/self/status`): the run's own, unlike a
/// parent's `wait4`, which also counts the parent's pages the child held before its `exec`.
/// `None` where `/proc` is not there.
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let kib: u64 =
        status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?.trim().strip_suffix("kB")?.trim().parse().ok()?;
    Some(kib * 1024)
}

/// Prints the run: one JSON object (`--json`, with `speculation` beside `timing` for a
/// speculative run), the streamed text's end and the rates on stderr (`--prompt`), or the
/// prompt and generated ids.
fn print(args: &RunArgs, out: &Generated, watch: &mut Watch<'_>, speculation: Option<serde_json::Value>) {
    let clocks = &watch.clocks;
    let (prompt_seconds, engine_in_prompt) = watch.prompt;
    let engine_in_decode = clocks.total() - watch.engine_at_start - engine_in_prompt;
    let decode_seconds = (watch.started.elapsed().as_secs_f64() - prompt_seconds - engine_in_decode).max(0.0);
    let prompt_seconds = (prompt_seconds - engine_in_prompt).max(0.0);
    // Every generated token but the last is fed back through the model: those are the decode
    // steps. A speculative run's first step makes its first tokens beside the prompt's last rows;
    // the tokens of the steps after it are the decode's.
    let decode_steps = out.generated.len().saturating_sub(watch.at_prompt.max(1));
    let rate = |n: usize, s: f64| if n == 0 { 0.0 } else { n as f64 / s.max(1e-9) };
    let prompt = out.prompt.len();
    if args.json {
        let timing = json!({
            "load_s": clocks.load.get(),
            "lower_s": clocks.lower.get(),
            "prompt_tokens": prompt,
            "prompt_s": prompt_seconds,
            "prompt_tok_s": rate(prompt, prompt_seconds),
            "decode_tokens": decode_steps,
            "decode_s": decode_seconds,
            "decode_tok_s": rate(decode_steps, decode_seconds),
            "peak_rss_bytes": peak_rss_bytes(),
        });
        let (ids, generated, positions) = (&out.prompt, &out.generated, &out.positions);
        let mut all = json!({"prompt": ids, "generated": generated, "positions": positions, "timing": timing});
        if let Some(s) = speculation {
            all["speculation"] = s;
        }
        println!("{all}");
    } else if let Some((_, stream)) = &mut watch.stream {
        println!("{}", stream.finish());
        // With `--bundle` (and its decode bundle) nothing was lowered: no lowering time to report.
        let lowering = if clocks.lower.get() > 0.0 || args.bundle.is_none() {
            format!("lowering: {:.2}s; ", clocks.lower.get())
        } else {
            String::new()
        };
        eprintln!(
            "load: {:.2}s; {lowering}prompt: {prompt} tokens in {:.2}s ({:.1} tok/s); decode: {} tokens, {decode_steps} steps in {:.2}s ({:.1} tok/s)",
            clocks.load.get(),
            prompt_seconds,
            rate(prompt, prompt_seconds),
            out.generated.len(),
            decode_seconds,
            rate(decode_steps, decode_seconds)
        );
        if let Some(s) = speculation {
            eprintln!("{}", speculation_line(&s));
        }
    } else {
        println!("prompt:    {:?}", out.prompt);
        println!("generated: {:?}", out.generated);
        if let Some(s) = speculation {
            println!("{}", speculation_line(&s));
        }
    }
}

/// What speculation did, in words: the draft, its tokens a step, and how many it got accepted.
fn speculation_line(s: &serde_json::Value) -> String {
    let (drafted, accepted) = (s["drafted"].as_u64().unwrap_or(0), s["accepted"].as_u64().unwrap_or(0));
    let share = if drafted > 0 { 100.0 * accepted as f64 / drafted as f64 } else { 0.0 };
    format!(
        "speculation: draft {}, {} tokens a step: {} verify steps, {drafted} tokens drafted, {accepted} accepted ({share:.0}%)",
        s["draft"].as_str().unwrap_or("?"),
        s["draft_tokens"],
        s["steps"]
    )
}

/// The model's tokenizer, when it has one: a GGUF file's, or `tokenizer.json` in a HF directory.
pub(crate) fn tokenizer_of(model: &str) -> Result<Option<Tokenizer>> {
    let path = std::path::Path::new(model);
    if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let gguf = rdu_checkpoint::Gguf::open(path)?;
        if gguf.get("tokenizer.ggml.model").is_none() {
            // Weights only: --tokens works, --prompt is refused below.
            return Ok(None);
        }
        return Ok(Some(Tokenizer::from_gguf(&gguf).map_err(|e| anyhow!("{e}"))?));
    }
    let json = path.join("tokenizer.json");
    if path.is_dir() && json.exists() {
        return Ok(Some(Tokenizer::from_tokenizer_json(&json).map_err(|e| anyhow!("{e}"))?));
    }
    Ok(None)
}

/// The ids that end generation, read off the model's tokenizer files without building the
/// tokenizer (empty when there is none). A GGUF file whose tokenizer rdu cannot build still
/// runs on ids; one line on stderr says that text output is unavailable.
pub(crate) fn end_ids_of(model: &str) -> Result<Vec<u32>> {
    let path = std::path::Path::new(model);
    if path.is_file() && path.extension().is_some_and(|e| e.eq_ignore_ascii_case("gguf")) {
        let gguf = rdu_checkpoint::Gguf::open(path)?;
        if gguf.get("tokenizer.ggml.model").is_none() {
            return Ok(Vec::new());
        }
        if let Err(e) = Tokenizer::check_gguf(&gguf) {
            eprintln!("note: {e}; running on token ids, text output is unavailable");
        }
        return Tokenizer::gguf_end_ids(&gguf).map_err(|e| anyhow!("{e}"));
    }
    let json = path.join("tokenizer.json");
    if path.is_dir() && json.exists() {
        return Tokenizer::tokenizer_json_end_ids(&json).map_err(|e| anyhow!("{e}"));
    }
    Ok(Vec::new())
}
