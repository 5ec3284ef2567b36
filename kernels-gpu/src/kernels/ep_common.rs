//! What the expert-parallel kernels share: which rank a block serves and the call's epoch (read from the rank's
//! call counter, advanced by `ep_epoch_next`), peer pointers, bounded waits on epoch flags and the error record.
//! Not a kernel.
use crate::params::{EpParams, EpRank, MAX_RANKS};
use crate::ptx::{global, regs, smem, sync};

/// `a[i]` for a run-time `i` < 8 through compile-time indices only (a run-time index into a parameter array would
/// copy it into local memory).
#[inline(always)]
pub fn pick<T: Copy>(a: &[T; MAX_RANKS], i: u32) -> T {
    let mut v = a[0];
    crate::unroll!(I in [1, 2, 3, 4, 5, 6, 7] {
        if i == I as u32 {
            v = a[I];
        }
    });
    v
}

/// The rank this block serves, its place among the rank's blocks, and the call it is in.
pub struct Me {
    /// Rank.
    pub rank: u32,
    /// Block within the rank's group, 0..blocks_per_rank.
    pub b: u32,
    /// The rank's own buffers.
    pub own: EpRank,
    /// The rank's own workspace (`peer[rank]`).
    pub ws: u64,
    /// This call's epoch: the rank's call counter (`ws.epoch`), advanced by this call's `ep_epoch_next`.
    pub epoch: u32,
    /// The rank's error record (`ws.error`, u32 [4]).
    pub err: *mut u32,
    /// Bound of every wait, nanoseconds (`%globaltimer`).
    pub timeout_ns: u64,
}

/// Whether the rank's routing of the call's forward failed (an expert id outside -1..E; `EpRank::route_error`).
/// Every thread of the rank reads the same word, written by an earlier launch: branching on it never splits a
/// barrier. SAFETY: `route_error` 0 or the rank's error word.
#[inline(always)]
pub unsafe fn routing_failed(route_error: u64) -> bool {
    route_error != 0 && core::ptr::read_volatile(route_error as *const u32) != 0
}

/// Whether a call counter holds a usable epoch: 0 (never advanced: `ep_epoch_next` did not run) and `u32::MAX`
/// (exhausted) are not.
#[inline(always)]
pub const fn epoch_usable(epoch: u32) -> bool {
    epoch != 0 && epoch != u32::MAX
}

/// This block's rank (`rank_base + block / blocks_per_rank`) and the call's epoch, read from the rank's counter
/// (written by an earlier launch: every thread of every block of the rank reads the same value, so branching on
/// it never splits a barrier); None for a block past the group (it returns).
/// SAFETY: `p.group.peer` and `p.ws` describe the rank group's workspaces.
#[inline(always)]
pub unsafe fn me(p: &EpParams) -> Option<Me> {
    let g = &p.group;
    if g.blocks_per_rank == 0 || g.world == 0 || g.world > MAX_RANKS as u32 {
        return None;
    }
    let local = regs::bid() / g.blocks_per_rank;
    let rank = g.rank_base.wrapping_add(local);
    if local >= MAX_RANKS as u32 || rank >= g.world {
        return None;
    }
    let ws = pick(&g.peer, rank);
    Some(Me {
        rank,
        b: regs::bid() % g.blocks_per_rank,
        own: pick(&p.ranks, local),
        ws,
        epoch: core::ptr::read_volatile((ws + p.ws.epoch) as *const u32),
        err: (ws + p.ws.error) as *mut u32,
        timeout_ns: g.timeout_ns,
    })
}

/// Claim the error record `err` (u32 [4]: phase, rank waited for, epoch, 1) for `epoch` and fill it; the first
/// writer of an epoch wins, later ones leave it.
/// SAFETY: `err` is the rank's own record.
#[inline(always)]
pub unsafe fn record(err: *mut u32, phase: u32, rank: u32, epoch: u32) {
    let old = sync::atom_max_relaxed_gpu(err.add(2), epoch);
    if old < epoch {
        *err = phase;
        *err.add(1) = rank;
        *err.add(3) = 1;
    }
}

/// Every thread of the block: wait until `flags[i] >= me.epoch` for every i < n (threads take i = tid, tid + ntid,
/// ...), each wait an `ld.acquire.sys` loop bounded by `me.timeout_ns` from the call. On expiry the thread
/// records (phase, i / per_rank, epoch) in `me.err` and stops; a wait also stops at once when the rank's record
/// already holds this epoch (another wait of this call expired: no further waits). True when every flag arrived.
/// Uses the shared word at `ok_s`.
/// SAFETY: every thread of the block, in uniform control flow; `flags` n words of the rank's own workspace.
#[inline(always)]
pub unsafe fn wait_flags(flags: u64, n: u32, per_rank: u32, me: &Me, phase: u32, ok_s: u32) -> bool {
    let (epoch, err) = (me.epoch, me.err);
    let t = regs::tid();
    if t == 0 {
        smem::st_u32(ok_s, 1);
    }
    sync::block_sync();
    let start = regs::globaltimer();
    let mut ok = true;
    let mut i = t;
    while ok && i < n {
        let f = (flags + 4 * i as u64) as *const u32;
        loop {
            if sync::ld_acquire_sys(f) >= epoch {
                break;
            }
            if sync::ld_relaxed_gpu(err.add(2)) >= epoch {
                ok = false;
                break;
            }
            if regs::globaltimer().wrapping_sub(start) > me.timeout_ns {
                record(err, phase, i / per_rank.max(1), epoch);
                ok = false;
                break;
            }
            sync::nanosleep(128);
        }
        i += regs::ntid();
    }
    if !ok {
        smem::st_u32(ok_s, 0);
    }
    sync::block_sync();
    let all = smem::ld_u32(ok_s) != 0;
    sync::block_sync();
    all
}

/// Copy one row of `chunks` 16-byte chunks from `src` to `dst` with the 32 lanes of a warp: each lane loads up
/// to 8 of its chunks (lane, lane + 32, ...) before it stores them, so 4 KiB of a row are in flight per warp
/// instead of 512 bytes (one load latency per 8 chunks, not per chunk).
/// SAFETY: both rows 16-byte aligned global memory, valid for `chunks` chunks.
#[inline(always)]
pub unsafe fn copy_row(src: *const [u32; 4], dst: *mut [u32; 4], chunks: u32, lane: u32) {
    let mut c = lane;
    while c < chunks {
        let mut v = [[0u32; 4]; 8];
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            let ci = c + 32 * I as u32;
            if ci < chunks {
                v[I] = global::ld_v4(src.add(ci as usize));
            }
        });
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            let ci = c + 32 * I as u32;
            if ci < chunks {
                global::st_v4(dst.add(ci as usize), v[I]);
            }
        });
        c += 256;
    }
}
