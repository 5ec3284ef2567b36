"""The layer's training step (forward + backward) on the GPU's own clock, ours and PyTorch's side by side (CUPTI
through torch.profiler; the device machine has no nsys): where each step's time goes, kernel by kernel.

Ours: megamoe's layer through the C ABI (MEGAMOE_LIB names libmegamoe_capi.so), z saved, bf16 weight gradients (the
headline step of benches/torch_rotation.py). PyTorch's: the torch._grouped_mm layer of benches/torch_common.py under
autograd, its gradients set to None first. Same inputs. Each side runs `STEPS` steps back to back (the host ahead),
each step after a short spin kernel (`torch.cuda._sleep`) that marks where it begins on the GPU's timeline; the two
sides alternate in the profiled window. The first step of each side's window is left out of the medians.

Prints `TRACE` lines (every kernel of one step of each side: start, duration, the idle time before it), `RESULT
trace-step` lines (per side, medians over steps: span, the kernels' sum, the gaps), and `RESULT trace-step kernel`
lines (per side, each kernel name's time a step, median over steps, the largest first; PyTorch's names grouped by
what they do: grouped GEMM, elementwise, sort and scan, gather / index, reduce, memset, other).

Usage: `MEGAMOE_LIB=.../libmegamoe_capi.so python3 benches/trace_step.py [KEY] [MODE]` (KEY one of
torch_common.SHAPES, default 30B: T = 16384, top-8, E = 128). MODE (ours only; PyTorch's side runs with the default): `z` (the default: z saved, bf16 weight
gradients), `recompute` (z recomputed in the backward), `f32` (z saved, f32 weight gradients), `fp8` (the FP8
forward on weights quantized once, then its straight-through backward, bf16 weight gradients), `op` / `op-z` (the
custom operators under autograd, `moe_op`, on a layer that recomputes / keeps z: the torch.compile path's kernels
and its host gaps).
"""
import collections
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megamoe_torch as mm  # noqa: E402
from torch_common import grouped, layer_inputs, shape  # noqa: E402

STEPS = 6
MODES = ("z", "recompute", "f32", "fp8", "op", "op-z")
MARK = "spin_kernel"  # torch.cuda._sleep's kernel: neither side launches one


def device_activities(prof):
    """The device activities (kernels, memsets, copies) in start order: (name, start us, end us), without the
    profiler's record_function ranges (it also draws those on the GPU's timeline)."""
    out = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
           if e.device_type == torch.autograd.DeviceType.CUDA and not e.name.startswith("step_")]
    out.sort(key=lambda a: a[1])
    return out


def steps_of(acts):
    """`acts` cut at the marker kernels: the activities after each marker up to the next one (the marker left out)."""
    cuts = [i for i, a in enumerate(acts) if MARK in a[0]]
    return [acts[a + 1:b] for a, b in zip(cuts, cuts[1:] + [len(acts)])]


def category(name):
    """What a PyTorch kernel does, by its name (ours keep their own names)."""
    n = name.lower()
    if "memset" in n:
        return "memset"
    if any(s in n for s in ("gemm", "nvjet", "cutlass", "sm90_xmma", "grouped_mm")):
        return "PyTorch: grouped GEMM"
    if any(s in n for s in ("sort", "scan", "radix", "cumsum", "histogram", "bincount")):
        return "PyTorch: sort, scan, count"
    if any(s in n for s in ("index", "gather", "scatter")):
        return "PyTorch: gather / index / scatter"
    if "reduce" in n:
        return "PyTorch: reduce"
    if "elementwise" in n or "silu" in n or "fill" in n or "copy" in n:
        return "PyTorch: elementwise"
    return "PyTorch: other (" + name[:40] + ")"


def show(side, st):
    t0, prev = st[0][1], None
    for name, s, e in st:
        gap = 0.0 if prev is None else s - prev
        print(f"TRACE {side:<8} {s - t0:9.1f} us {name[:60]:<60} {e - s:8.1f} us, gap before {gap:6.1f} us")
        prev = e


def main():
    key = sys.argv[1] if len(sys.argv) > 1 else "30B"
    mode = sys.argv[2] if len(sys.argv) > 2 else "z"
    name, H, I, E, k, T = shape(key)
    if mode not in MODES:
        raise SystemExit(f"mode {mode}: expected one of {MODES}")
    dev = torch.device("cuda")
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    x, ids, w, w1, w2, dy = layer_inputs(T, H, I, E, k, dev)
    print(f"trace of the step: {name} layer, T={T}, E={E}, top-{k}, on {torch.cuda.get_device_name()}, "
          f"library {mm.lib().megamoe_version().decode()}, torch {torch.__version__}, ours in mode {mode}")

    layer = mm.Layer(H, I, E, k, T, save_z=mode not in ("recompute", "op"), device=dev)
    wdt = torch.float32 if mode == "f32" else torch.bfloat16
    y = torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16)
    grads = (torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16),
             torch.full((T, k), float("nan"), device=dev),
             torch.full((E, 2 * I, H), float("nan"), device=dev, dtype=wdt),
             torch.full((E, H, I), float("nan"), device=dev, dtype=wdt))
    w8 = None
    if mode == "fp8":
        w8 = mm.Fp8Weights(layer)
        w8.quantize(w1, w2)

    # the operator modes: leaves whose gradients autograd writes, then copied into `grads` (outside the timing: the
    # check only) by `op_outputs`
    xo, wo, w1o, w2o = (t.detach().clone().requires_grad_(True) for t in (x, w, w1, w2))

    def ours():
        if mode in ("op", "op-z"):
            for t in (xo, wo, w1o, w2o):
                t.grad = None
            mm.moe_op(layer, xo, ids, wo, w1o, w2o).backward(dy)
            return
        if w8 is None:
            _, saved = layer.forward(x, ids, w, w1, w2, out=y)
        else:
            _, saved = layer.forward_fp8(x, ids, w, w8, out=y)
        layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads, wgrad_dtype=wdt, w8=w8)

    def op_outputs():
        with torch.no_grad():
            y.copy_(mm.moe_op(layer, x, ids, w, w1, w2))
            for g, o in zip(grads, (xo.grad, wo.grad, w1o.grad, w2o.grad)):
                g.copy_(o)

    ids64 = ids.long()
    xr, wr, W1, W2 = (t.detach().clone().requires_grad_(True) for t in (x, w, w1, w2))

    def theirs():
        for t in (xr, wr, W1, W2):
            t.grad = None
        grouped(xr, ids64, wr, W1, W2).backward(dy)

    # the step is checked before it is traced: every output of ours written, and near PyTorch's gradients
    ours()
    if mode in ("op", "op-z"):
        op_outputs()
    theirs()
    torch.cuda.synchronize()
    for what, a, b in (("y", y, None), ("dx", grads[0], xr.grad), ("dtopk", grads[1], wr.grad),
                       ("dW1", grads[2], W1.grad), ("dW2", grads[3], W2.grad)):
        if torch.isnan(a).any():
            raise SystemExit(f"FAILED: our {what} holds NaN (an element unwritten or a NaN computed)")
        if b is not None:
            d = ((a.float() - b.float()).norm() / b.float().norm()).item()
            print(f"check: our {what} against PyTorch's, rel diff {d:.2e}")
            if not d < (1.5e-1 if mode == "fp8" else 5e-2):
                raise SystemExit(f"FAILED: our {what} is {d:.2e} from PyTorch's (bf16 layers agree to ~1e-2)")
    sides = {"megamoe": ours, "PyTorch": theirs} if mode == "z" else {"megamoe": ours}
    for _ in range(10):  # warm: clocks settled, both sides' caches and maps made
        for fn in sides.values():
            fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for side, fn in sides.items():
            for _ in range(STEPS):
                torch.cuda._sleep(20000)
                fn()
            torch.cuda.synchronize()
    per = steps_of(device_activities(prof))
    if len(per) != STEPS * len(sides):
        names = sorted({a[0][:50] for a in device_activities(prof)})[:40]
        raise SystemExit(f"expected {STEPS * len(sides)} marked steps, found {len(per)}; names: {names}")
    for i, side in enumerate(sides):
        sel = per[i * STEPS + 1:(i + 1) * STEPS]
        show(side, sel[len(sel) // 2])
        spans = [st[-1][2] - st[0][1] for st in sel]
        busy = [sum(e - s for _, s, e in st) for st in sel]
        span, kern = statistics.median(spans), statistics.median(busy)
        who = f"{side} ({mode})" if side == "megamoe" else side
        print(f"RESULT trace-step {name} T={T} {who}: span {span:.0f} us, kernels {kern:.0f} us, gaps "
              f"{span - kern:.0f} us, {statistics.median(len(st) for st in sel)} device activities a step "
              f"(medians of {len(sel)} steps back to back)")
        by = collections.defaultdict(list)
        for st in sel:
            acc = collections.Counter()
            for n, s, e in st:
                acc[n[:60] if side == "megamoe" else category(n)] += e - s
            for n, v in acc.items():
                by[n].append(v)
        rows = sorted(((statistics.median(v + [0.0] * (len(sel) - len(v))), n) for n, v in by.items()), reverse=True)
        for v, n in rows:
            print(f"RESULT trace-step kernel {name} {who}: {n:<60} {v:8.1f} us a step ({100 * v / span:4.1f}% of "
                  f"the span)")


if __name__ == "__main__":
    main()
