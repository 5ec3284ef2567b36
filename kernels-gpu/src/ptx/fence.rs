//! Proxy and memory fences.
use core::arch::asm;

/// `fence.proxy.async.shared::cta`: order this thread's ordinary shared-memory accesses before later
/// async-proxy (TMA, wgmma operand) accesses, and vice versa.
/// SAFETY: any thread; no memory of its own. Each thread that wrote shared memory the async proxy reads next runs
/// it before the barrier that publishes the writes.
#[inline(always)]
pub unsafe fn proxy_async_shared_cta() {
    asm!("fence.proxy.async.shared::cta;", options(nostack));
}

/// `fence.proxy.async.global`: as [`proxy_async_shared_cta`], for global memory (ordinary stores that a later
/// TMA load reads). SAFETY: any thread; no memory of its own.
#[inline(always)]
pub unsafe fn proxy_async_global() {
    asm!("fence.proxy.async.global;", options(nostack));
}

/// `fence.proxy.async`: all state spaces. SAFETY: any thread; no memory of its own.
#[inline(always)]
pub unsafe fn proxy_async() {
    asm!("fence.proxy.async;", options(nostack));
}

/// `fence.acq_rel.gpu`. SAFETY: any thread; orders this thread's memory accesses at GPU scope.
#[inline(always)]
pub unsafe fn acq_rel_gpu() {
    asm!("fence.acq_rel.gpu;", options(nostack));
}

/// `fence.acq_rel.sys`. SAFETY: any thread; orders this thread's memory accesses at system scope (peer GPUs).
#[inline(always)]
pub unsafe fn acq_rel_sys() {
    asm!("fence.acq_rel.sys;", options(nostack));
}

/// `fence.mbarrier_init.release.cluster`: make `mbarrier.init` visible to the async proxy and the cluster.
/// SAFETY: the thread that ran `mbarrier.init`, after it and before the barrier that publishes it.
#[inline(always)]
pub unsafe fn mbarrier_init() {
    asm!("fence.mbarrier_init.release.cluster;", options(nostack));
}
