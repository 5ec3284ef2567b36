//! K-grouped weight gradient in blockwise FP8 ([`WgradFp8`]): C_e[M, N] (+)= A_e^T B_e over each expert's rows,
//! with both operands quantized column-wise along the rows (`quantize_fp8_cols_grouped`: K-major, 1 x 128 blocks
//! inside one expert, each expert's segment zero-padded to a whole block, so no block needs masking).
//!
//! The block of the FP8 M-grouped kernel (one TMA producer thread, two consumer warpgroups), tiles of 128 x 128
//! of one expert's C, persistent over (expert, m-tile, n-tile); a 6-stage ring of 33 KiB: A^T's 128 rows x 128 K,
//! B^T's 128 rows x 128 K, and the K block's 128 scales of each (1D bulk copies). Per K block a warpgroup issues
//! four wgmma m64n128k32 into a partial product, waits, reads its rows' and columns' scales from the stage, gives
//! the stage back, and promotes: acc += partial sa[row] sb[col] (both operands have per-row-of-the-operand scales:
//! the promotion multiplies by their outer product). C from registers: f32 pairs or bf16 pairs, added to C's old
//! value with `accumulate` (each element one owner: deterministic). An expert without rows gets zeros (or nothing
//! added). First version: one partial (the other warpgroup's wgmma fill the tensor pipe meanwhile), no staging.
use crate::params::WgradFp8;
use crate::pipeline::Ring;
use crate::ptx::{math, regs, smem, sync, tma, wgmma};

const STAGES: u32 = crate::kernels_host::WGRAD_FP8_STAGES;
const TILE: u32 = 128 * 128;
/// The K block's scales in a stage: A's 128 (rows m of the tile), then B's 128 (columns n).
const SCALES: u32 = 2 * TILE;
const STAGE_BYTES: u32 = 2 * TILE + 1024;
const RING_AT: u32 = STAGES * STAGE_BYTES;
const _: () = assert!(STAGE_BYTES % 1024 == 0, "128-byte swizzle needs 1024-byte aligned tiles");
const _: () = assert!(
    RING_AT + Ring::<STAGES>::BYTES == crate::kernels_host::WGRAD_FP8_SMEM,
    "host and kernel agree on the shared memory"
);
const _: () = assert!(crate::kernels_host::WGRAD_FP8_SMEM <= 232448, "sm_90: at most 227 KiB of shared memory");

struct Tile {
    e: u32,
    mt: u32,
    nt: u32,
    k0: u32,
    k1: u32,
}

#[inline(always)]
unsafe fn tile_info(p: &WgradFp8, tile: u32) -> Tile {
    let (mts, nts) = (p.m / 128, p.n / 128);
    let e = tile / (mts * nts);
    let to = p.tile_offsets as *const u32;
    // never past the operands' K blocks, whatever the device offsets say
    let (k0, k1) = ((*to.add(e as usize)).min(p.kblocks), (*to.add(e as usize + 1)).min(p.kblocks));
    Tile { e, mt: (tile % (mts * nts)) / nts, nt: tile % nts, k0, k1: k1.max(k0) }
}

/// 384 threads, WGRAD_FP8_SMEM bytes of dynamic shared memory, grid <= the SM count; C f32.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8_f32(p: WgradFp8) {
    body::<false>(&p);
}

/// As `grouped_wgrad_fp8_f32` with C bf16 (each element rounded once; with `accumulate`, old + new in f32, then
/// rounded).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8_bf16(p: WgradFp8) {
    body::<true>(&p);
}

#[inline(always)]
unsafe fn body<const BF: bool>(p: &WgradFp8) {
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + RING_AT);
    let t = regs::tid();
    if t == 0 {
        ring.init(8); // one arrival per consumer warp
    }
    sync::block_sync();
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || p.experts * (p.m / 128) * (p.n / 128);
    if t / 128 == 0 {
        regs::setmaxnreg_dec::<40>();
        if regs::tid() == 0 {
            produce(p, base, ring, total());
        }
    } else {
        regs::setmaxnreg_inc::<232>();
        consume::<BF>(p, base, ring, total(), regs::tid() / 128 - 1);
    }
}

#[inline(always)]
unsafe fn produce(p: &WgradFp8, base: u32, ring: Ring<STAGES>, total: u32) {
    let (ma, mb) = (p.map_a as *const u8, p.map_b as *const u8);
    tma::prefetch_tensormap(ma);
    tma::prefetch_tensormap(mb);
    let mut it = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info(p, tile);
        let mut kb = ti.k0;
        while kb < ti.k1 {
            let fb = ring.produce(it, STAGE_BYTES);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            tma::load_2d(st, ma, (kb * 128) as i32, (ti.mt * 128) as i32, fb);
            tma::load_2d(st + TILE, mb, (kb * 128) as i32, (ti.nt * 128) as i32, fb);
            let sa = (p.sa as *const f32).add((kb * p.m + ti.mt * 128) as usize) as *const u8;
            let sb = (p.sb as *const f32).add((kb * p.n + ti.nt * 128) as usize) as *const u8;
            tma::load_1d(st + SCALES, sa, 512, fb);
            tma::load_1d(st + SCALES + 512, sb, 512, fb);
            it += 1;
            kb += 1;
        }
        tile += regs::nctaid();
    }
}

/// This warpgroup's four wgmma m64n128k32 of the stage at `st` (its 64 rows of A^T, the stage's 128 rows of B^T)
/// into `part` (overwritten), as one commit group.
#[inline(always)]
unsafe fn issue(st: u32, cw: u32, part: &mut [f32; 64]) {
    crate::kernels::grouped_gemm_fp8::issue_block(st + cw * (TILE / 2), st + TILE, part, false);
}

#[inline(always)]
unsafe fn consume<const BF: bool>(p: &WgradFp8, base: u32, ring: Ring<STAGES>, total: u32, cw: u32) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    // this thread's fragment rows r, r + 8 of the warpgroup's 64 and its first column (see ptx::wgmma)
    let r = 16 * (t / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let mut it = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info(p, tile);
        let mut acc = [0f32; 64];
        let mut part = [0f32; 64];
        let mut kb = ti.k0;
        while kb < ti.k1 {
            ring.wait_full(it);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            issue(st, cw, &mut part);
            wgmma::wait_group::<0>();
            wgmma::fence_operand_64(&mut part);
            // the block's scales of this thread's rows and columns, from the stage, before it is given back
            let ld = |at: u32| unsafe { f32::from_bits(smem::ld_u32(at)) };
            let (sa0, sa1) = (ld(st + SCALES + 4 * (cw * 64 + r)), ld(st + SCALES + 4 * (cw * 64 + r + 8)));
            let mut sb = [0f32; 32];
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                sb[2 * J] = ld(st + SCALES + 512 + 4 * (8 * J as u32 + c0));
                sb[2 * J + 1] = ld(st + SCALES + 512 + 4 * (8 * J as u32 + c0 + 1));
            });
            // every lane's reads of the stage are done before lane 0 gives it back
            sync::warp_sync();
            if lane == 0 {
                ring.release_prev(it + 1);
            }
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                crate::unroll!(Q in [0, 1] {
                    let i = 4 * J + Q;
                    acc[i] = math::fma(part[i], sa0 * sb[2 * J + Q], acc[i]);
                    acc[i + 2] = math::fma(part[i + 2], sa1 * sb[2 * J + Q], acc[i + 2]);
                });
            });
            it += 1;
            kb += 1;
        }
        // C_e rows e M + m of the tile, from registers (rows r and r + 8, column pairs 8 J + c0)
        let row_a = ti.e * p.m + ti.mt * 128 + cw * 64 + r;
        crate::unroll!(H in [0, 1] {
            let row = row_a + 8 * H as u32;
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                let col = ti.nt * 128 + 8 * J as u32 + c0;
                let at = (row * p.n + col) as usize; // even: one pair
                let (v0, v1) = (acc[4 * J + 2 * H], acc[4 * J + 2 * H + 1]);
                if BF {
                    let q = (p.c as *mut u32).add(at / 2);
                    let (mut a, mut b) = (v0, v1);
                    if p.accumulate != 0 {
                        let old = *q;
                        a += math::bf16_to_f32(old as u16);
                        b += math::bf16_to_f32((old >> 16) as u16);
                    }
                    *q = math::pack_bf16x2(a, b);
                } else {
                    let q = (p.c as *mut f32).add(at);
                    let (mut a, mut b) = (v0, v1);
                    if p.accumulate != 0 {
                        a += *q;
                        b += *q.add(1);
                    }
                    *q = a;
                    *q.add(1) = b;
                }
            });
        });
        tile += regs::nctaid();
    }
}
