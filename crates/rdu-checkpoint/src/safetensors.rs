//! Hugging Face safetensors over mmap, one file or a sharded directory; reads F32/F16/BF16 tensors as f32.

use crate::bytes::Bytes;
use crate::error::{CheckpointError, Result};
use crate::safetensors_header::{parse_shard, Entry};
use half::{bf16, f16};
pub use safetensors::Dtype;
use std::collections::BTreeMap;
use std::path::{Component, Path};

const INDEX_FILE: &str = "model.safetensors.index.json";
const SINGLE_FILE: &str = "model.safetensors";

/// The tensors of one safetensors file or of all shards named by a
/// `model.safetensors.index.json`, by name.
pub struct SafeTensors {
    /// What was opened (file, index or directory), for errors not about one shard.
    source: String,
    shards: Vec<Shard>,
    tensors: BTreeMap<String, Entry>,
}

struct Shard {
    file: String,
    bytes: Bytes,
}

impl SafeTensors {
    /// Opens a `.safetensors` file, a `model.safetensors.index.json`, or a directory holding
    /// either (the index wins).
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref();
        if path.is_dir() {
            let index = path.join(INDEX_FILE);
            if index.is_file() {
                return SafeTensors::open_index(&index);
            }
            let single = path.join(SINGLE_FILE);
            if single.is_file() {
                return SafeTensors::open_file(&single);
            }
            return Err(CheckpointError::NoSafetensors { dir: path.display().to_string() });
        }
        if path.to_string_lossy().ends_with(".index.json") {
            return SafeTensors::open_index(path);
        }
        SafeTensors::open_file(path)
    }

    /// Parses one safetensors file already in memory; `label` stands for its name in errors.
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<SafeTensors> {
        let shard = Shard { file: label.to_string(), bytes: Bytes::Owned(bytes) };
        SafeTensors::from_shards(label.to_string(), vec![shard], None)
    }

    /// Tensor names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tensors.keys().map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.tensors.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tensors.is_empty()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }

    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.tensors.get(name).map(|e| e.shape.as_slice())
    }

    pub fn dtype(&self, name: &str) -> Option<Dtype> {
        self.tensors.get(name).map(|e| e.dtype)
    }

    /// The file holding `name`.
    pub fn file_of(&self, name: &str) -> Option<&str> {
        self.tensors.get(name).map(|e| self.shards[e.shard].file.as_str())
    }

    /// A F32, F16 or BF16 tensor as f32, row-major; any other dtype is an error naming it.
    pub fn read_f32(&self, name: &str) -> Result<Vec<f32>> {
        let (bytes, dtype, _) = self.raw(name)?;
        Ok(match dtype {
            Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => bytes.chunks_exact(2).map(|b| f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => bytes.chunks_exact(2).map(|b| bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => {
                return Err(CheckpointError::UnsupportedDtype {
                    file: self.file_of(name).unwrap_or_default().to_string(),
                    tensor: name.to_string(),
                    dtype: other.to_string(),
                })
            }
        })
    }

    /// A tensor's bytes as stored, its dtype and its shape.
    pub fn raw(&self, name: &str) -> Result<(&[u8], Dtype, &[usize])> {
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| CheckpointError::TensorNotFound { file: self.source.clone(), tensor: name.to_string() })?;
        let shard = &self.shards[entry.shard];
        let bytes = shard.bytes.get(entry.start..entry.end).ok_or_else(|| CheckpointError::TensorPastEnd {
            file: shard.file.clone(),
            tensor: name.to_string(),
            start: entry.start as u64,
            end: entry.end as u64,
            file_len: shard.bytes.len() as u64,
        })?;
        Ok((bytes, entry.dtype, &entry.shape))
    }

    /// What the checkpoint was opened from (a file, an index or a directory).
    pub fn source(&self) -> &str {
        &self.source
    }

    fn open_file(path: &Path) -> Result<SafeTensors> {
        let file = path.display().to_string();
        SafeTensors::from_shards(file.clone(), map_shards(&[file])?, None)
    }

    fn open_index(index: &Path) -> Result<SafeTensors> {
        let file = index.display().to_string();
        let fail = |reason: String| CheckpointError::ShardIndex { file: file.clone(), reason };
        let text =
            std::fs::read_to_string(index).map_err(|source| CheckpointError::Io { file: file.clone(), source })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| fail(format!("not json: {e}")))?;
        let weight_map = json
            .get("weight_map")
            .and_then(serde_json::Value::as_object)
            .ok_or_else(|| fail("no `weight_map` object".into()))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut shard_ids = BTreeMap::new();
        let mut wanted = BTreeMap::new();
        for (tensor, shard) in weight_map {
            let shard = shard.as_str().ok_or_else(|| fail(format!("shard of `{tensor}` is not a string")))?;
            let plain = Path::new(shard).components().all(|c| matches!(c, Component::Normal(_)));
            if !plain || shard.is_empty() {
                return Err(fail(format!("shard `{shard}` of `{tensor}` is not a file name in the index's directory")));
            }
            let next = shard_ids.len();
            let id = *shard_ids.entry(shard.to_string()).or_insert(next);
            wanted.insert(tensor.clone(), id);
        }
        let mut files = vec![String::new(); shard_ids.len()];
        for (shard, id) in shard_ids {
            files[id] = dir.join(shard).display().to_string();
        }
        SafeTensors::from_shards(file, map_shards(&files)?, Some(wanted))
    }

    /// Parses every shard; with `wanted`, keeps exactly the tensors it names, each from its shard.
    fn from_shards(source: String, shards: Vec<Shard>, wanted: Option<BTreeMap<String, usize>>) -> Result<SafeTensors> {
        let mut per_shard = Vec::with_capacity(shards.len());
        for (id, shard) in shards.iter().enumerate() {
            per_shard.push(parse_shard(&shard.file, &shard.bytes, id)?);
        }
        let tensors = match wanted {
            None => per_shard.into_iter().flatten().collect(),
            Some(wanted) => {
                let mut tensors = BTreeMap::new();
                for (name, id) in wanted {
                    let entry = per_shard[id].remove(&name).ok_or_else(|| CheckpointError::MissingFromShard {
                        file: shards[id].file.clone(),
                        tensor: name.clone(),
                    })?;
                    tensors.insert(name, entry);
                }
                tensors
            }
        };
        Ok(SafeTensors { source, shards, tensors })
    }
}

fn map_shards(files: &[String]) -> Result<Vec<Shard>> {
    files.iter().map(|file| Ok(Shard { file: file.clone(), bytes: Bytes::map(Path::new(file))? })).collect()
}
