//! `from_q8`: a product over a weight stored Q8_0 folds its int8 values and block scales on
//! the chip; any other read of such a weight (a view: reshape, slice, transpose) goes through
//! an explicit `dequant`. Weights not stored Q8_0 are read dense and left alone.

use rdu_spatial::program::{Arg, KernelOp, Op, Role, SpatialProgram, Storage, TensorDecl};
use std::collections::BTreeSet;

/// Marks every weight in `stored_q8` as Q8_0 and every product over one as folding.
pub fn from_q8(program: &mut SpatialProgram, stored_q8: &BTreeSet<String>) {
    for t in &mut program.tensors {
        if t.role == Role::Weight && stored_q8.contains(&t.name) {
            t.storage = Storage::Q8_0;
        }
    }
    let q8: BTreeSet<String> =
        program.tensors.iter().filter(|t| t.storage == Storage::Q8_0).map(|t| t.name.clone()).collect();
    let mut dequantised: Vec<TensorDecl> = Vec::new();
    for section in &mut program.sections {
        for stage in &mut section.stages {
            let mut ops = Vec::with_capacity(stage.ops.len());
            for mut op in std::mem::take(&mut stage.ops) {
                let reads_q8 = op.args.iter().any(|a| matches!(a, Arg::Tensor(n) if q8.contains(n)));
                if reads_q8 && op.op.folds_q8() {
                    op.fold_q8 = true;
                } else if reads_q8 {
                    for arg in &mut op.args {
                        let Arg::Tensor(name) = arg else { continue };
                        if !q8.contains(name) {
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
                                fold_q8: false,
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
