//! safetensors: dtype conversion, sharded directories, and rejection of malformed files.

use half::{bf16, f16};
use rdu_checkpoint::{CheckpointError as E, Dtype, SafeTensors};
use std::path::PathBuf;

/// A safetensors file: 8-byte header length, JSON header, data.
fn st_bytes(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

fn open(bytes: Vec<u8>) -> E {
    match SafeTensors::from_bytes("model.safetensors", bytes) {
        Ok(_) => panic!("malformed safetensors was accepted"),
        Err(err) => err,
    }
}

/// A fresh directory under the system temp dir, unique to this test process and `name`.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rdu-ckpt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn reads_f32_f16_bf16() {
    let mut data: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    data.extend(f16::from_f32(0.25).to_le_bytes());
    data.extend(bf16::from_f32(-3.0).to_le_bytes());
    let header = r#"{"__metadata__":{"format":"pt"},
        "a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
        "b":{"dtype":"F16","shape":[1,1],"data_offsets":[8,10]},
        "c":{"dtype":"BF16","shape":[1],"data_offsets":[10,12]}}"#;
    let st = SafeTensors::from_bytes("m.safetensors", st_bytes(header, &data)).unwrap();
    assert_eq!(st.names().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(st.read_f32("a").unwrap(), [1.5, -2.0]);
    assert_eq!(st.read_f32("b").unwrap(), [0.25]);
    assert_eq!(st.read_f32("c").unwrap(), [-3.0]);
    assert_eq!(st.shape("b"), Some([1, 1].as_slice()));
    assert_eq!(st.dtype("c"), Some(Dtype::BF16));
    assert_eq!(st.len(), 3);
    let err = st.read_f32("d").unwrap_err();
    assert_eq!(err.to_string(), "m.safetensors: no tensor named `d`");
}

#[test]
fn unsupported_dtypes_are_named() {
    for dtype in ["I64", "F64", "U8"] {
        let size = if dtype == "U8" { 2 } else { 16 };
        let header = format!(r#"{{"ids":{{"dtype":"{dtype}","shape":[2],"data_offsets":[0,{size}]}}}}"#);
        let st = SafeTensors::from_bytes("m.safetensors", st_bytes(&header, &vec![0; size])).unwrap();
        let err = st.read_f32("ids").unwrap_err();
        assert!(matches!(err, E::UnsupportedDtype { dtype: ref d, .. } if d == dtype), "{err}");
        assert!(err.to_string().contains(&format!("has dtype {dtype}")), "{err}");
    }
}

#[test]
fn truncated_file() {
    let err = open(vec![1, 2, 3]);
    assert!(matches!(err, E::Truncated { needed: 8, available: 3, .. }), "{err}");
    // A valid file cut inside its data.
    let header = r#"{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let mut bytes = st_bytes(header, &[0; 16]);
    bytes.truncate(bytes.len() - 5);
    let err = open(bytes);
    assert!(matches!(err, E::TensorPastEnd { ref tensor, .. } if tensor == "w"), "{err}");
}

#[test]
fn header_length_past_end() {
    let mut bytes = st_bytes("{}", &[]);
    bytes[..8].copy_from_slice(&200u64.to_le_bytes());
    let err = open(bytes);
    assert!(matches!(err, E::HeaderPastEnd { header_len: 200, file_len: 10, .. }), "{err}");
    assert_eq!(err.to_string(), "model.safetensors: header length 200 runs past the end of the file (10 bytes)");
    let mut bytes = st_bytes("{}", &[]);
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(open(bytes), E::HeaderPastEnd { .. }));
}

#[test]
fn offsets_out_of_range() {
    let header = r#"{"model.norm.weight":{"dtype":"F32","shape":[50],"data_offsets":[0,200]}}"#;
    let err = open(st_bytes(header, &[0; 100]));
    assert!(
        matches!(err, E::TensorPastEnd { ref tensor, end, .. } if tensor == "model.norm.weight" && end == 8 + header.len() as u64 + 200),
        "{err}"
    );
    assert!(err.to_string().contains("tensor `model.norm.weight`: data bytes"), "{err}");
    let header = r#"{"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}}"#;
    assert!(matches!(open(st_bytes(header, &[0; 8])), E::TensorPastEnd { .. }));
}

#[test]
fn offsets_not_matching_shape_and_dtype() {
    let header = r#"{"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,16]}}"#;
    let err = open(st_bytes(header, &[0; 16]));
    assert!(
        matches!(err, E::TensorSizeMismatch { expected: 12, actual: 16, ref dtype, .. } if dtype == "BF16"),
        "{err}"
    );
}

#[test]
fn malformed_headers_are_errors() {
    for header in ["not json", "[1,2]", r#"{"w":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#] {
        let err = open(st_bytes(header, &[0; 4]));
        assert!(matches!(err, E::SafetensorsHeader { .. }), "{header}: {err}");
    }
    // Gaps between tensors and trailing bytes are rejected by the safetensors crate.
    let header = r#"{"w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}"#;
    assert!(matches!(open(st_bytes(header, &[0; 2])), E::SafetensorsHeader { .. }));
}

#[test]
fn every_prefix_is_an_error() {
    let header = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}"#;
    let bytes = st_bytes(header, &[0; 8]);
    for len in 0..bytes.len() {
        assert!(SafeTensors::from_bytes("cut", bytes[..len].to_vec()).is_err(), "prefix {len}");
    }
}

fn write_shard(dir: &std::path::Path, file: &str, name: &str, values: &[f32]) {
    let header =
        format!(r#"{{"{name}":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{}]}}}}"#, values.len(), values.len() * 4);
    let data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join(file), st_bytes(&header, &data)).unwrap();
}

#[test]
fn sharded_directory() {
    let dir = temp_dir("sharded");
    write_shard(&dir, "model-00001-of-00002.safetensors", "a", &[1.0, 2.0]);
    write_shard(&dir, "model-00002-of-00002.safetensors", "b", &[3.0]);
    let index = r#"{"metadata":{},"weight_map":{
        "b":"model-00002-of-00002.safetensors","a":"model-00001-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    let st = SafeTensors::open(&dir).unwrap();
    assert_eq!(st.names().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(st.read_f32("a").unwrap(), [1.0, 2.0]);
    assert_eq!(st.read_f32("b").unwrap(), [3.0]);
    assert!(st.file_of("b").unwrap().ends_with("model-00002-of-00002.safetensors"));

    let index = r#"{"weight_map":{"c":"model-00002-of-00002.safetensors"}}"#;
    std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
    let err = SafeTensors::open(&dir).map(|_| ()).unwrap_err();
    assert!(matches!(err, E::MissingFromShard { ref tensor, .. } if tensor == "c"), "{err}");

    for index in [r#"{"weight_map":{"a":"../escape.safetensors"}}"#, r#"{"nope":1}"#, "{"] {
        std::fs::write(dir.join("model.safetensors.index.json"), index).unwrap();
        let err = SafeTensors::open(&dir).map(|_| ()).unwrap_err();
        assert!(matches!(err, E::ShardIndex { .. }), "{index}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn single_file_directory_and_missing_files() {
    let dir = temp_dir("single");
    let err = SafeTensors::open(&dir).map(|_| ()).unwrap_err();
    assert!(matches!(err, E::NoSafetensors { .. }), "{err}");
    write_shard(&dir, "model.safetensors", "w", &[5.0]);
    let st = SafeTensors::open(&dir).unwrap();
    assert_eq!(st.read_f32("w").unwrap(), [5.0]);
    let err = SafeTensors::open(dir.join("absent.safetensors")).map(|_| ()).unwrap_err();
    assert!(matches!(err, E::Io { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
