//! The forward's two expert GEMMs in one persistent launch (docs/FUSED.md, step 1): GEMM1 + SwiGLU and GEMM2 of
//! the M-grouped engine on the engine's block unchanged (a producer warpgroup whose thread 0 issues TMA, two
//! cooperative consumer warpgroups, the `STAGES`-stage ring of 48 KiB stages, the staging boxes), their tiles
//! walked in one dependency order ([`crate::scheduler::fused_item`]: the GEMM1 tiles of m-tile s, then the GEMM2
//! tiles of m-tile s - lag). Both roles of block b take items b, b + grid, ... in order.
//!
//! Signals: a consumer warpgroup counts its half of a GEMM1 tile on `ready[m]` after the main loop of its next
//! item (so that it never waits for the copy engine: counting right after the epilogue measured 2% slower): its
//! leader waits until its TMA stores are written (`cp.async.bulk.wait_group 0`, long done by then; stores from
//! registers were fenced by every thread and barriered after the epilogue), then adds 1 with release semantics
//! at GPU scope. It defers only when the walk's head (min(lag, m-tiles)) is at least `scheduler::fused_lag_min`,
//! so that the next item cannot depend on the count (a GEMM1 tile, or a GEMM2 tile of an earlier m-tile; by
//! induction on the m-tile every count is made), else counts at once (an unconditional deferral deadlocked on
//! the H200 when the walk had fewer m-tiles than the lag). Before loading a GEMM2 tile's A (the h rows of m-tile m) the producer waits with
//! acquire loads until `ready[m]` = 2 n1 (two warpgroups per GEMM1 tile), bounded by `timeout_ns` of
//! `%globaltimer`: on expiry it sets the error word to [`FUSED_TIMEOUT`] and every later wait of the launch
//! returns at once (the host reports `Error::Timeout`; the output is not to be used). Proxy fences on both sides
//! order the copy engine's writes and reads of h around the generic-proxy counter.
//!
//! Deadlock freedom: every block is resident (grid <= SMs at one block per SM: the host checks). A producer
//! waiting at a GEMM2 item has issued every load of its block's earlier items, so its consumers finish them; the
//! earliest unfinished item's inputs come earlier in the order, so they are finished and its block makes
//! progress. Determinism: each tile runs the main loop and epilogue of the separate kernels on the same data, so
//! the outputs are bitwise those of `grouped_gemm_swiglu` then `grouped_gemm_bf16`.
use crate::kernels::grouped_gemm::{
    load_stage, m_tiles, mainloop_coop, move_rows, sched_copy, store_bf16, store_swiglu, t_lane, tile_info_e,
    wait_count, wait_rows, BK, C_BOX, MV_CONSUMER_REGS, MV_PRODUCER_REGS, STAGES, STAGE_BYTES,
};
use crate::kernels::routing_failed;
use crate::params::{FusedFfn, GroupedGemm};
use crate::pipeline::Ring;
use crate::ptx::{fence, regs, smem, sync, tma};
use crate::scheduler::{fused_gemm1_item, fused_item, fused_items, fused_lag_min, mover_part, FusedKind, MTile};

/// 384 threads, `grouped_gemm::SMEM_BYTES` of dynamic shared memory, grid <= the SM count (all blocks resident).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ffn_fused_fwd(p: FusedFfn) {
    crate::kernels::pdl_entry();
    fused::<false>(&p);
}

/// As `ffn_fused_fwd`, with GEMM1's gather of x overlapped (`g1.a_copy` etc., as `grouped_gemm_swiglu_mv`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ffn_fused_fwd_mv(p: FusedFfn) {
    crate::kernels::pdl_entry();
    fused::<true>(&p);
}

#[inline(always)]
unsafe fn fused<const MV: bool>(p: &FusedFfn) {
    // every thread reads the word, then the block agrees (one barrier): this launch's own bounded waits can set
    // the same word (`FUSED_TIMEOUT`) while a late block starts, and warps that disagreed would leave the others
    // waiting on barriers nobody fills (a helper's audit, twenty-ninth session)
    if sync::block_count(routing_failed(p.error)) != 0 {
        return;
    }
    let base = smem::base();
    let staging = base + STAGES * STAGE_BYTES;
    let ring = Ring::<STAGES>::at(staging + 4 * C_BOX);
    let t = regs::tid();
    if t == 0 {
        ring.init(8); // one arrival per consumer warp
    }
    // g1 and g2 share the routing: one copy of the offsets serves both
    sched_copy::<false>(&p.g1);
    sync::block_sync();
    // each role reads the m-tile count after its register reallocation (a value live across it is spilled)
    if t / 128 == 0 {
        if MV {
            regs::setmaxnreg_dec::<MV_PRODUCER_REGS>();
        } else {
            regs::setmaxnreg_dec::<40>();
        }
        if t == 0 {
            produce::<MV>(p, base, ring);
        } else if MV && t >= 32 {
            // warps 1..3: the rows of x this block's GEMM1 items need, copied while the GEMMs run; item (GEMM1,
            // m, n) is block (fused_gemm1_item(m) + n) % grid's
            let (b, grid) = (regs::bid(), regs::nctaid());
            let m_total = m_tiles(&p.g1);
            let (n1, n2, lag) = (p.g1.n_tiles, p.g2.n_tiles, p.lag);
            let part_of = |m: u32| mover_part(fused_gemm1_item(m, m_total, n1, n2, lag), b, grid);
            move_rows::<false>(&p.g1, n1, part_of, t / 32 - 1, t % 32, p.g1.k);
        }
    } else {
        if MV {
            regs::setmaxnreg_inc::<MV_CONSUMER_REGS>();
        } else {
            regs::setmaxnreg_inc::<232>();
        }
        consume(p, base, ring, staging, regs::warpgroup() - 1);
    }
}

/// (m-tiles, items) of the launch (the m-tiles bounded by g1's `rows_max`: `ready` holds an entry for each).
#[inline(always)]
unsafe fn items(p: &FusedFfn) -> (u32, u32) {
    let m_total = m_tiles(&p.g1);
    (m_total, fused_items(m_total, p.g1.n_tiles, p.g2.n_tiles))
}

/// The tile of item (m, n) of one of the GEMMs (the expert count read opaquely: see [`regs::opaque`]).
#[inline(always)]
unsafe fn tile(g: &GroupedGemm, m: u32, n: u32) -> MTile {
    tile_info_e::<false>(g, m * g.n_tiles + n, regs::opaque(g.experts))
}

/// The producer's loads of one tile of `g` (SwiGLU: GEMM1's B layout).
#[inline(always)]
unsafe fn load_tile<const SWIGLU: bool>(g: &GroupedGemm, ti: &MTile, base: u32, ring: &Ring<STAGES>, it: &mut u32) {
    let mut kt = 0;
    while kt < g.k / BK {
        let fb = ring.produce(*it, STAGE_BYTES);
        load_stage::<SWIGLU, false, false, 0>(g, ti, base + Ring::<STAGES>::stage(*it) * STAGE_BYTES, fb, kt, 0, false);
        *it += 1;
        kt += 1;
    }
}

#[inline(always)]
unsafe fn produce<const MV: bool>(p: &FusedFfn, base: u32, ring: Ring<STAGES>) {
    let (m_total, total) = items(p);
    crate::kernels::acquire_prefetch(p.g1.map_a as *const u8);
    crate::kernels::acquire_prefetch(p.g1.map_b as *const u8);
    crate::kernels::acquire_prefetch(p.g2.map_a as *const u8);
    crate::kernels::acquire_prefetch(p.g2.map_b as *const u8);
    let (n1, n2) = (p.g1.n_tiles, p.g2.n_tiles);
    let mut it = 0u32;
    let mut q = regs::bid();
    while q < total {
        let w = fused_item(q, m_total, n1, n2, p.lag);
        if w.kind == FusedKind::Gemm2 {
            wait_ready(p, w.m, 2 * n1);
            load_tile::<false>(&p.g2, &tile(&p.g2, w.m, w.n), base, &ring, &mut it);
        } else {
            let ti = tile(&p.g1, w.m, w.n);
            if MV {
                wait_rows(&p.g1, &ti, w.m);
            }
            load_tile::<true>(&p.g1, &ti, base, &ring, &mut it);
        }
        q += regs::nctaid();
    }
}

/// A consumer warpgroup's count of its half of a GEMM1 tile of m-tile `m` on `ready[m]`: its leader waits until
/// the warpgroup's TMA stores (h, z) are written, makes them visible to the copy engine's loads, and adds 1 with
/// release semantics (the warpgroup's stores from registers were fenced and barriered after the epilogue).
#[inline(always)]
unsafe fn count_h(p: &FusedFfn, m: u32, leader: bool) {
    if leader {
        tma::wait_group::<0>();
        fence::proxy_async_global();
        sync::red_release_gpu((p.ready + 4 * m as u64) as *mut u32, 1);
    }
}

/// The producer thread: wait until every GEMM1 tile of m-tile `m` has stored h (`ready[m]` >= `target`; see
/// [`wait_count`]).
#[inline(always)]
unsafe fn wait_ready(p: &FusedFfn, m: u32, target: u32) {
    wait_count((p.ready + 4 * m as u64) as *const u32, target, p.error as *mut u32, p.timeout_ns);
}

#[inline(always)]
unsafe fn consume(p: &FusedFfn, base: u32, ring: Ring<STAGES>, staging: u32, cw: u32) {
    let (m_total, total) = items(p);
    let lane = t_lane();
    let leader = regs::tid() % 128 == 0;
    if leader {
        // the maps this warpgroup's stores go through (its leader issues them)
        crate::kernels::acquire_host_map(p.g1.map_c);
        crate::kernels::acquire_host_map(p.g1.map_z);
        crate::kernels::acquire_host_map(p.g2.map_c);
    }
    // the warpgroup's two staging boxes, alternated by every box either epilogue stores (as in the engine)
    let wst = staging + cw * 2 * C_BOX;
    let mut boxes = 0u32;
    let mut it = 0u32;
    let (n1, n2) = (p.g1.n_tiles, p.g2.n_tiles);
    // the m-tile of this warpgroup's last GEMM1 tile while its stores are not yet counted (u32::MAX: none)
    let mut pending = u32::MAX;
    // a count may wait past the block's next item only if that item cannot depend on it: with the walk's head
    // (min(lag, m-tiles)) at least fused_lag_min, every GEMM2 item within a grid stride after a GEMM1 item of
    // m-tile m is of an m-tile below m (by induction on m every deferred count is made); else count at once
    let head = if p.lag < m_total { p.lag } else { m_total };
    let defer = head >= fused_lag_min(regs::nctaid(), n1, n2);
    let mut q = regs::bid();
    while q < total {
        let w = fused_item(q, m_total, n1, n2, p.lag);
        let g2 = w.kind == FusedKind::Gemm2;
        // read before the main loop: the offsets' latency hides under it
        let (ti, kt_n) = if g2 { (tile(&p.g2, w.m, w.n), p.g2.k / BK) } else { (tile(&p.g1, w.m, w.n), p.g1.k / BK) };
        let acc: [f32; 128] = mainloop_coop::<false, false, 0, STAGES, _>(base, &ring, &mut it, kt_n, cw, lane);
        // the previous GEMM1 tile's stores have completed under this main loop: counting them now costs no wait
        if pending != u32::MAX {
            count_h(p, pending, leader);
            pending = u32::MAX;
        }
        if g2 {
            store_bf16(&p.g2, &acc, &ti, cw, wst, &mut boxes);
        } else {
            // uniform in the warpgroup (its rows and the tile decide the path)
            if store_swiglu(&p.g1, &acc, &ti, cw, wst, &mut boxes) {
                // stores from registers: each thread's before the barrier, the barrier before the later release
                fence::acq_rel_gpu();
                sync::named_sync(2 + cw, 128);
            }
            if defer && q + regs::nctaid() < total {
                pending = w.m;
            } else {
                count_h(p, w.m, leader);
            }
        }
        q += regs::nctaid();
    }
    if pending != u32::MAX {
        count_h(p, pending, leader);
    }
    // the staging must not be freed (block exit) before the copy engine has read it
    if leader {
        tma::wait_group::<0>();
    }
}
