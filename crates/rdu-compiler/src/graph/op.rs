//! `Op`: an op of `docs/LANGUAGE.md` with its attributes typed — the op table's
//! [`rdu_spatial::TypedOp`], one variant per op (`dequant`, lowering's own, included), its
//! attributes as fields. Operands are the node's input values, in the order the language lists
//! them; the facts shared with lowering and the simulator (name, operands, outputs, …) are the
//! table's, reached through [`Op::kind`].

pub use rdu_spatial::op::{Act, GroupScore, KMap, RopeStyle, Score};
pub use rdu_spatial::TypedOp as Op;
