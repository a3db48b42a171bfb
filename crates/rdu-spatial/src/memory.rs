//! Memory accounting for `fit`: bytes of weights and carried state per storage format, placed in a chip's HBM then DDR.
//!
//! Assumption, stated once: a weight read dense is held as bf16 on the chip (2 bytes per
//! element, the PCUs' native product type), whatever type the checkpoint stores it in.
//! Q8_0 keeps its blocks as stored: 32 int8 values and one f16 scale, 34 bytes per 32
//! elements along the last (`in`) dimension. Carried state (KV caches, recurrent state)
//! is held as the deployment declares it: bf16 (`storage=bf16`, 2 bytes) or f32 (4 bytes).

use crate::chip::Chip;
use crate::cost::CostError;
use crate::program::{Role, Storage};

/// Bytes per element of a dense weight on the chip (bf16, an assumption; see the module docs).
pub const DENSE_BYTES_PER_ELEMENT: u64 = 2;
/// Elements per Q8_0 block.
pub const Q8_BLOCK_ELEMENTS: u64 = 32;
/// Bytes per Q8_0 block: 32 int8 values and an f16 scale.
pub const Q8_BLOCK_BYTES: u64 = 34;
/// Elements per MXFP4 block.
pub const MXFP4_BLOCK_ELEMENTS: u64 = 32;
/// Bytes per MXFP4 block: an e8m0 scale and 32 four-bit values.
pub const MXFP4_BLOCK_BYTES: u64 = 17;

/// How a tensor is held in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorFormat {
    /// Dense weight, held as bf16.
    DenseBf16,
    /// Q8_0 blocks along the last dimension.
    Q8_0,
    /// FP8 values, one byte each, and one f32 scale per `rows × cols` block of each matrix.
    Fp8 { rows: u32, cols: u32 },
    /// MXFP4 blocks of 32 along the last dimension: one scale byte and 16 bytes of nibbles.
    Mxfp4,
    /// f32: state declared f32 and anything else kept at full precision.
    F32,
}

/// What a deployment must hold on one chip.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryDemand {
    pub weight_bytes: u64,
    /// KV caches and carried state.
    pub state_bytes: u64,
}

/// Where a demand lands: state first in HBM (it is read and written every step), then
/// weights, and what HBM cannot hold in DDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryFit {
    pub demand: MemoryDemand,
    pub hbm_bytes: u64,
    pub ddr_bytes: u64,
    pub hbm_capacity: u64,
    pub ddr_capacity: u64,
    /// Everything fits in HBM and DDR together.
    pub fits: bool,
    /// Some of it lives in DDR (and streams at DDR bandwidth).
    pub spills_to_ddr: bool,
    /// Bytes that fit nowhere.
    pub shortfall: u64,
}

/// Bytes of a tensor of `shape` held as `format`.
pub fn tensor_bytes(shape: &[u64], format: TensorFormat) -> Result<u64, CostError> {
    let too_large = || CostError::TooLarge { shape: shape.to_vec() };
    let elements = shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(too_large)?;
    match format {
        TensorFormat::DenseBf16 => elements.checked_mul(DENSE_BYTES_PER_ELEMENT).ok_or_else(too_large),
        TensorFormat::F32 => elements.checked_mul(4).ok_or_else(too_large),
        TensorFormat::Q8_0 => {
            if shape.last().is_none_or(|d| d % Q8_BLOCK_ELEMENTS != 0) {
                return Err(CostError::Q8Misaligned { shape: shape.to_vec() });
            }
            (elements / Q8_BLOCK_ELEMENTS).checked_mul(Q8_BLOCK_BYTES).ok_or_else(too_large)
        }
        TensorFormat::Fp8 { rows, cols } => {
            let n = shape.len();
            if n < 2 || rows == 0 || cols == 0 {
                return Err(CostError::Misfit { shape: shape.to_vec(), format: "FP8 block-scaled" });
            }
            let matrices = shape[..n - 2].iter().try_fold(1u64, |a, &d| a.checked_mul(d)).ok_or_else(too_large)?;
            let grid = shape[n - 2].div_ceil(u64::from(rows)) * shape[n - 1].div_ceil(u64::from(cols));
            let scales = matrices.checked_mul(grid).and_then(|g| g.checked_mul(4)).ok_or_else(too_large)?;
            elements.checked_add(scales).ok_or_else(too_large)
        }
        TensorFormat::Mxfp4 => {
            if shape.last().is_none_or(|d| d % MXFP4_BLOCK_ELEMENTS != 0) {
                return Err(CostError::Misfit { shape: shape.to_vec(), format: "MXFP4" });
            }
            (elements / MXFP4_BLOCK_ELEMENTS).checked_mul(MXFP4_BLOCK_BYTES).ok_or_else(too_large)
        }
    }
}

/// How a declaration of `role` and `storage` is held: Q8_0, FP8 and MXFP4 blocks as stored; bf16 for a dense
/// weight or shared table (the assumption above) and for a state declared `bf16`; f32 for
/// everything else (f32 states, f32/i32 activations).
pub fn stored_format(role: Role, storage: Storage) -> TensorFormat {
    match (storage, role) {
        (Storage::Q8_0, _) => TensorFormat::Q8_0,
        (Storage::Fp8 { rows, cols }, _) => TensorFormat::Fp8 { rows, cols },
        (Storage::Mxfp4, _) => TensorFormat::Mxfp4,
        (Storage::Bf16, _) => TensorFormat::DenseBf16,
        (Storage::Dense, Role::Weight | Role::Shared) => TensorFormat::DenseBf16,
        _ => TensorFormat::F32,
    }
}

/// Bytes of a declaration as stored: a tensor of `shape` held as [`stored_format`] says. The
/// one count of "bytes as stored" (the cost model's HBM reads, the compiler's `fit` tally).
pub fn stored_bytes(shape: &[usize], role: Role, storage: Storage) -> Result<u64, CostError> {
    let shape: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    tensor_bytes(&shape, stored_format(role, storage))
}

impl MemoryDemand {
    /// Add a weight of `shape` held as `format`.
    pub fn add_weight(&mut self, shape: &[u64], format: TensorFormat) -> Result<(), CostError> {
        let bytes = tensor_bytes(shape, format)?;
        self.weight_bytes =
            self.weight_bytes.checked_add(bytes).ok_or(CostError::TooLarge { shape: shape.to_vec() })?;
        Ok(())
    }

    /// Add carried state of `shape` held as `format` (`F32`, or `DenseBf16` for a bf16 state).
    pub fn add_state(&mut self, shape: &[u64], format: TensorFormat) -> Result<(), CostError> {
        let bytes = tensor_bytes(shape, format)?;
        self.state_bytes = self.state_bytes.checked_add(bytes).ok_or(CostError::TooLarge { shape: shape.to_vec() })?;
        Ok(())
    }

    /// Weights and state together.
    pub fn total(&self) -> u64 {
        self.weight_bytes.saturating_add(self.state_bytes)
    }
}

/// Place `demand` on `chip`: HBM first, the rest in DDR.
pub fn place(chip: &Chip, demand: MemoryDemand) -> MemoryFit {
    let total = demand.total();
    let hbm_bytes = total.min(chip.hbm_bytes);
    let rest = total - hbm_bytes;
    let ddr_bytes = rest.min(chip.ddr_bytes);
    MemoryFit {
        demand,
        hbm_bytes,
        ddr_bytes,
        hbm_capacity: chip.hbm_bytes,
        ddr_capacity: chip.ddr_bytes,
        fits: rest <= chip.ddr_bytes,
        spills_to_ddr: ddr_bytes > 0,
        shortfall: rest - ddr_bytes,
    }
}
