//! `rdu run --bundle DIR`: the bundle's manifest read before any weight is loaded, and every
//! flag that contradicts it refused in one line naming both values.

use crate::model_arg::{mode_word, StateArg, StorageArg};
use crate::run_args::{Engine, RunArgs, RunCut};
use anyhow::{anyhow, bail, Result};
use rdu_compiler::model::spec::{ModelSpec, StateDtype};
use rdu_host::Host;
use rdu_spatial::bundle::Bundle;
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::{CutMode, Manifest};
use std::path::Path;

/// The bundle in `dir` as `rdu run` would load it, refused in one line otherwise: read and
/// validated, its programs parsed and every binding checked against the manifest (a tensor
/// whose manifest shape is not the one its program declares is named with both shapes) —
/// `Host::check`, every check a run makes before it reads a weight. `rdu show`, `rdu report`,
/// `rdu verify` and `rdu run --bundle` open bundles here, so none accepts one the others refuse.
pub fn open(dir: &Path) -> Result<Bundle> {
    Host::check(dir).map_err(|e| {
        let shown = dir.display().to_string();
        let text = e.to_string();
        // Most of the host's messages already start with the bundle: name it once.
        let reason = text.strip_prefix(&format!("bundle {shown}: ")).unwrap_or(&text);
        anyhow!("cannot open bundle {shown}: {reason}")
    })
}

/// The manifest of the bundle in `dir`, opened as [`open`] opens it.
pub fn manifest(dir: &Path) -> Result<Manifest> {
    Ok(open(dir)?.manifest)
}

/// Refuses a bundle of another model, and `--engine reference`, `--ctx`, `--tp`, `--chip`,
/// `--storage`, `--cut` or `--chunk` that contradict it. `batched`: whether the run steps
/// several prompts (`--batch-prompts`).
pub fn check(args: &RunArgs, spec: &ModelSpec, dir: &Path, m: &Manifest, batched: bool) -> Result<()> {
    let shown = dir.display();
    if m.model != spec.name {
        bail!("the bundle {shown} was lowered for the model `{}`, but MODEL is `{}`", m.model, spec.name);
    }
    if args.engine == Engine::Reference {
        bail!(
            "--engine reference runs the authored programs, not a bundle: drop --bundle {shown} or --engine reference"
        );
    }
    let cut = &m.cut;
    if let (Some(given), Some(lowered)) = (args.ctx, cut.ctx) {
        if given != lowered {
            bail!("--ctx {given} contradicts the bundle {shown}, lowered for ctx {lowered}: drop --ctx or lower again");
        }
    }
    let lowered_tp = cut.tp.unwrap_or(1);
    if let Some(tp) = args.tp {
        if tp != lowered_tp {
            bail!(
                "--tp {tp} contradicts the bundle {shown}, lowered for {lowered_tp} chip(s): drop --tp or lower again"
            );
        }
    }
    if let Some(chip) = &args.chip {
        let name = Chip::resolve(chip)?.name;
        if name != m.chip {
            bail!("--chip {chip} contradicts the bundle {shown}, lowered for the chip {}", m.chip);
        }
    }
    if args.storage != StorageArg::Auto {
        let label = args.storage.storage().label();
        if label != m.storage {
            bail!("--storage {label} contradicts the bundle {shown}, lowered with storage {}", m.storage);
        }
    }
    check_cut(args, &shown.to_string(), cut, batched)
}

/// Refuses `--cut`, `--chunk`, `--batch-prompts` (`batched`) or `--decode-bundle` that
/// contradict the bundle `shown`'s cut.
fn check_cut(args: &RunArgs, shown: &str, cut: &rdu_spatial::manifest::Cut, batched: bool) -> Result<()> {
    let mode = mode_word(cut.mode);
    if args.cut == Some(RunCut::Forward) && cut.mode != CutMode::Forward {
        bail!("--cut forward contradicts the bundle {shown}, a {mode} bundle: drop --cut");
    }
    if args.cut == Some(RunCut::Decode) && cut.mode == CutMode::Forward {
        bail!("--cut decode contradicts the bundle {shown}, a forward bundle: drop --cut");
    }
    if let Some(chunk) = args.chunk {
        match cut.chunk {
            Some(lowered) if lowered != chunk => {
                bail!("--chunk {chunk} contradicts the bundle {shown}, lowered for chunks of {lowered}: drop --chunk")
            }
            Some(_) => {}
            None => bail!("--chunk {chunk} needs a prefill bundle, but {shown} is a {mode} bundle: drop --chunk"),
        }
    }
    match (cut.mode, batched) {
        (CutMode::Batched | CutMode::BatchedTp, false) => bail!(
            "the bundle {shown} is batched ({} sequences a step): give its prompts with --batch-prompts FILE",
            cut.batch.unwrap_or(1)
        ),
        (CutMode::Forward | CutMode::Prefill | CutMode::PrefillTp, true) => {
            bail!("--batch-prompts needs a batched bundle, but {shown} is a {mode} bundle")
        }
        _ => {}
    }
    if cut.mode == CutMode::Verify && args.draft.is_none() {
        bail!("the bundle {shown} is a verify bundle: run it with --draft DRAFT (lookup, or a draft model)");
    }
    if args.decode_bundle.is_some() && !matches!(cut.mode, CutMode::Prefill | CutMode::PrefillTp) {
        bail!("--decode-bundle continues a prefill bundle, but {shown} is a {mode} bundle: drop --decode-bundle");
    }
    Ok(())
}

/// A host's load error in a user's words. Without `--bundle`, rdu lowered the bundle itself
/// from MODEL's own config, so a checkpoint tensor that is missing or shaped otherwise means
/// MODEL's config and its weights disagree (the host's advice, to use the checkpoint the
/// bundle was lowered for, is about a bundle the user did not give).
pub fn load_error(e: rdu_host::HostError, bundle_given: bool) -> anyhow::Error {
    use rdu_host::HostError;
    match e {
        HostError::MissingTensor { file, tensor, checkpoint } if !bundle_given => anyhow::anyhow!(
            "{file}: no tensor `{checkpoint}`, which the model's config needs (for `{tensor}`): its config and its weights disagree"
        ),
        HostError::TensorShape { file, tensor, checkpoint, expected, found } if !bundle_given => anyhow::anyhow!(
            "{file}: tensor `{checkpoint}` has the shape {found:?} but the model's config makes `{tensor}` {expected:?}: its config and its weights disagree"
        ),
        other => anyhow::anyhow!("{other}"),
    }
}

/// The state storage a run uses: the bundle's, when it runs one (refusing a `--state` that
/// differs), else `--state`, f32 by default (what transformers' own float32 cache holds).
pub(crate) fn run_state(args: &RunArgs) -> Result<StateArg> {
    let Some(dir) = &args.bundle else { return Ok(args.state.unwrap_or(StateArg::F32)) };
    let manifest = manifest(dir)?;
    let stored = match manifest.state_dtype() {
        Ok(None) => return Ok(args.state.unwrap_or(StateArg::F32)),
        Ok(Some(one)) => one,
        Err(problem) => bail!("{}: {problem}", dir.display()),
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
