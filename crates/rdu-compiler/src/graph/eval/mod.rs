//! The reference interpreter: runs a [`Graph`] one node at a time with the plainest
//! implementation of every op — f32 storage, f64 accumulation in every reduction, dot
//! product and softmax. Ground truth for certification and tests; obvious first. Products
//! over weights and caches are f64 matrix products ([`gemm`]), parallel over output columns
//! (attention over rows, the delta rule over heads), so a real prefill chunk of 512 rows is
//! checked in seconds.
//!
//! Declared tensors are fetched from [`Bindings`] by name when first read; `experts` fetches
//! only the experts its rows select (through [`Bindings::slice0`]), so a lazy provider
//! materialises only those.

mod attention;
mod elementwise;
mod gemm;
mod mathf64;
mod moe;
mod products;
mod recurrent;
mod shape;
#[cfg(test)]
mod tests;

use super::{Graph, Node, Op, Origin, Tensor, ValueId};
use rdu_spatial::op::Visitor;
use rdu_spatial::q8::{Q8Weight, QK8_0};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Supplies the program's declared tensors (inputs, weights, shared tensors, states) by name.
pub trait Bindings {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>>;
    /// Row `index` along axis 0 of the tensor `name` (one expert of a stacked weight).
    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        self.tensor(name)?.slice0(index).map(Arc::new)
    }
    /// The weight `name` as Q8_0 blocks, when it is stored so: a `linear` that reads it (before
    /// anything reads it whole) takes its exact values a block of rows at a time, never the
    /// whole f32 tensor [`Bindings::tensor`] would make.
    fn q8(&self, _name: &str) -> Option<&Q8Weight> {
        None
    }
    /// Row `index` along axis 0 of the stacked weight `name` (one expert) as Q8_0 blocks, when
    /// it is stored so: `experts` reads it in place, never as f32 values.
    fn slice0_q8(&self, _name: &str, _index: usize) -> Option<Q8Weight> {
        None
    }
}

impl Bindings for BTreeMap<String, Tensor> {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.get(name).map(|t| Arc::new(t.clone()))
    }
    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        self.get(name)?.slice0(index).map(Arc::new)
    }
}

impl Bindings for BTreeMap<String, Arc<Tensor>> {
    fn tensor(&self, name: &str) -> Option<Arc<Tensor>> {
        self.get(name).cloned()
    }
    fn slice0(&self, name: &str, index: usize) -> Option<Arc<Tensor>> {
        self.get(name)?.slice0(index).map(Arc::new)
    }
}

/// The results of one step: every output and the final value of every state, by name.
#[derive(Clone, Debug, PartialEq)]
pub struct Evaluated {
    pub outputs: BTreeMap<String, Tensor>,
    pub states: BTreeMap<String, Tensor>,
}

/// A runtime error: a missing or mistyped binding, an id or position out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EvalError {
    /// The statement whose node failed, when a node failed.
    pub stmt: Option<usize>,
    /// One line, saying what was wrong.
    pub message: String,
}

impl EvalError {
    fn new(stmt: Option<usize>, message: String) -> EvalError {
        EvalError { stmt, message }
    }
}

/// What a kernel returns: its outputs, or a one-line reason.
type Kernel = Result<Vec<Tensor>, String>;

/// Runs one step of `graph` over the tensors `env` binds.
pub fn eval(graph: &Graph, env: &dyn Bindings) -> Result<Evaluated, EvalError> {
    eval_breaking_ties(graph, env, &|_| None, 0.0)
}

/// Runs one step of `graph` as [`eval`] does, except that a value written into a bf16 state
/// within `band` (relative) of a bf16 rounding midpoint is rounded to the neighbour `ties`
/// gives for that state (by name) and element, when it is one of the two
/// (`rdu_spatial::bf16::round_bf16_near`) — certification passes the simulator's final states,
/// so that a tie within both engines' accuracy is broken alike. Every other value is rounded
/// as `eval` rounds it.
pub fn eval_breaking_ties<'t>(
    graph: &Graph,
    env: &dyn Bindings,
    ties: &dyn Fn(&str) -> Option<&'t [f32]>,
    band: f32,
) -> Result<Evaluated, EvalError> {
    eval_breaking_all_ties(graph, env, ties, &|_| None, band)
}

/// [`eval_breaking_ties`], and a `route` whose choice of experts for a row differs from the one
/// `routes` gives for its expert indices (by name, `[n, k]`) takes that one instead when it is
/// a near-tie: every expert it chooses has a probability within `band` of the reference's
/// `k`-th (and, with groups, its group within `band` of the last group kept). Certification
/// passes the simulator's choices: router scores that differ in their last bits between the
/// two engines may order a near-tie either way, and both orders are right.
pub fn eval_breaking_all_ties<'t>(
    graph: &Graph,
    env: &dyn Bindings,
    ties: &dyn Fn(&str) -> Option<&'t [f32]>,
    routes: &dyn Fn(&str) -> Option<&'t [i32]>,
    band: f32,
) -> Result<Evaluated, EvalError> {
    graph.verify().map_err(|m| EvalError::new(None, format!("malformed graph: {m}")))?;
    let mut run = Run { graph, env, values: vec![None; graph.values.len()] };
    // States stored as bf16: a value written into one (an update, which shares the state's
    // name) is rounded to bf16 exactly as the simulator rounds it (`rdu_spatial::bf16`).
    let bf16_states: BTreeSet<&str> = graph
        .declared()
        .filter(|(_, _, d)| d.kind == crate::lang::ast::DeclKind::State && d.bf16)
        .map(|(_, v, _)| v.name.as_str())
        .collect();
    for node in &graph.nodes {
        let outs = run.node(node, routes, band)?;
        for (&v, mut t) in node.outputs.iter().zip(outs) {
            if t.shape() != graph.ty(v).shape.as_slice() || t.dtype() != graph.ty(v).dtype {
                let message =
                    format!("`{}` computed {t:?}, not the {} the graph says", graph.value(v).name, graph.ty(v));
                return Err(EvalError::new(Some(node.stmt), message));
            }
            let name = graph.value(v).name.as_str();
            if bf16_states.contains(name) {
                if let super::Data::F32(values) = &mut t.data {
                    match ties(name).filter(|other| other.len() == values.len()) {
                        Some(other) => values
                            .iter_mut()
                            .zip(other.iter())
                            .for_each(|(x, &o)| *x = rdu_spatial::bf16::round_bf16_near(*x, o, band)),
                        None => rdu_spatial::bf16::round_bf16_slice(values),
                    }
                }
            }
            run.values[v.index()] = Some(Arc::new(t));
        }
    }
    let outputs: Vec<(String, Arc<Tensor>)> =
        graph.outputs.iter().map(|o| Ok((o.name.clone(), run.get(o.value)?))).collect::<Result<_, EvalError>>()?;
    let states: Vec<(String, Arc<Tensor>)> =
        graph.states.iter().map(|s| Ok((s.name.clone(), run.get(s.last)?))).collect::<Result<_, EvalError>>()?;
    // Every other value dropped first, so that a result held nowhere else (a whole cache, say)
    // is moved out rather than copied.
    drop(run);
    let owned = |(name, t): (String, Arc<Tensor>)| (name, Arc::try_unwrap(t).unwrap_or_else(|t| t.as_ref().clone()));
    Ok(Evaluated { outputs: outputs.into_iter().map(owned).collect(), states: states.into_iter().map(owned).collect() })
}

struct Run<'g> {
    graph: &'g Graph,
    env: &'g dyn Bindings,
    values: Vec<Option<Arc<Tensor>>>,
}

impl<'g> Run<'g> {
    /// The tensor of `v`, fetching a declared tensor from the bindings on first use.
    fn get(&mut self, v: ValueId) -> Result<Arc<Tensor>, EvalError> {
        if let Some(t) = &self.values[v.index()] {
            return Ok(t.clone());
        }
        let value = self.graph.value(v);
        let Origin::Decl(decl) = &value.origin else {
            return Err(EvalError::new(None, format!("`{}` is read before it is computed", value.name)));
        };
        let kind = decl.kind.keyword();
        let Some(t) = self.env.tensor(&value.name) else {
            return Err(EvalError::new(None, format!("no tensor is bound to {kind} `{}` ({})", value.name, value.ty)));
        };
        if !t.is_consistent() {
            let message = format!(
                "the tensor bound to {kind} `{}` holds {} values, not the {} of its shape {:?}",
                value.name,
                t.len(),
                super::numel(&t.shape),
                t.shape
            );
            return Err(EvalError::new(None, message));
        }
        if t.dtype() != value.ty.dtype || t.shape() != value.ty.shape.as_slice() {
            let message = format!("the tensor bound to {kind} `{}` is {t:?}, not {}", value.name, value.ty);
            return Err(EvalError::new(None, message));
        }
        self.values[v.index()] = Some(t.clone());
        Ok(t)
    }

    /// Row `e` of the stacked weight `v`: from the bindings' `slice0` when `v` is declared
    /// and not materialised, else from the computed tensor.
    fn row(&self, v: ValueId, e: usize) -> Result<moe::Expert, String> {
        let value = self.graph.value(v);
        let whole = self.values[v.index()].clone();
        if let (Origin::Decl(_), None) = (&value.origin, &whole) {
            let fits = |w: &Q8Weight| rows_of_blocks(value.ty.dtype, &value.ty.shape[1..], w);
            if let Some(w) = self.env.slice0_q8(&value.name, e).filter(fits) {
                return Ok(moe::Expert::Q8(w));
            }
        }
        let row = match (&value.origin, whole) {
            (_, Some(t)) => t.slice0(e).map(Arc::new),
            (Origin::Decl(_), None) => self.env.slice0(&value.name, e),
            (Origin::Node { .. }, None) => return Err(format!("`{}` is read before it is computed", value.name)),
        };
        let row = row.ok_or_else(|| format!("no row {e} of `{}` is bound", value.name))?;
        if row.dtype() != value.ty.dtype || row.shape() != &value.ty.shape[1..] || !row.is_consistent() {
            let want = super::Type::new(value.ty.dtype, &value.ty.shape[1..]);
            return Err(format!("row {e} of `{}` is {row:?}, not {want}", value.name));
        }
        Ok(moe::Expert::Dense(row))
    }

    /// The Q8_0 blocks of a `linear`'s weight, when the bindings store it so, nothing has read
    /// it whole yet, and its shape is the graph's, rows of whole blocks.
    fn q8_weight(&self, node: &Node) -> Option<&'g Q8Weight> {
        let (Op::Linear, Some(&w)) = (&node.op, node.inputs.get(1)) else { return None };
        let value = self.graph.value(w);
        if self.values[w.index()].is_some() || !matches!(value.origin, Origin::Decl(_)) {
            return None;
        }
        self.env.q8(&value.name).filter(|q8| rows_of_blocks(value.ty.dtype, &value.ty.shape, q8))
    }

    fn node<'t>(
        &mut self,
        node: &Node,
        routes: &dyn Fn(&str) -> Option<&'t [i32]>,
        band: f32,
    ) -> Result<Vec<Tensor>, EvalError> {
        // `experts` reads its stacked weights row by row; every other op reads whole tensors,
        // but a `linear`'s weight bound as Q8_0 blocks and not yet read whole is read in place.
        let eager = if matches!(node.op, Op::Experts { .. }) { 3 } else { node.inputs.len() };
        let q8 = self.q8_weight(node);
        let mut args = Vec::with_capacity(eager);
        for (i, &v) in node.inputs[..eager].iter().enumerate() {
            if q8.is_none() || i != 1 {
                args.push(self.get(v)?);
            }
        }
        let ins: Vec<&Tensor> = args.iter().map(|a| a.as_ref()).collect();
        let result = match &node.op {
            Op::Linear if q8.is_some() => products::linear_q8(ins[0], q8.expect("checked"), ins.get(1).copied()),
            Op::Experts { act, limit } => {
                // Wg, Wu, Wd (and bg, bu), each read one expert's row at a time.
                let weights = node.inputs[3..].to_vec();
                let n_experts = self.graph.ty(weights[0]).shape[0];
                let gated = moe::Gated { act: *act, limit: *limit, biased: weights.len() == 5 };
                moe::experts(&ins, gated, n_experts, &mut |which, e| self.row(weights[which], e))
            }
            Op::Route { k, norm, scale, groups, topk_groups, score, group_score } => {
                let other = node.outputs.get(1).and_then(|&v| routes(&self.graph.value(v).name));
                let tie = other.map(|idx| (idx, f64::from(band)));
                let (k, norm, scale, groups, topk_groups) = (*k, *norm, *scale, *groups, *topk_groups);
                let rule = moe::Rule { k, norm, scale, groups, topk_groups, score: *score, group_score: *group_score };
                moe::route(ins[0], ins.get(1).copied(), &rule, tie)
            }
            op => kernel(op, &ins),
        };
        result.map_err(|m| {
            let binder = node.outputs.first().map_or("", |&v| self.graph.value(v).name.as_str());
            EvalError::new(Some(node.stmt), format!("statement {} (`{binder} = {}`): {m}", node.stmt, node.op.name()))
        })
    }
}

/// Whether `w` is an f32 matrix of `shape` as Q8_0 blocks whose rows are whole blocks — what
/// the reference reads in place (`linear`'s weight, an expert's).
fn rows_of_blocks(dtype: super::DType, shape: &[usize], w: &Q8Weight) -> bool {
    dtype == super::DType::F32
        && w.shape == shape
        && shape.len() == 2
        && shape[1].is_multiple_of(QK8_0)
        && w.blocks.len() * QK8_0 == shape[0] * shape[1]
}

/// Runs `op`'s kernel on `ins` (`experts` and a tie-broken `route` are [`Run::node`]'s).
fn kernel(op: &Op, ins: &[&Tensor]) -> Kernel {
    op.visit(Reference(ins))
}

/// The reference kernels, one `Visit` impl per op beside its kernel (see [`evals!`]).
struct Reference<'i>(&'i [&'i Tensor]);

impl Visitor for Reference<'_> {
    type Out = Kernel;
}

/// The reference kernel of each op: `Op(ins, attrs) => body` evaluates the op on its
/// operands `ins` with its typed attributes (`rdu_spatial::op::attrs::Op`).
macro_rules! evals {
    ($($op:ident($ins:ident, $attrs:pat) => $body:expr),* $(,)?) => {
        $(
            impl rdu_spatial::op::Visit<rdu_spatial::op::attrs::$op> for super::Reference<'_> {
                fn visit(self, $attrs: &rdu_spatial::op::attrs::$op) -> super::Kernel {
                    let $ins = self.0;
                    $body
                }
            }
        )*
    };
}
use evals;

/// The f32 elements of `t`, or an error naming what was expected.
fn f32s(t: &Tensor) -> Result<&[f32], String> {
    t.as_f32().ok_or_else(|| format!("expected an f32 tensor, found {t:?}"))
}

fn i32s(t: &Tensor) -> Result<&[i32], String> {
    t.as_i32().ok_or_else(|| format!("expected an i32 tensor, found {t:?}"))
}

/// An f32 result tensor of `shape` (the element count is right by construction).
fn out(shape: &[usize], data: Vec<f32>) -> Result<Tensor, String> {
    Tensor::try_f32(shape.to_vec(), data).ok_or_else(|| format!("internal: wrong element count for {shape:?}"))
}
