//! One op's call: its resolved arguments and attributes, typed accessors, and the dispatch
//! from each op of the table (`crate::op`) to its kernel.

use super::bind::SimBindings;
use super::packed::PackedWeight;
use super::tensor::SimTensor;
use super::{attention, elementwise as ew, invalid, moe, norm, products, recurrent, shape, SimError};
use crate::program::{Fold, KernelOp, Lit, Op, TensorDecl, Tiling};
use crate::q8::Q8Weight;
use rdu_checkpoint::Fp8Weight;

/// A kernel's result: its outputs in order.
pub(super) type Outs = Result<Vec<SimTensor>, SimError>;

/// Runs the kernel `call.op` names.
pub(super) fn dispatch(call: &mut Call<'_>) -> Outs {
    match call.op.op {
        Op::Add => ew::binary(call, |a, b| a + b),
        Op::Sub => ew::binary(call, |a, b| a - b),
        Op::Mul => ew::binary(call, |a, b| a * b),
        Op::Scale => {
            let by = call.req_float("by")?;
            ew::unary(call, move |x| x * by)
        }
        Op::Neg => ew::unary(call, |x| -x),
        Op::Exp => ew::unary(call, f32::exp),
        Op::Sigmoid => ew::unary(call, ew::sigmoid),
        Op::Silu => ew::unary(call, |x| x * ew::sigmoid(x)),
        Op::Softplus => ew::unary(call, ew::softplus),
        Op::GeluTanh => ew::unary(call, ew::gelu_tanh),
        Op::RmsNorm => norm::rms_norm(call),
        Op::L2Norm => norm::l2_norm(call),
        Op::Linear => products::linear(call),
        Op::LinearHeads => products::linear_heads(call),
        Op::Embed => products::embed(call),
        Op::Argmax => products::argmax(call),
        Op::Reshape => shape::reshape(call),
        Op::Slice => shape::slice(call),
        Op::Concat => shape::concat(call),
        Op::Transpose => shape::transpose(call),
        Op::Dequant => shape::dequant(call),
        Op::Rope => attention::rope(call),
        Op::CachePut => attention::cache_put(call),
        Op::Attend => attention::attend(call),
        Op::AttendMla => attention::attend_mla(call),
        Op::AttendMlaUp => attention::attend_mla_up(call),
        Op::ConvStep => recurrent::conv_step(call),
        Op::ConvShift => recurrent::conv_shift(call),
        Op::DeltaScan => recurrent::delta(call, false),
        Op::DeltaStep => recurrent::delta(call, true),
        Op::Route => moe::route(call),
        Op::Experts => moe::experts(call),
        Op::AllReduce => all_reduce(call),
        Op::Shard => shape::shard(call),
    }
}

/// `all_reduce(x)`: the sum of `x` over the chips (the value itself on one chip).
fn all_reduce(call: &mut Call<'_>) -> Outs {
    call.expect()?;
    let mut x = call.f32(0)?.0.clone();
    if let Some((group, chip)) = call.collective {
        group.all_reduce(chip, &mut x)?;
    }
    Ok(vec![x])
}

/// A resolved argument.
pub(super) enum ArgVal<'e> {
    Dense(&'e SimTensor),
    Q8(&'e Q8Weight),
    Fp8(&'e Fp8Weight),
    /// A weight read in place in its ggml block format, with the fold its declared storage
    /// asks for (`None`: declared dense).
    Packed(PackedWeight<'e>, Option<Fold>),
    Lit(&'e Lit),
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
        if let Some((k, _)) = self.op.attrs.iter().find(|(k, _)| !known.contains(&k.as_str())) {
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
            Some(ArgVal::Lit(_)) => invalid(format!("argument {i} must be a tensor, not a literal")),
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

    /// Argument `i` as a literal.
    pub(super) fn lit(&self, i: usize) -> Result<&'e Lit, SimError> {
        match self.args.get(i) {
            Some(ArgVal::Lit(l)) => Ok(l),
            _ => invalid(format!("argument {i} must be a literal")),
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

    pub(super) fn attr_float(&self, key: &str) -> Result<Option<f32>, SimError> {
        match self.op.attr(key) {
            None => Ok(None),
            Some(l) => l.as_float().map(|f| Some(f as f32)).ok_or(()).or_else(|_| bad_attr(key, "a number")),
        }
    }

    pub(super) fn attr_int(&self, key: &str) -> Result<Option<i64>, SimError> {
        match self.op.attr(key) {
            None => Ok(None),
            Some(l) => l.as_int().map(Some).ok_or(()).or_else(|_| bad_attr(key, "an integer")),
        }
    }

    /// A non-negative integer attribute.
    pub(super) fn attr_count(&self, key: &str) -> Result<Option<usize>, SimError> {
        match self.attr_int(key)? {
            None => Ok(None),
            Some(v) => usize::try_from(v).map(Some).or_else(|_| bad_attr(key, "a non-negative integer")),
        }
    }

    pub(super) fn req_count(&self, key: &str) -> Result<usize, SimError> {
        self.attr_count(key)?.map_or_else(|| invalid(format!("missing attribute `{key}`")), Ok)
    }

    pub(super) fn req_float(&self, key: &str) -> Result<f32, SimError> {
        self.attr_float(key)?.map_or_else(|| invalid(format!("missing attribute `{key}`")), Ok)
    }

    pub(super) fn attr_word(&self, key: &str) -> Result<Option<&'e str>, SimError> {
        match self.op.attr(key) {
            None => Ok(None),
            Some(l) => l.as_word().map(Some).ok_or(()).or_else(|_| bad_attr(key, "a word")),
        }
    }
}

/// A list literal of non-negative integers (shapes, permutations).
pub(super) fn usize_list(lit: &Lit, what: &str) -> Result<Vec<usize>, SimError> {
    let Lit::List(items) = lit else { return invalid(format!("{what} must be a list of integers")) };
    items
        .iter()
        .map(|l| l.as_int().and_then(|v| usize::try_from(v).ok()))
        .collect::<Option<Vec<_>>>()
        .map_or_else(|| invalid(format!("{what} must be a list of non-negative integers")), Ok)
}

fn bad_attr<T>(key: &str, what: &str) -> Result<T, SimError> {
    invalid(format!("attribute `{key}` must be {what}"))
}
