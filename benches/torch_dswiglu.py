"""The unfused dh + SwiGLU backward, measured: what megamoe's fused kernel (grouped_gemm_bt_dswiglu_ew7: dh's GEMM with
the SwiGLU backward and the dtopk partials in its epilogue) replaces. A partner of benches/gemm.rs, run beside it by
gemm_h200.sh (same GPU, same call).

Issue 4 asks the dh + SwiGLU backward for >= 0.9x cuBLAS's dense dh of the same shape; the fused kernel also reads z
and writes dz (and, in the layer, s h), which the dense dh does not. This script times the two-step form that does
the same work, so the fused kernel can be set against it:
  1. the dh GEMM, gr = dy . W2_e, [M, H] x [H, I] -> [M, I] bf16: cuBLAS's dense GEMM of the total shape
     (torch.matmul with expert 0's W2, the issue's reference) and torch._grouped_mm over the experts (PyTorch's
     layer);
  2. the SwiGLU backward as one separate pass over the rows, from z = [g | u] (bf16 [M, 2I]), gr and the rows'
     routing weights s (f32 [M]), in f32: sg = sigmoid(g), silu = g sg, h = silu u, dtopk = sum_c gr h,
     dz = [s gr u sg (1 + g (1 - sg)) | s gr silu] (bf16 [M, 2I]); the layer's form also stores s h (bf16 [M, I]).
     Compiled by torch.compile (Triton: one kernel reading and writing each byte once, the best a separate pass
     can do) and eager (PyTorch's elementwise kernels, several passes), each with and without s h;
  3. each dh GEMM followed by the compiled pass, timed as one unit (what the two-step form costs back to back).
The pass's bytes and GB/s are printed beside a device-to-device copy of the same size (the copy ceiling).
Shapes: Qwen3-30B-A3B (H 2048, I 768) and Qwen3-235B-A22B (H 4096, I 1536), T = 16384 tokens, top-8 of E = 128,
M = T k = 131072 rows; offs from megamoe's routing counts (gemm_counts_<shape>.txt in the directory given as the
first argument) or a fresh uniform routing. Inputs random (never zero); 3 warm-ups, median of 20, CUDA events.
Outputs checked on 257 rows against an f64 evaluation of the same formulas (relative error; NaN fails).
`MEGAMOE_TORCH_SMOKE=1` runs the script's logic on the CPU at tiny shapes (benches/torch_common.py).
"""
import sys

import torch

from torch_common import DEV as dev, SMOKE, counts_for, device_name, timeit

WARM, REPS = (1, 1) if SMOKE else (3, 20)  # as torch_common.timeit uses them
CHECK_ROWS = 257


def dswiglu(z, gr, s, with_sh):
    """The SwiGLU backward of the rows, f32 inside: (dz bf16 [M, 2I], dtopk f32 [M], s h bf16 [M, I] or None)."""
    i = gr.shape[1]
    g, u, d = z[:, :i].float(), z[:, i:].float(), gr.float()
    sg = torch.sigmoid(g)
    silu = g * sg
    h = silu * u
    sc = s.unsqueeze(1)
    sd = sc * d
    dz = torch.cat([sd * u * sg * (1.0 + g * (1.0 - sg)), sd * silu], dim=1).to(torch.bfloat16)
    dtopk = (d * h).sum(dim=1)
    sh = (sc * h).to(torch.bfloat16) if with_sh else None
    return dz, dtopk, sh


def check(out, z, gr, s, rows):
    """max over the outputs of ||out - ref|| / ||ref|| on `rows`, the reference in f64 from the same bf16 inputs."""
    dz, dtopk, sh = out
    i = gr.shape[1]
    g, u, d, sc = z[rows, :i].double(), z[rows, i:].double(), gr[rows].double(), s[rows].double().unsqueeze(1)
    sg = torch.sigmoid(g)
    silu, h = g * sg, g * sg * u
    refs = [(dz[rows], torch.cat([sc * d * u * sg * (1 + g * (1 - sg)), sc * d * silu], dim=1)),
            (dtopk[rows], (d * h).sum(dim=1))]
    if sh is not None:
        refs.append((sh[rows], sc * h))
    worst = 0.0
    for got, want in refs:
        got = got.double()
        if not torch.isfinite(got).all():
            return float("nan")
        worst = max(worst, ((got - want).norm() / want.norm()).item())
    return worst


def line(name, what, us, note=""):
    print(f"RESULT dswiglu-unfused {name} {what}: {us:.0f} us{note}", flush=True)


print(f"torch {torch.__version__} on {device_name()}; {WARM} warm-ups, median of {REPS}")
compiled = {}
for with_sh in (False, True):
    try:
        compiled[with_sh] = torch.compile(lambda z, gr, s, w=with_sh: dswiglu(z, gr, s, w), dynamic=False)
    except Exception as ex:  # no compiler: the eager forms only, said plainly
        print(f"torch.compile NOT AVAILABLE ({str(ex).splitlines()[0][:120]})")
failed = False
shapes = [("Qwen3-30B-A3B", 2048, 768), ("Qwen3-235B-A22B", 4096, 1536)]
for name, H, I in [(n, 128, 64) for n, _, _ in shapes[:1]] if SMOKE else shapes:
    T, E, k = (256, 8, 2) if SMOKE else (16384, 128, 8)
    M = T * k
    counts, src = counts_for(sys.argv[1] if len(sys.argv) > 1 else "", name, T, E, k)
    offs = torch.cumsum(counts, 0).to(torch.int32)
    print(f"{name}: M={M} H={H} I={I}, offs from {src}")
    rnd = lambda *s, scale=1.0: (torch.randn(*s, device=dev) * scale).to(torch.bfloat16)
    dy = rnd(M, H)
    W2 = rnd(E, H, I, scale=2.0 / I ** 0.5)
    z = rnd(M, 2 * I, scale=2.0)
    s = torch.rand(M, device=dev) * 0.5 + 0.05
    rows = torch.randperm(M, device=dev)[:CHECK_ROWS]
    flop = 2 * M * H * I

    dense = lambda: dy @ W2[0]
    grouped = lambda: torch._grouped_mm(dy, W2, offs=offs)
    gr = dense()
    err = ((gr[rows].double() - dy[rows].double() @ W2[0].double()).norm()
           / (dy[rows].double() @ W2[0].double()).norm()).item()
    us_dense = timeit(dense) * 1e3
    line(name, "dh dense cuBLAS (torch.matmul)", us_dense, f", {flop / us_dense / 1e6:.0f} TFLOP/s (rel err {err:.1e})")
    try:
        us_grouped = timeit(grouped) * 1e3
        line(name, "dh torch._grouped_mm", us_grouped, f", {flop / us_grouped / 1e6:.0f} TFLOP/s")
    except Exception as ex:
        us_grouped = None
        print(f"RESULT dswiglu-unfused {name} dh torch._grouped_mm: FAILED ({ex})")

    copy_src = torch.empty(M * 3 * I // 2, dtype=torch.float32, device=dev).uniform_()  # 6 M I bytes, as the pass
    copy_dst = torch.empty_like(copy_src)
    us_copy = timeit(lambda: copy_dst.copy_(copy_src)) * 1e3
    copy_gbs = 2 * copy_src.numel() * 4 / us_copy / 1e3
    line(name, f"copy ceiling (device-to-device, {2 * copy_src.numel() * 4 / 1e9:.2f} GB read + written)", us_copy,
         f", {copy_gbs:.0f} GB/s")
    # HBM writes alone and reads alone (a fill and a sum of the same buffer): the layer's write-heavy passes (the
    # dy gather writes 537 MB at ~2.3 TB/s at 30B) against what writes alone reach
    n_bytes = copy_dst.numel() * 4
    us_fill = timeit(lambda: copy_dst.fill_(1.5)) * 1e3
    line(name, f"write ceiling (fill_, {n_bytes / 1e9:.2f} GB written)", us_fill, f", {n_bytes / us_fill / 1e3:.0f} GB/s")
    us_sum = timeit(lambda: copy_src.sum()) * 1e3
    line(name, f"read ceiling (sum, {n_bytes / 1e9:.2f} GB read)", us_sum, f", {n_bytes / us_sum / 1e3:.0f} GB/s")
    del copy_src, copy_dst

    for with_sh in (False, True):
        tag = "dz, dtopk, s h" if with_sh else "dz, dtopk"
        nbytes = M * (2 * 2 * I + 2 * I + 4) + M * (2 * 2 * I + 4) + (M * 2 * I if with_sh else 0)
        forms = [("eager", lambda w=with_sh: dswiglu(z, gr, s, w))]
        if with_sh in compiled:
            forms.insert(0, ("compiled", lambda w=with_sh: compiled[w](z, gr, s)))
        for form, fn in forms:
            try:
                e = check(fn(), z, gr, s, rows)
                us = timeit(fn) * 1e3
            except Exception as ex:
                print(f"RESULT dswiglu-unfused {name} pass {form} ({tag}): FAILED ({str(ex).splitlines()[0][:160]})")
                continue
            ok = e == e and e < 1e-2
            failed |= not ok
            line(name, f"pass {form} ({tag})", us,
                 f", {nbytes / 1e9:.2f} GB, {nbytes / us / 1e3:.0f} GB/s = {nbytes / us / 1e3 / copy_gbs:.2f} of the "
                 f"copy (rel err {e:.1e}{'' if ok else ' FAILED'})")
            if form != "compiled":
                continue
            for gname, gfn, gus in [("dense cuBLAS dh", dense, us_dense), ("torch._grouped_mm dh", grouped, us_grouped)]:
                if gus is None:
                    continue
                pair = lambda gfn=gfn, w=with_sh: compiled[w](z, gfn(), s)
                us_pair = timeit(pair) * 1e3
                line(name, f"{gname} + compiled pass ({tag}), back to back", us_pair,
                     f" (parts alone {gus:.0f} + {us:.0f}): the two-step form runs at {us_dense / us_pair:.2f}x the "
                     f"dense dh's rate; a fused kernel above that ratio beats it")
    del dy, W2, z, s, gr
    torch.cuda.empty_cache()
sys.exit(1 if failed else 0)
