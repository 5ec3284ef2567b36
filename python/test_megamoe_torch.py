"""GPU test of the PyTorch bindings (python/megamoe_torch.py): `python3 python/test_megamoe_torch.py` on the GPU
machine, with MEGAMOE_LIB naming libmegamoe_capi.so (or the library beside megamoe_torch.py). Exits non-zero on
the first failure; without a CUDA device it says so and exits 0 (skipped).

Fresh random inputs every run (the seed is printed; MEGAMOE_SEED replays it). For each case: the raw calls into
NaN-poisoned outputs, every element written and within 1e-2 of a float64 autograd reference on the same bf16
values (y, dx, dtopk, dW1, dW2; f32 weight gradients); a repeat bitwise equal; the autograd path (`mm.moe`, int64
ids) bitwise the raw calls, also on a side stream; bf16 weight gradients within 1e-2. Then refusals: wrong
dtype, shape or device in Python, and in the library a buffer smaller than the call needs and an invalid expert
id. CUDA-graph capture of the forward and backward by autograd (a ring of saved states), replays bitwise the
eager step. The custom operators (`moe_op`) bitwise `moe`, under torch.compile(fullgraph=True) and in a CUDA
graph. MEGAMOE_TORCH_BENCH=1 adds the 30B layer's forward + backward by autograd against the torch._grouped_mm layer
(median of 10 after 3, CUDA events).
"""
import ctypes
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import megamoe_torch as mm  # noqa: E402

if not torch.cuda.is_available():
    print("SKIP: no CUDA device (the bindings' test needs the GPU machine)")
    sys.exit(0)

dev = torch.device("cuda", 0)
seed = int(os.environ.get("MEGAMOE_SEED", torch.seed() % (1 << 31)))
torch.manual_seed(seed)
print(f"seed {seed} (MEGAMOE_SEED={seed} replays it); library {mm.lib().megamoe_version().decode()}; "
      f"{torch.cuda.get_device_name(dev)}; torch {torch.__version__}; "
      f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}")
failures = []


def fail(msg):
    print("FAIL:", msg)
    failures.append(msg)


def reference(x, ids, w, w1, w2):
    """float64 layer on float64 copies (autograd gives the reference gradients)."""
    T, k = ids.shape
    I = w2.shape[2]
    out = torch.zeros(T, x.shape[1], dtype=torch.float64, device=x.device)
    for e in range(w1.shape[0]):
        t, j = torch.where(ids == e)
        if t.numel() == 0:
            continue
        z = x[t] @ w1[e].t()
        h = F.silu(z[:, :I]) * z[:, I:]
        out = out.index_add(0, t, (h @ w2[e].t()) * w[t, j].unsqueeze(1))
    return out


def rel(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


def check_close(tag, got, want, tol=1e-2):
    if torch.isnan(got).any():
        i = torch.isnan(got.flatten()).nonzero()[0].item()
        fail(f"{tag}: element {i} is NaN (not written)")
        return
    e = rel(got, want)
    print(f"  {tag}: rel err {e:.3e}")
    if not e <= tol:
        fail(f"{tag}: rel err {e:.3e} > {tol}")


def same_bits(tag, a, b):
    if not torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a.view(torch.int32),
                       b.view(torch.int16) if b.dtype == torch.bfloat16 else b.view(torch.int32)):
        fail(f"{tag}: not bitwise equal")


def inputs(H, I, E, k, T, masked):
    ids = torch.rand(T, E, device=dev).argsort(dim=1)[:, :k].to(torch.int32)
    if masked:
        ids[torch.rand(T, k, device=dev) < masked] = -1
    return (torch.randn(T, H, device=dev).to(torch.bfloat16), ids, torch.rand(T, k, device=dev),
            (torch.randn(E, 2 * I, H, device=dev) * 1.7 * H ** -0.5).to(torch.bfloat16),
            (torch.randn(E, H, I, device=dev) * 2.0 * I ** -0.5).to(torch.bfloat16),
            torch.randn(T, H, device=dev).to(torch.bfloat16))


def nan(*shape, dtype=torch.bfloat16):
    return torch.full(shape, float("nan"), dtype=dtype, device=dev)


def case(name, H, I, E, k, T, save_z, masked):
    print(f"case {name}: H={H} I={I} E={E} k={k} T={T} save_z={save_z} masked={masked}")
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    layer = mm.Layer(H, I, E, k, T, save_z=save_z)
    y, saved = layer.forward(x, ids, w, w1, w2, out=nan(T, H))
    grads = (nan(T, H), nan(T, k, dtype=torch.float32), nan(E, 2 * I, H, dtype=torch.float32),
             nan(E, H, I, dtype=torch.float32))
    dx, dtopk, dw1, dw2 = layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads, wgrad_dtype=torch.float32)
    saved.check()
    xr, wr, w1r, w2r = (t.double().requires_grad_() for t in (x, w, w1, w2))
    yr = reference(xr, ids, wr, w1r, w2r)
    yr.backward(dy.double())
    for tag, got, want in [("y", y, yr.detach()), ("dx", dx, xr.grad), ("dtopk", dtopk, wr.grad),
                           ("dW1 f32", dw1, w1r.grad), ("dW2 f32", dw2, w2r.grad)]:
        check_close(tag, got, want)
    y2, _ = layer.forward(x, ids, w, w1, w2)
    same_bits("y of a repeat", y2, y)
    # autograd, int64 ids as a router gives them; then on a side stream
    for where in ("current stream", "side stream"):
        s = torch.cuda.Stream(dev)
        s.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(s) if where == "side stream" else torch.cuda.stream(torch.cuda.current_stream(dev)):
            xa, wa, w1a, w2a = (t.clone().requires_grad_() for t in (x, w, w1, w2))
            ya = mm.moe(layer, xa, ids.long(), wa, w1a, w2a)
            ya.backward(dy)
        torch.cuda.current_stream(dev).wait_stream(s)
        same_bits(f"autograd y ({where})", ya.detach(), y)
        same_bits(f"autograd dx ({where})", xa.grad, dx)
        same_bits(f"autograd dtopk ({where})", wa.grad, dtopk)
        check_close(f"autograd dW1 bf16 ({where})", w1a.grad, w1r.grad)
        check_close(f"autograd dW2 bf16 ({where})", w2a.grad, w2r.grad)
    # Megatron's main_grad: two micro-batches accumulate exactly twice the raw call's f32 weight gradients
    w1m, w2m = w1.clone().requires_grad_(), w2.clone().requires_grad_()
    w1m.main_grad = torch.zeros(w1.shape, dtype=torch.float32, device=dev)
    w2m.main_grad = torch.zeros(w2.shape, dtype=torch.float32, device=dev)
    for _ in range(2):
        xm = x.clone().requires_grad_()
        mm.moe(layer, xm, ids, w, w1m, w2m).backward(dy)
        same_bits("main_grad micro-batch dx", xm.grad, dx)
    same_bits("main_grad dW1 (2 micro-batches)", w1m.main_grad, 2 * dw1)
    same_bits("main_grad dW2 (2 micro-batches)", w2m.main_grad, 2 * dw2)
    if w1m.grad is not None or not getattr(w1m, "grad_added_to_main_grad", False):
        fail("main_grad: a weight gradient was returned, or grad_added_to_main_grad not set")
    torch.cuda.synchronize()


def case_fp8(name, H, I, E, k, T, masked=0.0):
    """The FP8 forward and its straight-through backward: raw calls into poisoned outputs, every element written,
    within 0.1 of the float64 bf16 layer (e4m3's error: the Rust tests hold them to CPU models of the FP8 path);
    a repeat bitwise; `MoE(fp8=True)` bitwise the raw calls; a stale Fp8Weights refused; after an update of the
    weights the module requantizes (its output moves)."""
    print(f"case fp8 {name}: H={H} I={I} E={E} k={k} T={T} masked={masked}")
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    layer = mm.Layer(H, I, E, k, T)
    w8 = mm.Fp8Weights(layer)
    expect_error("codes never quantized", mm.MegamoeError, lambda: layer.forward_fp8(x, ids, w, w8),
                 "never quantized")
    w8.quantize(w1, w2)
    y, saved = layer.forward_fp8(x, ids, w, w8, out=nan(T, H))
    grads = (nan(T, H), nan(T, k, dtype=torch.float32), nan(E, 2 * I, H), nan(E, H, I))
    dx, dtopk, dw1, dw2 = layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads, w8=w8)
    saved.check()
    kept = tuple(t.clone() for t in grads)
    expect_error("the bf16 backward of an FP8 forward", mm.MegamoeError,
                 lambda: layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads), "backward_fp8")
    torch.cuda.synchronize()
    for t, k0 in zip(grads, kept):
        same_bits("gradients after a refused backward", t, k0)
    xr, wr, w1r, w2r = (t.double().requires_grad_() for t in (x, w, w1, w2))
    yr = reference(xr, ids, wr, w1r, w2r)
    yr.backward(dy.double())
    for tag, got, want in [("fp8 y", y, yr.detach()), ("fp8 dx", dx, xr.grad), ("fp8 dtopk", dtopk, wr.grad),
                           ("fp8 dW1 bf16", dw1, w1r.grad), ("fp8 dW2 bf16", dw2, w2r.grad)]:
        check_close(tag, got, want, tol=0.1)
    y2, _ = layer.forward_fp8(x, ids, w, w8)
    same_bits("fp8 y of a repeat", y2, y)
    moe = mm.MoE(H, I, E, k, T, device=dev, fp8=True)
    with torch.no_grad():
        moe.w1.copy_(w1)
        moe.w2.copy_(w2)
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ya = moe(xa, ids.long(), wa)
    ya.backward(dy)
    same_bits("fp8 MoE y", ya.detach(), y)
    same_bits("fp8 MoE dx", xa.grad, dx)
    same_bits("fp8 MoE dtopk", wa.grad, dtopk)
    same_bits("fp8 MoE dW1", moe.w1.grad, dw1)
    same_bits("fp8 MoE dW2", moe.w2.grad, dw2)
    expect_error("a stale Fp8Weights", ValueError,
                 lambda: mm.moe_fp8(layer, w8, x, ids, w, w1 * 2, w2), "quantize")
    with torch.no_grad():
        moe.w2.mul_(0.5)  # an optimizer step's in-place update: the module requantizes
    yb = moe(x, ids, w)
    check_close("fp8 MoE y after halving W2 (requantized)", yb, (y.double() * 0.5), tol=0.02)
    torch.cuda.synchronize()


def case_op_fp8(name, H, I, E, k, T, masked, save_z=False):
    """The custom operators' FP8 form (`moe_op_fp8`; with `save_z` the pair handing z over as a tensor): forward
    and backward bitwise the handle path (`forward_fp8`, `backward(..., w8=)`) of a layer of the same `save_z` with
    the codes quantized in the call and given from `fp8_codes`; `torch.compile` with fullgraph=True of a function
    calling it (aot_eager, and inductor where it runs) and of `MoE(op=True, fp8=True)`, bitwise too; a CUDA graph of
    the op path replayed on new inputs bitwise the eager step; codes of a wrong shape refused."""
    print(f"case op fp8 {name}: H={H} I={I} E={E} k={k} T={T} masked={masked} save_z={save_z}")
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    layer = mm.Layer(H, I, E, k, T, save_z=save_z)

    def handle_path(x, ids, w, w1, w2, dy):
        w8 = mm.Fp8Weights(layer)
        w8.quantize(w1, w2)
        y, saved = layer.forward_fp8(x, ids, w, w8, out=nan(T, H))
        grads = (nan(T, H), nan(T, k, dtype=torch.float32), nan(E, 2 * I, H), nan(E, H, I))
        dx, dtopk, dw1, dw2 = layer.backward(saved, dy, x, ids, w, w1, w2, grads=grads, w8=w8)
        torch.cuda.synchronize()
        return (y, dx, dtopk, dw1, dw2)

    args = (x, ids, w, w1, w2, dy)
    want = handle_path(*args)
    same_five("op fp8 (codes in the call) against the handle path",
              autograd_step(lambda *a: mm.moe_op_fp8(layer, *a), *args), want)
    codes = mm.fp8_codes(layer, w1, w2)
    same_five("op fp8 (codes given) against the handle path",
              autograd_step(lambda x_, ids_, w_, w1_, w2_: mm.moe_op_fp8(layer, x_, ids_, w_, w1_, w2_, codes=codes),
                            *args), want)
    check_compiled(" (fp8)", lambda *a: mm.moe_op_fp8(layer, *a), args, want)
    check_compiled_module(f"MoE(op=True, fp8=True, save_z={save_z})",
                          mm.MoE(H, I, E, k, T, device=dev, op=True, fp8=True, save_z=save_z), *args, want)
    # a CUDA graph of the op path, the codes made inside it: replays follow new weights
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    got = op_graph_replay(lambda *a: mm.moe_op_fp8(layer, *a), args, (x, ids, w, w1, w2, dy))
    same_five("op fp8 graph replay", got, handle_path(x, ids, w, w1, w2, dy))
    bad = list(codes)
    bad[2] = bad[2][:-1]
    expect_error("codes of a wrong shape", ValueError,
                 lambda: mm.moe_op_fp8(layer, x, ids, w, w1, w2, codes=tuple(bad)), "w2_codes")
    if save_z:
        # the FP8 op keeping z against the FP8 op recomputing it: the same bits (the forward's z is bitwise the
        # backward's recompute)
        layer_r = mm.Layer(H, I, E, k, T)
        same_five("op fp8 keeping z against the op fp8 recomputing it",
                  autograd_step(lambda *a: mm.moe_op_fp8(layer_r, *a), *args),
                  autograd_step(lambda *a: mm.moe_op_fp8(layer, *a), *args))
    torch.cuda.synchronize()


def capture(step, params):
    """PyTorch's capture recipe: one warm-up `step()` on a side stream, the `.grad` of `params` cleared (so that the
    captured backward allocates them in the graph's pool), then `step()` captured: the graph and what the captured
    step returned."""
    side = torch.cuda.Stream(dev)
    side.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream(dev).wait_stream(side)
    for p in params:
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out


def replay(graph, statics, values, outs):
    """New contents of the captured step's static inputs (`statics` from `values`), its outputs poisoned (NaN),
    one replay: copies of the outputs."""
    with torch.no_grad():
        for dst, src in zip(statics, values):
            dst.copy_(src)
        for o in outs:
            o.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return tuple(o.detach().clone() for o in outs)


def step_of(f, x, ids, w, dy):
    """A forward by `f` and its backward from dy: returns y."""
    def step():
        y = f(x, ids, w)
        y.backward(dy)
        return y
    return step


def case_graph(name, H, I, E, k, T, save_z, masked):
    """CUDA-graph capture through the bindings: a module with a ring of two saved states (one for the captured
    forward, one for eager calls), one warm-up step on a side stream as PyTorch's recipe has it, then
    `torch.cuda.graph` capturing the forward and its backward by autograd (outputs and gradients allocated inside
    the capture, so their tensor maps are recorded by the graph). Each replay on new contents of the static inputs
    (outputs poisoned first): every element written, within 1e-2 of the float64 reference, and bitwise the eager
    step on the same inputs."""
    print(f"case graph {name}: H={H} I={I} E={E} k={k} T={T} save_z={save_z} masked={masked}")
    moe = mm.MoE(H, I, E, k, T, save_z=save_z, device=dev, saved_slots=2)
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    with torch.no_grad():
        moe.w1.copy_(w1)
        moe.w2.copy_(w2)
    sx, sids, sw, sdy = x.clone().requires_grad_(), ids.clone(), w.clone().requires_grad_(), dy.clone()
    graph, gy = capture(step_of(moe, sx, sids, sw, sdy), (sx, sw, moe.w1, moe.w2))
    outs = (gy, sx.grad, sw.grad, moe.w1.grad, moe.w2.grad)
    for trial in ("B", "C"):
        x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
        got = replay(graph, (sx, sids, sw, sdy, moe.w1, moe.w2), (x, ids, w, dy, w1, w2), outs)
        xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
        w1a, w2a = w1.clone().requires_grad_(), w2.clone().requires_grad_()
        ya = mm.moe(moe.layer(), xa, ids, wa, w1a, w2a)
        ya.backward(dy)
        torch.cuda.synchronize()
        for tag, g_, e_ in zip(("y", "dx", "dtopk", "dW1", "dW2"), got,
                               (ya.detach(), xa.grad, wa.grad, w1a.grad, w2a.grad)):
            if torch.isnan(g_).any():
                fail(f"graph {trial} {tag}: not fully written by the replay")
            same_bits(f"graph {trial} {tag} against the eager step", g_, e_)
        xr, wr, w1r, w2r = (t.double().requires_grad_() for t in (x, w, w1, w2))
        yr = reference(xr, ids, wr, w1r, w2r)
        yr.backward(dy.double())
        for tag, g_, want in zip(("y", "dx", "dtopk", "dW1 bf16", "dW2 bf16"), got,
                                 (yr.detach(), xr.grad, wr.grad, w1r.grad, w2r.grad)):
            check_close(f"graph {trial} {tag}", g_, want)
    # a ring slot overwritten before its backward: refused, not wrong gradients (the graph holds one slot, so two
    # eager forwards share the other)
    layer = moe.layer()
    _, s1 = layer.forward(x, ids, w, w1, w2)
    _, s2 = layer.forward(x, ids, w, w1, w2)
    expect_error("the backward of an overwritten ring slot", mm.MegamoeError,
                 lambda: layer.backward(s1, dy, x, ids, w, w1, w2), "overwritten")
    layer.backward(s2, dy, x, ids, w, w1, w2)
    del graph
    torch.cuda.synchronize()


def autograd_step(f, x, ids, w, w1, w2, dy):
    """f(x, ids, w, w1, w2) on fresh leaf copies, then the backward of dy: (y, dx, dtopk, dW1, dW2)."""
    xa, wa, w1a, w2a = (t.clone().requires_grad_() for t in (x, w, w1, w2))
    y = f(xa, ids, wa, w1a, w2a)
    y.backward(dy)
    torch.cuda.synchronize()
    return (y.detach(), xa.grad, wa.grad, w1a.grad, w2a.grad)


def same_five(tag, got, want, names=("y", "dx", "dtopk", "dW1", "dW2")):
    """y, dx, dtopk, dW1, dW2 (or the tensors `names` names) each present, fully written and bitwise `want`'s:
    whether all were."""
    before = len(failures)
    for n, g_, e_ in zip(names, got, want):
        if g_ is None or torch.isnan(g_).any():
            fail(f"{tag} {n}: missing or not fully written")
            continue
        same_bits(f"{tag} {n}", g_, e_)
    return len(failures) == before


def check_compiled(tag, f, args, want):
    """torch.compile(f, fullgraph=True) with aot_eager and inductor (reported as not run where there is no
    Triton): its step bitwise `want`."""
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        cf = torch.compile(f, backend=backend, fullgraph=True)
        try:
            got = autograd_step(cf, *args)
        except Exception as e:  # noqa: BLE001
            from torch.utils._triton import has_triton
            if backend == "inductor" and not has_triton():
                print(f"  torch.compile inductor: not run here, no Triton ({type(e).__name__}: {str(e)[:160]})")
                continue
            fail(f"torch.compile {backend} fullgraph{tag}: {type(e).__name__}: {str(e)[:300]}")
            continue
        if same_five(f"torch.compile {backend}{tag}", got, want):
            print(f"  torch.compile {backend} fullgraph{tag}: bitwise the eager layer")


def op_graph_replay(f, args, new):
    """The step of f(x, ids, w, w1, w2) (an operator path: nothing carried from forward to backward, so no ring)
    captured in a CUDA graph on copies of `args` (x, ids, w, w1, w2, dy), then replayed once on `new`: its outputs
    (y, dx, dtopk, dW1, dW2)."""
    x, ids, w, w1, w2, dy = args
    sx, sw, sw1, sw2 = (t.clone().requires_grad_() for t in (x, w, w1, w2))
    sids, sdy = ids.clone(), dy.clone()
    op = lambda x_, ids_, w_: f(x_, ids_, w_, sw1, sw2)  # noqa: E731
    graph, gy = capture(step_of(op, sx, sids, sw, sdy), (sx, sw, sw1, sw2))
    outs = (gy, sx.grad, sw.grad, sw1.grad, sw2.grad)
    x, ids, w, w1, w2, dy = new
    got = replay(graph, (sx, sids, sw, sdy, sw1, sw2), (x, ids, w, dy, w1, w2), outs)
    del graph
    return got


def check_compiled_module(tag, mod, x, ids, w, w1, w2, dy, want):
    """The module `mod` (given w1, w2) under torch.compile(fullgraph=True, aot_eager): its step bitwise `want`."""
    torch._dynamo.reset()
    with torch.no_grad():
        mod.w1.copy_(w1)
        mod.w2.copy_(w2)
    cm = torch.compile(mod, backend="aot_eager", fullgraph=True)
    try:
        xm, wm = x.clone().requires_grad_(), w.clone().requires_grad_()
        ym = cm(xm, ids, wm)
        ym.backward(dy)
        torch.cuda.synchronize()
        if same_five(f"compiled {tag}", (ym.detach(), xm.grad, wm.grad, mod.w1.grad, mod.w2.grad), want):
            print(f"  torch.compile of {tag}: bitwise the eager layer")
    except Exception as e:  # noqa: BLE001
        fail(f"torch.compile of {tag}: {type(e).__name__}: {str(e)[:300]}")


def case_op(name, H, I, E, k, T, masked, save_z=False):
    """The custom operators (`moe_op`; with `save_z` the pair that hands z from the forward to the backward as a
    tensor): forward and backward bitwise the handle path (`moe`) of a layer of the same `save_z`;
    `torch.compile` with fullgraph=True (no graph break) of a function calling them, with the aot_eager backend
    (dynamo's tracing, the fake implementations, the autograd registration) and with inductor where it runs,
    bitwise too; the op path in a CUDA graph with no ring of saved states, replayed on new inputs bitwise the eager
    step."""
    print(f"case op {name}: H={H} I={I} E={E} k={k} T={T} masked={masked} save_z={save_z}")
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    layer = mm.Layer(H, I, E, k, T, save_z=save_z)

    args = (x, ids, w, w1, w2, dy)
    want = autograd_step(lambda *a: mm.moe(layer, *a), *args)
    same_five("op against moe", autograd_step(lambda *a: mm.moe_op(layer, *a), *args), want)
    check_compiled("", lambda *a: mm.moe_op(layer, *a), args, want)
    # the module form under torch.compile(fullgraph=True): its layer is made in __init__, not traced
    check_compiled_module(f"MoE(op=True, save_z={save_z})", mm.MoE(H, I, E, k, T, device=dev, op=True, save_z=save_z),
                          *args, want)
    # a CUDA graph of the op path: no ring needed (nothing is carried from the forward to the backward)
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, masked)
    got = op_graph_replay(lambda *a: mm.moe_op(layer, *a), args, (x, ids, w, w1, w2, dy))
    same_five("op graph replay", got, autograd_step(lambda *a: mm.moe(layer, *a), x, ids, w, w1, w2, dy))
    if save_z:
        # the op keeping z against the op recomputing it: the same bits (z is the same product either way)
        layer_r = mm.Layer(H, I, E, k, T)
        same_five("op keeping z against the op recomputing it", autograd_step(lambda *a: mm.moe_op(layer_r, *a), *args),
                  autograd_step(lambda *a: mm.moe_op(layer, *a), *args))
    torch.cuda.synchronize()


def case_shared(name, H, I, E, k, T, masked, save_z=False, op=False, fp8=False):
    """Two MoE modules of one configuration sharing one layer (`share_layer=True`: one workspace), stacked as a
    model stacks them (the second's input the first's output, other routing each) and trained a step: y, x's
    gradient, both routings' and both modules' weight gradients bitwise those of two modules with a layer each."""
    print(f"case shared {name}: H={H} I={I} E={E} k={k} T={T} masked={masked} save_z={save_z} op={op} fp8={fp8}")
    x, ids_a, w_a, w1a, w2a, dy = inputs(H, I, E, k, T, masked)
    _, ids_b, w_b, w1b, w2b, _ = inputs(H, I, E, k, T, masked)

    def step(share):
        mods = [mm.MoE(H, I, E, k, T, save_z=save_z, device=dev, op=op, fp8=fp8, share_layer=share) for _ in "ab"]
        with torch.no_grad():
            for m, w1, w2 in zip(mods, (w1a, w1b), (w2a, w2b)):
                m.w1.copy_(w1)
                m.w2.copy_(w2)
        xg, wag, wbg = (t.clone().requires_grad_() for t in (x, w_a, w_b))
        y = mods[1](mods[0](xg, ids_a, wag), ids_b, wbg)
        y.backward(dy)
        torch.cuda.synchronize()
        shared = mods[0].layer() is mods[1].layer()
        if shared != share:
            fail(f"shared {name}: share_layer={share} but the modules' layers shared: {shared}")
        return (y.detach(), xg.grad, wag.grad, wbg.grad, mods[0].w1.grad, mods[0].w2.grad, mods[1].w1.grad,
                mods[1].w2.grad)

    want, got = step(False), step(True)
    same_five(f"shared {name}", got, want, names=("y", "dx", "dtopk a", "dtopk b", "dW1 a", "dW2 a", "dW1 b", "dW2 b"))
    expect_error(f"shared {name}: share_layer with saved_slots", ValueError,
                 lambda: mm.MoE(H, I, E, k, T, device=dev, saved_slots=2, share_layer=True))
    # the default: shared on the eager path, a layer each with op=True (capturable) or with a ring
    for kw, want_shared in [(dict(), True), (dict(op=True), False), (dict(saved_slots=2), False)]:
        a, b = (mm.MoE(H, I, E, k, T, save_z=save_z, device=dev, fp8=fp8, **kw) for _ in "ab")
        got_shared = a.layer() is b.layer()
        if got_shared != want_shared:
            fail(f"shared {name}: the default with {kw} shared: {got_shared}, expected {want_shared}")
    torch.cuda.synchronize()


def expect_error(tag, exc, f, contains=""):
    try:
        f()
    except exc as e:
        if contains not in str(e):
            fail(f"{tag}: message lacks '{contains}': {e}")
        else:
            print(f"  {tag}: refused ({str(e)[:140]})")
        return
    except Exception as e:  # noqa: BLE001
        fail(f"{tag}: raised {type(e).__name__} {e}, expected {exc.__name__}")
        return
    fail(f"{tag}: not refused")


def refusals():
    print("refusals")
    H, I, E, k, T = 256, 128, 8, 2, 64
    x, ids, w, w1, w2, _ = inputs(H, I, E, k, T, 0.0)
    layer = mm.Layer(H, I, E, k, 16384)
    expect_error("x in float32", TypeError, lambda: layer.forward(x.float(), ids, w, w1, w2), "bfloat16")
    expect_error("w1 of the wrong shape", ValueError, lambda: layer.forward(x, ids, w, w1[:, :-1], w2), "shape")
    expect_error("x on the CPU", ValueError, lambda: layer.forward(x.cpu(), ids, w, w1, w2), "cpu")
    expect_error("more tokens than the layer takes", mm.MegamoeError,
                 lambda: mm.Layer(H, I, E, k, 16).forward(x, ids, w, w1, w2), "tokens")
    expect_error("a hidden size that is not a multiple of 64", mm.MegamoeError,
                 lambda: mm.Layer(100, I, E, k, 16), "hidden size 100")
    # a contiguous view 2 bytes into its storage: the right dtype, shape and device, but the kernels' 16-byte row
    # accesses would fault on it; the library refuses it
    buf = torch.empty(T * H + 8, dtype=torch.bfloat16, device=dev)
    xv = buf[1:1 + T * H].view(T, H)
    xv.copy_(x)
    expect_error("x 2 bytes off its alignment", mm.MegamoeError, lambda: layer.forward(xv, ids, w, w1, w2),
                 "not aligned to 16 bytes")
    expect_error("out on x", mm.MegamoeError, lambda: layer.forward(x, ids, w, w1, w2, out=x), "overlaps")
    # past the Python checks, straight into the library: an output of 128 KiB for a call that writes 8 MiB, in a
    # 2 MiB segment of the allocator: the library's extent check. With expandable segments the memory
    # after it is mapped (other tensors): the library cannot see the mismatch there, only the Python checks can
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        print("  the library's extent check: skipped under expandable segments (mapped memory follows the buffer)")
        return invalid_id(layer, x, ids, w, w1, w2)
    Tb = 16384
    xb, idb, wb, _, _, _ = inputs(H, I, E, k, Tb, 0.0)
    torch.cuda.empty_cache()
    small = torch.full((1 << 16,), float("nan"), dtype=torch.bfloat16, device=dev)
    s = ctypes.c_void_p()
    L = mm.lib()
    code = L.megamoe_forward(layer.handle, torch.cuda.current_stream(dev).cuda_stream, Tb, xb.data_ptr(),
                             idb.data_ptr(), wb.data_ptr(), w1.data_ptr(), w2.data_ptr(), small.data_ptr(),
                             ctypes.byref(s))
    expect_error("an output smaller than the call writes", mm.MegamoeError, lambda: mm._check(code), "past the end")
    torch.cuda.synchronize()
    if not torch.isnan(small).all():
        fail("the refused call wrote into the small buffer")
    if s.value:
        fail("a refused call returned a saved state")
    invalid_id(layer, x, ids, w, w1, w2)


def invalid_id(layer, x, ids, w, w1, w2):
    """An expert id >= E: found on the device, nothing written, reported by the saved state's check."""
    T, H, E = x.shape[0], x.shape[1], w1.shape[0]
    bad = ids.clone()
    bad[3, 1] = E
    y, saved = layer.forward(x, bad, w, w1, w2, out=nan(T, H))
    expect_error("an expert id >= E", mm.MegamoeError, saved.check, "")
    if not torch.isnan(y).all():
        fail("the forward with an invalid expert id wrote y")


def bench():
    H, I, E, k, T = 2048, 768, 128, 8, 16384
    print(f"bench: Qwen3-30B-A3B layer, T={T}, forward + backward by autograd (bf16 weight gradients)")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benches"))
    x, ids, w, w1, w2, dy = inputs(H, I, E, k, T, 0.0)
    moe = mm.MoE(H, I, E, k, T, device=dev)
    with torch.no_grad():
        moe.w1.copy_(w1)
        moe.w2.copy_(w2)

    from torch_common import grouped  # the torch._grouped_mm layer of benches/torch_layer.py

    W1, W2 = w1.clone().requires_grad_(), w2.clone().requires_grad_()
    xa, wa = x.clone().requires_grad_(), w.clone().requires_grad_()
    ids64 = ids.long()

    def ours():
        xa.grad = wa.grad = moe.w1.grad = moe.w2.grad = None
        moe(xa, ids64, wa).backward(dy)

    def theirs():
        xa.grad = wa.grad = W1.grad = W2.grad = None
        grouped(xa, ids64, wa, W1, W2).backward(dy)

    from torch_common import timeit

    def median_ms(f):
        return timeit(f, reps=10)

    t_ours, t_theirs = median_ms(ours), median_ms(theirs)
    t_ours2 = median_ms(ours)
    print(f"RESULT torch-binding 30B T={T} fwd+bwd: megamoe through megamoe_torch {t_ours:.3f} / {t_ours2:.3f} ms, "
          f"torch._grouped_mm layer {t_theirs:.3f} ms, ratio {t_theirs / t_ours:.2f}x")
    # the same step captured in a CUDA graph (a ring of saved states), replayed
    moe_g = mm.MoE(H, I, E, k, T, device=dev, saved_slots=2)
    with torch.no_grad():
        moe_g.w1.copy_(w1)
        moe_g.w2.copy_(w2)
    graph, _ = capture(step_of(moe_g, xa, ids64, wa, dy), (xa, wa, moe_g.w1, moe_g.w2))
    layer_op = mm.Layer(H, I, E, k, T)

    def ours_op():
        xa.grad = wa.grad = W1.grad = W2.grad = None
        mm.moe_op(layer_op, xa, ids64, wa, W1, W2).backward(dy)

    t_op, t_ours3 = median_ms(ours_op), median_ms(ours)
    print(f"RESULT torch-binding 30B T={T} fwd+bwd through the custom operators: {t_op:.3f} ms, the autograd Function "
          f"{t_ours3:.3f} ms ({t_ours3 / t_op:.3f}x; the operators' backward makes the routing again)")
    # the operators keeping z (z a tensor from the forward operator to the backward one) against the operators
    # recomputing it and the autograd Function keeping z, in rotation
    layer_op_z = mm.Layer(H, I, E, k, T, save_z=True)
    moe_z = mm.MoE(H, I, E, k, T, device=dev, save_z=True)
    with torch.no_grad():
        moe_z.w1.copy_(w1)
        moe_z.w2.copy_(w2)

    def ours_op_z():
        xa.grad = wa.grad = W1.grad = W2.grad = None
        mm.moe_op(layer_op_z, xa, ids64, wa, W1, W2).backward(dy)

    def ours_z():
        xa.grad = wa.grad = moe_z.w1.grad = moe_z.w2.grad = None
        moe_z(xa, ids64, wa).backward(dy)

    rot = {"op_z": [], "op": [], "fn_z": []}
    for _ in range(3):
        for n, f in (("op_z", ours_op_z), ("op", ours_op), ("fn_z", ours_z)):
            rot[n].append(median_ms(f))
    m = {n: sorted(v)[1] for n, v in rot.items()}
    print(f"RESULT torch-binding 30B T={T} fwd+bwd through the custom operators keeping z: {m['op_z']:.3f} ms, the "
          f"operators recomputing z {m['op']:.3f} ms ({m['op'] / m['op_z']:.3f}x), the autograd Function keeping z "
          f"{m['fn_z']:.3f} ms ({m['fn_z'] / m['op_z']:.3f}x); three rotations, the median of each's medians")
    del moe_z, layer_op_z
    # the same for the FP8 operators (codes made once, given: the weights do not change here)
    layer_f, layer_fz = mm.Layer(H, I, E, k, T), mm.Layer(H, I, E, k, T, save_z=True)
    codes = mm.fp8_codes(layer_f, W1, W2)

    def ours_op_fp8(layer):
        def f():
            xa.grad = wa.grad = W1.grad = W2.grad = None
            mm.moe_op_fp8(layer, xa, ids64, wa, W1, W2, codes=codes).backward(dy)
        return f

    rot = {"z": [], "r": []}
    for _ in range(3):
        for n, f in (("z", ours_op_fp8(layer_fz)), ("r", ours_op_fp8(layer_f))):
            rot[n].append(median_ms(f))
    m = {n: sorted(v)[1] for n, v in rot.items()}
    print(f"RESULT torch-binding 30B T={T} fwd+bwd through the FP8 custom operators (codes given) keeping z: "
          f"{m['z']:.3f} ms, recomputing z {m['r']:.3f} ms ({m['r'] / m['z']:.3f}x); three rotations")
    del layer_f, layer_fz, codes
    t_graph, t_eager = median_ms(graph.replay), median_ms(ours)
    print(f"RESULT torch-binding 30B T={T} fwd+bwd as a CUDA graph: {t_graph:.3f} ms replayed, eager {t_eager:.3f} ms "
          f"({t_eager / t_graph:.3f}x), torch._grouped_mm layer {t_theirs:.3f} ms ({t_theirs / t_graph:.2f}x)")


case("small", 256, 128, 8, 2, 100, False, 0.0)
case("ragged, masked, z saved", 320, 192, 5, 3, 211, True, 0.1)
case("Qwen3-30B-A3B", 2048, 768, 128, 8, 512, False, 0.0)
case_graph("ragged, masked, z saved", 320, 192, 5, 3, 211, True, 0.1)
case_graph("Qwen3-30B-A3B", 2048, 768, 128, 8, 512, False, 0.0)
case_op("ragged, masked", 320, 192, 5, 3, 211, 0.1)
case_op("Qwen3-30B-A3B", 2048, 768, 128, 8, 512, 0.0)
case_op("ragged, masked, z saved", 320, 192, 5, 3, 211, 0.1, save_z=True)
case_op("Qwen3-30B-A3B, z saved", 2048, 768, 128, 8, 512, 0.0, save_z=True)
case_shared("ragged, masked", 320, 192, 5, 3, 211, 0.1)
case_shared("ragged, masked, z saved, op", 320, 192, 5, 3, 211, 0.1, save_z=True, op=True)
case_shared("small, FP8", 512, 256, 8, 2, 200, 0.1, fp8=True)
case_fp8("small, masked", 512, 256, 8, 2, 200, masked=0.1)
case_fp8("Qwen3-30B-A3B", 2048, 768, 128, 8, 512)
case_op_fp8("small, masked", 512, 256, 8, 2, 200, 0.1)
case_op_fp8("Qwen3-30B-A3B", 2048, 768, 128, 8, 512, 0.0)
case_op_fp8("small, masked, z saved", 512, 256, 8, 2, 200, 0.1, save_z=True)
case_op_fp8("Qwen3-30B-A3B, z saved", 2048, 768, 128, 8, 512, 0.0, save_z=True)
refusals()
if os.environ.get("MEGAMOE_TORCH_BENCH") == "1":
    bench()
mm.trim_pool(dev)
if failures:
    print(f"{len(failures)} FAILED")
    sys.exit(1)
print("all passed")
