//! A speculative deployment: a draft's decode bundle beside the target's verify bundle, on the
//! same chips, run as a schedule of `K` draft steps then one verify step. Its estimate needs an
//! acceptance rate — the workload's, not the chip's: with `A` the probability that a drafted
//! token stands (each independently, as Leviathan et al. 2023 model it), a verify step of `K`
//! drafted tokens makes `(1 − A^(K+1)) / (1 − A)` tokens on average (the accepted run, then the
//! target's own token), and the draft steps `K + A^K` times a verify step on average (`K` to
//! propose, and when all `K` stood, once more to feed the last of them beside the target's
//! token). Both are charged: a speculative step takes the verify step's time and that many
//! draft steps'.

use super::model::{StreamedModel, StreamedReject};
use crate::model::spec::{Cut, ModelSpec};

/// Tokens a verify step of `draft` drafted tokens makes on average when each stands with
/// probability `acceptance`: `(1 − A^(K+1)) / (1 − A)`, `K + 1` at `A = 1`.
pub fn expected_tokens_per_step(draft: usize, acceptance: f64) -> f64 {
    if acceptance >= 1.0 {
        return (draft + 1) as f64;
    }
    (1.0 - acceptance.powi(draft as i32 + 1)) / (1.0 - acceptance)
}

/// Draft decode steps a verify step costs on average: `K` proposals, and one more when all `K`
/// stood (probability `A^K`).
pub fn draft_steps_per_step(draft: usize, acceptance: f64) -> f64 {
    draft as f64 + acceptance.powi(draft as i32)
}

/// The one-line refusal of an acceptance rate outside `[0, 1]`.
pub fn check_acceptance(acceptance: f64) -> Result<(), StreamedReject> {
    if (0.0..=1.0).contains(&acceptance) {
        Ok(())
    } else {
        Err(StreamedReject::Invalid(format!(
            "--acceptance {acceptance} is not a probability: give the rate at which a drafted token stands, between 0 and 1"
        )))
    }
}

/// The one-line refusal of a draft whose vocabulary is not the target's (its tokens would not
/// be the target's tokens). A draft of the target's family whose vocabulary is the first rows
/// of the target's is the target's tokenizer with the target's embedding padded past it
/// (Gemma 3 270M's 262,144 tokens and Gemma 3 27B's 262,208 embedding rows, which llama.cpp
/// trims to the tokenizer's 262,144): it is accepted, and a run refuses a target token past it.
pub fn check_draft(target: &ModelSpec, draft: &ModelSpec) -> Result<(), StreamedReject> {
    if draft.vocab == target.vocab || (draft.family == target.family && draft.vocab < target.vocab) {
        return Ok(());
    }
    Err(StreamedReject::Invalid(format!(
        "the draft {} has a vocabulary of {} tokens but {} has {}: a draft must share the target's vocabulary",
        draft.name, draft.vocab, target.name, target.vocab
    )))
}

/// The decode cut a draft runs beside the verify cut `verify`: its sequences, on its chips.
pub fn draft_cut(verify: Cut) -> Option<Cut> {
    let Cut::Verify { batch, tp, ctx, .. } = verify else { return None };
    Some(match (batch, tp) {
        (None, 1) => Cut::Decode { ctx },
        (Some(batch), 1) => Cut::Batched { batch, ctx },
        (None, tp) => Cut::Tp { tp, ctx },
        (Some(batch), tp) => Cut::BatchedTp { batch, tp, ctx },
    })
}

/// A speculative deployment's estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeculativeEstimate {
    pub draft_tokens: usize,
    pub acceptance: f64,
    pub expected_tokens_per_step: f64,
    /// Draft decode steps per verify step (0 without a draft model: prompt lookup on the host).
    pub draft_steps_per_step: f64,
    pub draft_step_seconds: f64,
    pub verify_step_seconds: f64,
    /// A speculative step: the verify step and its draft steps.
    pub seconds_per_step: f64,
    pub sequences: usize,
    /// Every sequence's expected tokens a second, together.
    pub tokens_per_second: f64,
}

impl SpeculativeEstimate {
    /// The estimate of `verify` (a verify cut's deployment) with `draft` (a draft model's decode
    /// deployment; `None` for a draft without a model) at `acceptance`.
    pub fn new(
        verify: &StreamedModel,
        draft: Option<&StreamedModel>,
        acceptance: f64,
    ) -> Result<SpeculativeEstimate, StreamedReject> {
        check_acceptance(acceptance)?;
        let Some(k) = verify.cut.draft() else {
            return Err(StreamedReject::Invalid(format!("{} is not a verify step", verify.cut.describe())));
        };
        let verify_step_seconds = verify.step_estimate().seconds;
        let draft_step_seconds = draft.map_or(0.0, |d| d.step_estimate().seconds);
        let draft_steps = if draft.is_some() { draft_steps_per_step(k, acceptance) } else { 0.0 };
        let seconds_per_step = verify_step_seconds + draft_steps * draft_step_seconds;
        let expected = expected_tokens_per_step(k, acceptance);
        let sequences = verify.cut.batch().unwrap_or(1);
        let tokens_per_second =
            if seconds_per_step > 0.0 { expected * sequences as f64 / seconds_per_step } else { 0.0 };
        Ok(SpeculativeEstimate {
            draft_tokens: k,
            acceptance,
            expected_tokens_per_step: expected,
            draft_steps_per_step: draft_steps,
            draft_step_seconds,
            verify_step_seconds,
            seconds_per_step,
            sequences,
            tokens_per_second,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expected_tokens_follow_the_geometric_series() {
        // 1 + A + A² + … + A^K.
        for (k, a) in [(4, 0.8), (1, 0.5), (7, 0.6), (3, 0.0)] {
            let series: f64 = (0..=k).map(|i| f64::powi(a, i as i32)).sum();
            assert!((expected_tokens_per_step(k, a) - series).abs() < 1e-12, "{k} {a}");
        }
        assert_eq!(expected_tokens_per_step(4, 1.0), 5.0);
        assert!((expected_tokens_per_step(4, 0.8) - 3.3616).abs() < 1e-12);
        assert!((draft_steps_per_step(4, 0.8) - 4.4096).abs() < 1e-12);
    }

    #[test]
    fn an_acceptance_outside_zero_to_one_is_refused() {
        assert!(check_acceptance(0.0).is_ok() && check_acceptance(1.0).is_ok());
        for bad in [-0.1, 1.5, f64::NAN] {
            assert!(check_acceptance(bad).unwrap_err().to_string().contains("is not a probability"), "{bad}");
        }
    }

    #[test]
    fn a_draft_shares_the_targets_vocabulary_or_its_first_rows_in_one_family() {
        let spec = |name: &str| crate::model::presets::get(name).expect("preset");
        assert!(check_draft(&spec("llama-3.1-70b"), &spec("llama-3.2-1b")).is_ok());
        assert!(check_draft(&spec("qwen3-8b"), &spec("qwen3-0.6b")).is_ok());
        assert!(
            check_draft(&spec("gemma-3-27b-it"), &spec("gemma-3-270m")).is_ok(),
            "the 27B's rows padded past 262,144"
        );
        let refused = check_draft(&spec("gemma-3-270m"), &spec("gemma-3-27b-it")).unwrap_err().to_string();
        assert!(refused.contains("262208 tokens") && refused.contains("share the target's vocabulary"), "{refused}");
        assert!(check_draft(&spec("llama-3.1-8b"), &spec("qwen3-0.6b")).is_err());
    }

    #[test]
    fn the_draft_runs_the_verify_steps_sequences_on_its_chips() {
        let v = |batch, tp| Cut::Verify { draft: 4, batch, tp, ctx: 64 };
        assert_eq!(draft_cut(v(None, 1)), Some(Cut::Decode { ctx: 64 }));
        assert_eq!(draft_cut(v(Some(3), 1)), Some(Cut::Batched { batch: 3, ctx: 64 }));
        assert_eq!(draft_cut(v(None, 8)), Some(Cut::Tp { tp: 8, ctx: 64 }));
        assert_eq!(draft_cut(v(Some(2), 8)), Some(Cut::BatchedTp { batch: 2, tp: 8, ctx: 64 }));
        assert_eq!(draft_cut(Cut::Decode { ctx: 64 }), None);
    }
}
