//! `rdu plan TARGET --draft DRAFT` (a model, or `mtp`: the target's own multi-token-prediction
//! block): speculative deployments of one sequence — every
//! tensor-parallel width both models admit (up to 16) × the drafted tokens K — each the
//! target's verify step and the draft's decode step estimated as `rdu lower` lowers them
//! (`Estimator`: structure and resources checked, numbers not certified), and its tokens/s at
//! every acceptance rate swept (`rdu_compiler::deploy::speculative`), beside the plain decode
//! step of the same width.

use super::{swept_widths, PlanArgs, NOTE};
use crate::model_arg::{resolve_with_weights, storage_of, with_state, Weights};
use anyhow::{anyhow, bail, Result};
use rayon::prelude::*;
use rdu_compiler::deploy::speculative::{check_acceptance, check_draft, SpeculativeEstimate};
use rdu_compiler::deploy::{Estimator, Storage, StreamedModel};
use rdu_compiler::fit::admits_tp;
use rdu_compiler::model::mtp::{exporting_hidden, MTP_DRAFT};
use rdu_compiler::model::spec::{Cut, ModelSpec};
use rdu_spatial::chip::Chip;
use serde_json::json;
use std::fmt::Write as _;

/// The drafted tokens swept when `--draft-tokens` is not given.
pub const DRAFT_TOKENS: [usize; 6] = [1, 2, 3, 4, 6, 8];
/// The acceptance rates swept when `--acceptance` is not given.
pub const ACCEPTANCES: [f64; 4] = [0.6, 0.7, 0.8, 0.9];

/// One width and K: the steps' times, and the tokens/s at each acceptance rate.
struct Row {
    tp: usize,
    k: usize,
    plain_tokens_per_second: f64,
    verify_step_seconds: f64,
    draft_step_seconds: f64,
    by_acceptance: Vec<SpeculativeEstimate>,
}

pub fn run(args: &PlanArgs, draft_word: &str) -> Result<()> {
    if args.out.is_some() {
        bail!("-o draws the batch frontier; a speculative plan (--draft) prints its table or --json");
    }
    let (spec, weights) = resolve_with_weights(&args.model)?;
    let spec = with_state(spec, args.target.state);
    let storage = storage_of(args.target.storage, &spec, &weights);
    let (spec, draft, draft_storage) = drafted_by(args, draft_word, spec, &weights, &storage)?;
    let chip = Chip::resolve(&args.target.chip)?;
    let ks = if args.draft_tokens.is_empty() { DRAFT_TOKENS.to_vec() } else { args.draft_tokens.clone() };
    let acceptances = if args.acceptance.is_empty() { ACCEPTANCES.to_vec() } else { args.acceptance.clone() };
    for &a in &acceptances {
        check_acceptance(a).map_err(|e| anyhow!("{e}"))?;
    }
    if let Some(bad) = ks.iter().find(|&&k| k == 0 || k >= args.ctx) {
        bail!("--draft-tokens {bad}: a verify step checks 1 to {} drafted tokens at ctx {}", args.ctx - 1, args.ctx);
    }
    let widths: Vec<usize> = swept_widths()
        .filter(|&tp| admits_tp(&spec, tp, &storage).is_ok() && admits_tp(&draft, tp, &draft_storage).is_ok())
        .collect();
    let target = Estimator::new(&spec, chip.clone(), storage.clone(), 0);
    let drafter = Estimator::new(&draft, chip.clone(), draft_storage, 0);
    let ctx = args.ctx;
    let estimate = |e: &Estimator, cut: Cut| -> Result<StreamedModel> {
        let spine = e.spine(cut, &mut |_| {}).map_err(|e| anyhow!("{}: {e}", cut.describe()))?;
        e.estimate(cut, &spine, &mut |_| {}).map_err(|e| anyhow!("{}: {e}", cut.describe()))
    };
    let decode = |tp| if tp == 1 { Cut::Decode { ctx } } else { Cut::Tp { tp, ctx } };
    let rows: Vec<Row> = widths
        .par_iter()
        .flat_map(|&tp| ks.par_iter().map(move |&k| (tp, k)))
        .map(|(tp, k)| -> Result<Row> {
            let plain = estimate(&target, decode(tp))?.step_estimate().tokens_per_second;
            let draft_model = estimate(&drafter, decode(tp))?;
            let verify = estimate(&target, Cut::Verify { draft: k, batch: None, tp, ctx })?;
            let by_acceptance = acceptances
                .iter()
                .map(|&a| SpeculativeEstimate::new(&verify, Some(&draft_model), a).map_err(|e| anyhow!("{e}")))
                .collect::<Result<Vec<_>>>()?;
            let (verify_step_seconds, draft_step_seconds) =
                (verify.step_estimate().seconds, draft_model.step_estimate().seconds);
            Ok(Row { tp, k, plain_tokens_per_second: plain, verify_step_seconds, draft_step_seconds, by_acceptance })
        })
        .collect::<Result<_>>()?;
    let header = format!(
        "{} on {} with {} drafting (ctx {ctx}, storage {}, states {}): {} speculative deployments of one sequence",
        spec.name,
        chip.name,
        draft.name,
        storage.label(),
        spec.state.as_str(),
        rows.len()
    );
    if args.json {
        println!("{}", json_of(&spec, &draft, &chip, &rows));
        eprintln!("{NOTE}");
    } else {
        print!("{}", table(&header, &acceptances, &rows));
    }
    Ok(())
}

/// The target — exporting its hidden rows when its own MTP block drafts (`mtp`) — and the
/// draft `word` names with its storage.
fn drafted_by(
    args: &PlanArgs,
    word: &str,
    spec: ModelSpec,
    weights: &Weights,
    storage: &Storage,
) -> Result<(ModelSpec, ModelSpec, Storage)> {
    if word == MTP_DRAFT {
        let block = crate::model_arg::mtp_of(&spec, weights, &args.model)?;
        let block_storage = crate::model_arg::mtp_storage(storage, &block)?;
        return Ok((exporting_hidden(&spec), block, block_storage));
    }
    let (draft, draft_weights) = resolve_with_weights(word)?;
    check_draft(&spec, &draft).map_err(|e| anyhow!("{e}"))?;
    let draft = ModelSpec { state: spec.state, ..draft };
    let draft_storage = storage_of(args.target.storage, &draft, &draft_weights);
    Ok((spec, draft, draft_storage))
}

fn json_of(spec: &ModelSpec, draft: &ModelSpec, chip: &Chip, rows: &[Row]) -> serde_json::Value {
    let rows: Vec<_> = rows
        .iter()
        .map(|r| {
            let cells: Vec<_> = r
                .by_acceptance
                .iter()
                .map(|e| {
                    json!({
                        "acceptance": e.acceptance,
                        "expected_tokens_per_step": e.expected_tokens_per_step,
                        "seconds_per_step": e.seconds_per_step,
                        "tokens_per_second": e.tokens_per_second,
                    })
                })
                .collect();
            json!({
                "tp": r.tp,
                "draft_tokens": r.k,
                "plain_tokens_per_second": r.plain_tokens_per_second,
                "verify_step_seconds": r.verify_step_seconds,
                "draft_step_seconds": r.draft_step_seconds,
                "by_acceptance": cells,
            })
        })
        .collect();
    json!({"model": spec.name, "draft": draft.name, "chip": chip.name, "rows": rows})
}

/// The plan as text: one line per width and K, the tokens/s at each acceptance rate.
fn table(header: &str, acceptances: &[f64], rows: &[Row]) -> String {
    let mut out = format!("{header}\n  {NOTE}\n");
    let _ = write!(out, "  {:>3} {:>3} {:>11} {:>10} {:>11}", "tp", "K", "verify µs", "draft µs", "plain tok/s");
    for a in acceptances {
        let _ = write!(out, " {:>9}", format!("A={a}"));
    }
    out.push('\n');
    for r in rows {
        let _ = write!(
            out,
            "  {:>3} {:>3} {:>11.1} {:>10.1} {:>11.1}",
            r.tp,
            r.k,
            r.verify_step_seconds * 1e6,
            r.draft_step_seconds * 1e6,
            r.plain_tokens_per_second
        );
        for e in &r.by_acceptance {
            let _ = write!(out, " {:>9.1}", e.tokens_per_second);
        }
        out.push('\n');
    }
    out.push_str(
        "  A: the rate at which a drafted token stands; tokens/s = (1 - A^(K+1)) / (1 - A) over a verify step and K + A^K draft steps\n",
    );
    out
}
