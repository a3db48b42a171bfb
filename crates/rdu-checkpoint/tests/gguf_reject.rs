//! Malformed GGUF input: each case is rejected with a specific error variant, never a panic.

use rdu_checkpoint::{CheckpointError as E, GgmlType, Gguf, GgufValue, GgufValueType};
use rdu_testkit::gguf_writer::{put_str, put_u32, put_u64, GgufWriter};

fn open(bytes: Vec<u8>) -> E {
    match Gguf::from_bytes("bad.gguf", bytes) {
        Ok(_) => panic!("malformed gguf was accepted"),
        Err(err) => err,
    }
}

/// Header with the given counts, ready for hand-written metadata or tensor infos.
fn header(n_tensors: u64, n_kv: u64) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    put_u32(&mut out, 3);
    put_u64(&mut out, n_tensors);
    put_u64(&mut out, n_kv);
    out
}

/// A file with one tensor info written by hand after the header.
fn one_tensor(name: &str, dims: &[u64], type_id: u32, offset: u64, data_len: usize) -> Vec<u8> {
    let mut out = header(1, 0);
    put_str(&mut out, name);
    put_u32(&mut out, dims.len() as u32);
    for &d in dims {
        put_u64(&mut out, d);
    }
    put_u32(&mut out, type_id);
    put_u64(&mut out, offset);
    out.resize(out.len().next_multiple_of(32) + data_len, 0);
    out
}

#[test]
fn bad_magic() {
    let mut bytes = GgufWriter::new().build();
    bytes[..4].copy_from_slice(b"GGML");
    let err = open(bytes);
    assert!(matches!(err, E::BadMagic { ref found, .. } if found == b"GGML"), "{err}");
}

#[test]
fn empty_file_and_truncated_header() {
    assert!(matches!(open(Vec::new()), E::Truncated { needed: 4, available: 0, .. }));
    let bytes = GgufWriter::new().build();
    let err = open(bytes[..10].to_vec());
    assert!(matches!(err, E::Truncated { ref what, offset: 8, .. } if what == "tensor count"), "{err}");
    assert_eq!(err.to_string(), "bad.gguf: truncated: the tensor count at byte 8 needs 8 bytes but only 2 remain");
}

#[test]
fn version_1_and_unknown_versions() {
    for version in [0, 1, 4, 0x0300_0000] {
        let mut writer = GgufWriter::new();
        writer.version = version;
        let err = open(writer.build());
        assert!(matches!(err, E::UnsupportedVersion { version: v, .. } if v == version), "{err}");
    }
}

#[test]
fn key_and_string_lengths_past_eof() {
    let mut bytes = header(0, 1);
    put_u64(&mut bytes, 1000);
    bytes.extend_from_slice(b"general.name");
    let err = open(bytes);
    assert!(matches!(err, E::Truncated { ref what, needed: 1000, .. } if what == "metadata key"), "{err}");

    let mut bytes = header(0, 1);
    put_str(&mut bytes, "general.name");
    put_u32(&mut bytes, GgufValueType::String.id());
    put_u64(&mut bytes, 64);
    bytes.extend_from_slice(b"short");
    let err = open(bytes);
    assert!(matches!(err, E::Truncated { ref what, .. } if what.contains("`general.name`")), "{err}");
}

#[test]
fn oversized_strings() {
    let mut bytes = header(0, 1);
    put_u64(&mut bytes, u64::MAX);
    bytes.extend_from_slice(&[0; 16]);
    let err = open(bytes);
    assert!(matches!(err, E::LimitExceeded { value: u64::MAX, limit: 1_048_576, .. }), "{err}");

    let name = "n".repeat(70_000);
    let err = open(one_tensor(&name, &[1], 0, 0, 4));
    assert!(matches!(err, E::LimitExceeded { value: 70_000, limit: 65_536, .. }), "{err}");
}

#[test]
fn huge_array_count() {
    let mut bytes = header(0, 1);
    put_str(&mut bytes, "tokenizer.ggml.tokens");
    put_u32(&mut bytes, GgufValueType::Array.id());
    put_u32(&mut bytes, GgufValueType::String.id());
    put_u64(&mut bytes, 1 << 60);
    bytes.extend_from_slice(&[0; 64]);
    let err = open(bytes);
    // 64 bytes left hold at most 8 string lengths.
    assert!(matches!(err, E::LimitExceeded { value, limit: 8, .. } if value == 1 << 60), "{err}");
    assert!(err.to_string().contains("array length of `tokenizer.ggml.tokens`"), "{err}");
}

#[test]
fn huge_kv_and_tensor_counts() {
    let err = open(header(0, u64::MAX));
    assert!(matches!(err, E::LimitExceeded { ref what, .. } if what == "metadata count"), "{err}");
    let err = open(header(1 << 40, 0));
    assert!(matches!(err, E::LimitExceeded { ref what, .. } if what == "tensor count"), "{err}");
}

#[test]
fn deep_nesting() {
    let mut value = GgufValue::Array(GgufValueType::U8, vec![GgufValue::U8(1)]);
    for _ in 0..3 {
        value = GgufValue::Array(GgufValueType::Array, vec![value]);
    }
    let ok = GgufWriter::new().kv("k", value.clone()).build();
    assert!(Gguf::from_bytes("ok.gguf", ok).is_ok(), "four levels are allowed");
    let deeper = GgufValue::Array(GgufValueType::Array, vec![value]);
    let err = open(GgufWriter::new().kv("k", deeper).build());
    assert!(matches!(err, E::NestingTooDeep { max: 4, ref key, .. } if key == "k"), "{err}");
}

#[test]
fn bad_metadata_values() {
    let mut bytes = header(0, 1);
    put_str(&mut bytes, "k");
    put_u32(&mut bytes, 13);
    bytes.push(0);
    assert!(matches!(open(bytes), E::UnknownValueType { type_id: 13, .. }));

    let mut bytes = header(0, 1);
    put_str(&mut bytes, "k");
    put_u32(&mut bytes, GgufValueType::Bool.id());
    bytes.push(2);
    assert!(matches!(open(bytes), E::InvalidBool { value: 2, .. }));

    let mut bytes = header(0, 1);
    put_u64(&mut bytes, 2);
    bytes.extend_from_slice(&[0xff, 0xfe]);
    put_u32(&mut bytes, GgufValueType::U8.id());
    bytes.push(0);
    assert!(matches!(open(bytes), E::InvalidUtf8 { offset: 24, .. }));

    let dup = GgufWriter::new().kv("k", GgufValue::U8(1)).kv("k", GgufValue::U8(2));
    assert!(matches!(open(dup.build()), E::DuplicateKey { ref key, .. } if key == "k"));
}

#[test]
fn bad_alignment() {
    for value in [0u32, 12, 1 << 31] {
        let writer = GgufWriter::new().kv("general.alignment", GgufValue::U32(value));
        let err = open(writer.build());
        assert!(matches!(err, E::BadAlignment { value: v, .. } if v == u64::from(value)), "{err}");
    }
    let writer = GgufWriter::new().kv("general.alignment", GgufValue::String("32".into()));
    assert!(matches!(open(writer.build()), E::MetadataType { .. }));
}

#[test]
fn five_dims() {
    let err = open(one_tensor("t", &[1, 1, 1, 1, 1], 0, 0, 4));
    assert!(matches!(err, E::TooManyDims { n_dims: 5, ref tensor, .. } if tensor == "t"), "{err}");
}

#[test]
fn zero_and_overflowing_dims() {
    let err = open(one_tensor("t", &[4, 0], 0, 0, 16));
    assert!(matches!(err, E::BadDims { reason: "contain a zero", .. }), "{err}");
    let err = open(one_tensor("t", &[1 << 32, 1 << 32], 0, 0, 16));
    assert!(matches!(err, E::BadDims { .. }), "{err}");
}

#[test]
fn tensor_data_past_eof() {
    let err = open(one_tensor("w", &[1000], 0, 0, 8));
    assert!(matches!(err, E::TensorPastEnd { ref tensor, .. } if tensor == "w"), "{err}");
    let err = open(one_tensor("w", &[4], 0, u64::MAX - 31, 16));
    assert!(matches!(err, E::TensorPastEnd { end: u64::MAX, .. }), "{err}");
}

#[test]
fn misaligned_offset() {
    let err = open(one_tensor("w", &[1], 0, 4, 64));
    assert!(matches!(err, E::MisalignedTensor { offset: 4, alignment: 32, .. }), "{err}");
}

#[test]
fn unknown_and_removed_type_ids() {
    let err = open(one_tensor("w", &[32], 99, 0, 64));
    assert!(matches!(err, E::UnknownGgmlType { type_id: 99, .. }), "{err}");
    assert!(err.to_string().contains("unknown ggml type id 99"), "{err}");
    let err = open(one_tensor("w", &[32], 31, 0, 64));
    assert!(matches!(err, E::UnknownGgmlType { type_id: 31, .. }), "{err}");
    assert!(err.to_string().contains("Q4_0_4_4"), "{err}");
}

#[test]
fn innermost_dim_not_a_block_multiple() {
    let err = open(one_tensor("w", &[33, 2], GgmlType::Q8_0.id(), 0, 256));
    assert!(matches!(err, E::NotBlockMultiple { ne0: 33, block_size: 32, ggml_type: GgmlType::Q8_0, .. }), "{err}");
}

#[test]
fn duplicate_tensor_names() {
    let bytes = GgufWriter::new().tensor("w", &[1], 0, vec![0; 4]).tensor("w", &[1], 0, vec![0; 4]).build();
    assert!(matches!(open(bytes), E::DuplicateTensor { ref tensor, .. } if tensor == "w"));
}

#[test]
fn every_prefix_of_a_file_short_of_its_last_tensor_is_an_error() {
    let bytes = GgufWriter::new()
        .kv("general.architecture", GgufValue::String("llama".into()))
        .kv("a", GgufValue::Array(GgufValueType::U16, vec![GgufValue::U16(7); 5]))
        .tensor("w", &[32], GgmlType::Q8_0.id(), vec![1; 34])
        .tensor("v", &[3], 0, vec![2; 12])
        .build();
    let full = Gguf::from_bytes("full.gguf", bytes.clone()).unwrap();
    let last = full.tensor("v").unwrap();
    let end = (full.data_start() + last.offset + last.n_bytes) as usize;
    for len in 0..end {
        assert!(Gguf::from_bytes("cut.gguf", bytes[..len].to_vec()).is_err(), "prefix {len}");
    }
    assert!(Gguf::from_bytes("cut.gguf", bytes[..end].to_vec()).is_ok());
}
