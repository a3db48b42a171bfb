//! A bounds-checked little-endian reader over GGUF bytes that enforces the string, array and nesting caps.

use crate::error::{CheckpointError, Result};
use crate::gguf_value::{
    GgufValue, GgufValueType, MAX_ARRAY_LEN, MAX_NESTING, MAX_STRING_LEN, MAX_TOTAL_ARRAY_ELEMENTS,
};

/// Reads little-endian fields from a file's bytes, never past the end.
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) file: &'a str,
    /// Array elements still allowed in this file (see `MAX_TOTAL_ARRAY_ELEMENTS`).
    array_budget: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], file: &'a str) -> Cursor<'a> {
        Cursor { data, pos: 0, file, array_budget: MAX_TOTAL_ARRAY_ELEMENTS }
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.data.len() - self.pos) as u64
    }

    /// The next `n` bytes; `what` names the field for the truncation error.
    pub(crate) fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(CheckpointError::Truncated {
                file: self.file.to_string(),
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let bytes = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(bytes)
    }

    pub(crate) fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        self.bytes(|| what.to_string())
    }

    fn bytes<const N: usize>(&mut self, what: impl FnOnce() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    pub(crate) fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A `gguf_string` (u64 length + bytes) of at most `max` bytes, as raw bytes.
    pub(crate) fn string(&mut self, max: u64, what: impl Fn() -> String) -> Result<&'a [u8]> {
        let len = u64::from_le_bytes(self.bytes(|| format!("length of the {}", what()))?);
        if len > max {
            return Err(self.limit(format!("length of the {}", what()), len, max));
        }
        self.take(len, what)
    }

    /// A `gguf_string` that must be valid UTF-8.
    pub(crate) fn utf8(&mut self, max: u64, what: impl Fn() -> String) -> Result<String> {
        let offset = self.pos as u64;
        let bytes = self.string(max, &what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| CheckpointError::InvalidUtf8 {
            file: self.file.to_string(),
            what: what(),
            offset,
        })
    }

    pub(crate) fn limit(&self, what: String, value: u64, limit: u64) -> CheckpointError {
        CheckpointError::LimitExceeded { file: self.file.to_string(), what, value, limit }
    }

    /// One metadata value of type `ty` for `key`, `depth` arrays deep.
    pub(crate) fn value(&mut self, ty: GgufValueType, key: &str, depth: u32) -> Result<GgufValue> {
        use GgufValue as V;
        use GgufValueType as T;
        let what = "metadata value";
        Ok(match ty {
            T::U8 => V::U8(u8::from_le_bytes(self.array(what)?)),
            T::I8 => V::I8(i8::from_le_bytes(self.array(what)?)),
            T::U16 => V::U16(u16::from_le_bytes(self.array(what)?)),
            T::I16 => V::I16(i16::from_le_bytes(self.array(what)?)),
            T::U32 => V::U32(u32::from_le_bytes(self.array(what)?)),
            T::I32 => V::I32(i32::from_le_bytes(self.array(what)?)),
            T::F32 => V::F32(f32::from_le_bytes(self.array(what)?)),
            T::U64 => V::U64(u64::from_le_bytes(self.array(what)?)),
            T::I64 => V::I64(i64::from_le_bytes(self.array(what)?)),
            T::F64 => V::F64(f64::from_le_bytes(self.array(what)?)),
            T::Bool => match self.array::<1>(what)?[0] {
                0 => V::Bool(false),
                1 => V::Bool(true),
                value => {
                    return Err(CheckpointError::InvalidBool {
                        file: self.file.to_string(),
                        key: key.to_string(),
                        value,
                    })
                }
            },
            T::String => {
                let bytes = self.string(MAX_STRING_LEN, || format!("string value of `{key}`"))?;
                V::String(String::from_utf8_lossy(bytes).into_owned())
            }
            T::Array => self.array_value(key, depth + 1)?,
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<GgufValue> {
        if depth > MAX_NESTING {
            return Err(CheckpointError::NestingTooDeep {
                file: self.file.to_string(),
                key: key.to_string(),
                max: MAX_NESTING,
            });
        }
        let type_id = self.u32("array element type")?;
        let elem = GgufValueType::from_id(type_id).ok_or_else(|| CheckpointError::UnknownValueType {
            file: self.file.to_string(),
            key: key.to_string(),
            type_id,
        })?;
        let count = self.u64("array length")?;
        let fits = self.remaining() / elem.min_size();
        let limit = MAX_ARRAY_LEN.min(fits).min(self.array_budget);
        if count > limit {
            return Err(self.limit(format!("array length of `{key}`"), count, limit));
        }
        self.array_budget -= count;
        let mut items = Vec::with_capacity(count as usize);
        for _ in 0..count {
            items.push(self.value(elem, key, depth)?);
        }
        Ok(GgufValue::Array(elem, items))
    }
}
