"""The FP8 ceiling beside benches/fp8.rs: torch._scaled_mm (cuBLASLt's FP8 GEMM) on the dense GEMM of the same total
shape as each of the layer's forward GEMMs, and torch's own bf16 GEMM of that shape, in one run on the same GPU.

Qwen3-30B-A3B (H 2048, I 768) and Qwen3-235B-A22B (H 4096, I 1536), M = T*k = 131072 rows, one expert's weight:
  fwd GEMM1  [M, H] x W1^T -> [M, 2I]      fwd GEMM2  [M, I] x W2^T -> [M, H]
e4m3 operands with per-row / per-column scales (rowwise: the cheapest scaling cuBLASLt offers, so an upper bound
for blockwise FP8; falls back to one scale per tensor where this PyTorch refuses rowwise), bf16 out; random
inputs; 3 warm-ups, median of 20, CUDA events; TFLOP/s = 2*M*N*K. Prints RESULT lines; a shape PyTorch cannot run
says why instead of failing the run. `MEGAMOE_BENCH_ONLY=30B` runs one shape.
"""
import os

import torch

from torch_common import DEV as dev, timeit

E4M3 = torch.float8_e4m3fn
MAXV = torch.finfo(E4M3).max


def quant_rows(x):
    """x [R, C] -> (e4m3 [R, C], f32 scales [R, 1]) with x ~ q * s."""
    amax = x.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-30)
    s = amax / MAXV
    return (x.float() / s).to(E4M3), s


def bench(shape, what, m, n, k):
    torch.manual_seed(0)
    a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16) / k**0.5
    flop = 2.0 * m * n * k
    t16 = timeit(lambda: a @ w.t())
    qa, sa = quant_rows(a)
    qw, sw = quant_rows(w)  # [N, K] with one scale per row of W = per column of W^T
    mode = "rowwise"
    try:
        f = lambda: torch._scaled_mm(qa, qw.t(), scale_a=sa, scale_b=sw.t(), out_dtype=torch.bfloat16)
        out = f()
    except Exception as e:  # older PyTorch: tensorwise only
        mode = f"tensorwise (rowwise refused: {type(e).__name__})"
        ta, tw = sa.max(), sw.max()
        qa, qw = (a.float() / ta).to(E4M3), (w.float() / tw).to(E4M3)
        f = lambda: torch._scaled_mm(qa, qw.t(), scale_a=ta, scale_b=tw, out_dtype=torch.bfloat16)
        out = f()
    ref = (a.float() @ w.float().t())
    err = ((out.float() - ref).norm() / ref.norm()).item()
    t8 = timeit(f)
    print(
        f"RESULT torch fp8 {shape} {what} M={m} N={n} K={k}: torch._scaled_mm ({mode}) {t8 * 1e3:.0f} us "
        f"{flop / t8 * 1e-9:.0f} TFLOP/s | torch bf16 matmul {t16 * 1e3:.0f} us {flop / t16 * 1e-9:.0f} TFLOP/s | "
        f"FP8 / bf16 speed {t16 / t8:.2f}x | rel err against the f32 product {err:.1e}",
        flush=True,
    )


def main():
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    only = os.environ.get("MEGAMOE_BENCH_ONLY", "")
    m = 16384 * 8
    for shape, h, i in [("Qwen3-30B-A3B", 2048, 768), ("Qwen3-235B-A22B", 4096, 1536)]:
        if only not in shape:
            continue
        for what, n, k in [("fwd GEMM1 (plain)", 2 * i, h), ("fwd GEMM2", h, i)]:
            try:
                bench(shape, what, m, n, k)
            except Exception as e:
                print(f"RESULT torch fp8 {shape} {what}: not run ({type(e).__name__}: {e})", flush=True)


if __name__ == "__main__":
    main()
