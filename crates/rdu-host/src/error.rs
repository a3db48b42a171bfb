//! `HostError`: every way loading a bundle, binding a checkpoint, stepping or sampling can fail, one line each.

use rdu_checkpoint::{CheckpointError, GgmlType};
use rdu_spatial::bundle::BundleError;
use rdu_spatial::{SimError, TextError};

/// One error type for the crate. Every message is one lowercase line that names the bundle,
/// file, layer or tensor it is about and says what to do. (Shapes are boxed slices to keep
/// the error small enough to return by value.)
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{dir} is not an rdu bundle (no manifest.json marked \"rdu-bundle\"); pass the directory `rdu lower -o DIR` wrote")]
    NotABundle { dir: String },
    #[error("bundle {dir}: {source}; re-lower the bundle with `rdu lower`")]
    Bundle { dir: String, source: BundleError },
    #[error("bundle {dir}: {file}: {source}; re-lower the bundle with `rdu lower`")]
    Program { dir: String, file: String, source: TextError },
    #[error("{source}")]
    Checkpoint { source: CheckpointError },
    #[error("{file}: no tensor `{checkpoint}` (the bundle's `{tensor}` needs it); use the checkpoint the bundle was lowered for")]
    MissingTensor { file: String, tensor: String, checkpoint: String },
    #[error("{file}: tensor `{checkpoint}` gives `{tensor}` the shape {found:?} but the bundle declares {expected:?}; use the checkpoint the bundle was lowered for")]
    TensorShape { file: String, tensor: String, checkpoint: String, expected: Box<[usize]>, found: Box<[usize]> },
    #[error("{file}: tensor `{checkpoint}` is {ggml_type}, which cannot serve `{tensor}` stored {storage}; lower with --storage dense or use a {storage} or f32/f16 checkpoint")]
    StorageType { file: String, tensor: String, checkpoint: String, ggml_type: GgmlType, storage: &'static str },
    #[error("{file}: tensor `{checkpoint}` of `{tensor}`: {problem}; re-lower the bundle for this checkpoint")]
    Assemble { file: String, tensor: String, checkpoint: String, problem: String },
    #[error("manifest tensor `{tensor}` has dtype {dtype}; this host loads f32 tensors only, re-lower the bundle")]
    TensorDtype { tensor: String, dtype: String },
    #[error("bundle {dir}: shared tensor `{name}`: {problem}; re-lower the bundle")]
    Shared { dir: String, name: String, problem: String },
    #[error("bundle {dir}: runtime input `{name}`: {problem}; re-lower the bundle")]
    Input { dir: String, name: String, problem: String },
    #[error("{program}: `{tensor}` is bound to `{target}`: {problem}; re-lower the bundle")]
    Binding { program: String, tensor: String, target: String, problem: String },
    #[error("{program}: the program declares `{tensor}` but the layer's bind does not map it; re-lower the bundle")]
    Unbound { program: String, tensor: String },
    #[error("{program}: `{tensor}` is bound to `{target}` of shape {found:?} but the program declares {declared:?}; re-lower the bundle")]
    BindingShape { program: String, tensor: String, target: String, declared: Box<[usize]>, found: Box<[usize]> },
    #[error("token id {token} is out of range for a vocabulary of {vocab} tokens; pass ids below {vocab}")]
    Token { token: u32, vocab: usize },
    #[error("position {pos} is past the context of {ctx} positions; lower with a larger --ctx")]
    PastContext { pos: usize, ctx: usize },
    #[error("positions {pos}..{end} run past the context of {ctx} positions; lower with a larger --ctx")]
    RowsPastContext { pos: usize, end: usize, ctx: usize },
    #[error("the bundle steps {rows} token(s) at a time but {given} were given; pass exactly {rows}")]
    Rows { rows: usize, given: usize },
    #[error(
        "the bundle steps {sequences} sequence(s) at a time but {given} position(s) were given; pass one per sequence"
    )]
    Positions { sequences: usize, given: usize },
    #[error("{program}: {source}; the bundle and its checkpoint disagree, re-lower the bundle")]
    Simulate { program: String, source: SimError },
    #[error("{program} produced no `{name}`; re-lower the bundle")]
    NoOutput { program: String, name: String },
    #[error("tensor-parallel slices of `{tensor}`: {problem}; re-lower the bundle for this checkpoint")]
    Slice { tensor: String, problem: String },
    #[error(
        "the states cannot move between these bundles: {problem}; lower both with the same model, --ctx and storage"
    )]
    StatesMismatch { problem: String },
    #[error("this host's states were handed to another host (Host::take_states); put them back before stepping")]
    StatesMoved,
    #[error("the states given hold nothing: they were already handed to another host")]
    StatesEmpty,
    #[error("verify step: {problem}")]
    Verify { problem: String },
    #[error("sampling: {problem}")]
    Sampling { problem: String },
    #[error("{file}: tokenizer: {problem}")]
    Tokenizer { file: String, problem: String },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = HostError> = std::result::Result<T, E>;

impl From<CheckpointError> for HostError {
    fn from(source: CheckpointError) -> HostError {
        HostError::Checkpoint { source }
    }
}
