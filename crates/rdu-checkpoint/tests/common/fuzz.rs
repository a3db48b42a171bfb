//! Test helper: seed GGUF files, byte mutations, a tiny xorshift RNG, and a reader workout.
#![allow(dead_code)]

use rdu_checkpoint::{GgmlType, Gguf, GgufValue, GgufValueType, SafeTensors};
use rdu_testkit::gguf_writer::{every_value, f16_bytes, GgufWriter};

/// Values worth writing over a length, count, dim or offset field.
pub const INTERESTING: [u64; 16] = [
    0,
    1,
    2,
    5,
    13,
    32,
    255,
    1 << 16,
    (1 << 31) - 1,
    1 << 32,
    u32::MAX as u64,
    1 << 40,
    1 << 60,
    i64::MAX as u64,
    u64::MAX - 1,
    u64::MAX,
];

/// One change to a file's bytes; positions wrap around the current length.
#[derive(Clone, Debug)]
pub enum Mutation {
    FlipBit { at: u64, bit: u8 },
    Truncate { len: u64 },
    WriteU64 { at: u64, value: u64 },
    WriteU32 { at: u64, value: u32 },
}

pub fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        let at = |pos: u64, bytes: &Vec<u8>| (pos % bytes.len() as u64) as usize;
        match *m {
            Mutation::FlipBit { at: pos, bit } => {
                let i = at(pos, &bytes);
                bytes[i] ^= 1 << (bit % 8);
            }
            Mutation::Truncate { len } => {
                let len = (len % bytes.len() as u64) as usize;
                bytes.truncate(len);
            }
            Mutation::WriteU64 { at: pos, value } => {
                let i = at(pos, &bytes);
                write_clipped(&mut bytes, i, &value.to_le_bytes());
            }
            Mutation::WriteU32 { at: pos, value } => {
                let i = at(pos, &bytes);
                write_clipped(&mut bytes, i, &value.to_le_bytes());
            }
        }
    }
    bytes
}

fn write_clipped(bytes: &mut [u8], at: usize, value: &[u8]) {
    let end = (at + value.len()).min(bytes.len());
    bytes[at..end].copy_from_slice(&value[..end - at]);
}

/// Valid GGUF files to mutate: every metadata type, and one tensor of each dequantisable type
/// plus an unsupported one.
pub fn seeds() -> Vec<Vec<u8>> {
    let mut writer = every_value()
        .into_iter()
        .fold(GgufWriter::new(), |w, (k, v)| w.kv(k, v))
        .kv("general.alignment", GgufValue::U32(32));
    let types = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q5_0,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q2_K,
    ];
    for (i, ty) in types.iter().enumerate() {
        let ne0 = ty.block_size().max(4);
        let n_bytes = (ne0 / ty.block_size() * ty.type_size()) as usize;
        let mut data: Vec<u8> = (0..n_bytes).map(|j| (j * 31 + i) as u8).collect();
        if ty.block_size() > 1 {
            data[..2].copy_from_slice(&f16_bytes(0.5));
        }
        writer = writer.tensor(&format!("blk.{i}.{}", ty.name()), &[ne0, 1], ty.id(), data);
    }
    let small = GgufWriter::new()
        .kv("k", GgufValue::Array(GgufValueType::String, vec![GgufValue::String("x".into())]))
        .tensor("w", &[32], GgmlType::Q8_0.id(), vec![3; 34]);
    vec![writer.build(), small.build()]
}

/// Opens `bytes` and reads everything it offers, formatting every error. Returns whether the
/// file opened. Any panic in here is a bug.
pub fn exercise_gguf(bytes: Vec<u8>) -> bool {
    let gguf = match Gguf::from_bytes("fuzz.gguf", bytes) {
        Ok(gguf) => gguf,
        Err(err) => {
            assert!(!err.to_string().is_empty());
            return false;
        }
    };
    for (key, value) in gguf.metadata() {
        let _ = (value.as_u64(), value.as_f32(), value.as_str(), value.as_array());
        let _ = gguf.get_u32(key).map_err(|e| e.to_string());
        let _ = gguf.get_str_array(key).map_err(|e| e.to_string());
        let _ = gguf.get_f32_array(key).map_err(|e| e.to_string());
    }
    for tensor in gguf.tensors() {
        let n: usize = tensor.shape.iter().product();
        if let Ok(values) = gguf.read_f32(&tensor.name) {
            assert_eq!(values.len(), n, "{}", tensor.name);
        }
        if let Ok(q8) = gguf.read_q8_0(&tensor.name) {
            assert_eq!(q8.n_elements(), n, "{}", tensor.name);
        }
    }
    true
}

/// The same for safetensors bytes.
pub fn exercise_safetensors(bytes: Vec<u8>) -> bool {
    match SafeTensors::from_bytes("fuzz.safetensors", bytes) {
        Ok(st) => {
            for name in st.names() {
                let _ = st.read_f32(name).map_err(|e| e.to_string());
            }
            true
        }
        Err(err) => {
            assert!(!err.to_string().is_empty());
            false
        }
    }
}

/// A valid safetensors file to mutate.
pub fn safetensors_seed() -> Vec<u8> {
    let header = r#"{"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},"b":{"dtype":"BF16","shape":[3],"data_offsets":[16,22]}}"#;
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend((0..22).map(|i| i as u8));
    out
}

/// xorshift64: a seeded, dependency-free RNG, good enough to pick mutations.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0.max(1);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A random mutation, biased towards the header (the first `header_len` bytes).
    pub fn mutation(&mut self, header_len: u64) -> Mutation {
        let at = if self.next() & 3 == 0 { self.next() } else { self.next() % header_len.max(1) };
        match self.next() % 8 {
            0..=2 => Mutation::FlipBit { at, bit: self.next() as u8 },
            3 => Mutation::Truncate { len: self.next() },
            4..=5 => Mutation::WriteU64 { at, value: self.interesting() },
            _ => Mutation::WriteU32 { at, value: self.interesting() as u32 },
        }
    }

    fn interesting(&mut self) -> u64 {
        match self.next() % 3 {
            0 => self.next(),
            _ => INTERESTING[(self.next() % INTERESTING.len() as u64) as usize],
        }
    }
}
