//! Checkpoint readers: safetensors (HF) and GGUF (llama.cpp) over mmap, and the ggml block
//! formats (Q8_0 kept as blocks; Q4_0, Q5_0, Q4_K, Q5_K, Q6_K dequantised to dense).
//!
//! Never panics on input: every size and offset read from a file is checked before use.

mod bytes;
mod error;
mod ggml;
mod gguf;
mod gguf_value;
mod kquants;
mod q8;
mod safetensors;

pub use crate::error::{CheckpointError, Result};
pub use crate::ggml::GgmlType;
pub use crate::gguf::{Gguf, GgufTensor, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN};
pub use crate::gguf_value::{
    GgufValue, GgufValueType, MAX_ARRAY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TOTAL_ARRAY_ELEMENTS,
};
pub use crate::q8::{quantize_q8_0, Q8Block, Q8Tensor, Q8_BLOCK};
pub use crate::safetensors::{Dtype, SafeTensors};
