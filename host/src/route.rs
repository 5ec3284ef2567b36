//! The routing layout's launches: `route_fused` (one launch, the default where its grid fits on the device at
//! once) or the three launches `route_count`, `route_scan`, `route_place` (the algorithm in
//! `megamoe_kernels::route`); their launch configurations in one place, for the layer, the EP layer and the tests,
//! and a self-contained call for tests and benchmarks.
use cudarc::driver::CudaSlice;
use megamoe_kernels::params::Route;
use megamoe_kernels::route::{self as rt, SCAN_THREADS, THREADS};

use crate::error::{Error, Result};
use crate::gemm::{policy, with_override, EnvPolicy};
use crate::runtime::{dptr, Gpu, Launch};

/// The most experts the routing (and so the layer and the weight gradients) supports.
pub const MAX_EXPERTS: usize = 4096;

/// Bound of each wait of `route_fused`'s grid barrier (its blocks all resident: microseconds normally; only a
/// device shared with other work that holds every SM for this long ends it, with `params::ROUTE_TIMEOUT`).
pub const ROUTE_TIMEOUT_NS: u64 = 10_000_000_000;

/// u32 words of the chunk-count workspace (`Route::chunk_counts`) for calls of at most `max_slots` slots.
pub fn workspace_words(max_slots: usize, experts: usize) -> usize {
    rt::max_chunks(max_slots.min(u32::MAX as usize) as u32) as usize * experts
}

/// Which kernels make the routing layout: [`RouteKernels::Fused`] (`route_fused`, one launch with two grid
/// barriers; the default since the fortieth session) or [`RouteKernels::Split`] (`route_count`, `route_scan`,
/// `route_place`, with the error word zeroed before them: four stream operations). The same outputs.
/// `MEGAMOE_ROUTE` (read once) = `fused` (or unset) or `split`; overridden on a thread by [`with_route_kernels`].
/// `Fused` falls back to `Split` where the grid does not fit on the device at once or no barrier word is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteKernels {
    Fused,
    Split,
}

thread_local! {
    static ROUTE_KERNELS: std::cell::Cell<Option<RouteKernels>> = const { std::cell::Cell::new(None) };
}

/// The routing kernels on this thread ([`RouteKernels`]).
pub fn route_kernels() -> Result<RouteKernels> {
    static ENV: EnvPolicy<RouteKernels> = std::sync::OnceLock::new();
    let table = [("fused", RouteKernels::Fused), ("split", RouteKernels::Split), ("", RouteKernels::Fused)];
    policy(&ROUTE_KERNELS, &ENV, "MEGAMOE_ROUTE", &table)
}

/// Run `f` with the routing kernels `k` for every routing launched on this thread inside it.
pub fn with_route_kernels<R>(k: RouteKernels, f: impl FnOnce() -> R) -> R {
    with_override(&ROUTE_KERNELS, k, f)
}

/// The launches of `p` (with `p.chunk` set to `route::chunk_slots(p.slots)`) on `g`'s stream: `route_fused` when
/// [`route_kernels`] is `Fused`, `p.barrier` is set and its grid fits on the device at once (a cooperative
/// launch: the driver checks it against what else runs), else the error word zeroed and the three launches. With
/// `timed`, each launch bracketed by device events (synchronises); returns each launch's name and milliseconds (0
/// untimed).
///
/// # Safety
/// Every pointer of `p` must hold what [`Route`] documents; `p.chunk_counts` at least
/// [`workspace_words`]`(p.slots, p.experts)` words; `p.barrier` 0 or a u32 only routings on this stream use,
/// zero before its first routing (each leaves it so).
pub unsafe fn launch_timed(g: &Gpu, p: &Route, timed: bool) -> Result<Vec<(&'static str, f64)>> {
    if p.experts == 0 || p.experts as usize > MAX_EXPERTS {
        return Err(Error::InvalidArgument(format!("{} experts (1..={MAX_EXPERTS} supported)", p.experts)));
    }
    let p = Route { chunk: rt::chunk_slots(p.slots), timeout_ns: ROUTE_TIMEOUT_NS, ..*p };
    let grid = rt::grid(p.slots, p.chunk);
    let fused = Launch::new(grid, THREADS, rt::fused_smem(p.experts));
    let try_fused = p.barrier != 0
        && route_kernels()? == RouteKernels::Fused
        && grid <= megamoe_kernels::grid::MAX_BLOCKS
        && grid <= g.max_resident_blocks("route_fused", fused)?;
    if try_fused {
        // a cooperative launch: the driver refuses a grid that cannot be resident at once (another context's
        // work, an MPS limit), and then the three launches run instead
        let mut launched = false;
        // SAFETY: the caller's promise on p; route_fused's configuration from the functions the kernel uses.
        let mut f = || unsafe { g.launch_cooperative("route_fused", fused, &p) }.map(|ok| launched = ok);
        let t = if timed { g.timed(f)? } else { f().map(|_| 0.0)? };
        if launched {
            return Ok(vec![("route_fused", t)]);
        }
    }
    g.zero_words(p.error, 1)?;
    let launches = [
        ("route_count", Launch::new(grid, THREADS, rt::chunk_smem(p.experts))),
        ("route_scan", Launch::new(1, SCAN_THREADS, rt::scan_smem(p.experts))),
        ("route_place", Launch::new(grid, THREADS, rt::chunk_smem(p.experts))),
    ];
    let mut ms = Vec::with_capacity(launches.len());
    for (k, l) in launches {
        // SAFETY: the caller's promise on p; the configurations are the kernels' (manifest bounds, shared memory
        // from the same functions the kernels use).
        let f = || unsafe { g.launch(k, l, &p) };
        ms.push((k, if timed { g.timed(f)? } else { f().map(|_| 0.0)? }));
    }
    Ok(ms)
}

/// [`launch_timed`] without timing (asynchronous).
///
/// # Safety
/// As [`launch_timed`].
pub unsafe fn launch(g: &Gpu, p: &Route) -> Result<()> {
    launch_timed(g, p, false).map(|_| ())
}

/// The routing layout of `topk_ids` (one id per slot) as the device computes it, downloaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostLayout {
    /// The error word.
    pub error: u32,
    /// u32 \[E\].
    pub counts: Vec<u32>,
    /// u32 [E + 1].
    pub offsets: Vec<u32>,
    /// u32 [E + 1].
    pub tile_offsets: Vec<u32>,
    /// u32 \[slots\] (entries past `offsets[E]` keep `poison`).
    pub row_slot: Vec<u32>,
    /// i32 \[slots\].
    pub slot_row: Vec<i32>,
}

/// Upload `ids`, fill every output (and the error word) with `poison` bytes, run the routing launches
/// ([`launch_timed`], with a fresh zeroed barrier word) and download the outputs (synchronises). With `timed`, also
/// each launch's name and milliseconds.
pub fn layout(
    g: &Gpu,
    ids: &[i32],
    experts: usize,
    tile_m: u32,
    poison: u8,
    timed: bool,
) -> Result<(HostLayout, Vec<(&'static str, f64)>)> {
    let mut barrier = g.alloc::<u32>(1)?;
    g.fill_bytes(&mut barrier, 0)?;
    layout_on(g, ids, experts, tile_m, poison, timed, &barrier)
}

/// [`layout`] with the grid-barrier word `barrier` (zero before its first routing; each routing leaves it
/// ready), so that tests can run many routings on one word.
pub fn layout_on(
    g: &Gpu,
    ids: &[i32],
    experts: usize,
    tile_m: u32,
    poison: u8,
    timed: bool,
    barrier: &CudaSlice<u32>,
) -> Result<(HostLayout, Vec<(&'static str, f64)>)> {
    let slots = ids.len();
    if tile_m == 0 || experts == 0 || experts > MAX_EXPERTS || slots >= 1 << 31 {
        return Err(crate::Error::InvalidArgument(format!(
            "route::layout: tile_m {tile_m} (> 0), {experts} experts (1..={MAX_EXPERTS}), {slots} slots (< 2^31)"
        )));
    }
    let mut b = Bufs::new(g, ids, experts)?;
    for buf in [&mut b.error, &mut b.counts, &mut b.offsets, &mut b.tile_offsets, &mut b.row_slot, &mut b.ws] {
        g.fill_bytes(buf, poison)?;
    }
    g.fill_bytes(&mut b.slot_row, poison)?;
    let p = b.params(g, barrier, tile_m);
    // SAFETY: every buffer is sized as Route documents; the workspace by workspace_words; the barrier word the caller's.
    let ms = unsafe { launch_timed(g, &p, timed)? };
    let mut row_slot = g.download(&b.row_slot)?;
    let mut slot_row = g.download(&b.slot_row)?;
    row_slot.truncate(slots);
    slot_row.truncate(slots);
    let out = HostLayout {
        error: g.download(&b.error)?[0],
        counts: g.download(&b.counts)?,
        offsets: g.download(&b.offsets)?,
        tile_offsets: g.download(&b.tile_offsets)?,
        row_slot,
        slot_row,
    };
    Ok((out, ms))
}

/// Milliseconds a routing of `ids` takes on `g`'s stream, `reps` routings back to back between two device events
/// after 3 warm-ups, on buffers allocated once (the GPU's time when the host runs ahead, as in a training loop;
/// the form [`route_kernels`] picks). Synchronises.
pub fn time_back_to_back(g: &Gpu, ids: &[i32], experts: usize, tile_m: u32, reps: usize) -> Result<f64> {
    let slots = ids.len();
    if tile_m == 0 || experts == 0 || experts > MAX_EXPERTS || slots == 0 || slots >= 1 << 31 || reps == 0 {
        return Err(Error::InvalidArgument(format!(
            "route::time_back_to_back: tile_m {tile_m}, {experts} experts, {slots} slots, {reps} reps"
        )));
    }
    let b = Bufs::new(g, ids, experts)?;
    let mut barrier = g.alloc::<u32>(1)?;
    g.fill_bytes(&mut barrier, 0)?;
    let p = b.params(g, &barrier, tile_m);
    // SAFETY: every buffer is sized as Route documents; the workspace by workspace_words; the barrier word zeroed
    // and only these routings use it.
    for _ in 0..3 {
        unsafe { launch(g, &p)? };
    }
    let ms = g.timed(|| {
        for _ in 0..reps {
            // SAFETY: as above.
            unsafe { launch(g, &p)? };
        }
        Ok(())
    })?;
    Ok(ms / reps as f64)
}

/// The device buffers of one routing of `ids` (the ids uploaded; outputs and workspace uninitialised), for
/// [`layout_on`] and [`time_back_to_back`].
struct Bufs {
    ids: CudaSlice<i32>,
    error: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    tile_offsets: CudaSlice<u32>,
    row_slot: CudaSlice<u32>,
    slot_row: CudaSlice<i32>,
    ws: CudaSlice<u32>,
    slots: usize,
    experts: usize,
}

impl Bufs {
    fn new(g: &Gpu, ids: &[i32], experts: usize) -> Result<Bufs> {
        let slots = ids.len();
        Ok(Bufs {
            ids: if slots == 0 { g.alloc(1)? } else { g.upload(ids)? },
            error: g.alloc(1)?,
            counts: g.alloc(experts)?,
            offsets: g.alloc(experts + 1)?,
            tile_offsets: g.alloc(experts + 1)?,
            row_slot: g.alloc(slots.max(1))?,
            slot_row: g.alloc(slots.max(1))?,
            ws: g.alloc(workspace_words(slots, experts))?,
            slots,
            experts,
        })
    }

    /// The parameter block over these buffers with the grid-barrier word `barrier`.
    fn params(&self, g: &Gpu, barrier: &CudaSlice<u32>, tile_m: u32) -> Route {
        let s = g.stream();
        Route {
            topk_ids: dptr(&self.ids, s),
            counts: dptr(&self.counts, s),
            offsets: dptr(&self.offsets, s),
            tile_offsets: dptr(&self.tile_offsets, s),
            row_slot: dptr(&self.row_slot, s),
            slot_row: dptr(&self.slot_row, s),
            error: dptr(&self.error, s),
            chunk_counts: dptr(&self.ws, s),
            barrier: dptr(barrier, s),
            timeout_ns: 0,
            slots: self.slots as u32,
            experts: self.experts as u32,
            tile_m,
            chunk: 0,
        }
    }
}
