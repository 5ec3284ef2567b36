//! M-grouped GEMM in blockwise FP8 (DeepSeek-V3's recipe): for each expert e and its rows offsets[e]..offsets[e + 1],
//! C[r, n] = sum over 128-deep blocks kb of K of sa[r, kb] sb[e, n / 128, kb] (A[r, kb] . B_e[n, kb]), bf16 out.
//!
//! The block of the bf16 engine (1 producer warp, 2 consumer warpgroups, persistent over (m-tile, n-tile) tiles
//! read from the device-side offsets as [`crate::scheduler::m_tile`] walks them), with tiles of 128 x 128 and a
//! 6-stage ring of 32 KiB: A's 128 rows x 128 K (one 128-byte-swizzled box: an e4m3 row of 128 is 128 bytes, the
//! layout of a bf16 stage of 64) and B's 128 rows x 128 K. A warpgroup runs its 64 rows as four wgmma m64n128k32
//! into a partial accumulator per k-block, waits for them, gives the stage back, and promotes: acc += partial *
//! (sa[row] * sb) in f32, so the tensor cores' own accumulation never spans more than one 128-deep block. Two
//! partial accumulators alternate: block kb + 1's wgmma run while block kb is promoted. The scales are read-only
//! loads issued one block ahead. Rows past the expert's end are
//! computed with the next expert's rows and not stored; rows past `rows_max` are zero (TMA fill) and read
//! row 0's scales. Epilogue: whole 64-row groups of one expert as two 64 x 64 bf16 boxes through shared memory
//! and TMA stores (the bf16 engine's `store_box`; `grouped_gemm_fp8_regs`: every row from registers), the rest
//! from registers (bf16 pairs).
use crate::desc::SmemDesc;
use crate::fp8::scale_and_factor;
use crate::kernels::routing_failed;
use crate::params::GroupedGemmFp8;
use crate::pipeline::Ring;
use crate::ptx::{cluster, fence, global, math, regs, smem, sync, tma, wgmma};
use crate::scheduler::MTile;

const STAGES: u32 = crate::kernels_host::FP8_STAGES;
const BM: u32 = crate::kernels_host::GEMM_BM;
const BN: u32 = crate::kernels_host::FP8_BN;
/// K per stage (e4m3 elements = bytes): one scale block.
const BK: u32 = 128;
const A_BYTES: u32 = BM * BK;
const STAGE_BYTES: u32 = A_BYTES + BN * BK;
/// The epilogue's staging after the ring: two 64 x 64 bf16 boxes per consumer warpgroup (with h quantized in the
/// epilogue: the first holds the pair's first half of h, the second the pair's 64 x 128 codes).
const STAGING: u32 = STAGES * STAGE_BYTES;
const C_BOX: u32 = crate::kernels::grouped_gemm::C_BOX;
/// The tile slots after the ring's barriers: slot l % SLOTS holds [e, row0, row_end, n_tile] of the block's l-th
/// tile, written by the producer before it announces the tile's first stage (its `mbarrier.arrive` releases the
/// write; the consumers' wait on that stage acquires it). The producer is at most STAGES stages, so at most STAGES
/// tiles, ahead of the consumers' last release: a slot is rewritten only after both warpgroups have finished
/// with it (SLOTS > STAGES + 1).
const SLOTS: u32 = crate::kernels_host::FP8_SLOTS;
const SLOT_AT: u32 = STAGING + 4 * C_BOX + Ring::<STAGES>::BYTES;
const _: () = assert!(SLOTS > STAGES + 1 && SLOT_AT % 16 == 0, "tile slots");
const _: () =
    assert!(SLOT_AT + 16 * SLOTS == crate::kernels_host::FP8_SMEM, "host and kernel agree on the shared memory");

/// Columns of C per tile: 128, or 64 of h with the SwiGLU epilogue (the tile's 128 columns of z are 64 of g and
/// the same 64 of u).
#[inline(always)]
const fn tile_cols<const SW: bool>() -> u32 {
    if SW {
        BN / 2
    } else {
        BN
    }
}

/// Column tiles of C.
#[inline(always)]
fn n_tiles<const SW: bool>(p: &GroupedGemmFp8) -> u32 {
    p.n / tile_cols::<SW>()
}

/// The first row of the tile's B (of g, with SwiGLU; u's are `p.n` further) in B [E * rows_b, K].
#[inline(always)]
fn b_row<const SW: bool>(p: &GroupedGemmFp8, ti: &MTile) -> u32 {
    ti.e * if SW { 2 * p.n } else { p.n } + ti.n_tile * tile_cols::<SW>()
}

/// Tile `tile` of the walk (the producer's lookup: a binary search over the global offsets).
#[inline(always)]
unsafe fn tile_info<const SW: bool>(p: &GroupedGemmFp8, tile: u32) -> MTile {
    walk_lookup(p, tile, n_tiles::<SW>(p))
}

/// Tile `tile` of a walk over (m-tile, n-tile) with `n_tiles` column tiles, looked up by a binary search over the
/// global offsets (the FP8 kernels' producers: once per tile), its rows clamped to the buffers' `rows_max`
/// ([`MTile::clamped`]: row0 <= row_end <= rows_max whatever the device offsets hold; offsets as promised are
/// left as they are). The producer publishes it in the tile's slot, so every row the consumers store (below
/// row_end) is inside C and A's scales, and no TMA coordinate passes rows_max (a box there or past A's rows
/// is filled with zeros by the hardware).
#[inline(always)]
pub(crate) unsafe fn walk_lookup(p: &GroupedGemmFp8, tile: u32, n_tiles: u32) -> MTile {
    let (to, off) = (p.tile_offsets as *const u32, p.offsets as *const u32);
    // SAFETY (of the reads): entries 0..=experts of both arrays, as the parameter block promises.
    crate::scheduler::m_tile(
        tile,
        n_tiles,
        p.experts,
        BM,
        |i| unsafe { *to.add(i as usize) },
        |i| unsafe { *off.add(i as usize) },
    )
    .clamped(p.rows_max)
}

/// The launch's m-tiles: `tile_offsets[E]`, at most [`crate::scheduler::m_tiles_bound`] of `rows_max` (what rows_max
/// rows can make: offsets as promised never reach it), so the walk is bounded whatever the device array holds (as
/// the bf16 kernels' `grouped_gemm::m_tiles`). SAFETY: `tile_offsets` holds E + 1 entries.
#[inline(always)]
pub(crate) unsafe fn m_tiles(p: &GroupedGemmFp8) -> u32 {
    let m = *(p.tile_offsets as *const u32).add(p.experts as usize);
    m.min(crate::scheduler::m_tiles_bound(p.rows_max, p.experts, BM))
}

/// The consumers' view of the block's l-th tile, from its slot. SAFETY: after waiting on the tile's first stage.
#[inline(always)]
unsafe fn slot(base: u32, l: u32) -> MTile {
    read_slot(base + SLOT_AT, l)
}

/// The block's l-th tile from the FP8 kernels' tile slots at `slots` (shared memory; FP8_SLOTS of 16 bytes:
/// [e, row0, row_end, n_tile], written by the producer before the tile's first stage is announced).
#[inline(always)]
pub(crate) unsafe fn read_slot(slots: u32, l: u32) -> MTile {
    let [e, row0, row_end, n_tile] = smem::ld_v4(slots + 16 * (l % SLOTS));
    MTile { e, row0, row_end, n_tile }
}

/// 384 threads, FP8_SMEM bytes of dynamic shared memory, grid <= the SM count. C through shared memory and the copy
/// engine (whole 64-row groups of one expert; the others from registers).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<true, false, false, false, false>(&p);
}

/// GEMM1 with the SwiGLU epilogue: B = W1 [E * 2N, K] (each expert's N gate rows, then its N up rows), C = h =
/// silu(g) u [rows, N] in bf16 (N = I, a multiple of 64); a tile is 64 columns of h from 64 rows of g and the
/// same 64 of u (two 64-row boxes of B, each with its 128 x 128 block's scale).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8_swiglu(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<true, false, true, false, false>(&p);
}

/// As `grouped_gemm_fp8_swiglu` with h quantized in the epilogue (1 x 128 blocks, the rule of
/// `quantize_fp8_rows` on the bf16-rounded h: the same codes and scales as the two kernels in a row): the block
/// runs the two 64-column tiles of each 128-column block of h one after the other, keeps the first's bf16 h in
/// its staging and its rows' amax in registers, and after the second writes the block's e4m3 codes (`c`, through
/// the copy engine for whole 64-row groups) and its scales (`c_scales` [rows, N / 128]). N a multiple of 128.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8_swiglu_q(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<true, false, true, true, false>(&p);
}

/// As `grouped_gemm_fp8` in 2-CTA clusters (grid even) on pairs of n-tiles (2j, 2j + 1) of one m-tile (n_tiles
/// even): CTA 0 multicasts the pair's A into both CTAs, each loads its own B (a quarter less L2 -> SM traffic).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8_mc(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<true, true, false, false, false>(&p);
}

/// A probe, not a GEMM: `grouped_gemm_fp8`'s main loop without the per-block promotion (the scales ignored, the
/// blocks summed by the tensor cores as one K): the ceiling of the pipeline and tile, for the benchmark.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8_probe(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<true, false, false, false, true>(&p);
}

/// As `grouped_gemm_fp8`, every row of C stored from registers.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8_regs(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    grouped_gemm_fp8_body::<false, false, false, false, false>(&p);
}

#[inline(always)]
unsafe fn grouped_gemm_fp8_body<
    const STAGED: bool,
    const MC: bool,
    const SW: bool,
    const HQ: bool,
    const PROBE: bool,
>(
    p: &GroupedGemmFp8,
) {
    const { assert!(!HQ || (SW && STAGED && !MC), "h is quantized by the single-CTA SwiGLU kernel") };
    // read once by every thread before the first barrier: the whole block returns or none
    if routing_failed(p.error) {
        return;
    }
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + STAGING + 4 * C_BOX);
    let t = regs::tid();
    if t == 0 {
        // one arrival per consumer warp; in a cluster both CTAs' (the peer's multicast writes into this stage)
        ring.init(if MC { 16 } else { 8 });
    }
    if MC {
        // the peer's barriers are initialised before any multicast or remote arrival reaches them
        cluster::sync();
    } else {
        sync::block_sync();
    }
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || m_tiles(p) * n_tiles::<SW>(p);
    if t / 128 == 0 {
        regs::setmaxnreg_dec::<40>();
        if t == 0 {
            produce::<MC, SW, HQ>(p, base, ring, total());
        }
    } else {
        regs::setmaxnreg_inc::<232>();
        consume::<STAGED, MC, SW, HQ, PROBE>(p, base, ring, total(), regs::warpgroup() - 1);
    }
    if MC {
        // no CTA leaves while its peer may still multicast into it or arrive on its barriers (every thread)
        cluster::sync();
    }
}

/// This block's walk over the tiles (first index, step, count; see [`crate::scheduler::walk`]) and the tile of
/// walk index `q`.
/// HQ (h quantized in the epilogue): the block takes pairs of column tiles (2j, 2j + 1) of one m-tile, the two
/// halves of a 128-column block of h, one after the other: walk index q is its q-th tile, tile 2 u + q % 2 of its
/// (q / 2)-th pair u = bid + (q / 2) grid.
#[inline(always)]
fn walk<const MC: bool, const HQ: bool>(total: u32) -> (u32, u32, u32) {
    if HQ {
        let (b, grid, units) = (regs::bid(), regs::nctaid(), total / 2);
        (0, 1, if b < units { 2 * (units - b).div_ceil(grid) } else { 0 })
    } else {
        crate::scheduler::walk(regs::bid(), regs::nctaid(), total, if MC { 2 } else { 1 })
    }
}

#[inline(always)]
fn walk_tile<const MC: bool, const SW: bool, const HQ: bool>(p: &GroupedGemmFp8, q: u32) -> u32 {
    if HQ {
        2 * (regs::bid() + (q / 2) * regs::nctaid()) + q % 2
    } else {
        crate::scheduler::walk_tile(q, regs::bid(), n_tiles::<SW>(p), if MC { 2 } else { 1 })
    }
}

#[inline(always)]
unsafe fn produce<const MC: bool, const SW: bool, const HQ: bool>(
    p: &GroupedGemmFp8,
    base: u32,
    ring: Ring<STAGES>,
    total: u32,
) {
    let (ma, mb) = (p.map_a as *const u8, p.map_b as *const u8);
    crate::kernels::acquire_prefetch(ma);
    crate::kernels::acquire_prefetch(mb);
    let kb_n = p.k / BK;
    let mut it = 0u32;
    let mut l = 0u32;
    let (q0, step, count) = walk::<MC, HQ>(total);
    let rank = regs::bid() % 2;
    let mut q = q0;
    while q < count {
        let ti = tile_info::<SW>(p, walk_tile::<MC, SW, HQ>(p, q));
        let brow = b_row::<SW>(p, &ti) as i32;
        let mut kb = 0;
        while kb < kb_n {
            if kb == 0 {
                // the tile's slot, published by the stage's arrival below; its previous tile (l - SLOTS) is done
                ring.wait_empty(it);
                smem::st_v4(base + SLOT_AT + 16 * (l % SLOTS), [ti.e, ti.row0, ti.row_end, ti.n_tile]);
            }
            let fb = ring.produce(it, STAGE_BYTES);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            if !MC {
                tma::load_2d(st, ma, (kb * BK) as i32, ti.row0 as i32, fb);
            } else if rank == 0 {
                // the pair's A (one m-tile) into both CTAs; each expects it in its stage's bytes
                tma::load_2d_mc(st, ma, (kb * BK) as i32, ti.row0 as i32, fb, 0b11);
            }
            if SW {
                // 64 rows of g, then the same 64 rows of u (p.n rows further): one 128-row operand
                tma::load_2d(st + A_BYTES, mb, (kb * BK) as i32, brow, fb);
                tma::load_2d(st + A_BYTES + 64 * BK, mb, (kb * BK) as i32, brow + p.n as i32, fb);
            } else {
                tma::load_2d(st + A_BYTES, mb, (kb * BK) as i32, brow, fb);
            }
            it += 1;
            kb += 1;
        }
        l += 1;
        q += step;
    }
}

#[inline(always)]
unsafe fn consume<const STAGED: bool, const MC: bool, const SW: bool, const HQ: bool, const PROBE: bool>(
    p: &GroupedGemmFp8,
    base: u32,
    ring: Ring<STAGES>,
    total: u32,
    cw: u32,
) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    if t == 0 {
        // the map this warpgroup's stores go through (its thread 0 issues them)
        crate::kernels::acquire_host_map(p.map_c);
    }
    // this thread's fragment rows r, r + 8 of the warpgroup's 64 and its first column (see ptx::wgmma)
    let r = 16 * (t / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let kb_n = p.k / BK;
    let mut it = 0u32;
    // the warpgroup's two staging boxes, alternating over every box it stores (across tiles)
    let wst = base + STAGING + cw * 2 * C_BOX;
    let mut boxes = 0u32;
    let mut l = 0u32;
    // HQ: the amax of rows r, r + 8 over the pair's first 64 columns of h (its values wait in the staging)
    let (mut am_a, mut am_b) = (0f32, 0f32);
    let (q0, step, count) = walk::<MC, HQ>(total);
    let mut q = q0;
    while q < count {
        // the tile from its slot, once its first stage has landed
        ring.wait_full(it);
        // rows past the buffer are TMA's zeros: any finite scale will do, row 0's. Element indices (32-bit), the
        // scale arrays' addresses read from the parameter block at each use (no registers held for them). The
        // slot is read again for the epilogue rather than held across the main loop.
        // B's scale rows: the 128 x 128 block of the tile's rows (with SwiGLU g's and u's, each 64 rows inside one)
        let (ia, ib, iw, iu) = {
            let ti = slot(base, l);
            let row_a = ti.row0 + cw * 64 + r;
            let row_b = row_a + 8;
            let ia = if row_a < p.rows_max { row_a } else { 0 } * kb_n;
            let ib = if row_b < p.rows_max { row_b } else { 0 } * kb_n;
            let br = b_row::<SW>(p, &ti);
            (ia, ib, br / 128 * kb_n, if SW { (br + p.n) / 128 * kb_n } else { br / 128 * kb_n })
        };
        {
            // the tile's scale rows into L1 at once (kb_n contiguous floats each: 64 bytes at K = 2048), so the
            // per-block loads after the first hit L1
            let (sa, sb) = (p.sa as *const f32, p.sb as *const f32);
            global::prefetch_l1(sa.add(ia as usize));
            global::prefetch_l1(sa.add(ib as usize));
            global::prefetch_l1(sb.add(iw as usize));
            if SW {
                global::prefetch_l1(sb.add(iu as usize));
            }
        }
        let sc = |kb: u32| unsafe {
            let (sa, sb) = (p.sa as *const f32, p.sb as *const f32);
            let ld = |q: *const f32, i: u32| unsafe { global::ld_nc_f32(q.add(i as usize)) };
            (ld(sa, ia + kb), ld(sa, ib + kb), ld(sb, iw + kb), ld(sb, iu + kb))
        };
        let st = |it: u32| base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
        let mut acc = [0f32; 64];
        if PROBE {
            // the main loop without the promotion (a probe of its ceiling: the scales are ignored, every block
            // accumulates in the tensor cores' own sum; C is not the product)
            let mut kb = 0;
            while kb < kb_n {
                ring.wait_full(it);
                issue_into(st(it), cw, &mut acc, kb > 0);
                wgmma::wait_group::<1>();
                if kb > 0 {
                    release::<MC>(&ring, it - 1, lane);
                }
                it += 1;
                kb += 1;
            }
            wgmma::wait_group::<0>();
            wgmma::fence_operand_64(&mut acc);
            release::<MC>(&ring, it - 1, lane);
        } else {
            // two partial accumulators: block kb + 1's wgmma run while block kb's result is promoted
            let (mut p0, mut p1) = ([0f32; 64], [0f32; 64]);
            issue(st(it), cw, &mut p0);
            let mut s0 = sc(0);
            let mut kb = 0;
            while kb + 2 < kb_n {
                // block kb in flight in p0; kb + 1 and kb + 2 exist
                ring.wait_full(it + 1);
                issue(st(it + 1), cw, &mut p1);
                let s1 = sc(kb + 1);
                wgmma::wait_group::<1>();
                wgmma::fence_operand_64(&mut p0);
                release::<MC>(&ring, it, lane);
                promote(&mut acc, &p0, s0);
                ring.wait_full(it + 2);
                issue(st(it + 2), cw, &mut p0);
                s0 = sc(kb + 2);
                wgmma::wait_group::<1>();
                wgmma::fence_operand_64(&mut p1);
                release::<MC>(&ring, it + 1, lane);
                promote(&mut acc, &p1, s1);
                it += 2;
                kb += 2;
            }
            if kb + 1 < kb_n {
                // blocks kb (in flight in p0) and kb + 1 are the last two
                ring.wait_full(it + 1);
                issue(st(it + 1), cw, &mut p1);
                let s1 = sc(kb + 1);
                wgmma::wait_group::<1>();
                wgmma::fence_operand_64(&mut p0);
                release::<MC>(&ring, it, lane);
                promote(&mut acc, &p0, s0);
                wgmma::wait_group::<0>();
                wgmma::fence_operand_64(&mut p1);
                release::<MC>(&ring, it + 1, lane);
                promote(&mut acc, &p1, s1);
                it += 2;
            } else {
                wgmma::wait_group::<0>();
                wgmma::fence_operand_64(&mut p0);
                release::<MC>(&ring, it, lane);
                promote(&mut acc, &p0, s0);
                it += 1;
            }
        }
        // clamped by the producer (`walk_lookup`): row0 <= row_end <= rows_max whatever the device offsets say.
        // The min is a no-op on its values, kept: without it LLVM lays the register-path stores out anew (32 more
        // branches in the PTX of each kernel)
        let mut ti = slot(base, regs::opaque(l));
        ti.row_end = ti.row_end.min(p.rows_max);
        let row_a = ti.row0 + cw * 64 + r;
        let row_b = row_a + 8;
        let row0w = ti.row0 + cw * 64;
        if HQ {
            // h = silu(g) u rounded to bf16 (what the unfused path stores), packed pairs of columns 8 J + c0, + 1 of
            // rows r (H = 0) and r + 8 (H = 1)
            let silu = |j: usize, h: usize, o: usize| {
                crate::kernels::grouped_gemm::silu_mul(acc[4 * j + 2 * h + o], acc[4 * (j + 8) + 2 * h + o])
            };
            let hp = |j: usize, h: usize| math::pack_bf16x2(silu(j, h, 0), silu(j, h, 1));
            let mag = |w: u32| math::bf16_to_f32(w as u16).abs().max(math::bf16_to_f32((w >> 16) as u16).abs());
            // the pair's first half in the first staging box, word pair J of thread t at J * 1024 + 8 t (consecutive
            // threads on consecutive 8 bytes: no bank conflicts), read back by its own thread only
            let stash = wst + 8 * t;
            if q % 2 == 0 {
                am_a = 0.0;
                am_b = 0.0;
                crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                    let (wa, wb) = (hp(J, 0), hp(J, 1));
                    smem::st_v2(stash + 1024 * J as u32, wa, wb);
                    am_a = am_a.max(mag(wa));
                    am_b = am_b.max(mag(wb));
                });
            } else {
                let mut own = [0u32; 16];
                let (mut a, mut b) = (am_a, am_b);
                crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                    own[2 * J] = hp(J, 0);
                    own[2 * J + 1] = hp(J, 1);
                    a = a.max(mag(own[2 * J]));
                    b = b.max(mag(own[2 * J + 1]));
                });
                // the rows' amax over the 128 columns: the quad's four lanes hold the rest of each row
                crate::unroll!(M in [1, 2] {
                    a = a.max(f32::from_bits(crate::ptx::warp::shfl_xor(a.to_bits(), M as u32)));
                    b = b.max(f32::from_bits(crate::ptx::warp::shfl_xor(b.to_bits(), M as u32)));
                });
                let ((sa_, fa), (sb_, fb)) = (scale_and_factor(a), scale_and_factor(b));
                let code = |w: u32, f: f32| {
                    math::pack_e4m3x2(math::bf16_to_f32(w as u16) * f, math::bf16_to_f32((w >> 16) as u16) * f)
                };
                // word of half `half`, column group J, row H: the stash (first half) or `own`
                let word = |half: usize, j: usize, h: usize| {
                    if half == 0 {
                        unsafe { smem::ld_u32(stash + 1024 * j as u32 + 4 * h as u32) }
                    } else {
                        own[2 * j + h]
                    }
                };
                let blk = ti.n_tile / 2; // the 128-column block of h
                if row0w + 64 <= ti.row_end {
                    // uniform in the warpgroup: the 64 x 128 codes through the second staging box and the copy engine
                    let cbox = wst + C_BOX;
                    let bar = 2 + cw;
                    if t == 0 {
                        tma::wait_group_read::<0>(); // the previous pair's store has read the box
                    }
                    sync::named_sync(bar, 128);
                    crate::unroll!(HALF in [0, 1] {
                        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                            crate::unroll!(H in [0, 1] {
                                let rr = r + 8 * H as u32;
                                let c = 64 * HALF as u32 + 8 * J as u32 + c0;
                                let v = code(word(HALF, J, H), if H == 0 { fa } else { fb });
                                smem::st_u16(cbox + rr * 128 + (((c >> 4) ^ (rr & 7)) << 4) + (c & 15), v);
                            });
                        });
                    });
                    fence::proxy_async_shared_cta();
                    sync::named_sync(bar, 128);
                    if t == 0 {
                        tma::store_2d(p.map_c as *const u8, (blk * 128) as i32, row0w as i32, cbox);
                        tma::commit_group();
                    }
                } else {
                    let c8 = p.c as *mut u16;
                    crate::unroll!(HALF in [0, 1] {
                        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                            let c = blk * 128 + 64 * HALF as u32 + 8 * J as u32 + c0;
                            if row_a < ti.row_end {
                                *c8.add(((row_a * p.n + c) / 2) as usize) = code(word(HALF, J, 0), fa) as u16;
                            }
                            if row_b < ti.row_end {
                                *c8.add(((row_b * p.n + c) / 2) as usize) = code(word(HALF, J, 1), fb) as u16;
                            }
                        });
                    });
                }
                if lane % 4 == 0 {
                    let sc = p.c_scales as *mut f32;
                    if row_a < ti.row_end {
                        *sc.add((row_a * (p.n / 128) + blk) as usize) = sa_;
                    }
                    if row_b < ti.row_end {
                        *sc.add((row_b * (p.n / 128) + blk) as usize) = sb_;
                    }
                }
            }
        } else if SW {
            let silu = |j: usize, h: usize, o: usize| {
                crate::kernels::grouped_gemm::silu_mul(acc[4 * j + 2 * h + o], acc[4 * (j + 8) + 2 * h + o])
            };
            if STAGED && row0w + 64 <= ti.row_end {
                // uniform in the warpgroup: h's 64 x 64 box through the staging and the copy engine
                let col = ti.n_tile * 64;
                crate::kernels::grouped_gemm::store_box(p.map_c, col, row0w, wst + (boxes % 2) * C_BOX, cw, |j, h| {
                    math::pack_bf16x2(silu(j, h, 0), silu(j, h, 1))
                });
                boxes += 1;
            } else {
                let c = p.c as *mut u32;
                crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                    let col = ti.n_tile * 64 + 8 * J as u32 + c0;
                    if row_a < ti.row_end {
                        *c.add(((row_a * p.n + col) / 2) as usize) = math::pack_bf16x2(silu(J, 0, 0), silu(J, 0, 1));
                    }
                    if row_b < ti.row_end {
                        *c.add(((row_b * p.n + col) / 2) as usize) = math::pack_bf16x2(silu(J, 1, 0), silu(J, 1, 1));
                    }
                });
            }
        } else if STAGED && row0w + 64 <= ti.row_end {
            // uniform in the warpgroup: two 64 x 64 boxes through the staging and the copy engine
            crate::unroll!(B in [0, 1] {
                let col = ti.n_tile * BN + 64 * B as u32;
                crate::kernels::grouped_gemm::store_box(p.map_c, col, row0w, wst + (boxes % 2) * C_BOX, cw, |j, h| {
                    math::pack_bf16x2(acc[4 * (8 * B + j) + 2 * h], acc[4 * (8 * B + j) + 2 * h + 1])
                });
                boxes += 1;
            });
        } else {
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
        }
        l += 1;
        q += step;
    }
    // the staging must not be freed (block exit) before the copy engine has read it
    if STAGED && t == 0 {
        tma::wait_group::<0>();
    }
}

/// This warpgroup's four wgmma m64n128k32 of the stage at `st` (its 64 rows of A, the stage's 128 rows of B) into
/// `part` (overwritten), as one commit group.
#[inline(always)]
unsafe fn issue(st: u32, cw: u32, part: &mut [f32; 64]) {
    issue_block(st + cw * (A_BYTES / 2), st + A_BYTES, part, false);
}

/// As [`issue`] into `acc`, added to it when `add` (the probe's accumulation across blocks).
#[inline(always)]
unsafe fn issue_into(st: u32, cw: u32, acc: &mut [f32; 64], add: bool) {
    issue_block(st + cw * (A_BYTES / 2), st + A_BYTES, acc, add);
}

/// Four wgmma m64n128k32 (e4m3, both operands K-major in 128-byte-swizzled shared memory) over one 128-deep block:
/// the warpgroup's 64 rows of A at `a`, 128 rows of B at `b`, into `acc` (overwritten, or added to when `add`), as
/// one commit group.
#[inline(always)]
pub(crate) unsafe fn issue_block(a: u32, b: u32, acc: &mut [f32; 64], add: bool) {
    // the addresses broadcast from lane 0: the descriptors' arithmetic on the uniform datapath (`warp::uniform`)
    let (a, b) = (crate::ptx::warp::uniform(a), crate::ptx::warp::uniform(b));
    let (da, db) = (SmemDesc::k_major_sw128(a), SmemDesc::k_major_sw128(b));
    wgmma::fence();
    crate::unroll!(KS in [0, 1, 2, 3] {
        let off = 32 * KS as u32;
        wgmma::m64n128k32_f32_e4m3_ss(acc, da.advance(off).0, db.advance(off).0, (KS > 0 || add) as u32);
    });
    wgmma::commit_group();
}

/// One consumer warp gives back the stage of ring iteration `it` (its wgmma have completed): lane 0 in its own
/// CTA; in a 2-CTA cluster lanes 0 and 1 in CTA 0 and CTA 1.
#[inline(always)]
unsafe fn release<const MC: bool>(ring: &Ring<STAGES>, it: u32, lane: u32) {
    if MC {
        if lane < 2 {
            ring.release_prev_cluster(it + 1, lane);
        }
    } else if lane == 0 {
        ring.release_prev(it + 1);
    }
}

/// acc += part * scale (one fused multiply-add each), with this thread's scales `s` = (sa of row r, sa of row
/// r + 8, sb of columns 0..64, sb of columns 64..128: the same block but with SwiGLU, where they are g's and u's).
#[inline(always)]
fn promote(acc: &mut [f32; 64], part: &[f32; 64], s: (f32, f32, f32, f32)) {
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        let sb = if J < 8 { s.2 } else { s.3 };
        let (wa, wb) = (s.0 * sb, s.1 * sb);
        acc[4 * J] = math::fma(part[4 * J], wa, acc[4 * J]);
        acc[4 * J + 1] = math::fma(part[4 * J + 1], wa, acc[4 * J + 1]);
        acc[4 * J + 2] = math::fma(part[4 * J + 2], wb, acc[4 * J + 2]);
        acc[4 * J + 3] = math::fma(part[4 * J + 3], wb, acc[4 * J + 3]);
    });
}
