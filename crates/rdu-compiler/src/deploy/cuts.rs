//! The cuts by name: each `lower_*_streamed` is [`deploy`] of its `Cut`, documented here with
//! what the cut's bundle serves.

use super::deploy;
use crate::deploy::model::{LowerOptions, StreamedModel, StreamedReject};
use crate::model::spec::{Cut, ModelSpec};

/// What every cut's lowering returns.
type Deployed = Result<StreamedModel, StreamedReject>;

/// Lower `spec` as one program per layer kind plus the embedding and head, for one forward
/// step over `seq` tokens, and bind every layer to its kind.
pub fn lower_forward_streamed(spec: &ModelSpec, seq: usize, opts: LowerOptions<'_>) -> Deployed {
    deploy(spec, &Cut::Forward { seq }, opts)
}

/// Lower `spec` as an SN50 DECODE deployment: the embedding lookup, one program per layer
/// kind in which every attention layer appends to and attends over its KV cache of `ctx`
/// positions, and a head. `tok` and `pos` are runtime inputs, so the bundle serves every step.
pub fn lower_decode_streamed(spec: &ModelSpec, ctx: usize, opts: LowerOptions<'_>) -> Deployed {
    deploy(spec, &Cut::Decode { ctx }, opts)
}

/// Lower `spec` as an SN50 BATCHED decode deployment: `batch` sequences per step, each with
/// its own token, position and carried state (`_s{b}`), every weight read once for all of
/// them. The same three kinds of program as [`lower_decode_streamed`] — the embedding
/// lookups, one program per layer kind, the head — over the stacked `batch × d` hidden
/// states (`X`, `bxo{l}`); the token ids `toks` and each sequence's `pos_s{b}` are runtime inputs.
pub fn lower_batched_decode_streamed(spec: &ModelSpec, batch: usize, ctx: usize, opts: LowerOptions<'_>) -> Deployed {
    deploy(spec, &Cut::Batched { batch, ctx }, opts)
}

/// Lower `spec` as a TENSOR-PARALLEL decode deployment over `tp` chips against a cache of
/// `ctx` positions (DESIGN §8). `tp` must be a width the model admits with its storage
/// (`fit::admits_tp`); otherwise the refusal, one line naming the dimension, is
/// `StreamedReject::Invalid`.
///
/// The embedding is the decode program, on the replicated spine; each layer kind is ONE
/// program that every chip runs on its own slices (its heads, its FFN and expert columns),
/// with an all-reduce after the mixer and after the FFN, and carries its chips' slices
/// (`Source::slices`, the spatial program's `tp`), so the manifest says which rows or columns
/// of which checkpoint tensor each chip loads. The head is VOCABULARY-PARALLEL — each chip its
/// run of the output projection's rows, computing its run of the logits, which the host joins
/// in chip order. A kind and the head are certified by running them on all their chips
/// against the reference interpreter of the unsplit decode program (`certify::certify_tp`),
/// gathered results against the unsplit program's.
pub fn lower_tp_decode_streamed(spec: &ModelSpec, tp: usize, ctx: usize, opts: LowerOptions<'_>) -> Deployed {
    deploy(spec, &Cut::Tp { tp, ctx }, opts)
}

/// Lower `spec` as a BATCHED, TENSOR-PARALLEL decode deployment — `batch` sequences per step
/// over `tp` chips, the serving shape: [`lower_batched_decode_streamed`]'s stacked
/// programs (`X`/`bxo{l}`, `toks`, `pos_s{b}`, states `_s{b}`) with every layer kind
/// [`lower_tp_decode_streamed`]'s program over the chips, certified over the chips against the
/// unsplit batched program.
pub fn lower_batched_tp_decode_streamed(
    spec: &ModelSpec,
    batch: usize,
    tp: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Deployed {
    deploy(spec, &Cut::BatchedTp { batch, tp, ctx }, opts)
}

/// Lower `spec`'s PREFILL as an SN50 deployment: `chunk` tokens of one sequence per step over
/// the decode state of `ctx` positions; the kinds are the decode cut's kinds (same layers).
///
/// A step takes the chunk's embedding lookups stacked (`tok i32[chunk]`), one program per
/// layer kind taking the rows in order, each at its own position (`pos i32[chunk]`), and a
/// head reading the last row (logits `[1, vocab]`). Every layer declares exactly the states of
/// the decode cut with the same `ctx` — same names, same shapes — so a decode bundle continues
/// from the state a prefill bundle leaves. Attention reads the positions before the chunk from
/// its cache and the chunk's own positions from the chunk's new rows
/// (`attend(q, K, V, pos, k, v)`), then writes the rows: a sliding-window ring of `window`
/// slots is never overwritten by rows the chunk still attends to.
///
/// Every kind is certified like any other, numerically at its real shapes: all `chunk` rows,
/// at the last positions of the context, so the chunk reads the cache before it and its rows
/// wrap the rings. A prompt whose length is not a multiple of `chunk` runs its whole chunks
/// through the prefill bundle and the remaining rows through the decode bundle (the host hands
/// the state over, `rdu_host::Host::take_states` / `put_states`).
pub fn lower_prefill_streamed(spec: &ModelSpec, chunk: usize, ctx: usize, opts: LowerOptions<'_>) -> Deployed {
    deploy(spec, &Cut::Prefill { chunk, ctx }, opts)
}

/// Lower `spec`'s PREFILL over `tp` chips: [`lower_prefill_streamed`]'s chunk of `chunk` rows,
/// every layer kind split over the chips as [`lower_tp_decode_streamed`] splits it (each chip
/// its heads, FFN and expert columns, its slices of the caches, two all-reduces a layer), the
/// head vocabulary-parallel on the chunk's last row. The states are the tensor-parallel decode
/// cut's of the same `ctx`, sliced alike, so a tp decode bundle continues from them. Every kind
/// and the head are certified over their chips against the unsplit prefill programs
/// (`certify::certify_tp`), at the real chunk.
pub fn lower_prefill_tp_streamed(
    spec: &ModelSpec,
    chunk: usize,
    tp: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Deployed {
    deploy(spec, &Cut::PrefillTp { chunk, tp, ctx }, opts)
}

/// Lower `spec`'s VERIFY step, speculative decoding's check: `draft + 1` rows of each of `batch`
/// sequences (one when `None`) — the last accepted token and `draft` drafted ones, each
/// sequence its own — over the decode step's own states of `ctx` positions, the head on every
/// row (the target's token after each), over `tp` chips when `tp > 1` (split as
/// [`lower_tp_decode_streamed`] splits, over its states, certified over the chips against the
/// unsplit verify programs).
///
/// The host learns after the step how many drafted tokens stand and starts the next step after
/// them. A cache's rows past them are overwritten then; a ring keeps the drafted rows pending
/// and a recurrent layer the state after each row, so that the next step's `pend` and `resume`
/// inputs continue from any row (`model::author::verify`). Every kind is certified at its real
/// shapes, every row at the last positions of the context.
pub fn lower_verify_streamed(
    spec: &ModelSpec,
    draft: usize,
    batch: Option<usize>,
    tp: usize,
    ctx: usize,
    opts: LowerOptions<'_>,
) -> Deployed {
    deploy(spec, &Cut::Verify { draft, batch, tp, ctx }, opts)
}
