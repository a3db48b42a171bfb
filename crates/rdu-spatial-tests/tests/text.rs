//! The text and JSON forms: a golden file, round trips of random programs, and a parser that
//! never panics on garbage.

use proptest::prelude::*;
use rdu_spatial::text::{from_json, parse, print, to_json};
use rdu_spatial::{
    Arg, Dtype, Fold, Home, KernelOp, Lit, Op, Role, Section, SpatialProgram, Stage, Storage, TensorDecl, TextError,
    Tiling, TpInfo, TpSplit,
};

const GOLDEN: &str = include_str!("data/attention_dense.spatial");

#[test]
fn the_golden_program_prints_back_identically() {
    let p = parse(GOLDEN).unwrap();
    assert_eq!(print(&p), GOLDEN);
    assert_eq!(p.sections.len(), 2);
    let q1 = &p.sections[0].stages[0].ops[1];
    assert_eq!(q1.fold, Some(Fold::Q8));
    assert_eq!(q1.tiling, Some(Tiling { axis: 1, tiles: vec![(0, 32), (32, 64)] }));
    assert_eq!(q1.args, [Arg::Tensor("h1".into()), Arg::Tensor("Wq1".into())]);
    assert_eq!(p.sections[0].stages[0].ops[0].attr("eps"), Some(&Lit::Float(1e-6)));
    assert!(p.sections[0].stages[1].ops[5].update);
    assert_eq!(p.decl("Wq1").map(|d| d.storage), Some(Storage::Q8_0));
    assert_eq!(from_json(&to_json(&p)).unwrap(), p);
}

#[test]
fn parse_errors_name_their_line() {
    let cases = [
        ("tensor x : f32[1] role=input home=hbm\n", 1, "expected `program"),
        ("program p chip=sn50\ntensor x : f64[1] role=input home=hbm\n", 2, "unknown dtype `f64`"),
        ("program p chip=sn50\nsection 1\n", 2, "expected `section 0`"),
        ("program p chip=sn50\n  y = add(x, x)\n", 2, "op line outside a stage"),
        (
            "program p chip=sn50\nsection 0\nstage s pcus=1 pmus=1\n  y = add(x, k=1, z)\n",
            4,
            "positional argument after",
        ),
        ("program p chip=sn50\nsection 0\nstage s pcus=1 pmus=1\n  y = add(x) tile(axis=0, [0..])\n", 4, "range end"),
        ("program p chip=sn50\nsplit W axis=0 [0..1]\n", 2, "before `tp chips=N`"),
        ("program p chip=sn50\nsection 0\nstage s pcus=1 pmus=1\n  y = f(\"a)\n", 4, "unterminated string"),
        ("program p chip=sn50\noutput y\nsection 0\n", 3, "out of place"),
        ("program p chip=sn50\nsection 0\nstage s pcus=1 pmus=1\n  y = matmul(x, x)\n", 4, "unknown op `matmul`"),
        ("program p chip=sn50\ntensor x : f32[99999999999999999999] role=temp home=sram\n", 2, "out of range"),
    ];
    for (text, line, needle) in cases {
        match parse(text) {
            Err(TextError::Syntax { line: l, message }) => {
                assert_eq!(l, line, "{text:?}: {message}");
                assert!(message.contains(needle), "{text:?}: {message}");
            }
            other => panic!("{text:?} gave {other:?}"),
        }
    }
}

#[test]
fn words_and_odd_literals_round_trip() {
    let text = "program p chip=sn50\nsection 0\nstage s pcus=1 pmus=1\n  \
                y, S <- route(x, \"word\", [1, -2.5, [neox, \"a b\"]], -3, 1e300, a=inf, b=\"inf\", c=\"q\\\"\\n\", d=[], e=-0.0)\n";
    let p = parse(text).unwrap();
    let op = &p.sections[0].stages[0].ops[0];
    assert_eq!(op.args[1], Arg::Lit(Lit::Word("word".into())));
    assert_eq!(op.attr("a"), Some(&Lit::Float(f64::INFINITY)));
    assert_eq!(op.attr("b"), Some(&Lit::Word("inf".into())));
    assert_eq!(op.attr("c"), Some(&Lit::Word("q\"\n".into())));
    assert_eq!(parse(&print(&p)).unwrap(), p);
    assert_eq!(print(&parse(&print(&p)).unwrap()), print(&p));
}

fn ident() -> impl Strategy<Value = String> {
    "[A-Za-z_][A-Za-z0-9_]{0,6}".prop_filter("float spellings are not names", |s| s != "inf" && s != "nan")
}

fn lit() -> impl Strategy<Value = Lit> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Lit::Int),
        // Finite floats: JSON has no infinities (the text form's `inf` is tested above).
        (prop::num::f64::NORMAL | prop::num::f64::SUBNORMAL | prop::num::f64::ZERO).prop_map(Lit::Float),
        any::<String>().prop_map(Lit::Word),
        ident().prop_map(Lit::Word),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| prop::collection::vec(inner, 0..4).prop_map(Lit::List))
}

fn ranges() -> impl Strategy<Value = Vec<(usize, usize)>> {
    prop::collection::vec((0usize..1 << 40, 0usize..1 << 40), 0..4)
}

fn op() -> impl Strategy<Value = KernelOp> {
    let arg = prop_oneof![ident().prop_map(Arg::Tensor), lit().prop_map(Arg::Lit)];
    (
        prop::collection::vec(ident(), 1..3),
        any::<bool>(),
        prop::sample::select(Op::ALL.to_vec()),
        prop::collection::vec(arg, 0..4),
        prop::collection::vec((ident(), lit()), 0..3),
        prop::option::of(prop::sample::select(Fold::ALL.to_vec())),
        prop::option::of((0usize..8, ranges()).prop_map(|(axis, tiles)| Tiling { axis, tiles })),
    )
        .prop_map(|(outs, update, op, args, attrs, fold, tiling)| KernelOp {
            outs,
            update,
            op,
            args,
            attrs,
            fold,
            tiling,
        })
}

fn decl() -> impl Strategy<Value = TensorDecl> {
    let dtype = prop_oneof![Just(Dtype::F32), Just(Dtype::I32)];
    let fp8 = (1u32..1000, 1u32..1000).prop_map(|(rows, cols)| Storage::Fp8 { rows, cols });
    let storage =
        prop_oneof![Just(Storage::Dense), Just(Storage::Q8_0), Just(Storage::Bf16), Just(Storage::Mxfp4), fp8];
    let role =
        prop::sample::select(vec![Role::Input, Role::Weight, Role::Shared, Role::State, Role::Output, Role::Temp]);
    let home = prop::sample::select(vec![Home::Hbm, Home::Ddr, Home::Sram, Home::Host]);
    (ident(), dtype, prop::collection::vec(0usize..100_000, 0..4), storage, role, home)
        .prop_map(|(name, dtype, shape, storage, role, home)| TensorDecl { name, dtype, shape, storage, role, home })
}

fn program() -> impl Strategy<Value = SpatialProgram> {
    let stage = (ident(), prop::collection::vec(op(), 0..4), any::<u32>(), any::<u32>(), any::<bool>())
        .prop_map(|(name, ops, pcus, pmus, prefetch)| Stage { name, ops, pcus, pmus, prefetch, region: None });
    let section = prop::collection::vec(stage, 0..3).prop_map(|stages| Section { stages });
    let stored = prop::option::of(1usize..100_000);
    let split = (ident(), 0usize..4, prop::collection::vec(ranges(), 0..4), stored)
        .prop_map(|(tensor, axis, parts, stored)| TpSplit { tensor, axis, parts, stored });
    let tp = (any::<u32>(), prop::collection::vec(split, 0..3), prop::collection::vec(ident(), 0..3))
        .prop_map(|(chips, splits, all_reduce)| TpInfo { chips, splits, all_reduce });
    (
        ident(),
        ident(),
        prop::collection::vec(decl(), 0..5),
        prop::collection::vec(section, 0..3),
        prop::collection::vec(ident(), 0..3),
        prop::option::of(tp),
    )
        .prop_map(|(name, chip, tensors, sections, outputs, tp)| SpatialProgram {
            name,
            chip,
            tensors,
            sections,
            outputs,
            tp,
        })
}

proptest! {
    #[test]
    fn random_programs_round_trip_through_text_and_json(p in program()) {
        let text = print(&p);
        let back = parse(&text).map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(&back, &p);
        prop_assert_eq!(print(&back), text);
        let json = to_json(&p);
        prop_assert_eq!(from_json(&json).unwrap(), p);
    }

    #[test]
    fn the_parser_never_panics_on_garbage(text in any::<String>()) {
        let _ = parse(&text);
    }

    #[test]
    fn the_parser_never_panics_on_mangled_programs(p in program(), cut in any::<prop::sample::Index>(), junk in "[ -~\n]{0,8}") {
        let mut text = print(&p);
        let mut at = cut.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.insert_str(at, &junk);
        let _ = parse(&text);
        if let Ok(q) = parse(&text) {
            prop_assert_eq!(parse(&print(&q)).unwrap(), q);
        }
    }
}

#[test]
fn the_documented_example_parses_and_prints_back() {
    let doc = include_str!("../../../docs/SPATIAL.md");
    let example = doc.split("```").nth(1).expect("an example block").trim_start_matches('\n');
    let p = parse(example).unwrap();
    assert_eq!(print(&p), example);
    assert_eq!(p.sections[0].stages[0].ops.len(), 2);
}
