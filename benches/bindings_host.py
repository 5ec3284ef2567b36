"""Where the PyTorch bindings' host time of one forward goes (python/megamoe_torch.py; MEGAMOE_LIB names
libmegamoe_capi.so): the 30B layer's `Layer.forward` timed on the host (the call returns before the GPU is done),
the bare C call with its arguments prepared once, and a cProfile of 100 forwards (the top entries by own time).
benches/torch_rotation.py measured the bindings' enqueue at ~96 us on an H100 against the Rust API's 17-20 us.
Usage: `MEGAMOE_LIB=.../libmegamoe_capi.so python3 benches/bindings_host.py`.
"""
import cProfile
import ctypes
import os
import pstats
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megamoe_torch as mm  # noqa: E402
from torch_common import layer_inputs  # noqa: E402


def median_us(f, n=50):
    ts = []
    for i in range(n):
        if i % 10 == 0:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        f()
        ts.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    return sorted(ts)[n // 2]


def main():
    H, I, E, k, T = 2048, 768, 128, 8, 16384
    dev = torch.device("cuda")
    x, ids, w, w1, w2, _ = layer_inputs(T, H, I, E, k, dev)
    y = torch.empty(T, H, device=dev, dtype=torch.bfloat16)
    layer = mm.Layer(H, I, E, k, T, device=dev)
    for _ in range(10):
        layer.forward(x, ids, w, w1, w2, out=y)
    torch.cuda.synchronize()
    L = mm.lib()
    st = torch.cuda.current_stream(dev).cuda_stream
    args = [layer.handle, st, T, x.data_ptr(), ids.data_ptr(), w.data_ptr(), w1.data_ptr(), w2.data_ptr(),
            y.data_ptr()]

    def bare():
        s = ctypes.c_void_p()
        L.megamoe_forward(*args, ctypes.byref(s))
        L.megamoe_saved_free(s)

    def stateless():
        L.megamoe_forward(*args, None)

    s0 = ctypes.c_void_p()
    mm._check(L.megamoe_forward(*args, ctypes.byref(s0)))  # the bare calls below are timed without their checks
    L.megamoe_saved_free(s0)
    mm._check(L.megamoe_forward(*args, None))
    steps = [("Layer.forward (checks, stream, Saved)", lambda: layer.forward(x, ids, w, w1, w2, out=y)),
             ("megamoe_forward alone, a saved state handed out and freed", bare),
             ("megamoe_forward alone, no saved state", stateless),
             ("torch.cuda.current_stream().cuda_stream", lambda: torch.cuda.current_stream(dev).cuda_stream),
             ("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing)]
    for what, f in steps:
        print(f"RESULT bindings host {what}: {median_us(f):.1f} us (median of 50)")
    pr = cProfile.Profile()
    pr.enable()
    for i in range(100):
        layer.forward(x, ids, w, w1, w2, out=y)
        if i % 10 == 9:
            torch.cuda.synchronize()
    pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
