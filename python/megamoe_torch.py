"""PyTorch bindings of megamoe's MoE layer (bf16, one GPU, forward and backward), through its C ABI.

The shared library is megamoe's `capi` crate (`cargo build --release -p megamoe-capi` gives
target/release/libmegamoe_capi.so); ctypes loads it, so nothing is compiled for Python. Where it is looked for:
the `MEGAMOE_LIB` environment variable, then this file's folder, then ../target/release.

    import megamoe_torch as mm
    moe = mm.MoE(hidden=2048, intermediate=768, experts=128, top_k=8, max_tokens=16384).cuda()
    y = moe(x, topk_ids, topk_weights)    # x bf16 [T, H]; topk_ids [T, k] (-1: masked); topk_weights [T, k]
    y.backward(dy)                        # x.grad, topk_weights.grad, moe.w1.grad, moe.w2.grad

or the function form on your own weights, `mm.moe(layer, x, topk_ids, topk_weights, w1, w2)` with
`layer = mm.Layer(...)`: w1 bf16 [E, 2I, H] (each expert's I gate rows, then its I up rows), w2 bf16 [E, H, I];
y[t] = sum_j topk_weights[t, j] * (silu(x[t] W1g^T) * (x[t] W1u^T)) W2^T of expert topk_ids[t, j].

The layer runs on its device's own stream, ordered after the current PyTorch stream and before what comes after on
it (events; no host synchronisation). Weight gradients are bf16 (as autograd gives them for bf16 weights; each is
the f32 sum rounded once). Every buffer is checked by the library before a launch (device, size of its allocation,
16-byte alignment, outputs disjoint from inputs): errors raise `MegamoeError` with the library's message. megamoe's
workspace and saved states come from CUDA's default memory pool, kept cached between calls; `trim_pool()` hands it
back. A layer's workspace is scratch: the MoE layers of a model that share a shape share one (`shared_layer(...)`;
`MoE` does so by default on its eager path, `share_layer=False` to opt out). CUDA graphs: `Layer(...,
saved_slots=n)` / `MoE(..., saved_slots=n)` gives the layer a ring of n saved states so that its forwards allocate
nothing; then a forward and backward can be captured by `torch.cuda.graph` and replayed (a captured forward keeps
one slot for its graph; a backward whose slot a later forward overwrote raises). Not through these bindings yet:
expert parallelism (the Rust API has it). Blockwise FP8 (H a multiple of 512, I of 128): `MoE(..., fp8=True)`, or
`Fp8Weights` + `moe_fp8`, or `Layer.forward_fp8` / `backward(..., w8=)`. torch.compile: `moe_op` / `MoE(...,
op=True)`, the layer as custom operators (torch.library) that carry no state from forward to backward (the backward
makes the routing again, ~13 us at 30B): traced without a graph break, and capturable in a CUDA graph without a
ring; on a layer with `save_z=True` the forward operator also returns z, which autograd keeps for the backward
operator instead of a recompute (1.15-1.18x the z-recomputing operators' step at 30B; FP8 1.11-1.16x). In FP8 too:
`moe_op_fp8` / `MoE(..., op=True, fp8=True)`, the FP8 weights as six tensors (`fp8_codes`, an operator: quantized in
the call unless given).
"""
import ctypes
import itertools
import os
import weakref

import torch

OK, INVALID_ARGUMENT, NO_DRIVER, NO_DEVICE, UNSUPPORTED_DEVICE, CUDA_ERROR, TIMEOUT, INTERNAL = range(8)


class MegamoeError(RuntimeError):
    """A megamoe call failed; `code` is the C ABI's status (INVALID_ARGUMENT, ...)."""

    def __init__(self, code, message):
        super().__init__(f"megamoe: {message} (code {code})")
        self.code = code


_lib = None


def _candidates():
    env = os.environ.get("MEGAMOE_LIB")
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [os.path.join(here, "libmegamoe_capi.so"),
            os.path.join(here, "..", "target", "release", "libmegamoe_capi.so")]


def lib():
    """The loaded C library (loaded on first use)."""
    global _lib
    if _lib is not None:
        return _lib
    paths = _candidates()
    path = next((p for p in paths if os.path.exists(p)), None)
    if path is None:
        raise MegamoeError(INTERNAL, f"libmegamoe_capi.so not found (tried {paths}; set MEGAMOE_LIB, or build it: "
                                     "cargo build --release -p megamoe-capi)")
    L = ctypes.CDLL(path)
    u64, sz, i32 = ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
    vp = ctypes.c_void_p
    L.megamoe_layer_new.argtypes = [i32, sz, sz, sz, sz, sz, i32, ctypes.POINTER(vp)]
    L.megamoe_layer_free.argtypes = [vp]
    L.megamoe_layer_reserve_saved.argtypes = [vp, sz]
    L.megamoe_backward_routed.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, i32, i32]
    L.megamoe_forward_z.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, u64]
    L.megamoe_backward_routed_z.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, i32,
                                            i32]
    L.megamoe_layer_free.restype = None
    L.megamoe_forward.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, ctypes.POINTER(vp)]
    L.megamoe_backward.argtypes = [vp, u64, vp, u64, u64, u64, u64, u64, u64, u64, u64, u64, u64, i32, i32]
    L.megamoe_saved_check.argtypes = [vp]
    L.megamoe_saved_tokens.argtypes = [vp]
    L.megamoe_saved_status.argtypes = [vp]
    L.megamoe_saved_tokens.restype = sz
    L.megamoe_saved_free.argtypes = [vp]
    L.megamoe_saved_free.restype = None
    L.megamoe_last_error.argtypes = [ctypes.c_char_p, sz]
    L.megamoe_last_error.restype = sz
    L.megamoe_version.restype = ctypes.c_char_p
    L.megamoe_trim_pool.argtypes = [i32, sz]
    L.megamoe_fp8_weights_new.argtypes = [vp, ctypes.POINTER(vp)]
    L.megamoe_fp8_weights_quantize.argtypes = [vp, u64, vp, u64, u64]
    L.megamoe_fp8_weights_free.argtypes = [vp]
    L.megamoe_fp8_weights_free.restype = None
    L.megamoe_forward_fp8.argtypes = [vp, u64, sz, u64, u64, u64, vp, u64, ctypes.POINTER(vp)]
    L.megamoe_backward_fp8.argtypes = [vp, u64, vp, u64, u64, u64, u64, u64, u64, vp, u64, u64, u64, u64, i32, i32]
    cp = ctypes.POINTER(u64)
    L.megamoe_fp8_quantize_into.argtypes = [vp, u64, u64, u64, cp]
    L.megamoe_forward_fp8_codes.argtypes = [vp, u64, sz, u64, u64, u64, cp, u64]
    L.megamoe_forward_fp8_codes_z.argtypes = [vp, u64, sz, u64, u64, u64, cp, u64, u64]
    L.megamoe_backward_routed_fp8_z.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, cp, u64, u64, u64, u64,
                                                u64, i32, i32]
    L.megamoe_backward_routed_fp8.argtypes = [vp, u64, sz, u64, u64, u64, u64, u64, u64, cp, u64, u64, u64, u64, i32,
                                              i32]
    for f in ("megamoe_layer_new", "megamoe_layer_reserve_saved", "megamoe_forward", "megamoe_backward",
              "megamoe_backward_routed", "megamoe_fp8_quantize_into", "megamoe_forward_fp8_codes",
              "megamoe_backward_routed_fp8", "megamoe_forward_z", "megamoe_backward_routed_z",
              "megamoe_forward_fp8_codes_z", "megamoe_backward_routed_fp8_z",
              "megamoe_saved_check", "megamoe_saved_status",
              "megamoe_trim_pool", "megamoe_fp8_weights_new", "megamoe_fp8_weights_quantize",
              "megamoe_forward_fp8", "megamoe_backward_fp8"):
        getattr(L, f).restype = i32
    _lib = L
    return L


def _check(code):
    if code != OK:
        L = lib()
        n = L.megamoe_last_error(None, 0)
        buf = ctypes.create_string_buffer(n + 1)
        L.megamoe_last_error(buf, n + 1)
        raise MegamoeError(code, buf.value.decode(errors="replace"))


def _cuda_device(device):
    """torch.device('cuda', index) for None (the current device), an index, 'cuda', 'cuda:N' or a device."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    d = torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    if d.type != "cuda":
        raise ValueError(f"megamoe runs on CUDA devices, not {d}")
    return d if d.index is not None else torch.device("cuda", torch.cuda.current_device())


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def _need(t, name, dtype, shape, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a tensor")
    if t.dtype != dtype:
        raise TypeError(f"{name} must be {dtype}, got {t.dtype}")
    if tuple(t.shape) != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {tuple(t.shape)}")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device}, the layer on {device}")
    if not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous")
    return t.data_ptr()


# Layers that a CUDA graph captured: a graph's replays read the layer's device memory and page-locked map slots,
# so such a layer is kept alive with the process (PyTorch keeps nothing of ours alive for a graph).
_captured_layers = []


def _keep_if_capturing(layer):
    if torch.cuda.is_current_stream_capturing() and not any(x is layer for x in _captured_layers):
        _captured_layers.append(layer)


def trim_pool(device=None, keep_bytes=0):
    """Hand the memory megamoe's freed buffers keep cached on `device` back to the driver (PyTorch's allocator
    cannot use it while megamoe holds it); synchronises megamoe's stream there."""
    _check(lib().megamoe_trim_pool(_cuda_device(device).index, keep_bytes))


class _Handle:
    """A library handle, freed with this object by the C function named `_free`."""
    _free = None
    handle = None

    def free(self):
        if self.handle:
            getattr(lib(), self._free)(self.handle)
            self.handle = None

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


class Saved(_Handle):
    """What a forward leaves for its backward (device memory, freed with this object)."""

    _free = "megamoe_saved_free"

    def __init__(self, handle, layer):
        self.handle = handle
        self.layer = layer  # keeps the library loaded and the layer alive while this lives

    @property
    def tokens(self):
        """The forward's token count; raises if a later forward overwrote this state's ring slot (a forward on
        another thread between the two calls below can still make it 0: the backward then refuses the state)."""
        _check(lib().megamoe_saved_status(self.handle))
        return lib().megamoe_saved_tokens(self.handle)

    def check(self):
        """Synchronise and raise if the forward met an expert id outside -1..E (it then wrote nothing)."""
        _check(lib().megamoe_saved_check(self.handle))


# Live layers by id, for the custom operators (whose arguments are tensors and numbers, not Python objects).
_layers = weakref.WeakValueDictionary()
_layer_ids = itertools.count(1)


class Layer(_Handle):
    """The device state of one MoE layer (workspace for up to `max_tokens` tokens), on `device`."""
    _free = "megamoe_layer_free"

    def __init__(self, hidden, intermediate, experts, top_k, max_tokens, save_z=False, device=None, saved_slots=0):
        self.device = _cuda_device(device)
        self.hidden, self.intermediate, self.experts, self.top_k = hidden, intermediate, experts, top_k
        self.max_tokens = max_tokens
        self.save_z = bool(save_z)
        self.id = next(_layer_ids)
        _layers[self.id] = self
        torch.cuda.init()  # PyTorch's context first: megamoe retains the same primary context
        h = ctypes.c_void_p()
        with torch.cuda.device(self.device):
            _check(lib().megamoe_layer_new(self.device.index, hidden, intermediate, experts, top_k, max_tokens,
                                           int(bool(save_z)), ctypes.byref(h)))
        self.handle = h
        if saved_slots:
            self.reserve_saved(saved_slots)

    def reserve_saved(self, slots):
        """A ring of `slots` saved states (each for max_tokens) that the forwards write in turn instead of
        allocating one each (0: back to allocating), so that a forward and backward can be captured in a CUDA
        graph. A captured forward keeps its slot for good: reserve one per forward to capture, plus one per eager
        forward waiting for its backward. Not during a capture."""
        with torch.cuda.device(self.device):
            _check(lib().megamoe_layer_reserve_saved(self.handle, slots))

    def _inputs(self, x, topk_ids, topk_weights, w1, w2, tokens):
        H, I, E, k, d = self.hidden, self.intermediate, self.experts, self.top_k, self.device
        return [_need(x, "x", torch.bfloat16, (tokens, H), d),
                _need(topk_ids, "topk_ids", torch.int32, (tokens, k), d),
                _need(topk_weights, "topk_weights", torch.float32, (tokens, k), d),
                _need(w1, "w1", torch.bfloat16, (E, 2 * I, H), d),
                _need(w2, "w2", torch.bfloat16, (E, H, I), d)]

    def forward(self, x, topk_ids, topk_weights, w1, w2, out=None):
        """y [T, H] bf16 (into `out` if given) and the `Saved` for the backward. No autograd: see `moe`."""
        T = x.shape[0]
        ptrs = self._inputs(x, topk_ids, topk_weights, w1, w2, T)
        if out is None:
            out = torch.empty((T, self.hidden), dtype=torch.bfloat16, device=self.device)
        po = _need(out, "out", torch.bfloat16, (T, self.hidden), self.device)
        s = ctypes.c_void_p()
        _keep_if_capturing(self)
        _check(lib().megamoe_forward(self.handle, _stream(self.device), T, *ptrs, po, ctypes.byref(s)))
        return out, Saved(s, self)

    def forward_fp8(self, x, topk_ids, topk_weights, w8, out=None):
        """The forward in blockwise FP8 on the quantized weights `w8` (an `Fp8Weights`); H a multiple of 512, I of
        128. y [T, H] bf16 and the `Saved` for `backward(..., w8=w8)`."""
        T, H, k, d = x.shape[0], self.hidden, self.top_k, self.device
        px = _need(x, "x", torch.bfloat16, (T, H), d)
        pi = _need(topk_ids, "topk_ids", torch.int32, (T, k), d)
        pw = _need(topk_weights, "topk_weights", torch.float32, (T, k), d)
        if out is None:
            out = torch.empty((T, H), dtype=torch.bfloat16, device=d)
        po = _need(out, "out", torch.bfloat16, (T, H), d)
        s = ctypes.c_void_p()
        _keep_if_capturing(self)
        _check(lib().megamoe_forward_fp8(self.handle, _stream(d), T, px, pi, pw, w8.handle, po, ctypes.byref(s)))
        return out, Saved(s, self)

    def backward(self, saved, dy, x, topk_ids, topk_weights, w1, w2, grads=None, wgrad_dtype=torch.bfloat16,
                 accumulate=False, w8=None):
        """dx, dtopk, dw1, dw2 of the forward that returned `saved` (same inputs). `grads`: optional
        (dx, dtopk, dw1, dw2) to write into; with `accumulate` dw1 and dw2 are added to. Weight gradients in
        `wgrad_dtype` (bf16 or float32). `w8`: the `Fp8Weights` of an FP8 forward (its straight-through backward;
        w1, w2 the bf16 weights they were quantized from)."""
        T = saved.tokens
        H, I, E, k, d = self.hidden, self.intermediate, self.experts, self.top_k, self.device
        ptrs = self._inputs(x, topk_ids, topk_weights, w1, w2, T)
        if wgrad_dtype not in (torch.bfloat16, torch.float32):
            raise TypeError(f"wgrad_dtype must be bfloat16 or float32, got {wgrad_dtype}")
        if grads is None:
            if accumulate:
                raise ValueError("accumulate needs the gradients to add to (grads=...)")
            grads = (torch.empty((T, H), dtype=torch.bfloat16, device=d),
                     torch.empty((T, k), dtype=torch.float32, device=d),
                     torch.empty((E, 2 * I, H), dtype=wgrad_dtype, device=d),
                     torch.empty((E, H, I), dtype=wgrad_dtype, device=d))
        dx, dtopk, dw1, dw2 = grads
        g = [_need(dx, "dx", torch.bfloat16, (T, H), d), _need(dtopk, "dtopk", torch.float32, (T, k), d),
             _need(dw1, "dw1", wgrad_dtype, (E, 2 * I, H), d), _need(dw2, "dw2", wgrad_dtype, (E, H, I), d)]
        pdy = _need(dy, "dy", torch.bfloat16, (T, H), d)
        flags = (int(wgrad_dtype == torch.bfloat16), int(bool(accumulate)))
        _keep_if_capturing(self)
        if w8 is None:
            _check(lib().megamoe_backward(self.handle, _stream(d), saved.handle, pdy, *ptrs, g[0], g[2], g[3], g[1],
                                          *flags))
        else:
            _check(lib().megamoe_backward_fp8(self.handle, _stream(d), saved.handle, pdy, *ptrs, w8.handle, g[0],
                                              g[2], g[3], g[1], *flags))
        return dx, dtopk, dw1, dw2


class Fp8Weights(_Handle):
    """W1 and W2 of `layer`'s shapes in blockwise FP8 (device memory, freed with this object). `quantize(w1, w2)`
    after every change of the bf16 weights (an optimizer step); `MoE(fp8=True)` does it when their version moves."""
    _free = "megamoe_fp8_weights_free"

    def __init__(self, layer):
        self.layer = layer
        h = ctypes.c_void_p()
        _check(lib().megamoe_fp8_weights_new(layer.handle, ctypes.byref(h)))
        self.handle = h
        self.source = None

    def quantize(self, w1, w2):
        L, d = self.layer, self.layer.device
        E, H, I = L.experts, L.hidden, L.intermediate
        p1 = _need(w1, "w1", torch.bfloat16, (E, 2 * I, H), d)
        p2 = _need(w2, "w2", torch.bfloat16, (E, H, I), d)
        _check(lib().megamoe_fp8_weights_quantize(L.handle, _stream(d), self.handle, p1, p2))
        self.source = (p1, w1._version, p2, w2._version)

    def current(self, w1, w2):
        """Whether the codes were quantized from these tensors as they are now (same storage, same version)."""
        return self.source == (w1.data_ptr(), w1._version, w2.data_ptr(), w2._version)



def _backward(ctx, dy, w8):
    """dx, dtopk, dw1, dw2 for autograd. With `main_grad` f32 tensors on both weights (Megatron's gradient
    accumulation fusion) the f32 weight gradients are added into them in place and none are returned
    (`grad_added_to_main_grad` is set on the weights)."""
    x, topk_ids, topk_weights, w1, w2 = ctx.saved_tensors
    p1, p2 = ctx.params
    m1, m2 = getattr(p1, "main_grad", None), getattr(p2, "main_grad", None)
    if m1 is not None and m2 is not None:
        T, k = topk_ids.shape
        grads = (torch.empty_like(x), torch.empty((T, k), dtype=torch.float32, device=x.device), m1, m2)
        dx, dtopk, _, _ = ctx.layer.backward(ctx.saved, dy.contiguous(), x, topk_ids, topk_weights, w1, w2,
                                             grads=grads, wgrad_dtype=torch.float32, accumulate=True, w8=w8)
        p1.grad_added_to_main_grad = p2.grad_added_to_main_grad = True
        return dx, dtopk, None, None
    return ctx.layer.backward(ctx.saved, dy.contiguous(), x, topk_ids, topk_weights, w1, w2,
                              wgrad_dtype=w1.dtype, w8=w8)


class _MoeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, x, topk_ids, topk_weights, w1, w2):
        y, saved = layer.forward(x, topk_ids, topk_weights, w1, w2)
        ctx.layer, ctx.saved, ctx.params = layer, saved, (w1, w2)
        ctx.save_for_backward(x, topk_ids, topk_weights, w1, w2)
        return y

    @staticmethod
    def backward(ctx, dy):
        dx, dtopk, dw1, dw2 = _backward(ctx, dy, None)
        return None, dx, None, dtopk, dw1, dw2


class _MoeFp8Function(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layer, w8, x, topk_ids, topk_weights, w1, w2):
        y, saved = layer.forward_fp8(x, topk_ids, topk_weights, w8)
        ctx.layer, ctx.saved, ctx.w8, ctx.params = layer, saved, w8, (w1, w2)
        ctx.save_for_backward(x, topk_ids, topk_weights, w1, w2)
        return y

    @staticmethod
    def backward(ctx, dy):
        dx, dtopk, dw1, dw2 = _backward(ctx, dy, ctx.w8)
        return None, None, dx, None, dtopk, dw1, dw2


def moe_fp8(layer, w8, x, topk_ids, topk_weights, w1, w2):
    """`moe` in blockwise FP8: `w8` (an `Fp8Weights`) quantized from w1, w2 (checked: a stale `w8` raises); the
    gradients of w1 and w2 are the straight-through ones."""
    if not w8.current(w1, w2):
        raise ValueError("w8 was not quantized from w1, w2 as they are now: call w8.quantize(w1, w2)")
    ids = topk_ids.to(torch.int32).contiguous()
    w = topk_weights.to(torch.float32).contiguous()
    return _MoeFp8Function.apply(layer, w8, x.contiguous(), ids, w, w1, w2)


def moe(layer, x, topk_ids, topk_weights, w1, w2):
    """The layer with autograd: y [T, H]; gradients for x, topk_weights, w1 and w2. topk_ids may be int64
    (converted); topk_weights of any float dtype (computed in float32, its gradient returned in its dtype). With
    f32 `main_grad` tensors on w1 and w2, their gradients are accumulated there in f32 instead (Megatron's
    gradient accumulation fusion)."""
    ids = topk_ids.to(torch.int32).contiguous()
    w = topk_weights.to(torch.float32).contiguous()
    return _MoeFunction.apply(layer, x.contiguous(), ids, w, w1, w2)


def _op_forward_impl(x, topk_ids, topk_weights, w1, w2, layer_id):
    layer = _layers[layer_id]
    T = x.shape[0]
    ptrs = layer._inputs(x, topk_ids, topk_weights, w1, w2, T)
    out = torch.empty((T, layer.hidden), dtype=torch.bfloat16, device=layer.device)
    _keep_if_capturing(layer)
    # no saved state handed out: the layer's scratch state (its backward routes again)
    _check(lib().megamoe_forward(layer.handle, _stream(layer.device), T, *ptrs, out.data_ptr(), None))
    return out


def _op_backward_impl(dy, x, topk_ids, topk_weights, w1, w2, layer_id):
    layer = _layers[layer_id]
    T, k, d = x.shape[0], layer.top_k, layer.device
    ptrs = layer._inputs(x, topk_ids, topk_weights, w1, w2, T)
    pdy = _need(dy, "dy", torch.bfloat16, (T, layer.hidden), d)
    dx, dw1, dw2 = torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2)
    dtopk = torch.empty((T, k), dtype=torch.float32, device=d)
    _keep_if_capturing(layer)
    _check(lib().megamoe_backward_routed(layer.handle, _stream(d), T, pdy, *ptrs, dx.data_ptr(), dw1.data_ptr(),
                                         dw2.data_ptr(), dtopk.data_ptr(), 1, 0))
    return dx, dtopk, dw1, dw2


def _op_forward_z_impl(x, topk_ids, topk_weights, w1, w2, layer_id):
    layer = _layers[layer_id]
    T, k, d = x.shape[0], layer.top_k, layer.device
    ptrs = layer._inputs(x, topk_ids, topk_weights, w1, w2, T)
    out = torch.empty((T, layer.hidden), dtype=torch.bfloat16, device=d)
    # z in the routing's row order (internal): only handed back to the backward
    z = torch.empty((T * k, 2 * layer.intermediate), dtype=torch.bfloat16, device=d)
    _keep_if_capturing(layer)
    _check(lib().megamoe_forward_z(layer.handle, _stream(d), T, *ptrs, out.data_ptr(), z.data_ptr()))
    return out, z


def _op_backward_z_impl(dy, x, topk_ids, topk_weights, w1, w2, z, layer_id):
    layer = _layers[layer_id]
    T, k, d = x.shape[0], layer.top_k, layer.device
    ptrs = layer._inputs(x, topk_ids, topk_weights, w1, w2, T)
    pdy = _need(dy, "dy", torch.bfloat16, (T, layer.hidden), d)
    pz = _need(z, "z", torch.bfloat16, (T * k, 2 * layer.intermediate), d)
    dx, dw1, dw2 = torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2)
    dtopk = torch.empty((T, k), dtype=torch.float32, device=d)
    _keep_if_capturing(layer)
    _check(lib().megamoe_backward_routed_z(layer.handle, _stream(d), T, pdy, *ptrs, pz, dx.data_ptr(),
                                           dw1.data_ptr(), dw2.data_ptr(), dtopk.data_ptr(), 1, 0))
    return dx, dtopk, dw1, dw2


_HAS_CUSTOM_OP = hasattr(torch, "library") and hasattr(torch.library, "custom_op")

if _HAS_CUSTOM_OP:
    @torch.library.custom_op("megamoe::moe_forward", mutates_args=())
    def _op_forward(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
                    w2: torch.Tensor, layer_id: int) -> torch.Tensor:
        return _op_forward_impl(x, topk_ids, topk_weights, w1, w2, layer_id)

    @_op_forward.register_fake
    def _(x, topk_ids, topk_weights, w1, w2, layer_id):
        return x.new_empty((x.shape[0], w2.shape[1]))

    @torch.library.custom_op("megamoe::moe_backward", mutates_args=())
    def _op_backward(dy: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                     w1: torch.Tensor, w2: torch.Tensor,
                     layer_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _op_backward_impl(dy, x, topk_ids, topk_weights, w1, w2, layer_id)

    @_op_backward.register_fake
    def _(dy, x, topk_ids, topk_weights, w1, w2, layer_id):
        return (torch.empty_like(x), x.new_empty(topk_weights.shape, dtype=torch.float32), torch.empty_like(w1),
                torch.empty_like(w2))

    def _op_setup_context(ctx, inputs, output):
        x, topk_ids, topk_weights, w1, w2, layer_id = inputs
        ctx.save_for_backward(x, topk_ids, topk_weights, w1, w2)
        ctx.layer_id = layer_id

    def _op_autograd(ctx, dy):
        x, topk_ids, topk_weights, w1, w2 = ctx.saved_tensors
        dx, dtopk, dw1, dw2 = torch.ops.megamoe.moe_backward(dy.contiguous(), x, topk_ids, topk_weights, w1, w2,
                                                             ctx.layer_id)
        return dx, None, dtopk, dw1, dw2, None

    _op_forward.register_autograd(_op_autograd, setup_context=_op_setup_context)

    @torch.library.custom_op("megamoe::moe_forward_z", mutates_args=())
    def _op_forward_z(x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor, w1: torch.Tensor,
                      w2: torch.Tensor, layer_id: int) -> tuple[torch.Tensor, torch.Tensor]:
        return _op_forward_z_impl(x, topk_ids, topk_weights, w1, w2, layer_id)

    @_op_forward_z.register_fake
    def _(x, topk_ids, topk_weights, w1, w2, layer_id):
        k, i2 = topk_ids.shape[1], w1.shape[1]
        return x.new_empty((x.shape[0], w2.shape[1])), x.new_empty((x.shape[0] * k, i2))

    @torch.library.custom_op("megamoe::moe_backward_z", mutates_args=())
    def _op_backward_z(dy: torch.Tensor, x: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor,
                       w1: torch.Tensor, w2: torch.Tensor, z: torch.Tensor,
                       layer_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        return _op_backward_z_impl(dy, x, topk_ids, topk_weights, w1, w2, z, layer_id)

    @_op_backward_z.register_fake
    def _(dy, x, topk_ids, topk_weights, w1, w2, z, layer_id):
        return (torch.empty_like(x), x.new_empty(topk_weights.shape, dtype=torch.float32), torch.empty_like(w1),
                torch.empty_like(w2))

    def _op_z_setup_context(ctx, inputs, output):
        x, topk_ids, topk_weights, w1, w2, layer_id = inputs
        ctx.save_for_backward(x, topk_ids, topk_weights, w1, w2, output[1])
        ctx.mark_non_differentiable(output[1])
        # z's gradient is never read: not materialised as zeros (403 MB written a step at 30B)
        ctx.set_materialize_grads(False)
        ctx.layer_id = layer_id

    def _op_z_autograd(ctx, dy, _dz):
        x, topk_ids, topk_weights, w1, w2, z = ctx.saved_tensors
        if dy is None:
            dy = x.new_zeros((x.shape[0], w2.shape[1]))
        dx, dtopk, dw1, dw2 = torch.ops.megamoe.moe_backward_z(dy.contiguous(), x, topk_ids, topk_weights, w1, w2,
                                                               z, ctx.layer_id)
        return dx, None, dtopk, dw1, dw2, None

    _op_forward_z.register_autograd(_op_z_autograd, setup_context=_op_z_setup_context)


_CODE_NAMES = ("w1_codes", "w1_scales", "w2_codes", "w2_scales", "w1t_codes", "w1t_scales")


def _code_specs(layer):
    """The six FP8 weight buffers of the custom operators' FP8 form: (name, dtype, shape), in the C ABI's order."""
    E, H, I = layer.experts, layer.hidden, layer.intermediate
    shapes = ((E * 2 * I, H), (E * 2 * I // 128, H // 128), (E * H, I), (E * H // 128, I // 128), (E * H, 2 * I),
              (E * H // 128, 2 * I // 128))
    return [(n, torch.uint8 if n.endswith("codes") else torch.float32, sh) for n, sh in zip(_CODE_NAMES, shapes)]


def _codes_arg(layer, codes):
    """The six buffers checked (dtype, shape, device, contiguity) as the C ABI's array of six addresses."""
    if len(codes) != 6:
        raise ValueError(f"codes must be the six tensors of fp8_codes, got {len(codes)}")
    ptrs = [_need(t, n, dt, sh, layer.device) for t, (n, dt, sh) in zip(codes, _code_specs(layer))]
    return (ctypes.c_uint64 * 6)(*ptrs)


def _op_fp8_quantize_impl(w1, w2, layer_id):
    layer = _layers[layer_id]
    E, H, I, d = layer.experts, layer.hidden, layer.intermediate, layer.device
    p1 = _need(w1, "w1", torch.bfloat16, (E, 2 * I, H), d)
    p2 = _need(w2, "w2", torch.bfloat16, (E, H, I), d)
    codes = tuple(torch.empty(sh, dtype=dt, device=d) for _, dt, sh in _code_specs(layer))
    _keep_if_capturing(layer)
    _check(lib().megamoe_fp8_quantize_into(layer.handle, _stream(d), p1, p2, _codes_arg(layer, codes)))
    return codes


def _op_forward_fp8_impl(x, topk_ids, topk_weights, codes, layer_id, keep_z=False):
    """The FP8 forward operator's work: y, and with `keep_z` (a layer keeping z) also z, as `_op_forward_z_impl`'s."""
    layer = _layers[layer_id]
    T, H, k, d = x.shape[0], layer.hidden, layer.top_k, layer.device
    px = _need(x, "x", torch.bfloat16, (T, H), d)
    pi = _need(topk_ids, "topk_ids", torch.int32, (T, k), d)
    pw = _need(topk_weights, "topk_weights", torch.float32, (T, k), d)
    arr = _codes_arg(layer, codes)
    out = torch.empty((T, H), dtype=torch.bfloat16, device=d)
    _keep_if_capturing(layer)
    if not keep_z:
        _check(lib().megamoe_forward_fp8_codes(layer.handle, _stream(d), T, px, pi, pw, arr, out.data_ptr()))
        return out
    z = torch.empty((T * k, 2 * layer.intermediate), dtype=torch.bfloat16, device=d)
    _check(lib().megamoe_forward_fp8_codes_z(layer.handle, _stream(d), T, px, pi, pw, arr, out.data_ptr(),
                                             z.data_ptr()))
    return out, z


def _op_backward_fp8_impl(dy, x, topk_ids, topk_weights, w1, w2, codes, layer_id, z=None):
    """The FP8 backward operator's work; with `z` (the z-keeping forward's) read instead of recomputed."""
    layer = _layers[layer_id]
    T, k, d = x.shape[0], layer.top_k, layer.device
    ptrs = layer._inputs(x, topk_ids, topk_weights, w1, w2, T)
    pdy = _need(dy, "dy", torch.bfloat16, (T, layer.hidden), d)
    arr = _codes_arg(layer, codes)
    dx, dw1, dw2 = torch.empty_like(x), torch.empty_like(w1), torch.empty_like(w2)
    dtopk = torch.empty((T, k), dtype=torch.float32, device=d)
    g = (dx.data_ptr(), dw1.data_ptr(), dw2.data_ptr(), dtopk.data_ptr(), 1, 0)
    _keep_if_capturing(layer)
    if z is None:
        _check(lib().megamoe_backward_routed_fp8(layer.handle, _stream(d), T, pdy, *ptrs, arr, *g))
    else:
        pz = _need(z, "z", torch.bfloat16, (T * k, 2 * layer.intermediate), d)
        _check(lib().megamoe_backward_routed_fp8_z(layer.handle, _stream(d), T, pdy, *ptrs, arr, pz, *g))
    return dx, dtopk, dw1, dw2


if _HAS_CUSTOM_OP:
    _T = torch.Tensor

    @torch.library.custom_op("megamoe::fp8_quantize", mutates_args=())
    def _op_fp8_quantize(w1: _T, w2: _T, layer_id: int) -> tuple[_T, _T, _T, _T, _T, _T]:
        return _op_fp8_quantize_impl(w1, w2, layer_id)

    @_op_fp8_quantize.register_fake
    def _(w1, w2, layer_id):
        E, H = w1.shape[0], w1.shape[2]
        I = w2.shape[2]
        shapes = ((E * 2 * I, H), (E * 2 * I // 128, H // 128), (E * H, I), (E * H // 128, I // 128),
                  (E * H, 2 * I), (E * H // 128, 2 * I // 128))
        return tuple(w1.new_empty(sh, dtype=torch.uint8 if j % 2 == 0 else torch.float32)
                     for j, sh in enumerate(shapes))

    @torch.library.custom_op("megamoe::moe_forward_fp8", mutates_args=())
    def _op_forward_fp8(x: _T, topk_ids: _T, topk_weights: _T, w1: _T, w2: _T, w1_codes: _T, w1_scales: _T,
                        w2_codes: _T, w2_scales: _T, w1t_codes: _T, w1t_scales: _T, layer_id: int) -> _T:
        codes = (w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales)
        return _op_forward_fp8_impl(x, topk_ids, topk_weights, codes, layer_id)

    @_op_forward_fp8.register_fake
    def _(x, topk_ids, topk_weights, w1, w2, w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales,
          layer_id):
        return x.new_empty((x.shape[0], w2.shape[1]))

    @torch.library.custom_op("megamoe::moe_backward_fp8", mutates_args=())
    def _op_backward_fp8(dy: _T, x: _T, topk_ids: _T, topk_weights: _T, w1: _T, w2: _T, w1_codes: _T,
                         w1_scales: _T, w2_codes: _T, w2_scales: _T, w1t_codes: _T, w1t_scales: _T,
                         layer_id: int) -> tuple[_T, _T, _T, _T]:
        codes = (w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales)
        return _op_backward_fp8_impl(dy, x, topk_ids, topk_weights, w1, w2, codes, layer_id)

    @_op_backward_fp8.register_fake
    def _(dy, x, topk_ids, topk_weights, w1, w2, w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales,
          layer_id):
        return (torch.empty_like(x), x.new_empty(topk_weights.shape, dtype=torch.float32), torch.empty_like(w1),
                torch.empty_like(w2))

    def _op_fp8_setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:11])
        ctx.layer_id = inputs[11]

    def _op_fp8_autograd(ctx, dy):
        x, topk_ids, topk_weights, w1, w2, *codes = ctx.saved_tensors
        dx, dtopk, dw1, dw2 = torch.ops.megamoe.moe_backward_fp8(dy.contiguous(), x, topk_ids, topk_weights, w1, w2,
                                                                 *codes, ctx.layer_id)
        return (dx, None, dtopk, dw1, dw2) + (None,) * 7

    _op_forward_fp8.register_autograd(_op_fp8_autograd, setup_context=_op_fp8_setup_context)

    @torch.library.custom_op("megamoe::moe_forward_fp8_z", mutates_args=())
    def _op_forward_fp8_z(x: _T, topk_ids: _T, topk_weights: _T, w1: _T, w2: _T, w1_codes: _T, w1_scales: _T,
                          w2_codes: _T, w2_scales: _T, w1t_codes: _T, w1t_scales: _T,
                          layer_id: int) -> tuple[_T, _T]:
        codes = (w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales)
        return _op_forward_fp8_impl(x, topk_ids, topk_weights, codes, layer_id, keep_z=True)

    @_op_forward_fp8_z.register_fake
    def _(x, topk_ids, topk_weights, w1, w2, w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales,
          layer_id):
        k, i2 = topk_ids.shape[1], w1.shape[1]
        return x.new_empty((x.shape[0], w2.shape[1])), x.new_empty((x.shape[0] * k, i2))

    @torch.library.custom_op("megamoe::moe_backward_fp8_z", mutates_args=())
    def _op_backward_fp8_z(dy: _T, x: _T, topk_ids: _T, topk_weights: _T, w1: _T, w2: _T, w1_codes: _T,
                           w1_scales: _T, w2_codes: _T, w2_scales: _T, w1t_codes: _T, w1t_scales: _T, z: _T,
                           layer_id: int) -> tuple[_T, _T, _T, _T]:
        codes = (w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales)
        return _op_backward_fp8_impl(dy, x, topk_ids, topk_weights, w1, w2, codes, layer_id, z=z)

    @_op_backward_fp8_z.register_fake
    def _(dy, x, topk_ids, topk_weights, w1, w2, w1_codes, w1_scales, w2_codes, w2_scales, w1t_codes, w1t_scales, z,
          layer_id):
        return (torch.empty_like(x), x.new_empty(topk_weights.shape, dtype=torch.float32), torch.empty_like(w1),
                torch.empty_like(w2))

    def _op_fp8_z_setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:11], output[1])
        ctx.mark_non_differentiable(output[1])
        # z's gradient is never read: not materialised as zeros
        ctx.set_materialize_grads(False)
        ctx.layer_id = inputs[11]

    def _op_fp8_z_autograd(ctx, dy, _dz):
        x, topk_ids, topk_weights, w1, w2, *codes, z = ctx.saved_tensors
        if dy is None:
            dy = x.new_zeros((x.shape[0], w2.shape[1]))
        dx, dtopk, dw1, dw2 = torch.ops.megamoe.moe_backward_fp8_z(dy.contiguous(), x, topk_ids, topk_weights, w1,
                                                                   w2, *codes, z, ctx.layer_id)
        return (dx, None, dtopk, dw1, dw2) + (None,) * 7

    _op_forward_fp8_z.register_autograd(_op_fp8_z_autograd, setup_context=_op_fp8_z_setup_context)


def fp8_codes(layer, w1, w2):
    """W1 and W2 quantized to blockwise FP8 as six tensors (`torch.ops.megamoe.fp8_quantize`: W1's codes uint8
    [E 2I, H] and scales f32 [E 2I / 128, H / 128], W2's [E H, I] and [E H / 128, I / 128], W1 transposed per
    expert [E H, 2I] and [E H / 128, 2I / 128]), for `moe_op_fp8(..., codes=)`: quantize once after each optimizer
    step instead of at every forward. No gradient flows through them."""
    if not _HAS_CUSTOM_OP:
        raise RuntimeError("this PyTorch has no torch.library.custom_op (2.4 or later): use moe_fp8()")
    return torch.ops.megamoe.fp8_quantize(w1.detach(), w2.detach(), layer.id)


def moe_op_fp8(layer, x, topk_ids, topk_weights, w1, w2, codes=None):
    """`moe_fp8` as PyTorch custom operators (`torch.ops.megamoe.moe_forward_fp8` / `moe_backward_fp8`): no Python
    object carried from forward to backward (the backward makes the routing again), so torch.compile traces them
    without a graph break. The FP8 weights are tensors: `codes` from `fp8_codes(layer, w1, w2)` (the caller keeps
    them current with w1, w2: nothing checks it), or None to quantize w1, w2 in this call (an operator in the
    graph: ~2.5 GB of traffic at the 30B shape, so quantize once a step for several micro-batches). On a layer
    with `save_z=True` the forward operator (`moe_forward_fp8_z`) also returns z, kept by autograd for the backward
    operator (`moe_backward_fp8_z`) instead of a recompute, as `moe_op`'s. Outputs and gradients bitwise
    `moe_fp8`'s on codes of the same weights and a layer of the same `save_z` (w1, w2's gradients the
    straight-through ones, in bf16)."""
    if not _HAS_CUSTOM_OP:
        raise RuntimeError("this PyTorch has no torch.library.custom_op (2.4 or later): use moe_fp8()")
    if codes is None:
        codes = fp8_codes(layer, w1, w2)
    elif len(codes) != 6:
        raise ValueError(f"codes must be the six tensors of fp8_codes, got {len(codes)}")
    else:
        # before the operator (its own checks would come from inside it); dtype and shape only: traceable
        for t, (n, dt, sh) in zip(codes, _code_specs(layer)):
            if t.dtype != dt or tuple(t.shape) != sh:
                raise ValueError(f"{n} must be {dt} of shape {sh}, got {t.dtype} of shape {tuple(t.shape)}")
    ids = topk_ids.to(torch.int32).contiguous()
    w = topk_weights.to(torch.float32).contiguous()
    if layer.save_z:
        return torch.ops.megamoe.moe_forward_fp8_z(x.contiguous(), ids, w, w1, w2, *codes, layer.id)[0]
    return torch.ops.megamoe.moe_forward_fp8(x.contiguous(), ids, w, w1, w2, *codes, layer.id)


def moe_op(layer, x, topk_ids, topk_weights, w1, w2):
    """`moe` as PyTorch custom operators (`torch.ops.megamoe.moe_forward` / `moe_backward`, torch.library): they
    carry no Python object from forward to backward (the backward makes the routing again, ~13 us at the 30B
    shape), so `torch.compile` traces them without a graph break (fake implementations give the shapes) and a CUDA
    graph captures them with no ring of saved states. A layer with `save_z=False` recomputes z in the backward; with
    `save_z=True` the forward operator (`moe_forward_z`) also returns z (bf16 [T k, 2I], rows in the routing's
    order), which autograd keeps for the backward operator (`moe_backward_z`): the z-saved layer's shorter
    backward for 2I bf16 a routed row of activation memory. Gradients bitwise `moe`'s on a layer of the same
    `save_z`; weight gradients in the weights' dtype (bf16)."""
    if not _HAS_CUSTOM_OP:
        raise RuntimeError("this PyTorch has no torch.library.custom_op (2.4 or later): use moe()")
    ids = topk_ids.to(torch.int32).contiguous()
    w = topk_weights.to(torch.float32).contiguous()
    if layer.save_z:
        return torch.ops.megamoe.moe_forward_z(x.contiguous(), ids, w, w1, w2, layer.id)[0]
    return torch.ops.megamoe.moe_forward(x.contiguous(), ids, w, w1, w2, layer.id)


# Layers that `shared_layer` hands out, by device and configuration (freed once no caller holds them).
_shared_layers = weakref.WeakValueDictionary()


def shared_layer(hidden, intermediate, experts, top_k, max_tokens, save_z=False, device=None):
    """The `Layer` of this configuration on `device` that earlier callers hold, or a new one. A layer's workspace
    is scratch (each forward's `Saved`, or the operators' tensors, hold what its backward needs), so a model's MoE
    layers of one shape need one between them, not one each (~2.8 GB each at Qwen3-30B-A3B with 16384 tokens): their
    forwards and backwards may come in any order, on one stream at a time as every megamoe launch on a device."""
    d = _cuda_device(device)
    key = (d.index, hidden, intermediate, experts, top_k, max_tokens, bool(save_z))
    layer = _shared_layers.get(key)
    if layer is None:
        layer = Layer(hidden, intermediate, experts, top_k, max_tokens, save_z=save_z, device=d)
        _shared_layers[key] = layer
    return layer


class MoE(torch.nn.Module):
    """An MoE layer's experts as a module: parameters w1 [E, 2I, H] and w2 [E, H, I] in bf16; the routing
    (topk_ids, topk_weights) comes from the caller's router. `op=True`: through the custom operators (`moe_op`:
    torch.compile without a graph break); `saved_slots`: a ring of saved states for CUDA-graph capture of the
    default path; `fp8`: blockwise FP8 (with `op=True`: `moe_op_fp8`, the weights quantized by an operator in
    every forward); `share_layer`: the modules of one configuration and device share one `Layer` and so one
    workspace (`shared_layer`). On by default on the eager path (no `op`, no `saved_slots`); off by default with
    `op=True`, whose calls a CUDA graph can capture: the tensor maps of buffers first seen in captures take slots
    of their layer (128, about a dozen a captured forward and backward), so a whole model captured on one layer
    could run out of them; never with `saved_slots`, a ring being one module's. `share_layer=False`: a layer of
    the module's own."""

    def __init__(self, hidden, intermediate, experts, top_k, max_tokens, save_z=False, device=None, fp8=False,
                 saved_slots=0, op=False, share_layer=None):
        super().__init__()
        if share_layer is None:
            share_layer = not saved_slots and not op
        if share_layer and saved_slots:
            raise ValueError("share_layer with saved_slots: a ring of saved states is one module's own")
        self.op = op
        self.share_layer = share_layer
        self.fp8 = fp8
        self.saved_slots = saved_slots
        self._w8 = None
        dev = _cuda_device(device)
        self.cfg = (hidden, intermediate, experts, top_k, max_tokens, save_z)
        self.w1 = torch.nn.Parameter(torch.empty(experts, 2 * intermediate, hidden, dtype=torch.bfloat16, device=dev))
        self.w2 = torch.nn.Parameter(torch.empty(experts, hidden, intermediate, dtype=torch.bfloat16, device=dev))
        torch.nn.init.normal_(self.w1, std=hidden ** -0.5)
        torch.nn.init.normal_(self.w2, std=intermediate ** -0.5)
        self._layer = None
        if op:
            self.layer()  # made now, not in forward: torch.compile cannot trace a layer's creation (ctypes)

    def _apply(self, fn, *args, **kwargs):
        r = super()._apply(fn, *args, **kwargs)
        if self.op:
            self.layer()  # after .to() / .cuda(): the layer of the new device, made outside forward
        return r

    def layer(self):
        dev = self.w1.device
        if self._layer is None or self._layer.device != dev:
            if self.share_layer:
                self._layer = shared_layer(*self.cfg, device=dev)
            else:
                self._layer = Layer(*self.cfg, device=dev, saved_slots=self.saved_slots)
            self._w8 = None
        return self._layer

    def forward(self, x, topk_ids, topk_weights):
        layer = self.layer()
        if self.op:
            if self.fp8:
                # the codes made by an operator in this call: nothing outside the graph to keep current
                return moe_op_fp8(layer, x, topk_ids, topk_weights, self.w1, self.w2)
            return moe_op(layer, x, topk_ids, topk_weights, self.w1, self.w2)
        if not self.fp8:
            return moe(layer, x, topk_ids, topk_weights, self.w1, self.w2)
        if self._w8 is None:
            self._w8 = Fp8Weights(layer)
        if not self._w8.current(self.w1, self.w2):
            self._w8.quantize(self.w1.detach(), self.w2.detach())  # detach shares storage and version counter
        return moe_fp8(layer, self._w8, x, topk_ids, topk_weights, self.w1, self.w2)

    def requantize(self):
        """Quantize the weights again now. The module does it by itself when w1's or w2's version counter moves
        (any in-place update of the parameters, an optimizer step's included); an update through `.data` does
        not move it: call this after one."""
        if self.fp8 and not self.op:  # the operators quantize in each call
            if self._w8 is None:
                self._w8 = Fp8Weights(self.layer())
            self._w8.quantize(self.w1.detach(), self.w2.detach())
