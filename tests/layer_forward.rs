//! The layer's forward on one GPU against the f64 CPU reference (fresh random inputs every run, outputs
//! poisoned before each run, repeat runs bitwise equal). GPU tests: ignored without a GPU.
mod common;

use std::sync::Arc;

use common::{gpu, inputs, kernels_of, reference_y, rng, Inputs, Routing, RAGGED, SMALL};
use half::bf16;
use megamoe::layer::{Forward, Gather, Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save};
use megamoe::reference::Shape;
use megamoe::{check, gemm, Error, Gpu};

fn config(s: Shape, max_tokens: usize, save: Save) -> LayerConfig {
    LayerConfig::bf16(s.h, s.i, s.e, s.k, max_tokens, save)
}

/// Run the forward once on `inp` into a poisoned output; return it as f64 and as raw bits.
fn run(g: &Arc<Gpu>, layer: &mut MoeLayer, inp: &Inputs) -> (Vec<f64>, Vec<u16>) {
    let x = g.upload(&inp.x).unwrap();
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let w1 = g.upload(&inp.w1).unwrap();
    let w2 = g.upload(&inp.w2).unwrap();
    let mut out = g.alloc::<bf16>(inp.tokens * inp.shape.h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap(); // bf16 NaN everywhere
    let li = LayerInputs { tokens: inp.tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
    layer.forward(&li, &mut out).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let o = g.download(&out).unwrap();
    (o.iter().map(|v| v.to_f64()).collect(), o.iter().map(|v| v.to_bits()).collect())
}

fn check_forward(s: Shape, tokens: usize, routing: Routing, save: Save) {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, routing);
    let mut layer = MoeLayer::new(g.clone(), config(s, tokens.max(1), save)).unwrap();
    let (y, bits) = run(&g, &mut layer, &inp);
    if let Some(i) = y.iter().position(|v| v.is_nan()) {
        panic!("out[{i}] is NaN: not written (poison) or not finite");
    }
    let want = reference_y(&inp);
    let e = check::close(&format!("y ({s:?}, T={tokens}, {routing:?})"), &y, &want, 1e-2).unwrap();
    // and token by token (a wrong row among thousands hides in the whole tensor's error)
    let er = check::close_rows(&format!("y rows ({s:?}, T={tokens}, {routing:?})"), &y, &want, s.h, 3e-2).unwrap();
    eprintln!("y rel err {e:.3e}, worst token {er:.3e}");
    let (_, bits2) = run(&g, &mut layer, &inp);
    assert!(bits == bits2, "two runs on the same inputs differ");
}

gpu_test!(small_uniform, { check_forward(SMALL, 100, Routing::Uniform, Save::InputsOnly) });
gpu_test!(small_save_z, { check_forward(SMALL, 77, Routing::Uniform, Save::WithZ) });
gpu_test!(ragged_shape, { check_forward(RAGGED, 211, Routing::Uniform, Save::InputsOnly) });
gpu_test!(every_slot_on_one_expert, { check_forward(SMALL, 300, Routing::AllOnOne, Save::InputsOnly) });
gpu_test!(half_the_experts_empty, { check_forward(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly) });
gpu_test!(ten_percent_masked, { check_forward(SMALL, 160, Routing::Masked10, Save::InputsOnly) });
gpu_test!(one_token, { check_forward(SMALL, 1, Routing::Uniform, Save::InputsOnly) });
gpu_test!(qwen3_30b_a3b_t4096, { check_forward(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::InputsOnly) });
gpu_test!(qwen3_30b_a3b_t512_masked, { check_forward(Shape::QWEN3_30B_A3B, 512, Routing::Masked10, Save::WithZ) });

gpu_test!(zero_tokens_is_a_no_op, {
    let g = gpu();
    let mut layer = MoeLayer::new(g.clone(), config(SMALL, 8, Save::InputsOnly)).unwrap();
    let mut r = rng();
    let inp = inputs(&mut r, SMALL, 0, Routing::Uniform);
    let (y, _) = run(&g, &mut layer, &inp);
    assert!(y.is_empty());
});

gpu_test!(bad_inputs_are_rejected_and_write_nothing, {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, SMALL, 16, Routing::Uniform);
    let mut layer = MoeLayer::new(g.clone(), config(SMALL, 16, Save::InputsOnly)).unwrap();
    let x = g.upload(&inp.x).unwrap();
    let ids = g.upload(&inp.ids).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let w1 = g.upload(&inp.w1).unwrap();
    let w2 = g.upload(&inp.w2).unwrap();
    let mut out = g.alloc::<bf16>(16 * SMALL.h).unwrap();
    g.fill_bytes(&mut out, 0x7b).unwrap();
    // more tokens than configured; lengths that do not match
    let li = |tokens, w1| LayerInputs { tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1, w2: &w2 };
    assert!(layer.forward(&li(17, &w1), &mut out).is_err());
    assert!(layer.forward(&li(15, &w1), &mut out).is_err());
    assert!(layer.forward(&li(16, &w2), &mut out).is_err());
    g.sync().unwrap();
    assert!(g.download(&out).unwrap().iter().all(|v| v.to_bits() == 0x7b7b), "a rejected call wrote");
    // ids >= E and < -1 are found on the device: the call returns, writes nothing, and the error is read after
    let mut bad = inp.ids.clone();
    bad[3] = SMALL.e as i32;
    bad[5] = -7;
    let bad_ids = g.upload(&bad).unwrap();
    let lb = LayerInputs { tokens: 16, x: &x, topk_ids: &bad_ids, topk_weights: &w, w1: &w1, w2: &w2 };
    layer.forward(&lb, &mut out).unwrap();
    g.sync().unwrap();
    assert!(layer.routing_error().is_err());
    assert!(g.download(&out).unwrap().iter().all(|v| v.to_bits() == 0x7b7b), "a forward with bad ids wrote");
    // configurations the layer does not take
    for c in [
        LayerConfig { hidden: 100, ..config(SMALL, 8, Save::InputsOnly) },
        LayerConfig { intermediate: 96, ..config(SMALL, 8, Save::InputsOnly) },
        LayerConfig { top_k: 9, ..config(SMALL, 8, Save::InputsOnly) },
        LayerConfig { max_tokens: 0, ..config(SMALL, 8, Save::InputsOnly) },
    ] {
        assert!(MoeLayer::new(g.clone(), c).is_err(), "{c:?} accepted");
    }
});

gpu_test!(nan_in_one_token_stays_in_that_token, {
    let g = gpu();
    let mut r = rng();
    let mut inp = inputs(&mut r, SMALL, 64, Routing::Uniform);
    inp.x[5 * SMALL.h + 3] = bf16::NAN;
    let mut layer = MoeLayer::new(g.clone(), config(SMALL, 64, Save::InputsOnly)).unwrap();
    let (y, bits) = run(&g, &mut layer, &inp);
    let want = reference_y(&inp);
    for t in 0..64 {
        let row = &y[t * SMALL.h..(t + 1) * SMALL.h];
        if t == 5 {
            assert!(row.iter().any(|v| v.is_nan()));
            // written, not the poison: the poison is a NaN too (0xffff), a computed NaN is the canonical 0x7fff
            let written = &bits[t * SMALL.h..(t + 1) * SMALL.h];
            assert!(written.iter().all(|&b| b != 0xffff), "token 5's row was not written (the poison is left)");
        } else {
            assert!(row.iter().all(|v| v.is_finite()), "token {t} got a NaN from token 5");
            check::close(&format!("token {t}"), row, &want[t * SMALL.h..(t + 1) * SMALL.h], 1e-2).unwrap();
        }
    }
});

/// One invalid id (`bad_id`: >= E or < -1) in a forward: the call returns Ok, `out` keeps its poison bit for
/// bit, the layer's and the Saved's error say why; then a valid forward on the same layer is right and clears
/// the layer's error, while the bad call's Saved keeps its own.
fn invalid_id_writes_nothing(bad_id: i32, save: Save) {
    let g = gpu();
    let mut r = rng();
    let tokens = 40;
    let inp = inputs(&mut r, SMALL, tokens, Routing::Uniform);
    let mut bad = inp.ids.clone();
    bad[7 * SMALL.k + 1] = bad_id;
    let mut layer = MoeLayer::new(g.clone(), config(SMALL, tokens, save)).unwrap();
    layer.routing_error().unwrap(); // no forward yet
    let x = g.upload(&inp.x).unwrap();
    let bad_ids = g.upload(&bad).unwrap();
    let w = g.upload(&inp.w).unwrap();
    let w1 = g.upload(&inp.w1).unwrap();
    let w2 = g.upload(&inp.w2).unwrap();
    let mut out = g.alloc::<bf16>(tokens * SMALL.h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    let lb = LayerInputs { tokens, x: &x, topk_ids: &bad_ids, topk_weights: &w, w1: &w1, w2: &w2 };
    let saved = layer.forward(&lb, &mut out).expect("an invalid id is found on the device, not by the call");
    g.sync().unwrap();
    let o = g.download(&out).unwrap();
    if let Some(i) = o.iter().position(|v| v.to_bits() != 0xffff) {
        panic!("id {bad_id}: out[{i}] = {:#06x} was written (poison 0xffff)", o[i].to_bits());
    }
    for (who, res) in [("layer.routing_error()", layer.routing_error()), ("saved.check()", saved.check(&g))] {
        match res {
            Err(Error::InvalidArgument(m)) => {
                assert!(m.contains("outside -1..E") && m.contains("nothing was written"), "{who}: {m}");
                eprintln!("{who}: {m}");
            }
            other => panic!("id {bad_id}: {who} returned {other:?}"),
        }
    }
    // the same layer, valid ids: right, and the layer's error is the new call's
    let (y, _) = run(&g, &mut layer, &inp);
    let want = reference_y(&inp);
    check::close(&format!("y after a bad call (id {bad_id}, {save:?})"), &y, &want, 1e-2).unwrap();
    layer.routing_error().unwrap();
    assert!(saved.check(&g).is_err(), "a later forward changed an older call's error word");
}

gpu_test!(invalid_id_e_writes_nothing, { invalid_id_writes_nothing(SMALL.e as i32, Save::InputsOnly) });
gpu_test!(invalid_id_minus_two_writes_nothing, { invalid_id_writes_nothing(-2, Save::WithZ) });

/// The forward with GEMM1's producer gathering x (`Gather::InProducer`) against the gather pass: bitwise equal,
/// on shapes where a block runs more iterations than the ring has stages (the case that once deadlocked) and on
/// ragged ones, plus the reference. Each GEMM1 form that gathers: the epilogue-warps kernel with the run-time walk
/// (the default: `grouped_gemm_swiglu_ew7_gather_dyn`) and the static one (`_ew7_gather`), each against the pass
/// with the same epilogue-warps GEMM1, and the cooperative `grouped_gemm_swiglu_gather` (`MEGAMOE_SWIGLU=coop`)
/// against the pass with the cooperative GEMM1.
fn gather_in_producer(s: Shape, tokens: usize, routing: Routing) {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, routing);
    let cfg = config(s, tokens, Save::InputsOnly);
    let want = reference_y(&inp);
    // every form's layers stay alive to the end, so no form's workspace reuses another's memory (and its h)
    let mut kept = Vec::new();
    for (ew7, dynamic) in [(true, true), (true, false), (false, true)] {
        let form = |layer: &mut MoeLayer| {
            gemm::with_swiglu_epilogue_warps(ew7, || gemm::with_gemm_sched(dynamic, || run(&g, layer, &inp)))
        };
        // new layers (new workspaces: no h left by a previous form) and a poisoned output each
        let mut pass = MoeLayer::new(g.clone(), LayerConfig { gather: Gather::Pass, ..cfg }).unwrap();
        let mut fused = MoeLayer::new(g.clone(), LayerConfig { gather: Gather::InProducer, ..cfg }).unwrap();
        let (y, bits) = form(&mut fused);
        let (_, bits_pass) = form(&mut pass);
        let what = format!("{s:?} T={tokens} {routing:?}, epilogue warps {ew7}, run-time walk {dynamic}");
        assert!(bits == bits_pass, "{what}: the in-producer gather differs from the gather pass");
        let e = check::close("y (gather in producer)", &y, &want, 1e-2).unwrap();
        eprintln!("{what}: y rel err {e:.3e}");
        kept.push((pass, fused));
    }
}

gpu_test!(gather_in_producer_ragged, { gather_in_producer(RAGGED, 211, Routing::Uniform) });
gpu_test!(gather_in_producer_masked_one_expert, { gather_in_producer(SMALL, 300, Routing::AllOnOne) });
gpu_test!(gather_in_producer_qwen3_30b_a3b_t1024, {
    gather_in_producer(Shape::QWEN3_30B_A3B, 1024, Routing::Masked10)
});

/// A forward variant (`forward`, `gather`) against the default (two launches, the gather pass): output bitwise
/// equal, a repeat bitwise equal, the reference, and the backward of each forward's `Saved` (dx, dW1, dW2,
/// dtopk) bitwise equal too: z and the gathered x the variant left, and with [`Gather::Overlapped`] the
/// backward's own overlapped work (x gathered in the z recompute, dx summed by dW1's idle warps). Shapes where
/// blocks run many tiles and wait on m-tiles other blocks fill (30B at T = 4096: ~30 items a block), ragged
/// shapes, empty experts, one token.
fn variant(s: Shape, tokens: usize, routing: Routing, save: Save, forward: Forward, gather: Gather) {
    let g = gpu();
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, routing);
    let cfg = config(s, tokens.max(1), save);
    let mut base =
        MoeLayer::new(g.clone(), LayerConfig { forward: Forward::Launches, gather: Gather::Pass, ..cfg }).unwrap();
    let mut var = MoeLayer::new(g.clone(), LayerConfig { forward, gather, ..cfg }).unwrap();
    let what = format!("{s:?} T={tokens} {routing:?} {save:?} {forward:?} {gather:?}");
    let (y, bits) = run(&g, &mut var, &inp);
    if let Some(i) = y.iter().position(|v| v.is_nan()) {
        panic!("{what}: out[{i}] is NaN: not written (poison) or not finite");
    }
    let (_, bits_base) = run(&g, &mut base, &inp);
    assert!(bits == bits_base, "{what}: differs from two launches with the gather pass");
    let (_, again) = run(&g, &mut var, &inp);
    assert!(bits == again, "{what}: two forwards on the same inputs differ");
    let e = check::close(&format!("y ({what})"), &y, &reference_y(&inp), 1e-2).unwrap();
    eprintln!("{what}: y rel err {e:.3e}");
    if tokens > 0 {
        let grads = |layer: &mut MoeLayer| -> Vec<u32> {
            let x = g.upload(&inp.x).unwrap();
            let ids = g.upload(&inp.ids).unwrap();
            let w = g.upload(&inp.w).unwrap();
            let w1 = g.upload(&inp.w1).unwrap();
            let w2 = g.upload(&inp.w2).unwrap();
            // any finite [T, H] that is not x (a kernel gathering from the wrong tensor must not pass): x's rows
            // in reverse token order
            let dyv: Vec<bf16> = inp.x.chunks(s.h).rev().flatten().copied().collect();
            let dy = g.upload(&dyv).unwrap();
            let mut out = g.alloc::<bf16>(tokens * s.h).unwrap();
            let li = LayerInputs { tokens, x: &x, topk_ids: &ids, topk_weights: &w, w1: &w1, w2: &w2 };
            let saved = layer.forward(&li, &mut out).unwrap();
            let mut gdx = g.alloc::<bf16>(tokens * s.h).unwrap();
            let mut dw1 = g.alloc::<f32>(s.e * 2 * s.i * s.h).unwrap();
            let mut dw2 = g.alloc::<f32>(s.e * s.h * s.i).unwrap();
            let mut dtopk = g.alloc::<f32>(tokens * s.k).unwrap();
            // every output poisoned (a fresh allocation may hold the other layer's results: the pool reuses it)
            g.fill_bytes(&mut gdx, 0xff).unwrap();
            g.fill_bytes(&mut dtopk, 0xff).unwrap();
            g.fill_bytes(&mut dw1, 0xff).unwrap();
            g.fill_bytes(&mut dw2, 0xff).unwrap();
            let gr = Grads { dx: &mut gdx, dw1: &mut dw1, dw2: &mut dw2, dtopk: &mut dtopk, accumulate: false };
            // and the workspace (a row the backward should write and skips reads as NaN, not as the forward's)
            layer.poison_workspace().unwrap();
            layer.backward(&saved, &dy, &li, gr).unwrap();
            g.sync().unwrap();
            saved.check(&g).unwrap();
            let mut v: Vec<u32> = g.download(&gdx).unwrap().iter().map(|v| v.to_bits() as u32).collect();
            if let Some(i) = v.iter().position(|&b| b == 0xffff) {
                panic!("{what}: dx[{i}] still holds the poison (not written)");
            }
            for (name, t) in [("dW1", &dw1), ("dW2", &dw2), ("dtopk", &dtopk)] {
                let part: Vec<u32> = g.download(t).unwrap().iter().map(|v| v.to_bits()).collect();
                if let Some(i) = part.iter().position(|&b| b == 0xffff_ffff) {
                    panic!("{what}: {name}[{i}] still holds the poison (not written)");
                }
                v.extend(part);
            }
            v
        };
        let (gv, gb) = (grads(&mut var), grads(&mut base));
        if let Some(i) = gv.iter().zip(&gb).position(|(a, b)| a != b) {
            panic!("{what}: the backward differs at element {i} of [dx | dW1 | dW2 | dtopk]");
        }
    }
}

fn persistent_forward(s: Shape, tokens: usize, routing: Routing, save: Save) {
    variant(s, tokens, routing, save, Forward::Persistent, Gather::Pass);
}

fn overlapped(s: Shape, tokens: usize, routing: Routing, save: Save, forward: Forward) {
    variant(s, tokens, routing, save, forward, Gather::Overlapped);
}

/// `Gather::InProducer` with the backward: x gathered for dW1 by the pass (z recomputed: before the recompute) or
/// by dx's idle producer warps (z saved: the side copy, `grouped_gemm_bt_bf16_cpx`), dx summed by the weight
/// gradients' idle warps; dy gathered by the dh GEMM's producer (`dy`: `grouped_gemm_bt_dswiglu_ew7_gather[_dyn]`,
/// the rows written in expert order for dW2 by the tiles of n-tile 0; the default) or by the gather pass
/// (`MEGAMOE_DY_GATHER=pass`); bitwise the gather pass's forward and backward.
fn in_producer_with(s: Shape, tokens: usize, routing: Routing, save: Save, dy: bool) {
    megamoe::gemm::with_dy_gather(dy, || variant(s, tokens, routing, save, Forward::Launches, Gather::InProducer));
}

/// [`in_producer_with`], dy gathered by the pass.
fn in_producer(s: Shape, tokens: usize, routing: Routing, save: Save) {
    in_producer_with(s, tokens, routing, save, false);
}

/// [`in_producer_with`], dy gathered by the dh GEMM's producer; `dynamic` the run-time tile walk or the static one.
/// (The weight gradients' gathers as the shape rule picks: with z saved both gather at I <= 512,
/// `gemm::wgrad_gather_pays`.)
fn in_producer_dy(s: Shape, tokens: usize, routing: Routing, save: Save, dynamic: bool) {
    megamoe::gemm::with_gemm_sched(dynamic, || in_producer_with(s, tokens, routing, save, true));
}

gpu_test!(in_producer_dy_ragged_save_z, { in_producer_dy(RAGGED, 211, Routing::Uniform, Save::WithZ, true) });
gpu_test!(in_producer_dy_half_empty_inputs_only, {
    in_producer_dy(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly, true)
});
gpu_test!(in_producer_dy_one_token_static, { in_producer_dy(SMALL, 1, Routing::Uniform, Save::WithZ, false) });
gpu_test!(in_producer_dy_masked_static, { in_producer_dy(RAGGED, 160, Routing::Masked10, Save::WithZ, false) });
// the narrow seven-warp SwiGLU backward (`grouped_gemm_bt_dswiglu_ew7n_gather[_dyn]` against the pass's
// `grouped_gemm_bt_dswiglu_ew7n[_dyn]`), at I = 256 (two 128-column tiles) and RAGGED's I = 192
gpu_test!(in_producer_dy_narrow_tiles_i256, {
    let s = Shape { h: 384, i: 256, e: 6, k: 3 };
    megamoe::gemm::with_dswiglu(megamoe::gemm::Dsw::Ew7n, || {
        in_producer_dy(s, 300, Routing::Uniform, Save::WithZ, true);
        in_producer_dy(s, 170, Routing::Masked10, Save::InputsOnly, false);
    })
});
gpu_test!(in_producer_dy_narrow_tiles_ragged, {
    megamoe::gemm::with_dswiglu(megamoe::gemm::Dsw::Ew7n, || {
        in_producer_dy(RAGGED, 211, Routing::Uniform, Save::WithZ, true)
    })
});
gpu_test!(in_producer_dy_qwen3_30b_a3b_t4096_save_z, {
    in_producer_dy(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::WithZ, true)
});

/// As [`in_producer_dy`] with z saved and the side copy's policy forced (`gemm::with_side_copy`): `side` true, x's
/// rows for dW1 copied by dx's idle producer warps (`grouped_gemm_bt_bf16_cpx`) at any shape; false, by the gather
/// pass before the plain dx; bitwise the gather pass's forward and backward either way. (At 30B the default rule
/// keeps the side copy: `in_producer_dy_qwen3_30b_a3b_t4096_save_z` covers it there.)
fn in_producer_side_copy(s: Shape, tokens: usize, routing: Routing, side: bool) {
    copies(|| megamoe::gemm::with_side_copy(Some(side), || in_producer_with(s, tokens, routing, Save::WithZ, true)));
}

gpu_test!(in_producer_side_copy_off_ragged, { in_producer_side_copy(RAGGED, 211, Routing::Uniform, false) });
gpu_test!(in_producer_side_copy_on_ragged, { in_producer_side_copy(RAGGED, 211, Routing::Uniform, true) });
gpu_test!(in_producer_side_copy_off_masked, { in_producer_side_copy(SMALL, 160, Routing::Masked10, false) });
gpu_test!(in_producer_side_copy_on_masked, { in_producer_side_copy(SMALL, 160, Routing::Masked10, true) });

/// As [`in_producer_dy`] with dx's combine forced (`gemm::with_dx_combine`): `movers` true, summed by dW2's and
/// dW1's idle producer warps (the `_mv` weight gradients) at any I; false, by the combine pass before the plain
/// weight gradients; bitwise the gather pass's forward and backward either way (by default the pass below
/// I = 512, `gemm::dx_combine_in_movers_pays`).
fn in_producer_dx_combine(s: Shape, tokens: usize, routing: Routing, save: Save, movers: bool) {
    copies(|| megamoe::gemm::with_dx_combine(Some(movers), || in_producer_with(s, tokens, routing, save, true)));
}

/// `f` with both weight gradients reading the expert-ordered copies of their operands (`WgradGather::Off`, which the
/// side copy and the movers' sum of dx need; the shape rule gathers at I <= 512).
fn copies<R>(f: impl FnOnce() -> R) -> R {
    megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Off), f)
}

gpu_test!(in_producer_dx_combine_movers_ragged, {
    in_producer_dx_combine(RAGGED, 211, Routing::Uniform, Save::WithZ, true)
});
gpu_test!(in_producer_dx_combine_pass_ragged, {
    in_producer_dx_combine(RAGGED, 211, Routing::Uniform, Save::WithZ, false)
});
gpu_test!(in_producer_dx_combine_movers_masked, {
    in_producer_dx_combine(SMALL, 160, Routing::Masked10, Save::InputsOnly, true)
});
gpu_test!(in_producer_dx_combine_pass_i512, {
    let s = Shape { h: 384, i: 512, e: 6, k: 3 };
    in_producer_dx_combine(s, 300, Routing::Uniform, Save::WithZ, false)
});

/// As [`in_producer_dy`] with dW2's A gathered by its own producer warpgroup too (`MEGAMOE_WGRAD_GATHER=1`:
/// `grouped_wgrad_f32_ga[_mc]`, dy's rows read from the tokens; the dh kernel writes no expert-ordered copy, dx's
/// sum, where the movers run it, whole in dW1's idle warps), under the weight gradients' schedule `sched`: bitwise
/// the gather pass's backward.
fn in_producer_wgrad_gather(s: Shape, tokens: usize, routing: Routing, save: Save, sched: megamoe::gemm::WgradSched) {
    let ((), ran) = kernels_of(&gpu(), || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || {
            megamoe::gemm::with_wgrad_sched(sched, || in_producer_dy(s, tokens, routing, save, true))
        })
    });
    assert!(ran.iter().any(|k| k.starts_with("grouped_wgrad_f32_ga")), "the gathering dW2 did not run: {ran:?}");
}

gpu_test!(in_producer_wgrad_gather_ragged_save_z, {
    in_producer_wgrad_gather(RAGGED, 211, Routing::Uniform, Save::WithZ, megamoe::gemm::WgradSched::Clusters)
});
gpu_test!(in_producer_wgrad_gather_masked_static, {
    in_producer_wgrad_gather(RAGGED, 160, Routing::Masked10, Save::WithZ, megamoe::gemm::WgradSched::Static)
});
gpu_test!(in_producer_wgrad_gather_half_empty_dynamic, {
    in_producer_wgrad_gather(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly, megamoe::gemm::WgradSched::Dynamic)
});
gpu_test!(in_producer_wgrad_gather_one_token, {
    in_producer_wgrad_gather(SMALL, 1, Routing::Uniform, Save::WithZ, megamoe::gemm::WgradSched::Clusters)
});
gpu_test!(in_producer_wgrad_gather_qwen3_30b_a3b_t4096_save_z, {
    in_producer_wgrad_gather(
        Shape::QWEN3_30B_A3B,
        4096,
        Routing::Uniform,
        Save::WithZ,
        megamoe::gemm::WgradSched::Clusters,
    )
});

/// [`in_producer_wgrad_gather`] (the run-time clusters) with dx's combine and the side copy forced
/// (`gemm::with_dx_combine`, `gemm::with_side_copy`): `movers` true, dW1's idle warps sum the whole of dx (dW2's
/// gathering producer takes none of it), false, the combine pass runs before the weight gradients; `side` true,
/// x's rows for dW1 copied by dx's idle producer warps (with z saved), false, by the gather pass.
fn in_producer_wgrad_gather_forced(s: Shape, tokens: usize, routing: Routing, save: Save, movers: bool, side: bool) {
    megamoe::gemm::with_dx_combine(Some(movers), || {
        megamoe::gemm::with_side_copy(Some(side), || {
            in_producer_wgrad_gather(s, tokens, routing, save, megamoe::gemm::WgradSched::Clusters)
        })
    });
}

gpu_test!(in_producer_wgrad_gather_movers_side_copy_ragged, {
    in_producer_wgrad_gather_forced(RAGGED, 211, Routing::Uniform, Save::WithZ, true, true)
});
gpu_test!(in_producer_wgrad_gather_pass_side_copy_ragged, {
    in_producer_wgrad_gather_forced(RAGGED, 211, Routing::Uniform, Save::WithZ, false, true)
});
gpu_test!(in_producer_wgrad_gather_movers_no_side_copy_masked, {
    in_producer_wgrad_gather_forced(SMALL, 160, Routing::Masked10, Save::WithZ, true, false)
});
gpu_test!(in_producer_wgrad_gather_pass_no_side_copy_masked, {
    in_producer_wgrad_gather_forced(SMALL, 160, Routing::Masked10, Save::WithZ, false, false)
});
gpu_test!(in_producer_wgrad_gather_movers_recomputed_z, {
    in_producer_wgrad_gather_forced(RAGGED, 211, Routing::Uniform, Save::InputsOnly, true, false)
});
// the narrow seven-warp SwiGLU backward (`grouped_gemm_bt_dswiglu_ew7n_gather`, no copy of dy written) at I = 256,
// 16 slots a token (SonicMoE's fine-grained shape in small): the combine pass (the default there) and the movers
gpu_test!(in_producer_wgrad_gather_narrow_tiles_i256_top16, {
    let s = Shape { h: 512, i: 256, e: 32, k: 16 };
    megamoe::gemm::with_dswiglu(megamoe::gemm::Dsw::Ew7n, || {
        in_producer_wgrad_gather_forced(s, 300, Routing::Uniform, Save::WithZ, false, false);
        in_producer_wgrad_gather_forced(s, 170, Routing::Masked10, Save::InputsOnly, true, false);
    })
});

/// As [`in_producer_dy`] with both weight gradients gathering (`MEGAMOE_WGRAD_GATHER=2`): dW2's A from dy's tokens,
/// dW1's B from x's (`grouped_wgrad_f32_gb`, z saved: no gather pass of x, no side copy), dx's combine asked of the
/// movers or the pass (`movers`; with both gathering, the pass): bitwise the gather pass's backward.
fn in_producer_wgrad_gather_x(s: Shape, tokens: usize, routing: Routing, movers: bool) {
    let ((), ran) = kernels_of(&gpu(), || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::DyX), || {
            megamoe::gemm::with_dx_combine(Some(movers), || in_producer_dy(s, tokens, routing, Save::WithZ, true))
        })
    });
    assert!(ran.contains(&"grouped_wgrad_f32_gb"), "the gathering dW1 did not run: {ran:?}");
}

gpu_test!(in_producer_wgrad_gather_x_movers_ragged, {
    in_producer_wgrad_gather_x(RAGGED, 211, Routing::Uniform, true)
});
gpu_test!(in_producer_wgrad_gather_x_pass_masked, { in_producer_wgrad_gather_x(SMALL, 160, Routing::Masked10, false) });
// dy gathered by the pass (so dW2 reads the copy, and its idle warps, with the movers, sum the whole of dx while
// dW1 gathers x's rows)
gpu_test!(in_producer_wgrad_gather_x_only_dw1_movers_ragged, {
    let ((), ran) = kernels_of(&gpu(), || {
        megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::DyX), || {
            megamoe::gemm::with_dx_combine(Some(true), || in_producer(RAGGED, 211, Routing::Uniform, Save::WithZ))
        })
    });
    assert!(ran.contains(&"grouped_wgrad_f32_gb"), "the gathering dW1 did not run: {ran:?}");
    assert!(ran.contains(&"grouped_wgrad_f32_mv"), "dW2 with dx's sum did not run: {ran:?}");
});
gpu_test!(in_producer_wgrad_gather_x_narrow_tiles_i256_top16, {
    let s = Shape { h: 512, i: 256, e: 32, k: 16 };
    megamoe::gemm::with_dswiglu(megamoe::gemm::Dsw::Ew7n, || {
        in_producer_wgrad_gather_x(s, 300, Routing::Uniform, false);
        in_producer_wgrad_gather_x(s, 170, Routing::Masked10, true);
    })
});

/// As [`in_producer`] (x and, with `dy`, dy gathered in the producers) with the look-ahead tile hand-off
/// (`MEGAMOE_GATHER_AHEAD=1`): bitwise the gather pass's forward and backward.
fn in_producer_ahead(s: Shape, tokens: usize, routing: Routing, save: Save, dynamic: bool, dy: bool) {
    megamoe::gemm::with_gather_ahead(true, || {
        megamoe::gemm::with_gemm_sched(dynamic, || in_producer_with(s, tokens, routing, save, dy))
    });
}

gpu_test!(in_producer_ahead_ragged_save_z, {
    in_producer_ahead(RAGGED, 211, Routing::Uniform, Save::WithZ, true, true)
});
gpu_test!(in_producer_ahead_half_empty_static, {
    in_producer_ahead(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly, false, true)
});
gpu_test!(in_producer_ahead_one_token, { in_producer_ahead(SMALL, 1, Routing::Uniform, Save::WithZ, true, false) });
gpu_test!(in_producer_ahead_qwen3_30b_a3b_t4096_save_z, {
    in_producer_ahead(Shape::QWEN3_30B_A3B, 4096, Routing::Masked10, Save::WithZ, true, true)
});

gpu_test!(in_producer_ragged_save_z, { in_producer(RAGGED, 211, Routing::Uniform, Save::WithZ) });
// the shape of fp8's `fp8_x_gathered_in_the_producer_is_bitwise_the_pass` (~17 rows an expert, K = 1024: every ring
// refilled), for racecheck to compare the bf16 and FP8 gathering producers (docs/NOTES.md 2026-12-06g)
gpu_test!(in_producer_fp8_test_dims, {
    in_producer(Shape { h: 1024, i: 256, e: 24, k: 3 }, 133, Routing::Uniform, Save::WithZ)
});
gpu_test!(in_producer_half_empty_inputs_only, { in_producer(SMALL, 150, Routing::HalfEmpty, Save::InputsOnly) });
gpu_test!(in_producer_one_token_save_z, { in_producer(SMALL, 1, Routing::Uniform, Save::WithZ) });
gpu_test!(in_producer_qwen3_30b_a3b_t4096_save_z, {
    in_producer(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::WithZ)
});

gpu_test!(persistent_forward_ragged, { persistent_forward(RAGGED, 211, Routing::Uniform, Save::InputsOnly) });
gpu_test!(persistent_forward_half_empty_save_z, { persistent_forward(SMALL, 150, Routing::HalfEmpty, Save::WithZ) });
gpu_test!(persistent_forward_one_expert, { persistent_forward(SMALL, 300, Routing::AllOnOne, Save::InputsOnly) });
gpu_test!(persistent_forward_one_token, { persistent_forward(SMALL, 1, Routing::Uniform, Save::WithZ) });
gpu_test!(persistent_forward_qwen3_30b_a3b_t4096, {
    persistent_forward(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::InputsOnly)
});
gpu_test!(overlapped_gather_ragged, { overlapped(RAGGED, 211, Routing::Uniform, Save::InputsOnly, Forward::Launches) });
gpu_test!(overlapped_gather_masked_save_z, {
    overlapped(SMALL, 160, Routing::Masked10, Save::WithZ, Forward::Launches)
});
gpu_test!(overlapped_gather_one_expert_persistent, {
    overlapped(SMALL, 300, Routing::AllOnOne, Save::WithZ, Forward::Persistent)
});
gpu_test!(overlapped_gather_half_empty_persistent, {
    overlapped(RAGGED, 150, Routing::HalfEmpty, Save::InputsOnly, Forward::Persistent)
});
gpu_test!(overlapped_gather_one_token, { overlapped(SMALL, 1, Routing::Uniform, Save::WithZ, Forward::Launches) });
gpu_test!(overlapped_gather_qwen3_30b_a3b_t4096, {
    overlapped(Shape::QWEN3_30B_A3B, 4096, Routing::Masked10, Save::WithZ, Forward::Persistent)
});
gpu_test!(overlapped_gather_qwen3_30b_a3b_t4096_launches, {
    overlapped(Shape::QWEN3_30B_A3B, 4096, Routing::Uniform, Save::InputsOnly, Forward::Launches)
});

#[test]
fn persistent_forward_is_refused_with_the_in_producer_gather() {
    let cfg = LayerConfig { forward: Forward::Persistent, gather: Gather::InProducer, ..config(SMALL, 8, Save::WithZ) };
    let m = cfg.validate().unwrap_err().to_string();
    assert!(m.contains("Gather::InProducer"), "{m}");
    for gather in [Gather::Pass, Gather::Overlapped] {
        LayerConfig { gather, ..cfg }.validate().unwrap();
    }
}
