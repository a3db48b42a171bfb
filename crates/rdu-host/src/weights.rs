//! Loading every checkpoint tensor a manifest names — read, stacked or sliced, shape-checked, held dense, as Q8_0 blocks, or as FP8 / MXFP4 blocks.
//!
//! It never transforms values beyond dequantising, quantising to the storage the manifest
//! declares, stacking and slicing (DESIGN §3: the author writes programs for the weights as
//! stored). Tensor-parallel `slices` are applied after loading, by `tensor_parallel::Chips` (whole tensors in, every chip's slices out).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use rdu_checkpoint::{quantize_q8_0, GgmlType, GgmlWeight, Gguf, HfStored, Q8Block, SafeTensors};
use rdu_spatial::blocks::BlockWeight;
use rdu_spatial::manifest::{Checkpoint, CheckpointKind, Manifest, TensorEntry, TensorStorage};
use rdu_spatial::seeded_weight;
use rdu_spatial::sim::{can_pack, PackedWeight};
use rdu_spatial::Storage;
use rdu_spatial::{Q8Weight, SimTensor};

use crate::assemble::{self, Piece};
use crate::error::{HostError, Result};

/// Where the weights come from.
#[derive(Clone, Debug, PartialEq)]
pub enum WeightsSource {
    /// A Hugging Face model directory holding `model.safetensors` or a sharded index (or one such file).
    Hf(PathBuf),
    /// A llama.cpp GGUF file.
    Gguf(PathBuf),
    /// `rdu_spatial::seeded_weight` under each manifest tensor's own name, as the compiler's reference runner draws them.
    Seeded { seed: u64, unit_offset: bool },
}

/// Every checkpoint tensor of a bundle, by the name programs give it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Weights {
    /// Tensors stored dense.
    pub dense: BTreeMap<String, SimTensor>,
    /// Tensors stored as Q8_0 blocks.
    pub q8: BTreeMap<String, Q8Weight>,
    /// Tensors read in place from a GGUF file in their stored block format (a Q8_0-declared
    /// tensor stored Q8_0; an MXFP4-declared one stored MXFP4; a dense-declared one stored
    /// Q8_0, Q4_0, Q5_0, Q4_K, Q5_K, Q6_K, MXFP4, F16 or BF16), widened per row by the
    /// simulator to exactly the values `read_f32` gives.
    pub packed: BTreeMap<String, Packed>,
    /// Tensors stored FP8 or MXFP4 (the manifest's `fp8`, `mxfp4`), as the checkpoint stores
    /// them or quantised to that storage from a dense checkpoint.
    pub blocks: BTreeMap<String, BlockWeight>,
}

/// A checkpoint tensor kept in its file's block format, borrowed from the memory-mapped file.
#[derive(Clone)]
pub struct Packed {
    pub shape: Vec<usize>,
    pub format: GgmlType,
    file: Arc<Gguf>,
    checkpoint: String,
}

impl Packed {
    /// The tensor's bytes in the file.
    pub fn bytes(&self) -> &[u8] {
        // Checked when the tensor was kept (`Reader::pack`).
        self.file.tensor_bytes(&self.checkpoint).unwrap_or_default()
    }

    /// The simulator's view of it.
    pub fn weight(&self) -> PackedWeight<'_> {
        PackedWeight { shape: &self.shape, format: self.format, bytes: self.bytes() }
    }

    /// Every value as f32 (what `Gguf::read_f32` gives).
    pub fn widen(&self) -> Vec<f32> {
        self.weight().widen_all()
    }
}

impl PartialEq for Packed {
    fn eq(&self, other: &Packed) -> bool {
        self.shape == other.shape && self.format == other.format && self.bytes() == other.bytes()
    }
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Packed({} {:?} from {} `{}`)", self.format, self.shape, self.file.file(), self.checkpoint)
    }
}

/// Reports loading progress: tensors done, tensors in all, the tensor just loaded.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

impl Weights {
    /// Loads every entry of `manifest.tensors` from `source`, calling `progress` after each.
    pub fn load(manifest: &Manifest, source: &WeightsSource, progress: Progress<'_>) -> Result<Weights> {
        let total = manifest.tensors.len();
        let reader = Reader::open(source, &mut |read, len| {
            let gb = |b: u64| b as f64 / 1e9;
            progress(0, total, &format!("(reading the file: {:.2} of {:.2} GB)", gb(read), gb(len)));
        })?;
        let mut weights = Weights::default();
        for (done, (name, entry)) in manifest.tensors.iter().enumerate() {
            if entry.dtype != "f32" {
                return Err(HostError::TensorDtype { tensor: name.clone(), dtype: entry.dtype.clone() });
            }
            if let Some(packed) = reader.pack(entry) {
                weights.packed.insert(name.clone(), packed);
                progress(done + 1, total, name);
                continue;
            }
            if let Some(storage) = entry.program_storage().filter(|s| s.is_blocks() && *s != Storage::Q8_0) {
                weights.blocks.insert(name.clone(), reader.load_blocks(name, entry, storage)?);
                progress(done + 1, total, name);
                continue;
            }
            match reader.load(name, entry)? {
                Loaded::Dense(t) => {
                    weights.dense.insert(name.clone(), t);
                }
                Loaded::Q8(w) => {
                    weights.q8.insert(name.clone(), w);
                }
            }
            progress(done + 1, total, name);
        }
        Ok(weights)
    }

    /// Number of tensors held.
    pub fn len(&self) -> usize {
        self.dense.len() + self.q8.len() + self.packed.len() + self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

enum Reader {
    Hf { file: String, tensors: SafeTensors },
    Gguf(Arc<Gguf>),
    Seeded { seed: u64, unit_offset: bool },
}

/// What one checkpoint tensor holds: dense values, or Q8_0 blocks kept as they are stored.
enum Values {
    Dense(Vec<f32>),
    Blocks(Vec<Q8Block>),
}

impl Values {
    fn into_dense(self) -> Vec<f32> {
        match self {
            Values::Dense(v) => v,
            Values::Blocks(b) => b.iter().flat_map(|b| b.dequantize()).collect(),
        }
    }

    fn into_blocks(self, shape: &[usize]) -> Result<Vec<Q8Block>> {
        match self {
            Values::Dense(v) => Ok(quantize_q8_0(&v, shape)?.blocks),
            Values::Blocks(b) => Ok(b),
        }
    }
}

enum Loaded {
    Dense(SimTensor),
    Q8(Q8Weight),
}

impl Reader {
    /// The reader of `source`; `on_read(read, len)` reports a GGUF file's bytes read into memory.
    fn open(source: &WeightsSource, on_read: &mut dyn FnMut(u64, u64)) -> Result<Reader> {
        Ok(match source {
            WeightsSource::Hf(path) => {
                Reader::Hf { file: path.display().to_string(), tensors: SafeTensors::open(path)? }
            }
            WeightsSource::Gguf(path) => Reader::Gguf(Arc::new(Gguf::open_resident(path, on_read)?)),
            WeightsSource::Seeded { seed, unit_offset } => Reader::Seeded { seed: *seed, unit_offset: *unit_offset },
        })
    }

    fn file(&self) -> String {
        match self {
            Reader::Hf { file, .. } => file.clone(),
            Reader::Gguf(g) => g.file().to_string(),
            Reader::Seeded { seed, .. } => format!("seeded weights (seed {seed})"),
        }
    }

    /// The tensor of `entry` kept in place in the file's block format, when it can be: one
    /// whole GGUF matrix (two axes: a stack of experts is read an expert at a time, and is not
    /// stacked, sliced or split over chips) in a format the simulator reads in place — Q8_0 for
    /// a Q8_0-declared tensor.
    fn pack(&self, entry: &TensorEntry) -> Option<Packed> {
        let Reader::Gguf(gguf) = self else { return None };
        let c = &entry.checkpoint;
        if c.kind != CheckpointKind::Tensor
            || c.transposed
            || c.names.len() != 1
            || !entry.slices.is_empty()
            || entry.shape.len() != 2
        {
            return None;
        }
        let info = gguf.tensor(&c.names[0])?;
        let format_fits = match entry.storage {
            TensorStorage::Q8_0 => info.ggml_type == GgmlType::Q8_0,
            TensorStorage::Mxfp4 => info.ggml_type == GgmlType::MXFP4,
            TensorStorage::Fp8 => false,
            TensorStorage::Dense => can_pack(info.ggml_type),
        };
        if !format_fits || squeezed(&info.shape) != squeezed(&entry.shape) {
            return None;
        }
        let packed = Packed {
            shape: entry.shape.clone(),
            format: info.ggml_type,
            file: Arc::clone(gguf),
            checkpoint: c.names[0].clone(),
        };
        gguf.tensor_bytes(&c.names[0]).ok()?;
        packed.weight().check().ok()?;
        Some(packed)
    }

    /// The tensor `name` of the manifest, assembled from its checkpoint tensors and held as its storage says.
    fn load(&self, name: &str, entry: &TensorEntry) -> Result<Loaded> {
        let q8 = entry.storage == TensorStorage::Q8_0;
        let (label, values, shape) = match self {
            Reader::Seeded { seed, unit_offset } => {
                let values = seeded_weight(*seed, name, &entry.shape, *unit_offset);
                (name.to_string(), Values::Dense(values), entry.shape.clone())
            }
            _ => self.assemble(name, entry, q8)?,
        };
        // GGUF writers differ on unit axes (llama.cpp's converter once squeezed every tensor,
        // e.g. a shared-expert gate [1, H] stored as [H]); the values are laid out the same.
        let shape = match self {
            Reader::Gguf(_) if squeezed(&shape) == squeezed(&entry.shape) => entry.shape.clone(),
            _ => shape,
        };
        if shape != entry.shape {
            return Err(HostError::TensorShape {
                file: self.file(),
                tensor: name.to_string(),
                checkpoint: label,
                expected: entry.shape.clone().into(),
                found: shape.into(),
            });
        }
        Ok(match (values, q8) {
            (Values::Dense(v), true) => Loaded::Q8(quantize_q8_0(&v, &shape)?),
            (Values::Blocks(blocks), true) => Loaded::Q8(Q8Weight { shape, blocks }),
            (values, false) => Loaded::Dense(SimTensor::f32(shape, values.into_dense())),
        })
    }

    /// Reads the checkpoint tensors of `entry` and stacks or slices them; returns a label for errors too.
    fn assemble(&self, name: &str, entry: &TensorEntry, q8: bool) -> Result<(String, Values, Vec<usize>)> {
        let c = &entry.checkpoint;
        let fail = |checkpoint: &str, problem: String| HostError::Assemble {
            file: self.file(),
            tensor: name.to_string(),
            checkpoint: checkpoint.to_string(),
            problem,
        };
        let Some(first) = c.names.first() else {
            return Err(fail("", "the manifest names no checkpoint tensor".into()));
        };
        let mut parts = Vec::with_capacity(c.names.len());
        for part in &c.names {
            parts.push((part.clone(), self.read(name, part, q8)?));
        }
        let label = match c.names.len() {
            1 => first.clone(),
            n => format!("{first} (first of {n} stacked)"),
        };
        let blocks = parts.iter().any(|(_, (_, v))| matches!(v, Values::Blocks(_)));
        let (values, shape) = if blocks {
            let mut pieces = Vec::with_capacity(parts.len());
            for (part, (shape, values)) in parts {
                let data = values.into_blocks(&shape)?;
                pieces.push((part, Piece { shape, data }));
            }
            let piece = cut(c, pieces, 32).map_err(|p| fail(&label, p))?;
            (Values::Blocks(piece.data), piece.shape)
        } else {
            let pieces = parts.into_iter().map(|(part, (shape, v))| (part, Piece { shape, data: v.into_dense() }));
            let piece = cut(c, pieces.collect(), 1).map_err(|p| fail(&label, p))?;
            (Values::Dense(piece.data), piece.shape)
        };
        Ok((label, values, shape))
    }

    /// One checkpoint tensor: its shape and values, Q8_0 kept as blocks when `q8` storage can use them.
    fn read(&self, tensor: &str, checkpoint: &str, q8: bool) -> Result<(Vec<usize>, Values)> {
        let missing = || HostError::MissingTensor {
            file: self.file(),
            tensor: tensor.to_string(),
            checkpoint: checkpoint.to_string(),
        };
        match self {
            Reader::Hf { tensors, .. } => match tensors.stored(checkpoint) {
                // MXFP4 blocks read as their values (the reference's reading of them too).
                Some(HfStored::Mxfp4) => {
                    let w = tensors.read_mxfp4(checkpoint)?;
                    Ok((w.shape.clone(), Values::Dense(w.dequantize())))
                }
                // FP8 values need their config's blocks, which only an `fp8` entry carries.
                Some(HfStored::Fp8) => Err(HostError::Assemble {
                    file: self.file(),
                    tensor: tensor.to_string(),
                    checkpoint: checkpoint.to_string(),
                    problem: format!(
                        "stored F8_E4M3 with block scales, which a {} tensor cannot read (lower with --storage auto)",
                        if q8 { "q8_0" } else { "dense" }
                    ),
                }),
                _ => {
                    let shape = tensors.shape(checkpoint).ok_or_else(missing)?.to_vec();
                    Ok((shape, Values::Dense(tensors.read_f32(checkpoint)?)))
                }
            },
            Reader::Gguf(gguf) => {
                let info = gguf.tensor(checkpoint).ok_or_else(missing)?;
                let shape = info.shape.clone();
                match info.ggml_type {
                    GgmlType::Q8_0 if q8 => Ok((shape, Values::Blocks(gguf.read_q8_0(checkpoint)?.blocks))),
                    GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                        Ok((shape, Values::Dense(gguf.read_f32(checkpoint)?)))
                    }
                    ggml_type if q8 => Err(HostError::StorageType {
                        file: self.file(),
                        tensor: tensor.to_string(),
                        checkpoint: checkpoint.to_string(),
                        ggml_type,
                        storage: "q8_0",
                    }),
                    _ => Ok((shape, Values::Dense(gguf.read_f32(checkpoint)?))),
                }
            }
            // Seeded weights are drawn under the manifest's names, never read from a file.
            Reader::Seeded { .. } => Err(missing()),
        }
    }
}

impl Reader {
    /// The tensor `name` of the manifest stored FP8 or MXFP4 (`storage`): each checkpoint
    /// tensor as stored when it is stored so, quantised to `storage` when it is dense (as a
    /// Q8_0-declared one is), then stacked (experts, along a new first axis) or sliced.
    fn load_blocks(&self, name: &str, entry: &TensorEntry, storage: Storage) -> Result<BlockWeight> {
        let c = &entry.checkpoint;
        let label = c.names.first().cloned().unwrap_or_default();
        let fail = |problem: String| HostError::Assemble {
            file: self.file(),
            tensor: name.to_string(),
            checkpoint: label.clone(),
            problem,
        };
        // Read in the checkpoint's blocks; a chip's finer ones (`stored_block`) are cut after.
        let stored = entry.checkpoint_storage().ok_or_else(|| fail("its stored_block overflows".into()))?;
        let (chip, storage) = if stored == storage { (None, storage) } else { (Some(storage), stored) };
        let w = match self {
            Reader::Seeded { seed, unit_offset } => {
                let values = seeded_weight(*seed, name, &entry.shape, *unit_offset);
                let quantized = BlockWeight::quantize(&values, &entry.shape, storage);
                quantized.ok_or_else(|| fail(format!("cannot quantise to {}", storage.word())))?.map_err(fail)?
            }
            _ => {
                let mut parts = Vec::with_capacity(c.names.len());
                for part in &c.names {
                    parts.push(self.read_blocks(name, part, storage)?);
                }
                match (c.kind, c.axis, c.start, c.len) {
                    (CheckpointKind::Tensor, ..) if parts.len() == 1 && !c.transposed => parts.remove(0),
                    (CheckpointKind::Stack, Some(0), ..) if !c.transposed => BlockWeight::stack(parts).map_err(fail)?,
                    (CheckpointKind::Slice, Some(axis), Some(start), Some(len))
                        if parts.len() == 1 && !c.transposed =>
                    {
                        let (shape, step) = (parts[0].shape().to_vec(), c.step.unwrap_or(1));
                        if shape.get(axis).is_none_or(|&extent| len > extent) {
                            return Err(fail(format!("{len} entries of axis {axis} from a tensor of shape {shape:?}")));
                        }
                        parts[0].take(axis, &taken(start, step, len)).map_err(fail)?
                    }
                    _ => {
                        let (kind, word) = (c.kind, entry.storage.word());
                        let transposed = if c.transposed { " transposed" } else { "" };
                        return Err(fail(format!(
                            "the manifest's checkpoint entry of kind {kind:?}{transposed} cannot assemble {word} blocks (blocks are read as stored, never transposed)"
                        )));
                    }
                }
            }
        };
        let w = match (chip, w) {
            (Some(Storage::Fp8 { rows, cols }), BlockWeight::Fp8(f)) => {
                BlockWeight::Fp8(f.refined([rows as usize, cols as usize]).map_err(fail)?)
            }
            (_, w) => w,
        };
        if w.shape() != entry.shape.as_slice() {
            return Err(HostError::TensorShape {
                file: self.file(),
                tensor: name.to_string(),
                checkpoint: label,
                expected: entry.shape.clone().into(),
                found: w.shape().to_vec().into(),
            });
        }
        Ok(w)
    }

    /// One checkpoint tensor for a tensor stored as `storage` (FP8 or MXFP4): as stored, or
    /// quantised from its dense values.
    fn read_blocks(&self, tensor: &str, checkpoint: &str, storage: Storage) -> Result<BlockWeight> {
        let missing = || HostError::MissingTensor {
            file: self.file(),
            tensor: tensor.to_string(),
            checkpoint: checkpoint.to_string(),
        };
        let fail = |problem: String| HostError::Assemble {
            file: self.file(),
            tensor: tensor.to_string(),
            checkpoint: checkpoint.to_string(),
            problem,
        };
        let quantized = |values: Vec<f32>, shape: &[usize]| match BlockWeight::quantize(&values, shape, storage) {
            Some(w) => w.map_err(fail),
            None => Err(fail(format!("cannot quantise to {}", storage.word()))),
        };
        match self {
            Reader::Hf { tensors, .. } => match (tensors.stored(checkpoint), storage) {
                (Some(HfStored::Fp8), Storage::Fp8 { rows, cols }) => {
                    Ok(BlockWeight::Fp8(tensors.read_fp8(checkpoint, [rows as usize, cols as usize])?))
                }
                (Some(HfStored::Mxfp4), Storage::Mxfp4) => Ok(BlockWeight::Ggml(tensors.read_mxfp4(checkpoint)?)),
                (Some(HfStored::Dense), _) => {
                    let shape = tensors.shape(checkpoint).ok_or_else(missing)?.to_vec();
                    quantized(tensors.read_f32(checkpoint)?, &shape)
                }
                (Some(stored), _) => {
                    let (stored, word) = (format!("{stored:?}").to_lowercase(), storage.word());
                    Err(fail(format!("stored {stored}, which cannot serve a tensor stored {word}")))
                }
                (None, _) => Err(missing()),
            },
            Reader::Gguf(gguf) => {
                let info = gguf.tensor(checkpoint).ok_or_else(missing)?;
                match info.ggml_type {
                    GgmlType::MXFP4 if storage == Storage::Mxfp4 => {
                        let bytes = gguf.tensor_bytes(checkpoint)?.to_vec();
                        GgmlWeight::new(info.shape.clone(), GgmlType::MXFP4, bytes).map(BlockWeight::Ggml).map_err(fail)
                    }
                    GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
                        quantized(gguf.read_f32(checkpoint)?, &info.shape)
                    }
                    ggml_type => Err(HostError::StorageType {
                        file: self.file(),
                        tensor: tensor.to_string(),
                        checkpoint: checkpoint.to_string(),
                        ggml_type,
                        storage: if storage == Storage::Mxfp4 { "mxfp4" } else { "fp8" },
                    }),
                }
            }
            Reader::Seeded { .. } => Err(missing()),
        }
    }
}

/// Applies the checkpoint's kind: one tensor as it is (or transposed), several stacked, or a
/// slice of one (transposed first when the entry says so; every `step`-th entry).
fn cut<T: Clone>(
    c: &Checkpoint,
    pieces: Vec<(String, Piece<T>)>,
    unit: usize,
) -> std::result::Result<Piece<T>, String> {
    let one = |mut pieces: Vec<(String, Piece<T>)>| {
        let piece = pieces.remove(0).1;
        if c.transposed {
            assemble::transpose(piece, unit)
        } else {
            Ok(piece)
        }
    };
    match (c.kind, c.axis, c.start, c.len) {
        (CheckpointKind::Tensor, ..) if pieces.len() == 1 => one(pieces),
        (CheckpointKind::Stack, Some(axis), ..) if !c.transposed => assemble::stack(pieces, axis, unit),
        (CheckpointKind::Slice, Some(axis), Some(start), Some(len)) if pieces.len() == 1 => {
            assemble::slice(one(pieces)?, axis, start, len, c.step.unwrap_or(1), unit)
        }
        (kind, ..) => Err(format!("the manifest's checkpoint entry of kind {kind:?} is incomplete")),
    }
}

/// The ranges of a slice of `len` entries from `start`, every `step`-th: one run, or one
/// entry a range (gpt-oss's gate and up rows, interleaved in its MXFP4 `gate_up_proj`).
fn taken(start: usize, step: usize, len: usize) -> Vec<(usize, usize)> {
    match step {
        1 => vec![(start, start.saturating_add(len))],
        _ => (0..len)
            .map(|i| start.saturating_add(i.saturating_mul(step)))
            .map(|at| (at, at.saturating_add(1)))
            .collect(),
    }
}

/// A shape without its unit axes.
fn squeezed(shape: &[usize]) -> Vec<usize> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}
