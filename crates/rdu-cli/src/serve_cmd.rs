//! `rdu serve MODEL|BUNDLE`: lowers (or loads) a batched bundle and a prefill bundle of the
//! model, loads them on the host with the checkpoint's weights, tokenizer and chat template, and
//! serves the OpenAI API over the continuous-batching scheduler (`rdu_serve`).

use crate::model_arg::{resolve_with_weights, storage_of, with_state, StateArg, StorageArg};
use crate::run_args::{host_weights_of, lower_into};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_host::schedule::HostEngine;
use rdu_host::{Host, Tokenizer, WeightsSource};
use rdu_serve::{ChatTemplate, Model, Options};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::CutMode;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

#[derive(Args)]
#[command(after_long_help = "Example:\n  rdu serve gemma-3-270m-q8_0.gguf --batch 16 --port 8080\n  \
    curl http://127.0.0.1:8080/v1/completions -d '{\"prompt\": \"The capital of France is\", \"max_tokens\": 8}'\n\n\
    Endpoints: POST /v1/completions, POST /v1/chat/completions (stream or not), GET /v1/models, \
    GET /health, GET /metrics (Prometheus). SIGTERM or Ctrl-C finishes the requests in flight, then exits. \
    docs/SERVING.md says more.")]
pub struct ServeArgs {
    /// A HF model directory, a .gguf file, a preset (seeded random weights) or a config.json;
    /// or a batched bundle directory of a preset
    pub(crate) model: String,
    /// Address to listen on: loopback unless told otherwise
    #[arg(long, default_value = "127.0.0.1")]
    pub(crate) host: IpAddr,
    /// Port to listen on (0: any free port; the address is printed on stderr)
    #[arg(long, default_value_t = 8080)]
    pub(crate) port: u16,
    /// Sequences decoded together each step (the batched bundle's slots)
    #[arg(long, default_value_t = 8)]
    pub(crate) batch: usize,
    /// Positions each sequence holds: prompt plus generated tokens
    #[arg(long, default_value_t = 2048)]
    pub(crate) ctx: usize,
    /// Rows of a prefill chunk: a prompt's whole chunks run through a prefill bundle, interleaved
    /// with the other sequences' decode steps; the rest through the decode rows (0: no prefill
    /// bundle, every prompt token through the decode rows)
    #[arg(long, value_name = "C", default_value_t = 64)]
    pub(crate) chunk: usize,
    /// Tokens one step may process: one per decoding sequence, C per prefill chunk (default:
    /// --batch + --chunk, a chunk beside every decoding row; a budget of k chunks beside the rows
    /// lets k + 1 prompts be in their chunks at once)
    #[arg(long, value_name = "T")]
    pub(crate) step_tokens: Option<usize>,
    /// Requests that may wait for a slot; beyond them a request gets 429 with Retry-After
    /// (default: 4 × --batch)
    #[arg(long)]
    pub(crate) queue: Option<usize>,
    /// The model name clients use (default: the model's own name)
    #[arg(long)]
    pub(crate) name: Option<String>,
    /// A Jinja chat template file instead of the checkpoint's own
    #[arg(long, value_name = "FILE")]
    pub(crate) chat_template: Option<PathBuf>,
    /// Serve this batched bundle (from `rdu lower --cut batched`) instead of lowering one
    #[arg(long, value_name = "DIR")]
    pub(crate) bundle: Option<PathBuf>,
    /// The prefill bundle (from `rdu lower --cut prefill`, same ctx) that goes with --bundle
    #[arg(long, value_name = "DIR", requires = "bundle")]
    pub(crate) prefill_bundle: Option<PathBuf>,
    /// Target chip of the lowering: sn50 (the default), sn40l, or a chip file
    #[arg(long, default_value = "sn50")]
    pub(crate) chip: String,
    /// Which weights are stored Q8_0 (auto: as the checkpoint stores them; Q8_0 for a preset)
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) storage: StorageArg,
    /// How carried state is stored (f32 by default, as `rdu run` lowers it)
    #[arg(long, value_enum, default_value = "f32")]
    pub(crate) state: StateArg,
    /// Seed of a preset's random weights
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Time each op the host engine runs and print where the time went on stderr when the
    /// server stops: op, output shape, calls, milliseconds
    #[arg(long)]
    pub(crate) profile: bool,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let (model, bundle) = model_and_bundle(args)?;
    let (spec, weights) = resolve_with_weights(&model)?;
    let spec = with_state(spec, args.state);
    let storage = storage_of(args.storage, &spec, &weights);
    let source = host_weights_of(&model, args.seed, &spec, &weights);
    let tokenizer = crate::run_cmd::tokenizer_of(&model)?;
    let eos = match &tokenizer {
        Some(t) => t.eos(),
        None => crate::run_cmd::end_ids_of(&model)?,
    };
    let template = template_of(args, &model, tokenizer.as_ref())?;
    let engine = engine(args, &spec, storage, &source, bundle.as_deref())?;
    crate::run_engine::release_freed_memory();
    let name = args.name.clone().unwrap_or_else(|| spec.name.clone());
    let queue = args.queue.unwrap_or(4 * engine.decode_host().sequences());
    let addr = SocketAddr::new(args.host, args.port);
    let model = Model { engine, tokenizer, template, eos };
    rdu_serve::serve(model, Options { addr, name, queue, budget: args.step_tokens }).map_err(|e| anyhow!("{e}"))
}

/// MODEL and the batched bundle: `--bundle`, or MODEL itself when it is a bundle directory (of
/// a preset, whose weights are seeded: a checkpoint's bundle needs MODEL for the weights).
fn model_and_bundle(args: &ServeArgs) -> Result<(String, Option<PathBuf>)> {
    let path = Path::new(&args.model);
    if !rdu_spatial::bundle::is_bundle(path) {
        return Ok((args.model.clone(), args.bundle.clone()));
    }
    if args.bundle.is_some() {
        bail!("MODEL {} is a bundle and --bundle was given too: give the checkpoint as MODEL", path.display());
    }
    let m = crate::bundle_arg::manifest(path)?;
    if rdu_compiler::model::presets::resolve(&m.model).is_err() {
        bail!(
            "the bundle {} was lowered for `{}`, which is not a preset: give its checkpoint as MODEL and the bundle as --bundle",
            path.display(),
            m.model
        );
    }
    Ok((m.model, Some(path.to_path_buf())))
}

/// `--chat-template FILE`, or the checkpoint's own; the special tokens' texts from the
/// checkpoint (or the tokenizer's BOS/EOS pieces).
fn template_of(args: &ServeArgs, model: &str, tokenizer: Option<&Tokenizer>) -> Result<Option<ChatTemplate>> {
    let own = ChatTemplate::of_checkpoint(Path::new(model)).map_err(|e| anyhow!("{model}: {e}"))?;
    let Some(file) = &args.chat_template else { return Ok(own) };
    let source =
        std::fs::read_to_string(file).with_context(|| format!("reading --chat-template {}", file.display()))?;
    let piece =
        |id: Option<u32>| id.map(|i| tokenizer.map(|t| t.decode_piece(i)).unwrap_or_default()).unwrap_or_default();
    let (bos_token, eos_token) = match own {
        Some(t) => (t.bos_token, t.eos_token),
        None => (piece(tokenizer.and_then(Tokenizer::bos)), piece(tokenizer.and_then(|t| t.eos().first().copied()))),
    };
    let template = ChatTemplate { source, bos_token, eos_token };
    template.check().map_err(|e| anyhow!("--chat-template {}: {e}", file.display()))?;
    Ok(Some(template))
}

/// The host engine: the batched bundle (`--bundle`, or lowered now for `--batch` and `--ctx`),
/// the prefill bundle (`--prefill-bundle`, or lowered now for `--chunk` over the same ctx), and
/// beside a lowered batched bundle smaller ones (1, 2, 4, ... sequences) for steps with fewer
/// live rows.
fn engine(
    args: &ServeArgs,
    spec: &ModelSpec,
    storage: rdu_compiler::deploy::Storage,
    source: &WeightsSource,
    bundle: Option<&Path>,
) -> Result<HostEngine> {
    for (flag, v) in [("--batch", args.batch), ("--ctx", args.ctx)] {
        if v == 0 {
            bail!("{flag} must be at least 1");
        }
        crate::model_arg::check_size(flag, v)?;
    }
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let chip = Chip::resolve(&args.chip)?;
    let (batched, ctx) = match bundle {
        Some(dir) => (dir.to_path_buf(), checked_bundle(dir, spec, CutMode::Batched, None)?),
        None => {
            let dir = tmp.path().join("batched");
            eprintln!("rdu serve: lowering {} for {} sequences a step over ctx {}", spec.name, args.batch, args.ctx);
            lower_into(false, spec, &chip, &storage, Cut::Batched { batch: args.batch, ctx: args.ctx }, &dir)?;
            (dir, args.ctx)
        }
    };
    let prefill = match (&args.prefill_bundle, bundle) {
        (Some(dir), _) => {
            checked_bundle(dir, spec, CutMode::Prefill, Some(ctx))?;
            Some(dir.clone())
        }
        (None, None) if args.chunk > 0 => {
            if args.chunk > ctx {
                bail!("--chunk {} is longer than --ctx {ctx}", args.chunk);
            }
            let dir = tmp.path().join("prefill");
            lower_into(false, spec, &chip, &storage, Cut::Prefill { chunk: args.chunk, ctx }, &dir)?;
            Some(dir)
        }
        _ => None,
    };
    // Batched bundles of 1, 2, 4, ... sequences (fewer than --batch) beside a lowered batched
    // one: a step whose live sequences fit one runs there (`HostEngine::with_smaller`).
    let mut smaller = Vec::new();
    if bundle.is_none() {
        for batch in std::iter::successors(Some(1usize), |b| Some(b * 2)).take_while(|&b| b < args.batch) {
            let dir = tmp.path().join(format!("batched-{batch}"));
            lower_into(false, spec, &chip, &storage, Cut::Batched { batch, ctx }, &dir)?;
            smaller.push(dir);
        }
    }
    let load_error = |e| crate::bundle_arg::load_error(e, bundle.is_some());
    let decode = Host::load(&batched, source, &mut |_, _, _| {}).map_err(load_error)?;
    let sharing = |dir: &Path, decode: &Host| Host::load_sharing(dir, decode, source, &mut |_, _, _| {});
    let prefill = match prefill {
        Some(dir) => Some(sharing(&dir, &decode).map_err(load_error)?),
        None => None,
    };
    let smaller: Vec<Host> =
        smaller.iter().map(|dir| sharing(dir, &decode).map_err(load_error)).collect::<Result<_>>()?;
    let mut engine = HostEngine::new(decode, prefill).map_err(|e| anyhow!("{e}"))?;
    for host in smaller {
        engine = engine.with_smaller(host).map_err(|e| anyhow!("{e}"))?;
    }
    Ok(engine)
}

/// Refuses a bundle of another model or cut (or, for a prefill bundle, another ctx); its ctx.
fn checked_bundle(dir: &Path, spec: &ModelSpec, mode: CutMode, ctx: Option<usize>) -> Result<usize> {
    let m = crate::bundle_arg::manifest(dir)?;
    let word = crate::model_arg::mode_word(mode);
    if m.model != spec.name {
        bail!("the bundle {} was lowered for `{}`, but MODEL is `{}`", dir.display(), m.model, spec.name);
    }
    if m.cut.mode != mode {
        bail!(
            "the bundle {} is a {} bundle; rdu serve needs a {word} bundle here",
            dir.display(),
            crate::model_arg::mode_word(m.cut.mode)
        );
    }
    let lowered = m.cut.ctx.unwrap_or(0);
    if ctx.is_some_and(|c| c != lowered) {
        bail!("the {word} bundle {} holds ctx {lowered} but the batched bundle {}", dir.display(), ctx.unwrap_or(0));
    }
    Ok(lowered)
}
