//! Routing layout on the device, deterministic and without a host round trip: per-expert counts, offsets and
//! m-tile offsets, and the expert-ordered rows (slots of one expert in increasing slot order).
//!
//! Three launches: `route_count` (one block per expert), `route_scan` (one block), `route_place` (one block
//! per expert). An id outside -1..E sets the call's error word (`route_count`); then `route_scan` writes
//! all-zero offsets and tile offsets (every gather and grouped GEMM of the call has no rows) and `route_place`
//! writes nothing, and the kernels that write the layer's outputs (`combine_rows`, `dtopk_reduce`,
//! `grouped_wgrad_f32`) return at once: nothing is written. Invalid ids are also read as masked, so no index
//! ever leaves its buffer.
use crate::kernels::routing_failed;
use crate::params::Route;
use crate::ptx::{regs, smem, sync, warp};

/// Threads per block of `route_count` and `route_place`.
pub const ROUTE_THREADS: u32 = crate::kernels_host::ROUTE_THREADS;
/// Slots each thread of `route_place` takes per step.
const PER_THREAD: u32 = 8;

#[inline(always)]
unsafe fn id_at(p: &Route, slot: u32) -> i32 {
    let id = *(p.topk_ids as *const i32).add(slot as usize);
    if id < -1 || id >= p.experts as i32 {
        -1
    } else {
        id
    }
}

/// Block-wide exclusive scan of one u32 per thread (256 threads); returns (exclusive prefix, block total).
/// Uses shared words 0..8 at `scratch`. SAFETY: all 256 threads of the block, uniformly.
#[inline(always)]
unsafe fn block_scan(v: u32, scratch: u32) -> (u32, u32) {
    let lane = regs::tid() % 32;
    let w = regs::tid() / 32;
    let mut incl = v;
    let mut d = 1;
    while d < 32 {
        let o = warp::shfl_up(incl, d);
        if lane >= d {
            incl += o;
        }
        d *= 2;
    }
    if lane == 31 {
        smem::st_u32(scratch + 4 * w, incl);
    }
    sync::block_sync();
    let mut before = 0;
    let mut total = 0;
    let mut i = 0;
    while i < ROUTE_THREADS / 32 {
        let t = smem::ld_u32(scratch + 4 * i);
        if i < w {
            before += t;
        }
        total += t;
        i += 1;
    }
    sync::block_sync();
    (before + incl - v, total)
}

/// Block e counts the slots routed to expert e; block 0 also flags invalid ids. 256 threads, 64 B shared.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_count(p: Route) {
    let e = regs::bid() as i32;
    let mut n = 0u32;
    let mut bad = false;
    let mut s = regs::tid();
    while s < p.slots {
        let raw = *(p.topk_ids as *const i32).add(s as usize);
        bad |= raw < -1 || raw >= p.experts as i32;
        n += (raw == e) as u32;
        s += ROUTE_THREADS;
    }
    if bad && e == 0 {
        *(p.error as *mut u32) = 1;
    }
    let (_, total) = block_scan(n, smem::base());
    if regs::tid() == 0 {
        *(p.counts as *mut u32).add(e as usize) = total;
    }
}

/// One thread: offsets and m-tile offsets from the counts (E is small); all zero when the error word is set
/// (no expert has rows: every later gather and grouped GEMM of the call has no work).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_scan(p: Route) {
    if regs::tid() != 0 {
        return;
    }
    let failed = routing_failed(p.error);
    let counts = p.counts as *const u32;
    let offsets = p.offsets as *mut u32;
    let tiles = p.tile_offsets as *mut u32;
    let (mut o, mut t) = (0u32, 0u32);
    let mut e = 0;
    while e < p.experts as usize {
        *offsets.add(e) = o;
        *tiles.add(e) = t;
        let c = if failed { 0 } else { *counts.add(e) };
        o += c;
        t += c.div_ceil(p.tile_m);
        e += 1;
    }
    *offsets.add(e) = o;
    *tiles.add(e) = t;
}

/// Block e writes the rows of expert e in slot order: row_slot[row] = slot, slot_row[slot] = row; block 0
/// also writes slot_row = -1 for masked slots. Writes nothing when the error word is set (read once at entry,
/// the same in every thread, before the scan's barriers). 256 threads, 64 B shared.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_place(p: Route) {
    if routing_failed(p.error) {
        return;
    }
    let e = regs::bid() as i32;
    let t = regs::tid();
    let mut next = *(p.offsets as *const u32).add(e as usize);
    let row_slot = p.row_slot as *mut u32;
    let slot_row = p.slot_row as *mut i32;
    let step = ROUTE_THREADS * PER_THREAD;
    let mut base = 0;
    while base < p.slots {
        let first = base + t * PER_THREAD;
        let mut mine = 0u32;
        let mut i = 0;
        while i < PER_THREAD {
            let s = first + i;
            if s < p.slots {
                let id = id_at(&p, s);
                mine += (id == e) as u32;
                if e == 0 && id < 0 {
                    *slot_row.add(s as usize) = -1;
                }
            }
            i += 1;
        }
        let (before, total) = block_scan(mine, smem::base());
        let mut row = next + before;
        let mut i = 0;
        while i < PER_THREAD {
            let s = first + i;
            if s < p.slots && id_at(&p, s) == e {
                *row_slot.add(row as usize) = s;
                *slot_row.add(s as usize) = row as i32;
                row += 1;
            }
            i += 1;
        }
        next += total;
        base += step;
    }
}
