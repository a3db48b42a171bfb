//! The continuous-batching scheduler on its own (no engine): admission, the queue's limit,
//! chunks under the token budget, the rows each slot feeds, stopping, cancellation, and the
//! times it reports.

use rdu_host::schedule::{
    percentile, prefilling, Config, Event, Finish, Next, Refusal, Request, Scheduler, Step, PREFILLING,
};

fn cfg(slots: usize, chunk: Option<usize>, budget: usize, queue: usize) -> Config {
    Config { slots, ctx: 64, chunk, budget, queue, prefilling: 2 }
}

fn req(id: u64, prompt: usize, max_tokens: usize) -> Request {
    Request { id, prompt: (0..prompt as u32).map(|t| 100 + t).collect(), max_tokens }
}

/// Runs steps until idle, every sampling point answered with `token(id)`; returns each step and
/// every event, the clock advancing 1 s a step.
fn drain(s: &mut Scheduler, token: impl Fn(u64) -> u32, mut now: f64) -> (Vec<Step>, Vec<Event>) {
    let (mut steps, mut events) = (Vec::new(), Vec::new());
    while let Some(step) = s.plan(now) {
        let ids: Vec<u64> = step
            .chunks
            .iter()
            .filter(|c| c.samples)
            .map(|c| c.id)
            .chain(step.rows.iter().filter(|r| r.samples).filter_map(|r| r.id))
            .collect();
        assert_eq!(ids.len(), step.points());
        let outcomes: Vec<Next> = ids.iter().map(|&id| Next::Token(token(id))).collect();
        now += 1.0;
        events.extend(s.complete(&step, &outcomes, now));
        steps.push(step);
        assert!(steps.len() < 1000, "the scheduler never went idle");
    }
    (steps, events)
}

fn done(events: &[Event], id: u64) -> (Finish, rdu_host::schedule::Timing) {
    events
        .iter()
        .find_map(|e| match e {
            Event::Done { id: i, finish, timing } if *i == id => Some((*finish, timing.clone())),
            _ => None,
        })
        .unwrap_or_else(|| panic!("request {id} never finished"))
}

fn tokens(events: &[Event], id: u64) -> Vec<u32> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Token { id: i, token } if *i == id => Some(*token),
            _ => None,
        })
        .collect()
}

#[test]
fn refuses_bad_requests_and_a_full_queue() {
    let mut s = Scheduler::new(cfg(1, None, 4, 2)).expect("config");
    assert_eq!(s.submit(req(1, 0, 4), 0.0), Err(Refusal::EmptyPrompt));
    assert_eq!(s.submit(req(1, 65, 4), 0.0), Err(Refusal::TooLong { prompt: 65, ctx: 64 }));
    assert_eq!(s.submit(req(1, 3, 0), 0.0), Err(Refusal::NothingToGenerate));
    s.submit(req(1, 3, 4), 0.0).expect("first");
    assert_eq!(s.submit(req(1, 3, 4), 0.0), Err(Refusal::DuplicateId));
    s.submit(req(2, 3, 4), 0.0).expect("second");
    assert_eq!(s.submit(req(3, 3, 4), 0.0), Err(Refusal::QueueFull { queue: 2 }));
    assert_eq!(s.waiting(), 2);
    // A configuration that cannot make progress is refused, naming the field.
    let err = Scheduler::new(cfg(4, Some(8), 8, 1)).expect_err("budget too small");
    assert!(err.contains("budget"), "{err}");
    assert!(Scheduler::new(cfg(0, None, 1, 1)).expect_err("no slots").contains("slots"));
}

#[test]
fn rows_feed_the_prompt_then_the_generated_tokens() {
    let mut s = Scheduler::new(cfg(2, None, 2, 4)).expect("config");
    s.submit(req(7, 3, 3), 0.0).expect("submit");
    let (steps, events) = drain(&mut s, |_| 5, 0.0);
    // 3 prompt rows, then the first two generated tokens fed back (the last is never fed).
    let fed: Vec<(u32, usize, bool)> =
        steps.iter().map(|st| (st.rows[0].token, st.rows[0].pos, st.rows[0].samples)).collect();
    assert_eq!(fed, vec![(100, 0, false), (101, 1, false), (102, 2, true), (5, 3, true), (5, 4, true)]);
    assert_eq!(steps[0].resets, vec![0]);
    assert!(steps[0].parks.is_empty(), "a prompt shorter than a chunk stays in the decode rows");
    // The idle slot steps throwaway rows.
    assert!(steps.iter().all(|st| st.rows[1].id.is_none()));
    assert_eq!(tokens(&events, 7), vec![5, 5, 5]);
    let (finish, timing) = done(&events, 7);
    assert_eq!(finish, Finish::Length);
    assert_eq!((timing.prompt_tokens, timing.completion_tokens), (3, 3));
    // Arrived at 0, first token at the end of step 3, then one a step.
    assert_eq!(timing.ttft(), Some(3.0));
    assert_eq!(timing.tpot(), Some(1.0));
}

#[test]
fn whole_chunks_go_first_and_the_tail_through_rows() {
    // A prompt of 10 with chunks of 4: chunks at 0 and 4, then the tail 8, 9 as rows.
    let mut s = Scheduler::new(cfg(2, Some(4), 6, 4)).expect("config");
    s.submit(req(1, 10, 2), 0.0).expect("submit");
    let (steps, events) = drain(&mut s, |_| 9, 0.0);
    let chunks: Vec<(usize, bool, bool, bool)> =
        steps.iter().flat_map(|st| st.chunks.iter().map(|c| (c.pos, c.first, c.last, c.samples))).collect();
    // The budget (6, nothing decoding yet) holds one chunk a step.
    assert_eq!(chunks, vec![(0, true, false, false), (4, false, true, false)]);
    assert_eq!(steps[0].parks, vec![0], "its states leave the decode rows until its last chunk");
    assert!(steps[0].rows.is_empty() && steps[1].rows.is_empty(), "no batched step while nothing decodes");
    let rows: Vec<(u32, usize)> = steps[2..].iter().map(|st| (st.rows[0].token, st.rows[0].pos)).collect();
    assert_eq!(rows, vec![(108, 8), (109, 9), (9, 10)]);
    assert_eq!(tokens(&events, 1), vec![9, 9]);
    // A prompt of exactly two chunks samples its first token off the last chunk.
    let mut s = Scheduler::new(cfg(1, Some(4), 12, 4)).expect("config");
    s.submit(req(2, 8, 1), 0.0).expect("submit");
    let (steps, events) = drain(&mut s, |_| 3, 0.0);
    assert_eq!(steps.len(), 1, "a budget of 12 takes both chunks in one step");
    assert!(steps[0].chunks[1].samples && steps[0].chunks[1].last);
    assert_eq!(tokens(&events, 2), vec![3]);
}

#[test]
fn chunks_share_the_budget_with_decoding_rows_oldest_first() {
    // Two slots decoding short prompts, then two long prompts: the budget of 2 rows + 4 lets one
    // chunk through a step while both slots decode, and the older long prompt goes first.
    let mut s = Scheduler::new(cfg(4, Some(4), 8, 8)).expect("config");
    s.submit(req(1, 1, 20), 0.0).expect("1");
    s.submit(req(2, 1, 20), 0.0).expect("2");
    let first = s.plan(0.0).expect("a step");
    let _ = s.complete(&first, &[Next::Token(1), Next::Token(1)], 1.0);
    s.submit(req(3, 12, 1), 1.0).expect("3");
    s.submit(req(4, 12, 1), 1.0).expect("4");
    let step = s.plan(1.0).expect("a step");
    let who: Vec<(u64, usize)> = step.chunks.iter().map(|c| (c.id, c.pos)).collect();
    assert_eq!(who, vec![(3, 0)], "6 tokens left after two decoding rows: one chunk, the older request's");
    // Both are set aside at admission, the one without a chunk yet too.
    assert_eq!(step.parks, vec![2, 3]);
    assert_eq!(step.tokens(), 2 + 4);
    assert!(step.tokens() <= s.config().budget);
    // With nothing else decoding the budget of 8 would take two chunks: of the same request.
    let mut s = Scheduler::new(cfg(4, Some(4), 8, 8)).expect("config");
    s.submit(req(3, 12, 1), 0.0).expect("3");
    s.submit(req(4, 12, 1), 0.0).expect("4");
    let step = s.plan(0.0).expect("a step");
    let who: Vec<(u64, usize)> = step.chunks.iter().map(|c| (c.id, c.pos)).collect();
    assert_eq!(who, vec![(3, 0), (3, 4)]);
}

#[test]
fn at_most_prefilling_sequences_are_in_their_chunk_phase() {
    // Four slots, two may prefill: the third long prompt waits, and the short one behind it
    // waits its turn (first come, first served).
    let mut s = Scheduler::new(cfg(4, Some(4), 8, 8)).expect("config");
    for id in 1..=3 {
        s.submit(req(id, 12, 1), 0.0).expect("long");
    }
    s.submit(req(4, 2, 1), 0.0).expect("short");
    let step = s.plan(0.0).expect("a step");
    assert_eq!(step.resets, vec![0, 1]);
    assert_eq!(step.parks, vec![0, 1]);
    assert_eq!(s.waiting(), 2);
    // Once the first finishes its chunks, the third takes a slot, and the short one with it.
    let mut now = 0.0;
    let mut step = step;
    loop {
        let outcomes = vec![Next::Token(1); step.points()];
        now += 1.0;
        let _ = s.complete(&step, &outcomes, now);
        step = s.plan(now).expect("a step");
        if !step.resets.is_empty() {
            break;
        }
        assert_eq!(s.waiting(), 2, "nothing is admitted while two prefill");
    }
    assert_eq!(step.parks.len(), 1, "the third long prompt is parked when it is admitted");
    assert_eq!(step.resets.len(), 2, "and the short one right behind it");
    assert_eq!(s.waiting(), 0);
}

#[test]
fn a_budget_of_several_chunks_prefills_as_many_sequences_at_once() {
    // The default budget (a chunk beside every row) keeps `PREFILLING`; each further chunk the
    // budget holds lets one more sequence into its chunk phase; without chunks, the floor.
    assert_eq!(prefilling(16, Some(32), 16 + 32), PREFILLING);
    assert_eq!(prefilling(16, Some(32), 16 + 64), 3);
    assert_eq!(prefilling(16, Some(32), 16 + 95), 3);
    assert_eq!(prefilling(16, Some(32), 16 + 96), 4);
    assert_eq!(prefilling(16, None, 64), PREFILLING);
    // Four one-chunk prompts at a 4-slot scheduler whose budget holds two chunks beside the
    // rows: three sequences enter their chunk phase, and with nothing decoding yet the budget
    // holds all three chunks in the first step (the default budget's `PREFILLING` would run two).
    let budget = 4 + 2 * 4;
    let mut s = Scheduler::new(Config {
        slots: 4,
        ctx: 64,
        chunk: Some(4),
        budget,
        queue: 8,
        prefilling: prefilling(4, Some(4), budget),
    })
    .expect("config");
    for id in 1..=4 {
        s.submit(req(id, 5, 1), 0.0).expect("prompt");
    }
    let step = s.plan(0.0).expect("a step");
    assert_eq!(step.parks, vec![0, 1, 2], "three start with chunks");
    assert_eq!(step.chunks.len(), 3, "each prefilling sequence's chunk fits the budget");
    assert_eq!(s.waiting(), 1);
}

#[test]
fn a_stop_ends_a_sequence_and_frees_its_slot_for_the_next() {
    let mut s = Scheduler::new(cfg(1, None, 1, 4)).expect("config");
    s.submit(req(1, 2, 10), 0.0).expect("1");
    s.submit(req(2, 2, 10), 0.0).expect("2");
    let mut now = 0.0;
    let mut events = Vec::new();
    let mut generated = 0;
    while let Some(step) = s.plan(now) {
        let outcomes: Vec<Next> = (0..step.points())
            .map(|_| {
                generated += 1;
                // Request 1: two tokens, then an end-of-sequence; request 2: a stop string on its third.
                match generated {
                    3 => Next::End,
                    6 => Next::Last(42),
                    _ => Next::Token(generated),
                }
            })
            .collect();
        now += 1.0;
        events.extend(s.complete(&step, &outcomes, now));
    }
    assert_eq!(tokens(&events, 1), vec![1, 2]);
    assert_eq!(done(&events, 1).0, Finish::Stop);
    assert_eq!(tokens(&events, 2), vec![4, 5, 42]);
    assert_eq!(done(&events, 2).0, Finish::Stop);
    // Request 2 waited for request 1's slot.
    let t2 = done(&events, 2).1;
    assert_eq!(t2.queued_for(), Some(4.0));
}

#[test]
fn a_cancelled_request_leaves_its_slot_at_the_next_step() {
    let mut s = Scheduler::new(cfg(1, Some(4), 5, 4)).expect("config");
    s.submit(req(1, 9, 5), 0.0).expect("1");
    s.submit(req(2, 3, 1), 0.0).expect("2");
    s.submit(req(3, 3, 1), 0.0).expect("3");
    let step = s.plan(0.0).expect("a step");
    assert_eq!(step.chunks[0].id, 1);
    let _ = s.complete(&step, &[], 1.0);
    s.cancel(1);
    s.cancel(3);
    let step = s.plan(1.0).expect("a step");
    assert_eq!(step.resets, vec![0], "request 2 takes the freed slot in the very next step");
    assert_eq!(step.rows[0].id, Some(2));
    let events = s.complete(&step, &[], 2.0);
    let cancelled: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Done { id, finish: Finish::Cancelled, .. } => Some(*id),
            _ => None,
        })
        .collect();
    assert_eq!(cancelled, vec![1, 3]);
    assert_eq!(s.waiting(), 0);
}

#[test]
fn the_context_bounds_generation() {
    let mut s =
        Scheduler::new(Config { slots: 1, ctx: 6, chunk: None, budget: 1, queue: 1, prefilling: 1 }).expect("config");
    s.submit(req(1, 4, 100), 0.0).expect("submit");
    let (steps, events) = drain(&mut s, |_| 1, 0.0);
    // Positions 0..5 hold the prompt and two generated tokens; a third is sampled off position 5.
    assert_eq!(steps.last().expect("steps").rows[0].pos, 5);
    assert_eq!(tokens(&events, 1).len(), 3);
    assert_eq!(done(&events, 1).0, Finish::Length);
}

#[test]
fn percentiles_are_nearest_rank() {
    let v: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile(&v, 50.0), Some(50.0));
    assert_eq!(percentile(&v, 99.0), Some(99.0));
    assert_eq!(percentile(&v, 100.0), Some(100.0));
    assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
    assert_eq!(percentile(&[], 50.0), None);
}
