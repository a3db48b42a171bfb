//! Certification (DESIGN §7): a lowered program is checked for structure and resources, then
//! validated numerically — on seeded random inputs, weights (Q8_0 where stored so) and states
//! at its real shapes, the simulator's results must match the reference interpreter of the
//! lifted source. The certificate records what was checked, the seed, the tolerance and the
//! worst error.

mod bindings;
mod memo;
mod structure;
mod tensor_parallel;

pub use bindings::Inputs;
pub use memo::share_references;
pub use tensor_parallel::{certify_tp, check_tp_structure};

/// The seeded inputs, weights and states certification runs `program` (lowered from `graph`)
/// on: the same values to the reference interpreter and to the simulator.
pub fn seeded_inputs(program: &SpatialProgram, graph: &Graph, seed: u64) -> Inputs {
    Inputs::new(program, graph, seed)
}

use crate::graph::{eval_breaking_all_ties, Graph};
use rdu_spatial::chip::Chip;
use rdu_spatial::program::SpatialProgram;
use rdu_spatial::sim::simulate;

/// Relative tolerance of the numeric check: every result element must satisfy
/// `|sim − ref| ≤ TOLERANCE · max(1, max|ref|)` over its tensor.
pub const TOLERANCE: f64 = 1e-4;

/// What certification checked and found.
#[derive(Clone, Debug, PartialEq)]
pub struct Certificate {
    pub checks: Vec<String>,
    pub seed: u64,
    /// The loosest absolute bound any result was held to: `TOLERANCE · max(1, max|ref|)`.
    pub tolerance: f64,
    /// The largest absolute difference between simulator and reference over every result.
    pub max_abs_err: f64,
}

/// Why a program was not certified.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum CertifyFault {
    #[error("structure: {0}")]
    Structure(String),
    #[error("resources: {0}")]
    Resources(String),
    #[error("numbers: {}", differs(tensor, *index, *got, *want, *diff, *bound))]
    Numbers { tensor: String, index: usize, got: f32, want: f32, diff: f64, bound: f64 },
    #[error("{engine} failed on seeded inputs: {message}")]
    Engine { engine: &'static str, message: String },
}

impl CertifyFault {
    /// The check that failed: `structure`, `resources` or `numbers` (an engine that could not
    /// run the seeded inputs fails the numeric check).
    pub fn check(&self) -> &'static str {
        match self {
            CertifyFault::Structure(_) => "structure",
            CertifyFault::Resources(_) => "resources",
            CertifyFault::Numbers { .. } | CertifyFault::Engine { .. } => "numbers",
        }
    }

    /// What failed, in the words of its check (the one line without the check's name).
    pub fn message(&self) -> String {
        match self {
            CertifyFault::Structure(m) | CertifyFault::Resources(m) => m.clone(),
            CertifyFault::Numbers { tensor, index, got, want, diff, bound } => {
                differs(tensor, *index, *got, *want, *diff, *bound)
            }
            engine @ CertifyFault::Engine { .. } => engine.to_string(),
        }
    }
}

/// A numeric fault: where the simulator and the reference differ, and by how much.
fn differs(tensor: &str, index: usize, got: f32, want: f32, diff: f64, bound: f64) -> String {
    format!("`{tensor}` differs at element {index}: simulator {got}, reference {want} (|diff| {diff:e} > {bound:e})")
}

/// Certifies `program`, lowered from `graph`, for `chip`, with inputs drawn from `seed`.
/// The reference result may be one an earlier certification in this process computed for the
/// same graph, inputs and tie-breakers, when [`share_references`] is on.
pub fn certify(program: &SpatialProgram, graph: &Graph, chip: &Chip, seed: u64) -> Result<Certificate, CertifyFault> {
    certify_with(program, graph, chip, seed, true).map(|(c, _)| c)
}

/// [`certify`], sharing reference results only when `share`, and saying whether its was reused.
fn certify_with(
    program: &SpatialProgram,
    graph: &Graph,
    chip: &Chip,
    seed: u64,
    share: bool,
) -> Result<(Certificate, bool), CertifyFault> {
    let mut checks = Vec::new();
    structure::check(program, graph).map_err(CertifyFault::Structure)?;
    checks.push("structure".to_string());
    structure::resources(program, chip).map_err(CertifyFault::Resources)?;
    checks.push("resources".to_string());

    let mut inputs = Inputs::new(program, graph, seed);
    let simulated =
        simulate(program, &inputs).map_err(|e| CertifyFault::Engine { engine: "simulator", message: e.to_string() })?;
    // The dense inputs moved to the reference: each held once, never copied.
    inputs.hand_to_reference();
    // bf16 states: a value within the tolerance of a rounding midpoint may round to either
    // neighbour, and the reference takes the one the simulator stored; every other value is
    // rounded by the reference alone and must agree.
    // Likewise a route whose router scores put two experts within the tolerance of each other
    // may choose either; the reference takes the simulator's choice when it is such a tie.
    let ties = |name: &str| simulated.states.get(name)?.as_f32();
    let routes = |name: &str| simulated.routes.get(name)?.as_i32();
    let (reference, reused) = reference(graph, &inputs, &ties, &routes, share)?;
    let (mut max_abs_err, mut tolerance) = (0f64, TOLERANCE);
    let results = reference.outputs.iter().map(|(n, t)| (n, t, simulated.outputs.get(n)));
    let states = reference.states.iter().map(|(n, t)| (n, t, simulated.states.get(n)));
    for (name, want, got) in results.chain(states) {
        let Some(got) = got else {
            return Err(CertifyFault::Engine { engine: "simulator", message: format!("produced no `{name}`") });
        };
        let (err, bound) = compare(name, got, want)?;
        max_abs_err = max_abs_err.max(err);
        tolerance = tolerance.max(bound);
    }
    checks.push(format!(
        "numbers ({} results and states at real shapes, each within {TOLERANCE:e} of its scale max(1, max|ref|))",
        reference.outputs.len() + reference.states.len()
    ));
    Ok((Certificate { checks, seed, tolerance, max_abs_err }, reused))
}

/// The reference interpreter's result of `graph` on `inputs`, near-ties broken by the
/// simulator's `ties` and `routes` within the tolerance — one an earlier certification computed
/// when `share` and [`share_references`] is on and it would be the same ([`memo`]: keyed by the
/// graph and how every input was seeded) — and whether it was.
fn reference<'t>(
    graph: &Graph,
    inputs: &Inputs,
    ties: memo::Breaks<'_, 't, f32>,
    routes: memo::Breaks<'_, 't, i32>,
    share: bool,
) -> Result<(std::sync::Arc<crate::graph::Evaluated>, bool), CertifyFault> {
    let key = || memo::key(&[format!("{graph:?}").as_bytes(), &inputs.describe(), &TOLERANCE.to_le_bytes()]);
    memo::reference(key, share, ties, routes, |ties, routes| {
        eval_breaking_all_ties(graph, inputs, ties, routes, TOLERANCE as f32)
    })
    .map_err(|e| CertifyFault::Engine { engine: "reference", message: e.to_string() })
}

/// The largest absolute difference of one result and the bound it was held to, or the fault
/// naming the worst element.
fn compare(
    name: &str,
    got: &rdu_spatial::sim::SimTensor,
    want: &crate::graph::Tensor,
) -> Result<(f64, f64), CertifyFault> {
    let engine = |m: String| CertifyFault::Engine { engine: "simulator", message: m };
    if got.shape != want.shape {
        return Err(engine(format!("`{name}` has shape {:?}, the reference {:?}", got.shape, want.shape)));
    }
    match (got.as_f32(), want.as_f32(), got.as_i32(), want.as_i32()) {
        (Some(g), Some(w), _, _) => worst_of(name, g, w),
        (_, _, Some(g), Some(w)) => worst_of(name, g, w),
        _ => Err(engine(format!("`{name}` has another dtype than the reference"))),
    }
}

/// [`compare`] of two results of one dtype, each value taken as f64 where it is read (a
/// result may be a whole cache: no widened copies of it). Runs of `RUN` values in parallel, each
/// one pass of running maxima in `LANES` independent lanes (so it vectorises: `max` is exact in
/// any order, so the maxima are the same however the runs are split), a NaN difference
/// remembered apart; the worst element's index is looked for only when it fails.
fn worst_of<T: Copy + Into<f64> + Send + Sync>(name: &str, got: &[T], want: &[T]) -> Result<(f64, f64), CertifyFault> {
    use rayon::prelude::*;
    const LANES: usize = 8;
    const RUN: usize = 1 << 16;
    type Maxima = ([f64; LANES], [f64; LANES], [bool; LANES]);
    // Scale at least 1, no difference, no NaN: what an empty run leaves.
    const NONE: Maxima = ([1f64; LANES], [0f64; LANES], [false; LANES]);
    let run = |(got, want): (&[T], &[T])| -> Maxima {
        let (mut scale, mut worst, mut nan) = NONE;
        let mut lane = |l: usize, a: T, b: T| {
            let (a, b): (f64, f64) = (a.into(), b.into());
            let d = (a - b).abs();
            scale[l] = scale[l].max(b.abs());
            worst[l] = worst[l].max(d);
            nan[l] |= d.is_nan();
        };
        let (gs, wants) = (got.chunks_exact(LANES), want.chunks_exact(LANES));
        let rest = gs.remainder().iter().zip(wants.remainder());
        for (g, w) in gs.zip(wants) {
            for l in 0..LANES {
                lane(l, g[l], w[l]);
            }
        }
        for (l, (&a, &b)) in rest.enumerate() {
            lane(l, a, b);
        }
        (scale, worst, nan)
    };
    let join = |(s, w, n): Maxima, (s2, w2, n2): Maxima| -> Maxima {
        (
            std::array::from_fn(|l| s[l].max(s2[l])),
            std::array::from_fn(|l| w[l].max(w2[l])),
            std::array::from_fn(|l| n[l] | n2[l]),
        )
    };
    let len = got.len().min(want.len());
    let (scale, worst, nan) =
        got[..len].par_chunks(RUN).zip(want[..len].par_chunks(RUN)).map(run).reduce(|| NONE, join);
    let scale = scale.into_iter().fold(1f64, f64::max);
    let worst = if nan.contains(&true) { f64::NAN } else { worst.into_iter().fold(0f64, f64::max) };
    let bound = TOLERANCE * scale;
    if worst > bound || worst.is_nan() {
        let diff = |i: usize| (got[i].into() - want[i].into()).abs();
        let i = (0..got.len().min(want.len())).find(|&i| diff(i).is_nan() || diff(i) == worst).unwrap_or_default();
        return Err(CertifyFault::Numbers {
            tensor: name.to_string(),
            index: i,
            got: got[i].into() as f32,
            want: want[i].into() as f32,
            diff: worst,
            bound,
        });
    }
    Ok((worst, bound))
}

/// Every structural fault of `program` against `graph` (the structure check, `structure.rs`,
/// collecting them all rather than stopping at the first, which is the one
/// `CertifyFault::Structure` reports); empty when the program is sound. Resources are not
/// included: they hold only once a program is placed.
pub fn structure_faults(program: &SpatialProgram, graph: &Graph) -> Vec<String> {
    structure::faults(program, graph)
}

/// The structure and resource checks alone (for a program too large to validate numerically
/// at full size, whose numbers are checked on a smaller instance of the same program).
pub fn check_structure(program: &SpatialProgram, graph: &Graph, chip: &Chip) -> Result<(), CertifyFault> {
    structure::check(program, graph).map_err(CertifyFault::Structure)?;
    structure::resources(program, chip).map_err(CertifyFault::Resources)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::Tensor;
    use rdu_spatial::sim::SimTensor;

    /// The first kind of tiny `preset` (decode, ctx 64, Q8_0 weights, bf16 states), lifted
    /// and lowered for `chip`.
    fn kind(preset: &str, chip: &Chip) -> (SpatialProgram, Graph) {
        use crate::model::spec::{Cut, StateDtype};
        use crate::model::storage::Storage;
        let mut spec = crate::model::presets::resolve(preset).expect("preset");
        spec.state = StateDtype::Bf16;
        let src = crate::model::author::source_of(&spec, 0, Cut::Decode { ctx: 64 }, &Storage::AllQ8);
        let program = crate::lang::parse(src.text()).expect("parses");
        let graph = crate::front::lift(&program).expect("lifts");
        (crate::lower::lower("kind", &program, &graph, &src.stored, chip, &mut |_, _| {}), graph)
    }

    /// A kind lowered for SN50 and for SN40L (different programs, one graph) is certified for
    /// the second against the first's reference result, and its certificate is the one a
    /// reference of its own gives; another seed is not served it. With routed experts and bf16
    /// states, so that tie-breakers are read.
    #[test]
    fn a_shared_reference_certifies_as_one_of_its_own() {
        share_references(memo::tests::BUDGET);
        let (sn50, sn40l) = (Chip::builtin("sn50").unwrap(), Chip::builtin("sn40l").unwrap());
        let (p50, graph) = kind("tiny-qwen3-next", &sn50);
        let (p40, graph40) = kind("tiny-qwen3-next", &sn40l);
        assert_eq!(graph, graph40);
        assert_ne!(p50.sections, p40.sections, "the chips' programs differ");
        assert!(graph.nodes.iter().any(|n| matches!(n.op, crate::graph::Op::Route { .. })), "experts are routed");
        assert!(graph.declared().any(|(_, _, d)| d.bf16), "a state is stored bf16");
        let seed = 90_210;
        let (_, reused) = certify_with(&p50, &graph, &sn50, seed, true).expect("certifies");
        assert!(!reused, "the first certification computes its reference");
        let (shared, reused) = certify_with(&p40, &graph, &sn40l, seed, true).expect("certifies");
        assert!(reused, "the second reuses it");
        let (own, reused) = certify_with(&p40, &graph, &sn40l, seed, false).expect("certifies");
        assert!(!reused);
        assert_eq!(shared, own);
        let (_, reused) = certify_with(&p40, &graph, &sn40l, seed + 1, true).expect("certifies");
        assert!(!reused, "another seed draws other inputs");
    }

    #[test]
    fn integer_results_are_compared_exactly_as_numbers() {
        let want = Tensor::i32(vec![3], vec![4, -2, 9]);
        let same = SimTensor::i32(vec![3], vec![4, -2, 9]);
        assert_eq!(compare("idx", &same, &want).unwrap(), (0.0, TOLERANCE * 9.0));
        let other = SimTensor::i32(vec![3], vec![4, -1, 9]);
        let fault = compare("idx", &other, &want).unwrap_err();
        assert!(matches!(fault, CertifyFault::Numbers { index: 1, diff, .. } if diff == 1.0), "{fault}");
        let float = SimTensor::f32(vec![3], vec![4.0, -2.0, 9.0]);
        let fault = compare("idx", &float, &want).unwrap_err();
        assert!(matches!(fault, CertifyFault::Engine { .. }), "{fault}");
    }

    #[test]
    fn a_difference_exactly_at_the_bound_passes_and_the_first_worst_element_is_named() {
        // A scale whose bound `TOLERANCE · scale` is an f32 value, so a result can differ by it exactly.
        let scale = f32::from_bits(1_065_353_358);
        let bound = TOLERANCE * scale as f64;
        assert_eq!(bound as f32 as f64, bound, "the bound is an f32 value");
        let want = Tensor::f32(vec![2], vec![scale, 0.0]);
        let at = SimTensor::f32(vec![2], vec![scale, bound as f32]);
        assert_eq!(compare("y", &at, &want).unwrap(), (bound, bound));
        // Past the bound by one ulp: refused, naming the element.
        let past = SimTensor::f32(vec![2], vec![scale, f32::from_bits((bound as f32).to_bits() + 1)]);
        assert!(matches!(compare("y", &past, &want).unwrap_err(), CertifyFault::Numbers { index: 1, .. }));
        // Two elements off by the same amount: the first is the one named.
        let want = Tensor::f32(vec![3], vec![0.0, 0.0, 0.0]);
        let two = SimTensor::f32(vec![3], vec![0.0, 0.5, -0.5]);
        assert!(matches!(compare("y", &two, &want).unwrap_err(), CertifyFault::Numbers { index: 1, .. }));
    }

    /// Past the first lanes' worth of elements: the largest value sets the scale wherever it is,
    /// the worst element is found in any lane or in the remainder, and a NaN is always refused.
    #[test]
    fn the_worst_element_is_found_in_every_lane_and_a_nan_is_refused() {
        let want: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut big = want.clone();
        big[21] = 400.0;
        let same = SimTensor::f32(vec![37], big.clone());
        assert_eq!(compare("y", &same, &Tensor::f32(vec![37], big.clone())).unwrap(), (0.0, TOLERANCE * 400.0));
        for at in [0, 13, 21, 35] {
            let mut got = want.clone();
            got[at] += 0.25;
            let fault = compare("y", &SimTensor::f32(vec![37], got), &Tensor::f32(vec![37], want.clone())).unwrap_err();
            assert!(
                matches!(fault, CertifyFault::Numbers { index, diff, .. } if index == at && (diff - 0.25).abs() < 1e-6),
                "{fault}"
            );
            let mut got = want.clone();
            got[at] = f32::NAN;
            let fault = compare("y", &SimTensor::f32(vec![37], got), &Tensor::f32(vec![37], want.clone())).unwrap_err();
            assert!(
                matches!(fault, CertifyFault::Numbers { index, diff, .. } if index == at && diff.is_nan()),
                "{fault}"
            );
        }
    }

    /// A result of several parallel runs of values: the scale is the largest value of any run,
    /// the worst difference is found in a later run than the scale's, and named by its index.
    #[test]
    fn maxima_hold_across_runs() {
        let n = 3 * (1 << 16) + 11;
        let want: Vec<f32> = (0..n).map(|i| ((i % 1000) as f32 * 0.013).cos()).collect();
        let mut scaled = want.clone();
        scaled[70_000] = -250.0;
        let got = SimTensor::f32(vec![n], scaled.clone());
        assert_eq!(compare("y", &got, &Tensor::f32(vec![n], scaled.clone())).unwrap(), (0.0, TOLERANCE * 250.0));
        for (at, off) in [(150_000, 0.05), (n - 3, 0.06)] {
            let mut other = scaled.clone();
            other[at] += off;
            let fault =
                compare("y", &SimTensor::f32(vec![n], other), &Tensor::f32(vec![n], scaled.clone())).unwrap_err();
            assert!(matches!(fault, CertifyFault::Numbers { index, .. } if index == at), "{fault}");
        }
        // Within the bound the scale of another run allows: passes, the difference reported.
        let mut near = scaled.clone();
        near[190_000] += 0.01;
        let (worst, bound) = compare("y", &SimTensor::f32(vec![n], near), &Tensor::f32(vec![n], scaled)).unwrap();
        assert!(worst > 0.009 && worst < 0.011 && bound == TOLERANCE * 250.0, "{worst} {bound}");
    }
}
