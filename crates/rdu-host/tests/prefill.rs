//! Several rows a step (a prefill chunk): positions scalar or per row, rows in order, and a chunk may not run past the context.

mod common;

use common::bundle::{bundle_rows, write, Rows};
use common::*;
use rdu_host::{Host, HostError, WeightsSource};

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
                assert_close(&got[r * VOCAB..(r + 1) * VOCAB], &want[pos + r], 1e-5, &what);
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
