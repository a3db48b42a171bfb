//! Sampling: greedy is the argmax (first on ties); seeded sampling is deterministic and follows the distribution.

use rdu_host::{greedy, HostError, Sampler, Sampling};

fn draws(sampling: Sampling, logits: &[f32], n: usize) -> Vec<u32> {
    let mut sampler = Sampler::new(sampling).unwrap();
    (0..n).map(|_| sampler.sample(logits).unwrap()).collect()
}

fn warm(seed: u64) -> Sampling {
    Sampling { temperature: 1.0, top_k: 0, top_p: 1.0, seed }
}

#[test]
fn greedy_picks_the_argmax_and_the_first_on_ties() {
    assert_eq!(greedy(&[0.1, 2.5, -1.0, 2.0]).unwrap(), 1);
    assert_eq!(greedy(&[1.0, 3.0, 3.0, 0.0]).unwrap(), 1);
    assert_eq!(greedy(&[f32::NEG_INFINITY, -5.0]).unwrap(), 1);
    assert_eq!(greedy(&[f32::NEG_INFINITY; 3]).unwrap(), 0);
    assert_eq!(greedy(&[-0.0, 0.0, -1.0]).unwrap(), 0);
    // Long rows (runs of sixteen and a rest): the first index of the largest, wherever it lies.
    let scan = |v: &[f32]| (0..v.len()).fold(0, |best, i| if v[i] > v[best] { i } else { best }) as u32;
    let row: Vec<f32> = (0..1000).map(|i| ((i * 7919) % 997) as f32 / 13.0 - 30.0).collect();
    assert_eq!(greedy(&row).unwrap(), scan(&row));
    for at in [0, 15, 16, 500, 991, 999] {
        let mut r = row.clone();
        r[at] = 1e9;
        r[(at + 333) % 1000] = 1e9; // a tie: the first of the two
        assert_eq!(greedy(&r).unwrap(), scan(&r), "max at {at}");
    }
    // Temperature 0 is greedy whatever the seed.
    assert_eq!(draws(Sampling { seed: 99, ..Sampling::default() }, &[0.0, 1.0, 1.0], 5), [1; 5]);
}

#[test]
fn sampling_is_deterministic_for_a_seed() {
    let logits: Vec<f32> = (0..20).map(|i| ((i * 7) % 5) as f32 * 0.3).collect();
    let a = draws(warm(42), &logits, 200);
    assert_eq!(a, draws(warm(42), &logits, 200));
    assert_ne!(a, draws(warm(43), &logits, 200));
    let nucleus = Sampling { temperature: 0.8, top_k: 6, top_p: 0.9, seed: 5 };
    assert_eq!(draws(nucleus, &logits, 100), draws(nucleus, &logits, 100));
}

#[test]
fn sampling_follows_the_softmax() {
    // p(1) = 3/4 at temperature 1.
    let n = 8000;
    let ones = draws(warm(7), &[0.0, 3f32.ln()], n).iter().filter(|&&t| t == 1).count();
    let p = ones as f64 / n as f64;
    assert!((p - 0.75).abs() < 0.02, "p(1) = {p}");
}

#[test]
fn top_k_and_top_p_cut_the_candidates() {
    let logits = [1.0, 4.0, 3.9, 3.8, -2.0];
    let top2 = Sampling { temperature: 1.0, top_k: 2, top_p: 1.0, seed: 11 };
    let seen = draws(top2, &logits, 500);
    assert!(seen.iter().all(|t| [1, 2].contains(t)) && seen.contains(&1) && seen.contains(&2));
    let top1 = Sampling { top_k: 1, ..top2 };
    assert!(draws(top1, &logits, 50).iter().all(|&t| t == 1));
    let nucleus = Sampling { temperature: 1.0, top_k: 0, top_p: 0.01, seed: 3 };
    assert!(draws(nucleus, &logits, 50).iter().all(|&t| t == 1));
}

#[test]
fn bad_settings_and_logits_are_errors() {
    for bad in [
        Sampling { temperature: -1.0, ..Sampling::default() },
        Sampling { temperature: f32::NAN, ..Sampling::default() },
        Sampling { top_p: 0.0, ..Sampling::default() },
        Sampling { top_p: 1.5, ..Sampling::default() },
    ] {
        assert!(matches!(Sampler::new(bad), Err(HostError::Sampling { .. })), "{bad:?}");
    }
    let err = greedy(&[]).unwrap_err();
    assert_eq!(err.to_string(), "sampling: no logits to sample from; pass a row of the step's logits");
    let mut sampler = Sampler::new(warm(1)).unwrap();
    assert!(matches!(sampler.sample(&[0.0, f32::NAN]), Err(HostError::Sampling { .. })));
}
