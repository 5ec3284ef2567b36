//! megamoe device code.
//!
//! Built twice: for `nvptx64-nvidia-cuda` (sm_90a) as the kernels the host loads, and for the host, where its
//! pure logic (descriptor bit fields, swizzle and layout math, routing math, the kernel manifest, the
//! `#[repr(C)]` parameter blocks shared with the host) is unit-tested on the CPU.
//!
//! Layers, bottom up: `ptx` (the only module with `asm!`; device only), [`desc`] and [`swizzle`] (pure),
//! [`manifest`] (what each kernel promises), then one kernel per file in `kernels/` (device only).
#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, stdarch_nvptx, asm_experimental_arch))]
#![allow(clippy::missing_safety_doc)]

#[cfg(test)]
extern crate std;

/// Repeat a block once per listed index, the index bound as a `const` (so register-array accesses stay
/// compile-time constants and never push an accumulator into local memory).
#[macro_export]
macro_rules! unroll {
    ($i:ident in [$($n:literal),* $(,)?] $body:block) => {
        $({
            const $i: usize = $n;
            $body
        })*
    };
}

pub mod desc;
pub mod ep;
pub mod fp8;
pub mod grid;
pub mod manifest;
pub mod params;
#[cfg(target_arch = "nvptx64")]
pub mod pipeline;
#[cfg(test)]
mod protocol;
pub mod route;
pub mod scheduler;
pub mod swizzle;

#[cfg(target_arch = "nvptx64")]
pub mod ptx;

#[cfg(target_arch = "nvptx64")]
pub mod kernels;

#[cfg(target_arch = "nvptx64")]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: ends the kernel.
    unsafe { core::arch::nvptx::trap() }
}

/// Launch constants of the kernels, for the host (the kernels' own modules are device-only).
pub mod kernels_host {
    /// Rows per tile of the M-grouped GEMMs.
    pub const GEMM_BM: u32 = 128;
    /// Columns per tile of the cooperative M-grouped GEMMs (two consumer warpgroups of wgmma m64n256k16).
    pub const GEMM_BN: u32 = 256;
    /// Columns per tile of `grouped_gemm_bt_dswiglu` (ping-pong: one consumer warpgroup's tile, two wgmma
    /// m64n128k16 halves).
    pub const GEMM_DSW_BN: u32 = 128;
    /// Threads per block of the grouped GEMMs (producer + 2 consumer warpgroups).
    pub const GEMM_THREADS: u32 = 384;
    /// Pipeline stages of the cooperative M-grouped GEMMs.
    pub const GEMM_STAGES: u32 = 4;
    /// The ring of the cooperative M-grouped GEMMs: stages of (A 128 x 64 + B 256 x 64) bf16.
    pub const GEMM_RING: u32 = GEMM_STAGES * (GEMM_BM + GEMM_BN) * 64 * 2;
    /// The epilogue's staging after the ring: two 8 KiB boxes per consumer warpgroup for the TMA stores.
    pub const GEMM_STAGING: u32 = 4 * 8192;
    /// The gathering producer's token of each row of the current A tile (u32 [GEMM_BM]).
    pub const GEMM_GATHER_ROWS: u32 = 4 * GEMM_BM;
    /// The ping-pong order barriers after the ring's: one per consumer warpgroup (used by the SwiGLU backward).
    pub const GEMM_ORDER_BARS: u32 = 2 * 8;
    /// Experts up to which the M-grouped GEMMs copy the tile and row offsets into shared memory at entry (the
    /// tile scheduler's binary search then reads shared memory, not global; more experts read global).
    pub const GEMM_SCHED_E: u32 = 256;
    /// That copy: u32 tile offsets [GEMM_SCHED_E + 1], then u32 row offsets [GEMM_SCHED_E + 1] (16-byte padded).
    pub const GEMM_SCHED: u32 = (2 * (GEMM_SCHED_E + 1) * 4).div_ceil(16) * 16;
    /// Dynamic shared memory of the M-grouped GEMMs: the ring, the staging, the ring's mbarriers, the order
    /// barriers, the gathering producer's row tokens, then the scheduler's offsets.
    pub const GEMM_SMEM: u32 =
        GEMM_RING + GEMM_STAGING + 16 * GEMM_STAGES + GEMM_ORDER_BARS + GEMM_GATHER_ROWS + GEMM_SCHED;
    /// Pipeline stages of `grouped_gemm_bt_dswiglu` (A 128 x 64 + B 128 x 64; its z staging takes the room of
    /// two more).
    pub const GEMM_DSW_STAGES: u32 = 4;
    /// The staging of `grouped_gemm_bt_dswiglu` after its ring: per consumer warpgroup two (g, u) pairs of
    /// 64 x 64 bf16 boxes (8 KiB each, 128-byte swizzle), then one s * h box per consumer warpgroup.
    pub const GEMM_DSW_STAGING: u32 = 10 * 8192;
    /// Dynamic shared memory of `grouped_gemm_bt_dswiglu`: the ring, the staging, the ring's mbarriers, the
    /// order barriers, the staging's four mbarriers (one per (g, u) pair), then the scheduler's offsets.
    pub const GEMM_DSW_SMEM: u32 = GEMM_DSW_STAGES * (GEMM_BM + GEMM_DSW_BN) * 64 * 2
        + GEMM_DSW_STAGING
        + 16 * GEMM_DSW_STAGES
        + GEMM_ORDER_BARS
        + 4 * 8
        + GEMM_SCHED;
    /// Ring stages of `grouped_gemm_bt_dswiglu_ew` (the cooperative 48 KiB stages; the fourth's room holds the
    /// bf16 dh tile the consumers hand to the epilogue warpgroup).
    pub const GEMM_EW_STAGES: u32 = 3;
    /// Columns of a tile of `grouped_gemm_bt_dswiglu_ew7` (4 warpgroups, seven epilogue warps: 512 threads cap the
    /// registers at 128, room for the m64n192 accumulators).
    pub const GEMM_EW7_BN: u32 = 192;
    /// Ring stages of `grouped_gemm_bt_dswiglu_ew7` (40 KiB stages; then its 48 KiB dh tile).
    pub const GEMM_EW7_STAGES: u32 = 4;
    /// Columns of a tile of the narrow seven-warp SwiGLU backward (`grouped_gemm_bt_dswiglu_ew7n*`): where I needs as
    /// many 128-column tiles as 192-column ones (I <= 128, or 129..=256), the same A reads with no padding columns.
    pub const GEMM_EW7N_BN: u32 = 128;
    /// Ring stages of `grouped_gemm_bt_dswiglu_ew7n*` (32 KiB stages: the 192-column ring's bytes in flight, one
    /// more stage; then its 32 KiB dh tile).
    pub const GEMM_EW7N_STAGES: u32 = 5;
    /// Pipeline stages of the weight-gradient GEMM.
    pub const WGRAD_STAGES: u32 = 4;
    /// The weight-gradient GEMM's ring: stages of (A 128 x 64 + B 256 x 64) bf16.
    pub const WGRAD_RING: u32 = WGRAD_STAGES * (128 + 256) * 64 * 2;
    /// Dynamic shared memory of the weight-gradient GEMM: its ring, its staging (two boxes of
    /// [`WGRAD_C_BOX`] f32 per consumer warp), the ring's mbarriers, the tile queue, the experts' ranking and the
    /// cluster forms' channel of tile indices (two slots).
    pub const WGRAD_SMEM: u32 = WGRAD_RING
        + 8 * 2 * WGRAD_C_BOX.0 * WGRAD_C_BOX.1 * 4
        + 16 * WGRAD_STAGES
        + 24 * WGRAD_QUEUE
        + 8 * WGRAD_SORT_MAX
        + 20 * 2 // PairChannel::<PAIR_Q = 2>::BYTES
        + 16; // the gathering producer's two tile slots (grouped_wgrad.rs asserts the sum)
    /// Slots of the weight-gradient GEMM's tile queue (from its producer to its consumers).
    pub const WGRAD_QUEUE: u32 = 4;
    /// Experts the weight-gradient GEMM's run-time schedule ranks busiest first in shared memory (more: in order).
    pub const WGRAD_SORT_MAX: u32 = 256;
    /// Threads per block of `wgrad_expert_maps` (one per tensor map: two an expert).
    pub const WGRAD_MAPS_THREADS: u32 = 128;
    /// Dynamic shared memory the M-grouped kernel `kernel` is launched with.
    pub fn m_grouped_smem(kernel: &str) -> u32 {
        // a 2-CTA cluster variant (`_mc`) and the overlapped gather's (`_mv`) have their kernel's layout
        if kernel.trim_end_matches("_mc").trim_end_matches("_mv") == "grouped_gemm_bt_dswiglu" {
            GEMM_DSW_SMEM
        } else {
            GEMM_SMEM
        }
    }
    /// Pipeline stages of `grouped_gemm_fp8` (A 128 rows x 128 bytes + B 128 x 128: 32 KiB a stage).
    pub const FP8_STAGES: u32 = 6;
    /// Shared memory of `grouped_gemm_fp8`: the ring, the epilogue's staging (two 64 x 64 bf16 boxes per consumer
    /// warpgroup), the ring's barriers, then the producer's tile slots (8 x 16 bytes: each tile's expert and rows,
    /// looked up once by the producer and read by the consumers).
    pub const FP8_SMEM: u32 = FP8_STAGES * 2 * 128 * 128 + GEMM_STAGING + 16 * FP8_STAGES + FP8_SLOTS * 16;
    /// Tile slots of `grouped_gemm_fp8` (more than FP8_STAGES: the producer runs at most that many tiles ahead).
    pub const FP8_SLOTS: u32 = 8;
    /// Columns per tile of `grouped_gemm_fp8` (two consumer warpgroups of wgmma m64n128k32; the f32 accumulator
    /// and the block's partial product take 128 registers).
    pub const FP8_BN: u32 = 128;
    /// Bytes between two columns of `quantize_fp8_cols_grouped`'s transposed tile in shared memory: 128 rows of
    /// bf16 plus 16 (a warp's 16-byte reads of 16 columns then fall in different banks); the kernel takes 128 of them.
    pub const FP8_COLS_PITCH: u32 = 272;
    /// (row, 128-column block) units per warp of `quantize_fp8_rows` (its grid: units / (8 FP8_ROWS_UNITS)).
    pub const FP8_ROWS_UNITS: u32 = 4;
    /// Dynamic shared memory of `quantize_fp8_cols_grouped`: the transposed tile, the half-columns' maxima
    /// (2 x 128 f32), the warps' maxima (8 f32), the codes staged for whole-line stores (128 x 144 bytes).
    pub const FP8_COLS_SMEM: u32 = 128 * FP8_COLS_PITCH + 1024 + 32 + 128 * 144;
    /// Pipeline stages of `grouped_wgrad_fp8_*` (A^T 128 x 128 bytes, B^T 128 x 128, their 128 + 128 scales).
    pub const WGRAD_FP8_STAGES: u32 = 5;
    /// Shared memory of `grouped_wgrad_fp8_*`: the ring (33 KiB a stage), the epilogue's staging (two 2 KiB boxes
    /// per consumer warp, as `grouped_wgrad_*`), the ring's barriers, the tile queue and the experts' ranking.
    pub const WGRAD_FP8_SMEM: u32 = WGRAD_FP8_STAGES * (2 * 128 * 128 + 1024)
        + 8 * 2 * WGRAD_C_BOX.0 * WGRAD_C_BOX.1 * 4
        + 16 * WGRAD_FP8_STAGES
        + 24 * WGRAD_QUEUE
        + 8 * WGRAD_SORT_MAX;
    /// Columns per tile of `grouped_gemm_fp8w` (each warpgroup's 64 x 256 f32 accumulator in 128 registers, one
    /// 64 x 128 partial product: the tile's two column halves run one after the other).
    pub const FP8W_BN: u32 = 256;
    /// Pipeline stages of `grouped_gemm_fp8w` (A 128 rows x 128 bytes + B 256 x 128: 48 KiB a stage).
    pub const FP8W_STAGES: u32 = 4;
    /// Shared memory of `grouped_gemm_fp8w`: the ring, the staging, the ring's barriers, the tile slots, the zt
    /// epilogue's reduction, the gathering producer's row tokens.
    pub const FP8W_SMEM: u32 =
        FP8W_STAGES * (128 + 256) * 128 + GEMM_STAGING + 16 * FP8W_STAGES + FP8_SLOTS * 16 + FP8W_RED + FP8W_TOKS;
    /// The block-amax reduction of `grouped_gemm_fp8w_swiglu_zt`: two tiles' (by parity) 8 warps' maxima, f32.
    pub const FP8W_RED: u32 = 64;
    /// The gathering `grouped_gemm_fp8w` kernels' row tokens of two tiles (by the block's tile parity): u32 `[2][128]`.
    pub const FP8W_TOKS: u32 = 2 * 4 * 128;
    /// Rows and columns of the boxes the weight-gradient epilogue stores (f32, 128-byte swizzle: 32 columns),
    /// one consumer warp's 16 rows.
    pub const WGRAD_C_BOX: (u32, u32) = (16, 32);
    /// The same for bf16 output (`grouped_wgrad_bf16`): 16 rows x 64 columns, the same 2 KiB a box.
    pub const WGRAD_C_BOX_BF16: (u32, u32) = (16, 64);
    /// Rows and columns of the boxes the bf16 epilogue stores (128-byte swizzle: 64 columns).
    pub const GEMM_C_BOX: (u32, u32) = (64, 64);
    /// Threads per block of `route_count` and `route_place` (`route_scan`: [`crate::route::SCAN_THREADS`]).
    pub const ROUTE_THREADS: u32 = crate::route::THREADS;
}
