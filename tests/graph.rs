//! A whole training step of the layer (forward into a preallocated `Saved`, backward) captured in a CUDA graph
//! and replayed on new contents of the same buffers: every output poisoned before each run and checked fully
//! written, within 1e-2 of the f64 reference, and bitwise equal to the same step run eagerly; a capture before any
//! eager call (every tensor map placed by a copy the graph records) likewise. The same for the expert-parallel layer
//! (R = 4 emulated ranks): its call epoch lives on the device (each rank's call counter, advanced by the first
//! launch of every call), so every replay is a new epoch; `check` after the replays reports no timeout and
//! reads the device's counter advanced by every replayed call. The FP8 step too (weights quantized, `forward_fp8`,
//! `backward_fp8` straight and with FP8 dx and weight gradients). GPU tests: ignored without a GPU.
mod common;

use std::sync::Arc;

use common::{f64s, gpu, inputs, rank_grads, rank_input, rank_inputs, rng, weights, Inputs, Routing, RAGGED, SMALL};
use cudarc::driver::sys;
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::ep::{EpLayer, RankFp8Inputs};
use megamoe::layer::{
    Fp8Backward, Fp8Inputs, Fp8Weights, Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save, Saved,
};
use megamoe::reference::{self, RankInput, Shape};
use megamoe::{check, Error, Gpu};

/// The step's device buffers: inputs (rewritten between replays) and outputs (poisoned before each run).
struct Bufs {
    x: CudaSlice<bf16>,
    ids: CudaSlice<i32>,
    w: CudaSlice<f32>,
    w1: CudaSlice<bf16>,
    w2: CudaSlice<bf16>,
    dy: CudaSlice<bf16>,
    out: CudaSlice<bf16>,
    dx: CudaSlice<bf16>,
    dtopk: CudaSlice<f32>,
    dw1: CudaSlice<f32>,
    dw2: CudaSlice<f32>,
}

/// What one step left in the outputs, as bits.
#[derive(PartialEq, Eq)]
struct Bits {
    y: Vec<u16>,
    dx: Vec<u16>,
    dtopk: Vec<u32>,
    dw1: Vec<u32>,
    dw2: Vec<u32>,
}

/// [`Bufs::io`]: what one step reads and writes.
struct Io<'a> {
    li: LayerInputs<'a>,
    dy: &'a CudaSlice<bf16>,
    out: &'a mut CudaSlice<bf16>,
    grads: Grads<'a>,
}

impl Bufs {
    fn new(g: &Arc<Gpu>, inp: &Inputs) -> Bufs {
        let s = inp.shape;
        let t = inp.tokens;
        Bufs {
            x: g.upload(&inp.x).unwrap(),
            ids: g.upload(&inp.ids).unwrap(),
            w: g.upload(&inp.w).unwrap(),
            w1: g.upload(&inp.w1).unwrap(),
            w2: g.upload(&inp.w2).unwrap(),
            dy: g.upload(&inp.dy).unwrap(),
            out: g.alloc(t * s.h).unwrap(),
            dx: g.alloc(t * s.h).unwrap(),
            dtopk: g.alloc(t * s.k).unwrap(),
            dw1: g.alloc(s.e * 2 * s.i * s.h).unwrap(),
            dw2: g.alloc(s.e * s.h * s.i).unwrap(),
        }
    }

    /// New inputs into the same buffers (outside any capture), outputs poisoned (NaN everywhere).
    fn load(&mut self, g: &Gpu, inp: &Inputs) {
        g.write(&mut self.x, &inp.x).unwrap();
        g.write(&mut self.ids, &inp.ids).unwrap();
        g.write(&mut self.w, &inp.w).unwrap();
        g.write(&mut self.w1, &inp.w1).unwrap();
        g.write(&mut self.w2, &inp.w2).unwrap();
        g.write(&mut self.dy, &inp.dy).unwrap();
        g.fill_bytes(&mut self.out, 0xff).unwrap();
        g.fill_bytes(&mut self.dx, 0xff).unwrap();
        g.fill_bytes(&mut self.dtopk, 0xff).unwrap();
        g.fill_bytes(&mut self.dw1, 0xff).unwrap();
        g.fill_bytes(&mut self.dw2, 0xff).unwrap();
    }

    /// The step's inputs over `tokens` tokens, dy, the output and the gradients (overwritten), borrowed together.
    fn io(&mut self, tokens: usize) -> Io<'_> {
        Io {
            li: LayerInputs {
                tokens,
                x: &self.x,
                topk_ids: &self.ids,
                topk_weights: &self.w,
                w1: &self.w1,
                w2: &self.w2,
            },
            dy: &self.dy,
            out: &mut self.out,
            grads: Grads {
                dx: &mut self.dx,
                dw1: &mut self.dw1,
                dw2: &mut self.dw2,
                dtopk: &mut self.dtopk,
                accumulate: false,
            },
        }
    }

    /// Forward into `saved`, then the backward: the step a graph captures. No allocation, no synchronisation.
    fn step(&mut self, layer: &mut MoeLayer, saved: &mut Saved, tokens: usize) -> megamoe::Result<()> {
        let io = self.io(tokens);
        layer.forward_into(&io.li, io.out, saved)?;
        layer.backward(saved, io.dy, &io.li, io.grads)
    }

    fn bits(&self, g: &Gpu) -> Bits {
        let b16 = |v: &CudaSlice<bf16>| g.download(v).unwrap().iter().map(|x| x.to_bits()).collect();
        let b32 = |v: &CudaSlice<f32>| g.download(v).unwrap().iter().map(|x| x.to_bits()).collect();
        Bits { y: b16(&self.out), dx: b16(&self.dx), dtopk: b32(&self.dtopk), dw1: b32(&self.dw1), dw2: b32(&self.dw2) }
    }
}

/// Every output written (no NaN: the poison is NaN) and within `tol` of the f64 reference.
fn against_reference(b: &Bits, inp: &Inputs, tag: &str, tol: f64) {
    let (mut outs, grads) = reference::forward_backward(&inp.shape, &[rank_input(inp)], &weights(inp)).unwrap();
    let want = outs.remove(0);
    let h16 = |v: &[u16]| v.iter().map(|&x| bf16::from_bits(x).to_f64()).collect::<Vec<_>>();
    let h32 = |v: &[u32]| v.iter().map(|&x| f32::from_bits(x) as f64).collect::<Vec<_>>();
    for (what, got, reference) in [
        ("y", h16(&b.y), &want.y),
        ("dx", h16(&b.dx), &want.dx),
        ("dW1", h32(&b.dw1), &grads.dw1),
        ("dW2", h32(&b.dw2), &grads.dw2),
    ] {
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            panic!("{tag}: {what}[{i}] is NaN (not written)");
        }
        let e = check::close(&format!("{tag}: {what}"), &got, reference, tol).unwrap();
        eprintln!("{tag}: {what} rel err {e:.3e}");
    }
    // dtopk against its terms' scale (dot products may cancel below it); NaN fails there too
    let e = check::close_scaled(&format!("{tag}: dtopk"), &h32(&b.dtopk), &want.dtopk, &want.dtopk_scale, tol);
    eprintln!("{tag}: dtopk err {:.3e} of the terms' scale", e.unwrap());
}

/// Capture `f` on `g`'s stream (global mode: any call that could synchronise would fail the capture) into an
/// instantiated graph; the capture is ended whatever `f` returns.
fn capture(g: &Gpu, f: impl FnOnce() -> megamoe::Result<()>) -> megamoe::Result<cudarc::driver::CudaGraph> {
    let s = g.stream();
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    let r = f();
    let graph = s.end_capture(sys::CUgraphInstantiate_flags(0));
    r?;
    Ok(graph.expect("ending the capture").expect("a captured graph"))
}

/// Eager step on A (checked against the reference), capture, replay on B and on A again: each replay fully
/// written, within tolerance, and bitwise the eager step on the same inputs.
fn check_graph(s: Shape, tokens: usize, routing: Routing, save: Save) {
    let g = gpu();
    let mut r = rng();
    let (a, b) = (inputs(&mut r, s, tokens, routing), inputs(&mut r, s, tokens, routing));
    let tag = format!("{s:?} T={tokens} {routing:?} {save:?}");
    let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, save)).unwrap();
    let mut saved = layer.alloc_saved(tokens).unwrap();
    let mut bufs = Bufs::new(&g, &a);

    // eager on A: also encodes every tensor map the capture will use
    bufs.load(&g, &a);
    bufs.step(&mut layer, &mut saved, tokens).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let eager_a = bufs.bits(&g);
    against_reference(&eager_a, &a, &format!("{tag} eager A"), 1e-2);

    let graph = capture(&g, || bufs.step(&mut layer, &mut saved, tokens)).unwrap();

    for (inp, name) in [(&b, "B"), (&a, "A")] {
        bufs.load(&g, inp);
        graph.launch().unwrap();
        g.sync().unwrap();
        layer.routing_error().unwrap();
        let replay = bufs.bits(&g);
        against_reference(&replay, inp, &format!("{tag} graph {name}"), 1e-2);
        bufs.load(&g, inp);
        bufs.step(&mut layer, &mut saved, tokens).unwrap();
        g.sync().unwrap();
        let eager = bufs.bits(&g);
        assert!(replay == eager, "{tag}: the graph's step on {name} differs from the eager step");
        if name == "A" {
            assert!(replay == eager_a, "{tag}: the graph's step on A differs from the first eager step");
        }
    }
}

/// The FP8 step (the weights quantized, `forward_fp8`, `backward_fp8` in `mode`) captured after one eager step and
/// replayed on new inputs: every output written, within 0.1 of the f64 bf16 reference (e4m3's error is 3-6e-2),
/// and bitwise the eager step on the same inputs.
fn check_graph_fp8(s: Shape, tokens: usize, routing: Routing, mode: Fp8Backward) {
    let g = gpu();
    let mut r = rng();
    let (a, b) = (inputs(&mut r, s, tokens, routing), inputs(&mut r, s, tokens, routing));
    let tag = format!("FP8 {s:?} T={tokens} {routing:?} {mode:?}");
    let cfg = LayerConfig { fp8_backward: mode, ..LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, Save::InputsOnly) };
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut w8 = Fp8Weights::alloc(&layer).unwrap();
    let mut saved = layer.alloc_saved(tokens).unwrap();
    let mut bufs = Bufs::new(&g, &a);
    let step = |bufs: &mut Bufs, layer: &mut MoeLayer, w8: &mut Fp8Weights, saved: &mut Saved| {
        w8.quantize(&g, &bufs.w1, &bufs.w2, layer)?;
        let io = bufs.io(tokens);
        let (li, w8) = (&io.li, &*w8);
        let inp8 = Fp8Inputs { tokens, x: li.x, topk_ids: li.topk_ids, topk_weights: li.topk_weights, weights: w8 };
        layer.forward_fp8(&inp8, io.out, saved)?;
        layer.backward_fp8(saved, io.dy, li, w8, io.grads)
    };
    // eager on A: allocates the FP8 buffers and encodes every tensor map the capture will use
    bufs.load(&g, &a);
    step(&mut bufs, &mut layer, &mut w8, &mut saved).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let eager_a = bufs.bits(&g);
    against_reference(&eager_a, &a, &format!("{tag} eager A"), 0.1);
    let graph = capture(&g, || step(&mut bufs, &mut layer, &mut w8, &mut saved)).unwrap();
    for (inp, name) in [(&b, "B"), (&a, "A")] {
        bufs.load(&g, inp);
        graph.launch().unwrap();
        g.sync().unwrap();
        layer.routing_error().unwrap();
        let replay = bufs.bits(&g);
        against_reference(&replay, inp, &format!("{tag} graph {name}"), 0.1);
        bufs.load(&g, inp);
        step(&mut bufs, &mut layer, &mut w8, &mut saved).unwrap();
        g.sync().unwrap();
        assert!(replay == bufs.bits(&g), "{tag}: the graph's step on {name} differs from the eager step");
        if name == "A" {
            assert!(replay == eager_a, "{tag}: the graph's step on A differs from the first eager step");
        }
    }
}

/// H a multiple of 512 and I of 128 (the FP8 layer's requirements).
const FP8_SHAPE: Shape = Shape { h: 512, i: 256, e: 8, k: 4 };

gpu_test!(graph_fp8_straight, { check_graph_fp8(FP8_SHAPE, 200, Routing::Uniform, Fp8Backward::Straight) });
gpu_test!(graph_fp8_dx_wgrad_masked, { check_graph_fp8(FP8_SHAPE, 150, Routing::Masked10, Fp8Backward::DxWgrad) });

gpu_test!(graph_small_saved_z, { check_graph(SMALL, 100, Routing::Uniform, Save::WithZ) });
gpu_test!(graph_ragged_recompute_masked, { check_graph(RAGGED, 97, Routing::Masked10, Save::InputsOnly) });
gpu_test!(graph_qwen3_30b_a3b_t512, { check_graph(Shape::QWEN3_30B_A3B, 512, Routing::Uniform, Save::WithZ) });

// A capture before any eager call: every buffer is new to the layer, so each tensor map goes into a capture slot
// by a copy from page-locked memory that the graph records. The replay is within tolerance and bitwise the eager
// step that follows (which finds those maps cached and copies each once outside the graph); a second graph
// captured after it on new output buffers matches too.
gpu_test!(graph_capture_before_any_eager_call, {
    let g = gpu();
    let mut r = rng();
    let (a, b) = (inputs(&mut r, SMALL, 64, Routing::Uniform), inputs(&mut r, SMALL, 64, Routing::Masked10));
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 64, Save::WithZ);
    // another layer's eager step on other buffers first: the kernel module and functions are loaded before the
    // capture (this layer's map cache stays empty, and none of the captured buffers has been seen)
    {
        let mut warm = MoeLayer::new(g.clone(), cfg).unwrap();
        let mut sv = warm.alloc_saved(64).unwrap();
        let mut wb = Bufs::new(&g, &a);
        wb.load(&g, &a);
        wb.step(&mut warm, &mut sv, 64).unwrap();
        g.sync().unwrap();
    }
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut saved = layer.alloc_saved(64).unwrap();
    let mut bufs = Bufs::new(&g, &a);
    bufs.load(&g, &a);
    g.sync().unwrap();
    let graph = capture(&g, || bufs.step(&mut layer, &mut saved, 64)).unwrap();
    bufs.load(&g, &a);
    graph.launch().unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let replay = bufs.bits(&g);
    against_reference(&replay, &a, "graph captured first, A", 1e-2);
    bufs.load(&g, &a);
    bufs.step(&mut layer, &mut saved, 64).unwrap();
    g.sync().unwrap();
    assert!(replay == bufs.bits(&g), "the graph captured first differs from the eager step after it");
    // new output buffers, seen first by a second capture; the first graph still replays on its own buffers
    let mut bufs2 = Bufs::new(&g, &b);
    bufs2.load(&g, &b);
    g.sync().unwrap();
    let graph2 = capture(&g, || bufs2.step(&mut layer, &mut saved, 64)).unwrap();
    graph2.launch().unwrap();
    g.sync().unwrap();
    let replay2 = bufs2.bits(&g);
    against_reference(&replay2, &b, "second graph on new buffers, B", 1e-2);
    bufs.load(&g, &a);
    graph.launch().unwrap();
    g.sync().unwrap();
    assert!(bufs.bits(&g) == replay, "the first graph's replay changed after a second capture");
});

// `forward_into` refuses a Saved too small for the call or of another save mode, and writes nothing;
// `alloc_saved` refuses more tokens than the layer's maximum.
gpu_test!(forward_into_checks_the_saved_state, {
    let g = gpu();
    let mut r = rng();
    let a = inputs(&mut r, SMALL, 64, Routing::Uniform);
    let cfg = |save| LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 64, save);
    let mut layer = MoeLayer::new(g.clone(), cfg(Save::WithZ)).unwrap();
    let other = MoeLayer::new(g.clone(), cfg(Save::InputsOnly)).unwrap();
    let mut bufs = Bufs::new(&g, &a);
    bufs.load(&g, &a);
    let li =
        LayerInputs { tokens: 64, x: &bufs.x, topk_ids: &bufs.ids, topk_weights: &bufs.w, w1: &bufs.w1, w2: &bufs.w2 };
    for (mut sv, why) in [(layer.alloc_saved(63).unwrap(), "63 tokens"), (other.alloc_saved(64).unwrap(), "no z")] {
        match layer.forward_into(&li, &mut bufs.out, &mut sv) {
            Err(Error::InvalidArgument(m)) => eprintln!("{why}: {m}"),
            other => panic!("{why}: expected InvalidArgument, got {:?}", other.map(|_| ())),
        }
    }
    g.sync().unwrap();
    assert!(g.download(&bufs.out).unwrap().iter().all(|v| v.to_bits() == 0xffff), "a refused call wrote out");
    assert!(layer.alloc_saved(65).is_err(), "alloc_saved beyond max_tokens");
});

/// The expert-parallel step's device buffers, per rank, each at least one element (a rank without tokens keeps
/// buffers whose one element must keep the poison): inputs rewritten between runs, outputs poisoned.
struct EpBufs {
    tokens: Vec<usize>,
    x: Vec<CudaSlice<bf16>>,
    ids: Vec<CudaSlice<i32>>,
    w: Vec<CudaSlice<f32>>,
    w1: Vec<CudaSlice<bf16>>,
    w2: Vec<CudaSlice<bf16>>,
    dy: Vec<CudaSlice<bf16>>,
    out: Vec<CudaSlice<bf16>>,
    dx: Vec<CudaSlice<bf16>>,
    dtopk: Vec<CudaSlice<f32>>,
    dw1: Vec<CudaSlice<f32>>,
    dw2: Vec<CudaSlice<f32>>,
    /// Each rank's FP8 weights when the step is the FP8 one (`EpBufs::fp8`), quantized again at every load.
    w8: Vec<megamoe::layer::Fp8Weights>,
}

/// One rank's host inputs: x, ids, weights, dy (its tokens, padded to one element), W1, W2 (its experts).
type RankHost = (Vec<bf16>, Vec<i32>, Vec<f32>, Vec<bf16>, Vec<bf16>, Vec<bf16>);

/// `inp` (the ranks' tokens concatenated in rank order, the E experts) split into the ranks' own inputs.
fn split_ranks(inp: &Inputs, tokens: &[usize]) -> Vec<RankHost> {
    let s = inp.shape;
    let per = s.e / tokens.len();
    let (n1, n2) = (per * 2 * s.i * s.h, per * s.h * s.i);
    let mut t0 = 0;
    let mut out = Vec::new();
    for (r, &t) in tokens.iter().enumerate() {
        let pad = |n: usize| n.max(1);
        let mut x = inp.x[t0 * s.h..(t0 + t) * s.h].to_vec();
        x.resize(pad(t * s.h), bf16::ZERO);
        let mut ids = inp.ids[t0 * s.k..(t0 + t) * s.k].to_vec();
        ids.resize(pad(t * s.k), -1);
        let mut w = inp.w[t0 * s.k..(t0 + t) * s.k].to_vec();
        w.resize(pad(t * s.k), 0.0);
        let mut dy = inp.dy[t0 * s.h..(t0 + t) * s.h].to_vec();
        dy.resize(pad(t * s.h), bf16::ZERO);
        out.push((x, ids, w, dy, inp.w1[r * n1..(r + 1) * n1].to_vec(), inp.w2[r * n2..(r + 1) * n2].to_vec()));
        t0 += t;
    }
    assert_eq!(t0, inp.tokens);
    out
}

/// What one EP step left in every rank's outputs, as bits.
#[derive(PartialEq, Eq)]
struct EpBits {
    y: Vec<Vec<u16>>,
    dx: Vec<Vec<u16>>,
    dtopk: Vec<Vec<u32>>,
    dw1: Vec<Vec<u32>>,
    dw2: Vec<Vec<u32>>,
}

impl EpBufs {
    fn new(g: &Arc<Gpu>, inp: &Inputs, tokens: &[usize]) -> EpBufs {
        let s = inp.shape;
        let per = s.e / tokens.len();
        let mut b = EpBufs {
            tokens: tokens.to_vec(),
            x: vec![],
            ids: vec![],
            w: vec![],
            w1: vec![],
            w2: vec![],
            dy: vec![],
            out: vec![],
            dx: vec![],
            dtopk: vec![],
            dw1: vec![],
            dw2: vec![],
            w8: vec![],
        };
        for (&t, (x, ids, w, dy, w1, w2)) in tokens.iter().zip(split_ranks(inp, tokens)) {
            b.x.push(g.upload(&x).unwrap());
            b.ids.push(g.upload(&ids).unwrap());
            b.w.push(g.upload(&w).unwrap());
            b.dy.push(g.upload(&dy).unwrap());
            b.w1.push(g.upload(&w1).unwrap());
            b.w2.push(g.upload(&w2).unwrap());
            b.out.push(g.alloc((t * s.h).max(1)).unwrap());
            b.dx.push(g.alloc((t * s.h).max(1)).unwrap());
            b.dtopk.push(g.alloc((t * s.k).max(1)).unwrap());
            b.dw1.push(g.alloc(per * 2 * s.i * s.h).unwrap());
            b.dw2.push(g.alloc(per * s.h * s.i).unwrap());
        }
        b
    }

    /// New inputs into the same buffers (outside any capture), every output poisoned (NaN everywhere).
    fn load(&mut self, g: &Gpu, inp: &Inputs) {
        for (r, (x, ids, w, dy, w1, w2)) in split_ranks(inp, &self.tokens).into_iter().enumerate() {
            g.write(&mut self.x[r], &x).unwrap();
            g.write(&mut self.ids[r], &ids).unwrap();
            g.write(&mut self.w[r], &w).unwrap();
            g.write(&mut self.dy[r], &dy).unwrap();
            g.write(&mut self.w1[r], &w1).unwrap();
            g.write(&mut self.w2[r], &w2).unwrap();
        }
        for b in self.out.iter_mut().chain(self.dx.iter_mut()) {
            g.fill_bytes(b, 0xff).unwrap();
        }
        for b in self.dtopk.iter_mut().chain(self.dw1.iter_mut()).chain(self.dw2.iter_mut()) {
            g.fill_bytes(b, 0xff).unwrap();
        }
    }

    /// The FP8 step from now on: every rank's FP8 weights, allocated by `layer` (quantized by `quantize`).
    fn fp8(&mut self, layer: &EpLayer) {
        self.w8 = (0..self.tokens.len()).map(|_| layer.alloc_fp8_weights().unwrap()).collect();
    }

    /// The ranks' FP8 weights quantized from their bf16 W1 and W2 (after `load`; outside any capture).
    fn quantize(&mut self, layer: &EpLayer) {
        for (r, w) in self.w8.iter_mut().enumerate() {
            layer.quantize_fp8_weights(w, &self.w1[r], &self.w2[r]).unwrap();
        }
    }

    /// The forward, then (with `backward`) its backward, in FP8 after `fp8` (`forward_fp8`, `backward_fp8`): what
    /// a graph captures. No allocation (after one eager step), no synchronisation.
    fn step(&mut self, layer: &mut EpLayer, backward: bool) -> megamoe::Result<()> {
        let saved = self.forward(layer)?;
        if backward {
            self.backward(layer, &saved)?;
        }
        Ok(())
    }

    /// The forward (in FP8 after `fp8`) into the outputs; its saved state.
    fn forward(&mut self, layer: &mut EpLayer) -> megamoe::Result<megamoe::ep::EpSaved> {
        let li = rank_inputs(&self.tokens, (&self.x, &self.ids, &self.w), (&self.w1, &self.w2));
        let mut outs: Vec<&mut CudaSlice<bf16>> = self.out.iter_mut().collect();
        if self.w8.is_empty() {
            return layer.forward(&li, &mut outs);
        }
        let fi: Vec<RankFp8Inputs> = li
            .iter()
            .zip(&self.w8)
            .map(|(i, w)| RankFp8Inputs {
                tokens: i.tokens,
                x: i.x,
                topk_ids: i.topk_ids,
                topk_weights: i.topk_weights,
                weights: w,
            })
            .collect();
        layer.forward_fp8(&fi, &mut outs)
    }

    /// The backward of `saved` (in FP8 after `fp8`) into the gradients.
    fn backward(&mut self, layer: &mut EpLayer, saved: &megamoe::ep::EpSaved) -> megamoe::Result<()> {
        let li = rank_inputs(&self.tokens, (&self.x, &self.ids, &self.w), (&self.w1, &self.w2));
        let dys: Vec<&CudaSlice<bf16>> = self.dy.iter().collect();
        let mut grads = rank_grads::<f32>(&mut self.dx, &mut self.dtopk, &mut self.dw1, &mut self.dw2);
        if self.w8.is_empty() {
            return layer.backward(saved, &dys, &li, &mut grads, false);
        }
        let w8: Vec<&megamoe::layer::Fp8Weights> = self.w8.iter().collect();
        layer.backward_fp8(saved, &dys, &li, &w8, &mut grads, false)
    }

    /// Every rank's outputs as bits, each checked fully written (no poison left; a rank without tokens: its one
    /// element of y, dx and dtopk keeps the poison). Without `backward` only y.
    fn bits(&self, g: &Gpu, backward: bool, tag: &str) -> EpBits {
        let b16 = |v: &CudaSlice<bf16>| -> Vec<u16> { g.download(v).unwrap().iter().map(|x| x.to_bits()).collect() };
        let b32 = |v: &CudaSlice<f32>| -> Vec<u32> { g.download(v).unwrap().iter().map(|x| x.to_bits()).collect() };
        let mut b = EpBits { y: vec![], dx: vec![], dtopk: vec![], dw1: vec![], dw2: vec![] };
        for (r, &t) in self.tokens.iter().enumerate() {
            b.y.push(b16(&self.out[r]));
            if backward {
                b.dx.push(b16(&self.dx[r]));
                b.dtopk.push(b32(&self.dtopk[r]));
                b.dw1.push(b32(&self.dw1[r]));
                b.dw2.push(b32(&self.dw2[r]));
            }
            let per_token: Vec<(&str, &[u16])> =
                [("y", &b.y[r][..])].into_iter().chain(b.dx.get(r).map(|v| ("dx", &v[..]))).collect();
            for (what, v) in per_token {
                if t == 0 {
                    assert_eq!(v, &[0xffff][..], "{tag}: rank {r} has no tokens but its {what} was written");
                } else if let Some(i) = v.iter().position(|&x| x == 0xffff) {
                    panic!("{tag}: rank {r} {what}[{i}] still holds the poison (not written)");
                }
            }
            if backward {
                let dtopk_poisoned = b.dtopk[r].iter().position(|&x| x == 0xffff_ffff);
                if t == 0 {
                    assert_eq!(b.dtopk[r], vec![0xffff_ffff], "{tag}: rank {r} has no tokens but dtopk was written");
                } else if let Some(i) = dtopk_poisoned {
                    panic!("{tag}: rank {r} dtopk[{i}] still holds the poison (not written)");
                }
                for (what, v) in [("dW1", &b.dw1[r]), ("dW2", &b.dw2[r])] {
                    if let Some(i) = v.iter().position(|&x| x == 0xffff_ffff) {
                        panic!("{tag}: rank {r} {what}[{i}] still holds the poison (not written)");
                    }
                }
            }
        }
        b
    }
}

/// The step's outputs within `tol` of the f64 reference over the R ranks (1e-2 for bf16; the FP8 step is tested
/// bitwise against the single-GPU FP8 layer in tests/ep.rs, here within e4m3's error of the bf16 reference).
fn ep_against_reference(b: &EpBits, inp: &Inputs, tokens: &[usize], backward: bool, tag: &str, tol: f64) {
    let s = inp.shape;
    let mut ranks = Vec::new();
    let mut t0 = 0;
    for &t in tokens {
        ranks.push(RankInput {
            x: f64s(&inp.x[t0 * s.h..(t0 + t) * s.h]),
            topk_ids: inp.ids[t0 * s.k..(t0 + t) * s.k].to_vec(),
            topk_w: inp.w[t0 * s.k..(t0 + t) * s.k].iter().map(|&v| v as f64).collect(),
            dy: f64s(&inp.dy[t0 * s.h..(t0 + t) * s.h]),
        });
        t0 += t;
    }
    let (outs, grads) = reference::forward_backward(&s, &ranks, &weights(inp)).unwrap();
    // a rank without tokens has one poisoned element and no reference values: skip it
    let h16 = |v: &[Vec<u16>]| -> Vec<f64> {
        v.iter()
            .zip(tokens)
            .filter(|(_, &t)| t > 0)
            .flat_map(|(x, _)| x.iter().map(|&b| bf16::from_bits(b).to_f64()))
            .collect()
    };
    let h32 = |v: &[Vec<u32>], skip_empty: bool| -> Vec<f64> {
        v.iter()
            .zip(tokens)
            .filter(|(_, &t)| !skip_empty || t > 0)
            .flat_map(|(x, _)| x.iter().map(|&b| f32::from_bits(b) as f64))
            .collect()
    };
    let mut cmp = vec![("y", h16(&b.y), outs.iter().flat_map(|o| o.y.clone()).collect::<Vec<f64>>())];
    if backward {
        cmp.push(("dx", h16(&b.dx), outs.iter().flat_map(|o| o.dx.clone()).collect()));
        cmp.push(("dtopk", h32(&b.dtopk, true), outs.iter().flat_map(|o| o.dtopk.clone()).collect()));
        cmp.push(("dW1", h32(&b.dw1, false), grads.dw1.clone()));
        cmp.push(("dW2", h32(&b.dw2, false), grads.dw2.clone()));
    }
    for (what, got, want) in cmp {
        let e = check::close(&format!("{tag}: {what}"), &got, &want, tol).unwrap();
        eprintln!("{tag}: {what} rel err {e:.3e}");
    }
}

/// EP = R, R = `tokens.len()` emulated ranks: an eager step on A (checked against the reference), a capture of
/// the step (forward, and the backward with `backward`), then replays on B and on A, each bitwise the eager step
/// on the same inputs and fully written; three replays back to back with no synchronisation between them, then
/// one `check`. `check` after every replay reports no timeout and reads the device's call counter advanced by
/// every call of every replay (the host's count is not: the epoch is the device's).
fn check_ep_graph(s: Shape, tokens: &[usize], routing: Routing, pull: bool, scatter: bool, backward: bool) {
    check_ep_graph_of(s, tokens, routing, (pull, scatter), backward, false)
}

/// `check_ep_graph`, with `fp8` the FP8 step (`forward_fp8`, `backward_fp8` with `Fp8Dw1X::Codes`; the weights
/// quantized again at every load, outside the capture).
fn check_ep_graph_of(s: Shape, tokens: &[usize], routing: Routing, mode: (bool, bool), backward: bool, fp8: bool) {
    let (pull, scatter) = mode;
    let g = gpu();
    let mut r = rng();
    let total: usize = tokens.iter().sum();
    let (a, b) = (inputs(&mut r, s, total, routing), inputs(&mut r, s, total, routing));
    let world = tokens.len();
    let tag = format!(
        "EP = {world} {s:?} {tokens:?} {routing:?} pull {pull} scatter {scatter} backward {backward} fp8 {fp8}"
    );
    let max_t = tokens.iter().copied().max().unwrap().max(1);
    let cfg = LayerConfig {
        fp8_backward: Fp8Backward::Dx,
        fp8_dw1_x: megamoe::layer::Fp8Dw1X::Codes,
        ..LayerConfig::bf16(s.h, s.i, s.e, s.k, max_t, Save::InputsOnly)
    };
    let mut layer = EpLayer::new(g.clone(), cfg, world).unwrap();
    layer.set_pull_dispatch(pull);
    layer.set_scatter_combine(scatter);
    let mut bufs = EpBufs::new(&g, &a, tokens);
    if fp8 {
        bufs.fp8(&layer);
    }
    let tol = if fp8 { 0.1 } else { 1e-2 };
    let load = |bufs: &mut EpBufs, layer: &EpLayer, inp: &Inputs| {
        bufs.load(&g, inp);
        bufs.quantize(layer);
    };
    let calls = if backward { 2 } else { 1 }; // EP calls per step: each advances the device's epoch once
    let mut epoch = 0;
    let mut run_checked = |layer: &mut EpLayer, what: &str, steps: u32| {
        layer.check().unwrap_or_else(|e| panic!("{tag}: {what}: check after the run: {e}"));
        epoch += steps * calls;
        assert_eq!(layer.device_epoch(), epoch, "{tag}: {what}: the device's call counter");
    };

    // eager on A: also encodes every tensor map and allocates every buffer the capture will use
    load(&mut bufs, &layer, &a);
    bufs.step(&mut layer, backward).unwrap();
    run_checked(&mut layer, "eager A", 1);
    let eager_a = bufs.bits(&g, backward, &format!("{tag} eager A"));
    ep_against_reference(&eager_a, &a, tokens, backward, &format!("{tag} eager A"), tol);

    let graph = capture(&g, || bufs.step(&mut layer, backward)).unwrap();
    // nothing ran during the capture: the device's counter is where the eager step left it
    run_checked(&mut layer, "after the capture", 0);

    for (inp, name) in [(&b, "B"), (&a, "A")] {
        load(&mut bufs, &layer, inp);
        graph.launch().unwrap();
        run_checked(&mut layer, &format!("graph {name}"), 1);
        let replay = bufs.bits(&g, backward, &format!("{tag} graph {name}"));
        load(&mut bufs, &layer, inp);
        bufs.step(&mut layer, backward).unwrap();
        run_checked(&mut layer, &format!("eager {name}"), 1);
        let eager = bufs.bits(&g, backward, &format!("{tag} eager {name}"));
        assert!(replay == eager, "{tag}: the graph's step on {name} differs from the eager step");
        if name == "A" {
            assert!(replay == eager_a, "{tag}: the graph's step on A differs from the first eager step");
        }
    }
    // replays back to back: each its own epochs over flags the previous replay left
    load(&mut bufs, &layer, &b);
    for _ in 0..3 {
        graph.launch().unwrap();
    }
    run_checked(&mut layer, "three replays", 3);
    let replays = bufs.bits(&g, backward, &format!("{tag} three replays"));
    load(&mut bufs, &layer, &b);
    bufs.step(&mut layer, backward).unwrap();
    run_checked(&mut layer, "eager B again", 1);
    assert!(replays == bufs.bits(&g, backward, &tag), "{tag}: three replays differ from the eager step");
    // replays on alternating inputs (each loaded, and the outputs poisoned, in stream order before its replay: a
    // pageable copy waits for the replay before it), the last on A: bitwise the first eager step on A, so a replay
    // that read the previous one's rows, or left its outputs unwritten, shows (the same inputs three times cannot)
    for inp in [&a, &b, &a] {
        load(&mut bufs, &layer, inp);
        graph.launch().unwrap();
    }
    run_checked(&mut layer, "replays on A, B, A", 3);
    let last = bufs.bits(&g, backward, &format!("{tag} replays on A, B, A"));
    assert!(last == eager_a, "{tag}: the last of the replays on A, B, A differs from the eager step on A");
}

gpu_test!(graph_ep4_forward_backward, {
    check_ep_graph(SMALL, &[50, 0, 123, 7], Routing::Uniform, false, false, true)
});
gpu_test!(graph_ep4_forward, { check_ep_graph(SMALL, &[50, 0, 123, 7], Routing::Masked10, false, false, false) });
gpu_test!(graph_ep4_fp8_forward_backward, {
    check_ep_graph_of(FP8_SHAPE, &[50, 0, 123, 7], Routing::Masked10, (false, false), true, true)
});
gpu_test!(graph_ep4_pull_scatter_forward_backward, {
    check_ep_graph(SMALL, &[31, 64, 0, 90], Routing::Masked10, true, true, true)
});

/// One EP layer serving two model layers in a graph: forward A, forward B, backward B, backward A (A's sends its
/// rows again) captured after one eager run, replayed on new inputs of both: every output bitwise the same calls on
/// a layer each (eager), the first eager run against the f64 reference.
fn two_model_layers(layer: &mut EpLayer, a: &mut EpBufs, b: &mut EpBufs) -> megamoe::Result<()> {
    let sa = a.forward(layer)?;
    let sb = b.forward(layer)?;
    b.backward(layer, &sb)?;
    a.backward(layer, &sa)
}

gpu_test!(graph_ep4_one_layer_two_model_layers, {
    let g = gpu();
    let mut r = rng();
    let tokens = [50usize, 0, 123, 7];
    let total: usize = tokens.iter().sum();
    let inp: Vec<Inputs> = (0..4).map(|_| inputs(&mut r, SMALL, total, Routing::Masked10)).collect();
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 123, Save::InputsOnly);
    // each model layer's step on a layer of its own
    let own = |inp: &Inputs| -> EpBits {
        let mut l = EpLayer::new(g.clone(), cfg, 4).unwrap();
        let mut b = EpBufs::new(&g, inp, &tokens);
        b.load(&g, inp);
        b.step(&mut l, true).unwrap();
        l.check().unwrap();
        b.bits(&g, true, "a layer of its own")
    };
    let mut layer = EpLayer::new(g.clone(), cfg, 4).unwrap();
    let (mut ba, mut bb) = (EpBufs::new(&g, &inp[0], &tokens), EpBufs::new(&g, &inp[1], &tokens));
    ba.load(&g, &inp[0]);
    bb.load(&g, &inp[1]);
    two_model_layers(&mut layer, &mut ba, &mut bb).unwrap();
    layer.check().unwrap();
    let eager = (ba.bits(&g, true, "eager A"), bb.bits(&g, true, "eager B"));
    ep_against_reference(&eager.0, &inp[0], &tokens, true, "two model layers, eager A", 1e-2);
    ep_against_reference(&eager.1, &inp[1], &tokens, true, "two model layers, eager B", 1e-2);
    assert!(eager.0 == own(&inp[0]), "eager A on the shared layer differs from A on a layer of its own");
    assert!(eager.1 == own(&inp[1]), "eager B on the shared layer differs from B on a layer of its own");
    let graph = capture(&g, || two_model_layers(&mut layer, &mut ba, &mut bb)).unwrap();
    for (ia, ib) in [(2, 3), (1, 0), (0, 1)] {
        ba.load(&g, &inp[ia]);
        bb.load(&g, &inp[ib]);
        graph.launch().unwrap();
        layer.check().unwrap();
        let tag = format!("replay on inputs {ia} and {ib}");
        assert!(ba.bits(&g, true, &tag) == own(&inp[ia]), "{tag}: A differs from a layer of its own");
        assert!(bb.bits(&g, true, &tag) == own(&inp[ib]), "{tag}: B differs from a layer of its own");
    }
});

// A graph's replay the host cannot see, between an eager forward and its eager backward: the backward runs on the
// replayed forward's state (the host saw no other forward, so it sends no rows again); the dispatch's state tag
// catches it and `check` says so (`Error::Mismatch` naming the forward the workspace held). Then the layer runs a
// step normally, against the f64 reference.
gpu_test!(graph_ep_replay_between_forward_and_backward_is_reported, {
    let g = gpu();
    let mut r = rng();
    let tokens = [20usize, 9, 0, 33];
    let total: usize = tokens.iter().sum();
    let (a, b) = (inputs(&mut r, SMALL, total, Routing::Masked10), inputs(&mut r, SMALL, total, Routing::Uniform));
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 33, Save::InputsOnly);
    let mut layer = EpLayer::new(g.clone(), cfg, 4).unwrap();
    let (mut ba, mut bb) = (EpBufs::new(&g, &a, &tokens), EpBufs::new(&g, &b, &tokens));
    ba.load(&g, &a);
    bb.load(&g, &b);
    // eager steps first: every map and buffer the capture uses
    ba.step(&mut layer, true).unwrap();
    bb.step(&mut layer, true).unwrap();
    layer.check().unwrap();
    let graph = capture(&g, || bb.forward(&mut layer).map(|_| ())).unwrap();
    let sa = ba.forward(&mut layer).unwrap();
    graph.launch().unwrap();
    ba.backward(&mut layer, &sa).unwrap();
    match layer.check() {
        Err(Error::Mismatch(m)) => {
            assert!(m.contains("another forward") && m.contains("replay"), "unexpected message: {m}");
            eprintln!("reported as expected: {m}");
        }
        other => panic!("a backward on a replayed forward's state: expected Error::Mismatch, got {other:?}"),
    }
    ba.load(&g, &a);
    ba.step(&mut layer, true).unwrap();
    layer.check().unwrap();
    let bits = ba.bits(&g, true, "after the report");
    ep_against_reference(&bits, &a, &tokens, true, "a step after the report", 1e-2);
});

// An EP capture before any eager backward would allocate the backward's buffers: `Error::InvalidArgument` saying
// what to do, before any eager call (the forward's maps are then placed by recorded copies, the backward refuses)
// and after an eager forward alone; afterwards the eager step runs normally.
gpu_test!(graph_ep_capture_before_eager_calls_is_a_clear_error, {
    let g = gpu();
    let mut r = rng();
    let tokens = [20usize, 9, 0, 33];
    let a = inputs(&mut r, SMALL, tokens.iter().sum(), Routing::Uniform);
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 33, Save::InputsOnly);
    let mut bufs = EpBufs::new(&g, &a, &tokens);
    // another layer's eager step first: the kernel module and functions are loaded before the capture (this
    // layer's tensor-map cache and backward buffers stay empty)
    let mut warm = EpLayer::new(g.clone(), cfg, 4).unwrap();
    bufs.load(&g, &a);
    bufs.step(&mut warm, true).unwrap();
    warm.check().unwrap();
    drop(warm);
    let mut layer = EpLayer::new(g.clone(), cfg, 4).unwrap();
    bufs.load(&g, &a);
    g.sync().unwrap();
    for (what, needs) in [("no eager call", "outside the capture"), ("no eager backward", "outside the capture")] {
        match capture(&g, || bufs.step(&mut layer, true)) {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains(needs), "{what}: unexpected message: {m}");
                eprintln!("{what}: refused as expected: {m}");
            }
            Err(e) => panic!("{what}: expected InvalidArgument, got {e}"),
            Ok(_) => panic!("{what}: the capture succeeded"),
        }
        if what == "no eager call" {
            bufs.step(&mut layer, false).unwrap(); // an eager forward: its maps, but no backward buffers
            layer.check().unwrap();
        }
    }
    bufs.load(&g, &a);
    bufs.step(&mut layer, true).unwrap();
    layer.check().unwrap();
    assert_eq!(layer.device_epoch(), 3, "one eager forward, one eager forward + backward");
    let bits = bufs.bits(&g, true, "eager after the refused captures");
    ep_against_reference(&bits, &a, &tokens, true, "eager after the refused captures", 1e-2);
});
