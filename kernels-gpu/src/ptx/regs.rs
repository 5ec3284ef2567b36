//! Special registers and register reallocation.
use core::arch::asm;

/// Thread index in the block (x).
#[inline(always)]
pub fn tid() -> u32 {
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { core::arch::nvptx::_thread_idx_x() as u32 }
}

/// Block index in the grid (x).
#[inline(always)]
pub fn bid() -> u32 {
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { core::arch::nvptx::_block_idx_x() as u32 }
}

/// Block size (x).
#[inline(always)]
pub fn ntid() -> u32 {
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { core::arch::nvptx::_block_dim_x() as u32 }
}

/// Grid size in blocks (x).
#[inline(always)]
pub fn nctaid() -> u32 {
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { core::arch::nvptx::_grid_dim_x() as u32 }
}

/// The calling warp's warpgroup in the block (`tid / 128`), broadcast from lane 0 (`shfl.sync.idx`) so that ptxas
/// knows it is the same in every lane: what is computed from it (a consumer warpgroup's shared-memory descriptors,
/// its rows of a tile) can then live in uniform registers, where `tid / 128` itself puts the descriptor arithmetic
/// of every wgmma on the vector units followed by four `R2UR` moves (the weight gradients' main loop: 99 issued
/// instructions a k-step a warp against CUTLASS's 48, twenty-ninth session). The same value as `tid / 128`.
/// SAFETY: all 32 lanes of the warp, converged.
#[inline(always)]
pub unsafe fn warpgroup() -> u32 {
    crate::ptx::warp::uniform(tid() / 128)
}

/// Thread index in the block (x), read again where it is called: not a pure value the compiler may hoist out of a
/// loop and hold (addresses derived from it in a register-bound loop are recomputed instead of spilled).
#[inline(always)]
pub fn tid_fresh() -> u32 {
    let v: u32;
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { asm!("mov.u32 {v}, %tid.x;", v = out(reg32) v, options(nomem, nostack)) };
    v
}

/// The global nanosecond timer (coarse ticks); used to bound waits.
#[inline(always)]
pub fn globaltimer() -> u64 {
    let t: u64;
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { asm!("mov.u64 {t}, %globaltimer;", t = out(reg64) t, options(nomem, nostack)) };
    t
}

/// `%clock64` read after `dep` is computed (an input the read does not use, so the PTX orders the read after the
/// value's last write); for timeline probes.
#[inline(always)]
pub fn clock64_after(dep: u32) -> u64 {
    let t: u64;
    // SAFETY: reads a special register; `dep` is only named in a comment
    unsafe { asm!("// after {d}", "mov.u64 {t}, %clock64;", d = in(reg32) dep, t = out(reg64) t, options(nostack)) };
    t
}

/// The SM's 64-bit cycle counter (`%clock64`); for self-test timings.
#[inline(always)]
pub fn clock64() -> u64 {
    let t: u64;
    // SAFETY: reads a special register; any thread, no memory. Volatile (no `pure`): two reads are not merged.
    unsafe { asm!("mov.u64 {t}, %clock64;", t = out(reg64) t, options(nomem, nostack)) };
    t
}

/// `setmaxnreg.inc.sync.aligned.u32 N`: raise this warpgroup's register budget to N.
/// SAFETY: all 128 threads of a warpgroup, uniformly; the kernel must have a register cap at entry (`.maxntid`,
/// which build.rs adds from the manifest); N a multiple of 8 in 24..=256. No memory.
#[inline(always)]
pub unsafe fn setmaxnreg_inc<const N: u32>() {
    asm!("setmaxnreg.inc.sync.aligned.u32 {n};", n = const N, options(nomem, nostack));
}

/// `setmaxnreg.dec.sync.aligned.u32 N`: lower this warpgroup's register budget to N.
/// SAFETY: as [`setmaxnreg_inc`].
#[inline(always)]
pub unsafe fn setmaxnreg_dec<const N: u32>() {
    asm!("setmaxnreg.dec.sync.aligned.u32 {n};", n = const N, options(nomem, nostack));
}

/// Stop the kernel with an error (`trap`): the launch fails with an illegal-instruction error on the host.
#[inline(always)]
pub fn trap() -> ! {
    // SAFETY: ends the kernel; any thread.
    unsafe { core::arch::nvptx::trap() }
}

/// `v` through an empty `mov`: the compiler cannot see the value, so nothing computed from it is hoisted above
/// this point (a value live across `setmaxnreg` into the 40-register producer is spilled by ptxas; reading a
/// parameter through this inside each role keeps its uses after the reallocation). SAFETY-free: no memory.
#[inline(always)]
pub fn opaque(v: u32) -> u32 {
    let o: u32;
    // SAFETY: a register move.
    unsafe { asm!("mov.u32 {o}, {v};", o = out(reg32) o, v = in(reg32) v, options(pure, nomem, nostack)) };
    o
}
