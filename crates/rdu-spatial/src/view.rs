//! A matrix seen in place, for the products the simulator (f32) and the compiler's reference
//! interpreter (f64) hand to `matrixmultiply`: `rows × cols` elements at
//! `data[offset + r·row_stride + c·col_stride]`, so a transpose, a head's columns or a block of
//! rows is a view, not a copy.

/// A strided matrix view of `data`.
#[derive(Clone, Copy, Debug)]
pub struct View<'a, T> {
    pub data: &'a [T],
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl<'a, T> View<'a, T> {
    /// The dense row-major `rows × cols` matrix of `data`.
    pub fn dense(data: &'a [T], rows: usize, cols: usize) -> View<'a, T> {
        View { data, offset: 0, rows, cols, row_stride: cols, col_stride: 1 }
    }

    /// The transpose (no copy).
    pub fn t(self) -> View<'a, T> {
        View { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    /// Whether every element of the view lies inside `data` (checked before handing its
    /// pointer and strides to an unsafe product).
    pub fn in_bounds(&self) -> bool {
        self.rows == 0
            || self.cols == 0
            || (self.rows - 1)
                .checked_mul(self.row_stride)
                .zip((self.cols - 1).checked_mul(self.col_stride))
                .and_then(|(r, c)| self.offset.checked_add(r)?.checked_add(c))
                .is_some_and(|last| last < self.data.len())
    }
}

/// The `parts` one after another, `len` values in all (a hint): a slice at a time, as
/// `memcpy` does it — `flat_map(..).copied()` copies value by value, unvectorised.
pub fn gather<'a, T: Copy + 'a>(len: usize, parts: impl IntoIterator<Item = &'a [T]>) -> Vec<T> {
    let mut out = Vec::with_capacity(len);
    for part in parts {
        out.extend_from_slice(part);
    }
    out
}

/// The distinct entries of `reads` (each below `len`) in ascending order, and each entry's
/// place among them (`usize::MAX` for one not read): what a block of rows reads, so that its
/// keys and values are gathered once and its products span only those.
pub fn union(len: usize, reads: impl IntoIterator<Item = usize>) -> (Vec<usize>, Vec<usize>) {
    let mut place = vec![usize::MAX; len];
    reads.into_iter().for_each(|e| place[e] = 0);
    let mut union = Vec::new();
    for (e, at) in place.iter_mut().enumerate() {
        if *at == 0 {
            *at = union.len();
            union.push(e);
        }
    }
    (union, place)
}

#[cfg(test)]
mod tests {
    use super::{gather, union, View};

    #[test]
    fn union_lists_each_entry_read_once_in_order_with_its_place() {
        let (entries, place) = union(6, [4, 1, 4, 2]);
        assert_eq!(entries, [1, 2, 4]);
        assert_eq!(place, [usize::MAX, 0, 1, usize::MAX, 2, usize::MAX]);
        assert_eq!(union(3, []), (vec![], vec![usize::MAX; 3]));
    }

    #[test]
    fn gather_puts_the_parts_one_after_another() {
        let data = [1, 2, 3, 4, 5, 6];
        assert_eq!(gather(4, [&data[4..], &data[..2]]), [5, 6, 1, 2]);
        assert_eq!(gather(0, [&data[..3], &data[..0], &data[5..]]), [1, 2, 3, 6]);
        assert!(gather::<u8>(3, []).is_empty());
    }

    #[test]
    fn a_view_reaching_past_its_data_is_out_of_bounds() {
        let data = [0f32; 6];
        assert!(View::dense(&data, 2, 3).in_bounds());
        assert!(View::dense(&data, 2, 3).t().in_bounds());
        assert!(!View { offset: 1, ..View::dense(&data, 2, 3) }.in_bounds());
        assert!(!View { row_stride: usize::MAX, ..View::dense(&data, 2, 3) }.in_bounds());
        assert!(View::dense(&data, 0, 3).in_bounds());
    }
}
