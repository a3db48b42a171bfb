//! `rdu lower TARGET --cut verify --draft DRAFT --draft-tokens K [--acceptance A]`: a
//! speculative deployment — a bundle of bundles: `verify/` (the target's verify bundle),
//! `draft/` (the draft's decode bundle over the same sequences and chips; none for `lookup`,
//! which drafts on the host) and `speculative.json` (what runs, in what order, and the
//! estimate at `A`: `rdu_compiler::deploy::speculative`).

use crate::model_arg::{mtp_storage, resolve_with_weights, storage_of, StorageArg};
use anyhow::{anyhow, bail, Result};
use rdu_compiler::deploy::deploy;
use rdu_compiler::deploy::speculative::{check_draft, draft_cut, SpeculativeEstimate};
use rdu_compiler::deploy::{LowerOptions, Progress, StreamedModel};
use rdu_compiler::model::mtp::MTP_DRAFT;
use rdu_compiler::model::spec::{Cut, ModelSpec};
use serde_json::{json, Value};
use std::path::Path;

/// The marker of a speculative deployment's `speculative.json`.
pub const FORMAT: &str = "rdu-speculative";

/// What drafts for a speculative deployment: prompt lookup (on the host), or a model's decode
/// bundle, lowered and certified.
pub enum Draft {
    Lookup,
    Model(Box<StreamedModel>),
}

impl Draft {
    pub fn name(&self) -> String {
        match self {
            Draft::Lookup => "lookup".to_string(),
            Draft::Model(m) => m.spec.name.clone(),
        }
    }

    pub fn model(&self) -> Option<&StreamedModel> {
        match self {
            Draft::Lookup => None,
            Draft::Model(m) => Some(m),
        }
    }
}

/// The draft `word` names for the verify deployment `target`: `lookup`, or a model lowered at
/// the decode cut of the verify step's sequences and chips (its states stored as the target's).
/// `mtp` is the target's MTP block as its checkpoint holds it (`mtp_of`), for `--draft mtp`.
pub fn lower_draft(
    word: &str,
    target: &StreamedModel,
    mtp: Option<&ModelSpec>,
    (storage, seed): (StorageArg, u64),
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Draft> {
    match (word, mtp) {
        ("lookup", _) => return Ok(Draft::Lookup),
        (MTP_DRAFT, Some(block)) => return lower_mtp(target, block, seed, progress),
        (MTP_DRAFT, None) => return Err(anyhow!("--draft mtp: {} has no MTP block resolved", target.spec.name)),
        _ => {}
    }
    let (spec, weights) = resolve_with_weights(word)?;
    check_draft(&target.spec, &spec).map_err(|e| anyhow!("{e}"))?;
    let spec = ModelSpec { state: target.spec.state, ..spec };
    let cut = draft_cut(target.cut).ok_or_else(|| anyhow!("--draft needs --cut verify"))?;
    let opts =
        LowerOptions { chip: target.chip.clone(), storage: storage_of(storage, &spec, &weights), seed, progress };
    let model = deploy(&spec, &cut, opts).map_err(|e| anyhow!("the draft {word}: {e}"))?;
    Ok(Draft::Model(Box::new(model)))
}

/// The target's own multi-token-prediction block, lowered at the decode cut of the verify step
/// with the target's storage (its tensors are the target checkpoint's), its head exporting its
/// hidden rows to draft again from.
fn lower_mtp(
    target: &StreamedModel,
    block: &ModelSpec,
    seed: u64,
    progress: &mut dyn FnMut(Progress<'_>),
) -> Result<Draft> {
    let cut = mtp_cut(target.cut)?;
    let storage = mtp_storage(&target.storage, block)?;
    let spec = ModelSpec { state: target.spec.state, ..block.clone() };
    let opts = LowerOptions { chip: target.chip.clone(), storage, seed, progress };
    let model = deploy(&spec, &cut, opts).map_err(|e| anyhow!("the MTP block of {}: {e}", target.spec.name))?;
    Ok(Draft::Model(Box::new(model)))
}

/// The decode cut an MTP block drafts at beside the verify cut `verify`: one sequence, on the
/// verify step's chips (its layer split as the target's are; the fusion whole on every chip).
pub fn mtp_cut(verify: Cut) -> Result<Cut> {
    match verify {
        Cut::Verify { batch: None, ctx, .. } => Ok(draft_cut(verify).unwrap_or(Cut::Decode { ctx })),
        Cut::Verify { .. } => bail!("--draft mtp drafts for one sequence: drop --batch"),
        _ => bail!("--draft needs --cut verify"),
    }
}

/// `speculation` of `rdu lower --json`: the draft, its tokens, and with an acceptance rate the
/// estimate.
pub fn speculation_json(target: &StreamedModel, draft: &Draft, estimate: Option<&SpeculativeEstimate>) -> Value {
    let mut v = json!({
        "draft": draft.name(),
        "draft_tokens": target.cut.draft(),
        "draft_bundle": draft.model().map(|_| "draft"),
        "target_bundle": "verify",
    });
    if let Some(e) = estimate {
        v["acceptance"] = json!(e.acceptance);
        v["expected_tokens_per_step"] = json!(e.expected_tokens_per_step);
        v["draft_steps_per_step"] = json!(e.draft_steps_per_step);
        v["draft_step_seconds"] = json!(e.draft_step_seconds);
        v["verify_step_seconds"] = json!(e.verify_step_seconds);
        v["seconds_per_step"] = json!(e.seconds_per_step);
        v["tokens_per_second"] = json!(e.tokens_per_second);
    }
    v
}

/// Writes the speculative deployment into `dir`: `verify/`, `draft/` (a draft model's), and
/// `speculative.json` with their schedule. An existing `dir` must be a speculative deployment
/// unless `force`; each bundle is written atomically, the schedule last.
pub fn write(
    dir: &Path,
    force: bool,
    target: &StreamedModel,
    draft: &Draft,
    estimate: Option<&SpeculativeEstimate>,
) -> Result<()> {
    if dir.exists() && !force && !is_speculative(dir) {
        bail!(
            "{} exists and is not a speculative deployment; pass --force to replace it, or choose another -o",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| anyhow!("creating {}: {}", dir.display(), crate::model_arg::io_words(&e)))?;
    let manifest = dir.join("speculative.json");
    if manifest.exists() {
        // Until the schedule is written again, the directory is not a whole deployment.
        std::fs::remove_file(&manifest).map_err(|e| anyhow!("{}: {e}", manifest.display()))?;
    }
    let bundle = |m: &StreamedModel, name: &str| -> Result<()> {
        let b = m.bundle().map_err(anyhow::Error::msg)?;
        b.write(&dir.join(name), true).map_err(|e| anyhow!("writing the {name} bundle to {}: {e}", dir.display()))
    };
    bundle(target, "verify")?;
    match draft.model() {
        Some(m) => bundle(m, "draft")?,
        None => {
            let stale = dir.join("draft");
            if stale.exists() {
                std::fs::remove_dir_all(&stale).map_err(|e| anyhow!("{}: {e}", stale.display()))?;
            }
        }
    }
    let schedule = match draft.model() {
        Some(_) => json!([
            {"bundle": "draft", "steps": "draft_tokens, and once more when every drafted token stood"},
            {"bundle": "verify", "steps": 1},
        ]),
        None => json!([{"host": "prompt lookup", "steps": 1}, {"bundle": "verify", "steps": 1}]),
    };
    let text = serde_json::to_string_pretty(&json!({
        "format": FORMAT,
        "version": 1,
        "model": target.spec.name,
        "chip": target.chip.name,
        "chips": target.cut.tp(),
        "schedule": schedule,
        "speculation": speculation_json(target, draft, estimate),
    }))?;
    crate::report::write_atomically(&manifest, &format!("{text}\n"))
}

/// Whether `dir` holds a speculative deployment's `speculative.json`.
pub fn is_speculative(dir: &Path) -> bool {
    let Ok(text) = std::fs::read_to_string(dir.join("speculative.json")) else { return false };
    serde_json::from_str::<Value>(&text).ok().and_then(|v| v.get("format").cloned()) == Some(json!(FORMAT))
}
