//! GGUF metadata values and the bounds-checked cursor that reads them; tensor infos are in `gguf`.

/// Longest key or string value accepted (1 MiB).
pub const MAX_STRING_LEN: u64 = 1 << 20;
/// Most elements in one metadata array.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Most array elements across all metadata of one file.
pub const MAX_TOTAL_ARRAY_ELEMENTS: u64 = 1 << 25;
/// Deepest nesting of arrays inside arrays (a plain array is level 1).
pub const MAX_NESTING: u32 = 4;

macro_rules! gguf_types {
    ($($(#[$doc:meta])* $variant:ident = $id:literal, $name:literal, $min_size:literal, ($($field:ty),*);)*) => {
        /// A GGUF metadata value type id (`gguf_metadata_value_type`).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum GgufValueType {
            $($variant = $id,)*
        }

        /// A GGUF metadata value. Arrays keep their element type so an empty array round-trips.
        #[derive(Clone, Debug, PartialEq)]
        pub enum GgufValue {
            $($(#[$doc])* $variant($($field),*),)*
        }

        impl GgufValueType {
            /// The type with this id, if it is one of the 13 GGUF defines.
            pub fn from_id(id: u32) -> Option<GgufValueType> {
                match id {
                    $($id => Some(GgufValueType::$variant),)*
                    _ => None,
                }
            }

            /// The type's name in messages: `u8` … `f64`, `bool`, `string`, `array`.
            pub fn name(self) -> &'static str {
                match self {
                    $(GgufValueType::$variant => $name,)*
                }
            }

            /// Fewest bytes one value of this type can occupy in a file.
            pub(crate) fn min_size(self) -> u64 {
                match self {
                    $(GgufValueType::$variant => $min_size,)*
                }
            }
        }

        impl GgufValue {
            /// The value's type.
            pub fn value_type(&self) -> GgufValueType {
                match self {
                    $(GgufValue::$variant(..) => GgufValueType::$variant,)*
                }
            }
        }
    };
}

gguf_types! {
    U8 = 0, "u8", 1, (u8);
    I8 = 1, "i8", 1, (i8);
    U16 = 2, "u16", 2, (u16);
    I16 = 3, "i16", 2, (i16);
    U32 = 4, "u32", 4, (u32);
    I32 = 5, "i32", 4, (i32);
    F32 = 6, "f32", 4, (f32);
    Bool = 7, "bool", 1, (bool);
    /// Invalid UTF-8 in a string value is replaced by U+FFFD (keys and tensor names must be valid).
    String = 8, "string", 8, (String);
    Array = 9, "array", 12, (GgufValueType, Vec<GgufValue>);
    U64 = 10, "u64", 8, (u64);
    I64 = 11, "i64", 8, (i64);
    F64 = 12, "f64", 8, (f64);
}

impl GgufValueType {
    /// The numeric id stored in GGUF files.
    pub fn id(self) -> u32 {
        self as u32
    }
}

impl GgufValue {
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
