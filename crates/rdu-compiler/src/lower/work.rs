//! What one kernel op costs per step: FLOPs, bytes it must read from HBM (weights as stored,
//! caches and states), and the SRAM it needs for its results and one tile of its weights.
//! Shared by placement, sectioning and the cost model.

use rdu_spatial::op::Cost;
use rdu_spatial::program::{Arg, KernelOp, Role, SpatialProgram, TensorDecl};
use std::collections::HashMap;

/// Per-step work of one op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Work {
    pub flops: u64,
    pub hbm_bytes: u64,
    pub sram_bytes: u64,
    /// Bytes this chip sends over the chip-to-chip link (all-reduces).
    pub link_bytes: u64,
}

impl std::ops::AddAssign for Work {
    fn add_assign(&mut self, o: Work) {
        self.flops += o.flops;
        self.hbm_bytes += o.hbm_bytes;
        self.sram_bytes += o.sram_bytes;
        self.link_bytes += o.link_bytes;
    }
}

fn numel(shape: &[usize]) -> u64 {
    shape.iter().map(|&d| d as u64).product()
}

/// Bytes of a tensor as stored in memory (`rdu_spatial::memory::stored_bytes`: Q8_0 blocks,
/// bf16 for dense weights and for states declared `bf16`, 4 bytes for f32 states and f32/i32
/// activations).
pub fn stored_bytes(t: &TensorDecl) -> u64 {
    rdu_spatial::memory::stored_bytes(&t.shape, t.role, t.storage).unwrap_or(u64::MAX / 4)
}

/// A program's declarations by name and its chip count: what [`op_work`] reads, indexed once
/// per program so that costing every op stays linear in the program's size (a batched step
/// declares states and temporaries per sequence).
pub struct WorkModel<'p> {
    decls: HashMap<&'p str, &'p TensorDecl>,
    chips: u64,
}

impl<'p> WorkModel<'p> {
    pub fn of(program: &'p SpatialProgram) -> WorkModel<'p> {
        WorkModel::new(&program.tensors, program.tp.as_ref().map_or(1, |t| t.chips.max(1) as u64))
    }

    /// Over `tensors` (a program's declarations) on `chips` chips.
    pub fn new(tensors: &'p [TensorDecl], chips: u64) -> WorkModel<'p> {
        WorkModel { decls: tensors.iter().map(|t| (t.name.as_str(), t)).collect(), chips }
    }

    fn decl(&self, name: &str) -> Option<&'p TensorDecl> {
        self.decls.get(name).copied()
    }
}

/// The per-step work of `op` in the program `model` indexes, by its cost class (the op
/// table's `.cost(…)`: every class is counted here, no op by name).
pub fn op_work(model: &WorkModel<'_>, op: &KernelOp) -> Work {
    let decl = |name: &str| model.decl(name);
    let tensor_args: Vec<&TensorDecl> =
        op.args.iter().filter_map(|a| if let Arg::Tensor(n) = a { decl(n) } else { None }).collect();
    let out = op.outs.first().and_then(|o| decl(o));
    let out_elems = out.map(|t| numel(&t.shape)).unwrap_or(0);
    let sram_bytes = op.outs.iter().filter_map(|o| decl(o)).map(|t| numel(&t.shape) * 4).sum::<u64>();
    let hbm_of =
        |t: &TensorDecl| if matches!(t.role, Role::Weight | Role::State | Role::Shared) { stored_bytes(t) } else { 0 };
    // The rows of the tensor operand at `i` (a prefill chunk's own, after `pos`), 0 if absent.
    let rows_at = |i: usize| match op.args.get(i) {
        Some(Arg::Tensor(n)) => decl(n).map_or(0, |t| t.shape[0] as u64),
        _ => 0,
    };
    let mut work = Work { flops: out_elems, hbm_bytes: 0, sram_bytes, link_bytes: 0 };
    match op.op.cost() {
        Cost::Product | Cost::HeadProduct => {
            let w = tensor_args.get(1);
            let inner = w.and_then(|w| w.shape.last()).copied().unwrap_or(1) as u64;
            work.flops = 2 * out_elems * inner;
            work.hbm_bytes = tensor_args.iter().map(|t| hbm_of(t)).sum();
        }
        Cost::Lookup => {
            // One row per id.
            let rows = tensor_args.first().map(|t| numel(&t.shape)).unwrap_or(1);
            let table = tensor_args.get(1);
            work.hbm_bytes = table
                .map(|t| stored_bytes(t) / t.shape.first().copied().unwrap_or(1).max(1) as u64 * rows)
                .unwrap_or(0);
        }
        Cost::Experts => {
            // Only the top-k experts of each row are read.
            let w = tensor_args.get(1).map(|t| *t.shape.last().unwrap_or(&1) as u64).unwrap_or(1);
            let stacked: Vec<&&TensorDecl> = tensor_args.iter().skip(3).collect();
            let experts = stacked.first().map(|t| t.shape[0] as u64).unwrap_or(1).max(1);
            let rows = tensor_args.first().map(|t| t.shape[0] as u64).unwrap_or(1);
            let touched = (w * rows).min(experts);
            let per_expert: u64 = stacked.iter().map(|t| hbm_of(t) / experts).sum();
            let expert_elems: u64 = stacked.iter().map(|t| numel(&t.shape) / experts).sum();
            work.hbm_bytes = per_expert * touched;
            work.flops = 2 * expert_elems * w * rows;
        }
        Cost::Attention(pos_arg) => {
            // Every cached position of every kv head is read once per step; a prefill chunk's
            // own keys and values (the arguments after `pos`) are attended to as well.
            let q = tensor_args.first();
            let cache: Vec<&&TensorDecl> = tensor_args.iter().skip(1).filter(|t| t.role == Role::State).collect();
            work.hbm_bytes = cache.iter().map(|t| stored_bytes(t)).sum();
            let chunk_rows = rows_at(pos_arg + 1);
            let slots = tensor_args.get(1).map(|t| t.shape[0] as u64).unwrap_or(1) + chunk_rows;
            let (rows, heads, dk) =
                q.map(|q| (q.shape[0] as u64, q.shape[1] as u64, q.shape[2] as u64)).unwrap_or((1, 1, 1));
            let dv = out.map(|o| *o.shape.last().unwrap_or(&1) as u64).unwrap_or(1);
            work.flops = 2 * rows * heads * slots * (dk + dv);
        }
        Cost::AttentionUp(pos_arg) => {
            // Every cached latent is read once per step (the chunk's own after `pos`), with the
            // up-projections `Wk`, `Wv` (weights as stored, or values the stage already holds);
            // each head widens every entry's latent into its key and value, then attends.
            work.hbm_bytes = (tensor_args.iter())
                .filter(|t| matches!(t.role, Role::State | Role::Weight))
                .map(|t| stored_bytes(t))
                .sum();
            let chunk_rows = rows_at(pos_arg + 1);
            let dim = |i: usize, axis: usize| tensor_args.get(i).map_or(1, |t| t.shape[axis] as u64);
            let entries = dim(1, 0) + chunk_rows;
            let (rows, heads, dq) = (dim(0, 0), dim(0, 1), dim(0, 2));
            let (dk, dv, latent) = (dim(2, 1), dim(3, 1), dim(2, 2));
            work.flops = 2 * heads * entries * latent * (dk + dv) + 2 * rows * heads * entries * (dq + dv);
        }
        Cost::Collective => {
            // A ring all-reduce sends 2(tp − 1)/tp of the tensor from every chip (reduce-scatter,
            // then all-gather), as f32; one chip sends nothing.
            let chips = model.chips;
            work.link_bytes = out_elems * 4 * 2 * (chips - 1) / chips;
        }
        Cost::CacheWrite => {
            // The new rows are written at their slots, in place (`sim::attention::cache_put`);
            // the rest of the cache is neither read nor written. Stored at the cache's own
            // width (bf16 or f32), and staged in SRAM as f32 on the way.
            let cache = tensor_args.first();
            let rows = tensor_args.get(1).map_or(0, |x| numel(&x.shape));
            let per_elem = cache.map_or(0, |c| stored_bytes(c) / numel(&c.shape).max(1));
            work.hbm_bytes = rows * per_elem;
            work.sram_bytes = rows * 4;
            work.flops = rows;
        }
        Cost::Recurrent => {
            // States are read and written back.
            work.hbm_bytes = tensor_args.iter().filter(|t| t.role == Role::State).map(|t| 2 * stored_bytes(t)).sum();
            work.flops = 6 * out_elems.max(tensor_args.iter().map(|t| numel(&t.shape)).max().unwrap_or(0));
        }
        Cost::Elementwise => {
            work.hbm_bytes = tensor_args.iter().map(|t| hbm_of(t)).sum();
        }
    }
    work
}
