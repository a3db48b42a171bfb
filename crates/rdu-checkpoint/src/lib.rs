//! Checkpoint readers over mmap (HF safetensors, llama.cpp GGUF) and ggml block formats; never panics on input.

mod bytes;
mod cursor;
mod error;
mod fp8;
mod ggml;
mod gguf;
mod gguf_parse;
mod gguf_value;
mod kquants;
mod mxfp4;

mod q8;
mod quants;
mod safetensors;
mod safetensors_header;
mod stored;

pub use crate::error::{CheckpointError, Result};
pub use crate::fp8::{
    fp8_e4m3_from_f32, fp8_e4m3_is_nan, fp8_e4m3_to_f32, quantize_fp8, Fp8Grid, Fp8View, Fp8Weight, FP8_E4M3,
    FP8_E4M3_MAX,
};
pub use crate::ggml::{dequantize_into, dequantize_slice, GgmlType};
pub use crate::gguf::Gguf;
pub use crate::gguf_parse::{GgufTensor, DEFAULT_ALIGNMENT, MAX_DIMS, MAX_TENSOR_NAME_LEN};
pub use crate::gguf_value::{
    GgufValue, GgufValueType, MAX_ARRAY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TOTAL_ARRAY_ELEMENTS,
};
pub use crate::kquants::k_scale_min;
pub use crate::mxfp4::{
    check_mxfp4_scales, e8m0_half, mxfp4_from_hf, quantize_mxfp4, GgmlWeight, MXFP4_BLOCK_BYTES, MXFP4_DOUBLED,
    MXFP4_MAX_SCALE, QK_MXFP4,
};
pub use crate::q8::{quantize_q8_0, Q8Block, Q8Weight, QK8_0};
pub use crate::safetensors::{Dtype, SafeTensors};
pub use crate::stored::{fp8_ct_scale_name, fp8_scale_name, mxfp4_names, HfStored};
