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
//! A prompt whose length is not a multiple of `chunk` runs its whole chunks through the
//! prefill bundle and the remaining rows through the decode bundle (the host hands the state
//! over, `rdu_host::Host::take_states` / `put_states`).

use super::deploy::{canonical, lower_streamed, LowerOptions, Reduced, StreamedModel, StreamedReject};
use super::kinds::Storage;
use crate::model::author::source_of;
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

/// A prefill kind is certified numerically on at most this many rows of its chunk.
///
/// Every row of a chunk runs the same kernels with the same tiles (products and attention are
/// tiled along their output columns and heads, never along rows; `lower_part` checks that the
/// reduced program's kernels, arguments and tiles are the real program's, and certifies the
/// real program whole otherwise). Numbers at 512 rows cost 512 decode steps of reference
/// interpretation per kind — measured 325 s for Llama-3.1-8B's one kind on 2 cores (9.6 s on 8
/// rows), and DeepSeek-V2's 128-head latent attention alone is about 3·10¹¹ multiply-adds per
/// kind — for no kernel the reduced chunk does not run. The rows are the chunk's last positions
/// of the context, so they read the cache before them and wrap the rings.
pub const CERTIFY_CHUNK_ROWS: usize = 8;

/// The reduced form certification runs for a kind of a long prefill chunk: the same layer
/// (`rep`), authored for a chunk of [`CERTIFY_CHUNK_ROWS`] rows over the same context; `None`
/// for any other cut or a chunk that is short already.
pub(super) fn reduced_kind(
    spec: &ModelSpec,
    cut: Cut,
    storage: &Storage,
    rep: usize,
    kind: &str,
) -> Result<Option<Reduced>, StreamedReject> {
    let Cut::Prefill { chunk, ctx } = cut else { return Ok(None) };
    if chunk <= CERTIFY_CHUNK_ROWS {
        return Ok(None);
    }
    let small = Cut::Prefill { chunk: CERTIFY_CHUNK_ROWS, ctx };
    let source = canonical(&source_of(spec, rep, small, storage), rep, kind, small)?;
    Ok(Some(Reduced {
        source,
        note: format!(
            "numbers checked on {CERTIFY_CHUNK_ROWS} of the {chunk} rows (the same kernels, arguments and tiles)"
        ),
        same_kernels: true,
    }))
}
