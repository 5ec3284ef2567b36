//! The backward's dh GEMM with the SwiGLU backward, its epilogue in warps of its own (`grouped_gemm_bt_dswiglu_ew7`,
//! the default, and `grouped_gemm_bt_dswiglu_ew`): the same outputs as `grouped_gemm_bt_dswiglu` (dz = [dg | du],
//! s h, the dtopk partial sums), computed from dh rounded to bf16.
//!
//! Why: the ping-pong kernel hides its epilogue under the other warpgroup's main loop, but its 128 x 128 tiles read
//! a third more operand bytes per FLOP from L2 than the cooperative 128 x 256 tile, and L2 bounds it (~76% busy,
//! docs/NOTES.md). Here the main loop is a plain cooperative dh GEMM's (B N-major) and the epilogue runs beside it:
//! at a tile's end the consumers write dh into a bf16 tile in shared memory and go on to the next tile at once;
//! the epilogue warps compute the SwiGLU backward of that tile from it while they run.
//!
//! `_ew`: 3 warpgroups. 0: thread 0 is the producer (the TMA loads of a 3-stage ring of A 128 x 64 and B 64 K x
//! 256 N, as `grouped_gemm_bt_bf16`), warps 1..3 the epilogue; 1 and 2: the consumers (wgmma m64n256k16, 64 rows
//! each). Registers (setmaxnreg): warpgroup 0 152 (at 88 ptxas spilled the epilogue; 152 holds the next step's z
//! beside this step's), the consumers 176 (128 x 152 + 256 x 176 = 384 x 168, what the launch allocates; ptxas
//! compiles the consumers within the launch's 168 anyway). Shared memory: the ring (3 x 48 KiB), the dh tile (128 x
//! 256 bf16, 64 KiB).
//! `_ew7`: 4 warpgroups, tiles of 128 x 192. Warpgroup 3 is four more epilogue warps (seven in all); the consumers
//! issue wgmma m64n192k16. 512 threads cap every thread at 128 registers (ptxas compiles each role within the
//! launch's count whatever setmaxnreg asks: no setmaxnreg), which the m64n192 accumulators (96) fit and m64n256
//! ones (128) do not. A 4-stage ring of 40 KiB stages and a 48 KiB dh tile. Lanes 24..31 of an epilogue warp hold
//! no columns (24 chunks of 8 a row).
//! Both: 16-byte chunk j of dh tile row r at chunk j ^ (r % 8), so the consumers' fragment stores and the
//! epilogue's row reads are free of bank conflicts; then the ring's mbarriers, the dh tile's `full` (256 arrivals:
//! every consumer thread after its stores) and `empty` (32 per epilogue warp, after its reads) mbarriers; the
//! scheduler's offsets where the cooperative kernels keep them (the launch has their shared memory, `SMEM_BYTES`).
//!
//! The epilogue warps: warp w (0..EW) takes rows w, w + EW, .. of the tile, four rows a step; lane l its columns
//! n_tile * BN + 8 l .. + 8: 16-byte loads of g, u (z = [g | u], bf16 [rows, 2 n]) issued a step ahead (the first
//! step's before the wait for dh: z does not depend on it), 16-byte loads of dh, [`dswiglu_elem`] per element,
//! 16-byte stores of dg, du (into dz, bf16 [rows, 2 n]) and of s h (into `sh`, bf16 [rows, n], when set), and the
//! rows' partial sums of dh h over the tile's columns (each lane's eight in order, then the four rows over the warp
//! in six shuffles, the order of a butterfly 16, 8, 4, 2, 1: the same for a row wherever it falls in a tile) into
//! partial[row, n_tile]. Rows past the expert's end and columns past n are neither read nor written.
//! Measured (docs/RESULTS.md, 30B under ncu): `_ew` 758-768 us against the ping-pong kernel's 836 (2026-12-04b);
//! `_ew7` 757-762 alone, but 1.021x `_ew` in the 30B layer's forward + backward and 0.77 of cuBLAS alternating
//! against 0.74 (2026-12-04d). Its main loop alone runs in 558 us (the epilogue skipped) and its epilogue warps
//! with the loads alone in 596 (no wgmma); together 760: the epilogue's 1 GB of z / dz / s h traffic and the main
//! loop each need about the whole time.
use crate::kernels::grouped_gemm::{
    dsw_weight, dswiglu_elem, frag, m_tiles, mainloop_coop, sched_copy, t_lane, tile_info, Acc, GatherRows, Tiles,
    A_BYTES, BK, DYN_Q, SMEM_BYTES, STAGE_BYTES,
};
use crate::params::GroupedGemm;
use crate::pipeline::{Ring, TileQueue};
use crate::ptx::{cp_async, global, math, mbarrier, regs, smem, sync, tma, warp};
use crate::scheduler::MTile as Tile;

/// Ring stages.
const S: u32 = crate::kernels_host::GEMM_EW_STAGES;
/// Columns of a tile.
const BN: u32 = crate::kernels_host::GEMM_BN;
/// Bytes of a ring stage: A 128 x 64, then B 64 K x `bn` N (as `mainloop_coop` reads it).
pub(crate) const fn stage_bytes(bn: u32) -> u32 {
    A_BYTES + bn * BK * 2
}
/// Shared-memory offset of the dh tile (after a ring of `stages` stages).
const fn dh_at(stages: u32, bn: u32) -> u32 {
    stages * stage_bytes(bn)
}
/// Shared-memory offset of the mbarriers: the ring's, then the dh tile's full and empty.
const fn bars_at(stages: u32, bn: u32) -> u32 {
    dh_at(stages, bn) + crate::kernels_host::GEMM_BM * bn * 2
}
/// Shared-memory offset of the `_dyn` kernels' tile queue (after the mbarriers).
pub(crate) const fn queue_at(stages: u32, bn: u32) -> u32 {
    bars_at(stages, bn) + 16 * stages + 16
}
const fn end(stages: u32, bn: u32) -> u32 {
    queue_at(stages, bn) + TileQueue::<DYN_Q>::BYTES
}
/// Shared-memory offset of a gathering producer's row tokens (u32 [BM]) and then the tile it broadcasts (u32), after
/// the queue (`grouped_gemm_swiglu_ew7_gather`).
pub(crate) const fn rows_at(stages: u32, bn: u32) -> u32 {
    end(stages, bn)
}
/// Bytes of that area: two buffers of row tokens (the look-ahead hand-off fills the next tile's while the current
/// one runs), then two tile slots.
pub(crate) const ROWS_BYTES: u32 = 2 * 4 * crate::kernels_host::GEMM_BM + 16;
const _: () = assert!(dh_at(S, BN) == S * STAGE_BYTES, "the 256-column ring is the shared engine's");
const _: () =
    assert!(end(S, BN) <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED, "the layout overlaps the scheduler's offsets");
const _: () = assert!(dh_at(S, BN) % 1024 == 0, "the ring's stages keep their 1024-byte alignment");
/// Registers of warpgroup 0 (the producer thread and the epilogue warps) and of each consumer thread.
const PRODUCER_REGS: u32 = 152;
const CONSUMER_REGS: u32 = 176;
const _: () = assert!(128 * PRODUCER_REGS + 256 * CONSUMER_REGS <= 384 * 168, "setmaxnreg.inc would wait forever");
/// Epilogue warps (warps 1..3 of warpgroup 0).
const EW: u32 = 3;
/// The 192-column variant (`grouped_gemm_bt_dswiglu_ew7`): its ring stages, columns and epilogue warps (warps 1..3
/// of warpgroup 0 and the four of warpgroup 3).
const S7: u32 = crate::kernels_host::GEMM_EW7_STAGES;
const BN7: u32 = crate::kernels_host::GEMM_EW7_BN;
const EW7: u32 = 7;
const _: () = assert!(
    end(S7, BN7) <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED,
    "the layout overlaps the scheduler's offsets"
);
const _: () = assert!(dh_at(S7, BN7) % 1024 == 0 && stage_bytes(BN7) % 1024 == 0, "1024-byte alignment");
const _: () = assert!(
    rows_at(S7, BN7) % 16 == 0 && rows_at(S7, BN7) + ROWS_BYTES <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED,
    "the gathering producer's rows overlap the scheduler's offsets"
);
/// The narrow variant (`grouped_gemm_bt_dswiglu_ew7n*`): 128-column tiles, the same roles as `_ew7`.
const S7N: u32 = crate::kernels_host::GEMM_EW7N_STAGES;
const BN7N: u32 = crate::kernels_host::GEMM_EW7N_BN;
const _: () = assert!(
    end(S7N, BN7N) <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED,
    "the narrow layout overlaps the scheduler's offsets"
);
const _: () = assert!(dh_at(S7N, BN7N) % 1024 == 0 && stage_bytes(BN7N) % 1024 == 0, "1024-byte alignment");
const _: () = assert!(
    rows_at(S7N, BN7N) % 16 == 0 && rows_at(S7N, BN7N) + ROWS_BYTES <= SMEM_BYTES - crate::kernels_host::GEMM_SCHED,
    "the narrow gathering producer's rows overlap the scheduler's offsets"
);

/// The dh GEMM (A = dy rows, B_e = W2_e stored [K, N]) with the SwiGLU backward by an epilogue warpgroup (see the
/// module). 384 threads, `SMEM_BYTES` of dynamic shared memory, grid <= the SM count; `n_tiles` = n / 256 rounded
/// up (the partial sums' columns); n a multiple of 64.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    let base = smem::base();
    let (ring, dh, (full, empty)) = setup::<S, BN, EW, false>(&p, base, 1);
    let t = regs::tid();
    let wg = t / 128;
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || m_tiles(&p) * p.n_tiles;
    let kt_n = p.k / BK;
    if wg == 0 {
        regs::setmaxnreg_dec::<PRODUCER_REGS>();
        if t == 0 {
            produce_bt::<BN, S, false>(&p, base, ring, (total(), 0), kt_n);
        } else if t >= 32 {
            epilogue::<BN, EW, false>(&p, dh, (full, empty), (total(), 0), t / 32 - 1);
        }
    } else {
        regs::setmaxnreg_inc::<CONSUMER_REGS>();
        consume::<S, [f32; 128], true, false, false>(
            &p,
            base,
            ring,
            dh,
            (full, empty),
            (total(), 0),
            kt_n,
            regs::warpgroup() - 1,
        );
    }
}

/// The dh GEMM with the SwiGLU backward as [`grouped_gemm_bt_dswiglu_ew`], in tiles of 128 x 192 and 4 warpgroups:
/// seven epilogue warps (warps 1..3 of warpgroup 0 and warpgroup 3) against its three. 512 threads cap every
/// thread at 128 registers (ptxas compiles all roles within the launch's count, whatever setmaxnreg says), which
/// the m64n192 accumulators (96) fit and the m64n256 ones (128) do not. `n_tiles` = n / 192 rounded up.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    ew7_body!(p, false, S7, BN7, [f32; 96]);
}

/// As [`grouped_gemm_bt_dswiglu_ew7`], its tiles taken at run time from the counter `p.sched` (zeroed before the
/// launch; `MEGAMOE_GEMM_SCHED=dynamic`, as `grouped_gemm_bf16_dyn`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    ew7_body!(p, true, S7, BN7, [f32; 96]);
}

/// As [`grouped_gemm_bt_dswiglu_ew7`] with A (dy's rows) gathered from the tokens by warpgroup 0 while it loads
/// each stage (`a_rows` = dy bf16 [T, K], row r token `row_slot[r] / top_k`, as `grouped_gemm_swiglu_ew7_gather`):
/// no expert-ordered copy of dy is read; with `a_out` non-zero the tiles of n-tile 0 write the gathered rows there
/// (the copy dW2 reads), so no gather pass of dy runs. Four epilogue warps (warpgroup 3).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7_gather(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    gather_body::<S7, BN7, [f32; 96], false>(&p);
}

/// As [`grouped_gemm_bt_dswiglu_ew7_gather`] with the run-time tile counter (see [`grouped_gemm_bt_dswiglu_ew7_dyn`]):
/// thread 0 takes each tile and hands it to the other 127 gathering threads through shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7_gather_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    gather_body::<S7, BN7, [f32; 96], true>(&p);
}

/// As [`grouped_gemm_bt_dswiglu_ew7`] in tiles of 128 x 128 (wgmma m64n128k16, a 5-stage ring of 32 KiB stages, a
/// 32 KiB dh tile; the epilogue warps' lanes 16..31 hold no columns): where I needs as many 128-column tiles as
/// 192-column ones (I <= 128 or 129..=256) it reads the same A with none of the 192-column tiles' padding columns
/// (at I = 256: 256 columns of MMA and B a row of tiles against 384). `n_tiles` = n / 128 rounded up.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7n(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    ew7_body!(p, false, S7N, BN7N, [f32; 64]);
}

/// As [`grouped_gemm_bt_dswiglu_ew7n`] with the run-time tile counter (as [`grouped_gemm_bt_dswiglu_ew7_dyn`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7n_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    ew7_body!(p, true, S7N, BN7N, [f32; 64]);
}

/// As [`grouped_gemm_bt_dswiglu_ew7_gather`] in the narrow variant's tiles ([`grouped_gemm_bt_dswiglu_ew7n`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7n_gather(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    gather_body::<S7N, BN7N, [f32; 64], false>(&p);
}

/// As [`grouped_gemm_bt_dswiglu_ew7n_gather`] with the run-time tile counter.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_ew7n_gather_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    gather_body::<S7N, BN7N, [f32; 64], true>(&p);
}

/// The `_ew7_gather` / `_ew7n_gather` kernels (`S_` stages, tiles of `BN_` columns, accumulators `A`): warpgroup 0
/// gathers A and loads B (`produce_gather`, `BN_ / 64` boxes of B 64 K x 64 N as [`produce_bt`]), warpgroups 1, 2
/// consume (A through the generic proxy: fenced), warpgroup 3 is the epilogue (four warps). SAFETY: every thread
/// of the 512-thread launch, `SMEM_BYTES` of dynamic shared memory; `p` as the kernels' docs and `produce_gather`
/// ask.
#[inline(always)]
unsafe fn gather_body<const S_: u32, const BN_: u32, A: Acc, const DYN: bool>(p: &GroupedGemm) {
    const { assert!(A::N == BN_, "the accumulators cover the tile's columns") };
    let base = smem::base();
    // the TMA thread's arrival and one per gathering thread's copies (`noinc`)
    let (ring, dh, (full, empty)) = setup::<S_, BN_, 4, DYN>(p, base, 129);
    let queue = if DYN { base + queue_at(S_, BN_) } else { 0 };
    let t = regs::tid();
    let wg = t / 128;
    let total = m_tiles(p) * p.n_tiles;
    let kt_n = p.k / BK;
    if wg == 0 {
        produce_gather::<S_, BN_, DYN, true>(p, base, ring, (total, queue), kt_n, |b_s, fb, ti, kt| {
            let mut h = 0;
            while h < BN_ / 64 {
                let col = (ti.n_tile * BN_ + 64 * h) as i32;
                tma::load_2d(b_s + h * (64 * BK * 2), p.map_b as *const u8, col, (ti.e * p.k + kt * BK) as i32, fb);
                h += 1;
            }
        });
    } else if wg == 3 {
        epilogue::<BN_, 4, DYN>(p, dh, (full, empty), (total, queue), t / 32 - 12);
    } else {
        consume::<S_, A, true, DYN, true>(p, base, ring, dh, (full, empty), (total, queue), kt_n, wg - 1);
    }
}

/// The body of the `_ew7` and `_ew7n` kernels, `$dyn` their walk, `$s` stages of tiles of `$bn` columns into
/// accumulators `$acc` (a macro, not an inlined function taking `&p`: with the function the default kernel's code
/// came out laid out differently from before the `_dyn` form existed).
macro_rules! ew7_body {
    ($p:ident, $dyn:literal, $s:ident, $bn:ident, $acc:ty) => {{
        const { assert!(<$acc as Acc>::N == $bn, "the accumulators cover the tile's columns") };
        let base = smem::base();
        let (ring, dh, (full, empty)) = setup::<$s, $bn, EW7, $dyn>(&$p, base, 1);
        let queue = if $dyn { base + queue_at($s, $bn) } else { 0 };
        let t = regs::tid();
        let wg = t / 128;
        let total = m_tiles(&$p) * $p.n_tiles;
        let kt_n = $p.k / BK;
        if t == 0 {
            produce_bt::<$bn, $s, $dyn>(&$p, base, ring, (total, queue), kt_n);
        } else if wg == 0 || wg == 3 {
            // one call site for both groups of epilogue warps: warps 1..3 are w 0..2, warps 12..15 w 3..6
            if t >= 32 {
                let w = if wg == 0 { t / 32 - 1 } else { t / 32 - 9 };
                epilogue::<$bn, EW7, $dyn>(&$p, dh, (full, empty), (total, queue), w);
            }
        } else {
            consume::<$s, $acc, true, $dyn, false>(
                &$p,
                base,
                ring,
                dh,
                (full, empty),
                (total, queue),
                kt_n,
                regs::warpgroup() - 1,
            );
        }
    }};
}
use ew7_body;

/// Every thread, at entry: the ring (`S_` stages of A 128 x 64 and B 64 K x `BN_` N; each stage's `full` expecting
/// `producer_arrivals` arrivals a phase: 1, the TMA thread's, or 129 with a gathering producer), the dh tile's address
/// and its `full` / `empty` mbarriers (initialised for the two consumer warpgroups and `EW_` epilogue warps), `DYN`:
/// the run-time walk's tile queue (at `queue_at`), the scheduler's offsets copied, then one block barrier.
#[inline(always)]
pub(crate) unsafe fn setup<const S_: u32, const BN_: u32, const EW_: u32, const DYN: bool>(
    p: &GroupedGemm,
    base: u32,
    producer_arrivals: u32,
) -> (Ring<S_>, u32, (u32, u32)) {
    let ring = Ring::<S_>::at(base + bars_at(S_, BN_));
    let full = base + bars_at(S_, BN_) + Ring::<S_>::BYTES;
    if regs::tid() == 0 {
        mbarrier::init(full, 256);
        mbarrier::init(full + 8, 32 * EW_);
        if DYN {
            // the run-time walk's queue: every lane of the consumer and epilogue warps reads each index
            TileQueue::<DYN_Q>::at(base + queue_at(S_, BN_)).init(32 * (8 + EW_));
        }
        // both consumer warpgroups' 8 warps give a stage back (init's fence publishes the dh barriers too)
        ring.init_with(producer_arrivals, 8);
    }
    sched_copy::<false>(p);
    sync::block_sync();
    (ring, base + dh_at(S_, BN_), (full, full + 8))
}

/// The producer thread: per k-step A 128 x 64 and `BN_ / 64` boxes of B 64 K x 64 N (B_e stored [K, N], as
/// `grouped_gemm_bt_bf16` loads it), into stages of `S_`.
#[inline(always)]
unsafe fn produce_bt<const BN_: u32, const S_: u32, const DYN: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S_>,
    (total, queue): (u32, u32),
    kt_n: u32,
) {
    crate::kernels::acquire_prefetch(p.map_a as *const u8);
    crate::kernels::acquire_prefetch(p.map_b as *const u8);
    const { assert!(BN_ % 64 == 0) };
    let stage = stage_bytes(BN_);
    let mut it = 0u32;
    let mut tiles = Tiles::<DYN, true>::new(p, total, queue);
    while let Some(tile) = tiles.next() {
        let ti = tile_info::<false>(p, tile);
        let mut kt = 0;
        while kt < kt_n {
            let a_s = base + Ring::<S_>::stage(it) * stage;
            let fb = ring.produce(it, stage);
            tma::load_2d(a_s, p.map_a as *const u8, (kt * BK) as i32, ti.row0 as i32, fb);
            let mut h = 0;
            while h < BN_ / 64 {
                let col = (ti.n_tile * BN_ + 64 * h) as i32;
                tma::load_2d(
                    a_s + A_BYTES + h * (64 * BK * 2),
                    p.map_b as *const u8,
                    col,
                    (ti.e * p.k + kt * BK) as i32,
                    fb,
                );
                h += 1;
            }
            it += 1;
            kt += 1;
        }
    }
}

/// The gathering producer of the epilogue-warps kernels (`_gather`: the 128 threads of warpgroup 0), `S_` stages of
/// A 128 x 64 and B `BN_` x 64. Per tile, thread 0 takes the tile (the static walk, or `DYN` the counter, pushing it
/// to the consumers' and epilogue warps' queue) and writes it into shared memory; after named barrier 1 (the 128
/// threads; it also orders the previous tile's reads of the row tokens before their rewrite) every thread reads it
/// and looks up the token of row t (u32::MAX past the expert's end); after barrier 1 again, its eight rows' tokens
/// and addresses ([`GatherRows`]), then per k-step: thread 0 announces B's bytes and loads B's boxes
/// (`load_b(b_s, full barrier, tile, kt)`), every thread 16-byte `cp.async` of its chunks of A, token
/// row_slot[r] / top_k of `a_rows`, into the 128-byte-swizzled layout the TMA would have made (rows past the
/// expert's end zero-filled, nothing read); then its copies' arrival on the stage's full barrier (`noinc`), without
/// waiting for them, so as many stages are in flight as the ring holds. `OUT` with `a_out` non-zero: the tiles of
/// n-tile 0 (one per m-tile) also write their gathered rows to `a_out` (bf16 [rows, K], expert order), each thread
/// the chunks its own copies wrote, two k-steps behind them (a `cp.async` group a k-step; waiting for k-step kt - 2
/// leaves two in flight; the ring's stage is refilled only `S_` k-steps later, by this same thread's chunks), the
/// last two at the tile's end. With `flags` bit `GEMM_GATHER_AHEAD` the hand-off between tiles runs ahead instead
/// (see the comment at that branch). SAFETY: the 128 threads of warpgroup 0, in uniform control flow between the barriers;
/// K % 64 == 0, `a_rows` rows of K bf16, `a_out` (if set) `rows_max` rows of K bf16.
#[inline(always)]
pub(crate) unsafe fn produce_gather<const S_: u32, const BN_: u32, const DYN: bool, const OUT: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S_>,
    (total, queue): (u32, u32),
    kt_n: u32,
    load_b: impl Fn(u32, u32, &Tile, u32),
) {
    const { assert!(S_ >= 3, "the write-out reads a stage two k-steps after its copies") };
    let t = regs::tid();
    if t == 0 {
        crate::kernels::acquire_prefetch(p.map_b as *const u8);
    }
    let x = p.a_rows as *const u8;
    let row_bytes = (p.k * 2) as usize;
    let toks = base + rows_at(S_, BN_);
    let slot = toks + 2 * 4 * crate::kernels_host::GEMM_BM;
    let stage = stage_bytes(BN_);
    let b_bytes = BN_ * BK * 2;
    let mut it = 0u32;
    // thread 0's walk (the others read its tiles from `slot`)
    let mut tiles = Tiles::<DYN, true>::new(p, total, queue);
    // row t's token of tile `tile` (u32::MAX past the expert's end). SAFETY (of the read): a row below row_end <=
    // rows_max, inside `row_slot`
    let token = |ti: &Tile| {
        let row = ti.row0 + t;
        if row < ti.row_end {
            *(p.row_slot as *const u32).add(row as usize) / p.top_k
        } else {
            u32::MAX
        }
    };
    // one tile's k-steps from its row tokens at `tk`; with `ahead` (the next tile's slot, 0 for none), before
    // k-step kt_n / 2's loads: the barrier that publishes the next tile, its index and this thread's row's token of
    // it, returned (u32::MAX, u32::MAX when none)
    let k_steps = |it: &mut u32, ti: &Tile, tk: u32, ahead: u32| -> (u32, u32) {
        let (mut next_tile, mut next_tok) = (u32::MAX, u32::MAX);
        let rows = GatherRows::new(x, row_bytes, tk, t);
        // the tile's first row of the write-out (n-tile 0 only)
        let out = if OUT && p.a_out != 0 && ti.n_tile == 0 {
            (p.a_out as *mut u8).add(ti.row0 as usize * row_bytes)
        } else {
            core::ptr::null_mut()
        };
        let mut kt = 0;
        while kt < kt_n {
            if ahead != 0 && kt == kt_n / 2 {
                sync::named_sync(1, 128);
                next_tile = smem::ld_u32(ahead);
                if next_tile != u32::MAX {
                    next_tok = token(&tile_info::<false>(p, next_tile));
                }
            }
            let a_s = base + Ring::<S_>::stage(*it) * stage;
            ring.wait_empty(*it);
            let fb = ring.full_bar(*it);
            if t == 0 {
                mbarrier::arrive_expect_tx(fb, b_bytes);
                load_b(a_s + A_BYTES, fb, ti, kt);
            }
            rows.issue(a_s, kt);
            cp_async::mbarrier_arrive_noinc(fb);
            if OUT && !out.is_null() {
                cp_async::commit_group();
                if kt >= 2 {
                    cp_async::wait_group::<2>();
                    rows.copy_out(base + Ring::<S_>::stage(*it - 2) * stage, out, row_bytes, kt - 2);
                }
            }
            *it += 1;
            kt += 1;
        }
        if OUT && !out.is_null() {
            cp_async::wait_group::<0>();
            let mut j = kt_n.saturating_sub(2);
            while j < kt_n {
                rows.copy_out(base + Ring::<S_>::stage(*it - kt_n + j) * stage, out, row_bytes, j);
                j += 1;
            }
        }
        (next_tile, next_tok)
    };
    if p.flags & crate::params::GEMM_GATHER_AHEAD == 0 {
        // per tile: thread 0 takes it into slot 0, barrier, every thread its row's token into buffer 0, barrier
        loop {
            if t == 0 {
                smem::st_u32(slot, tiles.next().unwrap_or(u32::MAX));
            }
            sync::named_sync(1, 128);
            let tile = smem::ld_u32(slot);
            if tile == u32::MAX {
                break;
            }
            let ti = tile_info::<false>(p, tile);
            smem::st_u32(toks + 4 * t, token(&ti));
            sync::named_sync(1, 128);
            k_steps(&mut it, &ti, toks, 0);
        }
    } else {
        // the look-ahead hand-off: tile j's tokens in buffer j % 2, its index in slot j % 2. Thread 0 takes tile
        // j + 1 into slot (j + 1) % 2 at tile j's start (the counter's latency under tile j's k-steps); at k-step
        // kt_n / 2 a barrier publishes it and every thread reads its row's token of it (the load's latency under
        // the rest); at tile j's end each writes that token into buffer (j + 1) % 2 and a barrier publishes them.
        // Buffer and slot (j + 1) % 2 were last read before tile j - 1's end barrier (GatherRows::new of tile j - 1,
        // the index at tile j - 1's mid barrier): two barriers a tile, neither after a global load of its own.
        if t == 0 {
            smem::st_u32(slot, tiles.next().unwrap_or(u32::MAX));
        }
        sync::named_sync(1, 128);
        let mut tile = smem::ld_u32(slot);
        if tile != u32::MAX {
            let ti = tile_info::<false>(p, tile);
            smem::st_u32(toks + 4 * t, token(&ti));
        }
        sync::named_sync(1, 128);
        let mut j = 0u32;
        while tile != u32::MAX {
            let ti = tile_info::<false>(p, tile);
            let (cur, next) = (j % 2, (j + 1) % 2);
            if t == 0 {
                smem::st_u32(slot + 4 * next, tiles.next().unwrap_or(u32::MAX));
            }
            let (next_tile, next_tok) =
                k_steps(&mut it, &ti, toks + cur * 4 * crate::kernels_host::GEMM_BM, slot + 4 * next);
            if next_tile != u32::MAX {
                smem::st_u32(toks + next * 4 * crate::kernels_host::GEMM_BM + 4 * t, next_tok);
            }
            sync::named_sync(1, 128);
            tile = next_tile;
            j += 1;
        }
    }
}

/// A consumer warpgroup: every tile of the block's walk, its rows 64 cw .. 64 cw + 64 (a plain main loop, B N-major
/// when `BT`), then the accumulators in bf16 into the tile in shared memory (`A::N` columns, 16-byte chunk j of
/// row r at chunk j ^ (r % 8)) once the epilogue warps have read the previous one (`empty`), and an arrival on
/// `full`. `GATHER`: A arrives by `cp.async` (the generic proxy), fenced before the tensor cores read it.
/// SAFETY: the 128 threads of consumer warpgroup `cw`.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(crate) unsafe fn consume<const S_: u32, A: Acc, const BT: bool, const DYN: bool, const GATHER: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S_>,
    dh: u32,
    (full, empty): (u32, u32),
    (total, queue): (u32, u32),
    kt_n: u32,
    cw: u32,
) {
    let lane = t_lane();
    let (r0, r1, c0) = frag();
    let mut it = 0u32;
    let mut handed = 0u32;
    let mut tiles = Tiles::<DYN, false>::new(p, total, queue);
    while tiles.next().is_some() {
        let acc = mainloop_coop::<BT, GATHER, 0, S_, A>(base, &ring, &mut it, kt_n, cw, lane);
        // the epilogue warps are done with the previous tile's dh (the first wait returns at once)
        mbarrier::wait_parity(empty, (handed & 1) ^ 1);
        // 0 at run time, opaque to the compiler: the store addresses are computed here, per tile, instead of held
        // (A::N / 8 registers a row) across the main loop, where the 192-column kernel's 128 registers cannot hold
        // them
        let salt = regs::opaque(handed).wrapping_sub(handed);
        crate::unroll!(H in [0, 1] {
            let r = 64 * cw + if H == 0 { r0 } else { r1 };
            let row = dh + r * (2 * A::N) + 2 * c0 + salt;
            // chunk J at J ^ (r % 8): the eight chunks of J % 8, each + 128 bytes per 8 of J (an immediate offset)
            crate::unroll!(J8 in [0, 1, 2, 3, 4, 5, 6, 7] {
                let at = row + ((J8 as u32 ^ (r % 8)) * 16);
                crate::unroll!(G in [0, 1, 2, 3] {
                    let j = 8 * G + J8;
                    if (j as u32) < A::N / 8 {
                        let v = math::pack_bf16x2(acc.at(4 * j + 2 * H), acc.at(4 * j + 2 * H + 1));
                        smem::st_u32(at + 128 * G as u32, v);
                    }
                });
            });
        });
        // this thread's stores before its arrival (release); the epilogue's wait acquires them
        mbarrier::arrive(full);
        handed += 1;
    }
}

/// The epilogue warps (see the module), `EW_` of them, this one `w`, over tiles of `BN_` columns (lanes past
/// `BN_ / 8` hold no columns). SAFETY: the `EW_` epilogue warps, in uniform control flow per warp.
#[inline(always)]
unsafe fn epilogue<const BN_: u32, const EW_: u32, const DYN: bool>(
    p: &GroupedGemm,
    dh: u32,
    (full, empty): (u32, u32),
    (total, queue): (u32, u32),
    w: u32,
) {
    let lane = regs::tid() % 32;
    let n = p.n;
    let ew_rows = crate::kernels_host::GEMM_BM.div_ceil(EW_);
    let dh_row = 2 * BN_;
    // lanes past the tile's columns read chunk 0 of a row (never used)
    let lc = if lane < BN_ / 8 { lane } else { 0 };
    // 16-byte chunks: z and dz rows hold 2 n / 8, sh rows n / 8
    let z = p.z as *const [u32; 4];
    let dz = p.c as *mut [u32; 4];
    let sh = p.sh as *mut [u32; 4];
    let mut taken = 0u32;
    let mut tiles = Tiles::<DYN, false>::new(p, total, queue);
    while let Some(tile) = tiles.next() {
        let ti = tile_info::<false>(p, tile);
        let col = ti.n_tile * BN_ + 8 * lane;
        let live = col < n && lane < BN_ / 8;
        // lane l reads the routing weights of the warp's rows l and 32 + l (tile rows w + EW_ l, w + EW_ (32 + l)) now:
        // their latency hides under the wait; row i's step takes its weight by a shuffle
        let weight = |i: u32| {
            let row = ti.row0 + w + EW_ * i;
            if i < ew_rows && w + EW_ * i < crate::kernels_host::GEMM_BM && row < ti.row_end {
                // SAFETY: row < row_end <= rows_max (row_slot's length; `tile_info` clamps); the slot is checked
                // against w's length
                dsw_weight(p, row)
            } else {
                0.0
            }
        };
        // the tile row of the warp's step i (rows past the tile read row 0's dh and store nothing) and whether it
        // is stored
        let tile_row = |i: u32| {
            let r = w + EW_ * i;
            (
                if r < crate::kernels_host::GEMM_BM { r } else { 0 },
                r < crate::kernels_host::GEMM_BM && ti.row0 + r < ti.row_end,
            )
        };
        // g and u of the warp's steps l .. l + 4 (zeros past the expert's end or n: never stored)
        let load_z = |l: u32| {
            let mut g = [[0u32; 4]; 4];
            let mut u = [[0u32; 4]; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let (r, in_rows) = tile_row(l + B as u32);
                if live && in_rows && l + (B as u32) < ew_rows {
                    // SAFETY: a row below row_end <= rows_max (clamped) and 8 columns below n: inside z [rows_max, 2 n]
                    let zr = z.add((((ti.row0 + r) * 2 * n + col) / 8) as usize);
                    g[B] = global::ld_v4(zr);
                    u[B] = global::ld_v4(zr.add((n / 8) as usize));
                }
            });
            (g, u)
        };
        let (s_lo, s_hi) = (weight(lane), weight(32 + lane));
        // the first step's z does not depend on dh: its loads wait beside the consumers' main loop
        let (mut g, mut u) = load_z(0);
        mbarrier::wait_parity(full, taken & 1);
        let mut l = 0u32;
        while l < ew_rows {
            let mut d = [[0u32; 4]; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let r = tile_row(l + B as u32).0;
                d[B] = smem::ld_v4(dh + r * dh_row + ((lc ^ (r % 8)) * 16));
            });
            // the next step's z in flight while this one computes (software pipelining: its latency was the
            // epilogue's largest stall)
            let (g_next, u_next) = load_z(l + 4);
            let mut part = [0f32; 4];
            crate::unroll!(B in [0, 1, 2, 3] {
                let i = l + B as u32;
                let row = ti.row0 + tile_row(i).0;
                // uniform in the warp: row i's weight from lane i % 32 of the low or high half
                let s = f32::from_bits(warp::shfl_idx(if i < 32 { s_lo } else { s_hi }.to_bits(), i % 32));
                let (mut dg, mut du, mut hs) = ([0u32; 4], [0u32; 4], [0u32; 4]);
                crate::unroll!(J in [0, 1, 2, 3] {
                    let mut o = [[0f32; 2]; 3];
                    crate::unroll!(Q in [0, 1] {
                        let gv = math::bf16_to_f32((g[B][J] >> (16 * Q)) as u16);
                        let uv = math::bf16_to_f32((u[B][J] >> (16 * Q)) as u16);
                        let dv = math::bf16_to_f32((d[B][J] >> (16 * Q)) as u16);
                        let (x0, x1, x2) = dswiglu_elem(gv, uv, dv, s, &mut part[B]);
                        o[0][Q] = x0;
                        o[1][Q] = x1;
                        o[2][Q] = x2;
                    });
                    dg[J] = math::pack_bf16x2(o[0][0], o[0][1]);
                    du[J] = math::pack_bf16x2(o[1][0], o[1][1]);
                    hs[J] = math::pack_bf16x2(o[2][0], o[2][1]);
                });
                if live && tile_row(i).1 && i < ew_rows {
                    // SAFETY: as z's loads: inside dz [rows_max, 2 n] and sh [rows_max, n]; each element has one writer
                    let at = ((row * 2 * n + col) / 8) as usize;
                    global::st_v4(dz.add(at), dg);
                    global::st_v4(dz.add(at + (n / 8) as usize), du);
                    if p.sh != 0 {
                        global::st_v4(sh.add(((row * n + col) / 8) as usize), hs);
                    }
                }
                // a lane past n adds 0 to the row's partial
                if !live {
                    part[B] = 0.0;
                }
            });
            // the four rows' partials over the warp in six shuffles: pairs of lanes 16 apart add rows 0, 1 (low
            // lane) or 2, 3 (high), then 8 apart rows 0 or 1 of the pair, then 4, 2, 1: lane 8 j ends with row j's
            // sum. Each step adds the values of lanes l and l ^ X, as the plain butterfly 16, 8, 4, 2, 1 does, so a
            // row's sum is the same wherever it falls in a step (f32 addition commutes).
            let hi16 = lane & 16 != 0;
            let (k0, k1, s0, s1) =
                if hi16 { (part[2], part[3], part[0], part[1]) } else { (part[0], part[1], part[2], part[3]) };
            let a0 = k0 + f32::from_bits(warp::shfl_xor(s0.to_bits(), 16));
            let a1 = k1 + f32::from_bits(warp::shfl_xor(s1.to_bits(), 16));
            let hi8 = lane & 8 != 0;
            let (k, o) = if hi8 { (a1, a0) } else { (a0, a1) };
            let mut sum = k + f32::from_bits(warp::shfl_xor(o.to_bits(), 8));
            crate::unroll!(X in [4, 2, 1] {
                sum += f32::from_bits(warp::shfl_xor(sum.to_bits(), X as u32));
            });
            if lane % 8 == 0 {
                let i = l + lane / 8;
                let (r, in_rows) = tile_row(i);
                if in_rows && i < ew_rows {
                    // SAFETY: row < row_end <= rows_max (clamped), n_tile < n_tiles: inside partial [rows_max, n_tiles]
                    *(p.partial as *mut f32).add(((ti.row0 + r) * p.n_tiles + ti.n_tile) as usize) = sum;
                }
            }
            g = g_next;
            u = u_next;
            l += 4;
        }
        // every read of this tile's dh is done: the consumers may write the next
        mbarrier::arrive(empty);
        taken += 1;
    }
}
