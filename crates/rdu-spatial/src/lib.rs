//! The target: chip descriptions (SN50, SN40L), the `SpatialProgram` IR and its text form,
//! the bundle format, the CPU simulator that executes spatial programs, and the cost model.
//!
//! Nothing here knows about model families or the program language: a spatial program is
//! data, and this crate only reads, writes, checks, costs and executes it.

pub mod bf16;
pub mod blocks;
pub mod bundle;
pub mod chip;
pub mod cost;
pub mod fill;
pub mod manifest;
pub mod memory;
pub mod names;
pub mod op;
pub mod program;
pub mod q8;
pub mod rope;
pub mod seeded;
pub mod sim;
pub mod tensor_parallel;
pub mod text;
pub mod view;

pub use op::{Op, TypedOp};
pub use program::{
    Arg, Dtype, Fold, Home, KernelOp, Lit, Role, Section, SpatialProgram, Stage, Storage, TensorDecl, Tiling, TpInfo,
    TpSplit,
};
pub use q8::{Q8Block, Q8Weight};
pub use seeded::{seeded_weight, uniform_at, Seeded};
pub use sim::{
    simulate, simulate_in_place, MapBindings, SimBindings, SimData, SimError, SimOut, SimTensor, WeightSlab,
};
pub use text::TextError;
