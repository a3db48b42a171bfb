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

/// Entries `start, start + step, …` of `piece` along `axis`, `len` of them (`step` 1: the run
/// `start .. start + len`).
pub(crate) fn slice<T: Clone>(
    piece: Piece<T>,
    axis: usize,
    start: usize,
    len: usize,
    step: usize,
    unit: usize,
) -> Result<Piece<T>, String> {
    let shape = &piece.shape;
    let Some(&dim) = shape.get(axis) else {
        return Err(format!("shape {shape:?} has no axis {axis} to slice"));
    };
    // The entry past the last one taken (`start + len` for a run).
    let end = len.checked_sub(1).map_or(Some(start), |l| step.checked_mul(l)?.checked_add(start)?.checked_add(1));
    let Some(end) = end.filter(|&e| e <= dim && step > 0) else {
        let what = if step == 1 { String::new() } else { format!(" by {step}") };
        return Err(format!(
            "shape {shape:?} has no entries {start}..{}{what} on axis {axis}",
            start.saturating_add(len.saturating_mul(step.max(1)))
        ));
    };
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    if ![start, len, dim].iter().all(|n| (n * inner).is_multiple_of(unit)) || (step > 1 && !inner.is_multiple_of(unit))
    {
        return Err(format!("q8_0 blocks of shape {shape:?} do not align with entries {start}..{end} of axis {axis}"));
    }
    // Units a step of the axis spans (a whole number of them for a strided slice), and a run's.
    let (stride, first, entry, run) = (dim * inner / unit, start * inner / unit, inner / unit, len * inner / unit);
    let mut data = Vec::with_capacity(outer * run);
    for o in 0..outer {
        if step == 1 {
            data.extend_from_slice(&piece.data[o * stride + first..o * stride + first + run]);
            continue;
        }
        for i in 0..len {
            let at = o * stride + first + i * step * entry;
            data.extend_from_slice(&piece.data[at..at + entry]);
        }
    }
    let mut out_shape = piece.shape.clone();
    out_shape[axis] = len;
    Ok(Piece { shape: out_shape, data })
}

/// `piece` with its last two axes swapped; dense values only (`unit` 1): a Q8_0 block runs
/// along the last axis and cannot be turned.
pub(crate) fn transpose<T: Clone>(piece: Piece<T>, unit: usize) -> Result<Piece<T>, String> {
    let [outer @ .., rows, cols] = piece.shape.as_slice() else {
        return Err(format!("shape {:?} has no two axes to swap", piece.shape));
    };
    if unit != 1 {
        return Err(format!("q8_0 blocks of shape {:?} cannot be transposed", piece.shape));
    }
    let (rows, cols) = (*rows, *cols);
    let mut data = Vec::with_capacity(piece.data.len());
    for m in piece.data.chunks_exact((rows * cols).max(1)) {
        for c in 0..cols {
            data.extend((0..rows).map(|r| m[r * cols + c].clone()));
        }
    }
    let mut shape = outer.to_vec();
    shape.extend([cols, rows]);
    Ok(Piece { shape, data })
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
        let rows = slice(piece(&[3, 2], 0), 0, 1, 2, 1, 1).unwrap();
        assert_eq!((rows.shape, rows.data), (vec![2, 2], vec![2, 3, 4, 5]));
        let cols = slice(piece(&[3, 2], 0), 1, 1, 1, 1, 1).unwrap();
        assert_eq!((cols.shape, cols.data), (vec![3, 1], vec![1, 3, 5]));
    }

    #[test]
    fn a_strided_slice_takes_every_step_th_entry() {
        // gpt-oss's interleaved gate (even) and up (odd) columns of [2, 6].
        let gate = slice(piece(&[2, 6], 0), 1, 0, 3, 2, 1).unwrap();
        assert_eq!((gate.shape, gate.data), (vec![2, 3], vec![0, 2, 4, 6, 8, 10]));
        let up = slice(piece(&[2, 6], 0), 1, 1, 3, 2, 1).unwrap();
        assert_eq!((up.shape, up.data), (vec![2, 3], vec![1, 3, 5, 7, 9, 11]));
        let rows = slice(piece(&[4, 2], 0), 0, 1, 2, 2, 1).unwrap();
        assert_eq!((rows.shape, rows.data), (vec![2, 2], vec![2, 3, 6, 7]));
        let err = slice(piece(&[2, 6], 0), 1, 1, 4, 2, 1).err().unwrap();
        assert_eq!(err, "shape [2, 6] has no entries 1..9 by 2 on axis 1");
    }

    #[test]
    fn transpose_swaps_the_last_two_axes_of_each_matrix() {
        let t = transpose(piece(&[2, 2, 3], 0), 1).unwrap();
        assert_eq!((t.shape, t.data), (vec![2, 3, 2], vec![0, 3, 1, 4, 2, 5, 6, 9, 7, 10, 8, 11]));
        assert!(transpose(piece(&[4], 0), 1).is_err());
        let err = transpose(piece(&[2, 64], 0), 32).err().unwrap();
        assert!(err.contains("cannot be transposed"), "{err}");
    }

    #[test]
    fn slice_of_blocks_counts_in_blocks() {
        // [2, 64] as Q8_0: two blocks per row; the second half of every row is block 1.
        let blocks = Piece { shape: vec![2, 64], data: vec![0, 1, 2, 3] };
        let out = slice(blocks, 1, 32, 32, 1, 32).unwrap();
        assert_eq!((out.shape, out.data), (vec![2, 32], vec![1, 3]));
        let blocks = Piece { shape: vec![2, 64], data: vec![0, 1, 2, 3] };
        let err = slice(blocks, 1, 16, 32, 1, 32).err().unwrap();
        assert!(err.contains("do not align"), "{err}");
    }

    #[test]
    fn slice_out_of_range_is_refused() {
        let err = slice(piece(&[3, 2], 0), 0, 2, 2, 1, 1).err().unwrap();
        assert_eq!(err, "shape [3, 2] has no entries 2..4 on axis 0");
    }
}
