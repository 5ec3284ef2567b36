"""The 30B forward's kernels on the GPU's own clock (CUPTI through torch.profiler; the device machine has no nsys):
each kernel's start, duration and the idle time before it, for forwards timed alone (the GPU idle before each) and
for forwards back to back (the host ahead), through the C ABI (MEGAMOE_LIB names libmegamoe_capi.so).

Prints `TRACE` lines (one per kernel or memset of one forward of each kind: the third lone forward and the sixth of
ten back to back) and `RESULT trace` lines: per kind, the median over its forwards of the span from the first
kernel's start to the last one's end, the sum of the kernels' own times and of the gaps, and the first kernel's
start after the host's call began (lone forwards only, from the profiler's CPU clock, which it aligns with the GPU's).
Run it once per setting of a process-wide knob read at load (MEGAMOE_PDL=on / off, MEGAMOE_ROUTE=split / fused) to
see what the knob moves. Usage: `MEGAMOE_LIB=.../libmegamoe_capi.so python3 benches/trace_forward.py [T]`.
"""
import os
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megamoe_torch as mm  # noqa: E402
from torch_common import layer_inputs  # noqa: E402


ANNOTATIONS = ("lone_forward", "b2b_forwards")


def kernels(prof):
    """The device activities (kernels, memsets, copies) in start order: (name, start us, end us). The profiler also
    puts each record_function range on the GPU's timeline (as a user annotation spanning its kernels): left out."""
    out = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.name not in ANNOTATIONS:
            out.append((e.name, e.time_range.start, e.time_range.end))
    out.sort(key=lambda x: x[1])
    return out


def split(acts, n, first):
    """`acts` cut into n forwards: each forward begins at an activity whose name starts with `first`."""
    starts = [i for i, a in enumerate(acts) if a[0].startswith(first)]
    if len(starts) != n:
        raise SystemExit(f"expected {n} forwards beginning with {first}, found {len(starts)}: "
                         f"{sorted({a[0] for a in acts})}")
    return [acts[s:e] for s, e in zip(starts, starts[1:] + [len(acts)])]


def summary(fw):
    span = fw[-1][2] - fw[0][1]
    busy = sum(e - s for _, s, e in fw)
    return span, busy, span - busy


def show(kind, fw):
    t0 = fw[0][1]
    prev = None
    for name, s, e in fw:
        gap = 0.0 if prev is None else s - prev
        print(f"TRACE {kind:<13} {s - t0:9.1f} us {name[:44]:<44} {e - s:8.1f} us, gap before {gap:6.1f} us")
        prev = e


def main():
    T = int(sys.argv[1]) if len(sys.argv) > 1 else 16384
    H, I, E, k = 2048, 768, 128, 8
    dev = torch.device("cuda")
    torch.manual_seed(1)
    layer = mm.Layer(H, I, E, k, T, device=dev)
    x, ids, w, w1, w2, _ = layer_inputs(T, H, I, E, k, dev)
    out = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    knobs = {v: os.environ.get(v, "") for v in ("MEGAMOE_PDL", "MEGAMOE_ROUTE")}
    print(f"trace of the forward, T={T}, on {torch.cuda.get_device_name()}, knobs {knobs}")
    for _ in range(20):  # warm: modules loaded, tensor maps encoded, clocks settled
        layer.forward(x, ids, w, w1, w2, out=out)
    torch.cuda.synchronize()
    lone, b2b = 6, 10
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(lone):
            with torch.profiler.record_function("lone_forward"):
                layer.forward(x, ids, w, w1, w2, out=out)
            torch.cuda.synchronize()
        with torch.profiler.record_function("b2b_forwards"):
            for _ in range(b2b):
                layer.forward(x, ids, w, w1, w2, out=out)
        torch.cuda.synchronize()
    acts = kernels(prof)
    # a forward begins at its routing kernel (the split form's error-word memset before it falls to the forward
    # before)
    first = "route_fused" if any(a[0].startswith("route_fused") for a in acts) else "route_count"
    fws = split(acts, lone + b2b, first)
    cpu = sorted((e.time_range.start, e.name) for e in prof.events()
                 if e.name == "lone_forward" and e.device_type == torch.autograd.DeviceType.CPU)
    show("lone", fws[2])
    show("back-to-back", fws[lone + 5])
    for kind, sel in (("lone", fws[1:lone]), ("back-to-back", fws[lone + 1:lone + b2b - 1])):
        s = [summary(f) for f in sel]
        span, busy, gaps = (statistics.median(v) for v in zip(*s))
        print(f"RESULT trace {kind} forward T={T}: span {span:.0f} us, kernels {busy:.0f} us, gaps {gaps:.1f} us "
              f"(medians of {len(sel)}; knobs {knobs})")
    if len(cpu) == lone:
        lat = [fws[i][0][1] - cpu[i][0] for i in range(lone)]
        print(f"RESULT trace lone forward T={T}: first kernel {statistics.median(lat[1:]):.1f} us after the host's "
              f"call began (median of {lone - 1})")
    # per kernel: lone against back to back, the median duration of each position in the forward
    n = min(len(f) for f in fws)
    for j in range(n):
        a = statistics.median(f[j][2] - f[j][1] for f in fws[1:lone])
        b = statistics.median(f[j][2] - f[j][1] for f in fws[lone + 1:lone + b2b - 1])
        print(f"RESULT trace position {j} {fws[lone + 5][j][0][:40]}: lone {a:.1f} us, back to back {b:.1f} us "
              f"({a / b if b else 0:.3f}x)")


if __name__ == "__main__":
    main()
