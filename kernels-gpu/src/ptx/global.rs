//! Plain 16-byte global-memory accesses (the row copies and sums of the gather, combine and EP kernels): one
//! `ld.global.v4.u32` / `st.global.v4.u32` instead of the four 4-byte generic accesses a `[u32; 4]` copy
//! compiles to. Ordinary (weak) accesses: ordering with other threads and GPUs comes from the callers' fences,
//! flags and barriers.
use core::arch::asm;

/// `ld.global.v4.u32`. SAFETY: any thread; `p` a 16-byte aligned global address (a peer GPU's too, through
/// its unified address) readable for 16 bytes, not written by anyone during this kernel unless the caller
/// orders that write before this load.
#[inline(always)]
pub unsafe fn ld_v4(p: *const [u32; 4]) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.global.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         c = out(reg32) c, d = out(reg32) d, p = in(reg64) p, options(nostack, readonly));
    [a, b, c, d]
}

/// `st.global.v4.u32`. SAFETY: any thread; `p` a 16-byte aligned global address (a peer GPU's too) writable for
/// 16 bytes that no other thread accesses during this kernel unless the caller orders it.
#[inline(always)]
pub unsafe fn st_v4(p: *mut [u32; 4], v: [u32; 4]) {
    asm!("st.global.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg64) p, a = in(reg32) v[0],
         b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// `st.global.v2.u32`. SAFETY: any thread; `p` an 8-byte aligned global address writable for 8 bytes that no other
/// thread accesses during this kernel unless the caller orders it.
#[inline(always)]
pub unsafe fn st_v2(p: *mut [u32; 2], v: [u32; 2]) {
    asm!("st.global.v2.u32 [{p}], {{{a}, {b}}};", p = in(reg64) p, a = in(reg32) v[0], b = in(reg32) v[1],
         options(nostack));
}

/// `ld.global.nc.f32`: a read-only load through the non-coherent path (LDG). SAFETY: any thread; `p` a 4-byte
/// aligned global address that nothing writes during this kernel.
#[inline(always)]
pub unsafe fn ld_nc_f32(p: *const f32) -> f32 {
    let r: f32;
    asm!("ld.global.nc.f32 {r}, [{p}];", r = out(reg32) r, p = in(reg64) p, options(nostack, readonly, pure));
    r
}

/// `ld.global.u32`: a weak load named global, so ptxas may move it past this thread's shared-memory stores (a
/// generic load after a generic or shared store waits for it: ptxas cannot tell the spaces apart), though not
/// across a barrier (as `.nc` loads may be: in the FP8 dh's epilogue ptxas hoisted a next batch that way, and
/// 128 of them in its register path, at a cost in spills). Not `pure`: two loads of one address stay two loads.
/// SAFETY: any thread; `p` a 4-byte aligned global address readable for 4 bytes, not written during this kernel
/// unless the caller orders that write before this load.
#[inline(always)]
pub unsafe fn ld_u32(p: *const u32) -> u32 {
    let r: u32;
    asm!("ld.global.u32 {r}, [{p}];", r = out(reg32) r, p = in(reg64) p, options(nostack, readonly));
    r
}

/// `prefetch.global.L1`: bring the line holding `p` into this SM's L1. SAFETY: any thread; `p` a global address
/// (a prefetch never faults, but must name global memory).
#[inline(always)]
pub unsafe fn prefetch_l1<T>(p: *const T) {
    asm!("prefetch.global.L1 [{p}];", p = in(reg64) p, options(nostack, readonly));
}
