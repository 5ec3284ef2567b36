//! Expert-parallel dispatch: count all-gather, layout, push of x rows to their owners, arrival wait
//! (docs/EP.md, steps 1 to 4). One launch serves `grid / blocks_per_rank` ranks: R emulated ranks on one GPU
//! (rank_base 0, grid R * B) or one rank per GPU (rank_base = its rank, grid B). Every block waits, so the grid
//! must be resident at once (grid <= SM count).
//!
//! The call's epoch is the rank's call counter (`ws.epoch`), advanced by this call's `ep_epoch_next` and read by
//! every block at its start (docs/EP.md; a counter never advanced or exhausted: the kernel moves nothing and
//! empties the rank's local layout).
//!
//! Per rank r (its routing layout already computed by `route_fused` (or the three-launch form) over its own
//! slots and the E global experts):
//! 1. block 0 writes r's counts row into row r of every rank's `counts` (zeros when r's routing failed: it then
//!    pushes no row, `EpRank::route_error`); block barrier, `fence.acq_rel.sys`, `st.release.sys` of
//!    `count_flags[r] = epoch` on every rank;
//! 2. every block waits (bounded) for the `world` count flags of its own workspace;
//! 3. every block computes the first row on the owner of r's rows of each expert (`ep::recv_row_by`: local
//!    experts in order, sources in rank order within an expert, the EP = 1 order of the concatenated batch);
//!    block 0 writes r's local layout (offsets and m-tiles of its E / R experts) for the grouped GEMMs;
//! 4. each warp pushes whole rows: x[t] to the owner's `recv` row (16-byte stores through the peer pointer; with
//!    `p.fp8` the token's e4m3 codes and 1 x 128 scales, see `EpParams::fp8`), the
//!    row's routing weight to `recv_w` and (r, slot) to `recv_meta`; block barrier, `fence.acq_rel.sys`,
//!    `st.release.sys` of `data_flags[r * B + b] = epoch` on every rank (rows or none);
//! 5. block 0 waits for the `world * B` data flags of its workspace, then `fence.proxy.async.global` (the
//!    grouped GEMMs read `recv` with TMA next). A wait that expires writes the error record; the rank's later
//!    waits of the call return at once, its local layout is emptied, and its releases still happen.
//!
//! Backward (`p.backward = 1`) while the workspace still holds its forward's state (`p.resend_x = 0`): steps 1, 2
//! and the local layout are the forward's (the gathered counts are still in the workspace: no rank starts the next
//! forward before every rank has finished this backward's combine); step 4 pushes dy rows into `recv_dy` (their
//! weights and slots are already in `recv_w` and `recv_meta`), with `p.fp8` dy's codes and scales.
//! Backward of an older forward (`p.resend_x` 1 or 2: another forward has used the workspace since, the host
//! laid the routing out again from the same topk_ids): steps 1 to 5 as the forward's, and step 4 pushes each
//! row's x again (`EpRank::x2`: bf16, or with `resend_x = 2` FP8 codes and scales) into `recv`, with its weight
//! and (r, slot), besides its dy into `recv_dy`; the owners then hold what the forward left, bit for bit.
use crate::ep::{self, Phase};
use crate::kernels::ep_common::{copy_row, epoch_usable, me, pick, routing_failed, wait_flags};
use crate::params::EpParams;
use crate::ptx::{fence, regs, smem, sync};

/// Threads per block.
pub const THREADS: u32 = 256;

/// Block 0's thread 0: the local layout of `rank` from the gathered counts, or an empty one.
#[inline(always)]
unsafe fn local_layout(p: &EpParams, ws_base: u64, rank: u32, ok: bool) {
    let ws = &p.ws;
    let per = p.experts / p.group.world;
    let offs = (ws_base + ws.local_offsets) as *mut u32;
    let tiles = (ws_base + ws.local_tiles) as *mut u32;
    if ok {
        let counts = (ws_base + ws.counts) as *const u32;
        let e_n = p.experts;
        ep::local_layout(
            |s, x| unsafe { *counts.add((s * e_n + x) as usize) },
            e_n,
            p.group.world,
            rank,
            p.tile_m,
            ws.max_recv as u32,
            |i, o, t| unsafe {
                *offs.add(i as usize) = o;
                *tiles.add(i as usize) = t;
            },
        );
    } else {
        let mut i = 0;
        while i <= per {
            *offs.add(i as usize) = 0;
            *tiles.add(i as usize) = 0;
            i += 1;
        }
    }
}

/// A warp copies token `tok`'s row of `src` (bf16 [tokens, hidden]; with `fp8`, e4m3 codes [tokens, hidden] and at
/// `src_scales` their f32 [tokens, hidden / 128] scales) into row `dst` of the region at `to` (bf16 [max_recv,
/// hidden]; with `fp8`, codes [max_recv, hidden] followed by scales [max_recv, hidden / 128] at `to + max_recv *
/// hidden`).
/// SAFETY: the warp's 32 lanes together; `src` (and `src_scales`) hold token `tok`'s row, `dst < max_recv`, `to` a
/// region of the layout above (the caller bounds `dst` and takes `tok` from a slot below the rank's tokens * k).
#[inline(always)]
unsafe fn push_row(p: &EpParams, (src, src_scales): (u64, u64), fp8: bool, to: u64, (tok, dst): (u32, u32), lane: u32) {
    let dst = dst as usize;
    if fp8 {
        // whole 16-byte chunks: hidden bytes of codes, hidden / 128 f32 scales
        let (cc, sc) = (p.hidden / 16, p.hidden / 512);
        let codes = to as *mut [u32; 4];
        let scales = (to + p.ws.max_recv * p.hidden as u64) as *mut [u32; 4];
        let x8 = src as *const [u32; 4];
        copy_row(x8.add((tok * cc) as usize), codes.add(dst * cc as usize), cc, lane);
        let xs = src_scales as *const [u32; 4];
        copy_row(xs.add((tok * sc) as usize), scales.add(dst * sc as usize), sc, lane);
    } else {
        let chunks = p.hidden / 8;
        let from = (src as *const [u32; 4]).add((tok * chunks) as usize);
        copy_row(from, (to as *mut [u32; 4]).add(dst * chunks as usize), chunks, lane);
    }
}

/// 256 threads; dynamic shared memory 16 + 4 * experts bytes.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ep_dispatch(p: EpParams) {
    let Some(me) = me(&p) else { return };
    let g = &p.group;
    let ws = &p.ws;
    let t = regs::tid();
    let nt = regs::ntid();
    let world = g.world;
    let e_n = p.experts;
    let blocks = g.blocks_per_rank;
    let ok_s = smem::base();
    let base_s = ok_s + 16;
    let withheld = |ph: Phase| p.withhold_rank == me.rank + 1 && p.withhold_phase == ph as u32;
    let bwd = p.backward != 0;
    // the forward's steps: in the forward, and in a backward whose forward's state the workspace no longer holds
    let full = !bwd || p.resend_x != 0;
    let epoch = me.epoch;
    if !epoch_usable(epoch) {
        // no call epoch (the counter was never advanced, or is exhausted): nothing moves; the GEMMs of the call
        // get no rows
        if me.b == 0 && t == 0 {
            local_layout(&p, me.ws, me.rank, false);
        }
        return;
    }

    // the state tag: left by a call that leaves the forward's state, checked by one that reads it (a mismatch: a call
    // the host did not see, e.g. a graph's replay, came between the forward and this backward); a call over a failed
    // routing leaves its epoch too (the next routing clears the routing's own error word)
    if me.b == 0 && t == 0 {
        // SAFETY: the epoch region of this rank's own workspace holds four u32 (counter, tag, state-error epoch,
        // routing-error epoch); one thread of block 0 is its only writer in this call
        let tag = (me.ws + ws.epoch + 4) as *mut u32;
        if full {
            *tag = p.state;
            if routing_failed(me.own.route_error) {
                *tag.add(2) = epoch;
            }
        } else if *tag != p.state {
            *tag.add(1) = epoch;
        }
    }

    // 1. counts row to every rank (all zero when this rank's routing failed: its offsets are zero and it pushes
    // no row, so no owner may wait for or lay out rows from it)
    if me.b == 0 && full {
        let mine = me.own.counts as *const u32;
        let failed = routing_failed(me.own.route_error);
        let mut i = t;
        while i < world * e_n {
            let (o, e) = (i / e_n, i % e_n);
            let dst = (pick(&g.peer, o) + ws.counts) as *mut u32;
            *dst.add((me.rank * e_n + e) as usize) = if failed { 0 } else { *mine.add(e as usize) };
            i += nt;
        }
    }
    sync::block_sync();
    if me.b == 0 && t == 0 && full && !withheld(Phase::Counts) {
        fence::acq_rel_sys();
        let mut o = 0;
        while o < world {
            sync::st_release_sys((pick(&g.peer, o) + ws.count_flags + 4 * me.rank as u64) as *mut u32, epoch);
            o += 1;
        }
    }

    // 2. every source's counts
    let ok = !full || wait_flags(me.ws + ws.count_flags, world, 1, &me, Phase::Counts as u32, ok_s);

    // 3. where this rank's rows of each expert start on the owner; the local layout
    if ok {
        let counts = (me.ws + ws.counts) as *const u32;
        let mut e = t;
        while e < e_n {
            let row = ep::recv_row_by(|s, x| *counts.add((s * e_n + x) as usize), e_n, world, e, me.rank);
            smem::st_u32(base_s + 4 * e, row);
            e += nt;
        }
    }
    if me.b == 0 && t == 0 && full {
        local_layout(&p, me.ws, me.rank, ok);
    }
    sync::block_sync();

    // pull dispatch: zero this rank's GEMM1 arrival counters and error word (its GEMM1 runs after this launch)
    let pull = p.pull != 0 && !bwd;
    // FP8 rows, forward (x) or backward (dy): the push only (the host never asks for both)
    let fp8 = p.fp8 != 0 && !pull;
    if pull {
        let words = ep::Workspace::arrive_words(ws.max_recv, e_n as u64) as u32;
        let arrive = (me.ws + ws.arrive) as *mut u32;
        let mut i = me.b * nt + t;
        while i < words {
            *arrive.add(i as usize) = 0;
            i += blocks * nt;
        }
    }

    // 4. push the rows (pull: only their weights and (rank, slot), and x's address), a warp per row
    if ok && pull && me.b == 0 && t < world {
        *((pick(&g.peer, t) + ws.src_x) as *mut u64).add(me.rank as usize) = me.own.x;
    }
    if !bwd && me.b == 0 && t < world {
        // where this rank's GEMM2 scatters rank t's rows (read after this launch, on this rank)
        *((me.ws + ws.back_ptrs) as *mut u64).add(t as usize) = pick(&g.peer, t) + ws.back;
    }
    if ok {
        let slots = me.own.tokens * p.k;
        let offsets = me.own.offsets as *const u32;
        let rows = (*offsets.add(e_n as usize)).min(slots);
        let row_slot = me.own.row_slot as *const u32;
        let ids = me.own.topk_ids as *const i32;
        let region = if bwd { ws.recv_dy } else { ws.recv };
        let resend = bwd && p.resend_x != 0;
        let (warp, lane, warps) = (t / 32, t % 32, nt / 32);
        let mut q = me.b * warps + warp;
        while q < rows {
            let slot = *row_slot.add(q as usize);
            let id = if slot < slots { *ids.add(slot as usize) } else { -1 };
            if id >= 0 && (id as u32) < e_n {
                let e = id as u32;
                let first = *offsets.add(e as usize);
                let dst = smem::ld_u32(base_s + 4 * e).wrapping_add(q.wrapping_sub(first));
                if (dst as u64) < ws.max_recv {
                    let peer = pick(&g.peer, ep::owner(e, e_n, world));
                    let at = (slot / p.k, dst);
                    if !pull {
                        push_row(&p, (me.own.x, me.own.x_scales), fp8, peer + region, at, lane);
                    }
                    if resend {
                        let x2 = (me.own.x2, me.own.x2_scales);
                        push_row(&p, x2, p.resend_x == 2, peer + ws.recv, at, lane);
                    }
                    if lane == 0 && full {
                        *((peer + ws.recv_w) as *mut f32).add(dst as usize) =
                            *(me.own.w as *const f32).add(slot as usize);
                        let meta = ((peer + ws.recv_meta) as *mut u32).add(2 * dst as usize);
                        *meta = me.rank;
                        *meta.add(1) = slot;
                    }
                }
            }
            q += blocks * warps;
        }
    }
    sync::block_sync();
    if t == 0 && !withheld(Phase::Dispatch) {
        fence::acq_rel_sys();
        let flag = ws.data_flags + 4 * (me.rank * blocks + me.b) as u64;
        let mut o = 0;
        while o < world {
            sync::st_release_sys((pick(&g.peer, o) + flag) as *mut u32, epoch);
            o += 1;
        }
    }

    // 5. every source block's rows, before the grouped GEMMs read them with TMA
    if me.b == 0 {
        let arrived = wait_flags(me.ws + ws.data_flags, world * blocks, blocks, &me, Phase::Dispatch as u32, ok_s);
        fence::proxy_async_global();
        if !arrived && t == 0 {
            local_layout(&p, me.ws, me.rank, false);
        }
    }
}
