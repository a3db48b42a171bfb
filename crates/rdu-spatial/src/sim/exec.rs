//! The executor: binds tensors on first read, runs the ops wave by wave (independent ones at
//! once, [`waves`](super::waves)), checks what they produce.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};

use rayon::prelude::*;

use super::bind::SimBindings;
use super::call::{dispatch, ArgVal, Call, Outs};
use super::collective::Collective;
use super::packed::PackedWeight;
use super::tensor::SimTensor;
use super::SimError;
use crate::program::{Arg, Fold, KernelOp, Op, Role, SpatialProgram, Storage, TensorDecl};
use crate::q8::{Q8Weight, QK8_0};
use rdu_checkpoint::{Fp8Weight, GgmlType};

/// Runs `program`; states in `states` (when `in_place`) are read from and written back there.
/// With `routes`, every `route` op's expert indices are kept there under the name it binds.
pub(super) fn run(
    program: &SpatialProgram,
    bindings: &dyn SimBindings,
    states: &mut BTreeMap<String, SimTensor>,
    in_place: bool,
    collective: Option<(&dyn Collective, usize)>,
    routes: Option<&mut BTreeMap<String, SimTensor>>,
) -> Result<BTreeMap<String, SimTensor>, SimError> {
    let decls: HashMap<&str, &TensorDecl> = program.tensors.iter().map(|d| (d.name.as_str(), d)).collect();
    let mut ex = Exec { bindings, decls, env: HashMap::new(), collective, routes, clean: HashSet::new() };
    if in_place {
        for decl in program.tensors.iter().filter(|d| d.role == Role::State) {
            if let Some(t) = states.remove(&decl.name) {
                debug_assert!(
                    decl.storage != Storage::Bf16 || t.as_f32().is_none_or(crate::bf16::all_bf16),
                    "the bf16 state {} holds values bf16 does not represent",
                    decl.name
                );
                ex.env.insert(decl.name.clone(), Val::Dense(Cow::Owned(t)));
                ex.clean.insert(decl.name.clone());
            }
        }
    }
    let result = ex.steps(program);
    if !in_place {
        states.clear();
    }
    // Every state reached goes back to the caller, on success and on error alike.
    for decl in program.tensors.iter().filter(|d| d.role == Role::State) {
        if let Some(Val::Dense(t)) = ex.env.remove(&decl.name) {
            states.insert(decl.name.clone(), t.into_owned());
        } else if !in_place && result.is_ok() {
            ex.resolve(&decl.name)?;
            if let Some(Val::Dense(t)) = ex.env.remove(&decl.name) {
                states.insert(decl.name.clone(), t.into_owned());
            }
        }
    }
    result?;
    let mut outputs = BTreeMap::new();
    for name in &program.outputs {
        if outputs.contains_key(name) {
            continue;
        }
        // Moved out, not copied: a 16-row step's logits are 16 MiB.
        match ex.env.remove(name) {
            Some(Val::Dense(t)) => outputs.insert(name.clone(), t.into_owned()),
            _ => match states.get(name) {
                Some(t) => outputs.insert(name.clone(), t.clone()),
                None => return Err(SimError::NoOutput { name: name.clone() }),
            },
        };
    }
    Ok(outputs)
}

/// A value of the environment: dense, a weight as Q8_0 blocks or as FP8 values and block
/// scales, or a weight read in place in a ggml block format (`fold`: the fold its declared
/// storage asks for — Q8_0 or MXFP4 — or `None` for a dense-declared weight kept packed).
pub(super) enum Val<'b> {
    Dense(Cow<'b, SimTensor>),
    Q8(Cow<'b, Q8Weight>),
    Fp8(Cow<'b, Fp8Weight>),
    Packed { w: PackedWeight<'b>, fold: Option<Fold> },
}

struct Exec<'p, 'b, 'r> {
    bindings: &'b dyn SimBindings,
    decls: HashMap<&'p str, &'p TensorDecl>,
    /// Hashed, not ordered: a 16-row step looks names up thousands of times, and nothing
    /// iterates over them (ordered, comparing names took 1.4% of `rdu serve`'s CPU samples at
    /// 16 streams).
    env: HashMap<String, Val<'b>>,
    collective: Option<(&'b dyn Collective, usize)>,
    routes: Option<&'r mut BTreeMap<String, SimTensor>>,
    /// States known to hold only values their storage represents: the caller's (in place) and
    /// every one this run has bound. A row `cache_put` writes into such a bf16 state is
    /// rounded as it goes in, not the whole cache after it.
    clean: HashSet<String>,
}

/// An op and where it stands in its program (for errors).
struct Placed<'p> {
    stage: &'p str,
    index: usize,
    op: &'p KernelOp,
}

impl Placed<'_> {
    /// `e` as an error of this op (a kernel's refusal named with its stage and index).
    fn label(&self, e: SimError) -> SimError {
        match e {
            SimError::Invalid { message } => {
                SimError::Op { stage: self.stage.to_string(), index: self.index, op: self.op.op.to_string(), message }
            }
            other => other,
        }
    }
}

/// What an op took out of the environment before its call: the state it updates in place, and
/// the rows a `cache_put` writes into a bf16 state, rounded.
struct Taken {
    inplace: Option<SimTensor>,
    rows: Option<SimTensor>,
}

impl<'p, 'b> Exec<'p, 'b, '_> {
    /// Runs the program's ops wave by wave ([`waves`](super::waves)): each wave's operands
    /// bound, its calls made at once where it holds more than one, their outputs bound in
    /// program order. Every op reads what it would one op at a time; a 16-sequence decode step
    /// runs its sequences' attention on every thread.
    fn steps(&mut self, program: &'p SpatialProgram) -> Result<(), SimError> {
        let placed: Vec<Placed<'p>> = program
            .sections
            .iter()
            .flat_map(|s| &s.stages)
            .flat_map(|stage| stage.ops.iter().enumerate().map(|(index, op)| Placed { stage: &stage.name, index, op }))
            .collect();
        let ops: Vec<&KernelOp> = placed.iter().map(|p| p.op).collect();
        for wave in super::waves::waves(&ops) {
            let wave: Vec<&Placed<'p>> = wave.iter().map(|&i| &placed[i]).collect();
            self.wave(&wave)?;
        }
        Ok(())
    }

    /// Runs one wave's ops. An op that cannot be prepared (an operand it cannot bind) ends the
    /// wave: the ops before it still run. The error returned is the first in program order,
    /// after every op that ran has written its state or put it back.
    fn wave(&mut self, wave: &[&Placed<'p>]) -> Result<(), SimError> {
        let (mut rows, mut states) = (Vec::with_capacity(wave.len()), Vec::with_capacity(wave.len()));
        let mut refused = None;
        for p in wave {
            match self.prepare(p.op) {
                Ok(taken) => {
                    rows.push(taken.rows);
                    states.push(taken.inplace);
                }
                Err(e) => {
                    refused = Some(p.label(e));
                    break;
                }
            }
        }
        let wave = &wave[..rows.len()];
        let (results, leftovers) = self.calls(wave, &rows, states);
        let mut first = None;
        for (((p, result), leftover), rows) in wave.iter().zip(results).zip(leftovers).zip(&rows) {
            if let Err(e) = self.finish(p.op, result, leftover, rows.is_some()) {
                first = first.or(Some(p.label(e)));
            }
        }
        first.or(refused).map_or(Ok(()), Err)
    }

    /// Makes each op's call and runs them — at once when there are several — then hands back
    /// each op's result and the state its call still holds (one it refused to update).
    fn calls(
        &self,
        wave: &[&Placed<'p>],
        rows: &[Option<SimTensor>],
        mut states: Vec<Option<SimTensor>>,
    ) -> (Vec<Outs>, Vec<Option<SimTensor>>) {
        let calls: Vec<Result<Call<'_>, SimError>> = wave
            .iter()
            .zip(rows)
            .zip(states.iter_mut())
            .map(|((p, rows), state)| self.call(p.op, rows.as_ref(), state))
            .collect();
        let run = |(call, state): (Result<Call<'_>, SimError>, Option<SimTensor>)| match call {
            Ok(mut call) => (timed(&mut call), call.inplace.take()),
            Err(e) => (Err(e), state),
        };
        if calls.iter().flatten().nth(1).is_some() {
            calls.into_par_iter().zip(states).map(run).unzip()
        } else {
            calls.into_iter().zip(states).map(run).unzip()
        }
    }

    /// Binds `op`'s operands (from the bindings on first read; a packed weight another op reads
    /// widened once) and takes out the state an in-place update writes.
    fn prepare(&mut self, op: &KernelOp) -> Result<Taken, SimError> {
        let Some(last) = op.outs.last() else { return super::invalid("an op must bind at least one output") };
        for (i, arg) in op.args.iter().enumerate() {
            if let Arg::Tensor(name) = arg {
                // Stacked expert weights not yet bound are read one expert at a time, later.
                let lazy = op.op.expert_weights().contains(&i) && !self.env.contains_key(name);
                if !lazy {
                    self.resolve(name)?;
                }
            }
        }
        // A packed weight read by any other op is widened (or reblocked) for it, once.
        for (i, arg) in op.args.iter().enumerate() {
            if let Arg::Tensor(name) = arg {
                // Ops that read one weight packed, row by row, read it in place.
                if op.op.row_weight() != Some(i) {
                    self.unpack(name);
                }
            }
        }
        // An update whose first argument is the state it writes takes it by value (in place).
        let state_first = matches!(op.args.first(), Some(Arg::Tensor(n)) if n == last);
        let inplace = if op.update && state_first && op.op.writes_state_in_place() {
            match self.env.remove(last.as_str()) {
                Some(Val::Dense(t)) => Some(t.into_owned()),
                Some(other) => {
                    self.env.insert(last.clone(), other);
                    None
                }
                None => None,
            }
        } else {
            None
        };
        let rows = if inplace.is_some() { self.rounded_rows(op, last) } else { None };
        Ok(Taken { inplace, rows })
    }

    /// `op`'s call over the environment, with what [`Exec::prepare`] took (the state moves
    /// into the call; refused, it stays in `inplace`).
    fn call<'c>(
        &'c self,
        op: &'c KernelOp,
        rows: Option<&'c SimTensor>,
        inplace: &mut Option<SimTensor>,
    ) -> Result<Call<'c>, SimError> {
        let mut args = Vec::with_capacity(op.args.len());
        for (i, arg) in op.args.iter().enumerate() {
            args.push(match (arg, rows) {
                (_, Some(rows)) if i == 1 => ArgVal::Dense(rows),
                (Arg::Lit(_), _) => ArgVal::Lit,
                (Arg::Tensor(name), _) => match self.env.get(name.as_str()) {
                    Some(Val::Dense(t)) => ArgVal::Dense(t),
                    Some(Val::Q8(w)) => ArgVal::Q8(w),
                    Some(Val::Fp8(w)) => ArgVal::Fp8(w),
                    Some(Val::Packed { w, fold }) => ArgVal::Packed(*w, *fold),
                    None if i == 0 && inplace.is_some() => ArgVal::Taken,
                    None => match self.decls.get(name.as_str()) {
                        Some(decl) if decl.role.is_bound() => ArgVal::Stacked(decl),
                        _ => return super::invalid(format!("{name} is read before it is produced")),
                    },
                },
            });
        }
        check_storage(op, &args)?;
        Ok(Call { op, args, bindings: self.bindings, inplace: inplace.take(), collective: self.collective })
    }

    /// Binds what `op` produced (`result`), or puts back the state its refused call held.
    fn finish(
        &mut self,
        op: &KernelOp,
        result: Outs,
        leftover: Option<SimTensor>,
        rounded: bool,
    ) -> Result<(), SimError> {
        let Some(last) = op.outs.last() else { return super::invalid("an op must bind at least one output") };
        if let Some(state) = leftover {
            // A state taken for an in-place update goes back when the kernel refuses the op.
            self.env.insert(last.clone(), Val::Dense(Cow::Owned(state)));
        }
        let outs = result?;
        if outs.len() != op.outs.len() {
            let n = outs.len();
            return super::invalid(format!("`{}` produces {n} outputs, the op binds {}", op.op, op.outs.len()));
        }
        if let (Op::Route, Some(routes), Some(name), Some(idx)) =
            (&op.op, self.routes.as_mut(), op.outs.get(1), outs.get(1))
        {
            routes.insert(name.clone(), idx.clone());
        }
        for (k, (name, value)) in op.outs.iter().zip(outs).enumerate() {
            let is_state = op.update && k + 1 == op.outs.len();
            self.bind(name, value, is_state, is_state && rounded)?;
        }
        Ok(())
    }

    /// The rows a `cache_put` writes into a clean bf16 state, rounded as they go in: the state
    /// after is the one rounding all of it would give, without a pass over a whole cache for
    /// each row. `None` for any other op or state (and for rows that are not f32).
    fn rounded_rows(&self, op: &KernelOp, state: &str) -> Option<SimTensor> {
        if op.op != Op::CachePut
            || !self.clean.contains(state)
            || self.decls.get(state).is_none_or(|d| d.storage != Storage::Bf16)
        {
            return None;
        }
        let Some(Arg::Tensor(x)) = op.args.get(1) else { return None };
        let Some(Val::Dense(t)) = self.env.get(x.as_str()) else { return None };
        let mut rows = t.as_ref().clone();
        crate::bf16::round_bf16_slice(rows.as_f32_mut()?);
        Some(rows)
    }

    /// Makes `name` available in the environment, from the bindings if the program declares it
    /// as bound.
    fn resolve(&mut self, name: &str) -> Result<(), SimError> {
        if self.env.contains_key(name) {
            return Ok(());
        }
        let Some(decl) = self.decls.get(name).copied().filter(|d| d.role.is_bound()) else {
            return super::invalid(format!("{name} is read before it is produced"));
        };
        let missing = || SimError::Missing { name: name.to_string(), role: decl.role.as_str().to_string() };
        let bad = |message: String| SimError::Binding { name: name.to_string(), message };
        let numel = checked_numel(&decl.shape).ok_or_else(|| bad("declared shape is too large".into()))?;
        let fold = decl.storage.fold();
        // The ggml format a packed weight must have for its declared storage (any one the
        // simulator reads in place for a dense-declared weight).
        let packed_format = match decl.storage {
            Storage::Q8_0 => Some(GgmlType::Q8_0),
            Storage::Mxfp4 => Some(GgmlType::MXFP4),
            _ => None,
        };
        if let Some(w) = self.bindings.packed(name).filter(|_| !matches!(decl.storage, Storage::Fp8 { .. })) {
            let fits = w.shape == decl.shape.as_slice()
                && packed_format.is_none_or(|f| w.format == f)
                && decl.dtype == crate::program::Dtype::F32;
            if let Err(problem) = w.check() {
                return Err(bad(problem));
            }
            if !fits {
                return Err(bad(format!("{} {:?}, declared {:?}", w.format, w.shape, decl.shape)));
            }
            self.env.insert(name.to_string(), Val::Packed { w, fold });
            return Ok(());
        }
        let val = match decl.storage {
            Storage::Q8_0 => {
                let w = self.bindings.q8(name).ok_or_else(missing)?;
                let last = decl.shape.last().copied().unwrap_or(0);
                if w.shape != decl.shape || last % QK8_0 != 0 || w.blocks.len() * QK8_0 != numel {
                    let (shape, blocks) = (&w.shape, w.blocks.len());
                    return Err(bad(format!("q8_0 {shape:?} with {blocks} blocks, declared {:?}", decl.shape)));
                }
                Val::Q8(w)
            }
            Storage::Fp8 { rows, cols } => {
                let w = self.bindings.fp8(name).ok_or_else(missing)?;
                let block = [rows as usize, cols as usize];
                let grid_ok = rdu_checkpoint::Fp8Grid::of(&w.shape, block).ok().and_then(|g| g.len());
                if w.shape != decl.shape
                    || w.block != block
                    || w.values.len() != numel
                    || grid_ok != Some(w.scales.len())
                {
                    let (shape, b, n) = (&w.shape, w.block, w.scales.len());
                    let what = format!("fp8 {shape:?} in {}×{} blocks with {n} scales", b[0], b[1]);
                    return Err(bad(format!("{what}, declared {:?} in {rows}×{cols} blocks", decl.shape)));
                }
                Val::Fp8(w)
            }
            Storage::Mxfp4 => return Err(missing()),
            Storage::Dense | Storage::Bf16 => {
                let t = self.bindings.tensor(name).ok_or_else(missing)?;
                if t.shape != decl.shape || t.dtype() != decl.dtype || t.len() != numel {
                    let (dtype, shape, len) = (t.dtype().as_str(), &t.shape, t.len());
                    return Err(bad(format!(
                        "{dtype}{shape:?} with {len} values, declared {}{:?}",
                        decl.dtype.as_str(),
                        decl.shape
                    )));
                }
                Val::Dense(t)
            }
        };
        self.env.insert(name.to_string(), val);
        Ok(())
    }

    /// Replaces a packed weight by its widened values — declared Q8_0, by its blocks; declared
    /// in another block format, it stays as stored (an op that folds it reads it so; `dequant`
    /// widens it; any other op is refused).
    fn unpack(&mut self, name: &str) {
        if let Some(Val::Packed { w, fold }) = self.env.get(name) {
            let val = match (fold, w.to_q8()) {
                (Some(Fold::Q8), Some(blocks)) => Val::Q8(Cow::Owned(blocks)),
                (Some(_), _) => return,
                _ => Val::Dense(Cow::Owned(SimTensor::f32(w.shape.to_vec(), w.widen_all()))),
            };
            self.env.insert(name.to_string(), val);
        }
    }

    /// Binds `name` to `value`; a bf16 state's values are rounded to bf16 unless `rounded`
    /// (an in-place update that rounded what it wrote).
    fn bind(&mut self, name: &str, mut value: SimTensor, is_state: bool, rounded: bool) -> Result<(), SimError> {
        let decl = self.decls.get(name).copied();
        if is_state && decl.map(|d| d.role) != Some(Role::State) {
            return super::invalid(format!("{name} is updated with `<-` but is not a declared state"));
        }
        if !is_state {
            if decl.is_some_and(|d| d.role.is_bound()) {
                return super::invalid(format!("{name} is a declared {} and cannot be rebound", decl_role(decl)));
            }
            if self.env.contains_key(name) {
                return super::invalid(format!("{name} is bound twice"));
            }
        }
        if let Some(d) = decl {
            if d.shape != value.shape || d.dtype != value.dtype() {
                let got = format!("{}{:?}", value.dtype().as_str(), value.shape);
                let want = format!("{}{:?}", d.dtype.as_str(), d.shape);
                return super::invalid(format!("produces {got} but {name} is declared {want}"));
            }
        }
        if is_state && !rounded && decl.is_some_and(|d| d.storage == Storage::Bf16) {
            // What is written into a bf16 state is stored as bf16: every value rounded (RNE).
            if let Some(values) = value.as_f32_mut() {
                crate::bf16::round_bf16_slice(values);
            }
        }
        if is_state && !self.clean.contains(name) {
            self.clean.insert(name.to_string());
        }
        self.env.insert(name.to_string(), Val::Dense(Cow::Owned(value)));
        Ok(())
    }
}

/// Runs `call`'s kernel, its time recorded when the profile is on.
fn timed(call: &mut Call<'_>) -> Outs {
    let started = super::profile::on().then(std::time::Instant::now);
    let result = dispatch(call);
    if let (Some(t), Ok(outs)) = (started, &result) {
        super::profile::record(
            call.op.op.name(),
            outs.first().map_or(&[][..], |o| &o.shape),
            t.elapsed().as_secs_f64(),
        );
    }
    result
}

fn decl_role(decl: Option<&TensorDecl>) -> &'static str {
    decl.map(|d| d.role.as_str()).unwrap_or("tensor")
}

/// A weight stored in a block format may only be read by an op that folds that format, or by
/// `dequant`; an op that folds reads a weight of its format.
fn check_storage(op: &KernelOp, args: &[ArgVal<'_>]) -> Result<(), SimError> {
    let fold_of = |a: &ArgVal<'_>| match a {
        ArgVal::Q8(_) => Some(Fold::Q8),
        ArgVal::Fp8(_) => Some(Fold::Fp8),
        ArgVal::Packed(_, fold) => *fold,
        ArgVal::Stacked(d) => d.storage.fold(),
        _ => None,
    };
    if op.op == Op::Dequant {
        return Ok(());
    }
    let stored: Vec<(usize, Fold)> = args.iter().enumerate().filter_map(|(i, a)| Some((i, fold_of(a)?))).collect();
    let name = |i: usize| match &op.args[i] {
        Arg::Tensor(n) => n.as_str(),
        Arg::Lit(_) => "?",
    };
    match (op.fold, stored.first()) {
        (Some(fold), None) => super::invalid(format!("fold={} but no argument is stored {}", fold.word(), word(fold))),
        (None, Some(&(i, f))) => super::invalid(format!(
            "{} is stored {} but the op does not fold {} (use fold={} or dequant)",
            name(i),
            word(f),
            f.word(),
            f.word()
        )),
        (Some(fold), _) => match stored.iter().find(|&&(_, f)| f != fold) {
            Some(&(i, f)) => {
                super::invalid(format!("{} is stored {} but the op folds {}", name(i), word(f), fold.word()))
            }
            None => Ok(()),
        },
        (None, None) => Ok(()),
    }
}

/// The storage word of a fold, for messages (`q8_0`, `fp8`, `mxfp4`).
fn word(fold: Fold) -> &'static str {
    match fold {
        Fold::Q8 => "q8_0",
        Fold::Fp8 => "fp8",
        Fold::Mxfp4 => "mxfp4",
    }
}

/// The element count of `shape`, or `None` on overflow.
pub(super) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}
