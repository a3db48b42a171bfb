//! `Tensor`: a dense row-major array of f32 or i32 values with its shape — the values the
//! reference interpreter reads and writes. No views, no strides, no broadcasting here.

use super::DType;
use std::fmt;

/// The elements of a tensor, row-major.
#[derive(Clone, PartialEq)]
pub enum Data {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

/// A dense tensor. Invariant (kept by the constructors): the element count is the product
/// of the shape (1 for a scalar, `shape == []`).
#[derive(Clone, PartialEq)]
pub struct Tensor {
    shape: Vec<usize>,
    data: Data,
}

/// The number of elements of a tensor of this shape.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

impl Tensor {
    /// An f32 tensor; `None` when `data` does not hold exactly `numel(shape)` values.
    pub fn try_f32(shape: Vec<usize>, data: Vec<f32>) -> Option<Tensor> {
        (data.len() == numel(&shape)).then_some(Tensor { shape, data: Data::F32(data) })
    }

    /// An i32 tensor; `None` when `data` does not hold exactly `numel(shape)` values.
    pub fn try_i32(shape: Vec<usize>, data: Vec<i32>) -> Option<Tensor> {
        (data.len() == numel(&shape)).then_some(Tensor { shape, data: Data::I32(data) })
    }

    /// An f32 tensor. Panics when the element count does not match the shape (a caller's bug).
    pub fn f32(shape: &[usize], data: Vec<f32>) -> Tensor {
        let n = data.len();
        Tensor::try_f32(shape.to_vec(), data)
            .unwrap_or_else(|| panic!("{n} values do not fill a tensor of shape {shape:?}"))
    }

    /// An i32 tensor. Panics when the element count does not match the shape (a caller's bug).
    pub fn i32(shape: &[usize], data: Vec<i32>) -> Tensor {
        let n = data.len();
        Tensor::try_i32(shape.to_vec(), data)
            .unwrap_or_else(|| panic!("{n} values do not fill a tensor of shape {shape:?}"))
    }

    /// The i32 scalar `v` (shape `[]`), e.g. a position.
    pub fn scalar_i32(v: i32) -> Tensor {
        Tensor { shape: Vec::new(), data: Data::I32(vec![v]) }
    }

    /// Zeros of the given dtype and shape.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Tensor {
        let n = numel(shape);
        let data = match dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::I32 => Data::I32(vec![0; n]),
        };
        Tensor { shape: shape.to_vec(), data }
    }

    /// An f32 tensor whose element at flat index `i` is `f(i)`.
    pub fn from_fn(shape: &[usize], f: impl FnMut(usize) -> f32) -> Tensor {
        Tensor { shape: shape.to_vec(), data: Data::F32((0..numel(shape)).map(f).collect()) }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn data(&self) -> &Data {
        &self.data
    }

    pub fn dtype(&self) -> DType {
        match self.data {
            Data::F32(_) => DType::F32,
            Data::I32(_) => DType::I32,
        }
    }

    pub fn len(&self) -> usize {
        match &self.data {
            Data::F32(v) => v.len(),
            Data::I32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_f32(&self) -> Option<&[f32]> {
        match &self.data {
            Data::F32(v) => Some(v),
            Data::I32(_) => None,
        }
    }

    pub fn as_i32(&self) -> Option<&[i32]> {
        match &self.data {
            Data::I32(v) => Some(v),
            Data::F32(_) => None,
        }
    }

    /// The same elements under another shape with the same element count.
    pub fn reshaped(&self, shape: &[usize]) -> Option<Tensor> {
        (numel(shape) == self.len()).then(|| Tensor { shape: shape.to_vec(), data: self.data.clone() })
    }

    /// Row `index` along axis 0 (shape `shape[1..]`); `None` for a scalar or an index out of range.
    pub fn slice0(&self, index: usize) -> Option<Tensor> {
        let (&rows, rest) = self.shape.split_first()?;
        if index >= rows {
            return None;
        }
        let width = numel(rest);
        let range = index * width..(index + 1) * width;
        let data = match &self.data {
            Data::F32(v) => Data::F32(v[range].to_vec()),
            Data::I32(v) => Data::I32(v[range].to_vec()),
        };
        Some(Tensor { shape: rest.to_vec(), data })
    }
}

impl fmt::Debug for Tensor {
    /// `f32[2, 3] [1.0, 2.0, ...]`, at most 16 values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{:?} ", self.dtype().keyword(), self.shape)?;
        const MAX: usize = 16;
        let more = if self.len() > MAX { ", ..." } else { "" };
        match &self.data {
            Data::F32(v) => write!(f, "{:?}{more}", &v[..v.len().min(MAX)]),
            Data::I32(v) => write!(f, "{:?}{more}", &v[..v.len().min(MAX)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_check_the_element_count() {
        assert!(Tensor::try_f32(vec![2, 3], vec![0.0; 6]).is_some());
        assert!(Tensor::try_f32(vec![2, 3], vec![0.0; 5]).is_none());
        assert_eq!(Tensor::scalar_i32(7).shape(), &[] as &[usize]);
        assert_eq!(Tensor::scalar_i32(7).as_i32(), Some(&[7][..]));
        assert_eq!(Tensor::zeros(DType::I32, &[2, 2]).as_i32(), Some(&[0, 0, 0, 0][..]));
    }

    #[test]
    fn slice0_takes_one_row() {
        let t = Tensor::from_fn(&[3, 2], |i| i as f32);
        assert_eq!(t.slice0(1), Some(Tensor::f32(&[2], vec![2.0, 3.0])));
        assert_eq!(t.slice0(3), None);
        assert_eq!(Tensor::scalar_i32(1).slice0(0), None);
    }

    #[test]
    fn debug_is_short() {
        let t = Tensor::from_fn(&[20], |i| i as f32);
        assert!(format!("{t:?}").starts_with("f32[20] [0.0, 1.0"));
        assert!(format!("{t:?}").ends_with(", ..."));
    }
}
