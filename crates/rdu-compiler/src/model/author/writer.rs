//! `Writer`: accumulates one program's declarations and statements in canonical text form,
//! suffixing every per-layer name with the layer index and collecting the storage set.

use super::split::{expert_width, local_extent, parts, Run};
use crate::graph::Op;
use crate::lang::{Slices, Source};
use crate::model::spec::StateDtype;
use crate::model::storage::{Format, Storage};
use rdu_spatial::names::TensorName;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Weights whose last (`in`) axis is a multiple of this may be stored as Q8_0 blocks.
pub const Q8_BLOCK: usize = rdu_checkpoint::QK8_0;

pub(crate) struct Writer<'a> {
    /// The layer whose names this writer gives (`None`: the embedding or head program).
    layer: Option<usize>,
    /// The sequence `b` while writing its part of a batched step (see [`Writer::sequence`]).
    seq: Option<usize>,
    decls: Vec<String>,
    stmts: Vec<String>,
    outputs: Vec<String>,
    /// Weights stored in a block format, and each one's format.
    stored: BTreeMap<String, Format>,
    storage: &'a Storage,
    /// Chips of a tensor-parallel program (`None`: one chip, nothing is split).
    tp: Option<usize>,
    slices: BTreeMap<String, Slices>,
    /// The element type states are declared with (`bf16` or `f32`).
    state: StateDtype,
}

/// The greatest common divisor (`gcd(a, 0) = a`).
fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The FP8 block a chip holds of a weight split by `slices` (of a `rank`-axis weight): the
/// checkpoint's `format` cut, along the split axis, to the largest size that divides it and
/// every range's bounds, so each chip's share is whole finer blocks, each sharing the scale
/// of the checkpoint block it lies in (the manifest's `block`, beside its `stored_block`).
/// Another format, or a split that keeps whole blocks, is `format` itself.
fn chip_block(format: Format, rank: usize, slices: &Slices) -> Format {
    let Format::Fp8 { rows, cols } = format else { return format };
    let extent = slices.parts.iter().flatten().map(|r| r.1).max().unwrap_or(0);
    let bounds = slices.parts.iter().flatten().flat_map(|&(a, b)| [a, if b == extent { 0 } else { b }]);
    let cut = |unit: u32| bounds.clone().fold(unit as usize, gcd) as u32;
    match rank.checked_sub(slices.axis) {
        Some(1) => Format::Fp8 { rows, cols: cut(cols) },
        Some(2) => Format::Fp8 { rows: cut(rows), cols },
        _ => format,
    }
}

/// Formats a shape or index list: `[1, 4, 16]`.
pub(crate) fn list(items: &[usize]) -> String {
    let mut s = String::from("[");
    for (i, v) in items.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{v}");
    }
    s.push(']');
    s
}

impl<'a> Writer<'a> {
    /// A writer for layer `layer` (names get the suffix) or for the embedding/head (`None`).
    pub fn new(layer: Option<usize>, storage: &'a Storage) -> Writer<'a> {
        Writer {
            layer,
            seq: None,
            decls: Vec::new(),
            stmts: Vec::new(),
            outputs: Vec::new(),
            stored: BTreeMap::new(),
            storage,
            tp: None,
            slices: BTreeMap::new(),
            state: StateDtype::default(),
        }
    }

    /// Declares every state with the deployment's state storage (`bf16[...]` or `f32[...]`).
    pub fn states(mut self, state: StateDtype) -> Self {
        self.state = state;
        self
    }

    /// Writes the per-chip program of `tp` chips: `*_split` declarations take each chip's slices.
    pub fn tensor_parallel(mut self, tp: usize) -> Self {
        self.tp = Some(tp);
        self
    }

    /// The local shape of `full` split along `axis` by `runs`, recording every chip's slices of
    /// `name` (one chip: the full shape, nothing recorded).
    fn split_shape(&mut self, name: &str, full: &[usize], axis: usize, runs: &[Run]) -> Vec<usize> {
        let Some(tp) = self.tp else { return full.to_vec() };
        debug_assert!(runs.iter().all(|r| r.offset + r.count * r.unit <= full[axis]), "{name}: runs past {full:?}");
        let mut shape = full.to_vec();
        shape[axis] = local_extent(tp, runs);
        self.slices.insert(name.to_string(), Slices::new(axis, parts(tp, runs)));
        shape
    }

    /// The per-layer name of `base` (with the sequence suffix inside a batched sequence's part).
    pub fn name(&self, base: &str) -> String {
        debug_assert!(!base.ends_with(|c: char| c.is_ascii_digit()), "base name `{base}` ends in a digit");
        TensorName { base: base.to_string(), layer: self.layer, seq: self.seq }.to_string()
    }

    /// Names given from now on belong to sequence `b` of a batched step (`Kc3_s1`), or to
    /// the whole step again with `None`.
    pub fn sequence(&mut self, b: Option<usize>) {
        self.seq = b;
    }

    fn decl(&mut self, kind: &str, name: &str, dtype: &str, shape: &[usize], seed: Option<&str>) {
        let mut line = format!("{kind} {name} : {dtype}{}", list(shape));
        if let Some(seed) = seed {
            let _ = write!(line, " = {seed}");
        }
        self.decls.push(line);
    }

    /// A runtime input with its exact name (the hidden state, `pos`, `tok`).
    pub fn input(&mut self, name: &str, dtype: &str, shape: &[usize], seed: Option<&str>) {
        self.decl("input", name, dtype, shape, seed);
    }

    /// A shared tensor, the same in every layer (RoPE tables).
    pub fn shared(&mut self, name: &str, shape: &[usize]) {
        self.decl("shared", name, "f32", shape, None);
    }

    /// A weight read dense (norm weights, biases, conv kernels, gate parameters).
    pub fn weight(&mut self, base: &str, shape: &[usize]) -> String {
        let name = self.name(base);
        self.decl("weight", &name, "f32", shape, None);
        name
    }

    /// A projection: declared `q8` (the deployment may store it in a block format) when its
    /// `in` axis holds whole blocks of 32, and in the storage set, with its format, when the
    /// storage says it is stored so.
    pub fn projection(&mut self, base: &str, shape: &[usize]) -> String {
        let name = self.name(base);
        self.declare_projection(&name, shape);
        name
    }

    /// Declares a projection of (this chip's) `shape`. A split one stored FP8 stays FP8 even
    /// when a chip's `in` axis holds no whole Q8_0 blocks (its blocks are the checkpoint's,
    /// cut by `chip_block`): a weight moves as it is stored, never widened.
    fn declare_projection(&mut self, name: &str, shape: &[usize]) {
        let name = name.to_string();
        let blockable = shape.last().is_some_and(|d| d % Q8_BLOCK == 0);
        self.decl("weight", &name, if blockable { "q8" } else { "f32" }, shape, None);
        let format = self.storage.format_of(&name).filter(|f| f.misfit(shape).is_none());
        let split_fp8 = self.slices.contains_key(&name) && matches!(format, Some(Format::Fp8 { .. }));
        if let Some(format) = format.filter(|_| blockable || split_fp8) {
            let format = self.slices.get(&name).map_or(format, |s| chip_block(format, shape.len(), s));
            self.stored.insert(name, format);
        }
    }

    /// A weight read dense, split over the chips of a tensor-parallel program along `axis` by `runs`.
    pub fn weight_split(&mut self, base: &str, full: &[usize], axis: usize, runs: &[Run]) -> String {
        let name = self.name(base);
        let shape = self.split_shape(&name, full, axis, runs);
        self.decl("weight", &name, "f32", &shape, None);
        name
    }

    /// A projection split over the chips of a tensor-parallel program along `axis` by `runs`;
    /// declared `q8` when each chip's `in` axis holds whole Q8_0 blocks.
    pub fn projection_split(&mut self, base: &str, full: &[usize], axis: usize, runs: &[Run]) -> String {
        let name = self.name(base);
        let shape = self.split_shape(&name, full, axis, runs);
        self.declare_projection(&name, &shape);
        name
    }

    /// A projection of a tensor-parallel program split along `axis` into every chip's one
    /// range `parts[c]` (a cover of the axis, `split::cover`); one chip: the whole projection.
    pub fn projection_parts(
        &mut self,
        base: &str,
        full: &[usize],
        axis: usize,
        parts: &[Vec<(usize, usize)>],
    ) -> String {
        let name = self.name(base);
        let mut shape = full.to_vec();
        if self.tp.is_some() {
            shape[axis] = parts.first().map_or(0, |p| p.iter().map(|(s, e)| e - s).sum());
            self.slices.insert(name.clone(), Slices::new(axis, parts.to_vec()));
        }
        self.declare_projection(&name, &shape);
        name
    }

    /// The width this layer's routed experts' `hidden` intermediate columns are written at on
    /// its chips (`split::expert_width`: zero-padded where a chip would split MXFP4 blocks).
    pub fn expert_width(&self, hidden: usize) -> usize {
        match (self.layer, self.tp) {
            (Some(layer), Some(tp)) => expert_width(self.storage, layer, hidden, tp),
            _ => hidden,
        }
    }

    /// Records that the split tensor `name` holds only `stored` values of its split axis as the
    /// checkpoint stores it: its slices cover the axis zero-padded (`Slices::stored`). Nothing
    /// on one chip.
    pub fn padded(&mut self, name: &str, stored: usize) {
        if let Some(s) = self.slices.get_mut(name) {
            s.stored = Some(stored);
        }
    }

    /// Records that the result `name` of a tensor-parallel program is GATHERED: chip `c`
    /// computes the ranges `parts[c]` of `axis` of the whole result (nothing on one chip).
    pub fn gathered(&mut self, name: &str, axis: usize, parts: &[Vec<(usize, usize)>]) {
        if self.tp.is_some() {
            self.slices.insert(name.to_string(), Slices::new(axis, parts.to_vec()));
        }
    }

    /// A state split over the chips of a tensor-parallel program along `axis` by `runs`.
    pub fn state_split(&mut self, base: &str, full: &[usize], axis: usize, runs: &[Run]) -> String {
        let name = self.name(base);
        let shape = self.split_shape(&name, full, axis, runs);
        self.decl("state", &name, self.state.as_str(), &shape, None);
        name
    }

    /// A state carried from step to step.
    pub fn state(&mut self, base: &str, shape: &[usize]) -> String {
        let name = self.name(base);
        self.decl("state", &name, self.state.as_str(), shape, None);
        name
    }

    /// `op(args, literal, key=value, ...)`: the tensor operands, the op's positional literal
    /// after the first (`reshape`'s shape), its attributes as the op table writes them.
    fn call(op: &Op, args: &[&str]) -> String {
        let mut parts: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        if let Some(literal) = op.literal_text() {
            parts.insert(parts.len().min(1), literal);
        }
        parts.extend(op.attr_texts().into_iter().map(|(k, v)| format!("{k}={v}")));
        format!("{}({})", op.name(), parts.join(", "))
    }

    /// `base{l} = op(args)`; returns the bound name.
    pub fn op(&mut self, base: &str, op: Op, args: &[&str]) -> String {
        let name = self.name(base);
        self.bind_exact(&name, op, args);
        name
    }

    /// `name = op(...)` with an exact name (a layer's output `xo{l}`, the embedding's `x`).
    pub fn bind_exact(&mut self, name: &str, op: Op, args: &[&str]) {
        self.stmts.push(format!("{name} = {}", Self::call(&op, args)));
    }

    /// `a{l}, b{l} = op(...)`.
    pub fn op2(&mut self, bases: [&str; 2], op: Op, args: &[&str]) -> (String, String) {
        let (a, b) = (self.name(bases[0]), self.name(bases[1]));
        self.stmts.push(format!("{a}, {b} = {}", Self::call(&op, args)));
        (a, b)
    }

    /// `S <- op(...)`: a state update.
    pub fn update(&mut self, state: &str, op: Op, args: &[&str]) {
        self.stmts.push(format!("{state} <- {}", Self::call(&op, args)));
    }

    /// `o{l}, S <- op(...)`: a fresh value and a state update.
    pub fn update_with(&mut self, base: &str, state: &str, op: Op, args: &[&str]) -> String {
        let name = self.name(base);
        self.stmts.push(format!("{name}, {state} <- {}", Self::call(&op, args)));
        name
    }

    pub fn output(&mut self, name: &str) {
        self.outputs.push(format!("output {name}"));
    }

    /// The finished program: a comment line, declarations, statements, outputs.
    pub fn finish(self, comment: &str) -> Source {
        let mut text = format!("# {comment}\n");
        for line in self.decls.iter().chain(&self.stmts).chain(&self.outputs) {
            text.push_str(line);
            text.push('\n');
        }
        Source::split(text, self.stored, self.slices)
    }
}
