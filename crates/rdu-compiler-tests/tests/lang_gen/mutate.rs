//! Single-token mutations of a program (or of its Q8_0 set) that must change its digest.
use super::{bound_names, Program};
use rdu_compiler::lang::ast::{Arg, DType, Item, Literal};
use std::collections::BTreeSet;

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
                numbers +=
                    s.args.iter().map(|a| if let Arg::Lit(l, _) = a { count_numbers(l) } else { 0 }).sum::<usize>();
                numbers += s.attrs.iter().map(|a| count_numbers(&a.value)).sum::<usize>();
            }
            Item::Output(_) => {}
        }
    }
    out.extend((0..numbers).map(Mutation::Number));
    out.extend(bound_names(p).into_iter().filter(|n| !q8.contains(n)).map(Mutation::Q8Add));
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
        Mutation::Op(i) | Mutation::Key(i, _) | Mutation::DType(i) | Mutation::Dim(i, _) | Mutation::AddDim(i) => {
            match (&mut p.items[*i], m) {
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
                        DType::Q8 | DType::Bf16 => DType::F32,
                    }
                }
                (Item::Decl(d), Mutation::Dim(_, j)) => d.ty.shape[*j] += 1,
                (Item::Decl(d), Mutation::AddDim(_)) => d.ty.shape.push(1),
                _ => unreachable!("mutation {m:?} does not apply"),
            }
        }
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
