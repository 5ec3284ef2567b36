//! The grouped-GEMM engine as calls of their own, one per kernel variant the layer launches, on caller-given
//! buffers and device-side routing offsets (the host never learns the counts):
//!
//! - [`grouped_gemm`]: C[rows_e, N] = A[rows_e, K] . op(B_e) in bf16, B K-major ([`BLayout::NK`], kernel
//!   `grouped_gemm_bf16`: the forward's GEMM2, or GEMM1 without its epilogue) or N-major ([`BLayout::KN`],
//!   `grouped_gemm_bt_bf16`: the backward's dx, or dh without its epilogue);
//! - [`grouped_gemm_scatter`]: as `grouped_gemm` (B K-major) with each row stored to a row of C the caller
//!   names, optionally scaled by that row's factor (`grouped_gemm_bf16_scatter`);
//! - [`grouped_gemm_swiglu`]: the forward's GEMM1 with the SwiGLU epilogue (`grouped_gemm_swiglu_ew7` by default,
//!   the cooperative `grouped_gemm_swiglu` by `MEGAMOE_SWIGLU`: [`swiglu_epilogue_warps`]);
//! - [`grouped_gemm_dswiglu`]: the backward's dh GEMM with the SwiGLU-backward epilogue
//!   (`grouped_gemm_bt_dswiglu_ew7` by default, `_ew` or the ping-pong `grouped_gemm_bt_dswiglu` by
//!   `MEGAMOE_DSW`: [`dswiglu_kernel`]);
//! - [`grouped_wgrad`]: the K-grouped weight gradient, f32 or bf16 output ([`WgradElem`]: `grouped_wgrad_f32`,
//!   `grouped_wgrad_bf16`).
//!
//! Each argument block also has a `prepare` method: the arguments checked and the tensor maps encoded once, a
//! [`Prepared`] launch to run any number of times (what a benchmark times). The buffers stay borrowed while
//! it lives.
//!
//! The routing layout is the caller's: `offsets` (u32 [E + 1], nondecreasing, `offsets[0] = 0`,
//! `offsets[E] <= rows_max`) and, for the M-grouped kernels, `tile_offsets` (u32 [E + 1], as
//! [`tile_offsets`] computes them from the counts). They live on the device and cannot be checked without a
//! synchronisation; only offsets as described (made by [`tile_offsets`] from the counts, or by the layer's
//! routing kernels) give the products described. Any other content (offsets past `rows_max`, decreasing,
//! near 2^32; a huge or garbage `tile_offsets`) is still safe: the kernels clamp every tile's rows (in
//! [`grouped_wgrad`] every expert's rows, and its per-expert tensor maps with them) to 0..`rows_max`, walk at
//! most `rows_max / 128 + min(E, rows_max)` m-tiles whatever `tile_offsets[E]` says, and read the SwiGLU
//! backward's weight of a row only for a slot below `weights.len()` (weight 0 otherwise). So the call returns
//! `Ok`, its launch ends in a time bounded by the buffers' sizes, nothing outside the `rows_max` rows of C, h,
//! z, dz and `partial` (the `c_rows` rows of the scattered C; the weight gradients' C) is written, and nothing
//! outside the given buffers is read; only the values written inside the outputs are then unspecified (rows
//! of another expert, rows left unwritten or written twice). Offsets as described are never clamped: their
//! results are bitwise those of the kernels before the clamps existed.
use std::marker::PhantomData;

use cudarc::driver::{CudaSlice, DeviceRepr};
use half::bf16;
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{GroupedGemm, WgradGemm, WgradMaps};

use crate::error::{Context, Error, Result};
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{DeviceTensorMap, Dtype, Swizzle, TiledDesc};
use crate::tiles;
pub use crate::tiles::Dsw;

/// How each expert's B is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BLayout {
    /// `B_e` is [N, K] (K-major): C = A . B_e^T, as the forward reads W1 and W2.
    NK,
    /// `B_e` is [K, N] (N-major): C = A . B_e, as the backward's dgrad reads W2_e and W1_e.
    KN,
}

/// One grouped GEMM.
pub struct GroupedGemmArgs<'a> {
    /// bf16 [rows_max, K]; the rows of expert e at offsets\[e\]..offsets[e + 1].
    pub a: &'a CudaSlice<bf16>,
    /// bf16 [E, N, K] or [E, K, N].
    pub b: &'a CudaSlice<bf16>,
    /// Layout of B.
    pub b_layout: BLayout,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1], m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, N]; rows past offsets\[E\] are not written.
    pub c: &'a mut CudaSlice<bf16>,
    /// Experts.
    pub experts: usize,
    /// Columns N (a multiple of 8).
    pub n: usize,
    /// Contraction K (a multiple of 64).
    pub k: usize,
    /// Rows A and C have room for (>= offsets\[E\]).
    pub rows_max: usize,
}

/// One grouped GEMM (B K-major) with the row-scattered epilogue: row r of the expert-ordered batch (expert e's
/// rows at offsets\[e\]..offsets[e + 1]) goes to row dst_row\[r\] of C, times scale[dst_row\[r\]] when a scale is
/// given: C[dst_row\[r\]] = scale[dst_row\[r\]] * (A_r . B_e^T). With dst_row the rows' routing slots and scale the
/// top-k weights, this is the forward's GEMM2 writing weighted rows in slot order (the combine then sums k
/// consecutive rows). Rows whose destination is at or past `c_rows` are not written; nor is any row of C that
/// no source row names. Destinations should be distinct (two rows on one destination: one of them lands).
pub struct ScatterArgs<'a> {
    /// bf16 [rows_max, K].
    pub a: &'a CudaSlice<bf16>,
    /// bf16 [E, N, K].
    pub b: &'a CudaSlice<bf16>,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1], m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// u32 \[rows_max\]: the row of C each row goes to (device).
    pub dst_row: &'a CudaSlice<u32>,
    /// f32 \[c_rows\]: the factor of each row of C, or `None` (1).
    pub scale: Option<&'a CudaSlice<f32>>,
    /// bf16 [c_rows, N].
    pub c: &'a mut CudaSlice<bf16>,
    /// Rows of C.
    pub c_rows: usize,
    /// Experts.
    pub experts: usize,
    /// Columns N (a multiple of 8).
    pub n: usize,
    /// Contraction K (a multiple of 64).
    pub k: usize,
    /// Rows A has room for (>= offsets\[E\]).
    pub rows_max: usize,
}

/// Launch the row-scattered grouped GEMM on `gpu`'s stream.
pub fn grouped_gemm_scatter(gpu: &Gpu, g: ScatterArgs<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

impl<'a> ScatterArgs<'a> {
    /// Check the arguments and encode the tensor maps (see [`grouped_gemm_scatter`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<Prepared<'a>> {
        let ck = Check { what: "grouped_gemm_scatter", ordinal: gpu.ordinal() };
        ck.multiple("K", self.k, 64)?;
        ck.multiple("N", self.n, 8)?;
        ck.routing(self.experts, self.offsets, Some(self.tile_offsets))?;
        ck.buf("A", self.a, self.rows_max * self.k)?;
        ck.buf("B", self.b, self.experts * self.n * self.k)?;
        ck.buf("dst_row", self.dst_row, self.rows_max)?;
        if let Some(w) = self.scale {
            ck.buf("scale", w, self.c_rows)?;
        }
        ck.buf("C", self.c, self.c_rows * self.n)?;
        if self.rows_max == 0 || self.c_rows == 0 {
            return Ok(nothing(gpu));
        }
        let s = gpu.stream().clone();
        let (e, n, k) = (self.experts, self.n, self.k);
        let map_a = map(gpu, dptr(self.a, &s), self.rows_max, k, kh::GEMM_BM, 64)?;
        let map_b = map(gpu, dptr(self.b, &s), e * n, k, kh::GEMM_BN / 2, 64)?;
        let p = GroupedGemm {
            offsets: dptr(self.offsets, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: dptr(self.c, &s),
            experts: e as u32,
            n: n as u32,
            k: k as u32,
            n_b: n as u32,
            ldc: n as u32,
            n_tiles: (n as u32).div_ceil(kh::GEMM_BN),
            row_slot: dptr(self.dst_row, &s),
            w: self.scale.map_or(0, |w| dptr(w, &s)),
            c_rows: self.c_rows as u32,
            ..zero_gemm()
        };
        m_grouped(gpu, "grouped_gemm_bf16_scatter", map_a, map_b, p, self.rows_max)
    }
}

/// GEMM1 of the forward with the SwiGLU epilogue: for every expert e and its rows, z = A . W1_e^T
/// ([rows, 2I]: the gate g in columns 0..I, the up projection u in I..2I, from W1_e's rows in that order),
/// h = silu(g) * u, computed from g and u rounded to bf16 (as z holds them, and as the backward recomputes h from
/// z); z is stored only when given.
pub struct SwigluArgs<'a> {
    /// bf16 [rows_max, K] (the gathered x: K = H); the rows of expert e at offsets\[e\]..offsets[e + 1].
    pub a: &'a CudaSlice<bf16>,
    /// bf16 [E, 2I, K] (gate rows, then up rows).
    pub w1: &'a CudaSlice<bf16>,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1], m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, I]; rows past offsets\[E\] are not written.
    pub h: &'a mut CudaSlice<bf16>,
    /// bf16 [rows_max, 2I], or `None` not to keep z.
    pub z: Option<&'a mut CudaSlice<bf16>>,
    /// Experts.
    pub experts: usize,
    /// Intermediate size I (a multiple of 64).
    pub i: usize,
    /// Contraction K = H (a multiple of 64).
    pub k: usize,
    /// Rows A, h and z have room for (>= offsets\[E\]).
    pub rows_max: usize,
}

/// The backward's dh GEMM with the SwiGLU-backward epilogue: for every expert e and its rows,
/// dh = dy . W2_e ([rows, I], W2_e stored [K, I], N-major) in f32, then with g, u read from z, s the routing
/// weight of the row's slot and sig = sigmoid(g): dz = [dg | du] with dg = s dh u sig (1 + g (1 - sig)),
/// du = s dh silu(g) (bf16 [rows, 2I]), and the partial sums of dh * silu(g) * u over each 128-column tile of
/// I into `partial` (their sum over the tiles is the gradient of the routing weight).
pub struct DswigluArgs<'a> {
    /// bf16 [rows_max, K] (the gathered dy: K = H).
    pub dy: &'a CudaSlice<bf16>,
    /// bf16 [E, K, I] (W2 as the layer stores it: [E, H, I]).
    pub w2: &'a CudaSlice<bf16>,
    /// bf16 [rows_max, 2I]: z = [g | u] of the forward.
    pub z: &'a CudaSlice<bf16>,
    /// f32 \[slots\]: the routing weight of each slot.
    pub weights: &'a CudaSlice<f32>,
    /// u32 \[rows_max\]: the slot of each row (< slots, read on the device; a row whose slot is at or past
    /// `weights.len()` takes the weight 0).
    pub row_slot: &'a CudaSlice<u32>,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1], m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, 2I]; rows past offsets\[E\] are not written.
    pub dz: &'a mut CudaSlice<bf16>,
    /// f32 [rows_max, dswiglu_partials(I)]; rows past offsets\[E\] are not written.
    pub partial: &'a mut CudaSlice<f32>,
    /// Experts.
    pub experts: usize,
    /// Intermediate size I (a multiple of 64).
    pub i: usize,
    /// Contraction K = H (a multiple of 64).
    pub k: usize,
    /// Rows dy, z, row_slot, dz and partial have room for (>= offsets\[E\]).
    pub rows_max: usize,
}

/// The K-grouped weight gradient: for every expert e, C_e[M, N] = A[rows_e, M]^T . B[rows_e, N] in f32
/// (or added to C_e with `accumulate`), contracting over the expert's rows offsets\[e\]..offsets[e + 1]; an
/// expert without rows gets zeros (or nothing added). dW2 = (s dy)^T h: A = s dy rows (M = H), B = h rows
/// (N = I); dW1 = dz^T x: A = dz rows (M = 2I), B = x rows (N = H).
pub struct WgradArgs<'a, W: WgradElem = f32> {
    /// bf16 [rows_max, M].
    pub a: &'a CudaSlice<bf16>,
    /// bf16 [rows_max, N].
    pub b: &'a CudaSlice<bf16>,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// [E, M, N] in f32 or bf16, every element written (or added to).
    pub c: &'a mut CudaSlice<W>,
    /// Experts.
    pub experts: usize,
    /// M (a multiple of 64).
    pub m: usize,
    /// N (a multiple of 8).
    pub n: usize,
    /// Rows A and B have room for (>= offsets\[E\]).
    pub rows_max: usize,
    /// Add into C instead of overwriting it.
    pub accumulate: bool,
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for half::bf16 {}
}

/// The element type of a weight gradient's output: f32 (gradient accumulation in full precision, as
/// Megatron's `main_grad`) or bf16 (half the bytes written: the gradient PyTorch's autograd gives bf16
/// weights). Each has its kernels (`_mv`: with the backward's dx combine run by the idle producer warps) and
/// the tensor map of its epilogue's boxes.
pub trait WgradElem: DeviceRepr + Copy + 'static + sealed::Sealed {
    /// The kernel.
    const KERNEL: &'static str;
    /// The kernel with the combine role.
    const KERNEL_MV: &'static str;
    /// The kernel whose producer warpgroup gathers A's rows from token rows (`MEGAMOE_WGRAD_GATHER`).
    const KERNEL_GA: &'static str;
    /// The kernel whose producer warpgroup gathers B's rows from token rows (`MEGAMOE_WGRAD_GATHER=2`; single CTAs).
    const KERNEL_GB: &'static str;
    /// The blockwise FP8 kernel ([`crate::fp8::grouped_wgrad_fp8`], 1 x 128 scales on both operands).
    const FP8_KERNEL: &'static str;
    /// The FP8 kernel with B in 128 x 128 blocks, and that with the combine role.
    const FP8B_KERNELS: (&'static str, &'static str);
    /// The tensor-map element type.
    const DTYPE: Dtype;
    /// Rows and columns of the epilogue's boxes.
    const C_BOX: (u32, u32);
    /// "f32" or "bf16", for messages.
    const NAME: &'static str;
}

impl WgradElem for f32 {
    const KERNEL: &'static str = "grouped_wgrad_f32";
    const KERNEL_MV: &'static str = "grouped_wgrad_f32_mv";
    const KERNEL_GA: &'static str = "grouped_wgrad_f32_ga";
    const KERNEL_GB: &'static str = "grouped_wgrad_f32_gb";
    const FP8_KERNEL: &'static str = "grouped_wgrad_fp8_f32";
    const FP8B_KERNELS: (&'static str, &'static str) = ("grouped_wgrad_fp8b_f32", "grouped_wgrad_fp8b_f32_mv");
    const DTYPE: Dtype = Dtype::F32;
    const C_BOX: (u32, u32) = kh::WGRAD_C_BOX;
    const NAME: &'static str = "f32";
}

impl WgradElem for bf16 {
    const KERNEL: &'static str = "grouped_wgrad_bf16";
    const KERNEL_MV: &'static str = "grouped_wgrad_bf16_mv";
    const KERNEL_GA: &'static str = "grouped_wgrad_bf16_ga";
    const KERNEL_GB: &'static str = "grouped_wgrad_bf16_gb";
    const FP8_KERNEL: &'static str = "grouped_wgrad_fp8_bf16";
    const FP8B_KERNELS: (&'static str, &'static str) = ("grouped_wgrad_fp8b_bf16", "grouped_wgrad_fp8b_bf16_mv");
    const DTYPE: Dtype = Dtype::Bf16;
    const C_BOX: (u32, u32) = kh::WGRAD_C_BOX_BF16;
    const NAME: &'static str = "bf16";
}

/// The m-tile offsets (tiles of 128 rows) of per-expert row counts, as `route_scan` computes them.
pub fn tile_offsets(counts: &[u32]) -> Vec<u32> {
    let mut t = vec![0u32; counts.len() + 1];
    for (e, &c) in counts.iter().enumerate() {
        t[e + 1] = t[e] + c.div_ceil(kh::GEMM_BM);
    }
    t
}

/// Columns of the dtopk partial sums [`grouped_gemm_dswiglu`] writes per row: one per column tile of I
/// ([`dswiglu_columns`] wide).
pub fn dswiglu_partials(i: usize) -> usize {
    i.div_ceil(dswiglu_columns())
}

/// Columns of the partial sums a buffer needs for either SwiGLU-backward kernel (the most: one per 128 columns).
/// Workspaces allocated once are sized by it: the kernel, and [`dswiglu_partials`], are chosen per launch.
pub fn dswiglu_partials_max(i: usize) -> usize {
    i.div_ceil(kh::GEMM_DSW_BN as usize)
}

/// Columns of a tile of the SwiGLU-backward kernel this thread launches ([`dswiglu_kernel`]): 128 (ping-pong),
/// 256 (`_ew`), 192 (`_ew7`) or 128 (`_ew7n`).
pub fn dswiglu_columns() -> usize {
    (match dswiglu_kernel().unwrap_or(Dsw::Ew7) {
        Dsw::PingPong => kh::GEMM_DSW_BN,
        Dsw::Ew => kh::GEMM_BN,
        Dsw::Ew7 => kh::GEMM_EW7_BN,
        Dsw::Ew7n => kh::GEMM_EW7N_BN,
    }) as usize
}

thread_local! {
    static DSW: std::cell::Cell<Option<Dsw>> = const { std::cell::Cell::new(None) };
    static SWIGLU_EW: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether GEMM1 + SwiGLU over expert-ordered rows runs as `grouped_gemm_swiglu_ew7` (4 warpgroups, 128 x 192 tiles
/// of z: the epilogue warps store z and h from a bf16 copy of the tile while the consumers run the next; the
/// default since the twenty-first session: 0.95 of cuBLAS alternating at 30B and 235B against the cooperative
/// kernel's 0.89-0.91, and the same time in the layer, docs/RESULTS.md 2026-12-04e). `MEGAMOE_SWIGLU` (read once) =
/// `ew7` or unset on, `coop` off (the cooperative `grouped_gemm_swiglu`, 128 x 256 tiles); another value is an
/// `InvalidArgument`; overridden on a thread by [`with_swiglu_epilogue_warps`]. The persistent forward
/// (`ffn_fused_fwd`) always runs GEMM1 in the cooperative kernel's tiles.
pub fn swiglu_epilogue_warps() -> Result<bool> {
    static ENV: EnvPolicy<bool> = std::sync::OnceLock::new();
    policy(&SWIGLU_EW, &ENV, "MEGAMOE_SWIGLU", &[("coop", false), ("ew7", true), ("", true)])
}

/// Run `f` with the epilogue-warps GEMM1 + SwiGLU on or off for every launch prepared on this thread inside it.
pub fn with_swiglu_epilogue_warps<R>(on: bool, f: impl FnOnce() -> R) -> R {
    with_override(&SWIGLU_EW, on, f)
}

/// Columns of h a GEMM1 + SwiGLU tile covers on this thread: 96 (`grouped_gemm_swiglu_ew7`, or
/// `grouped_gemm_swiglu_ew7_gather` with A gathered by the producer; [`swiglu_epilogue_warps`]) or 128 (the
/// cooperative kernels); also the rows of W1's tensor-map box (the gate rows of a tile, and the up rows).
pub fn swiglu_columns() -> usize {
    if swiglu_epilogue_warps().unwrap_or(false) {
        kh::GEMM_EW7_BN as usize / 2
    } else {
        kh::GEMM_BN as usize / 2
    }
}

/// The SwiGLU-backward kernel this thread launches: `grouped_gemm_bt_dswiglu_ew7` ([`Dsw::Ew7`], the default:
/// 4 warpgroups, 128 x 192 tiles, seven epilogue warps computing the SwiGLU backward from a bf16 copy of dh beside
/// the consumers' next main loop; measured 1.021x / 1.005x the `_ew` kernel in the layer's forward + backward at
/// 30B / 235B, docs/RESULTS.md 2026-12-04d), `grouped_gemm_bt_dswiglu_ew` ([`Dsw::Ew`]: the same with 128 x 256
/// tiles and three epilogue warps), `grouped_gemm_bt_dswiglu_ew7n` ([`Dsw::Ew7n`]: `_ew7` in 128 x 128 tiles, for I
/// up to 256, where it needs as many column tiles as `_ew7`; opt-in: the step 1.003-1.007x at I = 256, inside the
/// noise, docs/RESULTS.md 2026-12-07i) or the ping-pong
/// `grouped_gemm_bt_dswiglu` ([`Dsw::PingPong`]; dh not rounded to bf16 before the SwiGLU backward). `MEGAMOE_DSW`
/// (read once) = `ew7` (or unset), `ew7n`, `ew`, `pp`; another value is an `InvalidArgument`; overridden on a thread
/// by [`with_dswiglu`].
pub fn dswiglu_kernel() -> Result<Dsw> {
    static ENV: EnvPolicy<Dsw> = std::sync::OnceLock::new();
    policy(
        &DSW,
        &ENV,
        "MEGAMOE_DSW",
        &[("ew7", Dsw::Ew7), ("ew7n", Dsw::Ew7n), ("ew", Dsw::Ew), ("pp", Dsw::PingPong), ("", Dsw::Ew7)],
    )
}

/// Run `f` with the SwiGLU-backward kernel `k` for every launch prepared on this thread inside it, whatever
/// `MEGAMOE_DSW` says (tests compare the kernels this way; the previous policy is restored after).
pub fn with_dswiglu<R>(k: Dsw, f: impl FnOnce() -> R) -> R {
    with_override(&DSW, k, f)
}

thread_local! {
    static DY_GATHER: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether the layer's backward with [`crate::layer::Gather::InProducer`] (bf16, the seven-warp SwiGLU backward)
/// gathers dy in the dh GEMM's producer (`grouped_gemm_bt_dswiglu_ew7_gather`: the rows read from the tokens, and
/// written in expert order for dW2 by the tiles of n-tile 0) instead of by the gather pass. Bitwise the same.
/// `MEGAMOE_DY_GATHER` (read once) = `producer` or unset on (the 30B step 1.4-2.2% faster alternating on an H100,
/// docs/RESULTS.md 2026-12-05i), `pass` off; another value is an `InvalidArgument`; overridden on a thread by
/// [`with_dy_gather`].
pub fn dy_gather_in_producer() -> Result<bool> {
    static ENV: EnvPolicy<bool> = std::sync::OnceLock::new();
    policy(&DY_GATHER, &ENV, "MEGAMOE_DY_GATHER", &[("producer", true), ("pass", false), ("", true)])
}

/// Run `f` with dy gathered in the dh GEMM's producer (`true`) or by the pass for every launch prepared on this
/// thread inside it.
pub fn with_dy_gather<R>(in_producer: bool, f: impl FnOnce() -> R) -> R {
    with_override(&DY_GATHER, in_producer, f)
}

thread_local! {
    static WGRAD_GATHER: std::cell::Cell<Option<Option<WgradGather>>> = const { std::cell::Cell::new(None) };
}

/// Which weight gradients of the layer's backward gather an operand's rows in their producer warpgroup
/// ([`wgrad_gather`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WgradGather {
    /// Neither: both read expert-ordered copies (`MEGAMOE_WGRAD_GATHER=0`).
    Off,
    /// dW2 gathers its A (dy's rows) (`1`).
    Dy,
    /// dW2 gathers dy's rows, and dW1 its B (x's rows) (`2`).
    DyX,
}

impl WgradGather {
    /// Whether dW2 gathers dy's rows (where the layer allows it).
    pub fn dy(self) -> bool {
        self != WgradGather::Off
    }

    /// Whether dW1 gathers x's rows (where the layer allows it).
    pub fn x(self) -> bool {
        self == WgradGather::DyX
    }
}

/// Whether the layer's backward, when the dh + SwiGLU backward gathers dy in its producer
/// ([`dy_gather_in_producer`]), gathers dW2's A (dy's rows) in the weight gradient's producer warpgroup too
/// (`grouped_wgrad_*_ga*`: row r of A read from dy's token row `row_slot[r] / top_k` by `cp.async`), so the dh
/// kernel writes no expert-ordered copy of dy (537 MB at 30B, 4.3 GB at 30B with I = 256, k = 16) and dW2 reads
/// none; where the movers sum dx ([`dx_combine`]), that sum then runs whole in dW1's idle warps (with the combine
/// pass neither weight gradient sums). Bitwise the same. Elsewhere (the gather pass of dy, an FP8 dh, FP8 weight
/// gradients) the copy is read as before. With [`WgradGather::DyX`] dW1 gathers its B (x's rows, from the layer's
/// token-ordered input) likewise (`grouped_wgrad_*_gb`, single CTAs), so neither the gather pass of x nor dx's side
/// copy runs (dx its plain kernel); only where z is saved, x's rows are not, the gather is in-producer and the
/// weight gradients are bf16 (the bf16 backward; not the FP8 one); elsewhere as before. Where both gather, no
/// weight gradient has idle warps: dx's sum is the combine pass. `Some(g)` always `g`, `None` as
/// [`wgrad_gather_pays`] decides from the shape in the bf16 backward ([`WgradGather::Off`] in the FP8 one).
/// `MEGAMOE_WGRAD_GATHER` (read once) = `auto` or unset `None`, `0` off, `1` dW2, `2` dW2 and dW1; another value is
/// an `InvalidArgument`; overridden on a thread by [`with_wgrad_gather`].
pub fn wgrad_gather() -> Result<Option<WgradGather>> {
    static ENV: EnvPolicy<Option<WgradGather>> = std::sync::OnceLock::new();
    let table = [
        ("auto", None),
        ("2", Some(WgradGather::DyX)),
        ("1", Some(WgradGather::Dy)),
        ("0", Some(WgradGather::Off)),
        ("", None),
    ];
    policy(&WGRAD_GATHER, &ENV, "MEGAMOE_WGRAD_GATHER", &table)
}

/// Run `f` with the weight gradients' gathers' policy `g` (see [`wgrad_gather`]: `Some` forces one, `None` the shape
/// rule) for every launch prepared on this thread inside it.
pub fn with_wgrad_gather<R>(g: Option<WgradGather>, f: impl FnOnce() -> R) -> R {
    with_override(&WGRAD_GATHER, g, f)
}

/// The weight gradients' gathers the bf16 backward takes at a layer of intermediate size `intermediate` when the
/// policy leaves it to the shape ([`wgrad_gather`] `None`): [`WgradGather::DyX`] for I <= 512, else
/// [`WgradGather::Off`]. The copies they spare (dy's and x's rows in expert order, T k H each, written and read back)
/// weigh 1 / I against the GEMMs' FLOPs (T k H I each), while the gathering producers' `cp.async` rows cost the
/// weight gradients a few percent at any I. Fitted to the step traced both ways (H100, docs/RESULTS.md 2026-12-08a):
/// both gathering faster at (H, I, k) = (4096, 256, 16) by 9%, (1536, 256, 8) 11.7%, (768, 256, 8) 11.4%,
/// (4096, 512, 16) 1.2%; slower at (2048, 768, 8) by 2.8% (dW2's alone 2.7%).
pub fn wgrad_gather_pays(intermediate: usize) -> WgradGather {
    if intermediate <= 512 {
        WgradGather::DyX
    } else {
        WgradGather::Off
    }
}

thread_local! {
    static GATHER_AHEAD: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether the epilogue-warps gathering producers (`grouped_gemm_swiglu_ew7_gather*`,
/// `grouped_gemm_bt_dswiglu_ew7_gather*`) hand tiles over ahead ([`megamoe_kernels::params::GEMM_GATHER_AHEAD`]: the
/// next tile taken and its row tokens read while the current tile's k-steps run, instead of in series between
/// tiles: the counter's and the token load's latency, ~2 us a tile against the ring's ~1.7 us of buffered
/// k-steps). Bitwise the same. `MEGAMOE_GATHER_AHEAD` (read once) = `1` on, `0` or unset off (measured 1-1.5%
/// slower on an H100: GEMM1's gathering kernel 1.34 against 1.32 ms under ncu, the forward 0.987-0.991x
/// alternating, docs/RESULTS.md 2026-12-05i); another value is an `InvalidArgument`; overridden on a thread by
/// [`with_gather_ahead`].
pub fn gather_ahead() -> Result<bool> {
    static ENV: EnvPolicy<bool> = std::sync::OnceLock::new();
    policy(&GATHER_AHEAD, &ENV, "MEGAMOE_GATHER_AHEAD", &[("1", true), ("0", false), ("", false)])
}

/// Run `f` with the gathering producers' look-ahead hand-off on or off for every launch prepared on this thread
/// inside it.
pub fn with_gather_ahead<R>(on: bool, f: impl FnOnce() -> R) -> R {
    with_override(&GATHER_AHEAD, on, f)
}

thread_local! {
    static SIDE_COPY: std::cell::Cell<Option<Option<bool>>> = const { std::cell::Cell::new(None) };
}

/// Whether the backward copies x's rows for dW1 in dx's idle producer warps (the side copy:
/// `grouped_gemm_bt_bf16_cpx`, and `grouped_gemm_fp8w_cpx` with an FP8 dx) where it may (the in-producer gather,
/// z saved): `Some(true)` always, `Some(false)` never (the gather pass before dx, then the plain dx kernel; the
/// same bits), `None` as [`side_copy_pays`] decides from the shape. `MEGAMOE_SIDE_COPY` (read once) = `auto` or
/// unset `None`, `on`, `off`; another value is an `InvalidArgument`; overridden on a thread by [`with_side_copy`].
pub fn side_copy() -> Result<Option<bool>> {
    static ENV: EnvPolicy<Option<bool>> = std::sync::OnceLock::new();
    policy(
        &SIDE_COPY,
        &ENV,
        "MEGAMOE_SIDE_COPY",
        &[("auto", None), ("on", Some(true)), ("off", Some(false)), ("", None)],
    )
}

/// Run `f` with the side copy's policy `v` (see [`side_copy`]) for every backward prepared on this thread inside it.
pub fn with_side_copy<R>(v: Option<bool>, f: impl FnOnce() -> R) -> R {
    with_override(&SIDE_COPY, v, f)
}

/// Whether the side copy pays at a layer of hidden size `hidden` and intermediate size `intermediate`: I >= 768 or
/// H >= 4096. Its bytes (a row of x, read and written a slot) against dx's FLOPs (4 I H a slot) weigh 1 / I, and its
/// three mover warps copy a row at a time, so short rows (small H) keep few bytes in flight: where both are small
/// the copy, not dx's math, sets the kernel's pace. Fitted to the step traced both ways at six shapes (H100,
/// docs/RESULTS.md 2026-12-07f): the gather pass faster at (H, I) = (768, 256) by 18%, (1536, 256) 9%, (2048, 512)
/// 3.5%, and with an FP8 dx at (1536, 256) 3%; the side copy faster at (2048, 768) ~1% (FP8 3%), (2048, 1408)
/// ~1%, (4096, 512) ~5%.
pub fn side_copy_pays(hidden: usize, intermediate: usize) -> bool {
    intermediate >= 768 || hidden >= 4096
}

thread_local! {
    static DX_COMBINE: std::cell::Cell<Option<Option<bool>>> = const { std::cell::Cell::new(None) };
}

/// Whether the backward sums dx over each token's slots in the weight gradients' idle producer warps (the `_mv`
/// kernels: three mover warps a block beside dW2's and dW1's main loops; with [`crate::layer::Gather::InProducer`]
/// or `Overlapped`) where it may: `Some(true)` always, `Some(false)` never (the combine pass `combine_rows` before
/// the weight gradients, which then run without movers; the same sums in the same order, the same bits), `None` as
/// [`dx_combine_in_movers_pays`] decides from the shape (the default: measured 1.14x the movers' step at I = 256,
/// docs/RESULTS.md 2026-12-07i). `MEGAMOE_DX_COMBINE` (read once) = `auto` or unset `None`, `movers` `Some(true)`,
/// `pass` `Some(false)`; another value is an `InvalidArgument`; overridden on a thread by [`with_dx_combine`].
pub fn dx_combine() -> Result<Option<bool>> {
    static ENV: EnvPolicy<Option<bool>> = std::sync::OnceLock::new();
    policy(
        &DX_COMBINE,
        &ENV,
        "MEGAMOE_DX_COMBINE",
        &[("auto", None), ("movers", Some(true)), ("pass", Some(false)), ("", None)],
    )
}

/// Run `f` with dx's combine policy `v` (see [`dx_combine`]) for every backward prepared on this thread inside it.
pub fn with_dx_combine<R>(v: Option<bool>, f: impl FnOnce() -> R) -> R {
    with_override(&DX_COMBINE, v, f)
}

/// Whether dx's combine pays in the weight gradients' mover warps at intermediate size `intermediate`: I >= 512.
/// The movers fetch two slots' 16 bytes a lane at a time (the 40 registers of the producer warpgroup), so they sum
/// at ~0.35-0.42 TB/s of dx rows whatever H (SonicMoE's 7B / 1.4B n=256 and 30B n=512 traces, an H100,
/// docs/RESULTS.md 2026-12-07f), while the weight gradients' FLOPs per dx byte are 3 I: at ~580 TFLOP/s the
/// movers' share takes ~483 / I of the weight gradients' time. At I = 256 they set the kernels' pace (~1.9x; the
/// pass moves the same bytes at ~2.5 TB/s, ~0.3x); at I = 512 they match it; at I = 768 they hide under it.
/// Measured (an H100, docs/RESULTS.md 2026-12-07i, the step alternating): the pass 1.14x the movers at (H, I) =
/// (1536, 256) and 1.14x at (768, 256); level at (2048, 512) (the pass's line 0.981x, the movers' own 0.977x).
pub fn dx_combine_in_movers_pays(intermediate: usize) -> bool {
    intermediate >= 512
}

thread_local! {
    static GEMM_SCHED: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether the single-CTA M-grouped bf16 GEMMs (`grouped_gemm_bf16`, `grouped_gemm_bt_bf16`: GEMM1 plain, GEMM2,
/// dh plain, dx; the epilogue-warps GEMM1 + SwiGLU `grouped_gemm_swiglu_ew7` and `_ew7_mv` and dh + SwiGLU backward
/// `grouped_gemm_bt_dswiglu_ew7`) take their tiles at run time from a grid-wide counter (the `_dyn` kernels; zeroed before each launch in stream order, a memset node under capture) instead of
/// every grid-th tile: the tiles in flight stay the next `grid` of the order however the blocks' paces drift, so
/// fewer experts' weights are read at once. The default since the thirty-second session (docs/RESULTS.md 2026-12-05g):
/// on an H100 at 235B it lifted GEMM1 + SwiGLU from 0.63 to 0.82 of cuBLAS and dx from 0.68 to 0.89 (235B GEMM1's
/// DRAM reads 8.0 -> 6.8 GB, floor 5.1), and it was level at 30B (both cards) and at 235B on the H200. The same
/// bits either way (each tile computed alike by whichever block). The expert-parallel layer's GEMMs take it too
/// (their row-scattered GEMM2 `grouped_gemm_bf16_scatter` included) since the forty-third session, but for the
/// pull dispatch's GEMM1, whose movers pull the rows (static: 1.3-2.8% faster emulated). `MEGAMOE_GEMM_SCHED`
/// (read once) = `dynamic` or unset on, `static` off (every grid-th tile, the walk before); another value is an
/// `InvalidArgument`; overridden on a thread by [`with_gemm_sched`].
pub fn gemm_sched_dynamic() -> Result<bool> {
    static ENV: EnvPolicy<bool> = std::sync::OnceLock::new();
    policy(&GEMM_SCHED, &ENV, "MEGAMOE_GEMM_SCHED", &[("dynamic", true), ("static", false), ("", true)])
}

/// Run `f` with the M-grouped GEMMs' run-time tile counter on or off for every launch prepared on this thread
/// inside it.
pub fn with_gemm_sched<R>(dynamic: bool, f: impl FnOnce() -> R) -> R {
    with_override(&GEMM_SCHED, dynamic, f)
}

/// The kernel a launch site runs for `kernel` (the name after every other choice: clusters, the overlapped
/// gather) under [`gemm_sched_dynamic`], with `p.sched` set to the device's tile counter for a `_dyn` kernel
/// (launch it with `Gpu::launch_counted(p.sched, ..)`). Applied last, so no other variant lookup sees a `_dyn` name.
pub(crate) fn sched_variant(gpu: &Gpu, kernel: &'static str, p: &mut GroupedGemm) -> Result<&'static str> {
    let k = sched_name(gemm_sched_dynamic()?, kernel);
    p.sched = if k.ends_with("_dyn") { gpu.tile_counters() } else { 0 };
    Ok(k)
}

/// The name [`sched_variant`] maps `kernel` to: its `_dyn` form when `dynamic` and it has one, else itself.
pub(crate) fn sched_name(dynamic: bool, kernel: &'static str) -> &'static str {
    match (dynamic, kernel) {
        (true, "grouped_gemm_bf16") => "grouped_gemm_bf16_dyn",
        (true, "grouped_gemm_bf16_scatter") => "grouped_gemm_bf16_scatter_dyn",
        (true, "grouped_gemm_bt_bf16") => "grouped_gemm_bt_bf16_dyn",
        (true, "grouped_gemm_bt_bf16_cpx") => "grouped_gemm_bt_bf16_cpx_dyn",
        (true, "grouped_gemm_swiglu_ew7") => "grouped_gemm_swiglu_ew7_dyn",
        (true, "grouped_gemm_swiglu_ew7_mv") => "grouped_gemm_swiglu_ew7_mv_dyn",
        (true, "grouped_gemm_swiglu_ew7_gather") => "grouped_gemm_swiglu_ew7_gather_dyn",
        (true, "grouped_gemm_bt_dswiglu_ew7") => "grouped_gemm_bt_dswiglu_ew7_dyn",
        (true, "grouped_gemm_bt_dswiglu_ew7_gather") => "grouped_gemm_bt_dswiglu_ew7_gather_dyn",
        (true, "grouped_gemm_bt_dswiglu_ew7n") => "grouped_gemm_bt_dswiglu_ew7n_dyn",
        (true, "grouped_gemm_bt_dswiglu_ew7n_gather") => "grouped_gemm_bt_dswiglu_ew7n_gather_dyn",
        (_, k) => k,
    }
}

/// How the weight gradients' blocks take their tiles: [`WgradSched::Clusters`] (the default since the twenty-sixth
/// session, bf16 weight gradients; the FP8 ones run `Dynamic` under it): pairs of m-tiles (one expert, one n-tile)
/// in 2-CTA clusters sharing B by multicast, taken at run time as `Dynamic` takes tiles (the cluster's leader takes
/// each index from the counter and hands it to its peer), busiest expert first, where the m-tiles (of 128 rows of
/// C_e) are even in number (else as `Dynamic`): at 30B 0-2.4% faster than `Dynamic` in short runs, 1.8-2.6% under
/// sustained (power-capped) load, where it takes fewer joules a launch (docs/RESULTS.md 2026-12-05);
/// [`WgradSched::Dynamic`] the next tile of a grid-wide counter whenever a block is done with one, the experts
/// busiest first (up to 256 experts; more in expert order), so the tiles of busy experts (a tile costs its
/// expert's rows) spread over the blocks and the last tiles taken are short; [`WgradSched::Static`] every grid-th
/// tile (the schedule before the twenty-first session: with skewed routing, Zipf 1.0 over 128 experts, dW2 16% and
/// dW1 10% slower than with uniform routing). The same bits in every form. `MEGAMOE_WGRAD_SCHED` (read once) =
/// `clusters` (or unset), `dynamic` or `static`; another value is an `InvalidArgument`; overridden on a thread by
/// [`with_wgrad_sched`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WgradSched {
    Dynamic,
    Static,
    Clusters,
}

thread_local! {
    static WGRAD_SCHED: std::cell::Cell<Option<WgradSched>> = const { std::cell::Cell::new(None) };
}

/// The weight gradients' tile schedule on this thread ([`WgradSched`]).
pub fn wgrad_sched() -> Result<WgradSched> {
    static ENV: EnvPolicy<WgradSched> = std::sync::OnceLock::new();
    let table = [
        ("dynamic", WgradSched::Dynamic),
        ("static", WgradSched::Static),
        ("clusters", WgradSched::Clusters),
        ("", WgradSched::Clusters),
    ];
    policy(&WGRAD_SCHED, &ENV, "MEGAMOE_WGRAD_SCHED", &table)
}

/// Run `f` with the weight gradients' tile schedule `k` for every launch prepared on this thread inside it.
pub fn with_wgrad_sched<R>(k: WgradSched, f: impl FnOnce() -> R) -> R {
    with_override(&WGRAD_SCHED, k, f)
}

/// A kernel choice read once from its environment variable (or the message naming a value it does not know).
pub(crate) type EnvPolicy<T> = std::sync::OnceLock<std::result::Result<T, String>>;

/// A kernel choice: the thread's override `key` if one is set (the `with_*` functions), else environment variable
/// `var` looked up in `table` (name, choice; "" is the unset variable's) once per process and kept in `env`;
/// another value is an `InvalidArgument` naming the table's names.
pub(crate) fn policy<T: Copy + Send + Sync + 'static>(
    key: &'static std::thread::LocalKey<std::cell::Cell<Option<T>>>,
    env: &'static EnvPolicy<T>,
    var: &str,
    table: &[(&str, T)],
) -> Result<T> {
    if let Some(v) = key.with(|c| c.get()) {
        return Ok(v);
    }
    env.get_or_init(|| {
        let v = std::env::var(var).unwrap_or_default();
        table.iter().find(|(name, _)| *name == v).map(|&(_, t)| t).ok_or_else(|| {
            let names: Vec<&str> = table.iter().map(|&(name, _)| name).filter(|n| !n.is_empty()).collect();
            let (last, rest) = names.split_last().expect("a policy names its values");
            let expected = if rest.is_empty() { last.to_string() } else { format!("{} or {last}", rest.join(", ")) };
            format!("{var}={v}: expected {expected}")
        })
    })
    .clone()
    .map_err(Error::InvalidArgument)
}

/// Run `f` with the thread's policy override `key` set to `v`, the previous override restored after (on unwinding
/// too): the `with_*` functions of the kernel choices.
pub(crate) fn with_override<T: Copy + 'static, R>(
    key: &'static std::thread::LocalKey<std::cell::Cell<Option<T>>>,
    v: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static std::thread::LocalKey<std::cell::Cell<Option<T>>>, Option<T>);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.with(|c| c.set(self.1));
        }
    }
    let _restore = Restore(key, key.with(|c| c.replace(Some(v))));
    f()
}

/// Launch one grouped GEMM on `gpu`'s stream.
pub fn grouped_gemm(gpu: &Gpu, g: GroupedGemmArgs<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

/// Launch GEMM1 with the SwiGLU epilogue on `gpu`'s stream.
pub fn grouped_gemm_swiglu(gpu: &Gpu, g: SwigluArgs<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

/// Launch the dh GEMM with the SwiGLU-backward epilogue on `gpu`'s stream.
pub fn grouped_gemm_dswiglu(gpu: &Gpu, g: DswigluArgs<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

/// Launch the K-grouped weight gradient on `gpu`'s stream.
pub fn grouped_wgrad<W: WgradElem>(gpu: &Gpu, g: WgradArgs<'_, W>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

enum Block {
    /// Nothing to launch (no rows).
    Nothing,
    /// Zero `bytes` bytes at `ptr` (a weight gradient of no rows, overwritten).
    Zero { ptr: u64, bytes: usize },
    /// An M-grouped kernel.
    M(&'static str, Launch, GroupedGemm),
    /// A K-grouped kernel.
    K(&'static str, Launch, WgradGemm),
}

/// A grouped GEMM with its arguments checked and its tensor maps encoded: [`Prepared::launch`] enqueues it on
/// the GPU it was prepared for, as often as wanted. It borrows the argument buffers (the outputs mutably)
/// for its lifetime.
pub struct Prepared<'a> {
    ordinal: usize,
    block: Block,
    _maps: Vec<DeviceTensorMap>,
    _bufs: PhantomData<&'a mut ()>,
}

impl Prepared<'_> {
    /// The kernel it launches (`None` when there is no kernel to run: no rows).
    pub fn kernel(&self) -> Option<&'static str> {
        match self.block {
            Block::M(k, ..) => Some(k),
            Block::K(k, ..) => Some(k),
            _ => None,
        }
    }

    /// Enqueue the GEMM on `gpu`'s stream (the GPU it was prepared on).
    pub fn launch(&self, gpu: &Gpu) -> Result<()> {
        if gpu.ordinal() != self.ordinal {
            return Err(Error::InvalidArgument(format!(
                "a grouped GEMM prepared on device {} launched on device {}",
                self.ordinal,
                gpu.ordinal()
            )));
        }
        match &self.block {
            Block::Nothing => Ok(()),
            Block::Zero { ptr, bytes } => {
                // SAFETY: `ptr .. ptr + bytes` is the borrowed output's allocation.
                unsafe { cudarc::driver::result::memset_d8_async(*ptr, 0, *bytes, gpu.stream().cu_stream()) }
                    .ctx(|| format!("zeroing {bytes} bytes"))
            }
            // SAFETY (both): the block matches the kernel; its buffers were checked against the shapes in
            // `prepare` and stay borrowed while `self` lives; rows are clamped on the device to the block's
            // `rows_max` (the rows every buffer was checked to hold) and the m-tile walk to its bound, whatever
            // the device offsets hold; the tensor maps live in `self` and are freed in stream order after the
            // last launch.
            // a `_dyn` kernel's tile counter (`p.sched`) zeroed first, in stream order
            Block::M(kernel, cfg, p) => unsafe { gpu.launch_counted(p.sched, kernel, *cfg, p) },
            Block::K(kernel, cfg, p) => unsafe { launch_wgrad(gpu, kernel, *cfg, p) },
        }
    }
}

/// Launch a weight-gradient kernel after `wgrad_expert_maps` (its per-expert tensor maps, `p.expert_maps`), its
/// run-time tile counter (`p.sched`, the device's) zeroed in between in stream order (a memset node under capture;
/// `Gpu::launch_counted`), so each launch starts from zero whatever came before and reads its own maps.
/// SAFETY: as `Gpu::launch` for `kernel` and `p`; `p.map_a` / `p.map_b` are whole-buffer maps of the buffers at
/// `p.a_base` / `p.b_base` (rows of 2 M and 2 N bytes).
pub(crate) unsafe fn launch_wgrad(gpu: &Gpu, kernel: &'static str, cfg: Launch, p: &WgradGemm) -> Result<()> {
    let maps = WgradMaps {
        template: [p.map_a, p.map_b],
        base: [p.a_base, p.b_base],
        offsets: p.offsets,
        out: p.expert_maps,
        error: p.error,
        row_bytes: [2 * p.m, 2 * p.n],
        experts: p.experts,
        rows_max: p.rows_max,
    };
    let t = kh::WGRAD_MAPS_THREADS;
    let build = Launch::new((2 * p.experts).div_ceil(t).max(1), t, 0);
    let (kernel, mut cfg) = (if p.clusters != 0 { wgrad_cluster_kernel(kernel)? } else { kernel }, cfg);
    if p.clusters != 0 {
        // whole clusters, as many as fit at once (any even grid: the pairs are taken at run time)
        let fit = gpu.max_active_clusters(kernel, cfg)?;
        cfg = Launch::new(cfg.grid.0.min(2 * fit), cfg.block, cfg.smem);
    }
    gpu.launch_counted_after(("wgrad_expert_maps", build, &maps), p.sched, kernel, cfg, p)
}

/// The 2-CTA cluster form of weight-gradient kernel `kernel` ([`WgradSched::Clusters`]; a cluster form maps to
/// itself).
fn wgrad_cluster_kernel(kernel: &'static str) -> Result<&'static str> {
    Ok(match kernel {
        "grouped_wgrad_f32" | "grouped_wgrad_f32_mc" => "grouped_wgrad_f32_mc",
        "grouped_wgrad_f32_mv" | "grouped_wgrad_f32_mv_mc" => "grouped_wgrad_f32_mv_mc",
        "grouped_wgrad_bf16" | "grouped_wgrad_bf16_mc" => "grouped_wgrad_bf16_mc",
        "grouped_wgrad_bf16_mv" | "grouped_wgrad_bf16_mv_mc" => "grouped_wgrad_bf16_mv_mc",
        "grouped_wgrad_f32_ga" | "grouped_wgrad_f32_ga_mc" => "grouped_wgrad_f32_ga_mc",
        "grouped_wgrad_bf16_ga" | "grouped_wgrad_bf16_ga_mc" => "grouped_wgrad_bf16_ga_mc",
        k => return Err(Error::InvalidArgument(format!("{k} has no 2-CTA cluster form"))),
    })
}

/// The tile counter a weight-gradient launch on `gpu` uses under this thread's [`wgrad_sched`] (0: static).
pub(crate) fn wgrad_sched_counter(gpu: &Gpu) -> Result<u64> {
    Ok(match wgrad_sched()? {
        WgradSched::Dynamic | WgradSched::Clusters => gpu.tile_counters(),
        WgradSched::Static => 0,
    })
}

/// Argument checks shared by the calls: a message naming the call and the first problem.
pub(crate) struct Check {
    pub(crate) what: &'static str,
    pub(crate) ordinal: usize,
}

impl Check {
    pub(crate) fn bad<T>(&self, s: String) -> Result<T> {
        Err(Error::InvalidArgument(format!("{}: {s}", self.what)))
    }

    /// `buf` is on the GPU and holds `want` elements, fewer than 2^32 (the kernels index in unsigned 32 bits).
    pub(crate) fn buf<T: DeviceRepr>(&self, name: &str, buf: &CudaSlice<T>, want: usize) -> Result<()> {
        if buf.len() != want {
            return self.bad(format!("{name} has {} elements, the shapes need {want}", buf.len()));
        }
        if want >= 1 << 32 {
            return self.bad(format!("{name} has {want} elements, 2^32 or more (the kernels index in 32 bits)"));
        }
        if buf.ordinal() != self.ordinal {
            return self.bad(format!(
                "{name} lives on device {}, the call is on device {}",
                buf.ordinal(),
                self.ordinal
            ));
        }
        Ok(())
    }

    pub(crate) fn multiple(&self, name: &str, v: usize, of: usize) -> Result<()> {
        if v == 0 || v % of != 0 {
            return self.bad(format!("{name} = {v} must be a positive multiple of {of}"));
        }
        Ok(())
    }

    pub(crate) fn routing(
        &self,
        experts: usize,
        offsets: &CudaSlice<u32>,
        tiles: Option<&CudaSlice<u32>>,
    ) -> Result<()> {
        if experts == 0 {
            return self.bad("no experts".into());
        }
        self.buf("offsets", offsets, experts + 1)?;
        if let Some(t) = tiles {
            self.buf("tile_offsets", t, experts + 1)?;
        }
        Ok(())
    }
}

fn map(gpu: &Gpu, addr: u64, rows: usize, cols: usize, box_rows: u32, box_cols: u32) -> Result<DeviceTensorMap> {
    let d = TiledDesc::row_major_2d(Dtype::Bf16, addr, rows as u64, cols as u64, box_rows, box_cols, Swizzle::B128);
    DeviceTensorMap::new(gpu, d)
}

/// The M-grouped launch: maps of A ([rows_max, K], boxes of 128 rows x 64) and B, the grid; `p.rows_max` set
/// (every buffer of the call holds `rows_max` rows).
fn m_grouped<'a>(
    gpu: &Gpu,
    kernel: &'static str,
    map_a: DeviceTensorMap,
    map_b: DeviceTensorMap,
    mut p: GroupedGemm,
    rows_max: usize,
) -> Result<Prepared<'a>> {
    p.map_a = map_a.ptr(gpu);
    p.map_b = map_b.ptr(gpu);
    // the rows A and the outputs hold: every tile's rows are clamped to them on the device
    p.rows_max = rows_max as u32;
    let kernel = kernel_for(gpu, kernel, &p)?;
    let kernel = sched_variant(gpu, kernel, &mut p)?;
    Ok(Prepared {
        ordinal: gpu.ordinal(),
        block: Block::M(kernel, m_grouped_launch(gpu, kernel, rows_max, p.experts as usize, p.n_tiles)?, p),
        _maps: vec![map_a, map_b],
        _bufs: PhantomData,
    })
}

fn nothing<'a>(gpu: &Gpu) -> Prepared<'a> {
    Prepared { ordinal: gpu.ordinal(), block: Block::Nothing, _maps: Vec::new(), _bufs: PhantomData }
}

impl<'a> GroupedGemmArgs<'a> {
    /// Check the arguments and encode the tensor maps (see [`grouped_gemm`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<Prepared<'a>> {
        let ck = Check { what: "grouped_gemm", ordinal: gpu.ordinal() };
        ck.multiple("K", self.k, 64)?;
        ck.multiple("N", self.n, 8)?;
        ck.routing(self.experts, self.offsets, Some(self.tile_offsets))?;
        ck.buf("A", self.a, self.rows_max * self.k)?;
        ck.buf("B", self.b, self.experts * self.n * self.k)?;
        ck.buf("C", self.c, self.rows_max * self.n)?;
        if self.rows_max == 0 {
            return Ok(nothing(gpu));
        }
        let s = gpu.stream().clone();
        let (e, n, k) = (self.experts, self.n, self.k);
        let map_a = map(gpu, dptr(self.a, &s), self.rows_max, k, kh::GEMM_BM, 64)?;
        let (map_b, kernel, n_b) = match self.b_layout {
            BLayout::NK => (map(gpu, dptr(self.b, &s), e * n, k, kh::GEMM_BN / 2, 64)?, "grouped_gemm_bf16", n),
            BLayout::KN => (map(gpu, dptr(self.b, &s), e * k, n, 64, 64)?, "grouped_gemm_bt_bf16", k),
        };
        // whole 64-row groups of an expert are stored through the copy engine (C is [rows_max, N], ldc = N)
        let map_c = map(gpu, dptr(self.c, &s), self.rows_max, n, kh::GEMM_C_BOX.0, kh::GEMM_C_BOX.1)?;
        let p = GroupedGemm {
            offsets: dptr(self.offsets, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: dptr(self.c, &s),
            map_c: map_c.ptr(gpu),
            experts: e as u32,
            n: n as u32,
            k: k as u32,
            n_b: n_b as u32,
            ldc: n as u32,
            n_tiles: (n as u32).div_ceil(kh::GEMM_BN),
            ..zero_gemm()
        };
        let mut prepared = m_grouped(gpu, kernel, map_a, map_b, p, self.rows_max)?;
        prepared._maps.push(map_c);
        Ok(prepared)
    }
}

impl<'a> SwigluArgs<'a> {
    /// Check the arguments and encode the tensor maps (see [`grouped_gemm_swiglu`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<Prepared<'a>> {
        let ck = Check { what: "grouped_gemm_swiglu", ordinal: gpu.ordinal() };
        ck.multiple("K", self.k, 64)?;
        ck.multiple("I", self.i, 64)?;
        ck.routing(self.experts, self.offsets, Some(self.tile_offsets))?;
        let (e, i, k, rows) = (self.experts, self.i, self.k, self.rows_max);
        ck.buf("A", self.a, rows * k)?;
        ck.buf("W1", self.w1, e * 2 * i * k)?;
        ck.buf("h", self.h, rows * i)?;
        if let Some(z) = &self.z {
            ck.buf("z", z, rows * 2 * i)?;
        }
        if rows == 0 {
            return Ok(nothing(gpu));
        }
        let s = gpu.stream().clone();
        let map_a = map(gpu, dptr(self.a, &s), rows, k, kh::GEMM_BM, 64)?;
        // 128 (or 96) gate rows and the matching up rows per tile
        let cols = swiglu_columns();
        let map_b = map(gpu, dptr(self.w1, &s), e * 2 * i, k, cols as u32, 64)?;
        let p = GroupedGemm {
            offsets: dptr(self.offsets, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: dptr(self.h, &s),
            z: self.z.as_ref().map_or(0, |z| dptr(*z, &s)),
            experts: e as u32,
            n: i as u32,
            k: k as u32,
            n_b: 2 * i as u32,
            ldc: i as u32,
            n_tiles: i.div_ceil(cols) as u32,
            ..zero_gemm()
        };
        // whole 64-row groups of an expert leave through the copy engine: h [rows_max, I], z [rows_max, 2I]
        let (bx, by) = kh::GEMM_C_BOX;
        let map_h = map(gpu, p.c, rows, i, bx, by)?;
        let map_z = match self.z {
            Some(_) => Some(map(gpu, p.z, rows, 2 * i, bx, by)?),
            None => None,
        };
        let p = GroupedGemm { map_c: map_h.ptr(gpu), map_z: map_z.as_ref().map_or(0, |m| m.ptr(gpu)), ..p };
        let mut prepared = m_grouped(gpu, "grouped_gemm_swiglu", map_a, map_b, p, rows)?;
        prepared._maps.push(map_h);
        prepared._maps.extend(map_z);
        Ok(prepared)
    }
}

impl<'a> DswigluArgs<'a> {
    /// Check the arguments and encode the tensor maps (see [`grouped_gemm_dswiglu`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<Prepared<'a>> {
        let ck = Check { what: "grouped_gemm_dswiglu", ordinal: gpu.ordinal() };
        ck.multiple("K", self.k, 64)?;
        ck.multiple("I", self.i, 64)?;
        ck.routing(self.experts, self.offsets, Some(self.tile_offsets))?;
        let (e, i, k, rows) = (self.experts, self.i, self.k, self.rows_max);
        ck.buf("dy", self.dy, rows * k)?;
        ck.buf("W2", self.w2, e * k * i)?;
        ck.buf("z", self.z, rows * 2 * i)?;
        ck.buf("row_slot", self.row_slot, rows)?;
        ck.buf("dz", self.dz, rows * 2 * i)?;
        ck.buf("partial", self.partial, rows * dswiglu_partials(i))?;
        if self.weights.len() >= 1 << 31 || self.weights.ordinal() != gpu.ordinal() {
            return ck.bad("weights must be on the call's device with fewer than 2^31 slots".into());
        }
        if rows == 0 {
            return Ok(nothing(gpu));
        }
        let s = gpu.stream().clone();
        let map_a = map(gpu, dptr(self.dy, &s), rows, k, kh::GEMM_BM, 64)?;
        let map_b = map(gpu, dptr(self.w2, &s), e * k, i, 64, 64)?;
        // whole 64-row groups of an expert load g, u and store dg, du through the copy engine (64 x 64 boxes)
        let (box_rows, box_cols) = kh::GEMM_C_BOX;
        let map_z = map(gpu, dptr(self.z, &s), rows, 2 * i, box_rows, box_cols)?;
        let map_dz = map(gpu, dptr(self.dz, &s), rows, 2 * i, box_rows, box_cols)?;
        let p = GroupedGemm {
            offsets: dptr(self.offsets, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: dptr(self.dz, &s),
            map_c: map_dz.ptr(gpu),
            z: dptr(self.z, &s),
            map_z: map_z.ptr(gpu),
            experts: e as u32,
            n: i as u32,
            k: k as u32,
            n_b: k as u32,
            ldc: 2 * i as u32,
            n_tiles: dswiglu_partials(i) as u32,
            w: dptr(self.weights, &s),
            w_len: self.weights.len() as u32,
            row_slot: dptr(self.row_slot, &s),
            partial: dptr(self.partial, &s),
            ..zero_gemm()
        };
        let mut prepared = m_grouped(gpu, "grouped_gemm_bt_dswiglu", map_a, map_b, p, rows)?;
        prepared._maps.extend([map_z, map_dz]);
        Ok(prepared)
    }
}

impl<'a, W: WgradElem> WgradArgs<'a, W> {
    /// Check the arguments and encode the tensor maps (see [`grouped_wgrad`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<Prepared<'a>> {
        let ck = Check { what: "grouped_wgrad", ordinal: gpu.ordinal() };
        ck.multiple("M", self.m, 64)?;
        ck.multiple("N", self.n, 8)?;
        ck.routing(self.experts, self.offsets, None)?;
        let (e, m, n, rows) = (self.experts, self.m, self.n, self.rows_max);
        ck.buf("A", self.a, rows * m)?;
        ck.buf("B", self.b, rows * n)?;
        // C is indexed per expert in 32 bits (m * n < 2^31), across experts in 64; its tensor map's row
        // coordinate e M + row is an i32 (E M < 2^31)
        if self.c.len() != e * m * n || m * n >= 1 << 31 || e * m >= 1 << 31 || self.c.ordinal() != gpu.ordinal() {
            return ck.bad(format!(
                "C must be {} [E, M, N] = {e} x {m} x {n} (each expert's M x N and E x M below 2^31) on device {}; it has \
                 {} elements on device {}",
                W::NAME,
                gpu.ordinal(),
                self.c.len(),
                self.c.ordinal()
            ));
        }
        let s = gpu.stream().clone();
        if rows == 0 {
            if self.accumulate {
                return Ok(nothing(gpu));
            }
            let block = Block::Zero { ptr: dptr(self.c, &s), bytes: self.c.len() * std::mem::size_of::<W>() };
            return Ok(Prepared { ordinal: gpu.ordinal(), block, _maps: Vec::new(), _bufs: PhantomData });
        }
        let map_a = map(gpu, dptr(self.a, &s), rows, m, 64, 64)?;
        let map_b = map(gpu, dptr(self.b, &s), rows, n, 64, 64)?;
        let map_c = DeviceTensorMap::new(gpu, wgrad_c_desc::<W>(dptr(self.c, &s), e * m, n))?;
        let maps = [map_a.ptr(gpu), map_b.ptr(gpu), map_c.ptr(gpu)];
        let (offsets, c) = (dptr(self.offsets, &s), dptr(self.c, &s));
        let bases = [dptr(self.a, &s), dptr(self.b, &s)];
        let (p, launch) = wgrad_launch(gpu, maps, bases, offsets, c, 0, e, (m, n, rows), self.accumulate)?;
        // the kernel that runs (the 2-CTA cluster form under `WgradSched::Clusters`), as `kernel()` reports it
        let kernel = if p.clusters != 0 { wgrad_cluster_kernel(W::KERNEL)? } else { W::KERNEL };
        Ok(Prepared {
            ordinal: gpu.ordinal(),
            block: Block::K(kernel, launch, p),
            _maps: vec![map_a, map_b, map_c],
            _bufs: PhantomData,
        })
    }
}

thread_local! {
    static CLUSTERS: std::cell::Cell<Option<(bool, bool)>> = const { std::cell::Cell::new(None) };
}

/// Run `f` with the 2-CTA cluster variants sharing A (`share_a`) and sharing B (`share_b`) allowed or not for every
/// GEMM launched or prepared on this thread inside it, whatever `MEGAMOE_MC` says (tests compare the variants
/// this way; the previous policy is restored after).
pub fn with_clusters<R>(share_a: bool, share_b: bool, f: impl FnOnce() -> R) -> R {
    with_override(&CLUSTERS, (share_a, share_b), f)
}

/// The kernel to launch where a call site names `base` (the single-CTA kernel of its epilogue, A load and B
/// layout) for the parameter block `p` (its `n` columns, `n_tiles` as the tile's width gives them):
/// [`tiles::choose`] under this device's shared memory, with the 2-CTA cluster variants that share A allowed
/// with `MEGAMOE_MC=a` (or `1`), those that share B with `b`, both with `ab` (read once; off by default until
/// they are measured faster; another value is an `InvalidArgument`); [`with_clusters`] overrides it on a
/// thread. `MEGAMOE_DEBUG` prints each choice with its rejections.
pub(crate) fn kernel_for(gpu: &Gpu, base: &'static str, p: &GroupedGemm) -> Result<&'static str> {
    let Some(c) = tiles::config(base) else {
        return Ok(base);
    };
    let n = p.n;
    let problem = tiles::Problem { epilogue: c.epilogue, a: c.a, b: c.b, n };
    let (share_a, share_b) = cluster_policy()?;
    // read only for the SwiGLU backward (a bad MEGAMOE_DSW fails those launches, not every GEMM)
    let dsw = if c.epilogue == tiles::Epilogue::SwigluBackward { dswiglu_kernel()? } else { Dsw::PingPong };
    let swiglu_ew7 = c.epilogue == tiles::Epilogue::Swiglu && swiglu_epilogue_warps()?;
    let limits = tiles::Limits { smem_optin: gpu.smem_optin(), share_a, share_b, dsw, swiglu_ew7 };
    let choice = tiles::choose(&problem, &limits)?;
    if crate::runtime::debug_enabled() {
        eprintln!("[megamoe] {base} over {n} columns: {choice}");
    }
    // the chosen kernel's tile width (the caller sized its column tiles, and the partial sums, by the same policy)
    let c = &choice.config;
    if problem.n_tiles(c) != p.n_tiles {
        return Err(Error::InvalidArgument(format!(
            "{}: {} column tiles for {n} columns of {} (the parameter block says {})",
            c.kernel,
            problem.n_tiles(c),
            c.bn,
            p.n_tiles
        )));
    }
    Ok(c.kernel)
}

/// The M-grouped GEMMs' 2-CTA cluster forms on this thread ([`kernel_for`]): (share A, share B).
fn cluster_policy() -> Result<(bool, bool)> {
    static MC: std::sync::OnceLock<std::result::Result<(bool, bool), String>> = std::sync::OnceLock::new();
    match CLUSTERS.with(|c| c.get()) {
        Some(policy) => Ok(policy),
        None => MC
            .get_or_init(|| match std::env::var("MEGAMOE_MC").unwrap_or_default().as_str() {
                "" | "0" => Ok((false, false)),
                "1" | "a" => Ok((true, false)),
                "b" => Ok((false, true)),
                "ab" | "ba" => Ok((true, true)),
                v => Err(format!("MEGAMOE_MC={v}: expected 0, a, b or ab (1 = a)")),
            })
            .clone()
            .map_err(Error::InvalidArgument),
    }
}

/// Every kernel policy a layer call reads at its launches (`MEGAMOE_MC`, `MEGAMOE_SWIGLU`, `MEGAMOE_DSW`,
/// `MEGAMOE_WGRAD_SCHED`, or this thread's overrides), checked before the call's first launch: an unknown value
/// then fails the call whole instead of after some of its kernels ran.
pub(crate) fn check_policies() -> Result<()> {
    cluster_policy()?;
    swiglu_epilogue_warps()?;
    dswiglu_kernel()?;
    dy_gather_in_producer()?;
    wgrad_gather()?;
    gather_ahead()?;
    wgrad_sched()?;
    Ok(())
}

/// The launch of the M-grouped kernel `kernel` over at most `rows_max` expert-ordered rows of `experts` experts:
/// one block per tile up to one per SM (the kernel is persistent), with the kernel's shared memory
/// ([`kh::m_grouped_smem`]); shared by the layer, the EP layer and the calls here. A kernel written for clusters
/// of c CTAs gets a grid that is a multiple of c (its tile count is: c n-tiles per pair).
/// A cluster kernel's grid is also capped by the clusters that fit at once (all resident: the walk of a
/// persistent grid gives every cluster the same share).
/// The most m-tiles (128 rows of one expert) `rows` rows over `experts` experts can make: a partial tile per
/// non-empty expert at most.
pub(crate) fn m_tiles_max(rows: usize, experts: usize) -> usize {
    rows.div_ceil(kh::GEMM_BM as usize) + experts.min(rows)
}

pub(crate) fn m_grouped_launch(
    gpu: &Gpu,
    kernel: &'static str,
    rows_max: usize,
    experts: usize,
    n_tiles: u32,
) -> Result<Launch> {
    let m_tiles_max = m_tiles_max(rows_max, experts) as u32;
    let smem = kh::m_grouped_smem(kernel);
    let spec = megamoe_kernels::manifest::find(kernel);
    let c = spec.map_or(1, |k| k.cluster.max(1));
    // the kernel's block (384 threads but for the 4-warpgroup `_ew7`)
    let threads = spec.map_or(kh::GEMM_THREADS, |k| k.max_threads);
    let mut grid = gpu.sm_count().min(m_tiles_max * n_tiles);
    if c > 1 {
        let fit = gpu.max_active_clusters(kernel, Launch::new(c * (gpu.sm_count() / c), threads, smem))?;
        grid = grid.min(c * fit.max(1)) / c * c;
    }
    Ok(Launch::new(grid.max(c), threads, smem))
}

/// The parameter block and launch of `grouped_wgrad_f32` / `_bf16` (tiles of 128 x 256 of each expert's M x N, one block
/// per tile up to one per SM), shared by the layer, the EP layer and [`grouped_wgrad`]. `maps` are the tensor
/// maps of A, B and C; `error` the routing error word (0: none); `(m, n, rows)`: C_e's shape and the rows A
/// and B both hold (each expert's rows are clamped to them on the device). The tile schedule is this thread's
/// [`wgrad_sched`] (an unknown `MEGAMOE_WGRAD_SCHED` is an `InvalidArgument`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn wgrad_launch(
    gpu: &Gpu,
    maps: [u64; 3],
    bases: [u64; 2],
    offsets: u64,
    c: u64,
    error: u64,
    experts: usize,
    (m, n, rows): (usize, usize, usize),
    accumulate: bool,
) -> Result<(WgradGemm, Launch)> {
    let sched = wgrad_sched_counter(gpu)?;
    let m_tiles = (m as u32).div_ceil(128);
    let clusters = wgrad_sched()? == WgradSched::Clusters && m_tiles % 2 == 0;
    let p = WgradGemm {
        map_a: maps[0],
        map_b: maps[1],
        offsets,
        c,
        map_c: maps[2],
        error,
        experts: experts as u32,
        m: m as u32,
        n: n as u32,
        m_tiles,
        n_tiles: (n as u32).div_ceil(256),
        accumulate: accumulate as u32,
        combine: megamoe_kernels::params::Combine::default(),
        sched,
        expert_maps: gpu.expert_maps(experts)?,
        a_base: bases[0],
        b_base: bases[1],
        clusters: clusters as u32,
        rows_max: rows as u32,
        a_gather: 0,
        row_slot: 0,
        top_k: 0,
        pad: 0,
    };
    let tiles = p.experts * p.m_tiles * p.n_tiles;
    // clusters: an even grid (whole clusters; on the H200 all 66 fit at once)
    let grid = if clusters { (gpu.sm_count() / 2 * 2).min(tiles) } else { gpu.sm_count().min(tiles) };
    Ok((p, Launch::new(grid, kh::GEMM_THREADS, kh::WGRAD_SMEM)))
}

/// The tensor map of a weight gradient's output, W [rows, cols] (rows = E * M), in the boxes the epilogue of
/// `W::KERNEL` stores (16 rows of 128 bytes, 128-byte swizzle).
pub(crate) fn wgrad_c_desc<W: WgradElem>(addr: u64, rows: usize, cols: usize) -> TiledDesc {
    let (box_rows, box_cols) = W::C_BOX;
    TiledDesc::row_major_2d(W::DTYPE, addr, rows as u64, cols as u64, box_rows, box_cols, Swizzle::B128)
}

/// A parameter block with every pointer null and every count zero, for `..zero_gemm()`.
pub(crate) fn zero_gemm() -> GroupedGemm {
    GroupedGemm {
        map_a: 0,
        map_b: 0,
        offsets: 0,
        tile_offsets: 0,
        c: 0,
        z: 0,
        experts: 0,
        n: 0,
        k: 0,
        n_b: 0,
        ldc: 0,
        n_tiles: 0,
        w: 0,
        row_slot: 0,
        partial: 0,
        map_c: 0,
        sh: 0,
        map_z: 0,
        map_sh: 0,
        a_rows: 0,
        top_k: 0,
        c_rows: 0,
        rows_max: 0,
        w_len: 0,
        a_copy: 0,
        arrive: 0,
        error: 0,
        timeout_ns: 0,
        a_src_ranks: 0,
        c_dst_ranks: 0,
        sched: 0,
        copy_cols: 0,
        flags: 0,
        a_out: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::Dsw;

    #[test]
    fn a_policy_reads_its_variable_once_and_names_its_choices() {
        thread_local! {
            static KEY: std::cell::Cell<Option<u8>> = const { std::cell::Cell::new(None) };
        }
        static UNSET: super::EnvPolicy<u8> = std::sync::OnceLock::new();
        static BAD: super::EnvPolicy<u8> = std::sync::OnceLock::new();
        let table = [("a", 1), ("b", 2), ("c", 3), ("", 2)];
        // a variable no one sets: the "" entry
        assert_eq!(super::policy(&KEY, &UNSET, "MEGAMOE_TEST_POLICY_UNSET", &table).unwrap(), 2);
        std::env::set_var("MEGAMOE_TEST_POLICY_BAD", "d");
        let err = super::policy(&KEY, &BAD, "MEGAMOE_TEST_POLICY_BAD", &table).unwrap_err().to_string();
        assert!(err.contains("MEGAMOE_TEST_POLICY_BAD=d: expected a, b or c"), "{err}");
        // the thread's override wins, and the value read first is kept
        assert_eq!(
            super::with_override(&KEY, 3, || super::policy(&KEY, &BAD, "MEGAMOE_TEST_POLICY_BAD", &table)).unwrap(),
            3
        );
        std::env::set_var("MEGAMOE_TEST_POLICY_UNSET", "a");
        assert_eq!(super::policy(&KEY, &UNSET, "MEGAMOE_TEST_POLICY_UNSET", &table).unwrap(), 2);
    }

    #[test]
    fn the_side_copy_runs_where_it_was_measured_faster() {
        // (H, I) of the step traced both ways (docs/RESULTS.md 2026-12-07f); the thread's override wins
        for (h, i, pays) in
            [(768, 256, false), (1536, 256, false), (2048, 512, false), (2048, 768, true), (2048, 1408, true)]
        {
            assert_eq!(super::side_copy_pays(h, i), pays, "H {h} I {i}");
        }
        assert!(super::side_copy_pays(4096, 512) && super::side_copy_pays(4096, 1536));
        assert_eq!(super::with_side_copy(Some(false), super::side_copy).unwrap(), Some(false));
        assert_eq!(super::with_side_copy(Some(true), super::side_copy).unwrap(), Some(true));
    }

    #[test]
    fn the_weight_gradients_gather_where_it_was_measured_faster() {
        // I of the step traced both ways (docs/RESULTS.md 2026-12-08a: 256 and 512 faster gathering, 768 slower);
        // the thread's override wins, `None` leaves it to the rule
        use super::WgradGather::{Dy, DyX, Off};
        for (i, g) in [(64, DyX), (256, DyX), (512, DyX), (513, Off), (768, Off), (1536, Off)] {
            assert_eq!(super::wgrad_gather_pays(i), g, "I {i}");
        }
        for g in [None, Some(Off), Some(Dy), Some(DyX)] {
            assert_eq!(super::with_wgrad_gather(g, super::wgrad_gather).unwrap(), g);
        }
        assert!(DyX.dy() && DyX.x() && Dy.dy() && !Dy.x() && !Off.dy() && !Off.x());
    }

    #[test]
    fn dx_is_combined_by_the_movers_only_where_they_keep_up() {
        // the movers' ~0.4 TB/s against the weight gradients' 3 I FLOPs a dx byte: a pass below I = 512
        for (i, movers) in [(64, false), (256, false), (384, false), (511, false), (512, true), (768, true)] {
            assert_eq!(super::dx_combine_in_movers_pays(i), movers, "I {i}");
        }
        assert_eq!(super::with_dx_combine(Some(false), super::dx_combine).unwrap(), Some(false));
        assert_eq!(super::with_dx_combine(Some(true), super::dx_combine).unwrap(), Some(true));
        assert_eq!(super::with_dx_combine(None, super::dx_combine).unwrap(), None);
    }

    #[test]
    fn the_kernels_m_tile_walk_fits_the_per_m_tile_arrays() {
        // the kernels walk at most scheduler::m_tiles_bound m-tiles whatever tile_offsets[E] says; the layer's
        // `ready` / `arrive` and the grid are sized by m_tiles_max
        use megamoe_kernels::kernels_host as kh;
        for rows in [0usize, 1, 63, 127, 128, 129, 1000, 4096, 131072] {
            for e in [1usize, 2, 7, 128, 300, 5000] {
                let bound = megamoe_kernels::scheduler::m_tiles_bound(rows as u32, e as u32, kh::GEMM_BM) as usize;
                assert!(bound <= super::m_tiles_max(rows, e), "rows {rows} E {e}");
            }
        }
    }

    #[test]
    fn tile_offsets_count_partial_tiles_and_skip_empty_experts() {
        assert_eq!(super::tile_offsets(&[0, 1, 128, 129, 0, 256]), vec![0, 0, 1, 2, 4, 4, 6]);
        assert_eq!(super::tile_offsets(&[]), vec![0]);
    }

    #[test]
    fn dswiglu_launches_with_its_own_shared_memory() {
        use megamoe_kernels::kernels_host as kh;
        assert_eq!(kh::m_grouped_smem("grouped_gemm_bt_dswiglu"), kh::GEMM_DSW_SMEM);
        assert_eq!(kh::m_grouped_smem("grouped_gemm_bt_bf16"), kh::GEMM_SMEM);
    }

    #[test]
    fn dswiglu_partials_are_per_tile_of_the_kernels_columns() {
        assert_eq!(super::with_dswiglu(Dsw::Ew, || super::dswiglu_partials(768)), 3);
        assert_eq!(super::with_dswiglu(Dsw::Ew, || super::dswiglu_partials(320)), 2);
        assert_eq!(super::with_dswiglu(Dsw::Ew7, || super::dswiglu_partials(768)), 4);
        assert_eq!(super::with_dswiglu(Dsw::Ew7, || super::dswiglu_partials(1536)), 8);
        assert_eq!(super::with_dswiglu(Dsw::Ew7, || super::dswiglu_partials(320)), 2);
        super::with_dswiglu(Dsw::PingPong, || {
            assert_eq!(super::dswiglu_partials(768), 6);
            assert_eq!(super::dswiglu_partials(1536), 12);
            assert_eq!(super::dswiglu_partials(192), 2);
            assert_eq!(super::dswiglu_partials(64), 1);
        });
    }

    /// Every weight-gradient kernel a launch can name (each output type with the combine, without, or gathering A;
    /// single CTAs or clusters) is one the module exports.
    #[test]
    fn every_wgrad_name_is_a_kernel_of_the_module() {
        use super::{wgrad_cluster_kernel, WgradElem};
        use half::bf16;
        for base in [f32::KERNEL_GB, bf16::KERNEL_GB] {
            assert!(megamoe_kernels::manifest::find(base).is_some(), "{base} is not a kernel of the module");
            assert!(wgrad_cluster_kernel(base).is_err(), "{base} has no cluster form: B is what clusters multicast");
        }
        for base in [f32::KERNEL, f32::KERNEL_MV, f32::KERNEL_GA, bf16::KERNEL, bf16::KERNEL_MV, bf16::KERNEL_GA] {
            for name in [base, wgrad_cluster_kernel(base).unwrap()] {
                assert!(
                    megamoe_kernels::manifest::find(name).is_some(),
                    "{base} -> {name}: not a kernel of the module"
                );
            }
        }
        assert_eq!(wgrad_cluster_kernel(f32::KERNEL_GA).unwrap(), "grouped_wgrad_f32_ga_mc");
    }
}
