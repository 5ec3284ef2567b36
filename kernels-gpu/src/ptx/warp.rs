//! Warp-wide matrix moves between registers and shared memory (`ldmatrix`, `stmatrix`) and shuffles.
use core::arch::asm;

/// `ldmatrix.sync.aligned.m8n8.x4.shared.b16`: four 8x8 b16 matrices; lane l gives the address of row l % 8 of
/// matrix l / 8 and receives, in register i, the pair of elements (row lane/4, cols 2*(lane%4)..+2) of matrix i.
/// SAFETY: all 32 lanes of a warp, uniformly; each address 16-byte aligned in shared memory.
#[inline(always)]
pub unsafe fn ldmatrix_x4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a,
         b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack, readonly));
    [a, b, c, d]
}

/// `ldmatrix ... .x4.trans`: as [`ldmatrix_x4`], each matrix transposed.
/// SAFETY: as [`ldmatrix_x4`].
#[inline(always)]
pub unsafe fn ldmatrix_x4_trans(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a,
         b = out(reg32) b, c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack, readonly));
    [a, b, c, d]
}

/// `stmatrix.sync.aligned.m8n8.x4.shared.b16`: the inverse of [`ldmatrix_x4`].
/// SAFETY: all 32 lanes of a warp, uniformly; each address 16-byte aligned in shared memory.
#[inline(always)]
pub unsafe fn stmatrix_x4(addr: u32, v: [u32; 4]) {
    asm!("stmatrix.sync.aligned.m8n8.x4.shared.b16 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr,
         a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// `stmatrix ... .x4.trans`: as [`stmatrix_x4`], each matrix transposed.
/// SAFETY: as [`stmatrix_x4`].
#[inline(always)]
pub unsafe fn stmatrix_x4_trans(addr: u32, v: [u32; 4]) {
    asm!("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr,
         a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// `shfl.sync.bfly.b32` over the full warp. SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn shfl_xor(v: u32, mask: u32) -> u32 {
    let r: u32;
    asm!("shfl.sync.bfly.b32 {r}, {v}, {m}, 0x1f, 0xffffffff;", r = out(reg32) r, v = in(reg32) v,
         m = in(reg32) mask, options(nomem, nostack));
    r
}

/// Lane index in the warp.
#[inline(always)]
pub fn lane() -> u32 {
    let l: u32;
    // SAFETY: reads a special register; any thread, no memory.
    unsafe { asm!("mov.u32 {l}, %laneid;", l = out(reg32) l, options(nomem, nostack, pure)) };
    l
}

/// `elect.sync`: true in exactly one lane of the (fully active) warp.
/// SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn elect_one() -> bool {
    let e: u32;
    asm!("{{ .reg .pred p; .reg .b32 l; elect.sync l|p, 0xffffffff; selp.u32 {e}, 1, 0, p; }}",
         e = out(reg32) e, options(nomem, nostack));
    e != 0
}

/// `shfl.sync.up.b32` over the full warp: the value of lane - delta (own value for lanes < delta).
/// SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn shfl_up(v: u32, delta: u32) -> u32 {
    let r: u32;
    asm!("shfl.sync.up.b32 {r}, {v}, {d}, 0, 0xffffffff;", r = out(reg32) r, v = in(reg32) v,
         d = in(reg32) delta, options(nomem, nostack));
    r
}

/// `shfl.sync.idx.b32` over the full warp: the value of lane `src`.
/// SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn shfl_idx(v: u32, src: u32) -> u32 {
    let r: u32;
    asm!("shfl.sync.idx.b32 {r}, {v}, {s}, 0x1f, 0xffffffff;", r = out(reg32) r, v = in(reg32) v,
         s = in(reg32) src, options(nomem, nostack));
    r
}

/// `v` of lane 0 (`shfl.sync.idx`), for a value the same in every lane that ptxas cannot prove so (it derives
/// from `%tid`, a shared-memory load or a loop it does not analyse): what is computed from the result can live in
/// uniform registers. One instruction; the wgmma descriptors of a main loop built from such a value take the
/// uniform datapath instead of vector arithmetic and four `R2UR` moves per wgmma (twenty-ninth session).
/// SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn uniform(v: u32) -> u32 {
    shfl_idx(v, 0)
}

/// `match.any.sync.b32` over the full warp: the mask of the lanes whose `v` equals this lane's.
/// SAFETY: all 32 lanes, uniformly; no memory.
#[inline(always)]
pub unsafe fn match_any(v: u32) -> u32 {
    let m: u32;
    asm!("match.any.sync.b32 {m}, {v}, 0xffffffff;", m = out(reg32) m, v = in(reg32) v, options(nomem, nostack));
    m
}

/// `bar.warp.sync 0xffffffff`: the warp's lanes meet here; their earlier memory accesses are ordered before
/// their later ones (among the warp's lanes). SAFETY: all 32 lanes, uniformly.
#[inline(always)]
pub unsafe fn sync_warp() {
    asm!("bar.warp.sync 0xffffffff;", options(nostack));
}
