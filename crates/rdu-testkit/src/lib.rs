//! The test kit every crate's tests share (dev-only, never published): where the fixtures are
//! ([`fixtures`]), how their `.npy` files are read ([`npy`]), the tolerance that holds rdu to a
//! third-party reference and reports the worst element ([`Tolerance`]), and two GGUF writers —
//! [`gguf_writer`], bytes of any shape (for the readers' tests and bad-input files), and
//! [`hf_to_gguf`], the tiny HF fixtures converted the way llama.cpp's converter writes them.

pub mod fixtures;
pub mod gguf_writer;
pub mod hf_to_gguf;
pub mod npy;
mod tolerance;

pub use tolerance::{Tolerance, Worst};

/// The index of the largest value of `row` (the first, on ties): greedy decoding's choice.
pub fn argmax(row: &[f32]) -> u32 {
    (0..row.len()).fold(0, |best, i| if row[i] > row[best] { i } else { best }) as u32
}
