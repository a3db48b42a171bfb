//! `fit`: which tensor-parallel widths a model admits, and why a width is refused; and the
//! memory a decode deployment holds on each chip (the tally `rdu fit` and `rdu plan` print).
//!
//! A width `tp` splits every layer Megatron-style (see `model::author`): each chip its
//! attention / MLA heads, its DeltaNet key heads with their value heads, its columns of the
//! dense FFN, of every expert and of the shared expert. So `tp` must divide each of those
//! counts — except kv heads, which are replicated when `tp` is a multiple of them. A product
//! whose `in` axis is split (o, down, out projections) keeps whole Q8_0 or MXFP4 blocks on each
//! chip only when `(in / tp) % 32 == 0`: for a weight stored so that is required too — but
//! for routed experts stored MXFP4, whose intermediate columns are zero-padded to a width
//! that splits into whole blocks (`model::author::expert_width`; the padded bytes counted).
//!
//! The memory tally reads the declarations of every authored program; it lowers nothing.
//! Counting, stated once: a weight in the program's storage set is held as stored (Q8_0, FP8
//! values and f32 block scales, MXFP4 blocks), any other weight as bf16, a state as it is declared (bf16 or f32) — bytes as stored,
//! `rdu_spatial::memory::stored_bytes` — once per sequence of a batch; a shared table (RoPE)
//! once, as f32. A tensor named by several programs (the embedding table `E` of a tied head) is
//! counted once.

use crate::lang::ast::{DType, DeclKind};
use crate::lang::Source;
use crate::model::author::{embed_source, expert_width, head_source, source_of, Q8_BLOCK};
use crate::model::kinds::layer_kinds_for;
use crate::model::spec::{Cut, Ffn, Mixer, ModelSpec};
use crate::model::storage::Storage;
use rdu_spatial::chip::Chip;
use rdu_spatial::cost::CostError;
use rdu_spatial::manifest::TensorStorage;
use rdu_spatial::memory::{place, stored_bytes, tensor_bytes, MemoryDemand, MemoryFit, TensorFormat};
use rdu_spatial::program::{Role, Storage as Stored};
use std::collections::{BTreeMap, BTreeSet};

/// Why a model does not admit a width: one line naming the dimension and its size.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--tp {tp} {reason}")]
pub struct TpRefusal {
    pub tp: usize,
    /// Layer whose dimension refuses the width (`None` for model-wide reasons).
    pub layer: Option<usize>,
    pub reason: String,
}

/// Does `spec` admit `tp` chips with its weights stored as `storage`? Every layer is checked;
/// the first refusal is returned.
pub fn admits_tp(spec: &ModelSpec, tp: usize, storage: &Storage) -> Result<(), TpRefusal> {
    let refuse = |layer: Option<usize>, reason: String| Err(TpRefusal { tp, layer, reason });
    if tp == 0 {
        return refuse(None, "is not a width: a deployment needs at least one chip".into());
    }
    let name = &spec.name;
    for (l, layer) in spec.layers.iter().enumerate() {
        let at = |what: &str, n: usize| format!("does not divide the {n} {what} of {name} (layer {l})");
        let divides = |n: usize| n.is_multiple_of(tp);
        // (name of the weight whose `in` axis is split, its full `in` extent)
        let mut row_split: Vec<(&str, usize)> = Vec::new();
        match &layer.mixer {
            Mixer::Attention { heads, kv_heads, head_dim, .. } => {
                if !divides(*heads) {
                    return refuse(Some(l), at("attention heads", *heads));
                }
                if !divides(*kv_heads) && !tp.is_multiple_of(*kv_heads) {
                    let why = format!(
                        "does not divide the {kv_heads} kv heads of {name} (layer {l}), nor is it a multiple of them"
                    );
                    return refuse(Some(l), why);
                }
                row_split.push(("Wo", heads * head_dim));
            }
            Mixer::Mla { heads, v_dim, .. } => {
                if !divides(*heads) {
                    return refuse(Some(l), at("MLA heads", *heads));
                }
                row_split.push(("Wo", heads * v_dim));
            }
            Mixer::GatedDeltaNet { k_heads, v_heads, v_dim, .. } => {
                if !divides(*k_heads) {
                    return refuse(Some(l), at("DeltaNet key heads", *k_heads));
                }
                if !divides(*v_heads) {
                    return refuse(Some(l), at("DeltaNet value heads", *v_heads));
                }
                row_split.push(("Wo", v_heads * v_dim));
            }
        }
        match &layer.ffn {
            Ffn::Dense { hidden, .. } => {
                if !divides(*hidden) {
                    return refuse(Some(l), at("FFN intermediate columns", *hidden));
                }
                row_split.push(("Wd", *hidden));
            }
            Ffn::Moe { expert_hidden, shared, .. } => {
                // MXFP4 experts whose blocks a chip would split are zero-padded (`expert_width`).
                let width = expert_width(storage, l, *expert_hidden, tp);
                if !divides(width) {
                    return refuse(Some(l), at("expert intermediate columns", *expert_hidden));
                }
                row_split.push(("Wed", width));
                if let Some(s) = shared {
                    if !divides(s.hidden) {
                        return refuse(Some(l), at("shared-expert intermediate columns", s.hidden));
                    }
                    row_split.push(("Wsd", s.hidden));
                }
            }
        }
        for (base, extent) in row_split {
            let weight = format!("{base}{l}");
            // A projection is declared `q8` (may be stored Q8_0 or MXFP4, blocks of 32 along its
            // `in` axis) when its `in` axis holds whole blocks; a chip's columns must too.
            let what = match storage.format_of(&weight) {
                Some(Stored::Q8_0) => "Q8_0",
                Some(Stored::Mxfp4) => "MXFP4",
                _ => continue,
            };
            if extent.is_multiple_of(Q8_BLOCK) && !(extent / tp).is_multiple_of(Q8_BLOCK) {
                return refuse(
                    Some(l),
                    format!(
                        "splits the {what} blocks of {weight}: its {extent} input columns over {tp} chips are {} each, \
                         not a multiple of {Q8_BLOCK}",
                        extent / tp
                    ),
                );
            }
        }
    }
    blocks_kept(spec, tp, storage).map_err(|(layer, reason)| TpRefusal { tp, layer: Some(layer), reason })
}

/// Whether every chip of a `tp`-chip deployment holds whole blocks of each weight stored FP8
/// or MXFP4 (Q8_0 is checked above): each chip's ranges of a split axis start on a block and
/// end on one or at the axis' end. An FP8 block a share cuts is held as the chip's finer blocks
/// (the program's storage, `Writer`'s `chip_block`), which every range keeps whole. `Err`
/// names the layer and the weight.
fn blocks_kept(spec: &ModelSpec, tp: usize, storage: &Storage) -> Result<(), (usize, String)> {
    let Storage::Exactly(formats) = storage else { return Ok(()) };
    if tp == 1 || formats.values().all(|f| *f == Stored::Q8_0) {
        return Ok(());
    }
    for l in 0..spec.n_layers() {
        let source = source_of(spec, l, Cut::Tp { tp, ctx: 1 }, storage);
        let Ok(program) = source.program() else { continue };
        for (name, slices) in &source.slices {
            let Some(format) = source.stored.get(name).filter(|f| **f != Stored::Q8_0) else { continue };
            let Some(decl) = program.decls().find(|d| &d.name.text == name) else { continue };
            let rank = decl.ty.shape.len();
            let extent = slices.parts.iter().flatten().map(|r| r.1).max().unwrap_or(0);
            let unit = format.split_unit(rank, slices.axis);
            let splits = |&(a, b): &(usize, usize)| !a.is_multiple_of(unit) || !(b.is_multiple_of(unit) || b == extent);
            if let Some(&(a, b)) = slices.parts.iter().flatten().find(|r| splits(r)) {
                let what = TensorStorage::of(*format).0.word();
                return Err((
                    l,
                    format!(
                        "splits the {what} blocks of {name}: a chip holds {a}..{b} of axis {}, blocks of {unit}",
                        slices.axis
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Every width up to `max` that `spec` admits with `storage`, in increasing order.
pub fn admitted_widths(spec: &ModelSpec, max: usize, storage: &Storage) -> Vec<usize> {
    (1..=max).filter(|&tp| admits_tp(spec, tp, storage).is_ok()).collect()
}

/// Why the memory tally could not count a program: one line naming the program.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum TallyError {
    #[error("the authored {what} program does not parse: {first}")]
    Parse { what: String, first: String },
    #[error("{what}: `{name}`: {cost}")]
    Size { what: String, name: String, cost: CostError },
}

/// What one program (or all layers of one kind) adds to the demand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Part {
    pub name: String,
    pub layers: usize,
    pub params: u64,
    pub weight_bytes: u64,
    /// Bytes of weights stored in each block format, by the manifest's word (`q8_0`, `fp8`,
    /// `mxfp4`).
    pub stored_bytes: BTreeMap<&'static str, u64>,
    pub state_bytes: u64,
    pub shared_bytes: u64,
}

/// Sums declarations across programs, counting each tensor name once.
#[derive(Default)]
pub struct Tally {
    seen: BTreeSet<String>,
}

impl Tally {
    /// Adds to `part` every declaration of `source` not counted before; `what` names the
    /// program in an error (`layer 3`).
    pub fn add(&mut self, part: &mut Part, source: &Source, what: &str) -> Result<(), TallyError> {
        let program = source.program().map_err(|d| TallyError::Parse {
            what: what.to_string(),
            first: d.first().map_or(String::new(), |d| d.to_string()),
        })?;
        for decl in program.decls() {
            if decl.kind == DeclKind::Input || !self.seen.insert(decl.name.text.clone()) {
                continue;
            }
            let size = |cost: CostError| TallyError::Size { what: what.to_string(), name: decl.name.to_string(), cost };
            let shape = &decl.ty.shape;
            let stored = |role, storage| stored_bytes(shape, role, storage).map_err(size);
            let params = || shape.iter().map(|&d| d as u64).product::<u64>();
            match decl.kind {
                DeclKind::Weight if source.stored.contains_key(&decl.name.text) => {
                    let format = source.stored[&decl.name.text];
                    let b = stored(Role::Weight, format)?;
                    part.weight_bytes += b;
                    *part.stored_bytes.entry(TensorStorage::of(format).0.word()).or_default() += b;
                    part.params += params();
                }
                DeclKind::Weight => {
                    part.weight_bytes += stored(Role::Weight, Stored::Dense)?;
                    part.params += params();
                }
                DeclKind::State if decl.ty.dtype == DType::Bf16 => {
                    part.state_bytes += stored(Role::State, Stored::Bf16)?
                }
                DeclKind::State => part.state_bytes += stored(Role::State, Stored::Dense)?,
                // Counted at full precision, as the host holds it (the cost model reads a
                // shared table as bf16: `stored_format`).
                DeclKind::Shared => {
                    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
                    part.shared_bytes += tensor_bytes(&shape, TensorFormat::F32).map_err(size)?;
                }
                DeclKind::Input => {}
            }
        }
        Ok(())
    }
}

/// The parameters and the state bytes (f32) of a decode deployment of `ctx` positions: what
/// the reference engine holds (weights as f32, caches and states as f32).
pub fn decode_demand(spec: &ModelSpec, ctx: usize, storage: &Storage) -> Result<(u64, u64), TallyError> {
    let cut = Cut::Decode { ctx };
    let mut tally = Tally::default();
    let mut part = Part::default();
    tally.add(&mut part, &embed_source(spec, cut, storage), "embedding")?;
    for l in 0..spec.n_layers() {
        tally.add(&mut part, &source_of(spec, l, cut, storage), &format!("layer {l}"))?;
    }
    tally.add(&mut part, &head_source(spec, cut, storage), "head")?;
    Ok((part.params, part.state_bytes + part.shared_bytes))
}

/// What each chip of a decode deployment of `batch` sequences over `tp` chips (one chip when
/// `None`) holds, program by program (the embedding, each layer kind, the head), and in all:
/// its slices of every layer, the embedding and the head replicated. `tp` must be admitted
/// ([`admits_tp`]).
pub fn decode_parts(
    spec: &ModelSpec,
    storage: &Storage,
    ctx: usize,
    batch: usize,
    tp: Option<usize>,
) -> Result<(Vec<Part>, MemoryDemand), TallyError> {
    let (cut, layer_cut) = decode_cuts(ctx, batch, tp);
    let mut tally = Tally::default();
    let mut parts = Vec::new();
    let mut embed = Part { name: "embed".into(), ..Part::default() };
    tally.add(&mut embed, &embed_source(spec, cut, storage), "embedding")?;
    parts.push(embed);
    for kind in layer_kinds_for(spec, layer_cut, storage) {
        let mut part = Part { name: kind.name.clone(), layers: kind.layers.len(), ..Part::default() };
        for &l in &kind.layers {
            tally.add(&mut part, &source_of(spec, l, layer_cut, storage), &format!("layer {l}"))?;
        }
        parts.push(part);
    }
    let mut head = Part { name: "head".into(), ..Part::default() };
    // The head is vocabulary-parallel under tensor parallelism: each chip its run of the rows.
    tally.add(&mut head, &head_source(spec, layer_cut, storage), "head")?;
    parts.push(head);
    let sum = |f: fn(&Part) -> u64| parts.iter().map(f).sum::<u64>();
    let demand = MemoryDemand {
        weight_bytes: sum(|p| p.weight_bytes) + sum(|p| p.shared_bytes),
        state_bytes: sum(|p| p.state_bytes),
    };
    Ok((parts, demand))
}

/// The cut of a decode deployment of `batch` sequences over `tp` chips (one when `None`) whose
/// embedding each chip holds whole, and the cut of its layers and head (each chip its share).
fn decode_cuts(ctx: usize, batch: usize, tp: Option<usize>) -> (Cut, Cut) {
    let cut = match batch {
        1 => Cut::Decode { ctx },
        batch => Cut::Batched { batch, ctx },
    };
    let layer_cut = match (tp, batch) {
        (Some(tp), 1) => Cut::Tp { tp, ctx },
        (Some(tp), batch) => Cut::BatchedTp { batch, tp, ctx },
        (None, _) => cut,
    };
    (cut, layer_cut)
}

/// [`weight_tiers`] of the decode deployment [`decode_parts`] counts, on `chip`.
pub fn decode_tiers(
    spec: &ModelSpec,
    storage: &Storage,
    (ctx, batch, tp): (usize, usize, Option<usize>),
    chip: &Chip,
) -> Result<Vec<WeightClass>, TallyError> {
    let (cut, layer_cut) = decode_cuts(ctx, batch, tp);
    let layers: Vec<Source> = (0..spec.n_layers()).map(|l| source_of(spec, l, layer_cut, storage)).collect();
    let (embed, head) = (embed_source(spec, cut, storage), head_source(spec, layer_cut, storage));
    weight_tiers(spec, layer_cut.rows(), chip, &embed, &layers, &head)
}

/// The bytes each chip of a lowered decode deployment on `chip` holds, counted as
/// [`decode_parts`] counts them — from the programs it lowered: the embedding and head
/// (replicated) and every layer's own source (one chip's slices of it) — and where they land on
/// its chip. `rdu plan` uses it (with a `StreamedModel`'s programs) so that a cell authors its
/// layers once.
pub fn per_chip(chip: &Chip, embed: &Source, layers: &[Source], head: &Source) -> Result<MemoryFit, TallyError> {
    let mut tally = Tally::default();
    let mut all = Part::default();
    tally.add(&mut all, embed, "embedding")?;
    for (l, source) in layers.iter().enumerate() {
        tally.add(&mut all, source, &format!("layer {l}"))?;
    }
    tally.add(&mut all, head, "head")?;
    let demand = MemoryDemand { weight_bytes: all.weight_bytes + all.shared_bytes, state_bytes: all.state_bytes };
    Ok(place(chip, demand))
}

/// The memory a weight class lives in on the chip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    Hbm,
    Ddr,
}

impl Tier {
    pub fn word(self) -> &'static str {
        match self {
            Tier::Hbm => "hbm",
            Tier::Ddr => "ddr",
        }
    }
}

/// One class of layer weights — every layer's weight of one base name (`Wqkv`, `Weg`) — as one
/// chip holds it, and the tier it lives in ([`weight_tiers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct WeightClass {
    pub name: String,
    /// Bytes one chip holds of it, over every layer, as stored.
    pub bytes: u64,
    /// The share of those bytes a step reads: 1 for a weight every row reads, `min(1, rows ×
    /// top_k / experts)` for a routed expert's (only the chosen experts are read).
    pub read_share: f64,
    pub tier: Tier,
}

/// Where each class of layer weights lives when one chip of a deployment (the programs
/// `embed`, `layers`, `head`, each one chip's share) holds more than its HBM: the embedding,
/// the head, every state and shared table stay in HBM (read or written every step); layer
/// weights move to DDR class by class, the least-read classes first (cold routed experts before
/// any weight every step reads), and among classes read alike the smallest class that covers
/// what is left over, else the largest and again — so that a step reads as few bytes from DDR
/// as a class at a time allows. A class lives in one tier over all layers: a layer kind is one
/// program, its homes its layers'. Everything in HBM when it fits; deterministic.
pub fn weight_tiers(
    spec: &ModelSpec,
    rows: usize,
    chip: &Chip,
    embed: &Source,
    layers: &[Source],
    head: &Source,
) -> Result<Vec<WeightClass>, TallyError> {
    let fit = per_chip(chip, embed, layers, head)?;
    let mut classes: BTreeMap<String, WeightClass> = BTreeMap::new();
    for (l, source) in layers.iter().enumerate() {
        let what = format!("layer {l}");
        let program = source.program().map_err(|d| TallyError::Parse {
            what: what.clone(),
            first: d.first().map_or(String::new(), |d| d.to_string()),
        })?;
        let routed = routed_weights(program);
        let share = match &spec.layers.get(l).map(|layer| &layer.ffn) {
            Some(Ffn::Moe { experts, top_k, .. }) => ((rows * top_k) as f64 / (*experts).max(1) as f64).min(1.0),
            _ => 1.0,
        };
        for decl in program.decls().filter(|d| d.kind == DeclKind::Weight) {
            let format = source.stored.get(&decl.name.text).copied().unwrap_or(Stored::Dense);
            let bytes = stored_bytes(&decl.ty.shape, Role::Weight, format).map_err(|cost| TallyError::Size {
                what: what.clone(),
                name: decl.name.to_string(),
                cost,
            })?;
            let base = rdu_spatial::names::TensorName::parse(&decl.name.text).base;
            let read_share = if routed.contains(decl.name.text.as_str()) { share } else { 1.0 };
            let class = classes.entry(base.clone()).or_insert(WeightClass {
                name: base,
                bytes: 0,
                read_share,
                tier: Tier::Hbm,
            });
            class.bytes += bytes;
            class.read_share = class.read_share.max(read_share);
        }
    }
    let mut classes: Vec<WeightClass> = classes.into_values().collect();
    let over = fit.demand.total().saturating_sub(chip.hbm_bytes);
    to_ddr(&mut classes, over);
    Ok(classes)
}

/// The routed experts' weights of `program`: the stacked weights an `experts` statement reads
/// (its arguments after the row, the routing weights and the chosen indices).
fn routed_weights(program: &crate::lang::ast::Program) -> BTreeSet<&str> {
    let mut out = BTreeSet::new();
    for stmt in program.stmts().filter(|s| s.op.text == rdu_spatial::op::Op::Experts.name()) {
        for arg in stmt.args.iter().skip(3) {
            if let crate::lang::ast::Arg::Name(n) = arg {
                out.insert(n.text.as_str());
            }
        }
    }
    out
}

/// Moves classes to DDR until `over` bytes have left HBM, as [`weight_tiers`] says.
fn to_ddr(classes: &mut [WeightClass], mut over: u64) {
    let mut shares: Vec<f64> = classes.iter().map(|c| c.read_share).collect();
    shares.sort_by(f64::total_cmp);
    shares.dedup();
    for share in shares {
        while over > 0 {
            let alike = || classes.iter().enumerate().filter(|(_, c)| c.read_share == share && c.tier == Tier::Hbm);
            let covering = alike().filter(|(_, c)| c.bytes >= over).min_by_key(|(_, c)| c.bytes).map(|(i, _)| i);
            let Some(i) = covering.or_else(|| alike().max_by_key(|(_, c)| c.bytes).map(|(i, _)| i)) else { break };
            classes[i].tier = Tier::Ddr;
            over = over.saturating_sub(classes[i].bytes);
        }
    }
}
