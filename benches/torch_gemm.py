"""torch._grouped_mm on each GEMM of the MoE layer alone, the partner of benches/gemm.rs (same shapes, same call).

Qwen3-30B-A3B (H 2048, I 768) and Qwen3-235B-A22B (H 4096, I 1536), T = 16384 tokens, top-8 of E = 128 experts,
M = T*k = 131072 rows grouped by expert. offs from the per-expert row counts megamoe's benchmark wrote
(gemm_counts_<shape>.txt in the directory given as the first argument), else from a fresh uniform routing
(k distinct experts per token). bf16 inputs, random; 3 warm-ups, median of 20, CUDA events. TFLOP/s = 2*M*N*K.

  fwd GEMM1  [M, H] x W1_e^T -> [M, 2I]        torch._grouped_mm(xs, W1.transpose(1, 2), offs)
  fwd GEMM2  [M, I] x W2_e^T -> [M, H]         torch._grouped_mm(h, W2.transpose(1, 2), offs)
  bwd dh     [M, H] x W2_e   -> [M, I]         torch._grouped_mm(dy, W2, offs)
  bwd dx     [M, 2I] x W1_e  -> [M, H]         torch._grouped_mm(dz, W1, offs)
  bwd dW2    (s dy)^T h per expert -> [E, H, I] torch._grouped_mm(sdy.t(), h, offs)  (K-grouped)
  bwd dW1    dz^T x per expert     -> [E, 2I, H] torch._grouped_mm(dz.t(), xs, offs)  (K-grouped)
The weight gradients ask for f32 output (out_dtype); PyTorch may refuse (out_dtype must match the inputs in recent
versions): then bf16 output, and the line says so.
"""
import sys

import torch

from torch_common import DEV as dev, REPS, WARM, counts_for, timeit


def rel_err(got, want):
    return ((got.double() - want.double()).norm() / want.double().norm()).item()


print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}; torch._grouped_mm, {WARM} warm-ups, "
      f"median of {REPS}")
for name, H, I in [("Qwen3-30B-A3B", 2048, 768), ("Qwen3-235B-A22B", 4096, 1536)]:
    T, E, k = 16384, 128, 8
    M = T * k
    counts, src = counts_for(sys.argv[1] if len(sys.argv) > 1 else "", name, T, E, k)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    print(f"{name}: offs from {src} (rows per expert {counts.min().item()}..{counts.max().item()})")
    rnd = lambda *s, scale=1.0: (torch.randn(*s, device=dev) * scale).to(torch.bfloat16)
    xs, dy, sdy = rnd(M, H), rnd(M, H), rnd(M, H)
    h, dz = rnd(M, I), rnd(M, 2 * I)
    W1 = rnd(E, 2 * I, H, scale=1.7 / H ** 0.5)
    W2 = rnd(E, H, I, scale=2.0 / I ** 0.5)
    e1 = slice(counts[0].item(), counts[0].item() + counts[1].item())  # expert 1's rows, for a sanity check
    cases = [
        ("fwd GEMM1", "M-grouped", (M, 2 * I, H), lambda: torch._grouped_mm(xs, W1.transpose(1, 2), offs=offs),
         lambda out: rel_err(out[e1], xs[e1].float() @ W1[1].float().t())),
        ("fwd GEMM2", "M-grouped", (M, H, I), lambda: torch._grouped_mm(h, W2.transpose(1, 2), offs=offs),
         lambda out: rel_err(out[e1], h[e1].float() @ W2[1].float().t())),
        ("bwd dh", "M-grouped", (M, I, H), lambda: torch._grouped_mm(dy, W2, offs=offs),
         lambda out: rel_err(out[e1], dy[e1].float() @ W2[1].float())),
        ("bwd dx", "M-grouped", (M, H, 2 * I), lambda: torch._grouped_mm(dz, W1, offs=offs),
         lambda out: rel_err(out[e1], dz[e1].float() @ W1[1].float())),
    ]
    for what, a, b, (m_, n_) in [("bwd dW2", sdy, h, (H, I)), ("bwd dW1", dz, xs, (2 * I, H))]:
        cases.append((what, "K-grouped", (m_, n_, M), (a, b),
                      lambda out, a=a, b=b: rel_err(out[1], a[e1].float().t() @ b[e1].float())))
    for what, kind, (m, n, kk), fn, check in cases:
        note = ""
        if isinstance(fn, tuple):
            a, b = fn
            try:
                torch._grouped_mm(a.t(), b, offs=offs, out_dtype=torch.float32)
                fn = lambda a=a, b=b: torch._grouped_mm(a.t(), b, offs=offs, out_dtype=torch.float32)
                note = ", f32 out"
            except (RuntimeError, TypeError) as ex:
                fn = lambda a=a, b=b: torch._grouped_mm(a.t(), b, offs=offs)
                note = f", bf16 out (f32 out refused: {str(ex).splitlines()[0][:80]})"
        try:
            err = check(fn())
            ms = timeit(fn)
        except Exception as ex:  # report and go on with the other GEMMs
            print(f"RESULT torch._grouped_mm {name} {what} ({kind}) M={m} N={n} K={kk}: FAILED ({ex})")
            continue
        print(f"RESULT torch._grouped_mm {name} {what} ({kind}) M={m} N={n} K={kk}: {ms * 1e3:.0f} us, "
              f"{2 * m * n * kk / ms / 1e9:.0f} TFLOP/s{note} (expert 1 vs fp32 matmul: rel err {err:.1e})")
    del xs, dy, sdy, h, dz, W1, W2
    torch.cuda.empty_cache()
