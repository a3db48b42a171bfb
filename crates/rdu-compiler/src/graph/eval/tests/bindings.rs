//! Bindings, states and runtime errors of whole graphs.

use super::{f, one_node};
use crate::graph::{eval, eval_breaking_ties, Declaration, Graph, NodeId, Op, Origin, Tensor, Type};
use crate::lang::ast::{DeclKind, Span};
use std::collections::BTreeMap;
use std::sync::Arc;

/// `y = add(x, S); S <- scale(y, by=2); output y` over x, S : f32[2].
fn stateful() -> Graph {
    let mut g = Graph::new();
    let x = g.declare("x", Type::f32(&[2]), Declaration::of(DeclKind::Input));
    let s = g.declare("S", Type::f32(&[2]), Declaration::of(DeclKind::State));
    let y = g.push(Op::Add, &[x, s], &["y"], 0, Span::default()).unwrap()[0];
    let s2 = g.push(Op::Scale { by: 2.0 }, &[y], &["S"], 1, Span::default()).unwrap()[0];
    assert!(g.write_back(s, s2));
    g.output("y", y);
    g
}

fn env(pairs: &[(&str, Tensor)]) -> BTreeMap<String, Tensor> {
    pairs.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
}

#[test]
fn outputs_and_final_states_by_name() {
    let g = stateful();
    let r = eval(&g, &env(&[("x", f(&[2], &[1., 2.])), ("S", f(&[2], &[10., 20.]))])).unwrap();
    assert_eq!(r.outputs.keys().collect::<Vec<_>>(), ["y"]);
    assert_eq!(r.outputs["y"], f(&[2], &[11., 22.]));
    assert_eq!(r.states["S"], f(&[2], &[22., 44.]));
}

#[test]
fn a_state_never_updated_is_carried_unchanged() {
    let mut g = Graph::new();
    let x = g.declare("x", Type::f32(&[2]), Declaration::of(DeclKind::Input));
    let s = g.declare("S", Type::f32(&[2]), Declaration::of(DeclKind::State));
    let y = g.push(Op::Add, &[x, s], &["y"], 0, Span::default()).unwrap()[0];
    g.output("y", y);
    let shared: BTreeMap<String, Arc<Tensor>> = [("x", f(&[2], &[1., 1.])), ("S", f(&[2], &[3., 4.]))]
        .into_iter()
        .map(|(n, t)| (n.into(), Arc::new(t)))
        .collect();
    let r = eval(&g, &shared).unwrap();
    assert_eq!(r.states["S"], f(&[2], &[3., 4.]));
}

#[test]
fn a_missing_binding_is_an_error() {
    let err = eval(&stateful(), &env(&[("x", f(&[2], &[1., 2.]))])).unwrap_err();
    assert_eq!(err.message, "no tensor is bound to state `S` (f32[2])");
}

#[test]
fn a_binding_of_the_wrong_shape_or_dtype_is_an_error() {
    let bad_shape = env(&[("x", f(&[3], &[1., 2., 3.])), ("S", f(&[2], &[0., 0.]))]);
    let err = eval(&stateful(), &bad_shape).unwrap_err();
    assert!(err.message.starts_with("the tensor bound to input `x` is f32[3]"), "{err}");
    let bad_dtype = env(&[("x", Tensor::i32([2], vec![1, 2])), ("S", f(&[2], &[0., 0.]))]);
    let err = eval(&stateful(), &bad_dtype).unwrap_err();
    assert!(err.message.contains("not f32[2]"), "{err}");
}

#[test]
fn a_malformed_graph_is_an_error_not_a_panic() {
    let (mut g, env) = one_node(Op::Neg, &[&f(&[2], &[1., 2.])]);
    // Claim the output has another shape than the op gives.
    g.values[1].ty = Type::f32(&[3]);
    let err = eval(&g, &env).unwrap_err();
    assert!(err.message.starts_with("malformed graph"), "{err}");
    assert_eq!(g.values[1].origin, Origin::Node { node: NodeId(0), output: 0 });
}

/// `S <- scale(x, by=1)` into a bf16 state S : f32[3].
fn bf16_write() -> Graph {
    let mut g = Graph::new();
    let x = g.declare("x", Type::f32(&[3]), Declaration::of(DeclKind::Input));
    let s = g.declare("S", Type::f32(&[3]), Declaration { bf16: true, ..Declaration::of(DeclKind::State) });
    let s2 = g.push(Op::Scale { by: 1.0 }, &[x], &["S"], 0, Span::default()).unwrap()[0];
    assert!(g.write_back(s, s2));
    g
}

#[test]
fn a_bf16_state_write_near_a_rounding_midpoint_breaks_the_tie_as_given_and_no_other() {
    let g = bf16_write();
    let (lo, hi) = (1.0f32, 1.0 + 2f32.powi(-7));
    // Just above the midpoint between 1 and 1 + 2^-7 (rounds to hi); well away from any midpoint
    // (rounds to 2); just below the midpoint (rounds to lo).
    let near_up = f32::from_bits((1.0f32 + 2f32.powi(-8)).to_bits() + 2);
    let near_down = f32::from_bits((1.0f32 + 2f32.powi(-8)).to_bits() - 2);
    let x = f(&[3], &[near_up, 2.0 + 2f32.powi(-9), near_down]);
    let env = env(&[("x", x), ("S", f(&[3], &[0.0; 3]))]);
    assert_eq!(eval(&g, &env).unwrap().states["S"], f(&[3], &[hi, 2.0, lo]), "round to nearest");
    // The other engine stored the other neighbour of each near-tie, and 2 + 2^-6 for the far value.
    let other = [lo, 2.0 + 2f32.powi(-6), hi];
    let ties = |n: &str| (n == "S").then_some(&other[..]);
    let r = eval_breaking_ties(&g, &env, &ties, 1e-4).unwrap();
    assert_eq!(r.states["S"], f(&[3], &[lo, 2.0, hi]), "near ties follow the other engine; the far value does not");
    // With no band, nothing is a tie.
    let r = eval_breaking_ties(&g, &env, &ties, 0.0).unwrap();
    assert_eq!(r.states["S"], f(&[3], &[hi, 2.0, lo]));
    // A tie-breaker of another length is not used.
    let short = |n: &str| (n == "S").then_some(&other[..2]);
    assert_eq!(eval_breaking_ties(&g, &env, &short, 1e-4).unwrap().states["S"], f(&[3], &[hi, 2.0, lo]));
}
