//! Blockwise FP8 (e4m3, the OCP "E4M3FN" format Hopper's tensor cores read) as pure logic, for the host's
//! reference and tests and for the kernels' scale rule.
//!
//! A quantized tensor is e4m3 codes plus one f32 scale per block: activations per row and 128 columns (1 x 128),
//! weights per 128 x 128 block, as DeepSeek-V3's recipe. A block's scale is amax / 448 (448 is e4m3's largest
//! finite value) and its codes are e4m3(x * (448 / amax)), rounded to nearest even and saturated to +-448; a block
//! of zeros has scale 1 and codes 0. The value a code stands for is decode(code) * scale. Kernels and the host
//! compute the scale and the factor with the same two correctly rounded f32 divisions ([`scale_and_factor`]) and
//! the same f32 product, so the codes are bitwise equal on both.

/// e4m3's largest finite value.
pub const E4M3_MAX: f32 = 448.0;

/// Columns (or rows and columns, for weights) per scale block.
pub const BLOCK: u32 = 128;

/// Below this a block's amax is raised to it: 448 / amax stays finite (it would overflow to infinity below
/// ~1.3e-36, bf16 subnormals included, and 0 * inf is a NaN). Values that small quantize to zero codes.
pub const AMAX_FLOOR: f32 = 1e-30;

/// The scale of a block whose largest magnitude is `amax`, and the factor its values are multiplied by before
/// rounding: (amax / 448, 448 / amax) with amax raised to [`AMAX_FLOOR`]; (1, 1) for a block of zeros (or a NaN /
/// infinite amax: the codes then carry the NaN or saturate).
#[inline(always)]
pub fn scale_and_factor(amax: f32) -> (f32, f32) {
    if amax > 0.0 && amax < f32::INFINITY {
        let a = amax.max(AMAX_FLOOR);
        (a / E4M3_MAX, E4M3_MAX / a)
    } else {
        (1.0, 1.0)
    }
}

/// Round a non-negative `v` < 16 to the nearest integer, ties to even (exact in f32).
#[inline(always)]
fn round_half_even(v: f32) -> u32 {
    let f = v as u32;
    let r = v - f as f32;
    if r > 0.5 || (r == 0.5 && f & 1 == 1) {
        f + 1
    } else {
        f
    }
}

/// `x` as an e4m3 code: rounded to nearest even, saturated to +-448 (infinities too), NaN to 0x7f: what
/// `cvt.rn.satfinite.e4m3x2.f32` gives.
pub fn e4m3_from_f32(x: f32) -> u8 {
    let bits = x.to_bits();
    let s = ((bits >> 24) & 0x80) as u8;
    let a = f32::from_bits(bits & 0x7fff_ffff);
    if a.is_nan() {
        return 0x7f;
    }
    if a >= E4M3_MAX {
        return s | 0x7e;
    }
    let ex = ((a.to_bits() >> 23) as i32) - 127;
    if ex < -6 {
        // subnormal: multiples of 2^-9 (8 is the smallest normal, code 0x08, so the carry is right)
        return s | round_half_even(a * 512.0) as u8;
    }
    let mant = a.to_bits() & 0x7f_ffff;
    let (q, rem) = (mant >> 20, mant & 0xf_ffff);
    let half = 0x8_0000;
    let q = if rem > half || (rem == half && q & 1 == 1) { q + 1 } else { q };
    // q = 8 carries into the exponent; below 448 the result stays at most 0x7e
    s | ((((ex + 7) as u32) << 3) + q) as u8
}

/// The value of e4m3 code `c` (NaN for 0x7f / 0xff).
pub fn e4m3_to_f32(c: u8) -> f32 {
    let neg = c & 0x80 != 0;
    let e = ((c >> 3) & 0xf) as i32;
    let m = (c & 7) as u32;
    let v = if e == 15 && m == 7 {
        f32::NAN
    } else if e == 0 {
        m as f32 / 512.0
    } else {
        // (8 + m) * 2^(e - 10), e - 10 in -9..=5: an exact power of two
        (8 + m) as f32 * f32::from_bits(((e - 10 + 127) as u32) << 23)
    };
    if neg {
        -v
    } else {
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_and_the_grid_is_e4m3() {
        for c in 0..=255u8 {
            let v = e4m3_to_f32(c);
            if c & 0x7f == 0x7f {
                assert!(v.is_nan());
                continue;
            }
            assert_eq!(e4m3_from_f32(v), c, "code {c:#x} value {v}");
        }
        assert_eq!(e4m3_to_f32(0x7e), 448.0);
        assert_eq!(e4m3_to_f32(0x08), 1.0 / 64.0);
        assert_eq!(e4m3_to_f32(0x01), 1.0 / 512.0);
        assert_eq!(e4m3_to_f32(0x38), 1.0);
        assert_eq!(e4m3_to_f32(0xb8), -1.0);
    }

    #[test]
    fn rounding_is_to_nearest_even_and_saturates() {
        // between 1 (0x38) and 1.125 (0x39): the midpoint goes to the even code
        assert_eq!(e4m3_from_f32(1.0625), 0x38);
        assert_eq!(e4m3_from_f32(1.0626), 0x39);
        // between 1.125 (0x39) and 1.25 (0x3a): the midpoint goes to 0x3a
        assert_eq!(e4m3_from_f32(1.1875), 0x3a);
        // subnormal midpoints: 0.5 / 512 -> 0, 1.5 / 512 -> 2 / 512
        assert_eq!(e4m3_from_f32(0.5 / 512.0), 0x00);
        assert_eq!(e4m3_from_f32(1.5 / 512.0), 0x02);
        // the largest subnormal rounds up into the smallest normal
        assert_eq!(e4m3_from_f32(7.6 / 512.0), 0x08);
        assert_eq!(e4m3_from_f32(440.0), 0x7e);
        assert_eq!(e4m3_from_f32(1e9), 0x7e);
        assert_eq!(e4m3_from_f32(f32::NEG_INFINITY), 0xfe);
        assert_eq!(e4m3_from_f32(f32::NAN), 0x7f);
        assert_eq!(e4m3_from_f32(-0.0), 0x80);
    }

    #[test]
    fn nearest_code_by_search_agrees() {
        // every f32 on a fine grid: the encoder's code is the nearest finite value (ties: the even code)
        let finite: std::vec::Vec<(u8, f32)> = (0..0x7fu8).map(|c| (c, e4m3_to_f32(c))).collect();
        let mut x = 0.0f32;
        while x < 460.0 {
            let got = e4m3_from_f32(x);
            let best = finite
                .iter()
                .min_by(|a, b| {
                    let (da, db) = ((a.1 - x).abs(), (b.1 - x).abs());
                    da.partial_cmp(&db).unwrap().then((a.0 & 1).cmp(&(b.0 & 1)))
                })
                .unwrap()
                .0;
            assert_eq!(got, best, "x = {x}");
            x = if x < 0.05 { x + 1.0 / 8192.0 } else { x * 1.0009 + 1e-7 };
        }
    }

    #[test]
    fn scale_rule() {
        assert_eq!(scale_and_factor(0.0), (1.0, 1.0));
        assert_eq!(scale_and_factor(448.0), (1.0, 1.0));
        let (s, f) = scale_and_factor(3.5);
        assert_eq!(s, 3.5 / 448.0);
        assert_eq!(f, 448.0 / 3.5);
        // the block's largest value lands on (or within rounding of) 448
        assert!(e4m3_to_f32(e4m3_from_f32(3.5 * f)) == 448.0);
        // tiny blocks (bf16 subnormals): a finite factor, zeros stay zero codes, never a NaN
        for amax in [1e-38f32, 9.2e-41, 1.3e-36, 1e-30] {
            let (s, f) = scale_and_factor(amax);
            assert!(s > 0.0 && f.is_finite(), "amax {amax}");
            assert_eq!(e4m3_from_f32(0.0 * f), 0);
            assert!(e4m3_from_f32(amax * f) & 0x7f != 0x7f);
        }
    }
}
