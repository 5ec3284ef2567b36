//! Expert parallelism (EP = R) on the host: the rank group (symmetric workspaces and the peer pointers the
//! kernels reach them by) and the MoE layer over R ranks, forward and backward (docs/EP.md).
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
//!
//! The epoch of a call lives on the device too: each rank's call counter (`Workspace::epoch`), which the first
//! launch of every forward and backward (`ep_epoch_next`) advances and the call's dispatch and combine read.
//! So a forward (and backward) captured in a CUDA graph replays with a new epoch each time: after one eager
//! call with the same buffers (tensor maps are encoded, the backward's buffers allocated, on first use), the
//! calls allocate nothing and never synchronise (tests/graph.rs, run on the H200).
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cudarc::driver::sys::CUresult;
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::ep::{Phase, Workspace};
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{self, DtopkReduce, EpParams, EpRank, GroupedGemm, Route, MAX_RANKS};

use crate::error::{Context, Error, Result};
use crate::fp8 as q;
use crate::gemm::{m_grouped_launch, wgrad_launch, zero_gemm, WgradElem};
use crate::layer::fp8::{fp8_gemm, no_alloc_in_capture, plain_kernel};
use crate::layer::{Fp8Dh, Fp8Dw1X, Fp8Dy, Fp8Weights, LayerConfig, MapCache, Save};
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
        let Some(bytes) = (layout.bytes as usize).checked_mul(world) else {
            return Err(Error::InvalidArgument(format!("{world} workspaces of {} bytes overflow", layout.bytes)));
        };
        let mut mem = gpu.alloc::<u32>(bytes / 4)?;
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
    /// Device address of rank r's workspace (an `InvalidArgument` for a rank outside the group).
    pub fn peer(&self, r: usize) -> Result<u64> {
        if r >= self.world {
            return Err(Error::InvalidArgument(format!("rank {r}: the group has {} ranks", self.world)));
        }
        Ok(self.ws(r))
    }
    /// Device address of rank r's workspace, for the layer's own loops over its ranks (r < world by
    /// construction, unchecked beyond the array's bound).
    fn ws(&self, r: usize) -> u64 {
        self.peers[r]
    }
    /// The parameters of `ep_epoch_next` over ranks `first..first + n`: their call counters (`Workspace::epoch`);
    /// an `InvalidArgument` for ranks outside the group.
    pub fn epoch_next(&self, first: usize, n: usize) -> Result<params::EpEpoch> {
        if first.checked_add(n).is_none_or(|end| end > self.world) {
            return Err(Error::InvalidArgument(format!(
                "{n} ranks from rank {first}: the group has {} ranks",
                self.world
            )));
        }
        let mut counter = [0u64; MAX_RANKS];
        for (i, c) in counter.iter_mut().enumerate().take(n) {
            *c = self.peers[first + i] + self.layout.epoch;
        }
        Ok(params::EpEpoch { counter, ranks: n as u32, pad: 0 })
    }
    /// Device bytes held (all ranks).
    pub fn bytes(&self) -> usize {
        self.mem.iter().map(|m| 4 * m.len()).sum()
    }

    /// The device-side description for a launch whose first block group is rank `rank_base` (the call's epoch
    /// is not in it: the kernels read it from each rank's call counter, `Workspace::epoch`).
    pub fn device(&self, rank_base: usize, timeout_ns: u64) -> params::RankGroup {
        params::RankGroup {
            rank_base: rank_base as u32,
            world: self.world as u32,
            pad: 0,
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

/// One rank's inputs of an FP8 forward ([`EpLayer::forward_fp8`]; device buffers on the layer's GPU).
pub struct RankFp8Inputs<'a> {
    /// Tokens T_r (may be 0).
    pub tokens: usize,
    /// bf16 [T_r, H] (at least): quantized by the call (1 x 128 blocks), then sent as codes.
    pub x: &'a CudaSlice<bf16>,
    /// i32 [T_r, k] (at least), global expert ids, -1 = masked.
    pub topk_ids: &'a CudaSlice<i32>,
    /// f32 [T_r, k] (at least).
    pub topk_weights: &'a CudaSlice<f32>,
    /// This rank's E / R experts' W1 and W2 in blockwise FP8 ([`EpLayer::alloc_fp8_weights`],
    /// [`EpLayer::quantize_fp8_weights`]).
    pub weights: &'a Fp8Weights,
}

/// Device milliseconds of the communication stages of one forward ([`EpLayer::forward_timed`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    /// Count all-gather, layout, push of the rows, arrival wait (`ep_dispatch`).
    pub dispatch_ms: f64,
    /// Every emulated rank's GEMM1 (with SwiGLU) and GEMM2, back to back; with the pull dispatch GEMM1's
    /// producers also copy the rows from their sources, with the scatter combine GEMM2 writes them back.
    pub gemm_ms: f64,
    /// Return of the rows and the weighted sums (`ep_combine`).
    pub combine_ms: f64,
}

/// What a forward leaves for its backward: the layer that ran it, its call number (the host's count of calls
/// issued) and token counts. The routed x rows, the gathered counts and every rank's local layout stay in the
/// workspace. While the workspace still holds them (no other forward ran since), the backward reads them there;
/// otherwise it routes the same topk_ids again and its dispatch sends each routed row's x (or its FP8 codes)
/// again with its dy, so one [`EpLayer`] serves every MoE layer of a model with its configuration: forward A,
/// forward B, backward B, backward A give each layer's results bitwise. The re-sent rows cost link bytes (2H a
/// routed row in bf16, H (1 + 1/32) in FP8) and with `Save::WithZ` z is computed again. The backward runs on the
/// layer that ran the forward (another layer's state is refused).
#[derive(Clone, Debug)]
pub struct EpSaved {
    /// The layer's id ([`EpLayer`]'s `id`): call numbers count per layer, so another layer's state can carry
    /// the same number.
    layer: u64,
    call: u32,
    tokens: Vec<usize>,
    /// Made by [`EpLayer::forward_fp8`]: the workspace holds the rows' FP8 codes, not the bf16 rows the backward
    /// reads.
    fp8: bool,
    /// Its GEMM1 stored z for the backward (`Save::WithZ`), which then skips z's recompute.
    z: bool,
}

impl EpSaved {
    /// Whether this is the state of a forward of layer `layer` over `world` ranks of the backward's kind (bf16 or
    /// FP8): a message naming what differs.
    fn check(&self, layer: u64, world: usize, fp8: bool) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if self.layer != layer {
            return bad(format!(
                "the saved state is of another EP layer (layer {}, this is layer {layer}): a backward runs on the \
                 layer that ran its forward",
                self.layer
            ));
        }
        if self.tokens.len() != world {
            return bad(format!(
                "the saved state holds {} ranks' token counts, the layer has {world} ranks",
                self.tokens.len()
            ));
        }
        if self.fp8 && !fp8 {
            return bad("the saved state is of an FP8 forward (`EpLayer::forward_fp8`), whose workspace holds the \
                        rows' codes, not the bf16 rows this backward reads: its backward is `EpLayer::backward_fp8`"
                .into());
        }
        if !self.fp8 && fp8 {
            return bad(
                "the saved state is of a bf16 forward (`EpLayer::forward`): its backward is `EpLayer::backward`".into(),
            );
        }
        Ok(())
    }
}

/// Rank r's buffers of `list` (name, elements, elements needed, device) against their exact lengths for its `per`
/// experts and the layer's device `me`.
fn check_exact(r: usize, list: &[(&str, usize, usize, usize)], per: usize, me: usize) -> Result<()> {
    for &(name, got, need, _) in list {
        if got != need {
            return Err(Error::InvalidArgument(format!(
                "rank {r}: {name} has {got} elements, the rank's {per} experts need {need}"
            )));
        }
    }
    for &(name, _, _, d) in list {
        if d != me {
            return Err(Error::InvalidArgument(format!(
                "rank {r}: {name} lives on device {d}, the layer on device {me}"
            )));
        }
    }
    Ok(())
}

/// A new [`EpLayer`]'s id, unique in the process (the identity an [`EpSaved`] carries).
fn next_layer_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One rank's gradients of a backward call. The weight gradients in f32 (`RankGrads<f32>`, the default) or bf16
/// (`RankGrads<bf16>`: each element the f32 gradient rounded once, as the single-GPU layer's `Grads<bf16>`).
pub struct RankGrads<'a, W: WgradElem = f32> {
    /// bf16 [T_r, H] (at least).
    pub dx: &'a mut CudaSlice<bf16>,
    /// [E / R, 2I, H]: this rank's experts.
    pub dw1: &'a mut CudaSlice<W>,
    /// [E / R, H, I].
    pub dw2: &'a mut CudaSlice<W>,
    /// f32 [T_r, k] (at least); 0 for masked slots.
    pub dtopk: &'a mut CudaSlice<f32>,
}

/// One rank's backward buffers over its receive rows (allocated at the first backward).
struct BwdWork {
    z: CudaSlice<bf16>,
    dz: CudaSlice<bf16>,
    sh: CudaSlice<bf16>,
    partial: CudaSlice<f32>,
    row_dtopk: CudaSlice<f32>,
}

/// An [`EpRank`] with every pointer null (ranks a launch does not serve).
const NO_RANK: EpRank = EpRank {
    x: 0,
    topk_ids: 0,
    w: 0,
    counts: 0,
    offsets: 0,
    row_slot: 0,
    slot_row: 0,
    y: 0,
    row_w: 0,
    out: 0,
    dtopk: 0,
    tokens: 0,
    pad: 0,
    route_error: 0,
    x_scales: 0,
    x2: 0,
    x2_scales: 0,
};

/// Whether a step of a call launches its kernels or only prepares them. Every call runs its GEMMs' steps once
/// with [`Pass::Prepare`] before its first launch: what can fail (tensor maps encoded and cached, the kernel
/// and schedule choices of the environment's policies, launch shapes) fails there, so a call that returns an
/// error has launched nothing; the [`Pass::Launch`] that follows repeats the same steps (every map found in
/// the cache) and launches.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Prepare,
    Launch,
}

/// One rank's own buffers (on the one GPU of the emulated form).
struct RankWork {
    route_error: CudaSlice<u32>,
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    tile_offsets: CudaSlice<u32>,
    row_slot: CudaSlice<u32>,
    slot_row: CudaSlice<i32>,
    /// u32 [`crate::route::workspace_words`]: the routing's per-chunk counts.
    route_chunks: CudaSlice<u32>,
    /// u32 \[1\]: `route_fused`'s grid-barrier word (zeroed once; each routing leaves it ready).
    route_barrier: CudaSlice<u32>,
    h: CudaSlice<bf16>,
    y: CudaSlice<bf16>,
    bwd: Option<BwdWork>,
    /// The FP8 forward's buffers (allocated at the first [`EpLayer::forward_fp8`]).
    fp8: Option<Fp8Work>,
}

/// One rank's buffers of the FP8 forward: its tokens' codes and scales (the dispatch sends them), h's codes and
/// scales over its receive rows (GEMM1's epilogue writes them, GEMM2 reads them).
struct Fp8Work {
    /// e4m3 [max_tokens, H].
    x8: CudaSlice<u8>,
    /// f32 [max_tokens, H / 128].
    x8s: CudaSlice<f32>,
    /// e4m3 [max_recv, I].
    h8: CudaSlice<u8>,
    /// f32 [max_recv, I / 128].
    h8s: CudaSlice<f32>,
    /// An FP8 dx's dz row codes, e4m3 [max_recv, 2I], and scales, f32 [max_recv, 2I / 128] (allocated at the first
    /// [`EpLayer::backward_fp8`] with [`crate::layer::Fp8Backward::Dx`]).
    dz8: Option<(CudaSlice<u8>, CudaSlice<f32>)>,
}

/// The MoE layer at EP = R, R ranks emulated on one GPU (forward).
pub struct EpLayer {
    /// Unique in the process: the saved states of its forwards carry it ([`EpSaved`]).
    id: u64,
    gpu: Arc<Gpu>,
    cfg: LayerConfig,
    group: RankGroup,
    ranks: Vec<RankWork>,
    /// Calls issued by the host (eager or captured in a CUDA graph; a graph's replays are not counted): the
    /// identity of a forward for its backward. The device's call counters (the epochs) run ahead of it by the
    /// calls that graph replays made.
    calls: u32,
    /// The forward call whose state the workspace holds (its gathered counts, local layouts, the received rows'
    /// weights and slots, the x rows or their codes, z with `Save::WithZ`): the latest forward's, or the forward
    /// whose backward ran after it (that backward dispatched its rows again); 0 = none.
    holds: u32,
    /// The device's call counter (every rank's) as the last [`EpLayer::check`] read it: records of later epochs
    /// are new.
    checked_epoch: u32,
    /// Errors a check read but did not return yet (one is returned per check, oldest first).
    pending: std::collections::VecDeque<Error>,
    /// u32 [max_recv]: 0, 1, 2, ... (row -> itself: the owner's rows are their own slots for the EP = 1 kernels).
    ident: Option<CudaSlice<u32>>,
    timeout_ns: u64,
    withhold: Option<(usize, Phase)>,
    maps: MapCache,
    pull: bool,
    scatter: bool,
}

impl EpLayer {
    /// `world` ranks emulated on `gpu`; `cfg.experts` is the global E (a multiple of `world`), `cfg.max_tokens`
    /// the most tokens of one rank; `cfg.save` = `Save::WithZ` makes every forward's GEMM1 store z for the backward
    /// (each rank's z buffer, [max_recv, 2I], allocated at the first forward), which then skips its recompute.
    pub fn new(gpu: Arc<Gpu>, cfg: LayerConfig, world: usize) -> Result<Self> {
        Self::check_config(&cfg, world)?;
        // every block of the emulated ranks resident at once: R * B <= SMs
        let blocks = (gpu.sm_count() as usize / world).min(MAX_BLOCKS_PER_RANK);
        if blocks == 0 {
            return Err(Error::InvalidArgument(format!("{world} ranks > {} SMs", gpu.sm_count())));
        }
        let (t, k, h) = (cfg.max_tokens as u64, cfg.top_k as u64, cfg.hidden as u64);
        let layout = Workspace::new(t, k, h, cfg.experts as u64, world as u64, blocks as u64).ok_or_else(|| {
            // not met after `check_config`'s bounds; kept so that no size can wrap
            Error::InvalidArgument(format!(
                "the workspace of {world} ranks x max_tokens {t} x top-k {k}, hidden {h}, {} experts overflows \
                 64-bit offsets",
                cfg.experts
            ))
        })?;
        let group = RankGroup::emulated(&gpu, world, layout)?;
        let (slots, recv) = (layout.max_slots as usize, layout.max_recv as usize);
        let mut ranks = Vec::with_capacity(world);
        for _ in 0..world {
            let mut route_error = gpu.alloc::<u32>(1)?;
            gpu.fill_bytes(&mut route_error, 0)?;
            let mut route_barrier = gpu.alloc::<u32>(1)?;
            gpu.fill_bytes(&mut route_barrier, 0)?;
            ranks.push(RankWork {
                route_error,
                route_barrier,
                counts: gpu.alloc(cfg.experts)?,
                offsets: gpu.alloc(cfg.experts + 1)?,
                tile_offsets: gpu.alloc(cfg.experts + 1)?,
                row_slot: gpu.alloc(slots)?,
                slot_row: gpu.alloc(slots)?,
                route_chunks: gpu.alloc(crate::route::workspace_words(slots, cfg.experts))?,
                h: gpu.alloc(recv * cfg.intermediate)?,
                y: gpu.alloc(recv * cfg.hidden)?,
                bwd: None,
                fp8: None,
            });
        }
        let maps = MapCache::new(&gpu)?;
        Ok(EpLayer {
            id: next_layer_id(),
            gpu,
            cfg,
            group,
            ranks,
            calls: 0,
            holds: 0,
            checked_epoch: 0,
            pending: std::collections::VecDeque::new(),
            ident: None,
            timeout_ns: DEFAULT_TIMEOUT_NS,
            withhold: None,
            maps,
            pull: std::env::var("MEGAMOE_EP_PULL").is_ok_and(|v| v == "1"),
            scatter: std::env::var("MEGAMOE_EP_SCATTER").is_ok_and(|v| v == "1"),
        })
    }

    /// The configuration's checks for `world` ranks. Every size the layer derives from it (the receive rows
    /// `world * max_tokens * k`, their elements, the weights' elements) in checked arithmetic, before
    /// [`LayerConfig::validate`] so that none can wrap whatever it does: a wrapped size would allocate buffers
    /// for a few rows, which a normal call then writes past on the device. Once these hold, the unchecked
    /// products of the calls (`tokens * hidden`, the weights' lengths, the buffers of the receive rows) fit.
    fn check_config(cfg: &LayerConfig, world: usize) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if world == 0 || world > MAX_RANKS || cfg.experts % world != 0 {
            return bad(format!(
                "{world} ranks for {} experts (1..={MAX_RANKS} ranks, dividing the experts)",
                cfg.experts
            ));
        }
        let (t, k) = (cfg.max_tokens, cfg.top_k);
        let Some(slots) = t.checked_mul(k) else {
            return bad(format!("max_tokens {t} x top-k {k} overflows"));
        };
        let Some(recv) = slots.checked_mul(world) else {
            return bad(format!("{world} ranks x max_tokens {t} x top-k {k} overflows"));
        };
        let Some(widest) = cfg.intermediate.checked_mul(2).map(|i2| i2.max(cfg.hidden)) else {
            return bad(format!("intermediate size {} x 2 overflows", cfg.intermediate));
        };
        // the kernels' element offsets into the receive rows (h: I, z and dz: 2I, x, y and dy: H columns) are
        // unsigned 32-bit
        if recv.checked_mul(widest).is_none_or(|n| n >= 1 << 32) {
            return bad(format!(
                "{world} ranks x max_tokens {t} x top-k {k} rows of {widest} elements exceed 32-bit element offsets"
            ));
        }
        // W1 [E / R, 2I, H] and its f32 gradient, the largest of the weights' buffers (2I fits: checked above)
        let per = cfg.experts / world;
        let (i2, h) = (2 * cfg.intermediate, cfg.hidden);
        if per.checked_mul(i2).and_then(|n| n.checked_mul(h)).and_then(|n| n.checked_mul(4)).is_none() {
            return bad(format!(
                "{per} experts per rank x 2 x intermediate {} x hidden {h}: W1's size overflows",
                cfg.intermediate
            ));
        }
        cfg.validate()
    }

    /// Dispatch by pull (docs/FUSED.md step 2): the sources push only each row's weight and (rank, slot) and
    /// publish their x address; each owner's GEMM1 copies its rows from the sources' x with the producer
    /// warpgroup's idle warps while it computes (`grouped_gemm_swiglu_mv`), each m-tile loaded once its rows
    /// are counted. Bitwise the same outputs as the push. Default: `MEGAMOE_EP_PULL=1`, else push.
    pub fn set_pull_dispatch(&mut self, pull: bool) {
        self.pull = pull;
    }

    /// Combine by scatter (docs/FUSED.md step 2): each owner's GEMM2 writes every row straight into its source's
    /// `back` slot through the peer pointer (`grouped_gemm_bf16_scatter` with `c_dst_ranks`), and `ep_combine`
    /// only releases the flags before the sources sum: no y rows written and copied again. Bitwise the same
    /// outputs. Default: `MEGAMOE_EP_SCATTER=1`, else the copy.
    pub fn set_scatter_combine(&mut self, scatter: bool) {
        self.scatter = scatter;
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

    /// Every rank's inputs, and with `outs` (the forward) its output: counts, lengths, devices. The backward runs
    /// them too (no outputs): its weights' tensor maps are encoded from the configuration's sizes and its dispatch
    /// reads topk_ids and topk_weights for every slot, so a short buffer would be read past its end.
    fn check_inputs(&self, inp: &[RankInputs<'_>], outs: Option<&[&mut CudaSlice<bf16>]>) -> Result<()> {
        let c = &self.cfg;
        self.check_ranks(inp.len(), outs)?;
        let per = c.experts / self.world();
        let me = self.gpu.ordinal();
        for (r, i) in inp.iter().enumerate() {
            self.check_tokens(r, (i.tokens, i.x, i.topk_ids, i.topk_weights), outs.map(|o| &*o[r]))?;
            let exact = [
                ("W1", i.w1.len(), per * 2 * c.intermediate * c.hidden, i.w1.ordinal()),
                ("W2", i.w2.len(), per * c.hidden * c.intermediate, i.w2.ordinal()),
            ];
            check_exact(r, &exact, per, me)?;
        }
        Ok(())
    }

    /// One input a rank (and with `outs`, one output).
    fn check_ranks(&self, inputs: usize, outs: Option<&[&mut CudaSlice<bf16>]>) -> Result<()> {
        let r_n = self.world();
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if inputs != r_n {
            return bad(format!("{inputs} inputs for {r_n} ranks"));
        }
        if let Some(o) = outs.filter(|o| o.len() != r_n) {
            return bad(format!("{} outputs for {r_n} ranks", o.len()));
        }
        Ok(())
    }

    /// Rank r's tokens (x, topk_ids, topk_weights) and output: counts, lengths, devices.
    fn check_tokens(
        &self,
        r: usize,
        (t, x, ids, tw): (usize, &CudaSlice<bf16>, &CudaSlice<i32>, &CudaSlice<f32>),
        out: Option<&CudaSlice<bf16>>,
    ) -> Result<()> {
        let c = &self.cfg;
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if t > c.max_tokens {
            return bad(format!("rank {r}: {t} tokens > the configured maximum {}", c.max_tokens));
        }
        let at_least = [
            ("x", Some(x.len()), t * c.hidden),
            ("topk_ids", Some(ids.len()), t * c.top_k),
            ("topk_weights", Some(tw.len()), t * c.top_k),
            ("out", out.map(|o| o.len()), t * c.hidden),
        ];
        for (name, got, need) in at_least {
            if let Some(got) = got.filter(|&got| got < need) {
                return bad(format!("rank {r}: {name} has {got} elements, the layer needs {need}"));
            }
        }
        let me = self.gpu.ordinal();
        let ords = [
            ("x", Some(x.ordinal())),
            ("topk_ids", Some(ids.ordinal())),
            ("topk_weights", Some(tw.ordinal())),
            ("out", out.map(|o| o.ordinal())),
        ];
        for (name, d) in ords {
            if let Some(d) = d.filter(|&d| d != me) {
                return bad(format!("rank {r}: {name} lives on device {d}, the layer on device {me}"));
            }
        }
        Ok(())
    }

    /// Forward at EP = R: `outs[r][t] = sum_j w_tj * expert(ids_tj)(x_t)` for every rank r, bitwise the EP = 1
    /// layer's result on the ranks' tokens concatenated in rank order. Asynchronous on the GPU's stream, no host
    /// synchronisation; call [`EpLayer::check`] at a synchronisation point to learn of a device-side timeout.
    ///
    /// CUDA graphs: after one eager forward (and backward, if the graph holds one) on the same buffers, the calls
    /// can be captured on the GPU's stream and replayed on new contents of those buffers; the token counts, the
    /// modes and the timeout are those of the capture. Each replayed call is a new epoch on the device. The host
    /// cannot see replays: a replayed backward must follow a replayed (or eager) forward of the same tokens, and
    /// whether a backward sends its rows again ([`EpSaved`]) is decided from the calls the host issued (at capture
    /// for a captured backward). Keep a forward and its backward on the same side: both captured (in one graph or
    /// in graphs replayed in the captured order) or both eager, so that no replay the host cannot see comes
    /// between an eager forward and its eager backward.
    pub fn forward(&mut self, inp: &[RankInputs<'_>], outs: &mut [&mut CudaSlice<bf16>]) -> Result<EpSaved> {
        self.run(inp, outs, false).map(|(s, _)| s)
    }

    /// [`EpLayer::forward`] with device-event times of the dispatch kernel, the GEMMs and the combine kernel
    /// (synchronises three times; for benchmarks).
    pub fn forward_timed(
        &mut self,
        inp: &[RankInputs<'_>],
        outs: &mut [&mut CudaSlice<bf16>],
    ) -> Result<(EpSaved, StageTimes)> {
        self.run(inp, outs, true)
    }

    /// Start a call: count it on the host and launch `ep_epoch_next`, which advances every rank's call counter
    /// (the epoch the call's kernels read) on the device, first of the call's launches. Returns the call number.
    fn begin_call(&mut self) -> Result<u32> {
        // u32::MAX - 1 is the last usable epoch (an exhausted counter holds u32::MAX). Eager calls stop here;
        // a graph's replays advance the device's counters without the host, which then learns of exhaustion
        // at `check`
        if self.calls >= u32::MAX - 1 {
            return Err(Error::InvalidArgument("2^32 - 2 calls on one workspace: make a new layer".into()));
        }
        let p = self.group.epoch_next(0, self.world())?;
        // SAFETY: the counters are words of the rank group's workspaces; one block, the kernel's 32 threads.
        unsafe { self.gpu.launch("ep_epoch_next", Launch::new(1, 32, 0), &p)? };
        self.calls += 1;
        Ok(self.calls)
    }

    fn run(
        &mut self,
        inp: &[RankInputs<'_>],
        outs: &mut [&mut CudaSlice<bf16>],
        timed: bool,
    ) -> Result<(EpSaved, StageTimes)> {
        self.check_inputs(inp, Some(&*outs))?;
        self.alloc_saved_z()?;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        // every step of the GEMMs that can fail (their tensor maps, kernel choices), before the call's first
        // launch: a call that fails has launched nothing and left the workspace, and the saved state of the
        // previous forward, as they were (old calls' maps forgotten first, never between a lookup and its launch)
        self.maps.trim(&self.gpu)?;
        for (r, i) in inp.iter().enumerate() {
            let (h, y) = (dptr(&self.ranks[r].h, &s), dptr(&self.ranks[r].y, &s));
            self.gemm1(r, i, h, self.saved_z(r), self.pull, Pass::Prepare)?;
            self.gemm2(r, i, h, y, Pass::Prepare)?;
        }
        let call = self.begin_call()?;
        // from here the workspace holds this call's state (or a failed call's): an older forward's backward
        // dispatches its rows again
        self.holds = call;
        for (r, i) in inp.iter().enumerate() {
            self.route(r, i.tokens, i.topk_ids)?;
        }
        let mut ranks = [NO_RANK; MAX_RANKS];
        for (r, ((i, o), w)) in inp.iter().zip(outs.iter()).zip(&self.ranks).enumerate() {
            ranks[r] = EpRank { x: dptr(i.x, &s), y: dptr(&w.y, &s), out: dptr(&**o, &s), ..self.rank_common(r, i) };
        }
        let p = EpParams { state: call, ..self.params(ranks, false) };
        let dispatch_ms = self.launch_ep("ep_dispatch", &p, timed)?;
        let mut gemms = || -> Result<()> {
            for (r, i) in inp.iter().enumerate() {
                let (h, y) = (dptr(&self.ranks[r].h, &s), dptr(&self.ranks[r].y, &s));
                self.gemm1(r, i, h, self.saved_z(r), self.pull, Pass::Launch)?;
                self.gemm2(r, i, h, y, Pass::Launch)?;
            }
            Ok(())
        };
        let gemm_ms = if timed { g.timed(gemms)? } else { gemms().map(|_| 0.0)? };
        let combine_ms = self.launch_ep("ep_combine", &p, timed)?;
        let tokens = inp.iter().map(|i| i.tokens).collect();
        let saved = EpSaved { layer: self.id, call, tokens, fp8: false, z: self.save_z() };
        Ok((saved, StageTimes { dispatch_ms, gemm_ms, combine_ms }))
    }

    /// Buffers for one rank's FP8 weights (its E / R experts; uninitialised: fill them with
    /// [`EpLayer::quantize_fp8_weights`]), with W1's transposed codes when the layer's `fp8_backward` runs dx in
    /// FP8 ([`EpLayer::backward_fp8`]). H and I must be multiples of 128.
    pub fn alloc_fp8_weights(&self) -> Result<Fp8Weights> {
        let c = &self.cfg;
        let shape = (c.experts / self.world(), c.hidden, c.intermediate);
        Fp8Weights::alloc_shape(&self.gpu, shape, (c.fp8_backward.dx(), c.fp8_dh == Fp8Dh::Fp8))
    }

    /// Quantize one rank's bf16 W1 [E / R, 2I, H] and W2 [E / R, H, I] into `w8` in 128 x 128 blocks (after each
    /// optimizer step; asynchronous): each expert's codes and scales are the single-GPU layer's for that expert.
    pub fn quantize_fp8_weights(&self, w8: &mut Fp8Weights, w1: &CudaSlice<bf16>, w2: &CudaSlice<bf16>) -> Result<()> {
        let c = &self.cfg;
        let shape = (c.experts / self.world(), c.hidden, c.intermediate);
        w8.quantize_shape(&self.gpu, w1, w2, shape, self.gpu.ordinal())
    }

    /// The forward at EP = R in blockwise FP8, with the rows sent as FP8: each rank quantizes its tokens (1 x 128
    /// scales), the dispatch sends each routed row's codes and scales to its expert's owner (about half the bf16
    /// rows' bytes), the owner runs the FP8 GEMM1 with the SwiGLU and h's quantization in its epilogue and the FP8
    /// GEMM2 over its receive rows, and the bf16 results travel back and are summed as in [`EpLayer::forward`].
    /// Bitwise the single-GPU [`crate::layer::MoeLayer::forward_fp8`] on the ranks' tokens concatenated in rank
    /// order with the experts' weights concatenated likewise. Needs H a multiple of 512 and I of 128; uses the push
    /// dispatch and the copying combine whatever [`EpLayer::set_pull_dispatch`] and
    /// [`EpLayer::set_scatter_combine`] say. Its backward is [`EpLayer::backward_fp8`] ([`EpLayer::backward`]
    /// refuses the state: the workspace holds the rows' codes). Asynchronous, no host synchronisation; the first
    /// call allocates the FP8 buffers (then capturable in a CUDA graph as [`EpLayer::forward`]).
    pub fn forward_fp8(&mut self, inp: &[RankFp8Inputs<'_>], outs: &mut [&mut CudaSlice<bf16>]) -> Result<EpSaved> {
        self.run_fp8(inp, outs, false).map(|(s, _)| s)
    }

    /// [`EpLayer::forward_fp8`] with device-event times (the dispatch's include the tokens' quantization).
    pub fn forward_fp8_timed(
        &mut self,
        inp: &[RankFp8Inputs<'_>],
        outs: &mut [&mut CudaSlice<bf16>],
    ) -> Result<(EpSaved, StageTimes)> {
        self.run_fp8(inp, outs, true)
    }

    /// The FP8 forward's arguments: the shapes the FP8 kernels take, and each rank's tokens, output and weights.
    fn check_fp8_inputs(&self, inp: &[RankFp8Inputs<'_>], outs: &[&mut CudaSlice<bf16>]) -> Result<()> {
        let c = &self.cfg;
        let (h, i) = (c.hidden, c.intermediate);
        if h % 512 != 0 || i % 128 != 0 {
            return Err(Error::InvalidArgument(format!(
                "forward_fp8: H = {h} must be a multiple of 512 and I = {i} of 128"
            )));
        }
        self.check_ranks(inp.len(), Some(outs))?;
        let per = c.experts / self.world();
        let me = self.gpu.ordinal();
        for (r, x) in inp.iter().enumerate() {
            self.check_tokens(r, (x.tokens, x.x, x.topk_ids, x.topk_weights), Some(&*outs[r]))?;
            let w = x.weights;
            let exact = [
                ("W1's codes", w.w1.len(), per * 2 * i * h, w.w1.ordinal()),
                ("W1's scales", w.w1_scales.len(), per * 2 * i / 128 * (h / 128), w.w1_scales.ordinal()),
                ("W2's codes", w.w2.len(), per * h * i, w.w2.ordinal()),
                ("W2's scales", w.w2_scales.len(), per * h / 128 * (i / 128), w.w2_scales.ordinal()),
            ];
            check_exact(r, &exact, per, me)?;
        }
        Ok(())
    }

    /// Every rank's FP8 buffers, once.
    fn alloc_fp8(&mut self) -> Result<()> {
        if self.ranks.iter().all(|w| w.fp8.is_some()) {
            return Ok(());
        }
        no_alloc_in_capture(&self.gpu, "the EP layer's first FP8 forward")?;
        let c = self.cfg;
        let recv = self.group.layout.max_recv as usize;
        for w in self.ranks.iter_mut() {
            w.fp8 = Some(Fp8Work {
                x8: self.gpu.alloc(c.max_tokens * c.hidden)?,
                x8s: self.gpu.alloc(c.max_tokens * c.hidden / 128)?,
                h8: self.gpu.alloc(recv * c.intermediate)?,
                h8s: self.gpu.alloc(recv * c.intermediate / 128)?,
                dz8: None,
            });
        }
        Ok(())
    }

    fn run_fp8(
        &mut self,
        inp: &[RankFp8Inputs<'_>],
        outs: &mut [&mut CudaSlice<bf16>],
        timed: bool,
    ) -> Result<(EpSaved, StageTimes)> {
        self.check_fp8_inputs(inp, outs)?;
        self.alloc_fp8()?;
        self.alloc_saved_z()?;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        // every step that can fail before the first launch, as `run`
        self.maps.trim(&self.gpu)?;
        for (r, i) in inp.iter().enumerate() {
            self.gemms_fp8(r, i.weights, Pass::Prepare)?;
        }
        let call = self.begin_call()?;
        self.holds = call;
        for (r, i) in inp.iter().enumerate() {
            self.route(r, i.tokens, i.topk_ids)?;
        }
        let mut ranks = [NO_RANK; MAX_RANKS];
        for (r, (i, o)) in inp.iter().zip(outs.iter()).enumerate() {
            let w = &self.ranks[r];
            let f = w.fp8.as_ref().expect("allocated above");
            ranks[r] = EpRank {
                x: dptr(&f.x8, &s),
                x_scales: dptr(&f.x8s, &s),
                y: dptr(&w.y, &s),
                out: dptr(&**o, &s),
                ..self.rank_routing(r, i.tokens, i.topk_ids, i.topk_weights)
            };
        }
        // the push of codes and the copying combine (`EpParams::fp8`)
        let p = EpParams { fp8: 1, pull: 0, scatter: 0, state: call, ..self.params(ranks, false) };
        let dispatch = || -> Result<()> {
            for (i, rk) in inp.iter().zip(&ranks) {
                // SAFETY: x holds at least tokens * H bf16 (checked), the rank's codes and scales max_tokens >=
                // tokens rows of H and H / 128.
                unsafe { q::quantize_rows_raw(&g, dptr(i.x, &s), rk.x, rk.x_scales, i.tokens, c.hidden)? };
            }
            self.launch_ep("ep_dispatch", &p, false).map(|_| ())
        };
        let dispatch_ms = if timed { g.timed(dispatch)? } else { dispatch().map(|_| 0.0)? };
        let mut gemms = || -> Result<()> {
            for (r, i) in inp.iter().enumerate() {
                self.gemms_fp8(r, i.weights, Pass::Launch)?;
            }
            Ok(())
        };
        let gemm_ms = if timed { g.timed(gemms)? } else { gemms().map(|_| 0.0)? };
        let combine_ms = self.launch_ep("ep_combine", &p, timed)?;
        let tokens = inp.iter().map(|i| i.tokens).collect();
        let saved = EpSaved { layer: self.id, call, tokens, fp8: true, z: self.save_z() };
        Ok((saved, StageTimes { dispatch_ms, gemm_ms, combine_ms }))
    }

    /// Rank r's FP8 GEMMs over its receive rows: GEMM1 with the SwiGLU and h quantized in its epilogue
    /// (`grouped_gemm_fp8w_swiglu_q`, the codes and scales the dispatch left in `recv`), then GEMM2 into y (the
    /// single-GPU FP8 forward's kernels, on the rank's local layout).
    fn gemms_fp8(&mut self, r: usize, w: &Fp8Weights, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        let (h, i) = (c.hidden, c.intermediate);
        let per = c.experts / self.world();
        let lay = self.group.layout;
        let recv = lay.max_recv as usize;
        let ws = self.group.ws(r);
        let (x8, x8s) = (ws + lay.recv, ws + lay.recv + lay.max_recv * h as u64);
        let (h8, h8s, y) = {
            let wk = &self.ranks[r];
            let f = wk.fp8.as_ref().expect("allocated before any FP8 GEMM");
            (dptr(&f.h8, &s), dptr(&f.h8s, &s), dptr(&wk.y, &s))
        };
        let layout = (ws + lay.local_offsets, ws + lay.local_tiles, per, recv);
        // with `Save::WithZ` GEMM1 also stores z (the recompute's bits) for the backward
        let z = self.saved_z(r);
        let k1 = if z != 0 { "grouped_gemm_fp8w_swiglu_qz" } else { "grouped_gemm_fp8w_swiglu_q" };
        let maps1 = [
            self.maps.get_u8(&g, x8, recv, h, 128)?,
            self.maps.get_u8(&g, dptr(&w.w1, &s), per * 2 * i, h, 128)?,
            self.maps.get_u8(&g, h8, recv, i, 64)?,
        ];
        let mut p1 = fp8_gemm(layout, (x8s, dptr(&w.w1_scales, &s), h8), (i, h), maps1);
        p1.c_scales = h8s;
        if z != 0 {
            (p1.z, p1.map_z) = (z, self.maps.get(&g, z, recv, 2 * i, 64, 64)?);
        }
        let cfg1 = q::launch_cfg(&g, k1, recv, per, i, q::tile_cols(k1))?;
        let maps2 = [
            self.maps.get_u8(&g, h8, recv, i, 128)?,
            self.maps.get_u8(&g, dptr(&w.w2, &s), per * h, i, 128)?,
            self.maps.get(&g, y, recv, h, 64, 64)?,
        ];
        let p2 = fp8_gemm(layout, (h8s, dptr(&w.w2_scales, &s), y), (h, i), maps2);
        let k2 = plain_kernel();
        let cfg2 = q::launch_cfg(&g, k2, recv, per, h, q::tile_cols(k2))?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // SAFETY: recv holds max_recv rows of H codes and, after them, max_recv rows of H / 128 scales (inside its
        // bf16 [max_recv, H]); W1 per * 2I rows of H codes, W2 per * H rows of I (checked); h's codes and scales
        // and y max_recv rows; the local offsets the kernels read are clamped to max_recv on the device.
        unsafe {
            g.launch(k1, cfg1, &p1)?;
            g.launch(k2, cfg2, &p2)
        }
    }

    /// Rank r's routing layout over its own `tokens * k` slots and the E global experts.
    fn route(&self, r: usize, tokens: usize, topk_ids: &CudaSlice<i32>) -> Result<()> {
        let (g, c) = (&self.gpu, &self.cfg);
        let s = g.stream();
        let w = &self.ranks[r];
        let route = Route {
            topk_ids: dptr(topk_ids, s),
            counts: dptr(&w.counts, s),
            offsets: dptr(&w.offsets, s),
            tile_offsets: dptr(&w.tile_offsets, s),
            row_slot: dptr(&w.row_slot, s),
            slot_row: dptr(&w.slot_row, s),
            error: dptr(&w.route_error, s),
            chunk_counts: dptr(&w.route_chunks, s),
            barrier: dptr(&w.route_barrier, s),
            timeout_ns: 0,
            slots: (tokens * c.top_k) as u32,
            experts: c.experts as u32,
            tile_m: kh::GEMM_BM,
            chunk: 0,
        };
        // SAFETY: the routing buffers hold E, E + 1 and max_slots entries, the chunk workspace covers max_slots,
        // the barrier word is the rank's own; ids are range-checked on the device; with 0 slots the kernels only
        // write zero counts and offsets (and the error word).
        unsafe { crate::route::launch(g, &route) }
    }

    /// One launch of a dispatch or combine kernel for all the emulated ranks; its device time when `timed`.
    fn launch_ep(&self, kernel: &'static str, p: &EpParams, timed: bool) -> Result<f64> {
        let g = &self.gpu;
        let grid = self.world() as u32 * self.group.layout.blocks as u32;
        let smem = if kernel == "ep_dispatch" { 16 + 4 * self.cfg.experts as u32 } else { 16 };
        // SAFETY: every index the kernels form is bounded by the workspace layout (docs in the kernels); the grid
        // is at most the SM count with small blocks, so every waiting block is resident.
        let f = || unsafe { g.launch(kernel, Launch::new(grid, EP_THREADS, smem), p) };
        if timed {
            g.timed(f)
        } else {
            f().map(|_| 0.0)
        }
    }

    /// Rank r's buffers that forward and backward share.
    fn rank_common(&self, r: usize, i: &RankInputs<'_>) -> EpRank {
        self.rank_routing(r, i.tokens, i.topk_ids, i.topk_weights)
    }

    /// Rank r's routing buffers and token count in a rank entry.
    fn rank_routing(&self, r: usize, tokens: usize, ids: &CudaSlice<i32>, weights: &CudaSlice<f32>) -> EpRank {
        let s = self.gpu.stream();
        let w = &self.ranks[r];
        EpRank {
            topk_ids: dptr(ids, s),
            w: dptr(weights, s),
            counts: dptr(&w.counts, s),
            offsets: dptr(&w.offsets, s),
            row_slot: dptr(&w.row_slot, s),
            slot_row: dptr(&w.slot_row, s),
            tokens: tokens as u32,
            route_error: dptr(&w.route_error, s),
            ..NO_RANK
        }
    }

    fn params(&self, ranks: [EpRank; MAX_RANKS], backward: bool) -> EpParams {
        let (withhold_rank, withhold_phase) = match self.withhold {
            Some((r, ph)) => (r as u32 + 1, ph as u32),
            None => (0, 0),
        };
        EpParams {
            group: self.group.device(0, self.timeout_ns),
            ws: self.group.layout,
            ranks,
            experts: self.cfg.experts as u32,
            k: self.cfg.top_k as u32,
            hidden: self.cfg.hidden as u32,
            tile_m: kh::GEMM_BM,
            withhold_rank,
            withhold_phase,
            backward: backward as u32,
            pull: (self.pull && !backward) as u32,
            scatter: (self.scatter && !backward) as u32,
            fp8: 0,
            resend_x: 0,
            state: 0,
        }
    }

    /// A grouped-GEMM parameter block over rank r's local layout (read on the device).
    fn local_gemm(&self, r: usize) -> GroupedGemm {
        let ws = self.group.ws(r);
        let lay = &self.group.layout;
        GroupedGemm {
            offsets: ws + lay.local_offsets,
            tile_offsets: ws + lay.local_tiles,
            experts: (self.cfg.experts / self.world()) as u32,
            // every local buffer holds max_recv rows (the dispatch clamps the local offsets to it; the kernels
            // clamp again)
            rows_max: lay.max_recv as u32,
            ..zero_gemm()
        }
    }

    /// One M-grouped GEMM launch over rank r's receive rows (with [`Pass::Prepare`], its kernel and launch
    /// chosen, not launched).
    fn mgemm(&self, kernel: &'static str, mut p: GroupedGemm, pass: Pass) -> Result<()> {
        let recv = self.group.layout.max_recv as u32;
        let per = (self.cfg.experts / self.world()) as u32;
        let kernel = crate::gemm::kernel_for(&self.gpu, kernel, &p)?;
        // the run-time tile walk, as the local layer's GEMMs
        let kernel = crate::gemm::sched_variant(&self.gpu, kernel, &mut p)?;
        let launch = m_grouped_launch(&self.gpu, kernel, recv as usize, per as usize, p.n_tiles)?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // SAFETY: A holds max_recv rows, C max_recv rows of ldc; the local offsets the kernels read are clamped to
        // max_recv on the device; B holds the rank's experts; a `_dyn` kernel's counter (`p.sched`) is zeroed
        // first.
        unsafe { self.gpu.launch_counted(p.sched, kernel, launch, &p) }
    }

    /// Rank r's GEMM1 + SwiGLU over its received x rows: h, and z when `z` is non-zero.
    fn gemm1(&mut self, r: usize, inp: &RankInputs<'_>, h: u64, z: u64, pull: bool, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let c = self.cfg;
        let per = c.experts / self.world();
        let lay = self.group.layout;
        let recv = lay.max_recv as usize;
        let map_a = self.maps.get(&g, self.group.ws(r) + lay.recv, recv, c.hidden, kh::GEMM_BM, 64)?;
        // gate rows then up rows of W1 per tile: the columns of h a tile covers (`gemm::swiglu_columns`)
        let cols = crate::gemm::swiglu_columns();
        let map_b = self.maps.get(&g, dptr(inp.w1, g.stream()), per * 2 * c.intermediate, c.hidden, cols as u32, 64)?;
        // whole 64-row groups of an expert leave through the copy engine: h [recv, I], z [recv, 2I]
        let (bx, by) = kh::GEMM_C_BOX;
        let map_c = if h != 0 { self.maps.get(&g, h, recv, c.intermediate, bx, by)? } else { 0 };
        let map_z = if z != 0 { self.maps.get(&g, z, recv, 2 * c.intermediate, bx, by)? } else { 0 };
        let p = GroupedGemm {
            map_a,
            map_b,
            c: h,
            z,
            map_c,
            map_z,
            n: c.intermediate as u32,
            k: c.hidden as u32,
            n_b: 2 * c.intermediate as u32,
            ldc: c.intermediate as u32,
            n_tiles: c.intermediate.div_ceil(cols) as u32,
            ..self.local_gemm(r)
        };
        if pull {
            // the forward's rows come from the sources' x through the workspace's recv_meta and src_x (the
            // backward's recompute of z reads the rows this copy left in recv)
            let ws = self.group.ws(r);
            let words = Workspace::arrive_words(lay.max_recv, c.experts as u64);
            let p = GroupedGemm {
                a_copy: ws + lay.recv,
                row_slot: ws + lay.recv_meta,
                a_src_ranks: ws + lay.src_x,
                top_k: c.top_k as u32,
                arrive: ws + lay.arrive,
                error: ws + lay.arrive + 4 * (words - 1),
                timeout_ns: self.timeout_ns,
                ..p
            };
            // the static tile walk: the run-time one measured 1.3-2.8% slower in the pull modes (docs/RESULTS.md
            // 2026-12-06f call 3: a tile taken at run time waits for rows another block's movers pull)
            // SAFETY: as `mgemm`; the movers copy rows r < the local offsets' end (<= max_recv) from the rank and
            // slot recv_meta[r] names (written by this call's dispatch for every such row), x of that rank
            // holding its tokens' rows.
            let kernel = crate::gemm::kernel_for(&self.gpu, "grouped_gemm_swiglu", &p)?;
            let kernel = if kernel == "grouped_gemm_swiglu_ew7" {
                "grouped_gemm_swiglu_ew7_mv"
            } else {
                "grouped_gemm_swiglu_mv"
            };
            let launch = m_grouped_launch(&self.gpu, kernel, recv, per, p.n_tiles)?;
            if pass == Pass::Prepare {
                return Ok(());
            }
            return unsafe { self.gpu.launch(kernel, launch, &p) };
        }
        self.mgemm("grouped_gemm_swiglu", p, pass)
    }

    /// Rank r's GEMM2: y rows from h rows.
    fn gemm2(&mut self, r: usize, inp: &RankInputs<'_>, h: u64, y: u64, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let c = self.cfg;
        let per = c.experts / self.world();
        let recv = self.group.layout.max_recv as usize;
        let map_a = self.maps.get(&g, h, recv, c.intermediate, kh::GEMM_BM, 64)?;
        let map_b = self.maps.get(&g, dptr(inp.w2, g.stream()), per * c.hidden, c.intermediate, kh::GEMM_BN / 2, 64)?;
        let map_c = self.maps.get(&g, y, recv, c.hidden, 64, 64)?;
        let p = GroupedGemm {
            map_a,
            map_b,
            c: y,
            map_c,
            n: c.hidden as u32,
            k: c.intermediate as u32,
            n_b: c.hidden as u32,
            ldc: c.hidden as u32,
            n_tiles: (c.hidden as u32).div_ceil(kh::GEMM_BN),
            ..self.local_gemm(r)
        };
        if self.scatter {
            // every row to its source's back slot (recv_meta's pair, the owner's back_ptrs table), unweighted:
            // the sources weight and sum as before, so the bits stay EP = 1's
            let ws = self.group.ws(r);
            let lay = self.group.layout;
            let p = GroupedGemm {
                c: 0,
                map_c: 0,
                row_slot: ws + lay.recv_meta,
                c_dst_ranks: ws + lay.back_ptrs,
                c_rows: lay.max_slots as u32,
                ..p
            };
            return self.mgemm("grouped_gemm_bf16_scatter", p, pass);
        }
        self.mgemm("grouped_gemm_bf16", p, pass)
    }

    /// Backward of the forward of this layer that returned `saved`, on the same inputs, with `dy[r]` bf16 [T_r, H]
    /// per rank: every rank's dx and dtopk, and its experts' dW1 and dW2 in `W` (f32 or bf16; written, or added to
    /// with `accumulate`), bitwise the EP = 1 backward (z recomputed, the same `W`) on the concatenated tokens. dy
    /// travels to the experts like x; dx rows and each row's dtopk travel back; weight gradients stay local. When
    /// another forward has run on the layer since (one layer serving several model layers: [`EpSaved`]), the x
    /// rows travel again with dy (x must still hold the forward's tokens). Asynchronous, no host synchronisation;
    /// [`EpLayer::check`] reports a device timeout.
    pub fn backward<W: WgradElem>(
        &mut self,
        saved: &EpSaved,
        dy: &[&CudaSlice<bf16>],
        inp: &[RankInputs<'_>],
        grads: &mut [RankGrads<'_, W>],
        accumulate: bool,
    ) -> Result<()> {
        self.backward_impl(saved, dy, inp, None, grads, accumulate)
    }

    /// Backward of [`EpLayer::forward_fp8`] (`saved` its state): bitwise the single-GPU
    /// [`crate::layer::MoeLayer::backward_fp8`] with [`Fp8Dw1X::Codes`] on the concatenated tokens (and the same
    /// [`crate::layer::Fp8Backward`]: `Straight` or `Dx`). Each expert's owner holds its rows only as the codes the
    /// forward sent: it recomputes z in FP8 from them (W1's codes), receives dy in bf16 (as [`EpLayer::backward`]),
    /// runs dh with the SwiGLU backward and dtopk as the bf16 backward, dx in FP8 from dz's row codes and W1's
    /// transposed codes (`Fp8Backward::Dx`: `w8[r]` from [`EpLayer::alloc_fp8_weights`] of such a layer holds them)
    /// or in bf16, dW2 = (s dy)^T h and dW1 = dz^T x with x the forward's codes dequantized to bf16 (into `recv_dy`,
    /// free once dW2 has read it), and sends dx rows and dtopk back. Over forward and backward a routed row crosses
    /// the links as H (1 + 1 / 32) bytes of codes, then y, dy and dx in bf16 (2H each): 7.03H against the bf16
    /// layer's 8H; with `LayerConfig::fp8_dy` = [`Fp8Dy::Codes`] dy travels as codes too (each rank quantizes its
    /// dy, the owner dequantizes the rows into y, free until dx): 6.06H, and the twin is the single-GPU backward
    /// with the same setting. `inp[r]` are the forward's inputs with the rank's bf16 W1 and W2 (x is read only when
    /// another forward has run on the layer since: its codes travel again, H (1 + 1/32) bytes a routed row, as
    /// [`EpLayer::backward`] says); `w8[r]` the rank's FP8 weights of the forward.
    /// Needs `LayerConfig::fp8_dw1_x` = [`Fp8Dw1X::Codes`] (the owner has no bf16 x). Asynchronous, no host
    /// synchronisation; the first call allocates dz's codes (then capturable as [`EpLayer::backward`]).
    pub fn backward_fp8<W: WgradElem>(
        &mut self,
        saved: &EpSaved,
        dy: &[&CudaSlice<bf16>],
        inp: &[RankInputs<'_>],
        w8: &[&Fp8Weights],
        grads: &mut [RankGrads<'_, W>],
        accumulate: bool,
    ) -> Result<()> {
        self.backward_impl(saved, dy, inp, Some(w8), grads, accumulate)
    }

    /// The FP8 backward's configuration and each rank's FP8 weights.
    fn check_fp8_backward(&self, w8: &[&Fp8Weights]) -> Result<()> {
        let c = &self.cfg;
        let r_n = self.world();
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if c.fp8_dw1_x != Fp8Dw1X::Codes {
            return bad(format!(
                "backward_fp8 at EP computes dW1 from x's codes (an expert's owner holds no bf16 x): it needs \
                 LayerConfig::fp8_dw1_x = Fp8Dw1X::Codes (it is {:?})",
                c.fp8_dw1_x
            ));
        }
        // (`Fp8Dw1X::Codes` with FP8 weight gradients fails `LayerConfig::validate`, so no layer has them here)
        if w8.len() != r_n {
            return bad(format!("{} FP8 weights for {r_n} ranks", w8.len()));
        }
        let dh8 = c.fp8_dh == Fp8Dh::Fp8;
        if dh8 && c.fp8_dy != Fp8Dy::Codes {
            return bad("backward_fp8 at EP with an FP8 dh (Fp8Dh::Fp8) reads dy's codes on the owners: it needs \
                        LayerConfig::fp8_dy = Fp8Dy::Codes"
                .into());
        }
        let (per, h, i) = (c.experts / r_n, c.hidden, c.intermediate);
        let me = self.gpu.ordinal();
        for (r, w) in w8.iter().enumerate() {
            let mut exact = vec![
                ("W1's codes", w.w1.len(), per * 2 * i * h, w.w1.ordinal()),
                ("W1's scales", w.w1_scales.len(), per * 2 * i / 128 * (h / 128), w.w1_scales.ordinal()),
                ("W2's codes", w.w2.len(), per * h * i, w.w2.ordinal()),
                ("W2's scales", w.w2_scales.len(), per * h / 128 * (i / 128), w.w2_scales.ordinal()),
            ];
            if c.fp8_backward.dx() {
                let Some((qt, st)) = &w.w1t else {
                    return bad(format!(
                        "rank {r}: an FP8 dx needs W1's transposed codes: allocate the weights with \
                         EpLayer::alloc_fp8_weights of a layer whose fp8_backward runs dx in FP8"
                    ));
                };
                exact.push(("W1^T's codes", qt.len(), per * 2 * i * h, qt.ordinal()));
                exact.push(("W1^T's scales", st.len(), per * 2 * i / 128 * (h / 128), st.ordinal()));
            }
            if dh8 {
                let Some((qt, st)) = &w.w2t else {
                    return bad(format!(
                        "rank {r}: an FP8 dh needs W2's transposed codes: allocate the weights with \
                         EpLayer::alloc_fp8_weights of a layer with Fp8Dh::Fp8"
                    ));
                };
                exact.push(("W2^T's codes", qt.len(), per * i * h, qt.ordinal()));
                exact.push(("W2^T's scales", st.len(), per * i / 128 * (h / 128), st.ordinal()));
            }
            check_exact(r, &exact, per, me)?;
        }
        Ok(())
    }

    fn backward_impl<W: WgradElem>(
        &mut self,
        saved: &EpSaved,
        dy: &[&CudaSlice<bf16>],
        inp: &[RankInputs<'_>],
        w8: Option<&[&Fp8Weights]>,
        grads: &mut [RankGrads<'_, W>],
        accumulate: bool,
    ) -> Result<()> {
        let c = self.cfg;
        let r_n = self.world();
        let per = c.experts / r_n;
        let bad = |s: String| Err(Error::InvalidArgument(s));
        saved.check(self.id, r_n, w8.is_some())?;
        if dy.len() != r_n || grads.len() != r_n || inp.len() != r_n {
            return bad(format!("{} dy, {} grads and {} inputs for {r_n} ranks", dy.len(), grads.len(), inp.len()));
        }
        if let Some(w) = w8 {
            self.check_fp8_backward(w)?;
        }
        // the forward's checks of the inputs: the backward reads W1, W2, topk_ids and topk_weights too
        self.check_inputs(inp, None)?;
        let me = self.gpu.ordinal();
        for r in 0..r_n {
            let t = inp[r].tokens;
            if t != saved.tokens[r] {
                return bad(format!("rank {r}: {t} tokens, its forward had {}", saved.tokens[r]));
            }
            let gr = &grads[r];
            let at_least = [
                ("dy", dy[r].len(), t * c.hidden),
                ("dx", gr.dx.len(), t * c.hidden),
                ("dtopk", gr.dtopk.len(), t * c.top_k),
            ];
            for (name, got, need) in at_least {
                if got < need {
                    return bad(format!("rank {r}: {name} has {got} elements, the layer needs {need}"));
                }
            }
            let exact = [
                ("dW1", gr.dw1.len(), per * 2 * c.intermediate * c.hidden),
                ("dW2", gr.dw2.len(), per * c.hidden * c.intermediate),
            ];
            for (name, got, need) in exact {
                if got != need {
                    return bad(format!("rank {r}: {name} has {got} elements, the rank's experts need {need}"));
                }
            }
            let ords = [("dy", dy[r].ordinal()), ("dx", gr.dx.ordinal()), ("dtopk", gr.dtopk.ordinal())];
            for (name, d) in ords.into_iter().chain([("dW1", gr.dw1.ordinal()), ("dW2", gr.dw2.ordinal())]) {
                if d != me {
                    return bad(format!("rank {r}: {name} lives on device {d}, the layer on device {me}"));
                }
            }
        }
        let dx8 = w8.is_some() && c.fp8_backward.dx();
        let dy8 = w8.is_some() && c.fp8_dy == Fp8Dy::Codes;
        let allocated = self.ident.is_some()
            && self.ranks.iter().all(|w| w.bwd.is_some() && (!dx8 || w.fp8.as_ref().is_some_and(|f| f.dz8.is_some())));
        if !allocated && self.gpu.capturing()? {
            return bad("the EP layer's first backward allocates its buffers, which a CUDA graph capture cannot \
                        record: run a backward once outside the capture first"
                .into());
        }
        self.alloc_backward(dx8)?;
        // every step of every rank's GEMMs that can fail (tensor maps, kernel and schedule policies), before the
        // call's first launch: a backward that fails has written no rank's gradients
        self.maps.trim(&self.gpu)?;
        let w8r = |r: usize| w8.map(|w| w[r]);
        // the workspace no longer holds the forward's state (another forward ran since): its routing again, and its
        // rows sent again with dy
        let redispatch = saved.call != self.holds;
        // (z saved by the forward and still in the workspace, dy's codes on the links)
        let z = (saved.z && !redispatch, dy8);
        for r in 0..r_n {
            self.experts_backward(r, (&inp[r], w8r(r), z), &mut grads[r], accumulate, Pass::Prepare)?;
        }
        let g = self.gpu.clone();
        let s = g.stream().clone();
        self.begin_call()?;
        if redispatch {
            // until this call's last launch the workspace holds no forward's state whole
            self.holds = 0;
            for (r, i) in inp.iter().enumerate() {
                self.route(r, i.tokens, i.topk_ids)?;
            }
        }
        let mut ranks = [NO_RANK; MAX_RANKS];
        for r in 0..r_n {
            let w = &self.ranks[r];
            let b = w.bwd.as_ref().expect("allocated above");
            ranks[r] = EpRank {
                x: dptr(dy[r], &s),
                y: dptr(&w.y, &s),
                row_w: dptr(&b.row_dtopk, &s),
                out: dptr(&*grads[r].dx, &s),
                dtopk: dptr(&*grads[r].dtopk, &s),
                ..self.rank_common(r, &inp[r])
            };
            if dy8 {
                // dy's codes and scales into the rank's token codes (x's, free since the forward's dispatch)
                let f = w.fp8.as_ref().expect("an FP8 backward follows an FP8 forward");
                let (q8, qs) = (dptr(&f.x8, &s), dptr(&f.x8s, &s));
                // SAFETY: dy holds at least tokens * H bf16 (checked), the codes and scales max_tokens >= tokens
                // rows of H and H / 128.
                unsafe { q::quantize_rows_raw(&g, dptr(dy[r], &s), q8, qs, inp[r].tokens, c.hidden)? };
                (ranks[r].x, ranks[r].x_scales) = (q8, qs);
            }
            if redispatch && saved.fp8 {
                // x's codes, the forward's bits (the same quantization of the same x), into y: free until the
                // rank's GEMMs write it, and read before them by this rank's dispatch only
                let y = dptr(&w.y, &s);
                let (q8, qs) = (y, y + (c.max_tokens * c.hidden) as u64);
                debug_assert!(c.max_tokens * c.hidden * 33 / 32 <= w.y.len() * 2);
                // SAFETY: x holds at least tokens * H bf16 (checked); y's 2 * max_recv * H bytes hold max_tokens
                // rows of H codes and H / 128 f32 scales (max_recv >= max_tokens), the scales 16-byte aligned
                // (max_tokens * H, H a multiple of 512).
                unsafe { q::quantize_rows_raw(&g, dptr(inp[r].x, &s), q8, qs, inp[r].tokens, c.hidden)? };
                (ranks[r].x2, ranks[r].x2_scales) = (q8, qs);
            } else if redispatch {
                ranks[r].x2 = dptr(inp[r].x, &s);
            }
        }
        // dy as codes (`Fp8Dy::Codes`): the push of codes into recv_dy; x again as the forward sent it
        let resend_x = match (redispatch, saved.fp8) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        };
        let p = EpParams { fp8: dy8 as u32, resend_x, state: saved.call, ..self.params(ranks, true) };
        self.launch_ep("ep_dispatch", &p, false)?;
        for r in 0..r_n {
            self.experts_backward(r, (&inp[r], w8r(r), z), &mut grads[r], accumulate, Pass::Launch)?;
        }
        self.launch_ep("ep_combine", &p, false)?;
        if redispatch {
            self.holds = saved.call;
        }
        Ok(())
    }

    /// Whether the forward stores z for the backward (`LayerConfig::save` = `Save::WithZ`).
    fn save_z(&self) -> bool {
        self.cfg.save == Save::WithZ
    }

    /// Rank r's z [max_recv, 2I] when the forward stores it (allocated by `alloc_saved_z`), else 0.
    fn saved_z(&self, r: usize) -> u64 {
        match (self.save_z(), &self.ranks[r].bwd) {
            (true, Some(b)) => dptr(&b.z, self.gpu.stream()),
            _ => 0,
        }
    }

    /// With `Save::WithZ`, the backward's buffers (z among them) at the first forward, outside a capture.
    fn alloc_saved_z(&mut self) -> Result<()> {
        if !self.save_z() || (self.ident.is_some() && self.ranks.iter().all(|w| w.bwd.is_some())) {
            return Ok(());
        }
        no_alloc_in_capture(&self.gpu, "the EP layer's first forward with Save::WithZ (it allocates z)")?;
        self.alloc_backward(false)
    }

    /// The backward's buffers, once (with `dz8`, an FP8 dx's dz codes too; the FP8 buffers exist: an FP8
    /// backward follows an FP8 forward).
    fn alloc_backward(&mut self, dz8: bool) -> Result<()> {
        let g = self.gpu.clone();
        let c = self.cfg;
        let recv = self.group.layout.max_recv as usize;
        if dz8 {
            let i2 = 2 * c.intermediate;
            for f in self.ranks.iter_mut().filter_map(|w| w.fp8.as_mut()).filter(|f| f.dz8.is_none()) {
                f.dz8 = Some((g.alloc(recv * i2)?, g.alloc(recv * i2 / 128)?));
            }
        }
        if self.ident.is_none() {
            let ids: Vec<u32> = (0..recv as u32).collect();
            self.ident = Some(g.upload(&ids)?);
        }
        // room for either SwiGLU-backward kernel's partial sums (the launch picks one by the policy of its thread)
        let n_tiles_i = crate::gemm::dswiglu_partials_max(c.intermediate);
        for w in self.ranks.iter_mut().filter(|w| w.bwd.is_none()) {
            let mut partial = g.alloc::<f32>(recv * n_tiles_i)?;
            g.fill_bytes(&mut partial, 0)?;
            w.bwd = Some(BwdWork {
                z: g.alloc(recv * 2 * c.intermediate)?,
                dz: g.alloc(recv * 2 * c.intermediate)?,
                sh: g.alloc(recv * c.intermediate)?,
                partial,
                row_dtopk: g.alloc(recv)?,
            });
        }
        Ok(())
    }

    /// Rank r's experts, backward, over its received x and dy rows (the EP = 1 kernels, the row's own index
    /// standing for its slot): z again, dh with the SwiGLU backward (dz, s * h and the dtopk partial sums), each
    /// row's dtopk, dx rows, dW2 = dy^T (s h) and dW1 = dz^T x, as the EP = 1 backward.
    fn experts_backward<W: WgradElem>(
        &mut self,
        r: usize,
        (inp, w8, (z_saved, dy8)): (&RankInputs<'_>, Option<&Fp8Weights>, (bool, bool)),
        gr: &mut RankGrads<'_, W>,
        accumulate: bool,
        pass: Pass,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        let per = c.experts / self.world();
        let lay = self.group.layout;
        let ws = self.group.ws(r);
        let recv = lay.max_recv as usize;
        let (h2, i2) = (c.hidden, c.intermediate);
        let ident = dptr(self.ident.as_ref().expect("allocated"), &s);
        let y = dptr(&self.ranks[r].y, &s);
        let (z, dz, sh, partial, row_dtopk) = {
            let b = self.ranks[r].bwd.as_ref().expect("allocated");
            (dptr(&b.z, &s), dptr(&b.dz, &s), dptr(&b.sh, &s), dptr(&b.partial, &s), dptr(&b.row_dtopk, &s))
        };
        // z as the forward's GEMM1 stored it (`Save::WithZ`), or again from the x rows the forward left in recv,
        // or from their codes in FP8 (h is recomputed from z in the dh epilogue)
        match (z_saved, w8) {
            (true, _) => {}
            (false, None) => self.gemm1(r, inp, 0, z, false, pass)?,
            (false, Some(w)) => self.z_fp8(r, w, z, pass)?,
        }
        // dy's rows: those the dispatch pushed into recv_dy, or their codes there dequantized into y (free until
        // dx, which runs after dW2)
        let dy_rows = if dy8 {
            self.dequantize_recv(r, ws + lay.recv_dy, y, pass)?;
            y
        } else {
            ws + lay.recv_dy
        };
        // dh = dy W2_e with the SwiGLU backward: dz, s * h and the dtopk partials
        let n_tiles_i = crate::gemm::dswiglu_partials(i2) as u32;
        let map_dy = self.maps.get(&g, dy_rows, recv, h2, kh::GEMM_BM, 64)?;
        let map_w2 = self.maps.get(&g, dptr(inp.w2, &s), per * h2, i2, 64, 64)?;
        // z and dz ([recv, 2I]) in 64 x 64 boxes: whole 64-row groups of an expert go through the copy engine
        let map_z = self.maps.get(&g, z, recv, 2 * i2, kh::GEMM_C_BOX.0, kh::GEMM_C_BOX.1)?;
        let map_dz_c = self.maps.get(&g, dz, recv, 2 * i2, kh::GEMM_C_BOX.0, kh::GEMM_C_BOX.1)?;
        let map_sh = self.maps.get(&g, sh, recv, i2, kh::GEMM_C_BOX.0, kh::GEMM_C_BOX.1)?;
        let p = GroupedGemm {
            map_a: map_dy,
            map_b: map_w2,
            c: dz,
            map_c: map_dz_c,
            z,
            map_z,
            n: i2 as u32,
            k: h2 as u32,
            n_b: h2 as u32,
            ldc: 2 * i2 as u32,
            n_tiles: n_tiles_i,
            w: ws + lay.recv_w,
            w_len: lay.max_recv as u32,
            row_slot: ident,
            partial,
            sh,
            map_sh,
            ..self.local_gemm(r)
        };
        // with an FP8 dh (`Fp8Dh::Fp8`, dy's codes in recv_dy): the FP8 kernel over those codes, 256 columns a tile
        let n_tiles_i = match w8 {
            Some(w) if c.fp8_dh == Fp8Dh::Fp8 => {
                self.dh_fp8(r, w, (z, dz, sh, partial), pass)?;
                (i2 / 256) as u32
            }
            _ => {
                self.mgemm("grouped_gemm_bt_dswiglu", p, pass)?;
                n_tiles_i
            }
        };
        let red = DtopkReduce {
            partial,
            slot_row: ident,
            dtopk: row_dtopk,
            error: 0,
            slots: recv as u32,
            n_tiles: n_tiles_i,
        };
        if pass == Pass::Launch {
            // SAFETY: partial holds n_tiles sums for every row < max_recv; row_dtopk holds max_recv values.
            unsafe { g.launch("dtopk_reduce", Launch::new((recv as u32).div_ceil(256), 256, 0), &red)? };
        }
        // the weight gradients before the combine releases this rank's rows (recv is not read after it): dW2 from
        // dy, before dx overwrites y
        self.wgrad(r, (dy_rows, h2), (sh, i2), gr.dw2, accumulate, pass)?;
        // dx rows = dz W1_e: in FP8 from dz's row codes and W1's transposed codes, or in bf16
        if let (Some(w), true) = (w8, c.fp8_backward.dx()) {
            self.dx_fp8(r, w, dz, y, pass)?;
        } else {
            self.dx_bf16(r, inp, dz, y, pass)?;
        }
        // dW1 from x's bf16 rows, or from the forward's codes dequantized into recv_dy (dy read by now)
        let x = match w8 {
            None => ws + lay.recv,
            Some(_) => {
                self.dequantize_recv(r, ws + lay.recv, ws + lay.recv_dy, pass)?;
                ws + lay.recv_dy
            }
        };
        self.wgrad(r, (dz, 2 * i2), (x, h2), gr.dw1, accumulate, pass)
    }

    /// Rank r's dx rows = dz W1_e in bf16 into y.
    fn dx_bf16(&mut self, r: usize, inp: &RankInputs<'_>, dz: u64, y: u64, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (h2, i2) = (self.cfg.hidden, self.cfg.intermediate);
        let per = self.cfg.experts / self.world();
        let recv = self.group.layout.max_recv as usize;
        let map_dz = self.maps.get(&g, dz, recv, 2 * i2, kh::GEMM_BM, 64)?;
        let map_w1 = self.maps.get(&g, dptr(inp.w1, &s), per * 2 * i2, h2, 64, 64)?;
        let map_c = self.maps.get(&g, y, recv, h2, 64, 64)?;
        let p = GroupedGemm {
            map_a: map_dz,
            map_b: map_w1,
            c: y,
            map_c,
            n: h2 as u32,
            k: 2 * i2 as u32,
            n_b: 2 * i2 as u32,
            ldc: h2 as u32,
            n_tiles: (h2 as u32).div_ceil(kh::GEMM_BN),
            ..self.local_gemm(r)
        };
        self.mgemm("grouped_gemm_bt_bf16", p, pass)
    }

    /// Rank r's z = x W1_e^T in FP8 from the codes and scales the FP8 forward's dispatch left in `recv` (the
    /// single-GPU FP8 backward's recompute: the same kernel family, so the same bits) into `z` [max_recv, 2I].
    fn z_fp8(&mut self, r: usize, w: &Fp8Weights, z: u64, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (h, i) = (self.cfg.hidden, self.cfg.intermediate);
        let per = self.cfg.experts / self.world();
        let lay = self.group.layout;
        let recv = lay.max_recv as usize;
        let ws = self.group.ws(r);
        let (x8, x8s) = (ws + lay.recv, ws + lay.recv + lay.max_recv * h as u64);
        let layout = (ws + lay.local_offsets, ws + lay.local_tiles, per, recv);
        let maps = [
            self.maps.get_u8(&g, x8, recv, h, 128)?,
            self.maps.get_u8(&g, dptr(&w.w1, &s), per * 2 * i, h, 128)?,
            self.maps.get(&g, z, recv, 2 * i, 64, 64)?,
        ];
        let p = fp8_gemm(layout, (x8s, dptr(&w.w1_scales, &s), z), (2 * i, h), maps);
        let k = plain_kernel();
        let cfg = q::launch_cfg(&g, k, recv, per, 2 * i, q::tile_cols(k))?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // SAFETY: recv holds max_recv rows of H codes and then their H / 128 scales (the FP8 forward's, kept: the
        // backward's dispatch writes recv_dy only), W1 per * 2I rows of H codes with its block scales (checked), z
        // max_recv rows of 2I; the local offsets are clamped to max_recv on the device.
        unsafe { g.launch(k, cfg, &p) }
    }

    /// Rank r's dh = dy W2_e in FP8 with the SwiGLU backward (`grouped_gemm_fp8w_dswiglu`): A the dy codes and scales
    /// the backward's dispatch pushed into recv_dy (`Fp8Dy::Codes`), B W2's transposed codes; dz, s h and the dtopk
    /// partials (I / 256 a row) into the rank's buffers, z read at `z`; the routing weights from recv_w (each row
    /// its own slot).
    fn dh_fp8(
        &mut self,
        r: usize,
        w: &Fp8Weights,
        (z, dz, sh, partial): (u64, u64, u64, u64),
        pass: Pass,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (h, i) = (self.cfg.hidden, self.cfg.intermediate);
        let per = self.cfg.experts / self.world();
        let lay = self.group.layout;
        let recv = lay.max_recv as usize;
        let ws = self.group.ws(r);
        let Some((w2t, w2ts)) = &w.w2t else {
            return Err(Error::InvalidArgument(format!("rank {r}: an FP8 dh needs W2's transposed codes")));
        };
        let (dy8, dy8s) = (ws + lay.recv_dy, ws + lay.recv_dy + lay.max_recv * h as u64);
        let layout = (ws + lay.local_offsets, ws + lay.local_tiles, per, recv);
        // dz's and s h's maps: whole 64-row groups go through the copy engine
        let map_dz = self.maps.get(&g, dz, recv, 2 * i, 64, 64)?;
        let maps =
            [self.maps.get_u8(&g, dy8, recv, h, 128)?, self.maps.get_u8(&g, dptr(w2t, &s), per * i, h, 128)?, map_dz];
        let mut p = fp8_gemm(layout, (dy8s, dptr(w2ts, &s), dz), (i, h), maps);
        p.z = z;
        p.row_slot = dptr(self.ident.as_ref().expect("allocated"), &s);
        (p.w, p.w_len) = (ws + lay.recv_w, lay.max_recv as u32);
        (p.partial, p.sh) = (partial, sh);
        p.map_sh = self.maps.get(&g, sh, recv, i, 64, 64)?;
        // z's map: the producer's L2 prefetches of what the epilogue reads
        p.map_z = self.maps.get(&g, z, recv, 2 * i, 64, 64)?;
        let k = "grouped_gemm_fp8w_dswiglu";
        let cfg = q::launch_cfg(&g, k, recv, per, i, q::tile_cols(k))?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // SAFETY: recv_dy holds max_recv rows of H codes and then their scales (the backward's dispatch of codes),
        // W2^T per * I rows of H codes with its block scales (checked), z and dz max_recv rows of 2I, sh of I, the
        // partials max_recv rows of at least I / 256, recv_w and the identity max_recv entries; the local offsets
        // are clamped to max_recv on the device.
        unsafe { g.launch(k, cfg, &p) }
    }

    /// Rank r's dx rows = dz W1_e in FP8 into y: dz's rows quantized (1 x 128, the rank's received rows as the
    /// device counts them), then the FP8 GEMM with W1's transposed codes (the single-GPU FP8 dx's).
    fn dx_fp8(&mut self, r: usize, w: &Fp8Weights, dz: u64, y: u64, pass: Pass) -> Result<()> {
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let (h, i) = (self.cfg.hidden, self.cfg.intermediate);
        let per = self.cfg.experts / self.world();
        let lay = self.group.layout;
        let recv = lay.max_recv as usize;
        let ws = self.group.ws(r);
        let Some((w1t, w1ts)) = &w.w1t else {
            return Err(Error::InvalidArgument(format!("rank {r}: an FP8 dx needs W1's transposed codes")));
        };
        let (dz8, dz8s) = {
            let f = self.ranks[r].fp8.as_ref().and_then(|f| f.dz8.as_ref()).expect("allocated by alloc_backward");
            (dptr(&f.0, &s), dptr(&f.1, &s))
        };
        let layout = (ws + lay.local_offsets, ws + lay.local_tiles, per, recv);
        let maps = [
            self.maps.get_u8(&g, dz8, recv, 2 * i, 128)?,
            self.maps.get_u8(&g, dptr(w1t, &s), per * h, 2 * i, 128)?,
            self.maps.get(&g, y, recv, h, 64, 64)?,
        ];
        let p = fp8_gemm(layout, (dz8s, dptr(w1ts, &s), y), (h, 2 * i), maps);
        let k = plain_kernel();
        let cfg = q::launch_cfg(&g, k, recv, per, h, q::tile_cols(k))?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // the rank's received rows: local_offsets[per] (written by the dispatch, at most max_recv)
        let rows_at = ws + lay.local_offsets + 4 * per as u64;
        // SAFETY: dz and its codes and scales hold max_recv rows of 2I (a multiple of 128), the row count is
        // clamped to max_recv on the device; W1^T per * H rows of 2I codes with its block scales (checked), y
        // max_recv rows of H; the local offsets are clamped to max_recv on the device.
        unsafe {
            q::quantize_rows_at(&g, dz, dz8, dz8s, (rows_at, recv), 2 * i)?;
            g.launch(k, cfg, &p)
        }
    }

    /// Rank r's received codes in the region at `src` (`recv`: the FP8 forward's x, dW1's x, the values its GEMM1
    /// consumed; `recv_dy`: the backward's dy with `Fp8Dy::Codes`), codes [max_recv, H] then their scales,
    /// dequantized to bf16 rows at `dst` ([max_recv, H]).
    fn dequantize_recv(&self, r: usize, src: u64, dst: u64, pass: Pass) -> Result<()> {
        if pass == Pass::Prepare {
            return Ok(());
        }
        let h = self.cfg.hidden;
        let lay = self.group.layout;
        let ws = self.group.ws(r);
        let p = params::GatherDequant {
            src,
            scales: src + lay.max_recv * h as u64,
            dst,
            // the rows in their own order, as many as the rank's local offsets count
            row_slot: 0,
            offsets: ws + lay.local_offsets,
            cols: h as u32,
            k: 1,
            experts: (self.cfg.experts / self.world()) as u32,
            rows_max: lay.max_recv as u32,
        };
        // SAFETY: recv holds max_recv rows of H codes and then their scales, dst max_recv rows of H bf16; the row
        // count is local_offsets[E / R], clamped to max_recv on the device.
        unsafe { q::gather_dequant_raw(&self.gpu, &p) }
    }

    /// dW = A^T B over each of rank r's local experts' rows; `a` and `b` are (address, columns) of buffers of
    /// max_recv rows.
    fn wgrad<W: WgradElem>(
        &mut self,
        r: usize,
        a: (u64, usize),
        b: (u64, usize),
        c: &mut CudaSlice<W>,
        acc: bool,
        pass: Pass,
    ) -> Result<()> {
        let g = self.gpu.clone();
        let recv = self.group.layout.max_recv as usize;
        let per = (self.cfg.experts / self.world()) as u32;
        let map_a = self.maps.get(&g, a.0, recv, a.1, 64, 64)?;
        let map_b = self.maps.get(&g, b.0, recv, b.1, 64, 64)?;
        let map_c = self.maps.get_wgrad_c::<W>(&g, dptr(&*c, g.stream()), per as usize * a.1, b.1)?;
        let offsets = self.group.ws(r) + self.group.layout.local_offsets;
        let maps = [map_a, map_b, map_c];
        let c_ptr = dptr(&*c, g.stream());
        let shape = (a.1, b.1, recv);
        let (p, launch) = wgrad_launch(&g, maps, [a.0, b.0], offsets, c_ptr, 0, per as usize, shape, acc)?;
        if pass == Pass::Prepare {
            return Ok(());
        }
        // SAFETY: A and B hold max_recv rows (`rows_max`: each expert's rows are clamped to them on the device); C
        // holds per * M * N.
        unsafe { crate::gemm::launch_wgrad(&g, W::KERNEL, launch, &p) }
    }

    /// The call counter the device holds (the epoch of its latest call; every rank's, equal), as the last
    /// [`EpLayer::check`] read it: the eager calls plus the calls of every CUDA graph replay. 0 before any check.
    pub fn device_epoch(&self) -> u32 {
        self.checked_epoch
    }

    /// Synchronise and report what the device recorded since the last check: a bounded wait that expired
    /// ([`Error::Timeout`] naming the rank waited for and the phase), a backward that ran on another forward's
    /// state ([`Error::Mismatch`]: a call the host did not see, such as a graph replay, came between an eager
    /// forward and its backward) or an expert id outside -1..E ([`Error::InvalidArgument`]). The workspace stays
    /// usable either way. "Since the last check" is by the device's call counter, so it also covers calls replayed
    /// from a CUDA graph. One error is returned per check, oldest first: where an interval recorded several (a
    /// timeout and a state mismatch, say), the next checks return the rest before anything newer; `Ok` means none
    /// is left.
    pub fn check(&mut self) -> Result<()> {
        self.gpu.sync()?;
        // an error still pending is not queued twice (the latest routing's error word stays set until the next
        // routing, so each check reads it again)
        for e in self.read_errors()? {
            let msg = e.to_string();
            if !self.pending.iter().any(|p| p.to_string() == msg) {
                self.pending.push_back(e);
            }
        }
        self.pending.pop_front().map_or(Ok(()), Err)
    }

    /// Every error the device recorded since the last check, in the order [`EpLayer::check`] reports them; advances
    /// the checked epoch. Reading a record that fails (or counters that disagree) returns at once.
    fn read_errors(&mut self) -> Result<Vec<Error>> {
        let lay = self.group.layout;
        let mut words = Vec::with_capacity(self.world());
        for r in 0..self.world() {
            let read = |off: u64, n: usize, what: &str| {
                let at = (r as u64 * lay.bytes + off) as usize / 4;
                let view = self.group.mem[0].slice(at..at + n);
                self.gpu.stream().clone_dtoh(&view).ctx(|| format!("reading rank {r}'s {what}"))
            };
            let counter = read(lay.epoch, 4, "call counter")?;
            let record = read(lay.error, 4, "error record")?;
            // GEMM1's error word (the last word of `arrive`) is only written (and zeroed) by a pulled forward
            let pull_word = if self.pull {
                let words = Workspace::arrive_words(lay.max_recv, self.cfg.experts as u64);
                Some(read(lay.arrive + 4 * (words - 1), 1, "GEMM1's error word")?[0])
            } else {
                None
            };
            let route = self.gpu.download(&self.ranks[r].route_error)?[0];
            words.push(RankWords {
                counter: counter.try_into().expect("4 words"),
                record: record.try_into().expect("4 words"),
                pull_word,
                route,
            });
        }
        let (epoch, found) = interval_errors(&words, self.checked_epoch, self.cfg.experts, self.timeout_ns)?;
        self.checked_epoch = epoch;
        Ok(found)
    }
}

/// What [`EpLayer::check`] reads of one rank: its workspace's call counter and the three words after it (state tag,
/// state-error epoch, routing-error epoch), its error record (phase, rank waited for, epoch, set), GEMM1's error
/// word when the pull dispatch may have run, and its routing's error word.
#[derive(Clone, Copy, Debug, Default)]
struct RankWords {
    counter: [u32; 4],
    record: [u32; 4],
    pull_word: Option<u32>,
    route: u32,
}

/// The errors that `ranks`' words record for the calls after `checked` (the epoch the previous check read), in
/// the order [`EpLayer::check`] returns them: a bounded wait's timeout (the first rank's record), the first rank's
/// backward on another forward's state, GEMM1's pull timeout, the latest routing's failure (its grid barrier's
/// timeout or a bad expert id), else an earlier call's routing failure (the latest routing's failure and its call's
/// epoch word are one event: reported once). Returns the epoch read with them. An error when the ranks' counters
/// disagree or the counter is exhausted.
fn interval_errors(ranks: &[RankWords], checked: u32, experts: usize, timeout_ns: u64) -> Result<(u32, Vec<Error>)> {
    let mut found = Vec::new();
    // every rank's call counter: equal (each advanced once per call by the same launches)
    let mut epoch = None;
    // the first rank whose backward ran on another forward's state since the last check (the state error: that
    // call's epoch), with the tag the workspace holds now; the first whose routing failed in a call since
    let (mut wrong_state, mut bad_routing) = (None, None);
    for (r, w) in ranks.iter().enumerate() {
        let e = w.counter[0];
        let since = |x: u32| x > checked && x <= e;
        if wrong_state.is_none() && since(w.counter[2]) {
            wrong_state = Some((r, w.counter[1]));
        }
        if bad_routing.is_none() && since(w.counter[3]) {
            bad_routing = Some(r);
        }
        match epoch {
            None => epoch = Some(e),
            Some(e0) if e0 != e => {
                return Err(Error::Mismatch(format!(
                    "the ranks' call counters disagree (rank 0: {e0}, rank {r}: {e}): the ranks did not make the \
                     same calls"
                )))
            }
            Some(_) => {}
        }
    }
    let epoch = epoch.unwrap_or(0);
    if epoch == u32::MAX {
        return Err(Error::InvalidArgument(
            "the workspace's call counter is exhausted (2^32 - 2 calls, CUDA graph replays included): the later \
             calls did nothing; make a new layer"
                .into(),
        ));
    }
    let timeout_ms = timeout_ns.div_ceil(1_000_000);
    if let Some(rec) = ranks.iter().map(|w| w.record).find(|r| r[3] == 1 && r[2] > checked && r[2] <= epoch) {
        let phase = Phase::from_code(rec[0]).map_or("unknown phase", Phase::name);
        found.push(Error::Timeout { rank: rec[1] as usize, phase, timeout_ms });
    }
    if let Some((r, tag)) = wrong_state {
        found.push(Error::Mismatch(format!(
            "rank {r}: a backward ran on the workspace of another forward (it now holds forward call {tag}'s rows): \
             a call the host did not see, such as a CUDA graph's replay, came between an eager forward and its \
             backward, whose results are wrong (EpLayer::forward's doc says how to order them)"
        )));
    }
    if let Some(r) = ranks.iter().position(|w| w.pull_word == Some(megamoe_kernels::params::FUSED_TIMEOUT)) {
        found.push(Error::Timeout { rank: r, phase: "GEMM1's wait for its pulled rows", timeout_ms });
    }
    let latest = ranks.iter().position(|w| w.route != 0);
    if let Some(r) = latest {
        found.push(if ranks[r].route == megamoe_kernels::params::ROUTE_TIMEOUT {
            Error::Timeout {
                rank: r,
                phase: "the routing's grid barrier (its blocks not all resident)",
                timeout_ms: crate::route::ROUTE_TIMEOUT_NS / 1_000_000,
            }
        } else {
            Error::InvalidArgument(format!(
                "rank {r}: topk_ids holds an expert id outside -1..{experts}: that rank sent no rows and wrote none \
                 of its outputs (out; in a backward dx and dtopk); the other ranks' results are those of a call \
                 without its tokens"
            ))
        });
    }
    if let (Some(r), None) = (bad_routing, latest) {
        found.push(Error::InvalidArgument(format!(
            "rank {r}: the routing of a call since the last check failed (topk_ids held an expert id outside \
             -1..{experts}, or the routing's grid barrier timed out): that call sent none of the rank's rows and \
             wrote none of its outputs; a later routing of the rank succeeded"
        )));
    }
    Ok((epoch, found))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `n` ranks at call counter `e`, nothing recorded.
    fn quiet(n: usize, e: u32) -> Vec<RankWords> {
        vec![RankWords { counter: [e, 1, 0, 0], ..Default::default() }; n]
    }

    fn kinds(v: &[Error]) -> Vec<&'static str> {
        v.iter()
            .map(|e| match e {
                Error::Timeout { .. } => "timeout",
                Error::Mismatch(_) => "mismatch",
                Error::InvalidArgument(_) => "invalid",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn check_reports_every_error_of_the_interval_once_in_order() {
        // nothing since the last check
        let (e, f) = interval_errors(&quiet(3, 7), 5, 8, 10_000_000).unwrap();
        assert_eq!((e, f.len()), (7, 0));
        // a timeout (rank 2 waited for rank 0 in the dispatch, call 6) and a state mismatch (rank 1, call 7): both,
        // the timeout first, the waited-for rank and the phase named, the tag the workspace holds in the mismatch
        let mut w = quiet(3, 7);
        w[2].record = [Phase::Dispatch as u32, 0, 6, 1];
        w[1].counter = [7, 4, 7, 0];
        let (_, f) = interval_errors(&w, 5, 8, 10_000_000).unwrap();
        assert_eq!(kinds(&f), ["timeout", "mismatch"]);
        match &f[0] {
            Error::Timeout { rank, phase, timeout_ms } => assert_eq!((*rank, *phase, *timeout_ms), (0, "dispatch", 10)),
            e => panic!("{e:?}"),
        }
        assert!(f[1].to_string().contains("rank 1") && f[1].to_string().contains("forward call 4"), "{}", f[1]);
        // the same records read by the next check (epoch 7 checked): old, nothing reported
        assert!(interval_errors(&w, 7, 8, 10_000_000).unwrap().1.is_empty());
        // records of calls after the counter (a later call's, not yet counted) are not this interval's
        w[1].counter = [7, 4, 8, 0];
        w[2].record = [Phase::Counts as u32, 1, 8, 1];
        assert!(interval_errors(&w, 5, 8, 10_000_000).unwrap().1.is_empty());
    }

    #[test]
    fn check_reports_a_routing_failure_once() {
        // the latest routing failed on rank 1 (its error word) and its call left its epoch: one error, naming E
        let mut w = quiet(2, 9);
        w[1].route = 1;
        w[1].counter[3] = 9;
        let (_, f) = interval_errors(&w, 8, 16, 1).unwrap();
        assert_eq!(kinds(&f), ["invalid"]);
        assert!(f[0].to_string().contains("rank 1") && f[0].to_string().contains("-1..16"), "{}", f[0]);
        // a later routing cleared the word: the epoch word still reports the earlier call
        w[1].route = 0;
        let (_, f) = interval_errors(&w, 8, 16, 1).unwrap();
        assert_eq!(kinds(&f), ["invalid"]);
        assert!(f[0].to_string().contains("since the last check"), "{}", f[0]);
        // the routing's grid barrier timed out: a timeout, with the pull's GEMM1 timeout before it
        w[0].route = megamoe_kernels::params::ROUTE_TIMEOUT;
        w[1].pull_word = Some(megamoe_kernels::params::FUSED_TIMEOUT);
        let (_, f) = interval_errors(&w, 8, 16, 1).unwrap();
        assert_eq!(kinds(&f), ["timeout", "timeout"]);
        assert!(f[0].to_string().contains("pulled rows") && f[1].to_string().contains("grid barrier"));
    }

    #[test]
    fn check_refuses_disagreeing_or_exhausted_counters() {
        let mut w = quiet(3, 5);
        w[2].counter[0] = 4;
        assert!(matches!(interval_errors(&w, 0, 8, 1), Err(Error::Mismatch(_))));
        assert!(matches!(interval_errors(&quiet(2, u32::MAX), 0, 8, 1), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn device_group_carries_the_layout_and_the_peers() {
        let layout = Workspace::new(100, 2, 256, 8, 4, 3).unwrap();
        let mut peers = [0u64; MAX_RANKS];
        for (r, p) in peers.iter_mut().enumerate().take(4) {
            *p = 0x1000_0000 + r as u64 * layout.bytes;
        }
        let g = RankGroup { world: 4, layout, peers, mem: Vec::new() };
        let d = g.device(2, 5_000);
        assert_eq!((d.rank_base, d.world, d.pad, d.blocks_per_rank, d.timeout_ns), (2, 4, 0, 3, 5_000));
        assert_eq!(d.peer[3], 0x1000_0000 + 3 * layout.bytes);
        assert_eq!(d.peer[4], 0);
        // the call counters ep_epoch_next advances: one per rank, in each rank's workspace
        let e = g.epoch_next(1, 3).unwrap();
        assert_eq!(e.ranks, 3);
        for i in 0..3 {
            assert_eq!(e.counter[i], 0x1000_0000 + (1 + i as u64) * layout.bytes + layout.epoch);
        }
        assert_eq!(e.counter[3], 0);
        // ranks outside the group: an error, not a panic (or a counter of address 0)
        assert_eq!(g.peer(3).unwrap(), d.peer[3]);
        for (first, n) in [(2, 3), (4, 1), (8, 1), (usize::MAX, 2)] {
            let e = g.epoch_next(first, n).unwrap_err().to_string();
            assert!(e.contains(&format!("{n} ranks from rank {first}: the group has 4 ranks")), "{e}");
        }
        for r in [4, 8, usize::MAX] {
            assert!(g.peer(r).unwrap_err().to_string().contains(&format!("rank {r}: the group has 4 ranks")));
        }
        assert!(RankGroup::check_world(0, &layout).is_err());
        assert!(RankGroup::check_world(9, &layout).is_err());
        assert!(RankGroup::check_world(8, &layout).is_ok());
    }

    /// The message of `EpLayer::check_config`'s error for `cfg` over `world` ranks.
    fn config_error(cfg: LayerConfig, world: usize) -> String {
        match EpLayer::check_config(&cfg, world) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{cfg:?} over {world} ranks: expected an InvalidArgument, got {other:?}"),
        }
    }

    #[test]
    fn configurations_whose_sizes_overflow_are_refused_naming_the_values() {
        use crate::layer::Save;
        let cfg = |h, i, e, k, t| LayerConfig::bf16(h, i, e, k, t, Save::InputsOnly);
        // the sizes of a usual layer (Qwen3-30B-A3B, 4096 tokens per rank, 8 ranks) pass
        EpLayer::check_config(&cfg(2048, 768, 128, 8, 4096), 8).unwrap();
        // max_tokens * k wraps to 2 (in a release build: buffers for 2 rows, which a call then writes past)
        let e = config_error(cfg(256, 128, 8, 3, 6148914691236517206), 2);
        assert!(e.contains("max_tokens 6148914691236517206 x top-k 3 overflows"), "{e}");
        // world * max_tokens * k
        let e = config_error(cfg(256, 128, 8, 2, usize::MAX / 4), 4);
        assert!(e.contains(&format!("4 ranks x max_tokens {} x top-k 2 overflows", usize::MAX / 4)), "{e}");
        // 2I (a multiple of 64)
        let e = config_error(cfg(256, 1 << 63, 8, 2, 16), 2);
        assert!(e.contains(&format!("intermediate size {} x 2 overflows", 1usize << 63)), "{e}");
        // the receive rows' elements past 2^32, wrapping or not
        let e = config_error(cfg(1 << 30, 64, 8, 1, 1 << 40), 1);
        assert!(e.contains("exceed 32-bit element offsets"), "{e}");
        let e = config_error(cfg(2048, 768, 128, 8, 1 << 16), 8);
        assert!(e.contains("8 ranks x max_tokens 65536 x top-k 8 rows of 2048 elements"), "{e}");
        // W1 [E / R, 2I, H] with one row received: 16 x 2^30 x 2^30 elements
        let e = config_error(cfg(1 << 30, 1 << 29, 16, 1, 1), 1);
        assert!(e.contains("W1's size overflows"), "{e}");
        // the ranks, then the configuration's own checks
        assert!(config_error(cfg(256, 128, 8, 2, 16), 3).contains("3 ranks for 8 experts"));
        assert!(config_error(cfg(256, 128, 8, 2, 16), 0).contains("0 ranks"));
        assert!(config_error(cfg(256, 128, 8, 2, 16), 9).contains("9 ranks"));
        assert!(config_error(cfg(100, 128, 8, 2, 16), 2).contains("hidden size 100"));
        assert!(config_error(cfg(256, 128, 8, 2, 0), 2).contains("max_tokens 0"));
    }

    #[test]
    fn a_saved_state_is_taken_only_by_its_layer_and_kind() {
        let mut saved = EpSaved { layer: 7, call: 3, tokens: vec![5, 0], fp8: false, z: false };
        saved.check(7, 2, false).unwrap();
        let e = saved.check(8, 2, false).unwrap_err().to_string();
        assert!(e.contains("another EP layer (layer 7, this is layer 8)"), "{e}");
        // a state over fewer ranks than the layer has (its token counts were indexed by rank: a panic)
        let e = saved.check(7, 4, false).unwrap_err().to_string();
        assert!(e.contains("2 ranks' token counts, the layer has 4 ranks"), "{e}");
        // a bf16 forward's state is not the FP8 backward's, an FP8 forward's (no bf16 rows in the workspace) not
        // the bf16 backward's
        let e = saved.check(7, 2, true).unwrap_err().to_string();
        assert!(e.contains("of a bf16 forward") && e.contains("`EpLayer::backward`"), "{e}");
        saved.fp8 = true;
        saved.check(7, 2, true).unwrap();
        let e = saved.check(7, 2, false).unwrap_err().to_string();
        assert!(e.contains("of an FP8 forward") && e.contains("`EpLayer::backward_fp8`"), "{e}");
        // every layer its own id
        let (a, b) = (next_layer_id(), next_layer_id());
        assert!(a != b && a != 0 && b != 0);
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
