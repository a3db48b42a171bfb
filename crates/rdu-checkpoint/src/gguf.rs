//! GGUF v2/v3 reader over mmap: header, metadata and tensor infos, every size checked against the file before use.

use crate::bytes::Bytes;
use crate::error::{CheckpointError, Result};
use crate::ggml::{self, GgmlType};
use crate::gguf_parse::{GgufTensor, Header};
use crate::gguf_value::GgufValue;
use crate::q8::{Q8Block, Q8Weight};
use std::path::Path;

/// An open GGUF file: metadata in file order, tensor infos checked against the file length.
pub struct Gguf {
    file: String,
    bytes: Bytes,
    header: Header,
}

impl Gguf {
    /// Maps and parses the GGUF file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Gguf> {
        let path = path.as_ref();
        Gguf::parse(path.display().to_string(), Bytes::map(path)?)
    }

    /// Maps and parses the GGUF file at `path` as [`Gguf::open`] does (every check the same),
    /// keeping its metadata's scalars and strings but not its arrays: for a reader of tensors,
    /// which would otherwise carry the tokenizer's vocabulary (a million values for a 262,144-token
    /// vocabulary, tens of MB) for as long as it reads weights. `get` of an array key is `None`.
    pub fn open_for_tensors(path: impl AsRef<Path>) -> Result<Gguf> {
        Gguf::open(path).map(Gguf::without_arrays)
    }

    /// [`Gguf::open_for_tensors`] with the file read whole into memory on huge pages instead
    /// of mapped: for an engine that streams every weight on every step, which then reads
    /// them at up to twice the bandwidth (see `Bytes::read_resident`). The same resident size
    /// once every weight has been read; the memory is the process's own, not page cache.
    /// `on_read(bytes read, file size)` reports progress every 64 MiB (a file larger than the
    /// available memory is mapped instead, and reports nothing).
    pub fn open_resident(path: impl AsRef<Path>, on_read: &mut dyn FnMut(u64, u64)) -> Result<Gguf> {
        let path = path.as_ref();
        Gguf::parse(path.display().to_string(), Bytes::read_resident(path, on_read)?).map(Gguf::without_arrays)
    }

    /// The metadata's arrays dropped (see [`Gguf::open_for_tensors`]).
    fn without_arrays(mut gguf: Gguf) -> Gguf {
        gguf.header.metadata.retain(|(_, v)| !matches!(v, GgufValue::Array(..)));
        gguf.header.metadata.shrink_to_fit();
        gguf.header.key_index = gguf.header.metadata.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
        gguf
    }

    /// Parses GGUF bytes already in memory; `label` stands for the file name in errors.
    pub fn from_bytes(label: &str, bytes: Vec<u8>) -> Result<Gguf> {
        Gguf::parse(label.to_string(), Bytes::Owned(bytes))
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    pub fn version(&self) -> u32 {
        self.header.version
    }

    pub fn alignment(&self) -> u64 {
        self.header.alignment
    }

    /// Byte offset of the data section in the file.
    pub fn data_start(&self) -> u64 {
        self.header.data_start
    }

    /// All metadata entries in file order.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &GgufValue)> {
        self.header.metadata.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.header.key_index.get(key).map(|&i| &self.header.metadata[i].1)
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
        self.typed(key, "an array of strings", |v| v.as_array()?.iter().map(GgufValue::as_str).collect())
    }

    /// An array of numbers of any type, e.g. `tokenizer.ggml.scores`.
    pub fn get_f32_array(&self, key: &str) -> Result<Option<Vec<f32>>> {
        self.typed(key, "an array of numbers", |v| v.as_array()?.iter().map(GgufValue::as_f32).collect())
    }

    /// An array of integers of any type that fit in i64, e.g. `tokenizer.ggml.token_type`.
    pub fn get_i64_array(&self, key: &str) -> Result<Option<Vec<i64>>> {
        self.typed(key, "an array of integers", |v| v.as_array()?.iter().map(GgufValue::as_i64).collect())
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[GgufTensor] {
        &self.header.tensors
    }

    pub fn tensor(&self, name: &str) -> Option<&GgufTensor> {
        self.header.tensor_index.get(name).map(|&i| &self.header.tensors[i])
    }

    /// The raw bytes of a tensor's data.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        let tensor = self.find(name)?;
        let start = self.header.data_start + tensor.offset;
        let range = start as usize..(start + tensor.n_bytes) as usize;
        self.bytes.get(range).ok_or_else(|| self.past_end(name, start, tensor.n_bytes))
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
    pub fn read_q8_0(&self, name: &str) -> Result<Q8Weight> {
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
        Ok(Q8Weight {
            shape: tensor.shape.clone(),
            blocks: bytes.chunks_exact(block_bytes).map(Q8Block::from_bytes).collect(),
        })
    }

    fn find(&self, name: &str) -> Result<&GgufTensor> {
        self.tensor(name)
            .ok_or_else(|| CheckpointError::TensorNotFound { file: self.file.clone(), tensor: name.to_string() })
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
        convert(value).map(Some).ok_or_else(|| CheckpointError::MetadataType {
            file: self.file.clone(),
            key: key.to_string(),
            expected,
            found: value.describe(),
        })
    }

    fn parse(file: String, bytes: Bytes) -> Result<Gguf> {
        let header = crate::gguf_parse::parse(&file, &bytes)?;
        Ok(Gguf { file, bytes, header })
    }
}
