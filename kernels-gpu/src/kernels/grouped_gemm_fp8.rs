//! M-grouped GEMM in blockwise FP8 (DeepSeek-V3's recipe): for each expert e and its rows offsets[e]..offsets[e + 1],
//! C[r, n] = sum over 128-deep blocks kb of K of sa[r, kb] sb[e, n / 128, kb] (A[r, kb] . B_e[n, kb]), bf16 out.
//!
//! The block of the bf16 engine (1 producer warp, 2 consumer warpgroups, persistent over (m-tile, n-tile) tiles
//! read from the device-side offsets as [`crate::scheduler::m_tile`] walks them), with tiles of 128 x 128 and a
//! 6-stage ring of 32 KiB: A's 128 rows x 128 K (one 128-byte-swizzled box: an e4m3 row of 128 is 128 bytes, the
//! layout of a bf16 stage of 64) and B's 128 rows x 128 K. A warpgroup runs its 64 rows as four wgmma m64n128k32
//! into a partial accumulator per k-block, waits for them, gives the stage back, and promotes: acc += partial *
//! (sa[row] * sb) in f32, so the tensor cores' own accumulation never spans more than one 128-deep block. The
//! scales of the next block are loaded (from L2) while the current one waits. Rows past the expert's end are
//! computed with the next expert's rows and not stored; rows past `rows_max` are zero (TMA fill) and read
//! row 0's scales. Epilogue from registers (bf16 pairs).
use crate::desc::SmemDesc;
use crate::kernels::routing_failed;
use crate::params::GroupedGemmFp8;
use crate::pipeline::Ring;
use crate::ptx::{math, regs, smem, sync, tma, wgmma};
use crate::scheduler::MTile;

const STAGES: u32 = crate::kernels_host::FP8_STAGES;
const BM: u32 = crate::kernels_host::GEMM_BM;
const BN: u32 = crate::kernels_host::FP8_BN;
/// K per stage (e4m3 elements = bytes): one scale block.
const BK: u32 = 128;
const A_BYTES: u32 = BM * BK;
const STAGE_BYTES: u32 = A_BYTES + BN * BK;
const _: () = assert!(STAGES * STAGE_BYTES + Ring::<STAGES>::BYTES == crate::kernels_host::FP8_SMEM, "smem layout");
const _: () = assert!(crate::kernels_host::FP8_SMEM <= 232448, "sm_90 allows at most 227 KiB of shared memory");
const _: () = assert!(STAGE_BYTES % 1024 == 0 && A_BYTES % 1024 == 0, "128-byte swizzle needs 1024-byte alignment");

#[inline(always)]
unsafe fn tile_info(p: &GroupedGemmFp8, tile: u32) -> MTile {
    let (to, off) = (p.tile_offsets as *const u32, p.offsets as *const u32);
    // SAFETY (of the reads): entries 0..=experts of both arrays, as the parameter block promises.
    crate::scheduler::m_tile(
        tile,
        p.n / BN,
        p.experts,
        BM,
        |i| unsafe { *to.add(i as usize) },
        |i| unsafe { *off.add(i as usize) },
    )
}

/// 384 threads, FP8_SMEM bytes of dynamic shared memory, grid <= the SM count.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8(p: GroupedGemmFp8) {
    // read once by every thread before the first barrier: the whole block returns or none
    if routing_failed(p.error) {
        return;
    }
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + STAGES * STAGE_BYTES);
    let t = regs::tid();
    if t == 0 {
        ring.init(8); // one arrival per consumer warp
    }
    sync::block_sync();
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || *(p.tile_offsets as *const u32).add(p.experts as usize) * (p.n / BN);
    if t / 128 == 0 {
        regs::setmaxnreg_dec::<40>();
        if t == 0 {
            produce(&p, base, ring, total());
        }
    } else {
        regs::setmaxnreg_inc::<232>();
        consume(&p, base, ring, total(), t / 128 - 1);
    }
}

#[inline(always)]
unsafe fn produce(p: &GroupedGemmFp8, base: u32, ring: Ring<STAGES>, total: u32) {
    let (ma, mb) = (p.map_a as *const u8, p.map_b as *const u8);
    tma::prefetch_tensormap(ma);
    tma::prefetch_tensormap(mb);
    let kb_n = p.k / BK;
    let mut it = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info(p, tile);
        let brow = (ti.e * p.n + ti.n_tile * BN) as i32;
        let mut kb = 0;
        while kb < kb_n {
            let fb = ring.produce(it, STAGE_BYTES);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            tma::load_2d(st, ma, (kb * BK) as i32, ti.row0 as i32, fb);
            tma::load_2d(st + A_BYTES, mb, (kb * BK) as i32, brow, fb);
            it += 1;
            kb += 1;
        }
        tile += regs::nctaid();
    }
}

#[inline(always)]
unsafe fn consume(p: &GroupedGemmFp8, base: u32, ring: Ring<STAGES>, total: u32, cw: u32) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    // this thread's fragment rows r, r + 8 of the warpgroup's 64 and its first column (see ptx::wgmma)
    let r = 16 * (t / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let kb_n = p.k / BK;
    let (sa, sb) = (p.sa as *const f32, p.sb as *const f32);
    let mut it = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info(p, tile);
        let row_a = ti.row0 + cw * 64 + r;
        let row_b = row_a + 8;
        // rows past the buffer are TMA's zeros: any finite scale will do, row 0's
        let sa_a = sa.add((if row_a < p.rows_max { row_a } else { 0 } * kb_n) as usize);
        let sa_b = sa.add((if row_b < p.rows_max { row_b } else { 0 } * kb_n) as usize);
        let sb_t = sb.add(((ti.e * (p.n / BN) + ti.n_tile) * kb_n) as usize);
        let mut acc = [0f32; 64];
        let mut part = [0f32; 64];
        let (mut na, mut nb, mut nw) = (*sa_a, *sa_b, *sb_t);
        let mut kb = 0;
        while kb < kb_n {
            let (fa, fb, fw) = (na, nb, nw);
            if kb + 1 < kb_n {
                na = *sa_a.add(kb as usize + 1);
                nb = *sa_b.add(kb as usize + 1);
                nw = *sb_t.add(kb as usize + 1);
            }
            ring.wait_full(it);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            let da = SmemDesc::k_major_sw128(st + cw * (A_BYTES / 2));
            let db = SmemDesc::k_major_sw128(st + A_BYTES);
            wgmma::fence();
            crate::unroll!(KS in [0, 1, 2, 3] {
                let off = 32 * KS as u32;
                wgmma::m64n128k32_f32_e4m3_ss(&mut part, da.advance(off).0, db.advance(off).0, (KS > 0) as u32);
            });
            wgmma::commit_group();
            wgmma::wait_group::<0>();
            wgmma::fence_operand_64(&mut part);
            if lane == 0 {
                ring.release_prev(it + 1); // this iteration's stage: its wgmma have read it
            }
            let (wa, wb) = (fa * fw, fb * fw);
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
                acc[4 * J] += part[4 * J] * wa;
                acc[4 * J + 1] += part[4 * J + 1] * wa;
                acc[4 * J + 2] += part[4 * J + 2] * wb;
                acc[4 * J + 3] += part[4 * J + 3] * wb;
            });
            it += 1;
            kb += 1;
        }
        let c = p.c as *mut u32;
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            let col = ti.n_tile * BN + 8 * J as u32 + c0;
            if row_a < ti.row_end {
                *c.add(((row_a * p.n + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J], acc[4 * J + 1]);
            }
            if row_b < ti.row_end {
                *c.add(((row_b * p.n + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J + 2], acc[4 * J + 3]);
            }
        });
        tile += regs::nctaid();
    }
}
