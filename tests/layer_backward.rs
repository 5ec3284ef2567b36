//! The layer's forward + backward on one GPU against the f64 CPU reference: y, dx, dW1, dW2 and dtopk within
//! 1e-2, outputs poisoned before each run and checked fully written, repeat runs bitwise equal, gradient
//! accumulation exact. GPU tests: ignored without a GPU.
mod common;

use std::sync::Arc;

use common::{gpu, inputs, kernels_of, rank_input, rng, weights, Inputs, Routing, RAGGED, SMALL};
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::gemm::WgradElem;
use megamoe::layer::{Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save};
use megamoe::reference::{self, Shape};
use megamoe::{check, Gpu};

/// A forward + backward's outputs, weight gradients in `W` (`_acc`: after a second, accumulating backward).
struct Out<W = f32> {
    y: Vec<bf16>,
    dx: Vec<bf16>,
    dtopk: Vec<f32>,
    dw1: Vec<W>,
    dw2: Vec<W>,
    dw1_acc: Vec<W>,
    dw2_acc: Vec<W>,
}

/// `inp` on the device, and the layer's outputs with weight gradients in `W`, poisoned: NaN everywhere (bf16
/// 0xffff, f32 0xffffffff).
struct Dev<W> {
    x: CudaSlice<bf16>,
    w1: CudaSlice<bf16>,
    w2: CudaSlice<bf16>,
    dy: CudaSlice<bf16>,
    ids: CudaSlice<i32>,
    w: CudaSlice<f32>,
    out: CudaSlice<bf16>,
    dx: CudaSlice<bf16>,
    dtopk: CudaSlice<f32>,
    dw1: CudaSlice<W>,
    dw2: CudaSlice<W>,
}

fn device<W: WgradElem>(g: &Arc<Gpu>, inp: &Inputs) -> Dev<W> {
    let s = inp.shape;
    let up = |v: &[bf16]| g.upload(v).unwrap();
    let mut d = Dev {
        x: up(&inp.x),
        w1: up(&inp.w1),
        w2: up(&inp.w2),
        dy: up(&inp.dy),
        ids: g.upload(&inp.ids).unwrap(),
        w: g.upload(&inp.w).unwrap(),
        out: g.alloc::<bf16>(inp.tokens * s.h).unwrap(),
        dx: g.alloc::<bf16>(inp.tokens * s.h).unwrap(),
        dtopk: g.alloc::<f32>(inp.tokens * s.k).unwrap(),
        dw1: g.alloc::<W>(s.e * 2 * s.i * s.h).unwrap(),
        dw2: g.alloc::<W>(s.e * s.h * s.i).unwrap(),
    };
    g.fill_bytes(&mut d.out, 0xff).unwrap();
    g.fill_bytes(&mut d.dx, 0xff).unwrap();
    g.fill_bytes(&mut d.dtopk, 0xff).unwrap();
    g.fill_bytes(&mut d.dw1, 0xff).unwrap();
    g.fill_bytes(&mut d.dw2, 0xff).unwrap();
    d
}

fn run<W: WgradElem + Default>(g: &Arc<Gpu>, layer: &mut MoeLayer, inp: &Inputs) -> Out<W> {
    let Dev { x, w1, w2, dy, ids, w, mut out, mut dx, mut dtopk, mut dw1, mut dw2 } = device::<W>(g, inp);
    let li = LayerInputs { tokens: inp.tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let saved = layer.forward(&li, &mut out).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let (dw1_h, dw2_h) = (g.download(&dw1).unwrap(), g.download(&dw2).unwrap());
    let (dx_h, dtopk_h) = (g.download(&dx).unwrap(), g.download(&dtopk).unwrap());
    // a second micro-batch of the same data, accumulated: exactly twice the weight gradients, and dx and dtopk
    // written afresh (poisoned again first, so rows the accumulating path skips show), bitwise the first call's
    g.fill_bytes(&mut dx, 0xff).unwrap();
    g.fill_bytes(&mut dtopk, 0xff).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: true };
    layer.backward(&saved, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    let dx_acc: Vec<u16> = g.download(&dx).unwrap().iter().map(|v| v.to_bits()).collect();
    let dtopk_acc: Vec<u32> = g.download(&dtopk).unwrap().iter().map(|v| v.to_bits()).collect();
    if let Some(i) = (0..dx_acc.len()).find(|&i| dx_acc[i] != dx_h[i].to_bits()) {
        panic!(
            "the accumulating backward's dx[{i}] = {:#06x}, the first backward's {:#06x}",
            dx_acc[i],
            dx_h[i].to_bits()
        );
    }
    if let Some(i) = (0..dtopk_acc.len()).find(|&i| dtopk_acc[i] != dtopk_h[i].to_bits()) {
        panic!("the accumulating backward's dtopk[{i}] = {:#x}, the first's {:#x}", dtopk_acc[i], dtopk_h[i].to_bits());
    }
    Out {
        y: g.download(&out).unwrap(),
        dx: dx_h,
        dtopk: dtopk_h,
        dw1: dw1_h,
        dw2: dw2_h,
        dw1_acc: g.download(&dw1).unwrap(),
        dw2_acc: g.download(&dw2).unwrap(),
    }
}

fn f16s(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}
fn f32s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// y, dx, dtopk, dW1, dW2 of `o` fully written and within 1e-2 of the reference (dtopk of its terms' scale,
/// [`check::close_scaled`]); accumulation exactly doubles.
fn compare(inp: &Inputs, o: &Out, tag: &str) {
    let (mut outs, grads) = reference::forward_backward(&inp.shape, &[rank_input(inp)], &weights(inp)).unwrap();
    let want = outs.remove(0);
    for (what, got, reference) in [
        ("y", f16s(&o.y), &want.y),
        ("dx", f16s(&o.dx), &want.dx),
        ("dW1", f32s(&o.dw1), &grads.dw1),
        ("dW2", f32s(&o.dw2), &grads.dw2),
    ] {
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            panic!("{tag}: {what}[{i}] is NaN (not written)");
        }
        let e = check::close(&format!("{tag}: {what}"), &got, reference, 1e-2).unwrap();
        eprintln!("{what}: rel err {e:.3e}");
        if what == "y" || what == "dx" {
            // token by token too (a wrong row among thousands hides in the whole tensor's error)
            let er = check::close_rows(&format!("{tag}: {what} rows"), &got, reference, inp.shape.h, 3e-2).unwrap();
            eprintln!("{what}: worst token {er:.3e}");
        }
    }
    // dtopk against its terms' scale: with one token its two dot products can cancel far below their terms
    let e = check::close_scaled(&format!("{tag}: dtopk"), &f32s(&o.dtopk), &want.dtopk, &want.dtopk_scale, 1e-2);
    eprintln!("dtopk: err {:.3e} of the terms' scale", e.unwrap());
    doubled(o, tag, |v| v as f64);
}

/// The accumulated gradients are exactly twice the first ones (both bf16 and f32 hold 2 x exactly).
fn doubled<W: Copy + std::fmt::Display>(o: &Out<W>, tag: &str, f: impl Fn(W) -> f64) {
    for (what, one, two) in [("dW1", &o.dw1, &o.dw1_acc), ("dW2", &o.dw2, &o.dw2_acc)] {
        if let Some(i) = (0..one.len()).find(|&i| (2.0 * f(one[i])).to_bits() != f(two[i]).to_bits()) {
            panic!("{tag}: accumulated {what}[{i}] = {} != 2 x {}", two[i], one[i]);
        }
    }
}

/// The GPU, fresh random inputs and a layer for them.
fn setup(s: Shape, tokens: usize, routing: Routing, save: Save) -> (Arc<Gpu>, Inputs, MoeLayer) {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, routing);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens.max(1), save);
    let layer = MoeLayer::new(g.clone(), cfg).unwrap();
    (g, inp, layer)
}

/// The bits of each element (bitwise comparisons).
fn bits16(v: &[bf16]) -> Vec<u16> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The bits of each element (bitwise comparisons).
fn bits32(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn check_backward(s: Shape, tokens: usize, routing: Routing, save: Save) {
    let (g, inp, mut layer) = setup(s, tokens, routing, save);
    let o = run::<f32>(&g, &mut layer, &inp);
    let tag = format!("{s:?} T={tokens} {routing:?} {save:?}");
    compare(&inp, &o, &tag);
    // repeat: bitwise equal
    let o2 = run(&g, &mut layer, &inp);
    assert!(bits16(&o.y) == bits16(&o2.y) && bits16(&o.dx) == bits16(&o2.dx), "{tag}: y or dx differ between runs");
    assert!(bits32(&o.dtopk) == bits32(&o2.dtopk), "{tag}: dtopk differs between runs");
    assert!(bits32(&o.dw1) == bits32(&o2.dw1) && bits32(&o.dw2) == bits32(&o2.dw2), "{tag}: dW differs between runs");
}

gpu_test!(small_recompute, { check_backward(SMALL, 100, Routing::Uniform, Save::InputsOnly) });
gpu_test!(small_saved_z, { check_backward(SMALL, 100, Routing::Uniform, Save::WithZ) });
gpu_test!(ragged_shape, { check_backward(RAGGED, 211, Routing::Uniform, Save::InputsOnly) });
gpu_test!(ragged_shape_saved_z, { check_backward(RAGGED, 97, Routing::Masked10, Save::WithZ) });
gpu_test!(every_slot_on_one_expert, { check_backward(SMALL, 300, Routing::AllOnOne, Save::InputsOnly) });
gpu_test!(half_the_experts_empty, { check_backward(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly) });
gpu_test!(ten_percent_masked, { check_backward(SMALL, 160, Routing::Masked10, Save::InputsOnly) });
gpu_test!(one_token, { check_backward(SMALL, 1, Routing::Uniform, Save::InputsOnly) });
gpu_test!(qwen3_30b_a3b_t4096, { check_backward(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::InputsOnly) });
// smaller T: the f64 reference's time grows with the rows of the hottest expert
gpu_test!(qwen3_30b_a3b_t256_all_on_one_expert, {
    check_backward(Shape::QWEN3_30B_A3B, 256, Routing::AllOnOne, Save::WithZ)
});
gpu_test!(qwen3_30b_a3b_t1024_half_empty, {
    check_backward(Shape::QWEN3_30B_A3B, 1024, Routing::HalfEmpty, Save::InputsOnly)
});

/// The backward with bf16 weight gradients (`Grads<bf16>`): dx and dtopk bitwise those of the f32 call, dW1 and
/// dW2 each element the f32 gradient rounded to bf16 (the same accumulator, rounded once), every element
/// written, within 1e-2 of the reference; accumulated once more: exactly twice.
fn check_bf16_grads(s: Shape, tokens: usize, routing: Routing, save: Save) {
    let (g, inp, mut layer) = setup(s, tokens, routing, save);
    let o = run::<f32>(&g, &mut layer, &inp);
    let tag = format!("{s:?} T={tokens} {routing:?} {save:?} bf16 dW");
    let ob = run::<bf16>(&g, &mut layer, &inp);
    assert!(
        bits16(&ob.y) == bits16(&o.y) && bits16(&ob.dx) == bits16(&o.dx),
        "{tag}: y or dx differ from the f32 call's"
    );
    assert!(bits32(&ob.dtopk) == bits32(&o.dtopk), "{tag}: dtopk differs from the f32 call's");
    let (_, want) = reference::forward_backward(&inp.shape, &[rank_input(&inp)], &weights(&inp)).unwrap();
    for (what, got, f32_grad, reference) in [("dW1", &ob.dw1, &o.dw1, &want.dw1), ("dW2", &ob.dw2, &o.dw2, &want.dw2)] {
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            panic!("{tag}: {what}[{i}] is NaN (not written)");
        }
        if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != bf16::from_f32(f32_grad[i]).to_bits()) {
            panic!("{tag}: {what}[{i}] = {} is not the f32 gradient {} rounded", got[i], f32_grad[i]);
        }
        let e = check::close(&format!("{tag}: {what}"), &f16s(got), reference, 1e-2).unwrap();
        eprintln!("{what} (bf16): rel err {e:.3e}");
    }
    doubled(&ob, &tag, |v| v.to_f64());
}

/// One `MoeLayer` serves every model layer of its configuration (the weights are inputs, and a `Saved` holds
/// what its backward needs; the workspace is scratch): two model layers' inputs (other x, routing, weights and dy)
/// through one layer in training order, forward A, forward B, backward B, backward A, each bitwise the same
/// inputs' forward + backward on a layer of its own (`run`: its own forward right before), every output written.
fn one_layer_serves_two_model_layers(s: Shape, tokens: usize, save: Save) {
    let g = gpu();
    let mut r = rng();
    let inps = [inputs(&mut r, s, tokens, Routing::Uniform), inputs(&mut r, s, tokens, Routing::Masked10)];
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, save);
    let mut shared = MoeLayer::new(g.clone(), cfg).unwrap();
    assert_eq!(shared.workspace_bytes(), cfg.workspace_bytes().unwrap(), "the workspace counted as allocated");
    let mut devs: Vec<Dev<f32>> = inps.iter().map(|inp| device::<f32>(&g, inp)).collect();
    let mut saved = Vec::new();
    for d in devs.iter_mut() {
        let li = LayerInputs { tokens, x: &d.x, topk_ids: &d.ids, topk_weights: &d.w, w1: &d.w1, w2: &d.w2 };
        saved.push(shared.forward(&li, &mut d.out).unwrap());
    }
    for (d, sv) in devs.iter_mut().zip(&saved).rev() {
        let li = LayerInputs { tokens, x: &d.x, topk_ids: &d.ids, topk_weights: &d.w, w1: &d.w1, w2: &d.w2 };
        let grads = Grads { dx: &mut d.dx, dw1: &mut d.dw1, dw2: &mut d.dw2, dtopk: &mut d.dtopk, accumulate: false };
        shared.backward(sv, &d.dy, &li, grads).unwrap();
    }
    g.sync().unwrap();
    shared.routing_error().unwrap();
    for (m, (inp, d)) in inps.iter().zip(&devs).enumerate() {
        let tag = format!("{s:?} T={tokens} {save:?}, model layer {m} of two through one MoeLayer");
        let mut own = MoeLayer::new(g.clone(), cfg).unwrap();
        let want = run::<f32>(&g, &mut own, inp);
        let (y, dx) = (g.download(&d.out).unwrap(), g.download(&d.dx).unwrap());
        let (dtopk, dw1, dw2) =
            (g.download(&d.dtopk).unwrap(), g.download(&d.dw1).unwrap(), g.download(&d.dw2).unwrap());
        assert!(bits16(&y) == bits16(&want.y), "{tag}: y differs from its own layer's");
        assert!(bits16(&dx) == bits16(&want.dx), "{tag}: dx differs from its own layer's");
        assert!(bits32(&dtopk) == bits32(&want.dtopk), "{tag}: dtopk differs from its own layer's");
        assert!(bits32(&dw1) == bits32(&want.dw1) && bits32(&dw2) == bits32(&want.dw2), "{tag}: dW differs");
        compare(inp, &want, &tag);
    }
}

gpu_test!(one_layer_serves_two_model_layers_recompute, {
    one_layer_serves_two_model_layers(RAGGED, 211, Save::InputsOnly)
});
gpu_test!(one_layer_serves_two_model_layers_saved_z, { one_layer_serves_two_model_layers(SMALL, 160, Save::WithZ) });

gpu_test!(bf16_weight_gradients_ragged, { check_bf16_grads(RAGGED, 211, Routing::Masked10, Save::WithZ) });
gpu_test!(bf16_weight_gradients_half_empty, { check_bf16_grads(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly) });
gpu_test!(bf16_weight_gradients_qwen3_30b_a3b_t1024, {
    check_bf16_grads(Shape::QWEN3_30B_A3B, 1024, Routing::Uniform, Save::WithZ)
});

/// Every output of two runs bit for bit the same (f32 weight gradients), or a panic naming `what` and the first that
/// differs.
fn assert_bitwise(what: &str, o: &Out, other: &Out) {
    assert!(bits16(&o.dx) == bits16(&other.dx), "{what}: dx differs");
    assert!(bits32(&o.dtopk) == bits32(&other.dtopk), "{what}: dtopk differs");
    for (name, a, b) in [
        ("dW1", &o.dw1, &other.dw1),
        ("dW2", &o.dw2, &other.dw2),
        ("dW1 acc", &o.dw1_acc, &other.dw1_acc),
        ("dW2 acc", &o.dw2_acc, &other.dw2_acc),
    ] {
        assert!(bits32(a) == bits32(b), "{what}: {name} differs");
    }
}

// Programmatic dependent launch (`MEGAMOE_PDL=on`: each kernel scheduled while the one before it ends, waiting at its
// entry; the run-time tile counters reset by each launch's last take instead of memsets): every output bitwise the
// plain launches', three times in a row (each launch of a counter after another), at the 30B shape (more tiles than
// blocks in every GEMM) with z saved and recomputed, and the ragged shape with masked slots.
gpu_test!(programmatic_dependent_launch_matches_plain_launches, {
    for (s, tokens, routing, save) in [
        (Shape::QWEN3_30B_A3B, 1024, Routing::Uniform, Save::WithZ),
        (Shape::QWEN3_30B_A3B, 1024, Routing::Masked10, Save::InputsOnly),
        (RAGGED, 211, Routing::Masked10, Save::WithZ),
    ] {
        let (g, inp, mut layer) = setup(s, tokens, routing, save);
        let o = megamoe::with_pdl(false, || run::<f32>(&g, &mut layer, &inp));
        for i in 0..3 {
            let op = megamoe::with_pdl(true, || run::<f32>(&g, &mut layer, &inp));
            let what = format!("{tokens} tokens {routing:?} {save:?}, PDL round {i}");
            assert!(bits16(&o.y) == bits16(&op.y), "{what}: y differs");
            assert_bitwise(&what, &o, &op);
        }
    }
});

// The weight gradients in 2-CTA clusters (`WgradSched::Clusters`; at the 30B shape dW2 has 16 m-tiles and dW1 12,
// so `grouped_wgrad_f32_mc` and, with dx's combine, `_mv_mc` run): every output bitwise the single-CTA schedule's.
gpu_test!(clustered_weight_gradients_match_the_single_cta_qwen3_30b_a3b_t1024, {
    let (g, inp, mut layer) = setup(Shape::QWEN3_30B_A3B, 1024, Routing::Uniform, Save::WithZ);
    let o = megamoe::gemm::with_wgrad_sched(megamoe::gemm::WgradSched::Dynamic, || run::<f32>(&g, &mut layer, &inp));
    let oc = megamoe::gemm::with_wgrad_sched(megamoe::gemm::WgradSched::Clusters, || run::<f32>(&g, &mut layer, &inp));
    assert_bitwise("clusters against the single-CTA schedule", &o, &oc);
});

/// `f` with both weight gradients reading the expert-ordered copies of their operands (`WgradGather::Off`): the
/// gathers' baseline, whatever the shape rule picks.
fn copies<R>(f: impl FnOnce() -> R) -> R {
    megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Off), f)
}

// dW2's A gathered by its own producer warpgroup (`MEGAMOE_WGRAD_GATHER=1`, `grouped_wgrad_*_ga_mc` at the 30B shape;
// dx's sum whole in dW1's idle warps): every output bitwise the default's, f32 and bf16 weight gradients.
gpu_test!(wgrad_gather_matches_the_copy_qwen3_30b_a3b_t1024, {
    let (g, inp, mut layer) = setup(Shape::QWEN3_30B_A3B, 1024, Routing::Uniform, Save::WithZ);
    let o = copies(|| run::<f32>(&g, &mut layer, &inp));
    let (og, ran) = kernels_of(&g, || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || run::<f32>(&g, &mut layer, &inp))
    });
    assert!(ran.contains(&"grouped_wgrad_f32_ga_mc"), "the gathering dW2 did not run: {ran:?}");
    assert_bitwise("dW2's A gathered against the copy", &o, &og);
    let o = copies(|| run::<bf16>(&g, &mut layer, &inp));
    let (og, ran) = kernels_of(&g, || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || run::<bf16>(&g, &mut layer, &inp))
    });
    assert!(ran.contains(&"grouped_wgrad_bf16_ga_mc"), "the gathering bf16 dW2 did not run: {ran:?}");
    let b16 = |v: &[bf16]| bits16(v);
    assert!(b16(&o.dw2) == b16(&og.dw2) && b16(&o.dw1) == b16(&og.dw1), "gathered A: bf16 dW differs");
    assert!(b16(&o.dw2_acc) == b16(&og.dw2_acc) && b16(&o.dw1_acc) == b16(&og.dw1_acc), "bf16 dW acc differs");
});

// The same with fewer tokens than the layer's max_tokens (the saved row slots then fewer than the workspace's rows)
// and M an odd multiple of 64 (RAGGED: dW2's M = 320, the last m-tile's second box past M): f32 weight gradients.
gpu_test!(wgrad_gather_matches_the_copy_fewer_tokens_ragged, {
    let g = gpu();
    let mut r = rng();
    let (s, tokens) = (RAGGED, 97);
    let inp = inputs(&mut r, s, tokens, Routing::Masked10);
    let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, 3 * tokens, Save::WithZ)).unwrap();
    let o = copies(|| run::<f32>(&g, &mut layer, &inp));
    let (og, ran) = kernels_of(&g, || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || run::<f32>(&g, &mut layer, &inp))
    });
    // (dW2's M = 320: three m-tiles, so the single-CTA form)
    assert!(ran.contains(&"grouped_wgrad_f32_ga"), "the gathering dW2 did not run: {ran:?}");
    assert_bitwise("dW2's A gathered against the copy, fewer tokens than max_tokens", &o, &og);
});

// At a fine-grained shape (I = 256, 16 slots a token; SonicMoE's in small): dx summed by the combine pass (the
// default below I = 512: no dx-sum share in either weight gradient) with z saved, and by the movers forced (dW1's
// take the whole sum) with z recomputed; f32 and bf16 weight gradients, every output bitwise the copy's.
gpu_test!(wgrad_gather_matches_the_copy_i256_top16, {
    let s = Shape { h: 512, i: 256, e: 32, k: 16 };
    for (save, movers) in [(Save::WithZ, None), (Save::InputsOnly, Some(true))] {
        let (g, inp, mut layer) = setup(s, 300, Routing::Uniform, save);
        megamoe::gemm::with_dx_combine(movers, || {
            let o = copies(|| run::<f32>(&g, &mut layer, &inp));
            let gather = || {
                megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || {
                    run::<f32>(&g, &mut layer, &inp)
                })
            };
            let (og, ran) = kernels_of(&g, gather);
            assert!(ran.iter().any(|k| k.starts_with("grouped_wgrad_f32_ga")), "no gathering dW2 ran: {ran:?}");
            assert_bitwise(&format!("{save:?} movers {movers:?}: dW2's A gathered against the copy"), &o, &og);
            let o = copies(|| run::<bf16>(&g, &mut layer, &inp));
            let gather = || {
                megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || {
                    run::<bf16>(&g, &mut layer, &inp)
                })
            };
            let (og, ran) = kernels_of(&g, gather);
            assert!(ran.iter().any(|k| k.starts_with("grouped_wgrad_bf16_ga")), "no gathering dW2 ran: {ran:?}");
            assert!(bits16(&o.dx) == bits16(&og.dx), "{save:?} movers {movers:?}: bf16 weight gradients: dx differs");
            assert!(bits16(&o.dw2) == bits16(&og.dw2) && bits16(&o.dw1) == bits16(&og.dw1), "bf16 dW differs");
            assert!(bits16(&o.dw2_acc) == bits16(&og.dw2_acc) && bits16(&o.dw1_acc) == bits16(&og.dw1_acc));
        });
    }
});

/// dW1's B (x's rows) gathered by its own producer warpgroup too (`MEGAMOE_WGRAD_GATHER=2`: `grouped_wgrad_*_gb`,
/// single CTAs whatever the schedule; no gather pass of x and no side copy, dx's plain kernel; where dW2 gathers
/// too, dx's sum by the combine pass): every output bitwise the default's, f32 and bf16 weight gradients, dx's
/// combine asked of the movers and of the pass (`gemm::with_dx_combine`), z saved (the gathering dW1 runs) and
/// recomputed (it does not: the recompute's GEMM1 reads x's rows in expert order, so they are made anyway), with the
/// layer sized for `max_tokens` (more than `tokens`: the saved row slots fewer than the workspace's rows).
fn wgrad_gather_x(s: Shape, tokens: usize, max_tokens: usize, routing: Routing) {
    let g = gpu();
    let inp = inputs(&mut rng(), s, tokens, routing);
    let gx = megamoe::gemm::WgradGather::DyX;
    for save in [Save::WithZ, Save::InputsOnly] {
        let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, max_tokens, save)).unwrap();
        for movers in [Some(true), Some(false)] {
            megamoe::gemm::with_dx_combine(movers, || {
                let what = format!("{s:?} {tokens} tokens {routing:?} {save:?} movers {movers:?}");
                let gathers = save == Save::WithZ;
                let o = copies(|| run::<f32>(&g, &mut layer, &inp));
                let (og, ran) =
                    kernels_of(&g, || megamoe::gemm::with_wgrad_gather(Some(gx), || run::<f32>(&g, &mut layer, &inp)));
                assert_eq!(ran.contains(&"grouped_wgrad_f32_gb"), gathers, "{what}: the gathering dW1: {ran:?}");
                assert!(!gathers || !ran.contains(&"grouped_gemm_bt_bf16_cpx"), "{what}: the side copy ran: {ran:?}");
                assert_bitwise(&format!("{what}: x's rows gathered by dW1"), &o, &og);
                let o = copies(|| run::<bf16>(&g, &mut layer, &inp));
                let (og, ran) =
                    kernels_of(&g, || megamoe::gemm::with_wgrad_gather(Some(gx), || run::<bf16>(&g, &mut layer, &inp)));
                assert_eq!(ran.contains(&"grouped_wgrad_bf16_gb"), gathers, "{what}: the bf16 dW1: {ran:?}");
                assert!(bits16(&o.dx) == bits16(&og.dx), "{what}: bf16 weight gradients: dx differs");
                assert!(bits32(&o.dtopk) == bits32(&og.dtopk), "{what}: bf16 weight gradients: dtopk differs");
                assert!(bits16(&o.dw2) == bits16(&og.dw2) && bits16(&o.dw1) == bits16(&og.dw1), "{what}: bf16 dW");
                assert!(bits16(&o.dw2_acc) == bits16(&og.dw2_acc), "{what}: bf16 dW2 acc differs");
                assert!(bits16(&o.dw1_acc) == bits16(&og.dw1_acc), "{what}: bf16 dW1 acc differs");
            });
        }
    }
}

// H = 320: a partial n-tile of dW1 (its second n-tile's columns past N zero-filled chunk by chunk)
gpu_test!(wgrad_gather_x_matches_the_copy_ragged, { wgrad_gather_x(RAGGED, 211, 211, Routing::Uniform) });
gpu_test!(wgrad_gather_x_matches_the_copy_masked_fewer_tokens, { wgrad_gather_x(SMALL, 97, 300, Routing::Masked10) });
gpu_test!(wgrad_gather_x_matches_the_copy_half_empty, { wgrad_gather_x(RAGGED, 150, 150, Routing::HalfEmpty) });
// I = 256, 16 slots a token (SonicMoE's fine-grained shape in small); dW1's M = 512 (four m-tiles): under the
// clusters' schedule the gathering dW1 still runs single CTAs, and the side copy asked for still does not run
gpu_test!(wgrad_gather_x_matches_the_copy_i256_top16, {
    let s = Shape { h: 512, i: 256, e: 32, k: 16 };
    wgrad_gather_x(s, 300, 300, Routing::Uniform);
    megamoe::gemm::with_wgrad_sched(megamoe::gemm::WgradSched::Clusters, || {
        megamoe::gemm::with_side_copy(Some(true), || wgrad_gather_x(s, 170, 170, Routing::Masked10))
    });
});
// the 30B shape (dW1's M = 1536, twelve m-tiles; more tiles than blocks), z saved
gpu_test!(wgrad_gather_x_matches_the_copy_qwen3_30b_a3b_t1024, {
    let (g, inp, mut layer) = setup(Shape::QWEN3_30B_A3B, 1024, Routing::Uniform, Save::WithZ);
    let gx = megamoe::gemm::WgradGather::DyX;
    let o = copies(|| run::<f32>(&g, &mut layer, &inp));
    let (og, ran) = kernels_of(&g, || megamoe::gemm::with_wgrad_gather(Some(gx), || run::<f32>(&g, &mut layer, &inp)));
    assert!(ran.contains(&"grouped_wgrad_f32_gb"), "the gathering dW1 did not run: {ran:?}");
    assert_bitwise("x's rows gathered by dW1 against the copy", &o, &og);
});

gpu_test!(zero_tokens_write_zero_weight_gradients, {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, SMALL, 0, Routing::Uniform);
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 4, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let o = run::<f32>(&g, &mut layer, &inp);
    assert!(o.y.is_empty() && o.dx.is_empty() && o.dtopk.is_empty());
    assert!(o.dw1.iter().chain(&o.dw2).all(|&v| v == 0.0), "dW of an empty batch must be zero");
});

gpu_test!(backward_rejects_mismatched_buffers, {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, SMALL, 8, Routing::Uniform);
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 8, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let up = |v: &[bf16]| g.upload(v).unwrap();
    let (x, w1, w2, dy) = (up(&inp.x), up(&inp.w1), up(&inp.w2), up(&inp.dy));
    let (ids, w) = (g.upload(&inp.ids).unwrap(), g.upload(&inp.w).unwrap());
    let li = LayerInputs { tokens: 8, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let mut out = g.alloc::<bf16>(8 * SMALL.h).unwrap();
    let saved = layer.forward(&li, &mut out).unwrap();
    let mut dx = g.alloc::<bf16>(7 * SMALL.h).unwrap(); // one token short
    let mut dtopk = g.alloc::<f32>(8 * SMALL.k).unwrap();
    let mut dw1 = g.alloc::<f32>(SMALL.e * 2 * SMALL.i * SMALL.h).unwrap();
    let mut dw2 = g.alloc::<f32>(SMALL.e * SMALL.h * SMALL.i).unwrap();
    g.fill_bytes(&mut dw1, 0x3c).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    assert!(layer.backward(&saved, &dy, &li, grads).is_err());
    g.sync().unwrap();
    assert!(g.download(&dw1).unwrap().iter().all(|v| v.to_bits() == 0x3c3c_3c3c), "a rejected backward wrote");
});

gpu_test!(nan_in_one_token_stays_in_what_it_touches, {
    let g = gpu();
    let mut r = rng();
    let mut inp = inputs(&mut r, SMALL, 64, Routing::Uniform);
    inp.x[9 * SMALL.h + 1] = bf16::NAN;
    let cfg = LayerConfig::bf16(SMALL.h, SMALL.i, SMALL.e, SMALL.k, 64, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let o = run::<f32>(&g, &mut layer, &inp);
    let (mut outs, grads) = reference::forward_backward(&SMALL, &[rank_input(&inp)], &weights(&inp)).unwrap();
    let want = outs.remove(0);
    let (h, k) = (SMALL.h, SMALL.k);
    let touched: Vec<usize> = inp.ids[9 * k..10 * k].iter().map(|&e| e as usize).collect();
    for t in (0..64).filter(|&t| t != 9) {
        let dx = f16s(&o.dx[t * h..(t + 1) * h]);
        check::close(&format!("dx of token {t}"), &dx, &want.dx[t * h..(t + 1) * h], 1e-2).unwrap();
        assert!(o.dtopk[t * k..(t + 1) * k].iter().all(|v| v.is_finite()), "dtopk of token {t}");
    }
    let (s1, s2) = (2 * SMALL.i * h, h * SMALL.i);
    for e in (0..SMALL.e).filter(|e| !touched.contains(e)) {
        let got = f32s(&o.dw1[e * s1..(e + 1) * s1]);
        check::close(&format!("dW1 of untouched expert {e}"), &got, &grads.dw1[e * s1..(e + 1) * s1], 1e-2).unwrap();
        let got = f32s(&o.dw2[e * s2..(e + 1) * s2]);
        check::close(&format!("dW2 of untouched expert {e}"), &got, &grads.dw2[e * s2..(e + 1) * s2], 1e-2).unwrap();
    }
});

/// Poison (every byte 0xff: NaN, which any write or any f32 add, even of 0, changes to another bit pattern)
/// and the check that a buffer still holds it.
fn poison<T>(g: &Gpu, b: &mut cudarc::driver::CudaSlice<T>) {
    g.fill_bytes(b, 0xff).unwrap();
}
fn untouched16(what: &str, v: &[bf16]) {
    if let Some(i) = v.iter().position(|x| x.to_bits() != 0xffff) {
        panic!("{what}[{i}] = {:#06x} was written (poison 0xffff)", v[i].to_bits());
    }
}
fn untouched32(what: &str, v: &[f32]) {
    if let Some(i) = v.iter().position(|x| x.to_bits() != 0xffff_ffff) {
        panic!("{what}[{i}] = {:#010x} was written (poison 0xffffffff)", v[i].to_bits());
    }
}

/// A forward with one invalid id (`bad_id`: >= E or < -1) between a valid forward and its backward: the bad
/// call writes nothing (y), its backward writes nothing (dx, dtopk, dW1, dW2; accumulate false and true), the
/// earlier valid call's backward is right, and so is a valid forward + backward after it on the same layer.
fn invalid_id_backward_writes_nothing(bad_id: i32, save: Save) {
    let g = gpu();
    let mut r = rng();
    let s = SMALL;
    let tokens = 48;
    let inp = inputs(&mut r, s, tokens, Routing::Uniform);
    let mut bad = inp.ids.clone();
    bad[11 * s.k] = bad_id;
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, save);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let up = |v: &[bf16]| g.upload(v).unwrap();
    let (x, w1, w2, dy) = (up(&inp.x), up(&inp.w1), up(&inp.w2), up(&inp.dy));
    let (ids, bad_ids, w) = (g.upload(&inp.ids).unwrap(), g.upload(&bad).unwrap(), g.upload(&inp.w).unwrap());
    let li = LayerInputs { tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let lb = LayerInputs { topk_ids: &bad_ids, ..li };
    let alloc16 = || g.alloc::<bf16>(tokens * s.h).unwrap();
    let (mut y_ok, mut y_bad, mut dx) = (alloc16(), alloc16(), alloc16());
    let mut dtopk = g.alloc::<f32>(tokens * s.k).unwrap();
    let mut dw1 = g.alloc::<f32>(s.e * 2 * s.i * s.h).unwrap();
    let mut dw2 = g.alloc::<f32>(s.e * s.h * s.i).unwrap();
    poison(&g, &mut y_ok);
    poison(&g, &mut y_bad);
    let saved_ok = layer.forward(&li, &mut y_ok).unwrap();
    let saved_bad = layer.forward(&lb, &mut y_bad).unwrap();
    g.sync().unwrap();
    untouched16(&format!("id {bad_id}: y"), &g.download(&y_bad).unwrap());
    assert!(layer.routing_error().is_err() && saved_bad.check(&g).is_err(), "id {bad_id} not reported");
    saved_ok.check(&g).unwrap();
    for accumulate in [false, true] {
        poison(&g, &mut dx);
        poison(&g, &mut dtopk);
        poison(&g, &mut dw1);
        poison(&g, &mut dw2);
        let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate };
        layer.backward(&saved_bad, &dy, &lb, grads).expect("found on the device, not by the call");
        g.sync().unwrap();
        let tag = format!("id {bad_id}, {save:?}, accumulate {accumulate}");
        untouched16(&format!("{tag}: dx"), &g.download(&dx).unwrap());
        untouched32(&format!("{tag}: dtopk"), &g.download(&dtopk).unwrap());
        untouched32(&format!("{tag}: dW1"), &g.download(&dw1).unwrap());
        untouched32(&format!("{tag}: dW2"), &g.download(&dw2).unwrap());
    }
    // the valid call's backward, after the bad forward: its own word is clear, so it is complete and right
    poison(&g, &mut dx);
    poison(&g, &mut dtopk);
    poison(&g, &mut dw1);
    poison(&g, &mut dw2);
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved_ok, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    let (dw1_h, dw2_h) = (g.download(&dw1).unwrap(), g.download(&dw2).unwrap());
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: true };
    layer.backward(&saved_ok, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    let o = Out {
        y: g.download(&y_ok).unwrap(),
        dx: g.download(&dx).unwrap(),
        dtopk: g.download(&dtopk).unwrap(),
        dw1: dw1_h,
        dw2: dw2_h,
        dw1_acc: g.download(&dw1).unwrap(),
        dw2_acc: g.download(&dw2).unwrap(),
    };
    compare(&inp, &o, &format!("valid call before a bad one (id {bad_id}, {save:?})"));
    // a valid forward + backward after the bad call, on the same layer (run() checks routing_error is clear)
    let o = run::<f32>(&g, &mut layer, &inp);
    compare(&inp, &o, &format!("valid call after a bad one (id {bad_id}, {save:?})"));
    assert!(saved_bad.check(&g).is_err(), "a later forward changed an older call's error word");
}

gpu_test!(invalid_id_e_backward_writes_nothing, {
    invalid_id_backward_writes_nothing(SMALL.e as i32, Save::InputsOnly)
});
gpu_test!(invalid_id_minus_two_backward_writes_nothing, { invalid_id_backward_writes_nothing(-2, Save::WithZ) });

// A saved state is its own layer's, and only once a forward into it ran: a backward with another layer's (the
// same configuration), or with one no forward completed, is an error that writes nothing; so is a forward into
// another layer's.
gpu_test!(saved_state_of_another_layer_or_of_no_forward_is_refused, {
    let g = gpu();
    let s = SMALL;
    let tokens = 32;
    let inp = inputs(&mut rng(), s, tokens, Routing::Uniform);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, Save::WithZ);
    let (mut a, mut b) = (MoeLayer::new(g.clone(), cfg).unwrap(), MoeLayer::new(g.clone(), cfg).unwrap());
    let Dev { x, w1, w2, dy, ids, w, mut out, mut dx, mut dtopk, mut dw1, mut dw2 } = device::<f32>(&g, &inp);
    let li = LayerInputs { tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let saved_a = a.forward(&li, &mut out).unwrap();
    let never = b.alloc_saved(tokens).unwrap();
    for (what, saved) in [("another layer's", &saved_a), ("a never forwarded", &never)] {
        let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
        let e = b.backward(saved, &dy, &li, grads).err().unwrap_or_else(|| panic!("{what} saved state accepted"));
        assert!(matches!(e, megamoe::Error::InvalidArgument(_)), "{what}: {e}");
    }
    let mut sa = a.alloc_saved(tokens).unwrap();
    assert!(b.forward_into(&li, &mut out, &mut sa).is_err(), "a forward into another layer's saved state");
    g.sync().unwrap();
    untouched16("dx", &g.download(&dx).unwrap());
    untouched32("dtopk", &g.download(&dtopk).unwrap());
    untouched32("dW1", &g.download(&dw1).unwrap());
    untouched32("dW2", &g.download(&dw2).unwrap());
    // the owner's backward still takes it
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    a.backward(&saved_a, &dy, &li, grads).unwrap();
    g.sync().unwrap();
});

// The backward from `route_into`'s layout (the forward's inputs only, no forward state: what the PyTorch custom
// operators use) is bitwise the backward from the forward's own `Saved`, outputs poisoned first (the state routed
// first for other ids, then for the real ones: the layout is rewritten whole); a layer that keeps z refuses.
gpu_test!(backward_from_route_into_matches_the_forwards_saved_state, {
    let (g, inp, mut layer) = setup(RAGGED, 211, Routing::Masked10, Save::InputsOnly);
    let want = run::<f32>(&g, &mut layer, &inp);
    let d = device::<f32>(&g, &inp);
    let Dev { x, w1, w2, dy, ids, w, mut dx, mut dtopk, mut dw1, mut dw2, .. } = d;
    let li = LayerInputs { tokens: inp.tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let mut saved = layer.alloc_saved(inp.tokens).unwrap();
    // first routed for other ids (every slot on expert 0), then for the real ones
    let other: Vec<i32> = vec![0; inp.ids.len()];
    let other = g.upload(&other).unwrap();
    layer.route_into(&other, inp.tokens, &mut saved).unwrap();
    layer.route_into(&ids, inp.tokens, &mut saved).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    assert!(bits16(&g.download(&dx).unwrap()) == bits16(&want.dx), "dx differs from the forward's state's");
    assert!(bits32(&g.download(&dtopk).unwrap()) == bits32(&want.dtopk), "dtopk differs");
    assert!(bits32(&g.download(&dw1).unwrap()) == bits32(&want.dw1), "dW1 differs");
    assert!(bits32(&g.download(&dw2).unwrap()) == bits32(&want.dw2), "dW2 differs");
    let cfg = LayerConfig::bf16(RAGGED.h, RAGGED.i, RAGGED.e, RAGGED.k, 211, Save::WithZ);
    let mut kz = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut sz = kz.alloc_saved(211).unwrap();
    match kz.route_into(&ids, inp.tokens, &mut sz) {
        Err(megamoe::Error::InvalidArgument(m)) => eprintln!("refused as expected: {m}"),
        other => panic!("a layer keeping z took route_into: {:?}", other.map(|_| ())),
    }
});

gpu_test!(past_2g_elements_sampled_tokens_match_the_reference, {
    // T k H > 2^31: 34000 tokens at top-16 and H = 4096 make 544000 routed rows of 2.2e9 elements (the limit was
    // 2^31 before the kernels' unsigned 32-bit offsets were audited, docs/wip/offsets-2g.md). The whole step runs
    // (z saved, the side copy at H = 4096, bf16 weight gradients); y, dx and dtopk of 24 tokens routed to the last
    // expert (its rows the last of the routed rows, their element offsets past 2^31) against the f64 reference of
    // those tokens alone (a token's outputs depend on its own experts only), every element of y and dx written
    let g = gpu();
    let mut r = rng();
    let s = Shape { h: 4096, i: 256, e: 32, k: 16 };
    let t = 34000;
    assert!(t * s.k * s.h > 1 << 31);
    let inp = inputs(&mut r, s, t, Routing::Uniform);
    let cfg = LayerConfig::bf16(s.h, s.i, s.e, s.k, t, Save::WithZ);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let Dev { x, w1, w2, dy, ids, w, mut out, mut dx, mut dtopk, mut dw1, mut dw2 } = device::<bf16>(&g, &inp);
    let li = LayerInputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let saved = layer.forward(&li, &mut out).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward(&saved, &dy, &li, grads).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let (y, dx, dtopk) = (g.download(&out).unwrap(), g.download(&dx).unwrap(), g.download(&dtopk).unwrap());
    assert!(y.iter().all(|v| v.to_bits() != 0xffff), "y not fully written");
    assert!(dx.iter().all(|v| v.to_bits() != 0xffff), "dx not fully written");
    // the sampled tokens: the first 24 with a slot on the last expert
    let last = (s.e - 1) as i32;
    let picked: Vec<usize> = (0..t).filter(|&tok| inp.ids[tok * s.k..][..s.k].contains(&last)).take(24).collect();
    assert_eq!(picked.len(), 24);
    let rows =
        |v: &[bf16], w: usize| -> Vec<bf16> { picked.iter().flat_map(|&tok| v[tok * w..][..w].to_vec()).collect() };
    let sub = Inputs {
        shape: s,
        tokens: picked.len(),
        x: rows(&inp.x, s.h),
        ids: picked.iter().flat_map(|&tok| inp.ids[tok * s.k..][..s.k].to_vec()).collect(),
        w: picked.iter().flat_map(|&tok| inp.w[tok * s.k..][..s.k].to_vec()).collect(),
        w1: inp.w1.clone(),
        w2: inp.w2.clone(),
        dy: rows(&inp.dy, s.h),
    };
    let (mut outs, _) = reference::forward_backward(&s, &[rank_input(&sub)], &weights(&sub)).unwrap();
    let o = outs.remove(0);
    let f = |v: Vec<bf16>| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
    check::close("y (sampled tokens)", &f(rows(&y, s.h)), &o.y, 1e-2).unwrap();
    check::close("dx (sampled tokens)", &f(rows(&dx, s.h)), &o.dx, 1e-2).unwrap();
    let dt: Vec<f64> = picked.iter().flat_map(|&tok| dtopk[tok * s.k..][..s.k].iter().map(|&v| v as f64)).collect();
    check::close_scaled("dtopk (sampled tokens)", &dt, &o.dtopk, &o.dtopk_scale, 1e-2).unwrap();
});
