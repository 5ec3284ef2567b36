//! The C ABI (`megamoe_capi`): its refusals on any machine; on the GPU (ignored without one) the layer through
//! raw device addresses and a caller's own stream, bitwise the Rust API's results and within 1e-2 of the f64
//! reference, outputs poisoned first; buffers too small, host memory and invalid expert ids refused or reported.
#[path = "../../tests/common/mod.rs"]
mod common;

use std::ffi::c_int;
use std::ptr::{null, null_mut};
use std::sync::Arc;

use common::{gpu, inputs, rank_input, rng, weights, Inputs, Routing, RAGGED, SMALL};
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DeviceRepr};
use half::bf16;
use megamoe::layer::{Grads, Inputs as LayerInputs, LayerConfig, MoeLayer, Save};
use megamoe::reference::{self, Shape};
use megamoe::{check, Gpu};
use megamoe_capi::*;

fn last_error() -> String {
    // SAFETY: a null buffer of length 0 only asks the length; then a buffer of that length + 1.
    let n = unsafe { megamoe_last_error(null_mut(), 0) };
    let mut buf = vec![0u8; n + 1];
    // SAFETY: `buf` holds n + 1 bytes.
    unsafe { megamoe_last_error(buf.as_mut_ptr() as *mut _, buf.len()) };
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn new_layer(device: c_int, s: Shape, max_tokens: usize, save_z: bool) -> (c_int, *mut MegamoeLayer) {
    let mut l = null_mut();
    // SAFETY: `l` is writable.
    let c = unsafe { megamoe_layer_new(device, s.h, s.i, s.e, s.k, max_tokens, save_z as c_int, &mut l) };
    (c, l)
}

#[test]
fn a_bad_configuration_is_refused_on_any_machine() {
    let s = Shape { h: 100, ..SMALL };
    let (c, l) = new_layer(0, s, 16, false);
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
    assert!(l.is_null(), "no handle on failure");
    let m = last_error();
    assert!(m.contains("hidden size 100"), "message: {m}");
    let (c, _) = new_layer(-1, SMALL, 16, false);
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "{}", last_error());
    // SAFETY: a null `out` is refused before any write.
    let c = unsafe { megamoe_layer_new(0, 256, 128, 8, 2, 16, 0, null_mut()) };
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
    assert!(last_error().contains("out is null"));
}

#[test]
fn null_handles_are_refused_and_free_takes_null() {
    let mut saved = null_mut();
    // SAFETY: null handles are refused before anything is read.
    unsafe {
        let c = megamoe_forward(null(), 0, 1, 0, 0, 0, 0, 0, 0, &mut saved);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("layer handle is null"));
        assert!(saved.is_null());
        let c = megamoe_backward(null(), 0, null(), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert_eq!(megamoe_saved_check(null()), MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("saved-state handle is null"));
        assert_eq!(megamoe_saved_tokens(null()), 0);
        let mut w8 = null_mut();
        assert_eq!(megamoe_fp8_weights_new(null(), &mut w8), MEGAMOE_INVALID_ARGUMENT);
        assert!(w8.is_null());
        let c = megamoe_forward_fp8(null(), 0, 1, 0, 0, 0, null(), 0, &mut saved);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert_eq!(megamoe_fp8_weights_quantize(null(), 0, null(), 0, 0), MEGAMOE_INVALID_ARGUMENT);
        let c = megamoe_backward_fp8(null(), 0, null(), 0, 0, 0, 0, 0, 0, null(), 0, 0, 0, 0, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert_eq!(megamoe_fp8_quantize_into(null(), 0, 0, 0, null()), MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("layer handle is null"));
        assert_eq!(megamoe_forward_fp8_codes(null(), 0, 1, 0, 0, 0, null(), 0), MEGAMOE_INVALID_ARGUMENT);
        let c = megamoe_backward_routed_fp8(null(), 0, 1, 0, 0, 0, 0, 0, 0, null(), 0, 0, 0, 0, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        megamoe_saved_free(null_mut());
        megamoe_fp8_weights_free(null_mut());
        megamoe_layer_free(null_mut());
    }
}

#[test]
fn the_last_error_is_truncated_to_the_buffer_with_its_full_length_returned() {
    let (c, _) = new_layer(0, Shape { h: 100, ..SMALL }, 16, false);
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
    let full = last_error();
    let mut buf = [0x55u8; 8];
    // SAFETY: `buf` holds 8 bytes.
    let n = unsafe { megamoe_last_error(buf.as_mut_ptr() as *mut _, buf.len()) };
    assert_eq!(n, full.len());
    assert_eq!(&buf[..7], &full.as_bytes()[..7]);
    assert_eq!(buf[7], 0, "NUL-terminated within the buffer");
    // SAFETY: the version is a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(megamoe_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
}

#[test]
fn a_machine_without_a_gpu_gets_a_typed_code() {
    let (c, l) = new_layer(0, SMALL, 16, false);
    match c {
        MEGAMOE_OK => {
            assert!(!l.is_null());
            // SAFETY: a live handle, freed once.
            unsafe { megamoe_layer_free(l) };
        }
        MEGAMOE_NO_DRIVER | MEGAMOE_NO_DEVICE | MEGAMOE_UNSUPPORTED_DEVICE => {
            assert!(l.is_null());
            assert!(!last_error().is_empty());
        }
        c => panic!("unexpected code {c}: {}", last_error()),
    }
}

/// A test that needs the GPU: ignored elsewhere.
macro_rules! gpu_test {
    ($name:ident, $body:block) => {
        #[test]
        #[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
        fn $name() $body
    };
}

fn ptr<T: DeviceRepr>(v: &CudaSlice<T>, s: &Arc<CudaStream>) -> u64 {
    v.device_ptr(s).0
}

/// The layer's inputs and outputs on the device (outputs poisoned: NaN everywhere).
struct Dev {
    x: CudaSlice<bf16>,
    ids: CudaSlice<i32>,
    w: CudaSlice<f32>,
    w1: CudaSlice<bf16>,
    w2: CudaSlice<bf16>,
    dy: CudaSlice<bf16>,
    y: CudaSlice<bf16>,
    dx: CudaSlice<bf16>,
    dtopk: CudaSlice<f32>,
    dw1: CudaSlice<bf16>,
    dw2: CudaSlice<bf16>,
}

impl Dev {
    fn new(g: &Gpu, inp: &Inputs) -> Dev {
        let s = inp.shape;
        let nan = |n: usize| {
            let mut b = g.alloc::<bf16>(n).unwrap();
            g.fill_bytes(&mut b, 0xff).unwrap();
            b
        };
        let mut dtopk = g.alloc::<f32>(inp.tokens * s.k).unwrap();
        g.fill_bytes(&mut dtopk, 0xff).unwrap();
        Dev {
            x: g.upload(&inp.x).unwrap(),
            ids: g.upload(&inp.ids).unwrap(),
            w: g.upload(&inp.w).unwrap(),
            w1: g.upload(&inp.w1).unwrap(),
            w2: g.upload(&inp.w2).unwrap(),
            dy: g.upload(&inp.dy).unwrap(),
            y: nan(inp.tokens * s.h),
            dx: nan(inp.tokens * s.h),
            dtopk,
            dw1: nan(s.e * 2 * s.i * s.h),
            dw2: nan(s.e * s.h * s.i),
        }
    }
}

/// Outputs downloaded: y, dx, dtopk, dW1, dW2.
type Host = (Vec<bf16>, Vec<bf16>, Vec<f32>, Vec<bf16>, Vec<bf16>);

fn download(g: &Gpu, d: &Dev) -> Host {
    let b = |v: &CudaSlice<bf16>| g.download(v).unwrap();
    (b(&d.y), b(&d.dx), g.download(&d.dtopk).unwrap(), b(&d.dw1), b(&d.dw2))
}

/// Forward + backward (bf16 weight gradients) through the C ABI on the caller's stream `caller`.
fn through_the_abi(
    g: &Arc<Gpu>,
    l: *const MegamoeLayer,
    caller: &Arc<CudaStream>,
    d: &mut Dev,
    tokens: usize,
) -> *mut MegamoeSaved {
    let s = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, s);
    let (x, ids, w, w1, w2) = (p(&d.x), ptr(&d.ids, s), ptr(&d.w, s), p(&d.w1), p(&d.w2));
    let mut saved = null_mut();
    let cs = caller.cu_stream() as u64;
    // SAFETY: every address is a live allocation of the sizes the shapes ask (the ABI checks them too).
    unsafe {
        let c = megamoe_forward(l, cs, tokens, x, ids, w, w1, w2, p(&d.y), &mut saved);
        assert_eq!(c, MEGAMOE_OK, "forward: {}", last_error());
        assert_eq!(megamoe_saved_tokens(saved), tokens);
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, s));
        let c = megamoe_backward(l, cs, saved, p(&d.dy), x, ids, w, w1, w2, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_OK, "backward: {}", last_error());
    }
    saved
}

/// The saved state's device check (it synchronises the layer's stream), then its release.
fn check_and_free(saved: *mut MegamoeSaved) {
    // SAFETY: a live handle, freed once.
    unsafe {
        assert_eq!(megamoe_saved_check(saved), MEGAMOE_OK, "{}", last_error());
        megamoe_saved_free(saved);
    }
}

fn check_abi(s: Shape, tokens: usize, routing: Routing, save_z: bool) {
    let g = gpu();
    let inp = inputs(&mut rng(), s, tokens, routing);
    let (c, l) = new_layer(0, s, tokens, save_z);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    // the caller's stream: a stream of its own, so the ABI's ordering (not the device's one stream) keeps the
    // uploads before the layer and the layer before the downloads; the poison is written on the layer's stream
    // and synchronised first
    let caller = g.context().new_stream().unwrap();
    let mut d = Dev::new(&g, &inp);
    g.fill_bytes(&mut d.x, 0xff).unwrap();
    g.sync().unwrap();
    // x written on the caller's stream behind a long memset (~0.3 ms): a layer that did not wait for the
    // caller's stream would read the NaN x; y read back on the caller's stream: a caller's stream that did not
    // wait for the layer would read the poison
    let mut big = caller.alloc_zeros::<u8>(1 << 30).unwrap();
    caller.memset_zeros(&mut big).unwrap();
    caller.memcpy_htod(&inp.x, &mut d.x).unwrap();
    let saved = through_the_abi(&g, l, &caller, &mut d, tokens);
    let y_caller = caller.clone_dtoh(&d.y).unwrap();
    caller.synchronize().unwrap();
    check_and_free(saved);
    let got = download(&g, &d);
    assert!(
        y_caller.iter().zip(&got.0).all(|(a, b)| a.to_bits() == b.to_bits()),
        "y read on the caller's stream early"
    );
    // the same through the Rust API
    let save = if save_z { Save::WithZ } else { Save::InputsOnly };
    let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, save)).unwrap();
    let mut r = Dev::new(&g, &inp);
    let li = LayerInputs { tokens, x: &r.x, topk_ids: &r.ids, topk_weights: &r.w, w1: &r.w1, w2: &r.w2 };
    let sv = layer.forward(&li, &mut r.y).unwrap();
    let grads = Grads { dx: &mut r.dx, dw1: &mut r.dw1, dw2: &mut r.dw2, dtopk: &mut r.dtopk, accumulate: false };
    layer.backward(&sv, &r.dy, &li, grads).unwrap();
    g.sync().unwrap();
    let want = download(&g, &r);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert!(b16(&got.0) == b16(&want.0), "y differs from the Rust API's");
    assert!(b16(&got.1) == b16(&want.1), "dx differs from the Rust API's");
    assert!(got.2.iter().zip(&want.2).all(|(a, b)| a.to_bits() == b.to_bits()), "dtopk differs");
    assert!(b16(&got.3) == b16(&want.3), "dW1 differs from the Rust API's");
    assert!(b16(&got.4) == b16(&want.4), "dW2 differs from the Rust API's");
    // and against the f64 reference, every element written
    let (mut outs, grads) = reference::forward_backward(&s, &[rank_input(&inp)], &weights(&inp)).unwrap();
    let want = outs.remove(0);
    let f = |v: &[bf16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
    for (what, got, reference) in [
        ("y", f(&got.0), &want.y),
        ("dx", f(&got.1), &want.dx),
        ("dW1", f(&got.3), &grads.dw1),
        ("dW2", f(&got.4), &grads.dw2),
    ] {
        if let Some(i) = got.iter().position(|v| v.is_nan()) {
            panic!("{what}[{i}] is NaN (not written)");
        }
        let e = check::close(what, &got, reference, 1e-2).unwrap();
        eprintln!("{what}: rel err {e:.3e}");
    }
    let dtopk: Vec<f64> = got.2.iter().map(|&v| v as f64).collect();
    let e = check::close_scaled("dtopk", &dtopk, &want.dtopk, &want.dtopk_scale, 1e-2).unwrap();
    eprintln!("dtopk: err {e:.3e} of its terms' scale");
    // SAFETY: the live handle, freed once.
    unsafe { megamoe_layer_free(l) };
}

gpu_test!(layer_through_raw_pointers_small, { check_abi(SMALL, 100, Routing::Uniform, false) });
gpu_test!(layer_through_raw_pointers_ragged_saved_z, { check_abi(RAGGED, 97, Routing::Masked10, true) });
gpu_test!(layer_through_raw_pointers_qwen3_30b_a3b, { check_abi(Shape::QWEN3_30B_A3B, 512, Routing::Uniform, false) });

gpu_test!(buffers_too_small_or_not_on_the_device_are_refused_and_nothing_is_written, {
    let g = gpu();
    let s = SMALL;
    let tokens = 8192;
    let inp = inputs(&mut rng(), s, tokens, Routing::Uniform);
    let (c, l) = new_layer(0, s, tokens, false);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let d = Dev::new(&g, &inp);
    let st = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let (x, ids, w, w1, w2) = (p(&d.x), ptr(&d.ids, st), ptr(&d.w, st), p(&d.w1), p(&d.w2));
    // an output of 1 MiB where the call writes 4 MiB, in a `cuMemAlloc` allocation of its own (the strict
    // reading; cudarc's buffers come from a stream-ordered pool, whose mappings run on past a buffer)
    g.context().bind_to_thread().unwrap();
    // SAFETY: a fresh allocation, freed below.
    let short = unsafe { cudarc::driver::result::malloc_sync(1 << 20) }.unwrap();
    let host = vec![0u16; tokens * s.h];
    let mut saved = null_mut();
    for (what, out, expect) in [
        ("short", short, "past the end of its allocation"),
        ("host", host.as_ptr() as u64, "memory"), // "not memory CUDA knows" (or "not device memory" with HMM)
        ("misaligned", p(&d.y) + 1, "not aligned"),
        ("misaligned rows", p(&d.y) + 2, "not aligned to 16 bytes"),
        ("out on x", x, "overlaps x"),
        ("null", 0, "null pointer"),
    ] {
        // SAFETY: the ABI refuses these addresses before any launch.
        let c = unsafe { megamoe_forward(l, 0, tokens, x, ids, w, w1, w2, out, &mut saved) };
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "{what}");
        let m = last_error();
        assert!(m.contains(expect), "{what}: {m}");
        assert!(saved.is_null(), "{what}: no saved state on failure");
    }
    // more tokens than the layer takes
    // SAFETY: as above.
    let c = unsafe { megamoe_forward(l, 0, tokens + 1, x, ids, w, w1, w2, p(&d.y), &mut saved) };
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "{}", last_error());
    g.sync().unwrap();
    assert!(g.download(&d.y).unwrap().iter().all(|v| v.is_nan()), "a refused call wrote the output");
    // SAFETY: the live handle and allocation, freed once.
    unsafe {
        megamoe_layer_free(l);
        cudarc::driver::result::free_sync(short).unwrap();
    }
});

gpu_test!(an_invalid_expert_id_is_reported_by_the_saved_check, {
    let g = gpu();
    let s = SMALL;
    let tokens = 32;
    let mut inp = inputs(&mut rng(), s, tokens, Routing::Uniform);
    inp.ids[5] = s.e as i32; // one past the last expert
    let (c, l) = new_layer(0, s, tokens, false);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let d = Dev::new(&g, &inp);
    let st = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let mut saved = null_mut();
    // SAFETY: live allocations of the right sizes.
    unsafe {
        let c = megamoe_forward(
            l,
            0,
            tokens,
            p(&d.x),
            ptr(&d.ids, st),
            ptr(&d.w, st),
            p(&d.w1),
            p(&d.w2),
            p(&d.y),
            &mut saved,
        );
        assert_eq!(c, MEGAMOE_OK, "the id is found on the device: {}", last_error());
        assert_eq!(megamoe_saved_check(saved), MEGAMOE_INVALID_ARGUMENT);
        eprintln!("{}", last_error());
        megamoe_saved_free(saved);
        megamoe_layer_free(l);
    }
    assert!(g.download(&d.y).unwrap().iter().all(|v| v.is_nan()), "the failed forward wrote the output");
});

gpu_test!(fp8_layer_through_raw_pointers_matches_the_rust_api_bitwise, {
    let g = gpu();
    let s = Shape { h: 512, i: 256, e: 8, k: 2 };
    let tokens = 200;
    let inp = inputs(&mut rng(), s, tokens, Routing::Masked10);
    let (c, l) = new_layer(0, s, tokens, false);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let st = g.stream();
    let d = Dev::new(&g, &inp);
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let (x, ids, w, w1, w2) = (p(&d.x), ptr(&d.ids, st), ptr(&d.w, st), p(&d.w1), p(&d.w2));
    let mut w8 = null_mut();
    let mut saved = null_mut();
    // SAFETY: live handles and allocations of the sizes the shapes ask.
    unsafe {
        assert_eq!(megamoe_fp8_weights_new(l, &mut w8), MEGAMOE_OK, "{}", last_error());
        // codes never quantized: refused
        let c = megamoe_forward_fp8(l, 0, tokens, x, ids, w, w8, p(&d.y), &mut saved);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "{}", last_error());
        assert!(last_error().contains("never quantized"), "{}", last_error());
        assert_eq!(megamoe_fp8_weights_quantize(l, 0, w8, w1, w2), MEGAMOE_OK, "{}", last_error());
        let c = megamoe_forward_fp8(l, 0, tokens, x, ids, w, w8, p(&d.y), &mut saved);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, st));
        let c = megamoe_backward_fp8(l, 0, saved, p(&d.dy), x, ids, w, w1, w2, w8, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        // the bf16 backward refuses an FP8 forward's state, writing nothing (the outputs are compared below)
        let c = megamoe_backward(l, 0, saved, p(&d.dy), x, ids, w, w1, w2, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "{}", last_error());
        assert!(last_error().contains("backward_fp8"), "{}", last_error());
        check_and_free(saved);
        megamoe_fp8_weights_free(w8);
    }
    g.sync().unwrap();
    let got = download(&g, &d);
    // the codes in the caller's buffers (the custom operators' FP8 form): quantized into them, the forward with no
    // saved state and the backward that routes again, bitwise the handle path, into newly poisoned outputs
    let (_code_bufs, codes) = fp8_code_bufs(&g, s);
    let d2 = Dev::new(&g, &inp);
    let y_between = g.alloc::<bf16>(tokens * s.h).unwrap();
    let p2 = |v: &CudaSlice<bf16>| ptr(v, st);
    let (x2, ids2, w2_, w12, w22) = (p2(&d2.x), ptr(&d2.ids, st), ptr(&d2.w, st), p2(&d2.w1), p2(&d2.w2));
    let (dx2, dw12, dw22, dtopk2) = (p2(&d2.dx), p2(&d2.dw1), p2(&d2.dw2), ptr(&d2.dtopk, st));
    // SAFETY: live handles and allocations of the sizes the shapes ask; `codes` six addresses.
    unsafe {
        // a codes buffer overlapping another is refused before any launch
        let mut bad = codes;
        bad[2] = bad[0];
        assert_eq!(megamoe_fp8_quantize_into(l, 0, w12, w22, bad.as_ptr()), MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("overlaps"), "{}", last_error());
        assert_eq!(megamoe_fp8_quantize_into(l, 0, w12, w22, codes.as_ptr()), MEGAMOE_OK, "{}", last_error());
        let c = megamoe_forward_fp8_codes(l, 0, tokens, x2, ids2, w2_, codes.as_ptr(), p2(&d2.y));
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        // a bf16 forward between, with no saved state: it rewrites the scratch state, which the backward routes again
        let c = megamoe_forward(l, 0, tokens, x2, ids2, w2_, w12, w22, ptr(&y_between, st), null_mut());
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let c = megamoe_backward_routed_fp8(
            l,
            0,
            tokens,
            p2(&d2.dy),
            x2,
            ids2,
            w2_,
            w12,
            w22,
            codes.as_ptr(),
            dx2,
            dw12,
            dw22,
            dtopk2,
            1,
            0,
        );
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    }
    g.sync().unwrap();
    let got2 = download(&g, &d2);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (what, a, b) in
        [("y", &got2.0, &got.0), ("dx", &got2.1, &got.1), ("dW1", &got2.3, &got.3), ("dW2", &got2.4, &got.4)]
    {
        assert!(b16(a) == b16(b), "FP8 {what} through the caller's codes differs from the handle path's");
    }
    assert!(got2.2.iter().zip(&got.2).all(|(a, b)| a.to_bits() == b.to_bits()), "FP8 dtopk (codes) differs");
    // the same through the Rust API
    use megamoe::layer::{Fp8Inputs, Fp8Weights};
    let mut layer = MoeLayer::new(g.clone(), LayerConfig::bf16(s.h, s.i, s.e, s.k, tokens, Save::InputsOnly)).unwrap();
    let mut r = Dev::new(&g, &inp);
    let mut q = Fp8Weights::alloc(&layer).unwrap();
    q.quantize(&g, &r.w1, &r.w2, &layer).unwrap();
    let mut sv = layer.alloc_saved(tokens).unwrap();
    let i8 = Fp8Inputs { tokens, x: &r.x, topk_ids: &r.ids, topk_weights: &r.w, weights: &q };
    layer.forward_fp8(&i8, &mut r.y, &mut sv).unwrap();
    let li = LayerInputs { tokens, x: &r.x, topk_ids: &r.ids, topk_weights: &r.w, w1: &r.w1, w2: &r.w2 };
    let grads = Grads { dx: &mut r.dx, dw1: &mut r.dw1, dw2: &mut r.dw2, dtopk: &mut r.dtopk, accumulate: false };
    layer.backward_fp8(&sv, &r.dy, &li, &q, grads).unwrap();
    g.sync().unwrap();
    let want = download(&g, &r);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (what, a, b) in
        [("y", &got.0, &want.0), ("dx", &got.1, &want.1), ("dW1", &got.3, &want.3), ("dW2", &got.4, &want.4)]
    {
        assert!(b16(a) == b16(b), "FP8 {what} differs from the Rust API's");
        assert!(a.iter().all(|v| !v.is_nan()), "FP8 {what} not fully written");
    }
    assert!(got.2.iter().zip(&want.2).all(|(a, b)| a.to_bits() == b.to_bits()), "FP8 dtopk differs");
    // and near the bf16 layer's f64 reference (e4m3's error; tests/fp8.rs holds the path to CPU models of it)
    let y: Vec<f64> = got.0.iter().map(|v| v.to_f64()).collect();
    let e = check::close("FP8 y against the bf16 reference", &y, &common::reference_y(&inp), 0.1).unwrap();
    eprintln!("FP8 y: rel err {e:.3e} from the bf16 reference");
    // SAFETY: the live handle, freed once.
    unsafe { megamoe_layer_free(l) };
});

/// The FP8 weight buffers' codes and scales (kept alive while their addresses are used).
type CodeBufs = (Vec<CudaSlice<u8>>, Vec<CudaSlice<f32>>);

/// The six FP8 weight buffers of the custom operators' form (poisoned) and their addresses in the C ABI's order
/// (W1's codes and scales, W2's, W1 transposed's).
fn fp8_code_bufs(g: &Gpu, s: Shape) -> (CodeBufs, [u64; 6]) {
    let (e, h, i, st) = (s.e, s.h, s.i, g.stream());
    let code_bufs: Vec<CudaSlice<u8>> = [e * 2 * i * h, e * h * i, e * 2 * i * h]
        .iter()
        .map(|&n| {
            let mut b = g.alloc::<u8>(n).unwrap();
            g.fill_bytes(&mut b, 0x7f).unwrap();
            b
        })
        .collect();
    let scale_bufs: Vec<CudaSlice<f32>> =
        [e * 2 * i / 128 * (h / 128), e * h / 128 * (i / 128), e * 2 * i / 128 * (h / 128)]
            .iter()
            .map(|&n| {
                let mut b = g.alloc::<f32>(n).unwrap();
                g.fill_bytes(&mut b, 0xff).unwrap();
                b
            })
            .collect();
    let codes: [u64; 6] = [
        ptr(&code_bufs[0], st),
        ptr(&scale_bufs[0], st),
        ptr(&code_bufs[1], st),
        ptr(&scale_bufs[1], st),
        ptr(&code_bufs[2], st),
        ptr(&scale_bufs[2], st),
    ];
    ((code_bufs, scale_bufs), codes)
}

/// New inputs into `d`'s buffers and its outputs poisoned again (NaN), on the layer's stream.
fn load(g: &Gpu, d: &mut Dev, inp: &Inputs) {
    g.write(&mut d.x, &inp.x).unwrap();
    g.write(&mut d.ids, &inp.ids).unwrap();
    g.write(&mut d.w, &inp.w).unwrap();
    g.write(&mut d.w1, &inp.w1).unwrap();
    g.write(&mut d.w2, &inp.w2).unwrap();
    g.write(&mut d.dy, &inp.dy).unwrap();
    for b in [&mut d.y, &mut d.dx, &mut d.dw1, &mut d.dw2] {
        g.fill_bytes(b, 0xff).unwrap();
    }
    g.fill_bytes(&mut d.dtopk, 0xff).unwrap();
}

/// The forward alone through the ABI into `d.y` on the legacy default stream: its status and handle.
fn forward_only(g: &Gpu, l: *const MegamoeLayer, d: &Dev, tokens: usize) -> (c_int, *mut MegamoeSaved) {
    let s = g.stream();
    let mut saved = null_mut();
    // SAFETY: live allocations of the sizes the shapes ask.
    let c = unsafe {
        megamoe_forward(
            l,
            0,
            tokens,
            ptr(&d.x, s),
            ptr(&d.ids, s),
            ptr(&d.w, s),
            ptr(&d.w1, s),
            ptr(&d.w2, s),
            ptr(&d.y, s),
            &mut saved,
        )
    };
    (c, saved)
}

/// The backward of `saved` through the ABI into `d`'s gradients: its status.
fn backward_only(g: &Gpu, l: *const MegamoeLayer, d: &Dev, saved: *const MegamoeSaved) -> c_int {
    let s = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, s);
    // SAFETY: as `forward_only`.
    unsafe {
        megamoe_backward(
            l,
            0,
            saved,
            p(&d.dy),
            p(&d.x),
            ptr(&d.ids, s),
            ptr(&d.w, s),
            p(&d.w1),
            p(&d.w2),
            p(&d.dx),
            p(&d.dw1),
            p(&d.dw2),
            ptr(&d.dtopk, s),
            1,
            0,
        )
    }
}

// A layer with a ring of saved states (`megamoe_layer_reserve_saved`): its forward + backward captured in a CUDA
// graph through the ABI on a caller's stream (the layer's stream joins the capture by the events; no eager call
// first, so every tensor map is placed by a copy the graph records), replayed on new inputs: every element written,
// within 1e-2 of the f64 reference and bitwise the eager calls on the same inputs. Then the ring's refusals: a
// handle whose slot a later forward overwrote, and a capture when every slot is held by a graph.
gpu_test!(a_step_captured_through_the_abi_with_a_ring_replays_bitwise, {
    let g = gpu();
    let (s, tokens) = (RAGGED, 97);
    let mut r = rng();
    let (a, b) = (inputs(&mut r, s, tokens, Routing::Uniform), inputs(&mut r, s, tokens, Routing::Masked10));
    let caller = g.context().new_stream().unwrap();
    // another layer's eager step first: the kernel module and functions are loaded before the capture (the
    // captured layer's map cache stays empty)
    {
        let (c, w) = new_layer(0, s, tokens, true);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let mut wd = Dev::new(&g, &a);
        check_and_free(through_the_abi(&g, w, &caller, &mut wd, tokens));
        // SAFETY: the live handle, freed once.
        unsafe { megamoe_layer_free(w) };
        g.sync().unwrap();
    }
    let (c, l) = new_layer(0, s, tokens, true);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    // SAFETY: the live handle.
    assert_eq!(unsafe { megamoe_layer_reserve_saved(l, 2) }, MEGAMOE_OK, "{}", last_error());
    let mut d = Dev::new(&g, &a);
    g.sync().unwrap();
    let global = cudarc::driver::sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL;
    caller.begin_capture(global).unwrap();
    let captured = through_the_abi(&g, l, &caller, &mut d, tokens);
    let graph = caller.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).unwrap().expect("a graph");
    let mut e = Dev::new(&g, &a);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (inp, name) in [(&b, "B"), (&a, "A")] {
        load(&g, &mut d, inp);
        load(&g, &mut e, inp);
        g.sync().unwrap();
        graph.launch().unwrap();
        caller.synchronize().unwrap();
        let got = download(&g, &d);
        let sv = through_the_abi(&g, l, &caller, &mut e, tokens);
        caller.synchronize().unwrap();
        check_and_free(sv);
        let want = download(&g, &e);
        for (what, x, y) in
            [("y", &got.0, &want.0), ("dx", &got.1, &want.1), ("dW1", &got.3, &want.3), ("dW2", &got.4, &want.4)]
        {
            assert!(x.iter().all(|v| !v.is_nan()), "{name}: the replay left {what} unwritten");
            assert!(b16(x) == b16(y), "{name}: the replay's {what} differs from the eager call's");
        }
        assert!(got.2.iter().zip(&want.2).all(|(x, y)| x.to_bits() == y.to_bits()), "{name}: dtopk differs");
        let (mut outs, grads) = reference::forward_backward(&s, &[rank_input(inp)], &weights(inp)).unwrap();
        let o = outs.remove(0);
        let f = |v: &[bf16]| v.iter().map(|x| x.to_f64()).collect::<Vec<_>>();
        for (what, x, want) in [("y", f(&got.0), &o.y), ("dx", f(&got.1), &o.dx), ("dW1", f(&got.3), &grads.dw1)] {
            let err = check::close(&format!("replay {name} {what}"), &x, want, 1e-2).unwrap();
            eprintln!("replay {name}: {what} rel err {err:.3e}");
        }
    }
    // slot 0 is the graph's: two eager forwards both take slot 1, so the first one's handle is stale
    let (c1, s1) = forward_only(&g, l, &e, tokens);
    let (c2, s2) = forward_only(&g, l, &e, tokens);
    assert_eq!((c1, c2), (MEGAMOE_OK, MEGAMOE_OK), "{}", last_error());
    assert_eq!(backward_only(&g, l, &e, s1), MEGAMOE_INVALID_ARGUMENT, "a stale handle's backward was taken");
    assert!(last_error().contains("overwritten"), "{}", last_error());
    // SAFETY: live handles, each freed once.
    unsafe {
        assert_eq!(megamoe_saved_tokens(s1), 0);
        assert_eq!(megamoe_saved_status(s1), MEGAMOE_INVALID_ARGUMENT);
        assert_eq!(megamoe_saved_status(s2), MEGAMOE_OK, "{}", last_error());
        assert_eq!(megamoe_saved_check(s1), MEGAMOE_INVALID_ARGUMENT);
        megamoe_saved_free(s1);
    }
    assert_eq!(backward_only(&g, l, &e, s2), MEGAMOE_OK, "{}", last_error());
    check_and_free(s2);
    // a second capture takes slot 1; a third finds every slot held and is refused, saying what to do
    let mut f = Dev::new(&g, &a);
    g.sync().unwrap();
    caller.begin_capture(global).unwrap();
    let second = through_the_abi(&g, l, &caller, &mut f, tokens);
    let graph2 = caller.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0)).unwrap().expect("a graph");
    caller.begin_capture(global).unwrap();
    let mut third = null_mut();
    let cs = caller.cu_stream() as u64;
    let st = g.stream();
    // SAFETY: as `forward_only`.
    let c = unsafe {
        megamoe_forward(
            l,
            cs,
            tokens,
            ptr(&f.x, st),
            ptr(&f.ids, st),
            ptr(&f.w, st),
            ptr(&f.w1, st),
            ptr(&f.w2, st),
            ptr(&f.y, st),
            &mut third,
        )
    };
    let msg = last_error();
    let _ = caller.end_capture(cudarc::driver::sys::CUgraphInstantiate_flags(0));
    assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "a capture with every slot held by a graph was taken: {msg}");
    assert!(msg.contains("megamoe_layer_reserve_saved") && third.is_null(), "{msg}");
    // an eager forward then allocates its own state; the first graph still replays bitwise
    let (c3, s3) = forward_only(&g, l, &e, tokens);
    assert_eq!(c3, MEGAMOE_OK, "{}", last_error());
    check_and_free(s3);
    load(&g, &mut d, &a);
    g.sync().unwrap();
    graph.launch().unwrap();
    graph2.launch().unwrap();
    caller.synchronize().unwrap();
    // e.y: the eager forward on A just above
    let (again, eager) = (download(&g, &d), download(&g, &e));
    assert!(b16(&again.0) == b16(&eager.0), "the first graph's replay after a second capture differs from eager");
    // SAFETY: the handles, each freed once; the graphs are dropped before the layer.
    unsafe {
        megamoe_saved_free(captured);
        megamoe_saved_free(second);
    }
    drop((graph, graph2));
    // SAFETY: the live handle, freed once.
    unsafe { megamoe_layer_free(l) };
});

// The stateless pair the PyTorch custom operators use: a forward given no saved state (the layer's scratch) and
// `megamoe_backward_routed` (the routing made again), bitwise the handle path on the same inputs, outputs poisoned
// first; a layer that keeps z refuses both.
gpu_test!(the_stateless_forward_and_routed_backward_match_the_handle_path, {
    let g = gpu();
    let (s, tokens) = (RAGGED, 97);
    let inp = inputs(&mut rng(), s, tokens, Routing::Masked10);
    let caller = g.context().new_stream().unwrap();
    let (c, l) = new_layer(0, s, tokens, false);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let mut want = Dev::new(&g, &inp);
    check_and_free(through_the_abi(&g, l, &caller, &mut want, tokens));
    let want = download(&g, &want);
    let d = Dev::new(&g, &inp);
    g.sync().unwrap();
    let st = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let (x, ids, w, w1, w2) = (p(&d.x), ptr(&d.ids, st), ptr(&d.w, st), p(&d.w1), p(&d.w2));
    let cs = caller.cu_stream() as u64;
    // SAFETY: live handles and allocations of the sizes the shapes ask.
    unsafe {
        let c = megamoe_forward(l, cs, tokens, x, ids, w, w1, w2, p(&d.y), null_mut());
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, st));
        let c = megamoe_backward_routed(l, cs, tokens, p(&d.dy), x, ids, w, w1, w2, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    }
    caller.synchronize().unwrap();
    let got = download(&g, &d);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (what, a, b) in
        [("y", &got.0, &want.0), ("dx", &got.1, &want.1), ("dW1", &got.3, &want.3), ("dW2", &got.4, &want.4)]
    {
        assert!(a.iter().all(|v| !v.is_nan()), "{what} not fully written");
        assert!(b16(a) == b16(b), "the stateless path's {what} differs from the handle path's");
    }
    assert!(got.2.iter().zip(&want.2).all(|(a, b)| a.to_bits() == b.to_bits()), "dtopk differs");
    let (c, lz) = new_layer(0, s, tokens, true);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    // SAFETY: as above.
    unsafe {
        let c = megamoe_forward(lz, cs, tokens, x, ids, w, w1, w2, p(&d.y), null_mut());
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "a layer keeping z ran a forward without a saved state");
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, st));
        let c = megamoe_backward_routed(lz, cs, tokens, p(&d.dy), x, ids, w, w1, w2, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "a layer keeping z ran the routed backward");
        megamoe_layer_free(lz);
        megamoe_layer_free(l);
    }
});

/// `megamoe_forward_z` into the caller's z and `megamoe_backward_routed_z` of that z (`inputs` `d`), with
/// `between` other inputs' forward_z (into `z_other`) between them: the lent-z state's routing rewritten in
/// between, which the backward makes again. Statuses asserted.
fn through_z(g: &Gpu, l: *const MegamoeLayer, d: &Dev, z: u64, between: Option<(&Dev, u64)>, tokens: usize) {
    let s = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, s);
    let ins = |d: &Dev| (p(&d.x), ptr(&d.ids, s), ptr(&d.w, s), p(&d.w1), p(&d.w2));
    let (x, ids, w, w1, w2) = ins(d);
    // SAFETY: live allocations of the sizes the shapes ask (z: tokens k rows of 2I).
    unsafe {
        let c = megamoe_forward_z(l, 0, tokens, x, ids, w, w1, w2, p(&d.y), z);
        assert_eq!(c, MEGAMOE_OK, "forward_z: {}", last_error());
        if let Some((o, zo)) = between {
            let (x, ids, w, w1, w2) = ins(o);
            let c = megamoe_forward_z(l, 0, tokens, x, ids, w, w1, w2, p(&o.y), zo);
            assert_eq!(c, MEGAMOE_OK, "forward_z between: {}", last_error());
        }
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, s));
        let c = megamoe_backward_routed_z(l, 0, tokens, p(&d.dy), x, ids, w, w1, w2, z, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_OK, "backward_routed_z: {}", last_error());
    }
}

gpu_test!(z_in_the_callers_buffer_is_bitwise_the_saved_state, {
    // the custom operators' z-keeping pair: the forward writes z into the caller's buffer and hands out no state,
    // the backward takes that buffer back and routes again: bitwise the handle path (z in the saved state), with
    // another forward between them, every output written; the refusals around it change nothing
    let g = gpu();
    let s = RAGGED;
    let tokens = 97;
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, Routing::Masked10);
    let other = inputs(&mut r, s, tokens, Routing::Uniform);
    let (c, l) = new_layer(0, s, tokens, true);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let st = g.stream();
    // the handle path
    let want_d = Dev::new(&g, &inp);
    let (c, saved) = forward_only(&g, l, &want_d, tokens);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    assert_eq!(backward_only(&g, l, &want_d, saved), MEGAMOE_OK, "{}", last_error());
    check_and_free(saved);
    let want = download(&g, &want_d);
    // the caller's z, poisoned
    let zn = tokens * s.k * 2 * s.i;
    let nan = |n: usize| {
        let mut b = g.alloc::<bf16>(n).unwrap();
        g.fill_bytes(&mut b, 0xff).unwrap();
        b
    };
    let (z, z_other) = (nan(zn), nan(zn));
    let d = Dev::new(&g, &inp);
    let o = Dev::new(&g, &other);
    through_z(&g, l, &d, ptr(&z, st), Some((&o, ptr(&z_other, st))), tokens);
    g.sync().unwrap();
    let got = download(&g, &d);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (what, a, b) in
        [("y", &got.0, &want.0), ("dx", &got.1, &want.1), ("dW1", &got.3, &want.3), ("dW2", &got.4, &want.4)]
    {
        assert!(a.iter().all(|v| !v.is_nan()), "{what} not fully written");
        assert!(b16(a) == b16(b), "{what} through the caller's z differs from the saved state's");
    }
    assert!(got.2.iter().zip(&want.2).all(|(a, b)| a.to_bits() == b.to_bits()), "dtopk differs");
    // z holds the routed rows (masked slots leave rows unwritten at the end): some finite, none read as NaN above
    assert!(g.download(&z).unwrap().iter().any(|v| v.is_finite()), "z not written");
    // refusals, each writing nothing
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let (x, ids, w, w1, w2) = (p(&d.x), ptr(&d.ids, st), ptr(&d.w, st), p(&d.w1), p(&d.w2));
    let fresh = nan(tokens * s.h);
    // SAFETY: live allocations; each call is refused before any launch.
    unsafe {
        let c = megamoe_forward(l, 0, tokens, x, ids, w, w1, w2, p(&fresh), null_mut());
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("megamoe_forward_z"), "{}", last_error());
        // out inside z's buffer (both fit it)
        let c = megamoe_forward_z(l, 0, tokens, x, ids, w, w1, w2, p(&z_other), p(&z_other));
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "z on out");
        assert!(last_error().contains("overlaps"), "{}", last_error());
        let c = megamoe_forward_z(l, 0, tokens, x, ids, w, w1, w2, p(&fresh), 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "null z");
        assert!(last_error().contains("z is a null pointer"), "{}", last_error());
        let (dx, dw1, dw2, dtopk) = (p(&o.dx), p(&o.dw1), p(&o.dw2), ptr(&o.dtopk, st));
        let c = megamoe_backward_routed(l, 0, tokens, p(&d.dy), x, ids, w, w1, w2, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("megamoe_backward_routed_z"), "{}", last_error());
        // dx onto z
        let c =
            megamoe_backward_routed_z(l, 0, tokens, p(&d.dy), x, ids, w, w1, w2, p(&z), p(&z), dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "dx on z");
        assert!(last_error().contains("overlaps"), "{}", last_error());
    }
    // a layer that recomputes z has no lent-z state
    let (c, l0) = new_layer(0, s, tokens, false);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    // SAFETY: as above.
    unsafe {
        let c = megamoe_forward_z(l0, 0, tokens, x, ids, w, w1, w2, p(&fresh), p(&z_other));
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("keeps z"), "{}", last_error());
        megamoe_layer_free(l0);
    }
    g.sync().unwrap();
    assert!(g.download(&fresh).unwrap().iter().all(|v| v.is_nan()), "a refused call wrote an output");
    let od = download(&g, &o);
    assert!(od.1.iter().all(|v| v.is_nan()), "a refused backward wrote dx");
    // no tokens: nothing to write, no error
    // SAFETY: empty buffers are not read.
    unsafe {
        let c = megamoe_forward_z(l, 0, 0, 0, 0, 0, w1, w2, 0, 0);
        assert_eq!(c, MEGAMOE_OK, "0 tokens: {}", last_error());
    }
    // SAFETY: the live handle, freed once.
    unsafe { megamoe_layer_free(l) };
});

gpu_test!(fp8_z_in_the_callers_buffer_is_bitwise_the_saved_state, {
    // the FP8 operators' z-keeping pair (`megamoe_forward_fp8_codes_z`, `megamoe_backward_routed_fp8_z`) on a
    // z-keeping layer: bitwise the FP8 handle path (z in the saved state), another FP8 forward_z between them
    let g = gpu();
    let s = Shape { h: 512, i: 256, e: 8, k: 2 };
    let tokens = 200;
    let mut r = rng();
    let inp = inputs(&mut r, s, tokens, Routing::Masked10);
    let other = inputs(&mut r, s, tokens, Routing::Uniform);
    let (c, l) = new_layer(0, s, tokens, true);
    assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    let st = g.stream();
    let p = |v: &CudaSlice<bf16>| ptr(v, st);
    let ins = |d: &Dev| (p(&d.x), ptr(&d.ids, st), ptr(&d.w, st), p(&d.w1), p(&d.w2));
    // the handle path
    let want_d = Dev::new(&g, &inp);
    let (x, ids, w, w1, w2) = ins(&want_d);
    let (mut w8, mut saved) = (null_mut(), null_mut());
    // SAFETY: live handles and allocations of the sizes the shapes ask.
    unsafe {
        assert_eq!(megamoe_fp8_weights_new(l, &mut w8), MEGAMOE_OK, "{}", last_error());
        assert_eq!(megamoe_fp8_weights_quantize(l, 0, w8, w1, w2), MEGAMOE_OK, "{}", last_error());
        let c = megamoe_forward_fp8(l, 0, tokens, x, ids, w, w8, p(&want_d.y), &mut saved);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let d = &want_d;
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, st));
        let c = megamoe_backward_fp8(l, 0, saved, p(&d.dy), x, ids, w, w1, w2, w8, dx, dw1, dw2, dtopk, 1, 0);
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        check_and_free(saved);
        megamoe_fp8_weights_free(w8);
    }
    let want = download(&g, &want_d);
    // the codes in the caller's buffers, z in the caller's buffer
    let (_bufs, codes) = fp8_code_bufs(&g, s);
    let zn = tokens * s.k * 2 * s.i;
    let nan = |n: usize| {
        let mut b = g.alloc::<bf16>(n).unwrap();
        g.fill_bytes(&mut b, 0xff).unwrap();
        b
    };
    let (z, z_other) = (nan(zn), nan(zn));
    let d = Dev::new(&g, &inp);
    let o = Dev::new(&g, &other);
    let (x, ids, w, w1, w2) = ins(&d);
    // SAFETY: live handles and allocations of the sizes the shapes ask; `codes` six addresses.
    unsafe {
        assert_eq!(megamoe_fp8_quantize_into(l, 0, w1, w2, codes.as_ptr()), MEGAMOE_OK, "{}", last_error());
        // the routine without z is refused on a z-keeping layer, writing nothing
        let c = megamoe_forward_fp8_codes(l, 0, tokens, x, ids, w, codes.as_ptr(), p(&d.y));
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT);
        assert!(last_error().contains("megamoe_forward_fp8_codes_z"), "{}", last_error());
        let c = megamoe_forward_fp8_codes_z(l, 0, tokens, x, ids, w, codes.as_ptr(), p(&d.y), ptr(&z, st));
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let (xo, idso, wo, _, _) = ins(&o);
        let c = megamoe_forward_fp8_codes_z(l, 0, tokens, xo, idso, wo, codes.as_ptr(), p(&o.y), ptr(&z_other, st));
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
        let (dx, dw1, dw2, dtopk) = (p(&d.dx), p(&d.dw1), p(&d.dw2), ptr(&d.dtopk, st));
        // z onto a code buffer: refused
        let c = megamoe_backward_routed_fp8_z(
            l,
            0,
            tokens,
            p(&d.dy),
            x,
            ids,
            w,
            w1,
            w2,
            codes.as_ptr(),
            ptr(&z, st),
            codes[0],
            dw1,
            dw2,
            dtopk,
            1,
            0,
        );
        assert_eq!(c, MEGAMOE_INVALID_ARGUMENT, "dx on W1's codes");
        let c = megamoe_backward_routed_fp8_z(
            l,
            0,
            tokens,
            p(&d.dy),
            x,
            ids,
            w,
            w1,
            w2,
            codes.as_ptr(),
            ptr(&z, st),
            dx,
            dw1,
            dw2,
            dtopk,
            1,
            0,
        );
        assert_eq!(c, MEGAMOE_OK, "{}", last_error());
    }
    g.sync().unwrap();
    let got = download(&g, &d);
    let b16 = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (what, a, b) in
        [("y", &got.0, &want.0), ("dx", &got.1, &want.1), ("dW1", &got.3, &want.3), ("dW2", &got.4, &want.4)]
    {
        assert!(a.iter().all(|v| !v.is_nan()), "FP8 {what} not fully written");
        assert!(b16(a) == b16(b), "FP8 {what} through the caller's z differs from the saved state's");
    }
    assert!(got.2.iter().zip(&want.2).all(|(a, b)| a.to_bits() == b.to_bits()), "FP8 dtopk differs");
    assert!(g.download(&z).unwrap().iter().any(|v| v.is_finite()), "z not written");
    // SAFETY: the live handle, freed once.
    unsafe { megamoe_layer_free(l) };
});
