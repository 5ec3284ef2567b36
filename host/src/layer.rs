//! The MoE layer on one GPU (EP = 1), forward and backward. Every stage runs on the device and none needs the
//! host to read a count back: grids are sized for the worst case and the kernels read the per-expert offsets on
//! the device.
//!
//! Forward: routing layout, gather of x, grouped GEMM1 with the SwiGLU epilogue, grouped GEMM2 (or both in one
//! persistent launch, [`Forward::Persistent`]), combine. With [`Gather::InProducer`] (the default) GEMM1's
//! producer gathers the rows into shared memory itself; with [`Gather::Overlapped`] GEMM1's idle producer warps
//! copy them into expert order while it runs.
//! Backward: gather of x (and recompute of z, unless saved; overlapped as in the forward), gather of dy, dh =
//! dy W2 with the SwiGLU-backward epilogue (dz, s * h and the dtopk partial sums), dtopk, dx rows = dz W1,
//! combine of dx (by the weight gradients' idle producer warps where [`crate::gemm::dx_combine`] has it, by default
//! I >= 512, unless [`Gather::Pass`]; else a pass), and the K-grouped weight gradients dW2 = dy^T (s h) and
//! dW1 = dz^T x.
//!
//! Invalid expert ids (outside -1..E) cannot be seen by the host without a synchronisation. Each forward
//! call has its own device error word (in its [`Saved`]): `route_count` sets it, `route_scan` then writes
//! all-zero offsets (no gather or grouped GEMM of the call has rows), and the kernels that write outputs
//! (`combine_rows`, `dtopk_reduce`, the weight gradients `grouped_wgrad_f32` / `_bf16` and their `_mv`
//! variants) return at once, in the forward and in every backward of that [`Saved`]: y, dx, dtopk, dW1 and
//! dW2 keep their previous contents. [`MoeLayer::routing_error`] and [`Saved::check`] read the word (they
//! synchronise).
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{self, Combine, DtopkReduce, GroupedGemm, Route};

use crate::error::{Error, Result};
use crate::gemm::{m_grouped_launch, m_tiles_max, wgrad_launch, zero_gemm, WgradElem};
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{CaptureMaps, DeviceTensorMap, Dtype, Swizzle, TiledDesc};

pub(crate) mod fp8;
use fp8::Operand;
pub use fp8::{Fp8Inputs, Fp8Weights};

/// What the forward keeps for the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Save {
    /// Only the inputs; the backward recomputes z.
    InputsOnly,
    /// z = [g | u] as well (bf16, 2I per routed row; the backward recomputes h from it) and, unless
    /// [`Gather::InProducer`], the expert-ordered copy of x the forward made (bf16, H per routed row; the backward's
    /// dW1 reads it instead of gathering x again).
    WithZ,
}

/// Where the forward gathers the rows of x into expert order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gather {
    /// A gather kernel writes the expert-ordered copy of x, then GEMM1 loads it by TMA; the backward's dx is
    /// summed by a combine kernel.
    Pass,
    /// Data movement overlapped with the GEMMs by their idle producer warps: GEMM1's copy the rows of x into the
    /// expert-ordered buffer while it runs (the forward's and the backward's recompute of z; `_mv` kernels: each
    /// m-tile's A is loaded once its rows are counted), so no gather pass of x runs; dW2's and dW1's sum dx over each
    /// token's slots (no combine pass in the backward) where [`crate::gemm::dx_combine`] has it (by default
    /// I >= 512). Bitwise the same results as [`Gather::Pass`]. dy is gathered by the pass (overlapped with the dh
    /// GEMM it measured slower). 1.02-1.04x the forward and 1.016-1.021x the forward + backward of [`Gather::Pass`]
    /// (docs/RESULTS.md, 2026-12-03 eighth session); the default of [`Forward::Persistent`] (which runs GEMM1 on
    /// the gathered copy), the default of both until 2026-12-05h.
    Overlapped,
    /// GEMM1's producer warpgroup copies each row from x itself (`cp.async`), so the forward neither writes nor
    /// reads an expert-ordered copy of x; bitwise the same results. With the epilogue-warps GEMM1 (the default
    /// policy) it runs `grouped_gemm_swiglu_ew7_gather` (the whole producer warpgroup gathering, four epilogue
    /// warps), else the cooperative `grouped_gemm_swiglu_gather`. The backward (z saved) then copies x's rows for
    /// dW1 in dx's idle producer warps while dx runs (the side copy, `grouped_gemm_bt_bf16_cpx`, `_cpx_dyn` under
    /// the run-time tile walk) where [`crate::gemm::side_copy`] has it (by default I >= 768 or H >= 4096), else by
    /// the gather pass before dx (with z recomputed, by the pass before the recompute); dx is summed by dW2's and
    /// dW1's idle warps as with [`Gather::Overlapped`] (where [`crate::gemm::dx_combine`] has it). The default with
    /// [`Forward::Launches`]: at 30B on an H200, alternating in one run, 1.047x the forward and 1.013x the
    /// forward + backward (z saved) of [`Gather::Overlapped`], and no copy of x kept for the backward
    /// (docs/RESULTS.md 2026-12-05h).
    InProducer,
}

impl Gather {
    /// The default gather for the forward `forward`: [`Gather::InProducer`], or [`Gather::Overlapped`] for
    /// [`Forward::Persistent`] (which runs GEMM1 on the gathered copy of x).
    pub fn default_for(forward: Forward) -> Gather {
        match forward {
            Forward::Launches => Gather::InProducer,
            Forward::Persistent => Gather::Overlapped,
        }
    }
}

/// Bound of each wait of the persistent forward (`ffn_fused_fwd`) for an m-tile's h.
const FUSED_TIMEOUT_NS: u64 = 10_000_000_000;
/// Steps of the persistent forward's walk by which GEMM1 runs ahead of GEMM2 (docs/FUSED.md): at 132 blocks
/// and 14 items a step (30B), ~2 waves, so a GEMM2 tile's h is usually stored before its block reaches it.
const FUSED_LAG: u32 = 20;

/// How the forward runs its two expert GEMMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forward {
    /// GEMM1 (+ SwiGLU) and GEMM2 as two launches (the default).
    Launches,
    /// Both in one persistent launch (`ffn_fused_fwd`, docs/FUSED.md step 1): a GEMM2 tile starts as soon as
    /// every GEMM1 tile of its 128 rows has stored h, with no launch boundary between the two GEMMs; bitwise the
    /// same outputs as [`Forward::Launches`]. Not with [`Gather::InProducer`]. A wait that outlasts its bound (10 s; it
    /// cannot with all blocks resident) makes [`Saved::check`] return [`Error::Timeout`].
    Persistent,
}

/// Which GEMMs of [`MoeLayer::backward_fp8`] run in blockwise FP8 (z's recompute always does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Backward {
    /// The rest in bf16 on the bf16 x, W1 and W2 (the straight-through backward).
    Straight,
    /// dx = dz W1 in FP8 (`grouped_gemm_fp8w`): dz quantized per row in 1 x 128 blocks (by a pass), W1 read as
    /// [`Fp8Weights`]' transposed codes (`quantize_fp8_blocks_t`: the forward's blocks and scales, so the same
    /// dequantized W1). dx carries e4m3's error; dtopk and the weight gradients are those of `Straight`, bit for
    /// bit. The default: 1.03x the straight FP8 step at both model shapes (docs/RESULTS.md, fifteenth session).
    Dx,
    /// The weight gradients in FP8 (`grouped_wgrad_fp8b_*`): dW2 = (s dy)^T h and dW1 = dz^T x with s dy and dz
    /// quantized in 1 x 128 blocks along each expert's rows and h and x in 128 x 128 blocks (DeepSeek-V3's recipe
    /// for the backward's activations), transposed per expert. dy's and x's quantization is fused into their
    /// gathers, h's into z's recompute (`grouped_gemm_fp8w_swiglu_zt`: the same z, and h^T's block codes); dz is
    /// quantized by a pass (not yet in the dh epilogue). The weight gradients then carry e4m3's error (~3-6% of each
    /// element against bf16); dx and dtopk are those of `Straight`, bit for bit.
    Wgrad,
    /// Both [`Fp8Backward::Dx`] and [`Fp8Backward::Wgrad`].
    DxWgrad,
}

impl Fp8Backward {
    /// Whether dx runs in FP8.
    pub fn dx(self) -> bool {
        matches!(self, Fp8Backward::Dx | Fp8Backward::DxWgrad)
    }
    /// Whether the weight gradients run in FP8.
    pub fn wgrad(self) -> bool {
        matches!(self, Fp8Backward::Wgrad | Fp8Backward::DxWgrad)
    }
}

/// Which x the bf16 weight gradient dW1 = dz^T x of [`MoeLayer::backward_fp8`] reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Dw1X {
    /// The bf16 tokens the call passes (the straight-through gradient). The default.
    Bf16,
    /// The tokens' 1 x 128 row codes, as the FP8 forward's GEMM1 consumed them, dequantized to bf16 (each value
    /// decode(code) * scale rounded once): dW1 of the product the forward computed, W1's quantizer taken as the
    /// identity (DeepSeek-V3 also keeps its activations in FP8 for the weight gradients). What the FP8 backward at
    /// expert parallelism computes ([`crate::ep::EpLayer::backward_fp8`]: an expert's owner holds the tokens only as
    /// the codes the forward sent), so this mode is its single-GPU twin, bit for bit. Not with FP8 weight
    /// gradients ([`Fp8Backward::Wgrad`], [`Fp8Backward::DxWgrad`]: their x is quantized from the bf16 tokens).
    Codes,
}

/// Which dy [`MoeLayer::backward_fp8`] differentiates with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Dy {
    /// The bf16 dy the call passes. The default.
    Bf16,
    /// dy quantized per token in 1 x 128 blocks and dequantized to bf16 (decode(code) * scale, one rounding) before
    /// the backward uses it: every gradient then carries e4m3's error on dy (DeepSeek-V3 also quantizes its output
    /// gradients). What the FP8 backward at expert parallelism does when dy travels to the experts' owners as codes
    /// ([`crate::ep::EpLayer::backward_fp8`]: H (1 + 1/32) bytes a routed row instead of 2H), bit for bit.
    Codes,
}

/// Which precision the dh GEMM (dh = dy W2 with the SwiGLU backward in its epilogue) of
/// [`MoeLayer::backward_fp8`] runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fp8Dh {
    /// bf16 (the default).
    Bf16,
    /// Blockwise FP8 (`grouped_gemm_fp8w_dswiglu`): dy's row codes (1 x 128, quantized per token) against W2's
    /// transposed codes ([`Fp8Weights`]' `w2t`, W2's 128 x 128 blocks), the SwiGLU backward from the f32
    /// accumulators (dz, s h and the dtopk partials as the bf16 kernels compute them). dz, dtopk and everything after
    /// them carry e4m3's error on dy and W2; dW2 = (s dy)^T h still reads the bf16 dy (or its dequantized codes with
    /// [`Fp8Dy::Codes`]). Not with FP8 weight gradients.
    Fp8,
}

/// Element type of the layer's activations and weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
    /// bf16 operands, f32 accumulation; f32 dtopk; f32 or bf16 weight gradients ([`Grads`]).
    Bf16,
}

/// Layer configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerConfig {
    /// Element type (bf16 today; blockwise FP8 later).
    pub dtype: DType,
    /// Hidden size H (a multiple of 64).
    pub hidden: usize,
    /// Expert intermediate size I (a multiple of 64).
    pub intermediate: usize,
    /// Experts E.
    pub experts: usize,
    /// Slots per token (top-k), 1..=E.
    pub top_k: usize,
    /// Most tokens one call may take (sizes the workspace).
    pub max_tokens: usize,
    /// What the forward keeps.
    pub save: Save,
    /// Where the forward gathers x ([`Gather::default_for`] the forward, from [`LayerConfig::bf16`]).
    pub gather: Gather,
    /// How the forward runs its GEMMs ([`Forward::Launches`] from [`LayerConfig::bf16`]).
    pub forward: Forward,
    /// Which GEMMs of [`MoeLayer::backward_fp8`] run in FP8 ([`Fp8Backward::Dx`] from [`LayerConfig::bf16`]: 1.03x the
    /// straight-through backward at both model shapes; [`Fp8Weights::alloc`] then also holds
    /// W1's transposed codes).
    pub fp8_backward: Fp8Backward,
    /// Which x the bf16 dW1 of [`MoeLayer::backward_fp8`] reads ([`Fp8Dw1X::Bf16`] from [`LayerConfig::bf16`]).
    pub fp8_dw1_x: Fp8Dw1X,
    /// Which dy [`MoeLayer::backward_fp8`] uses ([`Fp8Dy::Bf16`] from [`LayerConfig::bf16`]).
    pub fp8_dy: Fp8Dy,
    /// The precision of [`MoeLayer::backward_fp8`]'s dh GEMM ([`Fp8Dh::Bf16`] from [`LayerConfig::bf16`];
    /// [`Fp8Weights::alloc`] holds W2's transposed codes for [`Fp8Dh::Fp8`]).
    pub fp8_dh: Fp8Dh,
}

/// The names `MEGAMOE_GATHER` accepts.
const GATHER_NAMES: &[(&str, Gather)] =
    &[("pass", Gather::Pass), ("overlapped", Gather::Overlapped), ("in-producer", Gather::InProducer)];
/// The names `MEGAMOE_FORWARD` accepts.
const FORWARD_NAMES: &[(&str, Forward)] = &[("launches", Forward::Launches), ("persistent", Forward::Persistent)];
/// The names `MEGAMOE_FP8_BACKWARD` accepts.
const FP8_BACKWARD_NAMES: &[(&str, Fp8Backward)] = &[
    ("straight", Fp8Backward::Straight),
    ("dx", Fp8Backward::Dx),
    ("wgrad", Fp8Backward::Wgrad),
    ("dx-wgrad", Fp8Backward::DxWgrad),
];

/// `default`, or the value named by the environment variable `var` (A/B runs of whole test binaries and
/// benchmarks with another default). An unknown name gives the default here and an error from
/// [`LayerConfig::validate`] ([`env_problem`]), so the layer is never built on it.
fn env_choice<T: Copy>(var: &str, default: T, names: &[(&str, T)]) -> T {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => names.iter().find(|(n, _)| *n == v).map_or(default, |&(_, t)| t),
        _ => default,
    }
}

/// The problem with the environment variable `var`, if it is set to a name not in `names`.
fn env_problem<T>(var: &str, names: &[(&str, T)]) -> Option<String> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() && !names.iter().any(|(n, _)| *n == v) => {
            Some(format!("{var}={v}: expected one of {:?}", names.iter().map(|(n, _)| *n).collect::<Vec<_>>()))
        }
        _ => None,
    }
}

impl LayerConfig {
    /// A bf16 layer. `gather`, `forward` and `fp8_backward` take their defaults ([`Gather::default_for`] the
    /// forward: [`Gather::InProducer`] with [`Forward::Launches`]; [`Fp8Backward::Dx`]) unless `MEGAMOE_GATHER` (pass, overlapped, in-producer),
    /// `MEGAMOE_FORWARD` (launches, persistent) or `MEGAMOE_FP8_BACKWARD` (straight, dx, wgrad, dx-wgrad) name others;
    /// a name not in those lists makes [`LayerConfig::validate`] (and so [`MoeLayer::new`]) fail, saying so.
    pub fn bf16(
        hidden: usize,
        intermediate: usize,
        experts: usize,
        top_k: usize,
        max_tokens: usize,
        save: Save,
    ) -> Self {
        let forward = env_choice("MEGAMOE_FORWARD", Forward::Launches, FORWARD_NAMES);
        LayerConfig {
            dtype: DType::Bf16,
            hidden,
            intermediate,
            experts,
            top_k,
            max_tokens,
            save,
            gather: env_choice("MEGAMOE_GATHER", Gather::default_for(forward), GATHER_NAMES),
            forward,
            fp8_backward: env_choice("MEGAMOE_FP8_BACKWARD", Fp8Backward::Dx, FP8_BACKWARD_NAMES),
            fp8_dw1_x: Fp8Dw1X::Bf16,
            fp8_dy: Fp8Dy::Bf16,
            fp8_dh: Fp8Dh::Bf16,
        }
    }

    /// Device bytes of the workspace [`MoeLayer::new`] allocates for this configuration: max_tokens x k rows of x,
    /// y and dy in expert order (H columns each), h and s h (I), z and dz (2I), all bf16, and the SwiGLU backward's
    /// partial sums and the counters (~2.8 GB at Qwen3-30B-A3B with 16384 tokens). FP8 calls add their buffers at
    /// first use; each call's [`Saved`] is apart (its routing, ~8 bytes a routed row, and z with [`Save::WithZ`]).
    /// One layer serves every MoE layer of a model with this configuration ([`MoeLayer`]), so this is paid once.
    pub fn workspace_bytes(&self) -> Result<usize> {
        self.validate()?;
        Ok(WorkSizes::of(self).bytes())
    }

    /// Check the configuration; a message naming the first problem.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        // the environment's policy names (read by `bf16`, which cannot fail): one not known fails here
        let env = [
            env_problem("MEGAMOE_GATHER", GATHER_NAMES),
            env_problem("MEGAMOE_FORWARD", FORWARD_NAMES),
            env_problem("MEGAMOE_FP8_BACKWARD", FP8_BACKWARD_NAMES),
        ];
        if let Some(e) = env.into_iter().flatten().next() {
            return bad(e);
        }
        if self.hidden == 0 || self.hidden % 64 != 0 {
            return bad(format!("hidden size {} is not a positive multiple of 64", self.hidden));
        }
        if self.intermediate == 0 || self.intermediate % 64 != 0 {
            return bad(format!("intermediate size {} is not a positive multiple of 64", self.intermediate));
        }
        if self.experts == 0 || self.experts > crate::route::MAX_EXPERTS {
            return bad(format!("{} experts (1..={} supported)", self.experts, crate::route::MAX_EXPERTS));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return bad(format!("top-k {} outside 1..={} (the expert count)", self.top_k, self.experts));
        }
        // checked: a product that wraps would size the workspace for a few rows and pass (release builds)
        let width = self.intermediate.checked_mul(2).map(|w| w.max(self.hidden));
        let slots = self.max_tokens.checked_mul(self.top_k);
        // every kernel's offset into the routed rows is an unsigned 32-bit element count, widened before its
        // pointer add (docs/wip/offsets-2g.md): below 2^32 elements (the rows, TMA's i32 coordinates, far below 2^31)
        let fits = matches!((width, slots), (Some(w), Some(s)) if w < 1 << 31 && s < (1 << 32) / w);
        if self.max_tokens == 0 || !fits {
            return bad(format!(
                "max_tokens {} (x top-k {}, x max(H, 2I)) is zero or too large for 32-bit element offsets",
                self.max_tokens, self.top_k
            ));
        }
        // the weights' element counts (checked once here, used unchecked by every call's length checks)
        let weights = self.experts.checked_mul(2 * self.intermediate).and_then(|n| n.checked_mul(self.hidden));
        if weights.is_none() {
            return bad(format!(
                "{} experts of 2I x H = {} x {} weights overflow the address space",
                self.experts,
                2 * self.intermediate,
                self.hidden
            ));
        }
        if self.forward == Forward::Persistent && self.gather == Gather::InProducer {
            return bad("Forward::Persistent runs GEMM1 on the gathered copy of x: not with Gather::InProducer".into());
        }
        if self.fp8_dh == Fp8Dh::Fp8 && self.fp8_backward.wgrad() {
            return bad(format!("Fp8Dh::Fp8 is not with FP8 weight gradients ({:?})", self.fp8_backward));
        }
        if self.fp8_dh == Fp8Dh::Fp8 && self.intermediate % 256 != 0 {
            return bad(format!("Fp8Dh::Fp8 needs I a multiple of 256 (I = {})", self.intermediate));
        }
        if self.fp8_dw1_x == Fp8Dw1X::Codes && self.fp8_backward.wgrad() {
            return bad(format!(
                "Fp8Dw1X::Codes (dW1 from x's row codes, in bf16) is not with FP8 weight gradients ({:?})",
                self.fp8_backward
            ));
        }
        Ok(())
    }
}

/// What the forward leaves for the backward: the routing layout of the call, its routing error word, and z
/// (and the expert-ordered x) in `Save::WithZ`.
pub struct Saved {
    /// The layer whose [`MoeLayer::alloc_saved`] made it ([`MoeLayer`]'s `id`): a backward or forward of another
    /// layer refuses it (its buffers are sized and its layout made for this one).
    layer: u64,
    /// Whether its last forward ran to the end: false from the routing of a forward that then returned an error
    /// (its layout may be new and its z not), and before the first forward; a backward refuses it then.
    complete: bool,
    tokens: usize,
    experts: usize,
    /// u32 [1]: set on the device when the call's topk_ids hold an id outside -1..E (one word per call, shared
    /// with the layer so that [`MoeLayer::routing_error`] reads the last call's).
    error: Arc<CudaSlice<u32>>,
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    tile_offsets: CudaSlice<u32>,
    row_slot: CudaSlice<u32>,
    slot_row: CudaSlice<i32>,
    z: Option<CudaSlice<bf16>>,
    /// z is the caller's buffer, lent with [`Saved::swap_z`] (route_into then takes a layer that keeps z).
    z_lent: bool,
    /// The expert-ordered rows of x (bf16 [slots, H]), `Save::WithZ` unless `Gather::InProducer`.
    xs: Option<CudaSlice<bf16>>,
    /// Written by [`MoeLayer::forward_fp8`]: only [`MoeLayer::backward_fp8`] takes it (its xs, if any, is not that
    /// forward's; its z is only if `z_fp8`).
    fp8: bool,
    /// z written by this call's [`MoeLayer::forward_fp8`] (`Save::WithZ` and the 128 x 256 FP8 kernels:
    /// `grouped_gemm_fp8w_swiglu_qz`), bitwise the z its backward would recompute: [`MoeLayer::backward_fp8`]
    /// reads it instead (without FP8 weight gradients, whose recompute also makes dW2's operand).
    z_fp8: bool,
}

impl Saved {
    /// Tokens of the forward call.
    pub fn tokens(&self) -> usize {
        self.tokens
    }
    /// Puts `z` in place of the state's z buffer and returns the one it held (`None` takes it out). `z`: the
    /// caller's bf16 buffer of at least tokens x top-k rows of 2I (its row order is the routing's, internal), on
    /// the layer's device, lent for the calls that follow (the C ABI lends a caller's buffer for one call and
    /// takes it out again before returning). The state is incomplete after a swap: a forward into it (which
    /// writes z there), or [`MoeLayer::route_into`] with the z a forward on the same inputs wrote, makes it
    /// whole again.
    pub fn swap_z(&mut self, z: Option<CudaSlice<bf16>>) -> Option<CudaSlice<bf16>> {
        self.complete = false;
        self.z_lent = z.is_some();
        std::mem::replace(&mut self.z, z)
    }

    /// Device bytes held.
    pub fn bytes(&self) -> usize {
        let words =
            self.row_slot.len() + self.slot_row.len() + self.counts.len() + 2 * self.offsets.len() + self.error.len();
        4 * words + 2 * self.z.as_ref().map_or(0, |z| z.len()) + 2 * self.xs.as_ref().map_or(0, |x| x.len())
    }
}

/// Gradients the backward writes (or adds to, for the weights, with `accumulate`). The weight gradients are f32
/// (the default `W`: accumulation over micro-batches in full precision) or bf16 (`W = bf16`: the type of the
/// weights, as PyTorch's autograd gives them; half the bytes written, the weight-gradient GEMMs faster; with
/// `accumulate`, each call's sum is rounded to bf16 and added in bf16).
pub struct Grads<'a, W: WgradElem = f32> {
    /// bf16 [T, H].
    pub dx: &'a mut CudaSlice<bf16>,
    /// [E, 2I, H].
    pub dw1: &'a mut CudaSlice<W>,
    /// [E, H, I].
    pub dw2: &'a mut CudaSlice<W>,
    /// f32 [T, k].
    pub dtopk: &'a mut CudaSlice<f32>,
    /// Add into dw1 and dw2 (gradient accumulation over micro-batches) instead of overwriting them.
    pub accumulate: bool,
}

/// The inputs of a layer call (device buffers on the layer's GPU).
pub struct Inputs<'a> {
    /// Tokens T.
    pub tokens: usize,
    /// bf16 [T, H].
    pub x: &'a CudaSlice<bf16>,
    /// i32 [T, k], expert ids, -1 = masked.
    pub topk_ids: &'a CudaSlice<i32>,
    /// f32 [T, k].
    pub topk_weights: &'a CudaSlice<f32>,
    /// bf16 [E, 2I, H] (gate rows, then up rows).
    pub w1: &'a CudaSlice<bf16>,
    /// bf16 [E, H, I].
    pub w2: &'a CudaSlice<bf16>,
}

/// Where GEMM1 reads its A rows.
#[derive(Clone, Copy)]
enum Gemm1A {
    /// The expert-ordered copy of x: (address, rows the buffer holds), loaded by TMA.
    Rows(u64, usize),
    /// The tokens x themselves (bf16 [T, H]), gathered row by row by the kernel's producer.
    Tokens(u64),
}

/// Elements of the workspace's buffers for a configuration: what [`MoeLayer::new`] allocates and
/// [`LayerConfig::workspace_bytes`] counts.
struct WorkSizes {
    /// bf16 [max_tokens k, H] each: xs, ys, dys.
    rows_h: usize,
    /// bf16 [max_tokens k, I] each: h, s h.
    rows_i: usize,
    /// bf16 [max_tokens k, 2I] each: z, dz.
    rows_2i: usize,
    /// f32: the SwiGLU backward's partial sums of dtopk.
    partial: usize,
    /// u32: the routing's per-chunk counts.
    route_chunks: usize,
    /// u32 each: `ready`, `arrive`.
    m_tiles: usize,
}

impl WorkSizes {
    /// The sizes for `c` (validated: its element counts stay below 2^32).
    fn of(c: &LayerConfig) -> Self {
        let slots = c.max_tokens * c.top_k;
        WorkSizes {
            rows_h: slots * c.hidden,
            rows_i: slots * c.intermediate,
            rows_2i: slots * 2 * c.intermediate,
            // room for either SwiGLU-backward kernel's partial sums (the launch picks one by the policy of its thread)
            partial: slots * crate::gemm::dswiglu_partials_max(c.intermediate),
            route_chunks: crate::route::workspace_words(slots, c.experts),
            m_tiles: m_tiles_max(slots, c.experts),
        }
    }

    /// Device bytes: six bf16 buffers of routed rows, the f32 partial sums, the u32 counters and the barrier word.
    fn bytes(&self) -> usize {
        2 * (3 * self.rows_h + 2 * self.rows_i + 2 * self.rows_2i)
            + 4 * (self.partial + self.route_chunks + 1)
            + 4 * 2 * self.m_tiles
    }
}

/// Device workspace of one layer instance (sized for max_tokens).
struct Work {
    xs: CudaSlice<bf16>,
    h: CudaSlice<bf16>,
    z: CudaSlice<bf16>,
    ys: CudaSlice<bf16>,
    dys: CudaSlice<bf16>,
    sh: CudaSlice<bf16>,
    dz: CudaSlice<bf16>,
    partial: CudaSlice<f32>,
    /// u32 [`crate::route::workspace_words`]: the routing's per-chunk counts (used within one forward).
    route_chunks: CudaSlice<u32>,
    /// u32 \[1\]: `route_fused`'s grid-barrier word (zeroed once; each routing leaves it ready).
    route_barrier: CudaSlice<u32>,
    /// u32 [m-tiles at most]: `ffn_fused_fwd`'s per-m-tile counts of stored h (zeroed before each launch).
    ready: CudaSlice<u32>,
    /// u32 [m-tiles at most]: the overlapped gather's per-m-tile counts of copied rows (zeroed before each launch).
    arrive: CudaSlice<u32>,
}

/// Tensor maps by (address, rows, cols, box rows, box cols), encoded once per buffer and box.
pub(crate) struct MapCache {
    maps: HashMap<(TiledDescKind, u64, u64, u64, u32, u32), CachedMap>,
    /// Set by the first lookup during a CUDA graph capture: the cache is never cleared after it.
    pinned: bool,
    /// Slots for the maps of buffers first seen during a capture.
    capture: CaptureMaps,
}

/// A cached map: its own device buffer (uploaded outside a capture), or a slot of [`CaptureMaps`] (made during a
/// capture) with whether a copy of it has run outside a capture (until then the device slot is written only by
/// the replays of the graph that recorded its copy, so every other use queues the copy again).
enum CachedMap {
    Own(DeviceTensorMap),
    Slot { slot: usize, eager: bool },
}

/// Which kind of map a cache entry is.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum TiledDescKind {
    /// bf16 operand, 128-byte swizzle.
    Operand,
    /// f32 weight-gradient output (`gemm::wgrad_c_desc`).
    WgradC,
    /// bf16 weight-gradient output.
    WgradCBf16,
    /// e4m3 operand (bytes), 128-byte swizzle.
    Fp8Operand,
}

impl MapCache {
    /// An empty cache with its capture slots, allocated on `g` (not during a capture).
    pub(crate) fn new(g: &Gpu) -> Result<Self> {
        Ok(MapCache { maps: HashMap::new(), pinned: false, capture: CaptureMaps::new(g)? })
    }

    /// At the start of a call, before its first lookup: forget the maps of old calls once there are many (the
    /// buffers of calls long gone; the kernels that used them are ordered before any reuse of their memory),
    /// never once a capture pinned them, and never during a capture (which pins them: the call's maps must be the
    /// ones its eager run encoded, however many the cache held). Never inside a call: a map fetched earlier in it
    /// would be freed, and its address reused by the next map, before the launch that reads it.
    pub(crate) fn trim(&mut self, g: &Gpu) -> Result<()> {
        self.pinned |= g.capturing()?;
        if self.maps.len() > 256 && !self.pinned {
            self.maps.clear();
        }
        Ok(())
    }

    pub(crate) fn get(
        &mut self,
        g: &Gpu,
        addr: u64,
        rows: usize,
        cols: usize,
        box_rows: u32,
        box_cols: u32,
    ) -> Result<u64> {
        let d = TiledDesc::row_major_2d(Dtype::Bf16, addr, rows as u64, cols as u64, box_rows, box_cols, Swizzle::B128);
        self.cached(g, TiledDescKind::Operand, d)
    }

    /// The map of an e4m3 operand [rows, cols] (bytes) in boxes of `box_rows` x 128, 128-byte swizzle.
    pub(crate) fn get_u8(&mut self, g: &Gpu, addr: u64, rows: usize, cols: usize, box_rows: u32) -> Result<u64> {
        let d = TiledDesc::row_major_2d(Dtype::U8, addr, rows as u64, cols as u64, box_rows, 128, Swizzle::B128);
        self.cached(g, TiledDescKind::Fp8Operand, d)
    }

    /// The map of a weight gradient's output C [rows, cols] (the stores of `W::KERNEL`).
    pub(crate) fn get_wgrad_c<W: WgradElem>(&mut self, g: &Gpu, addr: u64, rows: usize, cols: usize) -> Result<u64> {
        let kind = if W::DTYPE == Dtype::F32 { TiledDescKind::WgradC } else { TiledDescKind::WgradCBf16 };
        self.cached(g, kind, crate::gemm::wgrad_c_desc::<W>(addr, rows, cols))
    }

    fn cached(&mut self, g: &Gpu, kind: TiledDescKind, d: TiledDesc) -> Result<u64> {
        let key = (kind, d.addr, d.dims[1], d.dims[0], d.box_dims[1], d.box_dims[0]);
        // a captured graph keeps the addresses of the maps it launched with: from the first capture on, no
        // map is ever freed
        let capturing = g.capturing()?;
        self.pinned |= capturing;
        let map = match self.maps.entry(key) {
            Entry::Occupied(e) => e.into_mut(),
            // a buffer new during a capture: its map goes into a capture slot by a copy the graph records
            Entry::Vacant(e) if capturing => e.insert(CachedMap::Slot { slot: self.capture.put(g, &d)?, eager: false }),
            Entry::Vacant(e) => e.insert(CachedMap::Own(DeviceTensorMap::new(g, d)?)),
        };
        Ok(match map {
            CachedMap::Own(m) => m.ptr(g),
            CachedMap::Slot { slot, eager } => {
                // a slot's copy recorded by another capture has not run: queue it here too (outside a capture it
                // runs now, and the slot holds the map from then on)
                if !*eager {
                    self.capture.copy(g, *slot)?;
                    *eager = !capturing;
                }
                self.capture.addr(g, *slot)
            }
        })
    }
}

/// The MoE layer on one GPU. One instance serves every MoE layer of a model that has its configuration: the
/// weights are inputs, each forward's [`Saved`] holds what its backward needs, and the workspace is scratch between
/// calls, so forwards and backwards of different model layers may interleave in any order on the device's stream.
pub struct MoeLayer {
    gpu: Arc<Gpu>,
    cfg: LayerConfig,
    work: Work,
    maps: MapCache,
    /// The routing error word of the last forward (None before the first).
    last_error: Option<Arc<CudaSlice<u32>>>,
    /// Error words replaced during a capture, freed by the next call outside one.
    kept: Vec<Arc<CudaSlice<u32>>>,
    /// The FP8 forward's buffers, allocated by its first call.
    fp8: Option<fp8::Fp8Work>,
    /// Unique in the process: the [`Saved`] states it makes carry it.
    id: u64,
}

/// The next [`MoeLayer`]'s id.
static LAYER_IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

impl MoeLayer {
    /// Validate `cfg` and allocate the workspace for `cfg.max_tokens` tokens.
    pub fn new(gpu: Arc<Gpu>, cfg: LayerConfig) -> Result<Self> {
        cfg.validate()?;
        let n = WorkSizes::of(&cfg);
        let work = Work {
            xs: gpu.alloc(n.rows_h)?,
            h: gpu.alloc(n.rows_i)?,
            z: gpu.alloc(n.rows_2i)?,
            ys: gpu.alloc(n.rows_h)?,
            dys: gpu.alloc(n.rows_h)?,
            sh: gpu.alloc(n.rows_i)?,
            dz: gpu.alloc(n.rows_2i)?,
            partial: gpu.alloc(n.partial)?,
            route_chunks: gpu.alloc(n.route_chunks)?,
            route_barrier: {
                let mut b = gpu.alloc::<u32>(1)?;
                gpu.fill_bytes(&mut b, 0)?;
                b
            },
            ready: gpu.alloc(n.m_tiles)?,
            arrive: gpu.alloc(n.m_tiles)?,
        };
        let id = LAYER_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let maps = MapCache::new(&gpu)?;
        Ok(MoeLayer { gpu, cfg, work, maps, last_error: None, kept: Vec::new(), fp8: None, id })
    }

    /// The configuration.
    pub fn config(&self) -> &LayerConfig {
        &self.cfg
    }

    /// Device bytes of the workspace this layer holds (without the FP8 calls' buffers), as
    /// [`LayerConfig::workspace_bytes`] counts them.
    pub fn workspace_bytes(&self) -> usize {
        let w = &self.work;
        let bf16s = [&w.xs, &w.h, &w.z, &w.ys, &w.dys, &w.sh, &w.dz].iter().map(|b| b.len()).sum::<usize>();
        let words = [&w.route_chunks, &w.route_barrier, &w.ready, &w.arrive].iter().map(|b| b.len()).sum::<usize>();
        2 * bf16s + 4 * (w.partial.len() + words)
    }

    /// The inputs' lengths and devices, and those of `out` (name, length, device: the forward's out or the
    /// backward's dy).
    fn check_inputs(&self, inp: &Inputs<'_>, out: (&str, usize, usize)) -> Result<()> {
        let c = &self.cfg;
        let bad = |s: String| Err(Error::InvalidArgument(s));
        let t = inp.tokens;
        if t > c.max_tokens {
            return bad(format!("{t} tokens > the configured maximum {}", c.max_tokens));
        }
        self.check_buffers(&[
            ("x", inp.x.len(), t * c.hidden, inp.x.ordinal()),
            ("topk_ids", inp.topk_ids.len(), t * c.top_k, inp.topk_ids.ordinal()),
            ("topk_weights", inp.topk_weights.len(), t * c.top_k, inp.topk_weights.ordinal()),
            ("W1", inp.w1.len(), c.experts * 2 * c.intermediate * c.hidden, inp.w1.ordinal()),
            ("W2", inp.w2.len(), c.experts * c.hidden * c.intermediate, inp.w2.ordinal()),
            (out.0, out.1, t * c.hidden, out.2),
        ])
    }

    /// Each buffer (name, elements, elements the layer needs, device) of the right length, then each on the
    /// layer's device: an `InvalidArgument` naming the first that is not.
    fn check_buffers(&self, bufs: &[(&str, usize, usize, usize)]) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if let Some((name, got, need, _)) = bufs.iter().find(|b| b.1 != b.2) {
            return bad(format!("{name} has {got} elements, the layer needs {need}"));
        }
        let me = self.gpu.ordinal();
        if let Some((name, _, _, o)) = bufs.iter().find(|b| b.3 != me) {
            return bad(format!("{name} lives on device {o}, the layer on device {me}"));
        }
        Ok(())
    }

    /// Rows of x (H bf16 each) into expert order: row r of `dst` = row row_slot[r] / k of `src`.
    fn gather(&self, src: u64, dst: u64, sv: &Saved) -> Result<()> {
        self.gather_bytes(src, dst, 2 * self.cfg.hidden, sv)
    }

    /// [`MoeLayer::gather`] of rows of `bytes` bytes (a multiple of 16: the kernel counts 2-byte units and copies
    /// 16 bytes at a time), e.g. the FP8 forward's codes and scales.
    fn gather_bytes(&self, src: u64, dst: u64, bytes: usize, sv: &Saved) -> Result<()> {
        let g = &self.gpu;
        let s = g.stream();
        let p = params::Gather {
            src,
            dst,
            row_slot: dptr(&sv.row_slot, s),
            offsets: dptr(&sv.offsets, s),
            cols: (bytes / 2) as u32,
            k: self.cfg.top_k as u32,
            experts: self.cfg.experts as u32,
            pad: 0,
        };
        let slots = (sv.tokens * self.cfg.top_k) as u32;
        let rpb = megamoe_kernels::scheduler::gather_rows_per_block(p.cols / 8, 128);
        // SAFETY: rows < offsets[E] <= slots (the blocks cover slots rows, rpb a block); src holds T rows, dst
        // slots rows of `bytes`.
        unsafe { g.launch("gather_rows", Launch::new(slots.div_ceil(rpb), 128, 0), &p) }
    }

    /// The overlapped gather ([`Gather::Overlapped`]) of `p`'s A: its producer warpgroup's idle warps copy the
    /// rows of `src` (bf16 [T, K], row r of A is token row_slot[r] / k) into `dst` (the rows `map_a` covers)
    /// while the GEMM runs; the per-m-tile counters are zeroed first (on the stream).
    fn overlap(&mut self, p: &mut GroupedGemm, src: u64, dst: u64, sv: &Saved) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream();
        g.fill_bytes(&mut self.work.arrive, 0)?;
        p.a_rows = src;
        p.a_copy = dst;
        p.row_slot = dptr(&sv.row_slot, s);
        p.top_k = self.cfg.top_k as u32;
        p.arrive = dptr(&self.work.arrive, s);
        p.error = dptr(sv.error.as_ref(), s);
        p.timeout_ns = FUSED_TIMEOUT_NS;
        Ok(())
    }

    /// One M-grouped GEMM launch over the saved routing (the `_mv` variant of `kernel` when `p` has an
    /// overlapped gather).
    fn mgemm(&self, kernel: &'static str, mut p: GroupedGemm, sv: &Saved) -> Result<()> {
        let s = self.gpu.stream();
        p.offsets = dptr(&sv.offsets, s);
        p.tile_offsets = dptr(&sv.tile_offsets, s);
        p.experts = self.cfg.experts as u32;
        // the call's slots: every expert-ordered buffer holds at least these rows (tiles are clamped to them)
        p.rows_max = (sv.tokens * self.cfg.top_k) as u32;
        let kernel = crate::gemm::kernel_for(&self.gpu, kernel, &p)?;
        let kernel = movers_variant(kernel, p.a_copy != 0, p.copy_cols != 0)?;
        // a gathering producer (A from the tokens, no movers): its tile hand-off by the policy
        if p.a_rows != 0 && p.a_copy == 0 && crate::gemm::gather_ahead()? {
            p.flags |= params::GEMM_GATHER_AHEAD;
        }
        let kernel = crate::gemm::sched_variant(&self.gpu, kernel, &mut p)?;
        let launch = m_grouped_launch(&self.gpu, kernel, sv.tokens * self.cfg.top_k, self.cfg.experts, p.n_tiles)?;
        // SAFETY: A and C hold slots rows (`rows_max`: the kernels clamp every tile's rows to it), B the experts'
        // weights; `arrive` holds m_tiles_max(slots) entries, at least the m-tiles the kernels walk; a `_dyn`
        // kernel's counter (`p.sched`) is zeroed first.
        unsafe { self.gpu.launch_counted(p.sched, kernel, launch, &p) }
    }

    /// Where the expert-ordered rows of x go (address, rows the buffer holds): the call's [`Saved`] when it
    /// keeps them, else the workspace.
    fn xs_of(&self, sv: &Saved) -> (u64, usize) {
        let s = self.gpu.stream();
        match &sv.xs {
            // the buffer's rows (a Saved reused by forward_into may hold more than this call's): one tensor map
            // per buffer whatever the call's token count (the kernels bound rows by the device offsets)
            Some(xs) => (dptr(xs, s), xs.len() / self.cfg.hidden),
            None => (dptr(&self.work.xs, s), self.cfg.max_tokens * self.cfg.top_k),
        }
    }

    /// GEMM1 (+ SwiGLU) with A either the expert-ordered rows or gathered from the tokens by the kernel's
    /// producer (no gathered copy).
    fn gemm1_from(&mut self, sv: &Saved, x: Gemm1A, w1: &CudaSlice<bf16>, h: u64, z: u64) -> Result<()> {
        let (kernel, p) = self.gemm1_params(sv, x, w1, h, z)?;
        self.mgemm(kernel, p, sv)
    }

    /// GEMM1's kernel and parameter block (the routing's offsets are filled in at launch).
    fn gemm1_params(
        &mut self,
        sv: &Saved,
        x: Gemm1A,
        w1: &CudaSlice<bf16>,
        h: u64,
        z: u64,
    ) -> Result<(&'static str, GroupedGemm)> {
        let c = self.cfg;
        let slots = c.max_tokens * c.top_k;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (map_a, a_rows, kernel) = match x {
            Gemm1A::Rows(xs, rows) => {
                (self.maps.get(&g, xs, rows, c.hidden, kh::GEMM_BM, 64)?, 0, "grouped_gemm_swiglu")
            }
            Gemm1A::Tokens(x) => (0, x, "grouped_gemm_swiglu_gather"),
        };
        // h columns of a tile, the rows of W1's box (gate rows, then up rows): the policy's (`gemm::swiglu_columns`:
        // 96 for the epilogue-warps kernels, with A by TMA or gathered by the producer, 128 for the cooperative ones)
        let cols = crate::gemm::swiglu_columns();
        let map_b = self.maps.get(&g, dptr(w1, &s), c.experts * 2 * c.intermediate, c.hidden, cols as u32, 64)?;
        // whole 64-row groups of an expert leave through the copy engine: h [slots, I] and z [slots, 2I]
        let (bx, by) = kh::GEMM_C_BOX;
        let map_c = if h != 0 { self.maps.get(&g, h, slots, c.intermediate, bx, by)? } else { 0 };
        // z: the workspace's or the call's Saved one, which holds the call's rows only
        let map_z = if z != 0 { self.maps.get(&g, z, sv.tokens * c.top_k, 2 * c.intermediate, bx, by)? } else { 0 };
        let p = GroupedGemm {
            map_a,
            map_b,
            c: h,
            z,
            map_c,
            map_z,
            n: c.intermediate as u32,
            k: c.hidden as u32,
            n_b: 2 * c.intermediate as u32,
            ldc: c.intermediate as u32,
            n_tiles: c.intermediate.div_ceil(cols) as u32,
            row_slot: dptr(&sv.row_slot, &s),
            a_rows,
            top_k: c.top_k as u32,
            ..zero_gemm()
        };
        Ok((kernel, p))
    }

    /// GEMM1 (+ SwiGLU) and GEMM2 in one persistent launch (`ffn_fused_fwd`, [`Forward::Persistent`]); `g1`, `g2`
    /// as the two launches would take them. The per-m-tile counters are zeroed first (on the stream).
    fn fused_gemms(&mut self, mut g1: GroupedGemm, mut g2: GroupedGemm, sv: &Saved) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream();
        for p in [&mut g1, &mut g2] {
            p.offsets = dptr(&sv.offsets, s);
            p.tile_offsets = dptr(&sv.tile_offsets, s);
            p.experts = self.cfg.experts as u32;
            p.rows_max = (sv.tokens * self.cfg.top_k) as u32;
        }
        // the engine's checks of each GEMM's tile configuration (column tiles against the kernel's; GEMM1 is the
        // cooperative kernel's, as the forward built it)
        crate::gemm::with_swiglu_epilogue_warps(false, || crate::gemm::kernel_for(&g, "grouped_gemm_swiglu", &g1))?;
        crate::gemm::kernel_for(&g, "grouped_gemm_bf16", &g2)?;
        let slots = sv.tokens * self.cfg.top_k;
        let kernel = if g1.a_copy != 0 { "ffn_fused_fwd_mv" } else { "ffn_fused_fwd" };
        let launch = m_grouped_launch(&g, kernel, slots, self.cfg.experts, g1.n_tiles + g2.n_tiles)?;
        // all blocks resident: the walk's waits only end (before their bound) when every block runs at once
        if launch.grid.0 > g.sm_count() {
            return Err(Error::InvalidArgument(format!(
                "ffn_fused_fwd: grid {} above {} SMs",
                launch.grid.0,
                g.sm_count()
            )));
        }
        g.fill_bytes(&mut self.work.ready, 0)?;
        let p = params::FusedFfn {
            g1,
            g2,
            ready: dptr(&self.work.ready, s),
            error: dptr(sv.error.as_ref(), s),
            timeout_ns: FUSED_TIMEOUT_NS,
            // at least fused_lag_min: the kernel counts a GEMM1 tile's stores after its block's next main loop
            lag: FUSED_LAG.max(megamoe_kernels::scheduler::fused_lag_min(launch.grid.0, g1.n_tiles, g2.n_tiles)),
            pad: 0,
        };
        // SAFETY: as the two launches (A, B, C, z hold the call's slots rows, `rows_max`); `ready` holds an entry
        // per m-tile (m_tiles_max, at least the m-tiles the kernel walks), the error word is the call's.
        unsafe { g.launch(kernel, launch, &p) }
    }

    /// Forward: out\[t\] = sum over j of topk_weights[t, j] * SwiGLU-expert(topk_ids[t, j])(x\[t\]), asynchronous on
    /// the layer's stream, no host synchronisation. Returns what the backward needs.
    ///
    /// An expert id outside -1..E in `topk_ids` is found on the device, so the call still returns `Ok`: it sets
    /// this call's error word and nothing is written (`out` keeps its previous contents; every backward of the
    /// returned [`Saved`] writes nothing either). Read the word with [`MoeLayer::routing_error`] (the last
    /// forward) or [`Saved::check`] (that call); both synchronise and return [`Error::InvalidArgument`].
    pub fn forward(&mut self, inp: &Inputs<'_>, out: &mut CudaSlice<bf16>) -> Result<Saved> {
        self.check_inputs(inp, ("out", out.len(), out.ordinal()))?;
        let mut sv = self.alloc_saved(inp.tokens)?;
        self.forward_into(inp, out, &mut sv)?;
        Ok(sv)
    }

    /// Fill the layer's activation workspace (the expert-ordered copies of x and dy, h, z, dz, s h, the layer's
    /// output rows and the dtopk partial sums) with NaN bytes, on the stream. For tests: a kernel that skips a
    /// row it should write then shows as NaN (or a bitwise difference) in the outputs instead of passing on a
    /// previous call's data. Changes no result of a correct layer (every row read is written first).
    #[doc(hidden)]
    pub fn poison_workspace(&mut self) -> Result<()> {
        let g = self.gpu.clone();
        let w = &mut self.work;
        for b in [&mut w.xs, &mut w.h, &mut w.z, &mut w.ys, &mut w.dys, &mut w.sh, &mut w.dz] {
            g.fill_bytes(b, 0xff)?;
        }
        g.fill_bytes(&mut w.partial, 0xff)
    }

    /// What [`MoeLayer::forward_into`] needs for calls of up to `tokens` tokens (at most the configured
    /// maximum): allocated once, reused by every call into it. With it a forward and backward allocate nothing,
    /// so a whole training step can be captured in a CUDA graph (see [`MoeLayer::forward_into`]).
    pub fn alloc_saved(&self, tokens: usize) -> Result<Saved> {
        self.alloc_saved_z(tokens, self.cfg.save == Save::WithZ)
    }

    /// [`MoeLayer::alloc_saved`] without z's buffer, for a layer that keeps z ([`Save::WithZ`], with
    /// [`Gather::InProducer`]) whose caller keeps z in a buffer of its own and lends it to each call with
    /// [`Saved::swap_z`]: the C ABI's custom operators, whose z is a tensor that the framework carries from the
    /// forward to the backward. A forward into it with z lent writes z there; [`MoeLayer::route_into`] with the
    /// same z lent back then makes the state its backward reads.
    pub fn alloc_saved_lent_z(&self, tokens: usize) -> Result<Saved> {
        let c = self.cfg;
        if c.save != Save::WithZ || c.gather != Gather::InProducer {
            return Err(Error::InvalidArgument(format!(
                "alloc_saved_lent_z: a layer with Save::WithZ and Gather::InProducer (this one: {:?}, {:?}); with \
                 another gather the state also keeps the forward's rows of x",
                c.save, c.gather
            )));
        }
        self.alloc_saved_z(tokens, false)
    }

    /// [`MoeLayer::alloc_saved`], z's buffer allocated when `with_z`.
    fn alloc_saved_z(&self, tokens: usize, with_z: bool) -> Result<Saved> {
        let c = self.cfg;
        if tokens > c.max_tokens {
            return Err(Error::InvalidArgument(format!("{tokens} tokens > the configured maximum {}", c.max_tokens)));
        }
        let g = &self.gpu;
        let (slots, e) = (tokens * c.top_k, c.experts);
        Ok(Saved {
            layer: self.id,
            complete: false,
            tokens: 0,
            experts: e,
            error: Arc::new(g.alloc::<u32>(1)?),
            counts: g.alloc(e)?,
            offsets: g.alloc(e + 1)?,
            tile_offsets: g.alloc(e + 1)?,
            row_slot: g.alloc(slots.max(1))?,
            slot_row: g.alloc(slots.max(1))?,
            z: if with_z { Some(g.alloc((slots * 2 * c.intermediate).max(1))?) } else { None },
            z_lent: false,
            xs: if with_z && c.gather != Gather::InProducer { Some(g.alloc((slots * c.hidden).max(1))?) } else { None },
            fp8: false,
            z_fp8: false,
        })
    }

    /// [`MoeLayer::forward`] into `saved` (from [`MoeLayer::alloc_saved`] of this layer, for at least
    /// `inp.tokens` tokens), which then holds this call's state for its backward (an earlier call's state in it
    /// is replaced). Allocates nothing on the device and never synchronises, so the forward and backward can be
    /// captured in a CUDA graph and replayed on new contents of the same buffers (a buffer's TMA tensor map, encoded
    /// the first time the layer sees it, is placed by a copy the graph records when that is inside a capture:
    /// [`crate::tensor_map::CaptureMaps`]).
    pub fn forward_into(&mut self, inp: &Inputs<'_>, out: &mut CudaSlice<bf16>, saved: &mut Saved) -> Result<()> {
        self.check_inputs(inp, ("out", out.len(), out.ordinal()))?;
        // the kernel policies read at launch, checked before the first one (an unknown value fails the call whole)
        crate::gemm::check_policies()?;
        self.check_saved_owner(saved)?;
        self.check_lent_z(saved, inp.tokens)?;
        let c = self.cfg;
        let slots = inp.tokens * c.top_k;
        let with_z = c.save == Save::WithZ;
        let need_xs = with_z && c.gather != Gather::InProducer;
        let fits = |b: Option<usize>, per: usize, want: bool| match b {
            Some(n) => want && n >= (slots * per).max(1),
            None => !want,
        };
        // a lent z was checked above (check_lent_z: this call's rows, none for no tokens)
        let z_len = saved.z.as_ref().map(|z| if saved.z_lent { usize::MAX } else { z.len() });
        if saved.experts != c.experts
            || saved.row_slot.len() < slots.max(1)
            || !fits(z_len, 2 * c.intermediate, with_z)
            || !fits(saved.xs.as_ref().map(|x| x.len()), c.hidden, need_xs)
        {
            return Err(Error::InvalidArgument(format!(
                "saved state does not fit this layer and {} tokens: make it with this layer's alloc_saved",
                inp.tokens
            )));
        }
        self.maps.trim(&self.gpu)?;
        // from here `saved` changes: it is complete again only once every launch of the call was issued
        saved.complete = false;
        let r = self.forward_launches(inp, out, saved);
        saved.complete = r.is_ok();
        r
    }

    /// The routing layout of `tokens` tokens of `topk_ids` into `saved` (from this layer's
    /// [`MoeLayer::alloc_saved`]), as a forward on those ids leaves it, without the forward's GEMMs: with it a
    /// backward of a layer that recomputes z ([`Save::InputsOnly`]) needs only the forward's inputs, not the
    /// [`Saved`] of the forward itself (a caller that cannot carry it from forward to backward: PyTorch's custom
    /// operators, whose values are tensors). Costs the routing's launch (one ~13 us launch at 30B, T =
    /// 16384). A layer that keeps z refuses (its backward reads the forward's z). Like the forward, an invalid
    /// expert id is found on the device and [`MoeLayer::routing_error`] reports it.
    ///
    /// A layer that keeps z takes it only from a state of [`MoeLayer::alloc_saved_lent_z`] with z lent back
    /// ([`Saved::swap_z`]): the buffer a forward on the same inputs wrote, unchanged since (the caller's promise:
    /// the routing made again is that forward's, bit for bit, but nothing can check z itself).
    pub fn route_into(&mut self, topk_ids: &CudaSlice<i32>, tokens: usize, saved: &mut Saved) -> Result<()> {
        if self.cfg.save != Save::InputsOnly {
            if !saved.z_lent {
                return Err(Error::InvalidArgument(
                    "route_into: a layer that keeps z (Save::WithZ) needs its forward's saved state for the backward, \
                     or a state of alloc_saved_lent_z with the z that forward wrote lent back (Saved::swap_z)"
                        .into(),
                ));
            }
            self.check_lent_z(saved, tokens)?;
        }
        self.route_layout(topk_ids, tokens, saved, false)
    }

    /// A lent z (if any) of at least `tokens` x top-k rows of 2I, on the layer's device.
    fn check_lent_z(&self, saved: &Saved, tokens: usize) -> Result<()> {
        let (c, me) = (self.cfg, self.gpu.ordinal());
        let need = tokens * c.top_k * 2 * c.intermediate;
        match &saved.z {
            Some(z) if saved.z_lent && z.ordinal() != me => Err(Error::InvalidArgument(format!(
                "the lent z lives on device {}, the layer on device {me}",
                z.ordinal()
            ))),
            Some(z) if saved.z_lent && z.len() < need => Err(Error::InvalidArgument(format!(
                "the lent z has {} elements, {tokens} tokens need {need} ({} rows of 2I = {})",
                z.len(),
                tokens * c.top_k,
                2 * c.intermediate
            ))),
            _ => Ok(()),
        }
    }

    /// [`MoeLayer::route_into`] for [`MoeLayer::backward_fp8`]: the layout an FP8 forward on `topk_ids` leaves in
    /// `saved`, so that its backward needs only the forward's inputs and quantized weights. Any save mode: the
    /// backward recomputes z from the tokens' codes, unless the state holds z lent back ([`Saved::swap_z`], a
    /// state of [`MoeLayer::alloc_saved_lent_z`]) that a forward_fp8 on the same inputs wrote (with the 128 x 256
    /// kernels, the default: the caller's promise, as for [`MoeLayer::route_into`]), which it then reads.
    pub fn route_into_fp8(&mut self, topk_ids: &CudaSlice<i32>, tokens: usize, saved: &mut Saved) -> Result<()> {
        self.check_lent_z(saved, tokens)?;
        self.route_layout(topk_ids, tokens, saved, true)?;
        // as forward_fp8 sets it: its GEMM1 stores z only in the 128 x 256 form
        saved.z_fp8 = saved.z_lent && fp8::gemm1_wide();
        Ok(())
    }

    /// The routing layout alone into `saved`, marked as a bf16 (`fp8` false) or an FP8 forward's.
    fn route_layout(&mut self, topk_ids: &CudaSlice<i32>, tokens: usize, saved: &mut Saved, fp8: bool) -> Result<()> {
        let c = self.cfg;
        if tokens > c.max_tokens {
            return Err(Error::InvalidArgument(format!("{tokens} tokens > the configured maximum {}", c.max_tokens)));
        }
        self.check_buffers(&[("topk_ids", topk_ids.len(), tokens * c.top_k, topk_ids.ordinal())])?;
        self.check_saved_owner(saved)?;
        if saved.experts != c.experts || saved.row_slot.len() < (tokens * c.top_k).max(1) {
            return Err(Error::InvalidArgument(format!(
                "saved state does not fit this layer and {tokens} tokens: make it with this layer's alloc_saved"
            )));
        }
        saved.complete = false;
        self.route_call(topk_ids, tokens, saved)?;
        saved.fp8 = fp8;
        saved.complete = true;
        Ok(())
    }

    /// `saved` made by this layer's [`MoeLayer::alloc_saved`] (an `InvalidArgument` saying so otherwise).
    fn check_saved_owner(&self, saved: &Saved) -> Result<()> {
        if saved.layer != self.id {
            return Err(Error::InvalidArgument(
                "saved state made by another layer's alloc_saved or forward: each layer takes its own".into(),
            ));
        }
        Ok(())
    }

    /// [`MoeLayer::forward_into`]'s launches, its arguments checked.
    fn forward_launches(&mut self, inp: &Inputs<'_>, out: &mut CudaSlice<bf16>, saved: &mut Saved) -> Result<()> {
        let c = self.cfg;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let e = c.experts;
        if !self.route_call(inp.topk_ids, inp.tokens, saved)? {
            return Ok(());
        }
        let sv: &Saved = saved;
        let (h_ptr, h_rows) = (dptr(&self.work.h, &s), c.max_tokens * c.top_k);
        let z_ptr = sv.z.as_ref().map_or(0, |z| dptr(z, &s));
        let fused = c.forward == Forward::Persistent;
        let p1 = match c.gather {
            Gather::Pass | Gather::Overlapped => {
                let xs = self.xs_of(sv);
                // the persistent forward runs GEMM1 in the cooperative kernel's tiles
                let rows = Gemm1A::Rows(xs.0, xs.1);
                let mut p1 = if fused {
                    crate::gemm::with_swiglu_epilogue_warps(false, || {
                        self.gemm1_params(sv, rows, inp.w1, h_ptr, z_ptr)
                    })?
                } else {
                    self.gemm1_params(sv, rows, inp.w1, h_ptr, z_ptr)?
                };
                if c.gather == Gather::Pass {
                    self.gather(dptr(inp.x, &s), xs.0, sv)?;
                } else {
                    self.overlap(&mut p1.1, dptr(inp.x, &s), xs.0, sv)?;
                }
                if !fused {
                    self.mgemm(p1.0, p1.1, sv)?;
                }
                Some(p1)
            }
            // GEMM1's producer gathers the rows of x itself (no gathered copy of x in the forward)
            Gather::InProducer => {
                self.gemm1_from(sv, Gemm1A::Tokens(dptr(inp.x, &s)), inp.w1, h_ptr, z_ptr)?;
                None
            }
        };
        let map_h = self.maps.get(&g, h_ptr, h_rows, c.intermediate, kh::GEMM_BM, 64)?;
        let map_w2 = self.maps.get(&g, dptr(inp.w2, &s), e * c.hidden, c.intermediate, kh::GEMM_BN / 2, 64)?;
        let map_ys = self.maps.get(&g, dptr(&self.work.ys, &s), c.max_tokens * c.top_k, c.hidden, 64, 64)?;
        let p = GroupedGemm {
            map_a: map_h,
            map_b: map_w2,
            c: dptr(&self.work.ys, &s),
            map_c: map_ys,
            n: c.hidden as u32,
            k: c.intermediate as u32,
            n_b: c.hidden as u32,
            ldc: c.hidden as u32,
            n_tiles: (c.hidden as u32).div_ceil(kh::GEMM_BN),
            ..zero_gemm()
        };
        match p1 {
            Some((_, g1)) if fused => self.fused_gemms(g1, p, sv)?,
            _ => self.mgemm("grouped_gemm_bf16", p, sv)?,
        }
        self.combine(dptr(&self.work.ys, &s), dptr(inp.topk_weights, &s), dptr(out, &s), sv)?;
        Ok(())
    }

    /// The call's routing layout into `saved` (its error word written by the routing, or zeroed for no tokens): the
    /// `route_*` kernels over `tokens` tokens of `topk_ids` (false for no tokens: nothing to launch).
    fn route_call(&mut self, topk_ids: &CudaSlice<i32>, tokens: usize, saved: &mut Saved) -> Result<bool> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (e, slots) = (self.cfg.experts, tokens * self.cfg.top_k);
        saved.tokens = tokens;
        saved.fp8 = false;
        saved.z_fp8 = false;
        // the previous call's error word may be the last reference to its buffer: its free would be recorded by
        // a capture (which only frees what it allocated), so during one it waits in `kept` for a later call
        let old = self.last_error.replace(saved.error.clone());
        if g.capturing()? {
            self.kept.extend(old);
        } else {
            self.kept.clear();
        }
        let sv: &Saved = saved;
        if tokens == 0 {
            // the call's error word, zeroed in stream order (a routing writes it otherwise)
            g.zero_words(dptr(sv.error.as_ref(), &s), 1)?;
            return Ok(false);
        }
        let route = Route {
            topk_ids: dptr(topk_ids, &s),
            counts: dptr(&sv.counts, &s),
            offsets: dptr(&sv.offsets, &s),
            tile_offsets: dptr(&sv.tile_offsets, &s),
            row_slot: dptr(&sv.row_slot, &s),
            slot_row: dptr(&sv.slot_row, &s),
            error: dptr(sv.error.as_ref(), &s),
            chunk_counts: dptr(&self.work.route_chunks, &s),
            barrier: dptr(&self.work.route_barrier, &s),
            timeout_ns: 0,
            slots: slots as u32,
            experts: e as u32,
            tile_m: kh::GEMM_BM,
            chunk: 0,
        };
        // SAFETY: the routing buffers hold E, E + 1 and slots entries, the chunk workspace covers max_tokens * k
        // slots, the barrier word is the layer's own (its calls are ordered on the stream); ids are range-checked
        // on the device; the routing writes the error word. With an invalid id, route_scan writes zero offsets: the
        // gathers and grouped GEMMs after it have no rows, and the combine returns at once (out untouched).
        unsafe { crate::route::launch(&g, &route)? };
        Ok(true)
    }

    fn combine(&self, y: u64, w: u64, out: u64, sv: &Saved) -> Result<()> {
        self.launch_combine(&self.combine_params(y, w, out, sv))
    }

    /// `combine_rows` over `p` (from [`MoeLayer::combine_params`]).
    fn launch_combine(&self, p: &Combine) -> Result<()> {
        // SAFETY: y holds the rows slot_row points at; out holds T rows. Returns at once (slot_row unwritten) when
        // the forward's error word is set.
        unsafe { self.gpu.launch("combine_rows", Launch::new(p.tokens, 256, 0), p) }
    }

    fn combine_params(&self, y: u64, w: u64, out: u64, sv: &Saved) -> Combine {
        let s = self.gpu.stream();
        Combine {
            y,
            w,
            slot_row: dptr(&sv.slot_row, s),
            out,
            error: dptr(sv.error.as_ref(), s),
            tokens: sv.tokens as u32,
            cols: self.cfg.hidden as u32,
            k: self.cfg.top_k as u32,
            pad: 0,
        }
    }

    /// dW = A^T B per expert; `a` and `b` are (address, rows the buffer holds, columns). With `combine`, the
    /// kernel's idle producer warps run that combine meanwhile (`W::KERNEL_MV`); with `gather`
    /// ([`WgradSrc::A`]: token rows of M columns), the producer warpgroup gathers A's rows from them through
    /// `sv.row_slot` instead (`W::KERNEL_GA`; `a` then only sizes A's unused tensor map), or ([`WgradSrc::B`]: of N
    /// columns) B's (`W::KERNEL_GB`, single CTAs whatever the schedule: B is what the clusters multicast).
    #[allow(clippy::too_many_arguments)]
    fn wgrad<W: WgradElem>(
        &mut self,
        a: (u64, usize, usize),
        b: (u64, usize, usize),
        c: &mut CudaSlice<W>,
        sv: &Saved,
        acc: bool,
        combine: Option<Combine>,
        gather: Option<WgradSrc>,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (a_ptr, a_rows, m) = a;
        let (b_ptr, b_rows, n) = b;
        let map_a = self.maps.get(&g, a_ptr, a_rows, m, 64, 64)?;
        let map_b = self.maps.get(&g, b_ptr, b_rows, n, 64, 64)?;
        let e = self.cfg.experts;
        let map_c = self.maps.get_wgrad_c::<W>(&g, dptr(c, &s), e * m, n)?;
        let (offsets, error) = (dptr(&sv.offsets, &s), dptr(sv.error.as_ref(), &s));
        let maps = [map_a, map_b, map_c];
        let rows = a_rows.min(b_rows);
        let (mut p, mut launch) =
            wgrad_launch(&g, maps, [a_ptr, b_ptr], offsets, dptr(c, &s), error, e, (m, n, rows), acc)?;
        let kernel = match (combine, gather) {
            (Some(_), Some(_)) => {
                return Err(Error::InvalidArgument("a weight gradient gathering an operand runs no combine".into()))
            }
            (Some(cb), None) => {
                p.combine = cb;
                W::KERNEL_MV
            }
            (None, Some(WgradSrc::A(src) | WgradSrc::B(src))) => {
                // the rows the kernel may read: those row_slot has an entry of this call for (the call's slots; the
                // workspace's `rows` may be more, and a saved state made for more tokens holds more entries, of an
                // earlier call: offsets[E] is at most the call's slots, so no expert loses a row); the expert maps
                // of B are clamped alike (`launch_wgrad` builds them from `rows_max`)
                let slots = sv.row_slot.len().min(sv.tokens * self.cfg.top_k);
                p.rows_max = p.rows_max.min(slots as u32);
                p.a_gather = src;
                p.row_slot = dptr(&sv.row_slot, &s);
                p.top_k = self.cfg.top_k as u32;
                if let Some(WgradSrc::B(_)) = gather {
                    // single CTAs (the run-time schedule's counter kept): the grid as `wgrad_launch` makes it then
                    p.clusters = 0;
                    let tiles = p.experts * p.m_tiles * p.n_tiles;
                    launch = Launch::new(g.sm_count().min(tiles), launch.block, launch.smem);
                    W::KERNEL_GB
                } else {
                    W::KERNEL_GA
                }
            }
            (None, None) => W::KERNEL,
        };
        // SAFETY: A and B hold `rows` rows (each expert's rows are clamped to them on the device); C holds
        // E * M * N. Returns at entry when the forward's error word is set (C neither written nor added to, the
        // combine not run). The combine as `combine_rows`: y holds the rows slot_row points at, out T rows.
        unsafe { crate::gemm::launch_wgrad(&g, kernel, launch, &p) }
    }

    /// Backward of the forward that returned `saved`, on the same inputs: dx, dtopk, and dW1, dW2 (written, or
    /// added with `grads.accumulate`). Asynchronous on the layer's stream, no host synchronisation.
    ///
    /// When that forward saw an expert id outside -1..E (its error word, [`Saved::check`]), nothing is written:
    /// dx, dtopk, dW1 and dW2 keep their previous contents, with or without `accumulate`. With T = 0 there are
    /// no ids: dW1 and dW2 are zero-filled unless accumulating.
    pub fn backward<W: WgradElem>(
        &mut self,
        saved: &Saved,
        dy: &CudaSlice<bf16>,
        inp: &Inputs<'_>,
        grads: Grads<'_, W>,
    ) -> Result<()> {
        self.backward_impl(saved, dy, inp, grads, None)
    }

    /// The backward of [`MoeLayer::backward`] for the bf16 backward, or (`fp8`) of [`MoeLayer::backward_fp8`]: z
    /// recomputed in FP8 from the tokens' codes and W1's, x's rows gathered by the pass (a saved z or x of the
    /// FP8 forward's `Saved` is not read: that forward writes neither).
    fn backward_impl<W: WgradElem>(
        &mut self,
        saved: &Saved,
        dy: &CudaSlice<bf16>,
        inp: &Inputs<'_>,
        grads: Grads<'_, W>,
        fp8: Option<&Fp8Weights>,
    ) -> Result<()> {
        self.check_inputs(inp, ("dy", dy.len(), dy.ordinal()))?;
        // the kernel policies read at launch, checked before the first one (an unknown value fails the call whole)
        crate::gemm::check_policies()?;
        self.check_saved_owner(saved)?;
        let c = self.cfg;
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if !saved.complete {
            return bad("the saved state's forward did not complete (it returned an error, or none ran)".into());
        }
        if saved.fp8 && fp8.is_none() {
            return bad("the saved state comes from forward_fp8: its backward is backward_fp8".into());
        }
        if !saved.fp8 && fp8.is_some() {
            return bad(
                "backward_fp8 takes the saved state of forward_fp8 or route_into_fp8; this one comes from forward or \
                 route_into"
                    .into(),
            );
        }
        if let Some(w) = fp8 {
            self.check_fp8_weights(w, (c.fp8_backward.dx(), c.fp8_dh == Fp8Dh::Fp8))?;
            // the FP8 weight gradients' column quantizer indexes its codes in 32 bits (the public
            // quantize_cols_grouped checks the same; the layer calls the kernel directly)
            let kp = crate::fp8::cols_grouped_kp(c.max_tokens * c.top_k, c.experts);
            let cols = c.hidden.max(2 * c.intermediate);
            if c.fp8_backward.wgrad() && cols.checked_mul(kp).is_none_or(|n| n >= 1 << 32) {
                return bad(format!(
                    "FP8 weight gradients: {cols} columns x {kp} padded rows of codes exceed 32-bit offsets (fewer \
                     max_tokens or Fp8Backward::Dx)"
                ));
            }
        }
        if saved.tokens != inp.tokens {
            return bad(format!("saved state is of {} tokens, the inputs of {}", saved.tokens, inp.tokens));
        }
        let t = inp.tokens;
        self.check_buffers(&[
            ("dx", grads.dx.len(), t * c.hidden, grads.dx.ordinal()),
            ("dW1", grads.dw1.len(), c.experts * 2 * c.intermediate * c.hidden, grads.dw1.ordinal()),
            ("dW2", grads.dw2.len(), c.experts * c.hidden * c.intermediate, grads.dw2.ordinal()),
            ("dtopk", grads.dtopk.len(), t * c.top_k, grads.dtopk.ordinal()),
        ])?;
        self.maps.trim(&self.gpu)?;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        if t == 0 {
            if !grads.accumulate {
                g.fill_bytes(grads.dw1, 0)?;
                g.fill_bytes(grads.dw2, 0)?;
            }
            return Ok(());
        }
        let slots = t * c.top_k;
        let ws_rows = c.max_tokens * c.top_k;
        let (h2, i2) = (c.hidden, c.intermediate);
        // dy, or with `Fp8Dy::Codes` its codes dequantized (what the rest of the backward reads); with an FP8 dh its
        // codes are dh's A
        let dh8 = fp8.is_some() && c.fp8_dh == Fp8Dh::Fp8;
        let dy_coded = fp8.is_some() && c.fp8_dy == Fp8Dy::Codes;
        let dyq = if dh8 || dy_coded { Some(self.dy_codes(dy, t)?) } else { None };
        let dy_p = match dyq {
            Some(q) if dy_coded => self.dequantize_dy(q, t)?,
            _ => dptr(dy, &s),
        };
        // x rows (unless saved), z (unless saved; h is recomputed from z in the dh epilogue)
        let xs = if fp8.is_some() { (dptr(&self.work.xs, &s), ws_rows) } else { self.xs_of(saved) };
        let overlapped = c.gather == Gather::Overlapped;
        // FP8 weight gradients: x is quantized (and gathered) just before dW1 instead
        let wgrad8 = fp8.is_some() && c.fp8_backward.wgrad();
        let dx8 = fp8.is_some() && c.fp8_backward.dx();
        // with the in-producer gather and z saved, dx's idle producer warps copy x's rows for dW1 (the side copy),
        // where it pays (`gemm::side_copy`; else the gather pass)
        let side_ok = crate::gemm::side_copy()?.unwrap_or_else(|| crate::gemm::side_copy_pays(h2, i2));
        // the weight gradients' gathers (`gemm::wgrad_gather`: by the shape in the bf16 backward, else off unless
        // asked)
        let wg = crate::gemm::wgrad_gather()?.unwrap_or_else(|| match fp8 {
            None => crate::gemm::wgrad_gather_pays(i2),
            Some(_) => crate::gemm::WgradGather::Off,
        });
        // dW1's B (x's rows) gathered by its own producer from the tokens (`gemm::WgradGather::DyX`): the bf16
        // backward with bf16 weight gradients, x's rows not saved, z saved (a recomputed z's GEMM1 reads x's rows
        // in expert order anyway), the in-producer gather; then neither the gather pass of x nor the side copy
        let dw1_gathers =
            fp8.is_none() && c.gather == Gather::InProducer && saved.xs.is_none() && saved.z.is_some() && wg.x();
        let side_copy = side_ok
            && !dw1_gathers
            && fp8.is_none()
            && c.gather == Gather::InProducer
            && saved.xs.is_none()
            && saved.z.is_some();
        // the FP8 backward with an FP8 dx and bf16 weight gradients: the FP8 dx kernel's idle warps copy them
        // (`grouped_gemm_fp8w_cpx`), so no gather pass
        // dW1's x from the forward's row codes (dequantized just before dW1) instead of the bf16 tokens
        let dw1_codes = fp8.is_some() && c.fp8_dw1_x == Fp8Dw1X::Codes;
        let side_copy8 = side_ok && dx8 && !wgrad8 && !dw1_codes && fp8::plain_kernel() == "grouped_gemm_fp8w";
        if !wgrad8
            && !dw1_codes
            && !dw1_gathers
            && !side_copy
            && !side_copy8
            && (fp8.is_some() || (saved.xs.is_none() && (saved.z.is_some() || !overlapped)))
        {
            self.gather(dptr(inp.x, &s), xs.0, saved)?;
        }
        // the z the dh epilogue reads, and its buffer's rows
        let mut x_coded = false;
        let (z_ptr, z_rows) = match (fp8, &saved.z) {
            // with FP8 weight gradients the recompute also writes h^T's block codes, dW2's B
            // the FP8 forward's own z (no recompute: no x codes, no GEMM)
            (Some(_), Some(z)) if saved.z_fp8 && !wgrad8 => (dptr(z, &s), z.len() / (2 * i2)),
            (Some(w), _) => {
                // the recompute quantizes the tokens (their row codes stay for dW1 with `Fp8Dw1X::Codes`)
                x_coded = true;
                (self.recompute_z_fp8(inp.x, t, w, saved, wgrad8)?, ws_rows)
            }
            (None, Some(z)) => (dptr(z, &s), z.len() / (2 * i2)),
            (None, None) => {
                let zp = dptr(&self.work.z, &s);
                let (kernel, mut p) = self.gemm1_params(saved, Gemm1A::Rows(xs.0, xs.1), inp.w1, 0, zp)?;
                if overlapped {
                    // the recompute of z copies x's rows for dW1 as it goes
                    self.overlap(&mut p, dptr(inp.x, &s), xs.0, saved)?;
                }
                self.mgemm(kernel, p, saved)?;
                (zp, ws_rows)
            }
        };
        // dy rows: with the in-producer gather (the seven-warp SwiGLU backward; bf16 weight gradients, the FP8
        // backward's too since 2026-12-06e) gathered by the dh GEMM's producer, which also writes them in expert
        // order for dW2 (no gather pass of dy); else by the gather
        // pass (overlapped with the dh + SwiGLU backward GEMM by movers, it measured ~200 us slower at 30B:
        // docs/NOTES.md)
        let dy_in_producer = !wgrad8
            && !dh8
            && c.gather == Gather::InProducer
            && matches!(crate::gemm::dswiglu_kernel()?, crate::tiles::Dsw::Ew7 | crate::tiles::Dsw::Ew7n)
            && crate::gemm::dy_gather_in_producer()?;
        // and dW2's A (dy's rows) gathered by its own producer: no expert-ordered copy of dy at all
        let dw2_gathers = dy_in_producer && !wgrad8 && wg.dy();
        if wgrad8 {
            // the gather's bf16 rows and dy^T's codes (dW2's A, 1 x 128 blocks) in one pass over dy
            // dW2 = (s dy)^T h: the routing weight applied to dy's codes (h^T comes from z's recompute)
            let gather = Some((dy_p, dptr(&self.work.dys, &s), dptr(inp.topk_weights, &s)));
            self.quantize_cols_fp8(Operand::A, 0, h2, false, gather, false, saved)?;
        } else if !dy_in_producer {
            self.gather(dy_p, dptr(&self.work.dys, &s), saved)?;
        }
        // dh = dy W2_e with the SwiGLU backward: dz, s * h, dtopk partials
        let n_tiles_i = crate::gemm::dswiglu_partials(i2) as u32;
        let map_dy = if dy_in_producer {
            0
        } else {
            self.maps.get(&g, dptr(&self.work.dys, &s), ws_rows, h2, kh::GEMM_BM, 64)?
        };
        let map_w2 = self.maps.get(&g, dptr(inp.w2, &s), c.experts * h2, i2, 64, 64)?;
        // z and dz in 64 x 64 boxes (whole 64-row groups of an expert go through the copy engine); a saved z
        // holds the call's slots rows, the workspace's z and dz ws_rows
        let (box_rows, box_cols) = kh::GEMM_C_BOX;
        let map_z = self.maps.get(&g, z_ptr, z_rows, 2 * i2, box_rows, box_cols)?;
        let map_dzs = self.maps.get(&g, dptr(&self.work.dz, &s), ws_rows, 2 * i2, box_rows, box_cols)?;
        let map_sh = self.maps.get(&g, dptr(&self.work.sh, &s), ws_rows, i2, box_rows, box_cols)?;
        let p = GroupedGemm {
            map_a: map_dy,
            map_b: map_w2,
            c: dptr(&self.work.dz, &s),
            map_c: map_dzs,
            z: z_ptr,
            map_z,
            n: i2 as u32,
            k: h2 as u32,
            n_b: h2 as u32,
            ldc: 2 * i2 as u32,
            n_tiles: n_tiles_i,
            w: dptr(inp.topk_weights, &s),
            w_len: slots as u32,
            row_slot: dptr(&saved.row_slot, &s),
            partial: dptr(&self.work.partial, &s),
            // s h only for the bf16 weight gradients (dW2's FP8 B is h^T from the recompute)
            sh: if wgrad8 { 0 } else { dptr(&self.work.sh, &s) },
            map_sh: if wgrad8 { 0 } else { map_sh },
            // dy's tokens and where the gathered rows go (dW2's A)
            a_rows: if dy_in_producer { dy_p } else { 0 },
            top_k: c.top_k as u32,
            a_out: if dy_in_producer && !dw2_gathers { dptr(&self.work.dys, &s) } else { 0 },
            ..zero_gemm()
        };
        let dh = if dy_in_producer { "grouped_gemm_bt_dswiglu_ew7_gather" } else { "grouped_gemm_bt_dswiglu" };
        let n_tiles_i = match (dh8, fp8, dyq) {
            // FP8: dy's token codes against W2's transposed codes, 256 columns of I a tile
            (true, Some(w), Some((q8, qs, _))) => {
                self.dh_fp8(w, (q8, qs), (z_ptr, z_rows), dptr(inp.topk_weights, &s), saved)?;
                (i2 / 256) as u32
            }
            _ => {
                self.mgemm(dh, p, saved)?;
                n_tiles_i
            }
        };
        let red = DtopkReduce {
            partial: dptr(&self.work.partial, &s),
            slot_row: dptr(&saved.slot_row, &s),
            dtopk: dptr(grads.dtopk, &s),
            error: dptr(saved.error.as_ref(), &s),
            slots: slots as u32,
            n_tiles: n_tiles_i,
        };
        // SAFETY: partial holds n_tiles sums for every row slot_row points at; dtopk holds slots entries. Returns
        // at once (slot_row unwritten) when the forward's error word is set.
        unsafe { g.launch("dtopk_reduce", Launch::new((slots as u32).div_ceil(256), 256, 0), &red)? };
        // dx rows = dz W1_e, then the sum over each token's slots
        if let (true, Some(w)) = (dx8, fp8) {
            if wgrad8 {
                // dz quantized both ways in one pass: rows for dx, columns (dz^T, its own buffer) for dW1
                let dz = dptr(&self.work.dz, &s);
                self.quantize_cols_fp8(Operand::Dz, dz, 2 * i2, false, None, true, saved)?;
            }
            self.dx_fp8(w, slots, saved, wgrad8, side_copy8.then_some((dptr(inp.x, &s), xs.0)))?;
        } else {
            let map_dz = self.maps.get(&g, dptr(&self.work.dz, &s), ws_rows, 2 * i2, kh::GEMM_BM, 64)?;
            let map_w1 = self.maps.get(&g, dptr(inp.w1, &s), c.experts * 2 * i2, h2, 64, 64)?;
            let map_ys = self.maps.get(&g, dptr(&self.work.ys, &s), c.max_tokens * c.top_k, c.hidden, 64, 64)?;
            let mut p = GroupedGemm {
                map_a: map_dz,
                map_b: map_w1,
                c: dptr(&self.work.ys, &s),
                map_c: map_ys,
                n: h2 as u32,
                k: 2 * i2 as u32,
                n_b: 2 * i2 as u32,
                ldc: h2 as u32,
                n_tiles: (h2 as u32).div_ceil(kh::GEMM_BN),
                ..zero_gemm()
            };
            if side_copy {
                self.overlap(&mut p, dptr(inp.x, &s), xs.0, saved)?;
                p.copy_cols = h2 as u32;
            }
            self.mgemm("grouped_gemm_bt_bf16", p, saved)?;
        }
        // dx = the sum over each token's slots: by a pass (`Gather::Pass`, or where the movers would set the weight
        // gradients' pace: `gemm::dx_combine`), or by dW2's and dW1's idle producer warps (the same sums in the same
        // order)
        let movers_ok = crate::gemm::dx_combine()?.unwrap_or_else(|| crate::gemm::dx_combine_in_movers_pays(i2));
        // (where both weight gradients gather, neither has idle warps: the pass)
        let dx_by_movers = c.gather != Gather::Pass && movers_ok && !(dw1_gathers && dw2_gathers);
        let dx_sum = self.combine_params(dptr(&self.work.ys, &s), 0, dptr(grads.dx, &s), saved);
        if !dx_by_movers {
            self.launch_combine(&dx_sum)?;
        }
        // weight gradients, contracting over each expert's rows
        let acc = grads.accumulate;
        // by the movers: dW2's idle warps sum the first third of the tokens, dW1's (twice as long) the rest; when
        // dW2's producer warpgroup gathers dy, dW1's sum them all; when dW1's gathers x, dW2's
        let split = match (dw2_gathers, dw1_gathers) {
            (true, _) => 0,
            (false, true) => saved.tokens,
            (false, false) => saved.tokens / 3,
        };
        let (first, rest) = split_combine(&dx_sum, split);
        if wgrad8 {
            // dW2 = (s dy)^T h: h^T in 128 x 128 blocks from z's recompute; then dW1 = dz^T x: dz in 1 x 128
            // blocks, x gathered into 128 x 128 blocks (each operand's codes overwrite the last GEMM's, on the stream)
            self.wgrad_fp8::<W>(Operand::A, (h2, i2), dptr(grads.dw2, &s), acc, saved, dx_by_movers.then_some(first))?;
            // dz^T: quantized before dx with an FP8 dx, else now into A
            let dz_op = if dx8 { Operand::Dz } else { Operand::A };
            if !dx8 {
                self.quantize_cols_fp8(Operand::A, dptr(&self.work.dz, &s), 2 * i2, false, None, false, saved)?;
            }
            self.quantize_cols_fp8(Operand::B, 0, h2, true, Some((dptr(inp.x, &s), 0, 0)), false, saved)?;
            let (dw1, rest) = (dptr(grads.dw1, &s), dx_by_movers.then_some(rest));
            return self.wgrad_fp8::<W>(dz_op, (2 * i2, h2), dw1, acc, saved, rest);
        }
        let sh = (dptr(&self.work.sh, &s), ws_rows, i2);
        let dys = (dptr(&self.work.dys, &s), ws_rows, h2);
        if dw2_gathers {
            // dy's rows gathered by dW2's producer from the tokens the dh kernel read (dy, or its dequantized codes)
            self.wgrad(dys, sh, grads.dw2, saved, acc, None, Some(WgradSrc::A(dy_p)))?;
        } else {
            self.wgrad(dys, sh, grads.dw2, saved, acc, dx_by_movers.then_some(first), None)?;
        }
        if dw1_codes {
            // the forward's codes of x (quantized again when z was saved: the same codes), in bf16, expert order
            if !x_coded {
                self.quantize_tokens(inp.x, t, saved, true)?;
            }
            self.dequantize_tokens(xs.0, saved)?;
        }
        let dz = (dptr(&self.work.dz, &s), ws_rows, 2 * i2);
        if dw1_gathers {
            // x's rows gathered by dW1's producer from the layer's input (`xs` only sizes B's unused tensor map)
            self.wgrad(dz, (xs.0, xs.1, h2), grads.dw1, saved, acc, None, Some(WgradSrc::B(dptr(inp.x, &s))))?;
        } else {
            self.wgrad(dz, (xs.0, xs.1, h2), grads.dw1, saved, acc, dx_by_movers.then_some(rest), None)?;
        }
        Ok(())
    }

    /// Whether the last forward saw an expert id outside -1..E: `Err(Error::InvalidArgument)` naming the
    /// problem if it did (then that forward, and every backward of its [`Saved`], wrote nothing), `Ok` if it did
    /// not or no forward ran yet. Synchronises the stream: a check for tests, debugging or a once-per-step
    /// guard, not for the hot path. [`Saved::check`] asks the same of one particular forward. `Err(Error::Timeout)`
    /// if a bounded device wait of that forward's calls expired instead (the overlapped gather's or the
    /// persistent forward's; it cannot with every block resident): their outputs are not to be used.
    pub fn routing_error(&self) -> Result<()> {
        match &self.last_error {
            Some(w) => check_word(&self.gpu, w, self.cfg.experts),
            None => Ok(()),
        }
    }
}

/// The token rows a weight gradient's producer warpgroup gathers an operand from ([`MoeLayer::wgrad`]).
#[derive(Clone, Copy)]
enum WgradSrc {
    /// A's rows (dy's, for dW2).
    A(u64),
    /// B's rows (x's, for dW1).
    B(u64),
}

/// A combine cut into tokens 0..n and n..: the same sums (each token's rows and order unchanged), the second
/// part's token-indexed pointers (slot_row, w, out) advanced by n tokens.
fn split_combine(c: &Combine, n: usize) -> (Combine, Combine) {
    let n = (n as u32).min(c.tokens);
    let (k, cols) = (c.k as u64, c.cols as u64);
    let adv = |p: u64, bytes: u64| if p == 0 { 0 } else { p + n as u64 * bytes };
    let second = Combine {
        slot_row: adv(c.slot_row, 4 * k),
        w: adv(c.w, 4 * k),
        out: adv(c.out, 2 * cols),
        tokens: c.tokens - n,
        ..*c
    };
    (Combine { tokens: n, ..*c }, second)
}

/// Read a routing error word (synchronises).
fn check_word(gpu: &Gpu, word: &CudaSlice<u32>, experts: usize) -> Result<()> {
    let w = gpu.download(word)?[0];
    if w == params::ROUTE_TIMEOUT {
        return Err(Error::Timeout {
            rank: 0,
            phase: "the routing's grid barrier (its blocks not all resident)",
            timeout_ms: crate::route::ROUTE_TIMEOUT_NS / 1_000_000,
        });
    }
    if w == params::FUSED_TIMEOUT {
        return Err(Error::Timeout {
            rank: 0,
            phase: "a GEMM's wait for an m-tile's rows (overlapped gather or persistent forward)",
            timeout_ms: FUSED_TIMEOUT_NS / 1_000_000,
        });
    }
    if w != 0 {
        return Err(Error::InvalidArgument(format!(
            "topk_ids holds an expert id outside -1..E (E = {experts}); nothing was written"
        )));
    }
    Ok(())
}

impl Saved {
    /// Per-expert row counts of the forward (synchronises; for tests).
    pub fn expert_counts(&self, gpu: &Gpu) -> Result<Vec<u32>> {
        gpu.download(&self.counts)
    }

    /// Whether the forward that returned this saw an expert id outside -1..E: `Err(Error::InvalidArgument)`
    /// ("topk_ids holds an expert id outside -1..E (E = ..); nothing was written") if it did; then that forward
    /// and every backward of this `Saved` wrote nothing. Synchronises `gpu`'s stream (the layer's GPU).
    /// `Err(Error::Timeout)` if a bounded device wait of the forward or of a backward of this `Saved` expired
    /// (see [`MoeLayer::routing_error`]); the kernels after it left y, dx, dtopk, dW1 and dW2 unwritten.
    pub fn check(&self, gpu: &Gpu) -> Result<()> {
        check_word(gpu, &self.error, self.experts)
    }
}

/// The kernel a layer launch runs for the tile configuration `kernel` when its mover warps copy rows (`copy`:
/// `a_copy` set): the `_mv` form (the overlapped gather of the kernel's own A), or with `side` (`copy_cols` set)
/// the side copy's `grouped_gemm_bt_bf16_cpx` (rows of another operand, waited for by nobody); `kernel` itself
/// without movers. A configuration with no such form is an `InvalidArgument`.
fn movers_variant(kernel: &'static str, copy: bool, side: bool) -> Result<&'static str> {
    Ok(match (copy, side, kernel) {
        (false, _, k) => k,
        (true, true, "grouped_gemm_bt_bf16" | "grouped_gemm_bt_bf16_mc" | "grouped_gemm_bt_bf16_mcb") => {
            "grouped_gemm_bt_bf16_cpx"
        }
        (true, false, "grouped_gemm_swiglu" | "grouped_gemm_swiglu_mc" | "grouped_gemm_swiglu_mcb") => {
            "grouped_gemm_swiglu_mv"
        }
        (true, false, "grouped_gemm_swiglu_ew7") => "grouped_gemm_swiglu_ew7_mv",
        (true, _, k) => return Err(Error::InvalidArgument(format!("{k}: no variant with the overlapped gather"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's bytes: the six buffers of routed rows and the rest under 1% at Qwen3-30B-A3B with 16384
    /// tokens (~2.8 GB, the README's figure); a configuration that fails validation is refused, not counted.
    #[test]
    fn the_workspace_bytes_are_its_routed_rows_and_little_else() {
        let c = LayerConfig::bf16(2048, 768, 128, 8, 16384, Save::InputsOnly);
        let b = c.workspace_bytes().unwrap();
        let rows = 16384 * 8 * (3 * 2048 + 2 * 768 + 2 * 1536) * 2;
        assert!(b > rows && b < rows + rows / 100, "{b} bytes against {rows} in routed rows");
        assert!((2_800_000_000..2_850_000_000).contains(&b), "{b}");
        assert!(LayerConfig { max_tokens: 0, ..c }.workspace_bytes().is_err());
        assert!(LayerConfig { max_tokens: 1 << 40, ..c }.workspace_bytes().is_err());
    }

    /// Every kernel a layer launch can end at (tile configuration, then movers, then the walk) is one the module
    /// exports, for each launch site's configurations with and without movers and the run-time walk; the walk's
    /// `_dyn` forms where they exist, the movers' forms for the launches that have movers.
    #[test]
    fn every_launch_name_is_a_kernel_of_the_module() {
        use crate::gemm::sched_name;
        let exists = |k: &str| megamoe_kernels::manifest::find(k).is_some();
        let mut seen = 0;
        for c in crate::tiles::CONFIGS {
            for (copy, side) in [(false, false), (true, false), (true, true)] {
                let Ok(k) = movers_variant(c.kernel, copy, side) else {
                    // only launches the layer makes have movers: the SwiGLU GEMM1 (overlapped gather) and dx
                    assert!(copy, "{}: no movers asked, yet refused", c.kernel);
                    continue;
                };
                for dynamic in [false, true] {
                    let name = sched_name(dynamic, k);
                    assert!(
                        exists(name),
                        "{} (movers {copy}, side {side}, run-time walk {dynamic}) -> {name}",
                        c.kernel
                    );
                    seen += 1;
                }
            }
        }
        // every configuration without movers (both walks), and the movers' forms beyond
        assert!(seen > 2 * crate::tiles::CONFIGS.len(), "{seen}");
        // the forms the layer relies on
        assert_eq!(
            sched_name(true, movers_variant("grouped_gemm_swiglu_ew7", true, false).unwrap()),
            "grouped_gemm_swiglu_ew7_mv_dyn"
        );
        assert_eq!(
            sched_name(true, movers_variant("grouped_gemm_bt_bf16", true, true).unwrap()),
            "grouped_gemm_bt_bf16_cpx_dyn"
        );
        assert_eq!(
            sched_name(false, movers_variant("grouped_gemm_bt_bf16", true, true).unwrap()),
            "grouped_gemm_bt_bf16_cpx"
        );
        assert_eq!(sched_name(true, "grouped_gemm_swiglu_ew7_gather"), "grouped_gemm_swiglu_ew7_gather_dyn");
        assert_eq!(sched_name(false, "grouped_gemm_swiglu_ew7_gather"), "grouped_gemm_swiglu_ew7_gather");
        assert_eq!(sched_name(true, "grouped_gemm_bt_dswiglu_ew7_gather"), "grouped_gemm_bt_dswiglu_ew7_gather_dyn");
        assert!(movers_variant("grouped_gemm_swiglu_ew7", true, true).is_err());
        assert!(movers_variant("grouped_gemm_bt_bf16", true, false).is_err());
    }

    #[test]
    fn validate_refuses_sizes_whose_products_wrap() {
        let ok = LayerConfig::bf16(2048, 768, 128, 8, 16384, Save::InputsOnly);
        ok.validate().unwrap();
        // max_tokens x top-k wraps to 2 in 64 bits: before, a release build sized the workspace for 2 rows
        let wraps = LayerConfig { top_k: 3, max_tokens: 6_148_914_691_236_517_206, ..ok };
        let m = wraps.validate().unwrap_err().to_string();
        assert!(m.contains("max_tokens 6148914691236517206") && m.contains("top-k 3"), "{m}");
        // 2I wraps
        let m = LayerConfig { intermediate: usize::MAX / 2 + 33, ..ok }.validate().unwrap_err().to_string();
        assert!(m.contains("multiple of 64") || m.contains("too large"), "{m}");
        let m = LayerConfig { intermediate: (usize::MAX / 2 + 1) & !63, ..ok }.validate().unwrap_err().to_string();
        assert!(m.contains("too large"), "{m}");
        // the largest max_tokens that fits, and one more
        let w = 2048;
        let top = (1usize << 32) / w / 8;
        LayerConfig { max_tokens: top - 1, ..ok }.validate().unwrap();
        assert!(LayerConfig { max_tokens: top, ..ok }.validate().is_err());
        // E x 2I x H overflows although every activation size fits (one token)
        let huge = LayerConfig { hidden: 1 << 30, intermediate: 1 << 29, experts: 4096, top_k: 1, max_tokens: 1, ..ok };
        let m = huge.validate().unwrap_err().to_string();
        assert!(m.contains("overflow the address space"), "{m}");
    }

    #[test]
    fn dw1_from_codes_is_a_bf16_weight_gradient_only() {
        let base = LayerConfig::bf16(512, 256, 8, 2, 64, Save::InputsOnly);
        for (mode, ok) in [
            (Fp8Backward::Straight, true),
            (Fp8Backward::Dx, true),
            (Fp8Backward::Wgrad, false),
            (Fp8Backward::DxWgrad, false),
        ] {
            let cfg = LayerConfig { fp8_backward: mode, fp8_dw1_x: Fp8Dw1X::Codes, ..base };
            match cfg.validate() {
                Ok(()) => assert!(ok, "{mode:?} with Fp8Dw1X::Codes passed"),
                Err(e) => {
                    assert!(!ok, "{mode:?}: {e}");
                    assert!(e.to_string().contains("not with FP8 weight gradients"), "{e}");
                }
            }
            // dW1 from the bf16 x goes with every mode
            LayerConfig { fp8_backward: mode, ..base }.validate().unwrap();
        }
        assert_eq!(base.fp8_dw1_x, Fp8Dw1X::Bf16);
    }

    #[test]
    fn an_fp8_dh_needs_bf16_weight_gradients_and_whole_256_column_tiles() {
        let base = LayerConfig { fp8_dh: Fp8Dh::Fp8, ..LayerConfig::bf16(512, 256, 8, 2, 64, Save::InputsOnly) };
        for mode in [Fp8Backward::Straight, Fp8Backward::Dx] {
            LayerConfig { fp8_backward: mode, ..base }.validate().unwrap();
        }
        for mode in [Fp8Backward::Wgrad, Fp8Backward::DxWgrad] {
            let e = LayerConfig { fp8_backward: mode, ..base }.validate().unwrap_err().to_string();
            assert!(e.contains("Fp8Dh::Fp8 is not with FP8 weight gradients"), "{e}");
        }
        let e = LayerConfig { intermediate: 384, fp8_backward: Fp8Backward::Dx, ..base }.validate().unwrap_err();
        assert!(e.to_string().contains("I a multiple of 256 (I = 384)"), "{e}");
        assert_eq!(LayerConfig::bf16(512, 256, 8, 2, 64, Save::InputsOnly).fp8_dh, Fp8Dh::Bf16);
    }

    #[test]
    fn a_split_combine_covers_every_token_once() {
        let c = Combine { y: 1000, w: 0, slot_row: 2000, out: 3000, error: 7, tokens: 10, cols: 64, k: 8, pad: 0 };
        let (a, b) = split_combine(&c, 3);
        assert_eq!((a.tokens, a.slot_row, a.out, a.w), (3, 2000, 3000, 0));
        assert_eq!((b.tokens, b.slot_row, b.out, b.w, b.y, b.error), (7, 2000 + 3 * 32, 3000 + 3 * 128, 0, 1000, 7));
        let (a, b) = split_combine(&Combine { w: 5000, ..c }, 20);
        assert_eq!((a.tokens, b.tokens, b.w), (10, 0, 5000 + 10 * 32));
    }

    #[test]
    fn an_unknown_policy_name_is_an_error_not_a_panic() {
        // a variable of this test's own (the real ones are read by every test of the binary)
        let var = "MEGAMOE_TEST_ONLY_POLICY";
        std::env::set_var(var, "sideways");
        assert_eq!(env_choice(var, Gather::Pass, GATHER_NAMES), Gather::Pass);
        let m = env_problem(var, GATHER_NAMES).unwrap();
        assert!(m.contains("MEGAMOE_TEST_ONLY_POLICY=sideways") && m.contains("in-producer"), "{m}");
        std::env::set_var(var, "in-producer");
        assert_eq!(env_choice(var, Gather::Pass, GATHER_NAMES), Gather::InProducer);
        assert!(env_problem(var, GATHER_NAMES).is_none());
        std::env::remove_var(var);
        assert!(env_problem(var, FORWARD_NAMES).is_none());
    }

    #[test]
    fn the_default_gather_is_valid_with_either_forward() {
        for forward in [Forward::Launches, Forward::Persistent] {
            let c = LayerConfig {
                forward,
                gather: Gather::default_for(forward),
                ..LayerConfig::bf16(2048, 768, 128, 8, 16384, Save::WithZ)
            };
            c.validate().unwrap();
        }
        assert_eq!(Gather::default_for(Forward::Launches), Gather::InProducer);
        let ok = LayerConfig::bf16(2048, 768, 128, 8, 16384, Save::WithZ);
        let persistent = LayerConfig { forward: Forward::Persistent, gather: Gather::InProducer, ..ok };
        assert!(persistent.validate().unwrap_err().to_string().contains("Gather::InProducer"));
    }

    #[test]
    fn configurations_are_checked_with_reasons() {
        let ok = LayerConfig::bf16(2048, 768, 128, 8, 16384, Save::InputsOnly);
        ok.validate().unwrap();
        let why = |c: LayerConfig| c.validate().unwrap_err().to_string();
        assert!(why(LayerConfig { hidden: 2000, ..ok }).contains("hidden size 2000"));
        assert!(why(LayerConfig { intermediate: 100, ..ok }).contains("intermediate size 100"));
        assert!(why(LayerConfig { top_k: 129, ..ok }).contains("top-k 129"));
        assert!(why(LayerConfig { top_k: 0, ..ok }).contains("top-k 0"));
        assert!(why(LayerConfig { experts: 0, ..ok }).contains("0 experts"));
        assert!(why(LayerConfig { max_tokens: 0, ..ok }).contains("max_tokens 0"));
        assert!(why(LayerConfig { max_tokens: 1 << 30, ..ok }).contains("32-bit"));
    }
}
