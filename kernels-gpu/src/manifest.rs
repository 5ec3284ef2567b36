//! What each kernel of the module promises: its name, its launch bound, and the checks CI holds it to.
//!
//! Plain data with no dependencies, so `build.rs` and the xtask compile this file as it is (`#[path]`): build.rs adds
//! `.maxntid` (the register cap `setmaxnreg` needs) to the PTX of kernels with `max_threads > 0`, and
//! `cargo xtask check-kernels` fails when a `spill_free` kernel has a stack frame or spills, or an `mma`
//! kernel's SASS has no HGMMA (QGMMA for FP8).

/// One kernel's promises.
#[derive(Clone, Copy, Debug)]
pub struct KernelSpec {
    /// The exported symbol.
    pub name: &'static str,
    /// Threads per block the kernel is written for; written into the PTX as `.maxntid` when non-zero.
    pub max_threads: u32,
    /// ptxas must report a 0-byte stack frame and no spills.
    pub spill_free: bool,
    /// The SASS must contain HGMMA or QGMMA (the kernel runs on the tensor cores).
    pub mma: bool,
    /// CTAs per cluster (x) the kernel is written for, written into the PTX as `.reqnctapercluster` when above
    /// 1 (the launch then runs in clusters without a launch attribute; its grid must be a multiple).
    pub cluster: u32,
    /// Blocks an SM must fit (with `max_threads > 0`), written as `.minnctapersm`: ptxas then caps the registers
    /// at 65536 / (max_threads * min_blocks).
    pub min_blocks: u32,
}

const fn k(name: &'static str, max_threads: u32, spill_free: bool, mma: bool) -> KernelSpec {
    KernelSpec { name, max_threads, spill_free, mma, cluster: 1, min_blocks: 1 }
}

const fn k2(name: &'static str, max_threads: u32, spill_free: bool, mma: bool) -> KernelSpec {
    KernelSpec { name, max_threads, spill_free, mma, cluster: 2, min_blocks: 1 }
}

/// A spill-free kernel without tensor cores that must fit `min_blocks` blocks an SM (a memory-bound kernel whose
/// bandwidth needs the loads of several blocks in flight).
const fn kb(name: &'static str, max_threads: u32, min_blocks: u32) -> KernelSpec {
    KernelSpec { name, max_threads, spill_free: true, mma: false, cluster: 1, min_blocks }
}

/// Every kernel in the module.
pub const KERNELS: &[KernelSpec] = &[
    k("selftest_wgmma_n64", 128, true, true),
    k("selftest_wgmma_n128", 128, true, true),
    k("selftest_wgmma_n256", 128, true, true),
    k("selftest_wgmma_n64_interleave", 128, true, true),
    k("selftest_wgmma_mn", 128, true, true),
    k("selftest_tma_2d", 128, true, false),
    k("selftest_tma_3d", 128, true, false),
    k("selftest_bulk_1d", 128, true, false),
    k("selftest_tma_rows", 128, true, false),
    k2("selftest_tma_mc", 128, true, false),
    k("selftest_mbarrier_tx", 128, true, false),
    k("selftest_matrix", 32, true, false),
    k("selftest_flags", 128, true, false),
    k("selftest_setmaxnreg", 384, true, false),
    k("route_count", 256, true, false),
    k("route_scan", 1024, true, false),
    k("route_place", 256, true, false),
    k("route_fused", 256, true, false),
    k("gather_rows", 128, true, false),
    k("gather_rows_dequant", 128, true, false),
    k("combine_rows", 256, true, false),
    k("grouped_gemm_bf16", 384, true, true),
    k("grouped_gemm_bf16_scatter", 384, true, true),
    k("grouped_gemm_bf16_scatter_dyn", 384, true, true),
    k2("grouped_gemm_bf16_mc", 384, true, true),
    k2("grouped_gemm_bf16_mcb", 384, true, true),
    k("grouped_gemm_swiglu", 384, true, true),
    k2("grouped_gemm_swiglu_mc", 384, true, true),
    k2("grouped_gemm_swiglu_mcb", 384, true, true),
    k("grouped_gemm_swiglu_gather", 384, true, true),
    k("grouped_gemm_swiglu_mv", 384, true, true),
    k("grouped_gemm_bt_bf16", 384, true, true),
    k("grouped_gemm_bt_bf16_cpx", 384, true, true),
    k("grouped_gemm_bt_bf16_cpx_dyn", 384, true, true),
    k("grouped_gemm_bt_bf16_dyn", 384, true, true),
    k("grouped_gemm_bf16_dyn", 384, true, true),
    k2("grouped_gemm_bt_bf16_mc", 384, true, true),
    k2("grouped_gemm_bt_bf16_mcb", 384, true, true),
    k("grouped_gemm_bt_dswiglu", 384, true, true),
    k2("grouped_gemm_bt_dswiglu_mc", 384, true, true),
    k("grouped_gemm_bt_dswiglu_ew", 384, true, true),
    k("grouped_gemm_bt_dswiglu_ew7", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7_dyn", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7_gather", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7_gather_dyn", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7n", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7n_dyn", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7n_gather", 512, true, true),
    k("grouped_gemm_bt_dswiglu_ew7n_gather_dyn", 512, true, true),
    k("grouped_gemm_swiglu_ew7", 512, true, true),
    k("grouped_gemm_swiglu_ew7_dyn", 512, true, true),
    k("grouped_gemm_swiglu_ew7_mv", 512, true, true),
    k("grouped_gemm_swiglu_ew7_mv_dyn", 512, true, true),
    k("grouped_gemm_swiglu_ew7_gather", 512, true, true),
    k("grouped_gemm_swiglu_ew7_gather_dyn", 512, true, true),
    k("ffn_fused_fwd", 384, true, true),
    k("ffn_fused_fwd_mv", 384, true, true),
    k("wgrad_expert_maps", 128, true, false),
    k("grouped_wgrad_f32", 384, true, true),
    k("grouped_wgrad_f32_mv", 384, true, true),
    k("grouped_wgrad_bf16", 384, true, true),
    k("grouped_wgrad_bf16_mv", 384, true, true),
    k2("grouped_wgrad_f32_mc", 384, true, true),
    k2("grouped_wgrad_f32_mv_mc", 384, true, true),
    k2("grouped_wgrad_bf16_mc", 384, true, true),
    k2("grouped_wgrad_bf16_mv_mc", 384, true, true),
    k("grouped_wgrad_f32_ga", 384, true, true),
    k("grouped_wgrad_bf16_ga", 384, true, true),
    k2("grouped_wgrad_f32_ga_mc", 384, true, true),
    k2("grouped_wgrad_bf16_ga_mc", 384, true, true),
    k("grouped_wgrad_f32_gb", 384, true, true),
    k("grouped_wgrad_bf16_gb", 384, true, true),
    k("grouped_wgrad_fp8_f32", 384, true, true),
    k("grouped_wgrad_fp8_bf16", 384, true, true),
    k("grouped_wgrad_fp8_probe", 384, true, true),
    k("grouped_wgrad_fp8b_f32", 384, true, true),
    k("grouped_wgrad_fp8b_bf16", 384, true, true),
    k("grouped_wgrad_fp8b_f32_mv", 384, true, true),
    k("grouped_wgrad_fp8b_bf16_mv", 384, true, true),
    k("dtopk_reduce", 256, true, false),
    k("quantize_fp8_rows", 256, true, false),
    k("quantize_fp8_blocks", 256, true, false),
    k("quantize_fp8_blocks_t", 256, true, false),
    // 4 blocks an SM (64 registers): 2 left it ~2x slower (fourteenth session)
    kb("quantize_fp8_cols_grouped", 256, 4),
    // its row codes: 77 registers with whole-line loads (115 with lane pairs), 3 blocks an SM
    kb("quantize_fp8_cols_grouped_rows", 256, 3),
    k("grouped_gemm_fp8", 384, true, true),
    k("grouped_gemm_fp8_regs", 384, true, true),
    k("grouped_gemm_fp8_probe", 384, true, true),
    k("grouped_gemm_fp8w", 384, true, true),
    k("grouped_gemm_fp8w_probe1", 384, true, true),
    k("grouped_gemm_fp8w_probe2", 384, true, true),
    k("grouped_gemm_fp8w_timeline", 384, true, true),
    k("grouped_gemm_fp8w_nl", 384, true, true),
    k("grouped_gemm_fp8w_probe2_nl", 384, true, true),
    k("grouped_gemm_fp8w_nl_timeline", 384, true, true),
    k("grouped_gemm_fp8w_probe1_timeline", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_q", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_zt", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_qz", 384, true, true),
    k("grouped_gemm_fp8w_cpx", 384, true, true),
    k("grouped_gemm_fp8w_gather", 384, true, true),
    k("grouped_gemm_fp8w_dswiglu", 384, true, true),
    k("grouped_gemm_fp8w_dswiglu_gather", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_q_gather", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_zt_gather", 384, true, true),
    k("grouped_gemm_fp8w_swiglu_qz_gather", 384, true, true),
    k2("grouped_gemm_fp8_mc", 384, true, true),
    k("grouped_gemm_fp8_swiglu", 384, true, true),
    k("grouped_gemm_fp8_swiglu_q", 384, true, true),
    k("ep_dispatch", 256, true, false),
    k("ep_combine", 256, true, false),
    k("ep_epoch_next", 32, true, false),
];

/// The spec of `name`, if the module exports it.
pub fn find(name: &str) -> Option<&'static KernelSpec> {
    let mut i = 0;
    while i < KERNELS.len() {
        if str_eq(KERNELS[i].name, name) {
            return Some(&KERNELS[i]);
        }
        i += 1;
    }
    None
}

const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (i, a) in KERNELS.iter().enumerate() {
            assert_eq!(find(a.name).map(|s| s.name), Some(a.name));
            for b in &KERNELS[i + 1..] {
                assert_ne!(a.name, b.name);
            }
        }
        assert!(find("no_such_kernel").is_none());
    }

    #[test]
    fn launch_bounds_are_whole_warps() {
        for s in KERNELS {
            assert_eq!(s.max_threads % 32, 0, "{}", s.name);
        }
    }
}
