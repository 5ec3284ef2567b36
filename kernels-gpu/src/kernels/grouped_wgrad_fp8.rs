//! K-grouped weight gradient in blockwise FP8 ([`WgradFp8`]): C_e[M, N] (+)= A_e^T B_e over each expert's rows,
//! with both operands quantized column-wise along the rows (`quantize_fp8_cols_grouped`: K-major, 1 x 128 blocks
//! inside one expert, each expert's segment zero-padded to a whole block, so no block needs masking).
//!
//! The block of the FP8 M-grouped kernel (one TMA producer thread, two consumer warpgroups), tiles of 128 x 128
//! of one expert's C, persistent over (expert, m-tile, n-tile) in the order the producer hands the consumers through
//! a tile queue (static, or at run time busiest first, as the bf16 kernel's); a 5-stage ring of 33 KiB: A^T's 128 rows x 128 K,
//! B^T's 128 rows x 128 K, and the K block's 128 scales of each (1D bulk copies; the `fp8b` kernels, whose B has one
//! scale per 128 x 128 block, read that scale from global memory instead). Per K block a warpgroup issues
//! four wgmma m64n128k32 into one of two partial products and, while they run, promotes the previous block's
//! partial: acc += partial sa[row] sb[col] (both operands have per-row-of-the-operand scales: the promotion
//! multiplies by their outer product), reading its rows' and columns' scales from that block's stage before
//! giving the stage back. The epilogue is the bf16 weight gradients' (`grouped_wgrad::store` / `store_bf16`):
//! through per-warp staging boxes and the copy engine (TMA stores, or reduce-adds with `accumulate`), overlapping
//! the next tile's main loop; each element one owner: deterministic. An expert without rows gets zeros (or nothing
//! added).
use crate::kernels::grouped_wgrad::{rank_experts, store, store_bf16, COut, C_BOX, SORT_MAX};
use crate::params::WgradFp8;
use crate::pipeline::{PairChannel, Ring, TileQueue, TileWalk};
use crate::ptx::{global, math, regs, smem, sync, tma, wgmma};

const STAGES: u32 = crate::kernels_host::WGRAD_FP8_STAGES;
const TILE: u32 = 128 * 128;
/// The K block's scales in a stage: A's 128 (rows m of the tile), then B's 128 (columns n).
const SCALES: u32 = 2 * TILE;
const STAGE_BYTES: u32 = 2 * TILE + 1024;
/// The epilogue's staging after the ring: two boxes per consumer warp.
const STAGING: u32 = STAGES * STAGE_BYTES;
const RING_AT: u32 = STAGING + 16 * C_BOX;
const _: () = assert!(STAGE_BYTES % 1024 == 0, "128-byte swizzle needs 1024-byte aligned tiles");
/// The tile queue (from the producer to the consumers), after the ring's barriers; then the experts busiest first
/// and their K-block counts (as the bf16 kernel's).
const QUEUE: u32 = crate::kernels_host::WGRAD_QUEUE;
const QUEUE_AT: u32 = RING_AT + Ring::<STAGES>::BYTES;
const ORDER_AT: u32 = QUEUE_AT + TileQueue::<QUEUE>::BYTES;
const _: () = assert!(QUEUE_AT % 8 == 0, "mbarriers are 8-byte aligned");
const _: () = assert!(
    ORDER_AT + 8 * SORT_MAX == crate::kernels_host::WGRAD_FP8_SMEM,
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
    crate::kernels::pdl_entry();
    body::<false, false, false, false>(&p);
}

/// As `grouped_wgrad_fp8_f32` with C bf16 (each element rounded once; with `accumulate`, the copy engine adds the
/// rounded tile to C, as `grouped_wgrad_bf16` does).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8_bf16(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, false, false>(&p);
}

/// As `grouped_wgrad_fp8_f32` with B's scales per 128 x 128 block ([Kp / 128, N / 128]): the promotion is one fused
/// multiply-add per element with sa[row] sb[block] (the forward's), half the work of the outer product.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8b_f32(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, true, false>(&p);
}

/// As `grouped_wgrad_fp8_bf16` with B's scales per 128 x 128 block.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8b_bf16(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, true, false>(&p);
}

/// As `grouped_wgrad_fp8b_f32`, and the producer warpgroup's warps 1..3 run `p.combine` meanwhile (as
/// `grouped_wgrad_f32_mv`'s: the layer's dx sum under its weight gradients).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8b_f32_mv(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, true, true>(&p);
}

/// As `grouped_wgrad_fp8b_bf16` with the combine of `grouped_wgrad_fp8b_f32_mv`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8b_bf16_mv(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, true, true>(&p);
}

/// A probe, not a GEMM: `grouped_wgrad_fp8_bf16`'s main loop without the promotion (the scales ignored, every block
/// accumulated in the tensor cores' own sum, one wgmma group in flight; C is not the product), to time the data
/// path's ceiling in the benchmark.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_fp8_probe(p: WgradFp8) {
    crate::kernels::pdl_entry();
    body::<true, true, false, false>(&p);
}

#[inline(always)]
unsafe fn body<const BF: bool, const PROBE: bool, const BLK: bool, const MV: bool>(p: &WgradFp8) {
    // the routing error word (when given) is read once, by every thread, before the first barrier: the whole block
    // returns or none, and C is neither overwritten nor added to
    if crate::kernels::routing_failed(p.error) {
        return;
    }
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + RING_AT);
    let queue = TileQueue::<QUEUE>::at(base + QUEUE_AT);
    let t = regs::tid();
    // the run-time schedule hands out the experts' tiles busiest first (by K blocks), as the bf16 kernel's
    if p.sched != 0 && p.experts <= SORT_MAX {
        rank_experts(p.experts, p.tile_offsets as *const u32, base + ORDER_AT, t);
    }
    if t == 0 {
        // every lane of the 8 consumer warps gives a slot back (`pop_each_lane`: each lane releases its own read,
        // no warp barrier between the reads and one lane's arrival, which racecheck reports as a hazard)
        queue.init(8 * 32);
        ring.init(8); // one arrival per consumer warp (and the mbarrier-init fence for both)
    }
    sync::block_sync();
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || p.experts * (p.m / 128) * (p.n / 128);
    if t / 128 == 0 {
        regs::setmaxnreg_dec::<40>();
        if regs::tid() == 0 {
            produce::<BLK>(p, base, ring, queue, total());
        } else if MV && regs::tid() >= 32 {
            crate::kernels::grouped_wgrad::combine(&p.combine, regs::tid() / 32 - 1, regs::tid() % 32);
        }
    } else {
        regs::setmaxnreg_inc::<232>();
        consume::<BF, PROBE, BLK>(p, base, ring, queue, total(), regs::warpgroup() - 1);
    }
}

/// The producer thread, as the bf16 kernel's (`grouped_wgrad::produce`): each tile's index on the queue, then its
/// stages; then an index past the last. Static round robin, or with `p.sched` the next index of the host-zeroed
/// counter once a tile's loads are issued, the experts busiest first (up to SORT_MAX).
#[inline(always)]
unsafe fn produce<const BLK: bool>(p: &WgradFp8, base: u32, ring: Ring<STAGES>, queue: TileQueue<QUEUE>, total: u32) {
    let (ma, mb) = (p.map_a as *const u8, p.map_b as *const u8);
    crate::kernels::acquire_prefetch(ma);
    crate::kernels::acquire_prefetch(mb);
    let order = if p.sched != 0 && p.experts <= SORT_MAX { Some(base + ORDER_AT) } else { None };
    // (no cluster: the pair channel is never used)
    let mut walk =
        TileWalk::<false>::new(total, (p.m / 128) * (p.n / 128), p.n / 128, p.sched, order, PairChannel::at(0));
    let mut it = 0u32;
    let mut j = 0u32;
    loop {
        let tile = walk.tile();
        queue.push(j, tile, 0);
        j += 1;
        if tile >= total {
            break;
        }
        let ti = tile_info(p, tile);
        let mut kb = ti.k0;
        while kb < ti.k1 {
            // with B's scales per block, the consumers read their one scale from global memory
            let fb = ring.produce(it, if BLK { STAGE_BYTES - 512 } else { STAGE_BYTES });
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            tma::load_2d(st, ma, (kb * 128) as i32, (ti.mt * 128) as i32, fb);
            tma::load_2d(st + TILE, mb, (kb * 128) as i32, (ti.nt * 128) as i32, fb);
            let sa = (p.sa as *const f32).add((kb * p.m + ti.mt * 128) as usize) as *const u8;
            tma::load_1d(st + SCALES, sa, 512, fb);
            if !BLK {
                let sb = (p.sb as *const f32).add((kb * p.n + ti.nt * 128) as usize) as *const u8;
                tma::load_1d(st + SCALES + 512, sb, 512, fb);
            }
            it += 1;
            kb += 1;
        }
        walk.advance();
    }
}

/// This warpgroup's four wgmma m64n128k32 of the stage at `st` (its 64 rows of A^T, the stage's 128 rows of B^T)
/// into `acc` (overwritten, or added to when `add`), as one commit group.
#[inline(always)]
unsafe fn issue(st: u32, cw: u32, acc: &mut [f32; 64], add: bool) {
    crate::kernels::grouped_gemm_fp8::issue_block(st + cw * (TILE / 2), st + TILE, acc, add);
}

/// acc += part sa[row] sb[col] with this thread's two rows' scales and its 32 columns' (pairs 8 J + c0, + 1: one
/// 8-byte shared load each) from the stage at `st`; then the warp gives the stage of iteration `it` back.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn promote<const BLK: bool>(
    acc: &mut [f32; 64],
    part: &mut [f32; 64],
    st: u32,
    ring: &Ring<STAGES>,
    it: u32,
    cw: u32,
    sbk: f32,
) {
    wgmma::fence_operand_64(part);
    let t = regs::tid() % 128;
    let lane = t % 32;
    let r = 16 * (t / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let ld = |at: u32| unsafe { f32::from_bits(smem::ld_u32(at)) };
    let (sa0, sa1) = (ld(st + SCALES + 4 * (cw * 64 + r)), ld(st + SCALES + 4 * (cw * 64 + r + 8)));
    if BLK {
        // B's one scale for the block: one fused multiply-add per element
        let (w0, w1) = (sa0 * sbk, sa1 * sbk);
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            acc[4 * J] = math::fma(part[4 * J], w0, acc[4 * J]);
            acc[4 * J + 1] = math::fma(part[4 * J + 1], w0, acc[4 * J + 1]);
            acc[4 * J + 2] = math::fma(part[4 * J + 2], w1, acc[4 * J + 2]);
            acc[4 * J + 3] = math::fma(part[4 * J + 3], w1, acc[4 * J + 3]);
        });
    } else {
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            let [b0, b1] = smem::ld_v2(st + SCALES + 512 + 4 * (8 * J as u32 + c0));
            let (b0, b1) = (f32::from_bits(b0), f32::from_bits(b1));
            acc[4 * J] = math::fma(part[4 * J], sa0 * b0, acc[4 * J]);
            acc[4 * J + 1] = math::fma(part[4 * J + 1], sa0 * b1, acc[4 * J + 1]);
            acc[4 * J + 2] = math::fma(part[4 * J + 2], sa1 * b0, acc[4 * J + 2]);
            acc[4 * J + 3] = math::fma(part[4 * J + 3], sa1 * b1, acc[4 * J + 3]);
        });
    }
    // every lane's reads of the stage are done before lane 0 gives it back
    sync::warp_sync();
    if lane == 0 {
        ring.release_prev(it + 1);
    }
}

#[inline(always)]
unsafe fn consume<const BF: bool, const PROBE: bool, const BLK: bool>(
    p: &WgradFp8,
    base: u32,
    ring: Ring<STAGES>,
    queue: TileQueue<QUEUE>,
    total: u32,
    cw: u32,
) {
    if regs::tid() % 32 == 0 {
        // C's map: each warp's lane 0 issues its boxes' stores (grouped_wgrad's `box_out`)
        crate::kernels::acquire_host_map(p.map_c);
    }
    let mut it = 0u32;
    let mut q = 0u32;
    loop {
        let (tile, _) = queue.pop_each_lane(q);
        q += 1;
        if tile >= total {
            break;
        }
        // the tile's K blocks and, for BLK, where B's scales of its blocks start ([Kp / 128, N / 128])
        let (nk, sb0) = {
            let ti = tile_info(p, tile);
            (ti.k1 - ti.k0, (p.sb as *const f32).add((ti.k0 * (p.n / 128) + ti.nt) as usize))
        };
        let mut acc = [0f32; 64];
        let (mut p0, mut p1) = ([0f32; 64], [0f32; 64]);
        let st = |i: u32| base + Ring::<STAGES>::stage(i) * STAGE_BYTES;
        if PROBE {
            let mut j = 0;
            while j < nk {
                ring.wait_full(it + j);
                issue(st(it + j), cw, &mut acc, j > 0);
                wgmma::wait_group::<1>();
                if j > 0 && regs::tid() % 32 == 0 {
                    ring.release_prev(it + j);
                }
                j += 1;
            }
            wgmma::wait_group::<0>();
            if nk > 0 && regs::tid() % 32 == 0 {
                ring.release_prev(it + nk);
            }
        } else if nk > 0 {
            // with BLK, B's scale of the tile's block j (read when the block is issued, used at its promotion)
            let sbk = |j: u32| unsafe {
                if BLK {
                    global::ld_nc_f32(sb0.add((j * (p.n / 128)) as usize))
                } else {
                    0.0
                }
            };
            let mut s0 = sbk(0);
            ring.wait_full(it);
            issue(st(it), cw, &mut p0, false);
            // iteration it + j - 1 in flight in p0 at the top of each pass; whole pairs in the loop (ptxas keeps the
            // wgmma asynchronous only when no partial is in flight across a second loop exit: C7514)
            let mut j = 1;
            while j + 1 < nk {
                let s1 = sbk(j);
                ring.wait_full(it + j);
                issue(st(it + j), cw, &mut p1, false);
                wgmma::wait_group::<1>();
                promote::<BLK>(&mut acc, &mut p0, st(it + j - 1), &ring, it + j - 1, cw, s0);
                s0 = sbk(j + 1);
                ring.wait_full(it + j + 1);
                issue(st(it + j + 1), cw, &mut p0, false);
                wgmma::wait_group::<1>();
                promote::<BLK>(&mut acc, &mut p1, st(it + j), &ring, it + j, cw, s1);
                j += 2;
            }
            if j < nk {
                let s1 = sbk(j);
                ring.wait_full(it + j);
                issue(st(it + j), cw, &mut p1, false);
                wgmma::wait_group::<1>();
                promote::<BLK>(&mut acc, &mut p0, st(it + j - 1), &ring, it + j - 1, cw, s0);
                wgmma::wait_group::<0>();
                promote::<BLK>(&mut acc, &mut p1, st(it + j), &ring, it + j, cw, s1);
            } else {
                wgmma::wait_group::<0>();
                promote::<BLK>(&mut acc, &mut p0, st(it + j - 1), &ring, it + j - 1, cw, s0);
            }
        }
        // unconditional (a no-op with nothing pending): a wait only on some paths makes ptxas insert its own in
        // the others and serialise every wgmma of the kernel (C7518)
        wgmma::wait_group::<0>();
        wgmma::fence_operand_64(&mut acc);
        it += nk;
        // C_e rows e M + m of the tile: this warp's 16 (M a multiple of 128: always inside); the tile's coordinates
        // again, not kept live across the main loop
        let ti = tile_info(p, tile);
        let y = (ti.e * p.m + ti.mt * 128 + cw * 64 + 16 * ((regs::tid() % 128) / 32)) as i32;
        // built here, not before the loop: nothing more lives across the main loop (the bf16 form spilled)
        let staging = base + STAGING + (regs::tid() / 32 - 4) * 2 * C_BOX;
        let out = COut { map: p.map_c, n: p.n, accumulate: p.accumulate != 0 };
        if BF {
            store_bf16(&out, &acc, y, ti.nt * 128, staging);
        } else {
            store(&out, &acc, y, ti.nt * 128, staging);
        }
    }
    // the staging must not be freed (block exit) before the copy engine has read it: every warp's lane 0 issued
    // stores; the other lanes have no bulk groups and pass at once (no lane test: its value spilled across the loop)
    tma::wait_group::<0>();
}
