//! Unit tests of the reference interpreter: every op on tiny hand-computed cases.

mod attention;
mod bindings;
mod elementwise;
mod moe;
mod products;
mod recurrent;
mod shape;

use crate::graph::{eval, Declaration, EvalError, Graph, Op, Tensor, Type};
use crate::lang::ast::{DeclKind, Span};
use std::collections::BTreeMap;

/// A graph reading `inputs` (declared `a0`, `a1`, ...) through one node of `op`, whose
/// outputs `o0`, `o1`, ... are the program's outputs.
fn one_node(op: Op, inputs: &[&Tensor]) -> (Graph, BTreeMap<String, Tensor>) {
    let mut g = Graph::new();
    let mut env = BTreeMap::new();
    let mut ids = Vec::new();
    for (i, t) in inputs.iter().enumerate() {
        let name = format!("a{i}");
        ids.push(g.declare(&name, Type::new(t.dtype(), t.shape()), Declaration::of(DeclKind::Input)));
        env.insert(name, (*t).clone());
    }
    let names: Vec<String> = (0..op.n_outputs()).map(|k| format!("o{k}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let outs = g.push(op, &ids, &refs, 0, Span::default()).expect("the op accepts these operands");
    for (name, v) in names.iter().zip(outs) {
        g.output(name, v);
    }
    (g, env)
}

/// Evaluates `op` over `inputs`; its outputs in order.
fn try_run(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>, EvalError> {
    let (g, env) = one_node(op, inputs);
    let result = eval(&g, &env)?;
    Ok((0..g.outputs.len()).map(|k| result.outputs[&format!("o{k}")].clone()).collect())
}

fn run(op: Op, inputs: &[&Tensor]) -> Vec<Tensor> {
    try_run(op, inputs).unwrap_or_else(|e| panic!("evaluation failed: {e}"))
}

/// The single output of `op` over `inputs`.
fn run1(op: Op, inputs: &[&Tensor]) -> Tensor {
    run(op, inputs).remove(0)
}

/// Asserts `t` has `shape` and its values are within 1e-5 (relative) of `want`.
#[track_caller]
fn assert_close(t: &Tensor, shape: &[usize], want: &[f32]) {
    assert_eq!(t.shape(), shape, "shape of {t:?}");
    let got = t.as_f32().expect("an f32 tensor");
    assert_eq!(got.len(), want.len());
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let tol = 1e-5 * w.abs().max(1.0);
        assert!((g - w).abs() <= tol, "element {i}: got {g}, want {w} (all: {got:?})");
    }
}

fn f(shape: &[usize], data: &[f32]) -> Tensor {
    Tensor::f32(shape, data.to_vec())
}

fn i(shape: &[usize], data: &[i32]) -> Tensor {
    Tensor::i32(shape, data.to_vec())
}

/// Deterministic pseudo-random values in [-1, 1).
fn noise(shape: &[usize], seed: u64) -> Tensor {
    let mut state = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    Tensor::from_fn(shape, |_| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    })
}
