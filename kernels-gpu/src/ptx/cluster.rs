//! Thread-block clusters (sm_90): shared-memory addresses of a peer CTA and the cluster-wide barrier.
use core::arch::asm;

/// `mapa.shared::cluster.u32`: the `shared::cluster` address of the variable at this CTA's shared address
/// `addr` in the cluster's CTA `rank` (its own rank too). SAFETY: any thread of a cluster launch; `rank` below
/// the cluster size.
#[inline(always)]
pub unsafe fn map_shared(addr: u32, rank: u32) -> u32 {
    let d: u32;
    asm!("mapa.shared::cluster.u32 {d}, {a}, {r};", d = out(reg32) d, a = in(reg32) addr, r = in(reg32) rank,
         options(nostack, pure, nomem));
    d
}

/// `barrier.cluster.arrive.release` then `barrier.cluster.wait.acquire` (the non-`.aligned` forms: callable
/// from divergent code): every non-exited thread of every CTA of the cluster arrives before any leaves, and
/// the shared-memory writes before it are visible to the cluster after it. SAFETY: every thread of every CTA
/// of the cluster must reach it the same number of times.
#[inline(always)]
pub unsafe fn sync() {
    asm!("barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;", options(nostack));
}

/// `st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [addr], v, [bar]`: store `v` into a CTA of the
/// cluster at `shared::cluster` address `addr` (from [`map_shared`]); the store completes 4 transaction bytes on
/// the mbarrier at `shared::cluster` address `bar` in the same CTA, so a thread there that waits for the barrier's
/// phase (having expected the 4 bytes) then reads `v`. SAFETY: any thread of a cluster launch; `addr` 4-byte
/// aligned and `bar` an initialized mbarrier, both of a CTA of the cluster that has not exited.
#[inline(always)]
pub unsafe fn st_async_u32(addr: u32, v: u32, bar: u32) {
    asm!("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [{a}], {v}, [{b}];",
         a = in(reg32) addr, v = in(reg32) v, b = in(reg32) bar, options(nostack));
}
