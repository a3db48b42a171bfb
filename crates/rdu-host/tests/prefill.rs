//! Several rows a step (a prefill chunk): positions scalar or per row, rows in order, and a chunk may not run past the context.

use crate::common;

use common::bundle::{bundle_rows, write, Rows, DECODE};
use common::*;
use rdu_host::{Host, HostError, Session, WeightsSource};
use rdu_testkit::Tolerance;

const TOKENS: [u32; 4] = [3, 15, 0, 7];

fn host(tmp: &std::path::Path, rows: Rows) -> Host {
    let dir = write(&bundle_rows(Variant::Dense, rows), tmp, "bundle");
    Host::load(&dir, &WeightsSource::Seeded { seed: 5, unit_offset: false }, &mut |_, _, _| {}).unwrap()
}

#[test]
fn chunks_of_two_give_the_token_by_token_logits() {
    let want = reference(&seeded_values(5), &TOKENS);
    for per_row_pos in [false, true] {
        let tmp = tempfile::tempdir().unwrap();
        let mut host = host(tmp.path(), Rows { n: 2, per_row_pos });
        assert_eq!(host.rows(), 2);
        for pos in [0, 2] {
            let logits = host.step(&TOKENS[pos..pos + 2], pos).unwrap().logits;
            assert_eq!(logits.shape, [2, VOCAB]);
            let got = logits.as_f32().unwrap();
            for r in 0..2 {
                let what = format!("row {r} of the chunk at {pos} (per-row positions: {per_row_pos})");
                Tolerance::abs(1e-5).assert(&what, &got[r * VOCAB..(r + 1) * VOCAB], &want[pos + r]);
            }
        }
    }
}

#[test]
fn a_chunk_running_past_the_context_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = host(tmp.path(), Rows { n: 2, per_row_pos: false });
    let err = host.step(&[1, 2], CTX - 1).unwrap_err();
    assert!(matches!(err, HostError::RowsPastContext { pos: 3, end: 5, ctx: 4 }), "{err:?}");
    assert_eq!(err.to_string(), "positions 3..5 run past the context of 4 positions; lower with a larger --ctx");
    assert!(matches!(host.step(&[1, 2], CTX), Err(HostError::PastContext { .. })));
    // Nothing ran: the states are still zero.
    assert!(host.states().names().all(|n| host.state(n).unwrap().as_f32().unwrap().iter().all(|v| *v == 0.0)));
}

#[test]
fn a_session_decodes_on_from_the_state_a_chunk_left() {
    let want = reference(&seeded_values(5), &TOKENS);
    let tmp = tempfile::tempdir().unwrap();
    let prefill = host(tmp.path(), Rows { n: 2, per_row_pos: true });
    let dir = write(&bundle_rows(Variant::Dense, DECODE), tmp.path(), "decode");
    let weights = WeightsSource::Seeded { seed: 5, unit_offset: false };
    let decode = Host::load_sharing(&dir, &prefill, &weights, &mut |_, _, _| panic!("the weights are shared")).unwrap();
    let mut session = Session::new(prefill, decode).unwrap();
    assert_eq!((session.chunk(), session.ctx()), (2, CTX));
    let chunk = session.prefill(&TOKENS[..2], 0).unwrap().logits;
    Tolerance::abs(1e-5).assert("the chunk's last row", &chunk.as_f32().unwrap()[VOCAB..], &want[1]);
    for pos in 2..4 {
        let got = session.decode(TOKENS[pos], pos).unwrap().logits;
        Tolerance::abs(1e-5).assert(&format!("decoded position {pos}"), got.as_f32().unwrap(), &want[pos]);
    }
    // The states move back for another chunk: a new sequence from position 0 gives the same rows.
    session.reset();
    let again = session.prefill(&TOKENS[..2], 0).unwrap().logits;
    assert_eq!(again, chunk);
}

#[test]
fn states_handed_away_are_not_stepped_until_they_come_back() {
    let tmp = tempfile::tempdir().unwrap();
    let mut host = host(tmp.path(), DECODE);
    host.step(&[3], 0).unwrap();
    let states = host.take_states();
    assert!(!host.states().is_held());
    let err = host.step(&[15], 1).unwrap_err();
    assert!(matches!(err, HostError::StatesMoved), "{err:?}");
    assert!(err.to_string().starts_with("this host's states were handed to another host"), "{err}");
    host.put_states(states).unwrap();
    host.step(&[15], 1).unwrap();
    // A store handed away twice holds nothing: refused.
    let _held = host.take_states();
    let empty = host.take_states();
    let err = host.put_states(empty).unwrap_err();
    assert!(matches!(err, HostError::StatesEmpty), "{err:?}");
}
