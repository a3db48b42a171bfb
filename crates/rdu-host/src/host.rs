//! `Host`: a loaded bundle with its weights, shared tables and states, stepped program by program through the simulator.
//!
//! A step runs the manifest's `schedule`: the embedding program, then every layer's kind
//! program bound to that layer's tensors, loop by loop, then the head. Each program reads its kind's names; [`crate::env`] translates them
//! through the layer's `bind`. A layer's states are moved out of the host's store under their
//! kind names, updated in place by `simulate_in_place`, and moved back under their layer names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use rdu_spatial::bundle::{is_bundle, Bundle};
use rdu_spatial::manifest::Manifest;
use rdu_spatial::{simulate_in_place, text, Role, SimTensor, SpatialProgram};

use crate::check::{check, Use};
use crate::env::Env;
use crate::error::{HostError, Result};
use crate::plan::{Continue, Plan};
use crate::shared;
use crate::states::States;
use crate::tensor_parallel::Chips;
use crate::weights::{Progress, Weights, WeightsSource};

/// A bundle ready to run: programs parsed and bindings checked, weights loaded, states zeroed.
pub struct Host {
    manifest: Manifest,
    programs: Vec<SpatialProgram>,
    /// The embedding, every layer in order, the head.
    calls: Vec<Call>,
    plan: Plan,
    weights: Arc<Weights>,
    shared: BTreeMap<String, SimTensor>,
    states: States,
    /// A tensor-parallel bundle's chips: their slices and states (layer states live there).
    chips: Option<Chips>,
    /// How a verify bundle's next step continues each sequence, and where the last one started.
    continues: Vec<Continue>,
    last: Vec<Option<usize>>,
}

/// What one step produced.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOutput {
    /// `[rows, vocab]` as the head computes it (a prefill head computes only the chunk's last row).
    pub logits: SimTensor,
    /// `[rows, d_model]`: the head's normed rows, when it exports them for a
    /// multi-token-prediction draft (`names::HIDDEN_OUTPUT`).
    pub hidden: Option<SimTensor>,
}

/// One program invocation of a step.
struct Call {
    /// `embedding program`, `layer 3 (kind attn)`, `head program`.
    label: String,
    program: usize,
    /// Program tensor name → bundle tensor name.
    bind: BTreeMap<String, String>,
    /// The states it updates: (program name, bundle name).
    states: Vec<(String, String)>,
    /// The activations it produces: (program name, bundle name).
    outputs: Vec<(String, String)>,
}

/// A bundle opened and validated, its programs parsed and every binding checked: the part of
/// loading that reads no weight.
struct Checked {
    dir: String,
    bundle: Bundle,
    programs: Vec<SpatialProgram>,
    calls: Vec<Call>,
    plan: Plan,
}

impl Checked {
    fn open(bundle_dir: &Path) -> Result<Checked> {
        let dir = bundle_dir.display().to_string();
        if !is_bundle(bundle_dir) {
            return Err(HostError::NotABundle { dir });
        }
        let bundle = Bundle::open(bundle_dir).map_err(|source| HostError::Bundle { dir: dir.clone(), source })?;
        let m = &bundle.manifest;
        let parse = |file: &str| -> Result<SpatialProgram> {
            let text = bundle.files.get(file).map(String::as_str).unwrap_or_default();
            text::parse(text).map_err(|source| HostError::Program { dir: dir.clone(), file: file.into(), source })
        };
        let mut programs = vec![parse(&m.programs.embed.file_spatial)?, parse(&m.programs.head.file_spatial)?];
        let mut kinds = BTreeMap::new();
        for kind in &m.programs.kinds {
            kinds.insert(kind.name.clone(), programs.len());
            programs.push(parse(&kind.file_spatial)?);
        }
        let calls = calls_of(m, &programs, &kinds);
        let mut produced = BTreeSet::new();
        for call in &calls {
            let u = Use { label: &call.label, program: &programs[call.program], bind: &call.bind };
            check(m, &u, &mut produced)?;
        }
        let plan = Plan::new(&dir, m, &programs[0], &programs[1])?;
        Ok(Checked { dir, bundle, programs, calls, plan })
    }
}

impl Host {
    /// Opens and validates the bundle in `bundle_dir`, parses its programs, checks every
    /// binding, then loads the weights (`progress` after each tensor), shared tables and states.
    pub fn load(bundle_dir: &Path, weights: &WeightsSource, progress: Progress<'_>) -> Result<Host> {
        Host::load_with(bundle_dir, weights, None, progress)
    }

    /// As [`Host::load`], but shares `other`'s weights (held once, not loaded again) when the
    /// two bundles read the same checkpoint tensors — a prefill and a decode bundle of one
    /// model do; otherwise loads them from `weights`.
    pub fn load_sharing(
        bundle_dir: &Path,
        other: &Host,
        weights: &WeightsSource,
        progress: Progress<'_>,
    ) -> Result<Host> {
        Host::load_with(bundle_dir, weights, Some(other), progress)
    }

    /// Opens and validates the bundle in `bundle_dir`, parses its programs and checks every
    /// binding and runtime input: every check [`Host::load`] makes before it reads a weight,
    /// so a bundle that cannot run is refused without a checkpoint (`rdu show`, `rdu verify`).
    pub fn check(bundle_dir: &Path) -> Result<Bundle> {
        Ok(Checked::open(bundle_dir)?.bundle)
    }

    fn load_with(
        bundle_dir: &Path,
        weights: &WeightsSource,
        share: Option<&Host>,
        progress: Progress<'_>,
    ) -> Result<Host> {
        let Checked { dir, bundle, programs, calls, plan } = Checked::open(bundle_dir)?;
        let m = &bundle.manifest;
        // A tensor-parallel host cuts every chip's slices out of its own weights.
        let tensor_parallel = m.cut.is_split();
        let (weights, chips) = match share {
            Some(other) if !tensor_parallel && other.manifest.tensors == m.tensors => {
                (Arc::clone(&other.weights), None)
            }
            _ => {
                let mut loaded = Weights::load(m, weights, progress)?;
                // The tensors the programs on the replicated spine read whole.
                let spine: BTreeSet<String> = calls
                    .iter()
                    .filter(|c| programs[c.program].tp.is_none())
                    .flat_map(|c| c.bind.values().cloned())
                    .collect();
                let chips = Chips::new(m, &mut loaded, &spine)?;
                (Arc::new(loaded), chips)
            }
        };
        let shared = shared::compute(m, &dir)?;
        let states = if chips.is_some() { States::new(&[]) } else { States::new(&m.states) };
        let (continues, last) = (vec![Continue::Fresh; plan.sequences], vec![None; plan.sequences]);
        Ok(Host { manifest: bundle.manifest, programs, calls, plan, weights, shared, states, chips, continues, last })
    }

    /// Runs one step: `tokens` (exactly [`Host::rows`] ids) at position `pos`, updating every state.
    /// Bad tokens and positions are refused before anything runs; if a program fails mid-step,
    /// the layers already run keep this step's state updates — [`Host::reset`] before starting over.
    pub fn step(&mut self, tokens: &[u32], pos: usize) -> Result<StepOutput> {
        let positions = vec![pos; self.plan.sequences];
        self.step_at(tokens, &positions)
    }

    /// Runs one step of a batched bundle: row `b` of `tokens` is sequence `b`'s token at
    /// `positions[b]`; each sequence reads and updates only its own states (`_s{b}`).
    /// A bundle of one sequence takes one position.
    pub fn step_at(&mut self, tokens: &[u32], positions: &[usize]) -> Result<StepOutput> {
        self.run(tokens, positions, None)
    }

    /// The width of the hidden rows a multi-token-prediction block's bundle reads with each
    /// step (`None` for any other bundle).
    pub fn hidden_width(&self) -> Option<usize> {
        self.plan.hidden.as_ref().map(|(_, width)| *width)
    }

    /// Runs one step of a multi-token-prediction block's bundle: `tokens` at `pos`, each row
    /// reading the hidden state of the row before it from `hidden` (`[rows, d_model]`, the
    /// target's exported rows or the block's own).
    pub fn step_hidden(&mut self, tokens: &[u32], pos: usize, hidden: &[f32]) -> Result<StepOutput> {
        let positions = vec![pos; self.plan.sequences];
        self.run(tokens, &positions, Some(hidden))
    }

    /// The hidden-state input of a step, checked against the bundle's.
    fn hidden_input(&self, given: Option<&[f32]>) -> Result<Option<(String, SimTensor)>> {
        let fail = |problem: String| Err(HostError::Verify { problem });
        match (&self.plan.hidden, given) {
            (None, None) => Ok(None),
            (Some((name, width)), Some(rows)) if rows.len() == self.plan.rows * width => {
                Ok(Some((name.clone(), SimTensor::f32(vec![self.plan.rows, *width], rows.to_vec()))))
            }
            (Some((name, width)), Some(rows)) => fail(format!(
                "`{name}` takes {} values ({} rows of {width}), not {}",
                self.plan.rows * width,
                self.plan.rows,
                rows.len()
            )),
            (Some((name, _)), None) => {
                fail(format!("this bundle reads the previous rows' hidden state `{name}` (a multi-token-prediction block): step it with its hidden rows"))
            }
            (None, Some(_)) => fail("this bundle reads no hidden state; step it with its tokens alone".into()),
        }
    }

    fn run(&mut self, tokens: &[u32], positions: &[usize], hidden: Option<&[f32]>) -> Result<StepOutput> {
        self.plan.check(tokens, positions)?;
        let hidden = self.hidden_input(hidden)?;
        if !self.states.is_held() {
            return Err(HostError::StatesMoved);
        }
        self.check_continues(positions)?;
        let mut step = self.plan.inputs(tokens, positions, &self.continues);
        step.extend(hidden);
        if self.plan.draft.is_some() {
            // Unless told otherwise (`Host::keep`), every row of this step stands.
            self.continues.fill(Continue::After { valid: self.plan.span });
            self.last = positions.iter().map(|&p| Some(p)).collect();
        }
        for call in &self.calls {
            let mut states = BTreeMap::new();
            for (kind, layer) in &call.states {
                if let Some(t) = self.states.take(layer) {
                    states.insert(kind.clone(), t);
                }
            }
            let env = Env { bind: &call.bind, step: &step, weights: &self.weights, local: None, shared: &self.shared };
            let program = &self.programs[call.program];
            let result = match (&mut self.chips, &program.tp) {
                // Each chip takes and puts back its own share of the layer's states.
                (Some(chips), Some(_)) => chips.run(program, &env, &call.states),
                _ => {
                    let result = simulate_in_place(program, &env, &mut states);
                    for (kind, layer) in &call.states {
                        self.states.put(layer, states.remove(kind));
                    }
                    result
                }
            };
            let mut outputs = result.map_err(|source| HostError::Simulate { program: call.label.clone(), source })?;
            for (kind, bundle) in &call.outputs {
                let t = outputs
                    .remove(kind)
                    .ok_or_else(|| HostError::NoOutput { program: call.label.clone(), name: kind.clone() })?;
                step.insert(bundle.clone(), t);
            }
        }
        let logits = step.remove(&self.plan.logits).ok_or_else(|| HostError::NoOutput {
            program: "the head program".into(),
            name: self.plan.logits.clone(),
        })?;
        Ok(StepOutput { logits, hidden: step.remove(rdu_spatial::names::HIDDEN_OUTPUT) })
    }

    /// A verify bundle: of sequence `b`'s last step, only the first `valid` rows stand (its last
    /// accepted token and the `valid - 1` drafted tokens accepted after it); its next step
    /// starts at the position after them and continues from the state after row `valid - 1`.
    /// Refused for any other bundle, before a first step, and outside `1..=draft + 1`.
    pub fn keep(&mut self, b: usize, valid: usize) -> Result<()> {
        let fail = |problem: String| Err(HostError::Verify { problem });
        let Some(draft) = self.plan.draft else {
            return fail("only a verify bundle keeps some rows of a step; this bundle steps every row".into());
        };
        if self.last.get(b).copied().flatten().is_none() {
            return fail(format!("sequence {b} has no verify step to keep rows of"));
        }
        if !(1..=draft + 1).contains(&valid) {
            return fail(format!("{valid} rows of a step of {} cannot stand; keep 1 to {}", draft + 1, draft + 1));
        }
        self.continues[b] = Continue::After { valid };
        Ok(())
    }

    /// Refuses a verify step that does not start where the rows its sequences kept end.
    fn check_continues(&self, positions: &[usize]) -> Result<()> {
        for (b, (how, last)) in self.continues.iter().zip(&self.last).enumerate() {
            if let (Continue::After { valid }, Some(last)) = (how, last) {
                if positions[b] != last + valid {
                    let problem = format!(
                        "sequence {b} kept {valid} row(s) of the step at position {last}, so its next step starts at {}, not {}",
                        last + valid,
                        positions[b]
                    );
                    return Err(HostError::Verify { problem });
                }
            }
        }
        Ok(())
    }

    /// Every sequence of a verify bundle continues from its states as they are.
    fn fresh(&mut self) {
        self.continues.fill(Continue::Fresh);
        self.last.fill(None);
    }

    /// Moves every carried state out of this host (nothing is copied), e.g. from a prefill
    /// bundle's host to the decode bundle's host of the same sequence. Until states are put
    /// back, [`Host::step`] refuses to run.
    pub fn take_states(&mut self) -> States {
        self.states.take_all()
    }

    /// Moves `states` into this host, replacing its own. They must declare exactly this
    /// bundle's states (names, shapes and state storage): a prefill and a decode bundle of one
    /// model lowered with the same `ctx`, storage and `--state` do.
    pub fn put_states(&mut self, states: States) -> Result<()> {
        if !states.is_held() {
            return Err(HostError::StatesEmpty);
        }
        self.states.put_all(states).map_err(|problem| HostError::StatesMismatch { problem })?;
        self.fresh();
        Ok(())
    }

    /// Moves every chip's share of the states out of a tensor-parallel host (`None` for any
    /// other), as [`Host::take_states`] moves a one-chip host's.
    pub(crate) fn take_chip_states(&mut self) -> Option<Vec<States>> {
        self.chips.as_mut().map(|c| c.states.iter_mut().map(States::take_all).collect())
    }

    /// Moves every chip's share of the states into a tensor-parallel host, as
    /// [`Host::put_states`] does for a one-chip host.
    pub(crate) fn put_chip_states(&mut self, states: Option<Vec<States>>) -> Result<()> {
        match (&mut self.chips, states) {
            (None, None) => Ok(()),
            (Some(chips), Some(states)) if chips.states.len() == states.len() => {
                for (mine, theirs) in chips.states.iter_mut().zip(states) {
                    if !theirs.is_held() {
                        return Err(HostError::StatesEmpty);
                    }
                    mine.put_all(theirs).map_err(|problem| HostError::StatesMismatch { problem })?;
                }
                self.fresh();
                Ok(())
            }
            _ => Err(HostError::StatesMismatch { problem: chips_problem(&self.chips) }),
        }
    }

    /// Refuses, before anything runs, a pair of hosts whose states could not move between them.
    pub fn check_states_match(&self, other: &Host) -> Result<()> {
        let chips = |h: &Host| h.chips.as_ref().map(|c| c.states.len());
        if chips(self) != chips(other) {
            let problem = format!(
                "the bundles run over different chips ({} and {})",
                chips(self).unwrap_or(1),
                chips(other).unwrap_or(1)
            );
            return Err(HostError::StatesMismatch { problem });
        }
        let (mine, theirs) = match (&self.chips, &other.chips) {
            (Some(a), Some(b)) => (&a.states[0], &b.states[0]),
            _ => (&self.states, &other.states),
        };
        match crate::states::differ(mine, theirs) {
            Some(problem) => Err(HostError::StatesMismatch { problem }),
            None => Ok(()),
        }
    }

    /// Zeroes every state: the next step starts a new sequence.
    pub fn reset(&mut self) {
        self.fresh();
        self.states.reset();
        if let Some(chips) = &mut self.chips {
            chips.reset();
        }
    }

    /// Chips a step runs on (1 unless the bundle is tensor-parallel).
    pub fn chips(&self) -> usize {
        self.chips.as_ref().map_or(1, |c| c.weights.len())
    }

    /// Chip `chip`'s share of the carried state `name` (tensor-parallel bundles).
    pub fn chip_state(&self, chip: usize, name: &str) -> Option<&SimTensor> {
        self.chips.as_ref()?.states.get(chip)?.get(name)
    }

    /// Zeroes sequence `b`'s states in a batched bundle: that slot starts a new sequence.
    pub fn reset_sequence(&mut self, b: usize) {
        if let (Some(how), Some(last)) = (self.continues.get_mut(b), self.last.get_mut(b)) {
            (*how, *last) = (Continue::Fresh, None);
        }
        self.states.reset_sequence(b);
        if let Some(chips) = &mut self.chips {
            chips.states.iter_mut().for_each(|s| s.reset_sequence(b));
        }
    }

    /// Moves sequence `b`'s states out of a batched one-chip host, named as a one-sequence
    /// bundle of the same model names them (`Kc3_s1` → `Kc3`), so that a prefill bundle can run
    /// that sequence's chunks over them ([`Host::put_states`]); nothing is copied. Until they
    /// are put back ([`Host::put_sequence_states`]), [`Host::step_at`] refuses to run.
    pub fn take_sequence_states(&mut self, b: usize) -> Result<States> {
        self.check_sequence(b)?;
        Ok(self.states.take_sequence(b))
    }

    /// Moves `states` (one sequence's, as [`Host::take_sequence_states`] names them) into
    /// sequence `b`'s places of a batched one-chip host.
    pub fn put_sequence_states(&mut self, b: usize, states: States) -> Result<()> {
        self.check_sequence(b)?;
        self.states.put_sequence(b, states).map_err(|problem| HostError::StatesMismatch { problem })
    }

    fn check_sequence(&self, b: usize) -> Result<()> {
        if self.chips.is_some() {
            let problem = "a tensor-parallel host's states are its chips'; one sequence's cannot move alone".into();
            return Err(HostError::StatesMismatch { problem });
        }
        if b >= self.plan.sequences || self.manifest.cut.mode != rdu_spatial::manifest::CutMode::Batched {
            let problem =
                format!("sequence {b} is not one of this bundle's {} batched sequence(s)", self.plan.sequences);
            return Err(HostError::StatesMismatch { problem });
        }
        Ok(())
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Token ids per step.
    pub fn rows(&self) -> usize {
        self.plan.rows
    }

    /// A verify bundle's drafted tokens per sequence (it steps one more row of each).
    pub fn draft(&self) -> Option<usize> {
        self.plan.draft
    }

    /// Sequences per step, each with its own position and states: the batch, or 1.
    pub fn sequences(&self) -> usize {
        self.plan.sequences
    }

    /// Positions the bundle's caches and RoPE tables hold.
    pub fn ctx(&self) -> usize {
        self.plan.ctx
    }

    /// The vocabulary: the embedding table's rows.
    pub fn vocab(&self) -> usize {
        self.plan.vocab
    }

    pub fn weights(&self) -> &Weights {
        &self.weights
    }

    /// Copies the carried states `names` of a one-chip host into `into` (reusing its buffers),
    /// for [`Host::restore_states`] to copy back: a draft keeps what its rings and recurrent
    /// states held before the steps that may be rejected. False, copying nothing, for a
    /// tensor-parallel host.
    pub fn copy_states(&self, names: &[String], into: &mut BTreeMap<String, SimTensor>) -> bool {
        if self.chips.is_some() {
            return false;
        }
        self.states.copy_into(names, into);
        true
    }

    /// Copies back states [`Host::copy_states`] copied; the next step continues from them.
    pub fn restore_states(&mut self, copy: &BTreeMap<String, SimTensor>) -> Result<()> {
        self.states.restore(copy).map_err(|problem| HostError::StatesMismatch { problem })?;
        self.fresh();
        Ok(())
    }

    /// The carried state `name` (a layer tensor name, e.g. `Kc3`).
    pub fn state(&self, name: &str) -> Option<&SimTensor> {
        self.states.get(name)
    }

    pub fn states(&self) -> &States {
        &self.states
    }

    /// The shared table `name` (e.g. `cos0`).
    pub fn shared(&self, name: &str) -> Option<&SimTensor> {
        self.shared.get(name)
    }
}

/// Every program invocation of a step, in order: the embedding, each layer as the manifest's
/// schedule runs it (`kinds`: a kind's index in `programs`), the head.
fn calls_of(m: &Manifest, programs: &[SpatialProgram], kinds: &BTreeMap<String, usize>) -> Vec<Call> {
    let mut calls = vec![Call::new("embedding program".into(), 0, &programs[0], None)];
    // The layers run in the schedule's order: `Bundle::validate` has checked that its loops
    // run every layer exactly once, in order, each as its own kind (and that kind is defined).
    for l in m.schedule.layer_order() {
        let Some(layer) = m.layers.get(l) else { continue };
        let Some(&index) = kinds.get(&layer.kind) else { continue };
        let label = format!("layer {} (kind {})", layer.layer, layer.kind);
        calls.push(Call::new(label, index, &programs[index], Some(&layer.bind)));
    }
    let head_bind = (!m.programs.head.bind.is_empty()).then(|| {
        // Names the bind leaves out are the bundle's own.
        let mut bind = m.programs.head.bind.clone();
        for name in &m.programs.head.declared {
            bind.entry(name.clone()).or_insert_with(|| name.clone());
        }
        bind
    });
    calls.push(Call::new("head program".into(), 1, &programs[1], head_bind.as_ref()));
    calls
}

impl Call {
    /// A call of `program`; without `bind` (embedding, head) every name is the bundle's own.
    fn new(label: String, index: usize, program: &SpatialProgram, bind: Option<&BTreeMap<String, String>>) -> Call {
        let bind = bind.cloned().unwrap_or_else(|| {
            let names = program.tensors.iter().filter(|d| d.role != Role::Temp).map(|d| &d.name);
            names.chain(&program.outputs).map(|n| (n.clone(), n.clone())).collect()
        });
        let is_state = |name: &String| program.decl(name).is_some_and(|d| d.role == Role::State);
        let pair = |name: &String| bind.get(name).map(|b| (name.clone(), b.clone()));
        let states = program.tensors.iter().map(|d| &d.name).filter(|n| is_state(n)).filter_map(pair).collect();
        // Every result but a state (which travels in the state map) is passed on as an activation.
        let outputs = program.outputs.iter().filter(|n| !is_state(n)).filter_map(pair).collect();
        Call { label, program: index, bind, states, outputs }
    }
}

/// Why chips' states cannot move into a host with `chips`.
fn chips_problem(chips: &Option<crate::tensor_parallel::Chips>) -> String {
    match chips {
        Some(c) => format!("this host runs over {} chips; the states given are not its chips'", c.states.len()),
        None => "this host runs on one chip; the states given are several chips'".to_string(),
    }
}
