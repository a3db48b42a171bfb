//! Type inference: the dtypes and shapes an op produces from its operands' types, or the
//! operand (or attribute) that does not fit. Shared by `front::lift` and the verifier.

mod basic;
mod sequence;

pub use basic::broadcast_shape;

use super::{DType, Op, Type};

/// What kind of problem a [`TypeError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Too few or too many operands (or binders).
    Arity,
    Shape,
    DType,
    /// An attribute that does not fit the operands (an axis out of range, `dim` > head size).
    Attr,
}

/// Where a [`TypeError`] points.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// The op itself.
    Op,
    /// Operand `i` (0-based, among the tensor operands).
    Arg(usize),
    /// The attribute with this key (`reshape`'s positional shape is `shape`).
    Attr(&'static str),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TypeError {
    pub fault: Fault,
    pub site: Site,
    pub message: String,
}

/// The types of the values `op` produces from operands of types `inputs`.
pub fn infer(op: &Op, inputs: &[&Type]) -> Result<Vec<Type>, TypeError> {
    let (least, most) = op.arity();
    if inputs.len() < least || inputs.len() > most {
        let want = match (least, most) {
            (l, m) if l == m => format!("{l}"),
            (l, usize::MAX) => format!("at least {l}"),
            (l, m) => format!("{l} or {m}"),
        };
        let message = format!("`{}` takes {want} operands, found {}", op.name(), inputs.len());
        return Err(TypeError { fault: Fault::Arity, site: Site::Op, message });
    }
    let a = Operands { op, types: inputs };
    match op {
        Op::Add | Op::Sub | Op::Mul => basic::broadcast(&a),
        Op::Neg => Ok(vec![inputs[0].clone()]),
        Op::Scale { .. } | Op::Exp | Op::Sigmoid | Op::Silu | Op::Softplus | Op::GeluTanh | Op::AllReduce => {
            a.f32(0)?;
            Ok(vec![inputs[0].clone()])
        }
        Op::RmsNorm { .. } | Op::L2Norm { .. } => basic::norm(&a),
        Op::Linear => basic::linear(&a),
        Op::LinearHeads => basic::linear_heads(&a),
        Op::Embed => basic::embed(&a),
        Op::Argmax => basic::argmax(&a),
        Op::Reshape { shape } => basic::reshape(&a, shape),
        Op::Slice { axis, start, len } => basic::slice(&a, *axis, *start, *len),
        Op::Shard { axis, chips } => basic::shard(&a, *axis, *chips),
        Op::Concat { axis } => basic::concat(&a, *axis),
        Op::Transpose { perm } => basic::transpose(&a, perm),
        Op::Rope { dim, .. } => sequence::rope(&a, *dim),
        Op::CachePut => sequence::cache_put(&a),
        Op::Attend { window, .. } => sequence::attend(&a, *window),
        Op::AttendMla { latent, window, .. } => sequence::attend_mla(&a, *latent, *window),
        Op::AttendMlaUp { latent, window, .. } => sequence::attend_mla_up(&a, *latent, *window),
        Op::ConvStep => sequence::conv_step(&a),
        Op::ConvShift => sequence::conv_shift(&a),
        Op::DeltaScan { .. } => sequence::delta(&a, false),
        Op::DeltaStep { .. } => sequence::delta(&a, true),
        Op::Route { k, groups, topk_groups, group_score, .. } => {
            sequence::route(&a, *k, (*groups, *topk_groups), *group_score)
        }
        Op::Experts { .. } => sequence::experts(&a),
    }
}

/// The operand names the language uses for each op, for messages.
fn roles(op: &Op) -> &'static [&'static str] {
    match op {
        Op::Add | Op::Sub | Op::Mul => &["a", "b"],
        Op::RmsNorm { .. } => &["x", "w"],
        Op::Linear => &["x", "W", "b"],
        Op::LinearHeads => &["x", "W"],
        Op::Embed => &["ids", "E"],
        Op::Rope { .. } => &["x", "cos", "sin", "pos"],
        Op::CachePut => &["C", "x", "pos"],
        Op::Attend { .. } => &["q", "K", "V", "pos", "k", "v"],
        Op::AttendMla { .. } => &["q", "C", "pos", "c"],
        Op::AttendMlaUp { .. } => &["q", "C", "Wk", "Wv", "pos", "c"],
        Op::ConvStep => &["x", "w", "state"],
        Op::ConvShift => &["state", "x"],
        Op::DeltaScan { .. } => &["q", "k", "v", "g", "beta"],
        Op::DeltaStep { .. } => &["S", "q", "k", "v", "g", "beta"],
        Op::Route { .. } => &["logits", "bias"],
        Op::Experts { .. } => &["x", "w", "idx", "Wg", "Wu", "Wd"],
        Op::Concat { .. } => &[],
        _ => &["x"],
    }
}

/// The operands of one op being typed, with helpers that build located errors.
pub(super) struct Operands<'a> {
    op: &'a Op,
    types: &'a [&'a Type],
}

impl<'a> Operands<'a> {
    fn len(&self) -> usize {
        self.types.len()
    }

    fn ty(&self, i: usize) -> &'a Type {
        self.types[i]
    }

    fn role(&self, i: usize) -> String {
        roles(self.op).get(i).map_or_else(|| format!("operand {i}"), |r| format!("`{r}`"))
    }

    fn error(&self, fault: Fault, site: Site, message: String) -> TypeError {
        TypeError { fault, site, message: format!("{}: {message}", self.op.name()) }
    }

    /// A shape error at operand `i`.
    fn shape_error(&self, i: usize, want: impl std::fmt::Display) -> TypeError {
        let message = format!("{} must be {want}, found {}", self.role(i), self.ty(i));
        self.error(Fault::Shape, Site::Arg(i), message)
    }

    fn attr_error(&self, key: &'static str, message: String) -> TypeError {
        self.error(Fault::Attr, Site::Attr(key), message)
    }

    /// Operand `i` must have dtype `dtype`.
    fn dtype(&self, i: usize, dtype: DType) -> Result<&'a [usize], TypeError> {
        let ty = self.ty(i);
        if ty.dtype != dtype {
            let message = format!("{} must be {}, found {ty}", self.role(i), dtype.keyword());
            return Err(self.error(Fault::DType, Site::Arg(i), message));
        }
        Ok(&ty.shape)
    }

    fn f32(&self, i: usize) -> Result<&'a [usize], TypeError> {
        self.dtype(i, DType::F32)
    }

    /// Operand `i` must be f32 of rank `rank`; `want` describes it (`[N, in]`).
    fn f32_rank(&self, i: usize, rank: usize, want: &str) -> Result<&'a [usize], TypeError> {
        let shape = self.f32(i)?;
        if shape.len() != rank {
            return Err(self.shape_error(i, format!("f32{want}")));
        }
        Ok(shape)
    }

    /// Operand `i` must be f32 of exactly `shape`.
    fn f32_exact(&self, i: usize, shape: &[usize]) -> Result<(), TypeError> {
        if self.f32(i)? != shape {
            return Err(self.shape_error(i, Type::f32(shape)));
        }
        Ok(())
    }

    /// Operand `i` must be positions for `n` rows: `i32[]` or `i32[n]`.
    fn positions(&self, i: usize, n: usize) -> Result<(), TypeError> {
        let shape = self.dtype(i, DType::I32)?;
        if !shape.is_empty() && shape != [n] {
            return Err(self.shape_error(i, format!("i32[] or i32[{n}] (one position per row)")));
        }
        Ok(())
    }
}
