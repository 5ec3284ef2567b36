#!/usr/bin/env python3
"""Error of FP8 (e4m3) weight gradients dW = A^T B over one expert's K = 1024 rows under four scale granularities
(thirteenth session; numpy, CPU only; not part of CI). A: output gradients with a log-normal spread of per-token
magnitudes; B: activations with four outlier channels. Prints the relative error (Frobenius) and the median / worst
per output column against the f64 product. Run: python3 docs/studies/wgrad_fp8_scales.py
"""
import numpy as np


def e4m3_grid():
    vals = {0.0}
    for e in range(-6, 9):  # normal exponents (bias 7): 2^-6 .. 2^8
        for m in range(8):
            v = (1 + m / 8) * 2.0**e
            if v <= 448:
                vals.add(v)
    for m in range(1, 8):  # subnormals
        vals.add(m / 8 * 2.0**-6)
    g = np.array(sorted(vals))
    return np.concatenate([-g[::-1], g[1:]])


G = e4m3_grid()


def q(x):
    """Round to the nearest e4m3 value, saturating at 448."""
    x = np.clip(x, -448, 448)
    i = np.clip(np.searchsorted(G, x), 1, len(G) - 1)
    lo, hi = G[i - 1], G[i]
    return np.where(np.abs(x - lo) <= np.abs(hi - x), lo, hi)


def quant(x, bk, bc):
    """Dequantized e4m3 of x with one scale (amax / 448) per block of bk rows x bc columns."""
    out = np.empty_like(x)
    for k0 in range(0, x.shape[0], bk):
        for c0 in range(0, x.shape[1], bc):
            blk = x[k0 : k0 + bk, c0 : c0 + bc]
            s = np.abs(blk).max() / 448 or 1.0
            out[k0 : k0 + bk, c0 : c0 + bc] = q(blk / s) * s
    return out


SCHEMES = {
    "1 x 128 rows, both (built)": ((128, 1), (128, 1)),
    "256 rows, both": ((256, 1), (256, 1)),
    "B in 128 x 128 blocks": ((128, 1), (128, 128)),
    "A in 128 x 128 blocks": ((128, 128), (128, 1)),
}


def main():
    rng = np.random.default_rng(11)
    k, m, n = 1024, 256, 256
    for outlier in (30.0, 100.0, 300.0):
        a = rng.standard_normal((k, m)) * np.exp(rng.standard_normal((k, 1)))
        b = rng.standard_normal((k, n))
        b[:, rng.choice(n, 4, replace=False)] *= outlier
        ref = a.T @ b
        print(f"B with 4 outlier channels x{outlier:g}:")
        for name, (sa, sb) in SCHEMES.items():
            got = quant(a, *sa).T @ quant(b, *sb)
            col = np.linalg.norm(got - ref, axis=0) / np.linalg.norm(ref, axis=0)
            tot = np.linalg.norm(got - ref) / np.linalg.norm(ref)
            print(f"  {name:28s} rel err {tot:.2e}, per column median {np.median(col):.2e} worst {col.max():.2e}")


if __name__ == "__main__":
    main()
