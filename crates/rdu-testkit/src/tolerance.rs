//! How close rdu must be to a reference: `|got − want| ≤ abs + rel·|want|` element by element,
//! and when it is not, which element is worst and by how much.

use std::fmt;

/// An elementwise tolerance.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    pub abs: f32,
    pub rel: f32,
}

/// The element that exceeds its bound the most (or, when every element passes, the largest
/// absolute difference).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Worst {
    pub index: usize,
    pub got: f32,
    pub want: f32,
    /// `|got − want|` (NaN when either is NaN).
    pub diff: f32,
    /// Whether every element is within the tolerance.
    pub within: bool,
}

impl Tolerance {
    /// The float32 paths' bound against transformers and llama.cpp: 1e-4 absolute.
    pub const F32: Tolerance = Tolerance { abs: 1e-4, rel: 0.0 };

    /// An absolute bound.
    pub const fn abs(abs: f32) -> Tolerance {
        Tolerance { abs, rel: 0.0 }
    }

    /// `abs + rel·|want|`.
    pub const fn new(abs: f32, rel: f32) -> Tolerance {
        Tolerance { abs, rel }
    }

    /// An absolute bound of `rel` times the largest `|want|`: relative to the output's scale, so
    /// that a near-cancelling element is not held tighter than f32 sums reach.
    pub fn scaled(want: &[f32], rel: f32) -> Tolerance {
        Tolerance::abs(rel * want.iter().fold(0.0f32, |m, v| m.max(v.abs())))
    }

    /// The worst element of `got` against `want` (of the same length). A NaN on either side
    /// fails.
    pub fn worst(&self, got: &[f32], want: &[f32]) -> Worst {
        assert_eq!(got.len(), want.len(), "got {} values, want {}", got.len(), want.len());
        let at = |index: usize, within: bool| Worst {
            index,
            got: got[index],
            want: want[index],
            diff: (got[index] - want[index]).abs(),
            within,
        };
        // The largest difference, and the element furthest past its bound (a NaN is furthest).
        let (mut largest, mut failing) = ((0, 0.0f32), None::<(usize, f32)>);
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            let diff = (g - w).abs();
            if diff > largest.1 {
                largest = (i, diff);
            }
            let excess = if diff.is_nan() { f32::INFINITY } else { diff - (self.abs + self.rel * w.abs()) };
            if excess > 0.0 && failing.is_none_or(|(_, e)| excess > e) {
                failing = Some((i, excess));
            }
        }
        match failing {
            Some((i, _)) => at(i, false),
            None if got.is_empty() => Worst { index: 0, got: 0.0, want: 0.0, diff: 0.0, within: true },
            None => at(largest.0, true),
        }
    }

    /// Panics naming `what` and the worst element unless every element is within; returns the
    /// largest absolute difference.
    #[track_caller]
    pub fn assert(&self, what: &str, got: &[f32], want: &[f32]) -> f32 {
        let w = self.worst(got, want);
        assert!(w.within, "{what}: {w} exceeds {self}");
        w.diff
    }
}

impl fmt::Display for Tolerance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rel {
            0.0 => write!(f, "|diff| ≤ {:e}", self.abs),
            rel => write!(f, "|diff| ≤ {:e} + {rel:e}·|want|", self.abs),
        }
    }
}

impl fmt::Display for Worst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "element {}: got {} want {} (|diff| {:e})", self.index, self.got, self.want, self.diff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_the_worst_element() {
        let w = Tolerance::F32.worst(&[1.0, 2.0, 3.0], &[1.0, 2.01, 3.5]);
        assert!(!w.within);
        assert_eq!((w.index, w.got, w.want), (2, 3.0, 3.5));
    }

    #[test]
    fn passing_rows_report_the_largest_difference() {
        let w = Tolerance::abs(0.1).worst(&[1.0, 2.0, 3.0], &[1.01, 2.05, 3.0]);
        assert!(w.within);
        assert_eq!(w.index, 1);
        assert!((w.diff - 0.05).abs() < 1e-6);
        assert!((Tolerance::abs(0.1).assert("rows", &[1.0, 2.0], &[1.01, 2.05]) - 0.05).abs() < 1e-6);
    }

    #[test]
    fn nan_fails_and_is_named() {
        let w = Tolerance::F32.worst(&[1.0, f32::NAN, 9.0], &[1.0, 2.0, 3.0]);
        assert!(!w.within);
        assert_eq!(w.index, 1);
    }

    #[test]
    fn relative_part_scales_with_want() {
        let t = Tolerance::new(0.0, 0.01);
        assert!(t.worst(&[100.5], &[100.0]).within);
        assert!(!t.worst(&[1.5], &[1.0]).within);
        assert!(Tolerance::scaled(&[100.0, 1.0], 0.01).worst(&[100.0, 1.9], &[100.0, 1.0]).within);
    }

    #[test]
    #[should_panic(expected = "logits: element 1: got 2 want 3")]
    fn assert_panics_with_the_worst_element() {
        Tolerance::F32.assert("logits", &[1.0, 2.0], &[1.0, 3.0]);
    }
}
