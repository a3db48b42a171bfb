//! Models: the spec (`spec`), import from HF `config.json` (`config`), built-in presets
//! (`presets`), and the authored layer programs (`author`).

pub mod author;
pub mod config;
pub mod gguf;
pub mod naming;
pub mod presets;
pub mod quantization;
pub mod spec;
pub mod storage;
