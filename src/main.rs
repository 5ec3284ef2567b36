//! `megamoe`: the main job. On a GPU: the self-check of every Hopper primitive, then the MoE layer (forward and
//! backward) checked against the CPU reference and timed. Everywhere: the f64 CPU reference of a small
//! Qwen3-30B-A3B-shaped layer (forward and backward over 2 emulated ranks).
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use half::bf16;
use megamoe::layer::{Grads, Inputs, LayerConfig, MoeLayer, Save};
use megamoe::reference::{self, Grads as RefGrads, RankInput, RankOutput, Shape, Weights};
use megamoe::rng::Rng;
use megamoe::{check, Error, Gpu};

/// The layer's inputs in bf16 (what the GPU takes; the reference reads the same values in f64).
struct Host {
    tokens: Vec<usize>,
    x: Vec<bf16>,
    ids: Vec<i32>,
    w: Vec<f32>,
    dy: Vec<bf16>,
    w1: Vec<bf16>,
    w2: Vec<bf16>,
}

fn main() -> ExitCode {
    let seed = Rng::fresh_seed();
    let mut rng = Rng::new(seed);
    println!("megamoe {} (seed {seed}; MEGAMOE_SEED={seed} replays this run)", env!("CARGO_PKG_VERSION"));
    let gpu = megamoe::gpu(0);
    match &gpu {
        Ok(g) => println!(
            "GPU 0: {} ({} SMs, {} KiB shared memory per block)",
            g.name(),
            g.sm_count(),
            g.smem_optin() / 1024
        ),
        Err(e @ (Error::NoDriver | Error::NoDevice { .. } | Error::UnsupportedDevice { .. })) => {
            println!("No usable GPU: {e}.");
            println!("Skipping the GPU part (self-check, the layer on the GPU); running the CPU reference only.");
        }
        Err(e) => println!("GPU error: {e}"),
    }
    let s = Shape::QWEN3_30B_A3B;
    let host = inputs(&mut rng, s, &[96, 32]);
    let (outs, grads) = cpu_reference(s, &host);
    let mut failed = false;
    match gpu {
        Ok(gpu) => {
            println!(
                "GPU 0: {} ({} SMs, {} KiB shared memory per block)",
                gpu.name(),
                gpu.sm_count(),
                gpu.smem_optin() / 1024
            );
            println!("GPU self-check of the Hopper primitives:");
            for (name, r) in megamoe::selftest::run_all(&gpu, &mut rng) {
                match r {
                    Ok(v) => println!("  ok    {name:<48} {v}"),
                    Err(e) => {
                        failed = true;
                        println!("  FAIL  {name:<48} {e}");
                    }
                }
            }
            if let Err(e) = gpu_layer(&gpu, s, &host, &outs, &grads, &mut rng) {
                failed = true;
                println!("  FAIL  the MoE layer on the GPU: {e}");
            }
        }
        Err(Error::NoDriver | Error::NoDevice { .. } | Error::UnsupportedDevice { .. }) => {}
        Err(_) => failed = true,
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn inputs(rng: &mut Rng, s: Shape, tokens: &[usize]) -> Host {
    let t: usize = tokens.iter().sum();
    let ids = rng.topk_ids(t, s.k, s.e);
    Host {
        tokens: tokens.to_vec(),
        x: rng.bf16_vec(t * s.h, 1.0),
        ids,
        w: (0..t * s.k).map(|_| (rng.uniform() / s.k as f64) as f32).collect(),
        dy: rng.bf16_vec(t * s.h, 1.0),
        w1: rng.bf16_vec(s.e * 2 * s.i * s.h, 1.7 / (s.h as f64).sqrt()),
        w2: rng.bf16_vec(s.e * s.h * s.i, 2.0 / (s.i as f64).sqrt()),
    }
}

fn cpu_reference(s: Shape, host: &Host) -> (Vec<RankOutput>, RefGrads) {
    let mut first = 0;
    let ranks: Vec<RankInput> = host
        .tokens
        .iter()
        .map(|&t| {
            let (a, b) = (first, first + t);
            first = b;
            RankInput {
                x: reference::to_f64(&host.x[a * s.h..b * s.h]),
                topk_ids: host.ids[a * s.k..b * s.k].to_vec(),
                topk_w: host.w[a * s.k..b * s.k].iter().map(|&v| v as f64).collect(),
                dy: reference::to_f64(&host.dy[a * s.h..b * s.h]),
            }
        })
        .collect();
    let w = Weights { w1: reference::to_f64(&host.w1), w2: reference::to_f64(&host.w2) };
    let rows: usize = host.tokens.iter().sum::<usize>() * s.k;
    println!(
        "CPU reference (f64, {} threads): Qwen3-30B-A3B shape H={} I={} E={} top-{}, {} ranks with {:?} tokens ({rows} routed rows)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        s.h,
        s.i,
        s.e,
        s.k,
        ranks.len(),
        host.tokens
    );
    let t0 = Instant::now();
    let (outs, g) = reference::forward_backward(&s, &ranks, &w).expect("the reference's own inputs are valid");
    let dt = t0.elapsed().as_secs_f64();
    let norm = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    for (r, o) in outs.iter().enumerate() {
        println!(
            "  rank {r}: ||y|| = {:.6e}  ||dx|| = {:.6e}  ||dtopk|| = {:.6e}",
            norm(&o.y),
            norm(&o.dx),
            norm(&o.dtopk)
        );
    }
    println!("  ||dW1|| = {:.6e}  ||dW2|| = {:.6e}", norm(&g.dw1), norm(&g.dw2));
    println!("  forward + backward: {dt:.2} s ({:.2} GFLOP/s in f64)", 3.0 * s.forward_flops(rows) / dt / 1e9);
    (outs, g)
}

/// The layer on the GPU (EP = 1: both emulated ranks' tokens on one GPU) against the reference, then timed.
fn gpu_layer(
    g: &Arc<Gpu>,
    s: Shape,
    host: &Host,
    outs: &[RankOutput],
    grads: &RefGrads,
    rng: &mut Rng,
) -> megamoe::Result<()> {
    let t: usize = host.tokens.iter().sum();
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, t, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg)?;
    let (x, ids, w, w1, w2, dy) = (
        g.upload(&host.x)?,
        g.upload(&host.ids)?,
        g.upload(&host.w)?,
        g.upload(&host.w1)?,
        g.upload(&host.w2)?,
        g.upload(&host.dy)?,
    );
    let inp = Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let mut out = g.alloc::<bf16>(t * s.h)?;
    let mut dx = g.alloc::<bf16>(t * s.h)?;
    let mut dtopk = g.alloc::<f32>(t * s.k)?;
    let mut dw1 = g.alloc::<f32>(s.e * 2 * s.i * s.h)?;
    let mut dw2 = g.alloc::<f32>(s.e * s.h * s.i)?;
    for b in [&mut out, &mut dx] {
        g.fill_bytes(b, 0xff)?;
    }
    for b in [&mut dtopk, &mut dw1, &mut dw2] {
        g.fill_bytes(b, 0xff)?;
    }
    let saved = layer.forward(&inp, &mut out)?;
    let gr = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved, &dy, &inp, gr)?;
    g.sync()?;
    layer.routing_error()?;
    let cat = |f: fn(&RankOutput) -> &Vec<f64>| outs.iter().flat_map(|o| f(o).iter().copied()).collect::<Vec<f64>>();
    let b16 = |v: Vec<bf16>| v.iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    let f32s = |v: Vec<f32>| v.iter().map(|&x| x as f64).collect::<Vec<f64>>();
    println!("The MoE layer on the GPU ({t} tokens, EP = 1) against the CPU reference:");
    let checks = [
        ("y", b16(g.download(&out)?), cat(|o| &o.y)),
        ("dx", b16(g.download(&dx)?), cat(|o| &o.dx)),
        ("dtopk", f32s(g.download(&dtopk)?), cat(|o| &o.dtopk)),
        ("dW1", f32s(g.download(&dw1)?), grads.dw1.clone()),
        ("dW2", f32s(g.download(&dw2)?), grads.dw2.clone()),
    ];
    let mut bad = Vec::new();
    for (what, got, want) in &checks {
        match check::close(what, got, want, 1e-2) {
            Ok(e) => println!("  ok    {what:<6} rel err {e:.2e}"),
            Err(m) => {
                println!("  FAIL  {m}");
                bad.push(*what);
            }
        }
    }
    // timing: a larger batch, fresh random inputs, device events, median of 10 after 3 warm-ups
    let tt = 4096;
    let big = inputs(rng, s, &[tt]);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, tt, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg)?;
    let (x, ids, w, dy) = (g.upload(&big.x)?, g.upload(&big.ids)?, g.upload(&big.w)?, g.upload(&big.dy)?);
    let inp = Inputs { tokens: tt, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let mut out = g.alloc::<bf16>(tt * s.h)?;
    let mut dx = g.alloc::<bf16>(tt * s.h)?;
    let mut dtopk = g.alloc::<f32>(tt * s.k)?;
    let mut ms = [Vec::new(), Vec::new()];
    for (pass, bwd) in [false, true].into_iter().enumerate() {
        for rep in 0..13 {
            let t_ms = g.timed(|| {
                let sv = layer.forward(&inp, &mut out)?;
                if bwd {
                    let gr = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
                    layer.backward(&sv, &dy, &inp, gr)?;
                }
                Ok(())
            })?;
            if rep >= 3 {
                ms[pass].push(t_ms);
            }
        }
    }
    let med = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let [f, fb] = ms.map(med);
    let fl = s.forward_flops(tt * s.k);
    println!(
        "  timed at T = {tt}: forward {:.0} us ({:.0} TFLOP/s), forward + backward {:.0} us ({:.0} TFLOP/s)",
        f * 1e3,
        fl / (f * 1e-3) / 1e12,
        fb * 1e3,
        3.0 * fl / (fb * 1e-3) / 1e12
    );
    if bad.is_empty() {
        Ok(())
    } else {
        Err(Error::Mismatch(format!("{bad:?} differ from the reference")))
    }
}
