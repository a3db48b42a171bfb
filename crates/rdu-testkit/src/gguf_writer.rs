//! Test helper: builds GGUF bytes in memory (metadata of every type, tensors of any ggml type id).

use rdu_checkpoint::{GgufValue, GgufValueType};

/// One tensor to write: GGUF dims (ne0 first), raw ggml type id, raw data bytes.
pub struct TensorSpec {
    pub name: String,
    pub dims: Vec<u64>,
    pub type_id: u32,
    pub data: Vec<u8>,
    /// Written instead of the computed offset when set.
    pub offset: Option<u64>,
}

/// Builds a GGUF file: header, metadata, tensor infos, padding, aligned tensor data.
pub struct GgufWriter {
    pub version: u32,
    pub alignment: u64,
    pub kvs: Vec<(String, GgufValue)>,
    pub tensors: Vec<TensorSpec>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter { version: 3, alignment: 32, kvs: Vec::new(), tensors: Vec::new() }
    }
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn kv(mut self, key: &str, value: GgufValue) -> Self {
        self.kvs.push((key.to_string(), value));
        self
    }

    pub fn tensor(mut self, name: &str, dims: &[u64], type_id: u32, data: Vec<u8>) -> Self {
        self.tensors.push(TensorSpec { name: name.to_string(), dims: dims.to_vec(), type_id, data, offset: None });
        self
    }

    /// The file's bytes. `general.alignment` is written only if present in `kvs`; `alignment`
    /// is what the writer pads to.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(b"GGUF");
        put_u32(&mut out, self.version);
        put_u64(&mut out, self.tensors.len() as u64);
        put_u64(&mut out, self.kvs.len() as u64);
        for (key, value) in &self.kvs {
            put_str(&mut out, key);
            put_u32(&mut out, value.value_type().id());
            put_value(&mut out, value);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            put_u32(&mut out, t.dims.len() as u32);
            for &d in &t.dims {
                put_u64(&mut out, d);
            }
            put_u32(&mut out, t.type_id);
            put_u64(&mut out, t.offset.unwrap_or(offset));
            offsets.push(offset);
            offset = (offset + t.data.len() as u64).next_multiple_of(self.alignment);
        }
        pad(&mut out, self.alignment);
        let data_start = out.len();
        for (t, off) in self.tensors.iter().zip(offsets) {
            out.resize(data_start + off as usize, 0);
            out.extend_from_slice(&t.data);
        }
        pad(&mut out, self.alignment);
        out
    }
}

pub fn pad(out: &mut Vec<u8>, alignment: u64) {
    let len = (out.len() as u64).next_multiple_of(alignment) as usize;
    out.resize(len, 0);
}

pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u64(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// A value's payload (without its type id), as GGUF lays it out.
pub fn put_value(out: &mut Vec<u8>, value: &GgufValue) {
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

/// One value of each of the 13 metadata types, plus nested and empty arrays.
pub fn every_value() -> Vec<(&'static str, GgufValue)> {
    use GgufValue as V;
    vec![
        ("t.u8", V::U8(250)),
        ("t.i8", V::I8(-7)),
        ("t.u16", V::U16(65_000)),
        ("t.i16", V::I16(-30_000)),
        ("t.u32", V::U32(4_000_000_000)),
        ("t.i32", V::I32(-2_000_000_000)),
        ("t.f32", V::F32(1.5e-6)),
        ("t.bool", V::Bool(true)),
        ("t.string", V::String("grüße, llama ✓".into())),
        ("t.array", V::Array(GgufValueType::U32, vec![V::U32(1), V::U32(2), V::U32(3)])),
        ("t.u64", V::U64(u64::MAX - 1)),
        ("t.i64", V::I64(i64::MIN + 1)),
        ("t.f64", V::F64(-2.5e300)),
        ("t.strings", V::Array(GgufValueType::String, vec![V::String("a".into()), V::String(String::new())])),
        ("t.empty", V::Array(GgufValueType::F32, vec![])),
        (
            "t.nested",
            V::Array(
                GgufValueType::Array,
                vec![
                    V::Array(GgufValueType::I8, vec![V::I8(-1), V::I8(2)]),
                    V::Array(GgufValueType::Bool, vec![V::Bool(false)]),
                ],
            ),
        ),
    ]
}

/// f16 bits of `v`, little-endian.
pub fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_le_bytes()
}

/// A GGUF parsed from bytes holding only the metadata `kvs` (no tensors).
pub fn gguf_with(kvs: &[(&str, GgufValue)]) -> rdu_checkpoint::Gguf {
    let writer = kvs.iter().fold(GgufWriter::new(), |w, (key, value)| w.kv(key, value.clone()));
    rdu_checkpoint::Gguf::from_bytes("test.gguf", writer.build()).expect("a valid in-memory GGUF")
}

pub fn string(s: &str) -> GgufValue {
    GgufValue::String(s.to_string())
}

pub fn strings(items: &[&str]) -> GgufValue {
    GgufValue::Array(GgufValueType::String, items.iter().map(|s| string(s)).collect())
}

pub fn f32s(items: &[f32]) -> GgufValue {
    GgufValue::Array(GgufValueType::F32, items.iter().map(|&v| GgufValue::F32(v)).collect())
}

pub fn i32s(items: &[i32]) -> GgufValue {
    GgufValue::Array(GgufValueType::I32, items.iter().map(|&v| GgufValue::I32(v)).collect())
}

/// One tensor's data for [`write_tensors`].
pub enum Data {
    F32(Vec<f32>),
    /// Values quantised to Q8_0 blocks with `rdu_checkpoint::quantize_q8_0`.
    Q8(Vec<f32>),
    /// Zeroed Q4_0 blocks, a type that cannot serve q8_0 storage.
    Q4Zero,
}

/// Writes `tensors` (name, numpy-order shape, data) as a GGUF v3 file at `path`, without metadata.
pub fn write_tensors(path: &std::path::Path, tensors: &[(String, Vec<usize>, Data)]) {
    let mut writer = GgufWriter::new();
    for (name, shape, data) in tensors {
        let n: usize = shape.iter().product();
        let (type_id, bytes): (u32, Vec<u8>) = match data {
            Data::F32(v) => (0, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            Data::Q8(v) => {
                let q = rdu_checkpoint::quantize_q8_0(v, shape).expect("quantisable");
                (
                    8,
                    q.blocks
                        .iter()
                        .flat_map(|b| f16_bytes(b.d).into_iter().chain(b.qs.iter().map(|&q| q as u8)))
                        .collect(),
                )
            }
            Data::Q4Zero => (2, vec![0u8; n / 32 * 18]),
        };
        let dims: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        writer = writer.tensor(name, &dims, type_id, bytes);
    }
    std::fs::write(path, writer.build()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
