//! Declarations: each becomes a declared value of the graph. Faults: a name declared twice
//! (E0213), `q8` on anything but a weight or `bf16` on anything but a state (E0204), a seed
//! that does not fit (E0207), a shape whose element count overflows 64 bits (E0203).

use super::codes;
use super::lift::{Bound, Ctx, DeclUse};
use crate::graph::{numel, DType, Declaration, Tensor, Type};
use crate::lang::ast::{self, Decl, DeclKind, Literal, Program};

impl Ctx {
    pub(super) fn declare_all(&mut self, program: &Program) {
        for decl in program.decls() {
            self.declare(decl);
        }
    }

    fn declare(&mut self, decl: &Decl) {
        let name = &decl.name.text;
        if let Some(first) = self.decls.get(name) {
            let message = format!("`{name}` is declared twice; remove one declaration or rename it");
            let first = first.span;
            self.composition_fault(codes::DUPLICATE_DECL, message, decl.name.span, name);
            if let Some(d) = self.diags.last_mut() {
                d.labels.push((first, "first declared here".to_string()));
            }
            return;
        }
        let dtype = match decl.ty.dtype {
            ast::DType::I32 => DType::I32,
            ast::DType::F32 | ast::DType::Q8 | ast::DType::Bf16 => DType::F32,
        };
        let q8 = decl.ty.dtype == ast::DType::Q8;
        if q8 && decl.kind != DeclKind::Weight {
            let message = format!("only weights may be `q8`; declare {} `{name}` as f32", decl.kind.keyword());
            self.composition_fault(codes::DTYPE, message, decl.span, name);
        }
        let bf16 = decl.ty.dtype == ast::DType::Bf16;
        if bf16 && decl.kind != DeclKind::State {
            let message = format!("only states may be `bf16`; declare {} `{name}` as f32", decl.kind.keyword());
            self.composition_fault(codes::DTYPE, message, decl.span, name);
        }
        let ty = Type { dtype, shape: decl.ty.shape.clone() };
        let overflows = checked_numel(&ty.shape).is_none();
        if overflows {
            let message = format!(
                "`{name}` declares {} elements, more than a 64-bit count holds; declare a smaller shape",
                shape_product(&ty.shape)
            );
            self.composition_fault(codes::SHAPE, message, decl.span, name);
        }
        let seed = decl.init.as_ref().filter(|_| !overflows).and_then(|lit| self.seed(decl, &ty, lit));
        let declaration = Declaration { kind: decl.kind, q8, bf16, seed, span: decl.span };
        let value = self.graph.declare(name, ty, declaration);
        self.scope.insert(name.clone(), Bound::Value(value));
        if overflows {
            // Refused above; statements reading it are not lifted (no faults of their own).
            self.scope.insert(name.clone(), Bound::Poisoned);
        }
        let span = decl.name.span;
        self.decls.insert(name.clone(), DeclUse { value, kind: decl.kind, span, read: false, written: false });
    }

    /// The seed of an input as a tensor of its type, or a fault.
    fn seed(&mut self, decl: &Decl, ty: &Type, lit: &Literal) -> Option<Tensor> {
        let name = &decl.name.text;
        if decl.kind != DeclKind::Input {
            let message = format!("only inputs take a seed value; remove `= ...` from `{name}`");
            self.composition_fault(codes::ATTRIBUTE, message, decl.span, name);
            return None;
        }
        let mut flat = Vec::new();
        flatten(lit, &mut flat);
        let n = numel(&ty.shape);
        let tensor = match ty.dtype {
            DType::I32 => {
                let ints: Option<Vec<i32>> =
                    flat.iter().map(|l| l.as_i64().and_then(|v| i32::try_from(v).ok())).collect();
                ints.and_then(|v| Tensor::try_i32(ty.shape.clone(), v))
            }
            DType::F32 => {
                let floats: Option<Vec<f32>> = flat.iter().map(|l| l.as_f64().map(|v| v as f32)).collect();
                floats.and_then(|v| Tensor::try_f32(ty.shape.clone(), v))
            }
        };
        if tensor.is_none() {
            let message = format!("the seed of `{name}` must be {n} {} value(s) to fill {ty}", ty.dtype.keyword());
            self.composition_fault(codes::ATTRIBUTE, message, decl.span, name);
        }
        tensor
    }
}

/// The element count of `shape`, `None` when it overflows.
pub(super) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// A shape's element count as its product written out (`4294967296 × 4294967296`).
pub(super) fn shape_product(shape: &[usize]) -> String {
    shape.iter().map(usize::to_string).collect::<Vec<_>>().join(" × ")
}

/// The scalars of a (possibly nested) literal list, in order.
fn flatten<'l>(lit: &'l Literal, out: &mut Vec<&'l Literal>) {
    match lit {
        Literal::List(items) => items.iter().for_each(|l| flatten(l, out)),
        scalar => out.push(scalar),
    }
}
