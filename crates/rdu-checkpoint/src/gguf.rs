//! GGUF v2/v3 reader over mmap: header, metadata and tensor infos, every size checked against the file before use.

use crate::bytes::Bytes;
use crate::error::{CheckpointError, Result};
use crate::ggml::{self, GgmlType};
use crate::gguf_value::{Cursor, GgufValue, GgufValueType};
use crate::q8::{Q8Block, Q8Tensor};
use std::collections::HashMap;
use std::path::Path;

/// Longest tensor name accepted (64 KiB).
pub const MAX_TENSOR_NAME_LEN: u64 = 64 << 10;
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ALIGNMENT: u64 = 1 << 30;
/// Fewest bytes of one metadata entry (key length, value type, 1-byte value) and one tensor info.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// One tensor of a GGUF file. `shape` is in numpy order (GGUF dims reversed).
#[derive(Clone, Debug, PartialEq)]
pub struct GgufTensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub ggml_type: GgmlType,
    /// Offset of the data from the start of the data section, as stored in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

/// An open GGUF file: metadata in file order, tensor infos checked against the file length.
pub struct Gguf {
    file: String,
    bytes: Bytes,
    version: u32,
    alignment: u64,
    data_start: u64,
    metadata: Vec<(String, GgufValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<GgufTensor>,
    tensor_index: HashMap<String, usize>,
}

impl Gguf {
    /// Maps and parses the GGUF file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        Gguf::parse(path.display().to_string(), Bytes::map(path)?)
    }

    /// Parses GGUF bytes already in memory; `label` stands for the file name in errors.
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<Gguf> {
        Gguf::parse(label.to_string(), Bytes::Owned(bytes))
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_start(&self) -> u64 {
        self.data_start
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Any integer type that fits in u32; `Ok(None)` if the key is absent.
    pub fn get_u32(&self, key: &str) -> Result<Option<u32>> {
        self.typed(key, "an integer that fits in u32", GgufValue::as_u32)
    }

    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "an integer that fits in u64", GgufValue::as_u64)
    }

    pub fn get_i64(&self, key: &str) -> Result<Option<i64>> {
        self.typed(key, "an integer that fits in i64", GgufValue::as_i64)
    }

    /// F32, F64 or any integer type.
    pub fn get_f32(&self, key: &str) -> Result<Option<f32>> {
        self.typed(key, "a number", GgufValue::as_f32)
    }

    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a number", GgufValue::as_f64)
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", GgufValue::as_bool)
    }

    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", GgufValue::as_str)
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&[GgufValue]>> {
        self.typed(key, "an array", GgufValue::as_array)
    }

    /// An array of strings, e.g. `tokenizer.ggml.tokens`.
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>> {
        self.typed(key, "an array of strings", |v| {
            v.as_array()?.iter().map(GgufValue::as_str).collect()
        })
    }

    /// An array of numbers of any type, e.g. `tokenizer.ggml.scores`.
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.typed(key, "an array of numbers", |v| {
            v.as_array()?.iter().map(GgufValue::as_f32).collect()
        })
    }

    /// An array of integers of any type that fit in i64, e.g. `tokenizer.ggml.token_type`.
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.typed(key, "an array of integers", |v| {
            v.as_array()?.iter().map(GgufValue::as_i64).collect()
        })
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.tensor_index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw bytes of a tensor's data.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let tensor = self.find(name)?;
        let start = self.data_start + tensor.offset;
        let range = start as usize..(start + tensor.n_bytes) as usize;
        self.bytes
            .get(range)
            .ok_or_else(|| self.past_end(name, start, tensor.n_bytes))
    }

    /// A tensor dequantised to dense f32, row-major in numpy order.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let tensor = self.find(name)?;
        ggml::dequantize(tensor.ggml_type, self.tensor_bytes(name)?).ok_or_else(|| {
            CheckpointError::UnsupportedGgmlType {
                file: self.file.clone(),
                tensor: name.to_string(),
                ggml_type: tensor.ggml_type,
            }
        })
    }

    /// A Q8_0 tensor kept as blocks; any other type is an error.
    pub fn read_q8_0(&self, name: &str) -> Result<Q8Tensor> {
        let tensor = self.find(name)?;
        if tensor.ggml_type != GgmlType::Q8_0 {
            return Err(CheckpointError::NotQ8_0 {
                file: self.file.clone(),
                tensor: name.to_string(),
                ggml_type: tensor.ggml_type,
            });
        }
        let block_bytes = GgmlType::Q8_0.type_size() as usize;
        let bytes = self.tensor_bytes(name)?;
        Ok(Q8Tensor {
            shape: tensor.shape.clone(),
            blocks: bytes
                .chunks_exact(block_bytes)
                .map(Q8Block::from_bytes)
                .collect(),
        })
    }

    fn find(&self, name: &str) -> Result<&GgufTensor> {
        self.tensor(name)
            .ok_or_else(|| CheckpointError::TensorNotFound {
                file: self.file.clone(),
                tensor: name.to_string(),
            })
    }

    fn past_end(&self, name: &str, start: u64, n_bytes: u64) -> CheckpointError {
        CheckpointError::TensorPastEnd {
            file: self.file.clone(),
            tensor: name.to_string(),
            start,
            end: start.saturating_add(n_bytes),
            file_len: self.bytes.len() as u64,
        }
    }

    fn typed<'a, T>(
        &'a self,
        key: &str,
        expected: &'static str,
        convert: impl FnOnce(&'a GgufValue) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        convert(value)
            .map(Some)
            .ok_or_else(|| CheckpointError::MetadataType {
                file: self.file.clone(),
                key: key.to_string(),
                expected,
                found: value.describe(),
            })
    }

    fn parse(file: String, bytes: Bytes) -> Result<Gguf> {
        let mut gguf = Gguf {
            file,
            bytes,
            version: 0,
            alignment: DEFAULT_ALIGNMENT,
            data_start: 0,
            metadata: Vec::new(),
            key_index: HashMap::new(),
            tensors: Vec::new(),
            tensor_index: HashMap::new(),
        };
        let data: &[u8] = &gguf.bytes;
        let mut c = Cursor::new(data, &gguf.file);
        let err_file = || gguf.file.clone();
        let magic: [u8; 4] = c.array("magic")?;
        if &magic != b"GGUF" {
            return Err(CheckpointError::BadMagic {
                file: err_file(),
                found: magic.to_vec(),
            });
        }
        let version = c.u32("version")?;
        if version != 2 && version != 3 {
            return Err(CheckpointError::UnsupportedVersion {
                file: err_file(),
                version,
            });
        }
        let n_tensors = c.u64("tensor count")?;
        let n_kv = c.u64("metadata count")?;
        let kv_limit = c.remaining() / MIN_KV_BYTES;
        if n_kv > kv_limit {
            return Err(c.limit("metadata count".into(), n_kv, kv_limit));
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut key_index = HashMap::with_capacity(n_kv as usize);
        for _ in 0..n_kv {
            let key = c.utf8(crate::gguf_value::MAX_STRING_LEN, || "metadata key".into())?;
            let type_id = c.u32("metadata value type")?;
            let ty = GgufValueType::from_id(type_id).ok_or_else(|| {
                CheckpointError::UnknownValueType {
                    file: err_file(),
                    key: key.clone(),
                    type_id,
                }
            })?;
            let value = c.value(ty, &key, 0)?;
            if key_index.insert(key.clone(), metadata.len()).is_some() {
                return Err(CheckpointError::DuplicateKey {
                    file: err_file(),
                    key,
                });
            }
            metadata.push((key, value));
        }
        let alignment = match key_index.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(&i) => alignment(&err_file(), &metadata[i].1)?,
        };
        let tensor_limit = c.remaining() / MIN_TENSOR_INFO_BYTES;
        if n_tensors > tensor_limit {
            return Err(c.limit("tensor count".into(), n_tensors, tensor_limit));
        }
        let mut infos = Vec::with_capacity(n_tensors as usize);
        for _ in 0..n_tensors {
            infos.push(tensor_info(&mut c)?);
        }
        let data_start = (c.pos as u64).next_multiple_of(alignment);
        let file_len = data.len() as u64;
        let mut tensors = Vec::with_capacity(infos.len());
        let mut tensor_index = HashMap::with_capacity(infos.len());
        for info in infos {
            let tensor = check_tensor(&err_file(), info, alignment, data_start, file_len)?;
            if tensor_index
                .insert(tensor.name.clone(), tensors.len())
                .is_some()
            {
                return Err(CheckpointError::DuplicateTensor {
                    file: err_file(),
                    tensor: tensor.name,
                });
            }
            tensors.push(tensor);
        }
        gguf.version = version;
        gguf.alignment = alignment;
        gguf.data_start = data_start;
        gguf.metadata = metadata;
        gguf.key_index = key_index;
        gguf.tensors = tensors;
        gguf.tensor_index = tensor_index;
        Ok(gguf)
    }
}

/// A tensor info as read, before it is checked against the file.
struct RawTensorInfo {
    name: String,
    dims: Vec<u64>,
    ggml_type: GgmlType,
    offset: u64,
}

fn tensor_info(c: &mut Cursor) -> Result<RawTensorInfo> {
    let name = c.utf8(MAX_TENSOR_NAME_LEN, || "tensor name".into())?;
    let n_dims = c.u32("tensor dimension count")?;
    if n_dims > MAX_DIMS {
        return Err(CheckpointError::TooManyDims {
            file: c.file.to_string(),
            tensor: name,
            n_dims,
        });
    }
    let dims = (0..n_dims)
        .map(|_| c.u64("tensor dimension"))
        .collect::<Result<Vec<u64>>>()?;
    let type_id = c.u32("tensor type")?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| CheckpointError::UnknownGgmlType {
        file: c.file.to_string(),
        tensor: name.clone(),
        type_id,
    })?;
    let offset = c.u64("tensor offset")?;
    Ok(RawTensorInfo {
        name,
        dims,
        ggml_type,
        offset,
    })
}

fn check_tensor(
    file: &str,
    info: RawTensorInfo,
    alignment: u64,
    data_start: u64,
    file_len: u64,
) -> Result<GgufTensor> {
    let RawTensorInfo {
        name,
        dims,
        ggml_type,
        offset,
    } = info;
    let bad_dims = |reason| CheckpointError::BadDims {
        file: file.to_string(),
        tensor: name.clone(),
        dims: dims.clone(),
        reason,
    };
    if dims.contains(&0) {
        return Err(bad_dims("contain a zero"));
    }
    let n_elements = dims
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= i64::MAX as u64)
        .ok_or_else(|| bad_dims("hold more elements than fit in an i64"))?;
    let ne0 = dims.first().copied().unwrap_or(1);
    let block_size = ggml_type.block_size();
    if ne0 % block_size != 0 {
        return Err(CheckpointError::NotBlockMultiple {
            file: file.to_string(),
            tensor: name,
            ggml_type,
            ne0,
            block_size,
        });
    }
    if offset % alignment != 0 {
        return Err(CheckpointError::MisalignedTensor {
            file: file.to_string(),
            tensor: name,
            offset,
            alignment,
        });
    }
    let n_bytes = (n_elements / block_size).saturating_mul(ggml_type.type_size());
    let start = data_start.saturating_add(offset);
    let end = start.saturating_add(n_bytes);
    if end > file_len {
        return Err(CheckpointError::TensorPastEnd {
            file: file.to_string(),
            tensor: name,
            start,
            end,
            file_len,
        });
    }
    Ok(GgufTensor {
        name,
        shape: dims.iter().rev().map(|&d| d as usize).collect(),
        ggml_type,
        offset,
        n_bytes,
    })
}

fn alignment(file: &str, value: &GgufValue) -> Result<u64> {
    let alignment = value
        .as_u64()
        .ok_or_else(|| CheckpointError::MetadataType {
            file: file.to_string(),
            key: "general.alignment".into(),
            expected: "an unsigned integer",
            found: value.describe(),
        })?;
    if alignment == 0 || alignment % 8 != 0 || alignment > MAX_ALIGNMENT {
        return Err(CheckpointError::BadAlignment {
            file: file.to_string(),
            value: alignment,
        });
    }
    Ok(alignment)
}
