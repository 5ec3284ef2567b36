//! A whole training step of the layer (forward into a preallocated `Saved`, backward) captured in a CUDA graph
//! and replayed on new contents of the same buffers: every output poisoned before each run and checked fully
//! written, within 1e-2 of the f64 reference, and bitwise equal to the same step run eagerly; a capture that
//! meets a buffer the layer has not seen yet ends in a clear error. GPU tests: ignored without a GPU.
mod common;

use std::sync::Arc;

use common::{gpu, inputs, rank_input, rng, weights, Inputs, Routing, RAGGED, SMALL};
use cudarc::driver::sys;
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::layer::{Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save, Saved};
use megamoe::reference::{self, Shape};
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

    /// Forward into `saved`, then the backward: the step a graph captures. No allocation, no synchronisation.
    fn step(&mut self, layer: &mut MoeLayer, saved: &mut Saved, tokens: usize) -> megamoe::Result<()> {
        let li =
            LayerInputs { tokens, x: &self.x, topk_ids: &self.ids, topk_weights: &self.w, w1: &self.w1, w2: &self.w2 };
        layer.forward_into(&li, &mut self.out, saved)?;
        let grads = Grads {
            dx: &mut self.dx,
            dw1: &mut self.dw1,
            dw2: &mut self.dw2,
            dtopk: &mut self.dtopk,
            accumulate: false,
        };
        layer.backward(saved, &self.dy, &li, grads)
    }

    fn bits(&self, g: &Gpu) -> Bits {
        let b16 = |v: &CudaSlice<bf16>| g.download(v).unwrap().iter().map(|x| x.to_bits()).collect();
        let b32 = |v: &CudaSlice<f32>| g.download(v).unwrap().iter().map(|x| x.to_bits()).collect();
        Bits { y: b16(&self.out), dx: b16(&self.dx), dtopk: b32(&self.dtopk), dw1: b32(&self.dw1), dw2: b32(&self.dw2) }
    }
}

/// Every output written (no NaN: the poison is NaN) and within 1e-2 of the f64 reference.
fn against_reference(b: &Bits, inp: &Inputs, tag: &str) {
    let (mut outs, grads) = reference::forward_backward(&inp.shape, &[rank_input(inp)], &weights(inp)).unwrap();
    let want = outs.remove(0);
    let h16 = |v: &[u16]| v.iter().map(|&x| bf16::from_bits(x).to_f64()).collect::<Vec<_>>();
    let h32 = |v: &[u32]| v.iter().map(|&x| f32::from_bits(x) as f64).collect::<Vec<_>>();
    for (what, got, reference) in [
        ("y", h16(&b.y), &want.y),
        ("dx", h16(&b.dx), &want.dx),
        ("dtopk", h32(&b.dtopk), &want.dtopk),
        ("dW1", h32(&b.dw1), &grads.dw1),
        ("dW2", h32(&b.dw2), &grads.dw2),
    ] {
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            panic!("{tag}: {what}[{i}] is NaN (not written)");
        }
        let e = check::close(&format!("{tag}: {what}"), &got, reference, 1e-2).unwrap();
        eprintln!("{tag}: {what} rel err {e:.3e}");
    }
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
    against_reference(&eager_a, &a, &format!("{tag} eager A"));

    let graph = capture(&g, || bufs.step(&mut layer, &mut saved, tokens)).unwrap();

    for (inp, name) in [(&b, "B"), (&a, "A")] {
        bufs.load(&g, inp);
        graph.launch().unwrap();
        g.sync().unwrap();
        layer.routing_error().unwrap();
        let replay = bufs.bits(&g);
        against_reference(&replay, inp, &format!("{tag} graph {name}"));
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

gpu_test!(graph_small_saved_z, { check_graph(SMALL, 100, Routing::Uniform, Save::WithZ) });
gpu_test!(graph_ragged_recompute_masked, { check_graph(RAGGED, 97, Routing::Masked10, Save::InputsOnly) });
gpu_test!(graph_qwen3_30b_a3b_t512, { check_graph(Shape::QWEN3_30B_A3B, 512, Routing::Uniform, Save::WithZ) });

// A capture that meets a buffer the layer has no tensor map for yet: `Error::InvalidArgument` saying what to do;
// after the capture the same step runs eagerly and is correct.
gpu_test!(graph_capture_before_any_eager_call_is_a_clear_error, {
    let g = gpu();
    let mut r = rng();
    let a = inputs(&mut r, SMALL, 64, Routing::Uniform);
    let mut layer =
        MoeLayer::new(g.clone(), LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 64, Save::WithZ)).unwrap();
    let mut saved = layer.alloc_saved(64).unwrap();
    let mut bufs = Bufs::new(&g, &a);
    bufs.load(&g, &a);
    g.sync().unwrap();
    match capture(&g, || bufs.step(&mut layer, &mut saved, 64)) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("CUDA graph capture"), "unexpected message: {m}");
            eprintln!("refused as expected: {m}");
        }
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(_) => panic!("a capture with no tensor maps encoded succeeded"),
    }
    bufs.load(&g, &a);
    bufs.step(&mut layer, &mut saved, 64).unwrap();
    g.sync().unwrap();
    against_reference(&bufs.bits(&g), &a, "eager after the refused capture");
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
