//! The f64 CPU reference of one MoE layer with SwiGLU experts, forward and backward, for R ranks
//! (shared/ANCHORS.md, "The computation").
//!
//! Rank r holds tokens `x_r [T_r, H]` with `topk_ids_r [T_r, k]` (global expert ids, -1 = masked slot) and
//! `topk_w_r [T_r, k]`; expert e lives on rank `e / (E / R)`. Placement does not change the math, so the
//! reference computes every routed row once, grouped by expert, in f64, on all cores:
//!
//! - forward: `z = x W1_e^T = [g | u]`, `h = silu(g) * u`, `y_tj = h W2_e^T`, `out_t = sum_j w_tj y_tj`;
//! - backward from `dy`: `dh = dy_t W2_e`, `dtopk_tj = <dh, h>`, `dg = s dh u sig(g) (1 + g (1 - sig(g)))`,
//!   `du = s dh silu(g)` with `s = w_tj`, `dx_t = sum_j [dg | du] W1_e`, `dW2_e = sum (s dy)^T h`,
//!   `dW1_e = sum [dg | du]^T x`.
//!
//! Inputs are f64 so that finite differences can check the gradients; convert bf16 inputs with
//! [`to_f64`].
use crate::matmul64::{axpy, dot, matmul, Strided};
use half::bf16;

/// Layer dimensions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Hidden size H.
    pub h: usize,
    /// Expert intermediate size I (W1 has 2I rows: gate, then up).
    pub i: usize,
    /// Experts E (over all ranks).
    pub e: usize,
    /// Slots per token (top-k).
    pub k: usize,
}

impl Shape {
    /// Qwen3-30B-A3B's MoE layer.
    pub const QWEN3_30B_A3B: Shape = Shape { h: 2048, i: 768, e: 128, k: 8 };
    /// Qwen3-235B-A22B's MoE layer.
    pub const QWEN3_235B_A22B: Shape = Shape { h: 4096, i: 1536, e: 128, k: 8 };

    /// Forward FLOPs for `rows` routed rows (6 * rows * H * I).
    pub fn forward_flops(&self, rows: usize) -> f64 {
        6.0 * rows as f64 * self.h as f64 * self.i as f64
    }
}

/// One rank's inputs.
#[derive(Clone, Debug)]
pub struct RankInput {
    /// `[T, H]`.
    pub x: Vec<f64>,
    /// `[T, k]`, global expert ids or -1.
    pub topk_ids: Vec<i32>,
    /// `[T, k]`.
    pub topk_w: Vec<f64>,
    /// Gradient of the loss with respect to this rank's output, `[T, H]`.
    pub dy: Vec<f64>,
}

impl RankInput {
    /// Tokens on this rank.
    pub fn tokens(&self, s: &Shape) -> usize {
        self.x.len() / s.h
    }
}

/// All experts' weights.
#[derive(Clone, Debug)]
pub struct Weights {
    /// `[E, 2I, H]`.
    pub w1: Vec<f64>,
    /// `[E, H, I]`.
    pub w2: Vec<f64>,
}

/// One rank's outputs.
#[derive(Clone, Debug, Default)]
pub struct RankOutput {
    /// `[T, H]`.
    pub y: Vec<f64>,
    /// `[T, H]`.
    pub dx: Vec<f64>,
    /// `[T, k]` (0 for masked slots).
    pub dtopk: Vec<f64>,
    /// `[T, k]`: the 2-norm of each dtopk's terms, `sqrt(sum_c (dh_c act_c)^2)`, the scale of its rounding error
    /// (see [`crate::check::close_scaled`]): a dot product of terms of both signs can be much smaller than its
    /// terms, and its error stays the terms' size.
    pub dtopk_scale: Vec<f64>,
}

/// Weight gradients of all experts.
#[derive(Clone, Debug)]
pub struct Grads {
    /// `[E, 2I, H]`.
    pub dw1: Vec<f64>,
    /// `[E, H, I]`.
    pub dw2: Vec<f64>,
}

/// bf16 to f64.
pub fn to_f64(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// Check the inputs' shapes and ids; a message on the first problem.
pub fn validate(s: &Shape, ranks: &[RankInput], w: &Weights) -> Result<(), String> {
    if s.h == 0 || s.i == 0 || s.e == 0 || s.k == 0 || s.k > s.e {
        return Err(format!("shape H {} I {} E {} top-k {}: all positive, top-k <= E", s.h, s.i, s.e, s.k));
    }
    if ranks.is_empty() || s.e % ranks.len() != 0 {
        return Err(format!("{} ranks do not divide {} experts", ranks.len(), s.e));
    }
    if w.w1.len() != s.e * 2 * s.i * s.h || w.w2.len() != s.e * s.h * s.i {
        return Err("weights do not match the shape".into());
    }
    for (r, ri) in ranks.iter().enumerate() {
        let t = ri.x.len() / s.h;
        if ri.x.len() != t * s.h || ri.dy.len() != t * s.h || ri.topk_ids.len() != t * s.k || ri.topk_w.len() != t * s.k
        {
            return Err(format!("rank {r}: x, dy, topk_ids and topk_w disagree on the token count"));
        }
        if let Some(&id) = ri.topk_ids.iter().find(|&&id| id < -1 || id >= s.e as i32) {
            return Err(format!("rank {r}: expert id {id} outside -1..{}", s.e));
        }
    }
    Ok(())
}

/// A routed row: (rank, token, slot j).
type Row = (usize, usize, usize);

struct ExpertOut {
    rows: Vec<Row>,
    y: Vec<f64>,
    dx: Vec<f64>,
    dtopk: Vec<f64>,
    dtopk_scale: Vec<f64>,
    dw1: Vec<f64>,
    dw2: Vec<f64>,
}

/// Where z comes from when it is not x W1^T of the inputs themselves: another x per rank ([T, H] each) and W1
/// ([E, 2I, H]), e.g. the dequantized operands of an FP8 forward, whose backward then runs on the inputs' own
/// x and W1 as the quantizers were the identity (straight-through).
#[derive(Clone, Copy, Debug)]
pub struct ZFrom<'a> {
    /// Per rank, `[T, H]`.
    pub x: &'a [Vec<f64>],
    /// `[E, 2I, H]`.
    pub w1: &'a [f64],
}

/// One expert's rows: each product of the layer as one packed matrix product ([`crate::matmul64`]) over the
/// expert's rows gathered into contiguous operands. `fp8`: dx and / or the weight gradients from blockwise-FP8
/// operands ([`forward_backward_fp8`]). `dw`: where its weight gradients go (written over), else returned.
#[allow(clippy::too_many_arguments)]
fn expert(
    s: &Shape,
    e: usize,
    rows: Vec<Row>,
    ranks: &[RankInput],
    w: &Weights,
    backward: bool,
    zf: Option<ZFrom<'_>>,
    fp8: Fp8Grads,
    dw: Option<(&mut [f64], &mut [f64])>,
) -> ExpertOut {
    let (h, i) = (s.h, s.i);
    let w1 = &w.w1[e * 2 * i * h..(e + 1) * 2 * i * h];
    let w2 = &w.w2[e * h * i..(e + 1) * h * i];
    let n = rows.len();
    let x: Vec<&[f64]> = rows.iter().map(|&(r, t, _)| &ranks[r].x[t * h..(t + 1) * h]).collect();
    // z's operands: the inputs' own, or those of `zf`
    let (zx, zw1): (Vec<&[f64]>, &[f64]) = match zf {
        Some(f) => (
            rows.iter().map(|&(r, t, _)| &f.x[r][t * h..(t + 1) * h]).collect(),
            &f.w1[e * 2 * i * h..(e + 1) * 2 * i * h],
        ),
        None => (x.clone(), w1),
    };
    let sw: Vec<f64> = rows.iter().map(|&(r, t, j)| ranks[r].topk_w[t * s.k + j]).collect();
    // the rows gathered into contiguous [n, H] operands
    let zxs = zx.concat();
    // forward: z = x W1^T, act = silu(g) * u, y = act W2^T (each element one ordered fma chain: crate::matmul64)
    let mut z = vec![0.0; n * 2 * i];
    matmul(n, 2 * i, h, Strided::rows(&zxs, h), Strided::transposed(zw1, h), &mut z, false);
    drop(zxs);
    let mut act = vec![0.0; n * i];
    for row in 0..n {
        for c in 0..i {
            let g = z[row * 2 * i + c];
            act[row * i + c] = g * sigmoid(g) * z[row * 2 * i + i + c];
        }
    }
    let mut y = vec![0.0; n * h];
    matmul(n, h, i, Strided::rows(&act, i), Strided::transposed(w2, i), &mut y, false);
    if !backward {
        let (dtopk, dtopk_scale) = (vec![0.0; n], vec![0.0; n]);
        return ExpertOut { rows, y, dx: vec![0.0; n * h], dtopk, dtopk_scale, dw1: Vec::new(), dw2: Vec::new() };
    }
    // the weight gradients' destination: `dw` (written over), else vectors of their own, returned
    let (mut own1, mut own2) = (Vec::new(), Vec::new());
    let (dw1, dw2): (&mut [f64], &mut [f64]) = match dw {
        Some((a, b)) => (a, b),
        None => {
            own1 = vec![0.0; 2 * i * h];
            own2 = vec![0.0; h * i];
            (&mut own1, &mut own2)
        }
    };
    // backward: dh = dy W2, dW2 = sum (s dy)^T act
    let dy: Vec<&[f64]> = rows.iter().map(|&(r, t, _)| &ranks[r].dy[t * h..(t + 1) * h]).collect();
    let dys = dy.concat();
    let mut dh = vec![0.0; n * i];
    if fp8.dh {
        // dy's rows and W2 as the FP8 dh reads them: 1 x 128 row codes of the bf16 dy, W2's 128 x 128 blocks
        let b16 = |v: &[f64]| v.iter().map(|&x| bf16::from_f64(x)).collect::<Vec<bf16>>();
        let (qd, sd) = crate::fp8::quantize_rows_cpu(&b16(&dys), n, h);
        let dyq = crate::fp8::dequantize_cpu(&qd, &sd, n, h, 1);
        let (q2, s2) = crate::fp8::quantize_blocks_cpu(&b16(w2), h, i);
        let w2d = crate::fp8::dequantize_cpu(&q2, &s2, h, i, 128);
        matmul(n, i, h, Strided::rows(&dyq, h), Strided::rows(&w2d, i), &mut dh, false);
    } else {
        matmul(n, i, h, Strided::rows(&dys, h), Strided::rows(w2, i), &mut dh, false);
    }
    if !fp8.wgrad {
        let sdy: Vec<f64> = dys.iter().enumerate().map(|(q, &v)| sw[q / h] * v).collect();
        matmul(h, i, n, Strided::transposed(&sdy, h), Strided::rows(&act, i), dw2, false);
    }
    let mut dtopk = vec![0.0; n];
    let mut dtopk_scale = vec![0.0; n];
    // dtopk = <dh, act>; SwiGLU backward with s = w_tj
    let mut dz = vec![0.0; n * 2 * i];
    for row in 0..n {
        let (dhr, ar) = (&dh[row * i..(row + 1) * i], &act[row * i..(row + 1) * i]);
        dtopk[row] = dot(dhr, ar);
        dtopk_scale[row] = dhr.iter().zip(ar).map(|(a, b)| (a * b) * (a * b)).sum::<f64>().sqrt();
        for c in 0..i {
            let (g, u) = (z[row * 2 * i + c], z[row * 2 * i + i + c]);
            let sg = sigmoid(g);
            let d = sw[row] * dh[row * i + c];
            dz[row * 2 * i + c] = d * u * sg * (1.0 + g * (1.0 - sg));
            dz[row * 2 * i + i + c] = d * g * sg;
        }
    }
    // dx = dz W1, dW1 = sum dz^T x; with an FP8 dx, dz's rows quantized in 1 x 128 blocks of their bf16 values
    // against the dequantized W1 of `zf` (the FP8 forward's)
    let dzq: Vec<f64>;
    let (dz_dx, w1_dx): (&[f64], &[f64]) = if fp8.dx {
        let dzb: Vec<bf16> = dz.iter().map(|&v| bf16::from_f64(v)).collect();
        let (q, sc) = crate::fp8::quantize_rows_cpu(&dzb, n, 2 * i);
        dzq = crate::fp8::dequantize_cpu(&q, &sc, n, 2 * i, 1);
        (&dzq, zw1)
    } else {
        (&dz, w1)
    };
    let mut dx = vec![0.0; n * h];
    matmul(n, h, 2 * i, Strided::rows(dz_dx, 2 * i), Strided::rows(w1_dx, h), &mut dx, false);
    if !fp8.wgrad {
        let xs = if fp8.dw1_codes { zx.concat() } else { x.concat() };
        matmul(2 * i, h, n, Strided::transposed(&dz, 2 * i), Strided::rows(&xs, h), dw1, false);
    } else {
        // the weight gradients from blockwise-FP8 operands, as `MoeLayer::backward_fp8` with
        // `Fp8Backward::Wgrad` quantizes them: dW2 = (s dy)^T act, dW1 = dz^T x, the first operand in 1 x 128
        // blocks along the rows, the second in 128 x 128 blocks, of the bf16-rounded values
        let b16 = |v: f64| bf16::from_f64(v);
        // dW2 = (s dy)^T h: s dy rounded from bf16 dy (the quantizer scales each gathered row), h from z
        let dyb: Vec<bf16> =
            (0..n * h).map(|q| b16(sw[q / h] as f32 as f64 * b16(dy[q / h][q % h]).to_f64())).collect();
        let shb: Vec<bf16> = act.iter().map(|&v| b16(v)).collect();
        let dzb: Vec<bf16> = dz.iter().map(|&v| b16(v)).collect();
        let xb: Vec<bf16> = x.iter().flat_map(|r| r.iter().map(|&v| b16(v))).collect();
        dw2.copy_from_slice(&wgrad_fp8_model(&dyb, h, &shb, i, n));
        dw1.copy_from_slice(&wgrad_fp8_model(&dzb, 2 * i, &xb, h, n));
    }
    ExpertOut { rows, y, dx, dtopk, dtopk_scale, dw1: own1, dw2: own2 }
}

/// A^T B [ca, cb] over `n` rows of one expert from A [n, ca] quantized in 1 x 128 blocks along the rows and B
/// [n, cb] in 128 x 128 blocks (the FP8 weight gradients' operands), dequantized, in f64.
fn wgrad_fp8_model(a: &[bf16], ca: usize, b: &[bf16], cb: usize, n: usize) -> Vec<f64> {
    let kp = n.div_ceil(128) * 128;
    let offsets = [0u32, n as u32];
    let (qa, sa) = crate::fp8::quantize_cols_grouped_cpu(a, ca, &offsets, kp);
    let (qb, sb) = crate::fp8::quantize_cols_grouped_blocks_cpu(b, cb, &offsets, kp);
    let deq = |q: &[u8], s: &[f32], c: usize, per: usize, of: usize| -> Vec<f64> {
        (0..c * kp)
            .map(|p| {
                let (col, k) = (p / kp, p % kp);
                megamoe_kernels::fp8::e4m3_to_f32(q[p]) as f64 * s[(k / 128) * per + col / of] as f64
            })
            .collect()
    };
    let (da, db) = (deq(&qa, &sa, ca, ca, 1), deq(&qb, &sb, cb, cb / 128, 128));
    let mut out = vec![0.0; ca * cb];
    matmul(ca, cb, kp, Strided::rows(&da, kp), Strided::transposed(&db, kp), &mut out, false);
    out
}

/// Forward and backward of the layer over all ranks: each rank's y, dx, dtopk, and dW1, dW2 of every expert.
/// Uses every core (experts are independent).
pub fn forward_backward(s: &Shape, ranks: &[RankInput], w: &Weights) -> Result<(Vec<RankOutput>, Grads), String> {
    run(s, ranks, w, true, None, Fp8Grads::default())
}

/// As [`forward_backward`] with z = x' W1'^T from the operands of `zf` (y, dtopk, dx and the weight gradients
/// from that z, the inputs' x, W1 and W2): the straight-through backward of a forward that quantized x and W1.
pub fn forward_backward_z_from(
    s: &Shape,
    ranks: &[RankInput],
    w: &Weights,
    zf: ZFrom<'_>,
) -> Result<(Vec<RankOutput>, Grads), String> {
    if zf.x.len() != ranks.len()
        || zf.x.iter().zip(ranks).any(|(x, r)| x.len() != r.x.len())
        || zf.w1.len() != w.w1.len()
    {
        return Err("z's operands do not match the inputs".into());
    }
    run(s, ranks, w, true, Some(zf), Fp8Grads::default())
}

/// Which of the backward's products [`forward_backward_fp8`] takes from blockwise-FP8 operands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fp8Grads {
    /// dx = dz W1 from dz's bf16 values quantized per row in 1 x 128 blocks and the dequantized W1 of the `ZFrom`.
    pub dx: bool,
    /// dW2 = (s dy)^T h and dW1 = dz^T x, s dy and dz quantized in 1 x 128 blocks along each expert's rows, h and x
    /// in 128 x 128 blocks, each of the bf16-rounded values.
    pub wgrad: bool,
    /// dW1 = dz^T x' with x' the `ZFrom`'s x (the values z came from: the FP8 forward's dequantized row codes)
    /// instead of the inputs' x: `MoeLayer::backward_fp8` with `Fp8Dw1X::Codes` (not with `wgrad`).
    pub dw1_codes: bool,
    /// dh = dy W2 from dy's bf16 values quantized per row in 1 x 128 blocks and W2 quantized in 128 x 128 blocks
    /// (dequantized): `MoeLayer::backward_fp8` with `Fp8Dh::Fp8`. dW2 still takes the inputs' dy.
    pub dh: bool,
}

/// As [`forward_backward_z_from`] with the products `fp8` names from blockwise-FP8 operands: the model of
/// `MoeLayer::backward_fp8` with the matching `Fp8Backward`. The rows of an expert in slot order, blocks from its
/// first row.
pub fn forward_backward_fp8(
    s: &Shape,
    ranks: &[RankInput],
    w: &Weights,
    zf: ZFrom<'_>,
    fp8: Fp8Grads,
) -> Result<(Vec<RankOutput>, Grads), String> {
    if zf.x.len() != ranks.len()
        || zf.x.iter().zip(ranks).any(|(x, r)| x.len() != r.x.len())
        || zf.w1.len() != w.w1.len()
    {
        return Err("z's operands do not match the inputs".into());
    }
    if s.h % 128 != 0 || s.i % 128 != 0 {
        return Err("the FP8 products need H and I multiples of 128".into());
    }
    if fp8.dw1_codes && fp8.wgrad {
        return Err("dW1 from x's codes is a bf16 weight gradient: not with FP8 weight gradients".into());
    }
    run(s, ranks, w, true, Some(zf), fp8)
}

/// The forward alone: each rank's y (dx, dtopk and the gradients are left at zero).
pub fn forward(s: &Shape, ranks: &[RankInput], w: &Weights) -> Result<Vec<RankOutput>, String> {
    run(s, ranks, w, false, None, Fp8Grads::default()).map(|(o, _)| o)
}

fn run(
    s: &Shape,
    ranks: &[RankInput],
    w: &Weights,
    backward: bool,
    zf: Option<ZFrom<'_>>,
    fp8: Fp8Grads,
) -> Result<(Vec<RankOutput>, Grads), String> {
    run_chunked(s, ranks, w, backward, zf, fp8, None)
}

/// [`run`] with an expert's rows split into work items of `chunk_rows` (a multiple of 128; tests) instead of the
/// size that spreads the rows over the cores.
#[allow(clippy::too_many_arguments)]
fn run_chunked(
    s: &Shape,
    ranks: &[RankInput],
    w: &Weights,
    backward: bool,
    zf: Option<ZFrom<'_>>,
    fp8: Fp8Grads,
    chunk_rows: Option<usize>,
) -> Result<(Vec<RankOutput>, Grads), String> {
    validate(s, ranks, w)?;
    let mut by_expert: Vec<Vec<Row>> = vec![Vec::new(); s.e];
    for (r, ri) in ranks.iter().enumerate() {
        for (slot, &id) in ri.topk_ids.iter().enumerate() {
            if id >= 0 {
                by_expert[id as usize].push((r, slot / s.k, slot % s.k));
            }
        }
    }
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    // work items: an expert's rows, split into chunks when one expert holds far more than its share, so a
    // skewed routing still uses every core; chunks' weight gradients are summed in chunk order afterwards
    let total: usize = by_expert.iter().map(Vec::len).sum();
    // (whole 128-row blocks, so that a chunk's weight-gradient blocks are its expert's)
    let chunk = chunk_rows.unwrap_or(total.div_ceil(threads).max(128).next_multiple_of(128));
    // (experts without rows have no item: their gradients stay zero)
    let mut items: Vec<(usize, bool, Vec<Row>)> = Vec::new();
    for (e, rows) in by_expert.into_iter().enumerate() {
        items.extend(rows.chunks(chunk).enumerate().map(|(q, c)| (e, q == 0, c.to_vec())));
    }
    // an expert's first chunk writes its weight gradients in place; later chunks' are added in chunk order after
    // (0 + a + b .. as before: the first addition onto zero is exact, but for the sign of a zero)
    let (sz1, sz2) = (2 * s.i * s.h, s.h * s.i);
    let mut grads = Grads { dw1: vec![0.0; s.e * sz1], dw2: vec![0.0; s.e * sz2] };
    type Dest<'a> = std::sync::Mutex<Option<(&'a mut [f64], &'a mut [f64])>>;
    let dest: Vec<Dest<'_>> = grads
        .dw1
        .chunks_mut(sz1.max(1))
        .zip(grads.dw2.chunks_mut(sz2.max(1)))
        .map(|d| std::sync::Mutex::new(Some(d)))
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut done: Vec<(usize, usize, ExpertOut)> = Vec::with_capacity(items.len());
    std::thread::scope(|sc| {
        let hs: Vec<_> = (0..threads.min(items.len()).max(1))
            .map(|_| {
                sc.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((e, first, rows)) = items.get(n) else { break };
                        // the expert's first chunk, and only it, takes its destination
                        let dw = if *first {
                            dest.get(*e).and_then(|d| d.lock().unwrap_or_else(|p| p.into_inner()).take())
                        } else {
                            None
                        };
                        mine.push((n, *e, expert(s, *e, rows.clone(), ranks, w, backward, zf, fp8, dw)));
                    }
                    mine
                })
            })
            .collect();
        for hnd in hs {
            done.extend(hnd.join().expect("reference worker panicked"));
        }
    });
    done.sort_by_key(|(n, _, _)| *n);
    drop(dest);

    let mut outs: Vec<RankOutput> = ranks
        .iter()
        .map(|ri| {
            let t = ri.tokens(s);
            RankOutput {
                y: vec![0.0; t * s.h],
                dx: vec![0.0; t * s.h],
                dtopk: vec![0.0; t * s.k],
                dtopk_scale: vec![0.0; t * s.k],
            }
        })
        .collect();
    // per-slot results, then sums over j in a fixed order
    let mut slot_y: Vec<Vec<Option<(usize, usize)>>> = ranks.iter().map(|ri| vec![None; ri.topk_ids.len()]).collect();
    for (n, e, eo) in &done {
        // a later chunk's weight gradients (the first chunk's are in place already)
        if !eo.dw1.is_empty() {
            axpy(&mut grads.dw1[e * sz1..(e + 1) * sz1], 1.0, &eo.dw1);
            axpy(&mut grads.dw2[e * sz2..(e + 1) * sz2], 1.0, &eo.dw2);
        }
        for (row, &(r, t, j)) in eo.rows.iter().enumerate() {
            slot_y[r][t * s.k + j] = Some((*n, row));
            outs[r].dtopk[t * s.k + j] = eo.dtopk[row];
            outs[r].dtopk_scale[t * s.k + j] = eo.dtopk_scale[row];
        }
    }
    for (r, ri) in ranks.iter().enumerate() {
        for t in 0..ri.tokens(s) {
            for j in 0..s.k {
                if let Some((n, row)) = slot_y[r][t * s.k + j] {
                    let eo = &done[n].2;
                    let wv = ri.topk_w[t * s.k + j];
                    axpy(&mut outs[r].y[t * s.h..(t + 1) * s.h], wv, &eo.y[row * s.h..(row + 1) * s.h]);
                    let dx = &mut outs[r].dx[t * s.h..(t + 1) * s.h];
                    axpy(dx, 1.0, &eo.dx[row * s.h..(row + 1) * s.h]);
                }
            }
        }
    }
    Ok((outs, grads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    const S: Shape = Shape { h: 8, i: 4, e: 4, k: 2 };

    fn inputs(rng: &mut Rng, tokens: &[usize]) -> (Vec<RankInput>, Weights) {
        let ranks = tokens
            .iter()
            .map(|&t| {
                let mut ids: Vec<i32> = (0..t * S.k).map(|_| rng.below(S.e) as i32).collect();
                if t > 0 {
                    ids[0] = -1; // a masked slot on every non-empty rank
                }
                RankInput {
                    x: (0..t * S.h).map(|_| rng.sym(1.0)).collect(),
                    topk_ids: ids,
                    topk_w: (0..t * S.k).map(|_| rng.uniform()).collect(),
                    dy: (0..t * S.h).map(|_| rng.sym(1.0)).collect(),
                }
            })
            .collect();
        let w = Weights {
            w1: (0..S.e * 2 * S.i * S.h).map(|_| rng.sym(0.5)).collect(),
            w2: (0..S.e * S.h * S.i).map(|_| rng.sym(0.5)).collect(),
        };
        (ranks, w)
    }

    /// The scalar whose gradients the backward returns: sum over ranks of <dy, out>.
    fn loss(ranks: &[RankInput], w: &Weights) -> f64 {
        let (o, _) = forward_backward(&S, ranks, w).unwrap();
        o.iter().zip(ranks).map(|(o, r)| o.y.iter().zip(&r.dy).map(|(a, b)| a * b).sum::<f64>()).sum()
    }

    fn fd<F: Fn(&mut Vec<RankInput>, &mut Weights, f64)>(ranks: &[RankInput], w: &Weights, bump: F) -> f64 {
        let eps = 1e-6;
        let (mut rp, mut wp) = (ranks.to_vec(), w.clone());
        bump(&mut rp, &mut wp, eps);
        let (mut rm, mut wm) = (ranks.to_vec(), w.clone());
        bump(&mut rm, &mut wm, -eps);
        (loss(&rp, &wp) - loss(&rm, &wm)) / (2.0 * eps)
    }

    fn near(a: f64, b: f64, what: &str) {
        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{what}: analytic {a} vs finite difference {b}");
    }

    #[test]
    fn gradients_match_finite_differences() {
        let seed = Rng::fresh_seed();
        let mut rng = Rng::new(seed);
        let (ranks, w) = inputs(&mut rng, &[5, 0, 3, 4]);
        let (outs, g) = forward_backward(&S, &ranks, &w).unwrap();
        for r in [0usize, 2, 3] {
            for idx in [0, 7, 13, 21] {
                let a = outs[r].dx[idx];
                near(a, fd(&ranks, &w, |rr, _, d| rr[r].x[idx] += d), &format!("seed {seed} dx[{r}][{idx}]"));
            }
            for slot in 0..ranks[r].topk_ids.len() {
                let a = outs[r].dtopk[slot];
                near(a, fd(&ranks, &w, |rr, _, d| rr[r].topk_w[slot] += d), &format!("seed {seed} dtopk[{r}][{slot}]"));
            }
        }
        for idx in (0..g.dw1.len()).step_by(7) {
            near(g.dw1[idx], fd(&ranks, &w, |_, ww, d| ww.w1[idx] += d), &format!("seed {seed} dW1[{idx}]"));
        }
        for idx in (0..g.dw2.len()).step_by(5) {
            near(g.dw2[idx], fd(&ranks, &w, |_, ww, d| ww.w2[idx] += d), &format!("seed {seed} dW2[{idx}]"));
        }
    }

    #[test]
    fn masked_slots_contribute_nothing() {
        let mut rng = Rng::new(Rng::fresh_seed());
        let (mut ranks, w) = inputs(&mut rng, &[3]);
        ranks[0].topk_ids.iter_mut().for_each(|id| *id = -1);
        let (o, g) = forward_backward(&S, &ranks, &w).unwrap();
        assert!(o[0].y.iter().chain(&o[0].dx).chain(&o[0].dtopk).all(|&v| v == 0.0));
        assert!(g.dw1.iter().chain(&g.dw2).all(|&v| v == 0.0));
    }

    #[test]
    fn placement_does_not_change_the_math() {
        // the same tokens as one rank or split over two ranks give the same outputs
        let mut rng = Rng::new(Rng::fresh_seed());
        let (one, w) = inputs(&mut rng, &[6]);
        let split = |a: usize, b: usize| RankInput {
            x: one[0].x[a * S.h..b * S.h].to_vec(),
            topk_ids: one[0].topk_ids[a * S.k..b * S.k].to_vec(),
            topk_w: one[0].topk_w[a * S.k..b * S.k].to_vec(),
            dy: one[0].dy[a * S.h..b * S.h].to_vec(),
        };
        let two = vec![split(0, 2), split(2, 6)];
        let (o1, g1) = forward_backward(&S, &one, &w).unwrap();
        let (o2, g2) = forward_backward(&S, &two, &w).unwrap();
        let cat = |f: fn(&RankOutput) -> &Vec<f64>| [f(&o2[0]).clone(), f(&o2[1]).clone()].concat();
        assert_eq!(o1[0].y, cat(|o| &o.y));
        assert_eq!(o1[0].dx, cat(|o| &o.dx));
        for (a, b) in g1.dw1.iter().zip(&g2.dw1).chain(g1.dw2.iter().zip(&g2.dw2)) {
            assert!((a - b).abs() <= 1e-12 * (1.0 + a.abs()));
        }
    }

    #[test]
    fn a_hot_expert_split_into_chunks_gives_the_same_gradients() {
        // 300 tokens x 2 slots all on expert 1: with 2 or more cores the rows are split into chunks
        let mut rng = Rng::new(Rng::fresh_seed());
        let (mut ranks, w) = inputs(&mut rng, &[300]);
        for (n, id) in ranks[0].topk_ids.iter_mut().enumerate() {
            *id = if n % 2 == 0 { 1 } else { 2 };
        }
        let (o, g) = forward_backward(&S, &ranks, &w).unwrap();
        // expert 1's dW2 directly: sum over its rows of (s dy)^T act, computed row by row
        let one = |e: i32| {
            let mut r = ranks.clone();
            r[0].topk_ids.iter_mut().for_each(|id| {
                if *id != e {
                    *id = -1
                }
            });
            forward_backward(&S, &r, &w).unwrap()
        };
        let (o1, g1) = one(1);
        let (o2, g2) = one(2);
        let sz = S.h * S.i;
        for q in 0..sz {
            let (a, b) = (g.dw2[sz + q], g1.dw2[sz + q]);
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "dW2 {a} vs {b}");
            let (a, b) = (g.dw2[2 * sz + q], g2.dw2[2 * sz + q]);
            assert!((a - b).abs() <= 1e-12 * (1.0 + b.abs()), "dW2 {a} vs {b}");
        }
        for q in 0..o[0].y.len() {
            let b = o1[0].y[q] + o2[0].y[q];
            assert!((o[0].y[q] - b).abs() <= 1e-12 * (1.0 + b.abs()));
        }
    }

    #[test]
    fn chunks_sum_in_order_whatever_the_threads() {
        // 300 tokens x 2 slots, expert 1 takes 300 rows: in work items of 128 rows, 128 + 128 + 44
        let mut rng = Rng::new(Rng::fresh_seed());
        let (mut ranks, w) = inputs(&mut rng, &[300]);
        for (n, id) in ranks[0].topk_ids.iter_mut().enumerate() {
            *id = if n % 2 == 0 { 1 } else { 3 };
        }
        let go = |r: &[RankInput]| run_chunked(&S, r, &w, true, None, Fp8Grads::default(), Some(128)).unwrap();
        let (_, g) = go(&ranks);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for _ in 0..5 {
            let (_, again) = go(&ranks);
            assert!(bits(&again.dw1) == bits(&g.dw1) && bits(&again.dw2) == bits(&g.dw2), "a repeat run differs");
        }
        // by hand: expert 1's rows (slots 0, 2, 4, .. in order) in chunks of 128 tokens' slots, each chunk alone,
        // summed in chunk order from the first
        let slots: Vec<usize> = (0..600).filter(|n| n % 2 == 0).collect();
        let mut sum: Option<Grads> = None;
        for c in slots.chunks(128) {
            let mut r = ranks.clone();
            r[0].topk_ids.iter_mut().enumerate().for_each(|(n, id)| {
                if !c.contains(&n) {
                    *id = -1
                }
            });
            let (_, gc) = go(&r);
            sum = Some(match sum {
                None => gc,
                Some(mut acc) => {
                    acc.dw1.iter_mut().zip(&gc.dw1).for_each(|(a, b)| *a += b);
                    acc.dw2.iter_mut().zip(&gc.dw2).for_each(|(a, b)| *a += b);
                    acc
                }
            });
        }
        let sum = sum.unwrap();
        let (sz1, sz2) = (2 * S.i * S.h, S.h * S.i);
        let e1 = |v: &[f64], sz: usize| bits(&v[sz..2 * sz]);
        assert!(e1(&g.dw1, sz1) == e1(&sum.dw1, sz1), "dW1 of the split expert: not the chunks summed in order");
        assert!(e1(&g.dw2, sz2) == e1(&sum.dw2, sz2), "dW2 of the split expert: not the chunks summed in order");
    }

    #[test]
    fn bad_inputs_are_rejected() {
        let mut rng = Rng::new(1);
        let (mut ranks, w) = inputs(&mut rng, &[2]);
        ranks[0].topk_ids[1] = S.e as i32;
        assert!(validate(&S, &ranks, &w).unwrap_err().contains("expert id"));
        ranks[0].topk_ids[1] = -2;
        assert!(validate(&S, &ranks, &w).is_err());
        let (ranks, w) = inputs(&mut rng, &[2, 2, 2]);
        assert!(validate(&S, &ranks, &w).unwrap_err().contains("divide"));
        // a zero size is an error, not a division by zero; so is top-k above E
        let (ranks, w) = inputs(&mut rng, &[2]);
        assert!(forward(&Shape { h: 0, ..S }, &ranks, &w).unwrap_err().contains("H 0"));
        assert!(validate(&Shape { k: S.e + 1, ..S }, &ranks, &w).unwrap_err().contains("top-k"));
        // the FP8 model's per-rank x of another length than the rank's tokens: an error, not a worker's panic
        let short = vec![vec![0.0; ranks[0].x.len() - S.h]];
        let zf = ZFrom { x: &short, w1: &w.w1 };
        let fs = Shape { h: 128, i: 128, ..S };
        assert!(forward_backward_fp8(&fs, &ranks, &w, zf, Fp8Grads::default()).unwrap_err().contains("z's operands"));
    }
}
