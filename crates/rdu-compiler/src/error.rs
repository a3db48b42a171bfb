//! The library's one error enum.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum Error {
    /// A config.json (or GGUF metadata) that does not describe a model we can build.
    /// `field` is `$` for the file as a whole (not JSON, not a GGUF file): then none is named.
    #[error("{origin}: {}{message}", if field == "$" { String::new() } else { format!("field `{field}`: ") })]
    Config { origin: String, field: String, message: String },
    #[error("unknown model `{0}`: give a preset name (see `rdu presets`), a config.json, or a directory holding one")]
    UnknownModel(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    /// A checkpoint file that cannot be read (its message names the file).
    #[error(transparent)]
    Checkpoint(#[from] rdu_checkpoint::CheckpointError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
