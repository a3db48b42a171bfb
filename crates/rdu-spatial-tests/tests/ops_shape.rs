//! `reshape`, `slice`, `shard`, `concat` and `transpose` on f32 and i32 data.

use crate::common;
use common::*;
use rdu_spatial::MapBindings;

fn bind() -> MapBindings {
    MapBindings::new().with("x", f(&[2, 3], &[0., 1., 2., 3., 4., 5.])).with("t", i(&[2, 2], &[1, 2, 3, 4]))
}

#[test]
fn reshape_reinterprets_row_major_and_checks_counts() {
    let r = run(&bind(), "y = reshape(x, [3, 1, 2])\nk = reshape(t, [4])", &["y", "k"]).unwrap();
    assert_eq!(r.outputs["y"].shape, [3, 1, 2]);
    assert_eq!(out(&r, "y"), [0., 1., 2., 3., 4., 5.]);
    assert_eq!(r.outputs["k"].as_i32().unwrap(), [1, 2, 3, 4]);
    let e = run(&bind(), "y = reshape(x, [4, 2])", &["y"]).unwrap_err().to_string();
    assert!(e.contains("cannot reshape"), "{e}");
}

#[test]
fn slice_takes_len_elements_from_start_along_axis() {
    let r = run(&bind(), "a = slice(x, axis=1, start=1, len=2)\nb = slice(x, axis=0, start=1, len=1)", &["a", "b"]);
    let r = r.unwrap();
    assert_eq!(out(&r, "a"), [1., 2., 4., 5.]);
    assert_eq!(r.outputs["a"].shape, [2, 2]);
    assert_eq!(out(&r, "b"), [3., 4., 5.]);
    let e = run(&bind(), "a = slice(x, axis=1, start=2, len=2)", &["a"]).unwrap_err().to_string();
    assert!(e.contains("slice 2..2+2 of axis 1 of size 3"), "{e}");
}

#[test]
fn concat_joins_along_axis_and_checks_the_rest() {
    let b = bind().with("z", f(&[2, 1], &[9., 8.]));
    let r = run(&b, "y = concat(x, z, x, axis=1)\nw = concat(x, x, axis=0)", &["y", "w"]).unwrap();
    assert_eq!(r.outputs["y"].shape, [2, 7]);
    assert_eq!(out(&r, "y"), [0., 1., 2., 9., 0., 1., 2., 3., 4., 5., 8., 3., 4., 5.]);
    assert_eq!(r.outputs["w"].shape, [4, 3]);
    let e = run(&b, "y = concat(x, z, axis=0)", &["y"]).unwrap_err().to_string();
    assert!(e.contains("cannot concatenate"), "{e}");
    assert!(run(&b, "y = concat(x, t, axis=0)", &["y"]).is_err());
}

#[test]
fn transpose_follows_numpy_perm() {
    let b = MapBindings::new().with("x", f(&[2, 3, 2], &(0..12).map(|v| v as f32).collect::<Vec<_>>()));
    let r = run(&b, "y = transpose(x, perm=[0, 2, 1])\nz = transpose(x, perm=[2, 0, 1])", &["y", "z"]).unwrap();
    assert_eq!(r.outputs["y"].shape, [2, 2, 3]);
    // y[a, c, b] = x[a, b, c].
    assert_eq!(out(&r, "y"), [0., 2., 4., 1., 3., 5., 6., 8., 10., 7., 9., 11.]);
    assert_eq!(r.outputs["z"].shape, [2, 2, 3]);
    // z[c, a, b] = x[a, b, c].
    assert_eq!(out(&r, "z"), [0., 2., 4., 6., 8., 10., 1., 3., 5., 7., 9., 11.]);
    let e = run(&b, "y = transpose(x, perm=[0, 0, 1])", &["y"]).unwrap_err().to_string();
    assert!(e.contains("not a permutation"), "{e}");
}

/// Every permutation of four axes, f32 and i32, element by element against the definition:
/// output index `(i₀, i₁, i₂, i₃)` reads the input where axis `perm[k]` is at `i_k`.
#[test]
fn transpose_of_every_permutation_of_four_axes_is_its_definition() {
    let dims = [2usize, 3, 4, 5];
    let values: Vec<f32> = (0..120).map(|v| v as f32).collect();
    let b = MapBindings::new().with("x", f(&dims, &values)).with("t", i(&dims, &(0..120).collect::<Vec<i32>>()));
    for a in 0..4usize {
        for c in (0..4).filter(|&c| c != a) {
            for d in (0..4).filter(|&d| d != a && d != c) {
                let perm = [a, c, d, 6 - a - c - d];
                let shape = perm.map(|p| dims[p]);
                let mut want = Vec::new();
                for i0 in 0..shape[0] {
                    for i1 in 0..shape[1] {
                        for i2 in 0..shape[2] {
                            for i3 in 0..shape[3] {
                                let mut at = [0usize; 4];
                                for (k, ik) in [i0, i1, i2, i3].into_iter().enumerate() {
                                    at[perm[k]] = ik;
                                }
                                want.push((((at[0] * 3 + at[1]) * 4 + at[2]) * 5 + at[3]) as f32);
                            }
                        }
                    }
                }
                let text = format!("y = transpose(x, perm={perm:?})\nk = transpose(t, perm={perm:?})");
                let r = run(&b, &text, &["y", "k"]).unwrap();
                assert_eq!(r.outputs["y"].shape, shape);
                assert_eq!(out(&r, "y"), want, "{perm:?}");
                let ints: Vec<i32> = want.iter().map(|&v| v as i32).collect();
                assert_eq!(r.outputs["k"].as_i32().unwrap(), ints, "{perm:?}");
            }
        }
    }
}

#[test]
fn shard_gives_each_chip_its_equal_part_and_one_chip_the_whole() {
    let b = MapBindings::new().with("x", f(&[2, 4], &[0., 1., 2., 3., 4., 5., 6., 7.]));
    let two = program(&b, "y = shard(x, axis=1, chips=2)", &["y"]);
    let group = rdu_spatial::sim::AllReduce::new(2);
    let parts: Vec<Vec<f32>> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..2)
            .map(|chip| {
                let (two, b, group) = (&two, &b, &group);
                s.spawn(move || {
                    let mut states = Default::default();
                    let out =
                        rdu_spatial::sim::simulate_chip(two, b, &mut states, false, group, chip, None).expect("runs");
                    assert_eq!(out["y"].shape, [2, 2]);
                    out["y"].as_f32().unwrap().to_vec()
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    assert_eq!(parts, [vec![0., 1., 4., 5.], vec![2., 3., 6., 7.]]);
    // One chip alone is chip 0 of one: only a shard into one part is its whole value.
    assert_eq!(out(&run(&b, "y = shard(x, axis=1, chips=1)", &["y"]).unwrap(), "y"), [0., 1., 2., 3., 4., 5., 6., 7.]);
    let e = run(&b, "y = shard(x, axis=1, chips=2)", &["y"]).unwrap_err().to_string();
    assert!(e.contains("shard into 2 parts on a group of 1 chips"), "{e}");
    let b3 = MapBindings::new().with("x", f(&[1, 3], &[0., 1., 2.]));
    let e =
        run(&b3, "y = shard(x, axis=1, chips=1)\nz = shard(x, axis=2, chips=1)", &["y", "z"]).unwrap_err().to_string();
    assert!(e.contains("axis 2 of [1, 3]"), "{e}");
}
