//! The thin host runtime: detection, the per-device module cache, checked launches, device memory helpers.
//!
//! Debug switch: `MEGAMOE_DEBUG=1` writes the embedded PTX and ptxas report to `MEGAMOE_DUMP_DIR` (default: the
//! system temp dir) when the module is loaded, and prints every launch configuration to stderr.
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{CUdevice_attribute, CUfunction_attribute};
use cudarc::driver::{
    result, CudaContext, CudaEvent, CudaFunction, CudaModule, CudaSlice, CudaStream, DevicePtr, DeviceRepr,
};
use megamoe_kernels::manifest::{self, KernelSpec};

use crate::error::{Context, Error, Result};

/// The kernels of one build: PTX (always), a cubin for sm_90a (empty when ptxas was absent at build time) and
/// the ptxas `-v` report.
#[derive(Clone, Copy, Debug)]
pub struct Image {
    /// PTX text for sm_90a.
    pub ptx: &'static str,
    /// ptxas output for sm_90a; empty when the build had no ptxas (then the driver JIT-compiles the PTX).
    pub cubin: &'static [u8],
    /// ptxas `-v` report of the cubin.
    pub ptxas_report: &'static str,
}

/// True when `MEGAMOE_DEBUG` is set to anything but `0`.
pub fn debug_enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("MEGAMOE_DEBUG").is_ok_and(|v| !v.is_empty() && v != "0"))
}

/// Whether a CUDA driver library can be loaded (no panic, no device touched).
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the driver library.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// Number of CUDA devices; [`Error::NoDriver`] without a driver.
pub fn device_count() -> Result<usize> {
    if !driver_present() {
        return Err(Error::NoDriver);
    }
    match result::init() {
        Ok(()) => {}
        Err(e) if e.0 == cudarc::driver::sys::CUresult::CUDA_ERROR_NO_DEVICE => return Ok(0),
        Err(e) => return Err(e).ctx(|| "cuInit".into()),
    }
    Ok(result::device::get_count().ctx(|| "cuDeviceGetCount".into())? as usize)
}

/// Launch geometry: a 1D block of `block` threads, a 3D grid, `smem` bytes of dynamic shared memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// Grid in blocks.
    pub grid: (u32, u32, u32),
    /// Threads per block.
    pub block: u32,
    /// Dynamic shared memory per block in bytes.
    pub smem: u32,
}

impl Launch {
    /// A 1D grid.
    pub const fn new(grid: u32, block: u32, smem: u32) -> Self {
        Launch { grid: (grid, 1, 1), block, smem }
    }
}

struct Loaded {
    func: CudaFunction,
    smem_limit: u32,
    /// The co-resident clusters (`max_active_clusters`) and the shared memory they were queried for.
    clusters: Option<(u32, u32)>,
    /// The co-resident blocks on the device (`max_resident_blocks`): block size, shared memory, blocks.
    blocks: Option<(u32, u32, u32)>,
    /// Whether the kernel's PTX holds `griddepcontrol.wait` (its entry waits for the grids it depends on), so it
    /// may be launched with programmatic stream serialization ([`pdl_enabled`]).
    pdl: bool,
}

thread_local! {
    static PDL: std::cell::Cell<Option<bool>> = const { std::cell::Cell::new(None) };
}

/// Whether kernels are launched with programmatic dependent launch (`CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`,
/// Hopper): each kernel whose entry waits for its predecessors (`griddepcontrol.wait`, the module's kernels of the
/// layer's chains) is then launched without waiting for the kernel before it on the stream to be retired: no
/// kernel triggers early, so its grid starts once every block of the previous one has exited and waits at its
/// entry for that grid's memory (what is saved is the launch latency at each boundary, not overlap of blocks),
/// and the run-time tile counters are not zeroed before their
/// launches (each launch's last take resets its counter, `scheduler::last_take`), so no memset node sits between
/// the GEMMs. The same bits either way. `MEGAMOE_PDL` (read once) = `on` or `off` (or unset: off); overridden on a
/// thread by [`with_pdl`].
pub fn pdl_enabled() -> Result<bool> {
    static ENV: crate::gemm::EnvPolicy<bool> = std::sync::OnceLock::new();
    crate::gemm::policy(&PDL, &ENV, "MEGAMOE_PDL", &[("on", true), ("off", false), ("", false)])
}

/// Run `f` with programmatic dependent launch on or off for every launch enqueued on this thread inside it.
pub fn with_pdl<R>(on: bool, f: impl FnOnce() -> R) -> R {
    crate::gemm::with_override(&PDL, on, f)
}

/// Whether the body of entry `kernel` in `ptx` holds `griddepcontrol.wait`.
#[doc(hidden)]
pub fn ptx_entry_waits(ptx: &str, kernel: &str) -> bool {
    let head = format!(".entry {kernel}(");
    let Some(at) = ptx.find(&head) else { return false };
    let body = &ptx[at + head.len()..];
    let end = body.find(".entry ").unwrap_or(body.len());
    body[..end].contains("griddepcontrol.wait")
}

/// One GPU: its primary context, a stream, the lazily loaded module, and its functions.
///
/// Every megamoe call runs on [`Gpu::stream`], and cudarc's per-buffer event tracking is off on this context: a
/// buffer that another stream writes, reads or frees must be ordered with this stream by the caller (an event
/// recorded on one and waited on by the other, or a synchronisation), or the kernels may read stale data or
/// memory already freed.
pub struct Gpu {
    ordinal: usize,
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    name: String,
    sm_count: u32,
    smem_optin: u32,
    image: Image,
    module: OnceLock<Arc<CudaModule>>,
    funcs: Mutex<HashMap<&'static str, Loaded>>,
    /// While profiling ([`Gpu::profile_start`]): a device event before and after every launch, in order.
    prof: Mutex<Option<Vec<Marked>>>,
    /// Whether `prof` is recording (read on every launch without taking its lock).
    profiling: AtomicBool,
    /// u32 [1]: the tile counter of the kernels scheduled at run time (the weight gradients', the M-grouped `_dyn`
    /// kernels), zeroed before each such launch ([`Gpu::launch_counted`]); every launch is on this device's one
    /// stream, so none overlap.
    tile_counters: CudaSlice<u32>,
    /// Held while a counter's zeroing and its kernel are enqueued, so that host threads sharing this device do
    /// not interleave them (zero, zero, kernel, kernel would start the second kernel from the first's count).
    counted: Mutex<()>,
    /// Set by [`Gpu::fill_tile_counter`]: the next counted launch zeroes the counter even under programmatic
    /// dependent launch (which otherwise relies on each launch's last take leaving it zero).
    counter_filled: AtomicBool,
    /// The weight gradients' per-expert tensor maps ([`WGRAD_MAPS_EXPERTS`] x 2 x 128 bytes), written by
    /// `wgrad_expert_maps` just before each weight-gradient kernel under `counted` (`gemm::launch_wgrad`).
    expert_maps: CudaSlice<u8>,
}

/// The most experts of one weight-gradient launch (its per-expert tensor maps live in one buffer per device): the
/// routing's limit.
pub const WGRAD_MAPS_EXPERTS: usize = crate::route::MAX_EXPERTS;

/// A profiled launch: the kernel and device events recorded before and after it.
type Marked = (&'static str, CudaEvent, CudaEvent);

/// One launch of a profiled range ([`Gpu::profile_end`]): the kernel, when it started after the first launch's
/// start, how long it ran, and the idle time between the end of the previous launch and its start (device
/// events: launch gaps and host stalls show as `gap_us`, time inside the kernel as `us`).
#[derive(Clone, Debug)]
pub struct LaunchTime {
    /// Kernel name.
    pub kernel: &'static str,
    /// Microseconds from the first launch's start event to this one's.
    pub at_us: f64,
    /// Microseconds between this launch's two events.
    pub us: f64,
    /// Microseconds between the previous launch's end event and this one's start (0 for the first).
    pub gap_us: f64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("ordinal", &self.ordinal).field("name", &self.name).finish()
    }
}

fn cache() -> &'static Mutex<HashMap<usize, Arc<Gpu>>> {
    static C: OnceLock<Mutex<HashMap<usize, Arc<Gpu>>>> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn default_pool(ctx: &Arc<CudaContext>) -> Result<cudarc::driver::sys::CUmemoryPool> {
    let mut pool = std::ptr::null_mut();
    ctx.bind_to_thread().ctx(|| "binding the context".into())?;
    // SAFETY: `pool` is a valid out-pointer and the device handle comes from a live context.
    unsafe { cudarc::driver::sys::cuDeviceGetDefaultMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .ctx(|| "reading the default memory pool".into())?;
    Ok(pool)
}

/// Buffers come from the device's default memory pool (stream-ordered `cuMemAllocAsync`). Its release
/// threshold is 0 by default: every synchronisation hands the freed memory back to the driver, and the next
/// large allocation maps it again on the host while the GPU waits (measured: ~1 ms per forward + backward of
/// the 30B layer with z saved, whose forward allocates ~0.9 GB of saved activations). Keep it cached instead,
/// as PyTorch's caching allocator does; [`Gpu::trim_pool`] hands it back.
fn keep_pool_memory(ctx: &Arc<CudaContext>) -> Result<()> {
    let pools = ctx.attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED);
    if pools.ctx(|| "reading MEMORY_POOLS_SUPPORTED".into())? == 0 {
        return Ok(()); // cudarc allocates synchronously there: nothing is cached or released per sync
    }
    let pool = default_pool(ctx)?;
    let mut threshold: u64 = u64::MAX;
    // SAFETY: RELEASE_THRESHOLD takes a pointer to a u64 (cuMemPoolSetAttribute's contract).
    unsafe {
        cudarc::driver::sys::cuMemPoolSetAttribute(
            pool,
            cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
    }
    .result()
    .ctx(|| "setting the memory pool's release threshold".into())
}

impl Gpu {
    /// Device `ordinal`, opened once per process and cached; a typed error (never a panic) when there is no
    /// driver, no such device, or a device other than Hopper (sm_90). Sets the release threshold of the
    /// device's default memory pool to keep freed memory cached (see [`Gpu::trim_pool`]).
    pub fn open(ordinal: usize, image: Image) -> Result<Arc<Gpu>> {
        let count = device_count()?;
        if ordinal >= count {
            return Err(Error::NoDevice { ordinal, count });
        }
        let mut c = cache().lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = c.get(&ordinal) {
            return Ok(g.clone());
        }
        let ctx = CudaContext::new(ordinal).ctx(|| format!("creating the context of device {ordinal}"))?;
        let name = ctx.name().unwrap_or_else(|_| "unknown".into());
        let (major, minor) = ctx.compute_capability().ctx(|| "reading the compute capability".into())?;
        if (major, minor) != (9, 0) {
            return Err(Error::UnsupportedDevice { ordinal, name, major, minor });
        }
        let attr = |a| ctx.attribute(a).ctx(|| format!("reading {a:?}"));
        let sm_count = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32;
        let smem_optin = attr(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)? as u32;
        // One stream per device and explicit ordering: cudarc's per-buffer event tracking is not needed.
        // SAFETY: no buffers exist yet on this context.
        unsafe { ctx.disable_event_tracking() };
        keep_pool_memory(&ctx)?;
        // a stream of its own, not the legacy default stream: that one cannot be captured into a CUDA graph
        let stream = ctx.new_stream().ctx(|| "creating the device's stream".into())?;
        let tile_counters = stream.alloc_zeros::<u32>(1).ctx(|| "allocating the tile counter".into())?;
        let expert_maps = stream
            .alloc_zeros::<u8>(WGRAD_MAPS_EXPERTS * 256)
            .ctx(|| "allocating the per-expert tensor maps".into())?;
        stream.synchronize().ctx(|| "zeroing the tile counters".into())?;
        let g = Arc::new(Gpu {
            ordinal,
            ctx,
            stream,
            name,
            sm_count,
            smem_optin,
            image,
            module: OnceLock::new(),
            funcs: Mutex::new(HashMap::new()),
            prof: Mutex::new(None),
            profiling: AtomicBool::new(false),
            tile_counters,
            counted: Mutex::new(()),
            counter_filled: AtomicBool::new(false),
            expert_maps,
        });
        c.insert(ordinal, g.clone());
        Ok(g)
    }

    /// Hand the device's cached pool memory (what freed buffers left in the default memory pool, see
    /// [`Gpu::open`]) back to the driver, keeping `keep_bytes`; waits for the stream first.
    pub fn trim_pool(&self, keep_bytes: usize) -> Result<()> {
        self.sync()?;
        let pool = default_pool(&self.ctx)?;
        // SAFETY: a valid pool handle of this context's device; trimming only releases unused memory.
        unsafe { cudarc::driver::sys::cuMemPoolTrimTo(pool, keep_bytes) }
            .result()
            .ctx(|| format!("trimming the memory pool of device {}", self.ordinal))
    }

    /// Device ordinal.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }
    /// Device name as the driver reports it.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Device address of the tile counter of a kernel whose blocks take their tiles at run time
    /// (`WgradGemm::sched`, `GroupedGemm::sched`; zeroed before each launch by `launch_counted`).
    pub(crate) fn tile_counters(&self) -> u64 {
        dptr(&self.tile_counters, &self.stream)
    }
    /// The tile counter's value after the work enqueued so far (waits for it): a kernel scheduled at run time
    /// leaves it at its tile count (one increment per tile taken). For tests that the run-time walk ran.
    #[doc(hidden)]
    pub fn tile_counter_value(&self) -> Result<u32> {
        Ok(self.download(&self.tile_counters)?[0])
    }
    /// Fill the tile counter's bytes with `byte` in stream order (tests poison it, so a launch that did not run
    /// the run-time walk cannot leave the value a previous one did).
    #[doc(hidden)]
    pub fn fill_tile_counter(&self, byte: u8) -> Result<()> {
        self.counter_filled.store(true, Ordering::Relaxed);
        // SAFETY: the counter is a live allocation of one u32.
        unsafe { result::memset_d8_async(self.tile_counters(), byte, 4, self.stream.cu_stream()) }
            .ctx(|| "filling the tile counter".to_string())
    }
    /// Device address of the weight gradients' per-expert tensor maps for `experts` experts (an
    /// `InvalidArgument` past [`WGRAD_MAPS_EXPERTS`]).
    pub(crate) fn expert_maps(&self, experts: usize) -> Result<u64> {
        if experts > WGRAD_MAPS_EXPERTS {
            return Err(Error::InvalidArgument(format!(
                "weight gradients of {experts} experts: at most {WGRAD_MAPS_EXPERTS} in one launch"
            )));
        }
        Ok(dptr(&self.expert_maps, &self.stream))
    }
    /// Number of streaming multiprocessors.
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }
    /// Largest dynamic shared memory a block may opt into, bytes.
    pub fn smem_optin(&self) -> u32 {
        self.smem_optin
    }
    /// The stream every megamoe call on this device is ordered on.
    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }
    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    fn module(&self) -> Result<&Arc<CudaModule>> {
        if let Some(m) = self.module.get() {
            return Ok(m);
        }
        if debug_enabled() {
            let dir =
                std::env::var_os("MEGAMOE_DUMP_DIR").map(std::path::PathBuf::from).unwrap_or_else(std::env::temp_dir);
            let ptx = dir.join(format!("megamoe-{}.ptx", std::process::id()));
            match std::fs::write(&ptx, self.image.ptx) {
                Ok(()) => eprintln!("[megamoe] PTX written to {}", ptx.display()),
                Err(e) => eprintln!("[megamoe] could not write the PTX to {}: {e}", ptx.display()),
            }
            eprintln!("[megamoe] ptxas -v report:\n{}", self.image.ptxas_report);
        }
        let src = if self.image.cubin.is_empty() {
            cudarc::nvrtc::Ptx::from_src(self.image.ptx)
        } else {
            cudarc::nvrtc::Ptx::from_binary(self.image.cubin.to_vec())
        };
        let what = if self.image.cubin.is_empty() { "PTX (JIT)" } else { "cubin" };
        let m = self
            .ctx
            .load_module(src)
            .ctx(|| format!("loading the kernel module ({what}) on device {}", self.ordinal))?;
        Ok(self.module.get_or_init(|| m))
    }

    /// Check a launch against the kernel's manifest entry and the device's limits; load the function and raise
    /// its dynamic shared-memory limit when needed.
    fn prepare(&self, kernel: &'static str, cfg: &Launch) -> Result<CudaFunction> {
        let spec: &KernelSpec = manifest::find(kernel).ok_or_else(|| Error::MissingKernel(kernel.into()))?;
        let bad = |why: String| Err(Error::InvalidLaunch { kernel: spec.name, why });
        if cfg.block == 0 || cfg.block > 1024 || cfg.block % 32 != 0 {
            return bad(format!("block of {} threads (whole warps, 32..=1024)", cfg.block));
        }
        if spec.max_threads > 0 && cfg.block > spec.max_threads {
            return bad(format!("block of {} threads > its .maxntid {}", cfg.block, spec.max_threads));
        }
        let (gx, gy, gz) = cfg.grid;
        if gx == 0 || gy == 0 || gz == 0 || gy > 65535 || gz > 65535 {
            return bad(format!("grid {:?}", cfg.grid));
        }
        if cfg.smem > self.smem_optin {
            return bad(format!("{} bytes of shared memory > the device's {}", cfg.smem, self.smem_optin));
        }
        if spec.cluster > 1 && gx % spec.cluster != 0 {
            return bad(format!("grid {:?}: not a multiple of its {} CTAs per cluster", cfg.grid, spec.cluster));
        }
        let module = self.module()?.clone();
        let mut funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        if !funcs.contains_key(kernel) {
            let func = module.load_function(kernel).map_err(|_| Error::MissingKernel(kernel.into()))?;
            let pdl = ptx_entry_waits(self.image.ptx, kernel);
            funcs.insert(kernel, Loaded { func, smem_limit: 48 * 1024, clusters: None, blocks: None, pdl });
        }
        let l = funcs.get_mut(kernel).expect("inserted above");
        if cfg.smem > l.smem_limit {
            l.func
                .set_attribute(CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, cfg.smem as i32)
                .ctx(|| format!("raising the shared-memory limit of {kernel} to {}", cfg.smem))?;
            l.smem_limit = cfg.smem;
        }
        Ok(l.func.clone())
    }

    /// How many clusters of `kernel` (a kernel written for clusters, `.reqnctapercluster`) can be resident at
    /// once with `cfg`'s block and shared memory (`cuOccupancyMaxActiveClusters`); a persistent grid larger
    /// than that runs its last clusters in a second wave. Queried once per kernel and shared-memory size; none
    /// fitting is an `InvalidArgument`.
    pub fn max_active_clusters(&self, kernel: &'static str, cfg: Launch) -> Result<u32> {
        let cached = |gpu: &Gpu| {
            let funcs = gpu.funcs.lock().unwrap_or_else(|p| p.into_inner());
            funcs.get(kernel).and_then(|l| l.clusters).filter(|&(smem, _)| smem == cfg.smem).map(|(_, n)| n)
        };
        if let Some(n) = cached(self) {
            return Ok(n);
        }
        let func = self.prepare(kernel, &cfg)?;
        let lc = cudarc::driver::LaunchConfig {
            grid_dim: cfg.grid,
            block_dim: (cfg.block, 1, 1),
            shared_mem_bytes: cfg.smem,
        };
        let n = func
            .occupancy_max_active_clusters(lc, &self.stream)
            .ctx(|| format!("querying the active clusters of {kernel}"))?;
        if debug_enabled() {
            eprintln!("[megamoe] {kernel}: at most {n} active clusters ({} B of shared memory)", cfg.smem);
        }
        if n == 0 {
            return Err(Error::InvalidArgument(format!(
                "{kernel}: no cluster of its {} B of shared memory per block fits on device {}",
                cfg.smem, self.ordinal
            )));
        }
        let mut funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = funcs.get_mut(kernel) {
            l.clusters = Some((cfg.smem, n));
        }
        Ok(n)
    }

    /// Whether loaded `kernel`'s entry waits for its predecessors (`griddepcontrol.wait` in its PTX).
    fn waits_for_predecessors(&self, kernel: &'static str) -> bool {
        let funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        funcs.get(kernel).is_some_and(|l| l.pdl)
    }

    /// How many blocks of `kernel` with `cfg`'s block and shared memory can be resident on the device at once
    /// (`cuOccupancyMaxActiveBlocksPerMultiprocessor` times the SMs, when nothing else runs): a grid of at most
    /// that many may wait on itself (a grid barrier). Queried once per kernel, block and shared-memory size.
    pub fn max_resident_blocks(&self, kernel: &'static str, cfg: Launch) -> Result<u32> {
        let key = (cfg.block, cfg.smem);
        {
            let funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((b, m, n)) = funcs.get(kernel).and_then(|l| l.blocks) {
                if (b, m) == key {
                    return Ok(n);
                }
            }
        }
        let func = self.prepare(kernel, &cfg)?;
        let per_sm = func
            .occupancy_max_active_blocks_per_multiprocessor(cfg.block, cfg.smem as usize, None)
            .ctx(|| format!("querying the active blocks of {kernel}"))?;
        let n = per_sm.saturating_mul(self.sm_count);
        if debug_enabled() {
            eprintln!(
                "[megamoe] {kernel}: at most {n} resident blocks ({per_sm} an SM, {} B of shared memory)",
                cfg.smem
            );
        }
        let mut funcs = self.funcs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = funcs.get_mut(kernel) {
            l.blocks = Some((key.0, key.1, n));
        }
        Ok(n)
    }

    /// [`Gpu::launch`], with the run-time tile counter at `counter` (this device's [`Gpu::tile_counters`], or 0:
    /// none) zeroed just before it in stream order; the pair is enqueued under a lock, whole, whatever other host
    /// threads enqueue on this device meanwhile. SAFETY: as [`Gpu::launch`].
    pub(crate) unsafe fn launch_counted<P: Copy>(
        &self,
        counter: u64,
        kernel: &'static str,
        cfg: Launch,
        params: &P,
    ) -> Result<()> {
        if counter == 0 {
            return self.launch(kernel, cfg, params);
        }
        let _pair = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        self.zero_and_launch(counter, kernel, cfg, params)
    }

    /// [`Gpu::launch_counted`] after `before` (a launch that prepares what the kernel reads: the weight gradients'
    /// per-expert tensor maps), all of it enqueued under the same lock, whole (the prepared data, like the
    /// counter, is one per device). Stream order is what keeps `before` from rewriting data an earlier kernel
    /// still reads: with programmatic dependent launch ([`pdl_enabled`]) `before` may be scheduled while the
    /// previous grid ends, and its entry's `griddepcontrol.wait` (`wgrad_expert_maps` has it, as every kernel the
    /// attribute is given to) holds its writes until that grid is done; a CUDA graph holding such a triple must
    /// not be replayed beside other work on this device. SAFETY: as [`Gpu::launch`], for both launches.
    pub(crate) unsafe fn launch_counted_after<P: Copy, Q: Copy>(
        &self,
        before: (&'static str, Launch, &Q),
        counter: u64,
        kernel: &'static str,
        cfg: Launch,
        params: &P,
    ) -> Result<()> {
        let _whole = self.counted.lock().unwrap_or_else(|p| p.into_inner());
        self.launch(before.0, before.1, before.2)?;
        self.zero_and_launch(counter, kernel, cfg, params)
    }

    /// The counter at `counter` (0: none) zeroed, then `kernel`, in stream order. SAFETY: as [`Gpu::launch`]; the
    /// caller holds `counted`.
    unsafe fn zero_and_launch<P: Copy>(
        &self,
        counter: u64,
        kernel: &'static str,
        cfg: Launch,
        params: &P,
    ) -> Result<()> {
        // with programmatic dependent launch the counter is left zero by the previous launch's last take (unless a
        // test filled it: `fill_tile_counter`, zeroed once here)
        if counter != 0 && (!pdl_enabled()? || self.counter_filled.swap(false, Ordering::Relaxed)) {
            self.zero_words(counter, 1)?;
        }
        self.launch(kernel, cfg, params)
    }

    /// Launch `kernel` with its one argument `params` (a `#[repr(C)]` block or a single pointer) on this
    /// device's stream. Errors of the launch itself are returned; faults inside the kernel surface at the next
    /// [`Gpu::sync`].
    ///
    /// # Safety
    /// `params` must be the argument type the kernel declares, and every pointer in it must be valid for what the
    /// kernel does with it at `cfg`.
    pub unsafe fn launch<P: Copy>(&self, kernel: &'static str, cfg: Launch, params: &P) -> Result<()> {
        self.launch_with(kernel, cfg, params, false).map(|_| ())
    }

    /// [`Gpu::launch`] as a cooperative launch (`CU_LAUNCH_ATTRIBUTE_COOPERATIVE`): the driver launches the grid
    /// only if every block of it can be resident at once, for a kernel whose blocks wait for each other (a grid
    /// barrier). `Ok(false)` when the grid cannot be (`CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE`: nothing was
    /// launched; the caller takes another path), `Ok(true)` when launched.
    ///
    /// # Safety
    /// As [`Gpu::launch`].
    pub(crate) unsafe fn launch_cooperative<P: Copy>(
        &self,
        kernel: &'static str,
        cfg: Launch,
        params: &P,
    ) -> Result<bool> {
        self.launch_with(kernel, cfg, params, true)
    }

    /// The launch itself: with programmatic stream serialization when [`pdl_enabled`] and the kernel waits for its
    /// predecessors, cooperative when asked (`cuLaunchKernelEx` with those attributes), else a plain launch.
    /// `Ok(false)` only for a cooperative grid too large to be resident. SAFETY: as [`Gpu::launch`].
    unsafe fn launch_with<P: Copy>(
        &self,
        kernel: &'static str,
        cfg: Launch,
        params: &P,
        cooperative: bool,
    ) -> Result<bool> {
        use cudarc::driver::sys;
        let func = self.prepare(kernel, &cfg)?;
        if debug_enabled() {
            eprintln!(
                "[megamoe] launch {kernel} on device {}: grid {:?} block {} smem {} B, params {} B{}",
                self.ordinal,
                cfg.grid,
                cfg.block,
                cfg.smem,
                std::mem::size_of::<P>(),
                if cooperative { ", cooperative" } else { "" }
            );
        }
        self.ctx.bind_to_thread().ctx(|| "binding the context".into())?;
        let before = if self.profiling.load(Ordering::Relaxed) { Some(self.event_now()?) } else { None };
        let mut args = [params as *const P as *mut std::ffi::c_void];
        // SAFETY: a zeroed attribute is a valid value of the plain-data union; each id picks its field.
        let mut attrs: [sys::CUlaunchAttribute; 2] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        if pdl_enabled()? && self.waits_for_predecessors(kernel) {
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            attrs[n].value.programmaticStreamSerializationAllowed = 1;
            n += 1;
        }
        if cooperative {
            attrs[n].id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
            attrs[n].value.cooperative = 1;
            n += 1;
        }
        if n > 0 {
            let lc = sys::CUlaunchConfig {
                gridDimX: cfg.grid.0,
                gridDimY: cfg.grid.1,
                gridDimZ: cfg.grid.2,
                blockDimX: cfg.block,
                blockDimY: 1,
                blockDimZ: 1,
                sharedMemBytes: cfg.smem,
                hStream: self.stream.cu_stream(),
                attrs: attrs.as_mut_ptr(),
                numAttrs: n as u32,
            };
            // SAFETY: the function and configuration checked by `prepare`; `args` holds the one parameter block the
            // caller vouches for; with programmatic serialization the kernel waits for its predecessors first.
            let r = unsafe { sys::cuLaunchKernelEx(&lc, func.cu_function(), args.as_mut_ptr(), std::ptr::null_mut()) };
            if cooperative && r == sys::CUresult::CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE {
                return Ok(false);
            }
            r.result().ctx(|| format!("launching {kernel} ({cfg:?}, {n} launch attributes)"))?;
        } else {
            result::launch_kernel(
                func.cu_function(),
                cfg.grid,
                (cfg.block, 1, 1),
                cfg.smem,
                self.stream.cu_stream(),
                &mut args,
            )
            .ctx(|| format!("launching {kernel} ({cfg:?})"))?;
        }
        if let Some(a) = before {
            let b = self.event_now()?;
            if let Some(log) = self.prof.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
                log.push((kernel, a, b));
            }
        }
        Ok(true)
    }

    /// A device event recorded on this device's stream now.
    fn event_now(&self) -> Result<CudaEvent> {
        let flags = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        let e = self.ctx.new_event(flags).ctx(|| "creating an event".into())?;
        e.record(&self.stream).ctx(|| "recording an event".into())?;
        Ok(e)
    }

    /// Start recording a device event before and after every launch on this device (a diagnostic: each launch
    /// then costs two event records). [`Gpu::profile_end`] returns the times.
    pub fn profile_start(&self) {
        *self.prof.lock().unwrap_or_else(|p| p.into_inner()) = Some(Vec::new());
        self.profiling.store(true, Ordering::Relaxed);
    }

    /// Stop recording, wait for the last launch, and return every launch since [`Gpu::profile_start`] in order
    /// (empty if it was not started).
    pub fn profile_end(&self) -> Result<Vec<LaunchTime>> {
        self.profiling.store(false, Ordering::Relaxed);
        let log = self.prof.lock().unwrap_or_else(|p| p.into_inner()).take().unwrap_or_default();
        let Some((_, _, last)) = log.last() else { return Ok(Vec::new()) };
        last.synchronize().ctx(|| "waiting for an event".into())?;
        let us = |a: &CudaEvent, b: &CudaEvent| -> Result<f64> {
            Ok(a.elapsed_ms(b).ctx(|| "reading an event pair".into())? as f64 * 1e3)
        };
        let first = &log[0].1;
        let mut out = Vec::with_capacity(log.len());
        for (i, (kernel, a, b)) in log.iter().enumerate() {
            let gap_us = if i == 0 { 0.0 } else { us(&log[i - 1].2, a)? };
            out.push(LaunchTime { kernel, at_us: us(first, a)?, us: us(a, b)?, gap_us });
        }
        Ok(out)
    }

    /// Milliseconds the work `f` enqueues on this device's stream takes, measured with device events around it
    /// (waits for the end event).
    pub fn timed(&self, f: impl FnOnce() -> Result<()>) -> Result<f64> {
        let a = self.event_now()?;
        f()?;
        let b = self.event_now()?;
        b.synchronize().ctx(|| "waiting for an event".into())?;
        Ok(a.elapsed_ms(&b).ctx(|| "reading an event pair".into())? as f64)
    }

    /// Wait for the stream; reports any fault of the kernels run so far.
    pub fn sync(&self) -> Result<()> {
        self.stream.synchronize().ctx(|| format!("synchronizing device {}", self.ordinal))
    }

    /// A device buffer of `n` elements, uninitialised.
    pub fn alloc<T: DeviceRepr>(&self, n: usize) -> Result<CudaSlice<T>> {
        // SAFETY: the buffer is written (poisoned or uploaded) before any read by the callers of this crate.
        unsafe { self.stream.alloc::<T>(n) }.ctx(|| format!("allocating {n} x {} bytes", std::mem::size_of::<T>()))
    }

    /// A device copy of `host`.
    pub fn upload<T: DeviceRepr>(&self, host: &[T]) -> Result<CudaSlice<T>> {
        self.stream.clone_htod(host).ctx(|| format!("uploading {} elements", host.len()))
    }

    /// Overwrite `dst` with `host` (same length).
    pub fn write<T: DeviceRepr>(&self, dst: &mut CudaSlice<T>, host: &[T]) -> Result<()> {
        if dst.len() != host.len() {
            return Err(Error::InvalidArgument(format!("write of {} elements into {}", host.len(), dst.len())));
        }
        self.stream.memcpy_htod(host, dst).ctx(|| format!("writing {} elements", host.len()))
    }

    /// A host copy of `src` (synchronises the stream).
    pub fn download<T: DeviceRepr + Default + Clone>(&self, src: &CudaSlice<T>) -> Result<Vec<T>> {
        self.stream.clone_dtoh(src).ctx(|| format!("downloading {} elements", src.len()))
    }

    /// Zero `n` u32 words at device address `ptr` in stream order (a memset node when the stream is captured).
    pub(crate) fn zero_words(&self, ptr: u64, n: usize) -> Result<()> {
        // SAFETY: callers pass an address of a live allocation of at least n words.
        unsafe { result::memset_d8_async(ptr, 0, 4 * n, self.stream.cu_stream()) }.ctx(|| format!("zeroing {n} words"))
    }

    /// Whether this GPU's stream is being captured into a CUDA graph now.
    pub fn capturing(&self) -> Result<bool> {
        let st = self.stream.capture_status().ctx(|| "querying the stream's capture status".into())?;
        Ok(st != cudarc::driver::sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
    }

    /// Fill `dst` with `byte` (poison before a run).
    pub fn fill_bytes<T>(&self, dst: &mut CudaSlice<T>, byte: u8) -> Result<()> {
        let p = dptr(dst, &self.stream);
        let n = dst.len() * std::mem::size_of::<T>();
        // SAFETY: `p` .. `p + n` is `dst`'s allocation.
        unsafe { result::memset_d8_async(p, byte, n, self.stream.cu_stream()) }.ctx(|| format!("filling {n} bytes"))
    }
}

/// The raw device address of a buffer, for parameter blocks.
pub fn dptr<T>(s: &CudaSlice<T>, stream: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(stream);
    p
}
