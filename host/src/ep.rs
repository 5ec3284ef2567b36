//! Expert parallelism (EP = R) on the host: the rank group (symmetric workspaces and the peer pointers the
//! kernels reach them by) and the MoE layer over R ranks, forward (docs/EP.md).
//!
//! Forms of the rank group (only how `peer[]` is filled differs; the kernels are the same):
//! - [`RankGroup::emulated`]: R ranks on one GPU, R workspaces in one allocation. The layer launches the
//!   dispatch and combine kernels once for all R ranks (grid = R groups of blocks, <= the SM count, so every
//!   block that waits is resident), and the routing and grouped GEMMs once per rank.
//! - [`RankGroup::across_gpus`]: R GPUs of one process with peer access, one workspace per GPU; each GPU's
//!   launch has `rank_base` = its rank and one group of blocks. Written, not tested (one GPU here), and the
//!   layer does not drive it yet.
//!
//! No call reads a count back: every rank's routing, the gathered counts and every rank's local layout live on
//! the device. A bounded wait that expires on the device leaves an error record; [`EpLayer::check`] (a
//! synchronisation point) turns it into [`Error::Timeout`], and the next call (a new epoch) runs normally.
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::ep::{Phase, Workspace};
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{self, EpParams, EpRank, GroupedGemm, Route, MAX_RANKS};

use crate::error::{Context, Error, Result};
use crate::layer::{zero_gemm, LayerConfig, MapCache};
use crate::runtime::{dptr, Gpu, Launch};

/// Threads per block of `ep_dispatch` and `ep_combine`.
const EP_THREADS: u32 = 256;
/// Most blocks per rank of the dispatch and combine kernels.
const MAX_BLOCKS_PER_RANK: usize = 16;
/// Default bound of every wait on the device: generous for first-call skew between ranks (module loading).
pub const DEFAULT_TIMEOUT_NS: u64 = 10_000_000_000;

/// The rank group: R symmetric workspaces (same layout on every rank) and their addresses.
pub struct RankGroup {
    world: usize,
    layout: Workspace,
    peers: [u64; MAX_RANKS],
    /// The allocations, kept alive (emulated: one, on one GPU; across GPUs: one per GPU).
    mem: Vec<CudaSlice<u32>>,
}

impl RankGroup {
    fn check_world(world: usize, layout: &Workspace) -> Result<()> {
        if world == 0 || world > MAX_RANKS {
            return Err(Error::InvalidArgument(format!("{world} ranks (1..={MAX_RANKS} supported)")));
        }
        if layout.blocks == 0 || layout.bytes % 256 != 0 {
            return Err(Error::InvalidArgument(format!("workspace layout {layout:?} is not usable")));
        }
        Ok(())
    }

    /// R = `world` ranks emulated on `gpu`: one zeroed allocation of R workspaces of `layout`, rank r's at
    /// `r * layout.bytes`.
    pub fn emulated(gpu: &Gpu, world: usize, layout: Workspace) -> Result<Self> {
        Self::check_world(world, &layout)?;
        let mut mem = gpu.alloc::<u32>(world * layout.bytes as usize / 4)?;
        gpu.fill_bytes(&mut mem, 0)?;
        let base = dptr(&mem, gpu.stream());
        let mut peers = [0u64; MAX_RANKS];
        for (r, p) in peers.iter_mut().enumerate().take(world) {
            *p = base + r as u64 * layout.bytes;
        }
        Ok(RankGroup { world, layout, peers, mem: vec![mem] })
    }

    /// R = `gpus.len()` GPUs of this process, rank r on `gpus[r]`: peer access enabled between every pair
    /// (`cuCtxEnablePeerAccess`), one zeroed workspace per GPU; `peer[r]` is rank r's allocation, valid on every
    /// GPU of the group by unified addressing. Each GPU then launches the same kernels with `rank_base` = its rank
    /// ([`RankGroup::device`]). Not tested: the development machine has one GPU.
    pub fn across_gpus(gpus: &[Arc<Gpu>], layout: Workspace) -> Result<Self> {
        let world = gpus.len();
        Self::check_world(world, &layout)?;
        for (i, a) in gpus.iter().enumerate() {
            if gpus[..i].iter().any(|b| b.ordinal() == a.ordinal()) {
                return Err(Error::InvalidArgument(format!("device {} appears twice in the group", a.ordinal())));
            }
        }
        for a in gpus {
            a.context().bind_to_thread().ctx(|| format!("binding the context of device {}", a.ordinal()))?;
            for b in gpus.iter().filter(|b| b.ordinal() != a.ordinal()) {
                let mut can = 0;
                // SAFETY: plain queries and a context flag on contexts that live as long as the `Gpu`s.
                unsafe {
                    cudarc::driver::sys::cuDeviceCanAccessPeer(
                        &mut can,
                        a.context().cu_device(),
                        b.context().cu_device(),
                    )
                    .result()
                    .ctx(|| format!("cuDeviceCanAccessPeer({}, {})", a.ordinal(), b.ordinal()))?;
                    if can == 0 {
                        return Err(Error::InvalidArgument(format!(
                            "device {} cannot access device {} (no peer access)",
                            a.ordinal(),
                            b.ordinal()
                        )));
                    }
                    let r = cudarc::driver::sys::cuCtxEnablePeerAccess(b.context().cu_ctx(), 0);
                    if r != CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED {
                        r.result().ctx(|| format!("enabling peer access {} -> {}", a.ordinal(), b.ordinal()))?;
                    }
                }
            }
        }
        let mut peers = [0u64; MAX_RANKS];
        let mut mem = Vec::with_capacity(world);
        for (r, g) in gpus.iter().enumerate() {
            let mut m = g.alloc::<u32>(layout.bytes as usize / 4)?;
            g.fill_bytes(&mut m, 0)?;
            peers[r] = dptr(&m, g.stream());
            mem.push(m);
        }
        for g in gpus {
            g.sync()?; // every workspace zeroed before any GPU's first launch reads it
        }
        Ok(RankGroup { world, layout, peers, mem })
    }

    /// Ranks R.
    pub fn world(&self) -> usize {
        self.world
    }
    /// The workspace layout every rank shares.
    pub fn layout(&self) -> &Workspace {
        &self.layout
    }
    /// Device address of rank r's workspace.
    pub fn peer(&self, r: usize) -> u64 {
        self.peers[r]
    }
    /// Device bytes held (all ranks).
    pub fn bytes(&self) -> usize {
        self.mem.iter().map(|m| 4 * m.len()).sum()
    }

    /// The device-side description for a launch whose first block group is rank `rank_base`.
    pub fn device(&self, rank_base: usize, epoch: u32, timeout_ns: u64) -> params::RankGroup {
        params::RankGroup {
            rank_base: rank_base as u32,
            world: self.world as u32,
            epoch,
            blocks_per_rank: self.layout.blocks as u32,
            timeout_ns,
            peer: self.peers,
        }
    }
}

/// One rank's inputs of a layer call (device buffers on the layer's GPU).
pub struct RankInputs<'a> {
    /// Tokens T_r (may be 0).
    pub tokens: usize,
    /// bf16 [T_r, H] (at least).
    pub x: &'a CudaSlice<bf16>,
    /// i32 [T_r, k] (at least), global expert ids, -1 = masked.
    pub topk_ids: &'a CudaSlice<i32>,
    /// f32 [T_r, k] (at least).
    pub topk_weights: &'a CudaSlice<f32>,
    /// bf16 [E / R, 2I, H]: this rank's experts (gate rows, then up rows).
    pub w1: &'a CudaSlice<bf16>,
    /// bf16 [E / R, H, I].
    pub w2: &'a CudaSlice<bf16>,
}

/// Device milliseconds of the communication stages of one forward ([`EpLayer::forward_timed`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    /// Count all-gather, layout, push of the rows, arrival wait (`ep_dispatch`).
    pub dispatch_ms: f64,
    /// Return of the rows and the weighted sums (`ep_combine`).
    pub combine_ms: f64,
}

/// One rank's own buffers (on the one GPU of the emulated form).
struct RankWork {
    route_error: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    tile_offsets: CudaSlice<u32>,
    row_slot: CudaSlice<u32>,
    slot_row: CudaSlice<i32>,
    h: CudaSlice<bf16>,
    y: CudaSlice<bf16>,
}

/// The MoE layer at EP = R, R ranks emulated on one GPU (forward).
pub struct EpLayer {
    gpu: Arc<Gpu>,
    cfg: LayerConfig,
    group: RankGroup,
    ranks: Vec<RankWork>,
    epoch: u32,
    checked_epoch: u32,
    timeout_ns: u64,
    withhold: Option<(usize, Phase)>,
    maps: MapCache,
}

impl EpLayer {
    /// `world` ranks emulated on `gpu`; `cfg.experts` is the global E (a multiple of `world`), `cfg.max_tokens`
    /// the most tokens of one rank.
    pub fn new(gpu: Arc<Gpu>, cfg: LayerConfig, world: usize) -> Result<Self> {
        cfg.validate()?;
        if world == 0 || world > MAX_RANKS || cfg.experts % world != 0 {
            return Err(Error::InvalidArgument(format!(
                "{world} ranks for {} experts (1..={MAX_RANKS} ranks, dividing the experts)",
                cfg.experts
            )));
        }
        // every block of the emulated ranks resident at once: R * B <= SMs
        let blocks = (gpu.sm_count() as usize / world).min(MAX_BLOCKS_PER_RANK);
        if blocks == 0 {
            return Err(Error::InvalidArgument(format!("{world} ranks > {} SMs", gpu.sm_count())));
        }
        let (t, k, h) = (cfg.max_tokens as u64, cfg.top_k as u64, cfg.hidden as u64);
        let layout = Workspace::new(t, k, h, cfg.experts as u64, world as u64, blocks as u64);
        if layout.max_recv * cfg.hidden.max(2 * cfg.intermediate) as u64 >= 1 << 31 {
            return Err(Error::InvalidArgument(format!(
                "{world} ranks x {} tokens x top-{} rows exceed 32-bit element offsets",
                cfg.max_tokens, cfg.top_k
            )));
        }
        let group = RankGroup::emulated(&gpu, world, layout)?;
        let (slots, recv) = (layout.max_slots as usize, layout.max_recv as usize);
        let mut ranks = Vec::with_capacity(world);
        for _ in 0..world {
            let mut route_error = gpu.alloc::<u32>(1)?;
            gpu.fill_bytes(&mut route_error, 0)?;
            ranks.push(RankWork {
                route_error,
                counts: gpu.alloc(cfg.experts)?,
                offsets: gpu.alloc(cfg.experts + 1)?,
                tile_offsets: gpu.alloc(cfg.experts + 1)?,
                row_slot: gpu.alloc(slots)?,
                slot_row: gpu.alloc(slots)?,
                h: gpu.alloc(recv * cfg.intermediate)?,
                y: gpu.alloc(recv * cfg.hidden)?,
            });
        }
        Ok(EpLayer {
            gpu,
            cfg,
            group,
            ranks,
            epoch: 0,
            checked_epoch: 0,
            timeout_ns: DEFAULT_TIMEOUT_NS,
            withhold: None,
            maps: MapCache::default(),
        })
    }

    /// The configuration (global E; max tokens per rank).
    pub fn config(&self) -> &LayerConfig {
        &self.cfg
    }
    /// The rank group.
    pub fn group(&self) -> &RankGroup {
        &self.group
    }
    /// Ranks R.
    pub fn world(&self) -> usize {
        self.group.world
    }
    /// Set the bound of every device wait (default [`DEFAULT_TIMEOUT_NS`]).
    pub fn set_timeout_ns(&mut self, ns: u64) {
        self.timeout_ns = ns.max(1);
    }
    /// Fault injection for tests: rank `r`'s blocks skip their releases in `phase` (None: nobody does).
    pub fn debug_withhold(&mut self, w: Option<(usize, Phase)>) {
        self.withhold = w;
    }

    fn check_inputs(&self, inp: &[RankInputs<'_>], outs: &[&mut CudaSlice<bf16>]) -> Result<()> {
        let c = &self.cfg;
        let r_n = self.world();
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if inp.len() != r_n || outs.len() != r_n {
            return bad(format!("{} inputs and {} outputs for {r_n} ranks", inp.len(), outs.len()));
        }
        let per = c.experts / r_n;
        let me = self.gpu.ordinal();
        for (r, (i, o)) in inp.iter().zip(outs).enumerate() {
            let t = i.tokens;
            if t > c.max_tokens {
                return bad(format!("rank {r}: {t} tokens > the configured maximum {}", c.max_tokens));
            }
            let at_least = [
                ("x", i.x.len(), t * c.hidden),
                ("topk_ids", i.topk_ids.len(), t * c.top_k),
                ("topk_weights", i.topk_weights.len(), t * c.top_k),
                ("out", o.len(), t * c.hidden),
            ];
            for (name, got, need) in at_least {
                if got < need {
                    return bad(format!("rank {r}: {name} has {got} elements, the layer needs {need}"));
                }
            }
            let exact = [
                ("W1", i.w1.len(), per * 2 * c.intermediate * c.hidden),
                ("W2", i.w2.len(), per * c.hidden * c.intermediate),
            ];
            for (name, got, need) in exact {
                if got != need {
                    return bad(format!("rank {r}: {name} has {got} elements, the rank's {per} experts need {need}"));
                }
            }
            let ords = [
                ("x", i.x.ordinal()),
                ("topk_ids", i.topk_ids.ordinal()),
                ("topk_weights", i.topk_weights.ordinal()),
                ("W1", i.w1.ordinal()),
                ("W2", i.w2.ordinal()),
                ("out", o.ordinal()),
            ];
            for (name, d) in ords {
                if d != me {
                    return bad(format!("rank {r}: {name} lives on device {d}, the layer on device {me}"));
                }
            }
        }
        Ok(())
    }

    /// Forward at EP = R: `outs[r][t] = sum_j w_tj * expert(ids_tj)(x_t)` for every rank r, bitwise the EP = 1
    /// layer's result on the ranks' tokens concatenated in rank order. Asynchronous on the GPU's stream, no host
    /// synchronisation; call [`EpLayer::check`] at a synchronisation point to learn of a device-side timeout.
    pub fn forward(&mut self, inp: &[RankInputs<'_>], outs: &mut [&mut CudaSlice<bf16>]) -> Result<()> {
        self.run(inp, outs, false).map(|_| ())
    }

    /// [`EpLayer::forward`] with device-event times of the dispatch and combine kernels (synchronises twice; for
    /// benchmarks).
    pub fn forward_timed(&mut self, inp: &[RankInputs<'_>], outs: &mut [&mut CudaSlice<bf16>]) -> Result<StageTimes> {
        self.run(inp, outs, true)
    }

    fn run(&mut self, inp: &[RankInputs<'_>], outs: &mut [&mut CudaSlice<bf16>], timed: bool) -> Result<StageTimes> {
        self.check_inputs(inp, outs)?;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        let r_n = self.world();
        let e = c.experts;
        self.epoch = self
            .epoch
            .checked_add(1)
            .ok_or_else(|| Error::InvalidArgument("2^32 - 1 calls on one workspace: make a new layer".into()))?;
        // each rank's routing layout over its own slots and the E global experts
        for (i, w) in inp.iter().zip(self.ranks.iter_mut()) {
            g.fill_bytes(&mut w.route_error, 0)?;
            let route = Route {
                topk_ids: dptr(i.topk_ids, &s),
                counts: dptr(&w.counts, &s),
                offsets: dptr(&w.offsets, &s),
                tile_offsets: dptr(&w.tile_offsets, &s),
                row_slot: dptr(&w.row_slot, &s),
                slot_row: dptr(&w.slot_row, &s),
                error: dptr(&w.route_error, &s),
                slots: (i.tokens * c.top_k) as u32,
                experts: e as u32,
                tile_m: kh::GEMM_BM,
                pad: 0,
            };
            // SAFETY: the routing buffers hold E, E + 1 and max_slots entries; ids are range-checked on the
            // device; with 0 slots the kernels only write zero counts and offsets.
            unsafe {
                g.launch("route_count", Launch::new(e as u32, kh::ROUTE_THREADS, 64), &route)?;
                g.launch("route_scan", Launch::new(1, 32, 0), &route)?;
                g.launch("route_place", Launch::new(e as u32, kh::ROUTE_THREADS, 64), &route)?;
            }
        }
        let p = self.params(inp, outs);
        let blocks = self.group.layout.blocks as u32;
        let grid = r_n as u32 * blocks;
        // SAFETY: every index the kernels form is bounded by the workspace layout (docs in the kernels); the grid
        // is at most the SM count with small blocks, so every waiting block is resident.
        let dispatch = || unsafe { g.launch("ep_dispatch", Launch::new(grid, EP_THREADS, 16 + 4 * e as u32), &p) };
        let dispatch_ms = if timed { g.timed(dispatch)? } else { dispatch().map(|_| 0.0)? };
        for (r, i) in inp.iter().enumerate() {
            self.experts(r, i)?;
        }
        // SAFETY: as for the dispatch.
        let combine = || unsafe { g.launch("ep_combine", Launch::new(grid, EP_THREADS, 16), &p) };
        let combine_ms = if timed { g.timed(combine)? } else { combine().map(|_| 0.0)? };
        Ok(StageTimes { dispatch_ms, combine_ms })
    }

    fn params(&self, inp: &[RankInputs<'_>], outs: &[&mut CudaSlice<bf16>]) -> EpParams {
        let s = self.gpu.stream();
        let none = EpRank {
            x: 0,
            topk_ids: 0,
            w: 0,
            counts: 0,
            offsets: 0,
            row_slot: 0,
            slot_row: 0,
            y: 0,
            out: 0,
            tokens: 0,
            pad: 0,
        };
        let mut ranks = [none; MAX_RANKS];
        for (r, ((i, o), w)) in inp.iter().zip(outs).zip(&self.ranks).enumerate() {
            ranks[r] = EpRank {
                x: dptr(i.x, s),
                topk_ids: dptr(i.topk_ids, s),
                w: dptr(i.topk_weights, s),
                counts: dptr(&w.counts, s),
                offsets: dptr(&w.offsets, s),
                row_slot: dptr(&w.row_slot, s),
                slot_row: dptr(&w.slot_row, s),
                y: dptr(&w.y, s),
                out: dptr(&**o, s),
                tokens: i.tokens as u32,
                pad: 0,
            };
        }
        let (withhold_rank, withhold_phase) = match self.withhold {
            Some((r, ph)) => (r as u32 + 1, ph as u32),
            None => (0, 0),
        };
        EpParams {
            group: self.group.device(0, self.epoch, self.timeout_ns),
            ws: self.group.layout,
            ranks,
            experts: self.cfg.experts as u32,
            k: self.cfg.top_k as u32,
            hidden: self.cfg.hidden as u32,
            tile_m: kh::GEMM_BM,
            withhold_rank,
            withhold_phase,
        }
    }

    /// Rank r's experts over its receive buffer: GEMM1 + SwiGLU, then GEMM2, the EP = 1 kernels with the local
    /// layout the dispatch wrote (read on the device).
    fn experts(&mut self, r: usize, inp: &RankInputs<'_>) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        let per = c.experts / self.world();
        let lay = self.group.layout;
        let ws = self.group.peer(r);
        let recv = lay.max_recv as usize;
        let (h_ptr, y_ptr) = (dptr(&self.ranks[r].h, &s), dptr(&self.ranks[r].y, &s));
        let m_tiles = (recv as u32).div_ceil(kh::GEMM_BM) + (per as u32).min(recv as u32);
        let base = GroupedGemm {
            offsets: ws + lay.local_offsets,
            tile_offsets: ws + lay.local_tiles,
            experts: per as u32,
            ..zero_gemm()
        };
        let map_recv = self.maps.get(&g, ws + lay.recv, recv, c.hidden, kh::GEMM_BM, 64)?;
        let map_w1 = self.maps.get(&g, dptr(inp.w1, &s), per * 2 * c.intermediate, c.hidden, kh::GEMM_BN / 2, 64)?;
        let p1 = GroupedGemm {
            map_a: map_recv,
            map_b: map_w1,
            c: h_ptr,
            n: c.intermediate as u32,
            k: c.hidden as u32,
            n_b: 2 * c.intermediate as u32,
            ldc: c.intermediate as u32,
            n_tiles: (c.intermediate as u32).div_ceil(kh::GEMM_BN / 2),
            ..base
        };
        let map_h = self.maps.get(&g, h_ptr, recv, c.intermediate, kh::GEMM_BM, 64)?;
        let map_w2 = self.maps.get(&g, dptr(inp.w2, &s), per * c.hidden, c.intermediate, kh::GEMM_BN, 64)?;
        let p2 = GroupedGemm {
            map_a: map_h,
            map_b: map_w2,
            c: y_ptr,
            n: c.hidden as u32,
            k: c.intermediate as u32,
            n_b: c.hidden as u32,
            ldc: c.hidden as u32,
            n_tiles: (c.hidden as u32).div_ceil(kh::GEMM_BN),
            ..base
        };
        for (kernel, p) in [("grouped_gemm_swiglu", p1), ("grouped_gemm_bf16", p2)] {
            let grid = g.sm_count().min(m_tiles * p.n_tiles);
            // SAFETY: A holds max_recv rows, C max_recv rows of ldc; the local offsets the kernels read are
            // clamped to max_recv on the device; B holds the rank's experts.
            unsafe { g.launch(kernel, Launch::new(grid, kh::GEMM_THREADS, kh::GEMM_SMEM), &p)? };
        }
        Ok(())
    }

    /// Synchronise and report what the device recorded since the last check: a bounded wait that expired
    /// ([`Error::Timeout`] naming the rank waited for and the phase) or an expert id outside -1..E
    /// ([`Error::InvalidArgument`]). The workspace stays usable either way.
    pub fn check(&mut self) -> Result<()> {
        self.gpu.sync()?;
        let lay = self.group.layout;
        let mut timeout = None;
        for r in 0..self.world() {
            let at = (r as u64 * lay.bytes + lay.error) as usize / 4;
            let view = self.group.mem[0].slice(at..at + 4);
            let rec = self.gpu.stream().clone_dtoh(&view).ctx(|| format!("reading rank {r}'s error record"))?;
            if timeout.is_none() && rec[3] == 1 && rec[2] > self.checked_epoch && rec[2] <= self.epoch {
                let phase = Phase::from_code(rec[0]).map_or("unknown phase", Phase::name);
                timeout = Some(Error::Timeout {
                    rank: rec[1] as usize,
                    phase,
                    timeout_ms: self.timeout_ns.div_ceil(1_000_000),
                });
            }
        }
        self.checked_epoch = self.epoch;
        if let Some(t) = timeout {
            return Err(t);
        }
        for (r, w) in self.ranks.iter().enumerate() {
            if self.gpu.download(&w.route_error)?[0] != 0 {
                return Err(Error::InvalidArgument(format!(
                    "rank {r}: topk_ids holds an expert id outside -1..{} (those slots were treated as masked)",
                    self.cfg.experts
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_group_carries_the_layout_and_the_peers() {
        let layout = Workspace::new(100, 2, 256, 8, 4, 3);
        let mut peers = [0u64; MAX_RANKS];
        for (r, p) in peers.iter_mut().enumerate().take(4) {
            *p = 0x1000_0000 + r as u64 * layout.bytes;
        }
        let g = RankGroup { world: 4, layout, peers, mem: Vec::new() };
        let d = g.device(2, 7, 5_000);
        assert_eq!((d.rank_base, d.world, d.epoch, d.blocks_per_rank, d.timeout_ns), (2, 4, 7, 3, 5_000));
        assert_eq!(d.peer[3], 0x1000_0000 + 3 * layout.bytes);
        assert_eq!(d.peer[4], 0);
        assert!(RankGroup::check_world(0, &layout).is_err());
        assert!(RankGroup::check_world(9, &layout).is_err());
        assert!(RankGroup::check_world(8, &layout).is_ok());
    }

    #[test]
    fn parameter_blocks_fit_a_kernel_argument() {
        // kernel parameters are limited to 4 KiB; the block is all u32/u64 fields, no padding surprises
        let n = std::mem::size_of::<EpParams>();
        assert!(n <= 4096, "{n}");
        assert_eq!(n % 8, 0);
        assert_eq!(std::mem::size_of::<params::RankGroup>(), 24 + 8 * MAX_RANKS);
    }
}
