//! Structural and resource checks of a lowered program: every read has a source, tiles cover
//! each output exactly once, states are written back with their shapes, Q8_0 weights are only
//! read by folding products or `dequant`, `prefetch` marks sit only on stages that stream a
//! weight ahead of its activations, and every section fits the chip.

use crate::graph::Graph;
use rdu_spatial::chip::Chip;
use rdu_spatial::program::{Arg, Op, Role, SpatialProgram};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

/// `Err` of the first of `faults`, if any.
fn first(faults: Vec<String>) -> Result<(), String> {
    faults.into_iter().next().map_or(Ok(()), Err)
}

/// Every kernel op is its source statement, exactly: the kernel ops other than lowering's
/// own (not [`Op::in_language`]: `dequant`, a view of a Q8_0 weight) are the lifted graph's nodes one for one, in order, each with the same
/// typed op — every attribute equal, bit for bit (eps, scale, offset, window, rope dim and
/// style, top-k, groups, act, kmap, shapes, axes), so a change below the numeric tolerance
/// still fails — the same operands in the same order (a dequantised weight standing for its
/// weight), and the same results. Every way they are not, in program order.
pub fn source_faults(program: &SpatialProgram, graph: &Graph) -> Vec<String> {
    let mut faults = Vec::new();
    let mut nodes = graph.nodes.iter();
    let mut dequantised: BTreeMap<&str, &str> = BTreeMap::new();
    let state_names: HashSet<&str> = graph.states.iter().map(|st| st.name.as_str()).collect();
    for (s, section) in program.sections.iter().enumerate() {
        for stage in &section.stages {
            for op in &stage.ops {
                let at = format!("section {s} stage {} op `{}`", stage.name, op.op);
                if !op.op.in_language() {
                    match (op.outs.as_slice(), op.args.as_slice()) {
                        ([out], [Arg::Tensor(w)]) if !op.update => {
                            dequantised.insert(out.as_str(), w.as_str());
                        }
                        _ => faults.push(format!("{at} must read one weight and write one tensor")),
                    }
                    continue;
                }
                let Some(node) = nodes.next() else {
                    faults.push(format!(
                        "{at} has no statement in the source (its {} statements are done)",
                        graph.nodes.len()
                    ));
                    return faults;
                };
                op_faults(op, node, &at, graph, &dequantised, &state_names, &mut faults);
            }
        }
    }
    if let Some(node) = nodes.next() {
        faults.push(format!("the source's statement {} (`{}`) has no kernel op", node.stmt, node.op.name()));
    }
    faults
}

/// The ways one kernel op is not its source statement `node`: its typed op, what it reads,
/// what it writes, and whether it updates a state.
fn op_faults(
    op: &rdu_spatial::program::KernelOp,
    node: &crate::graph::Node,
    at: &str,
    graph: &Graph,
    dequantised: &BTreeMap<&str, &str>,
    state_names: &HashSet<&str>,
    faults: &mut Vec<String>,
) {
    let names =
        |ids: &[crate::graph::ValueId]| -> Vec<String> { ids.iter().map(|&v| graph.value(v).name.clone()).collect() };
    match crate::front::kernel_op(op) {
        Err(e) => faults.push(format!("{at}: {e}")),
        Ok(kernel) if kernel != node.op => {
            faults.push(format!("{at} is `{kernel}` but its source statement {} is `{}`", node.stmt, node.op))
        }
        Ok(_) => {}
    }
    let reads: Vec<String> = op.reads().map(|n| dequantised.get(n).copied().unwrap_or(n).to_string()).collect();
    let want = names(&node.inputs);
    if reads != want {
        faults.push(format!("{at} reads {reads:?} but its source statement {} reads {want:?}", node.stmt));
    }
    let outs = names(&node.outputs);
    if op.outs != outs {
        faults.push(format!("{at} writes {:?} but its source statement {} writes {outs:?}", op.outs, node.stmt));
    }
    // Only `<-` may bind a declared state's name.
    let updates = outs.last().is_some_and(|n| state_names.contains(n.as_str()));
    if op.update != updates {
        faults.push(format!(
            "{at} {} a state but its source statement {} {}",
            if op.update { "updates" } else { "does not update" },
            node.stmt,
            if updates { "does" } else { "does not" }
        ));
    }
}

/// The structure check: the first of [`faults`], if any.
pub fn check(program: &SpatialProgram, graph: &Graph) -> Result<(), String> {
    first(faults(program, graph))
}

/// Every structural fault of `program`, lowered from `graph`, in the order the check meets
/// them: kernel ops against their source statements, `prefetch` marks, then every read, Q8_0
/// fold and tiling in program order, the states written back, the outputs produced, and the
/// declared tensors. Empty when the program is sound.
pub fn faults(program: &SpatialProgram, graph: &Graph) -> Vec<String> {
    let mut faults = source_faults(program, graph);
    // A `prefetch` mark streams a stage's weights ahead of its activations: only weights whose
    // addresses do not depend on them, and only in a one-section program.
    faults.extend(program.prefetch_problems());
    let flow = dataflow_faults(program, &mut faults);
    state_faults(program, graph, &flow.written_states, &mut faults);
    for out in &program.outputs {
        if !flow.available.contains(out.as_str()) {
            faults.push(format!("output `{out}` is never produced"));
        }
    }
    let declared: BTreeSet<&str> = graph.declared().map(|(_, v, _)| v.name.as_str()).collect();
    if declared != bound(program).collect() {
        faults.push("the program's declared tensors differ from its source's".to_string());
    }
    faults
}

/// The names a program's caller binds: its inputs, weights, shared tables and states.
fn bound(program: &SpatialProgram) -> impl Iterator<Item = &str> {
    program
        .tensors
        .iter()
        .filter(|t| matches!(t.role, Role::Input | Role::Weight | Role::Shared | Role::State))
        .map(|t| t.name.as_str())
}

/// What the walk over a program's ops found produced: every name available after it, and the
/// states written back.
struct Flow<'p> {
    available: BTreeSet<&'p str>,
    written_states: BTreeSet<String>,
}

/// Walks the ops in order: every read has a producer before it, weights stored in a block
/// format are read only by products that fold that format or by `dequant`, a fold reads a
/// weight of its format, and tiles cover each tiled output exactly once.
fn dataflow_faults<'p>(program: &'p SpatialProgram, faults: &mut Vec<String>) -> Flow<'p> {
    let decls: HashMap<&str, &rdu_spatial::program::TensorDecl> =
        program.tensors.iter().map(|t| (t.name.as_str(), t)).collect();
    let decl = |n: &str| decls.get(n).copied();
    let fold_of = |n: &str| decl(n).and_then(|t| t.storage.fold());
    let mut flow = Flow { available: bound(program).collect(), written_states: BTreeSet::new() };
    for (s, section) in program.sections.iter().enumerate() {
        for stage in &section.stages {
            for op in &stage.ops {
                let at = format!("section {s} stage {} op `{}`", stage.name, op.op);
                for arg in &op.args {
                    let Arg::Tensor(name) = arg else { continue };
                    if !flow.available.contains(name.as_str()) {
                        faults.push(format!("{at} reads `{name}`, which nothing before it produces"));
                    }
                    match (fold_of(name), op.fold) {
                        (Some(f), None) if op.op != Op::Dequant => {
                            faults.push(format!("{at} reads the {} weight `{name}` without folding it", fold_name(f)));
                        }
                        (Some(f), Some(g)) if f != g => {
                            faults.push(format!("{at} folds {} but `{name}` is {}", fold_name(g), fold_name(f)));
                        }
                        _ => {}
                    }
                }
                if let Some(fold) = op.fold {
                    if !op.args.iter().any(|a| matches!(a, Arg::Tensor(n) if fold_of(n) == Some(fold))) {
                        let name = fold_name(fold);
                        faults.push(format!("{at} folds {name} but reads no {name} weight"));
                    }
                }
                if let Some(tiling) = &op.tiling {
                    if let Err(fault) = tiling_covers(op, tiling, &at, &decl) {
                        faults.push(fault);
                    }
                }
                if op.update {
                    if let Some(state) = op.outs.last() {
                        flow.written_states.insert(state.clone());
                    }
                }
                flow.available.extend(op.outs.iter().map(String::as_str));
            }
        }
    }
    flow
}

/// The tiles of `op` cover its first output's tiled axis exactly once, in order.
fn tiling_covers<'p>(
    op: &rdu_spatial::program::KernelOp,
    tiling: &rdu_spatial::program::Tiling,
    at: &str,
    decl: &dyn Fn(&str) -> Option<&'p rdu_spatial::program::TensorDecl>,
) -> Result<(), String> {
    let out = op.outs.first().and_then(|o| decl(o)).ok_or_else(|| format!("{at}: tiled output is undeclared"))?;
    let extent =
        *out.shape.get(tiling.axis).ok_or_else(|| format!("{at}: tiling axis {} out of range", tiling.axis))?;
    let mut next = 0;
    for &(start, end) in &tiling.tiles {
        if start != next || end <= start {
            return Err(format!(
                "{at}: tiles do not cover `{}` axis {} exactly once (tile {start}..{end} after {next})",
                out.name, tiling.axis
            ));
        }
        next = end;
    }
    if next != extent {
        return Err(format!("{at}: tiles of `{}` end at {next}, the axis has {extent}", out.name));
    }
    Ok(())
}

/// Every declared state is written back, is a state of the source, and keeps its shape.
fn state_faults(program: &SpatialProgram, graph: &Graph, written: &BTreeSet<String>, faults: &mut Vec<String>) {
    let mut graph_states: HashMap<&str, &crate::graph::StateUpdate> = HashMap::new();
    for st in &graph.states {
        graph_states.entry(st.name.as_str()).or_insert(st);
    }
    for state in program.tensors.iter().filter(|t| t.role == Role::State) {
        if !written.contains(&state.name) {
            faults.push(format!("state `{}` is never written back", state.name));
        }
        match graph_states.get(state.name.as_str()) {
            None => faults.push(format!("state `{}` is not a state of the source", state.name)),
            Some(gs) if graph.value(gs.last).ty.shape != state.shape => {
                faults.push(format!("state `{}` is written back with another shape", state.name))
            }
            Some(_) => {}
        }
    }
}

pub fn resources(program: &SpatialProgram, chip: &Chip) -> Result<(), String> {
    for (s, section) in program.sections.iter().enumerate() {
        let pcus: u64 = section.stages.iter().map(|st| st.pcus as u64).sum();
        let pmus: u64 = section.stages.iter().map(|st| st.pmus as u64).sum();
        if pcus > chip.pcus as u64 || pmus > chip.pmus as u64 {
            return Err(format!(
                "section {s} needs {pcus} PCUs and {pmus} PMUs; {} has {} and {}",
                chip.name, chip.pcus, chip.pmus
            ));
        }
        let sram = pmus * chip.pmu_sram_bytes;
        if sram > chip.sram_bytes {
            return Err(format!("section {s} needs {sram} bytes of SRAM; {} has {}", chip.name, chip.sram_bytes));
        }
        placement(s, &section.stages, chip)?;
    }
    Ok(())
}

/// Every stage of a section has its region of the mesh: runs that cover exactly its PCU and
/// PMU counts, lie inside the chip (its units and its mesh), and overlap no other stage's.
fn placement(s: usize, stages: &[rdu_spatial::program::Stage], chip: &Chip) -> Result<(), String> {
    let mut taken: Vec<(&str, &str, (u32, u32))> = Vec::new();
    for st in stages {
        let Some(r) = &st.region else {
            return Err(format!("section {s} stage `{}` has no region on the chip's mesh", st.name));
        };
        for (unit, run, count, available) in [("PCU", r.pcu, st.pcus, chip.pcus), ("PMU", r.pmu, st.pmus, chip.pmus)] {
            let limit = u64::from(available).min(chip.mesh_tiles());
            if run.1 < run.0 || run.1 - run.0 != count {
                return Err(format!(
                    "section {s} stage `{}`: its {unit} run {}..{} does not hold its {count} {unit}s",
                    st.name, run.0, run.1
                ));
            }
            if u64::from(run.1) > limit {
                return Err(format!(
                    "section {s} stage `{}`: its {unit} run {}..{} lies outside the chip's {limit} {unit}s",
                    st.name, run.0, run.1
                ));
            }
            if let Some((other, ..)) = taken.iter().find(|(_, u, o)| *u == unit && run.0 < o.1 && o.0 < run.1) {
                return Err(format!("section {s}: stages `{other}` and `{}` overlap on the mesh ({unit}s)", st.name));
            }
            taken.push((&st.name, unit, run));
        }
    }
    Ok(())
}

/// A fold's format as faults name it (`Q8_0`, `FP8`, `MXFP4`).
fn fold_name(fold: rdu_spatial::program::Fold) -> &'static str {
    match fold {
        rdu_spatial::program::Fold::Q8 => "Q8_0",
        rdu_spatial::program::Fold::Fp8 => "FP8",
        rdu_spatial::program::Fold::Mxfp4 => "MXFP4",
    }
}
