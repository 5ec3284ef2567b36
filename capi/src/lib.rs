//! megamoe's C ABI: the single-GPU MoE layer ([`megamoe::layer::MoeLayer`], forward and backward, bf16 or
//! blockwise FP8) for callers outside Rust.
//!
//! The C declarations are in `capi/include/megamoe.h`; `python/megamoe_torch.py` calls them from PyTorch
//! through ctypes (nothing to compile on the Python side). Conventions:
//! - Every function returns a status code, [`MEGAMOE_OK`] or one of the `MEGAMOE_*` errors, and never unwinds
//!   into the caller: a panic inside is caught and reported as [`MEGAMOE_INTERNAL`]. [`megamoe_last_error`]
//!   gives the message of the calling thread's last failed call.
//! - Buffers are raw device addresses that the caller owns (a PyTorch tensor's `data_ptr()`), on the layer's
//!   device, in the layouts of [`megamoe::layer::Inputs`] and [`megamoe::layer::Grads`]. Before anything is
//!   launched each one is checked: not null, aligned for its element type, device memory of the layer's device,
//!   and the whole extent the call touches mapped (`cuMemGetAddressRange`: inside the buffer's allocation, or
//!   the consecutive mappings of PyTorch's expandable segments): a buffer that runs past its allocation is an
//!   [`MEGAMOE_INVALID_ARGUMENT`] that changes nothing, never a fault. A caching allocator's sub-allocations
//!   share one allocation, so a size mismatch inside it cannot be seen here: the Python bindings check shapes.
//! - `stream` is the caller's CUDA stream (`torch.cuda.current_stream().cuda_stream`; 0 is the legacy default
//!   stream). The layer runs on its device's own stream, after everything queued on `stream` before the call,
//!   and everything queued on `stream` after the call runs after the layer's work: one event each way, no host
//!   synchronisation.
//! - A forward returns a [`MegamoeSaved`] (the routing layout and, with `save_z`, z) that its backward takes and
//!   the caller frees; several may be outstanding (micro-batches, pipeline schedules). A layer's calls are
//!   serialised by a lock, so forward and backward may come from different threads (PyTorch runs the backward on
//!   its own thread).
//! - CUDA graphs: after [`megamoe_layer_reserve_saved`] the forwards write a ring of saved states allocated
//!   with it instead of allocating one each, so a forward and backward can be captured (PyTorch's
//!   `torch.cuda.graph`) and replayed; a saved state overwritten by a later forward is refused by the backward
//!   (a generation check on the host). The maps of buffers a capture meets first are recorded by the graph
//!   (megamoe's `tensor_map::CaptureMaps`), so no eager call is needed first.
//! - Not yet through this interface: expert parallelism; the Rust API has it.
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::ops::{Deref, DerefMut};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaEvent, CudaSlice, DeviceRepr};
use half::bf16;
use megamoe::gemm::WgradElem;
use megamoe::layer::{Fp8Inputs, Fp8Weights, Gather, Grads, Inputs, LayerConfig, MoeLayer, Save, Saved};
use megamoe::{Error, Gpu, Result};

/// The call succeeded.
pub const MEGAMOE_OK: c_int = 0;
/// An argument was rejected before anything was launched or written (a null or misplaced buffer, a buffer too
/// small for the shapes, a configuration the layer does not take, a saved state of another layer, ...); also the
/// invalid expert ids that [`megamoe_saved_check`] reports.
pub const MEGAMOE_INVALID_ARGUMENT: c_int = 1;
/// No CUDA driver on this machine.
pub const MEGAMOE_NO_DRIVER: c_int = 2;
/// The driver reports no such device.
pub const MEGAMOE_NO_DEVICE: c_int = 3;
/// The device is not a Hopper GPU (sm_90a: H100, H200).
pub const MEGAMOE_UNSUPPORTED_DEVICE: c_int = 4;
/// A CUDA driver call failed.
pub const MEGAMOE_CUDA_ERROR: c_int = 5;
/// A bounded wait on the device expired ([`megamoe_saved_check`]).
pub const MEGAMOE_TIMEOUT: c_int = 6;
/// Any other failure, or a panic inside megamoe (a bug: the message says where).
pub const MEGAMOE_INTERNAL: c_int = 7;

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn bad<T>(msg: String) -> Result<T> {
    Err(Error::InvalidArgument(msg))
}

fn code(e: &Error) -> c_int {
    match e {
        Error::InvalidArgument(_) => MEGAMOE_INVALID_ARGUMENT,
        Error::NoDriver => MEGAMOE_NO_DRIVER,
        Error::NoDevice { .. } => MEGAMOE_NO_DEVICE,
        Error::UnsupportedDevice { .. } => MEGAMOE_UNSUPPORTED_DEVICE,
        Error::Driver { .. } => MEGAMOE_CUDA_ERROR,
        Error::Timeout { .. } => MEGAMOE_TIMEOUT,
        _ => MEGAMOE_INTERNAL,
    }
}

fn panic_message(p: &(dyn Any + Send)) -> String {
    p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_default()
}

/// Run `f` at the C boundary: its status code, its error's message kept for [`megamoe_last_error`].
fn guard(f: impl FnOnce() -> Result<()>) -> c_int {
    let (c, msg) = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => return MEGAMOE_OK,
        Ok(Err(e)) => (code(&e), e.to_string()),
        Err(p) => (MEGAMOE_INTERNAL, format!("internal error (a panic inside megamoe): {}", panic_message(&*p))),
    };
    LAST_ERROR.with(|l| *l.borrow_mut() = msg);
    c
}

fn driver<T>(what: &str, r: std::result::Result<T, cudarc::driver::DriverError>) -> Result<T> {
    r.map_err(|source| Error::Driver { what: what.to_string(), source })
}

/// One layer instance: its configuration, device workspace and the events that order it with the caller's
/// stream. Made by [`megamoe_layer_new`], freed by [`megamoe_layer_free`].
pub struct MegamoeLayer {
    gpu: Arc<Gpu>,
    cfg: LayerConfig,
    /// Shared with the saved states of its ring, which read their slot under the same lock.
    state: Arc<Mutex<State>>,
}

struct State {
    layer: MoeLayer,
    /// Recorded on the caller's stream, waited for by the layer's.
    before: CudaEvent,
    /// Recorded on the layer's stream, waited for by the caller's.
    after: CudaEvent,
    /// The saved states the forwards write in turn once [`megamoe_layer_reserve_saved`] made them (empty: each
    /// forward allocates its own).
    ring: Vec<RingSlot>,
    /// The slot the next forward writes.
    next: usize,
    /// Forwards into ring slots so far: each one's generation (unique over the layer's life).
    generations: u64,
    /// Slots of replaced rings that a captured graph writes: kept until the layer is freed.
    kept: Vec<Saved>,
    /// The state of the calls that carry none (a forward given no `saved`, [`megamoe_backward_routed`]), for a
    /// layer that recomputes z; allocated with the layer (the routing layout for max_tokens: 8 bytes a slot).
    scratch: Option<Saved>,
    /// The state of [`megamoe_forward_z`] and [`megamoe_backward_routed_z`], for a layer that keeps z (with the
    /// in-producer gather): the scratch state without z's buffer, the caller's z lent to it for each call.
    lent: Option<Saved>,
}

/// `s` with the caller's `z` lent to it for `f` ([`Saved::swap_z`]), taken back when `f` returns or unwinds:
/// the state never keeps (or frees) the caller's buffer.
fn with_lent_z<R>(s: &mut Saved, z: &mut Borrowed<bf16>, f: impl FnOnce(&mut Saved) -> Result<R>) -> Result<R> {
    struct Back<'a> {
        s: &'a mut Saved,
        z: &'a mut Borrowed<bf16>,
    }
    impl Drop for Back<'_> {
        fn drop(&mut self) {
            self.z.slice = self.s.swap_z(None);
        }
    }
    let lent = z.slice.take();
    s.swap_z(lent);
    let b = Back { s, z };
    let r = f(&mut *b.s);
    drop(b);
    r
}

/// The layer's lent-z state ([`State::lent`]), or the error that says which layers have one.
fn lent_state<'a>(lent: &'a mut Option<Saved>, what: &str) -> Result<&'a mut Saved> {
    lent.as_mut().ok_or_else(|| {
        Error::InvalidArgument(format!(
            "{what}: a layer that keeps z (save_z != 0) with the in-producer gather (MEGAMOE_GATHER unset or \
             in-producer); a layer that recomputes z takes megamoe_forward / megamoe_backward_routed"
        ))
    })
}

/// One saved state of a layer's ring, and the generation of the forward that last wrote it (a handle records
/// its forward's; a later forward into the slot makes the handle stale).
struct RingSlot {
    saved: Saved,
    generation: u64,
    /// Taken by a forward captured in a CUDA graph: its replays write the slot, so no other forward may.
    captured: bool,
}

/// What a forward leaves for its backward. Made by [`megamoe_forward`], freed by [`megamoe_saved_free`].
pub struct MegamoeSaved {
    gpu: Arc<Gpu>,
    kind: SavedKind,
}

enum SavedKind {
    /// Allocated by its forward, owned by the handle.
    Own(Box<Saved>),
    /// Slot `slot` of its layer's ring, as the forward that made the handle left it (`generation`).
    Ring { state: Arc<Mutex<State>>, slot: usize, generation: u64 },
}

/// Slot `slot` of `ring`, if no later forward has overwritten it since the handle's (`generation`) and the ring
/// was not replaced by a smaller one.
fn ring_slot(ring: &mut [RingSlot], slot: usize, generation: u64) -> Result<&mut RingSlot> {
    let slots = ring.len();
    match ring.get_mut(slot) {
        Some(r) if r.generation == generation => Ok(r),
        _ => bad(format!(
            "this saved state (slot {slot} of the layer's ring, now of {slots}) was overwritten by a later forward \
             or the ring was replaced: the ring (megamoe_layer_reserve_saved) holds the last forwards, one a slot; \
             reserve more slots for more forwards waiting for their backward"
        )),
    }
}

impl MegamoeSaved {
    /// `f` on the state: the handle's own, or its ring slot under the layer's lock (refused once overwritten).
    fn with<R>(&self, f: impl FnOnce(&Saved) -> Result<R>) -> Result<R> {
        match &self.kind {
            SavedKind::Own(s) => f(s),
            SavedKind::Ring { state, slot, generation } => {
                let mut st = lock(state)?;
                f(&ring_slot(&mut st.ring, *slot, *generation)?.saved)
            }
        }
    }
}

impl MegamoeLayer {
    /// Run `f` on the layer, ordered after the caller's `stream` and before what the caller queues next on it.
    /// The second event is recorded whatever `f` returns, so work `f` launched before failing is still ordered.
    fn run(&self, stream: u64, f: impl FnOnce(&mut State) -> Result<()>) -> Result<()> {
        let mut st = lock(&self.state)?;
        let st = &mut *st;
        let caller = stream as sys::CUstream;
        let ours = self.gpu.stream();
        // SAFETY: the event is alive (owned by the layer); `caller` is the caller's stream on this context (a
        // stream of another context is the driver's error, reported).
        driver("recording an event on the caller's stream", unsafe {
            result::event::record(st.before.cu_event(), caller)
        })?;
        driver("ordering the layer's stream after the caller's", ours.wait(&st.before))?;
        let r = f(st);
        driver("recording the layer's event", st.after.record(ours))?;
        // SAFETY: as above.
        driver("ordering the caller's stream after the layer's", unsafe {
            result::stream::wait_event(caller, st.after.cu_event(), sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
        })?;
        r
    }
}

impl MegamoeLayer {
    /// A forward `f` into a saved state for `tokens` tokens ([`MegamoeLayer::run`]'s ordering): the ring's next
    /// slot when the layer has a ring, else a fresh one; the handle given to the caller through `out` once `f`
    /// returned Ok.
    ///
    /// # Safety
    /// `out` must be writable.
    unsafe fn forward_saved(
        &self,
        stream: u64,
        tokens: usize,
        out: *mut *mut MegamoeSaved,
        f: impl FnOnce(&mut MoeLayer, &mut Saved) -> Result<()>,
    ) -> Result<()> {
        let mut kind = None;
        self.run(stream, |st| {
            let capturing = self.gpu.capturing()?;
            let State { layer, ring, next, generations, .. } = st;
            // the next slot no captured graph holds, in turn
            let n = ring.len();
            let free = (0..n).map(|d| (*next + d) % n).find(|&i| !ring[i].captured);
            match free {
                None if capturing => {
                    return bad(format!(
                        "a forward captured in a CUDA graph needs a saved-state slot of its own, and {}: call \
                         megamoe_layer_reserve_saved before the capture (one slot per captured forward, plus one \
                         per eager forward waiting for its backward)",
                        if n == 0 { "the layer has none".to_string() } else { format!("all {n} are held by graphs") }
                    ));
                }
                // no ring, or every slot held by a graph: outside a capture the state is allocated
                None => {
                    let mut s = layer.alloc_saved(tokens)?;
                    f(layer, &mut s)?;
                    kind = Some(SavedKind::Own(Box::new(s)));
                }
                Some(slot) => {
                    *next = (slot + 1) % n;
                    // the slot's earlier handles go stale now, whether or not this forward succeeds
                    *generations += 1;
                    let r = &mut ring[slot];
                    r.generation = *generations;
                    f(layer, &mut r.saved)?;
                    // a captured forward keeps its slot for good (its graph's replays rewrite it)
                    r.captured = capturing;
                    kind = Some(SavedKind::Ring { state: self.state.clone(), slot, generation: r.generation });
                }
            }
            Ok(())
        })?;
        let s = MegamoeSaved { gpu: self.gpu.clone(), kind: kind.expect("set by a forward that returned Ok") };
        // SAFETY: the function's contract.
        unsafe { hand_out(out, s) };
        Ok(())
    }
}

/// A caller's device buffer seen as a `CudaSlice` for the length of one call; never freed by megamoe.
struct Borrowed<T> {
    slice: Option<CudaSlice<T>>,
    span: Span,
}

/// A buffer's name and byte range (for the overlap check).
#[derive(Clone, Copy)]
struct Span {
    name: &'static str,
    start: u64,
    end: u64,
}

/// Every output disjoint from the other outputs and from every input (the Rust API's `&mut` / `&` rule, which
/// raw addresses do not carry): an output that overlaps one would be read after it is written.
fn check_disjoint(outs: &[Span], ins: &[Span]) -> Result<()> {
    for (i, o) in outs.iter().enumerate() {
        for b in outs[i + 1..].iter().chain(ins) {
            if o.start < o.end && b.start < b.end && o.start < b.end && b.start < o.end {
                return bad(format!(
                    "{} overlaps {}: an output may share memory with no other output or input",
                    o.name, b.name
                ));
            }
        }
    }
    Ok(())
}

impl<T> Deref for Borrowed<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        self.slice.as_ref().expect("present until dropped")
    }
}

impl<T> DerefMut for Borrowed<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        self.slice.as_mut().expect("present until dropped")
    }
}

impl<T> Drop for Borrowed<T> {
    fn drop(&mut self) {
        if let Some(s) = self.slice.take() {
            s.leak();
        }
    }
}

/// The caller's buffer `name` at `ptr` holding `len` elements of `T`, checked: not null, aligned to `align`
/// bytes, device memory of `gpu`'s device, all `len` elements in mapped memory from its allocation on. The
/// context must be current.
fn borrow<T: DeviceRepr>(gpu: &Gpu, name: &'static str, ptr: u64, len: usize, align: u64) -> Result<Borrowed<T>> {
    let size = std::mem::size_of::<T>();
    if len > 0 {
        if ptr == 0 {
            return bad(format!("{name} is a null pointer ({len} elements expected)"));
        }
        if ptr % align.max(std::mem::align_of::<T>() as u64) != 0 {
            return bad(format!("{name} ({ptr:#x}) is not aligned to {align} bytes (the kernels' vector accesses)"));
        }
        let Some(bytes) = len.checked_mul(size) else {
            return bad(format!("{name}: {len} elements of {size} bytes overflow"));
        };
        let mut mem_type: u32 = 0;
        let mut ordinal: c_int = -1;
        // SAFETY: each attribute writes one value of the type given (CUmemorytype, int).
        let attrs = unsafe {
            sys::cuPointerGetAttribute(
                &mut mem_type as *mut u32 as *mut c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr,
            )
            .result()
            .and_then(|_| {
                sys::cuPointerGetAttribute(
                    &mut ordinal as *mut c_int as *mut c_void,
                    sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                    ptr,
                )
                .result()
            })
        };
        if let Err(e) = attrs {
            return bad(format!("{name} ({ptr:#x}) is not memory CUDA knows ({e})"));
        }
        if mem_type != sys::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            return bad(format!("{name} ({ptr:#x}) is not device memory (CUmemorytype {mem_type})"));
        }
        if ordinal < 0 || ordinal as usize != gpu.ordinal() {
            return bad(format!("{name} is on device {ordinal}, the layer on device {}", gpu.ordinal()));
        }
        // the extent must lie in the buffer's allocation: one `cudaMalloc` allocation; for memory mapped by the
        // virtual memory API (PyTorch's expandable segments map a reserved range piece by piece) or from a
        // stream-ordered pool, the consecutive mappings from `ptr` on (a fault is ruled out, a neighbour not)
        let end = ptr.checked_add(bytes as u64).ok_or_else(|| Error::InvalidArgument(format!("{name}: overflow")))?;
        let mut legacy: u32 = 1;
        // SAFETY: writes one boolean; on failure (an older driver) `legacy` stays 1, the strict reading.
        let _ = unsafe {
            sys::cuPointerGetAttribute(
                &mut legacy as *mut u32 as *mut c_void,
                sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE,
                ptr,
            )
        };
        let mut cur = ptr;
        while cur < end && (cur == ptr || legacy == 0) {
            let (mut base, mut alloc) = (0u64, 0usize);
            // SAFETY: writes the allocation's base and size.
            let r = unsafe { sys::cuMemGetAddressRange_v2(&mut base, &mut alloc, cur).result() };
            match r {
                Ok(()) if base <= cur && base.saturating_add(alloc as u64) > cur => cur = base + alloc as u64,
                Ok(()) | Err(_) if cur == ptr => {
                    return bad(format!("{name} ({ptr:#x}): its allocation cannot be found ({r:?})"));
                }
                _ => break,
            }
        }
        if cur < end {
            return bad(format!(
                "{name}: {len} elements ({bytes} bytes) from {ptr:#x} run past the end of its allocation (at \
                 {cur:#x}): a buffer too small for the shapes"
            ));
        }
    }
    // SAFETY: the extent was checked above to lie in live device memory of this device (or is empty); the slice
    // is leaked, never freed, when the call ends (`Borrowed`).
    let slice = Some(unsafe { gpu.stream().upgrade_device_ptr(ptr, len) });
    Ok(Borrowed { slice, span: Span { name, start: ptr, end: ptr.wrapping_add((len * size) as u64) } })
}

/// The calling thread's current CUDA context on entry, made current again on exit (PyTorch reads its current
/// device from it); the layer's context is current in between.
struct CurrentCtx(Option<sys::CUcontext>);

impl CurrentCtx {
    fn enter(gpu: &Gpu) -> Result<Self> {
        let prev = driver("reading the thread's current context", result::ctx::get_current())?;
        driver("making the device's context current", gpu.context().bind_to_thread())?;
        Ok(CurrentCtx(prev))
    }
}

impl Drop for CurrentCtx {
    fn drop(&mut self) {
        // SAFETY: the context was current on entry, so it is alive (or null: no context, as on entry).
        let _ = unsafe { result::ctx::set_current(self.0.unwrap_or(std::ptr::null_mut())) };
    }
}

/// A handle that holds its device.
trait OnGpu {
    fn gpu(&self) -> &Gpu;
}

impl OnGpu for MegamoeLayer {
    fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

impl OnGpu for MegamoeSaved {
    fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

impl OnGpu for MegamoeFp8Weights {
    fn gpu(&self) -> &Gpu {
        &self.gpu
    }
}

/// Hand a new handle to the caller through `out` (checked non-null by the caller's entry point).
///
/// # Safety
/// `out` must be writable.
unsafe fn hand_out<T>(out: *mut *mut T, v: T) {
    // SAFETY: the function's contract.
    unsafe { *out = Box::into_raw(Box::new(v)) };
}

/// Free a handle of this crate (null: nothing), its device's context current while its buffers are released (in
/// the device stream's order); never unwinds.
///
/// # Safety
/// `p` must be null or a live handle of this crate's constructors, not used after.
unsafe fn free_handle<T: OnGpu>(p: *mut T) {
    if p.is_null() {
        return;
    }
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: the function's contract.
        let b = unsafe { Box::from_raw(p) };
        let _cur = CurrentCtx::enter(b.gpu());
        drop(b);
    }));
}

fn layer_ref<'a>(layer: *const MegamoeLayer) -> Result<&'a MegamoeLayer> {
    // SAFETY: a non-null handle is one `megamoe_layer_new` returned and the caller has not freed (the ABI's
    // contract).
    unsafe { layer.as_ref() }.ok_or_else(|| Error::InvalidArgument("the layer handle is null".into()))
}

fn saved_ref<'a>(saved: *const MegamoeSaved) -> Result<&'a MegamoeSaved> {
    // SAFETY: as `layer_ref`, for `megamoe_forward`'s handles.
    unsafe { saved.as_ref() }.ok_or_else(|| Error::InvalidArgument("the saved-state handle is null".into()))
}

/// The alignment of the row and weight buffers: the kernels copy rows with 16-byte accesses and TMA needs
/// 16-byte addresses (a PyTorch tensor of H-wide rows, H a multiple of 64, keeps it from its 512-byte aligned
/// allocation; a view at an odd offset does not, and would fault).
const ROWS: u64 = 16;

/// The layer's five inputs for `tokens` tokens, borrowed and checked.
struct In {
    x: Borrowed<bf16>,
    ids: Borrowed<i32>,
    w: Borrowed<f32>,
    w1: Borrowed<bf16>,
    w2: Borrowed<bf16>,
}

impl In {
    fn new(l: &MegamoeLayer, tokens: usize, p: [u64; 5]) -> Result<Self> {
        let c = &l.cfg;
        if tokens > c.max_tokens {
            return bad(format!("{tokens} tokens > the layer's maximum {}", c.max_tokens));
        }
        let (g, e, h, i) = (&*l.gpu, c.experts, c.hidden, c.intermediate);
        Ok(In {
            x: borrow(g, "x", p[0], tokens * h, ROWS)?,
            ids: borrow(g, "topk_ids", p[1], tokens * c.top_k, 4)?,
            w: borrow(g, "topk_weights", p[2], tokens * c.top_k, 4)?,
            w1: borrow(g, "w1", p[3], e * 2 * i * h, ROWS)?,
            w2: borrow(g, "w2", p[4], e * h * i, ROWS)?,
        })
    }

    fn spans(&self) -> [Span; 5] {
        [self.x.span, self.ids.span, self.w.span, self.w1.span, self.w2.span]
    }

    fn inputs(&self, tokens: usize) -> Inputs<'_> {
        Inputs { tokens, x: &self.x, topk_ids: &self.ids, topk_weights: &self.w, w1: &self.w1, w2: &self.w2 }
    }
}

/// Make a layer on CUDA device `device` for hidden size `hidden`, expert intermediate size `intermediate`,
/// `experts` experts, `top_k` slots a token and calls of up to `max_tokens` tokens; `save_z` non-zero keeps z
/// from the forward for the backward (more memory, a shorter backward), zero recomputes it. The kernel choices
/// are [`LayerConfig::bf16`]'s (and its environment variables). On success `*out` holds the handle.
///
/// # Safety
/// `out` must be null (refused) or point to writable storage for one pointer.
#[no_mangle]
pub unsafe extern "C" fn megamoe_layer_new(
    device: c_int,
    hidden: usize,
    intermediate: usize,
    experts: usize,
    top_k: usize,
    max_tokens: usize,
    save_z: c_int,
    out: *mut *mut MegamoeLayer,
) -> c_int {
    guard(|| {
        if out.is_null() {
            return bad("out is null".into());
        }
        let save = if save_z != 0 { Save::WithZ } else { Save::InputsOnly };
        let cfg = LayerConfig::bf16(hidden, intermediate, experts, top_k, max_tokens, save);
        // the configuration first: its errors do not depend on the machine
        cfg.validate()?;
        if device < 0 {
            return bad(format!("device {device} is negative"));
        }
        let gpu = megamoe::gpu(device as usize)?;
        let _cur = CurrentCtx::enter(&gpu)?;
        let layer = MoeLayer::new(gpu.clone(), cfg)?;
        let ctx = gpu.context();
        let before = driver("creating an event", ctx.new_event(None))?;
        let after = driver("creating an event", ctx.new_event(None))?;
        let scratch = if save_z == 0 { Some(layer.alloc_saved(cfg.max_tokens)?) } else { None };
        let lent = if save_z != 0 && cfg.gather == Gather::InProducer {
            Some(layer.alloc_saved_lent_z(cfg.max_tokens)?)
        } else {
            None
        };
        let st =
            State { layer, before, after, ring: Vec::new(), next: 0, generations: 0, kept: Vec::new(), scratch, lent };
        let l = MegamoeLayer { gpu, cfg, state: Arc::new(Mutex::new(st)) };
        // SAFETY: `out` is non-null and writable (the function's contract).
        unsafe { hand_out(out, l) };
        Ok(())
    })
}

/// Free a layer (null: nothing). Work already queued finishes first; its memory is released in stream order.
///
/// # Safety
/// `layer` must be null or a handle from [`megamoe_layer_new`] not yet freed; no call may use it after.
#[no_mangle]
pub unsafe extern "C" fn megamoe_layer_free(layer: *mut MegamoeLayer) {
    // SAFETY: the function's contract.
    unsafe { free_handle(layer) }
}

/// Give the layer a ring of `slots` saved states, each for the layer's maximum tokens, which its forwards then
/// write in turn instead of allocating one each (0: back to allocating). With a ring a forward allocates
/// nothing, so it can be captured in a CUDA graph: a captured forward takes a slot for good (the graph's replays
/// rewrite it), so reserve one slot per forward to capture, plus one per eager forward waiting for its backward
/// (activation checkpointing and pipeline schedules keep several); an eager forward that finds every slot held by
/// a graph allocates its own. The handle a forward returns refers to its slot: a backward (or
/// [`megamoe_saved_check`]) given a handle whose slot a later forward has overwritten is refused with
/// [`MEGAMOE_INVALID_ARGUMENT`]. Replacing a ring makes the old one's handles stale; its slots held by graphs are
/// kept while the layer lives. Not during a capture (it allocates).
///
/// # Safety
/// `layer` must be null or a live handle.
#[no_mangle]
pub unsafe extern "C" fn megamoe_layer_reserve_saved(layer: *const MegamoeLayer, slots: usize) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        if slots > 4096 {
            return bad(format!("{slots} saved-state slots (at most 4096)"));
        }
        let _cur = CurrentCtx::enter(&l.gpu)?;
        if l.gpu.capturing()? {
            return bad("megamoe_layer_reserve_saved allocates, which a CUDA graph capture cannot record: call it \
                        before the capture"
                .into());
        }
        let mut st = lock(&l.state)?;
        let mut ring = Vec::with_capacity(slots);
        for _ in 0..slots {
            ring.push(RingSlot { saved: st.layer.alloc_saved(l.cfg.max_tokens)?, generation: 0, captured: false });
        }
        // the old ring's handles go stale: generations are unique over the layer's life, so none matches a slot
        // of the new ring. Its slots that graphs write are kept (a graph may be replayed as long as the layer
        // lives); the others are released in stream order after the work queued on them
        let old = std::mem::replace(&mut st.ring, ring);
        st.kept.extend(old.into_iter().filter(|r| r.captured).map(|r| r.saved));
        st.next = 0;
        Ok(())
    })
}

/// Forward for `tokens` tokens: `out[t] = sum_j topk_weights[t, j] * expert(topk_ids[t, j])(x[t])`, on the
/// layer's stream ordered with `stream` (module doc). Buffers: x, out bf16 `[tokens, H]`; topk_ids i32
/// `[tokens, k]` (-1: a masked slot); topk_weights f32 `[tokens, k]`; w1 bf16 `[E, 2I, H]` (each expert's I gate
/// rows, then its I up rows); w2 bf16 `[E, H, I]`; all contiguous. On success `*saved` holds what the backward
/// needs. With `saved` null (a layer that recomputes z only) no state is handed out: the forward writes the
/// layer's own scratch state, and its backward is [`megamoe_backward_routed`]. An expert id outside -1..E is
/// found on the device: the call returns OK, writes nothing, and [`megamoe_saved_check`] reports it.
///
/// # Safety
/// `layer` must be null or a live handle; `saved` null or writable; the device addresses must stay allocated
/// until the layer's work on them is done (it is ordered before anything queued on `stream` after the call).
#[no_mangle]
pub unsafe extern "C" fn megamoe_forward(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    out: u64,
    saved: *mut *mut MegamoeSaved,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let inp = In::new(l, tokens, [x, topk_ids, topk_weights, w1, w2])?;
        let mut y = borrow::<bf16>(&l.gpu, "out", out, tokens * l.cfg.hidden, ROWS)?;
        check_disjoint(&[y.span], &inp.spans())?;
        if saved.is_null() {
            return l.run(stream, |st| {
                let State { layer, scratch, .. } = st;
                let Some(s) = scratch.as_mut() else {
                    return bad("saved is null: only a layer that recomputes z (save_z = 0) runs a forward without \
                                handing out its saved state (a layer that keeps z: megamoe_forward_z writes z into \
                                the caller's buffer instead)"
                        .into());
                };
                layer.forward_into(&inp.inputs(tokens), &mut y, s)
            });
        }
        // SAFETY: `saved` is non-null and writable (the function's contract).
        unsafe { l.forward_saved(stream, tokens, saved, |layer, s| layer.forward_into(&inp.inputs(tokens), &mut y, s)) }
    })
}

/// Backward of the forward that returned `saved`, on the same inputs (the same five buffers' contents), with
/// `dy` bf16 `[T, H]`: writes dx bf16 `[T, H]` and dtopk f32 `[T, k]` (0 for masked slots), and writes (or with
/// `accumulate` non-zero adds to) dw1 `[E, 2I, H]` and dw2 `[E, H, I]`, in bf16 when `wgrad_bf16` is non-zero
/// (the weights' type, as PyTorch's autograd gives them) or f32 otherwise. T is the forward's token count.
/// The same `saved` may serve several backwards.
///
/// # Safety
/// As [`megamoe_forward`]; `saved` must be null or a live handle of [`megamoe_forward`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward(
    layer: *const MegamoeLayer,
    stream: u64,
    saved: *const MegamoeSaved,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let s = saved_ref(saved)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let b = Bwd { l, stream, saved: s, p: [x, topk_ids, topk_weights, w1, w2], g: [dy, dx, dw1, dw2, dtopk] };
        b.run(wgrad_bf16 != 0, accumulate != 0, None)
    })
}

/// Backward without a saved state, for a layer that recomputes z: the routing layout of `tokens` tokens of
/// `topk_ids` is made again (one launch, ~13 us at 30B, T = 16384) into the layer's scratch state,
/// then the backward as [`megamoe_backward`] (z recomputed). For callers that cannot carry a handle from the
/// forward to the backward (PyTorch custom operators, whose values are tensors). Bitwise the backward of the
/// forward's own state on the same inputs.
///
/// # Safety
/// As [`megamoe_backward`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward_routed(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let (p, g) = ([x, topk_ids, topk_weights, w1, w2], [dy, dx, dw1, dw2, dtopk]);
        routed(l, stream, tokens, p, g, None, (wgrad_bf16, accumulate), None)
    })
}

/// Elements of the caller's z for `tokens` tokens: bf16 `[tokens k, 2I]`.
fn z_elems(c: &LayerConfig, tokens: usize) -> usize {
    tokens * c.top_k * 2 * c.intermediate
}

/// [`megamoe_forward`] of a layer that keeps z (save_z != 0), with no saved state handed out: z is written into
/// the caller's buffer `z` (bf16 `[tokens k, 2I]`, contiguous; its rows in the routing's order, which the caller
/// need not know: it only hands the buffer back, unchanged, to [`megamoe_backward_routed_z`]). For callers that
/// carry tensors, not handles, from the forward to the backward (PyTorch custom operators): the z-saving
/// counterpart of [`megamoe_forward`] given no `saved`. Needs the in-producer gather (the default). Bitwise
/// [`megamoe_forward`]'s output.
///
/// # Safety
/// As [`megamoe_forward`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_forward_z(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    out: u64,
    z: u64,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let inp = In::new(l, tokens, [x, topk_ids, topk_weights, w1, w2])?;
        let mut y = borrow::<bf16>(&l.gpu, "out", out, tokens * l.cfg.hidden, ROWS)?;
        let mut zb = borrow::<bf16>(&l.gpu, "z", z, z_elems(&l.cfg, tokens), ROWS)?;
        check_disjoint(&[y.span, zb.span], &inp.spans())?;
        l.run(stream, |st| {
            let State { layer, lent, .. } = st;
            let s = lent_state(lent, "megamoe_forward_z")?;
            with_lent_z(s, &mut zb, |s| layer.forward_into(&inp.inputs(tokens), &mut y, s))
        })
    })
}

/// The backward of [`megamoe_forward_z`]: the same inputs and its `z` unchanged (read, not written); the routing
/// layout made again from `topk_ids` (one ~13 us launch at 30B), z read instead of recomputed; outputs as
/// [`megamoe_backward`]'s. Bitwise [`megamoe_backward`] of the forward's own state. A z that is not that
/// forward's gives wrong gradients (nothing can check it).
///
/// # Safety
/// As [`megamoe_backward`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward_routed_z(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    z: u64,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let (p, g) = ([x, topk_ids, topk_weights, w1, w2], [dy, dx, dw1, dw2, dtopk]);
        routed(l, stream, tokens, p, g, Some(z), (wgrad_bf16, accumulate), None)
    })
}

/// The backward of [`megamoe_forward_fp8_codes_z`]: [`megamoe_backward_routed_fp8`] that reads the forward's z
/// from the caller's `z` (unchanged since) instead of recomputing it (with FP8 weight gradients it recomputes z
/// anyway: their recompute also makes dW2's operand). Bitwise [`megamoe_backward_fp8`] of the forward's own state.
///
/// # Safety
/// As [`megamoe_backward_routed_fp8`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward_routed_fp8_z(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    codes: *const u64,
    z: u64,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        // SAFETY: the function's contract.
        let q = unsafe { borrow_fp8(l, codes) }?;
        let (p, g) = ([x, topk_ids, topk_weights, w1, w2], [dy, dx, dw1, dw2, dtopk]);
        routed(l, stream, tokens, p, g, Some(z), (wgrad_bf16, accumulate), Some(&q))
    })
}

/// A backward's gradient buffers (and dy), borrowed and checked, beside its inputs: dy, dx, dw1, dw2, dtopk from
/// `g`, each output disjoint from the others and from every input.
struct BwdBufs<W> {
    dy: Borrowed<bf16>,
    dx: Borrowed<bf16>,
    dw1: Borrowed<W>,
    dw2: Borrowed<W>,
    dtopk: Borrowed<f32>,
}

impl<W: WgradElem> BwdBufs<W> {
    fn new(l: &MegamoeLayer, t: usize, p: [u64; 5], g: [u64; 5]) -> Result<(In, Self)> {
        let c = &l.cfg;
        let gpu = &*l.gpu;
        let inp = In::new(l, t, p)?;
        let b = BwdBufs {
            dy: borrow::<bf16>(gpu, "dy", g[0], t * c.hidden, ROWS)?,
            dx: borrow::<bf16>(gpu, "dx", g[1], t * c.hidden, ROWS)?,
            dw1: borrow::<W>(gpu, "dw1", g[2], c.experts * 2 * c.intermediate * c.hidden, ROWS)?,
            dw2: borrow::<W>(gpu, "dw2", g[3], c.experts * c.hidden * c.intermediate, ROWS)?,
            dtopk: borrow::<f32>(gpu, "dtopk", g[4], t * c.top_k, 4)?,
        };
        let i = inp.spans();
        let outs = [b.dx.span, b.dw1.span, b.dw2.span, b.dtopk.span];
        check_disjoint(&outs, &[i[0], i[1], i[2], i[3], i[4], b.dy.span])?;
        Ok((inp, b))
    }
}

/// The routed backward (the routing made again), bf16 or, with `fp8`, the FP8 straight-through one on the caller's
/// codes; z recomputed (`z` None: the layer's scratch state) or read from the caller's buffer (`z`: lent to the
/// layer's lent-z state); the weight gradients in bf16 (`wgrad_bf16` non-zero) or f32.
#[allow(clippy::too_many_arguments)]
fn routed(
    l: &MegamoeLayer,
    stream: u64,
    t: usize,
    p: [u64; 5],
    g: [u64; 5],
    z: Option<u64>,
    (wgrad_bf16, accumulate): (c_int, c_int),
    fp8: Option<&BorrowedFp8>,
) -> Result<()> {
    if wgrad_bf16 != 0 {
        backward_routed::<bf16>(l, stream, t, p, g, z, accumulate != 0, fp8)
    } else {
        backward_routed::<f32>(l, stream, t, p, g, z, accumulate != 0, fp8)
    }
}

/// [`routed`] with the weight gradients' type.
#[allow(clippy::too_many_arguments)]
fn backward_routed<W: WgradElem>(
    l: &MegamoeLayer,
    stream: u64,
    t: usize,
    p: [u64; 5],
    g: [u64; 5],
    z: Option<u64>,
    accumulate: bool,
    fp8: Option<&BorrowedFp8>,
) -> Result<()> {
    let (inp, mut b) = BwdBufs::<W>::new(l, t, p, g)?;
    let mut zb = z.map(|z| borrow::<bf16>(&l.gpu, "z", z, z_elems(&l.cfg, t), ROWS)).transpose()?;
    let outs = [b.dx.span, b.dw1.span, b.dw2.span, b.dtopk.span];
    if let Some(zb) = &zb {
        check_disjoint(&outs, &[zb.span])?;
    }
    if let Some(q) = fp8 {
        check_disjoint(&outs, &q.spans)?;
    }
    l.run(stream, |st| {
        let State { layer, scratch, lent, .. } = st;
        let mut run = |layer: &mut MoeLayer, s: &mut Saved| {
            let grads = Grads { dx: &mut b.dx, dw1: &mut b.dw1, dw2: &mut b.dw2, dtopk: &mut b.dtopk, accumulate };
            match fp8 {
                None => {
                    layer.route_into(&inp.ids, t, s)?;
                    layer.backward(s, &b.dy, &inp.inputs(t), grads)
                }
                Some(q) => {
                    layer.route_into_fp8(&inp.ids, t, s)?;
                    layer.backward_fp8(s, &b.dy, &inp.inputs(t), &q.w, grads)
                }
            }
        };
        match zb.as_mut() {
            None => {
                let Some(s) = scratch.as_mut() else {
                    return bad("the routed backward: a layer that keeps z (save_z != 0) needs its forward's saved \
                                state (megamoe_backward, megamoe_backward_fp8) or its z (megamoe_backward_routed_z)"
                        .into());
                };
                run(layer, s)
            }
            Some(zb) => {
                let what = if fp8.is_some() { "megamoe_backward_routed_fp8_z" } else { "megamoe_backward_routed_z" };
                let s = lent_state(lent, what)?;
                with_lent_z(s, zb, |s| run(layer, s))
            }
        }
    })
}

/// A backward's arguments at the boundary.
struct Bwd<'a> {
    l: &'a MegamoeLayer,
    stream: u64,
    saved: &'a MegamoeSaved,
    /// x, topk_ids, topk_weights, w1, w2.
    p: [u64; 5],
    /// dy, dx, dw1, dw2, dtopk.
    g: [u64; 5],
}

impl Bwd<'_> {
    fn run(&self, wgrad_bf16: bool, accumulate: bool, fp8: Option<&MegamoeFp8Weights>) -> Result<()> {
        if wgrad_bf16 {
            backward::<bf16>(self, accumulate, fp8)
        } else {
            backward::<f32>(self, accumulate, fp8)
        }
    }
}

fn backward<W: WgradElem>(b: &Bwd<'_>, accumulate: bool, fp8: Option<&MegamoeFp8Weights>) -> Result<()> {
    let (l, stream, saved, p, g) = (b.l, b.stream, b.saved, b.p, b.g);
    // a ring slot's handle must be this layer's (its slot is read under this layer's lock below)
    let own = match &saved.kind {
        SavedKind::Own(s) => Some(s),
        SavedKind::Ring { state, .. } if Arc::ptr_eq(state, &l.state) => None,
        SavedKind::Ring { .. } => return bad("the saved state comes from another layer's forward".into()),
    };
    let t = saved.with(|s| Ok(s.tokens()))?;
    let (inp, mut b) = BwdBufs::<W>::new(l, t, p, g)?;
    l.run(stream, |st| {
        let capturing = l.gpu.capturing()?;
        let State { layer, ring, .. } = st;
        let saved = match (own, &saved.kind) {
            // a graph's replays would read this state after the handle freed it
            (Some(_), _) if capturing => {
                return bad("a backward captured in a CUDA graph reads its forward's saved state at every replay: \
                            give the layer a ring (megamoe_layer_reserve_saved) before the forward, so that the \
                            state is a slot the graph holds"
                    .into());
            }
            (Some(s), _) => s,
            (None, SavedKind::Ring { slot, generation, .. }) => {
                let r = ring_slot(ring, *slot, *generation)?;
                // a captured backward of an eager forward's slot: the graph holds the slot from now on
                r.captured |= capturing;
                &r.saved
            }
            (None, SavedKind::Own(_)) => unreachable!("an owned state is `own`"),
        };
        let grads = Grads { dx: &mut b.dx, dw1: &mut b.dw1, dw2: &mut b.dw2, dtopk: &mut b.dtopk, accumulate };
        match fp8 {
            None => layer.backward(saved, &b.dy, &inp.inputs(t), grads),
            Some(q) => layer.backward_fp8(saved, &b.dy, &inp.inputs(t), &filled(q)?.0, grads),
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> Result<std::sync::MutexGuard<'_, T>> {
    m.lock()
        .map_err(|_| Error::InvalidArgument("the handle is unusable: an earlier call panicked while holding it".into()))
}

/// W1 and W2 quantized to blockwise FP8 (e4m3, 128 x 128 scales) for a layer's FP8 forward and backward. Made by
/// [`megamoe_fp8_weights_new`], filled by [`megamoe_fp8_weights_quantize`], freed by [`megamoe_fp8_weights_free`].
pub struct MegamoeFp8Weights {
    gpu: Arc<Gpu>,
    /// The codes, and whether a quantization has filled them (an FP8 call on unfilled codes is refused).
    w: Mutex<(Fp8Weights, bool)>,
}

/// The codes of `q`, refused until a quantization filled them.
fn filled(q: &MegamoeFp8Weights) -> Result<std::sync::MutexGuard<'_, (Fp8Weights, bool)>> {
    let g = lock(&q.w)?;
    if !g.1 {
        return bad("the FP8 weights were never quantized: call megamoe_fp8_weights_quantize first".into());
    }
    Ok(g)
}

fn fp8_ref<'a>(w: *const MegamoeFp8Weights) -> Result<&'a MegamoeFp8Weights> {
    // SAFETY: as `layer_ref`, for `megamoe_fp8_weights_new`'s handles.
    unsafe { w.as_ref() }.ok_or_else(|| Error::InvalidArgument("the FP8 weights handle is null".into()))
}

/// FP8 weight buffers for `layer` (H and I multiples of 128; the FP8 forward needs H a multiple of 512), not yet
/// filled: quantize before the first FP8 forward, and after every change of the bf16 weights.
///
/// # Safety
/// `layer` null or live; `out` null (refused) or writable.
#[no_mangle]
pub unsafe extern "C" fn megamoe_fp8_weights_new(
    layer: *const MegamoeLayer,
    out: *mut *mut MegamoeFp8Weights,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        if out.is_null() {
            return bad("out is null".into());
        }
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let w = Fp8Weights::alloc(&lock(&l.state)?.layer)?;
        let h = MegamoeFp8Weights { gpu: l.gpu.clone(), w: Mutex::new((w, false)) };
        // SAFETY: `out` is non-null and writable (the function's contract).
        unsafe { hand_out(out, h) };
        Ok(())
    })
}

/// Quantize bf16 `w1` [E, 2I, H] and `w2` [E, H, I] into `w8` (after each optimizer step), ordered with `stream`
/// as the layer's calls are.
///
/// # Safety
/// Handles null or live; the addresses as [`megamoe_forward`]'s.
#[no_mangle]
pub unsafe extern "C" fn megamoe_fp8_weights_quantize(
    layer: *const MegamoeLayer,
    stream: u64,
    w8: *const MegamoeFp8Weights,
    w1: u64,
    w2: u64,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let q = fp8_ref(w8)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let c = &l.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        let w1 = borrow::<bf16>(&l.gpu, "w1", w1, e * 2 * i * h, ROWS)?;
        let w2 = borrow::<bf16>(&l.gpu, "w2", w2, e * h * i, ROWS)?;
        l.run(stream, |st| {
            let mut g = lock(&q.w)?;
            g.0.quantize(&l.gpu, &w1, &w2, &st.layer)?;
            g.1 = true;
            Ok(())
        })
    })
}

/// Free FP8 weights (null: nothing), in the device's stream order.
///
/// # Safety
/// `w8` null or a live handle; no call may use it after.
#[no_mangle]
pub unsafe extern "C" fn megamoe_fp8_weights_free(w8: *mut MegamoeFp8Weights) {
    // SAFETY: the function's contract.
    unsafe { free_handle(w8) }
}

/// The forward in blockwise FP8 ([`MoeLayer::forward_fp8`]: x and h quantized on the way, the weights from
/// `w8`; H a multiple of 512, I of 128), as [`megamoe_forward`] otherwise. Its saved state is taken by
/// [`megamoe_backward_fp8`] only.
///
/// # Safety
/// As [`megamoe_forward`]; `w8` null or live.
#[no_mangle]
pub unsafe extern "C" fn megamoe_forward_fp8(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w8: *const MegamoeFp8Weights,
    out: u64,
    saved: *mut *mut MegamoeSaved,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let q = fp8_ref(w8)?;
        if saved.is_null() {
            return bad("saved is null".into());
        }
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let c = &l.cfg;
        if tokens > c.max_tokens {
            return bad(format!("{tokens} tokens > the layer's maximum {}", c.max_tokens));
        }
        let g = &*l.gpu;
        let xb = borrow::<bf16>(g, "x", x, tokens * c.hidden, ROWS)?;
        let ids = borrow::<i32>(g, "topk_ids", topk_ids, tokens * c.top_k, 4)?;
        let w = borrow::<f32>(g, "topk_weights", topk_weights, tokens * c.top_k, 4)?;
        let mut y = borrow::<bf16>(g, "out", out, tokens * c.hidden, ROWS)?;
        check_disjoint(&[y.span], &[xb.span, ids.span, w.span])?;
        // SAFETY: `saved` is non-null and writable (the function's contract).
        unsafe {
            l.forward_saved(stream, tokens, saved, |layer, s| {
                let w8 = filled(q)?;
                let inp = Fp8Inputs { tokens, x: &xb, topk_ids: &ids, topk_weights: &w, weights: &w8.0 };
                layer.forward_fp8(&inp, &mut y, s)
            })
        }
    })
}

/// The backward of [`megamoe_forward_fp8`] ([`MoeLayer::backward_fp8`]: z recomputed in FP8, the GEMMs the
/// layer's `MEGAMOE_FP8_BACKWARD` names in FP8, dx by default; the straight-through gradient), with the bf16
/// weights `w8` was quantized from; as [`megamoe_backward`] otherwise.
///
/// # Safety
/// As [`megamoe_backward`]; `w8` null or live.
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward_fp8(
    layer: *const MegamoeLayer,
    stream: u64,
    saved: *const MegamoeSaved,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    w8: *const MegamoeFp8Weights,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let s = saved_ref(saved)?;
        let q = fp8_ref(w8)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let b = Bwd { l, stream, saved: s, p: [x, topk_ids, topk_weights, w1, w2], g: [dy, dx, dw1, dw2, dtopk] };
        b.run(wgrad_bf16 != 0, accumulate != 0, Some(q))
    })
}

/// The caller's FP8 weight codes as the layer's [`Fp8Weights`], borrowed: six device addresses at `codes`, in
/// this order: W1's codes u8 `[E 2I, H]`, W1's scales f32 `[E 2I / 128, H / 128]`, W2's codes u8 `[E H, I]`,
/// W2's scales f32 `[E H / 128, I / 128]`, W1's transposed codes u8 `[E H, 2I]` and their scales f32
/// `[E H / 128, 2I / 128]` (each expert's W1 transposed, for an FP8 dx). Its slices are leaked, never freed,
/// when it drops.
struct BorrowedFp8 {
    w: std::mem::ManuallyDrop<Fp8Weights>,
    spans: [Span; 6],
}

impl Drop for BorrowedFp8 {
    fn drop(&mut self) {
        // SAFETY: taken once, here, and never used after.
        let w = unsafe { std::mem::ManuallyDrop::take(&mut self.w) };
        w.w1.leak();
        w.w1_scales.leak();
        w.w2.leak();
        w.w2_scales.leak();
        if let Some((q, s)) = w.w1t {
            q.leak();
            s.leak();
        }
    }
}

/// The six code buffers at `codes` (see [`BorrowedFp8`]), checked as every borrowed buffer is, pairwise disjoint.
///
/// # Safety
/// `codes` null (refused) or readable for six `u64`.
unsafe fn borrow_fp8(l: &MegamoeLayer, codes: *const u64) -> Result<BorrowedFp8> {
    if codes.is_null() {
        return bad("codes is null: six device addresses expected (megamoe_fp8_quantize_into's buffers)".into());
    }
    // SAFETY: non-null and readable for six u64 (the function's contract).
    let q = unsafe { std::slice::from_raw_parts(codes, 6) };
    let (g, c) = (&*l.gpu, &l.cfg);
    let (e, h, i) = (c.experts, c.hidden, c.intermediate);
    if h % 128 != 0 || i % 128 != 0 {
        return bad(format!("FP8 weights are quantized in 128 x 128 blocks: H {h} and I {i} must be multiples of 128"));
    }
    let mut w1 = borrow::<u8>(g, "W1 codes", q[0], e * 2 * i * h, ROWS)?;
    let mut w1s = borrow::<f32>(g, "W1 scales", q[1], e * 2 * i / 128 * (h / 128), 4)?;
    let mut w2 = borrow::<u8>(g, "W2 codes", q[2], e * h * i, ROWS)?;
    let mut w2s = borrow::<f32>(g, "W2 scales", q[3], e * h / 128 * (i / 128), 4)?;
    let mut w1t = borrow::<u8>(g, "W1^T codes", q[4], e * 2 * i * h, ROWS)?;
    let mut w1ts = borrow::<f32>(g, "W1^T scales", q[5], e * 2 * i / 128 * (h / 128), 4)?;
    let spans = [w1.span, w1s.span, w2.span, w2s.span, w1t.span, w1ts.span];
    check_disjoint(&spans, &[])?;
    let take = |s: &mut Option<CudaSlice<u8>>| s.take().expect("a non-empty buffer");
    let takef = |s: &mut Option<CudaSlice<f32>>| s.take().expect("a non-empty buffer");
    let w = Fp8Weights {
        w1: take(&mut w1.slice),
        w1_scales: takef(&mut w1s.slice),
        w2: take(&mut w2.slice),
        w2_scales: takef(&mut w2s.slice),
        w1t: Some((take(&mut w1t.slice), takef(&mut w1ts.slice))),
        w2t: None,
    };
    Ok(BorrowedFp8 { w: std::mem::ManuallyDrop::new(w), spans })
}

/// Quantize bf16 `w1` [E, 2I, H] and `w2` [E, H, I] into the caller's six code buffers at `codes` (their order
/// and shapes: [`megamoe_forward_fp8_codes`]), ordered with `stream`: the FP8 weights as plain buffers (PyTorch
/// tensors) instead of a [`MegamoeFp8Weights`] handle, for callers whose values are tensors (custom operators).
///
/// # Safety
/// `layer` null or live; `codes` null or readable for six `u64`; the addresses as [`megamoe_forward`]'s.
#[no_mangle]
pub unsafe extern "C" fn megamoe_fp8_quantize_into(
    layer: *const MegamoeLayer,
    stream: u64,
    w1: u64,
    w2: u64,
    codes: *const u64,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        let c = &l.cfg;
        let (e, h, i) = (c.experts, c.hidden, c.intermediate);
        // SAFETY: the function's contract.
        let mut q = unsafe { borrow_fp8(l, codes) }?;
        let w1 = borrow::<bf16>(&l.gpu, "w1", w1, e * 2 * i * h, ROWS)?;
        let w2 = borrow::<bf16>(&l.gpu, "w2", w2, e * h * i, ROWS)?;
        check_disjoint(&q.spans, &[w1.span, w2.span])?;
        l.run(stream, |st| q.w.quantize(&l.gpu, &w1, &w2, &st.layer))
    })
}

/// The FP8 forward of a layer that recomputes z (save_z = 0), on the weights' codes in the caller's buffers and
/// with no saved state handed out (the layer's scratch state, as [`megamoe_forward`] given none): for callers
/// that carry no handle from forward to backward; the backward is [`megamoe_backward_routed_fp8`]. `codes`: six
/// device addresses, W1's codes u8 `[E 2I, H]`, W1's scales f32 `[E 2I / 128, H / 128]`, W2's codes u8
/// `[E H, I]`, W2's scales f32 `[E H / 128, I / 128]`, W1's transposed codes u8 `[E H, 2I]` and their scales f32
/// `[E H / 128, 2I / 128]`, as [`megamoe_fp8_quantize_into`] writes them (all six checked, the forward reads the
/// first four; the quantization writes W1's transpose whatever the layer's FP8 backward).
/// Bitwise [`megamoe_forward_fp8`] on codes of the same weights.
///
/// # Safety
/// As [`megamoe_forward`]; `codes` null or readable for six `u64`.
#[no_mangle]
pub unsafe extern "C" fn megamoe_forward_fp8_codes(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    codes: *const u64,
    out: u64,
) -> c_int {
    // SAFETY: the function's contract.
    guard(|| unsafe { forward_fp8_codes(layer, stream, tokens, [x, topk_ids, topk_weights], codes, out, None) })
}

/// [`megamoe_forward_fp8_codes`] for a layer that keeps z (save_z != 0, the in-producer gather): z written into the
/// caller's buffer `z` (bf16 `[tokens k, 2I]`, as [`megamoe_forward_z`]'s) by the 128 x 256 FP8 GEMM1 (the
/// default kernels; with `MEGAMOE_FP8_TILES=128` or `MEGAMOE_FP8_HQ=pass` nothing is written there and the backward
/// recomputes z); its backward is [`megamoe_backward_routed_fp8_z`] with the same `z`.
///
/// # Safety
/// As [`megamoe_forward_fp8_codes`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_forward_fp8_codes_z(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    codes: *const u64,
    out: u64,
    z: u64,
) -> c_int {
    // SAFETY: the function's contract.
    guard(|| unsafe { forward_fp8_codes(layer, stream, tokens, [x, topk_ids, topk_weights], codes, out, Some(z)) })
}

/// [`megamoe_forward_fp8_codes`] (`z` None: the scratch state of a layer that recomputes z) or
/// [`megamoe_forward_fp8_codes_z`] (the caller's z lent to the lent-z state).
///
/// # Safety
/// As [`megamoe_forward_fp8_codes`].
unsafe fn forward_fp8_codes(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    [x, topk_ids, topk_weights]: [u64; 3],
    codes: *const u64,
    out: u64,
    z: Option<u64>,
) -> Result<()> {
    let l = layer_ref(layer)?;
    let _cur = CurrentCtx::enter(&l.gpu)?;
    let c = &l.cfg;
    if tokens > c.max_tokens {
        return bad(format!("{tokens} tokens > the layer's maximum {}", c.max_tokens));
    }
    // SAFETY: the function's contract.
    let q = unsafe { borrow_fp8(l, codes) }?;
    let g = &*l.gpu;
    let xb = borrow::<bf16>(g, "x", x, tokens * c.hidden, ROWS)?;
    let ids = borrow::<i32>(g, "topk_ids", topk_ids, tokens * c.top_k, 4)?;
    let w = borrow::<f32>(g, "topk_weights", topk_weights, tokens * c.top_k, 4)?;
    let mut y = borrow::<bf16>(g, "out", out, tokens * c.hidden, ROWS)?;
    let mut zb = z.map(|z| borrow::<bf16>(g, "z", z, z_elems(c, tokens), ROWS)).transpose()?;
    let mut ins = vec![xb.span, ids.span, w.span];
    ins.extend(q.spans);
    let mut outs = vec![y.span];
    outs.extend(zb.as_ref().map(|z| z.span));
    check_disjoint(&outs, &ins)?;
    l.run(stream, |st| {
        let State { layer, scratch, lent, .. } = st;
        let inp = Fp8Inputs { tokens, x: &xb, topk_ids: &ids, topk_weights: &w, weights: &q.w };
        match zb.as_mut() {
            None => {
                let Some(s) = scratch.as_mut() else {
                    return bad("megamoe_forward_fp8_codes: a layer that keeps z (save_z != 0) has no scratch state: \
                                use megamoe_forward_fp8, or megamoe_forward_fp8_codes_z (z into the caller's buffer)"
                        .into());
                };
                layer.forward_fp8(&inp, &mut y, s)
            }
            Some(zb) => {
                let s = lent_state(lent, "megamoe_forward_fp8_codes_z")?;
                with_lent_z(s, zb, |s| layer.forward_fp8(&inp, &mut y, s))
            }
        }
    })
}

/// The backward of [`megamoe_forward_fp8_codes`] without a saved state: the routing layout made again from
/// `topk_ids` (one ~13 us launch at 30B) into the layer's scratch state, then [`megamoe_backward_fp8`]'s
/// straight-through backward on the codes at `codes` (all six: the transposed W1 serves an FP8 dx) and the bf16
/// `w1`, `w2` they were quantized from. Bitwise [`megamoe_backward_fp8`] of the forward's own state.
///
/// # Safety
/// As [`megamoe_backward`]; `codes` null or readable for six `u64`.
#[no_mangle]
pub unsafe extern "C" fn megamoe_backward_routed_fp8(
    layer: *const MegamoeLayer,
    stream: u64,
    tokens: usize,
    dy: u64,
    x: u64,
    topk_ids: u64,
    topk_weights: u64,
    w1: u64,
    w2: u64,
    codes: *const u64,
    dx: u64,
    dw1: u64,
    dw2: u64,
    dtopk: u64,
    wgrad_bf16: c_int,
    accumulate: c_int,
) -> c_int {
    guard(|| {
        let l = layer_ref(layer)?;
        let _cur = CurrentCtx::enter(&l.gpu)?;
        // SAFETY: the function's contract.
        let q = unsafe { borrow_fp8(l, codes) }?;
        let (p, g) = ([x, topk_ids, topk_weights, w1, w2], [dy, dx, dw1, dw2, dtopk]);
        routed(l, stream, tokens, p, g, None, (wgrad_bf16, accumulate), Some(&q))
    })
}

/// Wait for the forward of `saved` and every backward of it queued so far, and report what the device found:
/// [`MEGAMOE_INVALID_ARGUMENT`] for an expert id outside -1..E (those calls wrote nothing),
/// [`MEGAMOE_TIMEOUT`] for an expired device wait. Synchronises the layer's stream: for tests and debugging,
/// not for every step.
///
/// # Safety
/// `saved` must be null or a live handle of [`megamoe_forward`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_saved_check(saved: *const MegamoeSaved) -> c_int {
    guard(|| {
        let s = saved_ref(saved)?;
        let _cur = CurrentCtx::enter(&s.gpu)?;
        s.with(|sv| sv.check(&s.gpu))
    })
}

/// Whether `saved` can still be used, without synchronising: [`MEGAMOE_OK`], or [`MEGAMOE_INVALID_ARGUMENT`] for
/// null or a ring slot that a later forward overwrote (the message says which).
///
/// # Safety
/// As [`megamoe_saved_check`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_saved_status(saved: *const MegamoeSaved) -> c_int {
    guard(|| saved_ref(saved)?.with(|_| Ok(())))
}

/// Tokens of the forward that made `saved` (0 for null, or a ring slot a later forward overwrote).
///
/// # Safety
/// As [`megamoe_saved_check`].
#[no_mangle]
pub unsafe extern "C" fn megamoe_saved_tokens(saved: *const MegamoeSaved) -> usize {
    saved_ref(saved).and_then(|s| s.with(|sv| Ok(sv.tokens()))).unwrap_or(0)
}

/// Free a saved state (null: nothing); its device memory is released in the layer's stream order, after the
/// backwards already queued.
///
/// # Safety
/// `saved` must be null or a live handle of [`megamoe_forward`]; no call may use it after.
#[no_mangle]
pub unsafe extern "C" fn megamoe_saved_free(saved: *mut MegamoeSaved) {
    // SAFETY: the function's contract.
    unsafe { free_handle(saved) }
}

/// Copy the calling thread's last error message into `buf` (at most `len` bytes with the terminating NUL;
/// `buf` may be null with `len` 0) and return the message's full length in bytes (without the NUL).
///
/// # Safety
/// `buf` must be null or point to `len` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn megamoe_last_error(buf: *mut c_char, len: usize) -> usize {
    LAST_ERROR.with(|l| {
        let m = l.borrow();
        if !buf.is_null() && len > 0 {
            let n = m.len().min(len - 1);
            // SAFETY: `buf` holds `len` bytes (the function's contract) and n + 1 <= len.
            unsafe {
                std::ptr::copy_nonoverlapping(m.as_ptr(), buf as *mut u8, n);
                *buf.add(n) = 0;
            }
        }
        m.len()
    })
}

/// Hand the memory that megamoe's freed buffers left cached in device `device`'s default memory pool back to
/// the driver, keeping `keep_bytes` (megamoe keeps it cached between calls, as PyTorch's allocator does, and
/// PyTorch's allocator cannot use it). Synchronises megamoe's stream on that device.
#[no_mangle]
pub extern "C" fn megamoe_trim_pool(device: c_int, keep_bytes: usize) -> c_int {
    guard(|| {
        if device < 0 {
            return bad(format!("device {device} is negative"));
        }
        let gpu = megamoe::gpu(device as usize)?;
        let _cur = CurrentCtx::enter(&gpu)?;
        gpu.trim_pool(keep_bytes)
    })
}

/// The crate's version, a static NUL-terminated string.
#[no_mangle]
pub extern "C" fn megamoe_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr() as *const c_char
}
