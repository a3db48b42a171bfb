//! The syntax tree of the program language (see `docs/LANGUAGE.md`): declarations,
//! statements and outputs, each with the byte span it came from.
//!
//! Spans are carried for diagnostics only: two trees that differ only in spans compare equal,
//! so `parse(print(p)) == p` holds however `p` was formatted.

use std::fmt;

/// A byte range in the source text. Equality ignores spans (see the module docs).
#[derive(Clone, Copy, Default, Debug, Eq)]
pub struct Span {
    pub start: u32,
    pub end: u32,
}

impl PartialEq for Span {
    fn eq(&self, _other: &Self) -> bool {
        true
    }
}

/// Hashes nothing, to agree with equality (all spans are equal).
impl std::hash::Hash for Span {
    fn hash<H: std::hash::Hasher>(&self, _state: &mut H) {}
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start: start as u32, end: end as u32 }
    }
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.end as usize
    }
}

/// An identifier as written, with its span.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name {
    pub text: String,
    pub span: Span,
}

impl Name {
    pub fn new(text: impl Into<String>) -> Name {
        Name { text: text.into(), span: Span::default() }
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Element type of a declared tensor. `Q8` marks a weight the deployment MAY store as Q8_0
/// blocks (its values are f32 to the program); whether it IS stored so is the source's
/// `q8` set, not the type. `Bf16` marks a state stored as bfloat16: its values are f32 to the
/// program, and every value written into it is rounded to bf16.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DType {
    F32,
    I32,
    Q8,
    Bf16,
}

impl DType {
    pub fn keyword(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::Q8 => "q8",
            DType::Bf16 => "bf16",
        }
    }
    pub fn from_keyword(s: &str) -> Option<DType> {
        Some(match s {
            "f32" => DType::F32,
            "i32" => DType::I32,
            "q8" => DType::Q8,
            "bf16" => DType::Bf16,
            _ => return None,
        })
    }
}

/// `f32[1, 64]`, `i32[]`, `q8[64, 64]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeclKind {
    /// Runtime data: the hidden state, token ids, positions.
    Input,
    /// A checkpoint tensor of this layer.
    Weight,
    /// The same tensor in every layer (RoPE tables `cos{r}`/`sin{r}`); kept by name.
    Shared,
    /// Carried from step to step (KV caches, recurrent and conv state).
    State,
}

impl DeclKind {
    pub fn keyword(self) -> &'static str {
        match self {
            DeclKind::Input => "input",
            DeclKind::Weight => "weight",
            DeclKind::Shared => "shared",
            DeclKind::State => "state",
        }
    }
}

/// A literal: in attributes (`eps=1e-06`, `style=neox`, `shape=[4, 16]`), as an argument
/// (`reshape(q3, [4, 16])`) or as a declaration's seed value (`input pos : i32[] = 1`).
#[derive(Clone, Debug, PartialEq)]
pub enum Literal {
    Int(i64),
    Float(f64),
    /// A bare word such as `neox` or `silu`.
    Word(String),
    List(Vec<Literal>),
}

impl Literal {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Literal::Int(v) => Some(*v),
            _ => None,
        }
    }
    /// Ints convert to floats; nothing else does.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Literal::Int(v) => Some(*v as f64),
            Literal::Float(v) => Some(*v),
            _ => None,
        }
    }
    pub fn as_word(&self) -> Option<&str> {
        match self {
            Literal::Word(w) => Some(w),
            _ => None,
        }
    }
    /// A list of non-negative ints, e.g. a shape.
    pub fn as_usize_list(&self) -> Option<Vec<usize>> {
        match self {
            Literal::List(items) => items.iter().map(|l| l.as_i64().and_then(|v| usize::try_from(v).ok())).collect(),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Decl {
    pub kind: DeclKind,
    pub name: Name,
    pub ty: TensorType,
    /// Only inputs may carry a seed value (`= 1`).
    pub init: Option<Literal>,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    Name(Name),
    Lit(Literal, Span),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Attr {
    pub key: Name,
    pub value: Literal,
    pub span: Span,
}

/// `a = op(args, key=value)`, `a, b = op(...)`, or the state update `S <- op(...)`
/// (`o, S <- op(...)`: the last binder is the state, the others fresh values).
#[derive(Clone, Debug, PartialEq)]
pub struct Stmt {
    pub binders: Vec<Name>,
    pub update: bool,
    pub op: Name,
    pub args: Vec<Arg>,
    pub attrs: Vec<Attr>,
    pub span: Span,
}

impl Stmt {
    pub fn attr(&self, key: &str) -> Option<&Literal> {
        self.attrs.iter().find(|a| a.key.text == key).map(|a| &a.value)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Decl(Decl),
    Stmt(Stmt),
    Output(Name),
}

/// A whole program: its items in source order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub items: Vec<Item>,
}

impl Program {
    pub fn decls(&self) -> impl Iterator<Item = &Decl> {
        self.items.iter().filter_map(|i| match i {
            Item::Decl(d) => Some(d),
            _ => None,
        })
    }
    pub fn stmts(&self) -> impl Iterator<Item = &Stmt> {
        self.items.iter().filter_map(|i| match i {
            Item::Stmt(s) => Some(s),
            _ => None,
        })
    }
    pub fn outputs(&self) -> impl Iterator<Item = &Name> {
        self.items.iter().filter_map(|i| match i {
            Item::Output(n) => Some(n),
            _ => None,
        })
    }
}

impl Program {
    /// Renames every name the program declares, binds or reads (not attribute words), by `f`.
    pub fn rename(&mut self, f: &dyn Fn(&str) -> String) {
        let mut apply = |n: &mut Name| n.text = f(&n.text);
        for item in &mut self.items {
            match item {
                Item::Decl(d) => apply(&mut d.name),
                Item::Stmt(s) => {
                    s.binders.iter_mut().for_each(&mut apply);
                    for a in &mut s.args {
                        if let Arg::Name(n) = a {
                            apply(n);
                        }
                    }
                }
                Item::Output(n) => apply(n),
            }
        }
    }
}
