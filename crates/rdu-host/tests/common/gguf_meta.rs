//! Test helper: GGUF bytes with metadata only (no tensors), parsed in memory; after rdu-checkpoint's test writer.

use rdu_checkpoint::{Gguf, GgufValue, GgufValueType};

/// A GGUF parsed from bytes holding only `kvs`.
pub fn gguf_with(kvs: &[(&str, GgufValue)]) -> Gguf {
    let mut out = Vec::new();
    out.extend_from_slice(b"GGUF");
    put_u32(&mut out, 3);
    put_u64(&mut out, 0);
    put_u64(&mut out, kvs.len() as u64);
    for (key, value) in kvs {
        put_str(&mut out, key);
        put_u32(&mut out, value.value_type().id());
        put_value(&mut out, value);
    }
    out.resize(out.len().next_multiple_of(32), 0);
    Gguf::from_bytes("test.gguf", out).expect("a valid in-memory GGUF")
}

pub fn strings(items: &[&str]) -> GgufValue {
    GgufValue::Array(GgufValueType::String, items.iter().map(|s| GgufValue::String(s.to_string())).collect())
}

pub fn f32s(items: &[f32]) -> GgufValue {
    GgufValue::Array(GgufValueType::F32, items.iter().map(|&v| GgufValue::F32(v)).collect())
}

pub fn i32s(items: &[i32]) -> GgufValue {
    GgufValue::Array(GgufValueType::I32, items.iter().map(|&v| GgufValue::I32(v)).collect())
}

pub fn string(s: &str) -> GgufValue {
    GgufValue::String(s.to_string())
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, value: &GgufValue) {
    use GgufValue as V;
    match value {
        V::U8(v) => out.push(*v),
        V::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::Bool(v) => out.push(u8::from(*v)),
        V::String(v) => put_str(out, v),
        V::Array(ty, items) => {
            put_u32(out, ty.id());
            put_u64(out, items.len() as u64);
            for item in items {
                put_value(out, item);
            }
        }
        V::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        V::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}
