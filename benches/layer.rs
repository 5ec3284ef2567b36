//! Layer benchmark on the GPU: megamoe's forward, and forward + backward in both save modes, at the
//! Qwen3-30B-A3B and Qwen3-235B-A22B shapes, T = 16384 tokens, top-8 of 128 experts, all on one GPU. Warm-up 3,
//! then 20 timed runs bracketed by device events; the median is reported. Correctness in the same run: y, dx
//! and dtopk of the first 64 tokens against the f64 reference, and the output poisoned before the timed runs
//! and checked fully written after them. Then the routing layout alone (its three launches, each timed) at
//! T = 16384, top-8 of 128 and of 4096 experts.
//!
//! Last, the z-saved forward + backward (bf16 weight gradients) captured once in a CUDA graph and replayed,
//! alternating with the same step launched eagerly; the graph's dx checked bitwise against the eager step's. Then
//! the forward in blockwise FP8 (`MoeLayer::forward_fp8`, weights quantized beforehand) alternating with the bf16
//! forward (its output fully written and within 0.1 of the bf16 output: the format's error is ~6e-2), the FP8
//! steps with z recomputed per `Fp8Backward` mode, and the FP8 step with z saved (FP8 dx) alternating with the bf16
//! step with z saved (its dx fully written and within 0.1 of the bf16 step's).
//!
//! `MEGAMOE_BENCH_SHAPE=H,I,E,k[,T]` runs that shape instead of the two (T tokens, default 16384; e.g.
//! 1536,256,128,8,24576 for SonicMoE's 7B n=256).
//! `MEGAMOE_BENCH_ROUTING=zipf:S` (or `balanced`) routes the tokens with skewed (or equal) expert loads instead of
//! uniformly at random (benches/common/routing_env.rs; benches/torch_layer.py draws the same distribution).
//! `MEGAMOE_BENCH_PHASES=1`: then one more forward + backward of each save mode with device events around every
//! launch (`Gpu::profile_start`), printed as `PHASE` lines: each kernel's time in place and the idle time before it.
//! Where the GPU waits for the host (a forward's first launches after an idle GPU), an event pair also times the
//! host's launch call: the routing read 37-48 us there against 12.7 us back to back (docs/RESULTS.md 2026-12-06c);
//! benches/trace_forward.py reads each kernel on the GPU's own clock.
//! `MEGAMOE_SOAK=S`: S seconds of z-saved forward + backward steps back to back per weight-gradient type (`SOAK`
//! lines with wall-clock bounds, for power and clock samples taken beside the run). `MEGAMOE_BENCH_HEAT=S` (default
//! 3): S seconds of untimed forward + backward steps before the first timing, so every figure is taken in the power
//! state a training loop runs in (benches/torch_layer.py heats alike).
//!
//! `cargo bench --bench layer` (on the GPU machine: the binary from `cargo xtask gpu-bundle`, with `--bench`).
//! `benches/h200.sh` runs it beside the PyTorch layers (`benches/torch_layer.py`) in one call.
use std::sync::Arc;

use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::layer::{
    Forward, Fp8Backward, Fp8Dh, Fp8Inputs, Fp8Weights, Gather, Grads, Inputs, LayerConfig, MoeLayer, Save, Saved,
};
use megamoe::reference::{self, RankInput, Shape, Weights};
use megamoe::rng::Rng;
use megamoe::{check, gemm, Gpu};

#[path = "common/routing_env.rs"]
mod routing_env;
#[path = "common/soak.rs"]
mod soak;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Timed repetitions after the 3 warm-ups: `MEGAMOE_BENCH_REPS` (default 20; 1 for a profiler run, where the
/// kernels of one warm iteration are launches 4 * 7 + 17 .. of each shape's forward + backward pass).
fn timed_reps() -> usize {
    std::env::var("MEGAMOE_BENCH_REPS").ok().and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(20)
}

fn bench_shape(g: &Arc<Gpu>, name: &str, s: Shape, tokens: usize, rng: &mut Rng) -> megamoe::Result<()> {
    let (h, i, e, k) = (s.h, s.i, s.e, s.k);
    let x = rng.bf16_vec(tokens * h, 1.0);
    let ids = routing_env::ids(rng, tokens, k, e);
    {
        let mut counts = vec![0usize; e];
        ids.iter().for_each(|&id| counts[id as usize] += 1);
        let (max, min) = (counts.iter().max().unwrap(), counts.iter().min().unwrap());
        println!(
            "{name}: {:?} routing, rows per expert: mean {}, busiest {max}, idlest {min}",
            routing_env::kind(),
            tokens * k / e
        );
    }
    let w: Vec<f32> = (0..tokens * k).map(|_| rng.uniform() as f32).collect();
    let w1 = rng.bf16_vec(e * 2 * i * h, 1.7 / (h as f64).sqrt());
    let w2 = rng.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let (dx, dids, dw, dw1, dw2) = (g.upload(&x)?, g.upload(&ids)?, g.upload(&w)?, g.upload(&w1)?, g.upload(&w2)?);
    let mut out = g.alloc::<bf16>(tokens * h)?;
    let dy_h = rng.bf16_vec(tokens * h, 1.0);
    let ddy = g.upload(&dy_h)?;
    let mut gdx = g.alloc::<bf16>(tokens * h)?;
    let mut gw1 = g.alloc::<f32>(e * 2 * i * h)?;
    let mut gw2 = g.alloc::<f32>(e * h * i)?;
    // bf16 weight gradients (the weights' type, as PyTorch's autograd gives them)
    let mut gw1b = g.alloc::<bf16>(e * 2 * i * h)?;
    let mut gw2b = g.alloc::<bf16>(e * h * i)?;
    let mut gtk = g.alloc::<f32>(tokens * k)?;
    // the straight-through FP8 backward for the FP8 step the modes are timed against (the default runs dx in FP8)
    let cfg =
        LayerConfig { fp8_backward: Fp8Backward::Straight, ..LayerConfig::bf16(h, i, e, k, tokens, Save::InputsOnly) };
    let layer = MoeLayer::new(g.clone(), cfg)?;
    let layer_z = MoeLayer::new(g.clone(), LayerConfig { save: Save::WithZ, ..cfg })?;
    // the other place to gather x: GEMM1's producer, or the gather pass when that is the default
    let other = match cfg.gather {
        Gather::Pass | Gather::Overlapped => Gather::InProducer,
        Gather::InProducer => Gather::Pass,
    };
    let layer_g = MoeLayer::new(g.clone(), LayerConfig { gather: other, ..cfg })?;
    // variants of the default (two launches; x gathered in GEMM1's producer, dx summed by the weight gradients'
    // idle warps), each timed forward alone (z recomputed) and forward + backward with z saved
    let variants = [
        ("two launches, gather and combine passes", Forward::Launches, Gather::Pass),
        ("one persistent launch, gather and combine passes", Forward::Persistent, Gather::Pass),
        ("one persistent launch, overlapped gather and combine", Forward::Persistent, Gather::Overlapped),
        ("two launches, overlapped gather (the default until 2026-12-05h)", Forward::Launches, Gather::Overlapped),
    ];
    let mut vlayers = Vec::new();
    for (_, forward, gather) in variants {
        for save in [Save::InputsOnly, Save::WithZ] {
            vlayers.push(MoeLayer::new(g.clone(), LayerConfig { forward, gather, save, ..cfg })?);
        }
    }
    let inp = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dw, w1: &dw1, w2: &dw2 };
    // phase 1, each pass's repetitions back to back (as the PyTorch partner times its layer): forward alone;
    // forward + backward with z recomputed (Save::InputsOnly); forward + backward with z saved (Save::WithZ, as
    // autograd keeps activations for the PyTorch layer); the forward alone with x gathered the other way.
    // Phase 2, the A/B of the variants: the default's forward and z-saved forward + backward again and each
    // variant's, the passes alternating within each repetition (clock and power drift fall on all alike).
    // 3 warm-ups, 20 timed each.
    let mut all = vec![layer, layer_z, layer_g];
    all.extend(vlayers);
    // (layer, with the backward, phase, bf16 weight gradients); the last two: the z-saved forward + backward with
    // bf16 weight gradients, back to back (phase 1) and alternating with the default's f32 (phase 2)
    let mut passes = vec![(0, false, 1, false), (0, true, 1, false), (1, true, 1, false), (0, false, 2, false)];
    passes.push((1, true, 2, false));
    // the forward with x gathered the other way, alternating with the default's (timed back to back in phase 1 it
    // read 2-10% apart from the same kernels alternating, by its place in the run)
    passes.push((2, false, 2, false));
    passes.extend((0..2 * variants.len()).map(|j| (3 + j, j % 2 == 1, 2, false)));
    let bf16_passes = (passes.len(), passes.len() + 1);
    passes.extend([(1, true, 1, true), (1, true, 2, true)]);
    // the same z-saved, bf16-gradient step with the other epilogue-warps SwiGLU backward (`_ew` or `_ew7`, whichever
    // is not the default), alternating with the default's (phase 2)
    let dsw = gemm::dswiglu_kernel()?;
    let other_dsw = if dsw == gemm::Dsw::Ew7 { gemm::Dsw::Ew } else { gemm::Dsw::Ew7 };
    let dsw_pass = passes.len();
    passes.push((1, true, 2, true));
    // and with dy gathered the other way: by the pass, or by the dh GEMM's producer (`MEGAMOE_DY_GATHER`; the
    // producer's form runs with the in-producer gather of x only)
    let dy_default = gemm::dy_gather_in_producer()?;
    let dy_pass = passes.len();
    passes.push((1, true, 2, true));
    // and with dx summed each way: by the combine pass, by the weight gradients' mover warps (`MEGAMOE_DX_COMBINE`:
    // by default the pass below I = 512; the way the default takes is the line's noise check)
    let dxc_ways = [false, true];
    let dxc_passes = passes.len();
    passes.extend(dxc_ways.map(|_| (1, true, 2, true)));
    // the gathering producers' tile hand-off the other way (`MEGAMOE_GATHER_AHEAD`): the forward alone and the
    // z-saved step with bf16 weight gradients, alternating with the default's (passes 3 and the bf16 step)
    let ahead_default = gemm::gather_ahead()?;
    let ahead_passes = (passes.len(), passes.len() + 1);
    passes.extend([(0, false, 2, false), (1, true, 2, true)]);
    // the routing made the other way (`MEGAMOE_ROUTE`: one `route_fused` launch, or the error word's memset and the
    // three launches): the forward alone and the z-saved step with bf16 weight gradients, alternating likewise
    let route_default = megamoe::route::route_kernels()?;
    let route_other = match route_default {
        megamoe::route::RouteKernels::Fused => megamoe::route::RouteKernels::Split,
        megamoe::route::RouteKernels::Split => megamoe::route::RouteKernels::Fused,
    };
    let route_passes = (passes.len(), passes.len() + 1);
    passes.extend([(0, false, 2, false), (1, true, 2, true)]);
    // programmatic dependent launch the other way (`MEGAMOE_PDL`), likewise
    let pdl_default = megamoe::pdl_enabled()?;
    let pdl_passes = (passes.len(), passes.len() + 1);
    passes.extend([(0, false, 2, false), (1, true, 2, true)]);
    // the weight gradients' operands gathered the other way (`MEGAMOE_WGRAD_GATHER`: by their producers from the
    // tokens, or the copies the dh GEMM and the gather pass or side copy write): the z-saved step with bf16 and with
    // f32 weight gradients, alternating with the default's (where the default, or the shape rule, is off the other
    // way is `MEGAMOE_BENCH_WGRAD_GATHER` = 1 dW2's A, or 2 (unset) dW1's B too; where it gathers: off)
    let wg_default = gemm::wgrad_gather()?;
    let wg_other = match (
        wg_default.unwrap_or(gemm::wgrad_gather_pays(s.i)),
        std::env::var("MEGAMOE_BENCH_WGRAD_GATHER").as_deref(),
    ) {
        (gemm::WgradGather::Off, Ok("1")) => gemm::WgradGather::Dy,
        (gemm::WgradGather::Off, _) => gemm::WgradGather::DyX,
        _ => gemm::WgradGather::Off,
    };
    let wg_passes = (passes.len(), passes.len() + 1);
    passes.extend([(1, true, 2, true), (1, true, 2, false)]);
    // heat: the GPU brought to the state a training loop runs in before anything is timed (under the 700 W cap the
    // clock falls within seconds of sustained work: a forward timed first, on a cold GPU, ran 11-15% faster than the
    // same process's forward timed later; a helper's audit of the benchmarks, 2026-12-05)
    let heat = std::env::var("MEGAMOE_BENCH_HEAT").ok().and_then(|v| v.parse::<f64>().ok()).unwrap_or(3.0);
    if heat > 0.0 {
        let t0 = std::time::Instant::now();
        let mut steps = 0;
        while t0.elapsed().as_secs_f64() < heat {
            for _ in 0..5 {
                let sv = all[1].forward(&inp, &mut out)?;
                let gr = Grads { dx: &mut gdx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut gtk, accumulate: false };
                all[1].backward(&sv, &ddy, &inp, gr)?;
            }
            g.sync()?;
            steps += 5;
        }
        println!("HEAT {name}: {steps} forward + backward steps (z saved) in {:.1} s before the timings", heat);
    }
    let mut times = vec![Vec::new(); passes.len()];
    let mut checked = Vec::new();
    let reps = timed_reps();
    let mut run = |pass: usize, rep: usize, times: &mut Vec<Vec<f64>>| -> megamoe::Result<()> {
        let (l, with_bwd, _, bf16_grads) = passes[pass];
        let layer = &mut all[l];
        if rep == 3 && pass == 0 {
            g.fill_bytes(&mut out, 0xff)?;
        }
        let ahead = if pass == ahead_passes.0 || pass == ahead_passes.1 { !ahead_default } else { ahead_default };
        let rk = if pass == route_passes.0 || pass == route_passes.1 { route_other } else { route_default };
        let pdl = if pass == pdl_passes.0 || pass == pdl_passes.1 { !pdl_default } else { pdl_default };
        let wg = if pass == wg_passes.0 || pass == wg_passes.1 { Some(wg_other) } else { wg_default };
        let ms = gemm::with_wgrad_gather(wg, || {
            megamoe::with_pdl(pdl, || {
                megamoe::route::with_route_kernels(rk, || {
                    gemm::with_gather_ahead(ahead, || {
                        g.timed(|| {
                            let sv = layer.forward(&inp, &mut out)?;
                            if with_bwd && bf16_grads {
                                let gr = Grads {
                                    dx: &mut gdx,
                                    dw1: &mut gw1b,
                                    dw2: &mut gw2b,
                                    dtopk: &mut gtk,
                                    accumulate: false,
                                };
                                if pass == dsw_pass {
                                    gemm::with_dswiglu(other_dsw, || layer.backward(&sv, &ddy, &inp, gr))?;
                                } else if pass == dy_pass {
                                    gemm::with_dy_gather(!dy_default, || layer.backward(&sv, &ddy, &inp, gr))?;
                                } else if (dxc_passes..dxc_passes + dxc_ways.len()).contains(&pass) {
                                    let movers = dxc_ways[pass - dxc_passes];
                                    gemm::with_dx_combine(Some(movers), || layer.backward(&sv, &ddy, &inp, gr))?;
                                } else {
                                    layer.backward(&sv, &ddy, &inp, gr)?;
                                }
                            } else if with_bwd {
                                let gr = Grads {
                                    dx: &mut gdx,
                                    dw1: &mut gw1,
                                    dw2: &mut gw2,
                                    dtopk: &mut gtk,
                                    accumulate: false,
                                };
                                layer.backward(&sv, &ddy, &inp, gr)?;
                            }
                            Ok(())
                        })
                    })
                })
            })
        })?;
        if rep >= 3 {
            times[pass].push(ms);
        }
        if with_bwd && rep == 2 + reps {
            checked.push((g.download(&gdx)?, g.download(&gtk)?));
        }
        Ok(())
    };
    for pass in (0..passes.len()).filter(|&p| passes[p].2 == 1) {
        for rep in 0..3 + reps {
            run(pass, rep, &mut times)?;
        }
    }
    for rep in 0..3 + reps {
        for pass in (0..passes.len()).filter(|&p| passes[p].2 == 2) {
            run(pass, rep, &mut times)?;
        }
    }
    let ms: Vec<f64> = times.into_iter().map(median).collect();
    let (ms_f, ms_fb, ms_fbz, ms_fg) = (ms[0], ms[1], ms[2], ms[5]);
    // the forward with the host running ahead (10 forwards between two events, as a training loop enqueues them):
    // the default, the routing the other way, programmatic dependent launch the other way, alternating
    // and one default forward timed alone in the same rotation (a lone forward against back to back at the same
    // clock and heat: timed in separate phases the two read 5-7% apart on both sides, PyTorch's too)
    let mut ahead_ms = [Vec::new(), Vec::new(), Vec::new()];
    let mut lone_ms = Vec::new();
    let configs = [(route_default, pdl_default), (route_other, pdl_default), (route_default, !pdl_default)];
    for rep in 0..3 + reps {
        let layer = &mut all[0];
        let t = g.timed(|| layer.forward(&inp, &mut out).map(drop))?;
        if rep >= 3 {
            lone_ms.push(t);
        }
        for (i, &(rk, pdl)) in configs.iter().enumerate() {
            let layer = &mut all[0];
            let t = megamoe::with_pdl(pdl, || {
                megamoe::route::with_route_kernels(rk, || {
                    g.timed(|| {
                        for _ in 0..10 {
                            layer.forward(&inp, &mut out)?;
                        }
                        Ok(())
                    })
                })
            })?;
            if rep >= 3 {
                ahead_ms[i].push(t / 10.0);
            }
        }
    }
    let [fd, fr, fp] = ahead_ms.map(median);
    let f_lone = median(lone_ms);
    println!(
        "RESULT megamoe forward alone against 10 back to back, in one rotation {name} T={tokens}: {:.0} us alone, \
         {:.0} us a forward back to back ({:.3}x; medians of {reps})",
        f_lone * 1e3,
        fd * 1e3,
        f_lone / fd
    );
    // the forward timed alone (idle GPU at its start, as the medians above) through `forward` (a new Saved: seven
    // device allocations) and through `forward_into` a Saved allocated once, alternating; and the host's time to
    // enqueue each (its launches not waited for): how much of a lone forward is the GPU waiting for the host
    let mut into_ms = [Vec::new(), Vec::new()];
    let mut host_us = [Vec::new(), Vec::new()];
    let mut sv_once = all[0].alloc_saved(tokens)?;
    for rep in 0..3 + reps {
        for i in 0..2 {
            let layer = &mut all[0];
            let mut host = 0.0;
            let t = g.timed(|| {
                let t0 = std::time::Instant::now();
                if i == 0 {
                    let sv = layer.forward(&inp, &mut out)?;
                    host = t0.elapsed().as_secs_f64() * 1e6;
                    drop(sv);
                } else {
                    layer.forward_into(&inp, &mut out, &mut sv_once)?;
                    host = t0.elapsed().as_secs_f64() * 1e6;
                }
                Ok(())
            })?;
            if rep >= 3 {
                into_ms[i].push(t);
                host_us[i].push(host);
            }
        }
    }
    // the same lone forward_into right after 1 GiB of memset on the stream (the GPU busy, and every launch of the
    // forward enqueued before the memset ends): if the lone forward's extra time is the GPU waiting for the host
    // or starting from idle, this one loses it; alternating with the plain lone forward_into
    let mut busy = g.alloc::<u8>(1 << 30)?;
    let mut after_busy = [Vec::new(), Vec::new()];
    for rep in 0..3 + reps {
        for (i, pre) in [false, true].into_iter().enumerate() {
            if pre {
                g.fill_bytes(&mut busy, 0x11)?;
            }
            let layer = &mut all[0];
            let t = g.timed(|| layer.forward_into(&inp, &mut out, &mut sv_once))?;
            if rep >= 3 {
                after_busy[i].push(t);
            }
        }
    }
    drop(busy);
    let [f_idle, f_busy] = after_busy.map(median);
    println!(
        "RESULT megamoe forward alone after an idle GPU against after 1 GiB of memset {name} T={tokens}: {:.0} us \
         against {:.0} us ({:.3}x; medians of {reps}, alternating; back to back a forward takes {:.0} us)",
        f_idle * 1e3,
        f_busy * 1e3,
        f_idle / f_busy,
        fd * 1e3
    );
    let [f_new, f_into] = into_ms.map(median);
    let [h_new, h_into] = host_us.map(median);
    println!(
        "RESULT megamoe forward alone, new Saved against one allocated once {name} T={tokens}: forward {:.0} us \
         (host enqueue {h_new:.0} us), forward_into {:.0} us (host enqueue {h_into:.0} us): {:.3}x (medians of {reps}, \
         alternating; back to back a forward takes {:.0} us)",
        f_new * 1e3,
        f_into * 1e3,
        f_new / f_into,
        fd * 1e3
    );
    println!(
        "RESULT megamoe forward, 10 back to back {name} T={tokens}: {:.0} us a forward (routing {route_default:?}, \
         PDL {pdl_default}); routing {route_other:?} {:.0} us ({:.3}x); PDL {} {:.0} us ({:.3}x) (default / variant; \
         medians of {reps}, alternating)",
        fd * 1e3,
        fr * 1e3,
        fd / fr,
        !pdl_default,
        fp * 1e3,
        fd / fp
    );
    if let Some(secs) = soak::seconds() {
        // steps back to back for `secs` seconds each (the z-saved forward + backward, f32 then bf16 weight
        // gradients; a device wait every 10 steps only), with wall-clock bounds to match the GPU's power and clock
        // samples taken beside the run (docs/calls: nvidia-smi every 100 ms): the sustained rate a training loop
        // sees, and the energy a step takes
        for (label, bf16_grads) in [("f32", false), ("bf16", true)] {
            let layer = &mut all[1];
            let (steps, us, t0, t1) = soak::run(secs, 10, || {
                g.timed(|| {
                    for _ in 0..10 {
                        let sv = layer.forward(&inp, &mut out)?;
                        if bf16_grads {
                            let gr = Grads {
                                dx: &mut gdx,
                                dw1: &mut gw1b,
                                dw2: &mut gw2b,
                                dtopk: &mut gtk,
                                accumulate: false,
                            };
                            layer.backward(&sv, &ddy, &inp, gr)?;
                        } else {
                            let gr = Grads {
                                dx: &mut gdx,
                                dw1: &mut gw1,
                                dw2: &mut gw2,
                                dtopk: &mut gtk,
                                accumulate: false,
                            };
                            layer.backward(&sv, &ddy, &inp, gr)?;
                        }
                    }
                    Ok(())
                })
            })?;
            println!(
                "SOAK megamoe forward+backward (z saved, {label} weight gradients) {name}: {steps} steps, {us:.1} us a \
                 step (device events), from {t0:.3} to {t1:.3} (unix s)"
            );
        }
    }
    if std::env::var("MEGAMOE_BENCH_PHASES").is_ok_and(|v| v == "1") {
        // one more forward + backward of each save mode with a device event around every launch: each kernel's
        // time where it runs (back to back, not replayed alone as under a profiler) and the idle time before it
        for (mode, l) in [("z recomputed", 0), ("z saved", 1)] {
            let layer = &mut all[l];
            let ms = g.timed(|| {
                g.profile_start();
                let sv = layer.forward(&inp, &mut out)?;
                let gr = Grads { dx: &mut gdx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut gtk, accumulate: false };
                layer.backward(&sv, &ddy, &inp, gr)
            })?;
            let t = g.profile_end()?;
            for l in &t {
                println!(
                    "PHASE {name} fwd+bwd ({mode}) {:>8.1} us {:<28} {:>8.1} us, gap before {:>6.1} us",
                    l.at_us, l.kernel, l.us, l.gap_us
                );
            }
            let (run, gaps) = (t.iter().map(|l| l.us).sum::<f64>(), t.iter().map(|l| l.gap_us).sum::<f64>());
            println!(
                "PHASES {name} fwd+bwd ({mode}): {} launches, kernels {run:.0} us + gaps {gaps:.0} us; {:.0} us between \
                 the outer events (events around each launch included)",
                t.len(),
                ms * 1e3
            );
        }
    }
    g.sync()?;
    for l in &all {
        l.routing_error()?;
    }
    // the last pass (the last variant, z saved) wrote `out`: checked below like the default's
    let o = g.download(&out)?;
    let written = o.iter().all(|v| !v.is_nan());
    let n = 64;
    // only the experts these tokens use, renumbered, so the reference converts a few experts' weights
    let mut used: Vec<i32> = ids[..n * k].to_vec();
    used.sort_unstable();
    used.dedup();
    let remap = |id: i32| used.binary_search(&id).map(|p| p as i32).unwrap_or(-1);
    let pick = |wv: &[bf16], per: usize| -> Vec<f64> {
        used.iter().flat_map(|&id| wv[id as usize * per..(id as usize + 1) * per].iter().map(|v| v.to_f64())).collect()
    };
    let ri = RankInput {
        x: reference::to_f64(&x[..n * h]),
        topk_ids: ids[..n * k].iter().map(|&id| remap(id)).collect(),
        topk_w: w[..n * k].iter().map(|&v| v as f64).collect(),
        dy: reference::to_f64(&dy_h[..n * h]),
    };
    let wts = Weights { w1: pick(&w1, 2 * i * h), w2: pick(&w2, h * i) };
    let sub = Shape { e: used.len(), ..s };
    let (mut want, _) = reference::forward_backward(&sub, &[ri], &wts).map_err(megamoe::Error::InvalidArgument)?;
    let want = want.remove(0);
    let f = |v: &[bf16]| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let err = check::rel_err(&f(&o[..n * h]), &want.y);
    let mut err_dx = 0.0f64;
    let mut err_tk = 0.0f64;
    for (gdx_h, gtk_h) in &checked {
        err_dx = err_dx.max(check::rel_err(&f(&gdx_h[..n * h]), &want.dx));
        err_tk = err_tk.max(check::rel_err(&gtk_h[..n * k].iter().map(|&v| v as f64).collect::<Vec<_>>(), &want.dtopk));
    }
    let fl = s.forward_flops(tokens * k);
    println!(
        "RESULT megamoe forward {name} T={tokens}: {:.0} us, {:.0} TFLOP/s (median of {reps}), rel err {err:.2e} \
         (first {n} tokens), all written: {written}",
        ms_f * 1e3,
        fl / (ms_f * 1e-3) / 1e12
    );
    println!(
        "RESULT megamoe forward, x gathered {} {name} T={tokens}: {:.0} us, {:.0} TFLOP/s (median of {reps}; \
         alternating with the default {:?}'s {:.0} us, {:.3}x)",
        match other {
            Gather::InProducer => "in GEMM1's producer",
            Gather::Pass => "by a gather pass",
            Gather::Overlapped => "by the GEMM's idle producer warps",
        },
        ms_fg * 1e3,
        fl / (ms_fg * 1e-3) / 1e12,
        cfg.gather,
        ms[3] * 1e3,
        ms[3] / ms_fg
    );
    let (ab_f, ab_fbz) = (ms[3], ms[4]);
    for (v, (what, _, _)) in variants.iter().enumerate() {
        let (f, fbz) = (ms[6 + 2 * v], ms[7 + 2 * v]);
        println!(
            "RESULT megamoe forward, {what} {name} T={tokens}: {:.0} us, {:.0} TFLOP/s (median of {reps}, alternating \
             with the default's: {:.0} us, {:.3}x); forward+backward (z saved): {:.0} us (default {:.0} us, {:.3}x)",
            f * 1e3,
            fl / (f * 1e-3) / 1e12,
            ab_f * 1e3,
            ab_f / f,
            fbz * 1e3,
            ab_fbz * 1e3,
            ab_fbz / fbz
        );
    }
    let (fbz_b1, fbz_b2) = (ms[bf16_passes.0], ms[bf16_passes.1]);
    println!(
        "RESULT megamoe forward+backward (z saved, bf16 weight gradients) {name} T={tokens}: {:.0} us, {:.0} TFLOP/s \
         (median of {reps}, each pass back to back as the f32 line below); alternating with the f32 default's: {:.0} \
         us against {:.0} us, {:.3}x",
        fbz_b1 * 1e3,
        3.0 * fl / (fbz_b1 * 1e-3) / 1e12,
        fbz_b2 * 1e3,
        ab_fbz * 1e3,
        ab_fbz / fbz_b2
    );
    let ms_dsw = ms[dsw_pass];
    println!(
        "RESULT megamoe forward+backward (z saved, bf16 weight gradients), SwiGLU backward {other_dsw:?} {name} \
         T={tokens}: {:.0} us (median of {reps}, alternating with the default {dsw:?}'s {:.0} us: {:.3}x)",
        ms_dsw * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_dsw
    );
    let ms_dy = ms[dy_pass];
    println!(
        "RESULT megamoe forward+backward (z saved, bf16 weight gradients), dy gathered {} {name} T={tokens}: {:.0} us \
         (median of {reps}, alternating with the default's {:.0} us: {:.3}x; the same kernels unless x is gathered \
         in GEMM1's producer)",
        if dy_default { "by the pass" } else { "in the dh GEMM's producer" },
        ms_dy * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_dy
    );
    let dxc_default = gemm::dx_combine()?.unwrap_or_else(|| gemm::dx_combine_in_movers_pays(i));
    for (j, movers) in dxc_ways.into_iter().enumerate() {
        let ms_dxc = ms[dxc_passes + j];
        println!(
            "RESULT megamoe forward+backward (z saved, bf16 weight gradients), dx summed by {} {name} T={tokens}: \
             {:.0} us (median of {reps}, alternating with the default's (movers {}) {:.0} us: {:.3}x)",
            if movers { "the weight gradients' movers" } else { "the combine pass" },
            ms_dxc * 1e3,
            dxc_default,
            fbz_b2 * 1e3,
            fbz_b2 / ms_dxc
        );
    }
    let (ms_rf, ms_rs) = (ms[route_passes.0], ms[route_passes.1]);
    println!(
        "RESULT megamoe routing {route_other:?} (the default {route_default:?}) {name} T={tokens}: forward {:.0} us \
         (default's {:.0} us: {:.3}x), forward+backward (z saved, bf16 weight gradients) {:.0} us (default's {:.0} us: \
         {:.3}x) (medians of {reps}, alternating)",
        ms_rf * 1e3,
        ms[3] * 1e3,
        ms[3] / ms_rf,
        ms_rs * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_rs
    );
    let (ms_pf, ms_ps) = (ms[pdl_passes.0], ms[pdl_passes.1]);
    println!(
        "RESULT megamoe programmatic dependent launch {} (the default {}) {name} T={tokens}: forward {:.0} us \
         (default's {:.0} us: {:.3}x), forward+backward (z saved, bf16 weight gradients) {:.0} us (default's {:.0} us: \
         {:.3}x) (medians of {reps}, alternating)",
        if pdl_default { "off" } else { "on" },
        if pdl_default { "on" } else { "off" },
        ms_pf * 1e3,
        ms[3] * 1e3,
        ms[3] / ms_pf,
        ms_ps * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_ps
    );
    let (ms_wb, ms_wf) = (ms[wg_passes.0], ms[wg_passes.1]);
    println!(
        "RESULT megamoe weight gradients' operands gathered in their producers {:?} {name} T={tokens}: \
         forward+backward (z saved, bf16 weight gradients) {:.0} us (default's {:.0} us: {:.3}x), with f32 weight \
         gradients {:.0} us (default's {:.0} us: {:.3}x) (medians of {reps}, alternating; the same kernels unless dy \
         is gathered in the dh GEMM's producer, or x's rows with z saved)",
        wg_other,
        ms_wb * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_wb,
        ms_wf * 1e3,
        ms[4] * 1e3,
        ms[4] / ms_wf
    );
    let (ms_af, ms_as) = (ms[ahead_passes.0], ms[ahead_passes.1]);
    println!(
        "RESULT megamoe gathering producers' look-ahead hand-off {} {name} T={tokens}: forward {:.0} us (default's \
         {:.0} us: {:.3}x), forward+backward (z saved, bf16 weight gradients) {:.0} us (default's {:.0} us: {:.3}x) \
         (medians of {reps}, alternating; the same kernels unless a gathering producer runs)",
        if ahead_default { "off" } else { "on" },
        ms_af * 1e3,
        ms[3] * 1e3,
        ms[3] / ms_af,
        ms_as * 1e3,
        fbz_b2 * 1e3,
        fbz_b2 / ms_as
    );
    for (mode, ms) in [("z recomputed", ms_fb), ("z saved", ms_fbz)] {
        println!(
            "RESULT megamoe forward+backward ({mode}) {name} T={tokens}: {:.0} us, {:.0} TFLOP/s (3x the forward \
             FLOPs, as shared/ANCHORS.md; a recompute is not counted), rel err dx {err_dx:.2e} dtopk {err_tk:.2e} \
             (first {n} tokens, worst of both modes)",
            ms * 1e3,
            3.0 * fl / (ms * 1e-3) / 1e12
        );
    }
    // the z-saved forward + backward with bf16 weight gradients captured once in a CUDA graph and replayed,
    // alternating with the same step launched eagerly into the same Saved (3 warm-ups, median of reps each)
    let layer = &mut all[1];
    let mut sv = layer.alloc_saved(tokens)?;
    let mut gr = (&mut gdx, &mut gw1b, &mut gw2b, &mut gtk);
    // eager once first: the layer encodes a tensor map the first time it sees a buffer, which a capture cannot
    step(layer, &mut sv, &inp, &mut out, &ddy, &mut gr)?;
    let st = g.stream();
    let drv = |what: &str| {
        let what = what.to_string();
        move |e| megamoe::Error::Driver { what: what.clone(), source: e }
    };
    st.begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).map_err(drv("beginning a capture"))?;
    let r = step(layer, &mut sv, &inp, &mut out, &ddy, &mut gr);
    let graph = st.end_capture(CUgraphInstantiate_flags(0)).map_err(drv("ending the capture"))?;
    r?;
    let graph = graph.ok_or_else(|| megamoe::Error::InvalidArgument("the capture recorded nothing".into()))?;
    let (mut te, mut tg) = (Vec::new(), Vec::new());
    for rep in 0..3 + reps {
        let e = g.timed(|| step(layer, &mut sv, &inp, &mut out, &ddy, &mut gr))?;
        let gm = g.timed(|| graph.launch().map_err(drv("launching the graph")))?;
        if rep >= 3 {
            te.push(e);
            tg.push(gm);
        }
    }
    let dx_graph = g.download(&*gr.0)?;
    step(layer, &mut sv, &inp, &mut out, &ddy, &mut gr)?;
    let same = g.download(&*gr.0)?.iter().zip(&dx_graph).all(|(a, b)| a.to_bits() == b.to_bits());
    let (ge, gg) = (median(te), median(tg));
    println!(
        "RESULT megamoe forward+backward as one CUDA graph (z saved, bf16 weight gradients) {name} T={tokens}: \
         {:.0} us (median of {reps}, alternating with the same step launched eagerly: {:.0} us, {:.3}x); dx \
         bitwise the eager step's: {same}",
        gg * 1e3,
        ge * 1e3,
        ge / gg
    );
    // the FP8 layer needs H a multiple of 512 and I of 128: other shapes end here, after the bf16 lines' checks
    if h % 512 != 0 || i % 128 != 0 {
        println!("FP8 lines skipped at {name}: the FP8 layer needs H a multiple of 512 and I of 128");
        let err = err.max(err_dx).max(err_tk);
        if err.is_nan() || err > 1e-2 || !written || !same {
            return Err(megamoe::Error::Mismatch(format!("{name}: wrong results in the benchmark run")));
        }
        return Ok(());
    }
    // the third layer's buffers freed first: at 235B the FP8 lines below did not fit an H100's 80 GB beside it
    all.truncate(2);
    // the forward in blockwise FP8 (`forward_fp8`, weights quantized beforehand, as once per optimizer step),
    // alternating with the default bf16 forward (z recomputed) on the same inputs
    let layer = &mut all[0];
    let mut w8 = Fp8Weights::alloc(layer)?;
    w8.quantize(g, &dw1, &dw2, layer)?;
    let inp8 = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dw, weights: &w8 };
    let (mut sv8, mut sv16) = (layer.alloc_saved(tokens)?, layer.alloc_saved(tokens)?);
    let mut out8 = g.alloc::<bf16>(tokens * h)?;
    g.fill_bytes(&mut out8, 0xff)?;
    layer.forward_fp8(&inp8, &mut out8, &mut sv8)?;
    layer.forward_into(&inp, &mut out, &mut sv16)?;
    // and the FP8 forward with GEMM1 + SwiGLU and GEMM2 in 128 x 128 tiles (MEGAMOE_FP8_TILES=128; the default is
    // 128 x 256), into its own output
    // and with x's codes gathered by the pass instead of GEMM1's producer (MEGAMOE_FP8_GATHER=pass)
    let (mut out8w, mut out8p) = (g.alloc::<bf16>(tokens * h)?, g.alloc::<bf16>(tokens * h)?);
    let (mut t8, mut t16, mut t8w, mut t8p) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for rep in 0..3 + reps {
        let a = g.timed(|| layer.forward_fp8(&inp8, &mut out8, &mut sv8))?;
        let b = g.timed(|| layer.forward_into(&inp, &mut out, &mut sv16))?;
        std::env::set_var("MEGAMOE_FP8_TILES", "128");
        let c = g.timed(|| layer.forward_fp8(&inp8, &mut out8w, &mut sv8));
        std::env::remove_var("MEGAMOE_FP8_TILES");
        std::env::set_var("MEGAMOE_FP8_GATHER", "pass");
        let d = g.timed(|| layer.forward_fp8(&inp8, &mut out8p, &mut sv8));
        std::env::remove_var("MEGAMOE_FP8_GATHER");
        let (c, d) = (c?, d?);
        if rep >= 3 {
            t8.push(a);
            t16.push(b);
            t8w.push(c);
            t8p.push(d);
        }
    }
    let (m8, m16, m8w, m8p) = (median(t8), median(t16), median(t8w), median(t8p));
    let bitwise = |a: &CudaSlice<bf16>, b: &CudaSlice<bf16>| -> megamoe::Result<bool> {
        Ok(g.download(a)?.iter().zip(g.download(b)?.iter()).all(|(p, q)| p.to_bits() == q.to_bits()))
    };
    let (same_w, same_p) = (bitwise(&out8w, &out8)?, bitwise(&out8p, &out8)?);
    let (o8, o16) = (g.download(&out8)?, g.download(&out)?);
    let written8 = o8.iter().all(|v| !v.is_nan());
    let (p8, p16): (Vec<f64>, Vec<f64>) = o8.iter().zip(&o16).map(|(a, b)| (a.to_f64(), b.to_f64())).unzip();
    let d8 = check::rel_err(&p8, &p16);
    println!(
        "RESULT megamoe forward FP8 {name} T={tokens}: {:.0} us, {:.0} TFLOP/s (median of {reps}, alternating with the \
         bf16 forward: {:.0} us, {:.2}x); rel diff to the bf16 output {d8:.1e} (the format's error), all written: \
         {written8}",
        m8 * 1e3,
        fl / (m8 * 1e-3) / 1e12,
        m16 * 1e3,
        m16 / m8
    );
    println!(
        "RESULT megamoe forward FP8, GEMM1 + SwiGLU and GEMM2 in 128 x 128 tiles {name} T={tokens}: {:.0} us (the \
         default 128 x 256 tiles' {:.0} us: {:.3}x, alternating); output bitwise the default's: {same_w}",
        m8w * 1e3,
        m8 * 1e3,
        m8w / m8
    );
    println!(
        "RESULT megamoe forward FP8, x's codes gathered by a pass {name} T={tokens}: {:.0} us (the default, gathered \
         in GEMM1's producer: {:.0} us, {:.3}x, alternating); output bitwise the default's: {same_p}",
        m8p * 1e3,
        m8 * 1e3,
        m8p / m8
    );
    // the FP8 forward + its backward (`backward_fp8`: z recomputed in FP8, the rest in bf16; bf16 weight
    // gradients) alternating with the bf16 forward + backward (z recomputed, bf16 weight gradients)
    let mut gdx8 = g.alloc::<bf16>(tokens * h)?;
    g.fill_bytes(&mut gdx8, 0xff)?;
    // and the same with dx, the weight gradients or both in FP8 (`Fp8Backward`), and dx with dh in FP8 (`Fp8Dh::Fp8`:
    // dh = dy W2 with the SwiGLU backward in the FP8 kernel's epilogue), each its own layer, weights (W1's transpose
    // for dx, W2's for dh), dx and weight gradients
    let modes = [
        (Fp8Backward::Dx, Fp8Dh::Bf16),
        (Fp8Backward::Wgrad, Fp8Dh::Bf16),
        (Fp8Backward::DxWgrad, Fp8Dh::Bf16),
        (Fp8Backward::Dx, Fp8Dh::Fp8),
    ];
    struct ModeRun {
        layer: MoeLayer,
        w8: Fp8Weights,
        sv: Saved,
        dx: CudaSlice<bf16>,
        dw1: CudaSlice<bf16>,
        dw2: CudaSlice<bf16>,
        times: Vec<f64>,
    }
    let mut mruns = Vec::new();
    for (m, dh) in modes {
        let layer_m = MoeLayer::new(g.clone(), LayerConfig { fp8_backward: m, fp8_dh: dh, ..*layer.config() })?;
        let mut w8m = Fp8Weights::alloc(&layer_m)?;
        w8m.quantize(g, &dw1, &dw2, &layer_m)?;
        let sv = layer_m.alloc_saved(tokens)?;
        let (mut dxm, mut w1m, mut w2m) =
            (g.alloc::<bf16>(tokens * h)?, g.alloc::<bf16>(e * 2 * i * h)?, g.alloc(e * h * i)?);
        g.fill_bytes(&mut dxm, 0xff)?;
        g.fill_bytes(&mut w1m, 0xff)?;
        g.fill_bytes(&mut w2m, 0xff)?;
        mruns.push(ModeRun { layer: layer_m, w8: w8m, sv, dx: dxm, dw1: w1m, dw2: w2m, times: Vec::new() });
    }
    let (mut tb8, mut tb16) = (Vec::new(), Vec::new());
    for rep in 0..3 + reps {
        let a = g.timed(|| {
            fp8_step(
                layer,
                &mut sv8,
                &inp8,
                &inp,
                &w8,
                &mut out8,
                &ddy,
                &mut (&mut gdx8, &mut gw1b, &mut gw2b, &mut gtk),
            )
        })?;
        let b =
            g.timed(|| step(layer, &mut sv16, &inp, &mut out, &ddy, &mut (&mut gdx, &mut gw1b, &mut gw2b, &mut gtk)))?;
        // the modes in a rotating order (call H at 235B: Dx, timed right after the bf16 step every rep, read 0.971x
        // while DxWgrad read 1.053x: the step before a timed one sets its power state)
        let nm = mruns.len();
        for j in 0..nm {
            let mr = &mut mruns[(j + rep) % nm];
            let inp8m = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dw, weights: &mr.w8 };
            let c = g.timed(|| {
                let gr = &mut (&mut mr.dx, &mut mr.dw1, &mut mr.dw2, &mut gtk);
                fp8_step(&mut mr.layer, &mut mr.sv, &inp8m, &inp, &mr.w8, &mut out8, &ddy, gr)
            })?;
            if rep >= 3 {
                mr.times.push(c);
            }
        }
        if rep >= 3 {
            tb8.push(a);
            tb16.push(b);
        }
    }
    let (mb8, mb16) = (median(tb8), median(tb16));
    // each mode's FP8 products against the bf16 step's (gw1b, gw2b: the last writer was the bf16 step; gdx8: the
    // straight FP8 step's dx), the rest bitwise the straight FP8 step's
    let to64 = |v: Vec<bf16>| v.into_iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let (b1, b2, dx8s) = (to64(g.download(&gw1b)?), to64(g.download(&gw2b)?), to64(g.download(&gdx8)?));
    let mut bad_w = false;
    for (&(m, dh), mr) in modes.iter().zip(mruns) {
        let (w1m, w2m, dxm) = (to64(g.download(&mr.dw1)?), to64(g.download(&mr.dw2)?), to64(g.download(&mr.dx)?));
        let written = w1m.iter().chain(&w2m).chain(&dxm).all(|v| !v.is_nan());
        let (d1, d2, ddx) = (check::rel_err(&w1m, &b1), check::rel_err(&w2m, &b2), check::rel_err(&dxm, &dx8s));
        // what stays bf16 is bitwise the straight FP8 step's: dx without Dx (the weight gradients' bf16 twins are
        // the bf16 step's, not comparable bit for bit: only their distance is printed)
        let same_dx = m.dx() || ddx == 0.0;
        let mt = median(mr.times);
        println!(
            "RESULT megamoe forward+backward FP8, Fp8Backward::{m:?}, Fp8Dh::{dh:?} {name} T={tokens}: {:.0} us (median \
             of {reps}, alternating: the bf16 step {:.0} us, {:.3}x; the FP8 step with bf16 dx and weight gradients \
             {:.0} us, \
             {:.3}x); dW1 / dW2 rel diff to the bf16 step's {d1:.1e} / {d2:.1e}, dx to the straight FP8 step's \
             {ddx:.1e}, written: {written}",
            mt * 1e3,
            mb16 * 1e3,
            mb16 / mt,
            mb8 * 1e3,
            mb8 / mt
        );
        bad_w |=
            !written || !same_dx || d1.is_nan() || d1 > 0.1 || d2.is_nan() || d2 > 0.1 || ddx.is_nan() || ddx > 0.1;
    }
    let (x8, x16) = (g.download(&gdx8)?, g.download(&gdx)?);
    let written_b8 = x8.iter().all(|v| !v.is_nan());
    let (q8, q16): (Vec<f64>, Vec<f64>) = x8.iter().zip(&x16).map(|(a, b)| (a.to_f64(), b.to_f64())).unzip();
    let db8 = check::rel_err(&q8, &q16);
    println!(
        "RESULT megamoe forward+backward FP8 (z recomputed in FP8, bf16 backward, bf16 weight gradients) {name} \
         T={tokens}: {:.0} us (median of {reps}, alternating with the bf16 forward+backward, z recomputed, bf16 \
         weight gradients: {:.0} us, {:.3}x); dx rel diff to the bf16 step's {db8:.1e}, all written: {written_b8}",
        mb8 * 1e3,
        mb16 * 1e3,
        mb16 / mb8
    );
    // the FP8 step as a layer that saves z runs it (`Save::WithZ`: GEMM1 stores z, `backward_fp8` reads it; FP8 dx,
    // bf16 weight gradients) alternating with the bf16 step with z saved (the headline step), on the same inputs
    let (written_z8, dz8) = {
        let mut lz8 = MoeLayer::new(
            g.clone(),
            LayerConfig { fp8_backward: Fp8Backward::Dx, save: Save::WithZ, ..*all[1].config() },
        )?;
        let mut w8z = Fp8Weights::alloc(&lz8)?;
        w8z.quantize(g, &dw1, &dw2, &lz8)?;
        let inp8z = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dw, weights: &w8z };
        let (mut sv8z, mut sv16z) = (lz8.alloc_saved(tokens)?, all[1].alloc_saved(tokens)?);
        let (mut dx8z, mut w1z, mut w2z) =
            (g.alloc::<bf16>(tokens * h)?, g.alloc::<bf16>(e * 2 * i * h)?, g.alloc::<bf16>(e * h * i)?);
        g.fill_bytes(&mut dx8z, 0xff)?;
        // and the same FP8 step with x's codes gathered by the pass (MEGAMOE_FP8_GATHER=pass)
        let (mut t8, mut t16, mut t8p) = (Vec::new(), Vec::new(), Vec::new());
        for rep in 0..3 + reps {
            let mut z8 = |gtk: &mut CudaSlice<f32>, out8: &mut CudaSlice<bf16>| {
                g.timed(|| {
                    let gr = &mut (&mut dx8z, &mut w1z, &mut w2z, gtk);
                    fp8_step(&mut lz8, &mut sv8z, &inp8z, &inp, &w8z, out8, &ddy, gr)
                })
            };
            let a = z8(&mut gtk, &mut out8)?;
            let b = g.timed(|| {
                step(&mut all[1], &mut sv16z, &inp, &mut out, &ddy, &mut (&mut gdx, &mut gw1b, &mut gw2b, &mut gtk))
            })?;
            std::env::set_var("MEGAMOE_FP8_GATHER", "pass");
            let c = z8(&mut gtk, &mut out8);
            std::env::remove_var("MEGAMOE_FP8_GATHER");
            let c = c?;
            if rep >= 3 {
                t8.push(a);
                t16.push(b);
                t8p.push(c);
            }
        }
        let (m8, m16, m8p) = (median(t8), median(t16), median(t8p));
        let (a8, a16) = (g.download(&dx8z)?, g.download(&gdx)?);
        let written = a8.iter().all(|v| !v.is_nan());
        let (q8, q16): (Vec<f64>, Vec<f64>) = a8.iter().zip(&a16).map(|(a, b)| (a.to_f64(), b.to_f64())).unzip();
        let d = check::rel_err(&q8, &q16);
        println!(
            "RESULT megamoe forward+backward FP8, z saved (Fp8Backward::Dx, bf16 weight gradients) {name} \
             T={tokens}: {:.0} us (median of {reps}, alternating with the bf16 forward+backward, z saved, bf16 \
             weight gradients: {:.0} us, {:.3}x; with x's codes gathered by a pass {:.0} us, {:.3}x); dx rel diff \
             to the bf16 step's {d:.1e}, all written: {written}",
            m8 * 1e3,
            m16 * 1e3,
            m16 / m8,
            m8p * 1e3,
            m8p / m8
        );
        (written, d)
    };
    let err = err.max(err_dx).max(err_tk);
    if err.is_nan()
        || !written_z8
        || dz8.is_nan()
        || dz8 > 0.1
        || err > 1e-2
        || !written
        || !same
        || !written8
        || d8 > 0.1
        || !written_b8
        || db8 > 0.1
        || !same_w
        || !same_p
        || bad_w
    {
        return Err(megamoe::Error::Mismatch(format!("{name}: wrong results in the benchmark run")));
    }
    Ok(())
}

/// Forward into `sv`, then the backward with bf16 weight gradients into `gr` (dx, dW1, dW2, dtopk): the step the
/// graph captures.
fn step(
    layer: &mut MoeLayer,
    sv: &mut Saved,
    inp: &Inputs<'_>,
    out: &mut CudaSlice<bf16>,
    dy: &CudaSlice<bf16>,
    gr: &mut BfGrads<'_>,
) -> megamoe::Result<()> {
    layer.forward_into(inp, out, sv)?;
    let grads = Grads { dx: &mut *gr.0, dw1: &mut *gr.1, dw2: &mut *gr.2, dtopk: &mut *gr.3, accumulate: false };
    layer.backward(sv, dy, inp, grads)
}

/// [`step`] in FP8: `forward_fp8` into `sv`, then `backward_fp8` (bf16 weight gradients into `gr`) on the bf16
/// inputs the weights `w8` came from.
#[allow(clippy::too_many_arguments)]
fn fp8_step(
    layer: &mut MoeLayer,
    sv: &mut Saved,
    inp8: &Fp8Inputs<'_>,
    inp: &Inputs<'_>,
    w8: &Fp8Weights,
    out: &mut CudaSlice<bf16>,
    dy: &CudaSlice<bf16>,
    gr: &mut BfGrads<'_>,
) -> megamoe::Result<()> {
    layer.forward_fp8(inp8, out, sv)?;
    let grads = Grads { dx: &mut *gr.0, dw1: &mut *gr.1, dw2: &mut *gr.2, dtopk: &mut *gr.3, accumulate: false };
    layer.backward_fp8(sv, dy, inp, w8, grads)
}

/// dx, dW1, dW2 (bf16) and dtopk of [`step`].
type BfGrads<'a> = (&'a mut CudaSlice<bf16>, &'a mut CudaSlice<bf16>, &'a mut CudaSlice<bf16>, &'a mut CudaSlice<f32>);

/// The routing layout alone, both forms alternating (`route_fused`; `route_count`, `route_scan`, `route_place`),
/// each launch bracketed by device events (so launch gaps are not counted): top-8 of `e` experts for `tokens`
/// tokens; medians of the timed reps.
fn bench_routing(g: &Arc<Gpu>, tokens: usize, k: usize, e: usize, rng: &mut Rng) -> megamoe::Result<()> {
    use megamoe::route::{with_route_kernels, RouteKernels};
    let ids = rng.topk_ids(tokens, k, e);
    let reps = timed_reps();
    let forms = [RouteKernels::Fused, RouteKernels::Split];
    let mut t: [Vec<Vec<(&'static str, f64)>>; 2] = [Vec::new(), Vec::new()];
    for rep in 0..3 + reps {
        for (i, &form) in forms.iter().enumerate() {
            let gm = megamoe_kernels::kernels_host::GEMM_BM;
            let (_, ms) = with_route_kernels(form, || megamoe::route::layout(g, &ids, e, gm, 0xff, true))?;
            if rep >= 3 {
                t[i].push(ms);
            }
        }
    }
    // back to back: 50 routings between two events, the forms alternating (the GPU's time when the host runs ahead)
    let mut b2b = [Vec::new(), Vec::new()];
    for _ in 0..5 {
        for (i, &form) in forms.iter().enumerate() {
            let gm = megamoe_kernels::kernels_host::GEMM_BM;
            b2b[i].push(with_route_kernels(form, || megamoe::route::time_back_to_back(g, &ids, e, gm, 50))? * 1e3);
        }
    }
    let [bf, bs] = b2b.map(median);
    println!(
        "RESULT megamoe routing layout back to back T={tokens} top-{k} E={e}: fused {bf:.1} us, split {bs:.1} us a \
         routing (50 between two events, median of 5, alternating): split / fused {:.2}x",
        bs / bf
    );
    let mut all = [0.0; 2];
    let mut each = [String::new(), String::new()];
    for i in 0..2 {
        let launches = t[i][0].len();
        let mut parts = Vec::new();
        for l in 0..launches {
            let us = median(t[i].iter().map(|v| v[l].1 * 1e3).collect());
            all[i] += us;
            parts.push(format!("{} {us:.1} us", t[i][0][l].0));
        }
        each[i] = parts.join(", ");
    }
    println!(
        "RESULT megamoe routing layout T={tokens} top-{k} E={e} ({} slots): fused {:.1} us ({}); split {:.1} us ({}); \
         split / fused {:.2}x (alternating, each launch timed alone, median of {reps})",
        tokens * k,
        all[0],
        each[0],
        all[1],
        each[1],
        all[1] / all[0]
    );
    Ok(())
}

fn main() {
    let g = match megamoe::gpu(0) {
        Ok(g) => g,
        Err(e) => {
            println!("layer benchmark skipped: {e}");
            return;
        }
    };
    let seed = Rng::fresh_seed();
    let mut rng = Rng::new(seed);
    println!("layer benchmark on {} (seed {seed})", g.name());
    let tokens = 16384;
    let mut ok = true;
    // MEGAMOE_BENCH_ONLY=235B (a substring of the shape name) runs one shape
    let only = std::env::var("MEGAMOE_BENCH_ONLY").unwrap_or_default();
    let mut shapes = vec![
        ("Qwen3-30B-A3B".to_string(), Shape::QWEN3_30B_A3B, tokens),
        ("Qwen3-235B-A22B".into(), Shape::QWEN3_235B_A22B, tokens),
    ];
    // MEGAMOE_BENCH_SHAPE=H,I,E,k[,T]: that shape instead (T tokens, default 16384), named "H x I, E experts, top-k"
    if let Ok(v) = std::env::var("MEGAMOE_BENCH_SHAPE") {
        let d: Vec<usize> = v.split(',').filter_map(|x| x.trim().parse().ok()).collect();
        let (h, i, e, k, t) = match d[..] {
            [h, i, e, k] => (h, i, e, k, tokens),
            [h, i, e, k, t] => (h, i, e, k, t),
            _ => {
                println!("FAILED: MEGAMOE_BENCH_SHAPE={v}: expected H,I,E,k[,T]");
                std::process::exit(1);
            }
        };
        shapes = vec![(format!("{h} x {i}, {e} experts, top-{k}"), Shape { h, i, e, k }, t)];
    }
    for (name, s, tokens) in shapes {
        if !name.contains(only.as_str()) {
            continue;
        }
        if let Err(e) = bench_shape(&g, &name, s, tokens, &mut rng) {
            println!("FAILED {name}: {e}");
            ok = false;
        }
    }
    // after the shapes, so the launch numbering of their passes (MEGAMOE_BENCH_REPS=1 profiles) is unchanged
    // MEGAMOE_BENCH_ONLY=routing runs the routing alone
    if only.is_empty() || only == "routing" {
        for e in [128, 4096] {
            if let Err(err) = bench_routing(&g, tokens, 8, e, &mut rng) {
                println!("FAILED routing layout E={e}: {err}");
                ok = false;
            }
        }
    }
    if !ok {
        std::process::exit(1);
    }
}
