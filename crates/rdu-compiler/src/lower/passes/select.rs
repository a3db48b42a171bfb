//! Kernel selection: every statement of the lifted program becomes one kernel op in a stage
//! of its own; every value becomes a tensor with its role and home. Fusion, tiling and
//! placement come later.

use crate::graph::{DType, Graph, Origin};
use crate::lang::ast::{self, DeclKind, Program};
use rdu_spatial::program::{
    Arg, Dtype, Home, KernelOp, Lit, Op, Role, Section, SpatialProgram, Stage, Storage, TensorDecl,
};
use std::collections::BTreeSet;

/// The program as one section of single-op stages.
pub fn select(name: &str, chip: &str, program: &Program, graph: &Graph) -> SpatialProgram {
    let outputs: BTreeSet<&str> = graph.outputs.iter().map(|o| o.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    let mut tensors = Vec::new();
    for value in &graph.values {
        if !seen.insert(value.name.clone()) {
            continue;
        }
        let dtype = match value.ty.dtype {
            DType::F32 => Dtype::F32,
            DType::I32 => Dtype::I32,
        };
        let (role, home) = match &value.origin {
            Origin::Decl(d) => match d.kind {
                DeclKind::Input if dtype == Dtype::I32 => (Role::Input, Home::Host),
                DeclKind::Input => (Role::Input, Home::Hbm),
                DeclKind::Weight => (Role::Weight, Home::Hbm),
                DeclKind::Shared => (Role::Shared, Home::Hbm),
                DeclKind::State => (Role::State, Home::Hbm),
            },
            Origin::Node { .. } if outputs.contains(value.name.as_str()) => (Role::Output, Home::Hbm),
            Origin::Node { .. } => (Role::Temp, Home::Sram),
        };
        // A state declared `bf16` is stored as bf16 (`storage=bf16`); the rest dense until `q8`.
        let storage = match &value.origin {
            Origin::Decl(d) if d.bf16 => Storage::Bf16,
            _ => Storage::Dense,
        };
        tensors.push(TensorDecl {
            name: value.name.clone(),
            dtype,
            shape: value.ty.shape.clone(),
            storage,
            role,
            home,
        });
    }
    // The lifted graph has one node per statement, in order: each node's op is its statement's.
    let stages = program
        .stmts()
        .zip(&graph.nodes)
        .enumerate()
        .map(|(i, (s, node))| Stage {
            name: format!("s{i}"),
            ops: vec![kernel_op(s, node.op.kind())],
            pcus: 1,
            pmus: 1,
            prefetch: false,
            region: None,
        })
        .collect();
    SpatialProgram {
        name: name.to_string(),
        chip: chip.to_string(),
        tensors,
        sections: vec![Section { stages }],
        outputs: graph.outputs.iter().map(|o| o.name.clone()).collect(),
        tp: None,
    }
}

fn kernel_op(s: &ast::Stmt, op: Op) -> KernelOp {
    debug_assert_eq!(op.name(), s.op.text);
    KernelOp {
        outs: s.binders.iter().map(|b| b.text.clone()).collect(),
        update: s.update,
        op,
        args: s
            .args
            .iter()
            .map(|a| match a {
                ast::Arg::Name(n) => Arg::Tensor(n.text.clone()),
                ast::Arg::Lit(l, _) => Arg::Lit(lit(l)),
            })
            .collect(),
        attrs: s.attrs.iter().map(|a| (a.key.text.clone(), lit(&a.value))).collect(),
        fold: None,
        tiling: None,
    }
}

fn lit(l: &ast::Literal) -> Lit {
    match l {
        ast::Literal::Int(v) => Lit::Int(*v),
        ast::Literal::Float(v) => Lit::Float(*v),
        ast::Literal::Word(w) => Lit::Word(w.clone()),
        ast::Literal::List(items) => Lit::List(items.iter().map(lit).collect()),
    }
}
