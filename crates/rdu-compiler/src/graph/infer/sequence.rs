//! Types of the ops over positions, caches, recurrent state and experts.

use super::{shapes, Fault, Operands, Site, TypeError};
use crate::graph::{DType, Type};
use rdu_spatial::op::{Act, GroupScore, Key};

shapes! {
    Rope(a, r) => rope(a, r.dim),
    CachePut(a, _) => cache_put(a),
    Attend(a, t) => attend(a, t.window),
    AttendMla(a, t) => attend_mla(a, t.latent, t.window),
    AttendMlaUp(a, t) => attend_mla_up(a, t.latent, t.window),
    ConvStep(a, _) => conv_step(a),
    ConvShift(a, _) => conv_shift(a),
    DeltaScan(a, _) => delta(a, false),
    DeltaStep(a, _) => delta(a, true),
    Route(a, r) => route(a, r.k, (r.groups, r.topk_groups), r.group_score),
    Experts(a, t) => experts(a, t.act, t.limit),
}

/// `rope(x [N, h, d], cos [P, R/2], sin [P, R/2], pos, dim=R) -> ≡ x`.
fn rope(a: &Operands<'_>, dim: usize) -> Result<Vec<Type>, TypeError> {
    let x = a.f32_rank(0, 3, "[N, h, d]")?;
    if dim == 0 || dim % 2 == 1 || dim > x[2] {
        return Err(
            a.attr_error(Key::Dim, format!("dim={dim} must be even, positive and at most the head size {}", x[2]))
        );
    }
    let cos = a.f32_rank(1, 2, &format!("[P, {}]", dim / 2))?;
    if cos[1] != dim / 2 {
        return Err(a.shape_error(1, format!("f32[P, {}] (dim/2 columns)", dim / 2)));
    }
    a.f32_exact(2, cos)?;
    a.positions(3, x[0])?;
    Ok(vec![a.ty(0).clone()])
}

/// `cache_put(C [S, ...], x [N, ...], pos) -> ≡ C`.
fn cache_put(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let c = a.ty(0);
    if c.shape.first().is_none_or(|&s| s == 0) {
        return Err(a.shape_error(0, "[S, ...] with at least one slot"));
    }
    let x = a.dtype(1, c.dtype)?;
    if x.len() != c.rank() || x[1..] != c.shape[1..] {
        return Err(a.shape_error(1, format!("[N, {:?}] (a row is a slot of C)", &c.shape[1..])));
    }
    a.positions(2, x[0])?;
    Ok(vec![c.clone()])
}

fn window_ok(a: &Operands<'_>, window: Option<usize>) -> Result<(), TypeError> {
    if window == Some(0) {
        return Err(a.attr_error(Key::Window, "window=0 sees no position; use window >= 1".into()));
    }
    Ok(())
}

/// `attend(q [N, h, dk], K [S, g, dk], V [S, g, dv], pos (, k [N, g, dk], v [N, g, dv]) (, sinks [h]))
/// -> [N, h, dv]`: 4 operands, 5 (sinks), 6 (the chunk's k, v) or 7 (both).
fn attend(a: &Operands<'_>, window: Option<usize>) -> Result<Vec<Type>, TypeError> {
    if a.len() == 5 && a.ty(4).rank() == 3 {
        // A fifth operand shaped like the chunk's keys: its values are missing (sinks are [h]).
        return Err(TypeError {
            fault: Fault::Arity,
            site: Site::Op,
            message: "`attend` takes the chunk's keys and values together: found the keys without the values".into(),
        });
    }
    let q = a.f32_rank(0, 3, "[N, h, dk]")?;
    let k = a.f32_rank(1, 3, "[S, g, dk]")?;
    if k[0] == 0 || k[1] == 0 || q[1] % k[1] != 0 || k[2] != q[2] {
        return Err(a.shape_error(1, format!("f32[S, g, {}] with S > 0 and g dividing h = {}", q[2], q[1])));
    }
    let v = a.f32_rank(2, 3, "[S, g, dv]")?;
    if v[..2] != k[..2] {
        return Err(a.shape_error(2, format!("f32[{}, {}, dv] (the slots and kv heads of K)", k[0], k[1])));
    }
    a.positions(3, q[0])?;
    if a.len() >= 6 {
        // The chunk's own keys and values: one row per query row, laid out as a slot of K / V.
        a.f32_exact(4, &[q[0], k[1], k[2]])?;
        a.f32_exact(5, &[q[0], k[1], v[2]])?;
    }
    if a.len() % 2 == 1 {
        // The sinks: one logit per query head.
        a.f32_exact(a.len() - 1, &[q[1]])?;
    }
    window_ok(a, window)?;
    Ok(vec![Type::f32(&[q[0], q[1], v[2]])])
}

/// `attend_mla(q [N, h, c], C [S, c], pos (, c [N, c]), latent=L) -> [N, h, L]`.
fn attend_mla(a: &Operands<'_>, latent: usize, window: Option<usize>) -> Result<Vec<Type>, TypeError> {
    let q = a.f32_rank(0, 3, "[N, h, c]")?;
    let c = a.f32_rank(1, 2, "[S, c]")?;
    if c[0] == 0 || c[1] != q[2] {
        return Err(a.shape_error(1, format!("f32[S, {}] with S > 0 (a key per slot, as wide as q)", q[2])));
    }
    a.positions(2, q[0])?;
    if a.len() == 4 {
        // The chunk's own latents: one row per query row, laid out as a slot of C.
        a.f32_exact(3, &[q[0], c[1]])?;
    }
    if latent == 0 || latent > c[1] {
        return Err(a.attr_error(Key::Latent, format!("latent={latent} must be in 1..={} (the key width)", c[1])));
    }
    window_ok(a, window)?;
    Ok(vec![Type::f32(&[q[0], q[1], latent])])
}

/// `attend_mla_up(q [N, h, dk + c − L], C [S, c], Wk [h, dk, L], Wv [h, dv, L], pos (, c [N, c]),
/// latent=L) -> [N, h, dv]`.
fn attend_mla_up(a: &Operands<'_>, latent: usize, window: Option<usize>) -> Result<Vec<Type>, TypeError> {
    let q = a.f32_rank(0, 3, "[N, h, dq]")?;
    let c = a.f32_rank(1, 2, "[S, c]")?;
    if c[0] == 0 {
        return Err(a.shape_error(1, "f32[S, c] with S > 0"));
    }
    if latent == 0 || latent > c[1] {
        return Err(a.attr_error(Key::Latent, format!("latent={latent} must be in 1..={} (the entry width)", c[1])));
    }
    let rope = c[1] - latent;
    let wk = a.f32_rank(2, 3, &format!("[{}, dk, {latent}]", q[1]))?;
    if wk[0] != q[1] || wk[2] != latent || wk[1] + rope != q[2] {
        return Err(a.shape_error(
            2,
            format!(
                "f32[{}, {}, {latent}] (a key of q's width less the {rope} rope values per head)",
                q[1],
                q[2].saturating_sub(rope)
            ),
        ));
    }
    let wv = a.f32_rank(3, 3, &format!("[{}, dv, {latent}]", q[1]))?;
    if wv[0] != q[1] || wv[2] != latent || wv[1] == 0 {
        return Err(a.shape_error(3, format!("f32[{}, dv, {latent}] with dv > 0", q[1])));
    }
    a.positions(4, q[0])?;
    if a.len() == 6 {
        // The chunk's own latents: one row per query row, laid out as a slot of C.
        a.f32_exact(5, &[q[0], c[1]])?;
    }
    window_ok(a, window)?;
    Ok(vec![Type::f32(&[q[0], q[1], wv[1]])])
}

/// `conv_step(x [N, C], w [C, K] (, state [K−1, C])) -> [N, C]`.
fn conv_step(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let x = a.f32_rank(0, 2, "[N, C]")?;
    let w = a.f32_rank(1, 2, &format!("[{}, K]", x[1]))?;
    if w[0] != x[1] || w[1] == 0 {
        return Err(a.shape_error(1, format!("f32[{}, K] with K > 0 (one kernel per channel)", x[1])));
    }
    if a.len() == 3 {
        a.f32_exact(2, &[w[1] - 1, x[1]])?;
    }
    Ok(vec![a.ty(0).clone()])
}

/// `conv_shift(state [K−1, C], x [N, C]) -> ≡ state`.
fn conv_shift(a: &Operands<'_>) -> Result<Vec<Type>, TypeError> {
    let s = a.f32_rank(0, 2, "[K-1, C]")?;
    let x = a.f32_rank(1, 2, &format!("[N, {}]", s[1]))?;
    if x[1] != s[1] {
        return Err(a.shape_error(1, format!("f32[N, {}] (the channels of the state)", s[1])));
    }
    Ok(vec![a.ty(0).clone()])
}

/// `delta_scan(q, k, v, g, beta)` and `delta_step(S, q, k, v, g, beta)`.
fn delta(a: &Operands<'_>, with_state: bool) -> Result<Vec<Type>, TypeError> {
    let o = usize::from(with_state);
    let q = a.f32_rank(o, 3, "[N, hk, dk]")?;
    let (n, hk, dk) = (q[0], q[1], q[2]);
    if hk == 0 {
        return Err(a.shape_error(o, "f32[N, hk, dk] with hk > 0"));
    }
    a.f32_exact(o + 1, q)?;
    let v = a.f32_rank(o + 2, 3, &format!("[{n}, hv, dv]"))?;
    if v[0] != n || v[1] % hk != 0 {
        return Err(a.shape_error(o + 2, format!("f32[{n}, hv, dv] with hv a multiple of hk = {hk}")));
    }
    let (hv, dv) = (v[1], v[2]);
    a.f32_exact(o + 3, &[n, hv])?;
    a.f32_exact(o + 4, &[n, hv])?;
    let out = Type::f32(&[n, hv, dv]);
    if !with_state {
        return Ok(vec![out]);
    }
    a.f32_exact(0, &[hv, dk, dv])?;
    Ok(vec![out, a.ty(0).clone()])
}

/// `route(logits [N, E] (, bias [E]), k, groups, topk_groups, group_score) -> w [N, k], idx i32[N, k]`.
fn route(
    a: &Operands<'_>,
    k: usize,
    (groups, topk_groups): (usize, usize),
    group_score: GroupScore,
) -> Result<Vec<Type>, TypeError> {
    let l = a.f32_rank(0, 2, "[N, E]")?;
    let (n, e) = (l[0], l[1]);
    if a.len() == 2 {
        a.f32_exact(1, &[e])?;
    }
    if groups == 0 || e % groups != 0 {
        return Err(a.attr_error(Key::Groups, format!("groups={groups} must divide the {e} experts")));
    }
    if group_score == GroupScore::Top2 && groups > 1 && e / groups < 2 {
        let message = format!("top2 needs groups of 2 experts or more, not {}", e / groups);
        return Err(a.attr_error(Key::GroupScore, message));
    }
    if topk_groups == 0 || topk_groups > groups {
        return Err(a.attr_error(Key::TopkGroups, format!("topk_groups={topk_groups} must be in 1..={groups}")));
    }
    let eligible = topk_groups * (e / groups);
    if k == 0 || k > eligible {
        return Err(a.attr_error(Key::K, format!("k={k} must be in 1..={eligible} (the experts of the kept groups)")));
    }
    Ok(vec![Type::f32(&[n, k]), Type::i32(&[n, k])])
}

/// `experts(x [N, D], w [N, K], idx i32[N, K], Wg [E, I, D], Wu [E, I, D], Wd [E, D, I]
/// (, bg [E, I], bu [E, I])) -> [N, D]`.
fn experts(a: &Operands<'_>, act: Act, limit: Option<f64>) -> Result<Vec<Type>, TypeError> {
    match (act, limit) {
        (Act::SwigluOai, None) => {
            return Err(a.attr_error(Key::Limit, "`act=swiglu_oai` needs the attribute `limit=...`".into()))
        }
        (Act::SwigluOai, Some(l)) if l <= 0.0 => {
            return Err(a.attr_error(Key::Limit, format!("limit={l:?} must be above 0")))
        }
        (Act::Silu | Act::GeluTanh, Some(_)) => {
            let message = format!("`limit` goes with `act=swiglu_oai`, not `act={}`", act.word());
            return Err(a.attr_error(Key::Limit, message));
        }
        _ => {}
    }
    if a.len() == 7 {
        return Err(TypeError {
            fault: Fault::Arity,
            site: Site::Op,
            message: "`experts` takes the gate and up biases together: 6 or 8 operands, found 7".into(),
        });
    }
    let x = a.f32_rank(0, 2, "[N, D]")?;
    let (n, d) = (x[0], x[1]);
    let w = a.f32_rank(1, 2, &format!("[{n}, K]"))?;
    if w[0] != n {
        return Err(a.shape_error(1, format!("f32[{n}, K] (a weight per row and choice)")));
    }
    let idx = a.dtype(2, DType::I32)?;
    if idx != w {
        return Err(a.shape_error(2, Type::i32(w)));
    }
    let wg = a.f32_rank(3, 3, &format!("[E, I, {d}]"))?;
    if wg[2] != d {
        return Err(a.shape_error(3, format!("f32[E, I, {d}]")));
    }
    a.f32_exact(4, wg)?;
    a.f32_exact(5, &[wg[0], d, wg[1]])?;
    if a.len() == 8 {
        a.f32_exact(6, &wg[..2])?;
        a.f32_exact(7, &wg[..2])?;
    }
    Ok(vec![a.ty(0).clone()])
}
