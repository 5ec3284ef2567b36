//! Shared helpers of the GPU layer tests: random layer inputs, routings, and the comparison with the
//! f64 reference.
#![allow(dead_code)]
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::ep::{RankGrads, RankInputs};
use megamoe::gemm::WgradElem;
use megamoe::reference::{self, RankInput, Shape, Weights};
use megamoe::rng::Rng;
use megamoe::Gpu;

pub mod bad_offsets;

/// A small layer shape.
pub const SMALL: Shape = Shape { h: 256, i: 128, e: 8, k: 2 };
/// Sizes that are not multiples of the tiles: H = 320 (a partial n-tile of 256), I = 192 (a partial SwiGLU n-tile
/// of 128), contractions of 320 and 192.
pub const RAGGED: Shape = Shape { h: 320, i: 192, e: 5, k: 3 };

/// A test that needs the GPU: ignored elsewhere, run with `--ignored` on the H200.
#[macro_export]
macro_rules! gpu_test {
    ($name:ident, $body:block) => {
        #[test]
        #[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
        fn $name() $body
    };
}

/// GPU 0, or a panic saying these tests belong on the GPU machine.
pub fn gpu() -> Arc<Gpu> {
    megamoe::gpu(0).unwrap_or_else(|e| panic!("GPU tests need the GPU machine: {e}"))
}

/// The kernels `f` launches on `g`, in order, with `f`'s result (profiled: one caller at a time in a test binary;
/// a test running beside it may add its own launches). A test of a kernel choice asserts with it that the kernel
/// it means ran (an environment variable or another default could otherwise make it compare a form with itself).
pub fn kernels_of<R>(g: &Gpu, f: impl FnOnce() -> R) -> (R, Vec<&'static str>) {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|p| p.into_inner());
    g.profile_start();
    let r = f();
    let names = g.profile_end().unwrap().into_iter().map(|l| l.kernel).collect();
    (r, names)
}

/// How slots are routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Routing {
    /// k distinct uniform experts per token.
    Uniform,
    /// Every slot on expert 0 (k = 1 per token would be the same; here all k slots of a token are expert 0).
    AllOnOne,
    /// Only the even experts get rows.
    HalfEmpty,
    /// Uniform with 10% of the slots masked (-1).
    Masked10,
}

/// Host inputs of one layer call.
#[derive(Clone)]
pub struct Inputs {
    pub shape: Shape,
    pub tokens: usize,
    pub x: Vec<bf16>,
    pub ids: Vec<i32>,
    pub w: Vec<f32>,
    pub w1: Vec<bf16>,
    pub w2: Vec<bf16>,
    pub dy: Vec<bf16>,
}

pub fn rng() -> Rng {
    let seed = Rng::fresh_seed();
    eprintln!("seed {seed} (MEGAMOE_SEED={seed} replays it)");
    Rng::new(seed)
}

pub fn inputs(rng: &mut Rng, shape: Shape, tokens: usize, routing: Routing) -> Inputs {
    let (h, i, e, k) = (shape.h, shape.i, shape.e, shape.k);
    let mut ids = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut row: Vec<i32> = Vec::with_capacity(k);
        while row.len() < k {
            let id = match routing {
                Routing::AllOnOne => 0,
                Routing::HalfEmpty => 2 * rng.below(e.div_ceil(2)) as i32,
                Routing::Uniform | Routing::Masked10 => rng.below(e) as i32,
            };
            let distinct = matches!(routing, Routing::Uniform | Routing::Masked10) && k <= e;
            // half-empty: distinct only while k is below the even experts' number (at k equal to it every token
            // would take all of them, and every even expert the same rows: no ragged layout left)
            let distinct = distinct || (routing == Routing::HalfEmpty && k < e.div_ceil(2));
            if !distinct || !row.contains(&id) {
                row.push(id);
            }
        }
        if routing == Routing::Masked10 {
            for id in row.iter_mut() {
                if rng.uniform() < 0.1 {
                    *id = -1;
                }
            }
        }
        ids.extend(row);
    }
    // scales keep z and y around 1 so bf16 rounding is the dominant error
    let s1 = 1.0 / (h as f64).sqrt();
    let s2 = 2.0 / (i as f64).sqrt();
    Inputs {
        shape,
        tokens,
        x: rng.bf16_vec(tokens * h, 1.0),
        ids,
        w: (0..tokens * k).map(|_| rng.uniform() as f32).collect(),
        w1: rng.bf16_vec(e * 2 * i * h, s1 * 1.7),
        w2: rng.bf16_vec(e * h * i, s2),
        dy: rng.bf16_vec(tokens * h, 1.0),
    }
}

pub fn f64s(v: &[bf16]) -> Vec<f64> {
    reference::to_f64(v)
}

pub fn rank_input(inp: &Inputs) -> RankInput {
    RankInput {
        x: f64s(&inp.x),
        topk_ids: inp.ids.clone(),
        topk_w: inp.w.iter().map(|&v| v as f64).collect(),
        dy: f64s(&inp.dy),
    }
}

pub fn weights(inp: &Inputs) -> Weights {
    Weights { w1: f64s(&inp.w1), w2: f64s(&inp.w2) }
}

/// The reference forward of one rank holding all tokens.
pub fn reference_y(inp: &Inputs) -> Vec<f64> {
    reference::forward(&inp.shape, &[rank_input(inp)], &weights(inp)).unwrap().remove(0).y
}

/// Every rank's x, topk_ids and topk_weights (entry r of each is rank r's).
pub type RankTensors<'a> = (&'a [CudaSlice<bf16>], &'a [CudaSlice<i32>], &'a [CudaSlice<f32>]);

/// Every rank's inputs as the EP layer takes them: rank r's `tokens[r]` tokens, its tensors and its experts' W1, W2.
pub fn rank_inputs<'a>(
    tokens: &[usize],
    (x, ids, w): RankTensors<'a>,
    (w1, w2): (&'a [CudaSlice<bf16>], &'a [CudaSlice<bf16>]),
) -> Vec<RankInputs<'a>> {
    (0..tokens.len())
        .map(|i| RankInputs {
            tokens: tokens[i],
            x: &x[i],
            topk_ids: &ids[i],
            topk_weights: &w[i],
            w1: &w1[i],
            w2: &w2[i],
        })
        .collect()
}

/// Every rank's gradient buffers as the EP backward takes them: rank r's dx, dtopk, dW1 and dW2 from entry r of each.
pub fn rank_grads<'a, W: WgradElem>(
    dx: &'a mut [CudaSlice<bf16>],
    dtopk: &'a mut [CudaSlice<f32>],
    dw1: &'a mut [CudaSlice<W>],
    dw2: &'a mut [CudaSlice<W>],
) -> Vec<RankGrads<'a, W>> {
    dx.iter_mut()
        .zip(dtopk.iter_mut())
        .zip(dw1.iter_mut().zip(dw2.iter_mut()))
        .map(|((dx, dtopk), (dw1, dw2))| RankGrads { dx, dw1, dw2, dtopk })
        .collect()
}
