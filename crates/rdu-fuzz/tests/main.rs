//! Every integration test of `rdu-fuzz`, one binary: each `tests/*.rs` is a module here
//! (one link instead of one per file, and libtest spreads all of them over the cores).

mod props;
mod regressions;
