//! What a verify step (`Cut::Verify`) writes beyond a decode step: how each sequence's state is
//! left so that the next step can continue after ANY of its rows, since only the host learns
//! how many drafted tokens were accepted.
//!
//! - A full KV or latent cache needs nothing: the rows are written at their positions, and the
//!   next step's rows overwrite those past the last accepted one before anything reads them.
//! - A ring cache of `window` slots must not be written with rows that may be rejected (they
//!   would overwrite positions the window still needs). The step writes its first row — the
//!   last accepted token — and keeps its drafted rows in a pending state (`Kp`); the next step
//!   first writes them at the positions its `pend` input gives: an accepted row's own, and for
//!   a rejected one the next step's first position, a slot nothing reads from the cache during
//!   that step and that its first row overwrites.
//! - A recurrent state (DeltaNet's conv window and delta-rule state) is stepped row by row as
//!   decode steps step it — each row from the state the one before stored, rounded as a decode
//!   step stores it — and the state after every row but the last is kept (`Ch`, `Sh{i}r`), the
//!   last's being the state itself; the next step first resumes from the row its `resume` input
//!   names (`draft`: the state as it is — after the last row, or as a prefill or decode step,
//!   or a new sequence, left it). Every state is written once a step, so certification's bf16
//!   tie rule (against the simulator's final states) breaks every tie of every write.
//!
//! Everything is statements of the program, so certification checks it like the rest.

use super::writer::Writer;
use super::{LayerCtx, Sequence};
use crate::graph::Op;
use crate::model::spec::Mixer;

/// Declares each sequence's `resume` (recurrent layers) and `pend` (ring caches) inputs of a
/// verify step; nothing for any other cut.
pub(super) fn declare_inputs(w: &mut Writer<'_>, ctx: &LayerCtx<'_>) {
    let Some(draft) = ctx.verify() else { return };
    let recurrent = matches!(ctx.layer.mixer, Mixer::GatedDeltaNet { .. });
    for seq in ctx.sequences() {
        if recurrent {
            w.input(&seq.resume, "i32", &[1], None);
        } else if ctx.ring() {
            w.input(&seq.pend, "i32", &[draft], None);
        }
    }
}

/// The name of row `row`'s part of `base` (`vq3r`): a base name never ends in a digit.
pub(super) fn row_base(base: &str, row: usize) -> String {
    format!("{base}{row}r")
}

/// A ring cache of a verify step: the cache, its pending drafted rows, this step's new rows
/// (`[draft + 1, ...]`), and the bases of the row-0 names it binds.
pub(super) struct Ring<'n> {
    pub cache: &'n str,
    pub pending: &'n str,
    pub rows: &'n str,
    pub first: &'n str,
}

/// Writes the previous step's pending rows into their caches at `seq.pend` (before anything
/// reads the caches).
pub(super) fn flush(w: &mut Writer<'_>, seq: &Sequence, rings: &[Ring<'_>]) {
    for r in rings {
        w.update(r.cache, Op::CachePut, &[r.cache, r.pending, &seq.pend]);
    }
}

/// Writes this step's first row into each cache at its position and keeps the drafted rows
/// pending (after the step has attended).
pub(super) fn hold(w: &mut Writer<'_>, ctx: &LayerCtx<'_>, pos: &str, rings: &[Ring<'_>]) {
    let draft = ctx.verify().expect("a verify step");
    let first_row = Op::Slice { axis: 0, start: 0, len: 1 };
    let p0 = w.op("pfv", first_row.clone(), &[pos]);
    for r in rings {
        let first = w.op(r.first, first_row.clone(), &[r.rows]);
        w.update(r.cache, Op::CachePut, &[r.cache, &first, &p0]);
        w.update(r.pending, Op::Slice { axis: 0, start: 1, len: draft }, &[r.rows]);
    }
}

/// The state (of `shape`, one chip's) a verify step resumes from: the state after the row
/// `seq.resume` names — row `j < draft` of `history` (the states after rows `0..draft`, each a
/// `[n, ∏shape]` piece of it in order), or `state` itself for `draft` (the state after the last
/// row, or as it is). The pieces and the state stacked, one row looked up (`embed`), as a fresh
/// value: the state is written once a step, after its last row. `base` names the temporaries.
pub(super) fn resume(
    w: &mut Writer<'_>,
    seq: &Sequence,
    base: &str,
    state: &str,
    history: &[String],
    shape: &[usize],
) -> String {
    let flat: usize = shape.iter().product();
    let sf = w.op(&format!("{base}s"), Op::Reshape { shape: vec![1, flat] }, &[state]);
    let mut rows: Vec<&str> = history.iter().map(String::as_str).collect();
    rows.push(&sf);
    let table = w.op(&format!("{base}t"), Op::Concat { axis: 0 }, &rows);
    let row = w.op(&format!("{base}r"), Op::Embed, &[&seq.resume, &table]);
    w.op(base, Op::Reshape { shape: shape.to_vec() }, &[&row])
}

/// `state` as one flat row (`[1, ∏shape]`), the snapshot of row `row` named from `base`.
pub(super) fn snapshot(w: &mut Writer<'_>, base: &str, row: usize, state: &str, shape: &[usize]) -> String {
    let flat: usize = shape.iter().product();
    w.op(&row_base(base, row), Op::Reshape { shape: vec![1, flat] }, &[state])
}

/// `history <- ` the snapshots stacked (`[snapshots, ..shape]`).
pub(super) fn keep(w: &mut Writer<'_>, base: &str, history: &str, snapshots: &[String], shape: &[usize]) {
    let refs: Vec<&str> = snapshots.iter().map(String::as_str).collect();
    let stacked = match refs.as_slice() {
        [one] => one.to_string(),
        _ => w.op(base, Op::Concat { axis: 0 }, &refs),
    };
    let mut full = vec![snapshots.len()];
    full.extend_from_slice(shape);
    w.update(history, Op::Reshape { shape: full }, &[&stacked]);
}
