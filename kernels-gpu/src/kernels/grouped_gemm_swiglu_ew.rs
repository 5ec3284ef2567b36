//! GEMM1 with the SwiGLU epilogue run by warps of its own (`grouped_gemm_swiglu_ew7`, and `_ew7_mv` with x gathered
//! by the idle producer warps as `grouped_gemm_swiglu_mv`): the same outputs as `grouped_gemm_swiglu` (h = silu(g) u,
//! bf16 [rows, I]; z = [g | u], bf16 [rows, 2I], when set), h computed from z rounded to bf16 as every GEMM1
//! epilogue computes it (`swiglu_h`).
//!
//! Why: the cooperative kernel's consumers stop issuing wgmma for their epilogue (the staging waits, the named
//! barriers, the h math), ~5-8% of GEMM1 + SwiGLU at 30B (0.88 of cuBLAS alternating against 0.92 for the plain
//! GEMM1). Here the consumers write the z tile (bf16) into shared memory and go on to the next tile; the
//! epilogue warps store z and h from it. The dh + SwiGLU backward's seven-warp kernel showed the hand-off's main
//! loop running at 558 us where the plain 128 x 256 dh GEMM takes 604 (docs/RESULTS.md 2026-12-04d, call 3).
//!
//! Block: 4 warpgroups (512 threads, 128 registers each, no setmaxnreg), tiles of 128 rows x 192 columns of z: 96
//! gate and the 96 matching up columns, so 96 columns of h (`n_tiles` = I / 96 rounded up). Thread 0: the
//! producer (a 4-stage ring of A 128 x 64 and B's 96 gate rows then 96 up rows x 64 K, K-major, by TMA; `_mv`:
//! each m-tile's rows waited for). Warpgroups 1, 2: the consumers (wgmma m64n192k16, 64 rows each), then the z
//! tile as `grouped_gemm_bt_dswiglu_ew7`'s consumers write its dh tile. The epilogue warps: warps 1..3 and
//! warpgroup 3 (seven), or warpgroup 3 alone in `_mv` (warps 1..3 copy x's rows) and `_gather` (warpgroup 0
//! gathers A from the tokens into each stage itself: `produce_gather`). Warp w takes the row pairs w, w + EW, ..:
//! lanes 0..15 the pair's first row, 16..31 its second; lane l < 12 of a half the columns 8 l .. + 8:
//! its g chunk (chunk l of the row) and u chunk (12 + l), h = silu(g) u, 16-byte stores of g and u into z and of h
//! into c. Rows past the expert's end and columns past I are neither read nor written.
use crate::kernels::grouped_gemm::{
    m_tiles, move_rows, swiglu_h, tile_info, wait_rows, GatherRows, Tiles, A_BYTES, BK,
};
use crate::kernels::grouped_gemm_dswiglu_ew::{consume, produce_gather, queue_at, setup, stage_bytes};
use crate::params::GroupedGemm;
use crate::pipeline::Ring;
use crate::ptx::{cp_async, global, mbarrier, regs, smem, sync, tma};

/// Ring stages and columns of z a tile (the seven-warp SwiGLU backward's layout: 4 x 40 KiB, then a 48 KiB tile).
const S7: u32 = crate::kernels_host::GEMM_EW7_STAGES;
const BN7: u32 = crate::kernels_host::GEMM_EW7_BN;
/// Bytes of a row of the z tile.
const Z_ROW: u32 = BN7 * 2;
/// 16-byte chunks of g (and of u) in a row of the z tile.
const HALF: u32 = BN7 / 16;

/// GEMM1 + SwiGLU by epilogue warps (see the module). 512 threads, `SMEM_BYTES` of dynamic shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<false, 7, false, false>(&p);
}

/// As [`grouped_gemm_swiglu_ew7`], its tiles taken at run time from the counter `p.sched` (zeroed before the
/// launch; `MEGAMOE_GEMM_SCHED=dynamic`, as `grouped_gemm_bf16_dyn`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<false, 7, true, false>(&p);
}

/// As [`grouped_gemm_swiglu_ew7`] with x's rows copied into A by warps 1..3 while the GEMM runs (`a_copy` etc.,
/// as `grouped_gemm_swiglu_mv`); four epilogue warps.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7_mv(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<true, 4, false, false>(&p);
}

/// As [`grouped_gemm_swiglu_ew7_mv`] with the run-time tile counter (see [`grouped_gemm_swiglu_ew7_dyn`]); the
/// movers still copy the rows of the tiles the static walk would give their block (every part of every m-tile is
/// copied by some block, and the producer of whichever block takes a tile waits for its m-tile's count).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7_mv_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<true, 4, true, false>(&p);
}

/// As [`grouped_gemm_swiglu_ew7`] with A gathered from the tokens by warpgroup 0 while it loads each stage (`a_rows`,
/// `row_slot`, `top_k`, as `grouped_gemm_swiglu_gather`: no expert-ordered copy of x is read or written); four
/// epilogue warps (warpgroup 3).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7_gather(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<false, 4, false, true>(&p);
}

/// As [`grouped_gemm_swiglu_ew7_gather`] with the run-time tile counter (see [`grouped_gemm_swiglu_ew7_dyn`]): thread
/// 0 takes each tile and hands it to the other 127 gathering threads through shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_ew7_gather_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    body::<false, 4, true, true>(&p);
}

#[inline(always)]
unsafe fn body<const MV: bool, const EW: u32, const DYN: bool, const GATHER: bool>(p: &GroupedGemm) {
    const { assert!(!GATHER || (!MV && EW == 4)) };
    let base = smem::base();
    // a gathering producer: the TMA thread's arrival and one per gathering thread's copies (`noinc`)
    let (ring, zt, bars) = setup::<S7, BN7, EW, DYN>(p, base, if GATHER { 129 } else { 1 });
    let queue = base + queue_at(S7, BN7);
    let t = regs::tid();
    let wg = t / 128;
    let total = m_tiles(p) * p.n_tiles;
    let kt_n = p.k / BK;
    if GATHER && wg == 0 {
        produce_gather_w1::<DYN>(p, base, ring, (total, queue), kt_n);
    } else if t == 0 {
        produce::<MV, DYN>(p, base, ring, (total, queue), kt_n);
    } else if wg == 3 || (wg == 0 && !MV) {
        // one call site for every epilogue warp: warps 1..3 are w 0..2 and warpgroup 3 the rest
        if t >= 32 {
            let w = if wg == 0 { t / 32 - 1 } else { t / 32 - 12 + (EW - 4) };
            epilogue::<EW, DYN>(p, zt, bars, (total, queue), w);
        }
    } else if wg == 0 {
        if t >= 32 {
            // the overlapped gather: tile m n_tiles + n is block (m n_tiles + n) % grid's
            let (b, grid) = (regs::bid(), regs::nctaid());
            let part_of = |m: u32| crate::scheduler::mover_part(m * p.n_tiles, b, grid);
            move_rows::<true>(p, p.n_tiles, part_of, t / 32 - 1, t % 32, p.k);
        }
    } else {
        let cw = regs::warpgroup() - 1;
        consume::<S7, [f32; 96], false, DYN, GATHER>(p, base, ring, zt, bars, (total, queue), kt_n, cw);
    }
}

/// The producer thread: per k-step A 128 x 64 and B_e's gate rows n0 .. n0 + 96 and up rows I + n0 .. (one box
/// of 96 rows x 64 K each, `map_b`'s box), n0 = n_tile * 96. `MV`: each m-tile's rows waited for first.
#[inline(always)]
unsafe fn produce<const MV: bool, const DYN: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S7>,
    (total, queue): (u32, u32),
    kt_n: u32,
) {
    crate::kernels::acquire_prefetch(p.map_a as *const u8);
    crate::kernels::acquire_prefetch(p.map_b as *const u8);
    let stage = stage_bytes(BN7);
    let mut it = 0u32;
    let mut tiles = Tiles::<DYN, true>::new(p, total, queue);
    while let Some(tile) = tiles.next() {
        let ti = tile_info::<false>(p, tile);
        if MV {
            wait_rows(p, &ti, tile / p.n_tiles);
        }
        let (brow, n0) = (ti.e * p.n_b, ti.n_tile * (BN7 / 2));
        let mut kt = 0;
        while kt < kt_n {
            let a_s = base + Ring::<S7>::stage(it) * stage;
            let fb = ring.produce(it, stage);
            let kx = (kt * BK) as i32;
            tma::load_2d(a_s, p.map_a as *const u8, kx, ti.row0 as i32, fb);
            tma::load_2d(a_s + A_BYTES, p.map_b as *const u8, kx, (brow + n0) as i32, fb);
            tma::load_2d(a_s + A_BYTES + (BN7 / 2) * BK * 2, p.map_b as *const u8, kx, (brow + p.n + n0) as i32, fb);
            it += 1;
            kt += 1;
        }
    }
}

/// The gathering producer (`_gather`: the 128 threads of warpgroup 0): `grouped_gemm_dswiglu_ew.rs`
/// [`produce_gather`] with B's gate rows n0 .. n0 + 96 and up rows I + n0 .. (one box each, n0 = n_tile * 96).
/// SAFETY: as `produce_gather`.
#[inline(always)]
unsafe fn produce_gather_w1<const DYN: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S7>,
    (total, queue): (u32, u32),
    kt_n: u32,
) {
    produce_gather::<S7, BN7, DYN, false>(p, base, ring, (total, queue), kt_n, |b_s, fb, ti, kt| {
        let (brow, n0) = (ti.e * p.n_b, ti.n_tile * (BN7 / 2));
        let kx = (kt * BK) as i32;
        tma::load_2d(b_s, p.map_b as *const u8, kx, (brow + n0) as i32, fb);
        tma::load_2d(b_s + (BN7 / 2) * BK * 2, p.map_b as *const u8, kx, (brow + p.n + n0) as i32, fb);
    });
}

/// The epilogue warps (see the module), `EW_` of them, this one `w`. SAFETY: the `EW_` epilogue warps, in uniform
/// control flow per warp.
#[inline(always)]
unsafe fn epilogue<const EW_: u32, const DYN: bool>(
    p: &GroupedGemm,
    zt: u32,
    (full, empty): (u32, u32),
    (total, queue): (u32, u32),
    w: u32,
) {
    let lane = regs::tid() % 32;
    let (half, l) = (lane / 16, lane % 16);
    let n = p.n;
    // 16-byte chunks: z rows hold 2 n / 8, h rows ldc / 8
    let z = p.z as *mut [u32; 4];
    let c = p.c as *mut [u32; 4];
    // lanes past the half's 12 chunks read chunk 0 (never used)
    let lc = if l < HALF { l } else { 0 };
    let mut taken = 0u32;
    let mut tiles = Tiles::<DYN, false>::new(p, total, queue);
    while let Some(tile) = tiles.next() {
        let ti = tile_info::<false>(p, tile);
        let col = ti.n_tile * (BN7 / 2) + 8 * l;
        let live = l < HALF && col < n;
        mbarrier::wait_parity(full, taken & 1);
        let mut pair = w;
        while pair < crate::kernels_host::GEMM_BM / 2 {
            let r = 2 * pair + half;
            let row = ti.row0 + r;
            let g = smem::ld_v4(zt + r * Z_ROW + ((lc ^ (r % 8)) * 16));
            let u = smem::ld_v4(zt + r * Z_ROW + (((HALF + lc) ^ (r % 8)) * 16));
            if live && row < ti.row_end {
                let h = [swiglu_h(g[0], u[0]), swiglu_h(g[1], u[1]), swiglu_h(g[2], u[2]), swiglu_h(g[3], u[3])];
                // SAFETY: a row below row_end <= rows_max (`tile_info` clamps) and 8 columns below n: inside z
                // [rows_max, 2 n] and c [rows_max, ldc]; each element has one writer
                if p.z != 0 {
                    let at = ((row * 2 * n + col) / 8) as usize;
                    global::st_v4(z.add(at), g);
                    global::st_v4(z.add(at + (n / 8) as usize), u);
                }
                if p.c != 0 {
                    global::st_v4(c.add(((row * p.ldc + col) / 8) as usize), h);
                }
            }
            pair += EW_;
        }
        // every read of this tile is done: the consumers may write the next
        mbarrier::arrive(empty);
        taken += 1;
    }
}
