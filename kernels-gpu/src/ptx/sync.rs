//! Barriers and flags: named barriers, and acquire/release accesses at GPU and system scope.
use core::arch::asm;

/// `barrier.sync id, n`: wait until `n` threads (a multiple of 32) have reached barrier `id`.
/// The non-`.aligned` form, safe even if the compiler duplicates it into divergent branches.
/// SAFETY: `n` threads of the block, in whole warps; `id` < 16 and not used with another count meanwhile.
#[inline(always)]
pub unsafe fn named_sync(id: u32, n: u32) {
    asm!("barrier.sync {i}, {n};", i = in(reg32) id, n = in(reg32) n, options(nostack));
}

/// `barrier.arrive id, n`: count this warp towards barrier `id` without waiting.
/// SAFETY: as [`named_sync`]; the waiting side calls [`named_sync`] with the same `n`.
#[inline(always)]
pub unsafe fn named_arrive(id: u32, n: u32) {
    asm!("barrier.arrive {i}, {n};", i = in(reg32) id, n = in(reg32) n, options(nostack));
}

/// `bar.warp.sync 0xffffffff`: the 32 lanes of this warp meet; memory accesses before it are ordered before
/// those after it among them.
/// SAFETY: every lane of the warp.
#[inline(always)]
pub unsafe fn warp_sync() {
    asm!("bar.warp.sync -1;", options(nostack));
}

/// The whole block: `barrier.sync 0` (non-aligned form).
/// SAFETY: every thread of the block.
#[inline(always)]
pub unsafe fn block_sync() {
    asm!("barrier.sync 0;", options(nostack));
}

/// `barrier.red.popc.u32 0`: the whole block meets at barrier 0 and every thread gets the number of threads
/// whose `pred` is true (the non-`.aligned` form).
/// SAFETY: every thread of the block.
#[inline(always)]
pub unsafe fn block_count(pred: bool) -> u32 {
    let r: u32;
    asm!(
        "{{ .reg .pred %bcp; setp.ne.u32 %bcp, {v}, 0; barrier.red.popc.u32 {r}, 0, %bcp; }}",
        r = out(reg32) r,
        v = in(reg32) pred as u32,
        options(nostack)
    );
    r
}

macro_rules! flag_ops {
    ($scope:literal, $ld:ident, $st:ident, $red:ident, $atom_add:ident) => {
        #[doc = concat!("`ld.acquire.", $scope, ".global.u32`: read a flag; later accesses stay after it.")]
        /// SAFETY: any thread; `p` 4-byte aligned global (or peer-mapped) memory.
        #[inline(always)]
        pub unsafe fn $ld(p: *const u32) -> u32 {
            let v: u32;
            asm!(concat!("ld.acquire.", $scope, ".global.u32 {v}, [{p}];"), v = out(reg32) v, p = in(reg64) p,
                 options(nostack));
            v
        }

        #[doc = concat!("`st.release.", $scope, ".global.u32`: publish a flag after this thread's earlier accesses.")]
        /// SAFETY: any thread; `p` 4-byte aligned global (or peer-mapped) memory.
        #[inline(always)]
        pub unsafe fn $st(p: *mut u32, v: u32) {
            asm!(concat!("st.release.", $scope, ".global.u32 [{p}], {v};"), p = in(reg64) p, v = in(reg32) v,
                 options(nostack));
        }

        #[doc = concat!("`red.release.", $scope, ".global.add.u32`: add to a counter, releasing earlier accesses.")]
        /// SAFETY: any thread; `p` 4-byte aligned global (or peer-mapped) memory.
        #[inline(always)]
        pub unsafe fn $red(p: *mut u32, v: u32) {
            asm!(concat!("red.release.", $scope, ".global.add.u32 [{p}], {v};"), p = in(reg64) p, v = in(reg32) v,
                 options(nostack));
        }

        #[doc = concat!("`atom.acq_rel.", $scope, ".global.add.u32`: add and return the old value.")]
        /// SAFETY: any thread; `p` 4-byte aligned global (or peer-mapped) memory.
        #[inline(always)]
        pub unsafe fn $atom_add(p: *mut u32, v: u32) -> u32 {
            let old: u32;
            asm!(concat!("atom.acq_rel.", $scope, ".global.add.u32 {o}, [{p}], {v};"), o = out(reg32) old,
                 p = in(reg64) p, v = in(reg32) v, options(nostack));
            old
        }
    };
}

flag_ops!("gpu", ld_acquire_gpu, st_release_gpu, red_release_gpu, atom_add_acq_rel_gpu);
flag_ops!("sys", ld_acquire_sys, st_release_sys, red_release_sys, atom_add_acq_rel_sys);

/// `atom.relaxed.gpu.global.add.u32`: add and return the old value, ordering nothing else (a work counter).
/// SAFETY: any thread; `p` 4-byte aligned global memory.
#[inline(always)]
pub unsafe fn atom_add_relaxed_gpu(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    asm!("atom.relaxed.gpu.global.add.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v,
         options(nostack));
    old
}

/// `atom.acq_rel.gpu.global.cas.b32`: swap in `new` if `*p` holds `cmp`; returns the value found.
/// SAFETY: any thread; `p` 4-byte aligned global memory.
#[inline(always)]
pub unsafe fn atom_cas_acq_rel_gpu(p: *mut u32, cmp: u32, new: u32) -> u32 {
    let old: u32;
    asm!("atom.acq_rel.gpu.global.cas.b32 {o}, [{p}], {c}, {n};", o = out(reg32) old, p = in(reg64) p,
         c = in(reg32) cmp, n = in(reg32) new, options(nostack));
    old
}

/// `st.relaxed.gpu.global.u32`. SAFETY: any thread; `p` 4-byte aligned global memory.
#[inline(always)]
pub unsafe fn st_relaxed_gpu(p: *mut u32, v: u32) {
    asm!("st.relaxed.gpu.global.u32 [{p}], {v};", p = in(reg64) p, v = in(reg32) v, options(nostack));
}

/// `ld.relaxed.gpu.global.u32`. SAFETY: any thread; `p` 4-byte aligned global memory.
#[inline(always)]
pub unsafe fn ld_relaxed_gpu(p: *const u32) -> u32 {
    let v: u32;
    asm!("ld.relaxed.gpu.global.u32 {v}, [{p}];", v = out(reg32) v, p = in(reg64) p, options(nostack));
    v
}

/// `__nanosleep`: back off for about `ns` nanoseconds. SAFETY: any thread; no memory.
#[inline(always)]
pub unsafe fn nanosleep(ns: u32) {
    asm!("nanosleep.u32 {n};", n = in(reg32) ns, options(nomem, nostack));
}

/// `atom.relaxed.gpu.global.max.u32`: raise `*p` to at least `v`; returns the old value (the error record's
/// claim: the first writer of an epoch sees an older value).
/// SAFETY: any thread; `p` 4-byte aligned global memory.
#[inline(always)]
pub unsafe fn atom_max_relaxed_gpu(p: *mut u32, v: u32) -> u32 {
    let old: u32;
    asm!("atom.relaxed.gpu.global.max.u32 {o}, [{p}], {v};", o = out(reg32) old, p = in(reg64) p, v = in(reg32) v,
         options(nostack));
    old
}

/// `griddepcontrol.wait`: wait until every grid this one depends on programmatically (a launch with programmatic
/// stream serialization) has completed and its memory is visible; returns at once in a grid launched without it.
/// SAFETY: any thread; before its first access to memory an earlier grid of the stream writes or reads.
#[inline(always)]
pub unsafe fn grid_dep_wait() {
    asm!("griddepcontrol.wait;", options(nostack));
}

/// `griddepcontrol.launch_dependents`: this block allows the next grid of the stream (launched with programmatic
/// stream serialization) to be scheduled before this grid ends (once every block has allowed it or exited). It
/// publishes nothing: the next grid's `griddepcontrol.wait` still waits for this grid's end.
/// SAFETY: any thread.
#[inline(always)]
pub unsafe fn grid_dep_launch_dependents() {
    asm!("griddepcontrol.launch_dependents;", options(nostack));
}
