//! Expert parallelism, R ranks emulated on one GPU: outputs bitwise equal to the EP = 1 layer on the ranks'
//! tokens concatenated in rank order and within 1e-2 of the f64 reference (computed over the R ranks), outputs
//! poisoned before each run and checked fully written; bounded waits that end in `Error::Timeout` naming the
//! withheld rank and phase, after which the same workspace runs normally; the backward (dx, dtopk, each rank's
//! dW1 and dW2) bitwise equal to the EP = 1 backward and within 1e-2 of the reference. GPU tests: ignored
//! without a GPU.
mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{f64s, gpu, inputs, rank_grads, rng, Inputs, Routing, SMALL};
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::ep::{EpLayer, EpSaved, RankInputs};
use megamoe::ep_layout::Phase;
use megamoe::gemm::WgradElem;
use megamoe::layer::{Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save};
use megamoe::reference::{self, RankInput, Shape, Weights};
use megamoe::rng::Rng;
use megamoe::{check, Error, Gpu};

/// A shape with several experts per rank at R = 8 and k > 1 experts of one rank per token.
const MEDIUM: Shape = Shape { h: 512, i: 256, e: 16, k: 4 };

/// Where the slots go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EpRouting {
    /// The common routings of the layer tests.
    Layer(Routing),
    /// Every slot on the experts of one rank (any of them, repeats allowed).
    AllOnRank(usize),
}

/// The EP = 1 layer's output on all tokens, as raw bits, poisoned before and checked fully written.
fn ep1_bits(g: &Arc<Gpu>, inp: &Inputs) -> Vec<u16> {
    let s = inp.shape;
    let mut layer =
        MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, inp.tokens.max(1), Save::InputsOnly)).unwrap();
    let up = |v: &[bf16]| g.upload(if v.is_empty() { &[bf16::ZERO][..] } else { v }).unwrap();
    let (x, w1, w2) = (up(&inp.x), g.upload(&inp.w1).unwrap(), g.upload(&inp.w2).unwrap());
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let mut out = g.alloc::<bf16>(inp.tokens * s.h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    let li = LayerInputs { tokens: inp.tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    layer.forward(&li, &mut out).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let bits: Vec<u16> = g.download(&out).unwrap().iter().map(|v| v.to_bits()).collect();
    assert!(bits.iter().all(|&b| b != 0xffff), "the EP = 1 layer left poison in its output");
    bits
}

/// The inputs of every rank on the device, and their poisoned outputs (at least one element each, so a rank
/// with no tokens still has buffers; its one element must keep the poison).
struct Ranks {
    x: Vec<CudaSlice<bf16>>,
    ids: Vec<CudaSlice<i32>>,
    w: Vec<CudaSlice<f32>>,
    w1: Vec<CudaSlice<bf16>>,
    w2: Vec<CudaSlice<bf16>>,
    out: Vec<CudaSlice<bf16>>,
    tokens: Vec<usize>,
}

fn upload_ranks(g: &Arc<Gpu>, inp: &Inputs, tokens: &[usize]) -> Ranks {
    let s = inp.shape;
    let world = tokens.len();
    let per = s.e / world;
    let mut r =
        Ranks { x: vec![], ids: vec![], w: vec![], w1: vec![], w2: vec![], out: vec![], tokens: tokens.to_vec() };
    let mut t0 = 0;
    for (rank, &t) in tokens.iter().enumerate() {
        let pad = |n: usize| n.max(1);
        let mut x = inp.x[t0 * s.h..(t0 + t) * s.h].to_vec();
        x.resize(pad(t * s.h), bf16::ZERO);
        let mut ids = inp.ids[t0 * s.k..(t0 + t) * s.k].to_vec();
        ids.resize(pad(t * s.k), -1);
        let mut w = inp.w[t0 * s.k..(t0 + t) * s.k].to_vec();
        w.resize(pad(t * s.k), 0.0);
        r.x.push(g.upload(&x).unwrap());
        r.ids.push(g.upload(&ids).unwrap());
        r.w.push(g.upload(&w).unwrap());
        let w1 = per * 2 * s.i * s.h;
        let w2 = per * s.h * s.i;
        r.w1.push(g.upload(&inp.w1[rank * w1..(rank + 1) * w1]).unwrap());
        r.w2.push(g.upload(&inp.w2[rank * w2..(rank + 1) * w2]).unwrap());
        r.out.push(g.alloc::<bf16>(pad(t * s.h)).unwrap());
        t0 += t;
    }
    assert_eq!(t0, inp.tokens);
    r
}

/// Poison the outputs, run the forward, return its result (or the error of `check`).
fn run_ep(g: &Arc<Gpu>, layer: &mut EpLayer, r: &mut Ranks) -> Result<(), Error> {
    for o in r.out.iter_mut() {
        g.fill_bytes(o, 0xff).unwrap();
    }
    let (inp, mut outs) = io(r);
    layer.forward(&inp, &mut outs)?;
    layer.check()
}

/// Every rank's output against the EP = 1 bits (bitwise; fully written; a rank without tokens writes nothing).
fn compare(g: &Arc<Gpu>, r: &Ranks, h: usize, want: &[u16]) -> Vec<f64> {
    let mut all = Vec::with_capacity(want.len());
    let mut t0 = 0;
    for (rank, &t) in r.tokens.iter().enumerate() {
        let o: Vec<u16> = g.download(&r.out[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
        if t == 0 {
            assert_eq!(o, vec![0xffff], "rank {rank} has no tokens but its output was written");
            continue;
        }
        if let Some(i) = o.iter().position(|&b| b == 0xffff) {
            panic!("rank {rank}: out[{i}] still holds the poison (not written)");
        }
        let w = &want[t0 * h..(t0 + t) * h];
        if let Some(i) = (0..o.len()).find(|&i| o[i] != w[i]) {
            panic!(
                "rank {rank}: out[{i}] (token {}, column {}) = {:#06x}, EP = 1 gives {:#06x}",
                i / h,
                i % h,
                o[i],
                w[i]
            );
        }
        all.extend(o.iter().map(|&b| bf16::from_bits(b).to_f64()));
        t0 += t;
    }
    all
}

/// Random inputs for the ranks' tokens concatenated.
fn ep_inputs(rng: &mut Rng, s: Shape, tokens: &[usize], routing: EpRouting) -> Inputs {
    let total: usize = tokens.iter().sum();
    match routing {
        EpRouting::Layer(r) => inputs(rng, s, total, r),
        EpRouting::AllOnRank(hot) => {
            let mut inp = inputs(rng, s, total, Routing::Uniform);
            let per = s.e / tokens.len();
            for id in inp.ids.iter_mut() {
                *id = (hot * per + rng.below(per)) as i32;
            }
            inp
        }
    }
}

/// Each rank's tokens (`tokens[r]` of them, in rank order) as its own `RankInput` of the f64 reference.
fn reference_ranks(inp: &Inputs, tokens: &[usize]) -> Vec<RankInput> {
    let s = inp.shape;
    let mut t0 = 0;
    tokens
        .iter()
        .map(|&t| {
            let rank = RankInput {
                x: f64s(&inp.x[t0 * s.h..(t0 + t) * s.h]),
                topk_ids: inp.ids[t0 * s.k..(t0 + t) * s.k].to_vec(),
                topk_w: inp.w[t0 * s.k..(t0 + t) * s.k].iter().map(|&v| v as f64).collect(),
                dy: f64s(&inp.dy[t0 * s.h..(t0 + t) * s.h]),
            };
            t0 += t;
            rank
        })
        .collect()
}

/// The f64 reference over the R ranks (each rank's tokens its own `RankInput`), concatenated.
fn reference_over_ranks(inp: &Inputs, tokens: &[usize]) -> Vec<f64> {
    let w = Weights { w1: f64s(&inp.w1), w2: f64s(&inp.w2) };
    let ranks = reference_ranks(inp, tokens);
    reference::forward(&inp.shape, &ranks, &w).unwrap().into_iter().flat_map(|o| o.y).collect()
}

fn check_ep(s: Shape, tokens: &[usize], routing: EpRouting) {
    check_ep_mode(s, tokens, routing, Mode::PUSH);
}

/// How the forward moves rows: dispatch by push or by GEMM1's movers pulling them; combine by copying the y rows
/// back or by GEMM2 scattering them straight to their sources; with `save_z` GEMM1 also stores z for the backward
/// (`Save::WithZ`: no recompute).
#[derive(Clone, Copy, Debug)]
struct Mode {
    pull: bool,
    scatter: bool,
    save_z: bool,
}

impl Mode {
    const PUSH: Mode = Mode { pull: false, scatter: false, save_z: false };
    const PULL: Mode = Mode { pull: true, scatter: false, save_z: false };
    const SCATTER: Mode = Mode { pull: false, scatter: true, save_z: false };
    const BOTH: Mode = Mode { pull: true, scatter: true, save_z: false };

    fn save(self) -> Save {
        if self.save_z {
            Save::WithZ
        } else {
            Save::InputsOnly
        }
    }

    fn set(self, layer: &mut EpLayer) {
        layer.set_pull_dispatch(self.pull);
        layer.set_scatter_combine(self.scatter);
    }
}

/// An EP layer over `tokens.len()` ranks, sized for the largest rank's tokens, in `mode`.
fn ep_layer(g: &Arc<Gpu>, s: Shape, tokens: &[usize], mode: Mode) -> EpLayer {
    let max_t = tokens.iter().copied().max().unwrap().max(1);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, max_t, mode.save());
    let mut layer = EpLayer::new(g.clone(), cfg, tokens.len()).unwrap();
    mode.set(&mut layer);
    layer
}

/// `check_ep` in a given [`Mode`].
fn check_ep_mode(s: Shape, tokens: &[usize], routing: EpRouting, mode: Mode) {
    let g = gpu();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, tokens, routing);
    let want = ep1_bits(&g, &inp);
    let world = tokens.len();
    let mut layer = ep_layer(&g, s, tokens, mode);
    let mut r = upload_ranks(&g, &inp, tokens);
    run_ep(&g, &mut layer, &mut r).unwrap();
    let y = compare(&g, &r, s.h, &want);
    let e = check::close(
        &format!("EP = {world} y ({s:?}, {tokens:?}, {routing:?})"),
        &y,
        &reference_over_ranks(&inp, tokens),
        1e-2,
    )
    .unwrap();
    eprintln!("EP = {world}: bitwise equal to EP = 1; rel err against the reference {e:.3e}");
    // a second call (a new epoch over flags that already hold the last one) gives the same bits
    run_ep(&g, &mut layer, &mut r).unwrap();
    compare(&g, &r, s.h, &want);
}

gpu_test!(ep2_uneven_one_rank_empty, { check_ep(SMALL, &[37, 0], EpRouting::Layer(Routing::Uniform)) });
gpu_test!(ep4_uneven_one_rank_empty, { check_ep(SMALL, &[50, 0, 123, 7], EpRouting::Layer(Routing::Uniform)) });
gpu_test!(ep8_uneven_one_rank_empty, {
    check_ep(SMALL, &[13, 0, 77, 150, 1, 64, 200, 31], EpRouting::Layer(Routing::Uniform))
});
gpu_test!(ep8_every_row_to_one_rank, { check_ep(MEDIUM, &[40, 0, 90, 17, 5, 128, 66, 9], EpRouting::AllOnRank(5)) });
gpu_test!(ep4_every_row_to_one_rank_that_has_no_tokens, {
    check_ep(MEDIUM, &[64, 0, 31, 100], EpRouting::AllOnRank(1))
});
gpu_test!(ep4_masked_slots, { check_ep(MEDIUM, &[77, 12, 0, 140], EpRouting::Layer(Routing::Masked10)) });
gpu_test!(ep8_half_the_experts_empty, {
    check_ep(MEDIUM, &[0, 33, 70, 12, 99, 1, 45, 80], EpRouting::Layer(Routing::HalfEmpty))
});
gpu_test!(ep8_qwen3_30b_a3b_shape, {
    check_ep(Shape::QWEN3_30B_A3B, &[300, 0, 150, 257, 64, 512, 128, 33], EpRouting::Layer(Routing::Uniform))
});

gpu_test!(withheld_rank_times_out_naming_it_then_the_workspace_runs, {
    let g = gpu();
    let mut rng = rng();
    let s = MEDIUM;
    let tokens = [40usize, 0, 75, 18];
    let inp = ep_inputs(&mut rng, s, &tokens, EpRouting::Layer(Routing::Uniform));
    let want = ep1_bits(&g, &inp);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, 75, Save::InputsOnly);
    let mut layer = EpLayer::new(g.clone(), cfg, 4).unwrap();
    layer.set_timeout_ns(50_000_000);
    let mut r = upload_ranks(&g, &inp, &tokens);
    run_ep(&g, &mut layer, &mut r).unwrap(); // warm: modules loaded, a normal call first
    compare(&g, &r, s.h, &want);
    for (rank, phase) in [(2usize, Phase::Counts), (1, Phase::Dispatch), (3, Phase::Combine), (0, Phase::Dispatch)] {
        layer.debug_withhold(Some((rank, phase)));
        let t0 = Instant::now();
        match run_ep(&g, &mut layer, &mut r) {
            Err(Error::Timeout { rank: got, phase: ph, timeout_ms }) => {
                assert_eq!((got, ph), (rank, phase.name()), "withheld rank {rank} in {phase:?}");
                assert_eq!(timeout_ms, 50);
            }
            other => panic!("withheld rank {rank} in {phase:?}: expected a timeout, got {other:?}"),
        }
        let took = t0.elapsed();
        eprintln!("rank {rank} withheld in {phase:?}: timeout reported after {took:?}");
        assert!(took < Duration::from_millis(1500), "the timeout took {took:?}");
        // the same workspace, the next epoch: a normal call, bitwise the EP = 1 result
        layer.debug_withhold(None);
        run_ep(&g, &mut layer, &mut r).unwrap();
        compare(&g, &r, s.h, &want);
    }
});

gpu_test!(bad_arguments_are_rejected, {
    let g = gpu();
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 16, Save::InputsOnly);
    assert!(EpLayer::new(g.clone(), cfg, 3).is_err(), "3 ranks do not divide 8 experts");
    assert!(EpLayer::new(g.clone(), cfg, 9).is_err(), "more than 8 ranks");
    assert!(EpLayer::new(g.clone(), cfg, 0).is_err());
    let mut layer = EpLayer::new(g.clone(), cfg, 2).unwrap();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, SMALL, &[16, 16], EpRouting::Layer(Routing::Uniform));
    let mut r = upload_ranks(&g, &inp, &[16, 16]);
    r.tokens[1] = 17; // more than the configured maximum
    assert!(matches!(run_ep(&g, &mut layer, &mut r), Err(Error::InvalidArgument(_))));
    r.tokens[1] = 16;
    r.w1.swap(0, 1);
    r.w1[0] = g.upload(&inp.w1[..10]).unwrap(); // wrong local weight length
    assert!(matches!(run_ep(&g, &mut layer, &mut r), Err(Error::InvalidArgument(_))));
});

/// A weight-gradient element type of the tests: its raw bits (widened), the bits of a 0xff-filled element, its
/// value.
trait Wg: WgradElem + Copy + Default {
    const POISON: u32;
    fn bits(v: Self) -> u32;
    fn value(bits: u32) -> f64;
}

impl Wg for f32 {
    const POISON: u32 = 0xffff_ffff;
    fn bits(v: f32) -> u32 {
        v.to_bits()
    }
    fn value(bits: u32) -> f64 {
        f32::from_bits(bits) as f64
    }
}

impl Wg for bf16 {
    const POISON: u32 = 0xffff;
    fn bits(v: bf16) -> u32 {
        v.to_bits() as u32
    }
    fn value(bits: u32) -> f64 {
        bf16::from_bits(bits as u16).to_f64()
    }
}

/// The EP = 1 forward + backward (z recomputed) on all tokens: dx, dtopk, dW1, dW2 as raw bits (the weight
/// gradients in `W`).
struct Ep1Grads {
    dx: Vec<u16>,
    dtopk: Vec<u32>,
    dw1: Vec<u32>,
    dw2: Vec<u32>,
}

fn ep1_backward<W: Wg>(g: &Arc<Gpu>, inp: &Inputs) -> Ep1Grads {
    let s = inp.shape;
    let t = inp.tokens;
    let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, t, Save::InputsOnly)).unwrap();
    let up = |v: &[bf16]| g.upload(v).unwrap();
    let (x, w1, w2, dy) = (up(&inp.x), up(&inp.w1), up(&inp.w2), up(&inp.dy));
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let li = LayerInputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let mut out = g.alloc::<bf16>(t * s.h).unwrap();
    let mut dx = g.alloc::<bf16>(t * s.h).unwrap();
    let mut dtopk = g.alloc::<f32>(t * s.k).unwrap();
    let mut dw1 = g.alloc::<W>(s.e * 2 * s.i * s.h).unwrap();
    let mut dw2 = g.alloc::<W>(s.e * s.h * s.i).unwrap();
    let saved = layer.forward(&li, &mut out).unwrap();
    let gr = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved, &dy, &li, gr).unwrap();
    g.sync().unwrap();
    Ep1Grads {
        dx: g.download(&dx).unwrap().iter().map(|v| v.to_bits()).collect(),
        dtopk: g.download(&dtopk).unwrap().iter().map(|v| v.to_bits()).collect(),
        dw1: g.download(&dw1).unwrap().into_iter().map(W::bits).collect(),
        dw2: g.download(&dw2).unwrap().into_iter().map(W::bits).collect(),
    }
}

/// `got` bitwise equal to `want`, none left at the poison `poison`.
fn same_bits<T: PartialEq + Copy + std::fmt::LowerHex>(what: &str, got: &[T], want: &[T], poison: T) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().position(|&v| v == poison) {
        panic!("{what}[{i}] still holds the poison (not written)");
    }
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!("{what}[{i}] = {:#x}, EP = 1 gives {:#x}", got[i], want[i]);
    }
}

fn check_ep_backward(s: Shape, tokens: &[usize], routing: EpRouting) {
    check_ep_backward_mode::<f32>(s, tokens, routing, Mode::PUSH);
}

/// `check_ep_backward` with the forward in a given [`Mode`] (the backward always pushes and copies) and the
/// weight gradients in `W` (the EP = 1 layer's `Grads<W>` the bits to equal).
fn check_ep_backward_mode<W: Wg>(s: Shape, tokens: &[usize], routing: EpRouting, mode: Mode) {
    let g = gpu();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, tokens, routing);
    let want_y = ep1_bits(&g, &inp);
    let want = ep1_backward::<W>(&g, &inp);
    let world = tokens.len();
    let mut layer = ep_layer(&g, s, tokens, mode);
    let mut r = upload_ranks(&g, &inp, tokens);
    let mut b = RankBufs::<W>::new(&g, &inp, tokens);
    for rep in 0..2 {
        b.poison(&g);
        for o in r.out.iter_mut() {
            g.fill_bytes(o, 0xff).unwrap();
        }
        let (li, mut outs) = io(&mut r);
        let saved = layer.forward(&li, &mut outs).unwrap();
        b.backward(&mut layer, &saved, &li).unwrap();
        layer.check().unwrap();
        compare(&g, &r, s.h, &want_y);
        let (all_dx, all_tk) = b.same_as(&g, s, &want);
        if rep == 0 {
            // the f64 reference over the R ranks (EP = 1 equals EP = R bitwise, so once is enough)
            let ranks = reference_ranks(&inp, tokens);
            let w = Weights { w1: f64s(&inp.w1), w2: f64s(&inp.w2) };
            let (outs, grads) = reference::forward_backward(&s, &ranks, &w).unwrap();
            let dx_ref: Vec<f64> = outs.iter().flat_map(|o| o.dx.iter().copied()).collect();
            let tk_ref: Vec<f64> = outs.iter().flat_map(|o| o.dtopk.iter().copied()).collect();
            let f = |v: &[u32]| v.iter().map(|&b| W::value(b)).collect::<Vec<f64>>();
            let tag = format!("EP = {world} {s:?} {tokens:?} {routing:?}");
            for (what, got, reference) in [
                ("dx", all_dx.clone(), dx_ref),
                ("dtopk", all_tk.clone(), tk_ref),
                ("dW1", f(&want.dw1), grads.dw1),
                ("dW2", f(&want.dw2), grads.dw2),
            ] {
                let e = check::close(&format!("{what} ({tag})"), &got, &reference, 1e-2).unwrap();
                eprintln!("{what} rel err {e:.3e}");
            }
        }
    }
}

/// One rank's routing holds an expert id outside -1..E (`bad`, its first slot): that rank sends no rows and
/// writes none of its outputs (out, dx and dtopk keep their poison), `check` names it, and every other result (the
/// other ranks' out, dx and dtopk, every rank's dW1 and dW2) is bitwise the EP = 1 layer's on the same tokens with
/// the bad rank's slots all masked. Then the same layer, given valid ids again, runs normally.
fn check_ep_bad_id(s: Shape, tokens: &[usize], bad: usize, mode: Mode) {
    let g = gpu();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, tokens, EpRouting::Layer(Routing::Uniform));
    assert!(tokens[bad] > 0, "the bad rank needs a token");
    let t0: usize = tokens[..bad].iter().sum();
    let mut masked_ids = inp.ids.clone();
    masked_ids[t0 * s.k..(t0 + tokens[bad]) * s.k].fill(-1);
    let masked = Inputs {
        shape: s,
        tokens: inp.tokens,
        x: inp.x.clone(),
        ids: masked_ids,
        w: inp.w.clone(),
        w1: inp.w1.clone(),
        w2: inp.w2.clone(),
        dy: inp.dy.clone(),
    };
    let want_y = ep1_bits(&g, &masked);
    let want = ep1_backward::<f32>(&g, &masked);
    let world = tokens.len();
    let per = s.e / world;
    let mut layer = ep_layer(&g, s, tokens, mode);
    let mut r = upload_ranks(&g, &inp, tokens);
    let good_ids = inp.ids[t0 * s.k..(t0 + tokens[bad]) * s.k].to_vec();
    let mut bad_ids = good_ids.clone();
    bad_ids[0] = s.e as i32;
    r.ids[bad] = g.upload(&bad_ids).unwrap();
    let (n1, n2) = (per * 2 * s.i * s.h, per * s.h * s.i);
    let mut b = RankBufs::<f32>::new(&g, &inp, tokens);
    for o in r.out.iter_mut() {
        g.fill_bytes(o, 0xff).unwrap();
    }
    b.poison(&g);
    {
        let (li, mut outs) = io(&mut r);
        let saved = layer.forward(&li, &mut outs).unwrap();
        b.backward(&mut layer, &saved, &li).unwrap();
    }
    match layer.check() {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains(&format!("rank {bad}")) && m.contains("expert id"), "{m}")
        }
        other => panic!("check after a bad expert id on rank {bad}: {other:?}"),
    }
    let mut t = 0;
    for (rank, &n) in tokens.iter().enumerate() {
        let o: Vec<u16> = g.download(&r.out[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
        let gx: Vec<u16> = g.download(&b.dx[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
        let gt: Vec<u32> = g.download(&b.dtopk[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
        if rank == bad {
            assert!(o.iter().all(|&b| b == 0xffff), "rank {bad} (bad id): its out was written");
            assert!(gx.iter().all(|&b| b == 0xffff), "rank {bad} (bad id): its dx was written");
            assert!(gt.iter().all(|&b| b == 0xffff_ffff), "rank {bad} (bad id): its dtopk was written");
        } else if n > 0 {
            same_bits(&format!("rank {rank} out"), &o, &want_y[t * s.h..(t + n) * s.h], 0xffff);
            same_bits(&format!("rank {rank} dx"), &gx, &want.dx[t * s.h..(t + n) * s.h], 0xffff);
            same_bits(&format!("rank {rank} dtopk"), &gt, &want.dtopk[t * s.k..(t + n) * s.k], 0xffff_ffff);
        }
        let g1: Vec<u32> = g.download(&b.dw1[rank]).unwrap().into_iter().map(f32::to_bits).collect();
        let g2: Vec<u32> = g.download(&b.dw2[rank]).unwrap().into_iter().map(f32::to_bits).collect();
        same_bits(&format!("rank {rank} dW1"), &g1, &want.dw1[rank * n1..(rank + 1) * n1], 0xffff_ffff);
        same_bits(&format!("rank {rank} dW2"), &g2, &want.dw2[rank * n2..(rank + 1) * n2], 0xffff_ffff);
        t += n;
    }
    // valid ids again: the next call's routing clears the error and every rank's output is the EP = 1 layer's
    r.ids[bad] = g.upload(&good_ids).unwrap();
    run_ep(&g, &mut layer, &mut r).unwrap();
    let want_good = ep1_bits(&g, &inp);
    compare(&g, &r, s.h, &want_good);
    // a forward with the bad id, then one with valid ids, one check: the later routing cleared the routing's error
    // word, the dispatch's routing-error epoch still names the rank; then the layer runs normally
    for ids in [&bad_ids, &good_ids] {
        r.ids[bad] = g.upload(ids).unwrap();
        let (li, mut outs) = io(&mut r);
        layer.forward(&li, &mut outs).unwrap();
    }
    match layer.check() {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains(&format!("rank {bad}")) && m.contains("since the last check"), "{m}")
        }
        other => panic!("check after a bad expert id on rank {bad} in an earlier forward: {other:?}"),
    }
    run_ep(&g, &mut layer, &mut r).unwrap();
    compare(&g, &r, s.h, &want_good);
}

gpu_test!(ep4_bad_expert_id_on_one_rank, { check_ep_bad_id(MEDIUM, &[50, 19, 123, 7], 1, Mode::PUSH) });
gpu_test!(ep2_bad_expert_id_pull_scatter, { check_ep_bad_id(SMALL, &[37, 64], 0, Mode::BOTH) });

gpu_test!(ep4_backward_uneven_one_rank_empty, {
    check_ep_backward(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10))
});
gpu_test!(ep8_backward_every_row_to_one_rank, {
    check_ep_backward(MEDIUM, &[40, 0, 90, 17, 5, 128, 66, 9], EpRouting::AllOnRank(2))
});
gpu_test!(ep2_backward_small, { check_ep_backward(SMALL, &[0, 61], EpRouting::Layer(Routing::Uniform)) });
// the weight gradients in bf16 (`RankGrads<bf16>`): bitwise the EP = 1 layer's `Grads<bf16>`
gpu_test!(ep4_backward_bf16_weight_gradients, {
    check_ep_backward_mode::<bf16>(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10), Mode::PUSH)
});
gpu_test!(ep8_backward_bf16_weight_gradients_every_row_to_one_rank, {
    check_ep_backward_mode::<bf16>(MEDIUM, &[40, 0, 90, 17, 5, 128, 66, 9], EpRouting::AllOnRank(2), Mode::PUSH)
});

/// One model layer's share of `check_ep_two_layers`: its inputs on the ranks, its gradient buffers, its FP8
/// weights (an FP8 run) and its single-GPU twin's bits (out, and dx, dtopk, dW1, dW2 in f32).
struct Part {
    inp: Inputs,
    r: Ranks,
    b: RankBufs,
    w8: Vec<megamoe::layer::Fp8Weights>,
    want_y: Vec<u16>,
    want: Ep1Grads,
}

impl Part {
    /// `inp` over `tokens`; with `fp8` (the twin's configuration) the FP8 forward and backward.
    fn new(g: &Arc<Gpu>, layer: &EpLayer, inp: Inputs, tokens: &[usize], fp8: Option<LayerConfig>) -> Part {
        let (want_y, want) = match fp8 {
            None => (ep1_bits(g, &inp), ep1_backward::<f32>(g, &inp)),
            Some(cfg) => ep1_fp8_backward::<f32>(g, &inp, cfg),
        };
        let r = upload_ranks(g, &inp, tokens);
        let mut w8 = Vec::new();
        for rank in 0..tokens.len() {
            if fp8.is_some() {
                let mut w = layer.alloc_fp8_weights().unwrap();
                layer.quantize_fp8_weights(&mut w, &r.w1[rank], &r.w2[rank]).unwrap();
                w8.push(w);
            }
        }
        let b = RankBufs::new(g, &inp, tokens);
        Part { inp, r, b, w8, want_y, want }
    }

    /// The forward into the poisoned outputs.
    fn forward(&mut self, g: &Gpu, layer: &mut EpLayer) -> EpSaved {
        for o in self.r.out.iter_mut() {
            g.fill_bytes(o, 0xff).unwrap();
        }
        if self.w8.is_empty() {
            let (li, mut outs) = io(&mut self.r);
            layer.forward(&li, &mut outs).unwrap()
        } else {
            let (fi, mut outs) = io_fp8(&mut self.r, &self.w8);
            layer.forward_fp8(&fi, &mut outs).unwrap()
        }
    }

    /// The backward of `saved` into the poisoned gradients.
    fn backward(&mut self, g: &Gpu, layer: &mut EpLayer, saved: &EpSaved) {
        self.b.poison(g);
        let li = rank_inputs(&self.r);
        if self.w8.is_empty() {
            self.b.backward(layer, saved, &li).unwrap();
        } else {
            self.b.backward_fp8(layer, saved, &li, &self.w8).unwrap();
        }
    }

    /// Out and every gradient bitwise the twin's, fully written; the gradients as values (dx, dtopk, dW1, dW2).
    fn same(&self, g: &Arc<Gpu>, s: Shape) -> [Vec<f64>; 4] {
        compare(g, &self.r, s.h, &self.want_y);
        let (dx, tk) = self.b.same_as(g, s, &self.want);
        let f = |v: &[u32]| v.iter().map(|&b| f32::from_bits(b) as f64).collect::<Vec<f64>>();
        [dx, tk, f(&self.want.dw1), f(&self.want.dw2)]
    }
}

/// One EP layer serving two model layers (`EpSaved`): A's and B's forwards (their own tokens, routing and
/// weights), then their backwards in either order: B's on what the workspace holds, A's sending its x rows (or
/// codes) again; then A's first, B's after it sending its rows again, and B's a second time on what that left.
/// Every output and gradient bitwise each one's single-GPU twin (bf16, or FP8 with `fp8`'s configuration), every
/// buffer poisoned before its call; the bf16 gradients of both against the f64 reference.
fn check_ep_two_layers(s: Shape, tokens: [&[usize]; 2], mode: Mode, fp8: Option<LayerConfig>) {
    let g = gpu();
    let mut rng = rng();
    let world = tokens[0].len();
    let max_t = tokens.iter().flat_map(|t| t.iter()).copied().max().unwrap().max(1);
    let cfg = match fp8 {
        Some(c) => LayerConfig { max_tokens: max_t, ..c },
        None => LayerConfig::bf16(s.h, s.i, s.e, s.k, max_t, mode.save()),
    };
    let mut layer = EpLayer::new(g.clone(), cfg, world).unwrap();
    mode.set(&mut layer);
    let mut parts: Vec<Part> = tokens
        .iter()
        .map(|t| {
            let inp = ep_inputs(&mut rng, s, t, EpRouting::Layer(Routing::Masked10));
            Part::new(&g, &layer, inp, t, fp8)
        })
        .collect();
    let tag = format!("two model layers on one EP = {world} layer ({mode:?}, FP8 {}) {s:?} {tokens:?}", fp8.is_some());
    // (the part whose backward runs, on which forward's state)
    for (round, order) in [[1, 0, 1], [0, 1, 1]].iter().enumerate() {
        let saved = [parts[0].forward(&g, &mut layer), parts[1].forward(&g, &mut layer)];
        for (i, &p) in order.iter().enumerate() {
            if round == 0 && i == 2 {
                break;
            }
            parts[p].backward(&g, &mut layer, &saved[p]);
            layer.check().unwrap();
            let v = parts[p].same(&g, s);
            if round == 0 && fp8.is_none() {
                let inp = &parts[p].inp;
                let w = Weights { w1: f64s(&inp.w1), w2: f64s(&inp.w2) };
                let (outs, grads) = reference::forward_backward(&s, &reference_ranks(inp, tokens[p]), &w).unwrap();
                let dx_ref: Vec<f64> = outs.iter().flat_map(|o| o.dx.iter().copied()).collect();
                let tk_ref: Vec<f64> = outs.iter().flat_map(|o| o.dtopk.iter().copied()).collect();
                for (what, got, want) in [
                    ("dx", &v[0], &dx_ref),
                    ("dtopk", &v[1], &tk_ref),
                    ("dW1", &v[2], &grads.dw1),
                    ("dW2", &v[3], &grads.dw2),
                ] {
                    let e = check::close(&format!("{what} of layer {p} ({tag})"), got, want, 1e-2).unwrap();
                    eprintln!("layer {p} {what} rel err {e:.3e}");
                }
            }
        }
    }
    eprintln!("{tag}: every backward bitwise its layer's own");
}

gpu_test!(ep4_one_layer_serves_two_model_layers, {
    check_ep_two_layers(MEDIUM, [&[37, 50, 0, 12], &[61, 3, 44, 20]], Mode::PUSH, None)
});
gpu_test!(ep2_one_layer_serves_two_model_layers_saved_z_pull_scatter, {
    let mode = Mode { save_z: true, ..Mode::BOTH };
    check_ep_two_layers(SMALL, [&[9, 4], &[0, 30]], mode, None)
});
gpu_test!(fp8_ep4_one_layer_serves_two_model_layers_dy_codes_saved_z, {
    use megamoe::layer::{Fp8Backward, Fp8Dy};
    let base = fp8_codes_cfg_save(MEDIUM, 1, Fp8Backward::Dx, Save::WithZ);
    let cfg = LayerConfig { fp8_dy: Fp8Dy::Codes, ..base };
    check_ep_two_layers(MEDIUM, [&[37, 50, 0, 12], &[61, 3, 44, 20]], Mode::PUSH, Some(cfg))
});
gpu_test!(fp8_ep2_one_layer_serves_two_model_layers_straight, {
    use megamoe::layer::Fp8Backward;
    let cfg = fp8_codes_cfg(MEDIUM, 1, Fp8Backward::Straight);
    check_ep_two_layers(MEDIUM, [&[40, 7], &[3, 64]], Mode::PUSH, Some(cfg))
});

// the dispatch by pull and the combine by scatter (docs/FUSED.md step 2): GEMM1's idle producer warps copy
// each received row from its source's x; GEMM2 writes each row straight to its source's slot; outputs and
// gradients bitwise those of EP = 1 (and so of the push and copy)
gpu_test!(pull_ep2_uneven_one_rank_empty, {
    check_ep_mode(SMALL, &[37, 0], EpRouting::Layer(Routing::Uniform), Mode::PULL)
});
gpu_test!(scatter_ep4_masked_slots, {
    check_ep_mode(MEDIUM, &[77, 12, 0, 140], EpRouting::Layer(Routing::Masked10), Mode::SCATTER)
});
gpu_test!(pull_scatter_ep8_every_row_to_one_rank, {
    check_ep_mode(MEDIUM, &[40, 0, 90, 17, 5, 128, 66, 9], EpRouting::AllOnRank(5), Mode::BOTH)
});
gpu_test!(pull_ep4_masked_slots, {
    check_ep_mode(MEDIUM, &[77, 12, 0, 140], EpRouting::Layer(Routing::Masked10), Mode::PULL)
});
gpu_test!(pull_scatter_ep8_qwen3_30b_a3b_shape, {
    check_ep_mode(
        Shape::QWEN3_30B_A3B,
        &[300, 0, 150, 257, 64, 512, 128, 33],
        EpRouting::Layer(Routing::Uniform),
        Mode::BOTH,
    )
});
gpu_test!(pull_scatter_ep4_backward_uneven_one_rank_empty, {
    check_ep_backward_mode::<f32>(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10), Mode::BOTH)
});
gpu_test!(scatter_ep2_backward_small, {
    check_ep_backward_mode::<f32>(SMALL, &[0, 61], EpRouting::Layer(Routing::Uniform), Mode::SCATTER)
});
// z stored by the forward's GEMM1 (`Save::WithZ`): the backward skips its recompute, bitwise the EP = 1 backward that
// recomputes it (push, and pull with scatter: the movers' GEMM1 stores z too)
gpu_test!(ep4_backward_saved_z, {
    let mode = Mode { save_z: true, ..Mode::PUSH };
    check_ep_backward_mode::<f32>(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10), mode)
});
gpu_test!(pull_scatter_ep2_backward_saved_z, {
    let mode = Mode { save_z: true, ..Mode::BOTH };
    check_ep_backward_mode::<f32>(SMALL, &[33, 61], EpRouting::Layer(Routing::Uniform), mode)
});

/// The forward on `r`'s inputs into its outputs (checked); its saved state.
fn forward_saved(layer: &mut EpLayer, r: &mut Ranks) -> EpSaved {
    let (li, mut outs) = io(r);
    let saved = layer.forward(&li, &mut outs).unwrap();
    layer.check().unwrap();
    saved
}

/// Every rank's inputs of `r` as the layer takes them, and its outputs (disjoint borrows of `r`'s fields).
fn io(r: &mut Ranks) -> (Vec<RankInputs<'_>>, Vec<&mut CudaSlice<bf16>>) {
    let Ranks { x, ids, w, w1, w2, out, tokens } = r;
    (common::rank_inputs(tokens, (x, ids, w), (w1, w2)), out.iter_mut().collect())
}

/// Every rank's inputs of `r` as the layer takes them.
fn rank_inputs(r: &Ranks) -> Vec<RankInputs<'_>> {
    common::rank_inputs(&r.tokens, (&r.x, &r.ids, &r.w), (&r.w1, &r.w2))
}

/// Every rank's dy and gradient buffers (weight gradients in W, f32 by default).
struct RankBufs<W: Wg = f32> {
    dy: Vec<CudaSlice<bf16>>,
    dx: Vec<CudaSlice<bf16>>,
    dtopk: Vec<CudaSlice<f32>>,
    dw1: Vec<CudaSlice<W>>,
    dw2: Vec<CudaSlice<W>>,
    tokens: Vec<usize>,
}

impl<W: Wg> RankBufs<W> {
    /// Each rank's slice of dy (padded to one element for a rank without tokens) and its gradient buffers.
    fn new(g: &Arc<Gpu>, inp: &Inputs, tokens: &[usize]) -> RankBufs<W> {
        let s = inp.shape;
        let per = s.e / tokens.len();
        let pad = |n: usize| n.max(1);
        let mut b =
            RankBufs { dy: vec![], dx: vec![], dtopk: vec![], dw1: vec![], dw2: vec![], tokens: tokens.to_vec() };
        let mut t0 = 0;
        for &t in tokens {
            let mut dy = inp.dy[t0 * s.h..(t0 + t) * s.h].to_vec();
            dy.resize(pad(t * s.h), bf16::ZERO);
            b.dy.push(g.upload(&dy).unwrap());
            b.dx.push(g.alloc(pad(t * s.h)).unwrap());
            b.dtopk.push(g.alloc(pad(t * s.k)).unwrap());
            b.dw1.push(g.alloc(per * 2 * s.i * s.h).unwrap());
            b.dw2.push(g.alloc(per * s.h * s.i).unwrap());
            t0 += t;
        }
        b
    }

    /// Every gradient buffer filled with 0xff bytes.
    fn poison(&mut self, g: &Gpu) {
        for b in self.dx.iter_mut() {
            g.fill_bytes(b, 0xff).unwrap();
        }
        for b in self.dtopk.iter_mut() {
            g.fill_bytes(b, 0xff).unwrap();
        }
        for b in self.dw1.iter_mut().chain(self.dw2.iter_mut()) {
            g.fill_bytes(b, 0xff).unwrap();
        }
    }

    /// The backward of `saved` on `li` into these buffers.
    fn backward(&mut self, layer: &mut EpLayer, saved: &EpSaved, li: &[RankInputs<'_>]) -> Result<(), Error> {
        let dys: Vec<&CudaSlice<bf16>> = self.dy.iter().collect();
        let mut grads = rank_grads::<W>(&mut self.dx, &mut self.dtopk, &mut self.dw1, &mut self.dw2);
        layer.backward(saved, &dys, li, &mut grads, false)
    }

    /// The FP8 backward of `saved` on `li` and the ranks' FP8 weights `w8` into these buffers.
    fn backward_fp8(
        &mut self,
        layer: &mut EpLayer,
        saved: &EpSaved,
        li: &[RankInputs<'_>],
        w8: &[megamoe::layer::Fp8Weights],
    ) -> Result<(), Error> {
        let dys: Vec<&CudaSlice<bf16>> = self.dy.iter().collect();
        let w8: Vec<&megamoe::layer::Fp8Weights> = w8.iter().collect();
        let mut grads = rank_grads::<W>(&mut self.dx, &mut self.dtopk, &mut self.dw1, &mut self.dw2);
        layer.backward_fp8(saved, &dys, li, &w8, &mut grads, false)
    }

    /// Every rank's gradients bitwise the EP = 1 ones of `want` (dx and dtopk of the rank's tokens, dW1 and dW2
    /// of its experts), none left at the poison, a rank without tokens' dx and dtopk unwritten; the ranks' dx and
    /// dtopk concatenated, as values.
    fn same_as(&self, g: &Gpu, s: Shape, want: &Ep1Grads) -> (Vec<f64>, Vec<f64>) {
        let per = s.e / self.tokens.len();
        let (n1, n2) = (per * 2 * s.i * s.h, per * s.h * s.i);
        let mut t0 = 0;
        let (mut all_dx, mut all_tk) = (Vec::new(), Vec::new());
        for (rank, &t) in self.tokens.iter().enumerate() {
            let gx: Vec<u16> = g.download(&self.dx[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
            let gt: Vec<u32> = g.download(&self.dtopk[rank]).unwrap().iter().map(|v| v.to_bits()).collect();
            if t == 0 {
                assert_eq!(
                    (gx[0], gt[0]),
                    (0xffff, 0xffff_ffff),
                    "rank {rank} has no tokens but its dx or dtopk was written"
                );
            } else {
                same_bits(&format!("rank {rank} dx"), &gx, &want.dx[t0 * s.h..(t0 + t) * s.h], 0xffff);
                same_bits(&format!("rank {rank} dtopk"), &gt, &want.dtopk[t0 * s.k..(t0 + t) * s.k], 0xffff_ffff);
                all_dx.extend(gx.iter().map(|&b| bf16::from_bits(b).to_f64()));
                all_tk.extend(gt.iter().map(|&b| f32::from_bits(b) as f64));
            }
            let g1: Vec<u32> = g.download(&self.dw1[rank]).unwrap().into_iter().map(W::bits).collect();
            let g2: Vec<u32> = g.download(&self.dw2[rank]).unwrap().into_iter().map(W::bits).collect();
            same_bits(&format!("rank {rank} dW1 ({})", W::NAME), &g1, &want.dw1[rank * n1..(rank + 1) * n1], W::POISON);
            same_bits(&format!("rank {rank} dW2 ({})", W::NAME), &g2, &want.dw2[rank * n2..(rank + 1) * n2], W::POISON);
            t0 += t;
        }
        (all_dx, all_tk)
    }
}

impl RankBufs<f32> {
    /// Whether every element of every rank's gradients still holds the poison (`untouched`) or, for a backward
    /// that ran, none does (the dx and dtopk of a rank without tokens excepted).
    fn assert_poison(&self, g: &Gpu, untouched: bool, what: &str) {
        g.sync().unwrap();
        for (r, &t) in self.tokens.iter().enumerate() {
            let b16: Vec<u32> = g.download(&self.dx[r]).unwrap().iter().map(|v| v.to_bits() as u32).collect();
            let b32 = |v: &CudaSlice<f32>| -> Vec<u32> { g.download(v).unwrap().iter().map(|v| v.to_bits()).collect() };
            let bufs = [
                ("dx", b16, 0xffff, t > 0),
                ("dtopk", b32(&self.dtopk[r]), 0xffff_ffff, t > 0),
                ("dW1", b32(&self.dw1[r]), 0xffff_ffff, true),
                ("dW2", b32(&self.dw2[r]), 0xffff_ffff, true),
            ];
            for (name, v, poison, written) in bufs {
                if untouched {
                    if let Some(i) = v.iter().position(|&x| x != poison) {
                        panic!("{what}: rank {r} {name}[{i}] = {:#x} was written by a refused backward", v[i]);
                    }
                } else if written {
                    if let Some(i) = v.iter().position(|&x| x == poison) {
                        panic!("{what}: rank {r} {name}[{i}] still holds the poison (not written)");
                    }
                }
            }
        }
    }
}

/// `res` is an `Error::InvalidArgument` whose message holds `needs`.
fn refused(res: Result<(), Error>, needs: &str, what: &str) {
    match res {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains(needs), "{what}: the message {m:?} does not say {needs:?}");
            eprintln!("{what}: refused: {m}");
        }
        other => panic!("{what}: expected an InvalidArgument saying {needs:?}, got {other:?}"),
    }
}

// A backward's inputs are checked as the forward's, every rank's before any launch: a short W1, W2 or topk_ids
// of rank 1 (read past their ends by TMA and by the dispatch) is an `InvalidArgument`, and no rank's gradients
// are written (rank 0's included); the failed calls (and a refused forward) began nothing, so the same saved state
// then runs.
gpu_test!(backward_with_short_inputs_is_refused_and_writes_nothing, {
    let g = gpu();
    let s = SMALL;
    let tokens = [9usize, 14];
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, &tokens, EpRouting::Layer(Routing::Uniform));
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, 14, Save::InputsOnly);
    let mut layer = EpLayer::new(g.clone(), cfg, 2).unwrap();
    let mut r = upload_ranks(&g, &inp, &tokens);
    let mut b = RankBufs::new(&g, &inp, &tokens);
    let saved = forward_saved(&mut layer, &mut r);
    let per = s.e / 2;
    let short_w1 = g.upload(&inp.w1[..per * 2 * s.i * s.h - 64]).unwrap();
    let short_w2 = g.upload(&inp.w2[..per * s.h * s.i / 2]).unwrap();
    let short_ids = g.upload(&inp.ids[..tokens[1] * s.k - 1]).unwrap();
    let short_w = g.upload(&inp.w[..1]).unwrap();
    for (case, needs) in [
        ("W1", "rank 1: W1 has"),
        ("W2", "rank 1: W2 has"),
        ("topk_ids", "rank 1: topk_ids has"),
        ("topk_weights", "rank 1: topk_weights has"),
    ] {
        let mut li = rank_inputs(&r);
        match case {
            "W1" => li[1].w1 = &short_w1,
            "W2" => li[1].w2 = &short_w2,
            "topk_ids" => li[1].topk_ids = &short_ids,
            _ => li[1].topk_weights = &short_w,
        }
        b.poison(&g);
        refused(b.backward(&mut layer, &saved, &li), needs, &format!("a short {case}"));
        b.assert_poison(&g, true, &format!("a short {case}"));
    }
    // a short dy of rank 1 too
    let dy1 = std::mem::replace(&mut b.dy[1], g.alloc(tokens[1] * s.h - 1).unwrap());
    b.poison(&g);
    refused(b.backward(&mut layer, &saved, &rank_inputs(&r)), "rank 1: dy has", "a short dy");
    b.assert_poison(&g, true, "a short dy");
    b.dy[1] = dy1;
    // a refused forward begins no call either (its outputs untouched): the saved state stays the latest
    for o in r.out.iter_mut() {
        g.fill_bytes(o, 0xff).unwrap();
    }
    let li: Vec<RankInputs> = (0..2)
        .map(|i| RankInputs {
            tokens: r.tokens[i],
            x: &r.x[i],
            topk_ids: &r.ids[i],
            topk_weights: &r.w[i],
            w1: if i == 1 { &short_w1 } else { &r.w1[i] },
            w2: &r.w2[i],
        })
        .collect();
    let mut outs: Vec<&mut CudaSlice<bf16>> = r.out.iter_mut().collect();
    refused(layer.forward(&li, &mut outs).map(|_| ()), "rank 1: W1 has", "a forward with a short W1");
    g.sync().unwrap();
    for (rank, o) in r.out.iter().enumerate() {
        let bits: Vec<u16> = g.download(o).unwrap().iter().map(|v| v.to_bits()).collect();
        assert!(bits.iter().all(|&v| v == 0xffff), "a refused forward wrote rank {rank}'s output");
    }
    layer.check().unwrap();
    b.poison(&g);
    b.backward(&mut layer, &saved, &rank_inputs(&r)).unwrap();
    layer.check().unwrap();
    b.assert_poison(&g, false, "the backward after the refused ones");
});

// A saved state is taken only by the layer whose forward made it: another layer's (with the same call number)
// is an `InvalidArgument` and writes nothing, with the same number of ranks (the workspace is another
// forward's) or another (its token counts were indexed by this layer's ranks: a panic); each layer's own state
// then runs.
gpu_test!(backward_refuses_another_layers_saved_state, {
    let g = gpu();
    let s = SMALL;
    let mut rng = rng();
    let two = [9usize, 14];
    let four = [5usize, 0, 12, 7];
    let inp2 = ep_inputs(&mut rng, s, &two, EpRouting::Layer(Routing::Uniform));
    let inp4 = ep_inputs(&mut rng, s, &four, EpRouting::Layer(Routing::Uniform));
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, 14, Save::InputsOnly);
    // layers a and b over 2 ranks, c over 4
    let mut layers: Vec<EpLayer> = [2, 2, 4].iter().map(|&w| EpLayer::new(g.clone(), cfg, w).unwrap()).collect();
    let mut r2 = upload_ranks(&g, &inp2, &two);
    let mut r4 = upload_ranks(&g, &inp4, &four);
    // one forward each: every saved state carries call number 1
    let saved = [
        forward_saved(&mut layers[0], &mut r2),
        forward_saved(&mut layers[1], &mut r2),
        forward_saved(&mut layers[2], &mut r4),
    ];
    let mut b2 = RankBufs::new(&g, &inp2, &two);
    let mut b4 = RankBufs::new(&g, &inp4, &four);
    let name = ["a", "b", "c"];
    // (layer, saved state): another layer's state, then each layer's own
    for (l, st) in [(1, 0), (2, 0), (0, 2), (0, 0), (1, 1), (2, 2)] {
        let what = format!("layer {} ({} ranks), layer {}'s state", name[l], layers[l].world(), name[st]);
        let (bufs, r) = if layers[l].world() == 2 { (&mut b2, &r2) } else { (&mut b4, &r4) };
        bufs.poison(&g);
        let res = bufs.backward(&mut layers[l], &saved[st], &rank_inputs(r));
        if l == st {
            res.unwrap();
        } else {
            refused(res, "another EP layer", &what);
        }
        layers[l].check().unwrap();
        bufs.assert_poison(&g, l != st, &what);
    }
});

/// `io` for the FP8 forward: every rank's inputs with its FP8 weights `w8[r]`, and its outputs.
fn io_fp8<'a>(
    r: &'a mut Ranks,
    w8: &'a [megamoe::layer::Fp8Weights],
) -> (Vec<megamoe::ep::RankFp8Inputs<'a>>, Vec<&'a mut CudaSlice<bf16>>) {
    let Ranks { x, ids, w, out, tokens, .. } = r;
    let fi = (0..tokens.len())
        .map(|i| megamoe::ep::RankFp8Inputs {
            tokens: tokens[i],
            x: &x[i],
            topk_ids: &ids[i],
            topk_weights: &w[i],
            weights: &w8[i],
        })
        .collect();
    (fi, out.iter_mut().collect())
}

/// The single-GPU FP8 forward's output on all tokens (weights quantized by the layer), as raw bits, poisoned
/// before and checked fully written.
fn ep1_fp8_bits(g: &Arc<Gpu>, inp: &Inputs) -> Vec<u16> {
    use megamoe::layer::{Fp8Inputs, Fp8Weights};
    let s = inp.shape;
    let mut layer =
        MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, inp.tokens.max(1), Save::InputsOnly)).unwrap();
    let up = |v: &[bf16]| g.upload(if v.is_empty() { &[bf16::ZERO][..] } else { v }).unwrap();
    let (x, w1, w2) = (up(&inp.x), g.upload(&inp.w1).unwrap(), g.upload(&inp.w2).unwrap());
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(g, &w1, &w2, &layer).unwrap();
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let mut out = g.alloc::<bf16>(inp.tokens * s.h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    let mut saved = layer.alloc_saved(inp.tokens).unwrap();
    let li = Fp8Inputs { tokens: inp.tokens, x: &x, topk_ids: &ids, topk_weights: &w, weights: &fw };
    layer.forward_fp8(&li, &mut out, &mut saved).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let bits: Vec<u16> = g.download(&out).unwrap().iter().map(|v| v.to_bits()).collect();
    assert!(bits.iter().all(|&b| b != 0xffff), "the single-GPU FP8 forward left poison in its output");
    bits
}

/// The FP8 forward at EP = R (rows sent as codes and scales) against the single-GPU FP8 forward on the same
/// tokens, bitwise, every output poisoned first; against the f64 bf16 reference within the format's error; twice
/// (a new epoch); its saved state refused by the bf16 backward; bad FP8 arguments refused.
fn check_ep_fp8(s: Shape, tokens: &[usize], routing: EpRouting) {
    let g = gpu();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, tokens, routing);
    let want = ep1_fp8_bits(&g, &inp);
    let world = tokens.len();
    let mut layer = ep_layer(&g, s, tokens, Mode::PUSH);
    let mut r = upload_ranks(&g, &inp, tokens);
    let mut w8 = Vec::new();
    for rank in 0..world {
        let mut w = layer.alloc_fp8_weights().unwrap();
        layer.quantize_fp8_weights(&mut w, &r.w1[rank], &r.w2[rank]).unwrap();
        w8.push(w);
    }
    let mut saved = None;
    for call in 0..2 {
        for o in r.out.iter_mut() {
            g.fill_bytes(o, 0xff).unwrap();
        }
        {
            let (fi, mut outs) = io_fp8(&mut r, &w8);
            saved = Some(layer.forward_fp8(&fi, &mut outs).unwrap());
        }
        layer.check().unwrap();
        let y = compare(&g, &r, s.h, &want);
        if call == 0 {
            let d = check::rel_err(&y, &reference_over_ranks(&inp, tokens));
            eprintln!(
                "FP8 EP = {world}: bitwise the single-GPU FP8 forward; rel err {d:.3e} against the bf16 reference"
            );
            assert!(d < 0.1, "the FP8 EP forward is {d} away from the bf16 reference");
        }
    }
    // the bf16 backward refuses the FP8 forward's state before anything runs
    let mut b = RankBufs::<f32>::new(&g, &inp, tokens);
    b.poison(&g);
    refused(b.backward(&mut layer, saved.as_ref().unwrap(), &rank_inputs(&r)), "of an FP8 forward", "FP8 state");
    b.assert_poison(&g, true, "the bf16 backward of an FP8 forward");
    // bad arguments: one rank's W2 codes for another shape, then a rank missing; nothing launched (the outputs
    // keep their poison)
    for o in r.out.iter_mut() {
        g.fill_bytes(o, 0xff).unwrap();
    }
    let mut short = layer.alloc_fp8_weights().unwrap();
    short.w2 = g.alloc::<u8>(short.w2.len() - 128).unwrap();
    let (mut fi, mut outs) = io_fp8(&mut r, &w8);
    fi[world - 1].weights = &short;
    let e = layer.forward_fp8(&fi, &mut outs).unwrap_err().to_string();
    assert!(e.contains(&format!("rank {}: W2's codes has", world - 1)), "{e}");
    fi.pop();
    let e = layer.forward_fp8(&fi, &mut outs).unwrap_err().to_string();
    assert!(e.contains(&format!("{} inputs for {world} ranks", world - 1)), "{e}");
    g.sync().unwrap();
    for (rank, o) in r.out.iter().enumerate() {
        assert!(g.download(o).unwrap().iter().all(|v| v.to_bits() == 0xffff), "rank {rank}: a refused call wrote");
    }
}

gpu_test!(fp8_ep2_uneven_one_rank_empty, { check_ep_fp8(MEDIUM, &[37, 0], EpRouting::Layer(Routing::Uniform)) });
gpu_test!(fp8_ep4_every_row_to_one_rank_that_has_no_tokens, {
    check_ep_fp8(MEDIUM, &[50, 0, 123, 7], EpRouting::AllOnRank(1))
});
gpu_test!(fp8_ep8_uneven_masked, {
    check_ep_fp8(MEDIUM, &[13, 0, 77, 150, 1, 64, 200, 31], EpRouting::Layer(Routing::Masked10))
});

gpu_test!(fp8_ep_refuses_widths_the_fp8_kernels_do_not_take, {
    // H = 256 (SMALL) is not a multiple of 512
    let g = gpu();
    let mut rng = rng();
    let tokens = [20, 9];
    let inp = ep_inputs(&mut rng, SMALL, &tokens, EpRouting::Layer(Routing::Uniform));
    let mut layer = ep_layer(&g, SMALL, &tokens, Mode::PUSH);
    let mut r = upload_ranks(&g, &inp, &tokens);
    let w8: Vec<_> = (0..2).map(|_| layer.alloc_fp8_weights().unwrap()).collect();
    let (fi, mut outs) = io_fp8(&mut r, &w8);
    let e = layer.forward_fp8(&fi, &mut outs).unwrap_err().to_string();
    assert!(e.contains("H = 256 must be a multiple of 512"), "{e}");
});

/// A layer configuration whose FP8 backward runs `mode` and takes dW1 from x's codes (what the EP FP8 backward
/// computes), for `t` tokens at most.
fn fp8_codes_cfg(s: Shape, t: usize, mode: megamoe::layer::Fp8Backward) -> LayerConfig {
    fp8_codes_cfg_save(s, t, mode, Save::InputsOnly)
}

/// `fp8_codes_cfg` saving `save`.
fn fp8_codes_cfg_save(s: Shape, t: usize, mode: megamoe::layer::Fp8Backward, save: Save) -> LayerConfig {
    use megamoe::layer::Fp8Dw1X;
    LayerConfig {
        fp8_backward: mode,
        fp8_dw1_x: Fp8Dw1X::Codes,
        ..LayerConfig::bf16(s.h, s.i, s.e, s.k, t.max(1), save)
    }
}

/// The single-GPU FP8 forward and backward (`Fp8Dw1X::Codes`, `mode`) on all tokens: out's bits, and dx, dtopk,
/// dW1, dW2 as raw bits (the weight gradients in `W`), every output poisoned before and checked fully written.
fn ep1_fp8_backward<W: Wg>(g: &Arc<Gpu>, inp: &Inputs, cfg: LayerConfig) -> (Vec<u16>, Ep1Grads) {
    use megamoe::layer::{Fp8Inputs, Fp8Weights};
    let s = inp.shape;
    let t = inp.tokens;
    let mut layer = MoeLayer::new(g.clone(), LayerConfig { max_tokens: t.max(1), ..cfg }).unwrap();
    let up = |v: &[bf16]| g.upload(v).unwrap();
    let (x, w1, w2, dy) = (up(&inp.x), up(&inp.w1), up(&inp.w2), up(&inp.dy));
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(g, &w1, &w2, &layer).unwrap();
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let mut out = g.alloc::<bf16>(t * s.h).unwrap();
    let mut dx = g.alloc::<bf16>(t * s.h).unwrap();
    let mut dtopk = g.alloc::<f32>(t * s.k).unwrap();
    let mut dw1 = g.alloc::<W>(s.e * 2 * s.i * s.h).unwrap();
    let mut dw2 = g.alloc::<W>(s.e * s.h * s.i).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    g.fill_bytes(&mut dx, 0xff).unwrap();
    g.fill_bytes(&mut dtopk, 0xff).unwrap();
    g.fill_bytes(&mut dw1, 0xff).unwrap();
    g.fill_bytes(&mut dw2, 0xff).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let fi = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, weights: &fw };
    layer.forward_fp8(&fi, &mut out, &mut saved).unwrap();
    let li = LayerInputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let gr = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward_fp8(&saved, &dy, &li, &fw, gr).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let y: Vec<u16> = g.download(&out).unwrap().iter().map(|v| v.to_bits()).collect();
    assert!(y.iter().all(|&b| b != 0xffff), "the single-GPU FP8 forward left poison in its output");
    let grads = Ep1Grads {
        dx: g.download(&dx).unwrap().iter().map(|v| v.to_bits()).collect(),
        dtopk: g.download(&dtopk).unwrap().iter().map(|v| v.to_bits()).collect(),
        dw1: g.download(&dw1).unwrap().into_iter().map(W::bits).collect(),
        dw2: g.download(&dw2).unwrap().into_iter().map(W::bits).collect(),
    };
    (y, grads)
}

/// The FP8 backward at EP = R (`EpLayer::backward_fp8`: z from the codes the forward sent, dy in bf16, dx in FP8
/// with `Fp8Backward::Dx`, dW1 from the dequantized codes) against the single-GPU FP8 backward with
/// `Fp8Dw1X::Codes` on the same tokens, bitwise (y, dx, dtopk, dW1, dW2; every output poisoned first), twice (a
/// new epoch); once against the f64 model of that backward (`reference::forward_backward_fp8` with `dw1_codes`).
fn check_ep_fp8_backward<W: Wg>(s: Shape, tokens: &[usize], routing: EpRouting, mode: megamoe::layer::Fp8Backward) {
    check_ep_fp8_backward_cfg::<W>(s, tokens, routing, fp8_codes_cfg(s, 1, mode))
}

/// `check_ep_fp8_backward` with the layers (EP and its single-GPU twin) of `cfg` (its `max_tokens` set by each):
/// e.g. `Save::WithZ` (the FP8 GEMM1 stores z, the backward skips its recompute) or `Fp8Dy::Codes` (dy travels as
/// codes; the model's dy is then their bf16 values).
fn check_ep_fp8_backward_cfg<W: Wg>(s: Shape, tokens: &[usize], routing: EpRouting, cfg: LayerConfig) {
    let (mode, save) = (cfg.fp8_backward, cfg.save);
    let g = gpu();
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, tokens, routing);
    let (want_y, want) = ep1_fp8_backward::<W>(&g, &inp, cfg);
    let world = tokens.len();
    let max_t = tokens.iter().copied().max().unwrap().max(1);
    let mut layer = EpLayer::new(g.clone(), LayerConfig { max_tokens: max_t, ..cfg }, world).unwrap();
    let mut r = upload_ranks(&g, &inp, tokens);
    let mut w8 = Vec::new();
    for rank in 0..world {
        let mut w = layer.alloc_fp8_weights().unwrap();
        layer.quantize_fp8_weights(&mut w, &r.w1[rank], &r.w2[rank]).unwrap();
        w8.push(w);
    }
    let mut b = RankBufs::<W>::new(&g, &inp, tokens);
    let tag = format!(
        "FP8 EP = {world} backward ({mode:?}, {}, {save:?}, dy {:?}) {s:?} {tokens:?} {routing:?}",
        W::NAME,
        cfg.fp8_dy
    );
    for rep in 0..2 {
        b.poison(&g);
        for o in r.out.iter_mut() {
            g.fill_bytes(o, 0xff).unwrap();
        }
        let saved = {
            let (fi, mut outs) = io_fp8(&mut r, &w8);
            layer.forward_fp8(&fi, &mut outs).unwrap()
        };
        b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8).unwrap();
        layer.check().unwrap();
        compare(&g, &r, s.h, &want_y);
        let (all_dx, all_tk) = b.same_as(&g, s, &want);
        if rep == 0 {
            // the CPU model: z from the dequantized codes of x and W1 (each rank's codes are the concatenation's:
            // rows and 128 x 128 blocks of one expert), dW1 from x's dequantized codes, dx from dz's row codes
            let (qx, sx) = megamoe::fp8::quantize_rows_cpu(&inp.x, inp.tokens, s.h);
            let xd = megamoe::fp8::dequantize_cpu(&qx, &sx, inp.tokens, s.h, 1);
            let (q1, s1) = megamoe::fp8::quantize_blocks_cpu(&inp.w1, s.e * 2 * s.i, s.h);
            let w1d = megamoe::fp8::dequantize_cpu(&q1, &s1, s.e * 2 * s.i, s.h, 128);
            let mut xr = Vec::new();
            let mut t0 = 0;
            for &t in tokens {
                xr.push(xd[t0 * s.h..(t0 + t) * s.h].to_vec());
                t0 += t;
            }
            let zf = reference::ZFrom { x: &xr, w1: &w1d };
            let dh = cfg.fp8_dh == megamoe::layer::Fp8Dh::Fp8;
            let which = reference::Fp8Grads { dx: mode.dx(), wgrad: false, dw1_codes: true, dh };
            // with dy's codes on the links the model's dy is their values, as the GPU's (bf16, bit for bit)
            let mut inp_m = inp.clone();
            if cfg.fp8_dy == megamoe::layer::Fp8Dy::Codes {
                let (qd, sd) = megamoe::fp8::quantize_rows_cpu(&inp.dy, inp.tokens, s.h);
                inp_m.dy = megamoe::fp8::dequantize_rows_bf16_cpu(&qd, &sd, inp.tokens, s.h);
            }
            let ranks = reference_ranks(&inp_m, tokens);
            let w = Weights { w1: f64s(&inp.w1), w2: f64s(&inp.w2) };
            let (outs, grads) = reference::forward_backward_fp8(&s, &ranks, &w, zf, which).unwrap();
            let dx_ref: Vec<f64> = outs.iter().flat_map(|o| o.dx.iter().copied()).collect();
            let tk_ref: Vec<f64> = outs.iter().flat_map(|o| o.dtopk.iter().copied()).collect();
            let f = |v: &[u32]| v.iter().map(|&b| W::value(b)).collect::<Vec<f64>>();
            // the model's operands are f64 where the GPU's are bf16 (z, dz, s h): an e4m3 code now and then a step
            // apart (docs/NOTES.md: ~1e-2), so 2.5e-2 as the single-GPU FP8 backward's tests
            let mut line = format!("{tag}: bitwise the single-GPU FP8 backward; rel err against the model:");
            for (what, got, reference) in [
                ("dx", all_dx.clone(), dx_ref),
                ("dtopk", all_tk.clone(), tk_ref),
                ("dW1", f(&want.dw1), grads.dw1),
                ("dW2", f(&want.dw2), grads.dw2),
            ] {
                let e = check::close(&format!("{what} ({tag})"), &got, &reference, 2.5e-2).unwrap();
                line += &format!(" {what} {e:.3e}");
            }
            eprintln!("{line}");
        }
    }
}

gpu_test!(fp8_ep2_backward_dx_uneven_one_rank_empty, {
    use megamoe::layer::Fp8Backward;
    check_ep_fp8_backward::<f32>(MEDIUM, &[37, 0], EpRouting::Layer(Routing::Uniform), Fp8Backward::Dx)
});
gpu_test!(fp8_ep4_backward_straight_every_row_to_one_rank_that_has_no_tokens, {
    use megamoe::layer::Fp8Backward;
    check_ep_fp8_backward::<f32>(MEDIUM, &[50, 0, 123, 7], EpRouting::AllOnRank(1), Fp8Backward::Straight)
});
gpu_test!(fp8_ep4_backward_dx_saved_z, {
    use megamoe::layer::Fp8Backward;
    let routing = EpRouting::Layer(Routing::Masked10);
    let cfg = fp8_codes_cfg_save(MEDIUM, 1, Fp8Backward::Dx, Save::WithZ);
    check_ep_fp8_backward_cfg::<f32>(MEDIUM, &[50, 0, 123, 7], routing, cfg)
});
// dy travels to the owners as codes (`Fp8Dy::Codes`): H (1 + 1/32) bytes a routed row instead of 2H
gpu_test!(fp8_ep4_backward_dy_codes, {
    use megamoe::layer::{Fp8Backward, Fp8Dy};
    let cfg = LayerConfig { fp8_dy: Fp8Dy::Codes, ..fp8_codes_cfg(MEDIUM, 1, Fp8Backward::Dx) };
    check_ep_fp8_backward_cfg::<f32>(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10), cfg)
});
// dh in FP8 on the owners from the dy codes the dispatch pushed (`Fp8Dh::Fp8` with `Fp8Dy::Codes`)
gpu_test!(fp8_ep4_backward_dh_fp8_dy_codes, {
    use megamoe::layer::{Fp8Backward, Fp8Dh, Fp8Dy};
    let cfg = LayerConfig { fp8_dy: Fp8Dy::Codes, fp8_dh: Fp8Dh::Fp8, ..fp8_codes_cfg(MEDIUM, 1, Fp8Backward::Dx) };
    check_ep_fp8_backward_cfg::<f32>(MEDIUM, &[50, 0, 123, 7], EpRouting::Layer(Routing::Masked10), cfg)
});
gpu_test!(fp8_ep8_backward_dy_codes_straight_saved_z_every_row_to_one_rank, {
    use megamoe::layer::{Fp8Backward, Fp8Dy};
    let base = fp8_codes_cfg_save(MEDIUM, 1, Fp8Backward::Straight, Save::WithZ);
    let cfg = LayerConfig { fp8_dy: Fp8Dy::Codes, ..base };
    check_ep_fp8_backward_cfg::<bf16>(MEDIUM, &[40, 0, 90, 17, 5, 128, 66, 9], EpRouting::AllOnRank(3), cfg)
});
gpu_test!(fp8_ep8_backward_dx_bf16_weight_gradients_masked, {
    use megamoe::layer::Fp8Backward;
    let tokens = [13, 0, 77, 150, 1, 64, 200, 31];
    check_ep_fp8_backward::<bf16>(MEDIUM, &tokens, EpRouting::Layer(Routing::Masked10), Fp8Backward::Dx)
});

// The FP8 backward's refusals, each before anything runs (no rank's gradients written): a bf16 forward's state; a
// layer whose dW1 would read the bf16 x (`Fp8Dw1X::Bf16`, the default: the owner has only the codes); FP8 weight
// gradients; the weights of a rank missing; W1's transposed codes missing for an FP8 dx. Then the same state runs.
gpu_test!(fp8_ep_backward_refusals_write_nothing, {
    use megamoe::layer::{Fp8Backward, Fp8Dw1X};
    let g = gpu();
    let s = MEDIUM;
    let tokens = [21usize, 40];
    let mut rng = rng();
    let inp = ep_inputs(&mut rng, s, &tokens, EpRouting::Layer(Routing::Uniform));
    let mut r = upload_ranks(&g, &inp, &tokens);
    let mut b = RankBufs::<f32>::new(&g, &inp, &tokens);
    let quantized = |layer: &EpLayer, r: &Ranks| -> Vec<megamoe::layer::Fp8Weights> {
        (0..2)
            .map(|rank| {
                let mut w = layer.alloc_fp8_weights().unwrap();
                layer.quantize_fp8_weights(&mut w, &r.w1[rank], &r.w2[rank]).unwrap();
                w
            })
            .collect()
    };
    // a bf16 forward's state
    let mut layer = EpLayer::new(g.clone(), fp8_codes_cfg(s, 40, Fp8Backward::Dx), 2).unwrap();
    let w8 = quantized(&layer, &r);
    let saved = forward_saved(&mut layer, &mut r);
    b.poison(&g);
    refused(b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8), "of a bf16 forward", "bf16 state");
    b.assert_poison(&g, true, "the FP8 backward of a bf16 forward");
    // the FP8 forward's state with one rank's weights missing, then without W1's transposed codes
    let saved = {
        let (fi, mut outs) = io_fp8(&mut r, &w8);
        layer.forward_fp8(&fi, &mut outs).unwrap()
    };
    refused(b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8[..1]), "1 FP8 weights for 2 ranks", "w8");
    let straight = EpLayer::new(g.clone(), fp8_codes_cfg(s, 40, Fp8Backward::Straight), 2).unwrap();
    let no_t: Vec<_> = quantized(&straight, &r);
    assert!(no_t[0].w1t.is_none());
    refused(b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &no_t), "W1's transposed codes", "no W1^T");
    b.assert_poison(&g, true, "refused FP8 backwards");
    // the same state then runs
    b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8).unwrap();
    layer.check().unwrap();
    b.assert_poison(&g, false, "the FP8 backward after the refusals");
    // dW1 from the bf16 x (the default): not at EP; FP8 weight gradients with dW1 from the codes: no layer
    let cfg = LayerConfig { fp8_dw1_x: Fp8Dw1X::Bf16, ..fp8_codes_cfg(s, 40, Fp8Backward::Dx) };
    let mut layer = EpLayer::new(g.clone(), cfg, 2).unwrap();
    let w8 = quantized(&layer, &r);
    let saved = {
        let (fi, mut outs) = io_fp8(&mut r, &w8);
        layer.forward_fp8(&fi, &mut outs).unwrap()
    };
    b.poison(&g);
    refused(b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8), "Fp8Dw1X::Codes", "Fp8Dw1X::Bf16");
    b.assert_poison(&g, true, "the FP8 backward with Fp8Dw1X::Bf16");
    let e = EpLayer::new(g.clone(), fp8_codes_cfg(s, 40, Fp8Backward::Wgrad), 2).err().unwrap().to_string();
    assert!(e.contains("not with FP8 weight gradients"), "{e}");
    // an FP8 dh reads dy's codes on the owners: not with dy in bf16
    let cfg = LayerConfig { fp8_dh: megamoe::layer::Fp8Dh::Fp8, ..fp8_codes_cfg(s, 40, Fp8Backward::Dx) };
    let mut layer = EpLayer::new(g.clone(), cfg, 2).unwrap();
    let w8 = quantized(&layer, &r);
    let saved = {
        let (fi, mut outs) = io_fp8(&mut r, &w8);
        layer.forward_fp8(&fi, &mut outs).unwrap()
    };
    b.poison(&g);
    refused(b.backward_fp8(&mut layer, &saved, &rank_inputs(&r), &w8), "Fp8Dy::Codes", "Fp8Dh::Fp8 with bf16 dy");
    b.assert_poison(&g, true, "the FP8-dh backward with bf16 dy");
});
