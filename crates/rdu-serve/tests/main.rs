//! Every integration test of `rdu-serve`, one binary: each `tests/*.rs` is a module here. The
//! server itself is tested over HTTP in `rdu-cli`'s `tests/serve.rs` (it needs bundles lowered).

mod api;
mod chat;
mod text;
