//! Blockwise FP8 against bf16, the same M-grouped GEMMs of the layer's forward in one run: Qwen3-30B-A3B and
//! Qwen3-235B-A22B, T = 16384 tokens, top-8 of E = 128 experts, uniform random routing (M = 131072 rows grouped by
//! expert). For GEMM1 ([M, H] x W1_e^T -> [M, 2I], plain) and GEMM2 ([M, I] x W2_e^T -> [M, H]): megamoe's
//! `grouped_gemm_fp8` (C staged through shared memory), its bf16 `grouped_gemm` on the same values and
//! `grouped_gemm_fp8_regs` (C from registers) and `grouped_gemm_fp8_mc` (2-CTA clusters sharing A), alternating
//! launches (3 warm-ups, median of
//! 20, device events each), and the quantization of A (`quantize_rows`, what a step pays per GEMM input) timed
//! alone with its bytes moved. FP8 rates are also given as a fraction of the datasheet's dense FP8 peak (1979
//! TFLOP/s). Outputs poisoned, then checked fully written, and sampled rows checked against the f64 product of
//! the dequantized operands (<= 1e-2).
//!
//! benches/torch_fp8.py is its partner on the GPU machine: cuBLASLt's FP8 GEMM (torch._scaled_mm) on the dense GEMMs
//! of the same shapes, the ceiling. Last, per shape, the whole layer forward in FP8 (`MoeLayer::forward_fp8`) against the bf16 forward, alternating.
//!
//! `MEGAMOE_BENCH_FP8_WGRAD=1` (or `only`: nothing else) adds the weight gradients in FP8 (`quantize_cols_grouped` + `grouped_wgrad_fp8`)
//! against the bf16 `grouped_wgrad`, under the routing `MEGAMOE_BENCH_ROUTING` asks for (random, balanced or
//! zipf:S; benches/common/routing_env.rs).
//!
//! `cargo bench --bench fp8`; in the GPU bundle `./fp8_bench --bench`. `MEGAMOE_BENCH_ONLY=30B` runs one shape;
//! `MEGAMOE_BENCH_FP8_GEMM=dh` only the M-grouped GEMM lines whose name contains `dh`.
use std::sync::Arc;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::fp8::{self, Fp8Variant, GroupedGemmFp8Args, QuantizeArgs, SwigluFp8Args};
use megamoe::gemm::{self, BLayout, GroupedGemmArgs, SwigluArgs, WgradArgs};
use megamoe::reference::Shape;
use megamoe::rng::Rng;
use megamoe::{check, Gpu};

#[path = "common/routing_env.rs"]
mod routing_env;

const WARM: usize = 3;
const REPS: usize = 20;
const TOKENS: usize = 16384;
const FP8_PEAK: f64 = 1979.0;

type R<T> = Result<T, String>;

fn s<T, E: std::fmt::Display>(r: Result<T, E>) -> R<T> {
    r.map_err(|e| e.to_string())
}

/// One launch of `f` between two events, in microseconds.
fn once(g: &Gpu, f: &mut dyn FnMut() -> R<()>) -> R<f64> {
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let (a, b) = (s(g.context().new_event(flags))?, s(g.context().new_event(flags))?);
    s(a.record(g.stream()))?;
    f()?;
    s(b.record(g.stream()))?;
    s(b.synchronize())?;
    Ok(s(a.elapsed_ms(&b))? as f64 * 1e3)
}

/// The timeline kernel's records (u64 [blocks][8 warps][16 k-blocks][5 clocks]) as medians in cycles: the wait for
/// the stage and half 0's wgmma, half 0's promotion, half 1's issue and wgmma, half 1's promotion, a whole k-block
/// (one reading to the next k-block's), and the second warpgroup's lag behind the first at half 0's wait.
fn timeline_summary(rec: &[u64], blocks: usize, kb_n: usize) -> String {
    let at = |b: usize, w: usize, kb: usize, i: usize| rec[((b * 8 + w) * 16 + kb) * 5 + i];
    let med = |mut v: Vec<i64>| -> i64 {
        if v.is_empty() {
            return -1;
        }
        v.sort_unstable();
        v[v.len() / 2]
    };
    let (mut parts, mut kblock, mut lag) = (vec![Vec::new(); 4], Vec::new(), Vec::new());
    let kb_n = kb_n.min(16);
    for b in 0..blocks {
        for w in 0..8 {
            for kb in 0..kb_n {
                let c: Vec<u64> = (0..5).map(|i| at(b, w, kb, i)).collect();
                if c[0] == 0 || c.windows(2).any(|p| p[1] < p[0]) {
                    continue;
                }
                for (i, v) in parts.iter_mut().enumerate() {
                    v.push((c[i + 1] - c[i]) as i64);
                }
                if kb + 1 < kb_n && at(b, w, kb + 1, 0) > c[0] {
                    kblock.push((at(b, w, kb + 1, 0) - c[0]) as i64);
                }
                if w < 4 && at(b, w + 4, kb, 1) != 0 {
                    lag.push(at(b, w + 4, kb, 1) as i64 - c[1] as i64);
                }
            }
        }
    }
    let n = parts[0].len();
    let [w0, p0, w1, p1] = [0, 1, 2, 3].map(|i| med(std::mem::take(&mut parts[i])));
    format!(
        "median cycles over {n} records: stage wait + half 0's wgmma {w0}, its promotion {p0}, half 1's issue + wgmma \
         {w1}, its promotion {p1}; a k-block {}; warpgroup 1 behind warpgroup 0 at half 0's wait {}",
        med(kblock),
        med(lag)
    )
}

/// Medians of `fs` timed alternating.
fn medians(g: &Gpu, fs: &mut [&mut dyn FnMut() -> R<()>]) -> R<Vec<f64>> {
    s(g.sync())?;
    let mut t = vec![Vec::new(); fs.len()];
    for rep in 0..WARM + REPS {
        for (i, f) in fs.iter_mut().enumerate() {
            let us = once(g, *f)?;
            if rep >= WARM {
                t[i].push(us);
            }
        }
    }
    Ok(t.into_iter()
        .map(|mut v| {
            v.sort_by(|x, y| x.total_cmp(y));
            v[v.len() / 2]
        })
        .collect())
}

fn bench(g: &Arc<Gpu>, name: &str, sh: Shape, rng: &mut Rng) -> R<bool> {
    let (h, i, e, k) = (sh.h, sh.i, sh.e, sh.k);
    let ids = rng.topk_ids(TOKENS, k, e);
    let mut counts = vec![0u32; e];
    for &id in &ids {
        counts[id as usize] += 1;
    }
    let mut offsets = vec![0u32; e + 1];
    for x in 0..e {
        offsets[x + 1] = offsets[x] + counts[x];
    }
    let m = TOKENS * k;
    let doff = s(g.upload(&offsets))?;
    let dtil = s(g.upload(&gemm::tile_offsets(&counts)))?;
    let mut ok = true;
    // (the backward's dh shape too: the FP8 dh's main loop with a plain epilogue, against which the SwiGLU-backward
    // kernel's epilogue is priced)
    for (what, n, kk, wscale) in [
        ("fwd GEMM1 (plain)", 2 * i, h, 1.7 / (h as f64).sqrt()),
        ("fwd GEMM2", h, i, 2.0 / (i as f64).sqrt()),
        ("bwd dh (plain)", i, h, 2.0 / (h as f64).sqrt()),
    ] {
        // MEGAMOE_BENCH_FP8_GEMM=dh (a substring of the line's name): that GEMM alone (a profiler's run)
        if !what.contains(gemm_only().as_str()) {
            continue;
        }
        let a = rng.bf16_vec(m * kk, 1.0);
        let w = rng.bf16_vec(e * n * kk, wscale);
        let (da, dw) = (s(g.upload(&a))?, s(g.upload(&w))?);
        let mut qa = s(g.alloc::<u8>(m * kk))?;
        let mut sa = s(g.alloc::<f32>(m * (kk / 128)))?;
        let mut qb = s(g.alloc::<u8>(e * n * kk))?;
        let mut sb = s(g.alloc::<f32>(e * n / 128 * (kk / 128)))?;
        s(fp8::quantize_blocks(g, QuantizeArgs { x: &dw, q: &mut qb, scales: &mut sb, rows: e * n, cols: kk }))?;
        let mut c8 = s(g.alloc::<bf16>(m * n))?;
        let mut c8r = s(g.alloc::<bf16>(m * n))?;
        s(g.fill_bytes(&mut c8r, 0xff))?;
        let mut c8c = s(g.alloc::<bf16>(m * n))?;
        s(g.fill_bytes(&mut c8c, 0xff))?;
        let mut c16 = s(g.alloc::<bf16>(m * n))?;
        s(g.fill_bytes(&mut c8, 0xff))?;
        s(g.fill_bytes(&mut c16, 0xff))?;
        // A's quantization alone (its own launches), then the GEMMs alternating
        let tq = {
            let mut quant =
                || s(fp8::quantize_rows(g, QuantizeArgs { x: &da, q: &mut qa, scales: &mut sa, rows: m, cols: kk }));
            medians(g, &mut [&mut quant])?[0]
        };
        // the three FP8 kernels on the same operands, each into its own C
        let (qa, sa, qb, sb) = (&qa, &sa, &qb, &sb);
        let prep = |c, variant| {
            let args = GroupedGemmFp8Args {
                a: qa,
                a_scales: sa,
                b: qb,
                b_scales: sb,
                offsets: &doff,
                tile_offsets: &dtil,
                c,
                experts: e,
                n,
                k: kk,
                rows_max: m,
            };
            s(args.prepare_with(g, variant))
        };
        let p8 = prep(&mut c8, Fp8Variant::Staged)?;
        let p8r = prep(&mut c8r, Fp8Variant::Registers)?;
        let p8c = prep(&mut c8c, Fp8Variant::Clusters)?;
        // the probe writes its own C (not the product; not checked)
        let mut c8p = s(g.alloc::<bf16>(m * n))?;
        let p8p = prep(&mut c8p, Fp8Variant::Probe)?;
        // 128 x 256 tiles (N a multiple of 256 at every shape here), bitwise the staged kernel
        let mut c8w = s(g.alloc::<bf16>(m * n))?;
        s(g.fill_bytes(&mut c8w, 0xff))?;
        let p8w = prep(&mut c8w, Fp8Variant::Wide)?;
        // the 128 x 256 main loop without the promotion, two ways (probes: their C is not the product, not checked)
        let mut c8q1 = s(g.alloc::<bf16>(m * n))?;
        let p8q1 = prep(&mut c8q1, Fp8Variant::WideProbe1)?;
        let mut c8q2 = s(g.alloc::<bf16>(m * n))?;
        let p8q2 = prep(&mut c8q2, Fp8Variant::WideProbe2)?;
        // the 128 x 256 kernel recording its consumer warps' clock at five points of 16 k-blocks of each block's
        // second tile (the same C, checked)
        // (and the probes': the no-load and the halves-in-turn ones, their C not the product, not checked)
        let tl_kinds = [Fp8Variant::WideTimeline, Fp8Variant::WideNoLoadTimeline, Fp8Variant::WideProbe1Timeline];
        let mut c8t: Vec<_> = tl_kinds.iter().map(|_| s(g.alloc::<bf16>(m * n))).collect::<R<_>>()?;
        let mut bufs = Vec::new();
        for c in c8t.iter_mut() {
            s(g.fill_bytes(c, 0xff))?;
        }
        let mut pts = Vec::new();
        for (c, v) in c8t.iter_mut().zip(tl_kinds) {
            let pt = prep(c, v)?;
            let mut buf = s(g.alloc::<u64>(pt.blocks() * fp8::PreparedFp8::TIMELINE_PER_BLOCK))?;
            s(g.fill_bytes(&mut buf, 0))?;
            bufs.push((pt.blocks(), buf));
            pts.push(pt);
        }
        let mut pts: Vec<_> =
            pts.into_iter().zip(bufs.iter_mut()).map(|(pt, (_, buf))| s(pt.timeline(g, buf))).collect::<R<_>>()?;
        // the wide kernel and its halves-straight probe with the producer's loads stopped after the ring's first fill
        // (probes: C not the product, not checked)
        let mut c8nl = s(g.alloc::<bf16>(m * n))?;
        let p8nl = prep(&mut c8nl, Fp8Variant::WideNoLoad)?;
        let mut c8q2nl = s(g.alloc::<bf16>(m * n))?;
        let p8q2nl = prep(&mut c8q2nl, Fp8Variant::WideProbe2NoLoad)?;
        let p16 = s(GroupedGemmArgs {
            a: &da,
            b: &dw,
            b_layout: BLayout::NK,
            offsets: &doff,
            tile_offsets: &dtil,
            c: &mut c16,
            experts: e,
            n,
            k: kk,
            rows_max: m,
        }
        .prepare(g))?;
        let t = medians(
            g,
            &mut [
                &mut || s(p8.launch(g)),
                &mut || s(p16.launch(g)),
                &mut || s(p8r.launch(g)),
                &mut || s(p8c.launch(g)),
                &mut || s(p8p.launch(g)),
                &mut || s(p8w.launch(g)),
                &mut || s(p8q1.launch(g)),
                &mut || s(p8q2.launch(g)),
                &mut || s(p8nl.launch(g)),
                &mut || s(p8q2nl.launch(g)),
            ],
        )?;
        for pt in pts.iter_mut() {
            for _ in 0..3 {
                s(pt.launch(g))?;
            }
        }
        s(g.sync())?;
        drop((p8, p16, p8r, p8c, p8p, p8w, p8q1, p8q2, pts, p8nl, p8q2nl));
        // checks: every element written; rows of experts 0, E/2, E-1 against the dequantized f64 product
        let c = s(g.download(&c8))?;
        let written = c.iter().all(|v| !v.is_nan()) && s(g.download(&c16))?.iter().all(|v| !v.is_nan());
        let same = s(g.download(&c8r))?.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits())
            && s(g.download(&c8c))?.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits());
        let same_w = s(g.download(&c8w))?.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits());
        let same_as = |d: &CudaSlice<bf16>| -> R<bool> {
            Ok(s(g.download(d))?.iter().zip(&c).all(|(x, y)| x.to_bits() == y.to_bits()))
        };
        // the wide kernel's timelines on the GPU's clock (launched after the medians, above)
        let mut same_t = true;
        for ((v, (blocks_t, buf)), ct) in tl_kinds.iter().zip(&bufs).zip(&c8t) {
            let rec = s(g.download(buf))?;
            let probe = matches!(v, Fp8Variant::WideNoLoadTimeline | Fp8Variant::WideProbe1Timeline);
            let same = if probe { false } else { same_as(ct)? };
            same_t &= same || probe;
            let tag = format!("{v:?}");
            if let Ok(dir) = std::env::var("MEGAMOE_TIMELINE_DUMP") {
                // the raw records for a reading beyond the medians (u64 little-endian, the kernel's layout)
                let path = format!("{dir}/timeline-{name}-{}-{tag}.bin", what.replace(' ', "_"));
                let bytes: Vec<u8> = rec.iter().flat_map(|v| v.to_le_bytes()).collect();
                std::fs::write(&path, bytes).map_err(|e| format!("{path}: {e}"))?;
            }
            let timeline = timeline_summary(&rec, *blocks_t, kk / 128);
            let c_is = if probe {
                "a probe, its C not the product".to_string()
            } else {
                format!("its C bitwise the staged kernel's: {same}")
            };
            println!("RESULT fp8-timeline {name} {what} {tag}: {timeline}; {c_is}");
        }
        let (hq, hs) = (s(g.download(qa))?, s(g.download(sa))?);
        let (hqb, hsb) = (s(g.download(qb))?, s(g.download(sb))?);
        let (mut got, mut want) = (Vec::new(), Vec::new());
        for x in [0, e / 2, e - 1] {
            let (r0, r1) = (offsets[x] as usize, offsets[x + 1] as usize);
            let brows = fp8::dequantize_cpu(
                &hqb[x * n * kk..(x + 1) * n * kk],
                &hsb[x * n / 128 * (kk / 128)..(x + 1) * n / 128 * (kk / 128)],
                n,
                kk,
                128,
            );
            for r in [r0, r0 + 1, r1 - 2, r1 - 1] {
                let ar =
                    fp8::dequantize_cpu(&hq[r * kk..(r + 1) * kk], &hs[r * (kk / 128)..(r + 1) * (kk / 128)], 1, kk, 1);
                for col in 0..n {
                    want.push(ar.iter().zip(&brows[col * kk..(col + 1) * kk]).map(|(p, q)| p * q).sum::<f64>());
                    got.push(c[r * n + col].to_f64());
                }
            }
        }
        // GEMM1 with the SwiGLU epilogue (h only), FP8 against bf16 on the same values
        if n == 2 * i {
            let mut h8 = s(g.alloc::<bf16>(m * i))?;
            let mut h16 = s(g.alloc::<bf16>(m * i))?;
            s(g.fill_bytes(&mut h8, 0xff))?;
            s(g.fill_bytes(&mut h16, 0xff))?;
            let p8 = s(SwigluFp8Args {
                a: qa,
                a_scales: sa,
                w1: qb,
                w1_scales: sb,
                offsets: &doff,
                tile_offsets: &dtil,
                h: &mut h8,
                experts: e,
                i,
                k: kk,
                rows_max: m,
            }
            .prepare(g))?;
            let p16 = s(SwigluArgs {
                a: &da,
                w1: &dw,
                offsets: &doff,
                tile_offsets: &dtil,
                h: &mut h16,
                z: None,
                experts: e,
                i,
                k: kk,
                rows_max: m,
            }
            .prepare(g))?;
            let t = medians(g, &mut [&mut || s(p8.launch(g)), &mut || s(p16.launch(g))])?;
            drop((p8, p16));
            let (a8, a16) = (s(g.download(&h8))?, s(g.download(&h16))?);
            let written = a8.iter().all(|v| !v.is_nan()) && a16.iter().all(|v| !v.is_nan());
            let (x8, x16): (Vec<f64>, Vec<f64>) = a8.iter().zip(&a16).map(|(p, q)| (p.to_f64(), q.to_f64())).unzip();
            let d = check::rel_err(&x8, &x16);
            ok &= written;
            let flop = 2.0 * m as f64 * n as f64 * kk as f64;
            println!(
                "RESULT fp8 {name} fwd GEMM1 + SwiGLU (h) M={m} N={n} K={kk}: FP8 {:.0} us {:.0} TFLOP/s | bf16 {:.0} us {:.0} \
                 TFLOP/s | FP8 / bf16 speed {:.2}x | FP8 h against bf16 h: rel diff {d:.1e} (the format's error), all \
                 written: {written}{}",
                t[0],
                flop / t[0] * 1e-6,
                t[1],
                flop / t[1] * 1e-6,
                t[1] / t[0],
                if written { "" } else { " FAILED" }
            );
        }
        let err = check::rel_err(&got, &want);
        let good = written && same && same_w && same_t && err <= 1e-2;
        ok &= good;
        let flop = 2.0 * m as f64 * n as f64 * kk as f64;
        let tf = |us: f64| flop / us * 1e-6;
        let qbytes = (m * kk * 2 + m * kk + m * (kk / 128) * 4) as f64;
        println!(
            "RESULT fp8 {name} {what} M={m} N={n} K={kk}: FP8 {:.0} us {:.0} TFLOP/s ({:.2} of the 1979 peak) | bf16 {:.0} us \
             {:.0} TFLOP/s | FP8 / bf16 speed {:.2}x | quantize A {:.0} us ({:.0} GB/s); FP8 + quantize {:.2}x bf16 | rel \
             err {err:.1e} against the dequantized f64 product, all written: {written} | FP8 with C from registers {:.0} us \
             ({:.2}x the staged), in 2-CTA clusters sharing A {:.0} us ({:.2}x the staged), both bitwise the staged: \
             {same} | probe without the promotion {:.0} us {:.0} TFLOP/s | 128 x 256 tiles {:.0} us {:.0} TFLOP/s \
             ({:.3}x the staged), bitwise the staged: {same_w} | 128 x 256 probes without the promotion: halves in \
             turn {:.0} us {:.0} TFLOP/s, halves straight {:.0} us {:.0} TFLOP/s | no-load probes (the producer's \
             loads stopped after the ring's first fill): the wide kernel {:.0} us ({:.3}x the wide), halves straight \
             {:.0} us ({:.3}x halves straight){}",
            t[0],
            tf(t[0]),
            tf(t[0]) / FP8_PEAK,
            t[1],
            tf(t[1]),
            t[1] / t[0],
            tq,
            qbytes / tq * 1e-3,
            t[1] / (t[0] + tq),
            t[2],
            t[0] / t[2],
            t[3],
            t[0] / t[3],
            t[4],
            tf(t[4]),
            t[5],
            tf(t[5]),
            t[0] / t[5],
            t[6],
            tf(t[6]),
            t[7],
            tf(t[7]),
            t[8],
            t[5] / t[8],
            t[9],
            t[7] / t[9],
            if good { "" } else { " FAILED" }
        );
    }
    Ok(ok)
}

/// The whole layer forward in FP8 (`MoeLayer::forward_fp8`: quantize the tokens, gather codes, GEMM1 + SwiGLU,
/// quantize h, GEMM2, combine; weights quantized beforehand) against the bf16 forward (the default configuration),
/// alternating, on the same inputs.
fn bench_layer(g: &Arc<Gpu>, name: &str, sh: Shape, rng: &mut Rng) -> R<bool> {
    use megamoe::layer::{Fp8Inputs, Fp8Weights, Inputs, LayerConfig, MoeLayer, Save};
    let (h, i, e, k) = (sh.h, sh.i, sh.e, sh.k);
    let t = TOKENS;
    let x = s(g.upload(&rng.bf16_vec(t * h, 1.0)))?;
    let ids = s(g.upload(&rng.topk_ids(t, k, e)))?;
    let w: Vec<f32> = (0..t * k).map(|_| rng.uniform() as f32).collect();
    let w = s(g.upload(&w))?;
    let w1 = s(g.upload(&rng.bf16_vec(e * 2 * i * h, 1.7 / (h as f64).sqrt())))?;
    let w2 = s(g.upload(&rng.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt())))?;
    let mut layer = s(MoeLayer::new(g.clone(), LayerConfig::bf16(h, i, e, k, t, Save::InputsOnly)))?;
    let mut fw = s(Fp8Weights::alloc(&layer))?;
    s(fw.quantize(g, &w1, &w2, &layer))?;
    let mut saved = s(layer.alloc_saved(t))?;
    let mut saved8 = s(layer.alloc_saved(t))?;
    let mut y16 = s(g.alloc::<bf16>(t * h))?;
    let mut y8 = s(g.alloc::<bf16>(t * h))?;
    s(g.fill_bytes(&mut y8, 0xff))?;
    let inp = Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let inp8 = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, weights: &fw };
    // one call each outside the timing (tensor maps, the FP8 buffers)
    s(layer.forward_into(&inp, &mut y16, &mut saved))?;
    s(layer.forward_fp8(&inp8, &mut y8, &mut saved8))?;
    let layer = std::cell::RefCell::new(layer);
    // h quantized in GEMM1's epilogue (the default) and by a pass (MEGAMOE_FP8_HQ=pass, read per call)
    let mut y8p = s(g.alloc::<bf16>(t * h))?;
    let mut saved8p = s(layer.borrow().alloc_saved(t))?;
    let pass = |layer: &mut MoeLayer, y: &mut CudaSlice<bf16>, sv: &mut megamoe::layer::Saved| {
        std::env::set_var("MEGAMOE_FP8_HQ", "pass");
        let r = layer.forward_fp8(&inp8, y, sv);
        std::env::remove_var("MEGAMOE_FP8_HQ");
        s(r)
    };
    pass(&mut layer.borrow_mut(), &mut y8p, &mut saved8p)?;
    let t_ = medians(
        g,
        &mut [
            &mut || s(layer.borrow_mut().forward_fp8(&inp8, &mut y8, &mut saved8)),
            &mut || s(layer.borrow_mut().forward_into(&inp, &mut y16, &mut saved)),
            &mut || pass(&mut layer.borrow_mut(), &mut y8p, &mut saved8p),
        ],
    )?;
    let same = s(g.download(&y8p))?.iter().zip(s(g.download(&y8))?.iter()).all(|(p, q)| p.to_bits() == q.to_bits());
    let (a8, a16) = (s(g.download(&y8))?, s(g.download(&y16))?);
    let written = a8.iter().all(|v| !v.is_nan());
    let (p8, p16): (Vec<f64>, Vec<f64>) = a8.iter().zip(&a16).map(|(p, q)| (p.to_f64(), q.to_f64())).unzip();
    let d = check::rel_err(&p8, &p16);
    let good = written && same && d < 0.1;
    let flop = 6.0 * (t * k) as f64 * h as f64 * i as f64;
    println!(
        "RESULT fp8 {name} layer forward T={t}: FP8 {:.0} us {:.0} TFLOP/s | bf16 {:.0} us {:.0} TFLOP/s | FP8 / bf16 \
         speed {:.2}x | FP8 against bf16 output: rel diff {d:.1e} (the format's error), all written: {written} | FP8 \
         with h quantized by a pass {:.0} us ({:.2}x the fused), bitwise the fused: {same}{}",
        t_[0],
        flop / t_[0] * 1e-6,
        t_[1],
        flop / t_[1] * 1e-6,
        t_[1] / t_[0],
        t_[2],
        t_[0] / t_[2],
        if good { "" } else { " FAILED" }
    );
    Ok(good)
}

/// The weight gradients in FP8: both activations quantized column-wise per expert (`quantize_cols_grouped`, 1 x 128
/// blocks along each expert's rows, transposed), then `grouped_wgrad_fp8`, against megamoe's bf16 `grouped_wgrad` on
/// the same values, bf16 output, alternating; the two quantizations timed alone (what a step pays unless they are
/// fused where the activations are produced). Outputs poisoned and checked fully written; FP8 against bf16: the
/// format's error (< 0.1). Beside them the probe (`prepare_probe`: the FP8 main loop without the promotion), the
/// data path's ceiling.
fn bench_wgrad(g: &Arc<Gpu>, name: &str, sh: Shape, rng: &mut Rng) -> R<bool> {
    let (h, i, e, k) = (sh.h, sh.i, sh.e, sh.k);
    let ids = routing_env::ids(rng, TOKENS, k, e);
    let mut counts = vec![0u32; e];
    for &id in &ids {
        counts[id as usize] += 1;
    }
    let mut offsets = vec![0u32; e + 1];
    for x in 0..e {
        offsets[x + 1] = offsets[x] + counts[x];
    }
    let rows = TOKENS * k;
    let kp = fp8::cols_grouped_kp(rows, e);
    let doff = s(g.upload(&offsets))?;
    let dtil = s(g.upload(&gemm::tile_offsets(&counts)))?;
    let mut ok = true;
    for (what, mm, nn) in [("bwd dW2 = (s dy)^T h", h, i), ("bwd dW1 = dz^T x", 2 * i, h)] {
        let (da, db) = (s(g.upload(&rng.bf16_vec(rows * mm, 1.0)))?, s(g.upload(&rng.bf16_vec(rows * nn, 1.0)))?);
        let (mut qa, mut sa) = (s(g.alloc::<u8>(mm * kp))?, s(g.alloc::<f32>(kp / 128 * mm))?);
        let (mut qb, mut sb) = (s(g.alloc::<u8>(nn * kp))?, s(g.alloc::<f32>(kp / 128 * nn))?);
        // B (the activations) also with one scale per 128 x 128 block, for `grouped_wgrad_fp8b_*`
        let (mut qbb, mut sbb) = (s(g.alloc::<u8>(nn * kp))?, s(g.alloc::<f32>(kp / 128 * (nn / 128)))?);
        let tq = {
            let quant = |x: &CudaSlice<bf16>, q: &mut CudaSlice<u8>, sc: &mut CudaSlice<f32>, cols, block| {
                let args = fp8::QuantizeColsArgs {
                    x,
                    offsets: &doff,
                    tile_offsets: &dtil,
                    q,
                    scales: sc,
                    experts: e,
                    rows_max: rows,
                    cols,
                    block_scales: block,
                    gather: None,
                    rows_out: None,
                };
                s(fp8::quantize_cols_grouped(g, args))
            };
            medians(
                g,
                &mut [
                    &mut || quant(&da, &mut qa, &mut sa, mm, false),
                    &mut || quant(&db, &mut qb, &mut sb, nn, false),
                    &mut || quant(&db, &mut qbb, &mut sbb, nn, true),
                ],
            )?
        };
        let (mut c8, mut c16) = (s(g.alloc::<bf16>(e * mm * nn))?, s(g.alloc::<bf16>(e * mm * nn))?);
        let mut c8b = s(g.alloc::<bf16>(e * mm * nn))?;
        s(g.fill_bytes(&mut c8, 0xff))?;
        s(g.fill_bytes(&mut c16, 0xff))?;
        s(g.fill_bytes(&mut c8b, 0xff))?;
        // the probe (no promotion) writes its own C (not the product; not checked)
        let mut cp = s(g.alloc::<bf16>(e * mm * nn))?;
        let (p8, pp, p8b) = {
            let args = |c, b_t, b_scales, b_block_scales| fp8::WgradFp8Args {
                a_t: &qa,
                a_scales: &sa,
                b_t,
                b_scales,
                tile_offsets: &dtil,
                c,
                experts: e,
                m: mm,
                n: nn,
                kp,
                accumulate: false,
                b_block_scales,
            };
            (
                s(args(&mut c8, &qb, &sb, false).prepare(g))?,
                s(args(&mut cp, &qb, &sb, false).prepare_probe(g))?,
                s(args(&mut c8b, &qbb, &sbb, true).prepare(g))?,
            )
        };
        let p16 = s(WgradArgs {
            a: &da,
            b: &db,
            offsets: &doff,
            c: &mut c16,
            experts: e,
            m: mm,
            n: nn,
            rows_max: rows,
            accumulate: false,
        }
        .prepare(g))?;
        let t = medians(
            g,
            &mut [&mut || s(p8.launch(g)), &mut || s(p16.launch(g)), &mut || s(pp.launch(g)), &mut || s(p8b.launch(g))],
        )?;
        drop((p8, p16, pp, p8b));
        let (o8, o16, o8b) = (s(g.download(&c8))?, s(g.download(&c16))?, s(g.download(&c8b))?);
        let written = [&o8, &o16, &o8b].iter().all(|o| o.iter().all(|v| !v.is_nan()));
        let f = |o: &[bf16]| o.iter().map(|v| v.to_f64()).collect::<Vec<f64>>();
        let (p8v, p16v, p8bv) = (f(&o8), f(&o16), f(&o8b));
        let (d, db_) = (check::rel_err(&p8v, &p16v), check::rel_err(&p8bv, &p16v));
        let good = written && d < 0.1 && db_ < 0.1;
        ok &= good;
        let flop = 2.0 * rows as f64 * mm as f64 * nn as f64;
        let tf = |us: f64| flop / us * 1e-6;
        println!(
            "RESULT fp8 {name} {what} (K-grouped) M={mm} N={nn} K={rows}: FP8 {:.0} us {:.0} TFLOP/s | bf16 {:.0} us {:.0} \
             TFLOP/s | FP8 / bf16 speed {:.2}x | quantize both {:.0} us; FP8 + quantize {:.2}x bf16 | FP8 against bf16 \
             output: rel diff {d:.1e} (the format's error), all written: {written} | probe without the promotion {:.0} us \
             {:.0} TFLOP/s | B in 128 x 128 blocks {:.0} us {:.0} TFLOP/s ({:.2}x bf16), against bf16 {db_:.1e}, its \
             quantization of B {:.0} us{}",
            t[0],
            tf(t[0]),
            t[1],
            tf(t[1]),
            t[1] / t[0],
            tq[0] + tq[1],
            t[1] / (t[0] + tq[0] + tq[1]),
            t[2],
            tf(t[2]),
            t[3],
            tf(t[3]),
            t[1] / t[3],
            tq[2],
            if good { "" } else { " FAILED" }
        );
    }
    Ok(ok)
}

/// `MEGAMOE_BENCH_FP8_GEMM`: run only the M-grouped GEMM lines whose name contains it (and not the layer lines).
fn gemm_only() -> String {
    std::env::var("MEGAMOE_BENCH_FP8_GEMM").unwrap_or_default()
}

fn main() {
    let g = match megamoe::gpu(0) {
        Ok(g) => g,
        Err(e) => {
            println!("FP8 benchmark skipped: {e}");
            return;
        }
    };
    let seed = Rng::fresh_seed();
    let mut rng = Rng::new(seed);
    println!(
        "FP8 benchmark on {} (seed {seed}): T={TOKENS}, top-8 of 128 experts, {WARM} warm-ups, median of {REPS}",
        g.name()
    );
    let only = std::env::var("MEGAMOE_BENCH_ONLY").unwrap_or_default();
    let mut ok = true;
    for (name, sh) in [("Qwen3-30B-A3B", Shape::QWEN3_30B_A3B), ("Qwen3-235B-A22B", Shape::QWEN3_235B_A22B)] {
        if !name.contains(only.as_str()) {
            continue;
        }
        // MEGAMOE_BENCH_FP8_WGRAD=1: the FP8 weight gradients as well
        // MEGAMOE_BENCH_FP8_WGRAD=only: the weight gradients alone
        let wg = std::env::var("MEGAMOE_BENCH_FP8_WGRAD").unwrap_or_default();
        let (wgrad, only_wgrad) = (wg == "1" || wg == "only", wg == "only");
        let runs = [
            (!only_wgrad).then(|| bench(&g, name, sh, &mut rng)),
            (!only_wgrad && gemm_only().is_empty()).then(|| bench_layer(&g, name, sh, &mut rng)),
            wgrad.then(|| bench_wgrad(&g, name, sh, &mut rng)),
        ];
        for r in runs.into_iter().flatten() {
            match r {
                Ok(good) => ok &= good,
                Err(e) => {
                    println!("FAILED {name}: {e}");
                    ok = false;
                }
            }
        }
    }
    if !ok {
        println!("FAILED: a wrong or incomplete FP8 result (lines marked FAILED)");
        std::process::exit(1);
    }
}
