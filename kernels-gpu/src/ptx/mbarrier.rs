//! `mbarrier` objects in shared memory (8 bytes, 8-byte aligned): init, arrive, expect-tx, try-wait on parity.
use core::arch::asm;

/// `mbarrier.init.shared::cta.b64 [bar], count`.
/// SAFETY: one thread; `bar` an 8-byte-aligned shared address that no other thread uses until a barrier after
/// [`crate::ptx::fence::mbarrier_init`].
#[inline(always)]
pub unsafe fn init(bar: u32, count: u32) {
    asm!("mbarrier.init.shared::cta.b64 [{b}], {c};", b = in(reg32) bar, c = in(reg32) count, options(nostack));
}

/// `mbarrier.inval.shared::cta.b64 [bar]`. SAFETY: one thread, once no thread waits on `bar` any more.
#[inline(always)]
pub unsafe fn inval(bar: u32) {
    asm!("mbarrier.inval.shared::cta.b64 [{b}];", b = in(reg32) bar, options(nostack));
}

/// `mbarrier.arrive.shared::cta.b64 _, [bar]`: one arrival (release, CTA scope).
/// SAFETY: any thread; `bar` an initialized mbarrier whose phase expects this arrival.
#[inline(always)]
pub unsafe fn arrive(bar: u32) {
    asm!("mbarrier.arrive.shared::cta.b64 _, [{b}];", b = in(reg32) bar, options(nostack));
}

/// `mbarrier.arrive.expect_tx.shared::cta.b64 _, [bar], tx`: one arrival that also expects `tx` more bytes.
/// SAFETY: any thread (usually the one issuing the copies); `bar` an initialized mbarrier.
#[inline(always)]
pub unsafe fn arrive_expect_tx(bar: u32, tx: u32) {
    asm!("mbarrier.arrive.expect_tx.shared::cta.b64 _, [{b}], {t};", b = in(reg32) bar, t = in(reg32) tx,
         options(nostack));
}

/// `mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [bar], tx`: expect `tx` more bytes without arriving.
/// SAFETY: any thread; `bar` an initialized mbarrier in its current phase.
#[inline(always)]
pub unsafe fn expect_tx(bar: u32, tx: u32) {
    asm!("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [{b}], {t};", b = in(reg32) bar, t = in(reg32) tx,
         options(nostack));
}

/// `mbarrier.try_wait.parity.shared::cta.b64`: true once the phase with parity `parity` has completed
/// (acquire, CTA scope). The hardware may suspend the thread for a while before answering false.
/// SAFETY: any thread; `bar` an initialized mbarrier.
#[inline(always)]
pub unsafe fn try_wait_parity(bar: u32, parity: u32) -> bool {
    let done: u32;
    asm!(
        "{{ .reg .pred p;",
        "mbarrier.try_wait.parity.shared::cta.b64 p, [{b}], {ph};",
        "selp.u32 {d}, 1, 0, p; }}",
        b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
    );
    done != 0
}

/// `mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64`: as [`try_wait_parity`] with acquire at cluster
/// scope, for a phase that threads of another CTA of the cluster complete (their release pairs with it).
/// SAFETY: as [`try_wait_parity`], in a cluster launch.
#[inline(always)]
pub unsafe fn try_wait_parity_cluster(bar: u32, parity: u32) -> bool {
    let done: u32;
    asm!(
        "{{ .reg .pred p;",
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [{b}], {ph};",
        "selp.u32 {d}, 1, 0, p; }}",
        b = in(reg32) bar, ph = in(reg32) parity, d = out(reg32) done, options(nostack)
    );
    done != 0
}

/// Spin on [`try_wait_parity_cluster`] until the phase completes. Unbounded: only where the other side is
/// guaranteed to arrive. SAFETY: as [`try_wait_parity_cluster`].
#[inline(always)]
pub unsafe fn wait_parity_cluster(bar: u32, parity: u32) {
    while !try_wait_parity_cluster(bar, parity) {}
}

/// Spin on [`try_wait_parity`] until the phase completes. Unbounded: only for waits inside one block whose
/// other side is guaranteed to arrive (the copies this block issued itself).
/// SAFETY: as [`try_wait_parity`].
#[inline(always)]
pub unsafe fn wait_parity(bar: u32, parity: u32) {
    while !try_wait_parity(bar, parity) {}
}

/// `mbarrier.arrive.shared::cluster.b64` (release at CTA scope, the default; CUTLASS's and DeepGEMM's remote
/// arrival): one arrival on the barrier at `shared::cluster` address `bar` (this CTA's or a peer's, from
/// [`crate::ptx::cluster::map_shared`]). The stage's readers here are wgmma, complete (`wgmma.wait_group`)
/// before the arrival. SAFETY: any thread of a cluster launch; `bar` an initialized mbarrier of a CTA of the
/// cluster that has not exited.
#[inline(always)]
pub unsafe fn arrive_cluster(bar: u32) {
    asm!("mbarrier.arrive.shared::cluster.b64 _, [{b}];", b = in(reg32) bar, options(nostack));
}

/// `mbarrier.arrive.release.cluster.shared::cluster.b64`: one arrival on the barrier at `shared::cluster` address
/// `bar` (from [`crate::ptx::cluster::map_shared`]) with release at cluster scope: this thread's earlier memory
/// accesses (its shared-memory reads too) are ordered before it for a thread of any CTA of the cluster that
/// observes the phase with [`try_wait_parity_cluster`]. A memory barrier in SASS: for once-a-tile hand-offs, not
/// per stage. SAFETY: as [`arrive_cluster`].
#[inline(always)]
pub unsafe fn arrive_release_cluster(bar: u32) {
    asm!("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [{b}];", b = in(reg32) bar, options(nostack));
}
