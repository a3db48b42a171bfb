//! One deployment of `rdu plan`: a tensor-parallel width and a batch, with its estimate.

/// One deployment: `tp` chips, `batch` sequences a step.
#[derive(Clone, Debug, PartialEq)]
pub struct Cell {
    pub tp: usize,
    pub batch: usize,
    pub step_seconds: f64,
    pub tokens_per_second_per_sequence: f64,
    pub tokens_per_second: f64,
    pub model_roofline_fraction: f64,
    pub bytes_per_chip: u64,
    /// Everything each chip holds (weights, caches, states) fits in its HBM.
    pub fits: bool,
}
