//! Properties of lift (and of the interpreter behind it): on random well-formed but mostly
//! wrong programs — random ops over random operands and attributes, and random mutations of
//! the worked example — lift never panics, every refusal is well formed, every lifted
//! graph verifies, and evaluating it never panics.

use proptest::prelude::*;
use rdu_compiler::front::lift;
use rdu_compiler::graph::{eval, DType, Graph, Tensor};
use rdu_compiler::lang::ast::{self, Arg, Attr, Decl, DeclKind, Item, Literal, Name, Program, Span, Stmt, TensorType};
use rdu_compiler::lang::parse;
use std::collections::BTreeMap;

/// Every op of the language, and one it does not have.
fn ops() -> Vec<&'static str> {
    rdu_spatial::Op::language().map(rdu_spatial::Op::name).chain(["matmul"]).collect()
}
const KEYS: &[&str] = &[
    "by",
    "eps",
    "offset",
    "axis",
    "start",
    "len",
    "perm",
    "dim",
    "style",
    "scale",
    "window",
    "latent",
    "kmap",
    "k",
    "norm",
    "groups",
    "topk_groups",
    "act",
    "bogus",
];
const NAMES: &[&str] = &["a", "b", "c", "x", "y", "S", "T", "W", "pos", "q"];
const WORDS: &[&str] = &["neox", "interleaved", "silu", "gelu_tanh", "grouped", "tiled", "x"];

fn name() -> impl Strategy<Value = Name> {
    prop::sample::select(NAMES).prop_map(Name::new)
}

fn literal() -> impl Strategy<Value = Literal> {
    let leaf = prop_oneof![
        4 => (-2i64..7).prop_map(Literal::Int),
        1 => prop::sample::select(&[0.0, 1.0, 1e-6, 0.25, -3.5][..]).prop_map(Literal::Float),
        1 => prop::sample::select(WORDS).prop_map(|w| Literal::Word(w.to_string())),
    ];
    prop_oneof![3 => leaf, 1 => prop::collection::vec(0i64..5, 0..4).prop_map(|v| Literal::List(v.into_iter().map(Literal::Int).collect()))]
}

fn decl() -> impl Strategy<Value = Decl> {
    let kind = prop::sample::select(&[DeclKind::Input, DeclKind::Weight, DeclKind::Shared, DeclKind::State][..]);
    let dtype = prop::sample::select(&[ast::DType::F32, ast::DType::F32, ast::DType::I32, ast::DType::Q8][..]);
    (kind, name(), dtype, prop::collection::vec(0usize..5, 0..4)).prop_map(|(kind, name, dtype, shape)| Decl {
        kind,
        name,
        ty: TensorType { dtype, shape },
        init: None,
        span: Span::default(),
    })
}

fn stmt() -> impl Strategy<Value = Stmt> {
    let arg = prop_oneof![4 => name().prop_map(Arg::Name), 1 => literal().prop_map(|l| Arg::Lit(l, Span::default()))];
    let attr = (prop::sample::select(KEYS), literal()).prop_map(|(k, value)| Attr {
        key: Name::new(k),
        value,
        span: Span::default(),
    });
    (
        prop::collection::vec(name(), 1..4),
        prop::bool::weighted(0.25),
        prop::sample::select(ops()),
        prop::collection::vec(arg, 0..7),
        prop::collection::vec(attr, 0..5),
    )
        .prop_map(|(binders, update, op, args, attrs)| Stmt {
            binders,
            update,
            op: Name::new(op),
            args,
            attrs,
            span: Span::default(),
        })
}

fn program() -> impl Strategy<Value = Program> {
    (prop::collection::vec(decl(), 0..7), prop::collection::vec(stmt(), 0..10), prop::collection::vec(name(), 0..3))
        .prop_map(|(decls, stmts, outputs)| {
            let mut items: Vec<Item> = decls.into_iter().map(Item::Decl).collect();
            items.extend(stmts.into_iter().map(Item::Stmt));
            items.extend(outputs.into_iter().map(Item::Output));
            Program { items }
        })
}

/// Small deterministic values for every declaration: ids and positions 0 or 1.
fn bindings(g: &Graph) -> BTreeMap<String, Tensor> {
    g.declared()
        .map(|(id, v, _)| {
            let t = match v.ty.dtype {
                DType::F32 => Tensor::from_fn(&v.ty.shape, |i| ((i + id.index()) % 7) as f32 * 0.1 - 0.3),
                DType::I32 => {
                    let n = v.ty.shape.iter().product();
                    Tensor::i32(v.ty.shape.clone(), (0..n).map(|i| (i % 2) as i32).collect())
                }
            };
            (v.name.clone(), t)
        })
        .collect()
}

/// Lift, then check the refusal's shape or the graph's verification and evaluation.
fn check(program: &Program) -> Result<(), TestCaseError> {
    let n_stmts = program.stmts().count();
    match lift(program) {
        Ok(g) => {
            prop_assert_eq!(g.verify(), Ok(()));
            if let Err(e) = eval(&g, &bindings(&g)) {
                prop_assert!(!e.message.contains("internal") && !e.message.contains("malformed"), "{}", e);
            }
        }
        Err(r) => {
            prop_assert!(!r.diagnostics.is_empty());
            let stmts: Vec<&Stmt> = program.stmts().collect();
            for d in &r.diagnostics {
                prop_assert!(d.code.starts_with("E02"), "code {}", d.code);
                prop_assert!(d.binder.is_some(), "{}", d);
                if let Some(i) = d.index {
                    prop_assert!(i < n_stmts);
                    prop_assert_eq!(d.binder.as_deref(), Some(stmts[i].binders[0].text.as_str()));
                }
            }
        }
    }
    Ok(())
}

const EXAMPLE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/data/example.rdu"));

/// One edit to a parsed program: `pick` chooses the statement, `what` the kind of edit.
fn mutate(mut p: Program, pick: usize, what: u8, name: &str, lit: Literal) -> Program {
    let stmt_items: Vec<usize> =
        p.items.iter().enumerate().filter(|(_, it)| matches!(it, Item::Stmt(_))).map(|(i, _)| i).collect();
    let at = stmt_items[pick % stmt_items.len()];
    match &mut p.items[at] {
        Item::Stmt(s) => match what % 6 {
            0 => s.op = Name::new(ops()[pick % ops().len()]),
            1 if !s.args.is_empty() => {
                let k = pick % s.args.len();
                s.args[k] = Arg::Name(Name::new(name));
            }
            2 if !s.attrs.is_empty() => {
                let k = pick % s.attrs.len();
                s.attrs[k].value = lit;
            }
            3 => s.binders[0] = Name::new(name),
            4 => s.update = !s.update,
            _ => {
                p.items.remove(at);
            }
        },
        _ => unreachable!("a statement"),
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn lift_never_panics_on_random_programs(p in program()) {
        check(&p)?;
    }

    #[test]
    fn lift_never_panics_on_mutations_of_the_example(
        edits in prop::collection::vec((any::<usize>(), any::<u8>(), prop::sample::select(NAMES), literal()), 1..4)
    ) {
        let mut p = parse(EXAMPLE).expect("the example parses");
        for (pick, what, name, lit) in edits {
            p = mutate(p, pick, what, name, lit);
        }
        check(&p)?;
    }
}
