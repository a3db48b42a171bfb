//! One op's call: its resolved arguments, typed accessors, and [`dispatch`]: the op's
//! attributes read as the op table types them (`crate::op`) and handed to its kernel, the
//! `Visit` impl beside it in one of the kernel files ([`kernels!`] writes them).

use super::bind::SimBindings;
use super::packed::PackedWeight;
use super::tensor::SimTensor;
use super::{invalid, SimError};
use crate::op::Visitor;
use crate::program::{Fold, KernelOp, TensorDecl, Tiling};
use crate::q8::Q8Weight;
use rdu_checkpoint::Fp8Weight;

/// A kernel's result: its outputs in order.
pub(super) type Outs = Result<Vec<SimTensor>, SimError>;

/// Runs the kernel of `call.op`: its operands counted and its attribute keys checked against
/// the op table's row, its attributes read typed, then the kernel.
pub(super) fn dispatch(call: &mut Call<'_>) -> Outs {
    call.expect()?;
    let op: &KernelOp = call.op;
    let given = op.given();
    match op.op.visit_spatial(&given, Kernel(call)) {
        Ok(outs) => outs,
        Err(fault) => invalid(fault.spatial_message(&given.keys())),
    }
}

/// The simulator's kernels, one `Visit` impl per op (see [`kernels!`]).
pub(super) struct Kernel<'c, 'e>(pub &'c mut Call<'e>);

impl Visitor for Kernel<'_, '_> {
    type Out = Outs;
}

/// The simulator's kernel of each op: `Op(call, attrs) => body` runs `body` with the op's
/// [`Call`] and its typed attributes (`crate::op::attrs::Op`).
macro_rules! kernels {
    ($($op:ident($call:ident, $attrs:pat) => $body:expr),* $(,)?) => {
        $(
            impl $crate::op::Visit<$crate::op::attrs::$op> for super::call::Kernel<'_, '_> {
                fn visit(self, $attrs: &$crate::op::attrs::$op) -> super::call::Outs {
                    let $call = self.0;
                    $body
                }
            }
        )*
    };
}
pub(super) use kernels;

/// A resolved argument.
pub(super) enum ArgVal<'e> {
    Dense(&'e SimTensor),
    Q8(&'e Q8Weight),
    Fp8(&'e Fp8Weight),
    /// A weight read in place in its ggml block format, with the fold its declared storage
    /// asks for (`None`: declared dense).
    Packed(PackedWeight<'e>, Option<Fold>),
    /// A literal argument (`reshape`'s shape: read with the op's attributes).
    Lit,
    /// A bound stacked weight not yet read (`experts` reads it one expert at a time).
    Stacked(&'e TensorDecl),
    /// The state an in-place update took by value (`Call::inplace`).
    Taken,
}

/// A weight argument: dense, Q8_0 blocks, FP8 with its block scales, or a ggml block format.
#[derive(Clone, Copy)]
pub(super) enum Weight<'e> {
    Dense(&'e SimTensor, &'e [f32]),
    Q8(&'e Q8Weight),
    Fp8(&'e Fp8Weight),
    Packed(PackedWeight<'e>),
}

impl Weight<'_> {
    pub(super) fn shape(&self) -> &[usize] {
        match self {
            Weight::Dense(t, _) => &t.shape,
            Weight::Q8(w) => &w.shape,
            Weight::Fp8(w) => &w.shape,
            Weight::Packed(w) => w.shape,
        }
    }
}

/// One op with its arguments resolved.
pub(super) struct Call<'e> {
    pub op: &'e KernelOp,
    pub args: Vec<ArgVal<'e>>,
    pub bindings: &'e dyn SimBindings,
    /// The state an update writes, taken out of the environment to be written in place.
    pub inplace: Option<SimTensor>,
    /// The chips' collective and this chip's index (tensor-parallel programs).
    pub collective: Option<(&'e dyn super::Collective, usize)>,
}

impl<'e> Call<'e> {
    /// Checks the argument count is in `min..=max` and every attribute is one of `known`.
    /// Checks the operands and attributes against the op table's row: how many operands the
    /// op takes and which attribute keys it knows (no kernel lists its own).
    pub(super) fn expect(&self) -> Result<(), SimError> {
        let facts = self.op.op.facts();
        // A shape literal (`reshape`'s) is an argument beside the tensor operands.
        let literal = usize::from(facts.shape_literal);
        let (min, max) = (facts.operands.0 + literal, facts.operands.1.saturating_add(literal));
        let n = self.args.len();
        if n < min || n > max {
            let want = match (min, max) {
                _ if min == max => format!("{min}"),
                (_, usize::MAX) => format!("at least {min}"),
                _ => format!("{min} to {max}"),
            };
            return invalid(format!("takes {want} arguments, given {n}"));
        }
        let known = facts.attrs;
        if let Some((k, _)) = self.op.attrs.iter().find(|(k, _)| !known.iter().any(|key| key.name() == k)) {
            return invalid(format!("unknown attribute `{k}`"));
        }
        Ok(())
    }

    pub(super) fn tiling(&self) -> Option<&'e Tiling> {
        self.op.tiling.as_ref()
    }

    /// Argument `i` as a dense tensor of any dtype.
    pub(super) fn dense(&self, i: usize) -> Result<&'e SimTensor, SimError> {
        match self.args.get(i) {
            Some(ArgVal::Dense(t)) => Ok(t),
            Some(ArgVal::Q8(_)) => invalid(format!("argument {i} is a q8_0 weight; this op reads it dense")),
            Some(ArgVal::Fp8(_)) => invalid(format!("argument {i} is an fp8 weight; this op reads it dense")),
            Some(ArgVal::Packed(..)) => invalid(format!("argument {i} is a packed weight; this op reads it dense")),
            Some(ArgVal::Lit) => invalid(format!("argument {i} must be a tensor, not a literal")),
            Some(ArgVal::Stacked(d)) => invalid(format!("{} cannot be read here", d.name)),
            Some(ArgVal::Taken) => invalid(format!("argument {i} was taken by the update")),
            None => invalid(format!("missing argument {i}")),
        }
    }

    /// Argument `i` as a dense f32 tensor: the tensor and its data.
    pub(super) fn f32(&self, i: usize) -> Result<(&'e SimTensor, &'e [f32]), SimError> {
        let t = self.dense(i)?;
        match t.as_f32() {
            Some(d) => Ok((t, d)),
            None => invalid(format!("argument {i} must be f32, is i32")),
        }
    }

    /// Argument `i` as an i32 tensor: the tensor and its data.
    pub(super) fn i32(&self, i: usize) -> Result<(&'e SimTensor, &'e [i32]), SimError> {
        let t = self.dense(i)?;
        match t.as_i32() {
            Some(d) => Ok((t, d)),
            None => invalid(format!("argument {i} must be i32, is f32")),
        }
    }

    /// Argument `i` as a weight: dense f32, or as stored when the op folds it.
    pub(super) fn weight(&self, i: usize) -> Result<Weight<'e>, SimError> {
        match self.args.get(i) {
            Some(ArgVal::Q8(w)) => Ok(Weight::Q8(w)),
            Some(ArgVal::Fp8(w)) => Ok(Weight::Fp8(w)),
            Some(ArgVal::Packed(w, _)) => Ok(Weight::Packed(*w)),
            _ => self.f32(i).map(|(t, d)| Weight::Dense(t, d)),
        }
    }

    /// The state of an in-place update, or a copy of argument `i`.
    pub(super) fn take_or_clone(&mut self, i: usize) -> Result<SimTensor, SimError> {
        match self.inplace.take() {
            Some(t) => Ok(t),
            None => self.dense(i).cloned(),
        }
    }

    /// Argument `i`'s shape, for an in-place state as for any dense argument.
    pub(super) fn shape_of(&self, i: usize) -> Result<Vec<usize>, SimError> {
        match (&self.inplace, self.args.get(i)) {
            (Some(t), Some(ArgVal::Taken)) => Ok(t.shape.clone()),
            _ => Ok(self.dense(i)?.shape.clone()),
        }
    }
}
