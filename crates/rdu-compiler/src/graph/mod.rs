//! The typed dataflow graph a program lifts to ([`Graph`]), the op set ([`Op`]), type
//! inference ([`infer()`]), a text printer, and the reference interpreter ([`eval()`]).
//!
//! Architecture invariant: the graph is straight-line SSA. Every value is defined once,
//! either by a declaration or by an earlier node, so `nodes` is already a topological order
//! and evaluation is one pass over it.

mod build;
pub mod eval;
pub mod infer;
mod op;
mod print;
mod tensor;

pub use eval::{eval, eval_breaking_all_ties, eval_breaking_ties, Bindings, EvalError, Evaluated};
pub use infer::{infer, Fault, Site, TypeError};
pub use op::{Act, GroupScore, KMap, Op, RopeStyle, Score};
pub use tensor::{numel, Data, Tensor};

use crate::lang::ast::{DeclKind, Span};
use std::fmt;

/// A value of the graph: an index into [`Graph::values`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ValueId(pub u32);

/// A node of the graph: an index into [`Graph::nodes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u32);

impl ValueId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl NodeId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Element type of a value. A `q8` weight is an `F32` value (its declaration says `q8`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DType {
    F32,
    I32,
}

impl DType {
    pub fn keyword(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
        }
    }
}

/// A value's element type and shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Type {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Type {
    pub fn new(dtype: DType, shape: &[usize]) -> Type {
        Type { dtype, shape: shape.to_vec() }
    }
    pub fn f32(shape: &[usize]) -> Type {
        Type::new(DType::F32, shape)
    }
    pub fn i32(shape: &[usize]) -> Type {
        Type::new(DType::I32, shape)
    }
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
}

impl fmt::Display for Type {
    /// `f32[1, 64]`, `i32[]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}[", self.dtype.keyword())?;
        for (i, d) in self.shape.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

/// How a tensor enters the program: its declaration.
#[derive(Clone, Debug, PartialEq)]
pub struct Declaration {
    pub kind: DeclKind,
    /// Declared `q8`: a weight the deployment may store as Q8_0 blocks.
    pub q8: bool,
    /// Declared `bf16`: a state stored as bfloat16 (every value written into it is rounded).
    pub bf16: bool,
    /// An input's seed value (`input pos : i32[] = 1`). The interpreter does not use it.
    pub seed: Option<Tensor>,
    pub span: Span,
}

impl Declaration {
    /// A plain declaration of `kind`: not `q8`, not `bf16`, no seed, no span.
    pub fn of(kind: DeclKind) -> Declaration {
        Declaration { kind, q8: false, bf16: false, seed: None, span: Span::default() }
    }
}

/// Where a value comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    Decl(Declaration),
    /// Output `output` of node `node`.
    Node {
        node: NodeId,
        output: usize,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    /// The name the program gives it (a state's updates share the state's name).
    pub name: String,
    pub ty: Type,
    pub origin: Origin,
}

impl Value {
    /// The declaration kind, for declared values.
    pub fn decl_kind(&self) -> Option<DeclKind> {
        match &self.origin {
            Origin::Decl(d) => Some(d.kind),
            Origin::Node { .. } => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// The index of the statement it was lifted from, among the program's statements.
    pub stmt: usize,
    pub span: Span,
}

/// `output name`: a result of the program.
#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub name: String,
    pub value: ValueId,
}

/// A state declaration and the value carried to the next step (`initial` if never updated).
#[derive(Clone, Debug, PartialEq)]
pub struct StateUpdate {
    pub name: String,
    pub initial: ValueId,
    pub last: ValueId,
}

/// A lifted program. Build one with [`Graph::declare`], [`Graph::push`], [`Graph::output`]
/// and [`Graph::write_back`], which keep it well typed.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Graph {
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub outputs: Vec<Output>,
    /// One entry per state declaration, in declaration order.
    pub states: Vec<StateUpdate>,
}
