//! The layer in blockwise FP8. [`MoeLayer::forward_fp8`]: the tokens quantized once (1 x 128 scales), their
//! codes and scales gathered into expert order (half the bytes of the bf16 gather), GEMM1 with the SwiGLU
//! epilogue in FP8 quantizing h as it stores it, GEMM2 in FP8, the combine as in bf16. The weights come quantized
//! ([`Fp8Weights`]: once per optimizer step, not per call). [`MoeLayer::backward_fp8`]: its backward, z
//! stored by the forward's GEMM1 (`Save::WithZ`) or recomputed in FP8 as the forward computed it, then the
//! backward on the bf16 x, W1 and W2, with the GEMMs
//! `LayerConfig::fp8_backward` names in FP8 (dx by default) and the rest in bf16 (straight-through: the
//! quantizers taken as the identity).
use cudarc::driver::{CudaSlice, CudaStream};
use half::bf16;
use megamoe_kernels::params::{Combine, GatherDequant, GroupedGemmFp8};

use super::{Grads, Inputs, LayerConfig, MoeLayer, Saved};
use crate::error::{Error, Result};
use crate::fp8::{self as q, QuantizeArgs, QuantizeTArgs};
use crate::gemm::WgradElem;
use crate::runtime::{dptr, Gpu};
use megamoe_kernels::kernels_host as kh;

/// W1 and W2 in blockwise FP8 (128 x 128 scales), as [`MoeLayer::forward_fp8`] reads them.
pub struct Fp8Weights {
    /// e4m3 [E * 2I, H] (each expert's gate rows, then its up rows).
    pub w1: CudaSlice<u8>,
    /// f32 [E * 2I / 128, H / 128].
    pub w1_scales: CudaSlice<f32>,
    /// e4m3 [E * H, I].
    pub w2: CudaSlice<u8>,
    /// f32 [E * H / 128, I / 128].
    pub w2_scales: CudaSlice<f32>,
    /// For an FP8 dx ([`Fp8Backward::Dx`](super::Fp8Backward::Dx)): each expert's W1 transposed, e4m3 [E * H, 2I] in
    /// W1's own blocks (the same scales, laid out [E * H / 128, 2I / 128]); allocated by [`Fp8Weights::alloc`] for a
    /// layer whose backward needs it.
    pub w1t: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
    /// For an FP8 dh ([`Fp8Dh::Fp8`](super::Fp8Dh::Fp8)): each expert's W2 transposed, e4m3 [E * I, H] in W2's own
    /// blocks (scales [E * I / 128, H / 128]); allocated by [`Fp8Weights::alloc`] for a layer whose backward needs it.
    pub w2t: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
}

/// The weights' 128 x 128 blocks need H and I multiples of 128 (the layer itself takes multiples of 64).
fn check_block_shape(what: &str, h: usize, i: usize) -> Result<()> {
    if h % 128 != 0 || i % 128 != 0 {
        return Err(Error::InvalidArgument(format!(
            "{what}: FP8 weights are quantized in 128 x 128 blocks: H {h} and I {i} must be multiples of 128"
        )));
    }
    Ok(())
}

/// Refuse an allocation on `g`'s stream while it is being captured: a capture would record it as a graph
/// allocation, valid only inside that graph, which the layer would then keep.
pub(crate) fn no_alloc_in_capture(g: &Gpu, what: &str) -> Result<()> {
    if g.capturing()? {
        return Err(Error::InvalidArgument(format!(
            "{what} allocates its buffers, which a CUDA graph capture cannot record: run it once outside the \
             capture first"
        )));
    }
    Ok(())
}

impl Fp8Weights {
    /// Buffers for `layer`'s weights (uninitialised: fill them with [`Fp8Weights::quantize`]). H and I must be
    /// multiples of 128.
    pub fn alloc(layer: &MoeLayer) -> Result<Self> {
        let c = &layer.cfg;
        let t = (c.fp8_backward.dx(), c.fp8_dh == super::Fp8Dh::Fp8);
        Self::alloc_shape(&layer.gpu, (c.experts, c.hidden, c.intermediate), t)
    }

    /// Buffers for `e` experts of H x I (`w1t`, `w2t`: W1's, W2's transposed codes too).
    pub(crate) fn alloc_shape(g: &Gpu, (e, h, i): (usize, usize, usize), (w1t, w2t): (bool, bool)) -> Result<Self> {
        check_block_shape("Fp8Weights::alloc", h, i)?;
        let w1t = if w1t { Some((g.alloc(e * 2 * i * h)?, g.alloc(e * 2 * i / 128 * (h / 128))?)) } else { None };
        let w2t = if w2t { Some((g.alloc(e * i * h)?, g.alloc(e * i / 128 * (h / 128))?)) } else { None };
        Ok(Fp8Weights {
            w1: g.alloc(e * 2 * i * h)?,
            w1_scales: g.alloc(e * 2 * i / 128 * (h / 128))?,
            w2: g.alloc(e * h * i)?,
            w2_scales: g.alloc(e * h / 128 * (i / 128))?,
            w1t,
            w2t,
        })
    }

    /// Quantize bf16 W1 [E, 2I, H] and W2 [E, H, I] into these buffers (after each optimizer step; asynchronous),
    /// and W1's transpose when allocated.
    pub fn quantize(&mut self, gpu: &Gpu, w1: &CudaSlice<bf16>, w2: &CudaSlice<bf16>, layer: &MoeLayer) -> Result<()> {
        let c = &layer.cfg;
        self.quantize_shape(gpu, w1, w2, (c.experts, c.hidden, c.intermediate), layer.gpu.ordinal())
    }

    /// [`Fp8Weights::quantize`] for `e` experts of H x I, the layer on device `layer_dev`.
    pub(crate) fn quantize_shape(
        &mut self,
        gpu: &Gpu,
        w1: &CudaSlice<bf16>,
        w2: &CudaSlice<bf16>,
        (e, h, i): (usize, usize, usize),
        layer_dev: usize,
    ) -> Result<()> {
        // both weights checked before the first launch, shapes included (the quantizers' own checks come launch
        // by launch): a bad W2 must not leave W1's codes updated alone
        check_block_shape("Fp8Weights::quantize", h, i)?;
        for (name, got, need, dev) in
            [("W1", w1.len(), e * 2 * i * h, w1.ordinal()), ("W2", w2.len(), e * h * i, w2.ordinal())]
        {
            if got != need || dev != gpu.ordinal() {
                return Err(Error::InvalidArgument(format!(
                    "Fp8Weights::quantize: {name} has {got} elements on device {dev}, the layer needs {need} on device {}",
                    gpu.ordinal()
                )));
            }
        }
        if gpu.ordinal() != layer_dev {
            return Err(Error::InvalidArgument(format!(
                "Fp8Weights::quantize: called on device {}, the layer is on device {layer_dev}",
                gpu.ordinal()
            )));
        }
        if self.w1.len() != e * 2 * i * h || self.w2.len() != e * h * i {
            return Err(Error::InvalidArgument(
                "Fp8Weights::quantize: these buffers were allocated for another layer".into(),
            ));
        }
        q::quantize_blocks(
            gpu,
            QuantizeArgs { x: w1, q: &mut self.w1, scales: &mut self.w1_scales, rows: e * 2 * i, cols: h },
        )?;
        if let Some((qt, st)) = self.w1t.as_mut() {
            q::quantize_blocks_t(gpu, QuantizeTArgs { x: w1, q: qt, scales: st, batches: e, rows: 2 * i, cols: h })?;
        }
        if let Some((qt, st)) = self.w2t.as_mut() {
            q::quantize_blocks_t(gpu, QuantizeTArgs { x: w2, q: qt, scales: st, batches: e, rows: h, cols: i })?;
        }
        q::quantize_blocks(
            gpu,
            QuantizeArgs { x: w2, q: &mut self.w2, scales: &mut self.w2_scales, rows: e * h, cols: i },
        )
    }
}

/// The inputs of an FP8 forward: the tokens in bf16 (quantized by the call), the routing, the quantized weights.
pub struct Fp8Inputs<'a> {
    /// Tokens T.
    pub tokens: usize,
    /// bf16 [T, H].
    pub x: &'a CudaSlice<bf16>,
    /// i32 [T, k], expert ids, -1 = masked.
    pub topk_ids: &'a CudaSlice<i32>,
    /// f32 [T, k].
    pub topk_weights: &'a CudaSlice<f32>,
    /// W1 and W2, quantized.
    pub weights: &'a Fp8Weights,
}

/// The FP8 forward's buffers: the tokens' codes and scales, their expert-ordered copies, h's.
pub(super) struct Fp8Work {
    x8: CudaSlice<u8>,
    x8_scales: CudaSlice<f32>,
    xs8: CudaSlice<u8>,
    xs8_scales: CudaSlice<f32>,
    h8: CudaSlice<u8>,
    h8_scales: CudaSlice<f32>,
    /// The FP8 weight gradients' operands ([`Fp8Backward::Wgrad`](super::Fp8Backward::Wgrad)), on first use.
    wgrad: Option<WgradWork>,
    /// dz's codes [max_tokens k, 2I] and row scales [max_tokens k, 2I / 128] for an FP8 dx, on first use.
    dz8: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
    /// dy's codes [max_tokens, H], scales [max_tokens, H / 128] and their bf16 values [max_tokens, H] with
    /// [`Fp8Dy::Codes`](super::Fp8Dy::Codes), on first use.
    dyq: Option<(CudaSlice<u8>, CudaSlice<f32>, CudaSlice<bf16>)>,
}

/// The FP8 weight gradients' two operands, transposed per expert (`quantize_fp8_cols_grouped`): A^T codes [M, Kp]
/// with 1 x 128 scales [Kp / 128, M] (dy, then dz: M = H, then 2I), B^T codes [N, Kp] with 128 x 128 scales
/// [Kp / 128, N / 128] (s h, then x: N = I, then H). Kp: every expert's rows padded to 128 at max_tokens k rows.
struct WgradWork {
    a: CudaSlice<u8>,
    a_scales: CudaSlice<f32>,
    b: CudaSlice<u8>,
    b_scales: CudaSlice<f32>,
    /// dz^T [2I, Kp] and its scales when dx runs in FP8 too ([`Operand::Dz`]).
    dz: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
    kp: usize,
}

/// Which operand of the FP8 weight gradients a quantization writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operand {
    /// A (1 x 128 scales along the rows): dy, dz.
    A,
    /// B (128 x 128 blocks): s h, x.
    B,
    /// dW1's A (dz, 1 x 128) in its own buffer: with an FP8 dx, dz is quantized (both ways, one pass) before dx,
    /// while A still holds dy for dW2.
    Dz,
}

impl MoeLayer {
    /// The forward in blockwise FP8 (see the module's documentation): y = sum_j w_tj expert(ids_tj)(x_t) with x,
    /// h and the weights in e4m3 with their scales, f32 accumulation, bf16 h and y. Needs H a multiple of 512 and
    /// I of 128. `saved` (from [`MoeLayer::alloc_saved`]) receives the routing layout, for [`MoeLayer::backward_fp8`]
    /// (the bf16 [`MoeLayer::backward`] refuses it). Asynchronous, no host synchronisation; the first call allocates
    /// the FP8 buffers and encodes the tensor maps of its buffers, after which calls on the same buffers can be
    /// captured in a CUDA graph (as [`MoeLayer::forward_into`]).
    pub fn forward_fp8(&mut self, inp: &Fp8Inputs<'_>, out: &mut CudaSlice<bf16>, saved: &mut Saved) -> Result<()> {
        let c = self.cfg;
        let (e, h, k) = (c.experts, c.hidden, c.top_k);
        let bad = |s: String| Err(Error::InvalidArgument(format!("forward_fp8: {s}")));
        // the weights' shapes, and H a multiple of 512, I of 128
        let w = inp.weights;
        self.check_fp8_weights(w, (false, false))?;
        crate::gemm::check_policies()?;
        self.check_saved_owner(saved)?;
        let t = inp.tokens;
        if t > c.max_tokens {
            return bad(format!("{t} tokens > the configured maximum {}", c.max_tokens));
        }
        self.check_lent_z(saved, t)?;
        let want = [
            ("x", inp.x.len(), t * h),
            ("topk_ids", inp.topk_ids.len(), t * k),
            ("topk_weights", inp.topk_weights.len(), t * k),
            ("out", out.len(), t * h),
        ];
        for (name, got, need) in want {
            if got != need {
                return bad(format!("{name} has {got} elements, the layer needs {need}"));
            }
        }
        if saved.experts != e || saved.row_slot.len() < (t * k).max(1) {
            return bad(format!("saved state does not fit this layer and {t} tokens: make it with alloc_saved"));
        }
        let g = self.gpu.clone();
        let me = g.ordinal();
        let ords = [
            ("x", inp.x.ordinal()),
            ("topk_ids", inp.topk_ids.ordinal()),
            ("topk_weights", inp.topk_weights.ordinal()),
            ("out", out.ordinal()),
        ];
        for (name, o) in ords {
            if o != me {
                return bad(format!("{name} lives on device {o}, the layer on device {me}"));
            }
        }
        self.alloc_fp8()?;
        self.maps.trim(&self.gpu)?;
        // from here `saved` changes: it is complete again only once every launch of the call was issued
        saved.complete = false;
        let r = self.forward_fp8_launches(inp, out, saved);
        saved.complete = r.is_ok();
        r
    }

    /// [`MoeLayer::forward_fp8`]'s launches, its arguments checked and its buffers allocated.
    fn forward_fp8_launches(
        &mut self,
        inp: &Fp8Inputs<'_>,
        out: &mut CudaSlice<bf16>,
        saved: &mut Saved,
    ) -> Result<()> {
        let c = self.cfg;
        let (e, h, i, k) = (c.experts, c.hidden, c.intermediate, c.top_k);
        let (t, w, g) = (inp.tokens, inp.weights, self.gpu.clone());
        let routed = self.route_call(inp.topk_ids, t, saved)?;
        // its z / xs (if any) are not this call's: a backward must refuse it
        saved.fp8 = true;
        if !routed {
            return Ok(());
        }
        let fused = gemm1_h_fused();
        let wide = gemm1_wide();
        // a layer that saves z gets it from GEMM1 (the 128 x 256 kernel: `_qz`), so its backward skips the
        // recompute (set before the launches: a call that fails leaves `saved` incomplete, refused by a backward)
        saved.z_fp8 = wide && saved.z.is_some();
        let sv: &Saved = saved;
        let s = g.stream().clone();
        let slots_max = c.max_tokens * k;
        // the wide kernels gather x's codes and scales in GEMM1's producer (`_gather`), unless MEGAMOE_FP8_GATHER=pass
        let ga = wide && producer_gather();
        self.quantize_tokens(inp.x, t, sv, ga)?;
        let f = self.fp8.as_ref().expect("allocated above");
        // the GEMMs with cached tensor maps (encoded on a buffer's first call: then capturable in a CUDA graph)
        let (xs8, xs8s, h8, h8s) = (dptr(&f.xs8, &s), dptr(&f.xs8_scales, &s), dptr(&f.h8, &s), dptr(&f.h8_scales, &s));
        let (x8, x8s) = (dptr(&f.x8, &s), dptr(&f.x8_scales, &s));
        let (hp, ys) = (dptr(&self.work.h, &s), dptr(&self.work.ys, &s));
        let gemm = |sa: u64, sb: u64, cp: u64, n: usize, kk: usize, maps: [u64; 3]| {
            fp8_params(&c, &s, sv, sa, sb, cp, (n, kk), maps)
        };
        // `z_fp8` (set above) holds only with the wide kernels
        let zs = if sv.z_fp8 { sv.z.as_ref().map(|z| (dptr(z, &s), z.len() / (2 * i))) } else { None };
        let (k1, map_c1, c1, c1_scales) = if zs.is_some() {
            let k1 = if ga { "grouped_gemm_fp8w_swiglu_qz_gather" } else { "grouped_gemm_fp8w_swiglu_qz" };
            (k1, self.maps.get_u8(&g, h8, slots_max, i, 64)?, h8, h8s)
        } else if wide {
            let k1 = if ga { "grouped_gemm_fp8w_swiglu_q_gather" } else { "grouped_gemm_fp8w_swiglu_q" };
            (k1, self.maps.get_u8(&g, h8, slots_max, i, 64)?, h8, h8s)
        } else if fused {
            ("grouped_gemm_fp8_swiglu_q", self.maps.get_u8(&g, h8, slots_max, i, 64)?, h8, h8s)
        } else {
            ("grouped_gemm_fp8_swiglu", self.maps.get(&g, hp, slots_max, i, 64, 64)?, hp, 0)
        };
        // gathered: A read from the tokens' codes by row_slot (no map of A)
        let maps1 = [
            if ga { 0 } else { self.maps.get_u8(&g, xs8, slots_max, h, 128)? },
            self.maps.get_u8(&g, dptr(&w.w1, &s), e * 2 * i, h, if wide { 128 } else { 64 })?,
            map_c1,
        ];
        let mut p1 = gemm(if ga { x8s } else { xs8s }, dptr(&w.w1_scales, &s), c1, i, h, maps1);
        p1.c_scales = c1_scales;
        if ga {
            p1 = tokens_a(p1, x8, dptr(&sv.row_slot, &s), k);
        }
        if let Some((zp, z_rows)) = zs {
            (p1.z, p1.map_z) = (zp, self.maps.get(&g, zp, z_rows, 2 * i, 64, 64)?);
        }
        let cfg1 = q::launch_cfg(&g, k1, slots_max, e, i, q::tile_cols(k1))?;
        // SAFETY: the parameter block's buffers hold the shapes checked above (A, h or its codes and scales:
        // slots_max rows; W1: E * 2I rows of H; z, with `_qz`, the saved state's rows, at least t k, of 2I); rows
        // are bounded by the device offsets, offsets[E] <= t k <= slots_max. Gathered: x's codes and scales hold
        // max_tokens >= t rows, the routing's row_slot (this call's) tokens below t.
        unsafe { g.launch(k1, cfg1, &p1)? };
        if !fused {
            unsafe { q::quantize_rows_raw(&g, hp, h8, h8s, t * k, i)? };
        }
        let maps2 = [
            self.maps.get_u8(&g, h8, slots_max, i, 128)?,
            self.maps.get_u8(&g, dptr(&w.w2, &s), e * h, i, 128)?,
            self.maps.get(&g, ys, slots_max, h, 64, 64)?,
        ];
        let p2 = gemm(h8s, dptr(&w.w2_scales, &s), ys, h, i, maps2);
        let k2 = plain_kernel();
        let cfg2 = q::launch_cfg(&g, k2, slots_max, e, h, q::tile_cols(k2))?;
        // SAFETY: as GEMM1's, with h8 [slots_max, I], W2 [E * H, I], ys [slots_max, H] (H a multiple of 256).
        unsafe { g.launch(k2, cfg2, &p2)? };
        self.combine(dptr(&self.work.ys, &s), dptr(inp.topk_weights, &s), dptr(out, &s), sv)
    }

    /// The backward of [`MoeLayer::forward_fp8`], on the same inputs in bf16 (`inp`: the tokens, the routing and
    /// the bf16 weights `weights` was quantized from) and the same quantized weights: z recomputed in FP8 from the
    /// tokens' codes and W1's (the z the forward computed), then dh with the SwiGLU backward, dtopk, dx and the
    /// weight gradients as [`MoeLayer::backward`] computes them, on the bf16 x, W1 and W2, with the GEMMs
    /// `LayerConfig::fp8_backward` names in FP8 (dx by default, from dz's row codes and W1's transposed codes): the
    /// straight-through gradient (each quantizer taken as the identity). With `Save::WithZ` the FP8 forward's GEMM1
    /// stored z (`grouped_gemm_fp8w_swiglu_qz`, the 128 x 256 kernels) and this backward reads it unless its weight
    /// gradients are FP8 (their recompute also makes dW2's B); otherwise it recomputes z. It gathers x (the FP8
    /// forward keeps no x rows); with `LayerConfig::fp8_dw1_x` = [`Fp8Dw1X::Codes`](super::Fp8Dw1X::Codes) dW1 reads
    /// the tokens' row codes dequantized to bf16 instead (the EP FP8 backward's single-GPU twin); with
    /// `LayerConfig::fp8_dy` = [`Fp8Dy::Codes`](super::Fp8Dy::Codes) the backward runs on dy quantized per token and
    /// dequantized. Writes as [`MoeLayer::backward`] does (nothing when
    /// the forward saw a bad expert id); asynchronous, no host synchronisation.
    pub fn backward_fp8<W: WgradElem>(
        &mut self,
        saved: &Saved,
        dy: &CudaSlice<bf16>,
        inp: &Inputs<'_>,
        weights: &Fp8Weights,
        grads: Grads<'_, W>,
    ) -> Result<()> {
        self.backward_impl(saved, dy, inp, grads, Some(weights))
    }

    /// W1 and W2 quantized for this layer: their shapes and device; with `needs_w1t` (a backward whose dx runs in
    /// FP8; the forward does not need it) W1's transposed codes too.
    pub(super) fn check_fp8_weights(&self, w: &Fp8Weights, (needs_w1t, needs_w2t): (bool, bool)) -> Result<()> {
        let c = &self.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        let bad = |s: String| Err(Error::InvalidArgument(format!("FP8 weights: {s}")));
        if h % 512 != 0 || i % 128 != 0 {
            return bad(format!("H = {h} must be a multiple of 512 and I = {i} of 128"));
        }
        let me = self.gpu.ordinal();
        let mut want = vec![
            ("W1", w.w1.len(), e * 2 * i * h, w.w1.ordinal()),
            ("W1 scales", w.w1_scales.len(), e * 2 * i / 128 * (h / 128), w.w1_scales.ordinal()),
            ("W2", w.w2.len(), e * h * i, w.w2.ordinal()),
            ("W2 scales", w.w2_scales.len(), e * h / 128 * (i / 128), w.w2_scales.ordinal()),
        ];
        if needs_w1t {
            let Some((qt, st)) = &w.w1t else {
                return bad(
                    "an FP8 dx needs W1's transpose: allocate the weights for this layer (Fp8Weights::alloc)".into()
                );
            };
            want.push(("W1^T", qt.len(), e * 2 * i * h, qt.ordinal()));
            want.push(("W1^T scales", st.len(), e * 2 * i / 128 * (h / 128), st.ordinal()));
        }
        if needs_w2t {
            let Some((qt, st)) = &w.w2t else {
                return bad(
                    "an FP8 dh needs W2's transpose: allocate the weights for this layer (Fp8Weights::alloc)".into()
                );
            };
            want.push(("W2^T", qt.len(), e * i * h, qt.ordinal()));
            want.push(("W2^T scales", st.len(), e * i / 128 * (h / 128), st.ordinal()));
        }
        for (name, got, need, o) in want {
            if got != need {
                return bad(format!("{name} has {got} elements, the layer needs {need}"));
            }
            if o != me {
                return bad(format!("{name} lives on device {o}, the layer on device {me}"));
            }
        }
        Ok(())
    }

    /// The FP8 buffers, allocated on first use (max_tokens rows).
    fn alloc_fp8(&mut self) -> Result<()> {
        if self.fp8.is_none() {
            no_alloc_in_capture(&self.gpu, "the FP8 layer's first call")?;
            let (g, c) = (&self.gpu, &self.cfg);
            let (h, i) = (c.hidden, c.intermediate);
            let (tm, slots) = (c.max_tokens, c.max_tokens * c.top_k);
            self.fp8 = Some(Fp8Work {
                x8: g.alloc((tm * h).max(1))?,
                x8_scales: g.alloc((tm * h / 128).max(1))?,
                xs8: g.alloc((slots * h).max(1))?,
                xs8_scales: g.alloc((slots * h / 128).max(1))?,
                h8: g.alloc((slots * i).max(1))?,
                h8_scales: g.alloc((slots * i / 128).max(1))?,
                wgrad: None,
                dz8: None,
                dyq: None,
            });
        }
        Ok(())
    }

    /// The tokens x [T, H] quantized once (1 x 128 scales), their codes and scales gathered into expert order
    /// unless `in_producer` (the `_gather` kernels read them from the tokens' rows).
    pub(super) fn quantize_tokens(
        &mut self,
        x: &CudaSlice<bf16>,
        t: usize,
        sv: &Saved,
        in_producer: bool,
    ) -> Result<()> {
        self.alloc_fp8()?;
        let (g, h) = (self.gpu.clone(), self.cfg.hidden);
        let s = g.stream().clone();
        let f = self.fp8.as_ref().expect("allocated above");
        let (x8, x8s, xs8, xs8s) = (dptr(&f.x8, &s), dptr(&f.x8_scales, &s), dptr(&f.xs8, &s), dptr(&f.xs8_scales, &s));
        // SAFETY: x holds T rows of H (checked by the callers), the code and scale buffers max_tokens rows.
        unsafe { q::quantize_rows_raw(&g, dptr(x, &s), x8, x8s, t, h)? };
        if in_producer {
            return Ok(());
        }
        // codes and scales into expert order (H and H / 32 bytes a row: H a multiple of 512 keeps both 16-byte rows)
        self.gather_bytes(x8, xs8, h, sv)?;
        self.gather_bytes(x8s, xs8s, h / 32, sv)
    }

    /// dy's codes from [`MoeLayer::dy_codes`] dequantized to bf16 into the layer's own buffer: the dy of the
    /// backward with [`Fp8Dy::Codes`](super::Fp8Dy::Codes); its address.
    pub(super) fn dequantize_dy(&self, (q8, qs, out): (u64, u64, u64), t: usize) -> Result<u64> {
        let c = self.cfg;
        let p = GatherDequant {
            src: q8,
            scales: qs,
            dst: out,
            row_slot: 0,
            offsets: 0,
            cols: c.hidden as u32,
            k: 1,
            experts: 0,
            rows_max: t as u32,
        };
        // SAFETY: the codes, scales and values hold max_tokens >= T rows.
        unsafe { q::gather_dequant_raw(&self.gpu, &p)? };
        Ok(out)
    }

    /// dy [T, H] quantized per token (1 x 128) into the layer's own buffers: (codes, scales, the bf16 buffer of
    /// [`MoeLayer::dequantize_dy`]).
    pub(super) fn dy_codes(&mut self, dy: &CudaSlice<bf16>, t: usize) -> Result<(u64, u64, u64)> {
        self.alloc_fp8()?;
        let (g, c) = (self.gpu.clone(), self.cfg);
        let s = g.stream().clone();
        let f = self.fp8.as_mut().expect("allocated above");
        if f.dyq.is_none() {
            no_alloc_in_capture(&g, "the FP8 layer's first backward with Fp8Dy::Codes")?;
            let n = (c.max_tokens * c.hidden).max(1);
            f.dyq = Some((g.alloc(n)?, g.alloc((n / 128).max(1))?, g.alloc(n)?));
        }
        let (q8, qs, out) = f.dyq.as_ref().map(|(a, b, d)| (dptr(a, &s), dptr(b, &s), dptr(d, &s))).expect("above");
        // SAFETY: dy holds T rows of H (checked by the caller), the codes and scales max_tokens >= T rows.
        unsafe { q::quantize_rows_raw(&g, dptr(dy, &s), q8, qs, t, c.hidden)? };
        Ok((q8, qs, out))
    }

    /// dh = dy W2_e in FP8 with the SwiGLU backward (`grouped_gemm_fp8w_dswiglu_gather`: dy's token codes `dy8`
    /// (scales `dy8s`) read by the producer through the routing's row -> slot map, W2's transposed codes): dz into
    /// the workspace's dz, s h into its sh, each row's dtopk partials (I / 256 a row) into its partials; z at `z`
    /// (`z_rows` rows of 2I).
    pub(super) fn dh_fp8(
        &mut self,
        w: &Fp8Weights,
        (dy8, dy8s): (u64, u64),
        (z, z_rows): (u64, usize),
        w_route: u64,
        sv: &Saved,
    ) -> Result<()> {
        let c = self.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let slots_max = c.max_tokens * c.top_k;
        let Some((w2t, w2ts)) = &w.w2t else {
            return Err(Error::InvalidArgument("FP8 weights: an FP8 dh needs W2's transpose".into()));
        };
        let (dz, sh) = (dptr(&self.work.dz, &s), dptr(&self.work.sh, &s));
        let maps =
            [0, self.maps.get_u8(&g, dptr(w2t, &s), e * i, h, 128)?, self.maps.get(&g, dz, slots_max, 2 * i, 64, 64)?];
        let p = fp8_params(&c, &s, sv, dy8s, dptr(w2ts, &s), dz, (i, h), maps);
        let mut p = tokens_a(p, dy8, dptr(&sv.row_slot, &s), c.top_k);
        p.z = z;
        (p.w, p.w_len) = (w_route, (sv.tokens * c.top_k) as u32);
        (p.partial, p.sh) = (dptr(&self.work.partial, &s), sh);
        p.map_sh = self.maps.get(&g, sh, slots_max, i, 64, 64)?;
        // z's map: the producer's L2 prefetches of what the epilogue reads
        p.map_z = self.maps.get(&g, z, z_rows, 2 * i, 64, 64)?;
        let k1 = "grouped_gemm_fp8w_dswiglu_gather";
        let cfg = q::launch_cfg(&g, k1, slots_max, e, i, q::tile_cols(k1))?;
        // SAFETY: dy's codes and scales hold the call's T tokens (row_slot / top_k < T), W2^T E * I rows of H with
        // its block scales (checked), z and dz [slots_max, 2I] (z: the saved state's rows when saved, at least the
        // call's), sh [slots_max, I], the partials slots_max rows of at least I / 256; rows bounded by the device
        // offsets, offsets[E] <= T k.
        unsafe { g.launch(k1, cfg, &p) }
    }

    /// The tokens' row codes (x8 and its scales, from [`MoeLayer::quantize_tokens`]) dequantized to bf16 into expert
    /// order at `dst` (the workspace's xs: max_tokens k rows of H): dW1's x with
    /// [`Fp8Dw1X::Codes`](super::Fp8Dw1X::Codes).
    pub(super) fn dequantize_tokens(&self, dst: u64, sv: &Saved) -> Result<()> {
        let Some(f) = self.fp8.as_ref() else {
            return Err(Error::InvalidArgument("the tokens' codes are made by an FP8 call first".into()));
        };
        let (g, c) = (&self.gpu, &self.cfg);
        let s = g.stream();
        let p = GatherDequant {
            src: dptr(&f.x8, s),
            scales: dptr(&f.x8_scales, s),
            dst,
            row_slot: dptr(&sv.row_slot, s),
            offsets: dptr(&sv.offsets, s),
            cols: c.hidden as u32,
            k: c.top_k as u32,
            experts: c.experts as u32,
            rows_max: (sv.tokens * c.top_k) as u32,
        };
        // SAFETY: the codes and scales hold max_tokens >= T rows (row_slot / k < T), dst max_tokens k >= T k rows of
        // H; row_slot T k entries, offsets E + 1 (offsets[E] <= T k; zero after a bad id).
        unsafe { q::gather_dequant_raw(g, &p) }
    }

    /// z = x W1^T in FP8 for the backward of an FP8 forward (the GEMM1 of the forward without its SwiGLU epilogue:
    /// the same f32 sums, rounded to bf16), into the workspace's z [max_tokens k, 2I]; its address. With `ht`, by
    /// `grouped_gemm_fp8w_swiglu_zt`, which stores the same z and h^T's 128 x 128-block codes into operand B (dW2's B).
    pub(super) fn recompute_z_fp8(
        &mut self,
        x: &CudaSlice<bf16>,
        t: usize,
        w: &Fp8Weights,
        sv: &Saved,
        ht: bool,
    ) -> Result<u64> {
        let c = self.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let slots_max = c.max_tokens * c.top_k;
        // the 128 x 256 kernels gather x's codes in their producer (as the forward's GEMM1)
        let ga = (ht || plain_kernel() == "grouped_gemm_fp8w") && producer_gather();
        self.quantize_tokens(x, t, sv, ga)?;
        let f = self.fp8.as_ref().expect("allocated by quantize_tokens");
        let (xs8, xs8s, zp) = (dptr(&f.xs8, &s), dptr(&f.xs8_scales, &s), dptr(&self.work.z, &s));
        let (x8, x8s) = (dptr(&f.x8, &s), dptr(&f.x8_scales, &s));
        let maps = [
            if ga { 0 } else { self.maps.get_u8(&g, xs8, slots_max, h, 128)? },
            self.maps.get_u8(&g, dptr(&w.w1, &s), e * 2 * i, h, 128)?,
            self.maps.get(&g, zp, slots_max, 2 * i, 64, 64)?,
        ];
        let w1s = dptr(&w.w1_scales, &s);
        let sa = if ga { x8s } else { xs8s };
        let gathered = |p: GroupedGemmFp8| if ga { tokens_a(p, x8, dptr(&sv.row_slot, &s), c.top_k) } else { p };
        if ht {
            let (ct, cts, kp) = self.operand(Operand::B)?;
            let mut p = gathered(fp8_params(&c, &s, sv, sa, w1s, zp, (i, h), maps));
            (p.ct, p.c_scales, p.kp) = (ct, cts, kp as u32);
            let k1 = if ga { "grouped_gemm_fp8w_swiglu_zt_gather" } else { "grouped_gemm_fp8w_swiglu_zt" };
            let cfg = q::launch_cfg(&g, k1, slots_max, e, i, q::tile_cols(k1))?;
            // SAFETY: as the plain launch below (z slots_max rows of 2I), and h^T's codes I rows of Kp with their
            // [Kp / 128, I / 128] scales in operand B (Kp covers any routing of max_tokens tokens; the K block of a
            // tile from the route's offsets and tile offsets).
            unsafe { g.launch(k1, cfg, &p)? };
            return Ok(zp);
        }
        let p = gathered(fp8_params(&c, &s, sv, sa, w1s, zp, (2 * i, h), maps));
        let k1 = if ga { "grouped_gemm_fp8w_gather" } else { plain_kernel() };
        let cfg = q::launch_cfg(&g, k1, slots_max, e, 2 * i, q::tile_cols(k1))?;
        // SAFETY: the codes and scales hold slots_max rows of H, W1 E * 2I rows of H with its block scales, z
        // slots_max rows of 2I (2I a multiple of 256); rows are bounded by the device offsets, offsets[E] <= t k
        // <= slots_max.
        unsafe { g.launch(k1, cfg, &p)? };
        Ok(zp)
    }
}

impl MoeLayer {
    /// dx's rows = dz W1_e in FP8 into the workspace's ys: dz (the workspace's, `slots` rows) quantized per row in
    /// 1 x 128 blocks, then `grouped_gemm_fp8w` against W1's transposed codes (checked present by
    /// `check_fp8_weights`).
    /// `quantized`: dz's row codes are already there (written by the column quantizer's pass, `rows`).
    /// `side`: (x, its expert-ordered copy) for the side copy (`grouped_gemm_fp8w_cpx`: the producer warpgroup's
    /// idle warps copy x's rows for dW1 while dx runs; the 128 x 256 kernel only).
    pub(super) fn dx_fp8(
        &mut self,
        w: &Fp8Weights,
        slots: usize,
        sv: &Saved,
        quantized: bool,
        side: Option<(u64, u64)>,
    ) -> Result<()> {
        let c = self.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let slots_max = c.max_tokens * c.top_k;
        let (dz8, dz8s) = self.dz8()?;
        let Some((w1t, w1ts)) = &w.w1t else {
            return Err(Error::InvalidArgument("FP8 weights: an FP8 dx needs W1's transpose".into()));
        };
        let (dz, ys) = (dptr(&self.work.dz, &s), dptr(&self.work.ys, &s));
        if !quantized {
            // SAFETY: dz holds slots_max >= slots rows of 2I (a multiple of 128), the codes and scales as many.
            unsafe { q::quantize_rows_raw(&g, dz, dz8, dz8s, slots, 2 * i)? };
        }
        let maps = [
            self.maps.get_u8(&g, dz8, slots_max, 2 * i, 128)?,
            self.maps.get_u8(&g, dptr(w1t, &s), e * h, 2 * i, 128)?,
            self.maps.get(&g, ys, slots_max, h, 64, 64)?,
        ];
        let mut p = fp8_params(&c, &s, sv, dz8s, dptr(w1ts, &s), ys, (h, 2 * i), maps);
        let k1 = match side {
            Some((x, xs)) if plain_kernel() == "grouped_gemm_fp8w" => {
                (p.a_rows, p.a_copy, p.row_slot) = (x, xs, dptr(&sv.row_slot, &s));
                (p.top_k, p.copy_cols) = (c.top_k as u32, h as u32);
                "grouped_gemm_fp8w_cpx"
            }
            Some(_) => return Err(Error::InvalidArgument("the FP8 side copy needs the 128 x 256 kernel".into())),
            None => plain_kernel(),
        };
        let cfg = q::launch_cfg(&g, k1, slots_max, e, h, q::tile_cols(k1))?;
        // SAFETY: dz's codes and scales hold slots_max rows of 2I, W1^T E * H rows of 2I with its block scales, ys
        // slots_max rows of H (H a multiple of 512); rows are bounded by the device offsets, offsets[E] <= slots;
        // with the side copy x holds the call's tokens and the copy slots_max rows of H, row_slot the call's slots.
        unsafe { g.launch(k1, cfg, &p) }
    }

    /// The FP8 weight gradients' operand buffers, allocated on first use (after the FP8 forward's).
    fn wgrad_work(&mut self) -> Result<&WgradWork> {
        self.alloc_fp8()?;
        let (g, c) = (self.gpu.clone(), self.cfg);
        let f = self.fp8.as_mut().expect("allocated above");
        if f.wgrad.is_none() {
            no_alloc_in_capture(&g, "the FP8 layer's first FP8 weight-gradient backward")?;
            let kp = q::cols_grouped_kp(c.max_tokens * c.top_k, c.experts);
            let (ma, mb) = (c.hidden.max(2 * c.intermediate), c.hidden.max(c.intermediate));
            let i2 = 2 * c.intermediate;
            let dz = if c.fp8_backward.dx() { Some((g.alloc(i2 * kp)?, g.alloc(kp / 128 * i2)?)) } else { None };
            f.wgrad = Some(WgradWork {
                a: g.alloc(ma * kp)?,
                a_scales: g.alloc(kp / 128 * ma)?,
                b: g.alloc(mb * kp)?,
                b_scales: g.alloc(kp / 128 * (mb / 128))?,
                dz,
                kp,
            });
        }
        Ok(f.wgrad.as_ref().expect("allocated above"))
    }

    /// Operand `op`'s codes and scales (addresses) and Kp.
    fn operand(&mut self, op: Operand) -> Result<(u64, u64, usize)> {
        let s = self.gpu.stream().clone();
        let w = self.wgrad_work()?;
        Ok(match op {
            Operand::A => (dptr(&w.a, &s), dptr(&w.a_scales, &s), w.kp),
            Operand::B => (dptr(&w.b, &s), dptr(&w.b_scales, &s), w.kp),
            Operand::Dz => {
                let Some((q, sc)) = &w.dz else {
                    return Err(Error::InvalidArgument("dz's own operand exists only with an FP8 dx".into()));
                };
                (dptr(q, &s), dptr(sc, &s), w.kp)
            }
        })
    }

    /// dz's row-wise codes and scales for an FP8 dx (allocated on first use).
    fn dz8(&mut self) -> Result<(u64, u64)> {
        let c = self.cfg;
        let slots_max = c.max_tokens * c.top_k;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        self.alloc_fp8()?;
        let f = self.fp8.as_mut().expect("allocated above");
        if f.dz8.is_none() {
            no_alloc_in_capture(&g, "the FP8 layer's first backward with an FP8 dx")?;
            let i2 = 2 * c.intermediate;
            f.dz8 = Some((g.alloc((slots_max * i2).max(1))?, g.alloc((slots_max * i2 / 128).max(1))?));
        }
        Ok(f.dz8.as_ref().map(|(a, b)| (dptr(a, &s), dptr(b, &s))).expect("allocated above"))
    }

    /// Quantize `cols` columns of the expert-ordered rows at `x` (bf16 [max_tokens k, cols]) into operand `op` of
    /// the FP8 weight gradients, transposed (`block`: 128 x 128 scales, else 1 x 128 along the rows). With
    /// `gather` = (tokens, copy, w) the rows are gathered from the tokens [T, cols] instead (`x` unused), when
    /// `copy` is non-zero also stored there in bf16 (the gather's own output), and when `w` is non-zero (the routing
    /// weights f32 [T, k]) scaled by their slot's weight before they are quantized. With `rows`, the rows are also
    /// quantized row-wise into dz's row codes (an FP8 dx's A) from the same read.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn quantize_cols_fp8(
        &mut self,
        op: Operand,
        x: u64,
        cols: usize,
        block: bool,
        gather: Option<(u64, u64, u64)>,
        rows: bool,
        sv: &Saved,
    ) -> Result<()> {
        let c = self.cfg;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (q, scales, kp) = self.operand(op)?;
        let (q_rows, s_rows) = if rows { self.dz8()? } else { (0, 0) };
        let (src, row_slot, copy, w) = match gather {
            Some((tokens, copy, w)) => (tokens, dptr(&sv.row_slot, &s), copy, w),
            None => (x, 0, 0, 0),
        };
        let p = megamoe_kernels::params::QuantFp8Cols {
            x: src,
            q,
            scales,
            offsets: dptr(&sv.offsets, &s),
            tile_offsets: dptr(&sv.tile_offsets, &s),
            experts: c.experts as u32,
            cols: cols as u32,
            kp: kp as u32,
            rows_max: (c.max_tokens * c.top_k) as u32,
            block: block as u32,
            top_k: c.top_k as u32,
            row_slot,
            copy,
            q_rows,
            s_rows,
            w,
            src_rows: sv.tokens as u32,
            pad: 0,
        };
        // SAFETY: x (or copy) holds max_tokens k rows of `cols` (the layer's workspace: dys, dz, sh), the tokens
        // sv.tokens rows of `cols` (checked by the callers), row_slot max_tokens k entries; the operand buffers
        // hold max(H, 2I) (A), max(H, I) (B) and 2I (Dz) rows of Kp codes and their scales, dz's row codes
        // max_tokens k rows of 2I (rows only with dz); Kp covers any routing of max_tokens tokens; offsets and tile
        // offsets are the route's.
        unsafe { q::quantize_cols_raw(&g, &p) }
    }

    /// One FP8 weight gradient from the two operands as [`MoeLayer::quantize_cols_fp8`] left them: for each expert
    /// C_e[M, N] (+)= A_e^T B_e, C at `c` ([E, M, N] of W), (M, N) = `mn`. With `combine`, the kernel's idle producer
    /// warps run that combine meanwhile (the `_mv` kernels).
    pub(super) fn wgrad_fp8<W: WgradElem>(
        &mut self,
        a_op: Operand,
        (m, n): (usize, usize),
        c: u64,
        acc: bool,
        sv: &Saved,
        combine: Option<Combine>,
    ) -> Result<()> {
        let e = self.cfg.experts;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let ((a, sa, kp), (b, sb, _)) = (self.operand(a_op)?, self.operand(Operand::B)?);
        let p = megamoe_kernels::params::WgradFp8 {
            map_a: self.maps.get_u8(&g, a, m, kp, 128)?,
            map_b: self.maps.get_u8(&g, b, n, kp, 128)?,
            sa,
            sb,
            tile_offsets: dptr(&sv.tile_offsets, &s),
            c,
            map_c: self.maps.get_wgrad_c::<W>(&g, c, e * m, n)?,
            error: dptr(sv.error.as_ref(), &s),
            experts: e as u32,
            m: m as u32,
            n: n as u32,
            accumulate: acc as u32,
            kblocks: (kp / 128) as u32,
            pad: 0,
            sched: crate::gemm::wgrad_sched_counter(&g)?,
            combine: combine.unwrap_or(Combine::NONE),
        };
        let kernel = if combine.is_some() { W::FP8B_KERNELS.1 } else { W::FP8B_KERNELS.0 };
        let grid = g.sm_count().min((e * (m / 128) * (n / 128)) as u32).max(1);
        // SAFETY: A^T and B^T hold M and N rows of Kp codes (M <= max(H, 2I), N <= max(H, I)), their scales Kp / 128
        // rows; C holds E M N elements (the callers' gradients, checked); K blocks clamped to Kp / 128 on the
        // device; nothing written when the forward's routing failed (nor the combine run). The combine as
        // `combine_rows`: y holds the rows slot_row points at, out T rows.
        unsafe {
            g.launch_counted(
                p.sched,
                kernel,
                crate::runtime::Launch::new(grid, kh::GEMM_THREADS, kh::WGRAD_FP8_SMEM),
                &p,
            )
        }
    }
}

/// GEMM1 + SwiGLU with h quantized in its epilogue (`grouped_gemm_fp8_swiglu_q`, bitwise the two kernels in a
/// row), or (`MEGAMOE_FP8_HQ=pass`) h stored in bf16 and quantized by a pass.
fn gemm1_h_fused() -> bool {
    std::env::var("MEGAMOE_FP8_HQ").map_or(true, |v| v != "pass")
}

/// The fused GEMM1 in 128 x 256 tiles (128-row boxes of W1), or with `MEGAMOE_FP8_TILES=128` in pairs of 128 x 128
/// tiles: the form whose forward also stores z when the state holds z (`_qz`).
pub(super) fn gemm1_wide() -> bool {
    gemm1_h_fused() && plain_kernel() == "grouped_gemm_fp8w"
}

/// The plain FP8 GEMM the layer launches (GEMM2, z's recompute): `grouped_gemm_fp8w` (128 x 256 tiles; GEMM1 +
/// SwiGLU then in the same tiles), or with `MEGAMOE_FP8_TILES=128` (read at each call, for the benchmark's A/B)
/// `grouped_gemm_fp8` (128 x 128; the same bits). The wide tiles made the 30B FP8 forward 1.098x faster
/// (twelfth session, call G).
pub(crate) fn plain_kernel() -> &'static str {
    match std::env::var("MEGAMOE_FP8_TILES") {
        Ok(v) if v == "128" => "grouped_gemm_fp8",
        _ => "grouped_gemm_fp8w",
    }
}

/// Whether the 128 x 256 FP8 GEMMs over x's codes gather them in their producer (the default) or read a copy in
/// expert order made by a pass (`MEGAMOE_FP8_GATHER=pass`, read at each call, for the benchmark's A/B; the same
/// bits).
pub(super) fn producer_gather() -> bool {
    std::env::var("MEGAMOE_FP8_GATHER").map_or(true, |v| v != "pass")
}

/// `p` reading A from the tokens' rows (`x8`: x's codes [T, H], its scales already in `p.sa`) by the routing's
/// `row_slot` (row r is token row_slot\[r\] / top_k): the fields the `_gather` kernels read.
fn tokens_a(p: GroupedGemmFp8, x8: u64, row_slot: u64, top_k: usize) -> GroupedGemmFp8 {
    GroupedGemmFp8 { a_rows: x8, row_slot, top_k: top_k as u32, ..p }
}

/// The parameter block of an FP8 GEMM over the routing of `sv` (a layer of `cfg`, its stream `s`): A's scales
/// `sa`, B's `sb`, C at `c` [max_tokens k, n], (n, K), the tensor maps of A, B and C.
#[allow(clippy::too_many_arguments)]
fn fp8_params(
    cfg: &LayerConfig,
    s: &CudaStream,
    sv: &Saved,
    sa: u64,
    sb: u64,
    c: u64,
    (n, k): (usize, usize),
    maps: [u64; 3],
) -> GroupedGemmFp8 {
    let layout = (dptr(&sv.offsets, s), dptr(&sv.tile_offsets, s), cfg.experts, cfg.max_tokens * cfg.top_k);
    fp8_gemm(layout, (sa, sb, c), (n, k), maps)
}

/// The parameters of an FP8 grouped GEMM over a routing layout (`offsets`, `tile_offsets` of `experts` experts
/// over at most `rows_max` rows, on the device), scales `sa` and `sb`, C at `c`, maps [A, B, C]; the other
/// fields zero.
pub(crate) fn fp8_gemm(
    (offsets, tile_offsets, experts, rows_max): (u64, u64, usize, usize),
    (sa, sb, c): (u64, u64, u64),
    (n, k): (usize, usize),
    maps: [u64; 3],
) -> GroupedGemmFp8 {
    GroupedGemmFp8 {
        map_a: maps[0],
        map_b: maps[1],
        sa,
        sb,
        offsets,
        tile_offsets,
        c,
        error: 0,
        map_c: maps[2],
        c_scales: 0,
        experts: experts as u32,
        n: n as u32,
        k: k as u32,
        rows_max: rows_max as u32,
        ct: 0,
        z: 0,
        map_z: 0,
        a_rows: 0,
        a_copy: 0,
        row_slot: 0,
        w: 0,
        partial: 0,
        sh: 0,
        map_sh: 0,
        kp: 0,
        top_k: 0,
        copy_cols: 0,
        w_len: 0,
    }
}
