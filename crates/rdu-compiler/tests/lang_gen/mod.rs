//! proptest strategies for random well-formed programs, and the renamings and single-token
//! mutations that the digest properties apply to them.
use proptest::prelude::*;
use rdu_compiler::lang::ast::{Arg, Attr, DType, Decl, DeclKind, Item, Literal, Name, Program};
use rdu_compiler::lang::ast::{Stmt, TensorType};
use std::collections::{BTreeMap, BTreeSet};

const OPS: &[&str] = &[
    "add",
    "linear",
    "rms_norm",
    "rope",
    "cache_put",
    "attend",
    "delta_step",
];
const KEYWORDS: &[&str] = &[
    "input", "weight", "shared", "state", "output", "f32", "i32", "q8",
];

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
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Literal::List)
    })
}

/// A positional literal: a bare word there is a name (`Arg::Name`), so only numbers and lists.
fn positional_literal() -> impl Strategy<Value = Literal> {
    literal().prop_filter("a positional word is a name", |l| {
        !matches!(l, Literal::Word(_))
    })
}

fn decl() -> impl Strategy<Value = Decl> {
    let kind = prop::sample::select(
        &[
            DeclKind::Input,
            DeclKind::Weight,
            DeclKind::Shared,
            DeclKind::State,
        ][..],
    );
    let dtype = prop::sample::select(&[DType::F32, DType::I32, DType::Q8][..]);
    let shape = prop::collection::vec(0usize..5000, 0..4);
    (
        kind,
        name(),
        dtype,
        shape,
        prop::option::weighted(0.3, literal()),
    )
        .prop_map(|(kind, name, dtype, shape, init)| {
            let init = init.filter(|_| kind == DeclKind::Input);
            Decl {
                kind,
                name: Name::new(name),
                ty: TensorType { dtype, shape },
                init,
                span: Default::default(),
            }
        })
}

fn stmt() -> impl Strategy<Value = Stmt> {
    let op = prop_oneof![prop::sample::select(OPS).prop_map(str::to_string), word()];
    let arg = prop_oneof![3 => name().prop_map(|n| Arg::Name(Name::new(n))), 1 => positional_literal().prop_map(|l| Arg::Lit(l, Default::default()))];
    let args = prop::collection::vec(arg, 0..5);
    let attrs = prop::collection::btree_map(word(), literal(), 0..4);
    (
        prop::collection::vec(name(), 1..4),
        any::<bool>(),
        op,
        args,
        attrs,
    )
        .prop_map(|(binders, update, op, args, attrs)| {
            let attrs = attrs
                .into_iter()
                .map(|(k, v)| Attr {
                    key: Name::new(k),
                    value: v,
                    span: Default::default(),
                })
                .collect();
            let binders = binders.into_iter().map(Name::new).collect();
            Stmt {
                binders,
                update,
                op: Name::new(op),
                args,
                attrs,
                span: Default::default(),
            }
        })
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
pub fn program_q8_renaming(
) -> impl Strategy<Value = (Program, BTreeSet<String>, BTreeMap<String, String>)> {
    (program(), prop::collection::vec(name(), 0..8)).prop_flat_map(|(p, fresh)| {
        let bound = bound_names(&p);
        let unbound: BTreeSet<String> = name_position_texts(&p)
            .into_iter()
            .filter(|n| !bound.contains(n))
            .collect();
        let mut pool: Vec<String> = bound.clone();
        pool.extend(
            fresh
                .into_iter()
                .filter(|n| !unbound.contains(n) && !bound.contains(n)),
        );
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
pub fn rename(
    p: &Program,
    q8: &BTreeSet<String>,
    map: &BTreeMap<String, String>,
) -> (Program, BTreeSet<String>) {
    let mut p = p.clone();
    for_each_name(&mut p, &mut |n| {
        if let Some(to) = map.get(&n.text) {
            n.text = to.clone();
        }
    });
    let q8 = q8.iter().map(|n| map.get(n).unwrap_or(n).clone()).collect();
    (p, q8)
}

/// One change of one non-name token (or of the Q8_0 set).
#[derive(Clone, Debug)]
pub enum Mutation {
    Op(usize),
    Number(usize),
    Key(usize, usize),
    DType(usize),
    Dim(usize, usize),
    AddDim(usize),
    Q8Add(String),
    Q8Remove(String),
}

/// Every mutation that applies to the program (never empty: a Q8_0 member can always be added).
pub fn mutations(p: &Program, q8: &BTreeSet<String>) -> Vec<Mutation> {
    let mut out = vec![Mutation::Q8Add("zz_unbound".to_string())];
    let mut numbers = 0;
    for (i, item) in p.items.iter().enumerate() {
        match item {
            Item::Decl(d) => {
                out.push(Mutation::DType(i));
                out.push(Mutation::AddDim(i));
                out.extend((0..d.ty.shape.len()).map(|j| Mutation::Dim(i, j)));
                numbers += d.init.as_ref().map_or(0, count_numbers);
            }
            Item::Stmt(s) => {
                out.push(Mutation::Op(i));
                out.extend((0..s.attrs.len()).map(|j| Mutation::Key(i, j)));
                numbers += s
                    .args
                    .iter()
                    .map(|a| {
                        if let Arg::Lit(l, _) = a {
                            count_numbers(l)
                        } else {
                            0
                        }
                    })
                    .sum::<usize>();
                numbers += s
                    .attrs
                    .iter()
                    .map(|a| count_numbers(&a.value))
                    .sum::<usize>();
            }
            Item::Output(_) => {}
        }
    }
    out.extend((0..numbers).map(Mutation::Number));
    out.extend(
        bound_names(p)
            .into_iter()
            .filter(|n| !q8.contains(n))
            .map(Mutation::Q8Add),
    );
    out.extend(q8.iter().cloned().map(Mutation::Q8Remove));
    out
}

/// Applies a mutation from [`mutations`].
pub fn mutate(p: &mut Program, q8: &mut BTreeSet<String>, m: &Mutation) {
    match m {
        Mutation::Q8Add(n) => assert!(q8.insert(n.clone())),
        Mutation::Q8Remove(n) => assert!(q8.remove(n)),
        Mutation::Number(k) => {
            let mut left = *k;
            for_each_literal(p, &mut |l| bump_number(l, &mut left));
        }
        Mutation::Op(i)
        | Mutation::Key(i, _)
        | Mutation::DType(i)
        | Mutation::Dim(i, _)
        | Mutation::AddDim(i) => match (&mut p.items[*i], m) {
            (Item::Stmt(s), Mutation::Op(_)) => s.op.text.push('z'),
            (Item::Stmt(s), Mutation::Key(_, j)) => {
                let mut key = s.attrs[*j].key.text.clone();
                while s.attrs.iter().any(|a| a.key.text == key) {
                    key.push('z');
                }
                s.attrs[*j].key.text = key;
            }
            (Item::Decl(d), Mutation::DType(_)) => {
                d.ty.dtype = match d.ty.dtype {
                    DType::F32 => DType::I32,
                    DType::I32 => DType::Q8,
                    DType::Q8 => DType::F32,
                }
            }
            (Item::Decl(d), Mutation::Dim(_, j)) => d.ty.shape[*j] += 1,
            (Item::Decl(d), Mutation::AddDim(_)) => d.ty.shape.push(1),
            _ => unreachable!("mutation {m:?} does not apply"),
        },
    }
}

fn count_numbers(l: &Literal) -> usize {
    match l {
        Literal::Int(_) | Literal::Float(_) => 1,
        Literal::Word(_) => 0,
        Literal::List(items) => items.iter().map(count_numbers).sum(),
    }
}

fn for_each_literal(p: &mut Program, f: &mut impl FnMut(&mut Literal)) {
    for item in &mut p.items {
        match item {
            Item::Decl(d) => d.init.iter_mut().for_each(&mut *f),
            Item::Stmt(s) => {
                for a in &mut s.args {
                    if let Arg::Lit(l, _) = a {
                        f(l)
                    }
                }
                s.attrs.iter_mut().for_each(|a| f(&mut a.value));
            }
            Item::Output(_) => {}
        }
    }
}

/// Changes the `left`-th number (counting down) to a different finite number.
fn bump_number(l: &mut Literal, left: &mut usize) {
    match l {
        Literal::Int(_) | Literal::Float(_) if *left > 0 => *left -= 1,
        Literal::Int(v) => {
            *v = v.wrapping_add(1);
            *left = usize::MAX;
        }
        Literal::Float(v) => {
            *v = if v.abs() < 1e15 { *v + 1.0 } else { *v / 2.0 };
            *left = usize::MAX;
        }
        Literal::Word(_) => {}
        Literal::List(items) => items.iter_mut().for_each(|i| bump_number(i, left)),
    }
}
