//! proptest strategies for random well-formed programs, and the renamings and single-token
//! mutations that the digest properties apply to them.
use proptest::prelude::*;
use rdu_compiler::lang::ast::{Arg, Attr, DType, Decl, DeclKind, Item, Literal, Name, Program};
use rdu_compiler::lang::ast::{Stmt, TensorType};
use std::collections::{BTreeMap, BTreeSet};

mod mutate;
pub use mutate::{mutate, mutations};

const OPS: &[&str] = &["add", "linear", "rms_norm", "rope", "cache_put", "attend", "delta_step"];
const KEYWORDS: &[&str] = &["input", "weight", "shared", "state", "output", "f32", "i32", "q8"];

/// A name obeying the naming rule (a base that does not end in a digit, then a layer
/// suffix), now and then a keyword or dtype, which are names outside their own positions.
pub fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => "[A-Za-z_][A-Za-z_]{0,5}[0-9]{1,2}",
        1 => prop::sample::select(KEYWORDS).prop_map(str::to_string),
    ]
}

fn word() -> impl Strategy<Value = String> {
    "[a-z_][a-z0-9_]{0,6}"
}

fn float() -> impl Strategy<Value = f64> {
    use prop::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL, ZERO};
    prop_oneof![
        (NORMAL | SUBNORMAL | ZERO | POSITIVE | NEGATIVE).prop_filter("finite", |v| v.is_finite()),
        prop::sample::select(&[1e-6, 1e-5, 0.25, 8.0, 0.5, -0.0, 1e300][..]),
    ]
}

pub fn literal() -> impl Strategy<Value = Literal> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Literal::Int),
        float().prop_map(Literal::Float),
        word().prop_map(Literal::Word),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| prop::collection::vec(inner, 0..4).prop_map(Literal::List))
}

/// A positional literal: a bare word there is a name (`Arg::Name`), so only numbers and lists.
fn positional_literal() -> impl Strategy<Value = Literal> {
    literal().prop_filter("a positional word is a name", |l| !matches!(l, Literal::Word(_)))
}

fn decl() -> impl Strategy<Value = Decl> {
    let kind = prop::sample::select(&[DeclKind::Input, DeclKind::Weight, DeclKind::Shared, DeclKind::State][..]);
    let dtype = prop::sample::select(&[DType::F32, DType::I32, DType::Q8][..]);
    let shape = prop::collection::vec(0usize..5000, 0..4);
    (kind, name(), dtype, shape, prop::option::weighted(0.3, literal())).prop_map(|(kind, name, dtype, shape, init)| {
        let init = init.filter(|_| kind == DeclKind::Input);
        Decl { kind, name: Name::new(name), ty: TensorType { dtype, shape }, init, span: Default::default() }
    })
}

fn stmt() -> impl Strategy<Value = Stmt> {
    let op = prop_oneof![prop::sample::select(OPS).prop_map(str::to_string), word()];
    let arg = prop_oneof![3 => name().prop_map(|n| Arg::Name(Name::new(n))), 1 => positional_literal().prop_map(|l| Arg::Lit(l, Default::default()))];
    let args = prop::collection::vec(arg, 0..5);
    let attrs = prop::collection::btree_map(word(), literal(), 0..4);
    (prop::collection::vec(name(), 1..4), any::<bool>(), op, args, attrs).prop_map(
        |(binders, update, op, args, attrs)| {
            let attrs = attrs
                .into_iter()
                .map(|(k, v)| Attr { key: Name::new(k), value: v, span: Default::default() })
                .collect();
            let binders = binders.into_iter().map(Name::new).collect();
            Stmt { binders, update, op: Name::new(op), args, attrs, span: Default::default() }
        },
    )
}

/// A random program: names need not be declared, nor used consistently.
pub fn program() -> impl Strategy<Value = Program> {
    let item = prop_oneof![
        3 => decl().prop_map(Item::Decl),
        4 => stmt().prop_map(Item::Stmt),
        1 => name().prop_map(|n| Item::Output(Name::new(n))),
    ];
    prop::collection::vec(item, 0..16).prop_map(|items| Program { items })
}

/// Bound names (declared input/weight/state, or binders), in first-occurrence order.
pub fn bound_names(p: &Program) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut push = |n: &Name| {
        if !out.contains(&n.text) {
            out.push(n.text.clone());
        }
    };
    for item in &p.items {
        match item {
            Item::Decl(d) if d.kind != DeclKind::Shared => push(&d.name),
            Item::Stmt(s) => s.binders.iter().for_each(&mut push),
            _ => {}
        }
    }
    out
}

/// Every text in a name position (declared names, binders, positional names, outputs).
pub fn name_position_texts(p: &Program) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for_each_name(&mut p.clone(), &mut |n| {
        out.insert(n.text.clone());
    });
    out
}

/// Applies `f` to every name in a name position.
pub fn for_each_name(p: &mut Program, f: &mut impl FnMut(&mut Name)) {
    for item in &mut p.items {
        match item {
            Item::Decl(d) => f(&mut d.name),
            Item::Output(n) => f(n),
            Item::Stmt(s) => {
                s.binders.iter_mut().for_each(&mut *f);
                s.args.iter_mut().for_each(|a| {
                    if let Arg::Name(n) = a {
                        f(n)
                    }
                });
            }
        }
    }
}

/// A program, a Q8_0 set drawn from its bound names, and a bijective renaming of its bound
/// names onto names that collide with no unbound name in a name position (such a collision
/// would make the unbound name bound, which is a different program).
pub fn program_q8_renaming() -> impl Strategy<Value = (Program, BTreeSet<String>, BTreeMap<String, String>)> {
    (program(), prop::collection::vec(name(), 0..8)).prop_flat_map(|(p, fresh)| {
        let bound = bound_names(&p);
        let unbound: BTreeSet<String> = name_position_texts(&p).into_iter().filter(|n| !bound.contains(n)).collect();
        let mut pool: Vec<String> = bound.clone();
        pool.extend(fresh.into_iter().filter(|n| !unbound.contains(n) && !bound.contains(n)));
        pool.sort();
        pool.dedup();
        let q8 = prop::sample::subsequence(bound.clone(), 0..=bound.len());
        (Just(p), q8, Just(pool).prop_shuffle()).prop_map(move |(p, q8, images)| {
            let map = bound.iter().cloned().zip(images).collect();
            (p, q8.into_iter().collect(), map)
        })
    })
}

/// Renames the bound names of a program and its Q8_0 set by `map`.
pub fn rename(p: &Program, q8: &BTreeSet<String>, map: &BTreeMap<String, String>) -> (Program, BTreeSet<String>) {
    let mut p = p.clone();
    for_each_name(&mut p, &mut |n| {
        if let Some(to) = map.get(&n.text) {
            n.text = to.clone();
        }
    });
    let q8 = q8.iter().map(|n| map.get(n).unwrap_or(n).clone()).collect();
    (p, q8)
}
