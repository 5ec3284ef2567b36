//! Dynamic shared memory and plain shared-memory accesses.
use core::arch::asm;

core::arch::global_asm!(".extern .shared .align 1024 .b8 SMEM[];");

/// The `shared::cta` address of the block's dynamic shared memory (1024-byte aligned).
#[inline(always)]
pub fn base() -> u32 {
    let b: u32;
    // SAFETY: takes an address; any thread, no memory access.
    unsafe { asm!("mov.u32 {b}, SMEM;", b = out(reg32) b, options(nomem, nostack, pure)) };
    b
}

/// `ld.shared.u32`. SAFETY: any thread; `addr` 4-byte aligned inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_u32(addr: u32) -> u32 {
    let v: u32;
    asm!("ld.shared.u32 {v}, [{a}];", v = out(reg32) v, a = in(reg32) addr, options(nostack, readonly));
    v
}

/// `st.shared.u32`. SAFETY: any thread; `addr` 4-byte aligned inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn st_u32(addr: u32, v: u32) {
    asm!("st.shared.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `st.shared.u16`: the low 16 bits of `v`. SAFETY: any thread; `addr` 2-byte aligned inside dynamic shared
/// memory.
#[inline(always)]
pub unsafe fn st_u16(addr: u32, v: u32) {
    asm!("st.shared.u16 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `st.shared.u8`: the low 8 bits of `v`. SAFETY: any thread; `addr` inside dynamic shared memory.
#[inline(always)]
pub unsafe fn st_u8(addr: u32, v: u32) {
    asm!("st.shared.u8 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}

/// `ld.shared.v4.u32` (16 bytes). SAFETY: any thread; `addr` 16-byte aligned inside dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_v4(addr: u32) -> [u32; 4] {
    let (a, b, c, d): (u32, u32, u32, u32);
    asm!("ld.shared.v4.u32 {{{a}, {b}, {c}, {d}}}, [{p}];", a = out(reg32) a, b = out(reg32) b,
         c = out(reg32) c, d = out(reg32) d, p = in(reg32) addr, options(nostack, readonly));
    [a, b, c, d]
}

/// `ld.shared.v2.u32` (8 bytes). SAFETY: any thread; `addr` 8-byte aligned inside dynamic shared memory.
#[inline(always)]
pub unsafe fn ld_v2(addr: u32) -> [u32; 2] {
    let (a, b): (u32, u32);
    asm!("ld.shared.v2.u32 {{{a}, {b}}}, [{p}];", a = out(reg32) a, b = out(reg32) b, p = in(reg32) addr,
         options(nostack, readonly));
    [a, b]
}

/// `st.shared.v2.u32` (8 bytes). SAFETY: any thread; `addr` 8-byte aligned inside dynamic shared memory.
#[inline(always)]
pub unsafe fn st_v2(addr: u32, a: u32, b: u32) {
    asm!("st.shared.v2.u32 [{p}], {{{a}, {b}}};", p = in(reg32) addr, a = in(reg32) a, b = in(reg32) b,
         options(nostack));
}

/// `st.shared.v4.u32` (16 bytes). SAFETY: any thread; `addr` 16-byte aligned inside dynamic shared memory.
#[inline(always)]
pub unsafe fn st_v4(addr: u32, v: [u32; 4]) {
    asm!("st.shared.v4.u32 [{p}], {{{a}, {b}, {c}, {d}}};", p = in(reg32) addr, a = in(reg32) v[0],
         b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3], options(nostack));
}

/// `red.shared.add.u32`: atomically add `v` to a shared word (no result).
/// SAFETY: any thread; `addr` 4-byte aligned inside the launch's dynamic shared memory.
#[inline(always)]
pub unsafe fn red_add_u32(addr: u32, v: u32) {
    asm!("red.shared.add.u32 [{a}], {v};", a = in(reg32) addr, v = in(reg32) v, options(nostack));
}
