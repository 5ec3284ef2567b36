//! The grouped-GEMM engine alone on the GPU: ragged row counts (experts of 0 and 1 rows), sizes that are not
//! multiples of the tile, both B layouts; C poisoned before, rows past the experts' end must stay poisoned.
use std::sync::Arc;

use half::bf16;
use megamoe::gemm::{self, BLayout, GroupedGemmArgs};
use megamoe::rng::Rng;
use megamoe::{check, Gpu};

fn gpu() -> Arc<Gpu> {
    megamoe::gpu(0).unwrap_or_else(|e| panic!("GPU tests need the GPU machine: {e}"))
}

fn run(counts: &[u32], n: usize, k: usize, layout: BLayout) {
    let g = gpu();
    let seed = Rng::fresh_seed();
    eprintln!("seed {seed}");
    let mut r = Rng::new(seed);
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37; // room the GEMM must not touch
    let a = r.bf16_vec(rows_max * k, 1.0);
    let b = r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt());
    let mut offsets = vec![0u32; e + 1];
    for i in 0..e {
        offsets[i + 1] = offsets[i] + counts[i];
    }
    let (da, db) = (g.upload(&a).unwrap(), g.upload(&b).unwrap());
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    let mut dc = g.alloc::<bf16>(rows_max * n).unwrap();
    g.fill_bytes(&mut dc, 0xff).unwrap();
    let args = GroupedGemmArgs {
        a: &da,
        b: &db,
        b_layout: layout,
        offsets: &doff,
        tile_offsets: &dtil,
        c: &mut dc,
        experts: e,
        n,
        k,
        rows_max,
    };
    gemm::grouped_gemm(&g, args).unwrap();
    g.sync().unwrap();
    let c = g.download(&dc).unwrap();
    let mut want = vec![0.0f64; rows * n];
    for ex in 0..e {
        for row in offsets[ex] as usize..offsets[ex + 1] as usize {
            for col in 0..n {
                let mut s = 0.0;
                for q in 0..k {
                    let bv = match layout {
                        BLayout::NK => b[(ex * n + col) * k + q],
                        BLayout::KN => b[(ex * k + q) * n + col],
                    };
                    s += a[row * k + q].to_f64() * bv.to_f64();
                }
                want[row * n + col] = s;
            }
        }
    }
    let got: Vec<f64> = c[..rows * n].iter().map(|v| v.to_f64()).collect();
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("C[{}, {}] not written", i / n, i % n);
    }
    let err =
        check::close(&format!("grouped GEMM {layout:?} counts {counts:?} N {n} K {k}"), &got, &want, 1e-2).unwrap();
    eprintln!("rel err {err:.3e}");
    assert!(c[rows * n..].iter().all(|v| v.to_bits() == 0xffff), "rows past the experts' end were written");
}

macro_rules! gpu_test {
    ($name:ident, $body:expr) => {
        #[test]
        #[ignore = "needs a Hopper GPU: run with --ignored on the H200"]
        fn $name() {
            $body
        }
    };
}

gpu_test!(nk_ragged_with_empty_and_single_row_experts, run(&[0, 1, 300, 129, 0, 17], 320, 192, BLayout::NK));
gpu_test!(kn_ragged_with_empty_and_single_row_experts, run(&[0, 1, 300, 129, 0, 17], 320, 192, BLayout::KN));
gpu_test!(nk_full_tiles, run(&[256, 128, 384], 512, 256, BLayout::NK));
gpu_test!(kn_full_tiles, run(&[256, 128, 384], 512, 256, BLayout::KN));
gpu_test!(kn_one_expert_many_rows, run(&[1000], 768, 2048, BLayout::KN));
gpu_test!(all_experts_empty, run(&[0, 0, 0], 256, 64, BLayout::KN));
