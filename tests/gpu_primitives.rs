//! Each Hopper primitive alone on the GPU (fresh random inputs, poisoned outputs, checked against the host).
//!
//! These tests need an H100/H200: without one they show as ignored. On the GPU machine run them with
//! `cargo test --test gpu_primitives -- --ignored` (or the test binary with `--ignored`); there, a missing GPU
//! is a failure, not a skip.
use std::sync::Arc;

use megamoe::rng::Rng;
use megamoe::selftest::{self, FlagMode};
use megamoe::tensor_map::Swizzle;
use megamoe::Gpu;

fn gpu() -> Arc<Gpu> {
    megamoe::gpu(0)
        .unwrap_or_else(|e| panic!("these tests run on the GPU machine only (run without --ignored elsewhere): {e}"))
}

fn rng() -> Rng {
    let seed = Rng::fresh_seed();
    eprintln!("seed {seed}");
    Rng::new(seed)
}

macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        #[test]
        #[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
        fn $name() {
            let g = gpu();
            let mut r = rng();
            let f: &dyn Fn(&Gpu, &mut Rng) -> megamoe::Result<()> = &$body;
            f(&g, &mut r).unwrap();
        }
    };
}

gpu_test!(wgmma_n64_tma_sw128, |g, r| selftest::wgmma(g, r, 64, false).map(|_| ()));
gpu_test!(wgmma_n128_tma_sw128, |g, r| selftest::wgmma(g, r, 128, false).map(|_| ()));
gpu_test!(wgmma_n256_tma_sw128, |g, r| selftest::wgmma(g, r, 256, false).map(|_| ()));
gpu_test!(wgmma_n64_interleave, |g, r| selftest::wgmma(g, r, 64, true).map(|_| ()));
gpu_test!(tma_2d_no_swizzle, |g, r| selftest::tma_round_trip(g, r, &[200, 150], &[64, 32], Swizzle::None));
gpu_test!(tma_2d_swizzle_128b, |g, r| selftest::tma_round_trip(g, r, &[200, 150], &[64, 32], Swizzle::B128));
gpu_test!(tma_2d_full_boxes_sw128, |g, r| selftest::tma_round_trip(g, r, &[256, 128], &[64, 64], Swizzle::B128));
gpu_test!(tma_3d_no_swizzle, |g, r| selftest::tma_round_trip(g, r, &[96, 40, 3], &[32, 16, 1], Swizzle::None));
gpu_test!(bulk_copy_1d_with_proxy_fence, |g, r| selftest::bulk_1d(g, r));
gpu_test!(tma_2d_loaded_per_cta_in_clusters, |g, r| selftest::tma_multicast(g, r, 66, 16, false));
gpu_test!(tma_2d_multicast_into_both_ctas, |g, r| selftest::tma_multicast(g, r, 66, 16, true));
gpu_test!(tma_row_gather_one_row_boxes_keep_the_swizzle, |g, r| selftest::tma_rows(g, r).map(|c| {
    eprintln!("TMA row gather cycles: {c:?}");
}));
gpu_test!(mbarrier_transaction_counting, |g, r| selftest::mbarrier_tx(g, r));
gpu_test!(ldmatrix_stmatrix_plain_and_transposed, |g, r| selftest::matrix(g, r));
gpu_test!(flags_release_acquire_gpu, |g, _r| selftest::flags(g, FlagMode::ChainGpu, false));
gpu_test!(flags_release_acquire_sys, |g, _r| selftest::flags(g, FlagMode::ChainSys, false));
gpu_test!(flags_red_release_counter, |g, _r| selftest::flags(g, FlagMode::Counter, false));
gpu_test!(flags_withheld_flag_times_out, |g, _r| selftest::flags(g, FlagMode::ChainGpu, true));
gpu_test!(setmaxnreg_three_warpgroups, |g, _r| selftest::setmaxnreg(g));

#[test]
#[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
fn launch_validation_rejects_bad_configs() {
    let g = gpu();
    let p = 0u64;
    // more threads than the kernel's .maxntid, more shared memory than the device has, an unknown kernel
    // SAFETY: every call is rejected before launching.
    unsafe {
        assert!(g.launch("selftest_setmaxnreg", megamoe::Launch::new(1, 512, 0), &p).is_err());
        assert!(g.launch("selftest_setmaxnreg", megamoe::Launch::new(1, 384, 300 * 1024), &p).is_err());
        assert!(g.launch("no_such_kernel", megamoe::Launch::new(1, 32, 0), &p).is_err());
    }
}

#[test]
#[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
fn wgmma_mn_major_operands() {
    let g = gpu();
    let mut r = rng();
    let found = selftest::wgmma_mn_search(&g, &mut r).unwrap();
    for (ta, l, s, e) in &found {
        println!("MN-major wgmma: trans_a {ta} LBO {l} SBO {s}: rel err {e:.3e}");
    }
    for ta in [false, true] {
        assert!(
            found.iter().any(|&(t, _, _, e)| t == ta && e < 1e-5),
            "no descriptor candidate computes the MN-major product (trans_a = {ta})"
        );
    }
}
