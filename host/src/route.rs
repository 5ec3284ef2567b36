//! The routing layout's three launches (`route_count`, `route_scan`, `route_place`; the algorithm in
//! `megamoe_kernels::route`): their launch configurations in one place, for the layer, the EP layer and the
//! tests, and a self-contained call for tests and benchmarks.
use cudarc::driver::CudaSlice;
use megamoe_kernels::params::Route;
use megamoe_kernels::route::{self as rt, SCAN_THREADS, THREADS};

use crate::error::{Error, Result};
use crate::runtime::{dptr, Gpu, Launch};

/// The most experts the routing (and so the layer and the weight gradients) supports.
pub const MAX_EXPERTS: usize = 4096;

/// u32 words of the chunk-count workspace (`Route::chunk_counts`) for calls of at most `max_slots` slots.
pub fn workspace_words(max_slots: usize, experts: usize) -> usize {
    rt::max_chunks(max_slots.min(u32::MAX as usize) as u32) as usize * experts
}

/// The three launches of `p` (with `p.chunk` set to `route::chunk_slots(p.slots)`) on `g`'s stream; with
/// `timed`, each bracketed by device events (synchronises; milliseconds of count, scan, place).
///
/// # Safety
/// Every pointer of `p` must hold what [`Route`] documents; `p.chunk_counts` at least
/// [`workspace_words`]`(p.slots, p.experts)` words; the error word zero before the call.
pub unsafe fn launch_timed(g: &Gpu, p: &Route, timed: bool) -> Result<[f64; 3]> {
    if p.experts == 0 || p.experts as usize > MAX_EXPERTS {
        return Err(Error::InvalidArgument(format!("{} experts (1..={MAX_EXPERTS} supported)", p.experts)));
    }
    let p = Route { chunk: rt::chunk_slots(p.slots), ..*p };
    let grid = rt::grid(p.slots, p.chunk);
    let launches = [
        ("route_count", Launch::new(grid, THREADS, rt::chunk_smem(p.experts))),
        ("route_scan", Launch::new(1, SCAN_THREADS, rt::scan_smem(p.experts))),
        ("route_place", Launch::new(grid, THREADS, rt::chunk_smem(p.experts))),
    ];
    let mut ms = [0.0; 3];
    for (i, (k, l)) in launches.into_iter().enumerate() {
        // SAFETY: the caller's promise on p; the configurations are the kernels' (manifest bounds, shared memory
        // from the same functions the kernels use).
        let f = || unsafe { g.launch(k, l, &p) };
        if timed {
            ms[i] = g.timed(f)?;
        } else {
            f()?;
        }
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

/// Upload `ids`, fill every output with `poison` bytes, run the three launches and download the outputs
/// (synchronises). With `timed`, also the milliseconds of each launch.
pub fn layout(
    g: &Gpu,
    ids: &[i32],
    experts: usize,
    tile_m: u32,
    poison: u8,
    timed: bool,
) -> Result<(HostLayout, [f64; 3])> {
    let slots = ids.len();
    if tile_m == 0 || experts == 0 || experts > MAX_EXPERTS || slots >= 1 << 31 {
        return Err(crate::Error::InvalidArgument(format!(
            "route::layout: tile_m {tile_m} (> 0), {experts} experts (1..={MAX_EXPERTS}), {slots} slots (< 2^31)"
        )));
    }
    let d_ids: CudaSlice<i32> = if slots == 0 { g.alloc(1)? } else { g.upload(ids)? };
    let mut error = g.alloc::<u32>(1)?;
    g.fill_bytes(&mut error, 0)?;
    let mut counts = g.alloc::<u32>(experts)?;
    let mut offsets = g.alloc::<u32>(experts + 1)?;
    let mut tile_offsets = g.alloc::<u32>(experts + 1)?;
    let mut row_slot = g.alloc::<u32>(slots.max(1))?;
    let mut slot_row = g.alloc::<i32>(slots.max(1))?;
    let mut ws = g.alloc::<u32>(workspace_words(slots, experts))?;
    g.fill_bytes(&mut counts, poison)?;
    g.fill_bytes(&mut offsets, poison)?;
    g.fill_bytes(&mut tile_offsets, poison)?;
    g.fill_bytes(&mut row_slot, poison)?;
    g.fill_bytes(&mut slot_row, poison)?;
    g.fill_bytes(&mut ws, poison)?;
    let s = g.stream();
    let p = Route {
        topk_ids: dptr(&d_ids, s),
        counts: dptr(&counts, s),
        offsets: dptr(&offsets, s),
        tile_offsets: dptr(&tile_offsets, s),
        row_slot: dptr(&row_slot, s),
        slot_row: dptr(&slot_row, s),
        error: dptr(&error, s),
        chunk_counts: dptr(&ws, s),
        slots: slots as u32,
        experts: experts as u32,
        tile_m,
        chunk: 0,
    };
    // SAFETY: every buffer is sized as Route documents; the workspace by workspace_words; the error word zeroed.
    let ms = unsafe { launch_timed(g, &p, timed)? };
    let mut row_slot = g.download(&row_slot)?;
    let mut slot_row = g.download(&slot_row)?;
    row_slot.truncate(slots);
    slot_row.truncate(slots);
    let out = HostLayout {
        error: g.download(&error)?[0],
        counts: g.download(&counts)?,
        offsets: g.download(&offsets)?,
        tile_offsets: g.download(&tile_offsets)?,
        row_slot,
        slot_row,
    };
    Ok((out, ms))
}
