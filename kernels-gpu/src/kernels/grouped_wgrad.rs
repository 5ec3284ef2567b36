//! K-grouped weight-gradient GEMM: for every expert e, C_e[M, N] (+)= A[rows_e, M]^T . B[rows_e, N], the
//! contraction over the expert's own rows offsets[e]..offsets[e + 1] (read on the device; any count, 0 too).
//!
//! Same block as the M-grouped engine (1 producer + 2 consumer warpgroups, 4-stage TMA ring of 48 KiB): a
//! stage holds 64 rows (K) of A (two 64 x 64 boxes, M-major: 128 M) and of B (four boxes: 256 N). Both
//! operands are MN-major (imm-trans-a = imm-trans-b = 1; descriptors LBO = 8192 B between 64-wide atoms,
//! SBO = 1024 B between 8-row K groups). Both are loaded through tensor maps of the expert's own rows
//! (`wgrad_expert_maps`, launched just before): in an expert's last, partial k-tile the copy engine fills the rows
//! past its end with zeros, so the next expert's rows (values or NaN) are never read and nothing is cleared in
//! shared memory. Tiles: (expert, m-tile, n-tile), persistent over the grid, in the order the
//! producer picks (a static round robin, or a grid-wide counter with `p.sched`: the tiles of an expert cost its
//! rows, so skewed routing leaves a static schedule unbalanced) and hands the consumers through a tile queue
//! in shared memory. Epilogue: f32 (`grouped_wgrad_f32*`) or bf16 (`grouped_wgrad_bf16*`, half the
//! bytes: the output PyTorch's layer gives bf16 weights) through shared memory and the copy engine (TMA stores,
//! or TMA reduce-adds for gradient accumulation), overlapping the next tile's main loop; one owner per element.
//! When the routing error word is set the kernel returns at entry: C is neither overwritten nor added to.
use crate::desc::{Layout, SmemDesc};
use crate::kernels::combine::token_chunk;
use crate::kernels::grouped_gemm::BK;
use crate::kernels::routing_failed;
use crate::params::{Combine, WgradGemm};
use crate::pipeline::{PairChannel, Ring, TileQueue, TileWalk, PAIR_Q};
use crate::ptx::{cluster, cp_async, fence, global, math, mbarrier, regs, smem, sync, tma, wgmma};
use crate::scheduler::{busiest_rank, FastDiv};

/// Pipeline depth.
const STAGES: u32 = crate::kernels_host::WGRAD_STAGES;
const BOX: u32 = 64 * 64 * 2;
const A_BYTES: u32 = 2 * BOX;
const STAGE_BYTES: u32 = 6 * BOX;
/// One staging box of the epilogue: one warp's 16 rows x 32 f32 columns (128 bytes a row, 128-byte swizzle).
pub(crate) const C_BOX: u32 = crate::kernels_host::WGRAD_C_BOX.0 * crate::kernels_host::WGRAD_C_BOX.1 * 4;
/// The epilogue's staging: two boxes per consumer warp, after the ring.
const STAGING: u32 = STAGES * STAGE_BYTES;
const _: () = assert!(STAGING == crate::kernels_host::WGRAD_RING, "host and kernel agree on the ring");
/// The ring's barriers, after the 16 staging boxes (the one name the layout check and the kernel share: until
/// 2026-12-03 the kernel put them at STAGING + 4 C_BOX, inside consumer warp 6's first box).
const RING_AT: u32 = STAGING + 16 * C_BOX;
/// Slots of the tile queue (the producer runs at most a ring's depth of non-empty tiles ahead).
const QUEUE: u32 = crate::kernels_host::WGRAD_QUEUE;
/// The tile queue's barriers and slots, after the ring's barriers.
const QUEUE_AT: u32 = RING_AT + Ring::<STAGES>::BYTES;
/// Experts the run-time schedule takes busiest first (more: in expert order).
pub(crate) const SORT_MAX: u32 = crate::kernels_host::WGRAD_SORT_MAX;
const _: () = assert!(SORT_MAX <= crate::kernels_host::GEMM_THREADS, "one thread an expert ranks them");
const _: () = assert!(QUEUE_AT % 8 == 0, "mbarriers are 8-byte aligned");
/// The experts busiest first (u32 [SORT_MAX]), then their row counts (u32 [SORT_MAX]), after the queue.
const ORDER_AT: u32 = QUEUE_AT + TileQueue::<QUEUE>::BYTES;
/// The cluster forms' channel of run-time tile indices (leader to peer), after the ranking.
const CHAN_AT: u32 = ORDER_AT + 8 * SORT_MAX;
const _: () = assert!(CHAN_AT % 8 == 0, "mbarriers are 8-byte aligned");
/// The gathering producer's tile index (`_ga` kernels: u32 [2], by tile parity), after the channel.
const SLOT_AT: u32 = CHAN_AT + PairChannel::<PAIR_Q>::BYTES;
const _: () = assert!(SLOT_AT + 16 == crate::kernels_host::WGRAD_SMEM, "host and kernel agree on the shared memory");
const _: () = assert!(STAGING % 1024 == 0 && C_BOX % 1024 == 0, "128-byte swizzle needs 1024-byte aligned boxes");
const _: () = assert!(crate::kernels_host::WGRAD_SMEM <= 232448, "sm_90: at most 227 KiB of shared memory");
const _: () = assert!(
    C_BOX == crate::kernels_host::WGRAD_C_BOX_BF16.0 * crate::kernels_host::WGRAD_C_BOX_BF16.1 * 2,
    "the bf16 epilogue's boxes fill the same staging"
);

struct Tile {
    e: u32,
    r0: u32,
    r1: u32,
    mt: u32,
    nt: u32,
}

#[inline(always)]
unsafe fn tile_info(p: &WgradGemm, tile: u32) -> Tile {
    let t = tile_coords(p, tile);
    let off = p.offsets as *const u32;
    let (r0, r1) = expert_rows(*off.add(t.e as usize), *off.add(t.e as usize + 1), p.rows_max);
    Tile { r0, r1, ..t }
}

/// The tile's expert, m-tile and n-tile (its rows left empty: [`tile_info`] reads them).
#[inline(always)]
fn tile_coords(p: &WgradGemm, tile: u32) -> Tile {
    let per = p.m_tiles * p.n_tiles;
    Tile { e: tile / per, r0: 0, r1: 0, mt: (tile % per) / p.n_tiles, nt: tile % p.n_tiles }
}

/// An expert's rows r0..r1 from its offsets, inside a buffer of `rows_max` rows: r1 at most rows_max, r0 at most
/// r1 (offsets as promised are left as they are; past the buffer or decreasing, the expert gets the rows that
/// are inside, or none). `wgrad_expert_maps` points the expert's tensor maps at the same rows, and the
/// contraction's k-tiles are bounded by them.
#[inline(always)]
pub(crate) fn expert_rows(r0: u32, r1: u32, rows_max: u32) -> (u32, u32) {
    let r1 = r1.min(rows_max);
    (r0.min(r1), r1)
}

/// 384 threads, WGRAD_SMEM bytes of dynamic shared memory, grid <= the SM count.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<false, false, false>(&p);
}

/// As `grouped_wgrad_f32`, and the producer warpgroup's warps 1..3 run `p.combine` meanwhile ([`combine`]).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_mv(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<true, false, false>(&p);
}

/// As `grouped_wgrad_f32` with C in bf16 (each element rounded once from the f32 accumulator; with
/// `accumulate`, the copy engine's bf16 add into C).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<false, true, false>(&p);
}

/// As `grouped_wgrad_bf16`, with the combine of `grouped_wgrad_f32_mv`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_mv(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<true, true, false>(&p);
}

/// As `grouped_wgrad_f32` in 2-CTA clusters (`p.clusters`): the two CTAs of a cluster take m-tiles 2i and 2i + 1
/// of one expert and n-tile, each loading its own A and half of the shared B into both (TMA multicast); the pairs
/// busiest expert first, statically or (`p.sched`) at run time: the leader takes the counter's next index and
/// hands it to its peer. An even number of m-tiles (`p.clusters`: the host's check).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<false, false, true>(&p);
}

/// `grouped_wgrad_f32_mv` in 2-CTA clusters (as `grouped_wgrad_f32_mc`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_mv_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<true, false, true>(&p);
}

/// `grouped_wgrad_bf16` in 2-CTA clusters (as `grouped_wgrad_f32_mc`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<false, true, true>(&p);
}

/// `grouped_wgrad_bf16_mv` in 2-CTA clusters (as `grouped_wgrad_f32_mc`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_mv_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad::<true, true, true>(&p);
}

/// As `grouped_wgrad_f32` with A's rows gathered by the producer warpgroup ([`produce_gather`]: row r of expert e's
/// A is row `row_slot[r] / top_k` of `p.a_gather`, read by `cp.async`), so no expert-ordered copy of A exists.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_ga(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_ga::<false, false>(&p);
}

/// `grouped_wgrad_f32_ga` with C in bf16 (as `grouped_wgrad_bf16`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_ga(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_ga::<true, false>(&p);
}

/// `grouped_wgrad_f32_ga` in 2-CTA clusters (B shared by multicast as `grouped_wgrad_f32_mc`, each CTA gathering its
/// own A).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_ga_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_ga::<false, true>(&p);
}

/// `grouped_wgrad_bf16_ga` in 2-CTA clusters.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_ga_mc(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_ga::<true, true>(&p);
}

/// As `grouped_wgrad_f32` with B's rows gathered by the producer warpgroup ([`produce_gather`]: row r of expert e's
/// B is row `row_slot[r] / top_k` of `p.a_gather`, N columns, read by `cp.async`; A by TMA), so no expert-ordered
/// copy of B exists. Single CTAs only: B is what the cluster forms multicast.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_f32_gb(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_any::<false, false, false, GATHER_B>(&p);
}

/// `grouped_wgrad_f32_gb` with C in bf16 (as `grouped_wgrad_bf16`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn grouped_wgrad_bf16_gb(p: WgradGemm) {
    crate::kernels::pdl_entry();
    grouped_wgrad_any::<false, true, false, GATHER_B>(&p);
}

#[inline(always)]
unsafe fn grouped_wgrad<const MV: bool, const BF: bool, const MC: bool>(p: &WgradGemm) {
    grouped_wgrad_any::<MV, BF, MC, GATHER_NONE>(p);
}

#[inline(always)]
unsafe fn grouped_wgrad_ga<const BF: bool, const MC: bool>(p: &WgradGemm) {
    grouped_wgrad_any::<false, BF, MC, GATHER_A>(p);
}

/// Which operand the producer warpgroup gathers ([`produce_gather`]): none (the TMA producer thread), A, or B.
const GATHER_NONE: u32 = 0;
const GATHER_A: u32 = 1;
const GATHER_B: u32 = 2;

/// The weight-gradient kernels' body: `MV` the combine in the producer warpgroup's warps 1..3, `BF` bf16 C, `MC`
/// 2-CTA clusters, `G` the operand gathered by the producer warpgroup (`GATHER_A` or `GATHER_B`; no combine then:
/// its 128 threads copy; B only in single CTAs, as the cluster forms multicast B).
#[inline(always)]
unsafe fn grouped_wgrad_any<const MV: bool, const BF: bool, const MC: bool, const G: u32>(p: &WgradGemm) {
    const { assert!(!(MV && G != GATHER_NONE), "the gathering producer takes the combine's warps") };
    const { assert!(!(MC && G == GATHER_B), "the cluster forms multicast B: it is not gathered there") };
    const { assert!(G <= GATHER_B) };
    // the error word is read once, by every thread, before the first barrier: the whole block returns or none
    // (the combine then writes nothing either, as `combine_rows` would not); in a cluster both CTAs read the same
    // word, settled by an earlier kernel, so both return or neither (one alone would leave its peer waiting)
    if routing_failed(p.error) {
        return;
    }
    let base = smem::base();
    let ring = Ring::<STAGES>::at(base + RING_AT);
    let queue = TileQueue::<QUEUE>::at(base + QUEUE_AT);
    let t = regs::tid();
    // the run-time schedule hands out the experts' tiles busiest first (the last tiles taken are short); the
    // ranking by every thread, between two block barriers (uniform: kernel parameters only)
    // (the clusters' pairs too: both CTAs of a cluster rank alike, from the same offsets)
    // (a closure, as `total` below: read again by the producer after its register reallocation)
    let busiest_first = || (p.sched != 0 || MC) && p.experts <= SORT_MAX;
    if busiest_first() {
        rank_experts(p.experts, p.offsets as *const u32, base + ORDER_AT, t);
    }
    if t == 0 {
        // every lane of the 8 consumer warps gives a slot back (`pop_each_lane`: each lane releases its own read,
        // no warp barrier between the reads and one lane's arrival, which racecheck reports as a hazard)
        queue.init(8 * 32);
        if MC {
            // before `ring.init`, whose `fence.mbarrier_init` covers these barriers too
            PairChannel::<PAIR_Q>::at(base + CHAN_AT).init();
        }
        // one arrival per consumer warp (and the mbarrier-init fence for both); in a cluster both CTAs' warps
        // release each stage (half of B came from the peer, which must not overwrite it before this CTA is done)
        // (the gathering producer: thread 0's arrival with B's bytes and one per copying thread)
        ring.init_with(if G != GATHER_NONE { 1 + 128 } else { 1 }, if MC { 16 } else { 8 });
    }
    if MC {
        // the peer's barriers (ring, channel) are initialised before any multicast, remote arrival or
        // `st.async` reaches them
        cluster::sync();
    } else {
        sync::block_sync();
    }
    // read by each role after its register reallocation (a value live across it may be spilled)
    let total = || p.experts * p.m_tiles * p.n_tiles;
    if t / 128 == 0 {
        // the gathering producer holds two k-steps' row slots: 56 registers (the consumers 224)
        if G != GATHER_NONE {
            regs::setmaxnreg_dec::<56>();
        } else {
            regs::setmaxnreg_dec::<40>();
        }
        if G != GATHER_NONE {
            produce_gather::<MC, G>(p, base, ring, queue, total(), busiest_first());
        } else if t == 0 {
            produce::<MC>(p, base, ring, queue, total(), busiest_first());
        } else if MV && t >= 32 {
            combine(&p.combine, t / 32 - 1, t % 32);
        }
    } else {
        if G != GATHER_NONE {
            regs::setmaxnreg_inc::<224>();
        } else {
            regs::setmaxnreg_inc::<232>();
        }
        consume::<BF, MC, G>(p, base, ring, queue, total(), regs::warpgroup() - 1);
    }
    if MC {
        // no CTA leaves while its peer may still multicast into it or arrive on its empty barriers (every thread)
        cluster::sync();
    }
}

/// Mover warp `w` (0..3) of every block: tokens w + 3 (bid + grid i) of `c` summed as `combine_rows` sums them
/// (the same arithmetic, two slots fetched at a time: 40 registers), one token a warp at a time, 16 bytes a lane.
/// Nothing waits for it but the kernel's end; it reads rows an earlier launch wrote.
#[inline(always)]
pub(crate) unsafe fn combine(c: &Combine, w: u32, lane: u32) {
    let step = 3 * regs::nctaid();
    let mut t = w + 3 * regs::bid();
    while t < c.tokens {
        let mut ch = lane;
        while ch < c.cols / 8 {
            token_chunk::<2>(c, t, ch);
            ch += 32;
        }
        t += step;
    }
}

/// The producer thread: pushes each tile's index on the queue, then loads its stages; then an index past the
/// last (the consumers' end). Tiles: block b takes index b first, then, with `p.sched` = 0, every grid-th one
/// (a static round robin); with a scheduler (`p.sched`: a u32 counter the host zeroes before the launch) the
/// next index of a grid-wide counter (grid + 0, 1, ...), asked for once the current tile's loads are issued, so
/// a block whose tiles are short (an expert with few rows) takes more of them. With `busiest_first`
/// (`rank_experts` has run) index i is tile i % per of the expert ranked i / per (per = an expert's tiles), else
/// tile i. The weight gradients are the same bits either way (each tile is one block's, its rows in order).
#[inline(always)]
unsafe fn produce<const MC: bool>(
    p: &WgradGemm,
    base: u32,
    ring: Ring<STAGES>,
    queue: TileQueue<QUEUE>,
    total: u32,
    busiest_first: bool,
) {
    let order = if busiest_first { Some(base + ORDER_AT) } else { None };
    // MC: the walk is over pairs of m-tiles (the cluster's index, its rank the m-tile of the pair); with the
    // counter the leader takes each next index and sends it to the peer
    let chan = PairChannel::<PAIR_Q>::at(base + CHAN_AT);
    let mut walk = TileWalk::<MC>::new(total, p.m_tiles * p.n_tiles, p.n_tiles, p.sched, order, chan);
    // MC: this CTA's half of each stage's B goes to both CTAs of the cluster
    let rank = regs::bid() % 2;
    let mut it = 0u32;
    let mut j = 0u32;
    // the expert whose maps this thread acquired last (an acquire makes the copy engine fetch the map afresh:
    // once per expert, not per tile)
    let mut acquired = u32::MAX;
    loop {
        let tile = walk.tile();
        if tile >= total {
            queue.push(j, tile, 0);
            break;
        }
        // the tile's rows go with its index: the consumers start its main loop without a global load
        let ti = tile_info(p, tile);
        queue.push(j, tile, ti.r1 - ti.r0);
        j += 1;
        let kt_n = (ti.r1 - ti.r0).div_ceil(BK);
        // the expert's own maps (rows 0..rows_e from its first row; zeros past its last), as
        // `wgrad_expert_maps` wrote them just before this launch: acquired, not a cached earlier content
        let map_a = (p.expert_maps + ti.e as u64 * 256) as *const u8;
        let map_b = map_a.add(128);
        if kt_n > 0 && ti.e != acquired {
            tma::tensormap_acquire(map_a);
            tma::tensormap_acquire(map_b);
            tma::prefetch_tensormap(map_a);
            tma::prefetch_tensormap(map_b);
            acquired = ti.e;
        }
        let mut kt = 0;
        while kt < kt_n {
            let fb = ring.produce(it, STAGE_BYTES);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            let row = (kt * BK) as i32;
            tma::load_2d(st, map_a, (ti.mt * 128) as i32, row, fb);
            tma::load_2d(st + BOX, map_a, (ti.mt * 128 + 64) as i32, row, fb);
            load_b::<MC>(st, map_b, ti.nt, row, fb, rank);
            it += 1;
            kt += 1;
        }
        walk.advance();
    }
}

/// The four 64-column boxes of B of n-tile `nt` at k-row `row` into the stage at `st`, completing on `fb`; in a 2-CTA
/// cluster (`MC`) this CTA's half (`rank`'s two boxes) into both CTAs (the same offsets, each CTA's full barrier).
/// SAFETY: the producer thread; the stage free and `fb` announced with B's bytes; `map_b` the expert's map, acquired.
#[inline(always)]
unsafe fn load_b<const MC: bool>(st: u32, map_b: *const u8, nt: u32, row: i32, fb: u32, rank: u32) {
    let mut q = 0;
    while q < 4 {
        let (dst, c0) = (st + A_BYTES + q * BOX, (nt * 256 + 64 * q) as i32);
        if !MC {
            tma::load_2d(dst, map_b, c0, row, fb);
        } else if q / 2 == rank {
            tma::load_2d_mc(dst, map_b, c0, row, fb, 0b11);
        }
        q += 1;
    }
}

/// The gathering producer (`_ga` kernels: A; `_gb` kernels: B), the producer warpgroup's 128 threads: thread 0
/// walks the tiles as [`produce`] does (pushes each on the queue, loads the other operand by TMA, announcing its
/// bytes on the stage's full barrier) and hands each tile index to the others through shared memory (`SLOT_AT`, by
/// tile parity: one 128-thread barrier a tile, reached by all 128 threads, as a slot is rewritten two tiles after
/// it was read, with a barrier between); every thread copies its share of each stage's gathered operand, rows
/// t / 16 + 8 i (i < 8) of the stage's 64 (so row % 8, and with it the 128-byte swizzle, is the thread's own):
/// - A (`GATHER_A`): the 16-byte chunk t % 16 of their 256 bytes (the m-tile's 128 columns: box (t % 16) / 8,
///   chunk (t % 16) % 8 of the 128-byte swizzled row), zero-filled past the expert's end (and in a box of columns
///   past M: the last m-tile's second when M is an odd multiple of 64);
/// - B (`GATHER_B`): the 16-byte chunks t % 16 and t % 16 + 16 of their 512 bytes (the n-tile's 256 columns: boxes
///   (t % 16) / 8 and (t % 16) / 8 + 2, chunk (t % 16) % 8 of the 128-byte swizzled row, the layout of the four
///   TMA boxes), zero-filled past the expert's end and for columns past N (N a multiple of 8: whole chunks);
///
/// from row `row_slot[r] / top_k` of `p.a_gather` (r the expert-ordered row), then arrives on the full barrier when
/// its copies land (`cp.async.mbarrier.arrive.noinc`). Each thread loads the next k-step's eight `row_slot` entries
/// before the current k-step's copies, so their latency lies under a k-step. The rows are the tensor maps' rows,
/// so C is the TMA producer's bit for bit.
/// SAFETY: the 128 threads of warpgroup 0; `p.a_gather` holds the tokens' rows (of 2 M bytes for A, 2 N for B)
/// and `p.row_slot` an entry for each row below `rows_max`, each a slot below the tokens times `top_k` (the
/// routing's); `G` is `GATHER_A` or `GATHER_B`, the latter only without clusters.
#[inline(always)]
unsafe fn produce_gather<const MC: bool, const G: u32>(
    p: &WgradGemm,
    base: u32,
    ring: Ring<STAGES>,
    queue: TileQueue<QUEUE>,
    total: u32,
    busiest_first: bool,
) {
    let gb = G == GATHER_B;
    let t = regs::tid();
    let order = if busiest_first { Some(base + ORDER_AT) } else { None };
    let chan = PairChannel::<PAIR_Q>::at(base + CHAN_AT);
    let mut walk = TileWalk::<MC>::new(total, p.m_tiles * p.n_tiles, p.n_tiles, p.sched, order, chan);
    let rank = regs::bid() % 2;
    // this thread's rows (r8 + 8 i) and chunk of a stage's A (or of B's first two boxes; + 2 BOX its second
    // chunk): r8 = row % 8, so the swizzled chunk is the same for all
    let (chunk, r8) = (t % 16, t / 16);
    let dst = if gb { A_BYTES } else { 0 } + (chunk / 8) * BOX + r8 * 128 + (((chunk % 8) ^ r8) * 16);
    let x = p.a_gather as *const u8;
    let row_slot = p.row_slot as *const u32;
    let row_bytes = 2 * if gb { p.n } else { p.m } as usize;
    let per_token = FastDiv::new(p.top_k);
    let mut it = 0u32;
    let mut j = 0u32;
    let mut acquired = u32::MAX;
    loop {
        let slot = base + SLOT_AT + 4 * (j % 2);
        if t == 0 {
            smem::st_u32(slot, walk.tile());
        }
        sync::named_sync(1, 128);
        let tile = smem::ld_u32(slot);
        if tile >= total {
            if t == 0 {
                queue.push(j, tile, 0);
            }
            break;
        }
        let ti = tile_info(p, tile);
        let kt_n = (ti.r1 - ti.r0).div_ceil(BK);
        // the operand thread 0 loads by TMA: B (gathering A) or A (gathering B)
        let map = (p.expert_maps + ti.e as u64 * 256 + if gb { 0 } else { 128 }) as *const u8;
        if t == 0 {
            queue.push(j, tile, ti.r1 - ti.r0);
            if kt_n > 0 && ti.e != acquired {
                tma::tensormap_acquire(map);
                tma::prefetch_tensormap(map);
                acquired = ti.e;
            }
        }
        j += 1;
        // A: the m-tile's columns from chunk; B: the n-tile's (byte offsets in a row)
        let col = if gb { (ti.nt * 512 + chunk * 16) as usize } else { (ti.mt * 256 + chunk * 16) as usize };
        // A: the last m-tile's second box starts at column M when M is an odd multiple of 64: its columns are not
        // A's (the TMA path's box came as zeros; consumer warpgroup 1 stores nothing there), so nothing is read for
        // it. B: chunk by chunk (the tensor map's zeros past N), the second chunk 128 columns on
        let in_m = if gb { ti.nt * 256 + 8 * chunk < p.n } else { ti.mt * 128 + 64 * (chunk / 8) < p.m };
        let in_n2 = ti.nt * 256 + 128 + 8 * chunk < p.n;
        // the row_slot entries of this thread's rows of k-step kt (u32::MAX past the expert's end)
        let slots_of = |kt: u32| -> [u32; 8] {
            let mut v = [u32::MAX; 8];
            crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
                let row = ti.r0 + kt * BK + r8 + 8 * I as u32;
                if row < ti.r1 {
                    // SAFETY: row < r1 <= rows_max, and row_slot holds rows_max entries (the host clamps rows_max
                    // to the saved slots)
                    v[I] = *row_slot.add(row as usize);
                }
            });
            v
        };
        let mut cur = slots_of(0);
        let mut kt = 0;
        while kt < kt_n {
            let next = slots_of(kt + 1);
            let st = base + Ring::<STAGES>::stage(it) * STAGE_BYTES;
            ring.wait_empty(it);
            let fb = ring.full_bar(it);
            if t == 0 {
                let row = (kt * BK) as i32;
                if gb {
                    // A's two boxes by TMA: the full barrier's bytes are A's only
                    mbarrier::arrive_expect_tx(fb, A_BYTES);
                    tma::load_2d(st, map, (ti.mt * 128) as i32, row, fb);
                    tma::load_2d(st + BOX, map, (ti.mt * 128 + 64) as i32, row, fb);
                } else {
                    mbarrier::arrive_expect_tx(fb, STAGE_BYTES - A_BYTES);
                    load_b::<MC>(st, map, ti.nt, row, fb, rank);
                }
            }
            // the eight sources first (branch-free: a row past the expert's end reads 0 bytes at x), then the copies
            // back to back
            let mut src = [x; 8];
            crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
                let row = x.wrapping_add(per_token.div(cur[I] & 0x7fff_ffff) as usize * row_bytes + col);
                src[I] = if cur[I] != u32::MAX && in_m { row } else { x };
            });
            crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
                let n = if cur[I] != u32::MAX && in_m { 16 } else { 0 };
                // SAFETY: a routed slot's token is below the tokens, so its 16 bytes at col + 16 <= the row's bytes
                // (in_m) lie in a_gather; otherwise 0 bytes are read (zero fill); the stage is free (wait_empty)
                cp_async::copy16_zfill(st + dst + 1024 * I as u32, src[I], n);
            });
            if gb {
                // B's second chunk of each row, 128 columns (256 bytes) on, in boxes 2 and 3
                crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
                    let ok = cur[I] != u32::MAX && in_n2;
                    let (s2, n) = if ok { (src[I].wrapping_add(256), 16) } else { (x, 0) };
                    // SAFETY: as above (in_n2: its 16 bytes lie in the row)
                    cp_async::copy16_zfill(st + dst + 2 * BOX + 1024 * I as u32, s2, n);
                });
            }
            cp_async::mbarrier_arrive_noinc(fb);
            cur = next;
            it += 1;
            kt += 1;
        }
        if t == 0 {
            walk.advance();
        }
    }
}

/// Every thread of the block: the `experts` experts ranked by their work (`off[e + 1] - off[e]`: rows, or K
/// blocks), most first (ties: lower id first), into `order` (u32 [SORT_MAX]: order[rank] = expert), their counts
/// staged after it; thread e ranks expert e. One block barrier; the caller's next one publishes `order`.
/// SAFETY: every thread of the block (a uniform call), experts <= SORT_MAX <= the block's threads, `off` valid
/// (the routing error word was read clear).
#[inline(always)]
pub(crate) unsafe fn rank_experts(experts: u32, off: *const u32, order: u32, t: u32) {
    let counts = order + 4 * SORT_MAX;
    if t < experts {
        smem::st_u32(counts + 4 * t, *off.add(t as usize + 1) - *off.add(t as usize));
    }
    sync::block_sync();
    if t < experts {
        let rank = busiest_rank(t, experts, |f| smem::ld_u32(counts + 4 * f));
        smem::st_u32(order + 4 * rank, t);
    }
}

/// One k-tile (ring iteration `it`, the tile's k-tile `kt`) of a consumer warpgroup: wait for the stage, `KS` of its
/// four k16 wgmma (the rows past an expert's end are zeros: the steps holding only those add nothing), commit,
/// wait for the previous k-tile's, give its stage back.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn kstep<const KS: u32, const MC: bool, const G: u32>(
    ring: &Ring<STAGES>,
    base: u32,
    acc: &mut [f32; 128],
    it: u32,
    kt: u32,
    cw: u32,
    lane: u32,
) {
    ring.wait_full(it);
    if G != GATHER_NONE {
        // A (or B) arrived by `cp.async` (the generic proxy): made visible to the tensor cores' reads
        fence::proxy_async_shared_cta();
    }
    let st = crate::ptx::warp::uniform(base + Ring::<STAGES>::stage(it) * STAGE_BYTES);
    wgmma::fence();
    let mut ks = 0;
    while ks < KS {
        let da = SmemDesc::new(st + cw * BOX + ks * 2048, BOX, 1024, Layout::Swizzle128B);
        let db = SmemDesc::new(st + A_BYTES + ks * 2048, BOX, 1024, Layout::Swizzle128B);
        wgmma::m64n256k16_f32_bf16_ss_tt(acc, da.0, db.0, (kt > 0 || ks > 0) as u32);
        ks += 1;
    }
    wgmma::commit_group();
    wgmma::wait_group::<1>();
    if kt > 0 {
        release::<MC>(ring, it, lane);
    }
}

/// Consumer warp: give back the stage of iteration `it - 1` (in a cluster to both CTAs: lanes 0 and 1).
#[inline(always)]
unsafe fn release<const MC: bool>(ring: &Ring<STAGES>, it: u32, lane: u32) {
    if MC {
        if lane < 2 {
            ring.release_prev_cluster(it, lane);
        }
    } else if lane == 0 {
        ring.release_prev(it);
    }
}

#[inline(always)]
unsafe fn consume<const BF: bool, const MC: bool, const G: u32>(
    p: &WgradGemm,
    base: u32,
    ring: Ring<STAGES>,
    queue: TileQueue<QUEUE>,
    total: u32,
    cw: u32,
) {
    let lane = regs::tid() % 32;
    if lane == 0 {
        // C's map: each warp's lane 0 issues its boxes' stores (`box_out`)
        crate::kernels::acquire_host_map(p.map_c);
    }
    let mut it = 0u32;
    let mut j = 0u32;
    loop {
        let (tile, rows) = queue.pop_each_lane(j);
        j += 1;
        if tile >= total {
            break;
        }
        // the expert's rows r0..r1 as the producer read them (only their count is used here)
        let ti = Tile { r0: 0, r1: rows, ..tile_coords(p, tile) };
        let kt_n = (ti.r1 - ti.r0).div_ceil(BK);
        let mut acc = [0f32; 128];
        let mut kt = 0;
        while kt < kt_n {
            // rows past the expert's end arrive as zeros (its maps end there): nothing to clear, and the k16 steps
            // holding none of its rows (in its last, partial k-tile) add nothing, so they are not issued: one
            // whole k-step per count (a wgmma under a branch inside a k-step makes ptxas serialise them all, C7520)
            match (ti.r1 - ti.r0 - kt * BK).min(BK).div_ceil(16) {
                1 => kstep::<1, MC, G>(&ring, base, &mut acc, it, kt, cw, lane),
                2 => kstep::<2, MC, G>(&ring, base, &mut acc, it, kt, cw, lane),
                3 => kstep::<3, MC, G>(&ring, base, &mut acc, it, kt, cw, lane),
                _ => kstep::<4, MC, G>(&ring, base, &mut acc, it, kt, cw, lane),
            }
            it += 1;
            kt += 1;
        }
        // unconditional (a no-op with nothing pending): a wait only on some paths makes ptxas insert its own
        // in the others and serialise every wgmma of the kernel (C7518)
        wgmma::wait_group::<0>();
        wgmma::fence_operand_128(&mut acc);
        if kt_n > 0 {
            release::<MC>(&ring, it, lane);
        }
        let staging = base + STAGING + (regs::tid() / 32 - 4) * 2 * C_BOX;
        let row0 = ti.mt * 128 + cw * 64;
        // a warpgroup whose rows start at or past M (M a multiple of 64, not of 128) stores nothing (uniform in it)
        if row0 < p.m {
            let out = COut { map: p.map_c, n: p.n, accumulate: p.accumulate != 0 };
            let y = (ti.e * p.m + row0 + 16 * ((regs::tid() % 128) / 32)) as i32;
            if BF {
                store_bf16(&out, &acc, y, ti.nt * 256, staging);
            } else {
                store(&out, &acc, y, ti.nt * 256, staging);
            }
        }
    }
    // the staging must not be freed (block exit) before the copy engine has read it: every warp's lane 0
    // issued stores
    if lane == 0 {
        tma::wait_group::<0>();
    }
}

/// Where a weight-gradient epilogue puts its tile: C's tensor map (boxes of `WGRAD_C_BOX` f32 or
/// `WGRAD_C_BOX_BF16` bf16, 128-byte swizzle), C's columns, and whether the copy engine adds instead of storing.
pub(crate) struct COut {
    pub map: u64,
    pub n: u32,
    pub accumulate: bool,
}

/// The epilogue: a warpgroup's 64 x (NA / 2) f32 accumulators (the wgmma m64nNk fragment: `acc[4 j + 2 h + c]` is
/// row 8 h + lane / 4 of its warp's 16, column 8 j + 2 (lane % 4) + c) go to C through shared memory, each warp's 16
/// rows (C row `y` on) one 16 x 32 box at a time from column `col0` (128-byte swizzle: 16-byte chunk c of row r at
/// chunk c ^ (r % 8)), stored (or, with `accumulate`, added: `cp.reduce.async.bulk.tensor .add`) by the copy
/// engine while the warp goes on. Each warp works alone (its lane 0 issues and waits; `bar.warp.sync` orders its
/// lanes' staging writes around that), so no warp waits for the others of its warpgroup between boxes. Two staging
/// boxes per warp (at `staging`) alternate; before one is rewritten, its previous store must have read it
/// (`wait_group.read 1`; `.read 0` at a tile's first box: the previous tile may have ended on either box; issued a
/// whole main loop ago, those stores have read). The fragment stores are free of bank conflicts: an 8-byte store
/// is served per half-warp (rows q = 0..3 or 4..7 of the box, four lanes each), and lanes of odd rows write column
/// group J ^ 2 when the others write J, so the 16 lanes cover 32 distinct banks (rows q and q ^ 1 would otherwise
/// meet in the same two swizzled chunks). Columns past N are clipped by the tensor map.
#[inline(always)]
pub(crate) unsafe fn store<const NA: usize>(out: &COut, acc: &[f32; NA], y: i32, col_base: u32, staging: u32) {
    let lane = regs::tid() % 32;
    let q = lane / 4; // the first of this lane's two rows (q, q + 8) of the warp's 16
    let odd = q % 2 == 1;
    crate::unroll!(B in [0, 1, 2, 3, 4, 5, 6, 7] {
        let col0 = col_base + 32 * B as u32;
        if B < NA / 16 && col0 < out.n {
            // uniform: every thread of the warpgroup sees the same col0
            let buf = staging + (B as u32 % 2) * C_BOX;
            box_out(out, B == 0, buf, col0, y, || {
                crate::unroll!(J in [0, 1, 2, 3] {
                    crate::unroll!(H in [0, 1] {
                        let row = q + 8 * H as u32;
                        // this lane's column group: J, or J ^ 2 on odd rows (a select, not an indexed register)
                        let jl = if odd { J as u32 ^ 2 } else { J as u32 };
                        let chunk = 2 * jl + (lane % 4) / 2;
                        let addr = buf + row * 128 + ((chunk ^ (row % 8)) * 16) + (lane % 2) * 8;
                        let (a, b) = (4 * (4 * B + J) + 2 * H, 4 * (4 * B + (J ^ 2)) + 2 * H);
                        let v0 = if odd { acc[b] } else { acc[a] };
                        let v1 = if odd { acc[b + 1] } else { acc[a + 1] };
                        smem::st_v2(addr, v0.to_bits(), v1.to_bits());
                    });
                });
            });
        }
    });
}

/// One staging box of a warp's epilogue: wait until the box's previous store has read it (`.read 0` at a
/// tile's first box), let `fill` write it (each lane its fragment), then lane 0 hands it to the copy engine:
/// stored at (`col0`, `y`) or, with `accumulate`, added there.
#[inline(always)]
unsafe fn box_out(out: &COut, first: bool, buf: u32, col0: u32, y: i32, fill: impl FnOnce()) {
    let leader = regs::tid() % 32 == 0;
    if leader {
        if first {
            tma::wait_group_read::<0>();
        } else {
            tma::wait_group_read::<1>();
        }
    }
    sync::warp_sync();
    fill();
    fence::proxy_async_shared_cta();
    sync::warp_sync();
    if leader {
        let map = out.map as *const u8;
        if out.accumulate {
            tma::reduce_add_2d(map, col0 as i32, y, buf);
        } else {
            tma::store_2d(map, col0 as i32, y, buf);
        }
        tma::commit_group();
    }
}

/// The bf16 epilogue, as [`store`] with each warp's 16 rows one 16 x 64 box at a time (the same 2 KiB each):
/// lane (q = lane / 4) writes its bf16 pair of rows q and q + 8 at columns 8 J + 2 (lane % 4) of column group J,
/// 16-byte chunk J ^ (row % 8) of the 128-byte row. A 4-byte store is served per warp; rows q = 0..7 put their
/// four lanes in eight distinct chunks, so the 32 lanes cover 32 distinct banks. With `accumulate` the copy engine
/// adds the bf16-rounded tile to C.
#[inline(always)]
pub(crate) unsafe fn store_bf16<const NA: usize>(out: &COut, acc: &[f32; NA], y: i32, col_base: u32, staging: u32) {
    let lane = regs::tid() % 32;
    let q = lane / 4;
    crate::unroll!(B in [0, 1, 2, 3] {
        let col0 = col_base + 64 * B as u32;
        if B < NA / 32 && col0 < out.n {
            // uniform: every thread of the warpgroup sees the same col0
            let buf = staging + (B as u32 % 2) * C_BOX;
            box_out(out, B == 0, buf, col0, y, || {
                crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
                    crate::unroll!(H in [0, 1] {
                        let row = q + 8 * H as u32;
                        let addr = buf + row * 128 + (((J as u32) ^ (row % 8)) * 16) + (lane % 4) * 4;
                        // accumulator n-group 8 B + J: columns 64 B + 8 J + 2 (lane % 4) + {0, 1}
                        let a = 4 * (8 * B + J) + 2 * H;
                        smem::st_u32(addr, math::pack_bf16x2(acc[a], acc[a + 1]));
                    });
                });
            });
        }
    });
}

/// dtopk[slot] = sum over n-tiles of partial[slot_row[slot]], 0 for masked slots (fixed order); nothing when
/// the routing error word is set. 256 threads, no barriers.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn dtopk_reduce(p: crate::params::DtopkReduce) {
    crate::kernels::pdl_entry();
    let slot = regs::bid() * 256 + regs::tid();
    if slot >= p.slots || routing_failed(p.error) {
        return;
    }
    let row = *(p.slot_row as *const i32).add(slot as usize);
    let mut s = 0f32;
    if row >= 0 {
        let part = (p.partial as *const f32).add(row as usize * p.n_tiles as usize);
        let mut i = 0;
        while i < p.n_tiles {
            s += *part.add(i as usize);
            i += 1;
        }
    }
    *(p.dtopk as *mut f32).add(slot as usize) = s;
}
