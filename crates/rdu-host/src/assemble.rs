//! Stacking and slicing checkpoint tensors into the tensor a manifest entry names, over any element type.
//!
//! An element here is a `unit` of values: one value for dense data, 32 for Q8_0 blocks (which
//! run along the last axis), so every cut must fall on a unit boundary. Problems come back as
//! plain text for the caller to attach to the file and tensor.

/// A tensor's shape and its row-major elements, each standing for `unit` values.
pub(crate) struct Piece<T> {
    pub shape: Vec<usize>,
    pub data: Vec<T>,
}

/// `parts` (equal shapes) stacked along a new `axis`: the result's `axis` has one entry per part.
pub(crate) fn stack<T: Clone>(parts: Vec<(String, Piece<T>)>, axis: usize, unit: usize) -> Result<Piece<T>, String> {
    let Some((first_name, first)) = parts.first() else { return Err("nothing to stack".into()) };
    let inner_shape = first.shape.clone();
    if let Some((name, p)) = parts.iter().find(|(_, p)| p.shape != inner_shape) {
        return Err(format!("`{name}` has shape {:?}, unlike `{first_name}` with {inner_shape:?}", p.shape));
    }
    if axis > inner_shape.len() {
        return Err(format!("cannot stack tensors of shape {inner_shape:?} along a new axis {axis}"));
    }
    let outer: usize = inner_shape[..axis].iter().product();
    let inner: usize = inner_shape[axis..].iter().product();
    if !inner.is_multiple_of(unit) {
        return Err(format!("q8_0 blocks of shape {inner_shape:?} cannot be stacked along axis {axis}"));
    }
    let run = inner / unit;
    let mut shape = inner_shape;
    shape.insert(axis, parts.len());
    let mut data = Vec::with_capacity(outer * run * parts.len());
    for o in 0..outer {
        for (_, part) in &parts {
            data.extend_from_slice(&part.data[o * run..(o + 1) * run]);
        }
    }
    Ok(Piece { shape, data })
}

/// Entries `start .. start + len` of `piece` along `axis`.
pub(crate) fn slice<T: Clone>(
    piece: Piece<T>,
    axis: usize,
    start: usize,
    len: usize,
    unit: usize,
) -> Result<Piece<T>, String> {
    let shape = &piece.shape;
    let Some(&dim) = shape.get(axis) else {
        return Err(format!("shape {shape:?} has no axis {axis} to slice"));
    };
    let end = start.checked_add(len).filter(|&e| e <= dim);
    let Some(end) = end else {
        return Err(format!("shape {shape:?} has no entries {start}..{} on axis {axis}", start.saturating_add(len)));
    };
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    if ![start, len, dim].iter().all(|n| (n * inner).is_multiple_of(unit)) {
        return Err(format!("q8_0 blocks of shape {shape:?} do not align with entries {start}..{end} of axis {axis}"));
    }
    let (stride, first, run) = (dim * inner / unit, start * inner / unit, len * inner / unit);
    let mut data = Vec::with_capacity(outer * run);
    for o in 0..outer {
        data.extend_from_slice(&piece.data[o * stride + first..o * stride + first + run]);
    }
    let mut out_shape = piece.shape.clone();
    out_shape[axis] = len;
    Ok(Piece { shape: out_shape, data })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn piece(shape: &[usize], start: i32) -> Piece<i32> {
        let n = shape.iter().product::<usize>() as i32;
        Piece { shape: shape.to_vec(), data: (start..start + n).collect() }
    }

    #[test]
    fn stack_along_axis_zero_concatenates_parts() {
        let parts = vec![("a".to_string(), piece(&[2, 2], 0)), ("b".to_string(), piece(&[2, 2], 10))];
        let out = stack(parts, 0, 1).unwrap();
        assert_eq!(out.shape, [2, 2, 2]);
        assert_eq!(out.data, [0, 1, 2, 3, 10, 11, 12, 13]);
    }

    #[test]
    fn stack_along_inner_axis_interleaves_rows() {
        let parts = vec![("a".to_string(), piece(&[2, 2], 0)), ("b".to_string(), piece(&[2, 2], 10))];
        let out = stack(parts, 1, 1).unwrap();
        assert_eq!(out.shape, [2, 2, 2]);
        assert_eq!(out.data, [0, 1, 10, 11, 2, 3, 12, 13]);
    }

    #[test]
    fn stack_refuses_unequal_shapes_and_unaligned_blocks() {
        let parts = vec![("a".to_string(), piece(&[2, 2], 0)), ("b".to_string(), piece(&[2, 3], 0))];
        let err = stack(parts, 0, 1).err().unwrap();
        assert!(err.contains("`b` has shape [2, 3], unlike `a`"), "{err}");
        let parts = vec![("a".to_string(), piece(&[1, 2], 0))];
        let err = stack(parts, 2, 32).err().unwrap();
        assert!(err.contains("cannot be stacked along axis 2"), "{err}");
    }

    #[test]
    fn slice_rows_and_columns() {
        let rows = slice(piece(&[3, 2], 0), 0, 1, 2, 1).unwrap();
        assert_eq!((rows.shape, rows.data), (vec![2, 2], vec![2, 3, 4, 5]));
        let cols = slice(piece(&[3, 2], 0), 1, 1, 1, 1).unwrap();
        assert_eq!((cols.shape, cols.data), (vec![3, 1], vec![1, 3, 5]));
    }

    #[test]
    fn slice_of_blocks_counts_in_blocks() {
        // [2, 64] as Q8_0: two blocks per row; the second half of every row is block 1.
        let blocks = Piece { shape: vec![2, 64], data: vec![0, 1, 2, 3] };
        let out = slice(blocks, 1, 32, 32, 32).unwrap();
        assert_eq!((out.shape, out.data), (vec![2, 32], vec![1, 3]));
        let blocks = Piece { shape: vec![2, 64], data: vec![0, 1, 2, 3] };
        let err = slice(blocks, 1, 16, 32, 32).err().unwrap();
        assert!(err.contains("do not align"), "{err}");
    }

    #[test]
    fn slice_out_of_range_is_refused() {
        let err = slice(piece(&[3, 2], 0), 0, 2, 2, 1).err().unwrap();
        assert_eq!(err, "shape [3, 2] has no entries 2..4 on axis 0");
    }
}
