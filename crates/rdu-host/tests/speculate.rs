//! Speculative sampling's rule (`speculate::accept::check`) draws every token as the target's
//! sampler does, whatever the draft's distribution: over many draws on a small vocabulary, the
//! token that stands (the drafted one, or its replacement) is distributed as `p`, for a draft
//! that samples `q` and for a deterministic draft (prompt lookup's); greedy, the rule is the
//! target's argmax. Prompt lookup proposes what followed the latest earlier match.

use rdu_host::sample::{Dist, Sampler, Sampling};
use rdu_host::speculate::accept::{check, residual, Verdict};
use rdu_host::speculate::draft::lookup;

/// The target's logits over 5 tokens and its sampler at temperature 1.
const LOGITS: [f32; 5] = [1.0, 0.2, -0.5, 0.7, 2.0];

fn sampler(seed: u64) -> Sampler {
    Sampler::new(Sampling { temperature: 1.0, top_k: 0, top_p: 1.0, seed }).unwrap()
}

/// `draws` tokens through `check`, the draft drawing from `q` (or proposing `fixed`), counted by id.
fn counts(q: Option<&Dist>, fixed: u32, draws: usize) -> Vec<usize> {
    let mut target = sampler(11);
    let mut draft = sampler(12);
    let mut counts = vec![0; LOGITS.len()];
    for _ in 0..draws {
        let d = q.map_or(fixed, |q| q.draw(draft.uniform()));
        let t = match check(&mut target, &LOGITS, d, q).unwrap() {
            Verdict::Accept => d,
            Verdict::Replace(t) => t,
        };
        counts[t as usize] += 1;
    }
    counts
}

/// Pearson's chi-square of `counts` against the target's distribution.
fn chi_square(counts: &[usize]) -> f64 {
    let p = sampler(0).distribution(&LOGITS).unwrap();
    let n: usize = counts.iter().sum();
    (0..LOGITS.len() as u32)
        .map(|t| {
            let expected = p.prob(t) * n as f64;
            (counts[t as usize] as f64 - expected).powi(2) / expected
        })
        .sum()
}

/// The chi-square bound of 4 degrees of freedom at p = 0.001.
const BOUND: f64 = 18.47;

#[test]
fn a_sampled_draft_leaves_the_targets_distribution() {
    let q = Dist { tokens: vec![2, 0, 1, 3, 4], probs: vec![0.5, 0.2, 0.15, 0.1, 0.05] };
    let c = counts(Some(&q), 0, 200_000);
    assert!(chi_square(&c) < BOUND, "{c:?}: chi-square {}", chi_square(&c));
}

#[test]
fn a_deterministic_draft_leaves_the_targets_distribution() {
    for fixed in [4, 2] {
        let c = counts(None, fixed, 200_000);
        assert!(chi_square(&c) < BOUND, "draft {fixed}: {c:?}: chi-square {}", chi_square(&c));
    }
}

#[test]
fn the_residual_is_what_the_draft_over_proposed_taken_out() {
    let p = sampler(0).distribution(&LOGITS).unwrap();
    // A deterministic draft of token 4: every other token keeps its probability, 4 none.
    let r = residual(&p, 4, None);
    for t in 0..4 {
        assert!((r.prob(t) - p.prob(t) / (1.0 - p.prob(4))).abs() < 1e-12, "token {t}");
    }
    assert_eq!(r.prob(4), 0.0);
    // A draft equal to the target leaves nothing: the target's own distribution then.
    assert_eq!(residual(&p, 4, Some(&p)), p);
}

#[test]
fn greedy_checks_against_the_targets_argmax() {
    let mut greedy = Sampler::new(Sampling::default()).unwrap();
    assert_eq!(check(&mut greedy, &LOGITS, 4, None).unwrap(), Verdict::Accept);
    assert_eq!(check(&mut greedy, &LOGITS, 1, None).unwrap(), Verdict::Replace(4));
}

#[test]
fn prompt_lookup_copies_what_followed_the_latest_match() {
    // The last two tokens (7, 8) occurred twice; the latest earlier match is followed by 9, 1.
    assert_eq!(lookup(&[7, 8, 3, 7, 8, 9, 1, 7, 8], 2, 3), [9, 1]);
    // The copy runs on through what it proposes: a repeating pattern repeats.
    assert_eq!(lookup(&[1, 2, 1, 2], 5, 3), [1, 2, 1, 2, 1]);
    // No match: the last token again.
    assert_eq!(lookup(&[5, 6, 7], 3, 3), [7, 7, 7]);
    assert_eq!(lookup(&[], 3, 3), Vec::<u32>::new());
}
