//! Models: the spec (`spec`), import from HF `config.json` (`config`), built-in presets
//! (`presets`), the authored layer programs (`author`), and their grouping into layer kinds
//! (`kinds`).

pub mod author;
pub mod config;
pub mod gguf;
pub mod kinds;
pub mod mtp;
pub mod naming;
pub mod presets;
pub mod quantization;
pub mod spec;
pub mod storage;
