//! The MoE layer on one GPU (EP = 1), forward: routing layout, gather, grouped GEMM1 with SwiGLU, grouped
//! GEMM2, combine. Every stage runs on the device and none needs the host to read a count back: the grids are
//! sized for the worst case and the kernels read the per-expert offsets on the device.
use std::sync::Arc;

use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe_kernels::kernels_host as kh;
use megamoe_kernels::params::{Combine, Gather, GroupedGemm, Route};

use crate::error::{Error, Result};
use crate::runtime::{dptr, Gpu, Launch};
use crate::tensor_map::{DeviceTensorMap, Dtype, Swizzle, TiledDesc};

/// What the forward keeps for the backward.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Save {
    /// Only the inputs; the backward recomputes z.
    InputsOnly,
    /// z = [g | u] as well (bf16, 2I per routed row).
    WithZ,
}

/// Layer configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayerConfig {
    /// Hidden size H (a multiple of 64).
    pub hidden: usize,
    /// Expert intermediate size I (a multiple of 64).
    pub intermediate: usize,
    /// Experts E.
    pub experts: usize,
    /// Slots per token (top-k), 1..=E.
    pub top_k: usize,
    /// Most tokens one call may take (sizes the workspace).
    pub max_tokens: usize,
    /// What the forward keeps.
    pub save: Save,
}

impl LayerConfig {
    /// Check the configuration; a message naming the first problem.
    pub fn validate(&self) -> Result<()> {
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if self.hidden == 0 || self.hidden % 64 != 0 {
            return bad(format!("hidden size {} is not a positive multiple of 64", self.hidden));
        }
        if self.intermediate == 0 || self.intermediate % 64 != 0 {
            return bad(format!("intermediate size {} is not a positive multiple of 64", self.intermediate));
        }
        if self.experts == 0 || self.experts > 4096 {
            return bad(format!("{} experts (1..=4096 supported)", self.experts));
        }
        if self.top_k == 0 || self.top_k > self.experts {
            return bad(format!("top-k {} outside 1..={} (the expert count)", self.top_k, self.experts));
        }
        if self.max_tokens == 0 || (self.max_tokens * self.top_k) >= (1 << 31) / self.hidden.max(2 * self.intermediate)
        {
            return bad(format!("max_tokens {} is zero or too large for 32-bit element offsets", self.max_tokens));
        }
        Ok(())
    }
}

/// Device workspace of one layer instance.
struct Work {
    counts: CudaSlice<u32>,
    offsets: CudaSlice<u32>,
    tile_offsets: CudaSlice<u32>,
    row_slot: CudaSlice<u32>,
    slot_row: CudaSlice<i32>,
    error: CudaSlice<u32>,
    xs: CudaSlice<bf16>,
    h: CudaSlice<bf16>,
    z: Option<CudaSlice<bf16>>,
    ys: CudaSlice<bf16>,
    map_xs: DeviceTensorMap,
    map_h: DeviceTensorMap,
}

/// Weight tensor maps, re-encoded only when the caller's weight buffers move.
struct WeightMaps {
    w1: u64,
    w2: u64,
    map_w1: DeviceTensorMap,
    map_w2: DeviceTensorMap,
}

/// The MoE layer on one GPU.
pub struct MoeLayer {
    gpu: Arc<Gpu>,
    cfg: LayerConfig,
    work: Work,
    maps: Option<WeightMaps>,
}

impl MoeLayer {
    /// Validate `cfg` and allocate the workspace for `cfg.max_tokens` tokens.
    pub fn new(gpu: Arc<Gpu>, cfg: LayerConfig) -> Result<Self> {
        cfg.validate()?;
        let slots = cfg.max_tokens * cfg.top_k;
        let (h, i, e) = (cfg.hidden, cfg.intermediate, cfg.experts);
        let xs = gpu.alloc::<bf16>(slots * h)?;
        let hbuf = gpu.alloc::<bf16>(slots * i)?;
        let s = gpu.stream().clone();
        let map_xs = DeviceTensorMap::new(
            &gpu,
            TiledDesc::row_major_2d(Dtype::Bf16, dptr(&xs, &s), slots as u64, h as u64, kh::GEMM_BM, 64, Swizzle::B128),
        )?;
        let map_h = DeviceTensorMap::new(
            &gpu,
            TiledDesc::row_major_2d(
                Dtype::Bf16,
                dptr(&hbuf, &s),
                slots as u64,
                i as u64,
                kh::GEMM_BM,
                64,
                Swizzle::B128,
            ),
        )?;
        let work = Work {
            counts: gpu.alloc(e)?,
            offsets: gpu.alloc(e + 1)?,
            tile_offsets: gpu.alloc(e + 1)?,
            row_slot: gpu.alloc(slots)?,
            slot_row: gpu.alloc(slots)?,
            error: gpu.alloc(1)?,
            xs,
            h: hbuf,
            z: if cfg.save == Save::WithZ { Some(gpu.alloc(slots * 2 * i)?) } else { None },
            ys: gpu.alloc(slots * h)?,
            map_xs,
            map_h,
        };
        Ok(MoeLayer { gpu, cfg, work, maps: None })
    }

    /// The configuration.
    pub fn config(&self) -> &LayerConfig {
        &self.cfg
    }

    fn weight_maps(&mut self, w1: &CudaSlice<bf16>, w2: &CudaSlice<bf16>) -> Result<()> {
        let s = self.gpu.stream().clone();
        let (p1, p2) = (dptr(w1, &s), dptr(w2, &s));
        if self.maps.as_ref().is_some_and(|m| m.w1 == p1 && m.w2 == p2) {
            return Ok(());
        }
        let (h, i, e) = (self.cfg.hidden as u64, self.cfg.intermediate as u64, self.cfg.experts as u64);
        let map_w1 = DeviceTensorMap::new(
            &self.gpu,
            TiledDesc::row_major_2d(Dtype::Bf16, p1, e * 2 * i, h, kh::GEMM_BN / 2, 64, Swizzle::B128),
        )?;
        let map_w2 = DeviceTensorMap::new(
            &self.gpu,
            TiledDesc::row_major_2d(Dtype::Bf16, p2, e * h, i, kh::GEMM_BN, 64, Swizzle::B128),
        )?;
        self.maps = Some(WeightMaps { w1: p1, w2: p2, map_w1, map_w2 });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn check_inputs(
        &self,
        tokens: usize,
        x: &CudaSlice<bf16>,
        ids: &CudaSlice<i32>,
        w: &CudaSlice<f32>,
        w1: &CudaSlice<bf16>,
        w2: &CudaSlice<bf16>,
        out: &CudaSlice<bf16>,
    ) -> Result<()> {
        let c = &self.cfg;
        let bad = |s: String| Err(Error::InvalidArgument(s));
        if tokens > c.max_tokens {
            return bad(format!("{tokens} tokens > the configured maximum {}", c.max_tokens));
        }
        let want = [
            ("x", x.len(), tokens * c.hidden),
            ("topk_ids", ids.len(), tokens * c.top_k),
            ("topk_weights", w.len(), tokens * c.top_k),
            ("W1", w1.len(), c.experts * 2 * c.intermediate * c.hidden),
            ("W2", w2.len(), c.experts * c.hidden * c.intermediate),
            ("out", out.len(), tokens * c.hidden),
        ];
        for (name, got, need) in want {
            if got != need {
                return bad(format!("{name} has {got} elements, the layer needs {need}"));
            }
        }
        let me = self.gpu.ordinal();
        let ords = [
            ("x", x.ordinal()),
            ("topk_ids", ids.ordinal()),
            ("topk_weights", w.ordinal()),
            ("W1", w1.ordinal()),
            ("W2", w2.ordinal()),
            ("out", out.ordinal()),
        ];
        for (name, o) in ords {
            if o != me {
                return bad(format!("{name} lives on device {o}, the layer on device {me}"));
            }
        }
        Ok(())
    }

    /// Forward: out[t] = sum over j of topk_weights[t, j] * SwiGLU-expert(topk_ids[t, j])(x[t]). Asynchronous on
    /// the layer's stream; no host synchronisation. Ids outside -1..E are treated as masked slots and flagged
    /// (read the flag with [`MoeLayer::routing_error`]).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &mut self,
        tokens: usize,
        x: &CudaSlice<bf16>,
        topk_ids: &CudaSlice<i32>,
        topk_weights: &CudaSlice<f32>,
        w1: &CudaSlice<bf16>,
        w2: &CudaSlice<bf16>,
        out: &mut CudaSlice<bf16>,
    ) -> Result<()> {
        self.check_inputs(tokens, x, topk_ids, topk_weights, w1, w2, out)?;
        self.gpu.fill_bytes(&mut self.work.error, 0)?;
        if tokens == 0 {
            return Ok(());
        }
        self.weight_maps(w1, w2)?;
        let g = self.gpu.clone();
        let s = g.stream().clone();
        let c = self.cfg;
        let wk = &mut self.work;
        let slots = (tokens * c.top_k) as u32;
        let e = c.experts as u32;
        let route = Route {
            topk_ids: dptr(topk_ids, &s),
            counts: dptr(&wk.counts, &s),
            offsets: dptr(&wk.offsets, &s),
            tile_offsets: dptr(&wk.tile_offsets, &s),
            row_slot: dptr(&wk.row_slot, &s),
            slot_row: dptr(&wk.slot_row, &s),
            error: dptr(&wk.error, &s),
            slots,
            experts: e,
            tile_m: kh::GEMM_BM,
            pad: 0,
        };
        let maps = self.maps.as_ref().expect("set above");
        let sms = g.sm_count();
        // SAFETY (all launches): each parameter block matches its kernel; every buffer is sized for
        // max_tokens * top_k rows, and the kernels bound every index by the device-side counts.
        unsafe {
            g.launch("route_count", Launch::new(e, kh::ROUTE_THREADS, 64), &route)?;
            g.launch("route_scan", Launch::new(1, 32, 0), &route)?;
            g.launch("route_place", Launch::new(e, kh::ROUTE_THREADS, 64), &route)?;
            let gather = Gather {
                src: dptr(x, &s),
                dst: dptr(&wk.xs, &s),
                row_slot: route.row_slot,
                offsets: route.offsets,
                cols: c.hidden as u32,
                k: c.top_k as u32,
                experts: e,
                pad: 0,
            };
            g.launch("gather_rows", Launch::new(slots, 128, 0), &gather)?;
            // worst-case m-tiles: every expert may add one partial tile
            let m_tiles_max = slots.div_ceil(kh::GEMM_BM) + e.min(slots);
            let n1 = (c.intermediate as u32).div_ceil(kh::GEMM_BN / 2);
            let gemm1 = GroupedGemm {
                map_a: wk.map_xs.ptr(&g),
                map_b: maps.map_w1.ptr(&g),
                offsets: route.offsets,
                tile_offsets: route.tile_offsets,
                c: dptr(&wk.h, &s),
                z: wk.z.as_ref().map(|z| dptr(z, &s)).unwrap_or(0),
                experts: e,
                n: c.intermediate as u32,
                k: c.hidden as u32,
                n_b: 2 * c.intermediate as u32,
                ldc: c.intermediate as u32,
                n_tiles: n1,
            };
            let grid1 = sms.min(m_tiles_max * n1);
            g.launch("grouped_gemm_swiglu", Launch::new(grid1, kh::GEMM_THREADS, kh::GEMM_SMEM), &gemm1)?;
            let n2 = (c.hidden as u32).div_ceil(kh::GEMM_BN);
            let gemm2 = GroupedGemm {
                map_a: wk.map_h.ptr(&g),
                map_b: maps.map_w2.ptr(&g),
                offsets: route.offsets,
                tile_offsets: route.tile_offsets,
                c: dptr(&wk.ys, &s),
                z: 0,
                experts: e,
                n: c.hidden as u32,
                k: c.intermediate as u32,
                n_b: c.hidden as u32,
                ldc: c.hidden as u32,
                n_tiles: n2,
            };
            let grid2 = sms.min(m_tiles_max * n2);
            g.launch("grouped_gemm_bf16", Launch::new(grid2, kh::GEMM_THREADS, kh::GEMM_SMEM), &gemm2)?;
            let comb = Combine {
                y: dptr(&wk.ys, &s),
                w: dptr(topk_weights, &s),
                slot_row: route.slot_row,
                out: dptr(out, &s),
                tokens: tokens as u32,
                cols: c.hidden as u32,
                k: c.top_k as u32,
                pad: 0,
            };
            g.launch("combine_rows", Launch::new(tokens as u32, 256, 0), &comb)?;
        }
        Ok(())
    }

    /// Whether the last forward saw an expert id outside -1..E (synchronises the stream: a check for tests and
    /// debugging, not for the hot path).
    pub fn routing_error(&self) -> Result<()> {
        let v = self.gpu.download(&self.work.error)?;
        if v[0] != 0 {
            return Err(Error::InvalidArgument(format!(
                "topk_ids holds an expert id outside -1..{} (those slots were treated as masked)",
                self.cfg.experts
            )));
        }
        Ok(())
    }

    /// Per-expert row counts of the last forward (synchronises; for tests).
    pub fn expert_counts(&self) -> Result<Vec<u32>> {
        self.gpu.download(&self.work.counts)
    }
}
