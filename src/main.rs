//! `megamoe`: the main job. On a GPU: the self-check of every Hopper primitive. Everywhere: the f64 CPU
//! reference of a small Qwen3-30B-A3B-shaped layer (forward and backward over 2 emulated ranks).
use std::process::ExitCode;
use std::time::Instant;

use megamoe::reference::{self, RankInput, Shape, Weights};
use megamoe::rng::Rng;
use megamoe::Error;

fn main() -> ExitCode {
    let seed = Rng::fresh_seed();
    let mut rng = Rng::new(seed);
    println!("megamoe {} (seed {seed}; MEGAMOE_SEED={seed} replays this run)", env!("CARGO_PKG_VERSION"));
    let mut failed = false;
    match megamoe::gpu(0) {
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
                    Ok(s) => println!("  ok    {name:<48} {s}"),
                    Err(e) => {
                        failed = true;
                        println!("  FAIL  {name:<48} {e}");
                    }
                }
            }
            println!("(the MoE layer on the GPU is not built yet: see the README's Status)");
        }
        Err(e @ (Error::NoDriver | Error::NoDevice { .. } | Error::UnsupportedDevice { .. })) => {
            println!("No usable GPU: {e}.");
            println!("Skipping the GPU part; running the CPU reference only.");
        }
        Err(e) => {
            println!("GPU error: {e}");
            failed = true;
        }
    }
    cpu_reference(&mut rng);
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn cpu_reference(rng: &mut Rng) {
    let s = Shape::QWEN3_30B_A3B;
    let tokens = [96usize, 32]; // two emulated ranks, uneven
    let ranks: Vec<RankInput> = tokens
        .iter()
        .map(|&t| RankInput {
            x: (0..t * s.h).map(|_| rng.sym(1.0)).collect(),
            topk_ids: (0..t).flat_map(|_| distinct(rng, s.e, s.k)).collect(),
            topk_w: (0..t * s.k).map(|_| rng.uniform() / s.k as f64).collect(),
            dy: (0..t * s.h).map(|_| rng.sym(1.0)).collect(),
        })
        .collect();
    let w = Weights {
        w1: (0..s.e * 2 * s.i * s.h).map(|_| rng.sym(0.02)).collect(),
        w2: (0..s.e * s.h * s.i).map(|_| rng.sym(0.02)).collect(),
    };
    let rows: usize = tokens.iter().sum::<usize>() * s.k;
    println!(
        "CPU reference (f64, {} threads): Qwen3-30B-A3B shape H={} I={} E={} top-{}, {} ranks with {:?} tokens ({rows} routed rows)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        s.h,
        s.i,
        s.e,
        s.k,
        tokens.len(),
        tokens
    );
    let t0 = Instant::now();
    let (outs, g) = match reference::forward_backward(&s, &ranks, &w) {
        Ok(v) => v,
        Err(e) => {
            println!("reference rejected its inputs: {e}");
            return;
        }
    };
    let dt = t0.elapsed().as_secs_f64();
    let flops = 3.0 * s.forward_flops(rows);
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
    println!("  forward + backward: {dt:.2} s ({:.2} GFLOP/s in f64)", flops / dt / 1e9);
}

/// k distinct expert ids out of e.
fn distinct(rng: &mut Rng, e: usize, k: usize) -> Vec<i32> {
    let mut v: Vec<i32> = Vec::with_capacity(k);
    while v.len() < k {
        let id = rng.below(e) as i32;
        if !v.contains(&id) {
            v.push(id);
        }
    }
    v
}
