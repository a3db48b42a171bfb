//! Checkpoint readers over mmap (HF safetensors, llama.cpp GGUF) and ggml block formats; never panics on input.

mod bytes;
mod cursor;
mod error;
mod ggml;
mod gguf;
mod gguf_parse;
mod gguf_value;
mod kquants;

mod q8;
mod quants;
mod safetensors;
mod safetensors_header;

pub use crate::error::{CheckpointError, Result};
pub use crate::ggml::{dequantize_into, dequantize_slice, GgmlType};
pub use crate::gguf::Gguf;
pub use crate::gguf_parse::{GgufTensor, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN};
pub use crate::gguf_value::{
    GgufValue, GgufValueType, MAX_ARRAY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TOTAL_ARRAY_ELEMENTS,
};
pub use crate::kquants::k_scale_min;
pub use crate::q8::{quantize_q8_0, Q8Block, Q8Weight, QK8_0};
pub use crate::safetensors::{Dtype, SafeTensors};
