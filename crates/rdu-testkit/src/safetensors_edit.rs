//! Safetensors files edited for bad-input tests: a checkpoint read tensor by tensor (as
//! stored: dtype, shape, bytes), changed, and written back in the format's layout (an 8-byte
//! header length, the JSON header, the data).

use std::collections::BTreeMap;
use std::path::Path;

/// One tensor as stored: its safetensors dtype name (`F32`, `F8_E4M3`, `U8`), shape and bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct Stored {
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

/// Every tensor of the safetensors file at `path`, by name.
pub fn read(path: &Path) -> BTreeMap<String, Stored> {
    let st = rdu_checkpoint::SafeTensors::open(path).expect("a safetensors file");
    let names: Vec<String> = st.names().map(str::to_string).collect();
    names
        .into_iter()
        .map(|n| {
            let (bytes, dtype, shape) = st.raw(&n).expect("readable");
            let stored = Stored { dtype: dtype.to_string(), shape: shape.to_vec(), bytes: bytes.to_vec() };
            (n, stored)
        })
        .collect()
}

/// Writes `tensors` as a safetensors file at `path`.
pub fn write(path: &Path, tensors: &BTreeMap<String, Stored>) {
    let mut header = serde_json::Map::new();
    let mut at = 0usize;
    for (name, t) in tensors {
        let end = at + t.bytes.len();
        header.insert(name.clone(), serde_json::json!({"dtype": t.dtype, "shape": t.shape, "data_offsets": [at, end]}));
        at = end;
    }
    let mut json = serde_json::Value::Object(header).to_string().into_bytes();
    while !json.len().is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend(json);
    for t in tensors.values() {
        out.extend(&t.bytes);
    }
    std::fs::write(path, out).expect("written");
}

/// A copy of the checkpoint directory `src` in `dst` (its config and safetensors), with its
/// tensors changed by `edit`.
pub fn copy_edited(src: &Path, dst: &Path, edit: impl FnOnce(&mut BTreeMap<String, Stored>)) {
    std::fs::create_dir_all(dst).expect("directory");
    std::fs::copy(src.join("config.json"), dst.join("config.json")).expect("config copied");
    let mut tensors = read(&src.join("model.safetensors"));
    edit(&mut tensors);
    write(&dst.join("model.safetensors"), &tensors);
}
