//! Blockwise FP8 (e4m3) on Hopper: quantization and the M-grouped GEMM, with their CPU references.
//!
//! The recipe is DeepSeek-V3's: activations carry one f32 scale per row and 128 columns (1 x 128), weights one per
//! 128 x 128 block; a block's scale is amax / 448 and its codes e4m3(x * 448 / amax) (round to nearest even,
//! saturated; `megamoe_kernels::fp8` states the rule, which the kernels and [`quantize_rows_cpu`] /
//! [`quantize_blocks_cpu`] share, so GPU and CPU codes are bitwise equal).
//!
//! - [`quantize_rows`] / [`quantize_blocks`]: bf16 [rows, cols] into codes [rows, cols] and scales
//!   ([rows, cols / 128] or [rows / 128, cols / 128]); cols a multiple of 128 (and rows, for blocks).
//! - [`grouped_gemm_fp8`]: for each expert e and its rows offsets\[e\]..offsets[e + 1],
//!   C[r, n] = sum_kb sa[r, kb] sb[e, n / 128, kb] (A[r, kb] . B_e[n, kb]) in f32, stored as bf16; A's rows
//!   quantized by [`quantize_rows`], B = [E * N, K] (each expert's [N, K], K-major, as the forward reads W1 and W2)
//!   by [`quantize_blocks`]. The routing layout is the bf16 engine's (`offsets`, `tile_offsets` of 128-row tiles:
//!   [`crate::gemm::tile_offsets`]). N and K multiples of 128.
//!
//! The routing layout lives on the device and is not checked before launch. Any content of it is safe, as for the
//! bf16 engine (module doc of [`crate::gemm`]): the grouped GEMMs clamp every tile's rows to `rows_max` and walk at
//! most `rows_max / 128 + min(E, rows_max)` m-tiles whatever `tile_offsets[E]` says, the weight gradient clamps
//! each expert's K blocks to Kp / 128, the column quantizer runs Kp / 128 x C / 128 blocks and reads only rows
//! below `min(offsets[e + 1], rows_max)`. So every call returns `Ok`, ends in a time bounded by the buffers, and
//! neither reads nor writes outside its buffers; only the values inside the outputs are then unspecified. Offsets
//! as promised are never clamped: their results are bitwise those of the kernels before the clamps existed.
//!
//! Everything is asynchronous on the GPU's stream; no call synchronises.
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::fp8::{e4m3_from_f32, e4m3_to_f32, scale_and_factor};
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{GatherDequant, GroupedGemmFp8, QuantFp8, QuantFp8Cols, QuantFp8T, WgradFp8};

use crate::error::Result;
use crate::gemm::Check;
use crate::gemm::WgradElem;
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{DeviceTensorMap, Dtype, Swizzle, TiledDesc};

/// A bf16 matrix [rows, cols] and where its quantized form goes.
pub struct QuantizeArgs<'a> {
    /// bf16 [rows, cols].
    pub x: &'a CudaSlice<bf16>,
    /// e4m3 codes [rows, cols].
    pub q: &'a mut CudaSlice<u8>,
    /// f32 scales: [rows, cols / 128] ([`quantize_rows`]) or [rows / 128, cols / 128] ([`quantize_blocks`]).
    pub scales: &'a mut CudaSlice<f32>,
    /// Rows.
    pub rows: usize,
    /// Columns (a multiple of 128).
    pub cols: usize,
}

impl QuantizeArgs<'_> {
    fn check(&self, gpu: &Gpu, what: &'static str, block_rows: usize) -> Result<QuantFp8> {
        let ck = Check { what, ordinal: gpu.ordinal() };
        ck.multiple("cols", self.cols, 128)?;
        if block_rows > 1 {
            ck.multiple("rows", self.rows, block_rows)?;
        }
        let n = self.rows * self.cols;
        ck.buf("x", self.x, n)?;
        ck.buf("q", self.q, n)?;
        ck.buf("scales", self.scales, self.rows / block_rows * (self.cols / 128))?;
        let s = gpu.stream().clone();
        Ok(QuantFp8 {
            x: dptr(self.x, &s),
            q: dptr(self.q, &s),
            scales: dptr(self.scales, &s),
            rows_at: 0,
            rows: self.rows as u32,
            cols: self.cols as u32,
        })
    }
}

/// Quantize each row's 128-column blocks (activations: 1 x 128 scales).
pub fn quantize_rows(gpu: &Gpu, a: QuantizeArgs<'_>) -> Result<()> {
    let p = a.check(gpu, "quantize_rows", 1)?;
    // SAFETY: the buffers hold the shapes (checked) and stay borrowed until the launch is enqueued.
    unsafe { quantize_rows_raw(gpu, p.x, p.q, p.scales, a.rows, a.cols) }
}

/// [`quantize_rows`] on raw device addresses: `rows` rows of `cols` (a multiple of 128) bf16 at `x` into codes at
/// `q` and scales at `scales` (the layer's buffers, sized for its maximum).
/// SAFETY: `x` holds rows * cols bf16, `q` rows * cols bytes, `scales` rows * cols / 128 f32, on `gpu`.
pub(crate) unsafe fn quantize_rows_raw(gpu: &Gpu, x: u64, q: u64, scales: u64, rows: usize, cols: usize) -> Result<()> {
    quantize_rows_at(gpu, x, q, scales, (0, rows), cols)
}

/// [`quantize_rows_raw`] of the row count at `rows.0` on the device (u32, clamped to `rows.1`; 0: `rows.1` rows):
/// the grid covers `rows.1` rows, the warps past the device's count return.
/// SAFETY: as [`quantize_rows_raw`] for `rows.1` rows; `rows.0` 0 or a u32 on `gpu`.
pub(crate) unsafe fn quantize_rows_at(
    gpu: &Gpu,
    x: u64,
    q: u64,
    scales: u64,
    rows: (u64, usize),
    cols: usize,
) -> Result<()> {
    let warps = (rows.1 * (cols / 128)) as u32;
    if warps == 0 {
        return Ok(());
    }
    let p = QuantFp8 { x, q, scales, rows_at: rows.0, rows: rows.1 as u32, cols: cols as u32 };
    gpu.launch("quantize_fp8_rows", Launch::new(warps.div_ceil(8 * kh::FP8_ROWS_UNITS), 256, 0), &p)
}

/// Rows quantized in 1 x 128 blocks (e4m3 codes [rows, cols], f32 scales [rows, cols / 128], as [`quantize_rows`]
/// writes them) back to bf16 [rows, cols]: each value decode(code) * scale in f32, rounded once to nearest-even bf16
/// ([`dequantize_rows_bf16_cpu`] bit for bit). The kernel is the dequantizing gather the FP8 backward's dW1 reads x
/// through with [`crate::layer::Fp8Dw1X::Codes`].
pub fn dequantize_rows(
    gpu: &Gpu,
    q: &CudaSlice<u8>,
    scales: &CudaSlice<f32>,
    out: &mut CudaSlice<bf16>,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let ck = Check { what: "dequantize_rows", ordinal: gpu.ordinal() };
    ck.multiple("cols", cols, 128)?;
    ck.buf("q", q, rows * cols)?;
    ck.buf("scales", scales, rows * cols / 128)?;
    ck.buf("out", out, rows * cols)?;
    let s = gpu.stream().clone();
    let p = GatherDequant {
        src: dptr(q, &s),
        scales: dptr(scales, &s),
        dst: dptr(&*out, &s),
        row_slot: 0,
        offsets: 0,
        cols: cols as u32,
        k: 1,
        experts: 0,
        rows_max: rows as u32,
    };
    // SAFETY: the buffers hold the shapes (checked, fewer than 2^32 elements) and stay borrowed until the launch
    // is enqueued; no row index or offsets (rows 0 .. rows, each its own token).
    unsafe { gather_dequant_raw(gpu, &p) }
}

/// One launch of `gather_rows_dequant` over `p.rows_max` possible rows (the device's count may be far fewer: at
/// EP a rank's receive buffer holds R times its expected rows), at most 16 blocks an SM, each looping over the rows
/// a grid apart.
/// SAFETY: `p.src` holds the tokens' codes (every token row_slot / k names, or rows_max rows), `p.scales` their
/// scales, `p.dst` rows_max rows of `p.cols` bf16, `p.row_slot` rows_max entries and `p.offsets` E + 1 (or 0).
pub(crate) unsafe fn gather_dequant_raw(gpu: &Gpu, p: &GatherDequant) -> Result<()> {
    let rpb = megamoe_kernels::scheduler::gather_rows_per_block(p.cols / 16, 128);
    if p.rows_max == 0 || p.cols == 0 {
        return Ok(());
    }
    let grid = p.rows_max.div_ceil(rpb).min(16 * gpu.sm_count());
    gpu.launch("gather_rows_dequant", Launch::new(grid, 128, 0), p)
}

/// Quantize 128 x 128 blocks (weights); rows a multiple of 128.
pub fn quantize_blocks(gpu: &Gpu, a: QuantizeArgs<'_>) -> Result<()> {
    let p = a.check(gpu, "quantize_blocks", 128)?;
    let blocks = ((a.rows / 128) * (a.cols / 128)) as u32;
    if blocks == 0 {
        return Ok(());
    }
    // SAFETY: as in `quantize_rows`; 32 bytes of shared memory for the block's reduction.
    unsafe { gpu.launch("quantize_fp8_blocks", Launch::new(blocks, 256, 32), &p) }
}

/// A batch of bf16 matrices [B, R, C] and where their transposes' quantized form goes.
pub struct QuantizeTArgs<'a> {
    /// bf16 [B, R, C].
    pub x: &'a CudaSlice<bf16>,
    /// e4m3 codes [B, C, R]: each matrix's transpose.
    pub q: &'a mut CudaSlice<u8>,
    /// f32 [B, C / 128, R / 128].
    pub scales: &'a mut CudaSlice<f32>,
    /// Matrices B.
    pub batches: usize,
    /// Rows R of each (a multiple of 128).
    pub rows: usize,
    /// Columns C (a multiple of 128).
    pub cols: usize,
}

/// Quantize each matrix's transpose in 128 x 128 blocks: the same blocks (and scales) as [`quantize_blocks`] of
/// the matrix, the codes laid out transposed. For the backward's dgrad, which reads each expert's W^T K-major
/// (DeepSeek-V3 keeps such transposed FP8 copies of the weights).
pub fn quantize_blocks_t(gpu: &Gpu, a: QuantizeTArgs<'_>) -> Result<()> {
    let ck = Check { what: "quantize_blocks_t", ordinal: gpu.ordinal() };
    ck.multiple("rows", a.rows, 128)?;
    ck.multiple("cols", a.cols, 128)?;
    let n = a.batches * a.rows * a.cols;
    ck.buf("x", a.x, n)?;
    ck.buf("q", a.q, n)?;
    ck.buf("scales", a.scales, n / (128 * 128))?;
    if n == 0 {
        return Ok(());
    }
    let s = gpu.stream().clone();
    let p = QuantFp8T {
        x: dptr(a.x, &s),
        q: dptr(a.q, &s),
        scales: dptr(a.scales, &s),
        batch_rows: a.rows as u32,
        cols: a.cols as u32,
    };
    // SAFETY: the buffers hold the shapes (checked); the staged tile and the reduction: 128 x 264 + 32 bytes.
    unsafe { gpu.launch("quantize_fp8_blocks_t", Launch::new((n / (128 * 128)) as u32, 256, 128 * 264 + 32), &p) }
}

/// The expert-ordered rows of an activation and where their column-wise quantized form goes, for the K-grouped
/// FP8 weight gradients ([`quantize_cols_grouped`]).
pub struct QuantizeColsArgs<'a> {
    /// bf16 [rows_max, C]: expert e's rows at offsets\[e\]..offsets[e + 1].
    pub x: &'a CudaSlice<bf16>,
    /// u32 [E + 1] row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1] m-tile offsets (device; tiles of 128 rows, as `route` computes them).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// e4m3 [C, Kp] (Kp = [`cols_grouped_kp`]): column c of x along the rows, expert e's segment from column
    /// 128 tile_offsets\[e\], its last 128-block zero-padded; columns past 128 tile_offsets\[E\] are not written.
    pub q: &'a mut CudaSlice<u8>,
    /// f32 [Kp / 128, C]: one scale per 128-row block of one expert and column; with `block_scales`
    /// [Kp / 128, C / 128]: one per 128 x 128 block.
    pub scales: &'a mut CudaSlice<f32>,
    /// Experts E.
    pub experts: usize,
    /// Rows x has room for (>= offsets\[E\]).
    pub rows_max: usize,
    /// Columns C (a multiple of 128).
    pub cols: usize,
    /// One scale per 128 x 128 block instead of per column (the activations' operand of
    /// [`WgradFp8Args::b_block_scales`]).
    pub block_scales: bool,
    /// None: `x` holds the expert-ordered rows. Some: `x` holds the tokens and the expert order's gather is fused
    /// into the quantization (see [`ColsGather`]).
    pub gather: Option<ColsGather<'a>>,
    /// Some((codes e4m3 [rows_max, C], scales f32 [rows_max, C / 128])): the expert-ordered rows (those below
    /// offsets\[E\]) also quantized row-wise in 1 x 128 blocks from the same read, bitwise [`quantize_rows`] of them.
    pub rows_out: Option<(&'a mut CudaSlice<u8>, &'a mut CudaSlice<f32>)>,
}

/// The gather fused into [`quantize_cols_grouped`]: expert-ordered row r is the token row_slot\[r\] / top_k of
/// `x` (bf16 [tokens, C]), the routing's layout as `route` writes it; optionally also stored, in bf16, as row r of
/// `copy` (so one pass over the tokens gives both the bf16 gathered rows and their transposed codes).
pub struct ColsGather<'a> {
    /// u32 [>= offsets\[E\]]: each expert-ordered row's slot (token * top_k + j).
    pub row_slot: &'a CudaSlice<u32>,
    /// Slots per token.
    pub top_k: usize,
    /// Tokens `x` holds (a slot of a token past them reads as zeros).
    pub tokens: usize,
    /// bf16 [rows_max, C]: receives the gathered rows (rows past offsets\[E\] are not written).
    pub copy: Option<&'a mut CudaSlice<bf16>>,
    /// f32 [tokens * top_k]: each gathered row is scaled by its slot's weight before it is quantized (not in
    /// `copy`), the product rounded to bf16.
    pub weights: Option<&'a CudaSlice<f32>>,
}

/// Kp of [`QuantizeColsArgs::q`]: room for every expert's rows padded to 128, whatever the routing.
pub fn cols_grouped_kp(rows_max: usize, experts: usize) -> usize {
    128 * crate::gemm::m_tiles_max(rows_max, experts)
}

/// Quantize the expert-ordered rows column-wise in 1 x 128 blocks along the rows that never span two experts
/// (DeepSeek-V3's 128 x 1 blocks for the backward's activations), transposed: the K-major operand a K-grouped FP8
/// GEMM (the weight gradients, contracting over each expert's rows) reads. Bitwise [`quantize_cols_grouped_cpu`].
pub fn quantize_cols_grouped(gpu: &Gpu, a: QuantizeColsArgs<'_>) -> Result<()> {
    let ck = Check { what: "quantize_cols_grouped", ordinal: gpu.ordinal() };
    ck.multiple("cols", a.cols, 128)?;
    ck.routing(a.experts, a.offsets, Some(a.tile_offsets))?;
    let kp = cols_grouped_kp(a.rows_max, a.experts);
    match &a.gather {
        None => ck.buf("x", a.x, a.rows_max * a.cols)?,
        Some(gt) => {
            if gt.top_k == 0 {
                return ck.bad("the gather's top_k is 0".to_string());
            }
            ck.buf("x (the tokens)", a.x, gt.tokens * a.cols)?;
            ck.buf("row_slot", gt.row_slot, a.rows_max)?;
            if let Some(c) = &gt.copy {
                ck.buf("copy", &**c, a.rows_max * a.cols)?;
            }
            if let Some(w) = gt.weights {
                ck.buf("weights", w, gt.tokens * gt.top_k)?;
            }
        }
    }
    ck.buf("q", a.q, a.cols * kp)?;
    if let Some((qr, sr)) = &a.rows_out {
        ck.buf("row codes", &**qr, a.rows_max * a.cols)?;
        ck.buf("row scales", &**sr, a.rows_max * a.cols / 128)?;
    }
    let per_block = if a.block_scales { a.cols / 128 } else { a.cols };
    ck.buf("scales", a.scales, per_block * (kp / 128))?;
    if a.rows_max == 0 || a.cols == 0 {
        return Ok(());
    }
    let tokens = a.gather.as_ref().map_or(0, |gt| gt.tokens);
    if a.cols * kp >= 1 << 32 || a.rows_max.max(tokens) * a.cols >= 1 << 32 {
        return ck.bad(format!("{} x {kp} codes or {} x {} values: 2^32 or more", a.cols, a.rows_max, a.cols));
    }
    let s = gpu.stream().clone();
    let (row_slot, top_k, copy, w) = match &a.gather {
        None => (0, 1, 0, 0),
        Some(gt) => (
            dptr(gt.row_slot, &s),
            gt.top_k as u32,
            gt.copy.as_ref().map_or(0, |c| dptr(&**c, &s)),
            gt.weights.map_or(0, |w| dptr(w, &s)),
        ),
    };
    let p = QuantFp8Cols {
        x: dptr(a.x, &s),
        q: dptr(a.q, &s),
        scales: dptr(a.scales, &s),
        offsets: dptr(a.offsets, &s),
        tile_offsets: dptr(a.tile_offsets, &s),
        experts: a.experts as u32,
        cols: a.cols as u32,
        kp: kp as u32,
        rows_max: a.rows_max as u32,
        block: a.block_scales as u32,
        top_k,
        row_slot,
        copy,
        q_rows: a.rows_out.as_ref().map_or(0, |(q, _)| dptr(&**q, &s)),
        s_rows: a.rows_out.as_ref().map_or(0, |(_, sc)| dptr(&**sc, &s)),
        w,
        src_rows: tokens as u32,
        pad: 0,
    };
    // SAFETY: the buffers hold the shapes (checked); rows read are below min(offsets[e + 1], rows_max) (and,
    // gathering, tokens below `tokens`), codes and scales written by the grid's blocks, below Kp / 128, whatever
    // the device offsets hold.
    unsafe { quantize_cols_raw(gpu, &p) }
}

/// Launch `quantize_fp8_cols_grouped` on `p` (grid and shared memory from its shape).
///
/// # Safety
/// `p`'s buffers hold what [`QuantFp8Cols`] says for its shape (any content of the offsets and tile offsets is
/// safe: rows are bounded by `rows_max`, blocks by the grid's Kp / 128; as `route` writes them, Kp >=
/// 128 tile_offsets\[E\] gives every block its codes).
pub(crate) unsafe fn quantize_cols_raw(gpu: &Gpu, p: &QuantFp8Cols) -> Result<()> {
    let grid = p.kp / 128 * (p.cols / 128);
    let kernel = if p.q_rows != 0 { "quantize_fp8_cols_grouped_rows" } else { "quantize_fp8_cols_grouped" };
    // SAFETY: the caller's promise above; the grid covers Kp / 128 x C / 128 blocks, the shared memory the kernel's.
    unsafe { gpu.launch(kernel, Launch::new(grid, 256, kh::FP8_COLS_SMEM), p) }
}

/// The K-grouped FP8 weight gradient: for each expert e, C_e[M, N] (+)= A_e^T B_e over its rows, from both
/// operands quantized by [`quantize_cols_grouped`] (A^T [M, Kp] and B^T [N, Kp] with their scales).
pub struct WgradFp8Args<'a, W: WgradElem = f32> {
    /// e4m3 [M, Kp].
    pub a_t: &'a CudaSlice<u8>,
    /// f32 [Kp / 128, M].
    pub a_scales: &'a CudaSlice<f32>,
    /// e4m3 [N, Kp].
    pub b_t: &'a CudaSlice<u8>,
    /// f32 [Kp / 128, N].
    pub b_scales: &'a CudaSlice<f32>,
    /// u32 [E + 1]: each expert's K blocks (the m-tile offsets the quantization used).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// [E, M, N] f32 or bf16: written, or added to with `accumulate`.
    pub c: &'a mut CudaSlice<W>,
    /// Experts E.
    pub experts: usize,
    /// M (a multiple of 128).
    pub m: usize,
    /// N (a multiple of 128).
    pub n: usize,
    /// Kp (a multiple of 128; [`cols_grouped_kp`]).
    pub kp: usize,
    /// Add into C.
    pub accumulate: bool,
    /// B's scales per 128 x 128 block ([Kp / 128, N / 128], `QuantizeColsArgs::block_scales`): kernels
    /// `grouped_wgrad_fp8b_*`, whose promotion is one fused multiply-add per element instead of two operations.
    pub b_block_scales: bool,
}

/// A checked K-grouped FP8 weight gradient with its tensor maps, to launch any number of times.
pub type PreparedWgradFp8<'a> = PreparedFp8Launch<'a, WgradFp8>;

/// A checked FP8 kernel launch (a grouped GEMM or the weight gradients) with its parameter block and tensor maps,
/// to enqueue any number of times; `launch: None` when there is nothing to run.
pub struct PreparedFp8Launch<'a, P> {
    what: &'static str,
    ordinal: usize,
    kernel: &'static str,
    launch: Option<(Launch, P)>,
    /// The run-time tile counter the kernel takes its tiles from (zeroed before each launch; 0: none).
    tile_counter: u64,
    _maps: Vec<DeviceTensorMap>,
    _bufs: std::marker::PhantomData<&'a mut ()>,
}

impl<P: Copy> PreparedFp8Launch<'_, P> {
    /// Only the `prepare` functions of this module build one, after checking every buffer against the shapes.
    fn new(what: &'static str, gpu: &Gpu, kernel: &'static str, launch: Option<(Launch, P)>) -> Self {
        Self {
            what,
            ordinal: gpu.ordinal(),
            kernel,
            launch,
            tile_counter: 0,
            _maps: Vec::new(),
            _bufs: std::marker::PhantomData,
        }
    }

    /// Enqueue it on `gpu`'s stream (the GPU it was prepared on).
    pub fn launch(&self, gpu: &Gpu) -> Result<()> {
        let ck = Check { what: self.what, ordinal: self.ordinal };
        if gpu.ordinal() != self.ordinal {
            return ck.bad(format!("prepared on device {} and launched on device {}", self.ordinal, gpu.ordinal()));
        }
        match &self.launch {
            None => Ok(()),
            // SAFETY: the `prepare` that built it checked the block's buffers against the shapes (rows clamped to
            // rows_max and the m-tile walk bounded on the device, K blocks clamped to Kp / 128, one owner per
            // output element), and they stay
            // borrowed while `self` lives; the tensor maps live in `self`.
            Some((cfg, p)) => unsafe { gpu.launch_counted(self.tile_counter, self.kernel, *cfg, p) },
        }
    }
}

impl<'a> PreparedFp8Launch<'a, GroupedGemmFp8> {
    /// Records per block of [`Fp8Variant::WideTimeline`] (and the other `*Timeline` variants): 8 consumer warps x 16 k-blocks x 5 clock readings.
    pub const TIMELINE_PER_BLOCK: usize = 8 * 16 * 5;

    /// Blocks of the launch.
    pub fn blocks(&self) -> usize {
        self.launch.as_ref().map_or(0, |(cfg, _)| cfg.grid.0 as usize)
    }

    /// For [`Fp8Variant::WideTimeline`] and the other `*Timeline` variants only: where its clock records go, `u64 [blocks][8][16][5]` (zero-filled
    /// where a block has no second tile or a tile fewer than 16 k-blocks).
    pub fn timeline(mut self, gpu: &Gpu, buf: &'a mut CudaSlice<u64>) -> Result<Self> {
        let ck = Check { what: self.what, ordinal: self.ordinal };
        if !(self.kernel.starts_with("grouped_gemm_fp8w") && self.kernel.ends_with("_timeline")) {
            return ck.bad(format!("{} records no timeline", self.kernel));
        }
        ck.buf("timeline buffer", buf, self.blocks() * Self::TIMELINE_PER_BLOCK)?;
        let s = gpu.stream().clone();
        if let Some((_, p)) = self.launch.as_mut() {
            p.ct = dptr(buf, &s);
        }
        Ok(self)
    }
}

impl<'a, W: WgradElem> WgradFp8Args<'a, W> {
    /// Check the arguments and encode the tensor maps.
    pub fn prepare(self, gpu: &Gpu) -> Result<PreparedWgradFp8<'a>> {
        let kernel = if self.b_block_scales { W::FP8B_KERNELS.0 } else { W::FP8_KERNEL };
        self.prepare_kernel(gpu, kernel)
    }

    /// Not a GEMM: `grouped_wgrad_fp8_probe`, the main loop without the promotion (scales ignored, C is not the
    /// product), to time the data path's ceiling in the benchmark; bf16 C only.
    pub fn prepare_probe(self, gpu: &Gpu) -> Result<PreparedWgradFp8<'a>> {
        if W::NAME != "bf16" || self.b_block_scales {
            let ck = Check { what: "grouped_wgrad_fp8", ordinal: gpu.ordinal() };
            return ck.bad("the probe writes bf16 C and reads per-column scales".to_string());
        }
        self.prepare_kernel(gpu, "grouped_wgrad_fp8_probe")
    }

    fn prepare_kernel(self, gpu: &Gpu, kernel: &'static str) -> Result<PreparedWgradFp8<'a>> {
        let ck = Check { what: "grouped_wgrad_fp8", ordinal: gpu.ordinal() };
        ck.multiple("M", self.m, 128)?;
        ck.multiple("N", self.n, 128)?;
        ck.multiple("Kp", self.kp, 128)?;
        let (e, m, n, kp) = (self.experts, self.m, self.n, self.kp);
        ck.buf("A^T", self.a_t, m * kp)?;
        ck.buf("A scales", self.a_scales, kp / 128 * m)?;
        ck.buf("B^T", self.b_t, n * kp)?;
        ck.buf("B scales", self.b_scales, kp / 128 * if self.b_block_scales { n / 128 } else { n })?;
        ck.buf("tile offsets", self.tile_offsets, e + 1)?;
        ck.buf("C", &*self.c, e * m * n)?;
        if e * m * n >= 1 << 31 || m.max(n) * kp >= 1 << 31 {
            return ck.bad(format!("C of {e} x {m} x {n} or operands of {} x {kp}: 2^31 or more", m.max(n)));
        }
        let mut prepared = PreparedWgradFp8::new("grouped_wgrad_fp8", gpu, kernel, None);
        if e * m * n == 0 {
            return Ok(prepared);
        }
        let s = gpu.stream().clone();
        let map = |addr, rows: usize| {
            let d = TiledDesc::row_major_2d(Dtype::U8, addr, rows as u64, kp as u64, 128, 128, Swizzle::B128);
            DeviceTensorMap::new(gpu, d)
        };
        let (map_a, map_b) = (map(dptr(self.a_t, &s), m)?, map(dptr(self.b_t, &s), n)?);
        let map_c = DeviceTensorMap::new(gpu, crate::gemm::wgrad_c_desc::<W>(dptr(&*self.c, &s), e * m, n))?;
        let p = WgradFp8 {
            map_a: map_a.ptr(gpu),
            map_b: map_b.ptr(gpu),
            sa: dptr(self.a_scales, &s),
            sb: dptr(self.b_scales, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: dptr(&*self.c, &s),
            map_c: map_c.ptr(gpu),
            error: 0,
            experts: e as u32,
            m: m as u32,
            n: n as u32,
            accumulate: self.accumulate as u32,
            kblocks: (kp / 128) as u32,
            pad: 0,
            sched: crate::gemm::wgrad_sched_counter(gpu)?,
            combine: megamoe_kernels::params::Combine::NONE,
        };
        let grid = gpu.sm_count().min((e * (m / 128) * (n / 128)) as u32).max(1);
        prepared.launch = Some((Launch::new(grid, kh::GEMM_THREADS, kh::WGRAD_FP8_SMEM), p));
        prepared.tile_counter = p.sched;
        prepared._maps = vec![map_a, map_b, map_c];
        Ok(prepared)
    }
}

/// Launch the K-grouped FP8 weight gradient on `gpu`'s stream.
pub fn grouped_wgrad_fp8<W: WgradElem>(gpu: &Gpu, a: WgradFp8Args<'_, W>) -> Result<()> {
    a.prepare(gpu)?.launch(gpu)
}

/// One blockwise-FP8 grouped GEMM (see the module's documentation).
pub struct GroupedGemmFp8Args<'a> {
    /// e4m3 [rows_max, K]; the rows of expert e at offsets\[e\]..offsets[e + 1].
    pub a: &'a CudaSlice<u8>,
    /// f32 [rows_max, K / 128].
    pub a_scales: &'a CudaSlice<f32>,
    /// e4m3 [E * N, K].
    pub b: &'a CudaSlice<u8>,
    /// f32 [E * N / 128, K / 128].
    pub b_scales: &'a CudaSlice<f32>,
    /// u32 [E + 1] row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1] m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, N]; rows past offsets\[E\] are not written.
    pub c: &'a mut CudaSlice<bf16>,
    /// Experts.
    pub experts: usize,
    /// Columns N (a multiple of 128).
    pub n: usize,
    /// Contraction K (a multiple of 128).
    pub k: usize,
    /// Rows A, its scales and C have room for (>= offsets\[E\] for the product; rows at or past it are never
    /// touched whatever the device offsets hold).
    pub rows_max: usize,
}

/// Which kernel runs [`grouped_gemm_fp8`] (all give the same bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fp8Variant {
    /// C's whole 64-row groups of one expert through shared memory and TMA stores, the rest from registers
    /// (kernel `grouped_gemm_fp8`).
    #[default]
    Staged,
    /// Every row of C from registers (`grouped_gemm_fp8_regs`).
    Registers,
    /// As `Staged`, in 2-CTA clusters on pairs of column tiles sharing A by TMA multicast
    /// (`grouped_gemm_fp8_mc`; N a multiple of 256).
    Clusters,
    /// Not a GEMM: `grouped_gemm_fp8_probe`, the main loop without the per-block promotion (scales ignored, C is
    /// not the product), to time the pipeline's ceiling in the benchmark.
    Probe,
    /// Tiles of 128 x 256 (`grouped_gemm_fp8w`: a quarter less L2 traffic per FLOP, one partial product per
    /// warpgroup; N a multiple of 256). What `prepare` picks when N allows it (twelfth session, call G: 1.15x the
    /// 128 x 128 tiles on the 30B GEMM2 shape, 1.01x on GEMM1's; bitwise the same).
    Wide,
    /// Not a GEMM: `grouped_gemm_fp8w_probe1`, `Wide`'s main loop without the promotion (each half still issued
    /// and waited for in turn; C is not the product), for the benchmark.
    WideProbe1,
    /// Not a GEMM: `grouped_gemm_fp8w_probe2`, `Wide`'s main loop with both halves accumulated straight across
    /// the blocks (no promotion, no wait between halves; C is not the product), for the benchmark.
    WideProbe2,
    /// `Wide` itself (`grouped_gemm_fp8w_timeline`: the same C) that also records its consumer warps' clock at
    /// five points of 16 k-blocks into the buffer [`PreparedFp8Launch::timeline`] gives (none without it), for the
    /// benchmark.
    WideTimeline,
    /// Not a GEMM: `Wide` whose producer stops loading after the ring's first fill (`grouped_gemm_fp8w_nl`: the
    /// consumers run on stale stages with no TMA traffic; C is not the product), for the benchmark.
    WideNoLoad,
    /// Not a GEMM: `WideProbe2` with the loads stopped as `WideNoLoad` (`grouped_gemm_fp8w_probe2_nl`).
    WideProbe2NoLoad,
    /// Not a GEMM: `WideNoLoad` recording the timeline as `WideTimeline` does (`grouped_gemm_fp8w_nl_timeline`).
    WideNoLoadTimeline,
    /// Not a GEMM: `WideProbe1` recording the timeline as `WideTimeline` does, clocks 1 and 2 both after half
    /// 0's wait (`grouped_gemm_fp8w_probe1_timeline`).
    WideProbe1Timeline,
}

/// A checked blockwise-FP8 grouped GEMM with its tensor maps, to launch any number of times.
pub type PreparedFp8<'a> = PreparedFp8Launch<'a, GroupedGemmFp8>;

impl<'a> GroupedGemmFp8Args<'a> {
    /// Check the arguments and encode the tensor maps: [`Fp8Variant::Wide`] when N is a multiple of 256 (the
    /// faster: 1.15x on the 30B GEMM2 shape), else [`Fp8Variant::Staged`]; both give the same bits.
    pub fn prepare(self, gpu: &Gpu) -> Result<PreparedFp8<'a>> {
        let v = if self.n % kh::FP8W_BN as usize == 0 { Fp8Variant::Wide } else { Fp8Variant::Staged };
        self.prepare_with(gpu, v)
    }

    /// As [`Self::prepare`], with the kernel `variant` names.
    pub fn prepare_with(self, gpu: &Gpu, variant: Fp8Variant) -> Result<PreparedFp8<'a>> {
        let kernel = match variant {
            Fp8Variant::Staged => "grouped_gemm_fp8",
            Fp8Variant::Registers => "grouped_gemm_fp8_regs",
            Fp8Variant::Clusters => "grouped_gemm_fp8_mc",
            Fp8Variant::Probe => "grouped_gemm_fp8_probe",
            Fp8Variant::Wide => "grouped_gemm_fp8w",
            Fp8Variant::WideProbe1 => "grouped_gemm_fp8w_probe1",
            Fp8Variant::WideProbe2 => "grouped_gemm_fp8w_probe2",
            Fp8Variant::WideTimeline => "grouped_gemm_fp8w_timeline",
            Fp8Variant::WideNoLoad => "grouped_gemm_fp8w_nl",
            Fp8Variant::WideProbe2NoLoad => "grouped_gemm_fp8w_probe2_nl",
            Fp8Variant::WideNoLoadTimeline => "grouped_gemm_fp8w_nl_timeline",
            Fp8Variant::WideProbe1Timeline => "grouped_gemm_fp8w_probe1_timeline",
        };
        let ck = Check { what: "grouped_gemm_fp8", ordinal: gpu.ordinal() };
        ck.multiple("N", self.n, tile_cols(kernel) * if variant == Fp8Variant::Clusters { 2 } else { 1 })?;
        let op = Operands {
            a: self.a,
            a_scales: self.a_scales,
            b: self.b,
            b_scales: self.b_scales,
            offsets: self.offsets,
            tile_offsets: self.tile_offsets,
            c: Out::Bf16(self.c),
            experts: self.experts,
            k: self.k,
            rows_max: self.rows_max,
        };
        op.prepare(gpu, &ck, kernel, self.n, self.n, kh::FP8_BN as usize)
    }
}

/// GEMM1 of the forward with the SwiGLU epilogue, in blockwise FP8: for every expert e and its rows,
/// z = A . W1_e^T ([rows, 2I]: the gate g in columns 0..I, the up projection u in I..2I, from W1_e's rows in that
/// order, as the bf16 layer's W1), promoted in f32 as [`grouped_gemm_fp8`] does; h = silu(g) u stored in bf16
/// (z itself is not stored).
pub struct SwigluFp8Args<'a> {
    /// e4m3 [rows_max, H]; the rows of expert e at offsets\[e\]..offsets[e + 1].
    pub a: &'a CudaSlice<u8>,
    /// f32 [rows_max, H / 128].
    pub a_scales: &'a CudaSlice<f32>,
    /// e4m3 [E * 2I, H] (W1 quantized by [`quantize_blocks`]).
    pub w1: &'a CudaSlice<u8>,
    /// f32 [E * 2I / 128, H / 128].
    pub w1_scales: &'a CudaSlice<f32>,
    /// u32 [E + 1] row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1] m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, I]; rows past offsets\[E\] are not written.
    pub h: &'a mut CudaSlice<bf16>,
    /// Experts.
    pub experts: usize,
    /// I (a multiple of 64).
    pub i: usize,
    /// H, the contraction (a multiple of 128).
    pub k: usize,
    /// Rows A, its scales and h have room for (>= offsets\[E\] for the product; rows at or past it are never
    /// touched whatever the device offsets hold).
    pub rows_max: usize,
}

impl<'a> SwigluFp8Args<'a> {
    /// Check the arguments and encode the tensor maps (kernel `grouped_gemm_fp8_swiglu`).
    pub fn prepare(self, gpu: &Gpu) -> Result<PreparedFp8<'a>> {
        let ck = Check { what: "grouped_gemm_fp8_swiglu", ordinal: gpu.ordinal() };
        ck.multiple("I", self.i, 64)?;
        let op = Operands {
            a: self.a,
            a_scales: self.a_scales,
            b: self.w1,
            b_scales: self.w1_scales,
            offsets: self.offsets,
            tile_offsets: self.tile_offsets,
            c: Out::Bf16(self.h),
            experts: self.experts,
            k: self.k,
            rows_max: self.rows_max,
        };
        op.prepare(gpu, &ck, "grouped_gemm_fp8_swiglu", self.i, 2 * self.i, 64)
    }
}

/// [`SwigluFp8Args`] with h quantized in the epilogue (kernel `grouped_gemm_fp8_swiglu_q`): h's e4m3 codes and
/// 1 x 128 scales, bitwise what [`quantize_rows`] gives for the bf16 h of `grouped_gemm_fp8_swiglu` (h itself is
/// not stored). I a multiple of 128.
pub struct SwigluFp8QArgs<'a> {
    /// e4m3 [rows_max, H].
    pub a: &'a CudaSlice<u8>,
    /// f32 [rows_max, H / 128].
    pub a_scales: &'a CudaSlice<f32>,
    /// e4m3 [E * 2I, H].
    pub w1: &'a CudaSlice<u8>,
    /// f32 [E * 2I / 128, H / 128].
    pub w1_scales: &'a CudaSlice<f32>,
    /// u32 [E + 1] row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1] m-tile offsets (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// e4m3 [rows_max, I]: h's codes; rows past offsets\[E\] are not written.
    pub h8: &'a mut CudaSlice<u8>,
    /// f32 [rows_max, I / 128]: h's scales.
    pub h8_scales: &'a mut CudaSlice<f32>,
    /// Experts.
    pub experts: usize,
    /// I (a multiple of 128).
    pub i: usize,
    /// H, the contraction (a multiple of 128).
    pub k: usize,
    /// Rows A, its scales and h's codes and scales have room for (>= offsets\[E\] for the product; rows at or past
    /// it are never touched whatever the device offsets hold).
    pub rows_max: usize,
}

impl<'a> SwigluFp8QArgs<'a> {
    /// Check the arguments and encode the tensor maps (the 128 x 256 tiles of [`Fp8Variant::Wide`]).
    pub fn prepare(self, gpu: &Gpu) -> Result<PreparedFp8<'a>> {
        self.prepare_with(gpu, Fp8Variant::Wide)
    }

    /// As [`Self::prepare`] with the kernel of `variant`: `Wide`, `grouped_gemm_fp8w_swiglu_q` (128 x 256 tiles: 128
    /// columns of h from 128 rows of g and of u); any other, `grouped_gemm_fp8_swiglu_q` (pairs of 128 x 128
    /// tiles). The same codes and scales.
    pub fn prepare_with(self, gpu: &Gpu, variant: Fp8Variant) -> Result<PreparedFp8<'a>> {
        let (kernel, b_box) = match variant {
            Fp8Variant::Wide => ("grouped_gemm_fp8w_swiglu_q", 128),
            _ => ("grouped_gemm_fp8_swiglu_q", 64),
        };
        let ck = Check { what: kernel, ordinal: gpu.ordinal() };
        let op = Operands {
            a: self.a,
            a_scales: self.a_scales,
            b: self.w1,
            b_scales: self.w1_scales,
            offsets: self.offsets,
            tile_offsets: self.tile_offsets,
            c: Out::Codes(self.h8, self.h8_scales),
            experts: self.experts,
            k: self.k,
            rows_max: self.rows_max,
        };
        op.prepare(gpu, &ck, kernel, self.i, 2 * self.i, b_box)
    }
}

/// Launch the FP8 GEMM1 with the SwiGLU epilogue on `gpu`'s stream.
pub fn grouped_gemm_fp8_swiglu(gpu: &Gpu, g: SwigluFp8Args<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

/// Where an FP8 grouped GEMM's C goes.
enum Out<'a> {
    /// bf16 [rows_max, n].
    Bf16(&'a mut CudaSlice<bf16>),
    /// e4m3 codes [rows_max, n] and their 1 x 128 scales [rows_max, n / 128] (h quantized by GEMM1's epilogue).
    Codes(&'a mut CudaSlice<u8>, &'a mut CudaSlice<f32>),
}

/// What every FP8 grouped GEMM takes.
struct Operands<'a> {
    a: &'a CudaSlice<u8>,
    a_scales: &'a CudaSlice<f32>,
    b: &'a CudaSlice<u8>,
    b_scales: &'a CudaSlice<f32>,
    offsets: &'a CudaSlice<u32>,
    tile_offsets: &'a CudaSlice<u32>,
    c: Out<'a>,
    experts: usize,
    k: usize,
    rows_max: usize,
}

impl<'a> Operands<'a> {
    /// The checks and tensor maps of `kernel` with C [rows_max, n], B [E * n_b, K] read in boxes of `b_box`
    /// rows, tiles of `tile_cols` columns of C.
    fn prepare(
        self,
        gpu: &Gpu,
        ck: &Check,
        kernel: &'static str,
        n: usize,
        n_b: usize,
        b_box: usize,
    ) -> Result<PreparedFp8<'a>> {
        ck.multiple("K", self.k, 128)?;
        ck.routing(self.experts, self.offsets, Some(self.tile_offsets))?;
        let (e, k, rows) = (self.experts, self.k, self.rows_max);
        ck.buf("A", self.a, rows * k)?;
        ck.buf("A scales", self.a_scales, rows * (k / 128))?;
        ck.buf("B", self.b, e * n_b * k)?;
        ck.buf("B scales", self.b_scales, e * n_b / 128 * (k / 128))?;
        match &self.c {
            Out::Bf16(c) => ck.buf("C", *c, rows * n)?,
            Out::Codes(c, s) => {
                ck.multiple("N (h quantized in 1 x 128 blocks)", n, 128)?;
                ck.buf("h codes", *c, rows * n)?;
                ck.buf("h scales", *s, rows * (n / 128))?;
            }
        }
        if rows >= 1 << 31 || e * n_b >= 1 << 31 {
            return ck.bad(format!("{rows} rows or {} rows of B: 2^31 or more", e * n_b));
        }
        if rows == 0 {
            return Ok(PreparedFp8::new("grouped_gemm_fp8", gpu, kernel, None));
        }
        let s = gpu.stream().clone();
        let map = |addr, rows: usize, box_rows: usize| {
            let d =
                TiledDesc::row_major_2d(Dtype::U8, addr, rows as u64, k as u64, box_rows as u32, 128, Swizzle::B128);
            DeviceTensorMap::new(gpu, d)
        };
        let map_a = map(dptr(self.a, &s), rows, 128)?;
        let map_b = map(dptr(self.b, &s), e * n_b, b_box)?;
        let (cb_rows, cb_cols) = kh::GEMM_C_BOX;
        let (c_ptr, c_scales, dc) = match &self.c {
            Out::Bf16(c) => {
                let d = TiledDesc::row_major_2d(
                    Dtype::Bf16,
                    dptr(*c, &s),
                    rows as u64,
                    n as u64,
                    cb_rows,
                    cb_cols,
                    Swizzle::B128,
                );
                (dptr(*c, &s), 0, d)
            }
            Out::Codes(c, sc) => {
                let d = TiledDesc::row_major_2d(Dtype::U8, dptr(*c, &s), rows as u64, n as u64, 64, 128, Swizzle::B128);
                (dptr(*c, &s), dptr(*sc, &s), d)
            }
        };
        let map_c = DeviceTensorMap::new(gpu, dc)?;
        let p = GroupedGemmFp8 {
            map_a: map_a.ptr(gpu),
            map_b: map_b.ptr(gpu),
            sa: dptr(self.a_scales, &s),
            sb: dptr(self.b_scales, &s),
            offsets: dptr(self.offsets, &s),
            tile_offsets: dptr(self.tile_offsets, &s),
            c: c_ptr,
            error: 0,
            map_c: map_c.ptr(gpu),
            c_scales,
            experts: e as u32,
            n: n as u32,
            k: k as u32,
            rows_max: rows as u32,
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
        };
        let cfg = launch_cfg(gpu, kernel, rows, e, n, tile_cols(kernel))?;
        let mut prepared = PreparedFp8::new("grouped_gemm_fp8", gpu, kernel, Some((cfg, p)));
        prepared._maps = vec![map_a, map_b, map_c];
        Ok(prepared)
    }
}

/// Launch the blockwise-FP8 grouped GEMM on `gpu`'s stream.
pub fn grouped_gemm_fp8(gpu: &Gpu, g: GroupedGemmFp8Args<'_>) -> Result<()> {
    g.prepare(gpu)?.launch(gpu)
}

/// Columns of C one walk unit of `kernel` covers: 64 for the SwiGLU kernel's tiles, 128 for its h-quantizing
/// variant's pairs of them and for the plain kernels' tiles, 256 for `grouped_gemm_fp8w`'s.
pub(crate) fn tile_cols(kernel: &str) -> usize {
    if kernel == "grouped_gemm_fp8_swiglu" {
        64
    } else if kernel.starts_with("grouped_gemm_fp8w") && !kernel.starts_with("grouped_gemm_fp8w_swiglu") {
        kh::FP8W_BN as usize
    } else {
        kh::FP8_BN as usize
    }
}

/// The launch of FP8 grouped-GEMM `kernel` over at most `rows_max` rows of `experts` experts, C `n` columns wide
/// in units of `tile_cols` ([`tile_cols`]; one block per unit up to one per SM; the cluster kernel in resident pairs).
pub(crate) fn launch_cfg(
    gpu: &Gpu,
    kernel: &'static str,
    rows_max: usize,
    experts: usize,
    n: usize,
    tile_cols: usize,
) -> Result<Launch> {
    let tiles = (crate::gemm::m_tiles_max(rows_max, experts) * (n / tile_cols)) as u32;
    let mut grid = gpu.sm_count().min(tiles).max(1);
    if kernel == "grouped_gemm_fp8_mc" {
        // pairs of CTAs, all resident (each cluster walks the same share of tile pairs)
        let full = Launch::new(2 * (gpu.sm_count() / 2), kh::GEMM_THREADS, kh::FP8_SMEM);
        let fit = gpu.max_active_clusters(kernel, full)?;
        grid = (grid.min(2 * fit.max(1)) / 2 * 2).max(2);
    }
    let smem = if kernel.starts_with("grouped_gemm_fp8w") { kh::FP8W_SMEM } else { kh::FP8_SMEM };
    Ok(Launch::new(grid, kh::GEMM_THREADS, smem))
}

/// The codes and scale of one block of values: what the kernels compute.
fn quantize_block(vals: &[f32]) -> (Vec<u8>, f32) {
    let amax = vals.iter().fold(0f32, |m, v| m.max(v.abs()));
    let (scale, f) = scale_and_factor(amax);
    (vals.iter().map(|&v| e4m3_from_f32(v * f)).collect(), scale)
}

/// CPU reference of [`quantize_rows`]: (codes [rows, cols], scales [rows, cols / 128]).
pub fn quantize_rows_cpu(x: &[bf16], rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    assert!(cols % 128 == 0 && x.len() == rows * cols);
    let mut q = vec![0u8; rows * cols];
    let mut s = Vec::with_capacity(rows * cols / 128);
    for (i, blk) in x.chunks(128).enumerate() {
        let vals: Vec<f32> = blk.iter().map(|v| v.to_f32()).collect();
        let (codes, scale) = quantize_block(&vals);
        q[i * 128..(i + 1) * 128].copy_from_slice(&codes);
        s.push(scale);
    }
    (q, s)
}

/// CPU reference of [`quantize_blocks`]: (codes [rows, cols], scales [rows / 128, cols / 128]).
pub fn quantize_blocks_cpu(x: &[bf16], rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    assert!(cols % 128 == 0 && rows % 128 == 0 && x.len() == rows * cols);
    let mut q = vec![0u8; rows * cols];
    let mut s = Vec::with_capacity(rows / 128 * (cols / 128));
    for bi in 0..rows / 128 {
        for bj in 0..cols / 128 {
            let at = |r: usize, c: usize| (bi * 128 + r) * cols + bj * 128 + c;
            let vals: Vec<f32> = (0..128 * 128).map(|i| x[at(i / 128, i % 128)].to_f32()).collect();
            let (codes, scale) = quantize_block(&vals);
            for (i, c) in codes.into_iter().enumerate() {
                q[at(i / 128, i % 128)] = c;
            }
            s.push(scale);
        }
    }
    (q, s)
}

/// The reference of [`quantize_cols_grouped`]: codes [C, kp] and scales [kp / 128, C] of x [rows, C] with the
/// row offsets `offsets` (tile offsets derived: ceil(count / 128) per expert); columns past the experts' blocks 0
/// (the kernel leaves them unwritten).
pub fn quantize_cols_grouped_cpu(x: &[bf16], cols: usize, offsets: &[u32], kp: usize) -> (Vec<u8>, Vec<f32>) {
    cols_grouped_cpu(x, cols, offsets, kp, false)
}

/// CPU reference of [`quantize_cols_grouped`] with `block_scales`: codes [C, Kp] and scales [Kp / 128, C / 128].
pub fn quantize_cols_grouped_blocks_cpu(x: &[bf16], cols: usize, offsets: &[u32], kp: usize) -> (Vec<u8>, Vec<f32>) {
    cols_grouped_cpu(x, cols, offsets, kp, true)
}

fn cols_grouped_cpu(x: &[bf16], cols: usize, offsets: &[u32], kp: usize, block: bool) -> (Vec<u8>, Vec<f32>) {
    let per_block = if block { cols / 128 } else { cols };
    let mut q = vec![0u8; cols * kp];
    let mut s = vec![0f32; per_block * (kp / 128)];
    let amax = |v: &[f32]| v.iter().fold(0f32, |m, v| m.max(v.abs()));
    let mut kb = 0;
    for e in 0..offsets.len() - 1 {
        let (r0, r1) = (offsets[e] as usize, offsets[e + 1] as usize);
        for b0 in (r0..r1).step_by(128) {
            for cb in 0..cols / 128 {
                // the block's 128 columns along its 128 rows (rows past the expert's end: zeros)
                let column = |c: usize| -> Vec<f32> {
                    (0..128).map(|i| if b0 + i < r1 { x[(b0 + i) * cols + c].to_f32() } else { 0.0 }).collect()
                };
                let columns: Vec<Vec<f32>> = (cb * 128..(cb + 1) * 128).map(column).collect();
                // the 128 x 128 block's largest magnitude (block scales), or each column's own
                let block_amax = columns.iter().map(|v| amax(v)).fold(0f32, f32::max);
                for (vals, c) in columns.iter().zip(cb * 128..) {
                    let (scale, f) = scale_and_factor(if block { block_amax } else { amax(vals) });
                    let codes: Vec<u8> = vals.iter().map(|&v| e4m3_from_f32(v * f)).collect();
                    q[c * kp + 128 * kb..c * kp + 128 * (kb + 1)].copy_from_slice(&codes);
                    s[kb * per_block + if block { cb } else { c }] = scale;
                }
            }
            kb += 1;
        }
    }
    (q, s)
}

/// CPU reference of [`quantize_blocks_t`]: (codes [B, C, R], scales [B, C / 128, R / 128]), the transposes of
/// [`quantize_blocks_cpu`]'s per matrix.
pub fn quantize_blocks_t_cpu(x: &[bf16], batches: usize, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let (q, s) = quantize_blocks_cpu(x, batches * rows, cols);
    let (rb, cb) = (rows / 128, cols / 128);
    let mut qt = vec![0u8; q.len()];
    let mut st = vec![0f32; s.len()];
    for b in 0..batches {
        for r in 0..rows {
            for c in 0..cols {
                qt[(b * cols + c) * rows + r] = q[(b * rows + r) * cols + c];
            }
        }
        for i in 0..rb {
            for j in 0..cb {
                st[(b * cb + j) * rb + i] = s[(b * rb + i) * cb + j];
            }
        }
    }
    (qt, st)
}

/// The values a quantized matrix stands for: decode(q[r, c]) * scale of (r / block_rows, c / 128), in f64.
pub fn dequantize_cpu(q: &[u8], scales: &[f32], rows: usize, cols: usize, block_rows: usize) -> Vec<f64> {
    let cb = cols / 128;
    (0..rows * cols)
        .map(|i| {
            let (r, c) = (i / cols, i % cols);
            e4m3_to_f32(q[i]) as f64 * scales[(r / block_rows) * cb + c / 128] as f64
        })
        .collect()
}

/// Rows quantized in 1 x 128 blocks back to bf16, as the GPU's dequantizing gather writes them: decode(q[r, c]) *
/// scale of (r, c / 128) in f32, rounded once to nearest-even bf16.
pub fn dequantize_rows_bf16_cpu(q: &[u8], scales: &[f32], rows: usize, cols: usize) -> Vec<bf16> {
    let cb = cols / 128;
    (0..rows * cols).map(|i| bf16::from_f32(e4m3_to_f32(q[i]) * scales[(i / cols) * cb + (i % cols) / 128])).collect()
}

/// f64 CPU reference of [`grouped_gemm_fp8`] from the dequantized operands: C [offsets\[E\], N] with
/// C\[r\] = A\[r\] . B_e^T for the rows r of expert e (`a` [rows, K], `b` [E * N, K], both dequantized).
pub fn grouped_gemm_fp8_cpu(a: &[f64], b: &[f64], offsets: &[u32], n: usize, k: usize) -> Vec<f64> {
    let rows = *offsets.last().unwrap_or(&0) as usize;
    let mut c = vec![0f64; rows * n];
    for e in 0..offsets.len() - 1 {
        for r in offsets[e] as usize..offsets[e + 1] as usize {
            let ar = &a[r * k..(r + 1) * k];
            for j in 0..n {
                let br = &b[(e * n + j) * k..(e * n + j + 1) * k];
                c[r * n + j] = ar.iter().zip(br).map(|(x, y)| x * y).sum();
            }
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_rows_stand_for_their_values() {
        let mut rng = crate::rng::Rng::new(7);
        let (rows, cols) = (3, 256);
        let x: Vec<bf16> =
            (0..rows * cols).map(|i| bf16::from_f32((rng.sym(1.0) * (1 + i % 5) as f64) as f32)).collect();
        let (q, s) = quantize_rows_cpu(&x, rows, cols);
        assert_eq!(s.len(), rows * 2);
        let d = dequantize_cpu(&q, &s, rows, cols, 1);
        for blk in 0..rows * 2 {
            let amax = x[blk * 128..(blk + 1) * 128].iter().fold(0f32, |m, v| m.max(v.to_f32().abs()));
            // the block's largest value is exact (it maps to 448) and every value is within half an e4m3 step
            // (a relative 1/16) of its own, or of the subnormal step near zero
            let mut hit = false;
            for i in blk * 128..(blk + 1) * 128 {
                let (v, dv) = (x[i].to_f32() as f64, d[i]);
                assert!((v - dv).abs() <= v.abs() / 16.0 + s[blk] as f64 / 512.0 + 1e-12, "{v} vs {dv}");
                hit |= v.abs() == amax as f64 && (v - dv).abs() <= amax as f64 * 1e-6;
            }
            assert!(hit, "block {blk}: its largest value is not represented exactly");
        }
    }

    #[test]
    fn column_blocks_never_span_two_experts() {
        // expert 0: 130 rows of 1000 (two blocks, the second padded), expert 1: none, expert 2: 5 rows of 1/1000;
        // each block's scale is its own expert's, the padding codes are zero, expert 2 starts at block 2
        let cols = 128;
        let counts = [130usize, 0, 5];
        let offsets = [0u32, 130, 130, 135];
        let x: Vec<bf16> =
            (0..135 * cols).map(|i| bf16::from_f32(if i / cols < 130 { 1000.0 } else { 1e-3 })).collect();
        let kp = cols_grouped_kp(135, counts.len());
        let (q, s) = quantize_cols_grouped_cpu(&x, cols, &offsets, kp);
        for c in 0..cols {
            assert_eq!(s[c], 1000.0 / 448.0);
            assert_eq!(s[cols + c], 1000.0 / 448.0);
            assert_eq!(s[2 * cols + c], bf16::from_f32(1e-3).to_f32() / 448.0);
            // block 1: rows 128, 129 of expert 0, then 126 zeros
            assert!(q[c * kp + 130..c * kp + 256].iter().all(|&b| b == 0));
            assert!(q[c * kp + 128..c * kp + 130].iter().all(|&b| b == 0x7e), "448 is e4m3 0x7e");
            assert!(q[c * kp + 256..c * kp + 261].iter().all(|&b| b == 0x7e));
            assert!(q[c * kp + 261..c * kp + 384].iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn column_block_scales_cover_128_columns() {
        // one expert of 200 rows, 256 columns: column c holds (c + 1) / 256 in every row, and column 3 also 2.0 in
        // row 150 (block 1): block (kb, cb)'s scale is its largest magnitude over 128 rows x 128 columns
        let (rows, cols) = (200usize, 256usize);
        let mut x: Vec<bf16> = (0..rows * cols).map(|i| bf16::from_f32((i % cols + 1) as f32 / 256.0)).collect();
        x[150 * cols + 3] = bf16::from_f32(2.0);
        let offsets = [0u32, rows as u32];
        let kp = 256;
        let (q, s) = quantize_cols_grouped_blocks_cpu(&x, cols, &offsets, kp);
        assert_eq!(s.len(), 2 * 2);
        let amax = |c: usize| bf16::from_f32((c + 1) as f32 / 256.0).to_f32();
        assert_eq!(s, vec![amax(127) / 448.0, amax(255) / 448.0, 2.0 / 448.0, amax(255) / 448.0]);
        // the per-column form of the same rows: column 127's codes equal in both (its amax is its block's)
        let (qc, _) = quantize_cols_grouped_cpu(&x, cols, &offsets, kp);
        assert_eq!(q[127 * kp..127 * kp + 128], qc[127 * kp..127 * kp + 128]);
        // a smaller column of the block is coded against the block's scale: (1 / 256) / (0.5 / 448) = 3.5 = 1.75 x 2,
        // e4m3 0 1000 110 = 0x46
        assert_eq!(q[0], 0x46);
    }

    #[test]
    fn zero_blocks_get_scale_one_and_zero_codes() {
        let x = vec![bf16::from_f32(0.0); 128 * 128];
        let (q, s) = quantize_blocks_cpu(&x, 128, 128);
        assert!(q.iter().all(|&c| c == 0) && s == vec![1.0]);
    }

    #[test]
    fn transposed_blocks_are_the_transposed_values() {
        let mut rng = crate::rng::Rng::new(3);
        let (b, r, c) = (2, 128, 256);
        let x: Vec<bf16> = (0..b * r * c).map(|_| bf16::from_f64(rng.sym(2.0))).collect();
        let (q, s) = quantize_blocks_cpu(&x, b * r, c);
        let (qt, st) = quantize_blocks_t_cpu(&x, b, r, c);
        let (d, dt) = (dequantize_cpu(&q, &s, b * r, c, 128), dequantize_cpu(&qt, &st, b * c, r, 128));
        for m in 0..b {
            for i in 0..r {
                for j in 0..c {
                    assert_eq!(d[(m * r + i) * c + j], dt[(m * c + j) * r + i]);
                }
            }
        }
    }

    #[test]
    fn cpu_gemm_follows_the_offsets() {
        // two experts, N = 1, K = 2: rows 0..1 use B_0, rows 1..3 use B_1
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 1.0, 1.0, -1.0];
        assert_eq!(grouped_gemm_fp8_cpu(&a, &b, &[0, 1, 3], 1, 2), vec![3.0, -1.0, -1.0]);
    }
}
