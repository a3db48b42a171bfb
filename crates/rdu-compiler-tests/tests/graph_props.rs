//! Type inference and the interpreter agree: on random graphs built node by node from
//! random ops over random earlier values (a node is kept only when inference accepts it),
//! evaluation never panics, and every kernel produces exactly the types inference gave —
//! the only errors are runtime data errors (positions, ids, expert indices).

use proptest::prelude::*;
use rdu_compiler::graph::{
    eval, Act, DType, Declaration, Graph, GroupScore, KMap, Op, RopeStyle, Score, Tensor, Type, ValueId,
};
use rdu_compiler::lang::ast::{DeclKind, Span};
use std::collections::BTreeMap;

/// A random op with attributes drawn from small ranges (so they often fit small shapes).
fn op() -> impl Strategy<Value = Op> {
    let small = 0usize..3;
    let positive = 1usize..3;
    prop_oneof![
        Just(Op::Add),
        Just(Op::Sub),
        Just(Op::Mul),
        (-2.0f64..2.0).prop_map(|by| Op::Scale { by }),
        Just(Op::Neg),
        Just(Op::Exp),
        Just(Op::Sigmoid),
        Just(Op::Silu),
        Just(Op::Softplus),
        Just(Op::GeluTanh),
        (0.0f64..1.0, prop::bool::ANY).prop_map(|(eps, o)| Op::RmsNorm { eps, offset: f64::from(u8::from(o)) }),
        (0.0f64..1.0).prop_map(|eps| Op::L2Norm { eps }),
        Just(Op::Linear),
        Just(Op::LinearHeads),
        Just(Op::Embed),
        Just(Op::Argmax),
        prop::collection::vec(1usize..3, 0..4).prop_map(|shape| Op::Reshape { shape }),
        (small.clone(), small.clone(), small.clone()).prop_map(|(axis, start, len)| Op::Slice { axis, start, len }),
        small.clone().prop_map(|axis| Op::Concat { axis }),
        Just(vec![1, 0]).prop_map(|perm| Op::Transpose { perm }),
        Just(vec![0, 2, 1]).prop_map(|perm| Op::Transpose { perm }),
        (prop::bool::ANY,)
            .prop_map(|(n,)| Op::Rope { dim: 2, style: if n { RopeStyle::Neox } else { RopeStyle::Interleaved } }),
        Just(Op::CachePut),
        (prop::option::of(positive.clone())).prop_map(|window| Op::Attend { scale: 0.5, window }),
        (positive.clone(), prop::option::of(positive.clone())).prop_map(|(latent, window)| Op::AttendMla {
            scale: 0.5,
            latent,
            window
        }),
        Just(Op::ConvStep),
        Just(Op::ConvShift),
        prop::bool::ANY.prop_map(|t| Op::DeltaScan { kmap: if t { KMap::Tiled } else { KMap::Grouped } }),
        prop::bool::ANY.prop_map(|t| Op::DeltaStep { kmap: if t { KMap::Tiled } else { KMap::Grouped } }),
        (positive.clone(), prop::bool::ANY, positive.clone(), positive.clone()).prop_map(|(k, norm, groups, tg)| {
            Op::Route {
                k,
                norm,
                scale: 1.5,
                groups,
                topk_groups: tg,
                score: Score::Softmax,
                group_score: GroupScore::Max,
            }
        }),
        prop::bool::ANY.prop_map(|g| Op::Experts { act: if g { Act::GeluTanh } else { Act::Silu }, limit: None }),
    ]
}

fn ty() -> impl Strategy<Value = Type> {
    (prop::bool::weighted(0.8), prop::collection::vec(1usize..3, 0..4))
        .prop_map(|(f, shape)| Type::new(if f { DType::F32 } else { DType::I32 }, &shape))
}

/// Values for the declarations: f32 in [-1, 1), i32 0 or 1.
fn bindings(g: &Graph, seed: u64) -> BTreeMap<String, Tensor> {
    let mut s = seed;
    g.declared()
        .map(|(_, v, _)| {
            let mut next = || {
                s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                s >> 33
            };
            let n: usize = v.ty.shape.iter().product();
            let t = match v.ty.dtype {
                DType::F32 => {
                    Tensor::f32(v.ty.shape.clone(), (0..n).map(|_| (next() % 2000) as f32 / 1000.0 - 1.0).collect())
                }
                DType::I32 => Tensor::i32(v.ty.shape.clone(), (0..n).map(|_| (next() % 2) as i32).collect()),
            };
            (v.name.clone(), t)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn kernels_produce_the_inferred_types_and_never_panic(
        decls in prop::collection::vec(ty(), 1..7),
        attempts in prop::collection::vec((op(), prop::collection::vec(any::<usize>(), 1..7)), 1..40),
        seed in any::<u64>(),
    ) {
        let mut g = Graph::new();
        let mut values: Vec<ValueId> = Vec::new();
        for (i, t) in decls.into_iter().enumerate() {
            values.push(g.declare(&format!("d{i}"), t, Declaration::of(DeclKind::Input)));
        }
        for (k, (op, picks)) in attempts.into_iter().enumerate() {
            let (least, most) = op.arity();
            let n = picks.len().clamp(least, most.min(least + 2));
            let inputs: Vec<ValueId> = (0..n).map(|j| values[picks[j % picks.len()] % values.len()]).collect();
            let names: Vec<String> = (0..op.n_outputs()).map(|o| format!("v{k}_{o}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            if let Ok(outs) = g.push(op, &inputs, &refs, k, Span::default()) {
                values.extend(outs);
            }
        }
        for (i, &v) in values.iter().enumerate() {
            g.output(&format!("out{i}"), v);
        }
        prop_assert_eq!(g.verify(), Ok(()));
        match eval(&g, &bindings(&g, seed)) {
            Ok(r) => {
                for o in &g.outputs {
                    let t = &r.outputs[&o.name];
                    prop_assert_eq!(t.shape(), g.ty(o.value).shape.as_slice());
                    prop_assert_eq!(t.dtype(), g.ty(o.value).dtype);
                }
            }
            Err(e) => {
                let data_error = ["position", "token id", "expert", "attends"].iter().any(|w| e.message.contains(w));
                prop_assert!(data_error, "not a runtime data error: {}", e);
            }
        }
    }
}

/// Operands of consistent random shapes for one of the composite ops (`which`), from the
/// small numbers `u` (each in 1..4) and the flags `f`.
fn composite(which: u8, u: [usize; 8], f: [bool; 3]) -> (Op, Vec<Type>) {
    let [a, b, c, d, e, h, _, l] = u;
    let pos = |n: usize| if f[0] { Type::i32(&[]) } else { Type::i32(&[n]) };
    let window = f[1].then_some(l);
    match which % 13 {
        0 => {
            let style = if f[2] { RopeStyle::Neox } else { RopeStyle::Interleaved };
            let half = c;
            let x = Type::f32(&[a, b, 2 * half + d - 1]);
            let table = Type::f32(&[e, half]);
            (Op::Rope { dim: 2 * half, style }, vec![x, table.clone(), table, pos(a)])
        }
        1 => (Op::CachePut, vec![Type::f32(&[a, c]), Type::f32(&[b, c]), pos(b)]),
        2 => {
            let (q, kk, v) = (Type::f32(&[a, b * c, d]), Type::f32(&[e, b, d]), Type::f32(&[e, b, h]));
            (Op::Attend { scale: 0.7, window }, vec![q, kk, v, pos(a)])
        }
        3 => {
            let latent = d.min(c);
            (Op::AttendMla { scale: 0.7, latent, window }, vec![Type::f32(&[a, b, c]), Type::f32(&[e, c]), pos(a)])
        }
        4 => {
            let mut ops = vec![Type::f32(&[a, b]), Type::f32(&[b, c])];
            if f[2] {
                ops.push(Type::f32(&[c - 1, b]));
            }
            (Op::ConvStep, ops)
        }
        5 => (Op::ConvShift, vec![Type::f32(&[a - 1, b]), Type::f32(&[c, b])]),
        6 | 7 => {
            let kmap = if f[2] { KMap::Tiled } else { KMap::Grouped };
            let (n, hk, hv, dk, dv) = (a, b, b * c, d, e);
            let qk = Type::f32(&[n, hk, dk]);
            let mut ops = vec![qk.clone(), qk, Type::f32(&[n, hv, dv]), Type::f32(&[n, hv]), Type::f32(&[n, hv])];
            if which % 13 == 6 {
                return (Op::DeltaScan { kmap }, ops);
            }
            ops.insert(0, Type::f32(&[hv, dk, dv]));
            (Op::DeltaStep { kmap }, ops)
        }
        8 => {
            let (groups, per) = (b, c);
            let topk_groups = d.min(groups);
            let k = e.min(topk_groups * per);
            let op = Op::Route {
                k,
                norm: f[2],
                scale: 2.5,
                groups,
                topk_groups,
                score: Score::Softmax,
                group_score: GroupScore::Max,
            };
            (op, vec![Type::f32(&[a, groups * per])])
        }
        9 => {
            let (n, dm, kk, ne, i) = (a, b, c, d, e);
            let wg = Type::f32(&[ne, i, dm]);
            let ops = vec![
                Type::f32(&[n, dm]),
                Type::f32(&[n, kk]),
                Type::i32(&[n, kk]),
                wg.clone(),
                wg,
                Type::f32(&[ne, dm, i]),
            ];
            (Op::Experts { act: if f[2] { Act::Silu } else { Act::GeluTanh }, limit: None }, ops)
        }
        10 => (Op::Linear, vec![Type::f32(&[a, b]), Type::f32(&[c, b]), Type::f32(&[c])]),
        11 => (Op::LinearHeads, vec![Type::f32(&[a, b, c]), Type::f32(&[b, d, c])]),
        _ => (Op::Embed, vec![Type::i32(&[a]), Type::f32(&[b, c])]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn composite_ops_at_random_shapes_match_inference(
        which in any::<u8>(),
        u in prop::array::uniform8(1usize..4),
        f in prop::array::uniform3(prop::bool::ANY),
        seed in any::<u64>(),
    ) {
        let (op, types) = composite(which, u, f);
        let mut g = Graph::new();
        let ids: Vec<ValueId> =
            types.iter().enumerate().map(|(i, t)| g.declare(&format!("d{i}"), t.clone(), Declaration::of(DeclKind::Input))).collect();
        let names: Vec<String> = (0..op.n_outputs()).map(|o| format!("o{o}")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let name = op.name();
        let outs = g.push(op, &ids, &refs, 0, Span::default());
        prop_assert!(outs.is_ok(), "{} rejects consistent operands {:?}: {:?}", name, types, outs);
        for (n, v) in names.iter().zip(outs.unwrap()) {
            g.output(n, v);
        }
        let env = bindings(&g, seed);
        let first = eval(&g, &env);
        prop_assert_eq!(&first, &eval(&g, &env), "evaluation is deterministic");
        match first {
            Ok(r) => {
                for o in &g.outputs {
                    prop_assert_eq!(r.outputs[&o.name].shape(), g.ty(o.value).shape.as_slice());
                }
            }
            Err(e) => {
                let data_error = ["position", "token id", "expert", "attends"].iter().any(|w| e.message.contains(w));
                prop_assert!(data_error, "not a runtime data error: {}", e);
            }
        }
    }
}
