//! Routing layout on the device, deterministic and without a host round trip: per-expert counts, offsets and
//! m-tile offsets, and the expert-ordered rows (slots of one expert in increasing slot order).
//!
//! One launch, `route_fused` (the default: one block per chunk of slots, the phases between two grid barriers),
//! or three (`MEGAMOE_ROUTE=split`) over the same chunks (the algorithm and its CPU models: [`crate::route`]):
//! `route_count` (one block per chunk: per-chunk counts), `route_scan` (one block: counts, offsets, tile offsets,
//! each chunk's first row per expert), `route_place` (one block per chunk: the rows). An id outside -1..E sets the
//! call's error
//! word (`route_count`); then `route_scan` writes all-zero offsets and tile offsets (every gather and grouped
//! GEMM of the call has no rows) and `route_place` writes nothing, and the kernels that write the layer's
//! outputs (`combine_rows`, `dtopk_reduce`, `grouped_wgrad_f32`) return at once: nothing is written. Invalid
//! ids are also read as masked, so no index ever leaves its buffer.
use crate::grid;
use crate::kernels::routing_failed;
use crate::params::{Route, ROUTE_TIMEOUT};
use crate::ptx::{regs, smem, sync, warp};
use crate::route::{self, SCAN_THREADS, THREADS, WARPS};

/// The slots `lo..hi` of chunk `c`.
#[inline(always)]
fn chunk_range(p: &Route, c: u32) -> (u32, u32) {
    let lo = c.saturating_mul(p.chunk).min(p.slots);
    (lo, lo.saturating_add(p.chunk).min(p.slots))
}

/// Inclusive scan of one u32 per lane over the warp (`lane` this thread's). SAFETY: every lane of the warp.
#[inline(always)]
unsafe fn warp_scan(v: u32, lane: u32) -> u32 {
    let mut incl = v;
    let mut d = 1;
    while d < 32 {
        let o = warp::shfl_up(incl, d);
        if lane >= d {
            incl += o;
        }
        d *= 2;
    }
    incl
}

/// Block-wide exclusive scan of one u32 per thread over `warps` warps; returns (exclusive prefix, block total).
/// Uses shared words 0..warps at `scratch`. SAFETY: all threads of the block (`warps` * 32, at most 32 warps),
/// uniformly.
#[inline(always)]
unsafe fn block_scan(v: u32, scratch: u32, warps: u32) -> (u32, u32) {
    let lane = regs::tid() % 32;
    let w = regs::tid() / 32;
    let incl = warp_scan(v, lane);
    if lane == 31 {
        smem::st_u32(scratch + 4 * w, incl);
    }
    sync::block_sync();
    // every warp scans the warp totals (warps <= 32) and picks its own prefix
    let x = if lane < warps { smem::ld_u32(scratch + 4 * lane) } else { 0 };
    let xi = warp_scan(x, lane);
    let before = warp::shfl_idx(xi - x, w);
    let total = warp::shfl_idx(xi, 31);
    sync::block_sync();
    (before + incl - v, total)
}

/// Count chunk `c`'s slots per expert into the shared counters at `cnt` (E words, zeroed here); returns whether
/// this thread saw an id outside -1..E. Ends after a block barrier (the counters final). SAFETY: every thread of
/// a block of [`THREADS`], uniformly; `cnt` E words of shared memory.
#[inline(always)]
unsafe fn count_chunk(p: &Route, c: u32, cnt: u32) -> bool {
    let t = regs::tid();
    let mut e = t;
    while e < p.experts {
        smem::st_u32(cnt + 4 * e, 0);
        e += THREADS;
    }
    sync::block_sync();
    let (lo, hi) = chunk_range(p, c);
    let ids = p.topk_ids as *const i32;
    let mut bad = false;
    let mut s = lo + t;
    // two independent loads in flight per step
    while s < hi {
        let s2 = s + THREADS;
        let a = *ids.add(s as usize);
        let b = if s2 < hi { *ids.add(s2 as usize) } else { -1 };
        bad |= route::invalid(a, p.experts) | route::invalid(b, p.experts);
        let (ea, eb) = (route::expert_of(a, p.experts), route::expert_of(b, p.experts));
        if ea >= 0 {
            smem::red_add_u32(cnt + 4 * ea as u32, 1);
        }
        if eb >= 0 {
            smem::red_add_u32(cnt + 4 * eb as u32, 1);
        }
        s += 2 * THREADS;
    }
    sync::block_sync();
    bad
}

/// Store the counters at `cnt` as chunk c's row of `chunk_counts`. SAFETY: every thread of the block, after
/// [`count_chunk`].
#[inline(always)]
unsafe fn store_chunk_counts(p: &Route, c: u32, cnt: u32) {
    let out = (p.chunk_counts as *mut u32).add(c as usize * p.experts as usize);
    let mut e = regs::tid();
    while e < p.experts {
        *out.add(e as usize) = smem::ld_u32(cnt + 4 * e);
        e += THREADS;
    }
}

/// Block c counts chunk c's slots per expert into `chunk_counts[c * E ..]` (shared-memory counters: integer
/// sums, whatever the order of the adds); any invalid id sets the error word. [`THREADS`] threads,
/// `route::chunk_smem(E)` bytes of shared memory; grid `route::grid(slots, chunk)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_count(p: Route) {
    crate::kernels::pdl_entry();
    let c = regs::bid();
    let cnt = smem::base();
    if count_chunk(&p, c, cnt) {
        // every writer stores the same value
        core::ptr::write_volatile(p.error as *mut u32, 1);
    }
    store_chunk_counts(&p, c, cnt);
}

/// One block of [`SCAN_THREADS`]: `counts` (the chunk counts summed), `offsets` and `tile_offsets` (all zero when
/// the error word is set), and `chunk_counts[c * E + e]` overwritten with chunk c's first row of expert e (not
/// when the error word is set). Per expert, a group of `route::scan_group(E)` lanes splits the chunks into
/// segments. Shared memory: `route::scan_smem(E)` bytes.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_scan(p: Route) {
    crate::kernels::pdl_entry();
    // read once at entry, the same in every thread (written by an earlier launch)
    let failed = routing_failed(p.error);
    let t = regs::tid();
    let lane = t % 32;
    let n_e = p.experts;
    let n_c = route::chunks(p.slots, p.chunk);
    let group = route::scan_group(n_e);
    let per_pass = SCAN_THREADS / group;
    let passes = route::scan_passes(n_e);
    let g = lane % group;
    let (lo, hi) = route::segment(g, group, n_c);
    let tot = smem::base();
    let seg = tot + route::scan_seg_at(n_e);
    let scratch = tot + route::scan_scratch_at(n_e);
    let cc = p.chunk_counts as *mut u32;
    let stride = n_e as usize;
    // 1. segment sums, a segmented scan over the group's lanes, the expert totals
    let mut pass = 0;
    while pass < passes {
        let e = pass * per_pass + t / group;
        let mut sum = 0u32;
        if e < n_e {
            let mut c = lo;
            while c < hi {
                sum += *cc.add(c as usize * stride + e as usize);
                c += 1;
            }
        }
        let mut incl = sum;
        let mut d = 1;
        while d < group {
            let o = warp::shfl_up(incl, d);
            if g >= d {
                incl += o;
            }
            d *= 2;
        }
        let total = warp::shfl_idx(incl, (lane - g) + group - 1);
        smem::st_u32(seg + 4 * (pass * SCAN_THREADS + t), incl - sum);
        if e < n_e && g == 0 {
            smem::st_u32(tot + 4 * e, total);
            *(p.counts as *mut u32).add(e as usize) = total;
        }
        pass += 1;
    }
    sync::block_sync();
    // 2. offsets and tile offsets: thread t takes a run of consecutive experts
    let (e_lo, e_hi) = route::scan_experts(t, n_e);
    let (mut rows, mut tiles) = (0u32, 0u32);
    let mut e = e_lo;
    while e < e_hi {
        let n = smem::ld_u32(tot + 4 * e);
        rows += n;
        tiles += n.div_ceil(p.tile_m);
        e += 1;
    }
    let (mut o, rows_total) = block_scan(rows, scratch, SCAN_THREADS / 32);
    let (mut tl, tiles_total) = block_scan(tiles, scratch, SCAN_THREADS / 32);
    let offsets = p.offsets as *mut u32;
    let tile_offsets = p.tile_offsets as *mut u32;
    let mut e = e_lo;
    while e < e_hi {
        let n = smem::ld_u32(tot + 4 * e);
        *offsets.add(e as usize) = if failed { 0 } else { o };
        *tile_offsets.add(e as usize) = if failed { 0 } else { tl };
        smem::st_u32(tot + 4 * e, o);
        o += n;
        tl += n.div_ceil(p.tile_m);
        e += 1;
    }
    if t == 0 {
        *offsets.add(n_e as usize) = if failed { 0 } else { rows_total };
        *tile_offsets.add(n_e as usize) = if failed { 0 } else { tiles_total };
    }
    sync::block_sync();
    // 3. each chunk's first row per expert (route_place does not run on a failed call)
    if failed {
        return;
    }
    let mut pass = 0;
    while pass < passes {
        let e = pass * per_pass + t / group;
        if e < n_e {
            let mut run = smem::ld_u32(tot + 4 * e) + smem::ld_u32(seg + 4 * (pass * SCAN_THREADS + t));
            let mut c = lo;
            while c < hi {
                let at = cc.add(c as usize * stride + e as usize);
                let n = *at;
                *at = run;
                run += n;
                c += 1;
            }
        }
        pass += 1;
    }
}

/// Write the rows of chunk c's slots from the running rows at `run` (E words of shared memory, each expert's
/// first row in this chunk): row_slot[row] = slot, slot_row[slot] = row (-1 for a masked or invalid id), each
/// expert's rows in slot order. Rounds of one slot per thread; in a round the warps take turns (one barrier each),
/// each lane's row being its expert's running row plus the lanes of its `match.any` group below it. Starts with
/// a block barrier (the running rows written before it). SAFETY: every thread of a block of [`THREADS`],
/// uniformly.
#[inline(always)]
unsafe fn place_chunk(p: &Route, c: u32, run: u32) {
    let t = regs::tid();
    let lane = t % 32;
    let w = t / 32;
    let (lo, hi) = chunk_range(p, c);
    let ids = p.topk_ids as *const i32;
    let row_slot = p.row_slot as *mut u32;
    let slot_row = p.slot_row as *mut i32;
    let load = |s: u32| if s < hi { route::expert_of(*ids.add(s as usize), p.experts) } else { -1 };
    let mut next = load(lo + t);
    sync::block_sync();
    let mut base = lo;
    while base < hi {
        let s = base + t;
        let id = next;
        next = load(s + THREADS);
        let mask = warp::match_any(id as u32);
        let below = mask & ((1u32 << lane) - 1);
        let mut turn = 0;
        while turn < WARPS {
            if turn == w {
                // warp-uniform: every lane of warp w
                // an unconditional load (expert 0 for masked lanes, unused): no branch before the warp sync
                let r = smem::ld_u32(run + 4 * id.max(0) as u32);
                warp::sync_warp();
                if id >= 0 {
                    let row = r + below.count_ones();
                    *row_slot.add(row as usize) = s;
                    *slot_row.add(s as usize) = row as i32;
                    if route::highest_lane(mask) == lane {
                        smem::st_u32(run + 4 * id as u32, r + mask.count_ones());
                    }
                }
            }
            sync::block_sync();
            turn += 1;
        }
        if id < 0 && s < hi {
            *slot_row.add(s as usize) = -1;
        }
        base += THREADS;
    }
}

/// Block c writes the rows of chunk c's slots ([`place_chunk`]) from chunk c's first row of each expert
/// (`chunk_counts`, from `route_scan`). Writes nothing when the error word is set (read once at entry, the same
/// in every thread, before any barrier). [`THREADS`] threads, `route::chunk_smem(E)` bytes of shared memory; grid
/// `route::grid(slots, chunk)`.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_place(p: Route) {
    crate::kernels::pdl_entry();
    if routing_failed(p.error) {
        return;
    }
    let c = regs::bid();
    let run = smem::base();
    let starts = (p.chunk_counts as *const u32).add(c as usize * p.experts as usize);
    let mut e = regs::tid();
    while e < p.experts {
        smem::st_u32(run + 4 * e, *starts.add(e as usize));
        e += THREADS;
    }
    place_chunk(&p, c, run);
}

/// Thread 0's pass through a grid barrier, shared with the block: arrive with `flag` (the block's), wait, and
/// on the last arrival of the first barrier (`first`) store the error word (1 when any block's flag was set,
/// else 0) before the release; on expiry store [`ROUTE_TIMEOUT`] there. Returns (released, the error word's
/// value after it) in every thread. Uses the shared words `ctl`, `ctl + 4`. SAFETY: every thread of the block,
/// uniformly; the block's global writes to publish made before the call.
#[inline(always)]
unsafe fn grid_step(p: &Route, flag: bool, first: bool, ctl: u32) -> (bool, bool) {
    sync::block_sync();
    if regs::tid() == 0 {
        let word = p.barrier as *mut u32;
        let err = p.error as *mut u32;
        let n = regs::nctaid();
        let pass = grid::arrive(word, n, flag, p.timeout_ns, |flags| {
            if first {
                sync::st_relaxed_gpu(err, (flags > 0) as u32);
            }
        });
        let released = matches!(pass, grid::Pass::Released { .. });
        if !released {
            sync::st_relaxed_gpu(err, ROUTE_TIMEOUT);
        }
        smem::st_u32(ctl, released as u32);
        smem::st_u32(ctl + 4, (sync::ld_relaxed_gpu(err) != 0) as u32);
    }
    sync::block_sync();
    (smem::ld_u32(ctl) != 0, smem::ld_u32(ctl + 4) != 0)
}

/// All-zero `offsets` and `tile_offsets` (E + 1 each): every gather and grouped GEMM after a failed routing has
/// no rows, so none reads `row_slot` (left as it was). Several blocks may store the same zeros. SAFETY: the
/// threads of one block.
#[inline(always)]
unsafe fn zero_offsets(p: &Route) {
    let (offsets, tile_offsets) = (p.offsets as *mut u32, p.tile_offsets as *mut u32);
    let mut e = regs::tid();
    while e <= p.experts {
        *offsets.add(e as usize) = 0;
        *tile_offsets.add(e as usize) = 0;
        e += THREADS;
    }
}

/// The routing layout in one launch, one block of [`THREADS`] per chunk (all resident at once: the host checks the
/// grid against the device's occupancy), three phases between two grid barriers ([`crate::grid`], the word
/// `p.barrier`):
/// 1. block c counts chunk c (as `route_count`) into `chunk_counts[c * E ..]`; the barrier ORs the invalid-id
///    flags, its last arrival writes the error word;
/// 2. block b takes the experts `route::segment(b, grid, E)`: per expert, a warp scans the chunks' counts
///    (exclusive, up to 128 chunks as four 32-lane strips), writes each chunk's prefix back over its count and
///    the total to `counts`; with an invalid id block 0 then writes zero offsets and the call ends (and every block
///    does on an expired barrier: the error word then holds `ROUTE_TIMEOUT`, and no later kernel has rows);
/// 3. after the second barrier every block computes the offsets and tile offsets from `counts` (block 0 writes
///    them), its chunk's first row of each expert (offset plus prefix), and places its chunk's rows as
///    `route_place`.
///
/// The same outputs as the three launches. The error word needs no zeroing before it. Shared memory
/// `route::fused_smem(E)` bytes; grid `route::grid(slots, chunk)`, at most [`route::MAX_CHUNKS`].
#[no_mangle]
pub unsafe extern "ptx-kernel" fn route_fused(p: Route) {
    crate::kernels::pdl_entry();
    let c = regs::bid();
    let n = regs::nctaid();
    let t = regs::tid();
    let (lane, w) = (t % 32, t / 32);
    let n_e = p.experts;
    let cnt = smem::base();
    let ctl = cnt + route::fused_ctl_at(n_e);
    let scratch = cnt + route::fused_scratch_at(n_e);
    let cc = p.chunk_counts as *mut u32;
    let stride = n_e as usize;
    // 1. counts of chunk c
    let bad = count_chunk(&p, c, cnt);
    store_chunk_counts(&p, c, cnt);
    let bad = sync::block_count(bad) != 0;
    let (released, failed) = grid_step(&p, bad, true, ctl);
    if !released {
        zero_offsets(&p);
        return;
    }
    // 2. the chunk scans of block c's experts, one warp an expert
    let (own_lo, own_hi) = route::segment(c, n, n_e);
    let counts = p.counts as *mut u32;
    let mut e = own_lo + w;
    while e < own_hi {
        let mut v = [0u32; 4];
        unroll!(i in [0, 1, 2, 3] {
            let ch = i as u32 * 32 + lane;
            if ch < n {
                v[i] = sync::ld_relaxed_gpu(cc.add(ch as usize * stride + e as usize));
            }
        });
        let mut carry = 0u32;
        unroll!(i in [0, 1, 2, 3] {
            // warp-uniform: n is the grid's
            if (i as u32) * 32 < n {
                let incl = warp_scan(v[i], lane);
                let ch = i as u32 * 32 + lane;
                if !failed && ch < n {
                    *cc.add(ch as usize * stride + e as usize) = carry + incl - v[i];
                }
                carry += warp::shfl_idx(incl, 31);
            }
        });
        if lane == 0 {
            *counts.add(e as usize) = carry;
        }
        e += WARPS;
    }
    if failed {
        if c == 0 {
            zero_offsets(&p);
        }
        return;
    }
    let (released, _) = grid_step(&p, false, false, ctl);
    if !released {
        zero_offsets(&p);
        return;
    }
    // 3. offsets over every expert (thread t a run of consecutive experts), chunk c's first rows, its rows
    let (e_lo, e_hi) = route::segment(t, THREADS, n_e);
    let (mut rows, mut tiles) = (0u32, 0u32);
    let mut e = e_lo;
    while e < e_hi {
        let k = sync::ld_relaxed_gpu(counts.add(e as usize));
        smem::st_u32(cnt + 4 * e, k);
        rows += k;
        tiles += k.div_ceil(p.tile_m);
        e += 1;
    }
    let (mut o, rows_total) = block_scan(rows, scratch, WARPS);
    let (mut tl, tiles_total) = block_scan(tiles, scratch, WARPS);
    let (offsets, tile_offsets) = (p.offsets as *mut u32, p.tile_offsets as *mut u32);
    let mine = cc.add(c as usize * stride);
    let mut e = e_lo;
    while e < e_hi {
        let k = smem::ld_u32(cnt + 4 * e);
        if c == 0 {
            *offsets.add(e as usize) = o;
            *tile_offsets.add(e as usize) = tl;
        }
        smem::st_u32(cnt + 4 * e, o + sync::ld_relaxed_gpu(mine.add(e as usize)));
        o += k;
        tl += k.div_ceil(p.tile_m);
        e += 1;
    }
    if c == 0 && t == 0 {
        *offsets.add(n_e as usize) = rows_total;
        *tile_offsets.add(n_e as usize) = tiles_total;
    }
    place_chunk(&p, c, cnt);
}
