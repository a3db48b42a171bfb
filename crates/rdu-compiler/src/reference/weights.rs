//! Weight sources for the reference runner: a HF safetensors checkpoint (through the
//! family's checkpoint naming), or seeded random weights for a preset.

use crate::graph::Tensor;
use crate::model::naming::{checkpoint_source, layout_follows_storage, TensorSource};
use crate::model::quantization::{blockable_weights, declared_storage};
use crate::model::spec::{Declared, ModelSpec};
use crate::model::storage::{Format, Storage};
use rdu_checkpoint::{GgmlType, Gguf, HfStored, SafeTensors};
use std::collections::BTreeMap;
use std::path::Path;

/// Gives the dense f32 values of a program weight, by its program name and declared shape.
pub trait WeightSource {
    fn weight(&self, name: &str, shape: &[usize]) -> Result<Tensor, String>;

    /// The block format the source stores the weight `name` in beyond Q8_0 (FP8, MXFP4), if
    /// any: its values (`weight`) are then exactly that format's, dequantised.
    fn stores(&self, _name: &str) -> Option<Format> {
        None
    }
}

/// A HF checkpoint: `config.json` plus `model.safetensors` (or a sharded index).
pub struct HfWeights {
    spec: ModelSpec,
    tensors: SafeTensors,
    dir: String,
}

impl HfWeights {
    /// The checkpoint in `dir`; a tensor stored in a block format its config does not declare
    /// (`F8_E4M3`, MXFP4 `_blocks`, without a matching `quantization_config`) is refused.
    pub fn open(spec: &ModelSpec, dir: &Path) -> Result<HfWeights, String> {
        let tensors = SafeTensors::open(dir).map_err(|e| e.to_string())?;
        let dir = dir.display().to_string();
        let declared = spec.quantization.as_ref().map(|q| q.format);
        for name in tensors.names() {
            if name.ends_with(".input_scale") && declared.is_some_and(Declared::is_fp8) {
                return Err(format!(
                    "{dir}: tensor `{name}` is a static activation scale, which changes the numerics; rdu reads FP8 checkpoints with dynamic activations only"
                ));
            }
            let (what, method) = match tensors.stored(name) {
                Some(HfStored::Fp8) if !declared.is_some_and(Declared::is_fp8) => ("F8_E4M3", "fp8"),
                Some(HfStored::Dense) if name.ends_with("_blocks") && declared != Some(Declared::Mxfp4) => {
                    ("as MXFP4 blocks", "mxfp4")
                }
                _ => continue,
            };
            return Err(format!(
                "{dir}: tensor `{name}` is stored {what}, but config.json declares no {method} quantization_config"
            ));
        }
        let weights = HfWeights { spec: spec.clone(), tensors, dir };
        weights.stored_as_declared()?;
        Ok(weights)
    }

    /// Refuses a dense tensor where the config declares MXFP4 and the checkpoint's layout
    /// follows its storage (`naming::layout_follows_storage`): read as the blocks' layout,
    /// its values would land in the wrong places.
    fn stored_as_declared(&self) -> Result<(), String> {
        if !layout_follows_storage(&self.spec) {
            return Ok(());
        }
        let Some(Storage::Exactly(declared)) = declared_storage(&self.spec) else { return Ok(()) };
        let mxfp4 = declared.into_iter().filter(|(_, f)| *f == Format::Mxfp4);
        for part in mxfp4.flat_map(|(name, _)| self.parts(&name)) {
            if self.tensors.stored(&part) == Some(HfStored::Dense) {
                let [blocks, scales] = rdu_checkpoint::mxfp4_names(&part);
                return Err(format!(
                    "{}: tensor `{part}` is stored dense, but config.json's quantization_config (mxfp4) stores it as `{blocks}` and `{scales}` (a dequantised checkpoint has no quantization_config)",
                    self.dir
                ));
            }
        }
        Ok(())
    }

    /// Whether the checkpoint holds the tensor `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains(name)
    }

    /// Storage as stored: exactly the weights the author declares `q8` whose checkpoint
    /// tensors are all FP8 (in the config's blocks) or all MXFP4; others are read dense
    /// (`Storage::Dense` when none is stored so).
    pub fn storage(&self) -> Storage {
        if self.spec.quantization.is_none() {
            return Storage::Dense;
        }
        let stored = blockable_weights(&self.spec).into_iter().filter_map(|n| Some((n.clone(), self.stores(&n)?)));
        Storage::Exactly(stored.collect())
    }

    /// The checkpoint tensors of the program weight `name`.
    fn parts(&self, name: &str) -> Vec<String> {
        match checkpoint_source(&self.spec, name) {
            Some(
                TensorSource::Tensor(t)
                | TensorSource::Transposed(t)
                | TensorSource::Slice { name: t, .. }
                | TensorSource::Strided { name: t, .. },
            ) => vec![t],
            Some(TensorSource::Stack(parts)) => parts,
            None => Vec::new(),
        }
    }

    /// One checkpoint tensor's shape and values, dequantised when it is stored FP8 or MXFP4.
    fn read(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>), String> {
        let missing = || format!("{}: checkpoint has no tensor `{name}`, which the model's config needs", self.dir);
        let shape = self.tensors.stored_shape(name).ok_or_else(missing)?;
        let data = match self.tensors.stored(name) {
            Some(HfStored::Fp8) => {
                let declared = self.spec.quantization.as_ref().map(|q| q.format.format(&shape));
                let Some(Format::Fp8 { rows, cols }) = declared else {
                    return Err(format!("{}: tensor `{name}` is FP8 but the config declares no fp8 blocks", self.dir));
                };
                let w = self.tensors.read_fp8(name, [rows as usize, cols as usize]).map_err(|e| e.to_string())?;
                w.dequantize()
            }
            Some(HfStored::Mxfp4) => self.tensors.read_mxfp4(name).map_err(|e| e.to_string())?.dequantize(),
            _ => self.tensors.read_f32(name).map_err(|e| e.to_string())?,
        };
        Ok((shape, data))
    }
}

impl WeightSource for HfWeights {
    fn weight(&self, name: &str, shape: &[usize]) -> Result<Tensor, String> {
        let source = checkpoint_source(&self.spec, name)
            .ok_or_else(|| format!("no checkpoint tensor is known for program weight `{name}`"))?;
        let (got_shape, data, what) = match &source {
            TensorSource::Tensor(t) => {
                let (s, d) = self.read(t)?;
                (s, d, t.clone())
            }
            TensorSource::Stack(parts) => {
                let mut data = Vec::new();
                let mut inner = None;
                for p in parts {
                    let (s, d) = self.read(p)?;
                    if inner.as_ref().is_some_and(|i: &Vec<usize>| *i != s) {
                        return Err(format!("checkpoint tensor `{p}` has shape {s:?}, unlike the other experts"));
                    }
                    inner = Some(s);
                    data.extend(d);
                }
                let mut s = vec![parts.len()];
                s.extend(inner.unwrap_or_default());
                (s, data, format!("{} (stacked)", parts.first().cloned().unwrap_or_default()))
            }
            TensorSource::Slice { name: t, axis, start, len } => {
                let (s, d) = self.read(t)?;
                let full = Tensor::f32(s.clone(), d);
                let sliced = full.slice_axis(*axis, *start, *len).ok_or_else(|| {
                    format!(
                        "checkpoint tensor `{t}` with shape {s:?} has no elements {start}..{} on axis {axis}",
                        start + len
                    )
                })?;
                (sliced.shape.clone(), sliced.into_f32(), t.clone())
            }
            TensorSource::Transposed(t) => {
                let (s, d) = self.read(t)?;
                let (s, d) = transposed(&s, &d)
                    .ok_or_else(|| format!("checkpoint tensor `{t}` {s:?} has no two axes to swap"))?;
                (s, d, t.clone())
            }
            TensorSource::Strided { name: t, transposed: swap, axis, start, step, len } => {
                let (s, d) = self.read(t)?;
                let (s, d) = if *swap {
                    transposed(&s, &d)
                        .ok_or_else(|| format!("checkpoint tensor `{t}` {s:?} has no two axes to swap"))?
                } else {
                    (s, d)
                };
                let (s, d) = strided(&s, &d, *axis, *start, *step, *len).ok_or_else(|| {
                    format!("checkpoint tensor `{t}` with shape {s:?} has no {len} elements from {start} by {step} on axis {axis}")
                })?;
                (s, d, t.clone())
            }
        };
        if got_shape != shape {
            return Err(format!(
                "{}: checkpoint tensor `{what}` has shape {got_shape:?} but the model's config implies {shape:?} for `{name}`",
                self.dir
            ));
        }
        Ok(Tensor::f32(got_shape, data))
    }

    fn stores(&self, name: &str) -> Option<Format> {
        let parts = self.parts(name);
        let kinds: Vec<Option<HfStored>> = parts.iter().map(|p| self.tensors.stored(p)).collect();
        let declared = self.spec.quantization.as_ref().map(|q| q.format).filter(|d| d.is_fp8());
        match kinds.first()? {
            Some(HfStored::Fp8) if kinds.iter().all(|k| *k == Some(HfStored::Fp8)) => {
                Some(declared?.format(self.tensors.shape(parts.first()?)?))
            }
            Some(HfStored::Mxfp4) if kinds.iter().all(|k| *k == Some(HfStored::Mxfp4)) => Some(Format::Mxfp4),
            _ => None,
        }
    }
}

/// A llama.cpp GGUF file: every program weight is one tensor (experts already stacked),
/// read dequantised to dense f32.
pub struct GgufWeights {
    spec: ModelSpec,
    gguf: Gguf,
}

impl GgufWeights {
    pub fn open(spec: &ModelSpec, path: &Path) -> Result<GgufWeights, String> {
        let gguf = Gguf::open_for_tensors(path).map_err(|e| e.to_string())?;
        Ok(GgufWeights { spec: spec.clone(), gguf })
    }

    /// The GGUF file, already open.
    pub fn new(spec: &ModelSpec, gguf: Gguf) -> GgufWeights {
        GgufWeights { spec: spec.clone(), gguf }
    }

    pub fn gguf(&self) -> &Gguf {
        &self.gguf
    }

    /// Storage as stored: exactly the weights the author declares `q8` whose GGUF tensor is
    /// Q8_0 or MXFP4 (other quantised types are read dequantised to dense).
    pub fn storage(&self) -> Storage {
        let stored: BTreeMap<String, Format> = blockable_weights(&self.spec)
            .into_iter()
            .filter_map(|n| {
                let Some(TensorSource::Tensor(t)) = checkpoint_source(&self.spec, &n) else { return None };
                let format = match self.gguf.tensor(&t)?.ggml_type {
                    GgmlType::Q8_0 => Format::Q8_0,
                    GgmlType::MXFP4 => Format::Mxfp4,
                    _ => return None,
                };
                Some((n, format))
            })
            .collect();
        Storage::Exactly(stored)
    }
}

impl WeightSource for GgufWeights {
    fn weight(&self, name: &str, shape: &[usize]) -> Result<Tensor, String> {
        let tensor = match checkpoint_source(&self.spec, name) {
            Some(TensorSource::Tensor(t)) => t,
            Some(other) => return Err(format!("program weight `{name}` maps to {other:?}, not one GGUF tensor")),
            None => return Err(format!("no GGUF tensor is known for program weight `{name}`")),
        };
        let info = self
            .gguf
            .tensor(&tensor)
            .ok_or_else(|| format!("{}: no tensor `{tensor}` (the model's metadata needs it)", self.gguf.file()))?;
        // GGUF writers differ on unit axes (llama.cpp's converter once squeezed every tensor,
        // e.g. a shared-expert gate [1, H] stored as [H]); the values are laid out the same.
        let squeezed = |s: &[usize]| s.iter().copied().filter(|&d| d != 1).collect::<Vec<_>>();
        if squeezed(&info.shape) != squeezed(shape) {
            return Err(format!(
                "GGUF tensor `{tensor}` has shape {:?} but the model's metadata implies {shape:?} for `{name}`",
                info.shape
            ));
        }
        if info.ggml_type == GgmlType::MXFP4 {
            let bytes = self.gguf.tensor_bytes(&tensor).map_err(|e| e.to_string())?;
            rdu_checkpoint::check_mxfp4_scales(bytes)
                .map_err(|p| format!("{}: tensor `{tensor}`: {p}", self.gguf.file()))?;
        }
        let data = self.gguf.read_f32(&tensor).map_err(|e| e.to_string())?;
        Ok(Tensor::f32(shape.to_vec(), data))
    }

    fn stores(&self, name: &str) -> Option<Format> {
        let Some(TensorSource::Tensor(t)) = checkpoint_source(&self.spec, name) else { return None };
        (self.gguf.tensor(&t)?.ggml_type == GgmlType::MXFP4).then_some(Format::Mxfp4)
    }
}

/// Seeded random weights: the same (seed, name) always gives the same values.
pub struct SeededWeights {
    pub seed: u64,
    /// Norm weights are drawn around 0 for the (1+w) convention, around 1 otherwise.
    pub unit_offset: bool,
}

impl WeightSource for SeededWeights {
    fn weight(&self, name: &str, shape: &[usize]) -> Result<Tensor, String> {
        Ok(Tensor::f32(shape.to_vec(), rdu_spatial::seeded_weight(self.seed, name, shape, self.unit_offset)))
    }
}

/// `data` of `shape` with its last two axes swapped, or `None` when it has fewer than two.
fn transposed(shape: &[usize], data: &[f32]) -> Option<(Vec<usize>, Vec<f32>)> {
    let [outer @ .., rows, cols] = shape else { return None };
    let (rows, cols) = (*rows, *cols);
    let mut out = Vec::with_capacity(data.len());
    for m in data.chunks_exact((rows * cols).max(1)) {
        for c in 0..cols {
            out.extend((0..rows).map(|r| m[r * cols + c]));
        }
    }
    let mut s = outer.to_vec();
    s.extend([cols, rows]);
    Some((s, out))
}

/// Every `step`-th entry from `start` along `axis` of `data` (of `shape`), `len` of them; `None`
/// when they do not fit.
fn strided(
    shape: &[usize],
    data: &[f32],
    axis: usize,
    start: usize,
    step: usize,
    len: usize,
) -> Option<(Vec<usize>, Vec<f32>)> {
    let dim = *shape.get(axis)?;
    let last = start.checked_add(step.checked_mul(len.checked_sub(1)?)?)?;
    if step == 0 || last >= dim {
        return None;
    }
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out = Vec::with_capacity(data.len() / dim * len);
    for block in data.chunks_exact((dim * inner).max(1)) {
        for i in 0..len {
            let at = (start + i * step) * inner;
            out.extend_from_slice(&block[at..at + inner]);
        }
    }
    let mut s = shape.to_vec();
    s[axis] = len;
    Some((s, out))
}
