//! The op table: every op of the program language (`docs/LANGUAGE.md`) and of spatial programs
//! (`docs/SPATIAL.md`, which adds the lowering's own `dequant`), with what the compiler and the
//! simulator need to know about it — its text form, operands, outputs, attribute keys, whether
//! it anchors a stage, which operands it folds from Q8_0 blocks, whether it writes a state in
//! place. Everything else reads these facts here instead of matching op names.
//!
//! Adding an op: a variant and its row in [`Op::facts`], its typed form in the compiler
//! (`graph::Op`, `front/attrs.rs`, `graph/infer`, `graph/eval`), and its simulator kernel
//! (`sim/ops.rs::dispatch`). ARCHITECTURE.md walks through it.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// An op, by name; its attributes live beside it (`KernelOp::attrs`, or typed in the
/// compiler's `graph::Op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Op {
    Add,
    Sub,
    Mul,
    Scale,
    Neg,
    Exp,
    Sigmoid,
    Silu,
    Softplus,
    GeluTanh,
    RmsNorm,
    L2Norm,
    Linear,
    LinearHeads,
    Embed,
    Argmax,
    Reshape,
    Slice,
    Concat,
    Transpose,
    Rope,
    CachePut,
    Attend,
    AttendMla,
    AttendMlaUp,
    ConvStep,
    ConvShift,
    DeltaScan,
    DeltaStep,
    Route,
    Experts,
    AllReduce,
    Shard,
    /// A Q8_0 weight as dense f32 (inserted by lowering for weight views; not in the language).
    Dequant,
}

/// Which operands an op reads as weights it can fold from Q8_0 blocks (or read in place in
/// a packed block format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    None,
    /// One weight, read row by row, at this operand.
    At(usize),
    /// Stacked expert weights at operands `start..end`, read one expert at a time.
    Experts(usize, usize),
}

/// What the table says about one op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Facts {
    /// The name in program text (both the language and spatial programs).
    pub name: &'static str,
    /// The least and the most tensor operands (`usize::MAX`: any number).
    pub operands: (usize, usize),
    /// How many values the op produces.
    pub outputs: usize,
    /// The attribute keys the op takes, in the order the language reads them.
    pub attrs: &'static [&'static str],
    /// A positional literal follows the first operand (`reshape`'s shape list).
    pub shape_literal: bool,
    /// Streams weights, reads a cache or reads and writes a whole state: anchors a fused stage
    /// of its own. (Writing a cache's new rows, `cache_put`, streams nothing.)
    pub heavy: bool,
    /// The operands that may be stored Q8_0 and are folded block by block.
    pub weights: Weights,
    /// Which weight rows it reads depends on its activations (table rows, chosen experts),
    /// so its weights cannot be streamed ahead of them.
    pub activation_addressed: bool,
    /// An update (`S <- op(S, ...)`) whose first operand is the state writes it in place.
    pub in_place: bool,
    /// Inserted by lowering; not an op of the program language.
    pub lowering_only: bool,
}

impl Facts {
    const fn new(name: &'static str, least: usize, most: usize) -> Facts {
        Facts {
            name,
            operands: (least, most),
            outputs: 1,
            attrs: &[],
            shape_literal: false,
            heavy: false,
            weights: Weights::None,
            activation_addressed: false,
            in_place: false,
            lowering_only: false,
        }
    }
    const fn attrs(self, attrs: &'static [&'static str]) -> Facts {
        Facts { attrs, ..self }
    }
    const fn outputs(self, outputs: usize) -> Facts {
        Facts { outputs, ..self }
    }
    const fn heavy(self) -> Facts {
        Facts { heavy: true, ..self }
    }
    const fn weights(self, weights: Weights) -> Facts {
        Facts { weights, ..self }
    }
}

impl Op {
    /// Every op, in table order.
    pub const ALL: [Op; 34] = [
        Op::Add,
        Op::Sub,
        Op::Mul,
        Op::Scale,
        Op::Neg,
        Op::Exp,
        Op::Sigmoid,
        Op::Silu,
        Op::Softplus,
        Op::GeluTanh,
        Op::RmsNorm,
        Op::L2Norm,
        Op::Linear,
        Op::LinearHeads,
        Op::Embed,
        Op::Argmax,
        Op::Reshape,
        Op::Slice,
        Op::Concat,
        Op::Transpose,
        Op::Rope,
        Op::CachePut,
        Op::Attend,
        Op::AttendMla,
        Op::AttendMlaUp,
        Op::ConvStep,
        Op::ConvShift,
        Op::DeltaScan,
        Op::DeltaStep,
        Op::Route,
        Op::Experts,
        Op::AllReduce,
        Op::Shard,
        Op::Dequant,
    ];

    /// The table row of the op.
    pub const fn facts(self) -> Facts {
        const ROW: Weights = Weights::At(1);
        let f = Facts::new;
        match self {
            Op::Add => f("add", 2, 2),
            Op::Sub => f("sub", 2, 2),
            Op::Mul => f("mul", 2, 2),
            Op::Scale => f("scale", 1, 1).attrs(&["by"]),
            Op::Neg => f("neg", 1, 1),
            Op::Exp => f("exp", 1, 1),
            Op::Sigmoid => f("sigmoid", 1, 1),
            Op::Silu => f("silu", 1, 1),
            Op::Softplus => f("softplus", 1, 1),
            Op::GeluTanh => f("gelu_tanh", 1, 1),
            Op::RmsNorm => f("rms_norm", 2, 2).attrs(&["eps", "offset"]),
            Op::L2Norm => f("l2_norm", 1, 1).attrs(&["eps"]),
            // `x Wᵀ (+ b)`: inputs `x, W` or `x, W, b`.
            Op::Linear => f("linear", 2, 3).heavy().weights(ROW),
            Op::LinearHeads => f("linear_heads", 2, 2).heavy().weights(ROW),
            Op::Embed => Facts { activation_addressed: true, ..f("embed", 2, 2).heavy().weights(ROW) },
            // Argmax, cache_put and route stream nothing (a row of logits, the new cache rows
            // written in place, a router's scores): each is the epilogue of the stage before it.
            Op::Argmax => f("argmax", 1, 1),
            Op::Reshape => Facts { shape_literal: true, ..f("reshape", 1, 1) },
            Op::Slice => f("slice", 1, 1).attrs(&["axis", "start", "len"]),
            Op::Concat => f("concat", 2, usize::MAX).attrs(&["axis"]),
            Op::Transpose => f("transpose", 1, 1).attrs(&["perm"]),
            Op::Rope => f("rope", 4, 4).attrs(&["dim", "style"]),
            Op::CachePut => Facts { in_place: true, ..f("cache_put", 3, 3) },
            // A prefill chunk passes its own keys and values after `pos` (see docs/LANGUAGE.md).
            Op::Attend => f("attend", 4, 6).attrs(&["scale", "window"]).heavy(),
            Op::AttendMla => f("attend_mla", 3, 4).attrs(&["scale", "latent", "window"]).heavy(),
            // Latent attention through the up-projections (the unabsorbed form): inputs
            // `q, C, Wk, Wv, pos` and, for a prefill chunk, its own latents `c`.
            Op::AttendMlaUp => f("attend_mla_up", 5, 6).attrs(&["scale", "latent", "window"]).heavy(),
            // Inputs `x, w` or `x, w, state`.
            Op::ConvStep => f("conv_step", 2, 3).heavy(),
            Op::ConvShift => f("conv_shift", 2, 2),
            Op::DeltaScan => f("delta_scan", 5, 5).attrs(&["kmap"]).heavy(),
            // Inputs `S, q, k, v, g, beta`; outputs `o, S'`.
            Op::DeltaStep => Facts { in_place: true, ..f("delta_step", 6, 6).attrs(&["kmap"]).outputs(2).heavy() },
            // Inputs `logits` or `logits, bias` (a per-expert bias that only chooses); outputs `w, idx`.
            Op::Route => f("route", 1, 2)
                .attrs(&["k", "norm", "scale", "groups", "topk_groups", "score", "group_score"])
                .outputs(2),
            Op::Experts => Facts {
                activation_addressed: true,
                ..f("experts", 6, 6).attrs(&["act"]).heavy().weights(Weights::Experts(3, 6))
            },
            // The sum of the operand over the chips of a tensor-parallel program.
            Op::AllReduce => f("all_reduce", 1, 1),
            // This chip's part of a value every chip holds whole: the `chips` equal parts of
            // `axis`, chip c taking the c-th (what a weight split alike along its `in` axis meets).
            Op::Shard => f("shard", 1, 1).attrs(&["axis", "chips"]),
            Op::Dequant => Facts { lowering_only: true, ..f("dequant", 1, 1) },
        }
    }

    /// The op's name in program text.
    pub const fn name(self) -> &'static str {
        self.facts().name
    }

    /// The least and the most tensor operands the op takes (`concat` takes at least two).
    pub const fn arity(self) -> (usize, usize) {
        self.facts().operands
    }

    /// How many values the op produces.
    pub const fn n_outputs(self) -> usize {
        self.facts().outputs
    }

    /// The attribute keys the op takes.
    pub const fn attrs(self) -> &'static [&'static str] {
        self.facts().attrs
    }

    /// Whether the op anchors a fused stage of its own (it streams weights, caches or states).
    pub const fn is_heavy(self) -> bool {
        self.facts().heavy
    }

    /// Whether the op consumes a Q8_0 weight block by block.
    pub fn folds_q8(self) -> bool {
        self.facts().weights != Weights::None
    }

    /// The operand the op reads as one weight row by row (in place when packed), if any.
    pub fn row_weight(self) -> Option<usize> {
        match self.facts().weights {
            Weights::At(i) => Some(i),
            _ => None,
        }
    }

    /// The operands holding stacked expert weights, read one expert at a time.
    pub fn expert_weights(self) -> Range<usize> {
        match self.facts().weights {
            Weights::Experts(start, end) => start..end,
            _ => 0..0,
        }
    }

    /// Whether its weight reads depend on its activations (see [`Facts::activation_addressed`]).
    pub const fn is_activation_addressed(self) -> bool {
        self.facts().activation_addressed
    }

    /// Whether an update whose first operand is its state writes that state in place.
    pub const fn writes_state_in_place(self) -> bool {
        self.facts().in_place
    }

    /// Whether a positional literal follows the first operand (`reshape`'s shape).
    pub const fn takes_shape_literal(self) -> bool {
        self.facts().shape_literal
    }

    /// Whether the op is one of the program language's (not inserted by lowering).
    pub const fn in_language(self) -> bool {
        !self.facts().lowering_only
    }

    /// The ops of the program language, in table order.
    pub fn language() -> impl Iterator<Item = Op> {
        Op::ALL.into_iter().filter(|op| op.in_language())
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A name that is no op.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown op `{0}`")]
pub struct UnknownOp(pub String);

impl FromStr for Op {
    type Err = UnknownOp;

    fn from_str(name: &str) -> Result<Op, UnknownOp> {
        Op::ALL.into_iter().find(|op| op.name() == name).ok_or_else(|| UnknownOp(name.to_string()))
    }
}

impl Serialize for Op {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Op {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Op, D::Error> {
        let name = String::deserialize(d)?;
        name.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::Op;

    #[test]
    fn every_name_reads_back_as_its_op() {
        for op in Op::ALL {
            assert_eq!(op.name().parse::<Op>(), Ok(op));
            assert_eq!(op.to_string(), op.name());
            let json = serde_json::to_string(&op).unwrap();
            assert_eq!(json, format!("\"{}\"", op.name()));
            assert_eq!(serde_json::from_str::<Op>(&json).unwrap(), op);
        }
        assert_eq!("matmul".parse::<Op>().unwrap_err().to_string(), "unknown op `matmul`");
        assert!(serde_json::from_str::<Op>("\"matmul\"").is_err());
    }

    #[test]
    fn the_table_is_consistent() {
        let mut names: Vec<&str> = Op::ALL.iter().map(|op| op.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Op::ALL.len(), "names are unique");
        for op in Op::ALL {
            let (least, most) = op.arity();
            assert!(least >= 1 && least <= most, "{op}");
            assert!(op.n_outputs() >= 1, "{op}");
            if let Some(i) = op.row_weight() {
                assert!(i < least, "{op}: its weight operand is always present");
            }
            assert!(op.expert_weights().end <= least, "{op}");
            assert!(!op.is_activation_addressed() || op.folds_q8(), "{op}: addresses weights it reads");
        }
        assert_eq!(Op::language().count(), Op::ALL.len() - 1);
        assert!(!Op::Dequant.in_language());
    }
}
