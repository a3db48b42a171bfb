//! The MODEL's roofline (issue 11): the least a step of the model could take on its chips,
//! whatever the compiler does — a yardstick for rdu's own estimate, independent of its cost
//! model's idea of which bytes it reads.
//!
//! Floor bytes of one step are
//! - every weight once over all chips (its whole, unsplit shape): as stored in a block format
//!   (Q8_0 34/32 bytes an element; FP8 one byte an element and an f32 scale a block; MXFP4
//!   17/32 bytes an element), everything else 2 bytes (bf16);
//! - the embedding table (a weight only the embedding reads) as one row per sequence;
//! - each routed expert stack (a stacked weight an `experts` op reads) as
//!   `min(1, batch · top_k / n_experts)` of its bytes;
//! - every carried state once (its whole shape), 2 bytes an element whatever its declared dtype.
//!
//! The model roofline time is `floor bytes / (chips × HBM bandwidth)`.
//! `/work/shared/tools/model_roofline.py` computes the same figure from a written bundle.
//!
//! This file is the one place the floor is computed ([`floor`]): of a lowered model from its
//! programs' declarations ([`StreamedModel::model_floor`]), and of a written bundle from its
//! manifest and spatial programs ([`bundle_floor`], what `rdu report` shows), the same tensors
//! counted the same way.

use super::model::StreamedModel;
use crate::lang::ast::{Arg, DeclKind};
use crate::lang::Source;
use crate::model::spec::{Cut, Ffn, Mixer};
use rdu_spatial::chip::Chip;
use rdu_spatial::manifest::Manifest;
use rdu_spatial::program::{Arg as SpatialArg, SpatialProgram, Storage};
use rdu_spatial::{Op, TypedOp};
use std::collections::{BTreeMap, BTreeSet};

/// Bytes an element of a Q8_0 weight: 32 int8 values and an f16 scale per block of 32.
pub const Q8_BYTES_PER_ELEMENT: f64 = 34.0 / 32.0;
/// Bytes an element of anything else (bf16).
pub const DENSE_BYTES_PER_ELEMENT: f64 = 2.0;

/// The model's floor for one step of a lowered model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelFloor {
    /// Bytes one step must move at least, over all chips together.
    pub bytes: f64,
    /// `bytes / (chips × HBM bandwidth)`.
    pub seconds: f64,
}

/// One tensor of the model, as the floor counts it.
struct Counted {
    elements: f64,
    /// Elements of one row (the last axis): an embedding lookup reads one.
    row: f64,
    /// Two or more axes: a product's weight (norm scales and biases are vectors).
    matrix: bool,
    /// Bytes an element as stored: a block format's, or 2 (bf16).
    per: f64,
    state: bool,
    /// Read by the embedding program (and, if `head` too, by the head: a tied table).
    embed: bool,
    head: bool,
    /// `(n_experts, top_k)` when an `experts` op reads it as a stack of routed experts.
    experts: Option<(usize, usize)>,
}

impl StreamedModel {
    /// The model's floor bytes and roofline time for one step of this deployment.
    pub fn model_floor(&self) -> ModelFloor {
        self.floor_of(&self.counted())
    }

    /// [`StreamedModel::model_floor`] and [`StreamedModel::model_flops`], the model's tensors
    /// counted once for both.
    pub(crate) fn model_yardsticks(&self) -> (ModelFloor, f64) {
        let tensors = self.counted();
        (self.floor_of(&tensors), self.flops_of(&tensors))
    }

    fn floor_of(&self, tensors: &BTreeMap<String, Counted>) -> ModelFloor {
        // The embedding reads one row per token of the step, and the routed experts of every
        // token are read (a verify step's drafted ones too).
        let looked_up = self.cut.batch().unwrap_or(1) * self.cut.draft().map_or(1, |k| k + 1);
        floor(tensors, looked_up, self.cut.tp(), self.chip.hbm_bandwidth)
    }

    /// The model's FLOPs for one step, at the model's count (independent of how rdu lowers it):
    /// - 2 per weight element and row for every matrix weight (a weight of two or more axes;
    ///   norms and biases are left out), routed expert stacks at `top_k / n_experts` of theirs,
    ///   the embedding table not at all (a lookup) unless it is the tied head, and the head for
    ///   the rows whose logits the step makes (one per sequence in prefill, every row otherwise);
    /// - attention, 2 per row, head, position seen and dimension of a score and of a value
    ///   (`2 · head_dim` for attention; `qk_nope + qk_rope + v_dim` for MLA, its unabsorbed
    ///   form), each row seeing `ctx` positions in a step over a cache (the step that ends the
    ///   context it is sized for) and `(seq + 1) / 2` on average in a forward step, at most its
    ///   window;
    /// - Gated DeltaNet, `4 · k_dim · v_dim` per row and value head (the state's decay-and-update
    ///   and its read-out).
    pub fn model_flops(&self) -> f64 {
        self.flops_of(&self.counted())
    }

    fn flops_of(&self, tensors: &BTreeMap<String, Counted>) -> f64 {
        let rows = self.cut.rows() as f64;
        // A prefill chunk makes the logits of its last row only.
        let head_rows = if self.cut.chunk().is_some() { 1.0 } else { rows };
        let products: f64 = (tensors.values())
            .filter(|t| t.matrix && !t.state && (t.head || !t.embed))
            .map(|t| {
                let share = t.experts.map_or(1.0, |(n, k)| k as f64 / n.max(1) as f64);
                2.0 * t.elements * share * if t.head { head_rows } else { rows }
            })
            .sum();
        let seen = |window: Option<usize>| -> f64 {
            let positions = match self.cut {
                Cut::Forward { seq } => (seq as f64 + 1.0) / 2.0,
                cut => cut.ctx().unwrap_or(1) as f64,
            };
            window.map_or(positions, |w| positions.min(w as f64))
        };
        let mixers: f64 = (self.spec.layers.iter())
            .map(|layer| match &layer.mixer {
                Mixer::Attention { heads, head_dim, .. } => {
                    2.0 * rows * *heads as f64 * seen(layer.window) * 2.0 * *head_dim as f64
                }
                Mixer::Mla { heads, qk_nope, qk_rope, v_dim, .. } => {
                    2.0 * rows * *heads as f64 * seen(layer.window) * (qk_nope + qk_rope + v_dim) as f64
                }
                Mixer::GatedDeltaNet { v_heads, k_dim, v_dim, .. } => {
                    4.0 * rows * *v_heads as f64 * (*k_dim * *v_dim) as f64
                }
            })
            .sum();
        products + mixers
    }

    /// Every weight and state of the model, whole, by bundle name, as the floor and the FLOP
    /// count see them.
    fn counted(&self) -> BTreeMap<String, Counted> {
        let mut tensors: BTreeMap<String, Counted> = BTreeMap::new();
        let none = BTreeMap::new();
        let routed = |layer: Option<usize>| match layer.map(|l| &self.spec.layers[l].ffn) {
            Some(Ffn::Moe { experts, top_k, .. }) => Some((*experts, *top_k)),
            _ => None,
        };
        self.count(&self.embed.source, &none, None, Role::Embed, &mut tensors);
        for (l, source) in self.layer_sources.iter().enumerate() {
            self.count(source, &none, routed(Some(l)), Role::Layer, &mut tensors);
        }
        self.count(&self.head.source, &self.head.bind, None, Role::Head, &mut tensors);
        tensors
    }

    /// Adds the weights and states `source` declares (under the bundle names `bind` gives
    /// them), whole, to `tensors`.
    fn count(
        &self,
        source: &Source,
        bind: &BTreeMap<String, String>,
        routed: Option<(usize, usize)>,
        role: Role,
        tensors: &mut BTreeMap<String, Counted>,
    ) {
        // Every program of a lowered model parsed when it was lowered.
        let Ok(program) = source.program() else { return };
        let stacks: BTreeSet<&str> = program
            .stmts()
            .filter(|s| s.op.text == rdu_spatial::Op::Experts.name())
            .flat_map(|s| s.args.iter().skip(3))
            .filter_map(|a| match a {
                Arg::Name(n) => Some(n.text.as_str()),
                Arg::Lit(..) => None,
            })
            .collect();
        for d in program.decls() {
            let state = match d.kind {
                DeclKind::Weight => false,
                DeclKind::State => true,
                _ => continue,
            };
            let mut shape = d.ty.shape.clone();
            if let Some(s) = source.slices.get(&d.name.text) {
                if let Some(extent) = shape.get_mut(s.axis) {
                    *extent = s.parts.iter().flatten().map(|&(_, end)| end).max().unwrap_or(*extent);
                }
            }
            let name = bind.get(&d.name.text).cloned().unwrap_or_else(|| d.name.text.clone());
            let experts = if stacks.contains(d.name.text.as_str()) { routed } else { None };
            let stored = source.stored.get(&name).or_else(|| source.stored.get(&d.name.text));
            let t = tensors.entry(name.clone()).or_insert(Counted {
                elements: shape.iter().map(|&n| n as f64).product(),
                row: shape.last().map_or(1.0, |&n| n as f64),
                matrix: shape.len() >= 2,
                per: per_element(&shape, stored.copied()),
                state,
                embed: false,
                head: false,
                experts,
            });
            match role {
                Role::Embed => t.embed = true,
                Role::Head => t.head = true,
                Role::Layer => {}
            }
        }
    }
}

/// The floor of one step of `batch` sequences over `chips` chips of `hbm_bandwidth` bytes/s:
/// every tensor of `tensors` (whole, by bundle name) as the module's head says.
/// The floor of `tensors` over `chips` when the embedding looks up `looked_up` rows and the
/// routed experts are read for as many tokens.
fn floor(tensors: &BTreeMap<String, Counted>, looked_up: usize, chips: usize, hbm_bandwidth: f64) -> ModelFloor {
    let batch = looked_up as f64;
    let bytes = tensors
        .values()
        .map(|t| {
            let per = if t.state { DENSE_BYTES_PER_ELEMENT } else { t.per };
            let elements = match t.experts {
                _ if t.embed && !t.head => t.row * batch,
                Some((n, k)) => t.elements * (batch * k as f64 / n.max(1) as f64).min(1.0),
                None => t.elements,
            };
            elements * per
        })
        .sum::<f64>();
    let chips = chips.max(1) as f64;
    ModelFloor { bytes, seconds: bytes / (chips * hbm_bandwidth) }
}

/// The model's floor of one step of a written bundle on `chip`, from its manifest and its
/// programs' spatial text (`program` finds one by name): the tensors and states the manifest
/// lists, whole; the embedding's and head's by their declared names; a layer's routed expert
/// stacks as its kind's `experts` ops read them (the stack's first axis its experts, `top_k`
/// its kind's `route`). For the bundle `StreamedModel::bundle` writes it is
/// [`StreamedModel::model_floor`], bit for bit.
pub fn bundle_floor<'p>(m: &Manifest, program: &dyn Fn(&str) -> Option<&'p SpatialProgram>, chip: &Chip) -> ModelFloor {
    let embed: BTreeSet<&String> = m.programs.embed.declared.iter().collect();
    let head: BTreeSet<&String> = m.programs.head.declared.iter().collect();
    // Each routed expert stack by bundle name: (experts, top_k) of the layer that reads it.
    let mut routed: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for layer in &m.layers {
        let Some(p) = program(&layer.kind) else { continue };
        let ops: Vec<_> = p.ops().map(|(_, op)| op).collect();
        let route = ops.iter().find(|op| op.op == Op::Route).and_then(|op| op.typed().ok());
        let top_k = match route {
            Some(TypedOp::Route { k, .. }) => k,
            _ => 0,
        };
        for op in ops.iter().filter(|op| op.op == Op::Experts) {
            for arg in op.args.get(op.op.expert_weights()).into_iter().flatten() {
                let SpatialArg::Tensor(name) = arg else { continue };
                let Some(t) = layer.bind.get(name).and_then(|b| m.tensors.get_key_value(b)) else { continue };
                routed.insert(t.0, (t.1.shape.first().copied().unwrap_or(0), top_k));
            }
        }
    }
    let whole = |shape: &[usize], storage: Option<Storage>, state: bool| Counted {
        elements: shape.iter().map(|&n| n as f64).product(),
        row: shape.last().map_or(1.0, |&n| n as f64),
        matrix: shape.len() >= 2,
        per: per_element(shape, storage),
        state,
        embed: false,
        head: false,
        experts: None,
    };
    let mut tensors: BTreeMap<String, Counted> = BTreeMap::new();
    for (name, t) in &m.tensors {
        let counted = Counted {
            embed: embed.contains(name),
            head: head.contains(name),
            experts: routed.get(name.as_str()).copied(),
            ..whole(&t.shape, t.program_storage(), false)
        };
        tensors.insert(name.clone(), counted);
    }
    for s in &m.states {
        tensors.insert(s.name.clone(), whole(&s.shape, None, true));
    }
    let looked_up = m.cut.batch.unwrap_or(1) * m.cut.draft.map_or(1, |k| k + 1);
    floor(&tensors, looked_up, m.cut.tp.unwrap_or(1), chip.hbm_bandwidth)
}

/// Bytes an element of a weight of `shape` held as `storage`: a block format's as stored
/// (`rdu_spatial::memory::stored_bytes` over its elements), bf16's otherwise.
fn per_element(shape: &[usize], storage: Option<Storage>) -> f64 {
    let elements: f64 = shape.iter().map(|&n| n as f64).product();
    match storage.filter(|s| s.is_blocks()) {
        Some(Storage::Q8_0) => Q8_BYTES_PER_ELEMENT,
        Some(s) => match rdu_spatial::memory::stored_bytes(shape, rdu_spatial::program::Role::Weight, s) {
            Ok(bytes) if elements > 0.0 => bytes as f64 / elements,
            _ => DENSE_BYTES_PER_ELEMENT,
        },
        None => DENSE_BYTES_PER_ELEMENT,
    }
}

/// Which program a declaration comes from.
#[derive(Clone, Copy)]
enum Role {
    Embed,
    Layer,
    Head,
}
