//! GGUF metadata values and the bounds-checked cursor that reads them; tensor infos are in `gguf`.

use crate::error::{CheckpointError, Result};

/// Longest key or string value accepted (1 MiB).
pub const MAX_STRING_LEN: u64 = 1 << 20;
/// Most elements in one metadata array.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Most array elements across all metadata of one file.
pub const MAX_TOTAL_ARRAY_ELEMENTS: u64 = 1 << 25;
/// Deepest nesting of arrays inside arrays (a plain array is level 1).
pub const MAX_NESTING: u32 = 4;

/// A GGUF metadata value type id (`gguf_metadata_value_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgufValueType {
    U8 = 0,
    I8 = 1,
    U16 = 2,
    I16 = 3,
    U32 = 4,
    I32 = 5,
    F32 = 6,
    Bool = 7,
    String = 8,
    Array = 9,
    U64 = 10,
    I64 = 11,
    F64 = 12,
}

/// A GGUF metadata value. Arrays keep their element type so an empty array round-trips.
#[derive(Clone, Debug, PartialEq)]
pub enum GgufValue {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    /// Invalid UTF-8 in a string value is replaced by U+FFFD (keys and tensor names must be valid).
    String(String),
    Array(GgufValueType, Vec<GgufValue>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl GgufValueType {
    /// The type with this id, if it is one of the 13 GGUF defines.
    pub fn from_id(id: u32) -> Option<GgufValueType> {
        use GgufValueType::*;
        const ALL: [GgufValueType; 13] = [
            U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64,
        ];
        ALL.get(id as usize).copied()
    }

    /// The numeric id stored in GGUF files.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// The type's name in messages: `u8` … `f64`, `bool`, `string`, `array`.
    pub fn name(self) -> &'static str {
        use GgufValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }

    /// Fewest bytes one value of this type can occupy in a file.
    fn min_size(self) -> u64 {
        use GgufValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }
}

impl GgufValue {
    /// The value's type.
    pub fn value_type(&self) -> GgufValueType {
        use GgufValue as V;
        use GgufValueType as T;
        match self {
            V::U8(_) => T::U8,
            V::I8(_) => T::I8,
            V::U16(_) => T::U16,
            V::I16(_) => T::I16,
            V::U32(_) => T::U32,
            V::I32(_) => T::I32,
            V::F32(_) => T::F32,
            V::Bool(_) => T::Bool,
            V::String(_) => T::String,
            V::Array(..) => T::Array,
            V::U64(_) => T::U64,
            V::I64(_) => T::I64,
            V::F64(_) => T::F64,
        }
    }

    /// Any integer type, widened; `None` for other types.
    pub fn as_i128(&self) -> Option<i128> {
        use GgufValue as V;
        Some(match *self {
            V::U8(v) => v.into(),
            V::I8(v) => v.into(),
            V::U16(v) => v.into(),
            V::I16(v) => v.into(),
            V::U32(v) => v.into(),
            V::I32(v) => v.into(),
            V::U64(v) => v.into(),
            V::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Any integer type whose value fits in u32.
    pub fn as_u32(&self) -> Option<u32> {
        self.as_i128().and_then(|v| u32::try_from(v).ok())
    }

    /// Any integer type whose value fits in u64.
    pub fn as_u64(&self) -> Option<u64> {
        self.as_i128().and_then(|v| u64::try_from(v).ok())
    }

    /// Any integer type whose value fits in i64.
    pub fn as_i64(&self) -> Option<i64> {
        self.as_i128().and_then(|v| i64::try_from(v).ok())
    }

    /// F32 or F64, or any integer type, as f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            GgufValue::F32(v) => Some(v.into()),
            GgufValue::F64(v) => Some(v),
            _ => self.as_i128().map(|v| v as f64),
        }
    }

    /// F32 or F64, or any integer type, as f32 (F64 is rounded).
    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            GgufValue::F32(v) => Some(v),
            _ => self.as_f64().map(|v| v as f32),
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            GgufValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::String(v) => Some(v),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[GgufValue]> {
        match self {
            GgufValue::Array(_, items) => Some(items),
            _ => None,
        }
    }

    /// A short description for error messages, e.g. `a string` or `an array of u32`.
    pub(crate) fn describe(&self) -> String {
        match self {
            GgufValue::Array(ty, _) => format!("an array of {}", ty.name()),
            other => format!("a {}", other.value_type().name()),
        }
    }
}

/// Reads little-endian fields from a file's bytes, never past the end.
pub(crate) struct Cursor<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) pos: usize,
    pub(crate) file: &'a str,
    /// Array elements still allowed in this file (see `MAX_TOTAL_ARRAY_ELEMENTS`).
    pub(crate) array_budget: u64,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8], file: &'a str) -> Cursor<'a> {
        Cursor {
            data,
            pos: 0,
            file,
            array_budget: MAX_TOTAL_ARRAY_ELEMENTS,
        }
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
        CheckpointError::LimitExceeded {
            file: self.file.to_string(),
            what,
            value,
            limit,
        }
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
        let elem =
            GgufValueType::from_id(type_id).ok_or_else(|| CheckpointError::UnknownValueType {
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
