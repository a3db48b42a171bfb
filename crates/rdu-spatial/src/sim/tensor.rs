//! Dense tensors as the simulator reads and writes them: a shape and f32 or i32 data.

use serde::{Deserialize, Serialize};

use crate::program::Dtype;

/// A dense row-major tensor.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
pub struct SimTensor {
    pub shape: Vec<usize>,
    pub data: SimData,
}

/// A tensor's elements.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SimData {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

// `clone_from` reuses the destination's buffers (a draft copies its states into the same
// tensors every step), which the derived `Clone` would not.
impl Clone for SimTensor {
    fn clone(&self) -> SimTensor {
        SimTensor { shape: self.shape.clone(), data: self.data.clone() }
    }

    fn clone_from(&mut self, source: &SimTensor) {
        self.shape.clone_from(&source.shape);
        self.data.clone_from(&source.data);
    }
}

impl Clone for SimData {
    fn clone(&self) -> SimData {
        match self {
            SimData::F32(v) => SimData::F32(v.clone()),
            SimData::I32(v) => SimData::I32(v.clone()),
        }
    }

    fn clone_from(&mut self, source: &SimData) {
        match (self, source) {
            (SimData::F32(a), SimData::F32(b)) => a.clone_from(b),
            (SimData::I32(a), SimData::I32(b)) => a.clone_from(b),
            (this, _) => *this = source.clone(),
        }
    }
}

impl SimTensor {
    /// An f32 tensor (the data length is not checked here; the simulator checks bindings).
    pub fn f32(shape: Vec<usize>, data: Vec<f32>) -> SimTensor {
        SimTensor { shape, data: SimData::F32(data) }
    }

    /// An i32 tensor.
    pub fn i32(shape: Vec<usize>, data: Vec<i32>) -> SimTensor {
        SimTensor { shape, data: SimData::I32(data) }
    }

    /// An i32 scalar (`i32[]`), e.g. a position.
    pub fn scalar_i32(value: i32) -> SimTensor {
        SimTensor::i32(vec![], vec![value])
    }

    /// A zero-filled tensor.
    pub fn zeros(dtype: Dtype, shape: Vec<usize>) -> SimTensor {
        let n = shape.iter().product();
        match dtype {
            Dtype::F32 => SimTensor::f32(shape, vec![0.0; n]),
            Dtype::I32 => SimTensor::i32(shape, vec![0; n]),
        }
    }

    pub fn dtype(&self) -> Dtype {
        match self.data {
            SimData::F32(_) => Dtype::F32,
            SimData::I32(_) => Dtype::I32,
        }
    }

    /// Number of elements the shape describes (1 for a scalar).
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Number of elements the data holds.
    pub fn len(&self) -> usize {
        match &self.data {
            SimData::F32(v) => v.len(),
            SimData::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            SimData::F32(v) => Some(v),
            SimData::I32(_) => None,
        }
    }

    /// The f32 elements, moved out (not copied).
    pub fn into_f32(self) -> Option<Vec<f32>> {
        match self.data {
            SimData::F32(v) => Some(v),
            SimData::I32(_) => None,
        }
    }

    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            SimData::I32(v) => Some(v),
            SimData::F32(_) => None,
        }
    }

    pub fn as_f32_mut(&mut self) -> Option<&mut Vec<f32>> {
        match &mut self.data {
            SimData::F32(v) => Some(v),
            SimData::I32(_) => None,
        }
    }

    /// Row-major strides of the shape.
    pub fn strides(&self) -> Vec<usize> {
        strides(&self.shape)
    }
}

/// Row-major strides of `shape`.
pub fn strides(shape: &[usize]) -> Vec<usize> {
    let mut out = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        out[i] = out[i + 1] * shape[i + 1];
    }
    out
}
