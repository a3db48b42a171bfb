//! Every integration test of `rdu-spatial`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

mod chip;
mod common;
mod cost;
mod memory;
mod ops_attention;
mod ops_blocks;
mod ops_elementwise;
mod ops_moe;
mod ops_products;
mod ops_recurrent;
mod ops_shape;
mod sim_program;
mod text;
mod tiling;
