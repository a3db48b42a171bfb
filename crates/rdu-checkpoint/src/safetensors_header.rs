//! Reads one safetensors header with the `safetensors` crate, after checking its length, and explains rejections.

use crate::error::{CheckpointError, Result};
use safetensors::Dtype;
use std::collections::BTreeMap;

/// Where one tensor lives: its shard and absolute byte range in that shard.
pub(crate) struct Entry {
    pub(crate) shard: usize,
    pub(crate) dtype: Dtype,
    pub(crate) shape: Vec<usize>,
    pub(crate) start: usize,
    pub(crate) end: usize,
}

/// Reads one shard's header with the `safetensors` crate after checking the header length
/// ourselves; if the crate rejects it, `explain` names the offending tensor where it can.
pub(crate) fn parse_shard(file: &str, bytes: &[u8], shard: usize) -> Result<BTreeMap<String, Entry>> {
    let file_len = bytes.len() as u64;
    let Some(len_bytes) = bytes.first_chunk::<8>() else {
        return Err(CheckpointError::Truncated {
            file: file.to_string(),
            what: "header length".into(),
            offset: 0,
            needed: 8,
            available: file_len,
        });
    };
    let header_len = u64::from_le_bytes(*len_bytes);
    if header_len > file_len - 8 {
        return Err(CheckpointError::HeaderPastEnd { file: file.to_string(), header_len, file_len });
    }
    let data_start = 8 + header_len as usize;
    let metadata = match safetensors::SafeTensors::read_metadata(bytes) {
        Ok((_, metadata)) => metadata,
        Err(error) => return Err(explain(file, bytes, data_start, error)),
    };
    let mut tensors = BTreeMap::new();
    for (name, info) in metadata.tensors() {
        let (start, end) = info.data_offsets;
        let (start, end) = (data_start + start, data_start + end);
        if end > bytes.len() || start > end {
            return Err(CheckpointError::TensorPastEnd {
                file: file.to_string(),
                tensor: name,
                start: start as u64,
                end: end as u64,
                file_len,
            });
        }
        let entry = Entry { shard, dtype: info.dtype, shape: info.shape.clone(), start, end };
        tensors.insert(name, entry);
    }
    Ok(tensors)
}

/// Turns a header the `safetensors` crate rejected into an error naming the tensor at fault.
fn explain(file: &str, bytes: &[u8], data_start: usize, error: safetensors::SafeTensorError) -> CheckpointError {
    let generic = || CheckpointError::SafetensorsHeader { file: file.to_string(), reason: error.to_string() };
    let header = &bytes[8..data_start];
    let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(header) else {
        return generic();
    };
    for (name, info) in map.iter().filter(|(name, _)| *name != "__metadata__") {
        let Some((dtype, shape, start, end)) = tensor_fields(info) else {
            continue;
        };
        let base = data_start as u64;
        let (abs_start, abs_end) = (base.saturating_add(start), base.saturating_add(end));
        if end < start || abs_end > bytes.len() as u64 {
            return CheckpointError::TensorPastEnd {
                file: file.to_string(),
                tensor: name.clone(),
                start: abs_start,
                end: abs_end,
                file_len: bytes.len() as u64,
            };
        }
        let bits = shape.iter().try_fold(dtype.bitsize() as u64, |acc, &d| acc.checked_mul(d));
        if bits.map(|b| b.div_ceil(8)) != Some(end - start) {
            return CheckpointError::TensorSizeMismatch {
                file: file.to_string(),
                tensor: name.clone(),
                shape,
                dtype: dtype.to_string(),
                expected: bits.map_or(u64::MAX, |b| b.div_ceil(8)),
                actual: end - start,
            };
        }
    }
    generic()
}

fn tensor_fields(info: &serde_json::Value) -> Option<(Dtype, Vec<u64>, u64, u64)> {
    let dtype: Dtype = serde_json::from_value(info.get("dtype")?.clone()).ok()?;
    let shape = info.get("shape")?.as_array()?.iter().map(serde_json::Value::as_u64).collect::<Option<Vec<u64>>>()?;
    let offsets = info.get("data_offsets")?.as_array()?;
    match offsets.as_slice() {
        [start, end] => Some((dtype, shape, start.as_u64()?, end.as_u64()?)),
        _ => None,
    }
}
