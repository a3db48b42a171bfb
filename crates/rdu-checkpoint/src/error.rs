//! `CheckpointError`: every way reading a checkpoint can fail, one line each, naming the file.

use crate::ggml::GgmlType;

/// One error type for the crate. Every message is one lowercase line that starts with the
/// file it is about, names the tensor or key where there is one, and says what is wrong.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{file}: cannot read the file: {source}")]
    Io { file: String, source: std::io::Error },
    #[error("{dir}: no model.safetensors.index.json or model.safetensors here; pass a .safetensors file or a hugging face model directory")]
    NoSafetensors { dir: String },
    #[error("{file}: invalid shard index: {reason}")]
    ShardIndex { file: String, reason: String },
    #[error("{file}: tensor `{tensor}` is listed in the shard index but is not in this shard")]
    MissingFromShard { file: String, tensor: String },
    #[error("{file}: truncated: the {what} at byte {offset} needs {needed} bytes but only {available} remain")]
    Truncated { file: String, what: String, offset: u64, needed: u64, available: u64 },
    #[error("{file}: header length {header_len} runs past the end of the file ({file_len} bytes)")]
    HeaderPastEnd { file: String, header_len: u64, file_len: u64 },
    #[error("{file}: invalid safetensors header: {reason}")]
    SafetensorsHeader { file: String, reason: String },
    #[error("{file}: tensor `{tensor}`: data bytes {start}..{end} run past the end of the file ({file_len} bytes)")]
    TensorPastEnd { file: String, tensor: String, start: u64, end: u64, file_len: u64 },
    #[error("{file}: tensor `{tensor}`: shape {shape:?} of {dtype} needs {expected} bytes but its data offsets span {actual}")]
    TensorSizeMismatch { file: String, tensor: String, shape: Vec<u64>, dtype: String, expected: u64, actual: u64 },
    #[error("{file}: tensor `{tensor}` has dtype {dtype}; only F32, F16 and BF16 tensors can be read as f32")]
    UnsupportedDtype { file: String, tensor: String, dtype: String },
    #[error("{file}: no tensor named `{tensor}`")]
    TensorNotFound { file: String, tensor: String },
    #[error("{file}: not a gguf file: the first bytes are {found:02x?}, expected \"GGUF\"")]
    BadMagic { file: String, found: Vec<u8> },
    #[error(
        "{file}: gguf version {version} is not supported, only 2 and 3; re-convert the model with a current llama.cpp"
    )]
    UnsupportedVersion { file: String, version: u32 },
    #[error("{file}: {what} is {value}, above the limit of {limit}")]
    LimitExceeded { file: String, what: String, value: u64, limit: u64 },
    #[error("{file}: metadata key `{key}`: arrays are nested deeper than {max} levels")]
    NestingTooDeep { file: String, key: String, max: u32 },
    #[error("{file}: metadata key `{key}`: unknown value type id {type_id}")]
    UnknownValueType { file: String, key: String, type_id: u32 },
    #[error("{file}: metadata key `{key}`: bool byte is {value}, expected 0 or 1")]
    InvalidBool { file: String, key: String, value: u8 },
    #[error("{file}: the {what} at byte {offset} is not valid utf-8")]
    InvalidUtf8 { file: String, what: String, offset: u64 },
    #[error("{file}: metadata key `{key}` appears more than once")]
    DuplicateKey { file: String, key: String },
    #[error("{file}: tensor `{tensor}` appears more than once")]
    DuplicateTensor { file: String, tensor: String },
    #[error("{file}: general.alignment is {value}; it must be a nonzero multiple of 8, at most 2^30")]
    BadAlignment { file: String, value: u64 },
    #[error("{file}: tensor `{tensor}` has {n_dims} dimensions; gguf allows at most 4")]
    TooManyDims { file: String, tensor: String, n_dims: u32 },
    #[error("{file}: tensor `{tensor}`: dims {dims:?} {reason}")]
    BadDims { file: String, tensor: String, dims: Vec<u64>, reason: &'static str },
    #[error("{file}: tensor `{tensor}` has {}", describe_type_id(*type_id))]
    UnknownGgmlType { file: String, tensor: String, type_id: u32 },
    #[error("{file}: tensor `{tensor}` has ggml type {ggml_type} (id {}), which cannot be dequantised here; supported: F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, MXFP4", ggml_type.id())]
    UnsupportedGgmlType { file: String, tensor: String, ggml_type: GgmlType },
    #[error("{file}: tensor `{tensor}`: innermost dimension {ne0} is not a multiple of the {ggml_type} block size {block_size}")]
    NotBlockMultiple { file: String, tensor: String, ggml_type: GgmlType, ne0: u64, block_size: u64 },
    #[error("{file}: tensor `{tensor}`: data offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor { file: String, tensor: String, offset: u64, alignment: u64 },
    #[error("{file}: metadata key `{key}` is {found}, expected {expected}")]
    MetadataType { file: String, key: String, expected: &'static str, found: String },
    #[error("{file}: tensor `{tensor}` is {ggml_type}, not Q8_0; read it with read_f32")]
    NotQ8_0 { file: String, tensor: String, ggml_type: GgmlType },
    #[error("{file}: tensor `{tensor}`: {problem}")]
    Quantised { file: String, tensor: String, problem: String },
    #[error("cannot quantise {len} values of shape {shape:?} to q8_0: {reason}")]
    QuantizeShape { shape: Vec<usize>, len: usize, reason: &'static str },
}

/// Shorthand used throughout the crate.
pub type Result<T, E = CheckpointError> = std::result::Result<T, E>;

fn describe_type_id(type_id: u32) -> String {
    match GgmlType::removed_name(type_id) {
        Some(name) => format!("ggml type id {type_id} ({name}), which was removed from gguf; re-convert the model"),
        None => format!("unknown ggml type id {type_id}; this reader knows ids 0 to 39"),
    }
}
