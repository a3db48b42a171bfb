//! A minimal GGUF v3 writer for tests: no metadata, tensors of F32, Q8_0 (quantised here) or raw Q4_0 blocks.

use std::path::Path;

/// One tensor's data as the file stores it.
pub enum Data {
    F32(Vec<f32>),
    /// Values quantised to Q8_0 blocks with `rdu_checkpoint::quantize_q8_0`.
    Q8(Vec<f32>),
    /// Zeroed Q4_0 blocks, a type that cannot serve q8_0 storage.
    Q4Zero,
}

const ALIGN: usize = 32;

/// Writes `tensors` (name, numpy-order shape, data) as a GGUF file at `path`.
pub fn write_gguf(path: &Path, tensors: &[(String, Vec<usize>, Data)]) {
    let mut blobs = Vec::new();
    for (_, shape, data) in tensors {
        let n: usize = shape.iter().product();
        let (type_id, bytes): (u32, Vec<u8>) = match data {
            Data::F32(v) => (0, v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            Data::Q8(v) => {
                let q = rdu_checkpoint::quantize_q8_0(v, shape).unwrap();
                let mut bytes = Vec::new();
                for b in &q.blocks {
                    bytes.extend(half::f16::from_f32(b.d).to_le_bytes());
                    bytes.extend(b.qs.iter().map(|&q| q as u8));
                }
                (8, bytes)
            }
            Data::Q4Zero => (2, vec![0u8; n / 32 * 18]),
        };
        blobs.push((type_id, bytes));
    }
    let mut out = Vec::new();
    out.extend(b"GGUF");
    out.extend(3u32.to_le_bytes());
    out.extend((tensors.len() as u64).to_le_bytes());
    out.extend(0u64.to_le_bytes());
    let mut offset = 0usize;
    for ((name, shape, _), (type_id, bytes)) in tensors.iter().zip(&blobs) {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
        out.extend((shape.len() as u32).to_le_bytes());
        for &d in shape.iter().rev() {
            out.extend((d as u64).to_le_bytes());
        }
        out.extend(type_id.to_le_bytes());
        out.extend((offset as u64).to_le_bytes());
        offset = (offset + bytes.len()).next_multiple_of(ALIGN);
    }
    out.resize(out.len().next_multiple_of(ALIGN), 0);
    for (_, bytes) in &blobs {
        out.extend(bytes);
        out.resize(out.len().next_multiple_of(ALIGN), 0);
    }
    std::fs::write(path, out).unwrap();
}
