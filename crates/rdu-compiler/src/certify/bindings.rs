//! Seeded inputs for numeric validation, served identically to the reference interpreter
//! (`graph::Bindings`) and to the simulator (`SimBindings`): the same values, Q8_0 weights as
//! blocks to the simulator and as their exact dequantised values to the reference. Stacked
//! expert weights are generated lazily, one expert at a time, so a step materialises only the
//! experts it routes to.

use crate::graph::{Bindings, Data, Graph, Tensor};
use crate::lang::ast::DeclKind;
use rdu_spatial::manifest::{InputRole, RopeTable};
use rdu_spatial::names::{parse_rope_table, runtime_input};
use rdu_spatial::program::{Arg, Op, SpatialProgram, Storage};
use rdu_spatial::q8::Q8Weight;
use rdu_spatial::seeded_weight;
use rdu_spatial::sim::{SimBindings, SimTensor, WeightSlab};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Every declared tensor of one program, seeded.
pub struct Inputs {
    seed: u64,
    dense: BTreeMap<String, (Arc<Tensor>, SimTensor)>,
    q8: BTreeMap<String, (Arc<Tensor>, Q8Weight)>,
    /// Stacked expert weights: name → (per-expert shape, stored Q8_0).
    experts: BTreeMap<String, (Vec<usize>, bool)>,
}

impl Inputs {
    pub fn new(program: &SpatialProgram, graph: &Graph, seed: u64) -> Inputs {
        let decls: HashMap<&str, &rdu_spatial::program::TensorDecl> =
            program.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
        let mut experts = BTreeMap::new();
        for op in program.sections.iter().flat_map(|s| &s.stages).flat_map(|st| &st.ops) {
            if op.op == Op::Experts {
                for arg in op.args.iter().skip(3) {
                    let Arg::Tensor(name) = arg else { continue };
                    if let Some(t) = decls.get(name.as_str()) {
                        experts.insert(name.clone(), (t.shape[1..].to_vec(), t.storage == Storage::Q8_0));
                    }
                }
            }
        }
        let vocab = embed_rows(program);
        let has_state = graph.states.iter().any(|_| true);
        let table_rows =
            graph.declared().find(|(_, _, d)| d.kind == DeclKind::Shared).map(|(_, v, _)| v.ty.shape[0]).unwrap_or(1);
        let mut inputs = Inputs { seed, dense: BTreeMap::new(), q8: BTreeMap::new(), experts };
        for (_, value, decl) in graph.declared() {
            let name = value.name.clone();
            let shape = value.ty.shape.clone();
            if inputs.experts.contains_key(&name) {
                continue;
            }
            let stored_q8 = decls.get(name.as_str()).is_some_and(|t| t.storage == Storage::Q8_0);
            let position = match runtime_input(&name) {
                Some((InputRole::Position, seq)) if decl.kind == DeclKind::Input => Some(seq.unwrap_or(0)),
                _ => None,
            };
            let values = match (decl.kind, position) {
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

    fn insert(&mut self, name: String, shape: Vec<usize>, values: Data, stored_q8: bool) {
        match values {
            Data::F32(v) if stored_q8 => {
                let (q, dense) = quantize(&shape, &v);
                drop(v);
                self.q8.insert(name, (Arc::new(Tensor::f32(shape, dense)), q));
            }
            Data::F32(v) => {
                let sim = SimTensor::f32(shape.clone(), v.clone());
                self.dense.insert(name, (Arc::new(Tensor::f32(shape, v)), sim));
            }
            Data::I32(v) => {
                let sim = SimTensor::i32(shape.clone(), v.clone());
                self.dense.insert(name, (Arc::new(Tensor::i32(shape, v)), sim));
            }
        }
    }

    /// The simulator's view of a dense tensor, or a Q8_0 weight's blocks (tensor-parallel slicing).
    pub(super) fn sim_dense(&self, name: &str) -> Option<&SimTensor> {
        self.dense.get(name).map(|(_, t)| t)
    }

    pub(super) fn sim_q8(&self, name: &str) -> Option<&Q8Weight> {
        self.q8.get(name).map(|(_, q)| q)
    }

    pub(super) fn is_stacked(&self, name: &str) -> bool {
        self.experts.contains_key(name)
    }

    /// Expert `e` of a stacked weight: dense values, and its Q8_0 blocks when stored so.
    pub(super) fn expert_values(&self, name: &str, e: usize) -> Option<(Vec<usize>, Vec<f32>, Option<Q8Weight>)> {
        let (shape, q8) = self.experts.get(name)?;
        let values = seeded_weight(self.seed, &format!("{name}/{e}"), shape, false);
        if *q8 {
            let (q, dense) = quantize(shape, &values);
            Some((shape.clone(), dense, Some(q)))
        } else {
            Some((shape.clone(), values, None))
        }
    }
}

/// Q8_0 blocks of `values` and their exact dequantised values, block by block in parallel.
fn quantize(shape: &[usize], values: &[f32]) -> (Q8Weight, Vec<f32>) {
    use rayon::prelude::*;
    let blocks: Vec<_> = values.par_chunks(32).map(rdu_spatial::q8::Q8Block::quantize).collect();
    let mut dense = vec![0f32; values.len()];
    dense.par_chunks_mut(32).zip(&blocks).for_each(|(out, b)| rdu_spatial::q8::dequant_block(b, out));
    (Q8Weight { shape: shape.to_vec(), blocks }, dense)
}

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
        self.dense.get(name).map(|(t, _)| t.clone()).or_else(|| self.q8.get(name).map(|(t, _)| t.clone()))
    }

    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        if self.experts.contains_key(name) {
            let (shape, values, _) = self.expert_values(name, index)?;
            return Some(Arc::new(Tensor::f32(shape, values)));
        }
        Bindings::tensor(self, name)?.slice0(index).map(Arc::new)
    }
}

impl SimBindings for Inputs {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        self.dense.get(name).map(|(_, t)| Cow::Borrowed(t))
    }

    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        self.q8.get(name).map(|(_, q)| Cow::Borrowed(q))
    }

    fn expert(&self, name: &str, expert: usize) -> Option<WeightSlab<'_>> {
        if !self.experts.contains_key(name) {
            return None;
        }
        let (_, values, q8) = self.expert_values(name, expert)?;
        Some(match q8 {
            Some(q) => WeightSlab::Q8(Cow::Owned(q.blocks)),
            None => WeightSlab::Dense(Cow::Owned(values)),
        })
    }
}
