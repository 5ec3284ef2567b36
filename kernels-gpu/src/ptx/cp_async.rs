//! `cp.async` (the per-thread asynchronous copy, 16 bytes from global to shared memory) and its groups: the
//! gathered operand loads, where each row comes from its own address and a tensor map cannot describe the
//! tile. Writes through the generic proxy: before the tensor cores (async proxy) read them, the writing thread
//! waits for its group and runs `fence.proxy.async.shared::cta`, then publishes (mbarrier arrive or barrier).
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
