//! `grouped_gemm_fp8w`: [`super::grouped_gemm_fp8`]'s GEMM (M-grouped, blockwise FP8, bf16 C) in tiles of 128 x 256.
//!
//! Why: at FP8 rates a 128 x 128 tile asks L2 for 32 KiB per 4.2 MFLOP (about 14 TB/s over the chip at the tensor
//! cores' peak; ncu saw L2 73% busy at 57% tensor-pipe use). A 128 x 256 tile asks 48 KiB per 8.4 MFLOP: a quarter
//! less per FLOP. The registers bound the tile: a warpgroup's 64 x 256 f32 accumulator is 128 registers, so there
//! is room for one 64 x 128 partial product, not two: per 128-deep block a warpgroup runs the tile's two column
//! halves one after the other (four wgmma m64n128k32 into the partial, wait, promote into its half of the
//! accumulator with the row's and the half's block scale), and the other warpgroup's wgmma keep the tensor cores
//! busy while it promotes. A 4-stage ring of 48 KiB (A 128 x 128 bytes, B 256 x 128: two 128-row boxes). The tile
//! slots, walk, scales and epilogue as in `grouped_gemm_fp8` (C's whole 64-row groups through the staging and TMA
//! stores, four 64 x 64 boxes a warpgroup, the rest from registers). N a multiple of 256.
//!
//! `grouped_gemm_fp8w_swiglu_q`: GEMM1 with the SwiGLU epilogue and h quantized in it, in the same tiles: a tile's
//! two halves are 128 rows of g and the same 128 rows of u, so a tile is 128 columns of h, one 1 x 128 block of
//! its quantization: the rows' amax over the quad's lanes, then the e4m3 codes (whole 64-row groups through the
//! staging and the copy engine) and the scales. The rule of `quantize_fp8_rows` on the bf16-rounded h: bitwise
//! `grouped_gemm_fp8_swiglu_q`.
use crate::fp8::scale_and_factor;
use crate::kernels::grouped_gemm::dswiglu_elem;
use crate::kernels::routing_failed;
use crate::params::GroupedGemmFp8;
use crate::pipeline::Ring;
use crate::ptx::{cp_async, fence, global, math, mbarrier, regs, smem, sync, tma, warp, wgmma};
use crate::scheduler::MTile;

const STAGES: u32 = crate::kernels_host::FP8W_STAGES;
const BM: u32 = crate::kernels_host::GEMM_BM;
const BN: u32 = crate::kernels_host::FP8W_BN;
/// K per stage (e4m3 elements = bytes): one scale block.
const BK: u32 = 128;
const A_BYTES: u32 = BM * BK;
/// One 128-row box of B (128 x 128 bytes).
const B_HALF: u32 = 128 * BK;
const STAGE_BYTES: u32 = A_BYTES + BN * BK;
const STAGING: u32 = STAGES * STAGE_BYTES;
const C_BOX: u32 = crate::kernels::grouped_gemm::C_BOX;
const SLOTS: u32 = crate::kernels_host::FP8_SLOTS;
const SLOT_AT: u32 = STAGING + 4 * C_BOX + Ring::<STAGES>::BYTES;
const _: () = assert!(SLOTS > STAGES + 1 && SLOT_AT % 16 == 0, "tile slots");
/// The zt epilogue's block-amax reduction: [tile parity][warpgroup][warp] f32.
const RED_AT: u32 = SLOT_AT + 16 * SLOTS;
/// The gathering producer's row tokens, u32 [2][BM]: the block's tile l in half l % 2 (see [`produce_gather`]).
const TOKS_AT: u32 = RED_AT + crate::kernels_host::FP8W_RED;
const _: () = assert!(
    TOKS_AT + crate::kernels_host::FP8W_TOKS == crate::kernels_host::FP8W_SMEM
        && 2 * BM * 4 == crate::kernels_host::FP8W_TOKS,
    "host and kernel agree on the shared memory"
);
const _: () = assert!(crate::kernels_host::FP8W_SMEM <= 232448, "sm_90 allows at most 227 KiB of shared memory");
const _: () = assert!(STAGE_BYTES % 1024 == 0 && STAGING % 1024 == 0, "128-byte swizzle needs 1024-byte alignment");

/// Registers of the side-copy kernel's producer warpgroup (its mover warps' eight 16-byte loads in flight) and of
/// each consumer thread.
const CPX_PRODUCER_REGS: u32 = 56;
const CPX_CONSUMER_REGS: u32 = 224;
const _: () =
    assert!(128 * CPX_PRODUCER_REGS + 256 * CPX_CONSUMER_REGS <= 384 * 168, "setmaxnreg.inc would wait forever");

/// Columns of C per tile: 256, or (SwiGLU) 128 of h from 128 rows of g and the same 128 of u.
#[inline(always)]
const fn tile_cols<const SW: bool>() -> u32 {
    if SW {
        BN / 2
    } else {
        BN
    }
}

/// The tile's scale rows into L1 at once (the element indices of A's rows r, r + 8 and of B's two 128-row blocks, at
/// block 0), and their block `kb`'s four scales on each call: (A row r, A row r + 8, B block 0, B block 1).
/// SAFETY: the indices inside `sa` and `sb` for every block `kb` asked (the callers' rows are clamped to the buffers).
#[inline(always)]
unsafe fn scales(p: &GroupedGemmFp8, (ia, ib, iw0, iw1): (u32, u32, u32, u32)) -> impl Fn(u32) -> (f32, f32, f32, f32) {
    let (sa, sb) = (p.sa as *const f32, p.sb as *const f32);
    global::prefetch_l1(sa.add(ia as usize));
    global::prefetch_l1(sa.add(ib as usize));
    global::prefetch_l1(sb.add(iw0 as usize));
    global::prefetch_l1(sb.add(iw1 as usize));
    move |kb: u32| {
        // SAFETY: as the function's
        let ld = |q: *const f32, i: u32| unsafe { global::ld_nc_f32(q.add(i as usize)) };
        (ld(sa, ia + kb), ld(sa, ib + kb), ld(sb, iw0 + kb), ld(sb, iw1 + kb))
    }
}

/// B's first row of the tile's column half `h` in B [E * rows_b, K] (with SwiGLU: g's rows, then u's p.n further).
#[inline(always)]
fn b_row<const SW: bool>(p: &GroupedGemmFp8, ti: &MTile, h: u32) -> u32 {
    if SW {
        ti.e * 2 * p.n + ti.n_tile * 128 + h * p.n
    } else {
        ti.e * p.n + ti.n_tile * BN + h * 128
    }
}

/// Tile `tile` of the walk (the producer's lookup: a binary search over the global offsets).
#[inline(always)]
unsafe fn tile_info<const SW: bool>(p: &GroupedGemmFp8, tile: u32) -> MTile {
    crate::kernels::grouped_gemm_fp8::walk_lookup(p, tile, p.n / tile_cols::<SW>())
}

/// The consumers' view of the block's l-th tile, from its slot. SAFETY: after waiting on the tile's first stage.
#[inline(always)]
unsafe fn slot(base: u32, l: u32) -> MTile {
    crate::kernels::grouped_gemm_fp8::read_slot(base + SLOT_AT, l)
}

/// `body`'s `PROBE` (0: the GEMM): the main loop without the promotion, each half waited for in turn (a probe).
const NOPROMO_SERIAL: u32 = 1;
/// The main loop without the promotion, both halves straight across the blocks (a probe).
const NOPROMO_STRAIGHT: u32 = 2;
/// Bit: the consumer warps record `%clock64` at five points of 16 k-blocks (the same C).
const TIMELINE: u32 = 4;
/// Bit (a probe: C is not the product): the producer loads only the ring's first `STAGES` stages (real codes of
/// the block's first tile), then completes every later stage with no bytes, so the consumers run on stale stages
/// with no TMA traffic (neither L2's reads nor shared memory's writes) beside their wgmma.
const NO_LOAD: u32 = 32;
/// The probe bits that replace the main loop (`NOPROMO_SERIAL`, `NOPROMO_STRAIGHT`).
const LOOP: u32 = 3;
/// Bit (a form of the kernel, not a probe): the SwiGLU backward's epilogue ([`epilogue_dswiglu`]): C is dh.
const DSW: u32 = 64;

/// dh = dy W2_e in blockwise FP8 (A: dy's row codes [rows, H]; B: W2's transposed codes [E I, H] in W2's 128 x 128
/// blocks; N = I, a multiple of 256) with the SwiGLU backward in the epilogue ([`epilogue_dswiglu`]): dz (C, bf16
/// [rows, 2I]), s h and the rows' dtopk partials. The wide kernel's tiles, ring and main loop.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_dswiglu(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, DSW>(&p);
}

/// [`grouped_gemm_fp8w_dswiglu`] with dy's codes read from the tokens' rows by the producer warpgroup
/// ([`produce_gather`]: `a_rows` [tokens, H] codes, row r's token row_slot[r] / top_k; `sa` the tokens' scales).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_dswiglu_gather(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, true, DSW>(&p);
}

/// 384 threads, FP8W_SMEM bytes of dynamic shared memory, grid <= the SM count.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, 0>(&p);
}

/// Probes, not GEMMs (C is not the product; the scales ignored): `grouped_gemm_fp8w`'s main loop without the
/// promotion, to split the tensor pipe's idle time. `_probe1`: each half still issued into the one partial and
/// waited for before the next (the warpgroup's serial issue-then-wait; no FFMA). `_probe2`: both halves accumulated
/// straight into the accumulator across the tile's blocks (as the bf16 kernels' main loop: `wait_group 2` leaves
/// the block's two groups in flight and the previous block's stage is released), so only the data path and the
/// tile boundary are left.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_probe1(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, NOPROMO_SERIAL>(&p);
}

/// Not a GEMM's launch to time: `grouped_gemm_fp8w` itself (the same C) whose consumer warps' lane 0 also write
/// `%clock64` at five points of each of the first 16 k-blocks of the block's second tile into `p.ct` (u64
/// [grid][8 warps][16][5]: after the stage's wait; after half 0's wgmma wait; after its promotion; after half 1's
/// wait; after its promotion), to measure the promotion's length against the wgmma's on the GPU's clock.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_timeline(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, TIMELINE>(&p);
}

/// See `grouped_gemm_fp8w_probe1`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_probe2(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, NOPROMO_STRAIGHT>(&p);
}

/// Probes, not GEMMs (C is not the product): `grouped_gemm_fp8w` (`_nl`), its `_probe2` (`_probe2_nl`) and its
/// timeline (`_nl_timeline`) with the producer's loads stopped after the ring's first fill (see `NO_LOAD`): what the
/// consumers reach with no TMA traffic beside them. Why: `_probe2` ran at ~1130 cycles a 128-deep block, where
/// shared memory's 128 bytes a cycle would put it if the wgmma's reads (A and B of each m64n128k32: 96 KB a block
/// for the two warpgroups) and the TMA's writes (48 KB) share that port.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_nl(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, NO_LOAD>(&p);
}

/// See `grouped_gemm_fp8w_nl`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_probe2_nl(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, { NOPROMO_STRAIGHT | NO_LOAD }>(&p);
}

/// `grouped_gemm_fp8w_probe1` with the timeline's records (clocks 1 and 2 both after half 0's wait): whether a
/// block's first half holds the pipe longer than its second without the promotion and the scales' loads too.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_probe1_timeline(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, { NOPROMO_SERIAL | TIMELINE }>(&p);
}

/// See `grouped_gemm_fp8w_nl`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_nl_timeline(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, false, { NO_LOAD | TIMELINE }>(&p);
}

/// As `grouped_gemm_fp8w` with A gathered from the tokens by the producer warpgroup ([`produce_gather`]: no
/// expert-ordered copy of the codes): row r of A is token row_slot\[r\] / top_k of `a_rows` (e4m3 [tokens, K]),
/// its scales that token's row of `sa` ([tokens, K / 128]); `map_a` unused. The FP8 backward's z recompute.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_gather(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, false, true, 0>(&p);
}

/// As `grouped_gemm_fp8w` with the side copy (the FP8 backward's dx copying x's rows for dW1): the producer
/// warpgroup's warps 1..3 copy the routing's rows of `a_rows` (`copy_cols` bf16 a row, token row_slot[r] / top_k)
/// into `a_copy` while the GEMM runs ([`copy_side`]), waited for by nobody in the kernel. The producer warpgroup
/// keeps 56 registers for their eight loads in flight, the consumers 224 (128 x 56 + 256 x 224 = the 384 x 168 the
/// launch allocates; at the bf16 `_mv` kernels' 72 / 216 the consumers spilled 8 bytes).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_cpx(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<false, false, false, true, false, 0>(&p);
}

/// GEMM1 + SwiGLU for the FP8 backward's z recompute (see `epilogue_swiglu_zt`): B = W1 [E * 2N, K] (N = I),
/// C = z [rows, 2N] bf16 (`c`, `map_c` in 64 x 64 boxes: the bits `grouped_gemm_fp8w` stores), h's transposed block
/// codes `ct` [N, Kp] and their scales `c_scales` [Kp / 128, N / 128].
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_zt(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, true, false, false, false, 0>(&p);
}

/// `grouped_gemm_fp8w_swiglu_zt` with A gathered by the producer warpgroup (as `grouped_gemm_fp8w_gather`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_zt_gather(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, true, false, false, true, 0>(&p);
}

/// GEMM1 + SwiGLU with h quantized (see the module's documentation): B = W1 [E * 2N, K] (N = I, a multiple of
/// 128), C = h's codes [rows, N] (`c`, `map_c` in 64 x 128 boxes) and scales [rows, N / 128] (`c_scales`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_q(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, false, false, false, 0>(&p);
}

/// `grouped_gemm_fp8w_swiglu_q` with A gathered by the producer warpgroup (as `grouped_gemm_fp8w_gather`): the
/// FP8 forward with no gathered copy of x's codes.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_q_gather(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, false, false, true, 0>(&p);
}

/// As `grouped_gemm_fp8w_swiglu_q`, storing z too (the FP8 forward of a layer that saves z for its backward):
/// z [rows, 2N] bf16 (`z`, `map_z` in 64 x 64 boxes), the bits `grouped_gemm_fp8w` and the z recompute store
/// (`store_z`); h's codes then go through the warpgroup's second staging box (see `consume`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_qz(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, true, false, false, 0>(&p);
}

/// `grouped_gemm_fp8w_swiglu_qz` with A gathered by the producer warpgroup (as `grouped_gemm_fp8w_gather`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_fp8w_swiglu_qz_gather(p: GroupedGemmFp8) {
    crate::kernels::pdl_entry();
    body::<true, false, true, false, true, 0>(&p);
}

#[inline(always)]
unsafe fn body<const SW: bool, const ZT: bool, const QZ: bool, const CPX: bool, const GA: bool, const PROBE: u32>(
    p: &GroupedGemmFp8,
) {
    const { assert!(!CPX || !SW, "the side copy: the plain kernel (the FP8 dx)") };
    const { assert!(!(CPX && GA), "the side copy's warps are the gathering producer's") };
    const { assert!(!QZ || (SW && !ZT), "z with h's row codes: the SwiGLU form of the forward") };
    // read once by every thread before the first barrier: the whole block returns or none
    if routing_failed(p.error) {
        return;
    }
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + STAGING + 4 * C_BOX);
    let t = regs::tid();
    if t == 0 {
        // one arrival per consumer warp; the gathering producer's stages complete with one arrival carrying B's
        // bytes and one per thread whose `cp.async` copies landed
        ring.init_with(if GA { 1 + 128 } else { 1 }, 8);
    }
    sync::block_sync();
    let total = || crate::kernels::grouped_gemm_fp8::m_tiles(p) * (p.n / tile_cols::<SW>());
    if t / 128 == 0 {
        if CPX || GA {
            regs::setmaxnreg_dec::<CPX_PRODUCER_REGS>();
        } else {
            regs::setmaxnreg_dec::<40>();
        }
        if GA {
            produce_gather::<SW, PROBE>(p, base, ring, total());
        } else if t == 0 {
            produce::<SW, PROBE>(p, base, ring, total());
        } else if CPX && t >= 32 {
            copy_side(p, t / 32 - 1, t % 32);
        }
    } else {
        if CPX || GA {
            regs::setmaxnreg_inc::<CPX_CONSUMER_REGS>();
        } else {
            regs::setmaxnreg_inc::<232>();
        }
        consume::<SW, ZT, QZ, GA, PROBE>(p, base, ring, total(), regs::warpgroup() - 1);
    }
}

#[inline(always)]
unsafe fn produce<const SW: bool, const PROBE: u32>(p: &GroupedGemmFp8, base: u32, ring: Ring<STAGES>, total: u32) {
    let (ma, mb) = (p.map_a as *const u8, p.map_b as *const u8);
    crate::kernels::acquire_prefetch(ma);
    crate::kernels::acquire_prefetch(mb);
    if PROBE & DSW != 0 {
        crate::kernels::acquire_prefetch(p.map_z as *const u8);
    }
    let kb_n = p.k / BK;
    let mut it = 0u32;
    let mut l = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info::<SW>(p, tile);
        let (b0, b1) = (b_row::<SW>(p, &ti, 0) as i32, b_row::<SW>(p, &ti, 1) as i32);
        let mut kb = 0;
        while kb < kb_n {
            if kb == 0 {
                // the tile's slot, published by the stage's arrival below; its previous tile (l - SLOTS) is done
                ring.wait_empty(it);
                smem::st_v4(base + SLOT_AT + 16 * (l % SLOTS), [ti.e, ti.row0, ti.row_end, ti.n_tile]);
            }
            // the no-load probe: after the ring's first fill, the stage completes with no bytes (stale data)
            let load = PROBE & NO_LOAD == 0 || it < STAGES;
            let fb = ring.produce(it, if load { STAGE_BYTES } else { 0 });
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            if load {
                tma::load_2d(st, ma, (kb * BK) as i32, ti.row0 as i32, fb);
                tma::load_2d(st + A_BYTES, mb, (kb * BK) as i32, b0, fb);
                tma::load_2d(st + A_BYTES + B_HALF, mb, (kb * BK) as i32, b1, fb);
            }
            if PROBE & DSW != 0 && kb + Z_AHEAD == kb_n {
                // the tile from the slot this thread wrote (no register of it held across the loop)
                prefetch_z(p, &slot(base, l));
            }
            it += 1;
            kb += 1;
        }
        l += 1;
        tile += regs::nctaid();
    }
}

/// The gathering producer (all 128 threads of warpgroup 0): per stage, A's 128 rows x 128 code bytes from the
/// tokens' rows (row r of the tile: token row_slot[r] / top_k of `a_rows`, zero past the expert's end) by 16-byte
/// `cp.async` into the layout the TMA would have made ([`crate::kernels::grouped_gemm::GatherRows`]: 128 bytes a
/// k-step, as the bf16 gather's 64 elements), each thread's copies arriving on the stage's full barrier when they
/// land (`.noinc`); thread 0 loads B's two boxes by TMA with their bytes and writes the tile's slot, as
/// [`produce`]. The tile's row tokens pass through shared memory (half l % 2 of `TOKS_AT` for the block's tile l,
/// between two barriers of the 128 threads, named barrier 1), where the consumers read their rows' tokens for the
/// scales too (published by the stage's arrivals as the slot is). A half is rewritten for tile l + 2 only after
/// this thread's wait for the empty stage of tile l + 1's last k-step, which the consumers release after their
/// reads of tile l's tokens: K / 128 >= STAGES k-steps a tile (K a multiple of 512; the model `protocol::fp8w`
/// finds the race at 2 K / 128 - 1 < STAGES and none at or above). SAFETY: every thread of
/// warpgroup 0, uniform control flow; row_slot holds the routing's slots (below tokens x top_k) for the rows below
/// offsets[E], `a_rows` [tokens, K] codes.
#[inline(always)]
unsafe fn produce_gather<const SW: bool, const PROBE: u32>(
    p: &GroupedGemmFp8,
    base: u32,
    ring: Ring<STAGES>,
    total: u32,
) {
    let t = regs::tid();
    let mb = p.map_b as *const u8;
    if t == 0 {
        crate::kernels::acquire_prefetch(mb);
    }
    if PROBE & DSW != 0 && t == 32 {
        // z's map, for the L2 prefetches of the SwiGLU backward's z (this thread's, below)
        crate::kernels::acquire_prefetch(p.map_z as *const u8);
    }
    let kb_n = p.k / BK;
    let mut it = 0u32;
    let mut l = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info::<SW>(p, tile);
        let (b0, b1) = (b_row::<SW>(p, &ti, 0) as i32, b_row::<SW>(p, &ti, 1) as i32);
        // thread t looks up row t (u32::MAX past the expert's end: zero-filled, nothing read); the barrier before:
        // every thread has taken the last tile's tokens into its registers
        let row = ti.row0 + t;
        let tok = if row < ti.row_end { *(p.row_slot as *const u32).add(row as usize) / p.top_k } else { u32::MAX };
        let toks = base + TOKS_AT + (l % 2) * (4 * BM);
        sync::named_sync(1, 128);
        smem::st_u32(toks + 4 * t, tok);
        sync::named_sync(1, 128);
        if PROBE & DSW != 0 && t == 32 && l > 0 {
            // the previous tile's z into L2 now that its last stage is issued, the ring's depth before the
            // consumers' epilogue reads it (its slot, written by thread 0 before the barriers above; inside the k
            // loop, `Z_AHEAD` k-steps earlier as `produce` does, this 56-register role spilled)
            prefetch_z(p, &slot(base, l - 1));
        }
        let rows = crate::kernels::grouped_gemm::GatherRows::new(p.a_rows as *const u8, p.k as usize, toks, t);
        let mut kb = 0;
        while kb < kb_n {
            ring.wait_empty(it);
            let fb = ring.full_bar(it);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            if t == 0 {
                if kb == 0 {
                    // the tile's slot, published by this thread's arrival below; its previous tile is done
                    smem::st_v4(base + SLOT_AT + 16 * (l % SLOTS), [ti.e, ti.row0, ti.row_end, ti.n_tile]);
                }
                mbarrier::arrive_expect_tx(fb, 2 * B_HALF);
                tma::load_2d(st + A_BYTES, mb, (kb * BK) as i32, b0, fb);
                tma::load_2d(st + A_BYTES + B_HALF, mb, (kb * BK) as i32, b1, fb);
            }
            rows.issue(st, kb);
            cp_async::mbarrier_arrive_noinc(fb);
            it += 1;
            kb += 1;
        }
        l += 1;
        tile += regs::nctaid();
    }
    if PROBE & DSW != 0 && t == 32 && l > 0 {
        // the last tile's (its slot written before the last tile's barriers)
        prefetch_z(p, &slot(base, l - 1));
    }
}

/// How many k-steps before its tile's last one the producer asks L2 for the z that the SwiGLU backward's epilogue
/// will read (the consumers run the ring's depth behind it, so the z arrives ~Z_AHEAD + STAGES k-steps ahead).
const Z_AHEAD: u32 = 4;

/// The SwiGLU-backward epilogue's z of tile `ti` (its rows' g and u runs of the tile's 256 columns: 64 x 64 boxes
/// of `map_z`, z [rows, 2N] bf16) into L2 by the copy engine, so the epilogue's loads find it there: it reads its
/// 1 KB a row at once with every SM's epilogue at about the same time. Measured at 30B on an H100 (docs/RESULTS.md
/// 2026-12-07d): the kernel 769 -> 735 us with it, against 387 for the plain wide kernel at its shape. Row groups
/// past the expert's end are skipped. SAFETY: one thread; `map_z` acquired by it.
#[inline(always)]
unsafe fn prefetch_z(p: &GroupedGemmFp8, ti: &MTile) {
    let mz = p.map_z as *const u8;
    // a loop, not unrolled: the gathering producer runs at 56 registers (unrolled, its coordinates spilled one)
    let mut q = 0;
    while q < 16 {
        let row = ti.row0 + 64 * (q / 8);
        let col = ti.n_tile * BN + 64 * (q % 4) + (q / 4 % 2) * p.n;
        if row < ti.row_end {
            tma::prefetch_2d_l2(mz, col as i32, row as i32);
        }
        q += 1;
    }
}

/// This warpgroup's four wgmma m64n128k32 of column half `h` of the stage at `st` into `part` (overwritten), as
/// one commit group.
#[inline(always)]
unsafe fn issue_half(st: u32, cw: u32, h: u32, part: &mut [f32; 64]) {
    crate::kernels::grouped_gemm_fp8::issue_block(st + cw * (A_BYTES / 2), st + A_BYTES + h * B_HALF, part, false);
}

/// Half `H` of the accumulator (columns 128 H ..) += part * (row scale * the half's block scale): `wa` for the
/// fragment's rows r, `wb` for r + 8.
#[inline(always)]
fn promote_half<const H: usize>(acc: &mut [f32; 128], part: &[f32; 64], wa: f32, wb: f32) {
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        let o = 64 * H + 4 * J;
        acc[o] = math::fma(part[4 * J], wa, acc[o]);
        acc[o + 1] = math::fma(part[4 * J + 1], wa, acc[o + 1]);
        acc[o + 2] = math::fma(part[4 * J + 2], wb, acc[o + 2]);
        acc[o + 3] = math::fma(part[4 * J + 3], wb, acc[o + 3]);
    });
}

#[inline(always)]
unsafe fn consume<const SW: bool, const ZT: bool, const QZ: bool, const GA: bool, const PROBE: u32>(
    p: &GroupedGemmFp8,
    base: u32,
    ring: Ring<STAGES>,
    total: u32,
    cw: u32,
) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    // this thread's fragment rows r, r + 8 of the warpgroup's 64 and its first column (see ptx::wgmma)
    let r = 16 * (t / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let kb_n = p.k / BK;
    let mut it = 0u32;
    // the warpgroup's two staging boxes, alternating over every box it stores (across tiles)
    let wst = base + STAGING + cw * 2 * C_BOX;
    let mut boxes = 0u32;
    let mut l = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        if l == 0 && t == 0 {
            // the map this warpgroup's stores go through (its thread 0 issues them; here, where no accumulator is
            // live yet: at the role's start it cost the SwiGLU kernel's register allocation 32 B of spills)
            crate::kernels::acquire_host_map(p.map_c);
            if QZ {
                crate::kernels::acquire_host_map(p.map_z);
            }
            if PROBE & DSW != 0 {
                crate::kernels::acquire_host_map(p.map_sh);
            }
        }
        // the tile from its slot, once its first stage has landed
        ring.wait_full(it);
        // scale rows (element indices): A's rows r, r + 8 (rows past the buffer are TMA's zeros: row 0's scales
        // will do; gathered, the rows' tokens, and token 0's past the expert's end, where the rows are zeros), B's
        // 128 x 128 blocks of the tile's two column halves (with SwiGLU: g's and u's)
        let (ia, ib, iw0, iw1) = {
            let ti = slot(base, l);
            let row_a = ti.row0 + cw * 64 + r;
            let row_b = row_a + 8;
            // the producer's row tokens of this tile (u32::MAX past the expert's end)
            // SAFETY (the loads in `src`): `row - ti.row0` < BM (row within the tile), so inside the tokens' half;
            // written before the stage's arrivals this thread has waited on (`wait_full` above), and rewritten only
            // two tiles later (see `produce_gather`)
            let toks = base + TOKS_AT + (l % 2) * (4 * BM);
            let src = |row: u32| unsafe {
                if GA {
                    let tok = smem::ld_u32(toks + 4 * (row - ti.row0));
                    if tok != u32::MAX {
                        tok
                    } else {
                        0
                    }
                } else if row < p.rows_max {
                    row
                } else {
                    0
                }
            };
            let (ia, ib) = (src(row_a) * kb_n, src(row_b) * kb_n);
            (ia, ib, b_row::<SW>(p, &ti, 0) / 128 * kb_n, b_row::<SW>(p, &ti, 1) / 128 * kb_n)
        };
        let sc = scales(p, (ia, ib, iw0, iw1));
        let mut acc = [0f32; 128];
        let mut part = [0f32; 64];
        let mut kb = 0;
        while kb < kb_n {
            ring.wait_full(it);
            if GA {
                // A arrived through the generic proxy (cp.async): order it before the tensor cores' reads
                fence::proxy_async_shared_cta();
            }
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            // the timeline probe's records (where the host gave a buffer): lane 0 of each consumer warp, the
            // block's second tile
            let rec = PROBE & TIMELINE != 0 && p.ct != 0 && l == 1 && lane == 0 && kb < 16;
            let at = (((regs::bid() * 8 + cw * 4 + t / 32) * 16 + kb) * 5) as usize;
            let mark = |i: usize, dep: f32| {
                if rec {
                    // SAFETY: a non-null `ct` is the probe's buffer of [grid][8][16][5] (checked by the host's
                    // `timeline`, the only setter)
                    unsafe { *(p.ct as *mut u64).add(at + i) = regs::clock64_after(dep.to_bits()) };
                }
            };
            if PROBE & LOOP == NOPROMO_STRAIGHT {
                // both halves straight into the accumulator's halves, the previous block's stage released once
                // its wgmma have completed
                let (a0, a1) = acc.split_at_mut(64);
                // SAFETY: two disjoint runs of exactly 64 elements of `acc`
                let (a0, a1) = (&mut *(a0.as_mut_ptr() as *mut [f32; 64]), &mut *(a1.as_mut_ptr() as *mut [f32; 64]));
                let (a, b) = (st + cw * (A_BYTES / 2), st + A_BYTES);
                crate::kernels::grouped_gemm_fp8::issue_block(a, b, a0, kb > 0);
                crate::kernels::grouped_gemm_fp8::issue_block(a, b + B_HALF, a1, kb > 0);
                wgmma::wait_group::<2>();
                if kb > 0 && lane == 0 {
                    ring.release_prev(it);
                }
                it += 1;
                kb += 1;
                continue;
            }
            if PROBE & LOOP == NOPROMO_SERIAL {
                // each half into the one partial, added (its result read only at the tile's end, so ptxas keeps
                // the wgmma), waited for in turn
                // (with TIMELINE, the wide kernel's five clocks: 1 and 2 both after half 0's wait, no promotion)
                let a = st + cw * (A_BYTES / 2);
                mark(0, 0.0);
                crate::kernels::grouped_gemm_fp8::issue_block(a, st + A_BYTES, &mut part, true);
                wgmma::wait_group::<0>();
                wgmma::fence_operand_64(&mut part);
                mark(1, part[0]);
                mark(2, part[1]);
                crate::kernels::grouped_gemm_fp8::issue_block(a, st + A_BYTES + B_HALF, &mut part, true);
                wgmma::wait_group::<0>();
                wgmma::fence_operand_64(&mut part);
                mark(3, part[0]);
                if lane == 0 {
                    ring.release_prev(it + 1);
                }
                mark(4, part[1]);
                it += 1;
                kb += 1;
                continue;
            }
            mark(0, 0.0);
            let s = sc(kb);
            issue_half(st, cw, 0, &mut part);
            wgmma::wait_group::<0>();
            wgmma::fence_operand_64(&mut part);
            mark(1, part[0]);
            promote_half::<0>(&mut acc, &part, s.0 * s.2, s.1 * s.2);
            mark(2, acc[63]);
            issue_half(st, cw, 1, &mut part);
            wgmma::wait_group::<0>();
            wgmma::fence_operand_64(&mut part);
            mark(3, part[0]);
            // both halves' wgmma have read the stage
            if lane == 0 {
                ring.release_prev(it + 1);
            }
            promote_half::<1>(&mut acc, &part, s.0 * s.3, s.1 * s.3);
            mark(4, acc[127]);
            it += 1;
            kb += 1;
        }
        if PROBE & LOOP == NOPROMO_SERIAL {
            // the partial's sum as the tile's first half (C is not the product)
            acc[..64].copy_from_slice(&part);
        }
        if PROBE & LOOP == NOPROMO_STRAIGHT {
            // the last block's wgmma, then its stage (kb_n >= 1: the host's K check)
            wgmma::wait_group::<0>();
            wgmma::fence_operand_128(&mut acc);
            if lane == 0 {
                ring.release_prev(it);
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
        if PROBE & DSW != 0 {
            epilogue_dswiglu(p, &acc, &ti);
        } else if SW && ZT {
            epilogue_swiglu_zt(p, &acc, &ti, (r, c0, row0w), (wst, base + RED_AT + 32 * (l % 2)), cw, &mut boxes);
        } else if SW && QZ {
            // z through the staging boxes in turn (4 a whole tile: box 0 first, box 1 last), then h's codes through
            // box 1 once every store has read it (`epilogue_swiglu_q` waits `.read 0`): the next tile's first z box
            // (0) then waits `.read 1` with only the codes' store (box 1) allowed in flight
            store_z(p.map_z, p.z, p.n, &acc, &ti, (r, c0, row0w), wst, cw, &mut boxes);
            epilogue_swiglu_q(p, &acc, &ti, (r, c0, row0w), wst + C_BOX, cw);
        } else if SW {
            epilogue_swiglu_q(p, &acc, &ti, (r, c0, row0w), wst, cw);
        } else if row0w + 64 <= ti.row_end {
            // uniform in the warpgroup: four 64 x 64 boxes through the staging and the copy engine
            crate::unroll!(B in [0, 1, 2, 3] {
                let col = ti.n_tile * BN + 64 * B as u32;
                crate::kernels::grouped_gemm::store_box(p.map_c, col, row0w, wst + (boxes % 2) * C_BOX, cw, |j, h| {
                    math::pack_bf16x2(acc[4 * (8 * B + j) + 2 * h], acc[4 * (8 * B + j) + 2 * h + 1])
                });
                boxes += 1;
            });
        } else {
            let c = p.c as *mut u32;
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
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
        tile += regs::nctaid();
    }
    // the staging must not be freed (block exit) before the copy engine has read it
    if t == 0 {
        tma::wait_group::<0>();
    }
}

/// The SwiGLU backward's epilogue (`grouped_gemm_fp8w_dswiglu`): the accumulator is dh of the tile's 256 columns of
/// I (rows r and r + 8 of the warpgroup's 64). Per element, z's g and u (bf16 pairs from z [rows, 2N]: g at column
/// c, u at N + c) and the row's routing weight s = w[row_slot[row]] (0 for a slot at or past `w_len`) into
/// [`dswiglu_elem`] (the bf16 kernels' arithmetic): dz's g half into column c of C (dz, bf16 [rows, 2N]), its u half
/// into N + c, s h into `sh` [rows, N]. z is read 64 columns at a time, every load of a batch issued before its
/// first use, each at a constant offset from its row's pointers (`ld.global`, so ptxas may keep the loads ahead of
/// the stores into shared memory); in the staged path the next batch's loads are issued as soon as this batch's
/// words are used (before its boxes are stored), so only the first batch waits a whole load latency.
///
/// A warpgroup whose 64 rows all belong to the tile's expert stores through its two staging boxes and the copy
/// engine (`map_c`: dz's map [rows_max, 2N], `map_sh`; `store_box`'s layout): per 64-column batch, dz's g and u
/// boxes at once (after every earlier store has read both boxes), then s h's box in the g box once its store has
/// read it, s h's 16 words a batch held in registers meanwhile (computed with dz: the main loop's registers are
/// free by then; recomputing it from a second read of z cost the kernel 2184 SASS instructions of 11544);
/// otherwise from registers, 4-byte column pairs. The row's dtopk partial (dh h over this thread's 64 columns in
/// order, then the quad's four lanes by two xor shuffles: a fixed order, the same in both paths) by the quad's first
/// lane into partial[row, n_tile] (N / 256 a row, as `dtopk_reduce` reads). Rows at or past the expert's end read
/// and write nothing (their partial stays 0 and is not stored). Every pointer and map given (the host's checks: no
/// test of them here, where a predicate kept across the main loop spilled). SAFETY: all 128 threads of the
/// warpgroup, in uniform control flow.
#[inline(always)]
unsafe fn epilogue_dswiglu(p: &GroupedGemmFp8, acc: &[f32; 128], ti: &MTile) {
    // the thread's place, its warpgroup's staging boxes and rows read afresh (`tid_fresh`: not kept in registers
    // across the main loop, which runs at the register cap)
    let t = regs::tid_fresh();
    let (cw, lane) = (t / 128 - 1, t % 32);
    let r = 16 * (t % 128 / 32) + lane / 4;
    let c0 = 2 * (lane % 4);
    let wst = smem::base() + STAGING + cw * 2 * C_BOX;
    let row0w = ti.row0 + cw * 64;
    let rows = [row0w + r, row0w + r + 8];
    let lo = |x: u32| f32::from_bits(x << 16);
    let hi = |x: u32| f32::from_bits(x & 0xffff_0000);
    let weight = |row: u32| {
        let slot = *(p.row_slot as *const u32).add(row as usize);
        if slot < p.w_len {
            *(p.w as *const f32).add(slot as usize)
        } else {
            0.0
        }
    };
    // a row's first pair (column n_tile BN + c0) in u32 words of a [rows, cols] bf16 array: row * cols / 2 + ..
    let first = |row: u32, cols: u32| row as usize * (cols / 2) as usize + ((ti.n_tile * BN + c0) / 2) as usize;
    // batch B's pair J of a row: 8 columns a step, 64 a batch
    let at = |b: usize, j: usize| 32 * b + 4 * j;
    let nh = (p.n / 2) as usize;
    let mut part = [0f32; 2];
    // uniform in the warpgroup
    if row0w + 64 <= ti.row_end {
        let s = [weight(rows[0]), weight(rows[1])];
        let zg = [(p.z as *const u32).add(first(rows[0], 2 * p.n)), (p.z as *const u32).add(first(rows[1], 2 * p.n))];
        let zu = [zg[0].add(nh), zg[1].add(nh)];
        let leader = t % 128 == 0;
        let bar = 2 + cw;
        // the staging layout of `store_box` (16-byte chunk j of row rr at chunk j ^ (rr % 8))
        let put = |buf: u32, j: u32, h: u32, v: u32| {
            let rr = r + 8 * h;
            smem::st_u32(buf + rr * 128 + ((j ^ (rr % 8)) * 16) + 2 * c0, v);
        };
        // batch b's z words of this thread's two rows (g, u pairs), 32 loads issued at once
        let load = |b: usize, zw: &mut [[u32; 2]; 16]| {
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                crate::unroll!(H in [0, 1] {
                    zw[2 * J + H] = [global::ld_u32(zg[H].add(at(b, J))), global::ld_u32(zu[H].add(at(b, J)))];
                });
            });
        };
        let (bg, bu) = (wst, wst + C_BOX);
        let mut zw = [[0u32; 2]; 16];
        load(0, &mut zw);
        crate::unroll!(B in [0, 1, 2, 3] {
            // batch B's 64 columns: dz's g and u halves straight into the two staging boxes (once every earlier
            // store has read them: no box is left in flight across batches or tiles, so no turn is counted)
            if leader {
                tma::wait_group_read::<0>();
            }
            sync::named_sync(bar, 128);
            // s h's pairs held (16 words) until the g box is free again
            let mut shw = [0u32; 16];
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                crate::unroll!(H in [0, 1] {
                    let [g, u] = zw[2 * J + H];
                    let o = 4 * (8 * B + J) + 2 * H;
                    let (g0, u0, s0) = dswiglu_elem(lo(g), lo(u), acc[o], s[H], &mut part[H]);
                    let (g1, u1, s1) = dswiglu_elem(hi(g), hi(u), acc[o + 1], s[H], &mut part[H]);
                    put(bg, J as u32, H as u32, math::pack_bf16x2(g0, g1));
                    put(bu, J as u32, H as u32, math::pack_bf16x2(u0, u1));
                    shw[2 * J + H] = math::pack_bf16x2(s0, s1);
                });
            });
            // the next batch's z in flight (into the words just read) while this batch's boxes are stored
            if B < 3 {
                load(B + 1, &mut zw);
            }
            fence::proxy_async_shared_cta();
            sync::named_sync(bar, 128);
            let col = ti.n_tile * BN + 64 * B as u32;
            if leader {
                tma::store_2d(p.map_c as *const u8, col as i32, row0w as i32, bg);
                tma::commit_group();
                tma::store_2d(p.map_c as *const u8, (p.n + col) as i32, row0w as i32, bu);
                tma::commit_group();
                // s h into the g box once its store has read it (the u box's may still be reading)
                tma::wait_group_read::<1>();
            }
            sync::named_sync(bar, 128);
            crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                crate::unroll!(H in [0, 1] {
                    put(bg, J as u32, H as u32, shw[2 * J + H]);
                });
            });
            fence::proxy_async_shared_cta();
            sync::named_sync(bar, 128);
            if leader {
                tma::store_2d(p.map_sh as *const u8, col as i32, row0w as i32, bg);
                tma::commit_group();
            }
        });
    } else {
        crate::unroll!(H in [0, 1] {
            let row = rows[H];
            if row < ti.row_end {
                let s = weight(row);
                let zg = (p.z as *const u32).add(first(row, 2 * p.n));
                let dzg = (p.c as *mut u32).add(first(row, 2 * p.n));
                let shr = (p.sh as *mut u32).add(first(row, p.n));
                crate::unroll!(B in [0, 1, 2, 3] {
                    let mut zw = [[0u32; 2]; 8];
                    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                        zw[J] = [global::ld_u32(zg.add(at(B, J))), global::ld_u32(zg.add(nh + at(B, J)))];
                    });
                    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                        let [g, u] = zw[J];
                        let o = 4 * (8 * B + J) + 2 * H;
                        let (g0, u0, s0) = dswiglu_elem(lo(g), lo(u), acc[o], s, &mut part[H]);
                        let (g1, u1, s1) = dswiglu_elem(hi(g), hi(u), acc[o + 1], s, &mut part[H]);
                        *dzg.add(at(B, J)) = math::pack_bf16x2(g0, g1);
                        *dzg.add(nh + at(B, J)) = math::pack_bf16x2(u0, u1);
                        *shr.add(at(B, J)) = math::pack_bf16x2(s0, s1);
                    });
                });
            }
        });
    }
    // the row's partial over the quad (every lane takes part: the shuffles stay uniform)
    crate::unroll!(M in [1, 2] {
        part[0] += f32::from_bits(warp::shfl_xor(part[0].to_bits(), M as u32));
        part[1] += f32::from_bits(warp::shfl_xor(part[1].to_bits(), M as u32));
    });
    if lane % 4 == 0 {
        let tiles = p.n / BN;
        crate::unroll!(H in [0, 1] {
            if rows[H] < ti.row_end {
                *(p.partial as *mut f32).add((rows[H] * tiles + ti.n_tile) as usize) = part[H];
            }
        });
    }
}

/// The SwiGLU epilogue with h quantized: h = silu(g) u from the accumulator's halves (g in columns 0..128, u in
/// 128..256), rounded to bf16, its rows' amax over the tile's 128 columns (the quad's four lanes hold a row), the
/// scale and the e4m3 codes by the rule of `quantize_fp8_rows`; a whole 64-row group's codes through the
/// warpgroup's first staging box and the copy engine (64 x 128 bytes), the rest from registers; the scales from
/// the quad's first lane.
#[inline(always)]
unsafe fn epilogue_swiglu_q(
    p: &GroupedGemmFp8,
    acc: &[f32; 128],
    ti: &MTile,
    (r, c0, row0w): (u32, u32, u32),
    wst: u32,
    cw: u32,
) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    let (row_a, row_b) = (row0w + r, row0w + r + 8);
    // h of columns 8 J + c0, + 1 of rows r (H = 0) and r + 8 (H = 1), as bf16 pairs
    let mut hw = [0u32; 32];
    let (mut a, mut b) = (0f32, 0f32);
    let mag = |w: u32| math::bf16_to_f32(w as u16).abs().max(math::bf16_to_f32((w >> 16) as u16).abs());
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        crate::unroll!(H in [0, 1] {
            let o = 4 * J + 2 * H;
            let h0 = crate::kernels::grouped_gemm::silu_mul(acc[o], acc[64 + o]);
            let h1 = crate::kernels::grouped_gemm::silu_mul(acc[o + 1], acc[64 + o + 1]);
            hw[2 * J + H] = math::pack_bf16x2(h0, h1);
        });
        a = a.max(mag(hw[2 * J]));
        b = b.max(mag(hw[2 * J + 1]));
    });
    crate::unroll!(M in [1, 2] {
        a = a.max(f32::from_bits(warp::shfl_xor(a.to_bits(), M as u32)));
        b = b.max(f32::from_bits(warp::shfl_xor(b.to_bits(), M as u32)));
    });
    let ((sa_, fa), (sb_, fb)) = (scale_and_factor(a), scale_and_factor(b));
    let code =
        |w: u32, f: f32| math::pack_e4m3x2(math::bf16_to_f32(w as u16) * f, math::bf16_to_f32((w >> 16) as u16) * f);
    if row0w + 64 <= ti.row_end {
        // uniform in the warpgroup: the 64 x 128 codes through the first staging box and the copy engine
        let cbox = wst;
        let bar = 2 + cw;
        if t == 0 {
            tma::wait_group_read::<0>(); // the previous tile's store has read the box
        }
        sync::named_sync(bar, 128);
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            crate::unroll!(H in [0, 1] {
                let rr = r + 8 * H as u32;
                let c = 8 * J as u32 + c0;
                let v = code(hw[2 * J + H], if H == 0 { fa } else { fb });
                smem::st_u16(cbox + rr * 128 + (((c >> 4) ^ (rr & 7)) << 4) + (c & 15), v);
            });
        });
        fence::proxy_async_shared_cta();
        sync::named_sync(bar, 128);
        if t == 0 {
            tma::store_2d(p.map_c as *const u8, (ti.n_tile * 128) as i32, row0w as i32, cbox);
            tma::commit_group();
        }
    } else {
        let c8 = p.c as *mut u16;
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
            let c = ti.n_tile * 128 + 8 * J as u32 + c0;
            if row_a < ti.row_end {
                *c8.add(((row_a * p.n + c) / 2) as usize) = code(hw[2 * J], fa) as u16;
            }
            if row_b < ti.row_end {
                *c8.add(((row_b * p.n + c) / 2) as usize) = code(hw[2 * J + 1], fb) as u16;
            }
        });
    }
    if lane % 4 == 0 {
        let sc = p.c_scales as *mut f32;
        if row_a < ti.row_end {
            *sc.add((row_a * (p.n / 128) + ti.n_tile) as usize) = sa_;
        }
        if row_b < ti.row_end {
            *sc.add((row_b * (p.n / 128) + ti.n_tile) as usize) = sb_;
        }
    }
}

/// The z recompute's epilogue with dW2's B operand. z: g (accumulator columns 0..128) into z's columns
/// 128 n_tile .., u (128..256) into N + 128 n_tile .., as bf16, by the plain kernel's path (whole 64-row groups
/// through the staging boxes and the copy engine, the rest from registers; the same rounding, so the same bits).
/// h = silu(g) u rounded to bf16 (as `epilogue_swiglu_q`), rows past the expert's end zero; the tile is one
/// 128 x 128 block of h^T (its 128 rows are the expert's K block kb = tile_offsets[e] + (row0 - offsets[e]) / 128),
/// so its one scale needs the amax over both warpgroups: each warp's maximum into `red` (this tile's parity half:
/// a warpgroup cannot reach the next tile but one before the other has left this one, both consuming the same
/// stages), named barrier 4 (the 256 consumer threads), then every thread folds the 8. The codes go transposed
/// through the warpgroup's two staging boxes (after the copy engine has read them): column c's 64 codes of the
/// warpgroup's rows at c * 80 (80-byte pitch: a warp's byte stores, 4 columns x 8 rows, fall in distinct banks),
/// then each thread stores one column's 64 bytes into ct[128 n_tile + c, 128 kb + 64 cw ..]; thread 0 of
/// warpgroup 0 writes the scale c_scales[kb, n_tile]. SAFETY: all 256 consumer threads, in uniform control flow.
#[inline(always)]
unsafe fn epilogue_swiglu_zt(
    p: &GroupedGemmFp8,
    acc: &[f32; 128],
    ti: &MTile,
    (r, c0, row0w): (u32, u32, u32),
    (wst, red): (u32, u32),
    cw: u32,
    boxes: &mut u32,
) {
    let t = regs::tid() % 128;
    let lane = t % 32;
    let (row_a, row_b) = (row0w + r, row0w + r + 8);
    // z, as the plain kernel stores it
    store_z(p.map_c, p.c, p.n, acc, ti, (r, c0, row0w), wst, cw, boxes);
    // h, zero past the expert's end, and this thread's largest magnitude
    let mut hw = [0u32; 32];
    let mut m = 0f32;
    let mag = |w: u32| math::bf16_to_f32(w as u16).abs().max(math::bf16_to_f32((w >> 16) as u16).abs());
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        crate::unroll!(H in [0, 1] {
            let o = 4 * J + 2 * H;
            let valid = if H == 0 { row_a < ti.row_end } else { row_b < ti.row_end };
            let h0 = crate::kernels::grouped_gemm::silu_mul(acc[o], acc[64 + o]);
            let h1 = crate::kernels::grouped_gemm::silu_mul(acc[o + 1], acc[64 + o + 1]);
            hw[2 * J + H] = if valid { math::pack_bf16x2(h0, h1) } else { 0 };
            m = m.max(mag(hw[2 * J + H]));
        });
    });
    crate::unroll!(S in [1, 2, 4, 8, 16] {
        m = m.max(f32::from_bits(warp::shfl_xor(m.to_bits(), S as u32)));
    });
    if lane == 0 {
        smem::st_u32(red + 4 * (4 * cw + t / 32), m.to_bits());
    }
    sync::named_sync(4, 256);
    crate::unroll!(W in [0, 1, 2, 3, 4, 5, 6, 7] {
        m = m.max(f32::from_bits(smem::ld_u32(red + 4 * W as u32)));
    });
    let (scale, f) = scale_and_factor(m);
    // h^T's codes transposed through a staging box by stmatrix.trans in 16-bit units (a unit: the codes of columns
    // c, c + 1 of one row, as the fragment holds them). Unit u = 4 J + q (column group J, q = lane % 4, c = 8 J + 2 q)
    // is row u of the box (128 bytes: the warpgroup's 64 rows k, two bytes each), its k-block kb8 = k / 8 at 16-byte
    // chunk kb8 ^ (u % 8) (the 8 rows of a stored matrix and the 8 chunks of a loaded row in distinct banks). The
    // box: the one the last z store did not use (`wait_group.read 1`, as `store_box`).
    let tb = wst + (*boxes % 2) * C_BOX;
    let bar = 2 + cw;
    if t == 0 {
        tma::wait_group_read::<1>();
    }
    sync::named_sync(bar, 128);
    // the lane-dependent parts of the addresses from the thread index read here (hoisted out of the tile loop and
    // held, ptxas spilled them)
    let tf = regs::tid_fresh() % 128;
    let (w, l8, li) = (tf / 32, tf % 8, (tf / 8) % 4);
    // instruction X stores matrices i = 0..3: column groups 4 X + 2 (i / 2) (+1), half H = i % 2; matrix column
    // 2 q + s is group 4 X + 2 (i / 2) + s's unit q; lane 8 i + b addresses destination row b (unit q = b / 2, s = b % 2)
    crate::unroll!(X in [0, 1, 2, 3] {
        let mut v = [0u32; 4];
        crate::unroll!(I in [0, 1, 2, 3] {
            let (j, hh) = (4 * X + 2 * (I / 2), I % 2);
            let unit = |jj: usize| {
                let wv = hw[2 * jj + hh];
                math::pack_e4m3x2(math::bf16_to_f32(wv as u16) * f, math::bf16_to_f32((wv >> 16) as u16) * f)
            };
            v[I] = unit(j) | (unit(j + 1) << 16);
        });
        let u = 4 * (4 * X as u32 + 2 * (li / 2) + l8 % 2) + l8 / 2;
        let kb8 = 2 * w + li % 2;
        warp::stmatrix_x4_trans(tb + u * 128 + ((kb8 ^ (u % 8)) * 16), v);
    });
    sync::named_sync(bar, 128);
    let to_e = *(p.tile_offsets as *const u32).add(ti.e as usize);
    let kb = crate::scheduler::k_block(ti.row0, *(p.offsets as *const u32).add(ti.e as usize), to_e, 128);
    // the block exists in ct [N, Kp] and c_scales [Kp / 128, N / 128] (kb + 1 <= Kp / 128): always with offsets
    // as promised (kb is the tile's m-tile, below tile_offsets[E] <= Kp / 128); with any other device offsets a
    // block past them is not stored (uniform in the tile: all threads skip the stores, none a barrier). Defence in
    // depth: only the layer's z recompute launches this kernel, on the routing kernel's own offsets, so no public
    // call reaches it with bad ones and no GPU test does.
    if kb < p.kp / 128 {
        // each thread: 8 rows k of one unit per pass (8 lanes a unit: its 128 bytes), split into columns c and c + 1
        let kb8 = tf % 8;
        crate::unroll!(I in [0, 1, 2, 3] {
            let u = tf / 8 + 16 * I as u32;
            let q = smem::ld_v4(tb + u * 128 + ((kb8 ^ (u % 8)) * 16));
            let c = 8 * (u / 4) + 2 * (u % 4);
            let at = |cc: u32| ((ti.n_tile * 128 + cc) * p.kp + kb * 128 + 64 * cw + 8 * kb8) as usize;
            let ct = p.ct as *mut u8;
            global::st_v2(ct.add(at(c)) as *mut [u32; 2], [math::prmt(q[0], q[1], 0x6420), math::prmt(q[2], q[3], 0x6420)]);
            global::st_v2(ct.add(at(c + 1)) as *mut [u32; 2], [math::prmt(q[0], q[1], 0x7531), math::prmt(q[2], q[3], 0x7531)]);
        });
        if cw == 0 && t == 0 {
            *(p.c_scales as *mut f32).add((kb * (p.n / 128) + ti.n_tile) as usize) = scale;
        }
    }
    // every thread's reads of the staging before the next tile's z stores rewrite it
    sync::named_sync(bar, 128);
}

/// z of a SwiGLU-form tile (g in accumulator columns 0..128, u in 128..256) into z [rows, 2N] bf16 at `zp`: g into
/// columns 128 n_tile .., u into N + 128 n_tile .., as the plain kernel stores the same elements (the same rounding:
/// the same bits); whole 64-row groups through the warpgroup's staging boxes (alternating from `boxes`, 4 a tile)
/// and the copy engine (`map`: z in 64 x 64 boxes), the rest from registers. SAFETY: all 128 threads of the
/// warpgroup, in uniform control flow.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn store_z(
    map: u64,
    zp: u64,
    n: u32,
    acc: &[f32; 128],
    ti: &MTile,
    (r, c0, row0w): (u32, u32, u32),
    wst: u32,
    cw: u32,
    boxes: &mut u32,
) {
    let (row_a, row_b) = (row0w + r, row0w + r + 8);
    let ldz = 2 * n;
    if row0w + 64 <= ti.row_end {
        crate::unroll!(B in [0, 1, 2, 3] {
            let col = if B < 2 { ti.n_tile * 128 + 64 * B as u32 } else { n + ti.n_tile * 128 + 64 * (B as u32 - 2) };
            crate::kernels::grouped_gemm::store_box(map, col, row0w, wst + (*boxes % 2) * C_BOX, cw, |j, h| {
                math::pack_bf16x2(acc[4 * (8 * B + j) + 2 * h], acc[4 * (8 * B + j) + 2 * h + 1])
            });
            *boxes += 1;
        });
    } else {
        let z = zp as *mut u32;
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
            let col = if J < 16 { ti.n_tile * 128 } else { n + ti.n_tile * 128 - 128 } + 8 * J as u32 + c0;
            if row_a < ti.row_end {
                *z.add(((row_a * ldz + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J], acc[4 * J + 1]);
            }
            if row_b < ti.row_end {
                *z.add(((row_b * ldz + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J + 2], acc[4 * J + 3]);
            }
        });
    }
}

/// The side copy's mover warp `w` (0..3) of every block: the routing's rows r = w + 3 (bid + grid i) below
/// offsets[E] (and `rows_max`), each token row_slot[r] / top_k's `copy_cols` bf16 of `a_rows` into row r of
/// `a_copy`, 16 bytes a lane, eight loads in flight ([`crate::kernels::ep_common::copy_row`]). Nothing in the
/// kernel waits for it; the next kernel on the stream reads the copy. SAFETY: `row_slot` holds the routing's slots
/// (offsets[E] of them, each below tokens x top_k), `a_rows` the tokens' rows and `a_copy` `rows_max` rows, of
/// `copy_cols` bf16 each (a multiple of 8); no barrier inside (the movers run beside the GEMM's roles).
#[inline(always)]
unsafe fn copy_side(p: &GroupedGemmFp8, w: u32, lane: u32) {
    let rows = (*(p.offsets as *const u32).add(p.experts as usize)).min(p.rows_max);
    let chunks = p.copy_cols / 8;
    let mut r = w + 3 * regs::bid();
    while r < rows {
        let tok = *(p.row_slot as *const u32).add(r as usize) / p.top_k;
        let src = (p.a_rows as *const [u32; 4]).add((tok * chunks) as usize);
        let dst = (p.a_copy as *mut [u32; 4]).add((r * chunks) as usize);
        crate::kernels::ep_common::copy_row(src, dst, chunks, lane);
        r += 3 * regs::nctaid();
    }
}
