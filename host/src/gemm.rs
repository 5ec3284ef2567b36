//! The grouped-GEMM engine as a call of its own: C[rows_e, N] = A[rows_e, K] . op(B_e) for every expert, the
//! experts' rows given by device-side offsets (the host never learns the counts). The layer's stages are
//! built on the same kernels.
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::GroupedGemm;

use crate::error::{Error, Result};
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{DeviceTensorMap, Dtype, Swizzle, TiledDesc};

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
    /// bf16 [rows_max, K]; the rows of expert e at offsets[e]..offsets[e + 1].
    pub a: &'a CudaSlice<bf16>,
    /// bf16 [E, N, K] or [E, K, N].
    pub b: &'a CudaSlice<bf16>,
    /// Layout of B.
    pub b_layout: BLayout,
    /// u32 [E + 1], row offsets (device).
    pub offsets: &'a CudaSlice<u32>,
    /// u32 [E + 1], m-tile offsets in tiles of 128 rows (device).
    pub tile_offsets: &'a CudaSlice<u32>,
    /// bf16 [rows_max, N]; rows past offsets[E] are not written.
    pub c: &'a mut CudaSlice<bf16>,
    /// Experts.
    pub experts: usize,
    /// Columns N (a multiple of 8).
    pub n: usize,
    /// Contraction K (a multiple of 64).
    pub k: usize,
    /// Rows A and C have room for (>= offsets[E]).
    pub rows_max: usize,
}

/// The m-tile offsets (tiles of 128 rows) of per-expert row counts, as `route_scan` computes them.
pub fn tile_offsets(counts: &[u32]) -> Vec<u32> {
    let mut t = vec![0u32; counts.len() + 1];
    for (e, &c) in counts.iter().enumerate() {
        t[e + 1] = t[e] + c.div_ceil(kh::GEMM_BM);
    }
    t
}

/// Launch one grouped GEMM on `gpu`'s stream.
pub fn grouped_gemm(gpu: &Gpu, g: GroupedGemmArgs<'_>) -> Result<()> {
    let bad = |s: String| Err(Error::InvalidArgument(format!("grouped_gemm: {s}")));
    if g.k == 0 || g.k % 64 != 0 || g.n == 0 || g.n % 8 != 0 || g.experts == 0 {
        return bad(format!("K = {} must be a multiple of 64 and N = {} of 8, with experts > 0", g.k, g.n));
    }
    if g.a.len() != g.rows_max * g.k || g.c.len() != g.rows_max * g.n || g.b.len() != g.experts * g.n * g.k {
        return bad("A, B or C do not match rows_max, N, K and the expert count".into());
    }
    if g.offsets.len() != g.experts + 1 || g.tile_offsets.len() != g.experts + 1 {
        return bad("offsets and tile_offsets need E + 1 entries".into());
    }
    if g.rows_max == 0 {
        return Ok(());
    }
    let s = gpu.stream().clone();
    let (e, n, k, rows) = (g.experts as u64, g.n as u64, g.k as u64, g.rows_max as u64);
    let map_a = DeviceTensorMap::new(
        gpu,
        TiledDesc::row_major_2d(Dtype::Bf16, dptr(g.a, &s), rows, k, kh::GEMM_BM, 64, Swizzle::B128),
    )?;
    let (map_b, kernel, n_b) = match g.b_layout {
        BLayout::NK => (
            TiledDesc::row_major_2d(Dtype::Bf16, dptr(g.b, &s), e * n, k, kh::GEMM_BN, 64, Swizzle::B128),
            "grouped_gemm_bf16",
            g.n as u32,
        ),
        BLayout::KN => (
            TiledDesc::row_major_2d(Dtype::Bf16, dptr(g.b, &s), e * k, n, 64, 64, Swizzle::B128),
            "grouped_gemm_bt_bf16",
            g.k as u32,
        ),
    };
    let map_b = DeviceTensorMap::new(gpu, map_b)?;
    let n_tiles = (g.n as u32).div_ceil(kh::GEMM_BN);
    let p = GroupedGemm {
        map_a: map_a.ptr(gpu),
        map_b: map_b.ptr(gpu),
        offsets: dptr(g.offsets, &s),
        tile_offsets: dptr(g.tile_offsets, &s),
        c: dptr(g.c, &s),
        z: 0,
        experts: g.experts as u32,
        n: g.n as u32,
        k: g.k as u32,
        n_b,
        ldc: g.n as u32,
        n_tiles,
        w: 0,
        row_slot: 0,
        partial: 0,
        sh: 0,
    };
    let m_tiles_max = (g.rows_max as u32).div_ceil(kh::GEMM_BM) + (g.experts as u32).min(g.rows_max as u32);
    let grid = gpu.sm_count().min(m_tiles_max * n_tiles);
    // SAFETY: the block matches the kernel; A and C hold rows_max rows and the kernel bounds rows by the
    // device offsets (offsets[E] <= rows_max is the caller's promise, as in the layer); the maps and buffers
    // are freed in stream order after the kernel.
    unsafe { gpu.launch(kernel, Launch::new(grid, kh::GEMM_THREADS, kh::GEMM_SMEM), &p) }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tile_offsets_count_partial_tiles_and_skip_empty_experts() {
        assert_eq!(super::tile_offsets(&[0, 1, 128, 129, 0, 256]), vec![0, 0, 1, 2, 4, 4, 6]);
        assert_eq!(super::tile_offsets(&[]), vec![0]);
    }
}
