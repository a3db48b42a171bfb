//! The engines `rdu run` generates with, each an `rdu_host::Stepper`: the reference
//! interpreter over each layer's authored program, and the spatial engine — a bundle (given,
//! or lowered now into a temporary directory) run by the host, one token a step or whole for
//! the forward cut, or a prefill bundle and a decode bundle over one sequence's states.

use crate::run_args::{lower_into, Engine, RunArgs, RunCut};
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rdu_compiler::deploy::Storage;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_compiler::reference::Reference;
use rdu_host::{Feed, Host, HostError, Session, Stepper, Stepping, WeightsSource};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::CutMode;
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// Computes the logits rows of what it is fed.
type StepFn<'a> = Box<dyn FnMut(Feed<'_>) -> Result<Vec<Vec<f32>>> + 'a>;

/// An engine of `rdu run`: how it steps, and its step (errors in one line).
pub struct RunEngine<'a> {
    stepping: Stepping,
    step: StepFn<'a>,
}

impl Stepper for RunEngine<'_> {
    type Error = anyhow::Error;

    fn stepping(&self) -> Stepping {
        self.stepping
    }

    fn logits(&mut self, feed: Feed<'_>) -> Result<Vec<Vec<f32>>> {
        (self.step)(feed)
    }
}

impl<'a> RunEngine<'a> {
    /// A host's stepper (a `Host`, a `Session`), holding `keep` (its temporary bundle
    /// directory) as long as it lives.
    fn of<S: Stepper<Error = HostError> + 'a>(mut stepper: S, keep: impl Sized + 'a) -> RunEngine<'a> {
        let stepping = stepper.stepping();
        let step = Box::new(move |feed: Feed<'_>| {
            let _keep = &keep;
            stepper.logits(feed).map_err(|e| anyhow!("{e}"))
        });
        RunEngine { stepping, step }
    }
}

/// Seconds spent loading weights and lowering, wherever the engine does it (before the first
/// step, or inside a step for the forward cut), so that prompt and decode rates exclude them.
#[derive(Default)]
pub struct Clocks {
    pub load: Cell<f64>,
    pub lower: Cell<f64>,
}

impl Clocks {
    /// Runs `f`, adding its time to `clock`.
    pub(crate) fn time<T>(clock: &Cell<f64>, f: impl FnOnce() -> T) -> T {
        let t = std::time::Instant::now();
        let out = f();
        clock.set(clock.get() + t.elapsed().as_secs_f64());
        out
    }

    pub fn total(&self) -> f64 {
        self.load.get() + self.lower.get()
    }
}

/// What every engine is built from: the run's arguments, the model and how it runs.
pub struct Setup<'a> {
    pub args: &'a RunArgs,
    pub spec: &'a ModelSpec,
    pub storage: Storage,
    pub cut: RunCut,
    pub ctx: usize,
    /// Prefill the prompt in chunks of this many tokens (the spatial decode cut).
    pub chunk: Option<usize>,
    pub weights: WeightsSource,
    pub clocks: Rc<Clocks>,
}

/// The engine `setup` asks for; the reference engine runs on `reference`.
pub fn engine<'a>(setup: Setup<'a>, reference: &'a mut Reference<'_>) -> Result<RunEngine<'a>> {
    match (setup.args.engine, setup.cut) {
        (Engine::Reference, cut) => reference_engine(reference, cut, setup.ctx, setup.spec.vocab),
        (Engine::Spatial, _) if setup.chunk.is_some() => chunked_engine(setup),
        (Engine::Spatial, _) => spatial_engine(setup),
    }
}

/// The reference interpreter: the whole sequence each step (forward), or one token at a time
/// against its own caches (decode).
fn reference_engine<'a>(
    reference: &'a mut Reference<'_>,
    cut: RunCut,
    ctx: usize,
    vocab: usize,
) -> Result<RunEngine<'a>> {
    let rows = move |flat: &[f32]| flat.chunks(vocab).map(<[f32]>::to_vec).collect();
    match cut {
        RunCut::Forward => Ok(RunEngine {
            stepping: Stepping::Forward,
            step: Box::new(move |feed| {
                let out = reference.forward(feed.tokens()).map_err(|e| anyhow!(e))?;
                Ok(rows(out.logits.as_f32().unwrap_or_default()))
            }),
        }),
        RunCut::Decode => {
            let mut decoder = reference.decoder(ctx).map_err(|e| anyhow!(e))?;
            Ok(RunEngine {
                stepping: Stepping::Decode { chunk: None },
                step: Box::new(move |feed| {
                    let out = decoder.step(feed.tokens()[0], feed.pos()).map_err(|e| anyhow!(e))?;
                    Ok(rows(out.logits.as_f32().unwrap_or_default()))
                }),
            })
        }
    }
}

/// Loads the bundle in `dir` (a bar over the tensors, timed on `clocks.load`).
fn load(dir: &Path, weights: &WeightsSource, args: &RunArgs, clocks: &Clocks) -> Result<Host> {
    let bar = load_bar(args.json);
    let host = Clocks::time(&clocks.load, || {
        Host::load(dir, weights, &mut |done, total, name| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
            bar.set_message(name.to_string());
        })
    });
    bar.finish_and_clear();
    host.map_err(|e| crate::bundle_arg::load_error(e, args.bundle.is_some()))
}

/// Lowers `cut` into `dir`, timed on `clocks.lower`.
fn lower(setup: &Setup<'_>, chip: &Chip, cut: Cut, dir: &Path) -> Result<()> {
    let lowered =
        Clocks::time(&setup.clocks.lower, || lower_into(setup.args.json, setup.spec, chip, &setup.storage, cut, dir));
    release_freed_memory();
    lowered
}

/// Hands the heap memory freed since the last call back to the system. Lowering certifies every
/// kind on seeded weights and frees them; glibc's allocator keeps such memory (its mmap
/// threshold rises to the largest block freed), so without this the run's resident size would
/// carry the certification's peak through the prompt and decode, beside the mapped weights.
pub(crate) fn release_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's own heaps to the system.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The spatial engine: a bundle (given, or lowered now into a temporary directory and read
/// back), run by the host. A forward bundle serves one sequence length: without `--bundle`,
/// one is lowered for each length the run steps.
fn spatial_engine(setup: Setup<'_>) -> Result<RunEngine<'_>> {
    let args = setup.args;
    if let Some(dir) = &args.bundle {
        return Ok(RunEngine::of(load(dir, &setup.weights, args, &setup.clocks)?, ()));
    }
    let chip = Chip::resolve(args.chip())?;
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    match setup.cut {
        RunCut::Decode => {
            let dir = tmp.path().join("decode");
            let cut = match args.tp {
                Some(tp) => Cut::Tp { tp, ctx: setup.ctx },
                None => Cut::Decode { ctx: setup.ctx },
            };
            lower(&setup, &chip, cut, &dir)?;
            let host = load(&dir, &setup.weights, args, &setup.clocks)?;
            Ok(RunEngine::of(host, tmp))
        }
        RunCut::Forward => Ok(RunEngine {
            stepping: Stepping::Forward,
            step: Box::new(move |feed| {
                let seq = feed.tokens().len();
                let dir = tmp.path().join(format!("forward-{seq}"));
                lower(&setup, &chip, Cut::Forward { seq }, &dir)?;
                let mut host = load(&dir, &setup.weights, args, &setup.clocks)?;
                host.logits(feed).map_err(|e| anyhow!("{e}"))
            }),
        }),
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
/// bundle, both over `ctx` positions (given, or lowered now: over `--tp` chips when given, a
/// prefill-tp and a tp decode bundle), run by one `rdu_host::Session`
/// (the hosts share the weights and hand the sequence's states to each other).
fn chunked_engine(setup: Setup<'_>) -> Result<RunEngine<'_>> {
    let (args, spec, ctx) = (setup.args, setup.spec, setup.ctx);
    // A given prefill bundle's chip and chips; the decode bundle it continues into is lowered
    // for them.
    let given = args.bundle.as_deref().map(crate::bundle_arg::manifest).transpose()?;
    let chip = Chip::resolve(given.as_ref().map_or(args.chip(), |m| m.chip.as_str()))?;
    let tp = given.as_ref().map_or(args.tp, |m| m.cut.tp);
    let chunk = setup.chunk.unwrap_or(1);
    let (prefill_cut, decode_cut) = match tp {
        Some(tp) => (Cut::PrefillTp { chunk, tp, ctx }, Cut::Tp { tp, ctx }),
        None => (Cut::Prefill { chunk, ctx }, Cut::Decode { ctx }),
    };
    let tmp = tempfile::tempdir().context("creating a temporary bundle directory")?;
    let prefill_dir = match &args.bundle {
        Some(dir) => dir.clone(),
        None => {
            let dir = tmp.path().join("prefill");
            lower(&setup, &chip, prefill_cut, &dir)?;
            dir
        }
    };
    let decode_dir = match &args.decode_bundle {
        Some(dir) => decode_bundle(dir, spec, ctx, tp)?,
        None => {
            let dir = tmp.path().join("decode");
            lower(&setup, &chip, decode_cut, &dir)?;
            dir
        }
    };
    let (prefill, decode) = Clocks::time(&setup.clocks.load, || -> Result<(Host, Host)> {
        let load_error = |e| crate::bundle_arg::load_error(e, args.bundle.is_some());
        let prefill = Host::load(&prefill_dir, &setup.weights, &mut |_, _, _| {}).map_err(load_error)?;
        let decode =
            Host::load_sharing(&decode_dir, &prefill, &setup.weights, &mut |_, _, _| {}).map_err(load_error)?;
        Ok((prefill, decode))
    })?;
    drop(tmp);
    Ok(RunEngine::of(Session::new(prefill, decode).map_err(|e| anyhow!("{e}"))?, ()))
}

/// The `--decode-bundle` a prefill bundle continues into: a decode bundle of the same model
/// over the same `ctx` — a tp decode bundle over the same chips when the prefill is over `tp`.
fn decode_bundle(dir: &Path, spec: &ModelSpec, ctx: usize, tp: Option<usize>) -> Result<PathBuf> {
    let m = crate::bundle_arg::manifest(dir)?;
    let (mode, want) = match tp {
        Some(tp) => (CutMode::Tp, format!("a tp decode bundle over {tp} chips")),
        None => (CutMode::Decode, "a decode bundle".to_string()),
    };
    if m.cut.mode != mode || m.model != spec.name || m.cut.ctx != Some(ctx) || m.cut.tp != tp {
        bail!(
            "--decode-bundle {} must be {want} of `{}` for ctx {ctx}, but it is a {} bundle of `{}` for ctx {}",
            dir.display(),
            spec.name,
            crate::model_arg::mode_word(m.cut.mode),
            m.model,
            m.cut.ctx.map_or("-".to_string(), |c| c.to_string())
        );
    }
    Ok(dir.to_path_buf())
}
