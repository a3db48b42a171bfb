//! The CPU simulator: executes a `SpatialProgram` as written — sections, stages and ops in
//! order, tiled ops tile by tile into a zeroed output, Q8_0 weights folded block by block —
//! with f32 accumulation, as the chip would. It is also the host's runtime engine.
//!
//! A tensor-parallel program runs on one thread per chip (`simulate_chip`), each with its own
//! slices bound, `all_reduce` summing over them through a [`Collective`]; without one (or on
//! one chip) `all_reduce` is the identity.

mod attention;
mod bind;
mod call;
mod collective;
mod elementwise;
mod exec;
mod folded;
mod mathf;
mod matmul;
mod moe;
mod norm;
mod packed;
mod products;
pub mod profile;
mod recurrent;
mod region;
mod rows;
mod shape;
mod tensor;
mod tiled;
mod waves;

use std::collections::BTreeMap;

pub use bind::{MapBindings, SimBindings, WeightSlab};
pub use collective::{AllReduce, Collective};
pub use packed::{
    can_pack, dot_q8_row_plain, dot_q8_row_with, q8_kernel, widen_fp8_row, widen_row, widen_row_plain, PackedWeight,
    Q8Kernel,
};
pub use tensor::{strides, SimData, SimTensor};

use crate::program::SpatialProgram;

/// What one step of a program produced.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOut {
    /// Every name in `program.outputs`.
    pub outputs: BTreeMap<String, SimTensor>,
    /// The final value of every declared state.
    pub states: BTreeMap<String, SimTensor>,
    /// Each `route` op's chosen experts (`[n, k]` i32), by the name it binds them to.
    pub routes: BTreeMap<String, SimTensor>,
}

/// Why a program could not be executed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    #[error("stage {stage}, op {index} `{op}`: {message}")]
    Op { stage: String, index: usize, op: String, message: String },
    #[error("missing binding for {role} {name}")]
    Missing { name: String, role: String },
    #[error("binding {name}: {message}")]
    Binding { name: String, message: String },
    #[error("output {name} is never produced")]
    NoOutput { name: String },
    #[error("{message}")]
    Invalid { message: String },
}

/// Runs one step of `program`; `env` supplies every input, weight, shared and state tensor.
pub fn simulate(program: &SpatialProgram, env: &dyn SimBindings) -> Result<SimOut, SimError> {
    let (mut states, mut routes) = (BTreeMap::new(), BTreeMap::new());
    let outputs = exec::run(program, env, &mut states, false, None, Some(&mut routes))?;
    Ok(SimOut { outputs, states, routes })
}

/// One chip's step of a tensor-parallel program: `env` binds this chip's slices, `states`
/// (when `in_place`) its share of the carried state, and every `all_reduce` sums over the
/// group through `collective`; each `route` op's chosen experts go into `routes` when given
/// (as [`SimOut::routes`]). On failure the group is aborted, so the other chips return too.
pub fn simulate_chip(
    program: &SpatialProgram,
    env: &dyn SimBindings,
    states: &mut BTreeMap<String, SimTensor>,
    in_place: bool,
    collective: &dyn Collective,
    chip: usize,
    routes: Option<&mut BTreeMap<String, SimTensor>>,
) -> Result<BTreeMap<String, SimTensor>, SimError> {
    let result = exec::run(program, env, states, in_place, Some((collective, chip)), routes);
    if let Err(e) = &result {
        collective.abort(&e.to_string());
    }
    result
}

/// Runs one step with the states held by the caller: each state found in `states` is read from
/// there (others from `env`) and updated in place — a KV cache is written, never copied. On
/// return (also on error) `states` holds the latest value of every state the step reached.
/// A state declared `storage=bf16` must hold bf16 values, as every state this function
/// returns does (a `cache_put` into it rounds only the rows it writes; checked in debug builds).
pub fn simulate_in_place(
    program: &SpatialProgram,
    env: &dyn SimBindings,
    states: &mut BTreeMap<String, SimTensor>,
) -> Result<BTreeMap<String, SimTensor>, SimError> {
    exec::run(program, env, states, true, None, None)
}

/// A kernel's complaint, before the executor says which op made it.
pub(crate) fn invalid<T>(message: impl Into<String>) -> Result<T, SimError> {
    Err(SimError::Invalid { message: message.into() })
}
