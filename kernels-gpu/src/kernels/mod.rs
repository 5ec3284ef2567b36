//! One kernel (or one family of self-test kernels) per file. Every exported name is listed in
//! [`crate::manifest::KERNELS`].
pub mod combine;
pub mod ep_combine;
pub mod ep_common;
pub mod ep_dispatch;
pub mod ep_epoch;
pub mod ffn_fused;
pub mod gather;
pub mod grouped_gemm;
pub mod grouped_gemm_dswiglu_ew;
pub mod grouped_gemm_fp8;
pub mod grouped_gemm_fp8w;
pub mod grouped_gemm_swiglu_ew;
pub mod grouped_wgrad;
pub mod grouped_wgrad_fp8;
pub mod quant_fp8;
pub mod route;
pub mod selftest_matrix;
pub mod selftest_sync;
pub mod selftest_tma;
pub mod selftest_wgmma;
pub mod wgrad_maps;

/// A tensor map the host wrote, acquired by the calling thread before its first copy through it
/// (`tma::tensormap_acquire_sys`; every thread that issues copies through such a map calls this once, at the start
/// of its role: the producer for its loads, a store leader for its stores). 0 (no map) is skipped.
/// SAFETY: `map` 0 or a 128-byte tensor map in global memory.
#[inline(always)]
pub(crate) unsafe fn acquire_host_map(map: u64) {
    if map != 0 {
        crate::ptx::tma::tensormap_acquire_sys(map as *const u8);
    }
}

/// [`acquire_host_map`], then `prefetch.tensormap`: a producer's maps, at the start of its loop.
/// SAFETY: as [`acquire_host_map`] (`map` not null).
#[inline(always)]
pub(crate) unsafe fn acquire_prefetch(map: *const u8) {
    acquire_host_map(map as u64);
    crate::ptx::tma::prefetch_tensormap(map);
}

/// The first statement of every kernel of the layer's chains (programmatic dependent launch, `MEGAMOE_PDL`):
/// wait for the grids this one depends on to end (their memory visible) before touching any memory. A no-op for a
/// grid launched without programmatic stream serialization. The host launches a kernel with it only when its PTX
/// holds the wait (`Gpu`'s module scan). No kernel triggers its dependents early (`griddepcontrol.launch_dependents`):
/// the next grid starts once every block of this one has exited, which saves the launch latency at each boundary. The
/// trigger at entry measured slower on every line (docs/RESULTS.md 2026-12-06d call 2: the forward 0.993x back to
/// back against 1.006x without it, the step 0.986x against 0.990x; a trigger at each block's last tile between).
/// SAFETY: at a kernel's entry, every thread, before any global or shared-memory access.
#[inline(always)]
pub(crate) unsafe fn pdl_entry() {
    crate::ptx::sync::grid_dep_wait();
}

/// Whether the routing error word at `word` (a u32 written by `route_count`; 0 = no word) is set. Every
/// thread reads it once at kernel entry, before any barrier: one address written by an earlier launch, so
/// the answer is the same in every thread and an early return on it never splits a barrier.
#[inline(always)]
pub(crate) unsafe fn routing_failed(word: u64) -> bool {
    word != 0 && core::ptr::read_volatile(word as *const u32) != 0
}
