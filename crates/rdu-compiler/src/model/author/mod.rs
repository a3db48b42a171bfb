//! `model::author`: writes each layer of a model — and its embedding and head — as one
//! program of the `rdu` language (`docs/LANGUAGE.md`), for the weights as stored.
//!
//! The programs follow the naming convention exactly (hidden input `x` / `xo{l-1}`, output
//! `xo{l}`, every per-layer name suffixed with the layer index, shared `cos{r}`/`sin{r}`), so
//! that two equal [`Layer`]s give one program up to names. The math is each family's,
//! as `shared/reference/models.md` states it; `tests/conformance.rs` proves it against
//! transformers.

mod attention;
mod deltanet;
mod deltanet_gguf;
mod ffn;
mod mla;
mod mtp;
mod split;
mod verify;
mod writer;

pub use split::{cover, covers, expert_width};
pub use writer::Q8_BLOCK;

use crate::graph::{Op, RopeStyle};
use crate::lang::Source;
use crate::model::spec::{Cut, Layer, Mixer, ModelSpec, MtpAuthor, Norms};
use crate::model::storage::Storage;
use rdu_spatial::manifest::RopeTable;
use rdu_spatial::names;
use writer::{list, Writer};

/// The program of layer `layer` of `spec` for one step of `cut`.
///
/// For a tensor-parallel cut the program is one chip's share (every chip runs it on its own
/// slices, listed in `Source::slices`), with an `all_reduce` after the mixer and after the FFN;
/// the width must be one the model admits (`fit::admits_tp`).
///
/// Panics if `layer` is out of range (callers iterate `0..spec.n_layers()`).
pub fn source_of(spec: &ModelSpec, layer: usize, cut: Cut, storage: &Storage) -> Source {
    let lspec = &spec.layers[layer];
    let ctx = LayerCtx::new(spec, lspec, layer, cut);
    let mut w = Writer::new(Some(layer), storage).states(spec.state);
    if ctx.tensor_parallel() {
        w = w.tensor_parallel(ctx.tp);
    }
    let d = spec.d_model;
    let n = ctx.rows;
    w.input(&ctx.hidden_in, "f32", &[n, d], None);
    if lspec.rotation.is_some() {
        // Positions only matter to mixers with RoPE (a DeltaNet layer never reads one).
        for seq in ctx.sequences() {
            w.input(&seq.pos, "i32", &ctx.pos_shape(), ctx.pos_seed());
        }
    }
    verify::declare_inputs(&mut w, &ctx);
    // A multi-token-prediction block's layer reads the fusion of its token and hidden inputs.
    let hidden = match &spec.mtp {
        Some(_) => mtp::fuse(&mut w, &ctx),
        None => ctx.hidden_in.clone(),
    };

    // Mixer block.
    let hn = norm(&mut w, "hn", &hidden, "an", d, &lspec.norms, lspec.norms.pre_attn);
    let mixed = match &lspec.mixer {
        Mixer::Attention { .. } => attention::write(&mut w, &ctx, &hn),
        Mixer::Mla { .. } => mla::write(&mut w, &ctx, &hn),
        Mixer::GatedDeltaNet { .. } => deltanet::write(&mut w, &ctx, &hn),
    };
    let mixed = ctx.all_reduce(&mut w, "mar", &mixed);
    let mixed = attention::after_reduce(&mut w, &ctx, &mixed);
    let mixed = norm(&mut w, "pa", &mixed, "pan", d, &lspec.norms, lspec.norms.post_attn);
    let resid = w.op("ra", Op::Add, &[&hidden, &mixed]);

    // Feed-forward block.
    let hf = norm(&mut w, "hf", &resid, "fn", d, &lspec.norms, lspec.norms.pre_ffn);
    let ffn_out = ffn::write(&mut w, &ctx, &hf);
    let ffn_out = ctx.all_reduce(&mut w, "far", &ffn_out);
    let ffn_out = ffn::after_reduce(&mut w, &ctx, &ffn_out);
    let ffn_out = norm(&mut w, "pf", &ffn_out, "pfn", d, &lspec.norms, lspec.norms.post_ffn);
    let out = hidden_name_for(cut, layer + 1);
    w.bind_exact(&out, Op::Add, &[&resid, &ffn_out]);
    w.output(&out);

    let comment =
        format!("{} layer {layer} of {}: {} + {}", cut_word(cut), spec.name, lspec.mixer.label(), lspec.ffn.label());
    w.finish(&comment)
}

/// The embedding program of `cut`: token ids in, the first layer's hidden input `x` out.
pub fn embed_source(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Source {
    let mut w = Writer::new(None, storage);
    let n = rows(cut);
    // A prefill chunk's and a verify step's tokens are all given at run time (no seed).
    let seed = (cut.ctx().is_some() && cut.chunk().is_none() && cut.draft().is_none()).then(|| list(&vec![1; n]));
    let (tok, x) = (token_input(cut), hidden_name_for(cut, 0));
    w.input(&tok, "i32", &[n], seed.as_deref());
    let table = w.projection("E", &[spec.vocab, spec.d_model]);
    match spec.embed.scale {
        Some(s) => {
            w.bind_exact("e", Op::Embed, &[&tok, &table]);
            w.bind_exact(&x, Op::Scale { by: s }, &["e"]);
        }
        None => w.bind_exact(&x, Op::Embed, &[&tok, &table]),
    }
    w.output(&x);
    w.finish(&format!("{} embedding of {}", cut_word(cut), spec.name))
}

/// The head program of `cut`: the last layer's output in, logits `[rows, vocab]` out (a
/// prefill chunk's head reads its last row only: logits `[1, vocab]`; a verify step's head
/// every row: the target's next token after each of them).
///
/// For a tensor-parallel cut the head is VOCABULARY-PARALLEL: each chip holds its run of the
/// output projection's rows (`split::cover` of the vocabulary; `Source::slices`) and computes
/// that run of the logits, which the host joins in chip order (the logits' slices record the
/// runs). The vocabulary must leave every chip a run (`split::covers`).
pub fn head_source(spec: &ModelSpec, cut: Cut, storage: &Storage) -> Source {
    let tensor_parallel = cut.is_split();
    let mut w = Writer::new(None, storage);
    if tensor_parallel {
        w = w.tensor_parallel(cut.tp());
    }
    let vocab = split::cover(spec.vocab, cut.tp());
    let n = rows(cut);
    let d = spec.d_model;
    let input = hidden_name_for(cut, spec.n_layers());
    w.input(&input, "f32", &[n, d], None);
    let nf = w.weight("nf", &[d]);
    let final_norm = norm_op(spec.head.norm_eps, spec.head.norm_unit_offset);
    let last = match cut {
        // A prefill chunk's logits are its last row's: the next token follows it.
        Cut::Prefill { .. } | Cut::PrefillTp { .. } => {
            w.bind_exact("xr", attention::slice(0, n - 1, 1), &[&input]);
            "xr".to_string()
        }
        _ => input,
    };
    // A DeepSeek-V3-style MTP block drafts again from its rows before its head's norm.
    let pre_norm = spec.mtp.as_ref().is_some_and(|b| b.author == MtpAuthor::NextN);
    let hn = if pre_norm { "hf" } else { names::HIDDEN_OUTPUT };
    w.bind_exact(hn, final_norm, &[&last, &nf]);
    let out = w.projection_parts(if spec.head.tied { "E" } else { "Wout" }, &[spec.vocab, d], 0, &vocab);
    w.bind_exact("logits", Op::Linear, &[hn, &out]);
    w.gathered("logits", 1, &vocab);
    w.output("logits");
    if spec.head.hidden && cut.chunk().is_none() {
        // The rows a multi-token-prediction draft reads (`model::mtp`).
        if pre_norm {
            w.bind_exact(names::HIDDEN_OUTPUT, Op::Scale { by: 1.0 }, &[&last]);
        }
        w.output(names::HIDDEN_OUTPUT);
    }
    w.finish(&format!("{} head of {}", cut_word(cut), spec.name))
}

/// The hidden-state input of layer `layer`: `x` for the first, `xo{layer-1}` after.
pub fn hidden_name(layer: usize) -> String {
    names::SINGLE.input_of(layer).to_string()
}

/// The hidden-state input of layer `layer` under `cut`: a batched step stacks its sequences'
/// rows as `X` for the first layer and `bxo{layer-1}` after (`rebind_via` with `STACKED`).
pub fn hidden_name_for(cut: Cut, layer: usize) -> String {
    let hidden = if cut.batch().is_some() { names::STACKED } else { names::SINGLE };
    hidden.input_of(layer).to_string()
}

/// The embedding program's token input: `toks` for a batched step, `tok` otherwise.
pub fn token_input(cut: Cut) -> String {
    names::token_input(cut.batch().is_some()).to_string()
}

/// The position input of sequence `b` of a batched step; `pos` when the step is one sequence.
pub fn position_input(b: Option<usize>) -> String {
    names::position_input(b).to_string()
}

fn rows(cut: Cut) -> usize {
    cut.rows()
}

fn cut_word(cut: Cut) -> &'static str {
    cut.word()
}

/// One sequence of a step: its index in a batched step (`None` for the only one) and its
/// runtime inputs: its position, and a verify step's resume row and pending positions.
pub(crate) struct Sequence {
    pub index: Option<usize>,
    pub pos: String,
    pub resume: String,
    pub pend: String,
}

impl Sequence {
    fn new(index: Option<usize>) -> Sequence {
        Sequence {
            index,
            pos: position_input(index),
            resume: names::resume_input(index).to_string(),
            pend: names::pending_input(index).to_string(),
        }
    }
}

/// What every mixer and FFN writer needs to know about the layer it writes.
pub(crate) struct LayerCtx<'s> {
    pub spec: &'s ModelSpec,
    pub layer: &'s Layer,
    pub cut: Cut,
    /// Rows per step: 1 for decode, the sequence length for forward.
    pub rows: usize,
    pub hidden_in: String,
    /// Chips the layer is split over (1 unless the cut is tensor-parallel): every `*_split`
    /// declaration holds one chip's share, `local_*` give the per-chip sizes.
    pub tp: usize,
}

impl<'s> LayerCtx<'s> {
    fn new(spec: &'s ModelSpec, layer: &'s Layer, l: usize, cut: Cut) -> LayerCtx<'s> {
        LayerCtx { spec, layer, cut, rows: rows(cut), hidden_in: hidden_name_for(cut, l), tp: cut.tp() }
    }

    /// The sequences of one step: the whole step, or each row of a batched step.
    pub fn sequences(&self) -> Vec<Sequence> {
        match self.cut.batch() {
            None => vec![Sequence::new(None)],
            Some(batch) => (0..batch).map(|b| Sequence::new(Some(b))).collect(),
        }
    }

    /// Writes the part of a step that reads or carries one sequence's state (positions,
    /// caches, recurrences) once per sequence. `inputs` are (base, name) of `[N, ...]` tensors;
    /// for a batched step each sequence gets its rows of every input (`{base}s{l}_s{b}`: one
    /// row, or a verify step's `draft + 1`) and names its tensors with its suffix, and the
    /// results are stacked back as `out{l}`. A step of one sequence writes the part once, over
    /// the inputs as they are.
    pub fn per_sequence(
        &self,
        w: &mut Writer<'_>,
        out: &str,
        inputs: &[(&str, &str)],
        mut part: impl FnMut(&mut Writer<'_>, &Sequence, &[String]) -> String,
    ) -> String {
        let seqs = self.sequences();
        if self.cut.batch().is_none() {
            let names: Vec<String> = inputs.iter().map(|(_, n)| n.to_string()).collect();
            return part(w, &seqs[0], &names);
        }
        let mut results = Vec::new();
        for seq in &seqs {
            w.sequence(seq.index);
            let b = seq.index.expect("a batched sequence has an index");
            let span = self.cut.sequence_rows();
            let rows: Vec<String> = inputs
                .iter()
                .map(|(base, name)| w.op(&format!("{base}s"), attention::slice(0, b * span, span), &[name]))
                .collect();
            results.push(part(w, seq, &rows));
            w.sequence(None);
        }
        if let [only] = results.as_slice() {
            // A batch of one sequence: its rows are the step's, nothing to stack.
            return only.clone();
        }
        let refs: Vec<&str> = results.iter().map(String::as_str).collect();
        w.op(out, Op::Concat { axis: 0 }, &refs)
    }

    /// Whether the program is one chip's share of a tensor-parallel layer (`all_reduce`s written).
    pub fn tensor_parallel(&self) -> bool {
        self.cut.is_split()
    }

    /// Heads (or columns) of `n` one chip holds.
    pub fn local(&self, n: usize) -> usize {
        n / self.tp
    }

    /// KV heads of `kv` one chip holds: its share, or one replicated head when chips outnumber them.
    pub fn local_kv(&self, kv: usize) -> usize {
        (kv / self.tp).max(1)
    }

    /// `base{l} = all_reduce(x)` in a tensor-parallel program (the sum of every chip's partial
    /// `x`); `x` unchanged on one chip.
    pub fn all_reduce(&self, w: &mut Writer<'_>, base: &str, x: &str) -> String {
        if self.tensor_parallel() {
            w.op(base, Op::AllReduce, &[x])
        } else {
            x.to_string()
        }
    }

    fn pos_seed(&self) -> Option<&'static str> {
        match self.cut {
            Cut::Forward { .. } => Some("0"),
            // A prefill chunk's and a verify step's positions are one per row, all given at
            // run time.
            Cut::Prefill { .. } | Cut::PrefillTp { .. } | Cut::Verify { .. } => None,
            _ => Some("1"),
        }
    }

    /// `pos`: a scalar (row `i` at `pos + i`), or one position per row of a prefill chunk or of
    /// a sequence's rows in a verify step.
    fn pos_shape(&self) -> Vec<usize> {
        match self.cut {
            Cut::Prefill { chunk, .. } | Cut::PrefillTp { chunk, .. } => vec![chunk],
            Cut::Verify { draft, .. } => vec![draft + 1],
            _ => Vec::new(),
        }
    }

    pub fn decode(&self) -> bool {
        self.cut.ctx().is_some()
    }

    /// A prefill chunk: attention reads positions before the chunk from the cache and the
    /// chunk's own positions from its new rows, then writes the rows (`attend(.., k, v)`
    /// before `cache_put`), so that a ring of `window` slots is never overwritten by rows the
    /// chunk still attends to, and the state stays the decode step's.
    pub fn prefill(&self) -> bool {
        self.cut.chunk().is_some()
    }

    /// A verify step's drafted tokens per sequence (`None` for any other cut): its rows are
    /// written as decode steps write them, one state after another (`author::verify`).
    pub fn verify(&self) -> Option<usize> {
        self.cut.draft()
    }

    /// Whether the layer's cache is a ring of `window` slots shorter than the context (its
    /// slots are reused, so a verify step must not write drafted rows it may reject).
    pub fn ring(&self) -> bool {
        self.layer.window.is_some_and(|w| w < self.table_rows())
    }

    /// Rows of the RoPE tables: every position a step can see.
    pub fn table_rows(&self) -> usize {
        self.cut.ctx().unwrap_or(self.rows)
    }

    /// Slots of a KV cache: the context, or a ring of the window for windowed layers — in every
    /// cut with a cache (a prefill chunk attends to its own rows before writing them, see
    /// [`LayerCtx::prefill`], so it needs no more slots than a decode step).
    pub fn cache_slots(&self) -> usize {
        let ctx = self.table_rows();
        match self.layer.window {
            Some(w) => w.min(ctx),
            None => ctx,
        }
    }

    /// Declares the shared RoPE tables of the layer's rotation; returns (cos, sin, rotary dims).
    pub fn rope_tables(&self, w: &mut Writer<'_>) -> (String, String, usize) {
        let r = self.layer.rotation.expect("a layer with RoPE has a rotation");
        let dim = self.spec.rotations[r].dim;
        let (cos, sin) = (names::rope_table(RopeTable::Cos, r), names::rope_table(RopeTable::Sin, r));
        w.shared(&cos, &[self.table_rows(), dim / 2]);
        w.shared(&sin, &[self.table_rows(), dim / 2]);
        (cos, sin, dim)
    }

    pub fn rope_style(&self) -> RopeStyle {
        let r = self.layer.rotation.expect("a layer with RoPE has a rotation");
        match self.spec.rotations[r].style {
            crate::model::spec::RopeStyle::Neox => RopeStyle::Neox,
            crate::model::spec::RopeStyle::Interleaved => RopeStyle::Interleaved,
        }
    }

    /// The layer's `rms_norm`.
    pub fn norm(&self) -> Op {
        norm_op(self.layer.norms.eps, self.layer.norms.unit_offset)
    }
}

/// `rms_norm` with `eps`, and `(w + 1)` for a unit offset.
pub(crate) fn norm_op(eps: f64, unit_offset: bool) -> Op {
    Op::RmsNorm { eps, offset: f64::from(u8::from(unit_offset)) }
}

/// `out{l} = rms_norm(x, weight{l})` when `present`; otherwise `x` unchanged.
fn norm(w: &mut Writer<'_>, out: &str, x: &str, weight: &str, d: usize, norms: &Norms, present: bool) -> String {
    if !present {
        return x.to_string();
    }
    let wn = w.weight(weight, &[d]);
    w.op(out, norm_op(norms.eps, norms.unit_offset), &[x, &wn])
}
