//! Positions and caches: `rope`, `cache_put`, and causal softmax attention (`attend`,
//! `attend_mla`) over ring caches, with scores, softmax and sums in f64.

use super::gemm::{self, View};
use super::{evals, f32s, i32s, out, Kernel};
use crate::graph::{numel, Data, RopeStyle, Tensor};
use rayon::prelude::*;
use rdu_spatial::view::gather;
use std::collections::BTreeMap;

evals! {
    Rope(ins, a) => rope(ins, a.dim, a.style),
    CachePut(ins, _) => cache_put(ins[0], ins[1], ins[2]),
    Attend(ins, a) => attend(ins, a.scale, a.window),
    AttendMla(ins, a) => attend_mla(ins, a.scale, a.latent, a.window),
    AttendMlaUp(ins, a) => attend_mla_up(ins, a.scale, a.latent, a.window),
}

/// The position of each of `n` rows: `pos + i` for a scalar `pos`, `pos[i]` for a vector.
pub(super) fn positions(pos: &Tensor, n: usize) -> Result<Vec<usize>, String> {
    let ps = i32s(pos)?;
    let all: Vec<i64> = match (pos.shape().is_empty(), ps) {
        (true, [p]) => (0..n).map(|i| i64::from(*p) + i as i64).collect(),
        (false, ps) if ps.len() == n => ps.iter().map(|&p| i64::from(p)).collect(),
        _ => return Err(format!("positions {pos:?} do not fit {n} rows")),
    };
    all.into_iter()
        .enumerate()
        .map(|(i, p)| usize::try_from(p).map_err(|_| format!("row {i} has the negative position {p}")))
        .collect()
}

/// Rotates the first `dim` values of every head of row `i` by the angles of table row `p_i`.
fn rope(ins: &[&Tensor], dim: usize, style: RopeStyle) -> Kernel {
    let [x, cos, sin, pos] = ins else { return Err("rope takes x, cos, sin, pos".into()) };
    let (n, h, d) = (x.shape()[0], x.shape()[1], x.shape()[2]);
    let (rows, half) = (cos.shape()[0], cos.shape()[1]);
    let (cos, sin) = (f32s(cos)?, f32s(sin)?);
    let mut data = f32s(x)?.to_vec();
    for (i, p) in positions(pos, n)?.into_iter().enumerate() {
        if p >= rows {
            return Err(format!("row {i} is at position {p}, past the {rows} rows of the RoPE table"));
        }
        for j in 0..h {
            let head = &mut data[(i * h + j) * d..][..d];
            for c in 0..dim / 2 {
                let (a, b) = match style {
                    RopeStyle::Neox => (c, c + dim / 2),
                    RopeStyle::Interleaved => (2 * c, 2 * c + 1),
                };
                let (cs, sn) = (f64::from(cos[p * half + c]), f64::from(sin[p * half + c]));
                let (xa, xb) = (f64::from(head[a]), f64::from(head[b]));
                head[a] = (xa * cs - xb * sn) as f32;
                head[b] = (xb * cs + xa * sn) as f32;
            }
        }
    }
    Ok(vec![out(x.shape(), data)?])
}

/// Writes row `i` of `x` to slot `p_i mod S` of a copy of `c`.
fn cache_put(c: &Tensor, x: &Tensor, pos: &Tensor) -> Kernel {
    let slots = c.shape()[0];
    let width = numel(&c.shape()[1..]);
    let rows = positions(pos, x.shape()[0])?;
    if slots == 0 {
        return Err("the cache has no slots".into());
    }
    let slot_of = |i: usize| rows[i] % slots * width;
    let t = match (c.data(), x.data()) {
        (Data::F32(cv), Data::F32(xv)) => {
            let mut data = cv.clone();
            for i in 0..rows.len() {
                data[slot_of(i)..][..width].copy_from_slice(&xv[i * width..][..width]);
            }
            Tensor::try_f32(c.shape().to_vec(), data)
        }
        (Data::I32(cv), Data::I32(xv)) => {
            let mut data = cv.clone();
            for i in 0..rows.len() {
                data[slot_of(i)..][..width].copy_from_slice(&xv[i * width..][..width]);
            }
            Tensor::try_i32(c.shape().to_vec(), data)
        }
        _ => None,
    };
    Ok(vec![t.ok_or("cache and rows of different dtypes")?])
}

/// Keys and values of every entry a row may read, widened to f64: the cache's `S` slots,
/// then — for a prefill chunk — the chunk's own `N` rows. The key of (entry, kv head) is `dk`
/// values at `keys[(entry·g + head)·key_stride..]`, its value `dv` values at
/// `values[(entry·g + head)·value_stride..]`.
struct Store {
    keys: Vec<f64>,
    key_stride: usize,
    /// `None`: the values are the first `dv` values of the keys (latent attention).
    values: Option<Vec<f64>>,
    value_stride: usize,
}

impl Store {
    /// The cache's entries, then the chunk's (when given), each widened to f64.
    fn widen(cache: &[f32], chunk: Option<&[f32]>) -> Vec<f64> {
        cache.iter().chain(chunk.unwrap_or_default()).map(|&v| f64::from(v)).collect()
    }

    fn values(&self) -> &[f64] {
        self.values.as_deref().unwrap_or(&self.keys)
    }
}

/// Where one attention reads: `q [N, h, dk]` and the store of cache slots and chunk rows.
struct Attention<'a> {
    q: &'a [f32],
    n: usize,
    heads: usize,
    dk: usize,
    /// Entries in the store: the cache's slots, then the chunk's rows (none for a decode step).
    entries: usize,
    kv_heads: usize,
    dv: usize,
    store: Store,
    /// One logit per query head joining every softmax's denominator (attention sinks).
    sinks: Option<&'a [f32]>,
}

/// f64 values of scores (and of their weights) one task holds at a time (32 MiB each: enough
/// rows of a 128-head latent attention that packing the cache is a small part of the work).
const BLOCK_SCORES: usize = 1 << 22;
/// Heads whose keys and values `attend_mla_up` widens from the latents together.
const UP_HEADS: usize = 16;
/// Entries a task of `attend_mla_up`'s widening takes.
const UP_ENTRIES: usize = 256;

/// Causal softmax attention: row `i` at `p_i` sees positions `t ≤ p_i` with `p_i − t < window`;
/// position `t` is read from the chunk's row `j` when the chunk is given and `p_j = t` (the last
/// such row), otherwise from slot `t mod S`; query head `j` uses kv head `j / (h/g)`.
///
/// A block of rows at a time: the scores `q·k` of every query against the entries the block's
/// rows read (their union, in store order) are one f64 product (`gemm::gemm`); each row's softmax (in
/// f64) runs over the entries it reads, the others weigh exactly 0; the weighted sum of values
/// is a second product. Blocks in parallel.
fn attend_core(a: &Attention<'_>, slots: usize, pos: &Tensor, scale: f64, window: Option<usize>) -> Kernel {
    let reads = row_reads(a.n, slots, a.entries - slots, pos, window)?;
    attend_rows(a, &reads, scale)
}

/// The store entries each of `n` rows at `pos` reads from a store of `slots` cache slots and
/// `chunk_rows` chunk rows (see [`reads`]): the same for every head.
fn row_reads(
    n: usize,
    slots: usize,
    chunk_rows: usize,
    pos: &Tensor,
    window: Option<usize>,
) -> Result<Vec<Vec<usize>>, String> {
    let positions = positions(pos, n)?;
    // Position → the chunk row that holds it (the last row at that position wins).
    let chunk: BTreeMap<usize, usize> =
        if chunk_rows > 0 { positions.iter().enumerate().map(|(j, &p)| (p, j)).collect() } else { BTreeMap::new() };
    positions.iter().enumerate().map(|(i, &p)| reads(slots, &chunk, p, i, window)).collect()
}

/// [`attend_core`] with each row's entries (`reads`) given.
fn attend_rows(a: &Attention<'_>, reads: &[Vec<usize>], scale: f64) -> Kernel {
    attend_planned(a, &plan(a.n, a.heads / a.kv_heads, a.entries, reads), scale)
}

/// Rows `i0..i0 + rows` of an attention and what they read: the entries (their union, in store
/// order), and each row's entries as runs `(first, len)` of consecutive places in the union,
/// in reading order.
struct Block {
    i0: usize,
    rows: usize,
    union: Vec<usize>,
    runs: Vec<Vec<(usize, usize)>>,
}

/// The blocks of `n` rows (`group` query heads a kv head, `entries` in the store) whose scores
/// one task holds at a time (`BLOCK_SCORES`), each with what its rows read (`reads`).
fn plan(n: usize, group: usize, entries: usize, reads: &[Vec<usize>]) -> Vec<Block> {
    let block = (BLOCK_SCORES / (group * entries).max(1)).max(1);
    let starts: Vec<usize> = (0..n).step_by(block).collect();
    starts
        .into_par_iter()
        .map(|i0| {
            let reads = &reads[i0..n.min(i0 + block)];
            let (union, place) = rdu_spatial::view::union(entries, reads.iter().flatten().copied());
            let runs = reads
                .iter()
                .map(|read| {
                    let mut runs: Vec<(usize, usize)> = Vec::new();
                    for &e in read {
                        match runs.last_mut() {
                            Some((first, len)) if *first + *len == place[e] => *len += 1,
                            _ => runs.push((place[e], 1)),
                        }
                    }
                    runs
                })
                .collect();
            Block { i0, rows: reads.len(), union, runs }
        })
        .collect()
}

/// [`attend_rows`] with its blocks planned.
fn attend_planned(a: &Attention<'_>, plan: &[Block], scale: f64) -> Kernel {
    let q64 = gemm::widen(a.q);
    let blocks: Vec<Vec<f32>> = plan.par_iter().map(|b| attend_block(a, &q64, b, scale)).collect();
    Ok(vec![out(&[a.n, a.heads, a.dv], blocks.concat())?])
}

/// The store entries row `i` (at position `p`) reads, in position order: slot `t mod S` of the
/// cache, or `S + j` for the chunk's row `j`.
fn reads(
    slots: usize,
    chunk: &BTreeMap<usize, usize>,
    p: usize,
    i: usize,
    window: Option<usize>,
) -> Result<Vec<usize>, String> {
    let first = window.map_or(0, |w| (p + 1).saturating_sub(w));
    let mut cached = (first..=p).filter(|t| !chunk.contains_key(t));
    if let (Some(lo), Some(hi)) = (cached.next(), cached.next_back()) {
        if hi - lo + 1 > slots {
            return Err(format!(
                "row {i} at position {p} reads positions {lo}..={hi} from the cache but it holds {} slots; \
                 use a window of at most {} or a larger cache",
                slots, slots
            ));
        }
    }
    (first..=p)
        .map(|t| match chunk.get(&t) {
            Some(&row) => Ok(slots + row),
            None if slots == 0 => Err(format!("row {i} reads position {t} from a cache with no slots")),
            None => Ok(t % slots),
        })
        .collect()
}

/// The first `cols` values of kv head `kv` of every entry block `b` reads (entry `e`'s at
/// `data[(e·g + kv)·stride..]`), as a `[u × cols]` view: in place when the block reads every
/// entry (its union is then all of them, in order), otherwise gathered into `held`.
fn entries_of<'d>(
    a: &Attention<'_>,
    b: &Block,
    kv: usize,
    data: &'d [f64],
    stride: usize,
    cols: usize,
    held: &'d mut Vec<f64>,
) -> View<'d> {
    let u = b.union.len();
    if u == a.entries {
        return View { offset: kv * stride, row_stride: a.kv_heads * stride, ..View::dense(data, u, cols) };
    }
    *held = gather(u * cols, b.union.iter().map(|&e| &data[(e * a.kv_heads + kv) * stride..][..cols]));
    View::dense(held, u, cols)
}

/// The block `b` of rows of [`attend_core`]: `h × dv` values a row.
fn attend_block(a: &Attention<'_>, q64: &[f64], b: &Block, scale: f64) -> Vec<f32> {
    let (rows, group, i0) = (b.rows, a.heads / a.kv_heads, b.i0);
    let s = &a.store;
    let u = b.union.len();
    let mut out = vec![0f32; rows * a.heads * a.dv];
    for kv in 0..a.kv_heads {
        // The query heads of kv head `kv`, row by row: `rows·group × dk`.
        let q = gather(
            rows * group * a.dk,
            (0..rows).map(|r| &q64[((i0 + r) * a.heads + kv * group) * a.dk..][..group * a.dk]),
        );
        let mut held_keys = Vec::new();
        let keys = entries_of(a, b, kv, &s.keys, s.key_stride, a.dk, &mut held_keys);
        let mut scores = vec![0f64; rows * group * u];
        gemm::gemm(View::dense(&q, rows * group, a.dk), keys.t(), &mut scores);
        // Softmax weights (unnormalised) over the entries each row reads, and their totals: each
        // row of scores becomes its weights in place, 0 at the entries it does not read. A row's
        // entries are taken run by run, in reading order.
        let mut totals = vec![0f64; rows * group];
        let mut exps = Vec::new();
        for (r, runs) in b.runs.iter().enumerate() {
            for h in 0..group {
                let w = &mut scores[(r * group + h) * u..][..u];
                exps.clear();
                for &(first, len) in runs {
                    exps.extend(w[first..first + len].iter().map(|&x| scale * x));
                }
                let sink = a.sinks.map(|sk| f64::from(sk[kv * group + h]));
                let max = exps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let max = sink.map_or(max, |sk| max.max(sk));
                exps.iter_mut().for_each(|x| *x -= max);
                super::mathf64::exp_all(&mut exps);
                w.fill(0.0);
                let mut at = 0;
                for &(first, len) in runs {
                    w[first..first + len].copy_from_slice(&exps[at..at + len]);
                    at += len;
                }
                // A sink weighs in the denominator only: it attends to nothing.
                totals[r * group + h] = exps.iter().sum::<f64>() + sink.map_or(0.0, |sk| (sk - max).exp());
            }
        }
        let weights = scores;
        // acc = weights · values, then divided by each head's total.
        let mut held_values = Vec::new();
        let values = entries_of(a, b, kv, s.values(), s.value_stride, a.dv, &mut held_values);
        let mut acc = vec![0f64; rows * group * a.dv];
        gemm::gemm(View::dense(&weights, rows * group, u), values, &mut acc);
        for (rh, total) in totals.iter().enumerate() {
            let (r, h) = (rh / group, rh % group);
            let dst = &mut out[(r * a.heads + kv * group + h) * a.dv..][..a.dv];
            for (o, v) in dst.iter_mut().zip(&acc[rh * a.dv..][..a.dv]) {
                *o = (v / total) as f32;
            }
        }
    }
    out
}

/// `attend(q [N, h, dk], K [S, g, dk], V [S, g, dv], pos (, k [N, g, dk], v [N, g, dv]) (, sinks [h]))`.
fn attend(ins: &[&Tensor], scale: f64, window: Option<usize>) -> Kernel {
    let (q, k, v, pos, chunk, sinks) = match ins {
        [q, k, v, pos] => (q, k, v, pos, None, None),
        [q, k, v, pos, sk] => (q, k, v, pos, None, Some(f32s(sk)?)),
        [q, k, v, pos, kn, vn] => (q, k, v, pos, Some((f32s(kn)?, f32s(vn)?)), None),
        [q, k, v, pos, kn, vn, sk] => (q, k, v, pos, Some((f32s(kn)?, f32s(vn)?)), Some(f32s(sk)?)),
        _ => return Err("attend takes q, K, V, pos (and the chunk's k, v) (and the sinks)".into()),
    };
    let (slots, kv_heads, dk) = (k.shape()[0], k.shape()[1], k.shape()[2]);
    let dv = v.shape()[2];
    let store = Store {
        keys: Store::widen(f32s(k)?, chunk.map(|c| c.0)),
        key_stride: dk,
        values: Some(Store::widen(f32s(v)?, chunk.map(|c| c.1))),
        value_stride: dv,
    };
    let n = q.shape()[0];
    let entries = slots + if chunk.is_some() { n } else { 0 };
    let heads = q.shape()[1];
    if sinks.is_some_and(|sk| sk.len() != heads) {
        return Err(format!("the sinks hold {} logits for {heads} heads", sinks.map_or(0, <[f32]>::len)));
    }
    let a = Attention { q: f32s(q)?, n, heads, dk, entries, kv_heads, dv, store, sinks };
    attend_core(&a, slots, pos, scale, window)
}

/// `attend_mla(q [N, h, c], C [S, c], pos (, c [N, c]))`: one key per slot (or chunk row) for
/// every head, its first `latent` values the value.
fn attend_mla(ins: &[&Tensor], scale: f64, latent: usize, window: Option<usize>) -> Kernel {
    let (q, c, pos, chunk) = match ins {
        [q, c, pos] => (q, c, pos, None),
        [q, c, pos, cn] => (q, c, pos, Some(f32s(cn)?)),
        _ => return Err("attend_mla takes q, C, pos (and the chunk's c)".into()),
    };
    let (slots, width) = (c.shape()[0], c.shape()[1]);
    let store = Store { keys: Store::widen(f32s(c)?, chunk), key_stride: width, values: None, value_stride: width };
    let n = q.shape()[0];
    let entries = slots + if chunk.is_some() { n } else { 0 };
    let a = Attention {
        q: f32s(q)?,
        n,
        heads: q.shape()[1],
        dk: width,
        entries,
        kv_heads: 1,
        dv: latent,
        store,
        sinks: None,
    };
    attend_core(&a, slots, pos, scale, window)
}

/// `attend_mla_up(q [N, h, dq], C [S, c], Wk [h, dk, L], Wv [h, dv, L], pos (, c [N, c]))`: latent
/// attention through the up-projections (the unabsorbed form). Entry `e` (a cache slot, or a
/// chunk row) holds the latent `x = C[e][..L]` and the rotated rope key `C[e][L..]`; head `j`
/// reads the key `Wk[j]·x ‖ C[e][L..]` and the value `Wv[j]·x`, each product in f64. Sixteen
/// heads' keys and values at a time, then each head (in parallel) an attention of one kv head
/// over every entry.
fn attend_mla_up(ins: &[&Tensor], scale: f64, latent: usize, window: Option<usize>) -> Kernel {
    let (q, c, wk, wv, pos, chunk) = match ins {
        [q, c, wk, wv, pos] => (q, c, wk, wv, pos, None),
        [q, c, wk, wv, pos, cn] => (q, c, wk, wv, pos, Some(f32s(cn)?)),
        _ => return Err("attend_mla_up takes q, C, Wk, Wv, pos (and the chunk's c)".into()),
    };
    let (n, heads, dq) = (q.shape()[0], q.shape()[1], q.shape()[2]);
    let (slots, width) = (c.shape()[0], c.shape()[1]);
    let (dk, dv, rope) = (wk.shape()[1], wv.shape()[1], width - latent);
    let chunk_rows = if chunk.is_some() { n } else { 0 };
    // Every head reads the same entries: worked out once, and only the entries some row reads
    // (not a cache slot whose position the chunk holds) are widened, renumbered in store order.
    let mut reads = row_reads(n, slots, chunk_rows, pos, window)?;
    let (used, place) = rdu_spatial::view::union(slots + chunk_rows, reads.iter().flatten().copied());
    reads.iter_mut().flatten().for_each(|x| *x = place[*x]);
    let (cache, rows) = (f32s(c)?, chunk.unwrap_or_default());
    let mut entries: Vec<f64> = Vec::with_capacity(used.len() * width);
    for &x in &used {
        let entry = if x < slots { &cache[x * width..][..width] } else { &rows[(x - slots) * width..][..width] };
        entries.extend(entry.iter().map(|&v| f64::from(v)));
    }
    let e = used.len();
    let (qv, wk, wv) = (f32s(q)?, gemm::widen(f32s(wk)?), gemm::widen(f32s(wv)?));
    let lat = View { data: &entries, offset: 0, rows: e, cols: latent, row_stride: width, col_stride: 1 };
    // Every entry's latent through the up-projection rows of heads `j0..j0 + g` (`[e, g·rows]`),
    // blocks of entries in parallel.
    let widen = |w: &[f64], rows: usize, j0: usize, g: usize| -> Vec<f64> {
        let b = View { offset: j0 * rows * latent, ..View::dense(w, g * rows, latent) }.t();
        let mut out = vec![0f64; e * g * rows];
        out.par_chunks_mut(UP_ENTRIES * g * rows).enumerate().for_each(|(block, o)| {
            let a = View { offset: block * UP_ENTRIES * width, rows: o.len() / (g * rows), ..lat };
            gemm::gemm(a, b, o);
        });
        out
    };
    // Every head reads the same entries: its blocks of rows planned once for them all.
    let plan = plan(n, 1, e, &reads);
    let mut outs: Vec<Vec<f32>> = Vec::with_capacity(heads);
    for j0 in (0..heads).step_by(UP_HEADS) {
        let g = (heads - j0).min(UP_HEADS);
        let (nopes, values) = (widen(&wk, dk, j0, g), widen(&wv, dv, j0, g));
        let head = |i: usize| -> Result<Vec<f32>, String> {
            let keys = gather(
                e * dq,
                (0..e).flat_map(|x| [&nopes[(x * g + i) * dk..][..dk], &entries[x * width + latent..][..rope]]),
            );
            let values = gather(e * dv, (0..e).map(|x| &values[(x * g + i) * dv..][..dv]));
            let qj = gather(n * dq, (0..n).map(|r| &qv[(r * heads + j0 + i) * dq..][..dq]));
            let store = Store { keys, key_stride: dq, values: Some(values), value_stride: dv };
            let a = Attention { q: &qj, n, heads: 1, dk: dq, entries: e, kv_heads: 1, dv, store, sinks: None };
            Ok(f32s(&attend_planned(&a, &plan, scale)?[0])?.to_vec())
        };
        outs.extend((0..g).into_par_iter().map(head).collect::<Result<Vec<_>, _>>()?);
    }
    let mut data = vec![0f32; n * heads * dv];
    for (j, o) in outs.iter().enumerate() {
        for (r, row) in o.chunks_exact(dv.max(1)).enumerate() {
            data[(r * heads + j) * dv..][..dv].copy_from_slice(row);
        }
    }
    Ok(vec![out(&[n, heads, dv], data)?])
}
