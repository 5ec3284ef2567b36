//! A packed f64 matrix product for the CPU references: `C (+)= A B` over strided operands, register-blocked
//! (`MR` x `NR` accumulators) with both operands packed into contiguous panels, so the FMA units rather than the
//! loads set its pace (the reference's earlier dot / axpy loops ran at ~1.7 GFLOP/s a core, load-bound).
//!
//! Every element of C is one fused multiply-add chain over k in increasing order, starting from C's value
//! (`accumulate`) or from zero: its value does not depend on where it falls in the blocking, on the other rows or
//! columns, or on the thread that computes it (bitwise reproducible; without FMA on the CPU, `a * b + c` in the
//! same order).

/// Rows of a register block.
const MR: usize = 4;
/// Columns of a register block (two AVX2 vectors of f64).
const NR: usize = 8;
/// Depth of a packed block.
const KC: usize = 256;
/// Columns of B packed at once.
const NC: usize = 512;

/// A strided operand: element (r, c) at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub struct Strided<'a> {
    pub data: &'a [f64],
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Strided<'a> {
    /// Row-major `[rows, cols]`.
    pub fn rows(data: &'a [f64], cols: usize) -> Self {
        Strided { data, rs: cols, cs: 1 }
    }
    /// The transpose of row-major `[cols, rows]`: element (r, c) at `data[c * ld + r]`.
    pub fn transposed(data: &'a [f64], ld: usize) -> Self {
        Strided { data, rs: 1, cs: ld }
    }
    #[inline(always)]
    fn at(&self, r: usize, c: usize) -> f64 {
        self.data[r * self.rs + c * self.cs]
    }
}

/// `C [m, n]` (row-major, `c.len() >= m * n`) `(+)= A [m, k] B [k, n]`. Panics if an operand is too short for
/// its strides.
pub fn matmul(m: usize, n: usize, k: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [f64], accumulate: bool) {
    assert!(c.len() >= m * n, "C holds {} of {m} x {n}", c.len());
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { matmul_avx2(m, n, k, a, b, c, accumulate) };
    }
    matmul_impl::<false>(m, n, k, a, b, c, accumulate)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn matmul_avx2(m: usize, n: usize, k: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [f64], accumulate: bool) {
    matmul_impl::<true>(m, n, k, a, b, c, accumulate)
}

/// `a * b + c`, fused where the CPU has FMA (a software fma elsewhere would be slow).
#[inline(always)]
fn madd<const FMA: bool>(a: f64, b: f64, c: f64) -> f64 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

#[inline(always)]
fn matmul_impl<const FMA: bool>(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_>,
    b: Strided<'_>,
    c: &mut [f64],
    accumulate: bool,
) {
    let mp = m.div_ceil(MR);
    // A's k-block packed for all rows: [row block][p][MR] (rows past m are zeros, never stored)
    let mut ap = vec![0.0f64; mp * MR * KC.min(k)];
    // B's k-block of NC columns: [column panel][p][NR] (columns past n are zeros, never stored)
    let mut bp = vec![0.0f64; NC * KC.min(k)];
    let mut k0 = 0;
    while k0 < k {
        let kc = KC.min(k - k0);
        for rb in 0..mp {
            let blk = &mut ap[rb * MR * kc..(rb + 1) * MR * kc];
            for p in 0..kc {
                for i in 0..MR {
                    let r = rb * MR + i;
                    blk[p * MR + i] = if r < m { a.at(r, k0 + p) } else { 0.0 };
                }
            }
        }
        // the first k-block starts from zero unless accumulating; later ones from the sums so far in C
        let from_c = accumulate || k0 > 0;
        let mut n0 = 0;
        while n0 < n {
            let nc = NC.min(n - n0);
            let np = nc.div_ceil(NR);
            for jb in 0..np {
                let pan = &mut bp[jb * NR * kc..(jb + 1) * NR * kc];
                for p in 0..kc {
                    for j in 0..NR {
                        let col = n0 + jb * NR + j;
                        pan[p * NR + j] = if col < n0 + nc { b.at(k0 + p, col) } else { 0.0 };
                    }
                }
            }
            for rb in 0..mp {
                let apb = &ap[rb * MR * kc..(rb + 1) * MR * kc];
                let rows = MR.min(m - rb * MR);
                for jb in 0..np {
                    let pan = &bp[jb * NR * kc..(jb + 1) * NR * kc];
                    let col0 = n0 + jb * NR;
                    let cols = NR.min(n0 + nc - col0);
                    let mut acc = [[0.0f64; NR]; MR];
                    if from_c {
                        for (i, row) in acc.iter_mut().enumerate().take(rows) {
                            let at = (rb * MR + i) * n + col0;
                            row[..cols].copy_from_slice(&c[at..at + cols]);
                        }
                    }
                    micro::<FMA>(kc, apb, pan, &mut acc);
                    for (i, row) in acc.iter().enumerate().take(rows) {
                        let at = (rb * MR + i) * n + col0;
                        c[at..at + cols].copy_from_slice(&row[..cols]);
                    }
                }
            }
            n0 += nc;
        }
        k0 += kc;
    }
}

/// The register block: `acc[i][j] = fma(A[i][p], B[p][j], acc[i][j])` for p = 0 .. kc in order.
#[inline(always)]
fn micro<const FMA: bool>(kc: usize, ap: &[f64], bp: &[f64], acc: &mut [[f64; NR]; MR]) {
    let (ap, bp) = (&ap[..kc * MR], &bp[..kc * NR]);
    for (av, bv) in ap.chunks_exact(MR).zip(bp.chunks_exact(NR)) {
        for i in 0..MR {
            for j in 0..NR {
                acc[i][j] = madd::<FMA>(av[i], bv[j], acc[i][j]);
            }
        }
    }
}

/// `sum a[i] b[i]` in eight interleaved partial sums (a fixed order: the same bits on every call).
pub(crate) fn dot(a: &[f64], b: &[f64]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { dot_avx2(a, b) };
    }
    dot_impl::<false>(a, b)
}

/// `y += a x`, element by element (one fma each).
pub(crate) fn axpy(y: &mut [f64], a: f64, x: &[f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked just above).
        return unsafe { axpy_avx2(y, a, x) };
    }
    axpy_impl::<false>(y, a, x)
}

#[inline(always)]
fn dot_impl<const FMA: bool>(a: &[f64], b: &[f64]) -> f64 {
    // eight partial sums: lets the compiler vectorise without reassociating one chain
    let mut s = [0.0f64; 8];
    let n8 = a.len() / 8 * 8;
    for c in (0..n8).step_by(8) {
        for l in 0..8 {
            s[l] = madd::<FMA>(a[c + l], b[c + l], s[l]);
        }
    }
    let mut t = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for c in n8..a.len() {
        t = madd::<FMA>(a[c], b[c], t);
    }
    t
}

#[inline(always)]
fn axpy_impl<const FMA: bool>(y: &mut [f64], a: f64, x: &[f64]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y = madd::<FMA>(a, *x, *y);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f64], b: &[f64]) -> f64 {
    dot_impl::<true>(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(y: &mut [f64], a: f64, x: &[f64]) {
    axpy_impl::<true>(y, a, x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The chain each element must equal: fma over k in increasing order from C's value or zero.
    fn naive(m: usize, n: usize, k: usize, a: Strided<'_>, b: Strided<'_>, c: &mut [f64], accumulate: bool) {
        let fma = cfg!(target_arch = "x86_64")
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma");
        for i in 0..m {
            for j in 0..n {
                let mut s = if accumulate { c[i * n + j] } else { 0.0 };
                for p in 0..k {
                    s = if fma { a.at(i, p).mul_add(b.at(p, j), s) } else { a.at(i, p) * b.at(p, j) + s };
                }
                c[i * n + j] = s;
            }
        }
    }

    #[test]
    fn every_element_is_the_ordered_fma_chain() {
        let mut r = Rng::new(Rng::fresh_seed());
        // edges of every block: m, n, k not multiples of MR, NR, KC, NC; k spanning several k-blocks; strided and
        // transposed operands
        for (m, n, k) in [(1, 1, 1), (5, 9, 3), (4, 8, 256), (13, 530, 300), (37, 17, 600), (3, 1030, 2)] {
            for accumulate in [false, true] {
                let av: Vec<f64> = (0..m * k).map(|_| r.sym(1.0)).collect();
                let bv: Vec<f64> = (0..k * n).map(|_| r.sym(1.0)).collect();
                let c0: Vec<f64> = (0..m * n).map(|_| r.sym(1.0)).collect();
                for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                    let a = if ta { Strided::transposed(&av, m) } else { Strided::rows(&av, k) };
                    let b = if tb { Strided::transposed(&bv, k) } else { Strided::rows(&bv, n) };
                    let (mut got, mut want) = (c0.clone(), c0.clone());
                    matmul(m, n, k, a, b, &mut got, accumulate);
                    naive(m, n, k, a, b, &mut want, accumulate);
                    let same = got.iter().zip(&want).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(same, "m {m} n {n} k {k} accumulate {accumulate} transposed {ta} {tb}");
                }
            }
        }
    }

    #[test]
    fn empty_products() {
        let mut c = vec![1.0; 6];
        matmul(2, 3, 0, Strided::rows(&[], 0), Strided::rows(&[], 3), &mut c, true);
        assert_eq!(c, vec![1.0; 6]);
        matmul(2, 3, 0, Strided::rows(&[], 0), Strided::rows(&[], 3), &mut c, false);
        assert_eq!(c, vec![0.0; 6]);
        matmul(0, 3, 4, Strided::rows(&[], 4), Strided::rows(&[0.0; 12], 3), &mut c, false);
    }
}
