//! The `SpatialProgram` IR: tensors with their homes, sections of pipelined stages, fused kernel ops.
//!
//! A spatial program is what a vendor backend needs to configure the chip for one layer kind
//! (or the embedding, or the head): every tensor it touches, where it lives, and the
//! configurations (sections) loaded one after another, each a pipeline of stages. A stage is
//! one fused kernel — a chain of ops from the program language's vocabulary
//! (`docs/LANGUAGE.md`), with its tiling and its allocation of PCUs and PMUs.
//!
//! Names are the identity of tensors throughout: an op reads and writes tensors by name, and
//! every name a program prints is a `String` so that the text form, the JSON form and the
//! bundle's bindings agree without an id table. Nothing here uses a hash map.

pub use crate::op::Op;
use crate::op::{AttrLit, Given, OpAttrs, TypedOp, Visit, Visitor};
use serde::{Deserialize, Serialize};

/// One lowered program: a layer kind, or the embedding, or the head.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SpatialProgram {
    /// The program's name (`attention_dense`, `embed`, `head`, ...).
    pub name: String,
    /// The chip it was lowered for (`sn50`, `sn40l`, a user chip's name).
    pub chip: String,
    /// Every tensor the program reads or writes, in declaration order.
    pub tensors: Vec<TensorDecl>,
    /// Configurations loaded one after another.
    pub sections: Vec<Section>,
    /// The program's results, in order.
    pub outputs: Vec<String>,
    /// Tensor-parallel layout, when the program runs over several chips.
    pub tp: Option<TpInfo>,
}

/// A tensor: its shape and element type, how it is stored, what it is and where it lives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorDecl {
    pub name: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub storage: Storage,
    pub role: Role,
    pub home: Home,
}

/// Element type as the program sees it (a Q8_0 weight is `F32` with `Storage::Q8_0`, and so
/// for every block format).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dtype {
    F32,
    I32,
}

/// How a tensor's values are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Storage {
    Dense,
    /// Blocks of 32 int8 values and one scale, along the last axis.
    #[allow(non_camel_case_types)]
    Q8_0,
    /// bfloat16 values of an f32 tensor (a state): the program sees f32, and every value an op
    /// writes into it is rounded to bf16 (`crate::bf16::round_bf16`); reads widen exactly.
    Bf16,
    /// FP8 e4m3fn values and one f32 scale per `rows × cols` block of each matrix (the last
    /// two axes; edge blocks ragged), as DeepSeek stores its projections.
    Fp8 {
        rows: u32,
        cols: u32,
    },
    /// MXFP4: blocks of 32 e2m1 values and one e8m0 scale along the last axis (ggml's layout).
    Mxfp4,
}

/// A weight format a product folds on the chip, block by block (`fold=` on a kernel op).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fold {
    Q8,
    Fp8,
    Mxfp4,
}

impl Fold {
    /// Every fold, in order.
    pub const ALL: [Fold; 3] = [Fold::Q8, Fold::Fp8, Fold::Mxfp4];

    /// The word after `fold=` in the text form (`q8`, `fp8`, `mxfp4`).
    pub fn word(self) -> &'static str {
        match self {
            Fold::Q8 => "q8",
            Fold::Fp8 => "fp8",
            Fold::Mxfp4 => "mxfp4",
        }
    }

    /// The fold a word names.
    pub fn from_word(word: &str) -> Option<Fold> {
        Fold::ALL.into_iter().find(|f| f.word() == word)
    }
}

impl Storage {
    /// The fold of a weight stored in a block format (`None`: read as values).
    pub fn fold(self) -> Option<Fold> {
        match self {
            Storage::Q8_0 => Some(Fold::Q8),
            Storage::Fp8 { .. } => Some(Fold::Fp8),
            Storage::Mxfp4 => Some(Fold::Mxfp4),
            Storage::Dense | Storage::Bf16 => None,
        }
    }

    /// Whether it is a block format a product folds.
    pub fn is_blocks(self) -> bool {
        self.fold().is_some()
    }

    /// The word of the text form (`storage=...`): `dense`, `q8_0`, `bf16`, `fp8_128x128`, `mxfp4`.
    pub fn word(self) -> String {
        match self {
            Storage::Dense => "dense".into(),
            Storage::Q8_0 => "q8_0".into(),
            Storage::Bf16 => "bf16".into(),
            Storage::Fp8 { rows, cols } => format!("fp8_{rows}x{cols}"),
            Storage::Mxfp4 => "mxfp4".into(),
        }
    }

    /// The storage a word of the text form names.
    pub fn from_word(word: &str) -> Option<Storage> {
        Some(match word {
            "dense" => Storage::Dense,
            "q8_0" => Storage::Q8_0,
            "bf16" => Storage::Bf16,
            "mxfp4" => Storage::Mxfp4,
            _ => {
                let (rows, cols) = word.strip_prefix("fp8_")?.split_once('x')?;
                let parse = |d: &str| d.parse::<u32>().ok().filter(|&v| v > 0 && d == v.to_string());
                Storage::Fp8 { rows: parse(rows)?, cols: parse(cols)? }
            }
        })
    }

    /// Why a weight of `shape` cannot be held so, if it cannot: Q8_0 and MXFP4 need whole
    /// blocks of 32 along the last axis, FP8 at least two axes.
    pub fn misfit(self, shape: &[usize]) -> Option<String> {
        let last = shape.last().copied();
        match self {
            Storage::Q8_0 | Storage::Mxfp4 if last.is_none_or(|d| d % 32 != 0) => {
                let name = if self == Storage::Q8_0 { "Q8_0" } else { "MXFP4" };
                Some(format!("shape {shape:?} cannot be {name}: the last dimension is not a multiple of 32"))
            }
            Storage::Fp8 { .. } if shape.len() < 2 => {
                Some(format!("shape {shape:?} cannot be FP8 block-scaled: it has fewer than two axes"))
            }
            _ => None,
        }
    }

    /// How finely a split along `axis` of a weight of `rank` axes may cut it and keep whole
    /// blocks: 32 along the last axis of Q8_0 and MXFP4; a block's rows or columns along
    /// the last two of FP8; 1 anywhere else.
    pub fn split_unit(self, rank: usize, axis: usize) -> usize {
        match self {
            Storage::Q8_0 | Storage::Mxfp4 if axis + 1 == rank => 32,
            Storage::Fp8 { cols, .. } if axis + 1 == rank => cols as usize,
            Storage::Fp8 { rows, .. } if axis + 2 == rank => rows as usize,
            _ => 1,
        }
    }
}

/// What a tensor is to the program.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Runtime data given each step (hidden rows, token ids, positions).
    Input,
    /// A checkpoint tensor of this layer.
    Weight,
    /// The same tensor in every layer (RoPE tables).
    Shared,
    /// Carried from step to step (KV caches, recurrent and conv state).
    State,
    /// A result of the program.
    Output,
    /// An intermediate produced and consumed inside the program.
    Temp,
}

/// Where a tensor lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Home {
    Hbm,
    Ddr,
    Sram,
    Host,
}

/// One configuration of the chip: a pipeline of stages.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Section {
    pub stages: Vec<Stage>,
}

/// One fused kernel and its share of the chip's units.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stage {
    pub name: String,
    pub ops: Vec<KernelOp>,
    pub pcus: u32,
    pub pmus: u32,
    /// The stage streams its weights ahead of its activations: when the program runs as a
    /// loop over consecutive layers (the bundle's `schedule`), the next iteration's weight
    /// stream starts while this iteration's pipeline drains (`docs/SPATIAL.md`, kernel looping).
    /// Valid only on a stage that reads a prefetchable weight, in a one-section program
    /// ([`SpatialProgram::prefetch_problems`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub prefetch: bool,
    /// Where on the chip's unit mesh the stage sits (set by placement; `None` before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<Region>,
}

/// A stage's place on the chip's mesh of tiles (`Chip::mesh_rows` × `Chip::mesh_cols`, each
/// tile one PCU and one PMU): the half-open runs of PCU and PMU indices it holds, in the
/// mesh's serpentine order (row 0 left to right, row 1 right to left, …), so a run is a
/// connected strip of the mesh and consecutive runs touch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub pcu: (u32, u32),
    pub pmu: (u32, u32),
}

impl Region {
    /// The mesh tile `(row, column)` of serpentine index `index` on a mesh `cols` wide.
    pub fn tile(index: u32, cols: u32) -> (u32, u32) {
        let (row, col) = (index / cols, index % cols);
        if row.is_multiple_of(2) {
            (row, col)
        } else {
            (row, cols - 1 - col)
        }
    }

    /// The mean `(row, column)` of the tiles of the run `start..end` (`None` when empty).
    pub fn centroid(run: (u32, u32), cols: u32) -> Option<(f64, f64)> {
        if run.1 <= run.0 {
            return None;
        }
        let n = f64::from(run.1 - run.0);
        let (mut r, mut c) = (0.0, 0.0);
        for i in run.0..run.1 {
            let (row, col) = Region::tile(i, cols);
            r += f64::from(row);
            c += f64::from(col);
        }
        Some((r / n, c / n))
    }

    /// Mesh hops between this stage and `next`: the Manhattan distance between the centroids
    /// of their PCU runs (where the work is), rounded up; at least 1 between two stages.
    pub fn hops_to(&self, next: &Region, cols: u32) -> u32 {
        match (Region::centroid(self.pcu, cols), Region::centroid(next.pcu, cols)) {
            (Some(a), Some(b)) => (((a.0 - b.0).abs() + (a.1 - b.1).abs()).ceil() as u32).max(1),
            _ => 1,
        }
    }
}

/// One op of a stage's chain: `outs = op(args, attrs)` or, with `update`, `..., S <- op(...)`
/// (the last output is the state written).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelOp {
    pub outs: Vec<String>,
    pub update: bool,
    pub op: Op,
    pub args: Vec<Arg>,
    pub attrs: Vec<(String, Lit)>,
    /// Products over a weight stored in a block format fold its values and block scales on
    /// the chip (`fold=q8`, `fold=fp8`, `fold=mxfp4`).
    pub fold: Option<Fold>,
    /// Computed slice by slice along one axis of the (first) output.
    pub tiling: Option<Tiling>,
}

/// A positional argument: a tensor by name, or a literal (`reshape`'s shape list).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arg {
    Tensor(String),
    Lit(Lit),
}

/// A literal: attribute values and literal arguments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Lit {
    Int(i64),
    #[serde(with = "float_json")]
    Float(f64),
    Word(String),
    List(Vec<Lit>),
}

/// The half-open ranges `start..end` of the output's `axis` that the op computes, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tiling {
    pub axis: usize,
    pub tiles: Vec<(usize, usize)>,
}

/// Tensor-parallel layout: how many chips, which slice of each split tensor every chip holds,
/// and which stages sum partial results across the chips.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpInfo {
    pub chips: u32,
    pub splits: Vec<TpSplit>,
    /// Names of the stages that all-reduce (sum) their outputs across chips.
    pub all_reduce: Vec<String>,
}

/// One split tensor: chip `c` holds the half-open ranges `parts[c]` of `axis` of the full
/// (one-chip) tensor, concatenated in order (a fused projection's q, k and v heads are
/// several ranges; replicated kv heads give several chips the same range).
///
/// `stored`: the full tensor holds only `stored` values of `axis` (as the checkpoint stores
/// them) and is zero-padded beyond, up to the end of the last range: the chips' ranges
/// partition the padded axis, and a position at or past `stored` is a zero every chip that
/// holds it reads (gpt-oss's MXFP4 experts, whose intermediate width would otherwise split
/// blocks: a padded gate or up row gives 0, a padded down column adds 0).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TpSplit {
    pub tensor: String,
    pub axis: usize,
    pub parts: Vec<Vec<(usize, usize)>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stored: Option<usize>,
}

impl TpSplit {
    /// The extent of the axis the chips' ranges lie in: the end of the last range when the
    /// tensor is zero-padded (`stored`), `full` (the full tensor's extent) otherwise.
    pub fn extent(&self, full: usize) -> usize {
        match self.stored {
            Some(_) => self.parts.iter().flatten().map(|r| r.1).max().unwrap_or(full),
            None => full,
        }
    }
}

impl SpatialProgram {
    /// The declaration of `name`, if the program declares it.
    pub fn decl(&self, name: &str) -> Option<&TensorDecl> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// Every op in execution order, with its stage.
    pub fn ops(&self) -> impl Iterator<Item = (&Stage, &KernelOp)> {
        self.sections.iter().flat_map(|s| s.stages.iter()).flat_map(|st| st.ops.iter().map(move |op| (st, op)))
    }
}

impl Stage {
    /// The weight tensors the stage reads whose addresses do not depend on its activations:
    /// every `role=weight` argument of an op that is not [`Op::is_activation_addressed`], once each, in order.
    pub fn prefetchable_weights<'p>(&'p self, program: &'p SpatialProgram) -> Vec<&'p TensorDecl> {
        let mut out: Vec<&TensorDecl> = Vec::new();
        for op in self.ops.iter().filter(|op| !op.op.is_activation_addressed()) {
            for name in op.reads() {
                if let Some(d) = program.decl(name).filter(|d| d.role == Role::Weight) {
                    if !out.iter().any(|o| o.name == d.name) {
                        out.push(d);
                    }
                }
            }
        }
        out
    }
}

impl SpatialProgram {
    /// Every misplaced `prefetch` mark, one line each: a marked stage must read a prefetchable
    /// weight ([`Stage::prefetchable_weights`]), and only a one-section program prefetches (a
    /// program of several sections reloads the chip between them).
    pub fn prefetch_problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        let sections = self.sections.len();
        for (idx, section) in self.sections.iter().enumerate() {
            for stage in section.stages.iter().filter(|s| s.prefetch) {
                if sections != 1 {
                    out.push(format!(
                        "section {idx} stage `{}` prefetches, but the program has {sections} sections; only a one-section program prefetches",
                        stage.name
                    ));
                } else if stage.prefetchable_weights(self).is_empty() {
                    out.push(format!(
                        "stage `{}` prefetches but reads no weight it could stream ahead of its activations",
                        stage.name
                    ));
                }
            }
        }
        out
    }
}

impl TensorDecl {
    /// Number of elements (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl KernelOp {
    /// The attribute `key`, if given.
    pub fn attr(&self, key: &str) -> Option<&Lit> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// The attributes as given, and the positional literal of an op that takes one (its
    /// second argument, when that is a literal).
    pub fn given(&self) -> Given<'_, Lit> {
        let literal = match self.args.get(1) {
            Some(Arg::Lit(l)) if self.op.takes_shape_literal() => Some(l),
            _ => None,
        };
        Given { attrs: self.attrs.iter().map(|(k, v)| (k.as_str(), v)).collect(), literal }
    }

    /// The op with its attributes typed, read as the simulator reads them
    /// ([`crate::op::OpAttrs::spatial`]), or the first fault as the simulator words it.
    pub fn typed(&self) -> Result<TypedOp, String> {
        struct Typed;
        impl Visitor for Typed {
            type Out = TypedOp;
        }
        impl<A: OpAttrs + Clone + Into<TypedOp>> Visit<A> for Typed {
            fn visit(self, attrs: &A) -> TypedOp {
                attrs.clone().into()
            }
        }
        let given = self.given();
        self.op.visit_spatial(&given, Typed).map_err(|f| f.spatial_message(&given.keys()))
    }

    /// The tensor names the op reads, in argument order.
    pub fn reads(&self) -> impl Iterator<Item = &str> {
        self.args.iter().filter_map(|a| match a {
            Arg::Tensor(t) => Some(t.as_str()),
            Arg::Lit(_) => None,
        })
    }
}

impl AttrLit for Lit {
    fn int(&self) -> Option<i64> {
        match self {
            Lit::Int(v) => Some(*v),
            _ => None,
        }
    }
    fn float(&self) -> Option<f64> {
        self.as_float()
    }
    fn word(&self) -> Option<&str> {
        self.as_word()
    }
    fn counts(&self) -> Option<Vec<usize>> {
        match self {
            Lit::List(items) => items.iter().map(|l| l.int().and_then(|v| usize::try_from(v).ok())).collect(),
            _ => None,
        }
    }
}

impl Lit {
    /// The value as an integer (an `Int`, or a `Float` with no fractional part).
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Lit::Int(i) => Some(*i),
            Lit::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
            _ => None,
        }
    }

    /// The value as a float (an `Int` converts).
    pub fn as_float(&self) -> Option<f64> {
        match self {
            Lit::Int(i) => Some(*i as f64),
            Lit::Float(f) => Some(*f),
            _ => None,
        }
    }

    /// The value as a word.
    pub fn as_word(&self) -> Option<&str> {
        match self {
            Lit::Word(w) => Some(w),
            _ => None,
        }
    }
}

impl Dtype {
    /// The text form's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::I32 => "i32",
        }
    }
}

impl Role {
    /// The text form's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Weight => "weight",
            Role::Shared => "shared",
            Role::State => "state",
            Role::Output => "output",
            Role::Temp => "temp",
        }
    }

    /// Whether the simulator's bindings must supply this tensor.
    pub fn is_bound(self) -> bool {
        matches!(self, Role::Input | Role::Weight | Role::Shared | Role::State)
    }
}

impl Home {
    /// The text form's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Home::Hbm => "hbm",
            Home::Ddr => "ddr",
            Home::Sram => "sram",
            Home::Host => "host",
        }
    }
}

/// A float literal in the JSON form: a number, or — since JSON has none — `"inf"`, `"-inf"` or
/// `"nan"` for the non-finite values the text form writes (found by fuzzing: they became
/// `null`, which does not read back).
mod float_json {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &f64, s: S) -> Result<S::Ok, S::Error> {
        match *value {
            v if v.is_finite() => s.serialize_f64(v),
            v if v.is_nan() => s.serialize_str("nan"),
            v if v > 0.0 => s.serialize_str("inf"),
            _ => s.serialize_str("-inf"),
        }
    }

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Repr {
        Number(f64),
        Word(String),
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        match Repr::deserialize(d)? {
            Repr::Number(v) => Ok(v),
            Repr::Word(w) => match w.as_str() {
                "inf" => Ok(f64::INFINITY),
                "-inf" => Ok(f64::NEG_INFINITY),
                "nan" => Ok(f64::NAN),
                other => Err(serde::de::Error::custom(format!("`{other}` is not a float"))),
            },
        }
    }
}
