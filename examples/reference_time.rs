//! Times the f64 CPU reference (`megamoe::reference::forward_backward`) at the Qwen3-30B-A3B shape:
//! `cargo run --release --example reference_time -- T` (T tokens, default 1024; every token's 8 slots on distinct
//! experts, spread evenly). The layer tests' cost on the GPU machine is mostly this reference.
use megamoe::reference::{self, RankInput, Shape, Weights};

fn main() {
    let s = Shape::QWEN3_30B_A3B;
    let t: usize = std::env::args().nth(1).map(|v| v.parse().expect("T: a token count")).unwrap_or(1024);
    let mut r = megamoe::rng::Rng::new(1);
    let ri = RankInput {
        x: (0..t * s.h).map(|_| r.sym(1.0)).collect(),
        topk_ids: (0..t * s.k).map(|q| (((q / s.k) * 37 + (q % s.k) * (s.e / s.k)) % s.e) as i32).collect(),
        topk_w: (0..t * s.k).map(|_| r.uniform()).collect(),
        dy: (0..t * s.h).map(|_| r.sym(1.0)).collect(),
    };
    let w = Weights {
        w1: (0..s.e * 2 * s.i * s.h).map(|_| r.sym(0.02)).collect(),
        w2: (0..s.e * s.h * s.i).map(|_| r.sym(0.02)).collect(),
    };
    let t0 = std::time::Instant::now();
    let (o, _) = reference::forward_backward(&s, &[ri], &w).expect("valid inputs");
    let dt = t0.elapsed().as_secs_f64();
    // forward 6 T k H I, backward 12 T k H I (z from the forward)
    let flops = 18.0 * (t * s.k) as f64 * s.h as f64 * s.i as f64;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!("T = {t}: {dt:.2} s, {:.1} GFLOP/s on {threads} threads (y[0] = {:e})", flops / dt / 1e9, o[0].y[0]);
}
