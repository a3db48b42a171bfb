//! The fixtures' `.npy` files: f32 tensors and int64 token ids, as numpy saved them.

use std::path::Path;

/// An f32 `.npy` file's values (row-major).
pub fn f32(path: impl AsRef<Path>) -> Vec<f32> {
    with_shape(path).1
}

/// An f32 `.npy` file's shape and values.
pub fn with_shape(path: impl AsRef<Path>) -> (Vec<usize>, Vec<f32>) {
    let path = path.as_ref();
    let bytes = read(path);
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{}: npy header: {e}", path.display()));
    let shape = npy.shape().iter().map(|&d| d as usize).collect();
    let data = npy.into_vec::<f32>().unwrap_or_else(|e| panic!("{}: not f32: {e}", path.display()));
    (shape, data)
}

/// An int64 `.npy` file of token ids.
pub fn ids(path: impl AsRef<Path>) -> Vec<u32> {
    let path = path.as_ref();
    let bytes = read(path);
    let npy = npyz::NpyFile::new(&bytes[..]).unwrap_or_else(|e| panic!("{}: npy header: {e}", path.display()));
    let ids = npy.into_vec::<i64>().unwrap_or_else(|e| panic!("{}: not int64: {e}", path.display()));
    ids.into_iter().map(|v| u32::try_from(v).unwrap_or_else(|_| panic!("{}: id {v}", path.display()))).collect()
}

/// The bytes of a file, or a panic naming it.
pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}
