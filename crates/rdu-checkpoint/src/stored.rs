//! Weights a Hugging Face checkpoint stores block-quantised, read as stored: FP8 (the weight
//! `F8_E4M3` beside its scales: DeepSeek's `{name}_scale_inv`, one per block, or
//! compressed-tensors' `{name}_scale`, one per block, output row or matrix — both multiply)
//! and MXFP4 (gpt-oss's layout: `{name}_blocks` and `{name}_scales`, `U8`, in place of the
//! weight).

use crate::error::{CheckpointError, Result};
use crate::fp8::{Fp8Grid, Fp8Weight};
use crate::mxfp4::{mxfp4_from_hf, GgmlWeight, QK_MXFP4};
use crate::safetensors::{Dtype, SafeTensors};

/// The block scales of the FP8 weight `weight` (DeepSeek's name).
pub fn fp8_scale_name(weight: &str) -> String {
    format!("{weight}_scale_inv")
}

/// The scales of the FP8 weight `weight` as compressed-tensors names them (`float-quantized`:
/// `weight_scale`, a multiplier like DeepSeek's `weight_scale_inv`).
pub fn fp8_ct_scale_name(weight: &str) -> String {
    format!("{weight}_scale")
}

/// The nibbles and scales of the MXFP4 weight `weight` (gpt-oss's names).
pub fn mxfp4_names(weight: &str) -> [String; 2] {
    [format!("{weight}_blocks"), format!("{weight}_scales")]
}

/// How an HF checkpoint stores one weight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HfStored {
    /// F32, F16 or BF16 (or another dtype `read_f32` names in its error).
    Dense,
    /// `F8_E4M3` values (their scales are checked when read).
    Fp8,
    /// `{name}_blocks` and `{name}_scales` in place of the weight.
    Mxfp4,
}

impl SafeTensors {
    /// How the weight `name` is stored, or `None` when the checkpoint has neither it nor its
    /// MXFP4 blocks.
    pub fn stored(&self, name: &str) -> Option<HfStored> {
        match self.dtype(name) {
            Some(Dtype::F8_E4M3) => Some(HfStored::Fp8),
            Some(_) => Some(HfStored::Dense),
            None => self.contains(&mxfp4_names(name)[0]).then_some(HfStored::Mxfp4),
        }
    }

    /// The shape of the weight `name` as a program reads it: its own, or for MXFP4 blocks
    /// `[..., rows, groups, 16]` the weight's `[..., rows, groups · 32]`.
    pub fn stored_shape(&self, name: &str) -> Option<Vec<usize>> {
        if let Some(shape) = self.shape(name) {
            return Some(shape.to_vec());
        }
        let blocks = self.shape(&mxfp4_names(name)[0])?;
        let n = blocks.len();
        let mut shape = blocks.get(..n.checked_sub(1)?)?.to_vec();
        *shape.last_mut()? = shape.last()?.checked_mul(QK_MXFP4)?;
        Some(shape)
    }

    /// The FP8 weight `name` (`F8_E4M3`) with its scales, one per `block` (`[rows, cols]`) of
    /// each matrix: `{name}_scale_inv` (DeepSeek: `weight_block_size`) or, without it,
    /// `{name}_scale` (compressed-tensors: `[1, in]` blocks for its `channel` strategy, the
    /// matrix for `tensor`, whose one scale may be stored as `[]` or `[1]`).
    pub fn read_fp8(&self, name: &str, block: [usize; 2]) -> Result<Fp8Weight> {
        let (values, dtype, shape) = self.raw(name)?;
        let fail = |problem: String| self.quantised(name, problem);
        if dtype != Dtype::F8_E4M3 {
            return Err(fail(format!("stored {dtype}, where fp8 storage reads F8_E4M3")));
        }
        let scale = [fp8_scale_name(name), fp8_ct_scale_name(name)].into_iter().find(|s| self.contains(s));
        let Some((scale, scale_shape)) = scale.and_then(|s| Some((s.clone(), self.shape(&s)?))) else {
            let scale = if self.names_ct_scales() { fp8_ct_scale_name(name) } else { fp8_scale_name(name) };
            let what = if scale.ends_with("_inv") { "block scales" } else { "scales" };
            return Err(fail(format!("stored F8_E4M3, but the checkpoint has no {what} `{scale}`")));
        };
        let grid = Fp8Grid::of(shape, block).map_err(&fail)?;
        let mut want = shape[..shape.len() - 2].to_vec();
        want.extend([grid.rows, grid.cols]);
        // One scale for a whole matrix: compressed-tensors writes it `[]` or `[1]`.
        let single = shape.len() == 2 && grid.len() == Some(1) && scale_shape.iter().all(|&d| d == 1);
        if scale_shape != want.as_slice() && !single {
            return Err(fail(format!(
                "{} `{scale}` are {scale_shape:?}, but {}×{} blocks of {shape:?} need {want:?}",
                if scale.ends_with("_inv") { "block scales" } else { "scales" },
                block[0],
                block[1]
            )));
        }
        let scales = self.read_f32(&scale)?;
        Fp8Weight::new(shape.to_vec(), block, values.to_vec(), scales).map_err(fail)
    }

    /// Whether the checkpoint names its FP8 scales as compressed-tensors does (`*.weight_scale`)
    /// and not as DeepSeek does (`*_scale_inv`): the name a missing scale is reported by.
    fn names_ct_scales(&self) -> bool {
        !self.names().any(|n| n.ends_with("_scale_inv")) && self.names().any(|n| n.ends_with(".weight_scale"))
    }

    /// The MXFP4 weight `name` from `{name}_blocks` and `{name}_scales` (`U8`), in ggml's
    /// block layout.
    pub fn read_mxfp4(&self, name: &str) -> Result<GgmlWeight> {
        let [blocks_name, scales_name] = mxfp4_names(name);
        let fail = |problem: String| self.quantised(name, problem);
        let (blocks, bdt, bshape) = self.raw(&blocks_name)?;
        let (scales, sdt, sshape) = self.raw(&scales_name).map_err(|_| {
            fail(format!("stored as MXFP4 blocks `{blocks_name}`, but the checkpoint has no scales `{scales_name}`"))
        })?;
        if bdt != Dtype::U8 || sdt != Dtype::U8 {
            return Err(fail(format!("MXFP4 blocks and scales are {bdt} and {sdt}, where both must be U8")));
        }
        mxfp4_from_hf(blocks, bshape, scales, sshape).map_err(fail)
    }

    fn quantised(&self, tensor: &str, problem: String) -> CheckpointError {
        let file = self.file_of(tensor).unwrap_or(self.source()).to_string();
        CheckpointError::Quantised { file, tensor: tensor.to_string(), problem }
    }
}
