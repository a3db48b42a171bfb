//! The target: chip descriptions (SN50, SN40L), the `SpatialProgram` IR and its text form,
//! the bundle format, the CPU simulator that executes spatial programs, and the cost model.
//!
//! Nothing here knows about model families or the program language: a spatial program is
//! data, and this crate only reads, writes, checks, costs and executes it.

pub mod bundle;
pub mod chip;
pub mod cost;
pub mod manifest;
pub mod memory;
pub mod rope;
