//! Certification of a tensor-parallel layer program — translation validation of the split.
//!
//! The program is one chip's share (SPMD). It is run on every chip at once, one thread each,
//! with a real all-reduce between them (`rdu_spatial::sim::AllReduce`), every chip's weights
//! and states cut from the SAME seeded full-size tensors by its slices; then
//! (a) every chip's outputs must match the reference interpreter of the UNSPLIT program of
//! the layer on the full tensors, and (b) every chip's final states must match its slice of
//! the unsplit program's final states — within `TOLERANCE` of each tensor's scale.
//! Structure: the slices partition each split tensor (or replicate it exactly), and no
//! output, state or nonlinear op reads a partial sum that was not all-reduced.

use super::bindings::Inputs;
use super::{compare, structure, Certificate, CertifyFault, TOLERANCE};
use crate::graph::Graph;
use rdu_spatial::blocks::BlockWeight;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Arg, Op, Role, SpatialProgram, Storage, TpSplit};
use rdu_spatial::q8::Q8Weight;
use rdu_spatial::sim::{simulate_chip, AllReduce, Collective, SimBindings, SimTensor, WeightSlab};
use rdu_spatial::tensor_parallel::{check_cover, check_split, join, pad, take, take_q8};
use rdu_spatial::TypedOp;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

/// Certifies `program` (one chip's share, lowered from `graph`, its `tp` filled) against the
/// unsplit program `full` (lowered from `full_graph`: same names, full shapes).
pub fn certify_tp(
    program: &SpatialProgram,
    graph: &Graph,
    full: &SpatialProgram,
    full_graph: &Graph,
    chip: &Chip,
    seed: u64,
) -> Result<Certificate, CertifyFault> {
    let mut checks = check_tp_structure(program, graph, full, chip)?;
    let tp = program.tp.as_ref().ok_or_else(|| CertifyFault::Structure("no tensor-parallel layout".into()))?;
    let chips = tp.chips as usize;
    let mut inputs = Inputs::new(full, full_graph, seed);
    let splits: BTreeMap<&str, &TpSplit> = tp.splits.iter().map(|s| (s.tensor.as_str(), s)).collect();
    let group = AllReduce::new(chips);
    let runs: Vec<Result<_, CertifyFault>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..chips)
            .map(|c| {
                let (inputs, splits, group) = (&inputs, &splits, &group);
                scope.spawn(move || {
                    let fail = |message: String| {
                        group.abort(&message);
                        CertifyFault::Engine { engine: "simulator", message: format!("chip {c}: {message}") }
                    };
                    let mut env = ChipInputs::new(inputs, program, splits, c).map_err(fail)?;
                    // The chip's slices of its f32 states are its own copies: handed over by
                    // value, so an update (a cache's rows) writes them in place, not into a
                    // clone. (A bf16 state stays bound: its seeded values are not all bf16
                    // values, and the simulator rounds a bound state only when it is written.)
                    let mut states: BTreeMap<String, SimTensor> = program
                        .tensors
                        .iter()
                        .filter(|t| t.role == Role::State && t.storage != Storage::Bf16)
                        .filter_map(|t| env.dense.remove(&t.name).map(|v| (t.name.clone(), v)))
                        .collect();
                    // Chip 0's route choices break the reference's near-ties (below).
                    let mut routes = BTreeMap::new();
                    let kept = (c == 0).then_some(&mut routes);
                    let outputs = simulate_chip(program, &env, &mut states, true, group, c, kept)
                        .map_err(|e| CertifyFault::Engine { engine: "simulator", message: format!("chip {c}: {e}") })?;
                    Ok((outputs, states, routes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().unwrap_or_else(|_| {
                    Err(CertifyFault::Engine { engine: "simulator", message: "a chip's thread panicked".into() })
                })
            })
            .collect()
    });
    let runs = runs.into_iter().collect::<Result<Vec<_>, _>>()?;
    // Every chip has run: the dense inputs moved to the reference, each held once.
    inputs.hand_to_reference();
    let joined = joined_states(&runs, &splits, full);
    let ties = |name: &str| joined.get(name).map(|v| v.as_ref());
    // A route runs on values every chip holds whole, so every chip chooses alike: chip 0's
    // choices break the reference's near-ties, as the simulator's do in `certify`.
    let routes = |name: &str| runs.first()?.2.get(name)?.as_i32();
    let (reference, _) = super::reference(full_graph, &inputs, &ties, &routes, true)?;
    let (mut max_abs_err, mut tolerance) = (0f64, TOLERANCE);
    for (c, (outputs, states, _)) in runs.iter().enumerate() {
        let results = reference.outputs.iter().map(|(n, w)| (n, w, outputs.get(n), "produced no"));
        let finals = reference.states.iter().map(|(n, w)| (n, w, states.get(n), "left no state"));
        for (name, want, got, missing) in results.chain(finals) {
            let got = got.ok_or_else(|| CertifyFault::Engine {
                engine: "simulator",
                message: format!("chip {c} {missing} `{name}`"),
            })?;
            // A gathered result: the chip's runs of the unsplit program's; a split state its slice.
            let want = chip_part(name, want, splits.get(name.as_str()).copied(), c)?;
            let (err, bound) = compare(&format!("{name} (chip {c})"), got, &want)?;
            max_abs_err = max_abs_err.max(err);
            tolerance = tolerance.max(bound);
        }
    }
    checks.push(format!(
        "numbers over {chips} chips with a real all-reduce: every chip's {} results match the unsplit program's (a gathered \
         result its runs of it) and its {} states its slice of the unsplit program's, each within {TOLERANCE:e} of its scale max(1, max|ref|)",
        reference.outputs.len(),
        reference.states.len()
    ));
    Ok(Certificate { checks, seed, tolerance, max_abs_err })
}

/// One chip's outputs, final states and (chip 0's only) route choices, by name.
type ChipRun = (BTreeMap<String, SimTensor>, BTreeMap<String, SimTensor>, BTreeMap<String, SimTensor>);

/// Every chip's final bf16 states joined into the unsplit program's (a split state from its
/// chips' slices, a whole one borrowed from chip 0): the reference's tie-breakers
/// (`graph::eval_breaking_all_ties`, as in `certify`). An f32 state rounds nothing and is left out;
/// so is a state that cannot be joined, which the reference then rounds on its own.
fn joined_states<'r>(
    runs: &'r [ChipRun],
    splits: &BTreeMap<&str, &TpSplit>,
    full: &SpatialProgram,
) -> BTreeMap<&'r str, Cow<'r, [f32]>> {
    let Some((_, first, _)) = runs.first() else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    for (name, t) in first {
        let Some(whole) = full.decl(name).filter(|d| d.storage == Storage::Bf16) else { continue };
        let joined = match splits.get(name.as_str()) {
            Some(split) => {
                let pieces: Option<Vec<(&[usize], &[f32])>> = (runs.iter())
                    .map(|(_, states, _)| states.get(name).and_then(|t| Some((t.shape.as_slice(), t.as_f32()?))))
                    .collect();
                let extent = whole.shape.get(split.axis).copied().unwrap_or(0);
                pieces.and_then(|p| join(&p, split.axis, &split.parts, extent).ok()).map(|(_, v)| Cow::Owned(v))
            }
            None => t.as_f32().map(Cow::Borrowed),
        };
        if let Some(v) = joined {
            out.insert(name.as_str(), v);
        }
    }
    out
}

/// The structural half of [`certify_tp`], without running a number: structure and resources of
/// the chip's program, its slices against the unsplit `full` program (weights and states
/// partitioned or exactly replicated, a gathered output's runs covering its axis), and no
/// partial sum escaping an all-reduce. Returns the checks that passed.
pub fn check_tp_structure(
    program: &SpatialProgram,
    graph: &Graph,
    full: &SpatialProgram,
    chip: &Chip,
) -> Result<Vec<String>, CertifyFault> {
    let tp = program.tp.as_ref().ok_or_else(|| CertifyFault::Structure("no tensor-parallel layout".into()))?;
    let chips = tp.chips as usize;
    let mut checks = Vec::new();
    structure::check(program, graph).map_err(CertifyFault::Structure)?;
    checks.push("structure".to_string());
    structure::resources(program, chip).map_err(CertifyFault::Resources)?;
    checks.push("resources".to_string());
    check_slices(program, full, chips).map_err(CertifyFault::Structure)?;
    checks.push(format!(
        "slices: the {} split tensors are partitioned (or exactly replicated, or a gathered result covered in chip order) over {chips} chips, in bounds",
        tp.splits.len()
    ));
    let padded: Vec<String> = (tp.splits.iter().filter_map(|s| s.stored.map(|n| (s, n))))
        .map(|(s, n)| format!("`{}` {n} to {}", s.tensor, s.extent(n)))
        .collect();
    if !padded.is_empty() {
        checks.push(format!(
            "zero-padded: {} along their split axis, each chip's positions past the stored values bound to zeros, \
             the unsplit program reading the tensors as stored",
            padded.join(", ")
        ));
    }
    check_shards(program).map_err(CertifyFault::Structure)?;
    check_partials(program).map_err(CertifyFault::Structure)?;
    checks.push(format!(
        "partial sums: every partial sum is all-reduced ({} all-reduce stages) before a nonlinear op, output or state reads it",
        tp.all_reduce.len()
    ));
    Ok(checks)
}

/// Chip `c`'s part of the unsplit program's result or final state `name`: its ranges when the
/// value is split, the whole otherwise.
fn chip_part(
    name: &str,
    whole: &crate::graph::Tensor,
    split: Option<&TpSplit>,
    c: usize,
) -> Result<crate::graph::Tensor, CertifyFault> {
    let Some(s) = split else { return Ok(whole.clone()) };
    let data = whole.as_f32().ok_or_else(|| CertifyFault::Structure(format!("`{name}` is split but not f32")))?;
    let (shape, v) = take(whole.shape(), data, s.axis, &s.parts[c]).map_err(CertifyFault::Structure)?;
    Ok(crate::graph::Tensor::f32(shape, v))
}

/// Every split is in bounds of the full tensor, gives each chip the declared local extent, and
/// partitions (or exactly replicates) the full axis; every other declared tensor is whole.
fn check_slices(program: &SpatialProgram, full: &SpatialProgram, chips: usize) -> Result<(), String> {
    let tp = program.tp.as_ref().ok_or("no tensor-parallel layout")?;
    for t in program.tensors.iter().filter(|t| t.role.is_bound()) {
        let whole = full.decl(&t.name).ok_or_else(|| format!("`{}` is not a tensor of the unsplit program", t.name))?;
        match tp.splits.iter().find(|s| s.tensor == t.name) {
            Some(split) => {
                if !matches!(t.role, Role::Weight | Role::State) {
                    return Err(format!("the {} `{}` is split; only weights and states are", t.role.as_str(), t.name));
                }
                if split.stored.is_some() && t.role != Role::Weight {
                    return Err(format!("the {} `{}` is zero-padded; only weights are", t.role.as_str(), t.name));
                }
                let local = t.shape.get(split.axis).copied();
                // A weight may cover its axis in overlapping runs when its split axis is never
                // summed over (`check_partials` refuses a contraction over one).
                check_split(split, &whole.shape, local, chips).or_else(|partition| match (t.role, local) {
                    (Role::Weight, Some(local)) => {
                        check_cover(split, &whole.shape, local, chips).map_err(|_| partition)
                    }
                    _ => Err(partition),
                })?;
                let mut rest = t.shape.clone();
                rest[split.axis] = whole.shape[split.axis];
                if rest != whole.shape {
                    return Err(format!("`{}` is {:?} on a chip, {:?} whole", t.name, t.shape, whole.shape));
                }
            }
            None if t.shape != whole.shape => {
                return Err(format!(
                    "`{}` is {:?} on a chip but {:?} whole, and has no slices",
                    t.name, t.shape, whole.shape
                ))
            }
            None => {}
        }
    }
    for split in &tp.splits {
        let Some(t) = program.decl(&split.tensor) else {
            return Err(format!("`{}` is split but not declared", split.tensor));
        };
        if t.role.is_bound() {
            continue;
        }
        // A gathered result: every chip its run of the unsplit program's result, in chip order.
        if !program.outputs.contains(&t.name) {
            return Err(format!("the {} `{}` is split; only weights, states and results are", t.role.as_str(), t.name));
        }
        let whole = full.decl(&t.name).ok_or_else(|| format!("`{}` is not a result of the unsplit program", t.name))?;
        let local = t.shape.get(split.axis).copied().unwrap_or(0);
        check_cover(split, &whole.shape, local, chips)?;
        let mut rest = t.shape.clone();
        rest[split.axis] = whole.shape[split.axis];
        if rest != whole.shape {
            return Err(format!("`{}` is {:?} on a chip, {:?} whole", t.name, t.shape, whole.shape));
        }
    }
    Ok(())
}

/// Every `shard` cuts the last axis of its value into as many parts as the program has chips,
/// and a product reading a shard contracts it with a weight split along its `in` axis into the
/// same equal parts in chip order — so each chip multiplies the columns it holds by its own
/// slice. Any other op reads a shard as a local value (each chip its own heads: MiniMax-M2's
/// q and k, normed whole before each chip takes its heads), as the partial-sum check classes it.
fn check_shards(program: &SpatialProgram) -> Result<(), String> {
    let tp = program.tp.as_ref().ok_or("no tensor-parallel layout")?;
    let chips = tp.chips as usize;
    let mut shards: BTreeSet<&str> = BTreeSet::new();
    for (stage, op) in program.ops() {
        let at = format!("stage {} op `{}`", stage.name, op.op);
        if op.op == Op::Shard {
            let (axis, parts) = match op.typed() {
                Ok(TypedOp::Shard { axis, chips }) => (Some(axis), Some(chips)),
                _ => (None, None),
            };
            if parts != Some(chips) {
                return Err(format!("{at} cuts its value into {parts:?} parts on {chips} chips"));
            }
            let Some(out) = op.outs.first() else { return Err(format!("{at} has no result")) };
            let rank = program.decl(out).map_or(0, |d| d.shape.len());
            if axis != Some(rank.saturating_sub(1)) {
                return Err(format!("{at} cuts axis {axis:?}; a shard cuts the last"));
            }
            shards.insert(out);
            continue;
        }
        let Some(x) = op.reads().find(|x| shards.contains(x)) else { continue };
        if !matches!(op.op, Op::Linear | Op::LinearHeads) {
            continue;
        }
        let (first, w) = (op.reads().next(), op.reads().nth(1).unwrap_or_default());
        let (rank, local) = program.decl(w).map_or((0, 0), |d| (d.shape.len(), d.shape.last().copied().unwrap_or(0)));
        let equal: Vec<Vec<(usize, usize)>> = (0..chips).map(|c| vec![(c * local, (c + 1) * local)]).collect();
        let split = tp.splits.iter().find(|s| s.tensor == w);
        let alike = split.is_some_and(|s| s.axis + 1 == rank && s.parts == equal);
        if !matches!(op.op, Op::Linear | Op::LinearHeads) || first != Some(x) || !alike {
            return Err(format!("{at} reads the shard `{x}` but is not a product over a weight split alike"));
        }
    }
    Ok(())
}

/// What a value is on the chips.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// The same on every chip.
    Replicated,
    /// Each chip its own heads or columns.
    Local,
    /// Each chip a summand of the value: only sums, reshapes and scalings by replicated values
    /// may read it, until `all_reduce` turns it into the replicated sum.
    Partial,
}

/// Follows every value through the program: products contracting a split axis give partial
/// sums; only linear ops may carry them, `all_reduce` must sum them (and nothing else), and no
/// output or state may hold one.
fn check_partials(program: &SpatialProgram) -> Result<(), String> {
    let tp = program.tp.as_ref().ok_or("no tensor-parallel layout")?;
    let split_axis = |n: &str| tp.splits.iter().find(|s| s.tensor == n).map(|s| s.axis);
    let rank = |n: &str| program.decl(n).map_or(0, |d| d.shape.len());
    // A product whose weight is split along its contracted (last) axis sums over a split.
    let contracts_split = |w: &str| split_axis(w).is_some_and(|axis| axis + 1 == rank(w));
    let mut class: BTreeMap<String, Class> = BTreeMap::new();
    for t in program.tensors.iter().filter(|t| t.role.is_bound()) {
        let c = if split_axis(&t.name).is_some() { Class::Local } else { Class::Replicated };
        class.insert(t.name.clone(), c);
    }
    for (stage, op) in program.ops() {
        let at = format!("stage {} op `{}`", stage.name, op.op);
        let args: Vec<(&str, Class)> = op
            .args
            .iter()
            .filter_map(|a| match a {
                Arg::Tensor(n) => Some((n.as_str(), class.get(n).copied().unwrap_or(Class::Replicated))),
                Arg::Lit(_) => None,
            })
            .collect();
        // Summing over a split counts each value once only when no two chips hold it.
        if let Some(w) = op.reads().find(|w| contracts_split(w) && !disjoint(tp, w)) {
            return Err(format!("{at} sums over `{w}`, whose chips' ranges overlap"));
        }
        let result = op_class(op.op, &args, &at, &contracts_split)?;
        write_class(op, result, &at, &mut class)?;
    }
    for out in &program.outputs {
        match class.get(out).copied() {
            Some(Class::Replicated) => {}
            // A gathered result: each chip its own run of it.
            Some(Class::Local) if split_axis(out).is_some() => {}
            _ => return Err(format!("output `{out}` is not the same on every chip (not all-reduced) nor gathered")),
        }
    }
    Ok(())
}

/// No two chips hold overlapping ranges of `n` (replicated equal ranges aside, which are never
/// contracted: kv heads).
fn disjoint(tp: &rdu_spatial::program::TpInfo, n: &str) -> bool {
    tp.splits.iter().find(|s| s.tensor == n).is_none_or(|s| {
        let mut all: Vec<(usize, usize)> = s.parts.iter().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        all.windows(2).all(|w| w[0].1 <= w[1].0)
    })
}

/// What the result of op `op` over `args` (each with its class) is on the chips, or why it
/// may not read them.
fn op_class(op: Op, args: &[(&str, Class)], at: &str, contracts_split: &dyn Fn(&str) -> bool) -> Result<Class, String> {
    let any = |c: Class| args.iter().any(|a| a.1 == c);
    let all_partial = || args.iter().all(|a| a.1 == Class::Partial);
    Ok(match op {
        Op::AllReduce => match args.first().map(|a| a.1) {
            Some(Class::Partial) => Class::Replicated,
            Some(c) => {
                return Err(format!(
                    "{at} sums a value that is not a partial sum ({c:?}): it would be counted once per chip"
                ))
            }
            None => return Err(format!("{at} has no operand")),
        },
        // Each chip its own equal part of a value they all hold: a local value, split as a
        // weight split along its `in` axis into equal parts is (`check_shards`).
        Op::Shard => match args.first().map(|a| a.1) {
            Some(Class::Replicated) => Class::Local,
            Some(c) => return Err(format!("{at} shards a value that is not the same on every chip ({c:?})")),
            None => return Err(format!("{at} has no operand")),
        },
        Op::Linear | Op::LinearHeads if args.len() >= 2 && contracts_split(args[1].0) => {
            if args[0].1 != Class::Local {
                return Err(format!("{at} contracts the split `{}` with a value that is not split alike", args[1].0));
            }
            Class::Partial
        }
        Op::Experts if args.iter().skip(3).any(|a| contracts_split(a.0)) => {
            if args[0].1 == Class::Partial {
                return Err(format!("{at} reads a partial sum"));
            }
            Class::Partial
        }
        Op::Add | Op::Sub if any(Class::Partial) => {
            if !all_partial() {
                return Err(format!("{at} adds a partial sum to a value that is not one"));
            }
            Class::Partial
        }
        Op::Mul if any(Class::Partial) => {
            if args.iter().filter(|a| a.1 == Class::Partial).count() != 1 || any(Class::Local) {
                return Err(format!("{at} multiplies a partial sum by a value that is not replicated"));
            }
            Class::Partial
        }
        Op::Reshape | Op::Scale | Op::Neg | Op::Slice | Op::Transpose | Op::Concat if any(Class::Partial) => {
            if !all_partial() {
                return Err(format!("{at} mixes a partial sum with other values"));
            }
            Class::Partial
        }
        _ if any(Class::Partial) => return Err(format!("{at} reads a partial sum before it is all-reduced")),
        _ if any(Class::Local) => Class::Local,
        _ => Class::Replicated,
    })
}

/// Records the class of every value `op` writes; a state it updates keeps its own class, and
/// may receive neither a partial sum nor (when replicated) a chip's local value.
fn write_class(
    op: &rdu_spatial::program::KernelOp,
    result: Class,
    at: &str,
    class: &mut BTreeMap<String, Class>,
) -> Result<(), String> {
    for (k, out) in op.outs.iter().enumerate() {
        let is_state = op.update && k + 1 == op.outs.len();
        if is_state {
            let want = class.get(out).copied().unwrap_or(Class::Replicated);
            if result == Class::Partial || (want == Class::Replicated && result == Class::Local) {
                return Err(format!("{at} writes a {result:?} value into the {want:?} state `{out}`"));
            }
        } else {
            class.insert(out.clone(), result);
        }
    }
    Ok(())
}

/// One chip's bindings: its slices of the full seeded tensors (stacked experts cut one expert
/// at a time, as they are generated).
struct ChipInputs<'a> {
    full: &'a Inputs,
    splits: &'a BTreeMap<&'a str, &'a TpSplit>,
    chip: usize,
    dense: BTreeMap<String, SimTensor>,
    q8: BTreeMap<String, Q8Weight>,
    /// FP8- and MXFP4-stored weights: this chip's blocks.
    blocks: BTreeMap<String, BlockWeight>,
    /// How this chip's program holds each split stack of experts (an FP8 one in the finer
    /// blocks its share may need).
    stacked: BTreeMap<String, Storage>,
}

impl<'a> ChipInputs<'a> {
    fn new(
        full: &'a Inputs,
        program: &SpatialProgram,
        splits: &'a BTreeMap<&'a str, &'a TpSplit>,
        chip: usize,
    ) -> Result<ChipInputs<'a>, String> {
        let (mut dense, mut q8, mut blocks) = (BTreeMap::new(), BTreeMap::new(), BTreeMap::new());
        let mut stacked = BTreeMap::new();
        for t in program.tensors.iter().filter(|t| t.role.is_bound()) {
            let Some(split) = splits.get(t.name.as_str()) else { continue };
            if full.is_stacked(&t.name) {
                stacked.insert(t.name.clone(), t.storage);
                continue;
            }
            let ranges = &split.parts[chip];
            // A zero-padded split: the chip's ranges of the whole padded with zeros.
            let to = split.stored.map(|_| split.extent(0));
            if t.storage == Storage::Q8_0 {
                let w = full.sim_q8(&t.name).ok_or_else(|| format!("no seeded Q8_0 `{}`", t.name))?;
                if to.is_some() {
                    return Err(format!("`{}` is stored Q8_0: never zero-padded", t.name));
                }
                q8.insert(t.name.clone(), take_q8(w, split.axis, ranges)?);
            } else if t.storage.is_blocks() {
                let w =
                    full.sim_blocks(&t.name).ok_or_else(|| format!("no seeded {} `{}`", t.storage.word(), t.name))?;
                let padded = to.map(|to| w.pad(split.axis, to)).transpose()?;
                blocks.insert(t.name.clone(), padded.as_ref().unwrap_or(w).take_as(split.axis, ranges, t.storage)?);
            } else if let (Some(_), Some(to)) = (full.sim_q8(&t.name), to) {
                return Err(format!("`{}` is stored Q8_0: never zero-padded to {to}", t.name));
            } else if let Some(w) = full.sim_q8(&t.name) {
                // Stored Q8_0 whole but read dense on a chip: its exact dequantised values.
                let values = w.dequantize();
                let (shape, v) = take(&w.shape, &values, split.axis, ranges)?;
                dense.insert(t.name.clone(), SimTensor::f32(shape, v));
            } else {
                let w = full.sim_dense(&t.name).ok_or_else(|| format!("no seeded `{}`", t.name))?;
                let values = w.as_f32().ok_or_else(|| format!("`{}` is split but not f32", t.name))?;
                let (shape, v) = match to {
                    Some(to) => pad(&w.shape, values, split.axis, to)
                        .and_then(|(shape, v)| take(&shape, &v, split.axis, ranges))?,
                    None => take(&w.shape, values, split.axis, ranges)?,
                };
                dense.insert(t.name.clone(), SimTensor::f32(shape, v));
            }
        }
        Ok(ChipInputs { full, splits, chip, dense, q8, blocks, stacked })
    }
}

impl SimBindings for ChipInputs<'_> {
    fn tensor(&self, name: &str) -> Option<Cow<'_, SimTensor>> {
        match self.dense.get(name) {
            Some(t) => Some(Cow::Borrowed(t)),
            None if self.splits.contains_key(name) => None,
            None => SimBindings::tensor(self.full, name),
        }
    }

    fn q8(&self, name: &str) -> Option<Cow<'_, Q8Weight>> {
        match self.q8.get(name) {
            Some(w) => Some(Cow::Borrowed(w)),
            None if self.splits.contains_key(name) => None,
            None => SimBindings::q8(self.full, name),
        }
    }

    fn fp8(&self, name: &str) -> Option<Cow<'_, rdu_checkpoint::Fp8Weight>> {
        match self.blocks.get(name) {
            Some(w) => w.fp8().map(Cow::Borrowed),
            None if self.splits.contains_key(name) => None,
            None => SimBindings::fp8(self.full, name),
        }
    }

    fn packed(&self, name: &str) -> Option<rdu_spatial::sim::PackedWeight<'_>> {
        match self.blocks.get(name) {
            Some(w) => w.packed(),
            None if self.splits.contains_key(name) => None,
            None => SimBindings::packed(self.full, name),
        }
    }

    fn expert(&self, name: &str, expert: usize) -> Option<WeightSlab<'_>> {
        let Some(split) = self.splits.get(name) else { return self.full.expert(name, expert) };
        // The stacked axis 0 is the expert; the split axis of one expert is one less.
        let axis = split.axis.checked_sub(1)?;
        let part = (axis, split.parts[self.chip].as_slice());
        if split.stored.is_some() {
            return self.full.expert_padded_part(name, expert, part, split.extent(0))?.ok();
        }
        match self.stacked.get(name) {
            Some(&chip @ Storage::Fp8 { .. }) => self.full.expert_fp8_part(name, expert, part, chip)?.ok(),
            _ => self.full.expert_slab(name, expert, Some(part))?.ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny tensor-parallel kind as `rdu lower` writes it (the golden file).
    const KIND: &str = include_str!("../../../../tests/golden/tiny-qwen3-next/tp/programs/gated_attention_moe.spatial");

    fn program(text: &str) -> SpatialProgram {
        rdu_spatial::text::parse(text).expect("the golden program parses")
    }

    /// The partial-sum check on its own (the exact kernel check, which runs before it, also
    /// refuses a dropped all-reduce: this shows the second line of defence holds by itself).
    #[test]
    fn a_partial_sum_that_escapes_its_all_reduce_is_refused() {
        check_partials(&program(KIND)).expect("the lowered program all-reduces every partial sum");
        let dropped = KIND.replace("mar0 = all_reduce(mo0)", "mar0 = scale(mo0, by=1.0)");
        assert_ne!(dropped, KIND);
        let err = check_partials(&program(&dropped)).expect_err("a partial sum reaches the residual add");
        assert!(err.contains("partial sum"), "{err}");
    }

    /// `edit` applied to the golden program (which it must change), then the partial-sum check.
    fn partials_after(edit: &dyn Fn(&str) -> String) -> Result<(), String> {
        let edited = edit(KIND);
        assert_ne!(edited, KIND, "the edit applies to the golden program");
        check_partials(&program(&edited))
    }

    #[test]
    fn a_split_result_that_is_neither_all_reduced_nor_gathered_is_refused() {
        let err = partials_after(&|t| t.replace("output xo0", "output xo0\noutput sm0")).expect_err("a local output");
        assert!(err.contains("output `sm0` is not the same on every chip"), "{err}");
    }

    #[test]
    fn a_sum_over_overlapping_ranges_is_refused() {
        let overlap =
            |t: &str| t.replace("split Wo0 axis=1 [[0..32], [32..64]]", "split Wo0 axis=1 [[0..40], [24..64]]");
        let err = partials_after(&overlap).expect_err("both chips sum the same columns");
        assert!(err.contains("sums over `Wo0`, whose chips' ranges overlap"), "{err}");
    }

    /// Experts over replicated weights give the same value on every chip, not a partial sum:
    /// adding it to one is refused.
    #[test]
    fn experts_over_replicated_weights_are_not_a_partial_sum() {
        let replicated = |t: &str| {
            let keep = |l: &&str| !["split Weg0", "split Weu0", "split Wed0"].iter().any(|s| l.starts_with(s));
            t.lines().filter(keep).map(|l| format!("{l}\n")).collect()
        };
        let err = partials_after(&replicated).expect_err("a replicated value added to a partial sum");
        assert!(err.contains("adds a partial sum to a value that is not one"), "{err}");
    }

    /// Linear ops carry a partial sum to its all-reduce: a scaled partial sum is still one.
    #[test]
    fn a_partial_sum_may_be_scaled_before_its_all_reduce_but_not_mixed_or_activated() {
        let at = "  mar0 = all_reduce(mo0)";
        let before =
            |op: &'static str| move |t: &str| t.replace(at, &format!("  mos0 = {op}\n  mar0 = all_reduce(mos0)"));
        partials_after(&before("scale(mo0, by=2.0)")).expect("a scaled partial sum is all-reduced");
        let err =
            partials_after(&before("concat(mo0, x, axis=1)")).expect_err("a partial sum beside a replicated value");
        assert!(err.contains("mixes a partial sum with other values"), "{err}");
        let err =
            partials_after(&|t| t.replace(at, "  mar0 = silu(mo0)")).expect_err("a nonlinear op on a partial sum");
        assert!(err.contains("reads a partial sum before it is all-reduced"), "{err}");
    }

    #[test]
    fn a_partial_sum_multiplied_by_a_chips_own_value_is_refused() {
        let err = partials_after(&|t| t.replace("sgo0 = mul(so0, sgs0)", "sgo0 = mul(so0, sa0)")).expect_err("local");
        assert!(err.contains("multiplies a partial sum by a value that is not replicated"), "{err}");
    }

    /// A replicated state may not receive a chip's own value (each chip would keep another).
    #[test]
    fn a_chips_own_value_written_into_a_replicated_state_is_refused() {
        let err = partials_after(&|t| t.replace("split Kc0 axis=1 [[0..1], [1..2]]\n", "")).expect_err("replicated");
        assert!(err.contains("writes a Local value into the Replicated state `Kc0`"), "{err}");
    }

    /// The same kind unsplit (the decode golden file), the whole shapes the slices are checked against.
    const WHOLE: &str =
        include_str!("../../../../tests/golden/tiny-qwen3-next/decode/programs/gated_attention_moe.spatial");

    /// A weight whose split axis is never summed over may cover it in overlapping runs of one
    /// length (an axis the chips do not divide); a run past the whole is still refused.
    #[test]
    fn a_weight_may_cover_an_axis_it_is_not_summed_over_in_overlapping_runs() {
        let full = program(WHOLE);
        check_slices(&program(KIND), &full, 2).expect("the lowered split holds");
        let covered = |parts: &str, rows: usize| {
            let text = KIND
                .replace("split Wq0 axis=0 [[0..64], [64..128]]", &format!("split Wq0 axis=0 {parts}"))
                .replace("tensor Wq0 : f32[64, 64]", &format!("tensor Wq0 : f32[{rows}, 64]"));
            assert_ne!(text, KIND);
            check_slices(&program(&text), &full, 2)
        };
        covered("[[0..80], [48..128]]", 80).expect("an overlapping cover of a weight's output rows");
        let err = covered("[[0..80], [56..136]]", 80).expect_err("a run past the whole");
        assert!(err.contains("Wq0"), "{err}");
    }

    /// A tensor without slices must have its whole shape on every chip.
    #[test]
    fn a_replicated_tensor_of_another_shape_is_refused() {
        let full = program(KIND);
        let mut split = full.clone();
        let tp = split.tp.clone().expect("a tensor-parallel program");
        let whole =
            split.tensors.iter_mut().find(|t| t.role.is_bound() && !tp.splits.iter().any(|s| s.tensor == t.name));
        let whole = whole.expect("a replicated tensor");
        whole.shape[0] += 1;
        let name = whole.name.clone();
        let err = check_slices(&split, &full, tp.chips as usize).expect_err("a replicated tensor of another shape");
        assert!(err.contains(&format!("`{name}`")) && err.contains("has no slices"), "{err}");
    }
}
