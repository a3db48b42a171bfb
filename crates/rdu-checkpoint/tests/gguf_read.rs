//! GGUF reading: metadata round trip of every type, typed accessors, tensor infos and alignment.

use rdu_checkpoint::{CheckpointError, GgmlType, Gguf, GgufValue, GgufValueType};
use rdu_testkit::gguf_writer::{every_value, GgufWriter};

fn with_every_value() -> GgufWriter {
    every_value().into_iter().fold(GgufWriter::new(), |w, (k, v)| w.kv(k, v))
}

#[test]
fn every_metadata_type_round_trips() {
    let gguf = Gguf::from_bytes("mem.gguf", with_every_value().build()).unwrap();
    let read: Vec<(String, GgufValue)> = gguf.metadata().map(|(k, v)| (k.to_string(), v.clone())).collect();
    let expected: Vec<(String, GgufValue)> = every_value().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(read, expected);
    for (key, value) in every_value() {
        assert_eq!(gguf.get(key), Some(&value), "{key}");
    }
    assert_eq!(gguf.get("absent"), None);
    assert_eq!(gguf.version(), 3);
    assert_eq!(gguf.alignment(), 32);
    assert!(gguf.tensors().is_empty());
}

#[test]
fn version_2_is_accepted() {
    let mut writer = with_every_value();
    writer.version = 2;
    let gguf = Gguf::from_bytes("v2.gguf", writer.build()).unwrap();
    assert_eq!(gguf.version(), 2);
    assert_eq!(gguf.get_u32("t.u32").unwrap(), Some(4_000_000_000));
}

#[test]
fn typed_accessors_accept_any_fitting_integer() {
    let gguf = Gguf::from_bytes("mem.gguf", with_every_value().build()).unwrap();
    assert_eq!(gguf.get_u32("t.u8").unwrap(), Some(250));
    assert_eq!(gguf.get_u32("t.u16").unwrap(), Some(65_000));
    assert_eq!(gguf.get_i64("t.i32").unwrap(), Some(-2_000_000_000));
    assert_eq!(gguf.get_u64("t.u64").unwrap(), Some(u64::MAX - 1));
    assert_eq!(gguf.get_f32("t.f32").unwrap(), Some(1.5e-6));
    assert_eq!(gguf.get_f64("t.u32").unwrap(), Some(4e9));
    assert_eq!(gguf.get_f64("t.f64").unwrap(), Some(-2.5e300));
    assert_eq!(gguf.get_bool("t.bool").unwrap(), Some(true));
    assert_eq!(gguf.get_str("t.string").unwrap(), Some("grüße, llama ✓"));
    assert_eq!(gguf.get_str_array("t.strings").unwrap(), Some(vec!["a", ""]));
    assert_eq!(gguf.get_f32_array("t.array").unwrap(), Some(vec![1.0, 2.0, 3.0]));
    assert_eq!(gguf.get_i64_array("t.array").unwrap(), Some(vec![1, 2, 3]));
    assert_eq!(gguf.get_array("t.empty").unwrap().map(<[_]>::len), Some(0));
    assert_eq!(gguf.get_u32("missing").unwrap(), None);
    let nested = gguf.get_array("t.nested").unwrap().unwrap();
    assert_eq!(nested[0].as_array().unwrap()[0].as_i64(), Some(-1));
}

#[test]
fn typed_accessors_reject_wrong_types_and_out_of_range_values() {
    let gguf = Gguf::from_bytes("mem.gguf", with_every_value().build()).unwrap();
    let wrong = [
        gguf.get_u32("t.string").unwrap_err(),
        gguf.get_u32("t.i8").unwrap_err(),
        gguf.get_u32("t.u64").unwrap_err(),
        gguf.get_str("t.u32").map(|_| ()).unwrap_err(),
        gguf.get_bool("t.u8").unwrap_err(),
        gguf.get_str_array("t.array").map(|_| ()).unwrap_err(),
    ];
    for err in wrong {
        assert!(matches!(err, CheckpointError::MetadataType { .. }), "{err}");
    }
    let err = gguf.get_u32("t.string").unwrap_err().to_string();
    assert_eq!(err, "mem.gguf: metadata key `t.string` is a string, expected an integer that fits in u32");
}

#[test]
fn tensor_infos_are_in_numpy_order_and_data_is_aligned() {
    let data: Vec<u8> = (0..24).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let bytes = GgufWriter::new()
        .kv("general.architecture", GgufValue::String("llama".into()))
        .tensor("a", &[4, 3, 2], 0, data.clone())
        .tensor("b", &[3], 0, vec![0; 12])
        .build();
    let gguf = Gguf::from_bytes("t.gguf", bytes).unwrap();
    let a = gguf.tensor("a").unwrap();
    assert_eq!(a.shape, vec![2, 3, 4]);
    assert_eq!(a.ggml_type, GgmlType::F32);
    assert_eq!(a.n_bytes, 96);
    assert_eq!(gguf.tensor("b").unwrap().offset, 96);
    assert_eq!(gguf.data_start() % 32, 0);
    let values = gguf.read_f32("a").unwrap();
    assert_eq!(values, (0..24).map(|i| i as f32).collect::<Vec<_>>());
    assert_eq!(gguf.tensor_bytes("a").unwrap(), &data[..]);
    let names: Vec<&str> = gguf.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
}

#[test]
fn general_alignment_is_honoured() {
    let mut writer = GgufWriter::new()
        .kv("general.alignment", GgufValue::U32(64))
        .tensor("x", &[5], 0, vec![0; 20])
        .tensor("y", &[2], 0, [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect());
    writer.alignment = 64;
    let gguf = Gguf::from_bytes("a64.gguf", writer.build()).unwrap();
    assert_eq!(gguf.alignment(), 64);
    assert_eq!(gguf.data_start() % 64, 0);
    assert_eq!(gguf.tensor("y").unwrap().offset, 64);
    assert_eq!(gguf.read_f32("y").unwrap(), vec![1.0, 2.0]);
}

#[test]
fn missing_tensor_and_wrong_reader_are_errors() {
    let gguf = Gguf::from_bytes("t.gguf", GgufWriter::new().tensor("w", &[2], 0, vec![0; 8]).build()).unwrap();
    let err = gguf.read_f32("nope").unwrap_err();
    assert!(matches!(err, CheckpointError::TensorNotFound { .. }));
    assert_eq!(err.to_string(), "t.gguf: no tensor named `nope`");
    let err = gguf.read_q8_0("w").unwrap_err();
    assert!(matches!(err, CheckpointError::NotQ8_0 { ggml_type: GgmlType::F32, .. }));
}

#[test]
fn known_but_unsupported_types_open_and_fail_only_when_read() {
    let q2k = GgmlType::Q2_K;
    let bytes = GgufWriter::new().tensor("q", &[256], q2k.id(), vec![0; q2k.type_size() as usize]).build();
    let gguf = Gguf::from_bytes("q2.gguf", bytes).unwrap();
    assert_eq!(gguf.tensor("q").unwrap().ggml_type, q2k);
    let err = gguf.read_f32("q").unwrap_err();
    assert!(matches!(err, CheckpointError::UnsupportedGgmlType { ggml_type: GgmlType::Q2_K, .. }));
    assert!(err.to_string().contains("Q2_K (id 10)"), "{err}");
}

#[test]
fn value_type_ids_match_the_spec() {
    assert_eq!(GgufValueType::from_id(9), Some(GgufValueType::Array));
    assert_eq!(GgufValueType::F64.id(), 12);
    assert_eq!(GgufValueType::from_id(13), None);
    assert_eq!(GgmlType::from_id(30), Some(GgmlType::BF16));
    assert_eq!(GgmlType::from_id(31), None);
    assert_eq!((GgmlType::Q6_K.block_size(), GgmlType::Q6_K.type_size()), (256, 210));
    assert_eq!((GgmlType::Q5_K.block_size(), GgmlType::Q5_K.type_size()), (256, 176));
    assert_eq!((GgmlType::Q5_0.block_size(), GgmlType::Q5_0.type_size()), (32, 22));
}

#[test]
fn open_for_tensors_keeps_scalars_and_tensors_but_not_arrays() {
    let data: Vec<u8> = (0..6).flat_map(|i| (i as f32).to_le_bytes()).collect();
    let writer = with_every_value().kv("general.alignment", GgufValue::U32(64)).tensor("w", &[3, 2], 0, data);
    let mut writer = writer;
    writer.alignment = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.gguf");
    std::fs::write(&path, writer.build()).unwrap();
    let full = Gguf::open(&path).unwrap();
    // Mapped, and read whole into huge-page memory: the same reading either way.
    type Open = fn(&std::path::Path) -> rdu_checkpoint::Result<Gguf>;
    let readers: [(&str, Open); 2] = [
        ("open_for_tensors", |p| Gguf::open_for_tensors(p)),
        ("open_resident", |p| Gguf::open_resident(p, &mut |_, _| {})),
    ];
    for (how, open) in readers {
        let tensors = open(&path).unwrap();
        for (key, value) in full.metadata() {
            match value {
                GgufValue::Array(..) => assert_eq!(tensors.get(key), None, "{how} {key}: an array is not kept"),
                _ => assert_eq!(tensors.get(key), Some(value), "{how} {key}"),
            }
        }
        assert!(full.metadata().any(|(_, v)| matches!(v, GgufValue::Array(..))), "the file has arrays to drop");
        assert_eq!(
            tensors.metadata().count(),
            full.metadata().filter(|(_, v)| !matches!(v, GgufValue::Array(..))).count()
        );
        assert_eq!((tensors.alignment(), tensors.data_start()), (full.alignment(), full.data_start()), "{how}");
        assert_eq!(tensors.read_f32("w").unwrap(), full.read_f32("w").unwrap(), "{how}");
        assert_eq!(tensors.tensor_bytes("w").unwrap(), full.tensor_bytes("w").unwrap(), "{how}");
    }
    // The resident copy starts on a 2 MiB boundary: the file's byte 0 begins a huge page.
    let mut reports = Vec::new();
    let resident = Gguf::open_resident(&path, &mut |read, len| reports.push((read, len))).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(reports, [(size, size)], "one report for a file under 64 MiB, at its end");
    let start = resident.tensor_bytes("w").unwrap().as_ptr() as usize - resident.data_start() as usize;
    assert_eq!(start % (2 << 20), 0, "the file is read to {start:#x}");
    // Every check of `open` still runs: a truncated file is refused the same way.
    let (bytes, data_start) = (std::fs::read(&path).unwrap(), full.data_start() as usize);
    drop((full, resident)); // unmapped before the file shrinks
    std::fs::write(&path, &bytes[..data_start + 8]).unwrap();
    let refused = Gguf::open(&path).err().map(|e| e.to_string());
    assert!(refused.is_some());
    assert_eq!(Gguf::open_for_tensors(&path).err().map(|e| e.to_string()), refused);
    assert_eq!(Gguf::open_resident(&path, &mut |_, _| {}).err().map(|e| e.to_string()), refused);
    // As are an empty file and a missing one, each naming the file.
    std::fs::write(&path, b"").unwrap();
    let empty = Gguf::open(&path).err().map(|e| e.to_string());
    assert!(empty.as_deref().is_some_and(|e| e.contains("t.gguf")), "{empty:?}");
    assert_eq!(Gguf::open_resident(&path, &mut |_, _| {}).err().map(|e| e.to_string()), empty);
    let missing = dir.path().join("absent.gguf");
    let err = Gguf::open_resident(&missing, &mut |_, _| {}).err().map(|e| e.to_string());
    assert!(err.as_deref().is_some_and(|e| e.contains("absent.gguf")), "{err:?}");
    assert_eq!(err, Gguf::open(&missing).err().map(|e| e.to_string()));
}
