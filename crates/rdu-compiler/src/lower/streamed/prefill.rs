//! `lower_prefill_streamed`: chunked prefill over the decode step's own state.
//!
//! A step takes `chunk` tokens of one sequence: the chunk's embedding lookups stacked
//! (`tok i32[chunk]`), one program per layer kind taking the rows in order, each at its own
//! position (`pos i32[chunk]`), and a head reading the last row (logits `[1, vocab]`). Every
//! layer declares exactly the states of the decode cut with the same `ctx` — same names, same
//! shapes — so a decode bundle continues from the state a prefill bundle leaves. Attention
//! reads the positions before the chunk from its cache and the chunk's own positions from the
//! chunk's new rows (`attend(q, K, V, pos, k, v)`), then writes the rows: a sliding-window
//! ring of `window` slots is never overwritten by rows the chunk still attends to.
//!
//! Every kind is certified like any other, numerically at its real shapes: all `chunk` rows,
//! at the last positions of the context, so the chunk reads the cache before it and its rows
//! wrap the rings.
//!
//! A prompt whose length is not a multiple of `chunk` runs its whole chunks through the
//! prefill bundle and the remaining rows through the decode bundle (the host hands the state
//! over, `rdu_host::Host::take_states` / `put_states`).

use super::deploy::{lower_streamed, LowerOptions, StreamedModel, StreamedReject};
use crate::model::spec::{Cut, ModelSpec};

/// Lower `spec`'s PREFILL as an SN50 deployment: `chunk` tokens of one sequence per step over
/// the decode state of `ctx` positions; the kinds are the decode cut's kinds (same layers).
pub fn lower_prefill_streamed(
    spec: &ModelSpec,
    chunk: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Result<StreamedModel, StreamedReject> {
    if chunk == 0 {
        return Err(StreamedReject::Invalid("the chunk must hold at least 1 token".into()));
    }
    if ctx == 0 {
        return Err(StreamedReject::Invalid("the context must hold at least 1 position".into()));
    }
    if chunk > ctx {
        return Err(StreamedReject::Invalid(format!(
            "a chunk of {chunk} tokens does not fit a context of {ctx} positions; use --chunk {ctx} or less"
        )));
    }
    lower_streamed(spec, Cut::Prefill { chunk, ctx }, opts)
}
