//! Type inference: the dtypes and shapes an op produces from its operands' types, or the
//! operand (or attribute) that does not fit. Shared by `front::lift` and the verifier.

mod basic;
mod sequence;

pub use basic::broadcast_shape;

use super::{DType, Op, Type};
use rdu_spatial::op::{Key, Visitor};

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
    Attr(Key),
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
    op.visit(Shape(&Operands { op, types: inputs }))
}

/// The shape rules, one `Visit` impl per op beside its rule (see [`shapes!`]).
pub(super) struct Shape<'a>(&'a Operands<'a>);

impl Visitor for Shape<'_> {
    type Out = Result<Vec<Type>, TypeError>;
}

/// The shape rule of each op: `Op(a, attrs) => body` types the op with its [`Operands`] `a`
/// and its typed attributes (`rdu_spatial::op::attrs::Op`).
macro_rules! shapes {
    ($($op:ident($a:ident, $attrs:pat) => $body:expr),* $(,)?) => {
        $(
            impl rdu_spatial::op::Visit<rdu_spatial::op::attrs::$op> for super::Shape<'_> {
                fn visit(self, $attrs: &rdu_spatial::op::attrs::$op) -> Result<Vec<Type>, TypeError> {
                    let $a = self.0;
                    $body
                }
            }
        )*
    };
}
use shapes;

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
        let roles = self.op.kind().facts().roles;
        // `attend`'s sinks come last, after the chunk's k, v when they are given.
        let sinks = self.op.kind() == rdu_spatial::Op::Attend && self.len() % 2 == 1 && i + 1 == self.len();
        let role = if sinks { roles.last() } else { roles.get(i) };
        role.map_or_else(|| format!("operand {i}"), |r| format!("`{r}`"))
    }

    fn error(&self, fault: Fault, site: Site, message: String) -> TypeError {
        TypeError { fault, site, message: format!("{}: {message}", self.op.name()) }
    }

    /// A shape error at operand `i`.
    fn shape_error(&self, i: usize, want: impl std::fmt::Display) -> TypeError {
        let message = format!("{} must be {want}, found {}", self.role(i), self.ty(i));
        self.error(Fault::Shape, Site::Arg(i), message)
    }

    fn attr_error(&self, key: Key, message: String) -> TypeError {
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
