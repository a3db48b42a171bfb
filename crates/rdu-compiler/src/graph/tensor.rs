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

/// A dense tensor. The element count should be the product of the shape (1 for a scalar,
/// `shape == []`); the constructors keep that, and the interpreter checks every tensor it is
/// given.
#[derive(Clone, PartialEq)]
pub struct Tensor {
    pub shape: Vec<usize>,
    pub data: Data,
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
    pub fn f32(shape: impl Into<Vec<usize>>, data: Vec<f32>) -> Tensor {
        let (shape, n) = (shape.into(), data.len());
        let message = format!("{n} values do not fill a tensor of shape {shape:?}");
        Tensor::try_f32(shape, data).expect(&message)
    }

    /// An i32 tensor. Panics when the element count does not match the shape (a caller's bug).
    pub fn i32(shape: impl Into<Vec<usize>>, data: Vec<i32>) -> Tensor {
        let (shape, n) = (shape.into(), data.len());
        let message = format!("{n} values do not fill a tensor of shape {shape:?}");
        Tensor::try_i32(shape, data).expect(&message)
    }

    /// The i32 scalar `v` (shape `[]`), e.g. a position.
    pub fn scalar_i32(v: i32) -> Tensor {
        Tensor { shape: Vec::new(), data: Data::I32(vec![v]) }
    }

    /// f32 zeros of `shape` (a fresh state).
    pub fn zeros(shape: impl Into<Vec<usize>>) -> Tensor {
        Tensor::zeros_of(DType::F32, shape)
    }

    /// Zeros of the given dtype and shape.
    pub fn zeros_of(dtype: DType, shape: impl Into<Vec<usize>>) -> Tensor {
        let shape = shape.into();
        let n = numel(&shape);
        let data = match dtype {
            DType::F32 => Data::F32(vec![0.0; n]),
            DType::I32 => Data::I32(vec![0; n]),
        };
        Tensor { shape, data }
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

    /// The element count matches the shape.
    pub fn is_consistent(&self) -> bool {
        self.len() == numel(&self.shape)
    }

    /// The elements as f32 (i32 values converted).
    pub fn into_f32(self) -> Vec<f32> {
        match self.data {
            Data::F32(v) => v,
            Data::I32(v) => v.into_iter().map(|x| x as f32).collect(),
        }
    }

    /// Row `index` along axis 0 (shape `shape[1..]`); `None` for a scalar or an index out of range.
    pub fn slice0(&self, index: usize) -> Option<Tensor> {
        let rows = *self.shape.first()?;
        if index >= rows {
            return None;
        }
        self.slice_axis(0, index, 1).map(|t| Tensor { shape: self.shape[1..].to_vec(), data: t.data })
    }

    /// Elements `start .. start + len` along `axis`; `None` when out of range.
    pub fn slice_axis(&self, axis: usize, start: usize, len: usize) -> Option<Tensor> {
        let size = *self.shape.get(axis)?;
        if start.checked_add(len)? > size || !self.is_consistent() {
            return None;
        }
        let outer = numel(&self.shape[..axis]);
        let inner = numel(&self.shape[axis + 1..]);
        let pick = |v: &[f32]| -> Vec<f32> {
            (0..outer)
                .flat_map(|o| v[(o * size + start) * inner..(o * size + start + len) * inner].iter().copied())
                .collect()
        };
        let pick_i = |v: &[i32]| -> Vec<i32> {
            (0..outer)
                .flat_map(|o| v[(o * size + start) * inner..(o * size + start + len) * inner].iter().copied())
                .collect()
        };
        let data = match &self.data {
            Data::F32(v) => Data::F32(pick(v)),
            Data::I32(v) => Data::I32(pick_i(v)),
        };
        let mut shape = self.shape.clone();
        shape[axis] = len;
        Some(Tensor { shape, data })
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
        assert_eq!(Tensor::zeros_of(DType::I32, [2, 2]).as_i32(), Some(&[0, 0, 0, 0][..]));
        assert_eq!(Tensor::zeros(vec![2]).as_f32(), Some(&[0.0, 0.0][..]));
        assert!(!Tensor { shape: vec![3], data: Data::F32(vec![1.0]) }.is_consistent());
    }

    #[test]
    fn slice0_takes_one_row() {
        let t = Tensor::from_fn(&[3, 2], |i| i as f32);
        assert_eq!(t.slice0(1), Some(Tensor::f32([2], vec![2.0, 3.0])));
        assert_eq!(t.slice0(3), None);
        assert_eq!(Tensor::scalar_i32(1).slice0(0), None);
        let bad = Tensor { shape: vec![3, 2], data: Data::F32(vec![0.0; 2]) };
        assert_eq!(bad.slice0(2), None);
    }

    #[test]
    fn slice_axis_takes_a_range() {
        let t = Tensor::from_fn(&[2, 3], |i| i as f32);
        assert_eq!(t.slice_axis(1, 1, 2), Some(Tensor::f32([2, 2], vec![1.0, 2.0, 4.0, 5.0])));
        assert_eq!(t.slice_axis(1, 2, 2), None);
        assert_eq!(Tensor::i32([2], vec![4, 5]).into_f32(), vec![4.0, 5.0]);
    }

    #[test]
    fn debug_is_short() {
        let t = Tensor::from_fn(&[20], |i| i as f32);
        assert!(format!("{t:?}").starts_with("f32[20] [0.0, 1.0"));
        assert!(format!("{t:?}").ends_with(", ..."));
    }
}
