//! Whole programs: the golden decode layer (folded and tiled = dense and untiled, in place =
//! copied states; a refused update beside an accepted one in a wave), runtime errors as one-line
//! `SimError`s, and no panic on random programs.

use crate::common;
use std::collections::BTreeMap;

use common::*;
use proptest::prelude::*;
use rdu_spatial::text::parse;
use rdu_spatial::{simulate, simulate_in_place, MapBindings, Op, Role, SimError, SpatialProgram, Storage};

const GOLDEN: &str = include_str!("data/attention_dense.spatial");

/// Seeded bindings for every bound tensor of `p` (Q8_0 where declared so, `pos` = 3).
fn bindings(p: &SpatialProgram) -> MapBindings {
    let mut b = MapBindings::new();
    for (k, d) in p.tensors.iter().enumerate().filter(|(_, d)| d.role.is_bound()) {
        if d.name == "pos" {
            b = b.with("pos", i(&[], &[3]));
        } else if d.storage == Storage::Q8_0 {
            b = b.with_q8(&d.name, q8(&d.shape, k as u64));
        } else {
            b = b.with(&d.name, rt(&d.shape, k as u64));
        }
    }
    b
}

#[test]
fn the_golden_layer_folded_and_tiled_equals_its_dense_untiled_self() {
    let folded = parse(GOLDEN).unwrap();
    let b = bindings(&folded);
    let got = simulate(&folded, &b).unwrap();
    let mut dense = folded.clone();
    let mut db = b.clone();
    for d in dense.tensors.iter_mut().filter(|d| d.storage == Storage::Q8_0) {
        d.storage = Storage::Dense;
        let w = db.q8.remove(&d.name).unwrap();
        db = db.with(&d.name, f(&d.shape, &w.dequantize()));
    }
    for op in dense.sections.iter_mut().flat_map(|s| &mut s.stages).flat_map(|s| &mut s.ops) {
        op.fold = None;
        op.tiling = None;
    }
    let want = simulate(&dense, &db).unwrap();
    close_scaled(&out(&got, "xo1"), &out(&want, "xo1"), 1e-5);
    // The step wrote slot 3 of both caches and nothing else.
    let kc = got.states["Kc1"].as_f32().unwrap();
    let before = b.tensors["Kc1"].as_f32().unwrap();
    let changed: Vec<usize> = (0..256).filter(|s| kc[s * 32..(s + 1) * 32] != before[s * 32..(s + 1) * 32]).collect();
    assert_eq!(changed, [3]);
}

#[test]
fn in_place_states_give_the_same_step_as_copied_ones() {
    let p = parse(GOLDEN).unwrap();
    let b = bindings(&p);
    let copied = simulate(&p, &b).unwrap();
    let mut states: BTreeMap<_, _> = ["Kc1", "Vc1"].iter().map(|n| (n.to_string(), b.tensors[*n].clone())).collect();
    let outputs = simulate_in_place(&p, &b, &mut states).unwrap();
    assert_eq!(outputs, copied.outputs);
    assert_eq!(states, copied.states);
}

/// A bf16 cache written in place has only the row it is given rounded; the copied step (its
/// caches read from the bindings) rounds the whole cache after the write. Both give the same
/// states and outputs, bit for bit, and the states hold bf16 values.
#[test]
fn a_bf16_cache_written_in_place_equals_the_copied_step() {
    let mut p = parse(GOLDEN).unwrap();
    for d in p.tensors.iter_mut().filter(|d| d.role == Role::State) {
        d.storage = Storage::Bf16;
    }
    let mut b = bindings(&p);
    for name in ["Kc1", "Vc1"] {
        rdu_spatial::bf16::round_bf16_slice(b.tensors.get_mut(name).unwrap().as_f32_mut().unwrap());
    }
    let copied = simulate(&p, &b).unwrap();
    let mut states: BTreeMap<_, _> = ["Kc1", "Vc1"].iter().map(|n| (n.to_string(), b.tensors[*n].clone())).collect();
    let outputs = simulate_in_place(&p, &b, &mut states).unwrap();
    assert_eq!(outputs, copied.outputs);
    assert_eq!(states, copied.states);
    assert!(states.values().all(|t| rdu_spatial::bf16::all_bf16(t.as_f32().unwrap())));
    // The written row was not a bf16 row before rounding: rounding it mattered.
    let x = b.tensors["Kc1"].as_f32().unwrap();
    assert_ne!(&states["Kc1"].as_f32().unwrap()[3 * 32..4 * 32], &x[3 * 32..4 * 32]);
}

#[test]
fn a_refused_in_place_update_leaves_the_state_with_the_caller() {
    let b = MapBindings::new().with("x", f(&[1, 3], &[1., 2., 3.])).with("pos", i(&[], &[0]));
    let p = program(&b.clone().with("C", f(&[2, 2], &[0.; 4])), "C <- cache_put(C, x, pos)", &[]);
    let mut states = BTreeMap::from([("C".to_string(), f(&[2, 2], &[5., 6., 7., 8.]))]);
    let e = simulate_in_place(&p, &b, &mut states).unwrap_err().to_string();
    assert!(e.contains("cannot put rows [1, 3] into a cache [2, 2]"), "{e}");
    assert_eq!(states["C"], f(&[2, 2], &[5., 6., 7., 8.]));
}

/// Two independent updates run in one wave (`sim/waves.rs`): the refused one leaves its state
/// with the caller as it was, the other's write stands, and the error is the refused one's.
#[test]
fn a_refused_update_beside_an_accepted_one_in_a_wave_keeps_both_states() {
    let b = MapBindings::new()
        .with("x", f(&[1, 3], &[1., 2., 3.]))
        .with("y", f(&[1, 2], &[9., 10.]))
        .with("pos", i(&[], &[1]));
    let decls = b.clone().with("C", f(&[2, 2], &[0.; 4])).with("C2", f(&[2, 2], &[0.; 4]));
    let p = program(&decls, "C <- cache_put(C, x, pos)\nC2 <- cache_put(C2, y, pos)", &[]);
    let mut states = BTreeMap::from([
        ("C".to_string(), f(&[2, 2], &[5., 6., 7., 8.])),
        ("C2".to_string(), f(&[2, 2], &[1., 2., 3., 4.])),
    ]);
    let e = simulate_in_place(&p, &b, &mut states).unwrap_err().to_string();
    assert!(e.contains("cannot put rows [1, 3] into a cache [2, 2]"), "{e}");
    assert_eq!(states["C"], f(&[2, 2], &[5., 6., 7., 8.]));
    assert_eq!(states["C2"], f(&[2, 2], &[1., 2., 9., 10.]));
}

#[test]
fn runtime_faults_are_one_line_errors() {
    let p = parse(GOLDEN).unwrap();
    let mut b = bindings(&p);
    b.tensors.insert("pos".into(), i(&[], &[256]));
    let e = simulate(&p, &b).unwrap_err();
    assert_eq!(e.to_string(), "stage s1, op 3 `rope`: position 256 is beyond the 256 rows of the rope tables");
    let mut b = bindings(&p);
    b.q8.remove("Wk1");
    let e = simulate(&p, &b).unwrap_err();
    assert_eq!(e, SimError::Missing { name: "Wk1".into(), role: "weight".into() });
    let mut b = bindings(&p);
    b.tensors.insert("an1".into(), rt(&[63], 1));
    let e = simulate(&p, &b).unwrap_err().to_string();
    assert_eq!(e, "binding an1: f32[63] with 63 values, declared f32[64]");
    let mut b = bindings(&p);
    b.tensors.insert("pos".into(), f(&[], &[1.0]));
    assert!(simulate(&p, &b).unwrap_err().to_string().contains("declared i32[]"));
    let mut bad = p.clone();
    bad.outputs.push("nowhere".into());
    assert_eq!(simulate(&bad, &bindings(&p)).unwrap_err(), SimError::NoOutput { name: "nowhere".into() });
    let mut lying = p.clone();
    lying.tensors.iter_mut().find(|d| d.name == "q1").unwrap().shape = vec![1, 63];
    let e = simulate(&lying, &bindings(&p)).unwrap_err().to_string();
    assert!(e.contains("produces f32[1, 64] but q1 is declared f32[1, 63]"), "{e}");
    let mut rebind = p.clone();
    rebind.sections[1].stages[0].ops[1].outs = vec!["xo0".into()];
    let e = simulate(&rebind, &bindings(&p)).unwrap_err().to_string();
    assert!(e.contains("xo0 is a declared input and cannot be rebound"), "{e}");
    assert!(p.tensors.iter().any(|d| d.role == Role::State));
}

/// Every op of the table with its least and its most number of tensor arguments (one past the
/// least when it takes any number); an unknown op is refused by the parser (`tests/text.rs`).
fn ops() -> Vec<(Op, usize)> {
    let counts = |op: Op| {
        let (least, most) = op.arity();
        let most = if most == usize::MAX { least + 1 } else { most };
        if least == most {
            vec![least]
        } else {
            vec![least, most]
        }
    };
    Op::ALL.into_iter().flat_map(|op| counts(op).into_iter().map(move |n| (op, n))).collect()
}

fn lit_text() -> impl Strategy<Value = String> {
    prop_oneof![
        (-1i64..4).prop_map(|v| v.to_string()),
        (-3i64..70).prop_map(|v| v.to_string()),
        (-2.0f64..2.0).prop_map(|v| format!("{v:?}")),
        prop::sample::select(vec!["neox", "interleaved", "silu", "gelu_tanh", "tiled", "grouped", "x"])
            .prop_map(str::to_string),
        prop::collection::vec(0usize..5, 0..4)
            .prop_map(|v| format!("[{}]", v.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", "))),
    ]
}

fn op_line(k: usize) -> impl Strategy<Value = String> {
    let tensor = (0usize..7 + k).prop_map(|i| format!("t{i}"));
    let tile = prop::option::of((0usize..4, prop::collection::vec((0usize..4, 0usize..4), 0..3)));
    let outs = prop::sample::select(vec![0u8, 0, 0, 1, 2]);
    let fold = prop::sample::select(vec![false, false, false, true]);
    (
        prop::sample::select(ops()),
        prop::collection::vec(tensor, 6),
        prop::collection::vec(lit_text(), 6),
        fold,
        tile,
        outs,
    )
        .prop_map(move |((op, n_args), names, lits, fold, tile, outs)| {
            let outs = match outs {
                0 => format!("t{} = ", 7 + k),
                1 => format!("t{}, t{} = ", 7 + k, 20 + k),
                _ => format!("t{}, t6 <- ", 7 + k),
            };
            let mut args: Vec<String> = names.into_iter().take(n_args).collect();
            if op.takes_shape_literal() {
                args.push(lits[0].clone());
            }
            args.extend(op.attrs().iter().zip(&lits).map(|(key, v)| format!("{key}={v}")));
            let mut line = format!("{outs}{op}({})", args.join(", "));
            if fold {
                line.push_str(" fold=q8");
            }
            if let Some((axis, tiles)) = tile {
                let t: Vec<String> = tiles.iter().map(|(s, e)| format!("{s}..{e}")).collect();
                line.push_str(&format!(" tile(axis={axis}, [{}])", t.join(", ")));
            }
            line
        })
}

fn decl_and_value() -> impl Strategy<Value = (Vec<usize>, bool, bool)> {
    let dim = prop::sample::select(vec![1usize, 2, 2, 3, 0, 4]);
    (prop::collection::vec(dim, 0..4), prop::sample::select(vec![false, false, true]), any::<bool>())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    #[test]
    fn the_simulator_never_panics_on_random_programs(
        decls in prop::collection::vec(decl_and_value(), 6),
        ops in (op_line(0), op_line(1), op_line(2), op_line(3)),
        ints in prop::collection::vec(-2i32..8, 64),
    ) {
        let mut text = String::from("program g chip=sn50\n");
        let mut b = MapBindings::new();
        for (k, (shape, is_int, q8w)) in decls.iter().enumerate() {
            let name = format!("t{k}");
            let n: usize = shape.iter().product();
            if *q8w && k >= 4 {
                let shape = [shape.first().copied().unwrap_or(1), 32];
                text += &format!("tensor {name} : f32[{}, 32] storage=q8_0 role=weight home=hbm\n", shape[0]);
                b = b.with_q8(&name, q8(&shape, k as u64));
                continue;
            }
            let (dtype, role) = (if *is_int { "i32" } else { "f32" }, if k == 5 { "state" } else { "input" });
            let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
            text += &format!("tensor {name} : {dtype}[{}] role={role} home=hbm\n", dims.join(", "));
            let t = if *is_int { i(shape, &ints[..n.min(64)]) } else { rt(shape, k as u64) };
            b = b.with(&name, t);
        }
        text += "tensor t6 : f32[2] role=state home=hbm\nsection 0\nstage s pcus=1 pmus=1\n";
        b = b.with("t6", f(&[2], &[1.0, 2.0]));
        // The four ops as one program, then each on its own (so that every kernel runs often).
        let lines = [ops.0, ops.1, ops.2, ops.3];
        let mut texts = vec![format!("{text}{}output t6\n", lines.iter().map(|l| format!("  {l}\n")).collect::<String>())];
        texts.extend(lines.iter().map(|l| format!("{text}  {l}\noutput t6\n")));
        for text in texts {
            let p = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
            if let Err(e) = simulate(&p, &b) {
                prop_assert!(!e.to_string().contains('\n'), "{}", e);
            }
        }
    }
}
