//! The expert-parallel forward, R = 8 ranks emulated on one GPU, at the Qwen3-30B-A3B shape (H 2048, I 768,
//! E 128, top-8) with 2048 tokens per rank and uniform routing, in its four modes (push or pull dispatch, copy
//! or scatter combine) alternating within each repetition: the whole forward's device-event time and, timed
//! apart, its stages (dispatch kernel, every rank's GEMMs, combine kernel), 3 warm-ups, median of 20; beside a
//! device-to-device memcpy of the push dispatch's bytes measured in the same run. Each mode's whole forward is also
//! timed with the GEMMs on the static tile walk (`gemm::with_gemm_sched(false)`), alternating. Emulated ranks share one GPU,
//! so every "peer" store goes to the same HBM: these figures are the kernels' memory efficiency, not NVLink's.
//!
//! The FP8 forward (`forward_fp8`: the rows dispatched as e4m3 codes and scales, the FP8 GEMMs) alternating with
//! the bf16 push / copy forward, the same figures; checked fully written and bitwise the single-GPU `forward_fp8`
//! on the concatenated tokens. Then the FP8 forward + backward (`backward_fp8`: z from the codes the owners hold,
//! dy in bf16, FP8 dx, dW1 from the dequantized codes) alternating with the bf16 forward + backward, whole-call
//! device-event times, median of 10; the FP8 backward's dx checked fully written and bitwise the single-GPU
//! `backward_fp8` with `Fp8Dw1X::Codes`. Then the bf16 backward of an older forward (one layer serving two model
//! layers: the routing again, the x rows sent again with dy) alternating with the backward of the latest forward,
//! each timed alone, median of 10; both dx fully written and bitwise equal.
//!
//! Correctness in the same run, for every mode: every rank's output poisoned, then checked fully written and
//! bitwise equal to the EP = 1 layer's output on the concatenated tokens; no device timeout recorded.
//!
//! `cargo bench --bench ep` (on the GPU machine: the `ep_bench` binary of `cargo xtask gpu-bundle`, `--bench`).
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::ep::{EpLayer, EpSaved, RankFp8Inputs, RankGrads, RankInputs};
use megamoe::layer::{
    Fp8Backward, Fp8Dh, Fp8Dw1X, Fp8Dy, Fp8Inputs, Fp8Weights, Grads, Inputs, LayerConfig, MoeLayer, Save,
};
use megamoe::reference::Shape;
use megamoe::rng::Rng;
use megamoe::{Error, Gpu, Result};

const WORLD: usize = 8;
const TOKENS: usize = 2048;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Every rank's gradients of the forward + backward step.
struct StepBufs {
    dx: Vec<CudaSlice<bf16>>,
    dtopk: Vec<CudaSlice<f32>>,
    dw1: Vec<CudaSlice<f32>>,
    dw2: Vec<CudaSlice<f32>>,
}

impl StepBufs {
    /// Every rank's gradient buffers as the backward takes them, dx from `dx` if given (another step's) else its own.
    fn grads<'a>(&'a mut self, dx: Option<&'a mut [CudaSlice<bf16>]>) -> Vec<RankGrads<'a>> {
        let StepBufs { dx: own, dtopk, dw1, dw2 } = self;
        dx.unwrap_or(own)
            .iter_mut()
            .zip(dtopk.iter_mut())
            .zip(dw1.iter_mut().zip(dw2.iter_mut()))
            .map(|((dx, dtopk), (dw1, dw2))| RankGrads { dx, dw1, dw2, dtopk })
            .collect()
    }
}

fn run(g: &Arc<Gpu>, rng: &mut Rng) -> Result<()> {
    let s = Shape::QWEN3_30B_A3B;
    let (h, i, e, k) = (s.h, s.i, s.e, s.k);
    let total = WORLD * TOKENS;
    let per = e / WORLD;
    let x = rng.bf16_vec(total * h, 1.0);
    let ids = rng.topk_ids(total, k, e);
    let w: Vec<f32> = (0..total * k).map(|_| rng.uniform() as f32).collect();
    let w1 = rng.bf16_vec(e * 2 * i * h, 1.7 / (h as f64).sqrt());
    let w2 = rng.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let dy = rng.bf16_vec(total * h, 1.0);
    // dW1 from x's codes in the FP8 backward (what the EP FP8 backward computes; the bf16 path ignores it)
    // (the FP8 dx whatever MEGAMOE_FP8_BACKWARD says: FP8 weight gradients do not go with dW1 from the codes)
    let cfg_of = |t: usize| LayerConfig {
        fp8_dw1_x: Fp8Dw1X::Codes,
        fp8_backward: Fp8Backward::Dx,
        ..LayerConfig::bf16(h, i, e, k, t, Save::InputsOnly)
    };

    // EP = 1 on all tokens: the bits every rank's output must equal (bf16, and the FP8 forward's), and the FP8
    // backward's dx
    let (want, want8, want_dx8): (Vec<u16>, Vec<u16>, Vec<u16>) = {
        let (dx, dids, dw, dw1, dw2) = (g.upload(&x)?, g.upload(&ids)?, g.upload(&w)?, g.upload(&w1)?, g.upload(&w2)?);
        let mut out = g.alloc::<bf16>(total * h)?;
        let mut layer = MoeLayer::new(g.clone(), cfg_of(total))?;
        let inp = Inputs { tokens: total, x: &dx, topk_ids: &dids, topk_weights: &dw, w1: &dw1, w2: &dw2 };
        layer.forward(&inp, &mut out)?;
        let bits = g.download(&out)?.iter().map(|v| v.to_bits()).collect();
        let mut fw = Fp8Weights::alloc(&layer)?;
        fw.quantize(g, &dw1, &dw2, &layer)?;
        let mut saved = layer.alloc_saved(total)?;
        let inp8 = Fp8Inputs { tokens: total, x: &dx, topk_ids: &dids, topk_weights: &dw, weights: &fw };
        layer.forward_fp8(&inp8, &mut out, &mut saved)?;
        let bits8 = g.download(&out)?.iter().map(|v| v.to_bits()).collect();
        let ddy = g.upload(&dy)?;
        let mut gx = g.alloc::<bf16>(total * h)?;
        let (mut g1, mut g2) = (g.alloc::<f32>(e * 2 * i * h)?, g.alloc::<f32>(e * h * i)?);
        let mut gt = g.alloc::<f32>(total * k)?;
        let gr = Grads { dx: &mut gx, dw1: &mut g1, dw2: &mut g2, dtopk: &mut gt, accumulate: false };
        layer.backward_fp8(&saved, &ddy, &inp, &fw, gr)?;
        (bits, bits8, g.download(&gx)?.iter().map(|v| v.to_bits()).collect())
    };

    let mut layer = EpLayer::new(g.clone(), cfg_of(TOKENS), WORLD)?;
    let up = |r: usize| -> Result<_> {
        let (t0, t1) = (r * TOKENS, (r + 1) * TOKENS);
        let (a, b) = (r * per * 2 * i * h, (r + 1) * per * 2 * i * h);
        let (c, d) = (r * per * h * i, (r + 1) * per * h * i);
        Ok((
            g.upload(&x[t0 * h..t1 * h])?,
            g.upload(&ids[t0 * k..t1 * k])?,
            g.upload(&w[t0 * k..t1 * k])?,
            g.upload(&w1[a..b])?,
            g.upload(&w2[c..d])?,
        ))
    };
    let bufs = (0..WORLD).map(up).collect::<Result<Vec<_>>>()?;
    let mut w8 = Vec::with_capacity(WORLD);
    for b in &bufs {
        let mut q = layer.alloc_fp8_weights()?;
        layer.quantize_fp8_weights(&mut q, &b.3, &b.4)?;
        w8.push(q);
    }
    let inp8: Vec<RankFp8Inputs> = bufs
        .iter()
        .zip(&w8)
        .map(|(b, q)| RankFp8Inputs { tokens: TOKENS, x: &b.0, topk_ids: &b.1, topk_weights: &b.2, weights: q })
        .collect();
    let mut outs: Vec<CudaSlice<bf16>> = (0..WORLD).map(|_| g.alloc::<bf16>(TOKENS * h)).collect::<Result<_>>()?;
    let inp: Vec<RankInputs> = bufs
        .iter()
        .map(|b| RankInputs { tokens: TOKENS, x: &b.0, topk_ids: &b.1, topk_weights: &b.2, w1: &b.3, w2: &b.4 })
        .collect();
    // the four forward modes alternate within each repetition, so the power state is shared
    const MODES: [(bool, bool); 4] = [(false, false), (true, false), (false, true), (true, true)];
    // and each mode's whole forward with the GEMMs on the static tile walk (the expert-parallel layer's walk
    // before the forty-third session), alternating
    let mut times = vec![[(); 5].map(|_| Vec::new()); MODES.len()];
    for rep in 0..23 {
        for (m, &(pull, scatter)) in MODES.iter().enumerate() {
            layer.set_pull_dispatch(pull);
            layer.set_scatter_combine(scatter);
            let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
            let (_, t) = layer.forward_timed(&inp, &mut o)?;
            let total = g.timed(|| layer.forward(&inp, &mut o).map(|_| ()))?;
            let fixed = megamoe::gemm::with_gemm_sched(false, || g.timed(|| layer.forward(&inp, &mut o).map(|_| ())))?;
            if rep >= 3 {
                for (v, x) in times[m].iter_mut().zip([t.dispatch_ms, t.gemm_ms, t.combine_ms, total, fixed]) {
                    v.push(x);
                }
            }
        }
    }
    // the FP8 forward, alternating with the bf16 push / copy forward
    layer.set_pull_dispatch(false);
    layer.set_scatter_combine(false);
    let mut t8 = [(); 5].map(|_| Vec::new());
    for rep in 0..23 {
        let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
        let (_, t) = layer.forward_fp8_timed(&inp8, &mut o)?;
        let whole = g.timed(|| layer.forward_fp8(&inp8, &mut o).map(|_| ()))?;
        let bf = g.timed(|| layer.forward(&inp, &mut o).map(|_| ()))?;
        if rep >= 3 {
            for (v, x) in t8.iter_mut().zip([t.dispatch_ms, t.gemm_ms, t.combine_ms, whole, bf]) {
                v.push(x);
            }
        }
    }
    for o in outs.iter_mut() {
        g.fill_bytes(o, 0xff)?;
    }
    {
        let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
        layer.forward_fp8(&inp8, &mut o)?;
    }
    layer.check()?;
    for (r, o) in outs.iter().enumerate() {
        let bits: Vec<u16> = g.download(o)?.iter().map(|v| v.to_bits()).collect();
        if bits.contains(&0xffff) {
            return Err(Error::Mismatch(format!("FP8: rank {r} not fully written")));
        }
        if bits[..] != want8[r * TOKENS * h..(r + 1) * TOKENS * h] {
            return Err(Error::Mismatch(format!("FP8: rank {r} differs from the single-GPU FP8 forward")));
        }
    }

    // forward + backward, FP8 against bf16 (push / copy), alternating; weight gradients in f32
    let dys = (0..WORLD).map(|r| g.upload(&dy[r * TOKENS * h..(r + 1) * TOKENS * h])).collect::<Result<Vec<_>>>()?;
    let dyr: Vec<&CudaSlice<bf16>> = dys.iter().collect();
    let mut b = StepBufs {
        dx: (0..WORLD).map(|_| g.alloc(TOKENS * h)).collect::<Result<_>>()?,
        dtopk: (0..WORLD).map(|_| g.alloc(TOKENS * k)).collect::<Result<_>>()?,
        dw1: (0..WORLD).map(|_| g.alloc(per * 2 * i * h)).collect::<Result<_>>()?,
        dw2: (0..WORLD).map(|_| g.alloc(per * h * i)).collect::<Result<_>>()?,
    };
    let w8r: Vec<&Fp8Weights> = w8.iter().collect();
    let step = |layer: &mut EpLayer, outs: &mut [CudaSlice<bf16>], b: &mut StepBufs, fp8: bool| -> Result<()> {
        let mut grads = b.grads(None);
        let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
        if fp8 {
            let saved = layer.forward_fp8(&inp8, &mut o)?;
            layer.backward_fp8(&saved, &dyr, &inp, &w8r, &mut grads, false)
        } else {
            let saved = layer.forward(&inp, &mut o)?;
            layer.backward(&saved, &dyr, &inp, &mut grads, false)
        }
    };
    let mut tstep = [(); 2].map(|_| Vec::new());
    for rep in 0..13 {
        for (m, fp8) in [(0, true), (1, false)] {
            let ms = g.timed(|| step(&mut layer, &mut outs, &mut b, fp8))?;
            if rep >= 3 {
                tstep[m].push(ms);
            }
        }
    }
    for d in b.dx.iter_mut() {
        g.fill_bytes(d, 0xff)?;
    }
    step(&mut layer, &mut outs, &mut b, true)?;
    layer.check()?;
    for (r, d) in b.dx.iter().enumerate() {
        let bits: Vec<u16> = g.download(d)?.iter().map(|v| v.to_bits()).collect();
        if bits.contains(&0xffff) {
            return Err(Error::Mismatch(format!("FP8 backward: rank {r}'s dx not fully written")));
        }
        if bits[..] != want_dx8[r * TOKENS * h..(r + 1) * TOKENS * h] {
            return Err(Error::Mismatch(format!("FP8 backward: rank {r}'s dx differs from the single-GPU one")));
        }
    }

    // the FP8 step with dy sent as codes and dh in FP8 (`Fp8Dy::Codes`, `Fp8Dh::Fp8`: a second layer and its
    // weights with W2's transposed codes), alternating with the first FP8 step; its dx checked written and near the
    // first's (the FP8 dh moves dx by a few 1e-2; the tests check it bitwise its single-GPU twin)
    let step_codes: Result<(f64, f64, f64)> = (|| {
        let cfg_c = LayerConfig { fp8_dy: Fp8Dy::Codes, fp8_dh: Fp8Dh::Fp8, ..cfg_of(TOKENS) };
        let mut lc = EpLayer::new(g.clone(), cfg_c, WORLD)?;
        let mut w8c = Vec::with_capacity(WORLD);
        for bb in &bufs {
            let mut q = lc.alloc_fp8_weights()?;
            lc.quantize_fp8_weights(&mut q, &bb.3, &bb.4)?;
            w8c.push(q);
        }
        let inp8c: Vec<RankFp8Inputs> = bufs
            .iter()
            .zip(&w8c)
            .map(|(bb, q)| RankFp8Inputs { tokens: TOKENS, x: &bb.0, topk_ids: &bb.1, topk_weights: &bb.2, weights: q })
            .collect();
        let w8cr: Vec<&Fp8Weights> = w8c.iter().collect();
        let mut dxc: Vec<CudaSlice<bf16>> = (0..WORLD).map(|_| g.alloc(TOKENS * h)).collect::<Result<_>>()?;
        let mut step_c = |dxc: &mut [CudaSlice<bf16>], outs: &mut [CudaSlice<bf16>], b: &mut StepBufs| -> Result<()> {
            let mut grads = b.grads(Some(dxc));
            let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
            let saved = lc.forward_fp8(&inp8c, &mut o)?;
            lc.backward_fp8(&saved, &dyr, &inp, &w8cr, &mut grads, false)
        };
        let (mut tc, mut t8) = (Vec::new(), Vec::new());
        for rep in 0..13 {
            let c = g.timed(|| step_c(&mut dxc, &mut outs, &mut b))?;
            let f = g.timed(|| step(&mut layer, &mut outs, &mut b, true))?;
            if rep >= 3 {
                tc.push(c);
                t8.push(f);
            }
        }
        // b.dx holds the first FP8 step's dx (it ran last); this step's once more into poisoned buffers
        for d in dxc.iter_mut() {
            g.fill_bytes(d, 0xff)?;
        }
        step_c(&mut dxc, &mut outs, &mut b)?;
        lc.check()?;
        let (mut num, mut den) = (0f64, 0f64);
        for (r, (c, f)) in dxc.iter().zip(&b.dx).enumerate() {
            let (c, f) = (g.download(c)?, g.download(f)?);
            if c.iter().any(|v| v.to_bits() == 0xffff) {
                return Err(Error::Mismatch(format!("FP8 dh step: rank {r}'s dx not fully written")));
            }
            for (x, y) in c.iter().zip(&f) {
                let (x, y) = (x.to_f64(), y.to_f64());
                num += (x - y) * (x - y);
                den += y * y;
            }
        }
        let d = (num / den).sqrt();
        if d.is_nan() || d > 0.1 {
            return Err(Error::Mismatch(format!("FP8 dh step: dx {d:.2e} from the bf16-dh FP8 step's")));
        }
        Ok((median(tc), median(t8), d))
    })();
    // a second layer may not fit beside the first (an 80 GB card): skipped then; any other error fails the bench
    let step_codes = match step_codes {
        Err(e) if !e.to_string().contains("OUT_OF_MEMORY") => return Err(e),
        r => r,
    };

    // one layer serving two model layers: the backward of an older forward (its routing again, its x rows sent
    // again with dy) against the backward of the latest forward, each timed alone, alternating: forward, forward,
    // the first one's backward (it sends its rows again), the same backward again (the workspace now holds that
    // forward's state); both dx fully written and bitwise equal
    let bwd = |layer: &mut EpLayer, b: &mut StepBufs, saved: &EpSaved| -> Result<()> {
        let mut grads = b.grads(None);
        layer.backward(saved, &dyr, &inp, &mut grads, false)
    };
    // the second forward on other tokens and routing (its rows are what a backward that skipped the resend would
    // read), the same weights
    let other = (0..WORLD)
        .map(|_| Ok((g.upload(&rng.bf16_vec(TOKENS * h, 1.0))?, g.upload(&rng.topk_ids(TOKENS, k, e))?)))
        .collect::<Result<Vec<_>>>()?;
    let inp2: Vec<RankInputs> =
        inp.iter().zip(&other).map(|(i, (x, ids))| RankInputs { x, topk_ids: ids, ..*i }).collect();
    let mut tres = [(); 2].map(|_| Vec::new());
    let mut dx_bits = [(); 2].map(|_| Vec::new());
    for rep in 0..14 {
        let first = {
            let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
            let first = layer.forward(&inp, &mut o)?;
            layer.forward(&inp2, &mut o)?;
            first
        };
        for (m, t) in tres.iter_mut().enumerate() {
            if rep == 13 {
                for d in b.dx.iter_mut() {
                    g.fill_bytes(d, 0xff)?;
                }
            }
            let ms = g.timed(|| bwd(&mut layer, &mut b, &first))?;
            if (3..13).contains(&rep) {
                t.push(ms);
            }
            if rep == 13 {
                layer.check()?;
                for d in &b.dx {
                    dx_bits[m].extend(g.download(d)?.iter().map(|v| v.to_bits()));
                }
            }
        }
    }
    if dx_bits[0].contains(&0xffff) || dx_bits[1].contains(&0xffff) {
        return Err(Error::Mismatch("backward of an older forward: dx not fully written".into()));
    }
    if dx_bits[0] != dx_bits[1] {
        return Err(Error::Mismatch("the backward of an older forward differs from the latest forward's".into()));
    }

    for &(pull, scatter) in &MODES {
        layer.set_pull_dispatch(pull);
        layer.set_scatter_combine(scatter);
        for o in outs.iter_mut() {
            g.fill_bytes(o, 0xff)?;
        }
        let mut o: Vec<&mut CudaSlice<bf16>> = outs.iter_mut().collect();
        layer.forward(&inp, &mut o)?;
        layer.check()?;
        for (r, o) in outs.iter().enumerate() {
            let bits: Vec<u16> = g.download(o)?.iter().map(|v| v.to_bits()).collect();
            if bits.contains(&0xffff) {
                return Err(Error::Mismatch(format!("pull {pull} scatter {scatter}: rank {r} not fully written")));
            }
            if bits[..] != want[r * TOKENS * h..(r + 1) * TOKENS * h] {
                return Err(Error::Mismatch(format!("pull {pull} scatter {scatter}: rank {r} differs from EP = 1")));
            }
        }
    }

    // bytes: dispatch moves every routed row (H bf16) plus its weight and (source, slot); combine moves every row
    // back and then reads it once more for the weighted sums, writing T x H per rank
    let rows = ids.iter().filter(|&&id| id >= 0).count();
    let row_bytes = 2 * h;
    let dispatch_bytes = rows * (row_bytes + 12);
    let combine_bytes = rows * row_bytes;
    let src = g.alloc::<u8>(dispatch_bytes)?;
    let mut dst = g.alloc::<u8>(dispatch_bytes)?;
    let mut tm = Vec::new();
    for rep in 0..23 {
        let ms = g.timed(|| {
            g.stream().memcpy_dtod(&src, &mut dst).map_err(|e| Error::Driver { what: "memcpy".into(), source: e })
        })?;
        if rep >= 3 {
            tm.push(ms);
        }
    }
    let m = median(tm);
    let gbs = |bytes: usize, ms: f64| bytes as f64 / (ms * 1e-3) / 1e9;
    for (&(pull, scatter), t) in MODES.iter().zip(times) {
        let [d, gm, c, total, fixed] = t.map(median);
        let mode = format!(
            "{} dispatch, {} combine",
            if pull { "pull" } else { "push" },
            if scatter { "scatter" } else { "copy" }
        );
        // pull: the dispatch kernel moves only weights and (source, slot); GEMM1's producers read the rows.
        // scatter: GEMM2 stores the rows into the sources' slots; the combine kernel only sums them.
        let moved = if pull { rows * 12 } else { dispatch_bytes };
        let back = if scatter { 0 } else { combine_bytes };
        println!(
            "RESULT ep forward, {mode} (EP = {WORLD} emulated, Qwen3-30B-A3B, {TOKENS} tokens/rank, {rows} rows): \
             {:.0} us whole (median of 20, modes alternating) | stages timed apart: dispatch {:.0} us ({:.0} GB/s \
             of {} MB), GEMMs {:.0} us, combine {:.0} us ({} MB returned by the kernel); the GEMMs on the static \
             tile walk {:.0} us whole ({:.3}x)",
            total * 1e3,
            d * 1e3,
            gbs(moved, d),
            moved / 1_000_000,
            gm * 1e3,
            c * 1e3,
            back / 1_000_000,
            fixed * 1e3,
            fixed / total
        );
    }
    {
        let [d, gm, c, whole, bf] = t8.map(median);
        // the dispatch stage includes the tokens' quantization (read 2H, write H + H / 32 a token)
        let moved8 = rows * (h + h / 32 + 12);
        println!(
            "RESULT ep forward FP8, push dispatch of codes, copy combine (EP = {WORLD} emulated, Qwen3-30B-A3B, \
             {TOKENS} tokens/rank, {rows} rows): {:.0} us whole against the bf16 push / copy forward's {:.0} us \
             ({:.3}x, alternating, median of 20) | stages timed apart: quantize + dispatch {:.0} us ({:.0} GB/s of \
             {} MB dispatched), FP8 GEMMs {:.0} us, combine {:.0} us",
            whole * 1e3,
            bf * 1e3,
            bf / whole,
            d * 1e3,
            gbs(moved8, d),
            moved8 / 1_000_000,
            gm * 1e3,
            c * 1e3
        );
    }
    {
        let [s8, s16] = tstep.map(median);
        println!(
            "RESULT ep forward + backward FP8 (EP = {WORLD} emulated, Qwen3-30B-A3B, {TOKENS} tokens/rank, {rows} \
             rows; FP8 dx, dW1 from the codes, f32 weight gradients): {:.0} us against the bf16 step's {:.0} us \
             ({:.3}x, alternating, median of 10)",
            s8 * 1e3,
            s16 * 1e3,
            s16 / s8
        );
    }
    {
        let [older, latest] = tres.map(median);
        let extra = rows * 2 * h;
        println!(
            "RESULT ep backward of an older forward (one layer for two model layers: routing again, x rows sent \
             again with dy; EP = {WORLD} emulated, Qwen3-30B-A3B, {TOKENS} tokens/rank, {rows} rows): {:.0} us \
             against the latest forward's backward {:.0} us ({:.3}x its time, +{:.0} us for {} MB more dispatched; \
             alternating, median of 10; dx bitwise equal, the other forward on other tokens)",
            older * 1e3,
            latest * 1e3,
            older / latest,
            (older - latest) * 1e3,
            extra / 1_000_000
        );
    }
    match step_codes {
        Ok((sc, s8, d)) => println!(
            "RESULT ep forward + backward FP8, dy as codes and dh in FP8 (Fp8Dy::Codes, Fp8Dh::Fp8; EP = {WORLD} \
             emulated, Qwen3-30B-A3B, {TOKENS} tokens/rank, {rows} rows): {:.0} us against the FP8 step with bf16 dy \
             and dh {:.0} us ({:.3}x, alternating, median of 10); dx fully written, rel diff to that step's {d:.2e}",
            sc * 1e3,
            s8 * 1e3,
            s8 / sc
        ),
        Err(e) => println!("RESULT ep forward + backward FP8, dy as codes and dh in FP8: skipped ({e})"),
    }
    println!(
        "RESULT device-to-device memcpy of the push dispatch's bytes: {:.0} us, {:.0} GB/s (read + write each byte \
         once)",
        m * 1e3,
        gbs(dispatch_bytes, m)
    );
    println!(
        "every mode: every rank's output fully written and bitwise equal to EP = 1 (FP8: to the single-GPU FP8 \
         forward; the FP8 backward's dx to the single-GPU one's); no device timeout"
    );
    Ok(())
}

fn main() {
    let g = match megamoe::gpu(0) {
        Ok(g) => g,
        Err(e) => {
            println!("ep benchmark skipped: {e}");
            return;
        }
    };
    let seed = Rng::fresh_seed();
    let mut rng = Rng::new(seed);
    println!("ep benchmark on {} (seed {seed})", g.name());
    if let Err(e) = run(&g, &mut rng) {
        println!("FAILED: {e}");
        std::process::exit(1);
    }
}
