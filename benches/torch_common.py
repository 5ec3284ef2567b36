"""What the PyTorch partners of the benches share (torch_gemm.py, torch_dswiglu.py, torch_fp8.py, torch_layer.py):
the timing rule and the routing counts. Imported from the script's own folder (benches/, or a gpu-bundle folder).

`MEGAMOE_TORCH_SMOKE=1`: the scripts that honour it run on the CPU at tiny shapes, each timing one wall-clock call (no
figure worth reading): a check of a script's logic where there is no GPU.
"""
import os
import time

import torch
import torch.nn.functional as F

SMOKE = os.environ.get("MEGAMOE_TORCH_SMOKE") == "1"
DEV = "cpu" if SMOKE else "cuda"
WARM, REPS = 3, 20


def grouped(x, ids, w, W1, W2):
    """PyTorch's MoE layer on torch._grouped_mm (the baseline of issue 4): sort the slots by expert, gather x's
    rows, grouped GEMM1, SwiGLU, grouped GEMM2, the routing weight, index_add back to the tokens."""
    T, k = ids.shape
    I = W2.shape[2]
    flat = ids.flatten()
    order = torch.argsort(flat, stable=True)
    tok = order // k
    counts = torch.bincount(flat, minlength=W1.shape[0])
    offs = torch.cumsum(counts, 0).to(torch.int32)
    xs = x[tok]
    z = torch._grouped_mm(xs, W1.transpose(1, 2), offs=offs)
    h = F.silu(z[:, :I]) * z[:, I:]
    y = torch._grouped_mm(h, W2.transpose(1, 2), offs=offs)
    y = y * w.flatten()[order].unsqueeze(1).to(y.dtype)
    return torch.zeros_like(x).index_add_(0, tok, y)


# The layer shapes the Python benches take by key: (name, H, I (the experts' intermediate size), E, top-k, T tokens).
# The Qwen3 pair is issue 4's (T = 16384 a GPU, as Prime's runs); the others are other models' MoE layers from their
# Hugging Face configs, for coverage (one GPU, all experts local; random routing). `dsv3ep8` is DeepSeek-V3's
# layer as one GPU of EP = 8 sees it: its 32 of the 256 experts and the rows they receive (T tokens a GPU, top-8:
# ~T / 4 rows an expert, as here). `sonic` is SonicMoE's published H100 configuration (its paper's 7B shape);
# `sfg-*` are the fine-grained ones of its Figure 14 (FLOPs counted as there: 6 T k H I forward, 12 backward).
SHAPES = {
    "30B": ("Qwen3-30B-A3B", 2048, 768, 128, 8, 16384),
    "235B": ("Qwen3-235B-A22B", 4096, 1536, 128, 8, 16384),
    "next": ("Qwen3-Next-80B-A3B", 2048, 512, 512, 10, 16384),
    "dsv2lite": ("DeepSeek-V2-Lite", 2048, 1408, 64, 6, 16384),
    "dsv3ep8": ("DeepSeek-V3 at EP=8 (32 experts a GPU)", 7168, 2048, 32, 8, 16384),
    "gptoss": ("gpt-oss-120b (shape; plain SwiGLU)", 2880, 2880, 128, 4, 16384),
    "sonic": ("SonicMoE's 7B configuration", 4096, 2048, 64, 4, 32768),
    # SonicMoE's Figure 14 (arXiv 2512.14080, H100 bf16; its forward / backward TFLOP/s read off the chart, ~+-5):
    "sfg-30b-256": ("SonicMoE Fig. 14 30B n=256 (~427 / ~459)", 4096, 256, 256, 16, 32768),
    "sfg-30b-512": ("SonicMoE Fig. 14 30B n=512 (~502 / ~511)", 4096, 512, 128, 8, 32768),
    "sfg-120b-512": ("SonicMoE Fig. 14 120B n=512 (~517 / ~526)", 4096, 512, 256, 16, 32768),
    "sfg-7b-256": ("SonicMoE Fig. 14 7B n=256 (~364 / ~404)", 1536, 256, 128, 8, 24576),
    "sfg-1b-256": ("SonicMoE Fig. 14 1.4B n=256 (~336 / ~364)", 768, 256, 128, 8, 40960),
}


def shape(key):
    """SHAPES[key], or an exit naming the keys."""
    if key not in SHAPES:
        raise SystemExit(f"shape {key}: expected one of {sorted(SHAPES)}")
    return SHAPES[key]


def layer_inputs(T, H, I, E, k, dev):
    """Random inputs of one MoE layer as the benches draw them: x [T, H] bf16, top-k expert ids [T, k] int32 (k
    distinct experts a token, uniform), routing weights [T, k] f32 in [0, 1), W1 [E, 2I, H] and W2 [E, H, I] bf16
    (scaled so that z and y stay O(1)), and an output gradient dy [T, H] bf16 (drawn last)."""
    x = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    # k distinct uniform experts a token (a random permutation's first k; one sort for all tokens)
    ids = torch.rand(T, E, device=dev).argsort(dim=1)[:, :k].to(torch.int32)
    w = torch.rand(T, k, device=dev)
    w1 = (torch.randn(E, 2 * I, H, device=dev) * (1.7 / H ** 0.5)).to(torch.bfloat16)
    w2 = (torch.randn(E, H, I, device=dev) * (2.0 / I ** 0.5)).to(torch.bfloat16)
    dy = torch.randn(T, H, device=dev, dtype=torch.bfloat16)
    return x, ids, w, w1, w2, dy


def timeit(fn, reps=REPS, warm=WARM):
    """The median in ms of `reps` calls of fn, each bracketed by CUDA events, after `warm` warm-up calls."""
    if SMOKE:
        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e3
    return timeit_rotation([fn], reps, warm)[0]


def timeit_rotation(fns, reps=REPS, warm=WARM):
    """The medians in ms of each of `fns`, timed as `timeit` times one but in rotation (each rep calls every fn in
    turn), so that clock and heat drift fall on all alike."""
    if SMOKE:
        return [timeit(fn) for fn in fns]
    for _ in range(warm):
        for fn in fns:
            fn()
    torch.cuda.synchronize()
    ts = [[] for _ in fns]
    for _ in range(reps):
        for t, fn in zip(ts, fns):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            t.append(a.elapsed_time(b))
    return [sorted(t)[len(t) // 2] for t in ts]


def device_name():
    return "the CPU (smoke run)" if SMOKE else torch.cuda.get_device_name()


def counts_for(folder, name, T, E, k):
    """Rows per expert: megamoe's routing counts (`gemm_counts_<name>.txt` in `folder`, written by benches/gemm.rs
    with MEGAMOE_GEMM_COUNTS_DIR) if there, else a fresh uniform routing (k distinct experts per token);
    (counts on the device, where they came from)."""
    path = os.path.join(folder, f"gemm_counts_{name}.txt") if folder else ""
    if path and os.path.exists(path):
        c = [int(v) for v in open(path).read().split()]
        assert len(c) == E and sum(c) == T * k, f"{path}: {len(c)} counts summing to {sum(c)}"
        return torch.tensor(c, device=DEV), "megamoe's routing counts"
    ids = torch.rand(T, E, device=DEV).argsort(dim=1)[:, :k]
    return torch.bincount(ids.flatten(), minlength=E), "a fresh uniform routing"
