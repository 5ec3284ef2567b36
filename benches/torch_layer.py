"""The PyTorch baselines of the MoE layer, on the GPU beside megamoe's benchmark (benches/h200.sh).

Layers: torch._grouped_mm experts (sort, gather, grouped GEMM1, SwiGLU, grouped GEMM2, weighting, index_add)
and the per-expert loop; forward and forward+backward by autograd. Also the dense cuBLAS GEMM of GEMM1's total
shape (T*k x H x 2I) as the ceiling. bf16, T = 16384, E = 128, top-8, random routing. Warm-up 3, median of
10 (fwd+bwd of the loop: median of 3), CUDA events. MEGAMOE_BENCH_ONLY=30B (a substring of the shape name)
runs one shape, as the layer benchmark does; MEGAMOE_TORCH_LOOP=0 leaves out the per-expert loop. MEGAMOE_BENCH_HEAT=S
(default 3): S seconds of untimed forward + backward steps first, as the layer benchmark's. Gradients are set to None
before every backward (each step writes them afresh, as megamoe's do).
MEGAMOE_BENCH_ROUTING=zipf:S routes as the layer benchmark's option does (k distinct experts per token drawn with
popularity 1 / rank^S, the ranks dealt to random expert ids; the same distribution, another draw); `balanced` as
its; `random` (the default) k distinct uniform experts. MEGAMOE_SOAK=S: after the timings, S seconds of the
torch._grouped_mm layer's forward + backward back to back (`SOAK` lines with wall-clock bounds, as the layer
benchmark's, for power and clock samples taken beside the run).
"""
import os
import time

import torch
import torch.nn.functional as F

from torch_common import DEV as dev, grouped, timeit, timeit_rotation

torch.manual_seed(torch.seed())


def loop(x, ids, w, W1, W2):
    T, k = ids.shape
    I = W2.shape[2]
    out = torch.zeros_like(x)
    for e in range(W1.shape[0]):
        t, j = torch.where(ids == e)
        if t.numel() == 0:
            continue
        z = x[t] @ W1[e].t()
        h = F.silu(z[:, :I]) * z[:, I:]
        out.index_add_(0, t, (h @ W2[e].t()) * w[t, j].unsqueeze(1).to(x.dtype))
    return out


def route(T, E, k):
    """[T, k] distinct expert ids per token, by MEGAMOE_BENCH_ROUTING (random, balanced or zipf:S)."""
    v = os.environ.get("MEGAMOE_BENCH_ROUTING", "") or "random"
    if v == "random":
        return torch.stack([torch.randperm(E, device=dev)[:k] for _ in range(T)])
    if v == "balanced":
        # token t's j-th expert is (t k + j) % E, as the layer benchmark's
        return (torch.arange(T * k, device=dev) % E).view(T, k)
    if not v.startswith("zipf:"):
        raise SystemExit(f"MEGAMOE_BENCH_ROUTING={v}: expected random, balanced or zipf:S")
    s = float(v[5:])
    if not s >= 0:
        raise SystemExit(f"MEGAMOE_BENCH_ROUTING={v}: S must be >= 0")
    p = 1.0 / torch.arange(1, E + 1, device=dev, dtype=torch.float64) ** s
    ranks = torch.multinomial((p / p.sum()).float().expand(T, E).contiguous(), k, replacement=False)
    return torch.randperm(E, device=dev)[ranks]


only = os.environ.get("MEGAMOE_BENCH_ONLY", "")
layers = [("torch._grouped_mm", grouped, 10)]
if os.environ.get("MEGAMOE_TORCH_LOOP", "1") != "0":
    layers.append(("expert loop", loop, 10))
for name, H, I in [("Qwen3-30B-A3B", 2048, 768), ("Qwen3-235B-A22B", 4096, 1536)]:
    if only not in name:
        continue
    T, E, k = 16384, 128, 8
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    ids = route(T, E, k)
    busy = torch.bincount(ids.flatten(), minlength=E)
    print(f"{name}: routing {os.environ.get('MEGAMOE_BENCH_ROUTING', '') or 'random'}, rows per expert: mean "
          f"{T * k // E}, busiest {busy.max().item()}, idlest {busy.min().item()}")
    w = torch.rand(T, k, device=dev)
    W1 = (torch.randn(E, 2 * I, H, device=dev) * (1.7 / H ** 0.5)).to(torch.bfloat16)
    W2 = (torch.randn(E, H, I, device=dev) * (2.0 / I ** 0.5)).to(torch.bfloat16)
    flops = 6 * T * k * H * I
    dy = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    heat = float(os.environ.get("MEGAMOE_BENCH_HEAT", "3") or 0)
    for lname, f, reps in layers:
        if heat > 0 and lname == "torch._grouped_mm":
            # as benches/layer.rs: untimed forward + backward steps first, so the timings see a warm GPU
            xh, W1h, W2h, wh = [t.detach().clone().requires_grad_(True) for t in (x, W1, W2, w)]
            t0, n = time.time(), 0
            while time.time() - t0 < heat:
                for t in (xh, W1h, W2h, wh):
                    t.grad = None
                f(xh, ids, wh, W1h, W2h).backward(dy)
                n += 1
                if n % 5 == 0:
                    torch.cuda.synchronize()
            torch.cuda.synchronize()
            print(f"HEAT pytorch {name}: {n} forward + backward steps in {heat:.1f} s before the timings")
            del xh, W1h, W2h, wh
        ms = timeit(lambda: f(x, ids, w, W1, W2), reps=reps)
        print(f"RESULT pytorch {lname} forward {name} T={T}: {ms * 1e3:.0f} us, {flops / ms / 1e9:.0f} TFLOP/s")
        if lname == "torch._grouped_mm":
            # 10 forwards between two events (the host ahead of the GPU, as in a training loop), as the layer
            # benchmark's "forward, 10 back to back" line: a forward timed alone also holds the GPU's start after idle
            ms10 = timeit(lambda: [f(x, ids, w, W1, W2) for _ in range(10)], reps=reps) / 10
            print(f"RESULT pytorch {lname} forward, 10 back to back {name} T={T}: {ms10 * 1e3:.0f} us a forward, "
                  f"{flops / ms10 / 1e9:.0f} TFLOP/s (median of {reps})")
            # the two in one rotation (timed in separate phases they read ~6% apart), as the layer benchmark's
            # "forward alone against 10 back to back, in one rotation" line
            one, ten = timeit_rotation([lambda: f(x, ids, w, W1, W2),
                                        lambda: [f(x, ids, w, W1, W2) for _ in range(10)]], reps=reps)
            print(f"RESULT pytorch {lname} forward alone against 10 back to back, in one rotation {name} T={T}: "
                  f"{one * 1e3:.0f} us alone, {ten * 1e2:.0f} us a forward back to back ({one / (ten / 10):.3f}x; "
                  f"medians of {reps})")
        xr, W1r, W2r, wr = [t.detach().clone().requires_grad_(True) for t in (x, W1, W2, w)]

        def fb():
            # a training step's gradients: written afresh, as megamoe's (accumulate: false) and as after an
            # optimizer's zero_grad(set_to_none=True). Left in place, autograd would add every step's gradients into
            # the last step's (grad += new: ~3.8 GB more traffic, ~0.9 ms at 30B): until 2026-12-05 it did, which
            # flattered megamoe's forward + backward ratio by ~6% (a helper's audit of the benchmarks)
            for t in (xr, W1r, W2r, wr):
                t.grad = None
            out = f(xr, ids, wr, W1r, W2r)
            out.backward(dy)

        ms = timeit(fb, reps=reps if lname != "expert loop" else 3, warm=2)
        print(f"RESULT pytorch {lname} forward+backward {name} T={T}: {ms * 1e3:.0f} us, "
              f"{3 * flops / ms / 1e9:.0f} TFLOP/s")
        soak = float(os.environ.get("MEGAMOE_SOAK", "0") or 0)
        if soak > 0 and lname == "torch._grouped_mm":
            torch.cuda.synchronize()
            t0, steps, dev_ms = time.time(), 0, 0.0
            while time.time() - t0 < soak:
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    fb()
                b.record()
                b.synchronize()
                dev_ms += a.elapsed_time(b)
                steps += 10
            t1 = time.time()
            print(f"SOAK pytorch {lname} forward+backward {name}: {steps} steps, {dev_ms * 1e3 / steps:.1f} us a step "
                  f"(device events), from {t0:.3f} to {t1:.3f} (unix s)")
        del xr, W1r, W2r, wr
    a = torch.randn(T * k, H, device=dev, dtype=torch.bfloat16)
    b = torch.randn(H, 2 * I, device=dev, dtype=torch.bfloat16)
    ms = timeit(lambda: a @ b, reps=10)
    print(f"RESULT cublas dense GEMM1-shaped ({T * k}x{H}x{2 * I}) {name}: {ms * 1e3:.0f} us, "
          f"{2 * T * k * H * 2 * I / ms / 1e9:.0f} TFLOP/s")
    del x, W1, W2, a, b
    torch.cuda.empty_cache()
