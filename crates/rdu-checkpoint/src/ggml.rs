//! ggml tensor types (ids, block sizes) and dequantisation by type: the 32-element block formats live in `quants`, the k-quants in `kquants`.

use half::{bf16, f16};
use std::fmt;

macro_rules! ggml_types {
    ($($variant:ident = $id:literal, $name:literal, $block:expr, $size:expr;)*) => {
        /// A ggml tensor type as stored in a GGUF tensor info (`ggml_type`). Every id that
        /// current llama.cpp can write is listed, so a file holding, say, Q2_K tensors opens
        /// and only reading those tensors fails.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types)]
        pub enum GgmlType {
            $($variant = $id,)*
        }

        impl GgmlType {
            /// The type with this id, or `None` for an id not in the table.
            pub fn from_id(id: u32) -> Option<GgmlType> {
                match id {
                    $($id => Some(GgmlType::$variant),)*
                    _ => None,
                }
            }

            /// The name ggml uses, e.g. `Q8_0`.
            pub fn name(self) -> &'static str {
                match self {
                    $(GgmlType::$variant => $name,)*
                }
            }

            /// Elements per block (1 for plain float and integer types).
            pub fn block_size(self) -> u64 {
                match self {
                    $(GgmlType::$variant => $block,)*
                }
            }

            /// Bytes per block.
            pub fn type_size(self) -> u64 {
                match self {
                    $(GgmlType::$variant => $size,)*
                }
            }
        }
    };
}

const QK_K: u64 = 256;

ggml_types! {
    F32 = 0, "F32", 1, 4;
    F16 = 1, "F16", 1, 2;
    Q4_0 = 2, "Q4_0", 32, 2 + 16;
    Q4_1 = 3, "Q4_1", 32, 2 + 2 + 16;
    Q5_0 = 6, "Q5_0", 32, 2 + 4 + 16;
    Q5_1 = 7, "Q5_1", 32, 2 + 2 + 4 + 16;
    Q8_0 = 8, "Q8_0", 32, 2 + 32;
    Q8_1 = 9, "Q8_1", 32, 4 + 4 + 32;
    Q2_K = 10, "Q2_K", QK_K, 2 + 2 + QK_K / 16 + QK_K / 4;
    Q3_K = 11, "Q3_K", QK_K, 2 + QK_K / 4 + QK_K / 8 + 12;
    Q4_K = 12, "Q4_K", QK_K, 2 + 2 + QK_K / 2 + 12;
    Q5_K = 13, "Q5_K", QK_K, 2 + 2 + QK_K / 2 + QK_K / 8 + 12;
    Q6_K = 14, "Q6_K", QK_K, 2 + QK_K / 2 + QK_K / 4 + QK_K / 16;
    Q8_K = 15, "Q8_K", QK_K, 4 + QK_K + QK_K / 8;
    IQ2_XXS = 16, "IQ2_XXS", QK_K, 2 + QK_K / 4;
    IQ2_XS = 17, "IQ2_XS", QK_K, 2 + QK_K / 4 + QK_K / 32;
    IQ3_XXS = 18, "IQ3_XXS", QK_K, 2 + QK_K / 4 + QK_K / 8;
    IQ1_S = 19, "IQ1_S", QK_K, 2 + QK_K / 8 + QK_K / 16;
    IQ4_NL = 20, "IQ4_NL", 32, 2 + 16;
    IQ3_S = 21, "IQ3_S", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4;
    IQ2_S = 22, "IQ2_S", QK_K, 2 + QK_K / 4 + QK_K / 16;
    IQ4_XS = 23, "IQ4_XS", QK_K, 2 + 2 + QK_K / 2 + QK_K / 64;
    I8 = 24, "I8", 1, 1;
    I16 = 25, "I16", 1, 2;
    I32 = 26, "I32", 1, 4;
    I64 = 27, "I64", 1, 8;
    F64 = 28, "F64", 1, 8;
    IQ1_M = 29, "IQ1_M", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32;
    BF16 = 30, "BF16", 1, 2;
    TQ1_0 = 34, "TQ1_0", QK_K, 2 + 4 * 13;
    TQ2_0 = 35, "TQ2_0", QK_K, 2 + 64;
    MXFP4 = 39, "MXFP4", 32, 1 + 16;
}

impl GgmlType {
    /// The name of an id that ggml once used and has since removed from GGUF files.
    pub fn removed_name(id: u32) -> Option<&'static str> {
        Some(match id {
            4 => "Q4_2",
            5 => "Q4_3",
            31 => "Q4_0_4_4",
            32 => "Q4_0_4_8",
            33 => "Q4_0_8_8",
            36 => "IQ4_NL_4_4",
            37 => "IQ4_NL_4_8",
            38 => "IQ4_NL_8_8",
            _ => return None,
        })
    }

    /// The numeric id stored in GGUF files.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Whether `dequantize` handles this type.
    pub fn can_dequantize(self) -> bool {
        use GgmlType::*;
        matches!(self, F32 | F16 | BF16 | Q8_0 | Q4_0 | Q5_0 | Q4_K | Q5_K | Q6_K | MXFP4)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Dequantises whole blocks of `ty` to f32, or `None` if `ty` has no dequantiser here.
/// A trailing partial block is ignored; callers pass exactly `n_blocks * type_size` bytes.
pub(crate) fn dequantize(ty: GgmlType, bytes: &[u8]) -> Option<Vec<f32>> {
    let block_bytes = ty.type_size() as usize;
    let mut out = Vec::with_capacity(bytes.len() / block_bytes * ty.block_size() as usize);
    dequantize_into(ty, bytes, &mut out).then_some(out)
}

/// Appends the f32 values of the whole blocks of `ty` in `bytes` to `out` — exactly the values
/// [`crate::Gguf::read_f32`] gives — or returns `false` (appending nothing) if `ty` has no
/// dequantiser here. This is the reference a consumer widening blocks in place is held to.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut Vec<f32>) -> bool {
    let n_blocks = bytes.len() / ty.type_size() as usize;
    let start = out.len();
    out.resize(start + n_blocks * ty.block_size() as usize, 0.0);
    let done = dequantize_slice(ty, bytes, &mut out[start..]);
    if !done {
        out.truncate(start);
    }
    done
}

/// Writes the f32 values of the whole blocks of `ty` in `bytes` into `out` (as many as both
/// hold) — the values [`dequantize_into`] gives — or returns `false` (writing nothing) if `ty`
/// has no dequantiser here. Inlined into its caller, so a caller compiled for a wider vector
/// unit (the simulator's packed row widening) gets these loops vectorised for it.
#[inline(always)]
pub fn dequantize_slice(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> bool {
    use crate::kquants::{q4_k, q5_k, q6_k};
    use crate::quants::{mxfp4, q4_0, q5_0, q8_0};
    match ty {
        GgmlType::F32 => each(ty, bytes, out, |b, o| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        GgmlType::F16 => each(ty, bytes, out, |b, o| o[0] = f16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::BF16 => each(ty, bytes, out, |b, o| o[0] = bf16::from_le_bytes([b[0], b[1]]).to_f32()),
        GgmlType::Q8_0 => each(ty, bytes, out, q8_0),
        GgmlType::Q4_0 => each(ty, bytes, out, q4_0),
        GgmlType::Q5_0 => each(ty, bytes, out, q5_0),
        GgmlType::Q4_K => each(ty, bytes, out, q4_k),
        GgmlType::Q5_K => each(ty, bytes, out, q5_k),
        GgmlType::Q6_K => each(ty, bytes, out, q6_k),
        GgmlType::MXFP4 => each(ty, bytes, out, mxfp4),
        _ => return false,
    }
    true
}

/// `block` on every whole block of `ty` in `bytes` and its values in `out`.
#[inline(always)]
fn each(ty: GgmlType, bytes: &[u8], out: &mut [f32], block: impl Fn(&[u8], &mut [f32])) {
    let (size, per) = (ty.type_size() as usize, ty.block_size() as usize);
    for (b, o) in bytes.chunks_exact(size).zip(out.chunks_exact_mut(per)) {
        block(b, o);
    }
}
