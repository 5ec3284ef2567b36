//! `cp.async` (the per-thread asynchronous copy, 16 bytes from global to shared memory) and its groups: the
//! gathered operand loads, where each row comes from its own address and a tensor map cannot describe the
//! tile. Writes through the generic proxy: before the tensor cores (async proxy) read them, either the writing
//! thread waits for its group, runs `fence.proxy.async.shared::cta` and publishes (mbarrier arrive or barrier),
//! or the copies publish themselves ([`mbarrier_arrive_noinc`]) and the reading threads run the proxy fence
//! after their mbarrier wait.
use core::arch::asm;

/// `cp.async.cg.shared.global [dst], [src], 16, n`: copy `n` (0 or 16) bytes from global `src` to shared `dst`
/// and zero the rest of the 16 bytes (`n` = 0: `src` is not read, the 16 bytes become zeros).
/// SAFETY: any thread; `dst` 16-byte aligned shared memory that nobody reads until this thread's group is
/// waited for; with `n` = 16, `src` 16-byte aligned readable global memory.
#[inline(always)]
pub unsafe fn copy16_zfill(dst: u32, src: *const u8, n: u32) {
    asm!("cp.async.cg.shared.global [{d}], [{s}], 16, {n};", d = in(reg32) dst, s = in(reg64) src,
         n = in(reg32) n, options(nostack));
}

/// `cp.async.commit_group`: close this thread's group of copies so far. SAFETY: any thread.
#[inline(always)]
pub unsafe fn commit_group() {
    asm!("cp.async.commit_group;", options(nostack));
}

/// `cp.async.wait_group N`: wait until at most N of this thread's groups are pending (the others' bytes are in
/// shared memory and visible to this thread). SAFETY: any thread.
#[inline(always)]
pub unsafe fn wait_group<const N: u32>() {
    asm!("cp.async.wait_group {n};", n = const N, options(nostack));
}

/// `cp.async.mbarrier.arrive.noinc.shared::cta.b64 [bar]`: an arrival on `bar`, made by the hardware once every
/// `cp.async` this thread issued before it has completed (the thread goes on at once). `.noinc`: the arrival
/// counts against the barrier's expected count (initialise it with one per arriving thread).
/// SAFETY: any thread; `bar` an initialised shared-memory mbarrier whose current phase expects this arrival.
#[inline(always)]
pub unsafe fn mbarrier_arrive_noinc(bar: u32) {
    asm!("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [{b}];", b = in(reg32) bar, options(nostack));
}
