//! Parses a GGUF header: magic, version, metadata and tensor infos (`GgufTensor`), each checked against the file before use.

use crate::cursor::Cursor;
use crate::error::{CheckpointError, Result};
use crate::ggml::GgmlType;
use crate::gguf_value::{GgufValue, GgufValueType, MAX_STRING_LEN};
use std::collections::HashMap;

/// Longest tensor name accepted (64 KiB).
pub const MAX_TENSOR_NAME_LEN: u64 = 64 << 10;
/// Most dimensions a tensor may have (`GGML_MAX_DIMS`).
pub const MAX_DIMS: u32 = 4;
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

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

const MAX_ALIGNMENT: u64 = 1 << 30;
/// Fewest bytes of one metadata entry (key length, value type, 1-byte value) and one tensor info.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// Everything in a GGUF file but the tensor data.
pub(crate) struct Header {
    pub(crate) version: u32,
    pub(crate) alignment: u64,
    pub(crate) data_start: u64,
    pub(crate) metadata: Vec<(String, GgufValue)>,
    pub(crate) key_index: HashMap<String, usize>,
    pub(crate) tensors: Vec<GgufTensor>,
    pub(crate) tensor_index: HashMap<String, usize>,
}

/// Parses the header of the GGUF bytes `data`; `file` names them in errors.
pub(crate) fn parse(file: &str, data: &[u8]) -> Result<Header> {
    let mut c = Cursor::new(data, file);
    let err_file = || file.to_string();
    let magic: [u8; 4] = c.array("magic")?;
    if &magic != b"GGUF" {
        return Err(CheckpointError::BadMagic { file: err_file(), found: magic.to_vec() });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        return Err(CheckpointError::UnsupportedVersion { file: err_file(), version });
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
        let key = c.utf8(MAX_STRING_LEN, || "metadata key".into())?;
        let type_id = c.u32("metadata value type")?;
        let ty = GgufValueType::from_id(type_id).ok_or_else(|| CheckpointError::UnknownValueType {
            file: err_file(),
            key: key.clone(),
            type_id,
        })?;
        let value = c.value(ty, &key, 0)?;
        if key_index.insert(key.clone(), metadata.len()).is_some() {
            return Err(CheckpointError::DuplicateKey { file: err_file(), key });
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
        if tensor_index.insert(tensor.name.clone(), tensors.len()).is_some() {
            return Err(CheckpointError::DuplicateTensor { file: err_file(), tensor: tensor.name });
        }
        tensors.push(tensor);
    }
    Ok(Header { version, alignment, data_start, metadata, key_index, tensors, tensor_index })
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
        return Err(CheckpointError::TooManyDims { file: c.file.to_string(), tensor: name, n_dims });
    }
    let dims = (0..n_dims).map(|_| c.u64("tensor dimension")).collect::<Result<Vec<u64>>>()?;
    let type_id = c.u32("tensor type")?;
    let ggml_type = GgmlType::from_id(type_id).ok_or_else(|| CheckpointError::UnknownGgmlType {
        file: c.file.to_string(),
        tensor: name.clone(),
        type_id,
    })?;
    let offset = c.u64("tensor offset")?;
    Ok(RawTensorInfo { name, dims, ggml_type, offset })
}

fn check_tensor(file: &str, info: RawTensorInfo, alignment: u64, data_start: u64, file_len: u64) -> Result<GgufTensor> {
    let RawTensorInfo { name, dims, ggml_type, offset } = info;
    let bad_dims =
        |reason| CheckpointError::BadDims { file: file.to_string(), tensor: name.clone(), dims: dims.clone(), reason };
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
        return Err(CheckpointError::MisalignedTensor { file: file.to_string(), tensor: name, offset, alignment });
    }
    let n_bytes = (n_elements / block_size).saturating_mul(ggml_type.type_size());
    let start = data_start.saturating_add(offset);
    let end = start.saturating_add(n_bytes);
    if end > file_len {
        return Err(CheckpointError::TensorPastEnd { file: file.to_string(), tensor: name, start, end, file_len });
    }
    Ok(GgufTensor { name, shape: dims.iter().rev().map(|&d| d as usize).collect(), ggml_type, offset, n_bytes })
}

fn alignment(file: &str, value: &GgufValue) -> Result<u64> {
    let alignment = value.as_u64().ok_or_else(|| CheckpointError::MetadataType {
        file: file.to_string(),
        key: "general.alignment".into(),
        expected: "an unsigned integer",
        found: value.describe(),
    })?;
    if alignment == 0 || alignment % 8 != 0 || alignment > MAX_ALIGNMENT {
        return Err(CheckpointError::BadAlignment { file: file.to_string(), value: alignment });
    }
    Ok(alignment)
}
