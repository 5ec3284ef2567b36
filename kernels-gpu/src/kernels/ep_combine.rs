//! Expert-parallel combine (docs/EP.md, step 5), the same launch forms as `ep_dispatch`, the call's epoch read
//! from the rank's call counter as there.
//!
//! Per rank r:
//! 1. as owner: each warp returns whole rows, y[q] of r's receive row q to the `back` region of the row's
//!    source at its slot (from `recv_meta`), 16-byte stores through the peer pointer; block barrier,
//!    `fence.acq_rel.sys`, `st.release.sys` of `back_flags[r * B + b] = epoch` on every rank;
//! 2. as source: every block waits (bounded) for the `world * B` back flags of its workspace, then each warp
//!    sums tokens: out[t] = sum over j of w[t, j] * back[t * k + j] in f32 in j order, masked slots skipped,
//!    to bf16: the arithmetic of `combine_rows`, so bitwise the EP = 1 result (nothing when the rank's routing
//!    failed: `EpRank::route_error`; it sent no rows, see `ep_dispatch`). A wait that expires writes the
//!    error record and the block writes no output.
//!
//! Backward (`p.backward = 1`): the rows are dx rows and travel with their dtopk (`row_w` into the source's
//! `back_w`); the source sums dx with weight 1 (as `combine_rows` with no weights) and writes dtopk per slot.
use crate::ep::Phase;
use crate::kernels::combine::weighted_sum;
use crate::kernels::ep_common::{copy_row, epoch_usable, me, pick, routing_failed, wait_flags};
use crate::params::EpParams;
use crate::ptx::{fence, global, math, regs, smem, sync};

/// Threads per block.
pub const THREADS: u32 = 256;

/// 256 threads; dynamic shared memory 16 bytes.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ep_combine(p: EpParams) {
    let Some(me) = me(&p) else { return };
    let g = &p.group;
    let ws = &p.ws;
    let t = regs::tid();
    let nt = regs::ntid();
    let world = g.world;
    let blocks = g.blocks_per_rank;
    let epoch = me.epoch;
    if !epoch_usable(epoch) {
        return; // no call epoch (see ep_dispatch): nothing moves, no output is written
    }
    let ok_s = smem::base();
    let chunks = p.hidden / 8;
    let (warp, lane, warps) = (t / 32, t % 32, nt / 32);
    let per = p.experts / world;
    let bwd = p.backward != 0;

    // 1. results back to their sources
    let rows = (*((me.ws + ws.local_offsets) as *const u32).add(per as usize) as u64).min(ws.max_recv) as u32;
    let meta = (me.ws + ws.recv_meta) as *const u32;
    // scatter: the owner's GEMM2 stored the rows at their sources already (an earlier launch: complete)
    let scattered = p.scatter != 0 && !bwd;
    let mut q = if scattered { rows } else { me.b * warps + warp };
    while q < rows {
        let src = *meta.add(2 * q as usize);
        let slot = *meta.add(2 * q as usize + 1);
        if src < world && (slot as u64) < ws.max_slots {
            let from = (me.own.y as *const [u32; 4]).add(q as usize * chunks as usize);
            let to = ((pick(&g.peer, src) + ws.back) as *mut [u32; 4]).add(slot as usize * chunks as usize);
            copy_row(from, to, chunks, lane);
            if bwd && lane == 0 {
                let v = *(me.own.row_w as *const f32).add(q as usize);
                *((pick(&g.peer, src) + ws.back_w) as *mut f32).add(slot as usize) = v;
            }
        }
        q += blocks * warps;
    }
    sync::block_sync();
    if t == 0 && !(p.withhold_rank == me.rank + 1 && p.withhold_phase == Phase::Combine as u32) {
        fence::acq_rel_sys();
        let flag = ws.back_flags + 4 * (me.rank * blocks + me.b) as u64;
        let mut s = 0;
        while s < world {
            sync::st_release_sys((pick(&g.peer, s) + flag) as *mut u32, epoch);
            s += 1;
        }
    }

    // 2. every owner block's rows, then the weighted sums in j order
    let ok = wait_flags(me.ws + ws.back_flags, world * blocks, blocks, &me, Phase::Combine as u32, ok_s);
    // a rank whose routing failed sent no rows (and its slot_row was not written): it writes none of its outputs
    if !ok || routing_failed(me.own.route_error) {
        return;
    }
    let back = (me.ws + ws.back) as *const [u32; 4];
    let slot_row = me.own.slot_row as *const i32;
    let w = me.own.w as *const f32;
    let out = me.own.out as *mut [u32; 4];
    let mut tok = me.b * warps + warp;
    while tok < me.own.tokens {
        let mut j = lane;
        while bwd && j < p.k {
            let slot = (tok * p.k + j) as usize;
            let v = if *slot_row.add(slot) >= 0 { *((me.ws + ws.back_w) as *const f32).add(slot) } else { 0.0 };
            *(me.own.dtopk as *mut f32).add(slot) = v;
            j += 32;
        }
        let mut c = lane;
        while c < chunks {
            let sum = weighted_sum(p.k, |j| {
                let slot = tok * p.k + j;
                if *slot_row.add(slot as usize) < 0 {
                    return None;
                }
                let wt = if bwd { 1.0 } else { *w.add(slot as usize) };
                Some((wt, global::ld_v4(back.add(slot as usize * chunks as usize + c as usize))))
            });
            global::st_v4(out.add((tok * chunks + c) as usize), sum);
            c += 32;
        }
        tok += blocks * warps;
    }
}
