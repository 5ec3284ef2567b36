//! M-grouped bf16 GEMM over experts, warp-specialised: C[rows_e, N] = A[rows_e, K] . B_e[N, K]^T for every
//! expert e, the rows of each expert contiguous in A at `offsets[e]..offsets[e + 1]` (read on the device).
//!
//! Block: 3 warpgroups. Warpgroup 0 is the producer (one thread issues TMA loads into a 4-stage ring of A 128 x 64
//! and B 256 x 64, registers given back with setmaxnreg; in the `_mv` forms its other warps move rows, see
//! `move_rows`); warpgroups 1 and 2 are cooperative consumers: each computes 64 rows of the block's 128 x 256 tile
//! (wgmma m64n256k16) and stores them in its own epilogue (`consume_coop`). Only the dh + SwiGLU backward's older
//! kernel (`grouped_gemm_bt_dswiglu`, `consume_pp`) runs its consumers in ping-pong: each takes every other 128 x
//! 128 tile of the block, so one warpgroup's epilogue runs while the other's main loop keeps the tensor cores busy
//! (order barriers alternate the main loops). Persistent: block b takes tiles b, b + grid, ... of (expert m-tile,
//! n-tile), m-tiles numbered by `tile_offsets`; the producer and the consumers walk the same sequence, counting the
//! same ring iterations, so the ring cannot deadlock. The 2-CTA cluster forms (`_mc`: A shared by an n-tile pair,
//! `_mcb`: B by an m-tile pair, multicast) release each stage from both CTAs' consumer warps.
//! Rows past the expert's end and columns past N are computed but never stored (no padding in any output).
//!
//! Epilogues: `grouped_gemm_bf16` stores C in bf16; `grouped_gemm_swiglu` takes B tiles of 128 gate rows and
//! the 128 matching up rows, stores h = silu(g) * u (bf16, 128 columns per tile) and optionally z = [g | u].
//! `grouped_gemm_bt_bf16` takes B_e stored [K, N] (N-major, as the backward's dgrad reads W2_e and W1_e):
//! two TMA boxes of 64 N x 64 K per stage, wgmma with imm-trans-b = 1 and MN-major descriptors
//! (LBO = 8192 B between the 64-wide N atoms, SBO = 1024 B between 8-row K groups; measured, docs/NOTES.md).
//! `grouped_gemm_bt_dswiglu` (the backward's dh with the SwiGLU backward, ping-pong) runs its own 4-stage ring with
//! its epilogue's z staging beside it (see `store_dswiglu`); the default SwiGLU-backward and SwiGLU kernels with
//! their epilogues in warps of their own are in grouped_gemm_dswiglu_ew.rs and grouped_gemm_swiglu_ew.rs.
use crate::desc::{Layout, SmemDesc};
use crate::params::{GroupedGemm, FUSED_TIMEOUT};
use crate::pipeline::{PairChannel, Ring, TileQueue, TileWalk};
use crate::ptx::{cluster, cp_async, fence, global, math, mbarrier, regs, smem, sync, tma, warp, wgmma};
use crate::scheduler::MTile as Tile;

/// Rows per tile (two wgmma halves of 64).
pub const BM: u32 = crate::kernels_host::GEMM_BM;
/// Columns of a cooperative tile (B rows per stage).
pub const BN: u32 = crate::kernels_host::GEMM_BN;
/// Columns of a tile of the SwiGLU backward (ping-pong).
pub const DSW_BN: u32 = crate::kernels_host::GEMM_DSW_BN;
/// K per stage (one 128-byte swizzle row of bf16).
pub const BK: u32 = 64;
/// Pipeline depth.
pub const STAGES: u32 = crate::kernels_host::GEMM_STAGES;
/// Pipeline depth of `grouped_gemm_bt_dswiglu`.
pub const DSW_STAGES: u32 = crate::kernels_host::GEMM_DSW_STAGES;
pub(crate) const A_BYTES: u32 = BM * BK * 2;
const B_BYTES: u32 = BN * BK * 2;
pub(crate) const STAGE_BYTES: u32 = A_BYTES + B_BYTES;
const DSW_STAGE_BYTES: u32 = A_BYTES + DSW_BN * BK * 2;
/// The epilogue's staging (after the ring): two 64 x 64 bf16 boxes (8 KiB, 128-byte swizzle) per consumer
/// warpgroup.
pub(crate) const C_BOX: u32 = crate::kernels_host::GEMM_C_BOX.0 * crate::kernels_host::GEMM_C_BOX.1 * 2;
const STAGING: u32 = STAGES * STAGE_BYTES;
/// The ping-pong order barriers (after the ring's): one per consumer warpgroup.
const ORDER_BYTES: u32 = crate::kernels_host::GEMM_ORDER_BARS;
/// The gathering producer's row tokens (after the mbarriers): u32 [BM].
const ROW_TOKENS: u32 = STAGING + 4 * C_BOX + Ring::<STAGES>::BYTES + ORDER_BYTES;
/// The `_dyn` kernels' tile queue (producer to consumers: `DYN_Q` run-time tile indices in flight), where the
/// gathering producer keeps its row tokens (the `_dyn` kernels never gather).
const QUEUE_AT: u32 = ROW_TOKENS;
pub(crate) const DYN_Q: u32 = 4;
const _: () = assert!(QUEUE_AT % 8 == 0 && TileQueue::<DYN_Q>::BYTES <= crate::kernels_host::GEMM_GATHER_ROWS);
/// Dynamic shared memory of the kernel: the ring, the staging, 2 * STAGES mbarriers, the order barriers, the row
/// tokens (or the `_dyn` kernels' tile queue), the scheduler's offsets (at `sched_at`).
pub const SMEM_BYTES: u32 = ROW_TOKENS + crate::kernels_host::GEMM_GATHER_ROWS + SCHED;
/// The scheduler's copy of the tile and row offsets (the last bytes of either layout), used when the launch has
/// at most SCHED_E experts.
const SCHED: u32 = crate::kernels_host::GEMM_SCHED;
const SCHED_E: u32 = crate::kernels_host::GEMM_SCHED_E;
/// The staging of `grouped_gemm_bt_dswiglu`: per consumer warpgroup two slots of a g box and a u box, then one
/// s * h box per consumer warpgroup.
const DSW_STAGING: u32 = 10 * C_BOX;
/// Dynamic shared memory of `grouped_gemm_bt_dswiglu`: its ring, the z staging, the ring's mbarriers, the order
/// barriers, then one mbarrier per (warpgroup, slot) of the staging.
pub const DSW_SMEM_BYTES: u32 =
    DSW_STAGES * DSW_STAGE_BYTES + DSW_STAGING + Ring::<DSW_STAGES>::BYTES + ORDER_BYTES + 4 * 8 + SCHED;

/// Shared-memory offset of the scheduler's offsets: tile offsets [SCHED_E + 1], then row offsets.
const fn sched_at(dsw: bool) -> u32 {
    (if dsw { DSW_SMEM_BYTES } else { SMEM_BYTES }) - SCHED
}

/// Bytes of a stage of the ring.
const fn stage_bytes(dsw: bool) -> u32 {
    if dsw {
        DSW_STAGE_BYTES
    } else {
        STAGE_BYTES
    }
}
/// Columns of a tile.
const fn bn(dsw: bool) -> u32 {
    if dsw {
        DSW_BN
    } else {
        BN
    }
}
/// Bytes of staging after a ring (the epilogue's boxes).
const fn staging_bytes(dsw: bool) -> u32 {
    if dsw {
        DSW_STAGING
    } else {
        4 * C_BOX
    }
}
/// Registers of the producer warpgroup of the kernels with the overlapped gather (`_mv`): 72, so its mover warps
/// keep eight 16-byte loads in flight; the consumers get 216 (128 x 72 + 256 x 216 = the 384 x 168 the launch
/// allocates). With 56 / 224 only four loads fit without spills (measured slower, docs/NOTES.md).
pub(crate) const MV_PRODUCER_REGS: u32 = 72;
/// Registers of each consumer thread of the `_mv` kernels.
pub(crate) const MV_CONSUMER_REGS: u32 = 216;
const _: () =
    assert!(128 * MV_PRODUCER_REGS + 256 * MV_CONSUMER_REGS <= 384 * 168, "setmaxnreg.inc would wait forever");

/// Threads per block.
pub const THREADS: u32 = crate::kernels_host::GEMM_THREADS;

const _: () = assert!(STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment for 128-byte swizzle");
const _: () = assert!(A_BYTES % 1024 == 0, "B tile must start 1024-byte aligned");
const _: () = assert!(SMEM_BYTES == crate::kernels_host::GEMM_SMEM, "host and kernel disagree on the ring");
const _: () = assert!(4 * C_BOX == crate::kernels_host::GEMM_STAGING && STAGING % 1024 == 0, "staging layout");
const _: () = assert!(SMEM_BYTES <= 232448, "sm_90 allows at most 227 KiB of shared memory per block");
const _: () = assert!(DSW_SMEM_BYTES == crate::kernels_host::GEMM_DSW_SMEM, "host and kernel disagree (dswiglu)");
const _: () = assert!(DSW_STAGING == crate::kernels_host::GEMM_DSW_STAGING, "dswiglu staging layout");
const _: () = assert!(DSW_SMEM_BYTES <= 232448, "sm_90 allows at most 227 KiB of shared memory per block");
const _: () = assert!((DSW_STAGES * DSW_STAGE_BYTES) % 1024 == 0 && C_BOX % 1024 == 0, "z boxes 1024-byte aligned");

/// The tile `tile` of this launch (see [`crate::scheduler::m_tile`]): its binary search reads the block's
/// shared-memory copy of the offsets (`sched_copy`) when there are at most SCHED_E experts, global memory
/// otherwise (a dependent global load per step: ~8 per tile, at every tile start of the producer and consumers).
#[inline(always)]
pub(crate) unsafe fn tile_info<const DSW: bool>(p: &GroupedGemm, tile: u32) -> Tile {
    tile_info_e::<DSW>(p, tile, p.experts)
}

/// [`tile_info`] with the expert count given (`p.experts`, perhaps through [`regs::opaque`]). The tile's rows are
/// clamped to the buffers' `rows_max` ([`Tile::clamped`]): whatever the device offsets hold, every row a kernel
/// reads or writes below `row_end` is inside A, C, z, dz, s h, `partial` and `row_slot` (offsets as promised are
/// left as they are).
#[inline(always)]
pub(crate) unsafe fn tile_info_e<const DSW: bool>(p: &GroupedGemm, tile: u32, experts: u32) -> Tile {
    tile_lookup::<DSW>(p, tile, experts).clamped(p.rows_max)
}

/// The tile as the offsets give it (see [`tile_info_e`]).
#[inline(always)]
unsafe fn tile_lookup<const DSW: bool>(p: &GroupedGemm, tile: u32, experts: u32) -> Tile {
    if experts <= SCHED_E {
        let s = smem::base() + sched_at(DSW);
        let o = s + 4 * (SCHED_E + 1);
        // SAFETY (of the reads): entries 0..=experts, written by `sched_copy` before the block's first barrier.
        crate::scheduler::m_tile(
            tile,
            p.n_tiles,
            experts,
            BM,
            |i| unsafe { smem::ld_u32(s + 4 * i) },
            |i| unsafe { smem::ld_u32(o + 4 * i) },
        )
    } else {
        let to = p.tile_offsets as *const u32;
        let off = p.offsets as *const u32;
        // SAFETY (of the reads): entries 0..=experts of both arrays, as the parameter block promises.
        crate::scheduler::m_tile(
            tile,
            p.n_tiles,
            experts,
            BM,
            |i| unsafe { *to.add(i as usize) },
            |i| unsafe { *off.add(i as usize) },
        )
    }
}

/// Every thread of the block, before its first barrier: copy entries 0..=experts of the tile and row offsets into
/// shared memory (at most SCHED_E experts; otherwise nothing: `tile_info` reads global memory).
#[inline(always)]
pub(crate) unsafe fn sched_copy<const DSW: bool>(p: &GroupedGemm) {
    if p.experts <= SCHED_E {
        let s = smem::base() + sched_at(DSW);
        let (to, off) = (p.tile_offsets as *const u32, p.offsets as *const u32);
        let mut i = regs::tid();
        while i <= p.experts {
            smem::st_u32(s + 4 * i, *to.add(i as usize));
            smem::st_u32(s + 4 * (SCHED_E + 1) + 4 * i, *off.add(i as usize));
            i += regs::ntid();
        }
    }
}

/// The launch's m-tiles: `tile_offsets[E]`, at most [`crate::scheduler::m_tiles_bound`] of `rows_max` (what rows_max
/// rows can make: offsets as promised never reach it), so the walk is bounded whatever the device array holds
/// (and per-m-tile arrays, sized by the host's `m_tiles_max`, are indexed below their length).
/// SAFETY: `tile_offsets` holds E + 1 entries.
#[inline(always)]
pub(crate) unsafe fn m_tiles(p: &GroupedGemm) -> u32 {
    let m = *(p.tile_offsets as *const u32).add(p.experts as usize);
    m.min(crate::scheduler::m_tiles_bound(p.rows_max, p.experts, BM))
}

/// The kernel body; `S` ring stages (STAGES, or DSW_STAGES for the SwiGLU backward).
#[inline(always)]
unsafe fn grouped_gemm<
    const SWIGLU: bool,
    const BT: bool,
    const DSW: bool,
    const GATHER: bool,
    const S: u32,
    const MC: u32,
    const SCATTER: bool,
    const MV: bool,
    const DYN: bool,
    const SIDE: bool,
>(
    p: &GroupedGemm,
) {
    const { assert!(!MV || (MC == 0 && !GATHER), "the overlapped gather runs in single-CTA TMA-producer kernels") };
    const {
        assert!(
            !SIDE || (MV && BT && !SWIGLU && !DSW && !SCATTER),
            "the side copy: the movers of the plain bf16 B N-major kernel"
        )
    };
    const {
        assert!(
            !DYN || (MC == 0 && !GATHER && (!MV || SIDE) && !DSW),
            "the run-time tile counter: single-CTA cooperative kernels with a TMA producer, no movers but the side \
             copy's (whose rows no tile waits for)"
        )
    };
    const { assert!(!GATHER || S == STAGES, "the gathering producer uses the STAGES ring and the row tokens") };
    const { assert!(S == if DSW { DSW_STAGES } else { STAGES }, "the host launches with the layout of this S") };
    const { assert!(MC == 0 || !GATHER, "2-CTA clusters multicast by TMA: not the gathering producer") };
    const { assert!(MC <= 2 && !(DSW && MC == 2), "cluster modes: 1 shares A (every kernel), 2 shares B (cooperative)") };
    const { assert!(!SCATTER || !(SWIGLU || DSW || GATHER || MC != 0), "the row-scattered epilogue is plain bf16") };
    // shared-memory carve-out: S x (A 128x64, B 128x64) bf16, the epilogue's staging, full[S], empty[S],
    // order[2], then (SwiGLU backward) the z staging's mbarriers [warpgroup][slot]
    let base = smem::base();
    let staging = base + S * stage_bytes(DSW);
    let ring = Ring::<S>::at(staging + staging_bytes(DSW));
    let order = staging + staging_bytes(DSW) + Ring::<S>::BYTES;
    let zbar = order + ORDER_BYTES;
    let t = regs::tid();
    let wg = t / 128;
    // barrier init
    if t == 0 {
        if DSW {
            // one arrival (the leader's arrive.expect_tx) plus the bytes of a g box and a u box per phase
            let mut i = 0;
            while i < 4 {
                mbarrier::init(zbar + 8 * i, 1);
                i += 1;
            }
        }
        // the order barriers: one arrival (the other warpgroup's leader) per phase
        mbarrier::init(order, 1);
        mbarrier::init(order + 8, 1);
        // one arrival per warp of the consuming warpgroup; the gathering producer arrives once with the bytes of
        // B and once per thread of its warpgroup for the rows of A (init_with's fence publishes the other
        // barriers too)
        // consumer warps per stage: both warpgroups' 8 (cooperative) or one warpgroup's 4 (the SwiGLU backward,
        // ping-pong); in a 2-CTA cluster both CTAs' (A is multicast into both)
        let consumer_warps = if DSW { 4 } else { 8 };
        if DYN {
            // every lane of every consumer warp reads every tile index (the ring's init below fences the inits)
            TileQueue::<DYN_Q>::at(base + QUEUE_AT).init(32 * consumer_warps);
        }
        ring.init_with(if GATHER { 1 + 128 } else { 1 }, if MC != 0 { 2 * consumer_warps } else { consumer_warps });
    }
    sched_copy::<DSW>(p);
    if MC != 0 {
        // the peer's barriers are initialised before any multicast or remote arrival reaches them
        cluster::sync();
    } else {
        crate::ptx::sync::block_sync();
    }
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || m_tiles(p) * p.n_tiles;
    let kt_n = p.k / BK;
    if wg == 0 {
        // the movers' copy loops need more than 40 registers: MV_PRODUCER_REGS for the producer warpgroup,
        // MV_CONSUMER_REGS for the consumers
        if MV {
            regs::setmaxnreg_dec::<MV_PRODUCER_REGS>();
        } else {
            regs::setmaxnreg_dec::<40>();
        }
        let total = total();
        if GATHER {
            // S == STAGES (asserted above): the same barriers
            produce_gather(p, base, Ring::<STAGES>::at(staging + staging_bytes(DSW)), total, kt_n);
        } else if t == 0 {
            if SIDE {
                // the side copy's rows are not A: its producer waits for none
                produce::<SWIGLU, BT, DSW, S, MC, false, DYN>(p, base, ring, total, kt_n);
            } else {
                produce::<SWIGLU, BT, DSW, S, MC, MV, DYN>(p, base, ring, total, kt_n);
            }
        } else if MV && t >= 32 {
            // warps 1..3: the rows of A this block's tiles need (or, SIDE, the rows of `a_rows` the side copy
            // makes), copied from the tokens while the GEMM runs; tile m n_tiles + n is block (m n_tiles + n) % grid's
            let (b, grid) = (regs::bid(), regs::nctaid());
            let part_of = |m: u32| crate::scheduler::mover_part(m * p.n_tiles, b, grid);
            let cols = if SIDE { p.copy_cols } else { p.k };
            move_rows::<true>(p, p.n_tiles, part_of, t / 32 - 1, t % 32, cols);
        }
    } else {
        if MV {
            regs::setmaxnreg_inc::<MV_CONSUMER_REGS>();
        } else {
            regs::setmaxnreg_inc::<232>();
        }
        let total = total();
        if DSW {
            // S == DSW_STAGES (asserted above)
            let ring = Ring::<DSW_STAGES>::at(staging + staging_bytes(DSW));
            consume_pp::<MC>(p, base, ring, staging, order, zbar, total, kt_n, regs::warpgroup() - 1);
        } else {
            let ring = Ring::<STAGES>::at(staging + staging_bytes(DSW));
            consume_coop::<SWIGLU, BT, GATHER, MC, SCATTER, DYN>(
                p,
                base,
                ring,
                staging,
                total,
                kt_n,
                regs::warpgroup() - 1,
            );
        }
    }
    if MC != 0 {
        // no CTA leaves while its peer may still arrive on its empty barriers (every thread, once)
        cluster::sync();
    }
}

/// A role's walk over a single-CTA M-grouped launch's tiles: the static walk (tile bid, then every grid-th), or,
/// `DYN`, the run-time one: the producer thread (`PRODUCER`) takes each index from the counter `p.sched`
/// ([`TileWalk`]: tile bid first, then the counter's next + grid) and pushes it, then the end, into the queue at
/// `queue`; every other role of the walk pops them in the same order, every lane of its warps
/// ([`TileQueue::pop_each_lane`]: the queue counts 32 arrivals per popping warp).
pub(crate) struct Tiles<const DYN: bool, const PRODUCER: bool> {
    q: u32,
    step: u32,
    count: u32,
    total: u32,
    queue: TileQueue<DYN_Q>,
    walk: TileWalk<false>,
    j: u32,
}

impl<const DYN: bool, const PRODUCER: bool> Tiles<DYN, PRODUCER> {
    /// SAFETY: `DYN`: `p.sched` 0 or a u32 zeroed before the launch; the queue initialised for every popping warp
    /// and published before the first `next`.
    #[inline(always)]
    pub(crate) unsafe fn new(p: &GroupedGemm, total: u32, queue: u32) -> Self {
        let (q0, step, count) = walk::<0>(p, total);
        let walk = TileWalk::<false>::new(total, total, p.n_tiles, p.sched, None, PairChannel::at(0));
        // the static walk's index one step before its first (`next` steps first; q0 < step, so this wraps and the
        // first step wraps back)
        Tiles { q: q0.wrapping_sub(step), step, count, total, queue: TileQueue::at(queue), walk, j: 0 }
    }

    /// The next tile, or `None` at the end. SAFETY: the producer calls it again only once the previous tile's
    /// loads are issued (the counter's latency then hides behind the stages in flight); the other roles in order.
    #[inline(always)]
    pub(crate) unsafe fn next(&mut self) -> Option<u32> {
        if !DYN {
            // single CTA: the walk index is the tile
            self.q = self.q.wrapping_add(self.step);
            return if self.q < self.count { Some(self.q) } else { None };
        }
        let tile = if PRODUCER {
            if self.j > 0 {
                self.walk.advance();
            }
            let tile = self.walk.tile();
            self.queue.push(self.j, tile, 0);
            tile
        } else {
            self.queue.pop_each_lane(self.j).0
        };
        self.j += 1;
        if tile < self.total {
            Some(tile)
        } else {
            None
        }
    }
}

/// This block's walk (first index, step, count). MC 0 and 1: [`crate::scheduler::walk`] (1: 2-CTA clusters on
/// pairs of n-tiles of one m-tile, sharing A; n_tiles even: the host's condition). MC 2: 2-CTA clusters on
/// pairs of m-tiles (2i, 2i + 1) of one n-tile, sharing B ([`crate::scheduler::pair_units`]).
#[inline(always)]
pub(crate) unsafe fn walk<const MC: u32>(p: &GroupedGemm, total: u32) -> (u32, u32, u32) {
    if MC == 2 {
        (regs::bid() / 2, regs::nctaid() / 2, crate::scheduler::pair_units(m_tiles(p), p.n_tiles))
    } else {
        crate::scheduler::walk(regs::bid(), regs::nctaid(), total, if MC != 0 { 2 } else { 1 })
    }
}

/// This block's tile of walk index `q` and whether it is a ghost (MC 2 only: the pair's second m-tile past the
/// last one; the ghost runs its peer's tile so the two rings stay in step, and stores nothing).
#[inline(always)]
pub(crate) unsafe fn walk_tile<const MC: u32>(p: &GroupedGemm, q: u32) -> (u32, bool) {
    if MC == 2 {
        let (m, n, ghost) = crate::scheduler::pair_unit(q, p.n_tiles, m_tiles(p), regs::bid() % 2);
        (m * p.n_tiles + n, ghost)
    } else {
        (crate::scheduler::walk_tile(q, regs::bid(), p.n_tiles, if MC != 0 { 2 } else { 1 }), false)
    }
}

/// MC 2: whether the pair of walk index `q` shares B: both m-tiles exist and belong to one expert (the same
/// answer in both CTAs). Otherwise each CTA loads its whole B.
#[inline(always)]
unsafe fn shares_b<const DSW: bool>(p: &GroupedGemm, q: u32) -> bool {
    let m0 = 2 * (q / p.n_tiles);
    m0 + 1 < m_tiles(p) && tile_info::<DSW>(p, m0 * p.n_tiles).e == tile_info::<DSW>(p, (m0 + 1) * p.n_tiles).e
}

/// The gathering producer of the SwiGLU GEMM (all 128 threads of warpgroup 0). Per stage, the A tile's 128
/// rows x 128 bytes are copied with 16-byte `cp.async`: thread t copies chunk t % 8 of rows t / 8 + 16 i
/// (i < 8), so each 8 lanes of a warp instruction read one row's 128 contiguous bytes (whole L2 lines, not 32
/// scattered 16-byte pieces). Row r of the tile is token row_slot[r] / top_k of `a_rows`; it lands in the
/// 128-byte-swizzled layout the TMA would have made (chunk c of row r at chunk c ^ (r % 8)); rows past the
/// expert's end are zero-filled (nothing read). Thread 0 also loads B by TMA, announcing its bytes. Each thread
/// then makes its copies arrive on the stage's full barrier when they complete (`cp.async.mbarrier.arrive
/// .noinc`: 129 arrivals complete a phase) and goes on to the next stage without waiting, so as many stages are
/// in flight as the ring holds; the consumers fence the generic-proxy writes against their wgmma reads after
/// the wait.
#[inline(always)]
unsafe fn produce_gather(p: &GroupedGemm, base: u32, ring: Ring<STAGES>, total: u32, kt_n: u32) {
    let t = regs::tid();
    if t == 0 {
        crate::kernels::acquire_prefetch(p.map_b as *const u8);
    }
    let x = p.a_rows as *const u8;
    let toks = base + ROW_TOKENS;
    let mut it = 0u32;
    let mut tile = regs::bid();
    while tile < total {
        let ti = tile_info::<false>(p, tile);
        // the tile's row tokens into shared memory (u32::MAX past the expert's end): thread t looks up row t;
        // named barrier 1 (the 128 producer threads, uniform flow) before (the last tile's reads are done) and
        // after (the writes are visible)
        let row = ti.row0 + t;
        let tok = if row < ti.row_end { *(p.row_slot as *const u32).add(row as usize) / p.top_k } else { u32::MAX };
        sync::named_sync(1, 128);
        smem::st_u32(toks + 4 * t, tok);
        sync::named_sync(1, 128);
        let rows = GatherRows::new(x, (p.k * 2) as usize, toks, t);
        let mut kt = 0;
        while kt < kt_n {
            let s = Ring::<STAGES>::stage(it);
            ring.wait_empty(it);
            let a_s = base + s * STAGE_BYTES;
            let fb = ring.full_bar(it);
            if t == 0 {
                mbarrier::arrive_expect_tx(fb, B_BYTES);
                let n0 = ti.n_tile * (BN / 2);
                let (kx, brow) = ((kt * BK) as i32, ti.e * p.n_b);
                tma::load_2d(a_s + A_BYTES, p.map_b as *const u8, kx, (brow + n0) as i32, fb);
                tma::load_2d(a_s + A_BYTES + B_BYTES / 2, p.map_b as *const u8, kx, (brow + p.n + n0) as i32, fb);
            }
            rows.issue(a_s, kt);
            cp_async::mbarrier_arrive_noinc(fb);
            it += 1;
            kt += 1;
        }
        tile += regs::nctaid();
    }
}

/// One gathering thread's share of a tile's A, set up once a tile (`new`) and issued once a k-step (`issue`):
/// thread `t` copies chunk t % 8 (16 bytes) of rows t / 8 + 16 i (i < 8) of each stage (128 rows x 64 bf16),
/// each 8 lanes of a warp instruction reading one row's 128 contiguous bytes, row r from token `toks[r]` of `x`
/// (rows of `row_bytes`; u32::MAX: zero-filled, nothing read) into the 128-byte swizzled layout the TMA would
/// have made (chunk c of row r at chunk c ^ (r % 8); r % 8 = t / 8 % 8 for all eight rows), by 16-byte
/// `cp.async`. The eight tokens are read from shared memory and turned into addresses once a tile: a `cp.async`
/// is an `asm!` the compiler may not move loads across, so read per k-step they made each row a shared-memory
/// load, a constant load and an address in series before its copy (~8 x 60 cycles a k-step, the k-step's whole
/// tensor time at 128 x 192; ncu 2026-12-05h: the gathering GEMM1 + SwiGLU at 51% tensor-pipe activity).
pub(crate) struct GatherRows {
    /// Each row's source at column 0 plus this thread's chunk (`x` itself for rows past the expert's end).
    src: [*const u8; 8],
    /// Bytes each row's copies read: 16, or 0 past the expert's end.
    n: [u32; 8],
    /// Row t / 8's chunk in a stage (rows 16 i below it at 2048 i bytes more).
    dst: u32,
    /// Row t / 8 of the tile and this thread's chunk's byte offset in a row's 128 bytes of a k-step.
    r0: u32,
    chunk_at: u32,
}

impl GatherRows {
    /// SAFETY: `toks` the tile's row tokens in shared memory (each below x's rows, or u32::MAX), written before a
    /// barrier this thread has passed and not rewritten before the next; `row_bytes` a multiple of 128, `t` < 128.
    #[inline(always)]
    pub(crate) unsafe fn new(x: *const u8, row_bytes: usize, toks: u32, t: u32) -> Self {
        let (chunk, r0) = (t % 8, t / 8);
        let mut rows =
            Self { src: [x; 8], n: [0; 8], dst: r0 * 128 + ((chunk ^ (r0 % 8)) * 16), r0, chunk_at: chunk * 16 };
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            let tok = smem::ld_u32(toks + 4 * (r0 + 16 * I as u32));
            if tok != u32::MAX {
                rows.src[I] = x.add(tok as usize * row_bytes + (chunk * 16) as usize);
                rows.n[I] = 16;
            }
        });
        rows
    }

    /// The copies of k-step `kt` into the stage at `a_s`. SAFETY: the stage free; `kt` below `row_bytes` / 128 (a
    /// row past the expert's end reads nothing: `x` + 128 kt, 0 bytes).
    #[inline(always)]
    pub(crate) unsafe fn issue(&self, a_s: u32, kt: u32) {
        let col = (kt * BK * 2) as usize;
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            cp_async::copy16_zfill(a_s + self.dst + 2048 * I as u32, self.src[I].add(col), self.n[I]);
        });
    }

    /// The write-out of k-step `kt`'s copies from the stage at `a_s`: this thread's chunks of the tile's rows
    /// into `out` (the tile's first row of an expert-ordered buffer of rows of `row_bytes`), the rows past the
    /// expert's end not. Each thread reads back only the chunks its own copies wrote. SAFETY: those copies
    /// landed (this thread's `cp.async` group waited for) and the stage not refilled since; `out` holds the
    /// tile's rows below its expert's end.
    #[inline(always)]
    pub(crate) unsafe fn copy_out(&self, a_s: u32, out: *mut u8, row_bytes: usize, kt: u32) {
        let col = (kt * BK * 2 + self.chunk_at) as usize;
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            if self.n[I] != 0 {
                let v = smem::ld_v4(a_s + self.dst + 2048 * I as u32);
                let at = out.add((self.r0 + 16 * I as u32) as usize * row_bytes + col);
                global::st_v4(at as *mut [u32; 4], v);
            }
        });
    }
}

#[inline(always)]
unsafe fn produce<
    const SWIGLU: bool,
    const BT: bool,
    const DSW: bool,
    const S: u32,
    const MC: u32,
    const MV: bool,
    const DYN: bool,
>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<S>,
    total: u32,
    kt_n: u32,
) {
    crate::kernels::acquire_prefetch(p.map_a as *const u8);
    crate::kernels::acquire_prefetch(p.map_b as *const u8);
    let mut it = 0u32;
    if DYN {
        // the run-time walk, each index handed to the consumers through the queue
        let mut tiles = Tiles::<true, true>::new(p, total, base + QUEUE_AT);
        while let Some(tile) = tiles.next() {
            produce_tile::<SWIGLU, BT, DSW, S, MC, MV>(p, base, &ring, &mut it, tile, 0, kt_n);
        }
        return;
    }
    let (q0, step, count) = walk::<MC>(p, total);
    let mut q = q0;
    while q < count {
        let tile = walk_tile::<MC>(p, q).0;
        produce_tile::<SWIGLU, BT, DSW, S, MC, MV>(p, base, &ring, &mut it, tile, q, kt_n);
        q += step;
    }
}

/// The producer thread's loads of one tile (walk index `q`: the B-sharing clusters' pair) into the ring from
/// iteration `*it` on.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn produce_tile<
    const SWIGLU: bool,
    const BT: bool,
    const DSW: bool,
    const S: u32,
    const MC: u32,
    const MV: bool,
>(
    p: &GroupedGemm,
    base: u32,
    ring: &Ring<S>,
    it: &mut u32,
    tile: u32,
    q: u32,
    kt_n: u32,
) {
    let rank = regs::bid() % 2;
    let ti = tile_info::<DSW>(p, tile);
    if MV {
        // the overlapped gather: this m-tile's rows are in A before its first load
        wait_rows(p, &ti, tile / p.n_tiles);
    }
    // MC 2: CTA `rank` loads half of the pair's B into both CTAs (mask 0b11), else its whole B
    let share_b = MC == 2 && shares_b::<DSW>(p, q);
    let mut kt = 0;
    while kt < kt_n {
        let s = Ring::<S>::stage(*it);
        // MC: the empty barrier counts both CTAs' consumer warps (the peer's arrive remotely)
        let fb = ring.produce(*it, stage_bytes(DSW));
        load_stage::<SWIGLU, BT, DSW, MC>(p, &ti, base + s * stage_bytes(DSW), fb, kt, rank, share_b);
        *it += 1;
        kt += 1;
    }
}

/// The producer thread: wait until `*f` >= `target`, each wait bounded by `timeout_ns` of `%globaltimer`; on expiry
/// set the error word `err` to [`FUSED_TIMEOUT`] (every later wait of the launch then returns at once: the output
/// is not to be used), then order the acquire before the copy engine's reads of what the count covers.
/// SAFETY: `f` and `err` global u32 words.
#[inline(always)]
pub(crate) unsafe fn wait_count(f: *const u32, target: u32, err: *mut u32, timeout_ns: u64) {
    if sync::ld_acquire_gpu(f) < target {
        let start = regs::globaltimer();
        loop {
            sync::nanosleep(64);
            if sync::ld_acquire_gpu(f) >= target || sync::ld_relaxed_gpu(err) != 0 {
                break;
            }
            if regs::globaltimer().wrapping_sub(start) > timeout_ns {
                sync::st_release_gpu(err, FUSED_TIMEOUT);
                break;
            }
        }
    }
    fence::proxy_async_global();
}

/// The producer thread, with the overlapped gather (`a_copy`): wait until every row of m-tile `m` (the m-tile of
/// `ti`) has been copied into A.
#[inline(always)]
pub(crate) unsafe fn wait_rows(p: &GroupedGemm, ti: &Tile, m: u32) {
    let rows = if ti.row_end - ti.row0 < BM { ti.row_end - ti.row0 } else { BM };
    wait_count((p.arrive + 4 * m as u64) as *const u32, rows, p.error as *mut u32, p.timeout_ns);
}

/// The mover warps (warps 1..3 of the producer warpgroup; `w` 0..3, `lane`) of the overlapped gather: every
/// m-tile's rows are split into `parts` parts (one per tile of the m-tile that needs its A: part n = n-tile n);
/// `part_of(m)` is the first part of m-tile m this block copies (its tiles' n, then + grid; >= parts: none).
/// For each m-tile in increasing order (the order of the block's own tiles) the warps copy the rows row0 + n +
/// parts (w + 3 i) of each of the block's parts n from the tokens (`a_rows`, token row_slot[r] / top_k, `cols`
/// bf16 a row: K, or the side copy's `copy_cols`) into `a_copy`, 16 bytes a lane, eight loads in flight per lane
/// (the `_mv` kernels give the producer warpgroup [`MV_PRODUCER_REGS`] registers), then count them on `arrive[m]` with release semantics, after a
/// GPU-scope fence by every lane and a proxy fence (the copy engine reads the rows). The movers wait for
/// nothing, so they cannot hold up a wait.
/// `PULL` (the single-CTA kernels): with `a_src_ranks`, row r comes from rank recv_meta[r].0's x, token
/// recv_meta[r].1 / top_k (expert-parallel pull dispatch); the persistent forward leaves it out (registers).
/// SAFETY: all 32 lanes of each mover warp; `a_copy` holds the launch's rows and `a_rows` its tokens, of `cols`
/// bf16 each, `cols` % 8 == 0.
#[inline(always)]
pub(crate) unsafe fn move_rows<const PULL: bool>(
    p: &GroupedGemm,
    parts: u32,
    part_of: impl Fn(u32) -> u32,
    w: u32,
    lane: u32,
    cols: u32,
) {
    let to = p.tile_offsets as *const u32;
    let off = p.offsets as *const u32;
    let m_total = m_tiles(p);
    let chunks = cols / 8;
    let mut e = 0u32;
    let mut m = 0u32;
    while m < m_total {
        // the expert of m-tile m (empty experts have equal bounds and are passed over; never past the last
        // expert, whatever the tile offsets hold)
        while e + 1 < p.experts && *to.add(e as usize + 1) <= m {
            e += 1;
        }
        let row0 = (*off.add(e as usize)).wrapping_add(m.wrapping_sub(*to.add(e as usize)).wrapping_mul(BM));
        // the rows inside `a_copy` and `row_slot` ([`Tile::clamped`], as the producer's `tile_info` sees them)
        let Tile { row0, row_end, .. } =
            Tile { e, row0, row_end: *off.add(e as usize + 1), n_tile: 0 }.clamped(p.rows_max);
        let end = if row_end - row0 < BM { row_end } else { row0 + BM };
        let mut n = part_of(m);
        while n < parts {
            let (mut r, stride) = crate::scheduler::mover_rows(row0, n, parts, w);
            let mut mine = 0u32;
            while r < end {
                let src = if PULL && p.a_src_ranks != 0 {
                    // expert-parallel pull: (source rank, source slot) of the row, that rank's x
                    let meta = (p.row_slot as *const u32).add(2 * r as usize);
                    let base = *(p.a_src_ranks as *const u64).add(*meta as usize);
                    (base as *const [u32; 4]).add((*meta.add(1) / p.top_k * chunks) as usize)
                } else {
                    let tok = *(p.row_slot as *const u32).add(r as usize) / p.top_k;
                    (p.a_rows as *const [u32; 4]).add((tok * chunks) as usize)
                };
                let dst = (p.a_copy as *mut [u32; 4]).add((r * chunks) as usize);
                crate::kernels::ep_common::copy_row(src, dst, chunks, lane);
                mine += 1;
                r += stride;
            }
            if mine > 0 {
                // this lane's stores before the count, for the generic proxy and the copy engine alike
                fence::proxy_async_global();
                fence::acq_rel_gpu();
            }
            warp::sync_warp();
            if lane == 0 && mine > 0 {
                sync::red_release_gpu((p.arrive + 4 * m as u64) as *mut u32, mine);
            }
            n += regs::nctaid();
        }
        m += 1;
    }
}

/// The TMA loads of k-step `kt` of tile `ti` into the stage at `a_s` (A, then B after A_BYTES), completing on the
/// stage's full barrier `fb` (whose expected bytes the caller announced). MC 1: CTA `rank` 0 multicasts A into
/// both CTAs of its cluster; `share_b` (MC 2): CTA `rank` loads half of B into both. SAFETY: the producer thread,
/// the stage free.
#[inline(always)]
pub(crate) unsafe fn load_stage<const SWIGLU: bool, const BT: bool, const DSW: bool, const MC: u32>(
    p: &GroupedGemm,
    ti: &Tile,
    a_s: u32,
    fb: u32,
    kt: u32,
    rank: u32,
    share_b: bool,
) {
    let b_s = a_s + A_BYTES;
    let kx = (kt * BK) as i32;
    if MC != 1 {
        tma::load_2d(a_s, p.map_a as *const u8, kx, ti.row0 as i32, fb);
    } else if rank == 0 {
        // the pair's A (same m-tile) into both CTAs; each expects it in its stage's bytes
        tma::load_2d_mc(a_s, p.map_a as *const u8, kx, ti.row0 as i32, fb, 0b11);
    }
    let brow = ti.e * p.n_b;
    // box h of the stage's B (BT: four of 64 columns; otherwise two of 128 rows), into this CTA or, when
    // the pair shares B, by CTA h * 2 / boxes into both
    let nbox = if BT { bn(DSW) / 64 } else { 2 };
    let mut h = 0;
    while h < nbox {
        let (dst, c0, c1) = if BT {
            let col = (ti.n_tile * bn(DSW) + 64 * h) as i32;
            (b_s + h * (64 * BK * 2), col, (ti.e * p.k + kt * BK) as i32)
        } else if SWIGLU {
            let n0 = ti.n_tile * (BN / 2);
            (b_s + h * (B_BYTES / 2), kx, (brow + h * p.n + n0) as i32)
        } else {
            (b_s + h * (B_BYTES / 2), kx, (brow + ti.n_tile * BN + h * (BN / 2)) as i32)
        };
        if !share_b {
            tma::load_2d(dst, p.map_b as *const u8, c0, c1, fb);
        } else if h * 2 / nbox == rank {
            tma::load_2d_mc(dst, p.map_b as *const u8, c0, c1, fb, 0b11);
        }
        h += 1;
    }
}

/// The accumulator of a consumer warpgroup's 64 x `N` part of a cooperative tile (wgmma m64nNk16, f32): the
/// m64n256 one of the 128 x 256 tiles, or the m64n192 one of `grouped_gemm_bt_dswiglu_ew7`.
pub(crate) trait Acc {
    /// Columns.
    const N: u32;
    fn zero() -> Self;
    /// One wgmma with B K-major (`BT` false) or N-major (true). SAFETY: as the wgmma.
    unsafe fn mma<const BT: bool>(&mut self, da: u64, db: u64, scale_d: u32);
    /// SAFETY: as `wgmma::fence_operand_*`.
    unsafe fn fence(&mut self);
    fn at(&self, i: usize) -> f32;
}

macro_rules! acc_impl {
    ($n:literal, $cols:literal, $k:ident, $kt:ident, $fence:ident) => {
        impl Acc for [f32; $n] {
            const N: u32 = $cols;
            #[inline(always)]
            fn zero() -> Self {
                [0.0; $n]
            }
            #[inline(always)]
            unsafe fn mma<const BT: bool>(&mut self, da: u64, db: u64, scale_d: u32) {
                if BT {
                    wgmma::$kt(self, da, db, scale_d);
                } else {
                    wgmma::$k(self, da, db, scale_d);
                }
            }
            #[inline(always)]
            unsafe fn fence(&mut self) {
                wgmma::$fence(self);
            }
            #[inline(always)]
            fn at(&self, i: usize) -> f32 {
                self[i]
            }
        }
    };
}
acc_impl!(128, 256, m64n256k16_f32_bf16_ss, m64n256k16_f32_bf16_ss_bt, fence_operand_128);
acc_impl!(96, 192, m64n192k16_f32_bf16_ss, m64n192k16_f32_bf16_ss_bt, fence_operand_96);
acc_impl!(64, 128, m64n128k16_f32_bf16_ss, m64n128k16_f32_bf16_ss_bt, fence_operand_64);

/// The main loop of one consumer warpgroup of the cooperative kernels over one tile: `kt_n` stages of an `S`-stage
/// ring from iteration `*it` on (advanced past them), warpgroup `cw`'s 64 rows of the stage's A (128 x 64) times
/// its B (`A::N` x 64, or BT: 64 K x `A::N` N; stages of A 128 x 64 then B) into the returned m64n`A::N`
/// accumulator; every stage given back (the last after the final `wait_group 0`). SAFETY: all 128 threads of a
/// consumer warpgroup, in ring order.
#[inline(always)]
pub(crate) unsafe fn mainloop_coop<const BT: bool, const GATHER: bool, const MC: u32, const S: u32, A: Acc>(
    base: u32,
    ring: &Ring<S>,
    it: &mut u32,
    kt_n: u32,
    cw: u32,
    lane: u32,
) -> A {
    let stage = A_BYTES + A::N * BK * 2;
    let mut acc = A::zero();
    let mut kt = 0;
    while kt < kt_n {
        let s = Ring::<S>::stage(*it);
        ring.wait_full(*it);
        if GATHER {
            // A arrived through the generic proxy (cp.async): order it before the tensor cores' reads
            fence::proxy_async_shared_cta();
        }
        let a_s = crate::ptx::warp::uniform(base + s * stage + cw * (A_BYTES / 2));
        let b_s = crate::ptx::warp::uniform(base + s * stage + A_BYTES);
        wgmma::fence();
        let da = SmemDesc::k_major_sw128(a_s);
        let db = SmemDesc::k_major_sw128(b_s);
        let mut ks = 0;
        while ks < BK / 16 {
            let scale_d = (kt > 0 || ks > 0) as u32;
            if BT {
                let dbt = SmemDesc::new(b_s + ks * 2048, 64 * BK * 2, 1024, Layout::Swizzle128B);
                acc.mma::<true>(da.advance(32 * ks).0, dbt.0, scale_d);
            } else {
                acc.mma::<false>(da.advance(32 * ks).0, db.advance(32 * ks).0, scale_d);
            }
            ks += 1;
        }
        wgmma::commit_group();
        wgmma::wait_group::<1>();
        release::<MC, S>(ring, *it, lane, kt > 0);
        *it += 1;
        kt += 1;
    }
    wgmma::wait_group::<0>();
    acc.fence();
    release::<MC, S>(ring, *it, lane, true);
    acc
}

/// One consumer warpgroup of the cooperative kernels (all but the SwiGLU backward): both warpgroups run every tile
/// of the block, warpgroup `cw` its rows 64 cw..64 cw + 64 as one wgmma m64n256k16 tile, then the epilogue.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn consume_coop<
    const SWIGLU: bool,
    const BT: bool,
    const GATHER: bool,
    const MC: u32,
    const SCATTER: bool,
    const DYN: bool,
>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<STAGES>,
    staging: u32,
    total: u32,
    kt_n: u32,
    cw: u32,
) {
    let lane = t_lane();
    let leader = regs::tid() % 128 == 0;
    if leader {
        // the maps this warpgroup's stores go through (`store_box`: its leader issues them)
        crate::kernels::acquire_host_map(p.map_c);
        crate::kernels::acquire_host_map(p.map_z);
    }
    // the warpgroup's two staging boxes, used alternately by every box they store (`boxes` counts them across
    // tiles, so a box is never rewritten while the copy engine may still read it)
    let wst = staging + cw * 2 * C_BOX;
    let mut boxes = 0u32;
    let mut it = 0u32;
    if DYN {
        // the producer's run-time tile indices, through the queue
        let mut tiles = Tiles::<true, false>::new(p, total, base + QUEUE_AT);
        while let Some(tile) = tiles.next() {
            consume_tile::<SWIGLU, BT, GATHER, MC, SCATTER>(
                p,
                base,
                &ring,
                (wst, &mut boxes),
                &mut it,
                (tile, false),
                kt_n,
                cw,
                lane,
            );
        }
    } else {
        let (q0, step, count) = walk::<MC>(p, total);
        let mut q = q0;
        while q < count {
            let tile = walk_tile::<MC>(p, q);
            consume_tile::<SWIGLU, BT, GATHER, MC, SCATTER>(
                p,
                base,
                &ring,
                (wst, &mut boxes),
                &mut it,
                tile,
                kt_n,
                cw,
                lane,
            );
            q += step;
        }
    }
    // the staging must not be freed (block exit) before the copy engine has read it
    if leader {
        tma::wait_group::<0>();
    }
}

/// One tile of a cooperative consumer warpgroup: its main loop from ring iteration `*it` on, then the epilogue
/// (`ghost`: MC 2's peer tile, run only to keep the rings in step, nothing stored); `staging` its two boxes and the
/// count of boxes stored through them.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn consume_tile<const SWIGLU: bool, const BT: bool, const GATHER: bool, const MC: u32, const SCATTER: bool>(
    p: &GroupedGemm,
    base: u32,
    ring: &Ring<STAGES>,
    (wst, boxes): (u32, &mut u32),
    it: &mut u32,
    (tile, ghost): (u32, bool),
    kt_n: u32,
    cw: u32,
    lane: u32,
) {
    let ti = tile_info::<false>(p, tile);
    let acc: [f32; 128] = mainloop_coop::<BT, GATHER, MC, STAGES, _>(base, ring, it, kt_n, cw, lane);
    if ghost {
        // MC 2: the peer's tile, run only to keep the rings in step
    } else if SWIGLU {
        store_swiglu(p, &acc, &ti, cw, wst, boxes);
    } else if SCATTER {
        store_scatter(p, &acc, &ti, cw);
    } else {
        store_bf16(p, &acc, &ti, cw, wst, boxes);
    }
}

/// One consumer warpgroup of the SwiGLU backward (ping-pong): local tile l of the block (tile bid + l * grid) is warpgroup l % 2's, a
/// 128 x 128 tile as two wgmma m64n128k16 halves (rows 0..64 into `acc[0]`, 64..128 into `acc[1]`, both with the
/// stage's B). Its ring iterations are l * kt_n.. (the other warpgroup's are skipped). Before a tile's main loop
/// it waits on its order barrier until the other warpgroup has waited for every stage of the block's previous
/// tile, and after its own main loop it arrives on the other's: the main loops alternate (the tensor cores run
/// one warpgroup's tile while the other runs its epilogue), and no wait on a full barrier is ever more than one
/// phase ahead of it (the parity would be ambiguous).
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn consume_pp<const MC: u32>(
    p: &GroupedGemm,
    base: u32,
    ring: Ring<DSW_STAGES>,
    staging: u32,
    order: u32,
    zbar: u32,
    total: u32,
    kt_n: u32,
    cw: u32,
) {
    let lane = t_lane();
    let leader = regs::tid() % 128 == 0;
    // SwiGLU backward: this warpgroup's z staging (slots of a g box and a u box) and their mbarriers, and the
    // number of z batches it has run through them (batch q: slot q % 2, phase q / 2 of that slot's barrier)
    let zst = staging + cw * 4 * C_BOX;
    let zbar = zbar + cw * 16;
    let mut zq = 0u32;
    if leader && p.map_z != 0 {
        crate::kernels::acquire_prefetch(p.map_z as *const u8);
        crate::kernels::acquire_prefetch(p.map_c as *const u8);
        crate::kernels::acquire_host_map(p.map_sh);
    }
    let mut it = cw * kt_n;
    let mut mine = 0u32;
    let (q0, step, count) = walk::<MC>(p, total);
    let mut q = q0 + cw * step;
    while q < count {
        let ti = tile_info::<true>(p, walk_tile::<MC>(p, q).0);
        // SwiGLU backward: the z batches of this tile that go through the copy engine, and the routing weights of
        // its four rows, read now so that their latency hides under the main loop
        let (nb, ntma) = dsw_batches(p, &ti);
        let sw = dsw_weights(p, &ti);
        // the other warpgroup has waited for every stage of the block's previous tile (warpgroup 0's first tile
        // has none): WG 1's m-th tile follows WG 0's m-th arrival, WG 0's m-th its (m - 1)-th
        if cw == 1 || mine > 0 {
            let ph = if cw == 0 { (mine - 1) & 1 } else { mine & 1 };
            mbarrier::wait_parity(order + 8 * cw, ph);
        }
        let mut acc = [[0f32; 64]; 2];
        let mut kt = 0;
        while kt < kt_n {
            let s = Ring::<DSW_STAGES>::stage(it);
            ring.wait_full(it);
            let a_s = base + s * DSW_STAGE_BYTES;
            let b_s = a_s + A_BYTES;
            wgmma::fence();
            let da0 = SmemDesc::k_major_sw128(a_s);
            let da1 = SmemDesc::k_major_sw128(a_s + A_BYTES / 2);
            let mut ks = 0;
            while ks < BK / 16 {
                let scale_d = (kt > 0 || ks > 0) as u32;
                // B_e stored [K, N]: N-major, two 64-column atoms (LBO 8192 B), 8-row K groups (SBO 1024 B)
                let dbt = SmemDesc::new(b_s + ks * 2048, 64 * BK * 2, 1024, Layout::Swizzle128B);
                wgmma::m64n128k16_f32_bf16_ss_bt(&mut acc[0], da0.advance(32 * ks).0, dbt.0, scale_d);
                wgmma::m64n128k16_f32_bf16_ss_bt(&mut acc[1], da1.advance(32 * ks).0, dbt.0, scale_d);
                ks += 1;
            }
            wgmma::commit_group();
            wgmma::wait_group::<1>();
            release::<MC, DSW_STAGES>(&ring, it, lane, kt > 0);
            if ntma > 0 && kt == 0 && leader {
                // the first two z batches of the tile load under its main loop (K >= 64: kt = 0 always runs)
                z_prefetch(p, &ti, zst, zbar, zq, nb, ntma);
            }
            it += 1;
            kt += 1;
        }
        // every stage of this tile has arrived: the other warpgroup may start its main loop
        if leader {
            mbarrier::arrive(order + 8 * (1 - cw));
        }
        wgmma::wait_group::<0>();
        wgmma::fence_operand_64(&mut acc[0]);
        wgmma::fence_operand_64(&mut acc[1]);
        release::<MC, DSW_STAGES>(&ring, it, lane, true);
        zq = store_dswiglu(p, &acc, &ti, cw, sw, (nb, ntma), zst, zbar, zq);
        it += kt_n;
        mine += 1;
        q += 2 * step;
    }
    // the staging must not be freed (block exit) before the copy engine has read it
    if leader {
        tma::wait_group::<0>();
    }
}

/// A consumer warp gives back the stage of iteration `it - 1` (when `cond`): lane 0 in its own CTA; in a 2-CTA
/// cluster lanes 0 and 1 in CTA 0 and CTA 1.
#[inline(always)]
unsafe fn release<const MC: u32, const S: u32>(ring: &Ring<S>, it: u32, lane: u32, cond: bool) {
    if MC != 0 {
        if cond && lane < 2 {
            ring.release_prev_cluster(it, lane);
        }
    } else if cond && lane == 0 {
        ring.release_prev(it);
    }
}

#[inline(always)]
pub(crate) fn t_lane() -> u32 {
    regs::tid() % 32
}

/// (first row, second row, first column) of this thread's fragment inside a 64 x N wgmma half.
#[inline(always)]
pub(crate) fn frag() -> (u32, u32, u32) {
    let t = regs::tid() % 128;
    let r = 16 * (t / 32) + (t % 32) / 4;
    (r, r + 8, 2 * (t % 4))
}

/// One 64 x 64 bf16 box of a consumer warpgroup's fragment out through shared memory and the copy engine:
/// `val(j, h)` is the thread's packed pair of columns 8 j + c0, + 1 of its row r + 8 h (r, c0 of [`frag`]) in the
/// box. Written into `buf` with 128-byte swizzle (16-byte chunk j of row r at chunk j ^ (r % 8): the fragment
/// stores are free of bank conflicts), then stored by TMA at (`col`, `row`) of `map` (columns past the map's
/// width clipped). `buf` is one of two staging boxes the caller alternates in issue order, across tiles too:
/// `wait_group.read 1` before it is rewritten; one thread issues, named barrier 2 + cw (the warpgroup's 128
/// threads) orders the staging writes around it. SAFETY: all 128 threads of the warpgroup, in uniform control flow.
#[inline(always)]
pub(crate) unsafe fn store_box(map: u64, col: u32, row: u32, buf: u32, cw: u32, val: impl Fn(usize, usize) -> u32) {
    let (r, _, c0) = frag();
    let leader = regs::tid() % 128 == 0;
    let bar = 2 + cw;
    if leader {
        tma::wait_group_read::<1>();
    }
    sync::named_sync(bar, 128);
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
        crate::unroll!(H in [0, 1] {
            let rr = r + 8 * H as u32;
            smem::st_u32(buf + rr * 128 + ((J as u32 ^ (rr % 8)) * 16) + 2 * c0, val(J, H));
        });
    });
    fence::proxy_async_shared_cta();
    sync::named_sync(bar, 128);
    if leader {
        tma::store_2d(map as *const u8, col as i32, row as i32, buf);
        tma::commit_group();
    }
}

/// The bf16 epilogue. A warpgroup whose 64 rows all belong to the tile's expert (and with `map_c` set) stores
/// through shared memory and the copy engine: one 64 x 64 box at a time (128-byte swizzle: 16-byte chunk c of row
/// r at chunk c ^ (r % 8), so the fragment stores are free of bank conflicts), two staging boxes alternating
/// (`wait_group.read 1` before one is rewritten), columns past N clipped by the tensor map; one thread issues,
/// named barrier 2 + cw (128 threads) orders the staging writes around it. A warpgroup with rows past the
/// expert's end (the rows of the next expert, or past the buffer) stores from registers, row by row.
#[inline(always)]
pub(crate) unsafe fn store_bf16(p: &GroupedGemm, acc: &[f32; 128], ti: &Tile, cw: u32, staging: u32, k: &mut u32) {
    let row0w = ti.row0 + cw * 64;
    if p.map_c != 0 && row0w + 64 <= ti.row_end {
        // uniform in the warpgroup: every thread sees the same tile
        crate::unroll!(B in [0, 1, 2, 3] {
            let col_b = ti.n_tile * BN + 64 * B as u32;
            if col_b < p.n {
                store_box(p.map_c, col_b, row0w, staging + (*k % 2) * C_BOX, cw, |j, h| {
                    math::pack_bf16x2(acc[4 * (8 * B + j) + 2 * h], acc[4 * (8 * B + j) + 2 * h + 1])
                });
                *k += 1;
            }
        });
        return;
    }
    let (r0, r1, c0) = frag();
    let row_a = ti.row0 + cw * 64 + r0;
    let row_b = ti.row0 + cw * 64 + r1;
    let c = p.c as *mut u32;
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
        let col = ti.n_tile * BN + 8 * J as u32 + c0;
        if col < p.n {
            if row_a < ti.row_end {
                *c.add(((row_a * p.ldc + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J], acc[4 * J + 1]);
            }
            if row_b < ti.row_end {
                *c.add(((row_b * p.ldc + col) / 2) as usize) = math::pack_bf16x2(acc[4 * J + 2], acc[4 * J + 3]);
            }
        }
    });
}

/// The row-scattered bf16 epilogue: row `row` of the tile (of its expert's rows) goes to row d = row_slot[row] of
/// C (row stride `ldc`), times w[d] when `w` is set; destinations at or past `c_rows` are skipped. From
/// registers: a quad writes 16 contiguous bytes of a row. Destinations should be distinct (with two rows on one
/// destination, which of them lands is not fixed).
#[inline(always)]
unsafe fn store_scatter(p: &GroupedGemm, acc: &[f32; 128], ti: &Tile, cw: u32) {
    let (r0, r1, c0) = frag();
    let c = p.c as *mut u32;
    crate::unroll!(H in [0, 1] {
        let row = ti.row0 + cw * 64 + if H == 0 { r0 } else { r1 };
        if row < ti.row_end {
            // the destination row, in C or (expert-parallel) in the row's source rank's base
            let (c, d) = if p.c_dst_ranks != 0 {
                let meta = (p.row_slot as *const u32).add(2 * row as usize);
                (*(p.c_dst_ranks as *const u64).add(*meta as usize) as *mut u32, *meta.add(1))
            } else {
                (c, *(p.row_slot as *const u32).add(row as usize))
            };
            if d < p.c_rows {
                let s = if p.w != 0 { *(p.w as *const f32).add(d as usize) } else { 1.0 };
                let rowp = c.add(d as usize * p.ldc as usize / 2);
                crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31] {
                    let col = ti.n_tile * BN + 8 * J as u32 + c0;
                    if col < p.n {
                        let v = math::pack_bf16x2(acc[4 * J + 2 * H] * s, acc[4 * J + 2 * H + 1] * s);
                        *rowp.add(col as usize / 2) = v;
                    }
                });
            }
        }
    });
}

/// silu(g) u in f32.
#[inline(always)]
pub(crate) fn silu_mul(g: f32, u: f32) -> f32 {
    g * math::sigmoid(g) * u
}

/// h = silu(g) u of two columns from g and u in bf16 (packed pairs, as z stores them): the bf16 SwiGLU epilogues'
/// arithmetic, shared so every bf16 GEMM1 computes h alike (the epilogue-warps kernel reads z in bf16) and as the
/// backward recomputes it from z. (The FP8 GEMM1 epilogues compute h from the f32 accumulators; they are never
/// compared bit for bit with the bf16 ones.)
#[inline(always)]
pub(crate) fn swiglu_h(g: u32, u: u32) -> u32 {
    let lo = |x: u32| f32::from_bits(x << 16);
    let hi = |x: u32| f32::from_bits(x & 0xffff_0000);
    math::pack_bf16x2(silu_mul(lo(g), lo(u)), silu_mul(hi(g), hi(u)))
}

/// The SwiGLU epilogue: h = silu(g) u into `c` (when non-zero) and z = [g | u] into `z` (when non-zero). A
/// warpgroup whose 64 rows all belong to the tile's expert, with a tensor map for each output it writes
/// (`map_c` over h [rows, n], `map_z` over z [rows, 2n]; n a multiple of 64), stores 64 x 64 boxes through the
/// staging and the copy engine (h: 2 boxes, z: 2 of g and 2 of u); the others store from registers. True when this
/// warpgroup stored from registers.
#[inline(always)]
pub(crate) unsafe fn store_swiglu(
    p: &GroupedGemm,
    acc: &[f32; 128],
    ti: &Tile,
    cw: u32,
    staging: u32,
    k: &mut u32,
) -> bool {
    let row0w = ti.row0 + cw * 64;
    if row0w + 64 <= ti.row_end && (p.c == 0 || p.map_c != 0) && (p.z == 0 || p.map_z != 0) {
        // uniform in the warpgroup
        crate::unroll!(B in [0, 1] {
            let col_b = ti.n_tile * (BN / 2) + 64 * B as u32;
            if col_b < p.n {
                let (g, u) = (8 * B, 8 * B + 16);
                if p.c != 0 {
                    store_box(p.map_c, col_b, row0w, staging + (*k % 2) * C_BOX, cw, |j, h| {
                        let gz = math::pack_bf16x2(acc[4 * (g + j) + 2 * h], acc[4 * (g + j) + 2 * h + 1]);
                        let uz = math::pack_bf16x2(acc[4 * (u + j) + 2 * h], acc[4 * (u + j) + 2 * h + 1]);
                        swiglu_h(gz, uz)
                    });
                    *k += 1;
                }
                if p.z != 0 {
                    store_box(p.map_z, col_b, row0w, staging + (*k % 2) * C_BOX, cw, |j, h| {
                        math::pack_bf16x2(acc[4 * (g + j) + 2 * h], acc[4 * (g + j) + 2 * h + 1])
                    });
                    store_box(p.map_z, p.n + col_b, row0w, staging + ((*k + 1) % 2) * C_BOX, cw, |j, h| {
                        math::pack_bf16x2(acc[4 * (u + j) + 2 * h], acc[4 * (u + j) + 2 * h + 1])
                    });
                    *k += 2;
                }
            }
        });
        return false;
    }
    let (r0, r1, c0) = frag();
    let rows = [ti.row0 + cw * 64 + r0, ti.row0 + cw * 64 + r1];
    let c = p.c as *mut u32;
    let z = p.z as *mut u32;
    crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] {
        let col = ti.n_tile * (BN / 2) + 8 * J as u32 + c0;
        crate::unroll!(H in [0, 1] {
            let row = rows[H];
            if col < p.n && row < ti.row_end {
                let gz = math::pack_bf16x2(acc[4 * J + 2 * H], acc[4 * J + 2 * H + 1]);
                let uz = math::pack_bf16x2(acc[4 * (J + 16) + 2 * H], acc[4 * (J + 16) + 2 * H + 1]);
                if p.c != 0 {
                    *c.add(((row * p.ldc + col) / 2) as usize) = swiglu_h(gz, uz);
                }
                if p.z != 0 {
                    let zrow = row * 2 * p.n;
                    *z.add(((zrow + col) / 2) as usize) = gz;
                    *z.add(((zrow + p.n + col) / 2) as usize) = uz;
                }
            }
        });
    });
    true
}

/// One element of the SwiGLU backward, in f32, folded into the row's dtopk partial: (dg, du, s h) with
/// sg = sigmoid(g), silu = g sg, h = silu u, dg = s dh u sg (1 + g (1 - sg)), du = s dh silu, and `part` + dh h
/// (one fma). Both paths of `store_dswiglu` compute through it, so a row's results do not depend on the path it
/// takes (the EP tests compare bitwise with EP = 1, where the same row may fall in another 64-row half). Written for
/// few instructions (the epilogue is straight-line code executed once a tile: 22 instructions an element before,
/// 12 FMUL and 4 FADD unfused): h and s dh once, 1 + g (1 - sg) and the partial as fmas.
#[inline(always)]
pub(crate) fn dswiglu_elem(g: f32, u: f32, dh: f32, s: f32, part: &mut f32) -> (f32, f32, f32) {
    let sg = math::sigmoid(g);
    let silu = g * sg;
    let (sdh, h) = (s * dh, silu * u);
    *part = math::fma(dh, h, *part);
    (sdh * u * sg * math::fma(g, 1.0 - sg, 1.0), sdh * silu, s * h)
}

/// Whether the 64-row half `m` of the tile goes through the copy engine in the SwiGLU-backward epilogue: all of
/// its rows the tile's expert's (a TMA box would read and write the next expert's rows) and the maps given
/// (`map_sh` too when s * h is stored). Uniform in the warpgroup.
#[inline(always)]
fn dsw_tma(p: &GroupedGemm, ti: &Tile, m: u32) -> bool {
    p.map_z != 0 && p.map_c != 0 && (p.sh == 0 || p.map_sh != 0) && ti.row0 + 64 * m + 64 <= ti.row_end
}

/// (nb, ntma): the tile's 64-column batches (1 or 2: n is a multiple of 64) and how many z batches of the tile
/// go through the copy engine (nb per half for which [`dsw_tma`] holds; half 1 only if half 0). TMA batch i is
/// half i / nb, columns n_tile * BN + 64 (i % nb).
#[inline(always)]
fn dsw_batches(p: &GroupedGemm, ti: &Tile) -> (u32, u32) {
    let nb = if ti.n_tile * DSW_BN + 64 < p.n { 2 } else { 1 };
    (nb, nb * (dsw_tma(p, ti, 0) as u32 + dsw_tma(p, ti, 1) as u32))
}

/// The routing weights s = w[row_slot[row]] of this thread's four rows of the tile, [half][row] (0 for rows past
/// the expert's end, which nothing reads).
#[inline(always)]
unsafe fn dsw_weights(p: &GroupedGemm, ti: &Tile) -> [f32; 4] {
    let (r0, _, _) = frag();
    let mut s = [0f32; 4];
    crate::unroll!(I in [0, 1, 2, 3] {
        let row = ti.row0 + 64 * (I as u32 / 2) + r0 + 8 * (I as u32 % 2);
        if row < ti.row_end {
            s[I] = dsw_weight(p, row);
        }
    });
    s
}

/// The routing weight w[row_slot[row]] of a row of the tile (row < `row_end` <= `rows_max`: inside `row_slot`);
/// 0 for a slot at or past `w_len` (never read: row_slot's content is the caller's).
#[inline(always)]
pub(crate) unsafe fn dsw_weight(p: &GroupedGemm, row: u32) -> f32 {
    let slot = *(p.row_slot as *const u32).add(row as usize);
    if slot < p.w_len {
        *(p.w as *const f32).add(slot as usize)
    } else {
        0.0
    }
}

/// The warpgroup's leader: load z batch `q` (g columns col_b..col_b + 64 and the matching u columns n + col_b..,
/// rows row0h..row0h + 64) into staging slot q % 2, completing on that slot's mbarrier. The slot's previous
/// contents must have been read by the copy engine (`wait_group_read`) and every thread of the warpgroup must be
/// past its wait for the slot's previous phase (a named barrier after it).
#[inline(always)]
unsafe fn z_load(p: &GroupedGemm, zst: u32, zbar: u32, q: u32, col_b: u32, row0h: u32) {
    let slot = q % 2;
    let bar = zbar + 8 * slot;
    let gbox = zst + slot * 2 * C_BOX;
    mbarrier::arrive_expect_tx(bar, 2 * C_BOX);
    tma::load_2d(gbox, p.map_z as *const u8, col_b as i32, row0h as i32, bar);
    tma::load_2d(gbox + C_BOX, p.map_z as *const u8, (p.n + col_b) as i32, row0h as i32, bar);
}

/// The warpgroup's leader: load the tile's TMA batch `i` (see [`dsw_batches`]) as the warpgroup's z batch `q`.
#[inline(always)]
unsafe fn z_load_batch(p: &GroupedGemm, ti: &Tile, zst: u32, zbar: u32, q: u32, nb: u32, i: u32) {
    z_load(p, zst, zbar, q, ti.n_tile * DSW_BN + 64 * (i % nb), ti.row0 + 64 * (i / nb));
}

/// The warpgroup's leader, at the start of a tile's main loop: load the tile's first two TMA z batches (as `zq`
/// and `zq + 1`), once the last tile's dz stores have read the staging.
#[inline(always)]
unsafe fn z_prefetch(p: &GroupedGemm, ti: &Tile, zst: u32, zbar: u32, zq: u32, nb: u32, ntma: u32) {
    tma::wait_group_read::<0>();
    crate::unroll!(B in [0, 1] {
        if (B as u32) < ntma {
            z_load_batch(p, ti, zst, zbar, zq + B as u32, nb, B as u32);
        }
    });
}

/// SwiGLU backward on the dh tile (dh = dy_e . W2_e, this kernel with B N-major): with g, u read from
/// z = [g | u] (bf16 [rows, 2n]) and s = w[row_slot[row]] (`sw`, read before the main loop), stores
/// dz = [dg | du] (bf16 [rows, 2n], into `c`), dg = s dh u sig(g) (1 + g (1 - sig(g))), du = s dh silu(g),
/// s * h (h = silu(g) u, bf16 [rows, n], into `sh` when non-zero: the dW2 = dy^T (s h) operand, so no scaled
/// copy of dy is needed), and the partial sum of dh * h over the tile's columns into partial[row, n_tile]
/// (dtopk = <dh, h> after `dtopk_reduce`). Returns the warpgroup's z batch count `zq` after this tile.
///
/// A 64-row half whose rows are all the expert's ([`dsw_tma`]) goes through the copy engine, 64 columns (a
/// batch) at a time: z batch q sits in staging slot q % 2 (a 64 x 64 g box and the u box, 128-byte swizzle:
/// 16-byte chunk j of row r at chunk j ^ (r % 8), so the fragment accesses are free of bank conflicts), loaded
/// by TMA on the slot's mbarrier (the tile's TMA batches 0 and 1 under the main loop, batch i + 2 once batch i's
/// stores have read the slot). Each thread reads its g and u, writes dg and du in place (its own elements only),
/// fences for the async proxy; after named barrier 2 + cw (128 threads, uniform control flow) the leader stores
/// both boxes into dz through `map_c` and refills the slot. s * h (with `map_sh`) goes the same way through the
/// warpgroup's own sh box (written next to dg and du, stored with them; before a batch writes it, the leader
/// waits for the last batch's stores to have read it and a named barrier publishes that). Any other half reads
/// z and writes dz from registers, row by row.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
unsafe fn store_dswiglu(
    p: &GroupedGemm,
    acc: &[[f32; 64]; 2],
    ti: &Tile,
    cw: u32,
    sw: [f32; 4],
    (nb, ntma): (u32, u32),
    zst: u32,
    zbar: u32,
    zq: u32,
) -> u32 {
    let (r0, r1, c0) = frag();
    let n = p.n;
    let n0 = ti.n_tile * DSW_BN;
    let sh = p.sh as *mut u32;
    let leader = regs::tid() % 128 == 0;
    let bar = 2 + cw;
    let mut part = [0f32; 4];
    let mut q = zq;
    crate::unroll!(M in [0, 1] {
        let row0h = ti.row0 + 64 * M as u32;
        let a = &acc[M];
        if dsw_tma(p, ti, M as u32) {
            crate::unroll!(B in [0, 1] {
                let col_b = n0 + 64 * B as u32;
                if (B as u32) < nb {
                    // uniform: every thread of the warpgroup sees the same batch; i is its index in the tile
                    let i = M as u32 * nb + B as u32;
                    let slot = q % 2;
                    let gbox = zst + slot * 2 * C_BOX;
                    let ubox = gbox + C_BOX;
                    mbarrier::wait_parity(zbar + 8 * slot, (q / 2) & 1);
                    // s * h through the warpgroup's sh box (uniform): its last store must have read it
                    let sh_tma = p.sh != 0; // with map_sh (dsw_tma)
                    // the warpgroup's sh box: after both warpgroups' z slots (zst = staging + 4 cw boxes)
                    let shb = zst + (8 - 3 * cw) * C_BOX;
                    if sh_tma {
                        if leader {
                            tma::wait_group_read::<0>();
                        }
                        sync::named_sync(bar, 128);
                    }
                    // one row at a time (16 registers of g and u, not 32)
                    crate::unroll!(H in [0, 1] {
                        let r = r0 + 8 * H as u32;
                        let mut gp = [0u32; 8];
                        let mut up = [0u32; 8];
                        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                            let off = r * 128 + ((J as u32 ^ (r % 8)) * 16) + 2 * c0;
                            gp[J] = smem::ld_u32(gbox + off);
                            up[J] = smem::ld_u32(ubox + off);
                        });
                        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                            let mut dg = [0f32; 2];
                            let mut du = [0f32; 2];
                            let mut hs = [0f32; 2];
                            crate::unroll!(Q in [0, 1] {
                                let g = math::bf16_to_f32((gp[J] >> (16 * Q)) as u16);
                                let u = math::bf16_to_f32((up[J] >> (16 * Q)) as u16);
                                let dh = a[4 * (8 * B + J) + 2 * H + Q];
                                let (x0, x1, x2) = dswiglu_elem(g, u, dh, sw[2 * M + H], &mut part[2 * M + H]);
                                dg[Q] = x0;
                                du[Q] = x1;
                                hs[Q] = x2;
                            });
                            let off = r * 128 + ((J as u32 ^ (r % 8)) * 16) + 2 * c0;
                            smem::st_u32(gbox + off, math::pack_bf16x2(dg[0], dg[1]));
                            smem::st_u32(ubox + off, math::pack_bf16x2(du[0], du[1]));
                            if sh_tma {
                                smem::st_u32(shb + off, math::pack_bf16x2(hs[0], hs[1]));
                            }
                        });
                    });
                    fence::proxy_async_shared_cta();
                    sync::named_sync(bar, 128);
                    if leader {
                        tma::store_2d(p.map_c as *const u8, col_b as i32, row0h as i32, gbox);
                        tma::store_2d(p.map_c as *const u8, (n + col_b) as i32, row0h as i32, ubox);
                        if sh_tma {
                            tma::store_2d(p.map_sh as *const u8, col_b as i32, row0h as i32, shb);
                        }
                        tma::commit_group();
                        // the tile's TMA batch i + 2 into the slot just stored from, once the store has read it
                        if i + 2 < ntma {
                            tma::wait_group_read::<0>();
                            z_load_batch(p, ti, zst, zbar, q + 2, nb, i + 2);
                        }
                    }
                    q += 1;
                }
            });
        } else if row0h < ti.row_end {
            let z = p.z as *const u32;
            let dz = p.c as *mut u32;
            crate::unroll!(H in [0, 1] {
                let row = row0h + if H == 0 { r0 } else { r1 };
                if row < ti.row_end {
                    let s = sw[2 * M + H];
                    let zrow = row * 2 * n;
                    // 32 columns (4 fragment groups) a batch: the 8 loads of g and u are issued together, then
                    // used, so the epilogue waits for memory 4 times per row instead of 16 (this path is only the
                    // partial 64-row halves at an expert's end; 16 loads at once made ptxas spill)
                    crate::unroll!(B in [0, 1, 2, 3] {
                        let col_b = n0 + 32 * B as u32;
                        if col_b < n {
                            let mut gp = [0u32; 4];
                            let mut up = [0u32; 4];
                            crate::unroll!(J in [0, 1, 2, 3] {
                                let col = col_b + 8 * J as u32 + c0;
                                gp[J] = *z.add(((zrow + col) / 2) as usize);
                                up[J] = *z.add(((zrow + n + col) / 2) as usize);
                            });
                            crate::unroll!(J in [0, 1, 2, 3] {
                                let col = col_b + 8 * J as u32 + c0;
                                let mut dg = [0f32; 2];
                                let mut du = [0f32; 2];
                                let mut hs = [0f32; 2];
                                crate::unroll!(Q in [0, 1] {
                                    let g = math::bf16_to_f32((gp[J] >> (16 * Q)) as u16);
                                    let u = math::bf16_to_f32((up[J] >> (16 * Q)) as u16);
                                    let dh = a[4 * (4 * B + J) + 2 * H + Q];
                                    let (x0, x1, x2) = dswiglu_elem(g, u, dh, s, &mut part[2 * M + H]);
                                    dg[Q] = x0;
                                    du[Q] = x1;
                                    hs[Q] = x2;
                                });
                                *dz.add(((zrow + col) / 2) as usize) = math::pack_bf16x2(dg[0], dg[1]);
                                *dz.add(((zrow + n + col) / 2) as usize) = math::pack_bf16x2(du[0], du[1]);
                                if p.sh != 0 {
                                    *sh.add(((row * n + col) / 2) as usize) = math::pack_bf16x2(hs[0], hs[1]);
                                }
                            });
                        }
                    });
                }
            });
        }
    });
    // the four threads of a quad hold the same rows: reduce, then lane % 4 == 0 writes (uniform shuffles)
    crate::unroll!(I in [0, 1, 2, 3] {
        let mut v = part[I];
        v += f32::from_bits(crate::ptx::warp::shfl_xor(v.to_bits(), 1));
        v += f32::from_bits(crate::ptx::warp::shfl_xor(v.to_bits(), 2));
        let row = ti.row0 + 64 * (I as u32 / 2) + r0 + 8 * (I as u32 % 2);
        if regs::tid() % 4 == 0 && row < ti.row_end {
            *(p.partial as *mut f32).add((row * p.n_tiles + ti.n_tile) as usize) = v;
        }
    });
    q
}

/// SwiGLU-backward epilogue (see `store_dswiglu`), B_e stored [K, N] (W2_e: K = H, N = I). 384 threads,
/// DSW_SMEM_BYTES of dynamic shared memory (a 3-stage ring and the z staging).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, true, false, DSW_STAGES, 0, false, false, false, false>(&p);
}

/// As `grouped_gemm_bt_dswiglu`, launched in clusters of 2 CTAs (`.reqnctapercluster 2, 1, 1`; an even grid):
/// the two CTAs take n-tiles 2j and 2j + 1 of the same m-tile in lock step and CTA 0 loads their shared A (dy
/// rows) once, multicast into both (a quarter less L2 -> SM traffic). n_tiles must be even.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_dswiglu_mc(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, true, false, DSW_STAGES, 1, false, false, false, false>(&p);
}

/// Row-scattered bf16 epilogue (`store_scatter`): C row row_slot[r] = (A_r . B_e^T) times w[row_slot[r]] (w
/// optional), B K-major. 384 threads, SMEM_BYTES of dynamic shared memory; grid <= the SM count.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16_scatter(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 0, true, false, false, false>(&p);
}

/// As `grouped_gemm_bf16_scatter`, with the run-time tile counter (see `grouped_gemm_bt_bf16_dyn`): the
/// expert-parallel layer's GEMM2 on the walk its other GEMMs take.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16_scatter_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 0, true, false, true, false>(&p);
}

/// Plain bf16 epilogue. 384 threads, SMEM_BYTES of dynamic shared memory; grid <= the SM count.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 0, false, false, false, false>(&p);
}

/// As `grouped_gemm_bf16` in clusters of 2 CTAs (`.reqnctapercluster 2, 1, 1`, an even grid): n-tiles 2j and 2j + 1 of one
/// m-tile in lock step, CTA 0 loading their shared A once, multicast into both. n_tiles must be even.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16_mc(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 1, false, false, false, false>(&p);
}

/// As `grouped_gemm_bf16` in clusters of 2 CTAs sharing B: m-tiles 2i and 2i + 1 of one n-tile in lock step, each CTA loading
/// half of B into both when the two m-tiles are one expert's (else each its whole B); a ghost second m-tile past
/// the last runs its peer's tile and stores nothing.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16_mcb(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 2, false, false, false, false>(&p);
}

/// Plain bf16 epilogue, B_e stored [K, N] (map_b over [E * K, N], box 64 x 64). 384 threads, SMEM_BYTES.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 0, false, false, false, false>(&p);
}

/// As `grouped_gemm_bt_bf16` with the side copy: warps 1..3 of the producer warpgroup copy the launch's rows of
/// `a_rows` (`copy_cols` bf16 a row, token row_slot[r] / top_k) into `a_copy` while the GEMM runs, counted on
/// `arrive`, waited for by nobody (the backward's dx copying x's rows for dW1 with `Gather::InProducer`). The static
/// walk. 384 threads, SMEM_BYTES of dynamic shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16_cpx(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 0, false, true, false, true>(&p);
}

/// As `grouped_gemm_bt_bf16_cpx` with the run-time tile walk of `grouped_gemm_bt_bf16_dyn` (the counter `p.sched`,
/// zeroed before the launch). The movers' share of the side copy stays the static one (m-tile m's rows split over
/// the blocks that own its tiles in the static walk): no tile waits for those rows, so which block computes a tile
/// does not matter to them.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16_cpx_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 0, false, true, true, true>(&p);
}

/// As `grouped_gemm_bt_bf16`, its tiles taken at run time from the counter `p.sched` (zeroed before the launch)
/// instead of every grid-th: the tiles in flight stay the next `grid` of the order, so the experts whose
/// weights are being read stay few however the blocks' paces drift (`MEGAMOE_GEMM_SCHED=dynamic`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 0, false, false, true, false>(&p);
}

/// As `grouped_gemm_bf16`, with the run-time tile counter (see `grouped_gemm_bt_bf16_dyn`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bf16_dyn(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, false, false, false, STAGES, 0, false, false, true, false>(&p);
}

/// As `grouped_gemm_bt_bf16` in clusters of 2 CTAs (`.reqnctapercluster 2, 1, 1`, an even grid): n-tiles 2j and 2j + 1 of one
/// m-tile in lock step, CTA 0 loading their shared A once, multicast into both. n_tiles must be even.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16_mc(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 1, false, false, false, false>(&p);
}

/// As `grouped_gemm_bt_bf16` in clusters of 2 CTAs sharing B: m-tiles 2i and 2i + 1 of one n-tile in lock step, each CTA loading
/// half of B into both when the two m-tiles are one expert's (else each its whole B); a ghost second m-tile past
/// the last runs its peer's tile and stores nothing.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_bt_bf16_mcb(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<false, true, false, false, STAGES, 2, false, false, false, false>(&p);
}

/// SwiGLU epilogue (B = W1 [E, 2I, H], n = I). 384 threads, SMEM_BYTES of dynamic shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<true, false, false, false, STAGES, 0, false, false, false, false>(&p);
}

/// As `grouped_gemm_swiglu` in clusters of 2 CTAs (`.reqnctapercluster 2, 1, 1`, an even grid): n-tiles 2j and 2j + 1 of one
/// m-tile in lock step, CTA 0 loading their shared A once, multicast into both. n_tiles must be even.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_mc(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<true, false, false, false, STAGES, 1, false, false, false, false>(&p);
}

/// As `grouped_gemm_swiglu` in clusters of 2 CTAs sharing B: m-tiles 2i and 2i + 1 of one n-tile in lock step, each CTA loading
/// half of B into both when the two m-tiles are one expert's (else each its whole B); a ghost second m-tile past
/// the last runs its peer's tile and stores nothing.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_mcb(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<true, false, false, false, STAGES, 2, false, false, false, false>(&p);
}

/// As `grouped_gemm_swiglu`, with the gather of A overlapped (`a_copy`, `arrive`, `a_rows`, `row_slot`, `top_k`,
/// `error`, `timeout_ns`): the producer warpgroup's warps 1..3 copy the rows of x into `a_copy` (the rows `map_a`
/// covers) while the GEMM runs ([`move_rows`]) and the TMA thread loads an m-tile's A once its rows are counted.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_mv(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<true, false, false, false, STAGES, 0, false, true, false, false>(&p);
}

/// SwiGLU epilogue with A gathered from the tokens (`a_rows`, `row_slot`, `top_k`: no gathered copy of x).
/// 384 threads, SMEM_BYTES of dynamic shared memory.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_gemm_swiglu_gather(p: GroupedGemm) {
    crate::kernels::pdl_entry();
    grouped_gemm::<true, false, false, true, STAGES, 0, false, false, false, false>(&p);
}
