//! The op table: every op of the program language (`docs/LANGUAGE.md`) and of spatial programs
//! (`docs/SPATIAL.md`, which adds the lowering's own `dequant`), declared once, one row per op:
//! its text form, operand names, outputs, typed attributes and the facts the compiler and the
//! simulator need (its cost class, whether it anchors a stage, which operands it folds from
//! stored blocks, whether it writes a state in place). From these rows (`table.rs` generates them) come
//! [`Op`], [`Facts`], the struct of each op's attributes ([`attrs`]), [`TypedOp`] and the
//! dispatch to every kernel ([`Visitor`]); op names and attribute keys are spelled nowhere
//! else. ARCHITECTURE.md says how to add an op.

#[macro_use]
mod table;
mod attr;

use attr::key;
pub use attr::{
    Act, AttrFault, AttrLit, AttrValue, Axes, Count, Dims, EvenPositive, Flag, Float, Given, GroupScore, KMap, Key,
    NonNegative, OpAttrs, Positive, RopeStyle, Score, UnitOffset, Visit, Visitor,
};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Any number of operands (`concat`'s most).
const MANY: usize = usize::MAX;
/// One weight read row by row, the second operand.
const ROW: Weights = Weights::At(1);

op_table! {
    Add = "add" [a, b] (2, 2).cost(Elementwise);
    Sub = "sub" [a, b] (2, 2).cost(Elementwise);
    Mul = "mul" [a, b] (2, 2).cost(Elementwise);
    Scale = "scale" [x] (1, 1).cost(Elementwise) { by: Float };
    Neg = "neg" [x] (1, 1).cost(Elementwise);
    Exp = "exp" [x] (1, 1).cost(Elementwise);
    Sigmoid = "sigmoid" [x] (1, 1).cost(Elementwise);
    Silu = "silu" [x] (1, 1).cost(Elementwise);
    Softplus = "softplus" [x] (1, 1).cost(Elementwise);
    GeluTanh = "gelu_tanh" [x] (1, 1).cost(Elementwise);
    /// `x / √(mean(x²) + eps) · (w + offset)` over the last axis.
    RmsNorm = "rms_norm" [x, w] (2, 2).cost(Elementwise) { eps: NonNegative, offset: UnitOffset [spatial = 0.0] };
    /// `x / √(Σx² + eps)` over the last axis.
    L2Norm = "l2_norm" [x] (1, 1).cost(Elementwise) { eps: NonNegative };
    /// `x Wᵀ (+ b)`: inputs `x, W` or `x, W, b`.
    Linear = "linear" [x, W, b] (2, 3).cost(Product).heavy().weights(ROW);
    LinearHeads = "linear_heads" [x, W] (2, 2).cost(HeadProduct).heavy().weights(ROW);
    Embed = "embed" [ids, E] (2, 2).cost(Lookup).heavy().weights(ROW).activation_addressed();
    /// Argmax, cache_put and route stream nothing (a row of logits, the new cache rows
    /// written in place, a router's scores): each is the epilogue of the stage before it.
    Argmax = "argmax" [x] (1, 1).cost(Elementwise);
    Reshape = "reshape" [x] (1, 1).cost(Elementwise) { shape: Dims [literal] };
    Slice = "slice" [x] (1, 1).cost(Elementwise) { axis: Count, start: Count, len: Count };
    Concat = "concat" [] (2, MANY).cost(Elementwise) { axis: Count };
    Transpose = "transpose" [x] (1, 1).cost(Elementwise) { perm: Axes };
    Rope = "rope" [x, cos, sin, pos] (4, 4).cost(Elementwise) {
        dim: EvenPositive,
        style: RopeStyle [spatial = RopeStyle::Neox],
    };
    CachePut = "cache_put" [C, x, pos] (3, 3).cost(CacheWrite).in_place();
    /// A prefill chunk passes its own keys and values after `pos`, and attention sinks (one
    /// logit per head) come last (see docs/LANGUAGE.md): 4 to 7 operands.
    Attend = "attend" [q, K, V, pos, k, v, sinks] (4, 7).cost(Attention(3)).heavy() {
        scale: Float,
        window: Positive [optional],
    };
    AttendMla = "attend_mla" [q, C, pos, c] (3, 4).cost(Attention(2)).heavy() {
        scale: Float,
        latent: Positive,
        window: Positive [optional],
    };
    /// Latent attention through the up-projections (the unabsorbed form): inputs
    /// `q, C, Wk, Wv, pos` and, for a prefill chunk, its own latents `c`.
    AttendMlaUp = "attend_mla_up" [q, C, Wk, Wv, pos, c] (5, 6).cost(AttentionUp(4)).heavy() {
        scale: Float,
        latent: Positive,
        window: Positive [optional],
    };
    /// Inputs `x, w` or `x, w, state`.
    ConvStep = "conv_step" [x, w, state] (2, 3).cost(Recurrent).heavy();
    ConvShift = "conv_shift" [state, x] (2, 2).cost(Recurrent);
    DeltaScan = "delta_scan" [q, k, v, g, beta] (5, 5).cost(Recurrent).heavy() { kmap: KMap [default = KMap::Grouped] };
    /// Inputs `S, q, k, v, g, beta`; outputs `o, S'`.
    DeltaStep = "delta_step" [S, q, k, v, g, beta] (6, 6).cost(Recurrent).outputs(2).heavy().in_place() {
        kmap: KMap [default = KMap::Grouped],
    };
    /// Inputs `logits` or `logits, bias` (a per-expert bias that only chooses); outputs `w, idx`.
    Route = "route" [logits, bias] (1, 2).cost(Elementwise).outputs(2) {
        k: Positive,
        norm: Flag [spatial = false],
        scale: Float [spatial = 1.0],
        groups: Positive [spatial = 1],
        topk_groups: Positive [spatial = groups],
        score: Score [default = Score::Softmax],
        group_score: GroupScore [default = GroupScore::Max],
    };
    /// With biases, also `bg, bu` (read one expert at a time, never Q8_0); `limit` goes with
    /// `act=swiglu_oai`.
    Experts = "experts" [x, w, idx, Wg, Wu, Wd, bg, bu] (6, 8)
        .cost(Experts)
        .heavy()
        .weights(Weights::Experts(3, 6))
        .activation_addressed() {
        act: Act [spatial = Act::Silu],
        limit: Float [optional],
    };
    /// The sum of the operand over the chips of a tensor-parallel program (identity on one chip).
    AllReduce = "all_reduce" [x] (1, 1).cost(Collective);
    /// This chip's part of a value every chip holds whole: the `chips` equal parts of `axis`,
    /// chip c taking the c-th (what a weight split alike along its `in` axis meets).
    Shard = "shard" [x] (1, 1).cost(Elementwise) { axis: Count, chips: Positive };
    /// A weight stored in a block format (Q8_0, FP8, MXFP4) as dense f32 (inserted by lowering
    /// for weight views; not in the language).
    Dequant = "dequant" [x] (1, 1).cost(Elementwise).lowering_only();
}

/// Which operands an op reads as weights it can fold from their stored blocks (Q8_0, FP8,
/// MXFP4), or read in place in a packed block format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    None,
    /// One weight, read row by row, at this operand.
    At(usize),
    /// Stacked expert weights at operands `start..end`, read one expert at a time.
    Experts(usize, usize),
}

/// How an op's work is counted: its FLOPs, the bytes it reads from HBM and sends over the
/// chips' link, and whether and how it is tiled. Every row names one (`.cost(…)`, required by
/// the row's grammar); the formulas are `rdu-compiler`'s, by class and never by op
/// (`lower/work.rs`'s `op_work`, `lower/passes/tile.rs`), each a `match` over every class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// One FLOP per element of its first output; every weight, state or shared operand read
    /// whole from HBM. Not tiled.
    Elementwise,
    /// `x Wᵀ`, the weight at operand 1: two FLOPs per output element per element of the
    /// weight's last axis, its operands read as `Elementwise`'s. Tiled along the output's
    /// features, a weight row each.
    Product,
    /// A product per head (`W` is `[heads, out, in]`): counted as [`Cost::Product`]; tiled along
    /// the heads, a head's matrix each.
    HeadProduct,
    /// A table lookup: one row of the table (operand 1, as stored) per id of operand 0; one FLOP
    /// per output element. Not tiled.
    Lookup,
    /// The top-k experts of each row (operands `x, w, idx`, then the stacked expert matrices):
    /// only the experts the rows choose are read, at most every expert once. Tiled along the
    /// output's features.
    Experts,
    /// Attention over a cache, with `pos` at this operand: every cached position of every kv
    /// head read once per step, a prefill chunk's own keys and values (the operands after `pos`)
    /// attended to as well. Tiled along the heads.
    Attention(usize),
    /// Latent attention through the up-projections, with `pos` at this operand: every cached
    /// latent and both up-projections read once, each head widening every entry's latent into
    /// its key and value, then attending. Tiled along the heads.
    AttentionUp(usize),
    /// An all-reduce over the chips' link (a ring: `2(tp − 1)/tp` of the tensor sent, as f32);
    /// one FLOP per output element, nothing read from HBM. Not tiled.
    Collective,
    /// New cache rows written in place, at the cache's stored width; the rest of the cache
    /// neither read nor written. Not tiled.
    CacheWrite,
    /// A recurrent update: its states read and written back whole, six FLOPs per element of its
    /// largest operand or output. Not tiled.
    Recurrent,
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
    /// The operands' names, for messages (none for `concat`'s any number).
    pub roles: &'static [&'static str],
    /// The attribute keys the op takes, in the order the language reads them.
    pub attrs: &'static [Key],
    /// A positional literal follows the first operand (`reshape`'s shape list).
    pub shape_literal: bool,
    /// Streams weights, reads a cache or reads and writes a whole state: anchors a fused stage
    /// of its own. (Writing a cache's new rows, `cache_put`, streams nothing.)
    pub heavy: bool,
    /// The operands that may be stored in a block format and are folded block by block.
    pub weights: Weights,
    /// Which weight rows it reads depends on its activations (table rows, chosen experts),
    /// so its weights cannot be streamed ahead of them.
    pub activation_addressed: bool,
    /// An update (`S <- op(S, ...)`) whose first operand is the state writes it in place.
    pub in_place: bool,
    /// Inserted by lowering; not an op of the program language.
    pub lowering_only: bool,
    /// How its work is counted and tiled.
    pub cost: Cost,
}

impl Facts {
    /// `fields`: the attributes struct's fields, the literal first when `literal`.
    const fn new(
        name: &'static str,
        operands: (usize, usize),
        roles: &'static [&'static str],
        fields: &'static [Key],
        literal: bool,
        cost: Cost,
    ) -> Facts {
        Facts {
            name,
            operands,
            outputs: 1,
            roles,
            attrs: if literal { fields.split_at(1).1 } else { fields },
            shape_literal: literal,
            heavy: false,
            weights: Weights::None,
            activation_addressed: false,
            in_place: false,
            lowering_only: false,
            cost,
        }
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
    const fn activation_addressed(self) -> Facts {
        Facts { activation_addressed: true, ..self }
    }
    const fn in_place(self) -> Facts {
        Facts { in_place: true, ..self }
    }
    const fn lowering_only(self) -> Facts {
        Facts { lowering_only: true, ..self }
    }
}

impl Op {
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
    pub const fn attrs(self) -> &'static [Key] {
        self.facts().attrs
    }

    /// Whether the op anchors a fused stage of its own (it streams weights, caches or states).
    pub const fn is_heavy(self) -> bool {
        self.facts().heavy
    }

    /// Whether the op consumes a weight stored in a block format (Q8_0, FP8, MXFP4) block by
    /// block (`fold=`).
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

    /// How the op's work is counted and tiled (its row's `.cost(…)`).
    pub const fn cost(self) -> Cost {
        self.facts().cost
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

impl TypedOp {
    /// The op's name in program text.
    pub const fn name(&self) -> &'static str {
        self.kind().name()
    }

    /// The least and the most tensor operands the op takes.
    pub const fn arity(&self) -> (usize, usize) {
        self.kind().arity()
    }

    /// How many values the op produces.
    pub const fn n_outputs(&self) -> usize {
        self.kind().n_outputs()
    }

    /// The attributes as written, `key=value` in table order (defaults and absent optional
    /// ones left out).
    pub fn attr_texts(&self) -> Vec<(Key, String)> {
        self.visit(Texts { shown: false }).1
    }

    /// The positional literal as written (`reshape`'s shape), if the op takes one.
    pub fn literal_text(&self) -> Option<String> {
        self.visit(Texts { shown: false }).0.map(|(_, text)| text)
    }
}

/// Every op's literal and attributes as text (see [`OpAttrs::texts`]).
struct Texts {
    shown: bool,
}

impl Visitor for Texts {
    type Out = (Option<(Key, String)>, Vec<(Key, String)>);
}

impl<A: OpAttrs> Visit<A> for Texts {
    fn visit(self, attrs: &A) -> Self::Out {
        (attrs.literal_text(), attrs.texts(self.shown))
    }
}

impl fmt::Display for TypedOp {
    /// The name, the literal and the attributes: `rope dim=16 style=neox`, `reshape shape=[2, 8]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let (literal, attrs) = self.visit(Texts { shown: true });
        for (key, text) in literal.into_iter().chain(attrs) {
            write!(f, " {key}={text}")?;
        }
        Ok(())
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
    use super::{AttrFault, Op};
    use crate::program::Lit;

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

    #[test]
    fn attention_costs_name_the_pos_operand() {
        use super::Cost;
        for op in Op::ALL {
            if let Cost::Attention(pos) | Cost::AttentionUp(pos) = op.cost() {
                assert_eq!(op.facts().roles.get(pos), Some(&"pos"), "{op}");
            }
        }
    }

    #[test]
    fn every_op_names_its_operands() {
        for op in Op::ALL {
            let (_, most) = op.arity();
            let roles = op.facts().roles;
            assert!(roles.len() == most || (most == usize::MAX && roles.is_empty()), "{op}: {roles:?}");
        }
    }

    #[test]
    fn attributes_read_as_written() {
        use super::{Given, KMap, Key, TypedOp};
        let ints = |pairs: &[(&'static str, i64)]| pairs.iter().map(|&(k, v)| (k, Lit::Int(v))).collect::<Vec<_>>();
        let read = |op: Op, attrs: &[(&'static str, Lit)]| {
            TypedOp::language(op, &Given { attrs: attrs.iter().map(|(k, v)| (*k, v)).collect(), literal: None })
        };
        let route = ints(&[("k", 2), ("norm", 1), ("scale", 3), ("groups", 4), ("topk_groups", 2)]);
        let typed = read(Op::Route, &route).unwrap();
        let (score, group_score) = (super::Score::Softmax, super::GroupScore::Max);
        assert_eq!(
            typed,
            TypedOp::Route { k: 2, norm: true, scale: 3.0, groups: 4, topk_groups: 2, score, group_score }
        );
        assert_eq!(
            typed.to_string(),
            "route k=2 norm=1 scale=3.0 groups=4 topk_groups=2 score=softmax group_score=max"
        );
        // A default is neither required nor written.
        let grouped = read(Op::DeltaScan, &[]).unwrap();
        assert_eq!(grouped, TypedOp::DeltaScan { kmap: KMap::Grouped });
        assert!(grouped.attr_texts().is_empty());
        // Every fault, in table order, then the keys.
        let faults = read(Op::Slice, &ints(&[("axis", -1), ("len", 2), ("bogus", 1), ("len", 3)])).unwrap_err();
        assert_eq!(
            faults,
            [
                AttrFault::Bad { at: 0, key: Key::Axis, want: "a non-negative integer".into() },
                AttrFault::Missing(Key::Start),
                AttrFault::Unknown { at: 2 },
                AttrFault::Twice { at: 3, key: Key::Len },
            ]
        );
        // A spatial program may leave out what the table gives a value there.
        let given = ints(&[("k", 1), ("groups", 4)]);
        let given = Given { attrs: given.iter().map(|(k, v)| (*k, v)).collect(), literal: None };
        let spatial = <super::attrs::Route as super::OpAttrs>::spatial(&given).unwrap();
        assert_eq!((spatial.norm, spatial.scale, spatial.topk_groups), (false, 1.0, 4));
    }
}
