//! Seeded inputs for numeric validation, served identically to the reference interpreter
//! (`graph::Bindings`) and to the simulator (`SimBindings`): the same values, Q8_0, FP8 and
//! MXFP4 weights as stored — drawn as their blocks, never drawn as values and quantised — to
//! the simulator and as their exact dequantised values to the reference. Stacked
//! expert weights are generated lazily, one expert at a time, so a step materialises only the
//! experts it routes to. Each value is held once: a dense tensor by the simulator until
//! certification hands it to the reference ([`Inputs::hand_to_reference`], a move, not a copy),
//! a Q8_0 weight's dequantised values made when the reference first reads them.

use crate::graph::{Bindings, Data, Graph, Tensor};
use crate::lang::ast::DeclKind;
use rayon::prelude::*;
use rdu_checkpoint::{Fp8Grid, Fp8Weight, GgmlType, GgmlWeight, QK_MXFP4};
use rdu_spatial::blocks::BlockWeight;
use rdu_spatial::fill::par_filled;
use rdu_spatial::manifest::{InputRole, RopeTable};
use rdu_spatial::names::{parse_rope_table, runtime_input};
use rdu_spatial::program::{Arg, Op, SpatialProgram, Storage};
use rdu_spatial::q8::{Q8Block, Q8Weight, QK8_0};
use rdu_spatial::sim::{PackedWeight, SimBindings, SimData, SimTensor, WeightSlab};
use rdu_spatial::tensor_parallel::{pad, q8_block_ranges, take};
use rdu_spatial::{seeded_weight, Seeded};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, OnceLock};

/// Every declared tensor of one program, seeded.
pub struct Inputs {
    seed: u64,
    /// Rows of the embedding table token ids are drawn below.
    vocab: usize,
    dense: BTreeMap<String, Dense>,
    /// Q8_0-stored weights: their blocks, and the reference's values once it has read them.
    q8: BTreeMap<String, (OnceLock<Arc<Tensor>>, Q8Weight)>,
    /// FP8- and MXFP4-stored weights: as stored, and the reference's values once it has read them.
    blocks: BTreeMap<String, (OnceLock<Arc<Tensor>>, BlockWeight)>,
    /// Stacked expert weights: name → (per-expert shape, storage).
    experts: BTreeMap<String, (Vec<usize>, Storage)>,
}

/// A weight of `shape` stored as `storage` drawn as stored by `draw`: FP8 bytes and block
/// scales (`Seeded::fill_fp8`), MXFP4 blocks (`Seeded::fill_mxfp4`); `None` for another storage.
fn draw_blocks(draw: &Seeded, shape: &[usize], storage: Storage) -> Option<BlockWeight> {
    let n: usize = shape.iter().product();
    match storage {
        Storage::Fp8 { rows, cols } => {
            let block = [rows as usize, cols as usize];
            let grid = Fp8Grid::of(shape, block).ok()?.len()?;
            let values = par_filled(n, DRAW_CHUNK, |i, out| draw.fill_fp8(i, out));
            let scales = par_filled(grid, DRAW_CHUNK, |i, out| draw.fill_fp8_scales(i, out));
            Fp8Weight::new(shape.to_vec(), block, values, scales).ok().map(BlockWeight::Fp8)
        }
        Storage::Mxfp4 => {
            let blocks = par_filled(n / QK_MXFP4, DRAW_BLOCKS, |b, out| draw.fill_mxfp4(b, out));
            let bytes = blocks.into_iter().flatten().collect();
            GgmlWeight::new(shape.to_vec(), GgmlType::MXFP4, bytes).ok().map(BlockWeight::Ggml)
        }
        _ => None,
    }
}

impl Inputs {
    pub fn new(program: &SpatialProgram, graph: &Graph, seed: u64) -> Inputs {
        let decls: HashMap<&str, &rdu_spatial::program::TensorDecl> =
            program.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut experts = BTreeMap::new();
        for op in program.sections.iter().flat_map(|s| &s.stages).flat_map(|st| &st.ops) {
            if op.op == Op::Experts {
                // The stacked weights (a biased step's biases are drawn whole, as any dense weight).
                for arg in op.args.iter().take(op.op.expert_weights().end).skip(op.op.expert_weights().start) {
                    let Arg::Tensor(name) = arg else { continue };
                    if let Some(t) = decls.get(name.as_str()) {
                        experts.insert(name.clone(), (t.shape[1..].to_vec(), t.storage));
                    }
                }
            }
        }
        let vocab = embed_rows(program);
        let has_state = graph.states.iter().any(|_| true);
        let table_rows =
            graph.declared().find(|(_, _, d)| d.kind == DeclKind::Shared).map(|(_, v, _)| v.ty.shape[0]).unwrap_or(1);
        let mut inputs =
            Inputs { seed, vocab, dense: BTreeMap::new(), q8: BTreeMap::new(), blocks: BTreeMap::new(), experts };
        for (_, value, decl) in graph.declared() {
            let name = value.name.clone();
            let shape = value.ty.shape.clone();
            if inputs.experts.contains_key(&name) {
                continue;
            }
            let storage = decls.get(name.as_str()).map_or(Storage::Dense, |t| t.storage);
            let stored_q8 = storage == Storage::Q8_0;
            if decl.kind == DeclKind::Weight {
                // Drawn as stored (`Seeded::fill_fp8`, `fill_mxfp4`), not as values then quantised.
                if let Some(w) = draw_blocks(&Seeded::new(seed, &name, &shape, false), &shape, storage) {
                    inputs.blocks.insert(name, (OnceLock::new(), w));
                    continue;
                }
            }
            let n: usize = shape.iter().product();
            if stored_q8 && decl.kind == DeclKind::Weight && n.is_multiple_of(QK8_0) {
                // Drawn as Q8_0 blocks (`Seeded::fill_q8`), not as values then quantised.
                let draw = Seeded::new(seed, &name, &shape, false);
                let blocks = par_filled(n / QK8_0, DRAW_BLOCKS, |b, out| draw.fill_q8(b, out));
                inputs.q8.insert(name, (OnceLock::new(), Q8Weight { shape, blocks }));
                continue;
            }
            let role = runtime_input(&name).filter(|_| decl.kind == DeclKind::Input).map(|(role, _)| role);
            let position = match runtime_input(&name) {
                Some((InputRole::Position, seq)) if decl.kind == DeclKind::Input => Some(seq.unwrap_or(0)),
                _ => None,
            };
            let values = match (decl.kind, position) {
                // A verify step's pending positions: the previous step's drafted rows, just before
                // this step's `draft + 1` (the last the tables allow), the first `seed mod
                // (draft + 1)` of them accepted, the others sent to this step's first slot.
                (DeclKind::Input, _) if role == Some(InputRole::Pending) => {
                    let n: usize = shape.iter().product();
                    let first = table_rows.saturating_sub(n + 1);
                    let accepted = (seed % (n as u64 + 1)) as usize;
                    let at = |i: usize| if i < accepted { (first + i).saturating_sub(accepted) } else { first };
                    Data::I32((0..n).map(|i| at(i) as i32).collect())
                }
                // A decode step at the last position its tables allow: rings wrap, caches are read
                // whole. Sequence `b` of a batched step one position earlier, so that each
                // sequence's position is its own.
                (DeclKind::Input, Some(b)) if shape.is_empty() => {
                    Data::I32(vec![if has_state { table_rows.saturating_sub(1 + b) as i32 } else { 0 }])
                }
                // A chunk of rows with one position each: the last rows the tables allow, so the
                // chunk reads the cache before it and its rows wrap the rings.
                (DeclKind::Input, Some(_)) => {
                    let n: usize = shape.iter().product();
                    let first = if has_state { table_rows.saturating_sub(n) } else { 0 };
                    Data::I32((0..n).map(|i| (first + i) as i32).collect())
                }
                // Token ids, and a verify step's resume row, below the rows of the table the
                // program looks them up in (`embed`).
                (DeclKind::Input, _) if value.ty.dtype == crate::graph::DType::I32 => {
                    let n: usize = shape.iter().product();
                    Data::I32((0..n).map(|i| ((i as u64 * 7919 + seed) % vocab.max(1) as u64) as i32).collect())
                }
                (DeclKind::Shared, _) => {
                    let dim = 2 * shape.get(1).copied().unwrap_or(1);
                    let rope = rdu_spatial::rope::RopeSpec {
                        base: 10000.0,
                        dim,
                        scaling: rdu_spatial::rope::RopeScaling::None,
                    };
                    let (cos, sin) = rdu_spatial::rope::tables(&rope, shape[0]);
                    Data::F32(if matches!(parse_rope_table(&name), Some((RopeTable::Sin, _))) { sin } else { cos })
                }
                (DeclKind::State, _) => Data::F32(scaled(seeded_weight(seed, &name, &shape, false), 0.5)),
                _ => Data::F32(seeded_weight(seed, &name, &shape, false)),
            };
            inputs.insert(name, shape, values, stored_q8);
        }
        inputs
    }

    /// How every tensor was seeded, besides what the lifted graph fixes (each declaration's
    /// kind, shape and dtype): the seed, the token ids' bound, which tensors are dense, which
    /// Q8_0 blocks, which stacked experts (and how each is stored) — what, with the graph,
    /// determines every value either engine reads.
    pub(super) fn describe(&self) -> Vec<u8> {
        let shapes = |s: &[usize]| s.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("x");
        let mut out = format!("seed {} vocab {}\n", self.seed, self.vocab);
        for name in self.dense.keys() {
            out += &format!("dense {name}\n");
        }
        for (name, (_, w)) in &self.q8 {
            out += &format!("q8 {name} {}\n", shapes(&w.shape));
        }
        for (name, (_, w)) in &self.blocks {
            out += &format!("stored {name} {} {}\n", shapes(w.shape()), w.storage().word());
        }
        for (name, (shape, storage)) in &self.experts {
            let word = match storage {
                Storage::Q8_0 => "q8".to_string(),
                Storage::Dense => "dense".to_string(),
                other => other.word(),
            };
            out += &format!("experts {name} {} {word}\n", shapes(shape));
        }
        out.into_bytes()
    }

    fn insert(&mut self, name: String, shape: Vec<usize>, values: Data, stored_q8: bool) {
        match values {
            Data::F32(v) if stored_q8 => {
                let blocks = v.par_chunks(QK8_0).map(Q8Block::quantize).collect();
                self.q8.insert(name, (OnceLock::new(), Q8Weight { shape, blocks }));
            }
            Data::F32(v) => {
                self.dense.insert(name, Dense::Sim(SimTensor::f32(shape, v)));
            }
            Data::I32(v) => {
                self.dense.insert(name, Dense::Sim(SimTensor::i32(shape, v)));
            }
        }
    }

    /// Hands every dense tensor the simulator holds to the reference (moved, not copied): for
    /// once the simulator has run. Either engine may still read any tensor after, the simulator
    /// then through a copy.
    pub fn hand_to_reference(&mut self) {
        self.dense = std::mem::take(&mut self.dense).into_iter().map(|(k, d)| (k, d.into_reference())).collect();
    }

    /// The simulator's view of a dense tensor, or a Q8_0 weight's blocks (tensor-parallel slicing).
    pub(super) fn sim_dense(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        self.dense.get(name).map(Dense::sim)
    }

    pub(super) fn sim_q8(&self, name: &str) -> Option<&Q8Weight> {
        self.q8.get(name).map(|(_, q)| q)
    }

    /// An FP8- or MXFP4-stored weight as stored (tensor-parallel slicing).
    pub(super) fn sim_blocks(&self, name: &str) -> Option<&BlockWeight> {
        self.blocks.get(name).map(|(_, w)| w)
    }

    pub(super) fn is_stacked(&self, name: &str) -> bool {
        self.experts.contains_key(name)
    }

    /// Expert `e` of a stacked weight as the reference reads it: its values, a Q8_0-stored
    /// one's blocks (`Seeded::fill_q8`) exactly dequantised, a task's blocks at a time — the
    /// expert's blocks are never held whole.
    pub(super) fn expert_dense(&self, name: &str, e: usize) -> Option<(Vec<usize>, Vec<f32>)> {
        let (shape, storage) = self.experts.get(name)?;
        let draw = self.expert_draw(name, e, shape);
        if let Some(w) = draw_blocks(&draw, shape, *storage) {
            return Some((shape.clone(), w.dequantize()));
        }
        let q8 = &(*storage == Storage::Q8_0);
        let n: usize = shape.iter().product();
        // Runs start at whole blocks: so do a task's `DRAW_CHUNK` values and `fill::RUN`.
        let out = par_filled(n, DRAW_CHUNK, |i, out| {
            if *q8 {
                draw.fill_q8_values(i / QK8_0, out);
            } else {
                draw.fill(i, out);
            }
        });
        Some((shape.clone(), out))
    }

    /// Expert `e` of a stacked weight as the simulator reads it — Q8_0 blocks when stored so,
    /// values otherwise — whole, or only the `part` (axis of one expert, ranges) a chip holds:
    /// a chip's blocks are drawn and quantised alone, the same blocks the whole expert has.
    pub(super) fn expert_slab(
        &self,
        name: &str,
        e: usize,
        part: Option<(usize, &[(usize, usize)])>,
    ) -> Option<Result<WeightSlab<'static>, String>> {
        let (shape, storage) = self.experts.get(name)?;
        if let Some(w) = draw_blocks(&self.expert_draw(name, e, shape), shape, *storage) {
            // An FP8 or MXFP4 expert drawn whole, a chip's part then taken from it.
            return Some(match part {
                None => Ok(w.into_slab()),
                Some((axis, ranges)) => w.take(axis, ranges).map(BlockWeight::into_slab),
            });
        }
        if *storage != Storage::Q8_0 {
            let (shape, values) = self.expert_dense(name, e)?;
            return Some(match part {
                None => Ok(WeightSlab::Dense(Cow::Owned(values))),
                Some((axis, ranges)) => {
                    take(&shape, &values, axis, ranges).map(|(_, v)| WeightSlab::Dense(Cow::Owned(v)))
                }
            });
        }
        let draw = self.expert_draw(name, e, shape);
        let blocks = shape.iter().product::<usize>() / QK8_0;
        let Some((axis, ranges)) = part else {
            // The whole expert: its blocks in order, a task's run at a time.
            let q = par_filled(blocks, DRAW_BLOCKS, |b, out| draw.fill_q8(b, out));
            return Some(Ok(WeightSlab::Q8(Cow::Owned(q))));
        };
        // A chip's part: which blocks of the expert, in order.
        let grid = q8_block_ranges(shape, axis, ranges)
            .and_then(|(grid, ranges)| take(&grid, &(0..blocks).collect::<Vec<_>>(), axis, &ranges));
        let sources: Vec<usize> = match grid {
            Ok((_, sources)) => sources,
            Err(e) => return Some(Err(e)),
        };
        let mut q = vec![Q8Block { d: 0.0, qs: [0; QK8_0] }; sources.len()];
        q.par_chunks_mut(DRAW_BLOCKS).zip(sources.par_chunks(DRAW_BLOCKS)).for_each(|(mut q, mut sources)| {
            // Runs of consecutive blocks drawn together.
            while let Some(&first) = sources.first() {
                let run = sources.iter().enumerate().take_while(|&(i, &b)| b == first + i).count();
                let (head, rest) = std::mem::take(&mut q).split_at_mut(run);
                draw.fill_q8(first, head);
                (q, sources) = (rest, &sources[run..]);
            }
        });
        Some(Ok(WeightSlab::Q8(Cow::Owned(q))))
    }

    /// The `part` (axis of one expert, ranges) a chip holds of expert `e` of an FP8 stack, in
    /// the chip's blocks `chip` (finer than the stack's when its share cuts a block): drawn
    /// whole as stored, cut into those blocks, then taken.
    pub(super) fn expert_fp8_part(
        &self,
        name: &str,
        e: usize,
        (axis, ranges): (usize, &[(usize, usize)]),
        chip: Storage,
    ) -> Option<Result<WeightSlab<'static>, String>> {
        let (shape, storage) = self.experts.get(name)?;
        let w = draw_blocks(&self.expert_draw(name, e, shape), shape, *storage)?;
        Some(w.take_as(axis, ranges, chip).map(BlockWeight::into_slab))
    }

    /// Expert `e` of a stacked weight zero-padded along `axis` (of one expert) to `to` values —
    /// MXFP4 blocks with whole zero blocks, the drawn ones kept; values with zeros — and then
    /// the `ranges` a chip of a zero-padded split holds (`TpSplit::stored`): the padding the
    /// deployment binds, never random values. A Q8_0 or FP8 expert is never padded.
    pub(super) fn expert_padded_part(
        &self,
        name: &str,
        e: usize,
        (axis, ranges): (usize, &[(usize, usize)]),
        to: usize,
    ) -> Option<Result<WeightSlab<'static>, String>> {
        let (shape, storage) = self.experts.get(name)?;
        if let Some(w) = draw_blocks(&self.expert_draw(name, e, shape), shape, *storage) {
            return Some(w.pad(axis, to).and_then(|w| w.take(axis, ranges)).map(BlockWeight::into_slab));
        }
        if *storage != Storage::Dense {
            return Some(Err(format!("`{name}` is stored {}: never zero-padded", storage.word())));
        }
        let (shape, values) = self.expert_dense(name, e)?;
        let padded = pad(&shape, &values, axis, to).and_then(|(shape, v)| take(&shape, &v, axis, ranges));
        Some(padded.map(|(_, v)| WeightSlab::Dense(Cow::Owned(v))))
    }

    /// How expert `e` of stacked weight `name` (each expert `shape`) is drawn.
    fn expert_draw(&self, name: &str, e: usize, shape: &[usize]) -> Seeded {
        Seeded::new(self.seed, &format!("{name}/{e}"), shape, false)
    }
}

/// A dense seeded tensor, held by one engine at a time: the simulator's, then the reference's.
enum Dense {
    Sim(SimTensor),
    Reference(Arc<Tensor>),
}

impl Dense {
    /// The reference's tensor (the simulator's data moved, not copied).
    fn into_reference(self) -> Dense {
        match self {
            Dense::Sim(t) => Dense::Reference(reference_tensor(t)),
            reference => reference,
        }
    }

    /// The reference's view: its own tensor, or a copy of the simulator's.
    fn reference(&self) -> Arc<Tensor> {
        match self {
            Dense::Reference(t) => t.clone(),
            Dense::Sim(t) => reference_tensor(t.clone()),
        }
    }

    /// The simulator's view: its own tensor, or a copy of the reference's.
    fn sim(&self) -> Cow<'_, SimTensor> {
        match self {
            Dense::Sim(t) => Cow::Borrowed(t),
            Dense::Reference(t) => Cow::Owned(match t.data() {
                Data::F32(v) => SimTensor::f32(t.shape().to_vec(), v.clone()),
                Data::I32(v) => SimTensor::i32(t.shape().to_vec(), v.clone()),
            }),
        }
    }
}

/// The simulator's tensor as the reference's, its data moved.
fn reference_tensor(SimTensor { shape, data }: SimTensor) -> Arc<Tensor> {
    Arc::new(match data {
        SimData::F32(v) => Tensor::f32(shape, v),
        SimData::I32(v) => Tensor::i32(shape, v),
    })
}

/// The reference's values of a Q8_0 weight: its blocks exactly dequantised, a task of blocks at
/// a time (the padding of a last partial block dropped).
fn dequantised(w: &Q8Weight) -> Arc<Tensor> {
    let mut dense = vec![0f32; w.blocks.len() * QK8_0];
    dense.par_chunks_mut(DRAW_CHUNK).zip(w.blocks.par_chunks(DRAW_BLOCKS)).for_each(|(out, blocks)| {
        for (out, b) in out.as_chunks_mut::<QK8_0>().0.iter_mut().zip(blocks) {
            rdu_spatial::q8::dequant_block(b, out);
        }
    });
    dense.truncate(w.shape.iter().product());
    Arc::new(Tensor::f32(w.shape.clone(), dense))
}

/// Values of an expert one task draws (a whole number of Q8_0 blocks).
const DRAW_CHUNK: usize = 1 << 14;

const _: () = assert!(DRAW_CHUNK.is_multiple_of(QK8_0), "a task draws a whole number of Q8_0 blocks");

/// Q8_0 blocks one task draws.
const DRAW_BLOCKS: usize = DRAW_CHUNK / QK8_0;

/// Halves (or otherwise scales) seeded values: states are kept moderate.
fn scaled(mut v: Vec<f32>, by: f32) -> Vec<f32> {
    v.iter_mut().for_each(|x| *x *= by);
    v
}

/// Rows of the embedding table, if the program looks one up (token ids must stay below it).
fn embed_rows(program: &SpatialProgram) -> usize {
    let ops = program.sections.iter().flat_map(|s| &s.stages).flat_map(|st| &st.ops);
    for op in ops.filter(|o| o.op == Op::Embed) {
        if let Some(Arg::Tensor(table)) = op.args.get(1) {
            if let Some(t) = program.tensors.iter().find(|t| &t.name == table) {
                return t.shape[0];
            }
        }
    }
    1
}

impl Bindings for Inputs {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.dense
            .get(name)
            .map(Dense::reference)
            .or_else(|| self.q8.get(name).map(|(values, w)| values.get_or_init(|| dequantised(w)).clone()))
            .or_else(|| {
                let (values, w) = self.blocks.get(name)?;
                Some(values.get_or_init(|| Arc::new(Tensor::f32(w.shape().to_vec(), w.dequantize()))).clone())
            })
    }

    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        if self.experts.contains_key(name) {
            let (shape, values) = self.expert_dense(name, index)?;
            return Some(Arc::new(Tensor::f32(shape, values)));
        }
        Bindings::tensor(self, name)?.slice0(index).map(Arc::new)
    }

    fn q8(&self, name: &str) -> Option<&Q8Weight> {
        self.q8.get(name).map(|(_, w)| w)
    }

    fn slice0_q8(&self, name: &str, index: usize) -> Option<Q8Weight> {
        let (shape, Storage::Q8_0) = self.experts.get(name)? else { return None };
        match self.expert_slab(name, index, None)? {
            Ok(WeightSlab::Q8(blocks)) => Some(Q8Weight { shape: shape.clone(), blocks: blocks.into_owned() }),
            _ => None,
        }
    }
}

impl SimBindings for Inputs {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        self.dense.get(name).map(Dense::sim)
    }

    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        self.q8.get(name).map(|(_, q)| Cow::Borrowed(q))
    }

    fn fp8(&self, name: &str) -> Option<Cow<'_, Fp8Weight>> {
        self.blocks.get(name)?.1.fp8().map(Cow::Borrowed)
    }

    fn packed(&self, name: &str) -> Option<PackedWeight<'_>> {
        self.blocks.get(name)?.1.packed()
    }

    fn expert(&self, name: &str, expert: usize) -> Option<WeightSlab<'_>> {
        self.expert_slab(name, expert, None)?.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdu_spatial::tensor_parallel::take_q8;

    fn inputs() -> Inputs {
        let mut experts = BTreeMap::new();
        experts.insert("Wg".to_string(), (vec![64, 96], Storage::Q8_0));
        experts.insert("Wd".to_string(), (vec![96, 64], Storage::Dense));
        // More values than one task draws, and not a whole number of tasks.
        experts.insert("Wb".to_string(), (vec![160, 256], Storage::Q8_0));
        experts.insert("Wc".to_string(), (vec![256, 160], Storage::Dense));
        let (dense, q8, blocks) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        Inputs { seed: 3, vocab: 1, dense, q8, blocks, experts }
    }

    fn q8_slab(slab: WeightSlab<'_>) -> Vec<Q8Block> {
        match slab {
            WeightSlab::Q8(b) => b.into_owned(),
            _ => panic!("a Q8_0-stored expert served otherwise"),
        }
    }

    /// The Q8_0 blocks of seeded weight `name` of `shape` under seed 3, drawn in one run, and
    /// their values.
    fn drawn_whole(name: &str, shape: &[usize]) -> (Q8Weight, Vec<f32>) {
        let mut blocks = vec![Q8Block { d: 0.0, qs: [0; QK8_0] }; shape.iter().product::<usize>() / QK8_0];
        Seeded::new(3, name, shape, false).fill_q8(0, &mut blocks);
        let w = Q8Weight { shape: shape.to_vec(), blocks };
        let Data::F32(values) = dequantised(&w).data().clone() else { panic!("dequantised values are f32") };
        (w, values)
    }

    /// An expert drawn a task's blocks (or one block) at a time is the expert's blocks drawn
    /// in one run (the seeded weight of `name/e`); a chip's part is that part of the whole,
    /// along either axis.
    #[test]
    fn an_expert_and_a_chips_part_of_it_are_the_seeded_weights_values() {
        let inputs = inputs();
        let (whole, dense) = drawn_whole("Wg/5", &[64, 96]);
        assert_eq!(q8_slab(inputs.expert_slab("Wg", 5, None).unwrap().unwrap()), whole.blocks);
        assert_eq!(inputs.expert_dense("Wg", 5).unwrap(), (vec![64, 96], dense));
        for (axis, ranges) in [(0, vec![(0, 16), (48, 64)]), (1, vec![(32, 96)]), (1, vec![(0, 32), (64, 96)])] {
            let part = q8_slab(inputs.expert_slab("Wg", 5, Some((axis, &ranges))).unwrap().unwrap());
            assert_eq!(part, take_q8(&whole, axis, &ranges).unwrap().blocks, "axis {axis} {ranges:?}");
        }
        // A range that splits a block is refused, not served.
        assert!(inputs.expert_slab("Wg", 5, Some((1, &[(0, 16)]))).unwrap().is_err());
        // A dense-stored expert: its values, and a part of them.
        let values = seeded_weight(3, "Wd/2", &[96, 64], false);
        assert_eq!(inputs.expert_dense("Wd", 2).unwrap().1, values);
        let Ok(WeightSlab::Dense(part)) = inputs.expert_slab("Wd", 2, Some((1, &[(8, 40)]))).unwrap() else {
            panic!("a dense expert served as blocks")
        };
        assert_eq!(part.into_owned(), take(&[96, 64], &values, 1, &[(8, 40)]).unwrap().1);
        assert!(inputs.expert_slab("Wx", 0, None).is_none());
        // Experts drawn over several tasks.
        const { assert!(160 * 256 > 2 * DRAW_CHUNK && 160 * 256 % DRAW_CHUNK != 0) };
        let (whole, dense) = drawn_whole("Wb/1", &[160, 256]);
        assert_eq!(q8_slab(inputs.expert_slab("Wb", 1, None).unwrap().unwrap()), whole.blocks);
        assert_eq!(inputs.expert_dense("Wb", 1).unwrap(), (vec![160, 256], dense));
        assert_eq!(inputs.expert_dense("Wc", 4).unwrap().1, seeded_weight(3, "Wc/4", &[256, 160], false));
    }
}
