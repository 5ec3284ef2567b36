//! Fast math and bf16 packing.
use core::arch::asm;

/// `ex2.approx.ftz.f32`: 2^x. SAFETY: none needed (any thread, no memory); `unsafe` only for the asm.
#[inline(always)]
pub fn ex2(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic; any thread.
    unsafe { asm!("ex2.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `rcp.approx.ftz.f32`: 1 / x.
#[inline(always)]
pub fn rcp(x: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic; any thread.
    unsafe { asm!("rcp.approx.ftz.f32 {r}, {x};", r = out(reg32) r, x = in(reg32) x, options(pure, nomem, nostack)) };
    r
}

/// `fma.rn.f32`: a * b + c rounded once (Rust does not contract a product and a sum into one on its own).
#[inline(always)]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    let r: f32;
    // SAFETY: pure arithmetic; any thread.
    unsafe {
        asm!("fma.rn.f32 {r}, {a}, {b}, {c};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, c = in(reg32) c,
             options(pure, nomem, nostack))
    };
    r
}

/// `cvt.rn.bf16x2.f32`: two f32 rounded to nearest-even bf16, `lo` in bits 0..16, `hi` in bits 16..32.
#[inline(always)]
pub fn pack_bf16x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure conversion; any thread.
    unsafe {
        asm!("cvt.rn.bf16x2.f32 {r}, {h}, {l};", r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo,
             options(pure, nomem, nostack))
    };
    r
}

/// `cvt.rn.satfinite.e4m3x2.f32`: four f32 as e4m3 codes (nearest even, saturated to +-448, NaN to 0x7f), `v[i]`
/// in byte i of the result: what [`crate::fp8::e4m3_from_f32`] computes on the host.
#[inline(always)]
pub fn pack_e4m3x4(v: [f32; 4]) -> u32 {
    let r: u32;
    // SAFETY: pure conversion; any thread. Each cvt puts its first operand in the high byte of its 16 bits.
    unsafe {
        asm!(
            "{{ .reg .b16 lo, hi; cvt.rn.satfinite.e4m3x2.f32 lo, {b}, {a}; cvt.rn.satfinite.e4m3x2.f32 hi, {d}, {c}; mov.b32 {r}, {{lo, hi}}; }}",
            r = out(reg32) r, a = in(reg32) v[0], b = in(reg32) v[1], c = in(reg32) v[2], d = in(reg32) v[3],
            options(pure, nomem, nostack)
        )
    };
    r
}

/// `cvt.rn.satfinite.e4m3x2.f32`: two f32 as e4m3 codes, `lo` in byte 0 and `hi` in byte 1 of the result (its
/// upper 16 bits zero).
#[inline(always)]
pub fn pack_e4m3x2(lo: f32, hi: f32) -> u32 {
    let r: u32;
    // SAFETY: pure conversion; any thread. The cvt puts its first operand in the high byte.
    unsafe {
        asm!(
            "{{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, {h}, {l}; cvt.u32.u16 {r}, t; }}",
            r = out(reg32) r, h = in(reg32) hi, l = in(reg32) lo, options(pure, nomem, nostack)
        )
    };
    r
}

/// `prmt.b32 d, a, b, sel`: byte i of the result is byte (sel >> 4 i) & 7 of the pair (a: bytes 0..3, b: 4..7).
#[inline(always)]
pub fn prmt(a: u32, b: u32, sel: u32) -> u32 {
    let r: u32;
    // SAFETY: pure byte permutation; any thread.
    unsafe {
        asm!("prmt.b32 {r}, {a}, {b}, {s};", r = out(reg32) r, a = in(reg32) a, b = in(reg32) b, s = in(reg32) sel,
             options(pure, nomem, nostack))
    };
    r
}

/// bf16 bits to f32 (exact).
#[inline(always)]
pub fn bf16_to_f32(b: u16) -> f32 {
    f32::from_bits((b as u32) << 16)
}

/// The sigmoid 1 / (1 + e^-x) through ex2 (about 2 ulp in f32).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    rcp(1.0 + ex2(-x * core::f32::consts::LOG2_E))
}
