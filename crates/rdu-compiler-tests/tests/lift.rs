//! `front::lift` on whole programs: the worked example (golden graph, one evaluated decode
//! step), every authored program of every preset, and small cases of what lift accepts.

use rdu_compiler::front::lift;
use rdu_compiler::graph::{eval, DType, Graph, Origin, Tensor, Type};
use rdu_compiler::lang::ast::{DeclKind, Program};
use rdu_compiler::lang::parse;
use rdu_compiler::model::author::{embed_source, head_source, source_of};
use rdu_compiler::model::presets;
use rdu_compiler::model::spec::Cut;
use rdu_compiler::model::storage::Storage;
use std::collections::BTreeMap;
use std::path::Path;

const EXAMPLE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/example.rdu"));

fn parsed(text: &str) -> Program {
    parse(text).unwrap_or_else(|d| panic!("does not parse: {}", d[0]))
}

fn lifted(text: &str) -> Graph {
    lift(&parsed(text)).unwrap_or_else(|r| panic!("refused:\n{r}"))
}

/// The codes of a refusal, in order.
fn refused(text: &str) -> Vec<&'static str> {
    match lift(&parsed(text)) {
        Ok(g) => panic!("lifted:\n{g}"),
        Err(r) => r.diagnostics.iter().map(|d| d.code).collect(),
    }
}

#[test]
fn example_lifts_to_its_golden_graph() {
    let g = lifted(EXAMPLE);
    assert_eq!(g.outputs.len(), 1);
    assert_eq!((g.outputs[0].name.as_str(), g.ty(g.outputs[0].value)), ("xo1", &Type::f32(&[1, 64])));
    assert_eq!(g.nodes.len(), 22);
    assert!(g.nodes.iter().enumerate().all(|(i, n)| n.stmt == i));
    let states: Vec<_> = g.states.iter().map(|s| (s.name.as_str(), s.initial != s.last)).collect();
    assert_eq!(states, [("Kc1", true), ("Vc1", true)]);
    let wq = g.decl_named("Wq1").expect("Wq1 is declared");
    assert!(matches!(&g.value(wq).origin, Origin::Decl(d) if d.q8 && d.kind == DeclKind::Weight));
    assert_eq!(g.ty(wq), &Type::f32(&[64, 64]), "a q8 weight is an f32 value");
    let pos = g.decl_named("pos").expect("pos is declared");
    assert!(matches!(&g.value(pos).origin, Origin::Decl(d) if d.seed == Some(Tensor::scalar_i32(1))));
    assert_eq!(g.verify(), Ok(()));

    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/example.graph");
    let printed = g.to_string();
    if std::env::var_os("UPDATE_EXPECT").is_some() {
        std::fs::write(&golden, &printed).unwrap();
    }
    let want = std::fs::read_to_string(&golden).unwrap_or_default();
    assert_eq!(printed, want, "the printed graph changed; rerun with UPDATE_EXPECT=1 to bless it");
}

/// Deterministic values in [-0.5, 0.5).
fn noise(shape: &[usize], seed: u64) -> Tensor {
    let mut s = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    Tensor::from_fn(shape, |_| {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    })
}

/// Bindings for the example: noise weights, identity RoPE tables, empty caches.
fn example_bindings(g: &Graph, pos: i32) -> BTreeMap<String, Tensor> {
    let mut env = BTreeMap::new();
    for (i, (_, v, d)) in g.declared().enumerate() {
        let t = match (d.kind, v.name.as_str()) {
            (DeclKind::State, _) => Tensor::zeros(v.ty.shape.clone()),
            (_, "pos") => Tensor::scalar_i32(pos),
            (_, "cos0") => Tensor::from_fn(&v.ty.shape, |_| 1.0),
            (_, "sin0") => Tensor::zeros(v.ty.shape.clone()),
            _ => noise(&v.ty.shape, i as u64),
        };
        env.insert(v.name.clone(), t);
    }
    env
}

#[test]
fn example_evaluates_one_decode_step() {
    let g = lifted(EXAMPLE);
    let result = eval(&g, &example_bindings(&g, 1)).expect("evaluates");
    let xo1 = &result.outputs["xo1"];
    assert_eq!(xo1.shape(), &[1, 64]);
    assert!(xo1.as_f32().unwrap().iter().all(|v| v.is_finite()));
    // Position 1 writes slot 1 of each cache and nothing else.
    for name in ["Kc1", "Vc1"] {
        let cache = &result.states[name];
        assert_eq!(cache.shape(), &[256, 2, 16]);
        let slot = |s: usize| cache.slice0(s).unwrap().as_f32().unwrap().to_vec();
        assert!(slot(1).iter().any(|v| *v != 0.0), "{name}: slot 1 is written");
        // The caches are declared `bf16`: what the step writes is rounded to bf16.
        let rounded = slot(1).iter().all(|&v| rdu_spatial::bf16::round_bf16(v) == v);
        assert!(rounded, "{name}: a bf16 state holds bf16 values");
        assert!((0..256).filter(|&s| s != 1).all(|s| slot(s).iter().all(|v| *v == 0.0)), "{name}: one slot written");
    }
    // A position past the RoPE table is a runtime error, not a panic.
    let err = eval(&g, &example_bindings(&g, 300)).unwrap_err();
    assert!(err.message.contains("position 300") && err.stmt == Some(7), "{err}");
}

#[test]
fn authored_programs_of_every_preset_lift() {
    let mut failures = Vec::new();
    let mut lifted_count = 0;
    for name in presets::names() {
        let spec = presets::get(name).expect("preset loads");
        for cut in [Cut::Forward { seq: 3 }, Cut::Decode { ctx: 16 }] {
            let mut sources = vec![("embed".to_string(), embed_source(&spec, cut, &Storage::AllQ8))];
            for l in 0..spec.n_layers() {
                sources.push((format!("layer {l}"), source_of(&spec, l, cut, &Storage::AllQ8)));
            }
            sources.push(("head".to_string(), head_source(&spec, cut, &Storage::AllQ8)));
            for (what, source) in sources {
                match lift(&parsed(source.text())) {
                    Ok(g) => {
                        assert_eq!(g.verify(), Ok(()));
                        lifted_count += 1;
                    }
                    Err(r) => failures.push(format!("{name} {cut:?} {what}:\n{r}")),
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(lifted_count > 100, "only {lifted_count} programs lifted");
}

#[test]
fn a_state_update_is_read_by_later_statements_and_written_back() {
    let g = lifted(
        "input x : f32[2, 4]\nstate S : f32[2, 4]\ny = add(x, S)\nS <- scale(y, by=2.0)\nz = add(S, x)\noutput z\n",
    );
    let s = &g.states[0];
    assert_eq!(g.value(s.last).origin, Origin::Node { node: rdu_compiler::graph::NodeId(1), output: 0 });
    assert_eq!(g.nodes[2].inputs[0], s.last, "z reads the updated S");
    let env: BTreeMap<String, Tensor> =
        [("x".to_string(), Tensor::from_fn(&[2, 4], |_| 1.0)), ("S".to_string(), Tensor::zeros(vec![2, 4]))].into();
    let r = eval(&g, &env).unwrap();
    assert_eq!(r.outputs["z"], Tensor::from_fn(&[2, 4], |_| 3.0));
    assert_eq!(r.states["S"], Tensor::from_fn(&[2, 4], |_| 2.0));
}

#[test]
fn a_fresh_value_and_a_state_update_in_one_statement() {
    let text = "\
input  q : f32[1, 1, 2]
input  v : f32[1, 2, 3]
input  g : f32[1, 2]
input  b : f32[1, 2]
state  S : f32[2, 2, 3]
o, S <- delta_step(S, q, q, v, g, b, kmap=tiled)
output o
";
    let g = lifted(text);
    assert_eq!(g.ty(g.outputs[0].value), &Type::f32(&[1, 2, 3]));
    assert_eq!(g.states[0].last, g.nodes[0].outputs[1]);
}

#[test]
fn lift_accepts_declarations_anywhere_i32_arithmetic_and_seeds() {
    let g = lifted("p2 = add(pos, one)\noutput p2\ninput pos : i32[2] = [3, 4]\ninput one : i32[] = 1\n");
    assert_eq!(g.ty(g.outputs[0].value), &Type::new(DType::I32, &[2]));
    let pos = g.decl_named("pos").unwrap();
    assert!(matches!(&g.value(pos).origin, Origin::Decl(d) if d.seed == Some(Tensor::i32(vec![2], vec![3, 4]))));
}

#[test]
fn one_statement_reports_each_of_its_faults() {
    // An undefined operand, a bad attribute and an extra binder in one statement.
    let text = "input x : f32[2]\nw = neg(x)\ny, z = scale(nope, by=fast)\noutput w\n";
    assert_eq!(refused(text), ["E0202", "E0205", "E0207"]);
}

#[test]
fn declaration_faults() {
    assert_eq!(refused("input x : q8[2]\ny = neg(x)\noutput y\n"), ["E0204"]);
    assert_eq!(refused("input x : i32[2] = [1]\ny = neg(x)\noutput y\n"), ["E0207"]);
    assert_eq!(refused("input x : i32[] = 1.5\ny = neg(x)\noutput y\n"), ["E0207"]);
}
