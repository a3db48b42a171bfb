//! `from_stored`: a product over a weight stored in a block format (Q8_0, FP8, MXFP4) folds
//! its values and block scales on the chip (`fold=q8`, `fold=fp8`, `fold=mxfp4`); any other
//! read of such a weight (a view: reshape, slice, transpose) goes through an explicit
//! `dequant`. Weights not in the storage set are read dense and left alone.

use rdu_spatial::program::{Arg, KernelOp, Op, Role, SpatialProgram, Storage, TensorDecl};
use std::collections::BTreeMap;

/// Gives every weight of `stored` its block format and marks every product over one as
/// folding it.
pub fn from_stored(program: &mut SpatialProgram, stored: &BTreeMap<String, Storage>) {
    for t in &mut program.tensors {
        if let (Role::Weight, Some(&storage)) = (t.role, stored.get(&t.name)) {
            t.storage = storage;
        }
    }
    let folds: BTreeMap<String, Storage> =
        program.tensors.iter().filter(|t| t.storage.is_blocks()).map(|t| (t.name.clone(), t.storage)).collect();
    let mut dequantised: Vec<TensorDecl> = Vec::new();
    for section in &mut program.sections {
        for stage in &mut section.stages {
            let mut ops = Vec::with_capacity(stage.ops.len());
            for mut op in std::mem::take(&mut stage.ops) {
                let read = op.args.iter().find_map(|a| match a {
                    Arg::Tensor(n) => folds.get(n),
                    Arg::Lit(_) => None,
                });
                if let (Some(storage), true) = (read, op.op.folds_q8()) {
                    op.fold = storage.fold();
                } else if read.is_some() {
                    for arg in &mut op.args {
                        let Arg::Tensor(name) = arg else { continue };
                        if !folds.contains_key(name) {
                            continue;
                        }
                        let dense = format!("{name}_dq");
                        if !dequantised.iter().any(|t| t.name == dense) {
                            let decl = program.tensors.iter().find(|t| &t.name == name).expect("declared weight");
                            dequantised.push(TensorDecl {
                                name: dense.clone(),
                                storage: Storage::Dense,
                                role: Role::Temp,
                                home: rdu_spatial::program::Home::Sram,
                                ..decl.clone()
                            });
                            ops.push(KernelOp {
                                outs: vec![dense.clone()],
                                update: false,
                                op: Op::Dequant,
                                args: vec![Arg::Tensor(name.clone())],
                                attrs: Vec::new(),
                                fold: None,
                                tiling: None,
                            });
                        }
                        *name = dense;
                    }
                }
                ops.push(op);
            }
            stage.ops = ops;
        }
    }
    program.tensors.extend(dequantised);
}
