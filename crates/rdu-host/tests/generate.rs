//! `generate`: what is fed at each step, what is kept and when it stops, with a stepper whose
//! greedy next token is always the last token fed plus one (mod 4).

use rdu_host::{generate, Feed, Generate, HostError, Observer, Sampling, Stepper, Stepping};

const VOCAB: u32 = 4;

/// One-hot logits at `token + 1`, and every feed recorded.
struct Counting {
    stepping: Stepping,
    fed: Vec<String>,
}

fn row(token: u32) -> Vec<f32> {
    (0..VOCAB).map(|i| if i == (token + 1) % VOCAB { 1.0 } else { 0.0 }).collect()
}

impl Stepper for Counting {
    type Error = HostError;

    fn stepping(&self) -> Stepping {
        self.stepping
    }

    fn logits(&mut self, feed: Feed<'_>) -> Result<Vec<Vec<f32>>, HostError> {
        self.fed.push(format!("{:?}", feed));
        Ok(match feed {
            Feed::Whole(t) | Feed::Tokens(t, _) => t.iter().map(|&t| row(t)).collect(),
            Feed::Chunk(t, _) => vec![row(*t.last().expect("a chunk"))],
        })
    }
}

#[derive(Default)]
struct Seen {
    prompts_done: Vec<usize>,
    tokens: Vec<(usize, u32)>,
}

impl Observer for Seen {
    fn prompt_done(&mut self, seq: usize) {
        self.prompts_done.push(seq);
    }

    fn token(&mut self, seq: usize, token: u32) {
        self.tokens.push((seq, token));
    }
}

fn how(n: usize, stop: &[u32], keep_all: bool) -> Generate {
    Generate { n, stop: stop.to_vec(), sampling: Sampling::default(), keep_all }
}

fn stepper(stepping: Stepping) -> Counting {
    Counting { stepping, fed: Vec::new() }
}

#[test]
fn decode_feeds_the_prompt_then_each_token_but_the_last() {
    let mut s = stepper(Stepping::Decode { chunk: None });
    let mut seen = Seen::default();
    let out = generate(&mut s, vec![vec![0, 1]], &how(3, &[], false), &mut seen).unwrap().remove(0);
    assert_eq!(out.generated, [2, 3, 0]);
    assert_eq!(out.positions, [0, 1, 2, 3]);
    assert_eq!(out.logits, [row(3)], "only the last row is kept");
    assert_eq!(s.fed, ["Tokens([0], 0)", "Tokens([1], 1)", "Tokens([2], 2)", "Tokens([3], 3)"]);
    assert_eq!(seen.prompts_done, [0]);
    assert_eq!(seen.tokens, [(0, 2), (0, 3), (0, 0)]);
}

#[test]
fn a_stop_token_ends_the_sequence_and_is_not_kept() {
    let mut s = stepper(Stepping::Decode { chunk: None });
    let out = generate(&mut s, vec![vec![1]], &how(5, &[3], true), &mut ()).unwrap().remove(0);
    assert_eq!(out.generated, [2]);
    assert_eq!(out.positions, [0, 1]);
    assert_eq!(out.logits, [row(1), row(2)], "every row is kept");
}

#[test]
fn whole_chunks_of_the_prompt_go_first_the_rest_token_by_token() {
    let mut s = stepper(Stepping::Decode { chunk: Some(2) });
    let out = generate(&mut s, vec![vec![0, 1, 2, 3, 0]], &how(2, &[], true), &mut ()).unwrap().remove(0);
    assert_eq!(s.fed, ["Chunk([0, 1], 0)", "Chunk([2, 3], 2)", "Tokens([0], 4)", "Tokens([1], 5)"]);
    assert_eq!(out.generated, [1, 2]);
    assert_eq!(out.positions, [1, 3, 4, 5], "a chunk's row is its last position");
}

#[test]
fn sequences_step_together_and_a_finished_one_repeats_its_last_token() {
    let mut s = stepper(Stepping::Decode { chunk: None });
    let mut seen = Seen::default();
    let out = generate(&mut s, vec![vec![0, 1, 2], vec![3]], &how(2, &[], true), &mut seen).unwrap();
    assert_eq!(s.fed, ["Tokens([0, 3], 0)", "Tokens([1, 0], 1)", "Tokens([2, 1], 2)", "Tokens([3, 1], 3)"]);
    assert_eq!(
        (out[0].generated.as_slice(), out[0].positions.as_slice()),
        ([3, 0].as_slice(), [0, 1, 2, 3].as_slice())
    );
    assert_eq!((out[1].generated.as_slice(), out[1].positions.as_slice()), ([0, 1].as_slice(), [0, 1].as_slice()));
    assert_eq!(seen.prompts_done, [1, 0], "each sequence's prompt is done at its own length");
}

#[test]
fn forward_feeds_the_whole_sequence_and_keeps_each_new_row() {
    let mut s = stepper(Stepping::Forward);
    let mut seen = Seen::default();
    let out = generate(&mut s, vec![vec![0, 1]], &how(2, &[], true), &mut seen).unwrap().remove(0);
    assert_eq!(s.fed, ["Whole([0, 1])", "Whole([0, 1, 2])"]);
    assert_eq!(out.generated, [2, 3]);
    assert_eq!(out.positions, [0, 1, 2]);
    assert_eq!(out.logits, [row(0), row(1), row(2)]);
    assert_eq!(seen.prompts_done, [0]);
}

#[test]
fn no_tokens_to_generate_runs_the_prompt_only() {
    let mut s = stepper(Stepping::Decode { chunk: None });
    let out = generate(&mut s, vec![vec![2, 2]], &how(0, &[], false), &mut ()).unwrap().remove(0);
    assert!(out.generated.is_empty());
    assert_eq!(out.positions, [0, 1]);
}
