"""Issue 4's layer ratios measured in one process, in rotation: megamoe's layer (through the PyTorch bindings,
python/megamoe_torch.py; MEGAMOE_LIB names libmegamoe_capi.so) against the torch._grouped_mm layer of
benches/torch_layer.py, on the same inputs. Each repetition times, in turn: our forward and PyTorch's, each alone
(one forward between two events) and 10 back to back (the host ahead, as in training); then our step (forward +
backward, z saved, bf16 weight gradients, as the layer benchmark's headline step) and PyTorch's (autograd, the
gradients set to None first). Heat, clock and power fall on both sides alike, which two benchmarks run one after
the other cannot promise (on the power-capped H200 the phase of a run moved our forward ~4%: docs/RESULTS.md
2026-12-06d call 4). First 3 s of both steps alternating (MEGAMOE_BENCH_HEAT=S changes it), then 3 rounds of
warm-up, then medians of 20 (MEGAMOE_BENCH_REPS=N). Our output is checked against PyTorch's layer on the same
inputs (relative difference of bf16 layers, NaN fails) and every element written (poisoned first).

Usage: `MEGAMOE_LIB=.../libmegamoe_capi.so python3 benches/torch_rotation.py [KEY]` (default 30B; KEY one of
torch_common.SHAPES: 30B and 235B (T = 16384, top-8, E = 128), and other models' layers; random routing). Before
the timings one step of each side on the same inputs checks ours against PyTorch's: y, dx, dtopk, dW1 and dW2, every
element written (ours poisoned first), relative differences of two bf16 layers. Prints `RESULT rotation` lines.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megamoe_torch as mm  # noqa: E402
from torch_common import grouped, layer_inputs, shape, timeit_rotation  # noqa: E402


def main():
    key = sys.argv[1] if len(sys.argv) > 1 else "30B"
    name, H, I, E, k, T = shape(key)
    reps = int(os.environ.get("MEGAMOE_BENCH_REPS", "20"))
    heat = float(os.environ.get("MEGAMOE_BENCH_HEAT", "3") or 0)
    dev = torch.device("cuda")
    torch.manual_seed(int.from_bytes(os.urandom(4), "little"))
    x, ids, w, w1, w2, dy = layer_inputs(T, H, I, E, k, dev)
    flops = 6 * T * k * H * I
    print(f"rotation: {name} layer, T={T}, E={E}, top-{k}, on {torch.cuda.get_device_name()}, "
          f"library {mm.lib().megamoe_version().decode()}, torch {torch.__version__}")

    # ours: the layer keeping z (the headline step's mode), its gradients into buffers allocated once
    layer = mm.Layer(H, I, E, k, T, save_z=True, device=dev)
    y = torch.full((T, H), float("nan"), device=dev, dtype=torch.bfloat16)
    grads = (torch.empty(T, H, device=dev, dtype=torch.bfloat16), torch.empty(T, k, device=dev),
             torch.empty(E, 2 * I, H, device=dev, dtype=torch.bfloat16),
             torch.empty(E, H, I, device=dev, dtype=torch.bfloat16))

    def our_forward():
        layer.forward(x, ids, w, w1, w2, out=y)

    def our_forwards():
        for _ in range(10):
            layer.forward(x, ids, w, w1, w2, out=y)

    def our_step():
        _, saved = layer.forward(x, ids, w, w1, w2, out=y)
        layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads, wgrad_dtype=torch.bfloat16)

    # theirs: autograd through torch._grouped_mm, as benches/torch_layer.py times it
    ids64 = ids.long()
    xr, wr, W1, W2 = (t.detach().clone().requires_grad_(True) for t in (x, w, w1, w2))

    def their_forward():
        with torch.no_grad():
            grouped(x, ids64, w, w1, w2)

    def their_forwards():
        with torch.no_grad():
            for _ in range(10):
                grouped(x, ids64, w, w1, w2)

    def their_step():
        for t in (xr, wr, W1, W2):
            t.grad = None
        grouped(xr, ids64, wr, W1, W2).backward(dy)

    # the outputs: every element of ours written, and ours near PyTorch's (two bf16 layers)
    our_forward()
    with torch.no_grad():
        ref = grouped(x, ids64, w, w1, w2).float()
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        raise SystemExit("FAILED: our forward left NaN (an element unwritten or a NaN computed)")
    diff = ((y.float() - ref).norm() / ref.norm()).item()
    print(f"check: our y against PyTorch's layer, rel diff {diff:.2e}")
    if not diff < 2e-2:
        raise SystemExit(f"FAILED: our y is {diff:.2e} from PyTorch's layer's (bf16 layers agree to ~1e-2)")
    # the step's gradients: ours (poisoned first) against autograd's through PyTorch's layer
    for g in grads:
        g.fill_(float("nan"))
    our_step()
    their_step()
    torch.cuda.synchronize()
    for gname, ours, theirs in zip(("dx", "dtopk", "dW1", "dW2"), grads, (xr.grad, wr.grad, W1.grad, W2.grad)):
        if torch.isnan(ours).any():
            raise SystemExit(f"FAILED: our {gname} left NaN (an element unwritten or a NaN computed)")
        d = ((ours.float() - theirs.float()).norm() / theirs.float().norm()).item()
        print(f"check: our {gname} against PyTorch's autograd, rel diff {d:.2e}")
        if not d < 3e-2:
            raise SystemExit(f"FAILED: our {gname} is {d:.2e} from PyTorch's (bf16 layers agree to ~1e-2)")

    if heat > 0:
        t0, n = time.time(), 0
        while time.time() - t0 < heat:
            our_step()
            their_step()
            n += 1
            if n % 4 == 0:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        print(f"HEAT {n} steps of each, alternating, in {heat:.1f} s")
    # the host's time to enqueue one forward (the call returns before the GPU is done), each after a device wait:
    # what a forward timed alone on an idle GPU waits for before its first kernel, at most
    host = {our_forward: [], their_forward: []}
    for _ in range(10):
        for f in host:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            host[f].append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    h_ours, h_theirs = (sorted(v)[len(v) // 2] for v in host.values())
    print(f"RESULT rotation {name} T={T} host enqueue of one forward: megamoe {h_ours:.0f} us (bindings, ctypes), "
          f"torch._grouped_mm {h_theirs:.0f} us (medians of 10)")
    fns = [our_forward, their_forward, our_forwards, their_forwards, our_step, their_step]
    f1, t1, f10, t10, s1, ts1 = timeit_rotation(fns, reps=reps)
    f10, t10 = f10 / 10, t10 / 10
    torch.cuda.synchronize()
    head = f"RESULT rotation {name} T={T}"
    tail = f"(medians of {reps}, the six timings in rotation)"
    for what, ours, theirs in [("forward alone", f1, t1), ("forward, 10 back to back", f10, t10)]:
        print(f"{head} {what}: megamoe {ours * 1e3:.0f} us, {flops / ours / 1e9:.0f} TFLOP/s; torch._grouped_mm "
              f"{theirs * 1e3:.0f} us, {flops / theirs / 1e9:.0f} TFLOP/s; ratio {theirs / ours:.2f}x {tail}")
    print(f"{head} forward+backward (ours z saved, bf16 weight gradients; PyTorch's autograd): megamoe "
          f"{s1 * 1e3:.0f} us, {3 * flops / s1 / 1e9:.0f} TFLOP/s; torch._grouped_mm {ts1 * 1e3:.0f} us; ratio "
          f"{ts1 / s1:.2f}x {tail}")
    # SonicMoE's convention (its benchmarks/moe-cute.py): the backward's time is the step's less the forward's, for
    # twice the forward's FLOPs
    print(f"{head} backward as the step less the forward alone: megamoe {(s1 - f1) * 1e3:.0f} us, "
          f"{2 * flops / (s1 - f1) / 1e9:.0f} TFLOP/s; torch._grouped_mm {(ts1 - t1) * 1e3:.0f} us, "
          f"{2 * flops / (ts1 - t1) / 1e9:.0f} TFLOP/s {tail}")


if __name__ == "__main__":
    main()
