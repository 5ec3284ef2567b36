//! The grouped-GEMM engine alone on the GPU, every call of `megamoe::gemm` (plain, row-scattered, SwiGLU,
//! SwiGLU backward, K-grouped weight gradient): ragged row counts (experts of 0 and 1 rows), sizes that are not multiples of the
//! tile, both B layouts; outputs poisoned before, rows past the experts' end must stay poisoned.
mod common;

use std::sync::Arc;

use common::bad_offsets::{bad_layouts, finishes, Guarded, BAD_E};
use half::bf16;
use megamoe::gemm::{self, BLayout, DswigluArgs, GroupedGemmArgs, ScatterArgs, SwigluArgs, WgradArgs, WgradElem};
use megamoe::matmul64::{matmul, Strided};
use megamoe::rng::Rng;
use megamoe::{check, Gpu};

fn gpu() -> Arc<Gpu> {
    megamoe::gpu(0).unwrap_or_else(|e| panic!("GPU tests need the GPU machine: {e}"))
}

/// A fresh seed's generator, the seed printed (`MEGAMOE_SEED` replays it).
fn fresh_rng() -> Rng {
    let seed = Rng::fresh_seed();
    eprintln!("seed {seed}");
    Rng::new(seed)
}

fn run(counts: &[u32], n: usize, k: usize, layout: BLayout) {
    run_seeded(counts, n, k, layout, Rng::fresh_seed());
}

/// One grouped GEMM on the inputs of `seed`, checked against the f64 reference; returns C's bits.
fn run_seeded(counts: &[u32], n: usize, k: usize, layout: BLayout, seed: u64) -> Vec<u16> {
    run_launches(counts, n, k, layout, seed, 1).1
}

/// [`run_seeded`] with the prepared GEMM launched `launches` times back to back (C poisoned once, before the
/// first), then checked; also returns the kernel it launched.
fn run_launches(
    counts: &[u32],
    n: usize,
    k: usize,
    layout: BLayout,
    seed: u64,
    launches: usize,
) -> (&'static str, Vec<u16>) {
    let g = gpu();
    eprintln!("seed {seed}");
    let mut r = Rng::new(seed);
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37; // room the GEMM must not touch
    let a = r.bf16_vec(rows_max * k, 1.0);
    let b = r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt());
    let offsets = offsets_of(counts);
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
    let prepared = args.prepare(&g).unwrap();
    let kernel = prepared.kernel().expect("rows to multiply");
    for _ in 0..launches {
        prepared.launch(&g).unwrap();
    }
    drop(prepared);
    g.sync().unwrap();
    let c = g.download(&dc).unwrap();
    let want = grouped_ref(&offsets, &a, &b, layout, n, k);
    let got: Vec<f64> = c[..rows * n].iter().map(|v| v.to_f64()).collect();
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("C[{}, {}] not written", i / n, i % n);
    }
    let err =
        check::close(&format!("grouped GEMM {layout:?} counts {counts:?} N {n} K {k}"), &got, &want, 1e-2).unwrap();
    eprintln!("rel err {err:.3e}");
    assert!(c[rows * n..].iter().all(|v| v.to_bits() == 0xffff), "rows past the experts' end were written");
    (kernel, c.iter().map(|v| v.to_bits()).collect())
}

/// The row offsets of experts with `counts` rows: [0, c0, c0 + c1, ...].
fn offsets_of(counts: &[u32]) -> Vec<u32> {
    std::iter::once(0)
        .chain(counts.iter().scan(0u32, |acc, &c| {
            *acc += c;
            Some(*acc)
        }))
        .collect()
}

/// Per expert e, its rows `offsets[e]..offsets[e + 1]` of A (row-major, K columns) times B_e, in f64
/// (`megamoe::matmul64`): C [rows, n]. B_e's element (q, col) at `b[(e n + col) k + q]` (NK) or `b[(e k + q) n +
/// col]` (KN).
fn grouped_ref(offsets: &[u32], a: &[bf16], b: &[bf16], layout: BLayout, n: usize, k: usize) -> Vec<f64> {
    let (af, bf) = (f(a), f(b));
    let rows = *offsets.last().unwrap() as usize;
    let mut c = vec![0.0; rows * n];
    for e in 0..offsets.len() - 1 {
        let (r0, r1) = (offsets[e] as usize, offsets[e + 1] as usize);
        let be = &bf[e * n * k..(e + 1) * n * k];
        let bs = match layout {
            BLayout::NK => Strided::transposed(be, k),
            BLayout::KN => Strided::rows(be, n),
        };
        matmul(r1 - r0, n, k, Strided::rows(&af[r0 * k..r1 * k], k), bs, &mut c[r0 * n..r1 * n], false);
    }
    c
}

/// The f64 references the GPU tests compare with (`grouped_ref`, `wgrad_ref`: packed products) against plain loops,
/// on ragged experts with empty ones (runs without a GPU).
#[test]
fn references_are_the_plain_products() {
    let mut r = Rng::new(Rng::fresh_seed());
    let counts = [0u32, 1, 70, 0, 33];
    let mut offsets = vec![0u32];
    for c in counts {
        offsets.push(offsets.last().unwrap() + c);
    }
    let (rows, e, n, k) = (104, counts.len(), 40, 24);
    let a = r.bf16_vec((rows + 3) * k, 1.0);
    let b = r.bf16_vec(e * n * k, 1.0);
    for layout in [BLayout::NK, BLayout::KN] {
        let got = grouped_ref(&offsets, &a, &b, layout, n, k);
        for ex in 0..e {
            for row in offsets[ex] as usize..offsets[ex + 1] as usize {
                for col in 0..n {
                    let want: f64 = (0..k)
                        .map(|q| {
                            let bv = match layout {
                                BLayout::NK => b[(ex * n + col) * k + q],
                                BLayout::KN => b[(ex * k + q) * n + col],
                            };
                            a[row * k + q].to_f64() * bv.to_f64()
                        })
                        .sum();
                    let g = got[row * n + col];
                    assert!((g - want).abs() <= 1e-12 * (1.0 + want.abs()), "{layout:?} [{row}, {col}]: {g} vs {want}");
                }
            }
        }
    }
    // the weight gradients: C_e [m, n] + sum over the expert's rows of A^T B, from given values of C
    let (m, wn) = (12, 20);
    let (wa, wb) = (r.bf16_vec(rows * m, 1.0), r.bf16_vec(rows * wn, 1.0));
    let c0: Vec<f64> = (0..e * m * wn).map(|_| r.sym(1.0)).collect();
    let got = wgrad_ref(&offsets, &wa, &wb, m, wn, c0.clone());
    for ex in 0..e {
        for i in 0..m {
            for j in 0..wn {
                let rs = offsets[ex] as usize..offsets[ex + 1] as usize;
                let want = c0[(ex * m + i) * wn + j]
                    + rs.map(|q| wa[q * m + i].to_f64() * wb[q * wn + j].to_f64()).sum::<f64>();
                let g = got[(ex * m + i) * wn + j];
                assert!((g - want).abs() <= 1e-12 * (1.0 + want.abs()), "wgrad [{ex}, {i}, {j}]: {g} vs {want}");
            }
        }
    }
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

/// The 2-CTA cluster variants (sharing A: n-tile pairs; sharing B: m-tile pairs, unshared across an expert
/// boundary, a ghost for an odd m-tile count) give C bit for bit as the single-CTA kernel: 7 m-tiles with empty
/// experts, pairs across boundaries, 2 column tiles; and a grid far larger than the pairs (one expert).
fn clusters_match_single_cta(counts: &[u32], n: usize, k: usize, layout: BLayout) {
    let seed = Rng::fresh_seed();
    let one = gemm::with_clusters(false, false, || run_seeded(counts, n, k, layout, seed));
    for (a, b) in [(true, false), (false, true)] {
        let got = gemm::with_clusters(a, b, || run_seeded(counts, n, k, layout, seed));
        assert!(got == one, "clusters sharing A {a} / B {b}: C differs from the single-CTA kernel's");
    }
}
gpu_test!(nk_clusters_match_single_cta, clusters_match_single_cta(&[0, 1, 300, 129, 0, 17], 512, 128, BLayout::NK));
gpu_test!(kn_clusters_match_single_cta, clusters_match_single_cta(&[0, 1, 300, 129, 0, 17], 512, 128, BLayout::KN));
gpu_test!(kn_clusters_one_small_expert, clusters_match_single_cta(&[130], 512, 64, BLayout::KN));
/// The run-time tile counter (`gemm::with_gemm_sched(true)`: `grouped_gemm_bf16_dyn` / `grouped_gemm_bt_bf16_dyn`,
/// clusters pinned off): C bitwise the static walk's (each tile computed alike by whichever block takes it),
/// checked against the f64 reference inside `run_seeded`, the counter left at 0 by the launch's last take, and
/// the kernel asserted. Then five rounds (`run_launches`: C poisoned, one prepared GEMM launched twice, checked
/// against the reference), the last two with programmatic dependent launch (no memset of the counter): each round's
/// first launch follows a launch, so with more tiles than blocks a counter not reset in between would leave all but
/// each block's first tile unwritten (NaN in the reference check).
fn dyn_sched_matches_static(counts: &[u32], n: usize, k: usize, layout: BLayout) {
    let g = gpu();
    let want = match layout {
        BLayout::NK => "grouped_gemm_bf16_dyn",
        BLayout::KN => "grouped_gemm_bt_bf16_dyn",
    };
    let seed = Rng::fresh_seed();
    let (stat, (kernel, dynamic)) = gemm::with_clusters(false, false, || {
        let stat = gemm::with_gemm_sched(false, || run_seeded(counts, n, k, layout, seed));
        g.fill_tile_counter(0xff).unwrap();
        let dynamic = gemm::with_gemm_sched(true, || run_launches(counts, n, k, layout, seed, 1));
        (stat, dynamic)
    });
    assert_eq!(kernel, want, "MEGAMOE_GEMM_SCHED=dynamic: the kernel launched");
    assert!(stat == dynamic, "{layout:?} counts {counts:?}: the run-time walk's C differs from the static walk's");
    // the run-time walk ran to its end: the launch's last take (the tile count's) reset the counter to 0
    assert_eq!(g.tile_counter_value().unwrap(), 0, "the tile counter after the run-time walk");
    // repeated launches of one prepared GEMM, each checked against the reference (NaN: an unwritten tile); the
    // last two rounds with programmatic dependent launch, where no memset zeroes the counter between launches
    // (each launch's last take does)
    let outs: Vec<Vec<u16>> = (0..5)
        .map(|i| {
            megamoe::with_pdl(i >= 3, || {
                gemm::with_clusters(false, false, || {
                    gemm::with_gemm_sched(true, || run_launches(counts, n, k, layout, seed ^ 1, 2).1)
                })
            })
        })
        .collect();
    assert!(outs.iter().all(|o| *o == outs[0]), "repeated launches of the run-time walk differ");
}

gpu_test!(
    nk_dyn_sched_matches_static,
    dyn_sched_matches_static(&[0, 1, 300, 129, 0, 17, 128, 255], 512, 128, BLayout::NK)
);
gpu_test!(
    kn_dyn_sched_matches_static,
    dyn_sched_matches_static(&[0, 1, 300, 129, 0, 17, 128, 255], 512, 128, BLayout::KN)
);
// more tiles than blocks (~300 experts, 2 column tiles): the counter hands out most tiles
gpu_test!(nk_dyn_sched_many_tiles, {
    dyn_sched_matches_static(&(0..300).map(|e| (e * 97 % 301) as u32).collect::<Vec<_>>(), 512, 320, BLayout::NK)
});
// 128 experts (the offsets from the kernels' shared-memory copy), more tiles than blocks
gpu_test!(nk_dyn_sched_many_tiles_128_experts, {
    dyn_sched_matches_static(&(0..128).map(|e| (e * 211 % 601) as u32).collect::<Vec<_>>(), 512, 192, BLayout::NK)
});
gpu_test!(kn_dyn_sched_many_tiles, {
    dyn_sched_matches_static(&(0..300).map(|e| (e * 97 % 301) as u32).collect::<Vec<_>>(), 512, 320, BLayout::KN)
});
// 256 experts: the schedulers' shared-memory copy of the offsets at its limit; 300: past it (global reads)
gpu_test!(kn_256_experts, run(&(0..256).map(|e| (e * 37 % 11) as u32).collect::<Vec<_>>(), 320, 128, BLayout::KN));
gpu_test!(nk_300_experts, run(&(0..300).map(|e| (e * 37 % 11) as u32).collect::<Vec<_>>(), 320, 128, BLayout::NK));

/// The row-scattered GEMM: rows go to a permutation of C's rows with room to spare (C rows no source names stay
/// poisoned), a few destinations past C's end (not written), with and without a per-row scale.
fn scatter(counts: &[u32], n: usize, k: usize, scaled: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37;
    let c_rows = rows + 19;
    let a = r.bf16_vec(rows_max * k, 1.0);
    let b = r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt());
    let offsets = offsets_of(counts);
    // row i -> (p i + 5) mod (c_rows + 3), p a prime not dividing it: distinct, 3 of the values past C's end
    let m = c_rows + 3;
    let mul = [7usize, 11, 13].into_iter().find(|p| m % p != 0).unwrap();
    let dst: Vec<u32> = (0..rows_max).map(|i| ((mul * i + 5) % m) as u32).collect();
    let mut seen = vec![false; m];
    assert!(dst[..rows].iter().all(|&d| !std::mem::replace(&mut seen[d as usize], true)), "distinct destinations");
    let scale: Vec<f32> = (0..c_rows).map(|_| r.uniform() as f32 + 0.5).collect();
    let (da, db, ddst, dscale) =
        (g.upload(&a).unwrap(), g.upload(&b).unwrap(), g.upload(&dst).unwrap(), g.upload(&scale).unwrap());
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    let mut dc = g.alloc::<bf16>(c_rows * n).unwrap();
    g.fill_bytes(&mut dc, 0xff).unwrap();
    let args = ScatterArgs {
        a: &da,
        b: &db,
        offsets: &doff,
        tile_offsets: &dtil,
        dst_row: &ddst,
        scale: if scaled { Some(&dscale) } else { None },
        c: &mut dc,
        c_rows,
        experts: e,
        n,
        k,
        rows_max,
    };
    gemm::grouped_gemm_scatter(&g, args).unwrap();
    g.sync().unwrap();
    let c = g.download(&dc).unwrap();
    let full = grouped_ref(&offsets, &a, &b, BLayout::NK, n, k);
    let (mut got, mut want) = (Vec::new(), Vec::new());
    let mut named = vec![false; c_rows];
    for ex in 0..e {
        for row in offsets[ex] as usize..offsets[ex + 1] as usize {
            let d = dst[row] as usize;
            if d >= c_rows {
                continue;
            }
            named[d] = true;
            let f = if scaled { scale[d] as f64 } else { 1.0 };
            for col in 0..n {
                want.push(f * full[row * n + col]);
                got.push(c[d * n + col].to_f64());
            }
        }
    }
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("element {i} of the named rows not written");
    }
    let err =
        check::close(&format!("scatter counts {counts:?} N {n} K {k} scaled {scaled}"), &got, &want, 1e-2).unwrap();
    eprintln!("rel err {err:.3e}");
    for d in 0..c_rows {
        if !named[d] {
            assert!(c[d * n..(d + 1) * n].iter().all(|v| v.to_bits() == 0xffff), "C row {d} no row names was written");
        }
    }
}

gpu_test!(scatter_ragged_scaled, scatter(&[0, 1, 300, 129, 0, 17], 320, 192, true));
gpu_test!(scatter_ragged_unscaled, scatter(&[0, 1, 300, 129, 0, 17], 320, 192, false));
gpu_test!(scatter_full_tiles_scaled, scatter(&[256, 128, 384], 512, 128, true));

/// Shared inputs of the epilogue and weight-gradient tests: ragged counts, rows_max past the last row.
struct Setup {
    g: Arc<Gpu>,
    r: Rng,
    counts: Vec<u32>,
    offsets: Vec<u32>,
    rows: usize,
    rows_max: usize,
}

fn setup(counts: &[u32]) -> Setup {
    setup_seeded(counts, Rng::fresh_seed())
}

fn setup_seeded(counts: &[u32], seed: u64) -> Setup {
    eprintln!("seed {seed}");
    let offsets = offsets_of(counts);
    let rows = offsets[counts.len()] as usize;
    Setup { g: gpu(), r: Rng::new(seed), counts: counts.to_vec(), offsets, rows, rows_max: rows + 37 }
}

fn f(v: &[bf16]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// z = A . W1_e^T ([rows, 2I]) in f64 for every expert's rows.
fn z_ref(s: &Setup, a: &[bf16], w1: &[bf16], i: usize, k: usize) -> Vec<f64> {
    grouped_ref(&s.offsets, a, w1, BLayout::NK, 2 * i, k)
}

fn swiglu(keep_z: bool) {
    swiglu_with(keep_z, 192, Rng::fresh_seed());
}

/// GEMM1 + SwiGLU over I = `i` against the f64 reference (h, and z when `keep_z`), rows past the end unwritten;
/// returns the bits of h and z.
fn swiglu_with(keep_z: bool, i: usize, seed: u64) -> (Vec<u16>, Vec<u16>) {
    swiglu_counts(&[0, 1, 300, 129, 0, 17], keep_z, i, 128, seed)
}

/// [`swiglu_with`] with the experts' row `counts` and K given.
fn swiglu_counts(counts: &[u32], keep_z: bool, i: usize, k: usize, seed: u64) -> (Vec<u16>, Vec<u16>) {
    let mut s = setup_seeded(counts, seed);
    let e = s.counts.len();
    let g = s.g.clone();
    let a = s.r.bf16_vec(s.rows_max * k, 1.0);
    let w1 = s.r.bf16_vec(e * 2 * i * k, 1.7 / (k as f64).sqrt());
    let (da, dw1) = (g.upload(&a).unwrap(), g.upload(&w1).unwrap());
    let (doff, dtil) = (g.upload(&s.offsets).unwrap(), g.upload(&gemm::tile_offsets(&s.counts)).unwrap());
    let mut dh = g.alloc::<bf16>(s.rows_max * i).unwrap();
    let mut dz = g.alloc::<bf16>(s.rows_max * 2 * i).unwrap();
    g.fill_bytes(&mut dh, 0xff).unwrap();
    g.fill_bytes(&mut dz, 0xff).unwrap();
    let args = SwigluArgs {
        a: &da,
        w1: &dw1,
        offsets: &doff,
        tile_offsets: &dtil,
        h: &mut dh,
        z: if keep_z { Some(&mut dz) } else { None },
        experts: e,
        i,
        k,
        rows_max: s.rows_max,
    };
    gemm::grouped_gemm_swiglu(&g, args).unwrap();
    let (h, z) = (g.download(&dh).unwrap(), g.download(&dz).unwrap());
    let zr = z_ref(&s, &a, &w1, i, k);
    let hr: Vec<f64> =
        zr.chunks(2 * i).flat_map(|z| (0..i).map(|c| z[c] * sig(z[c]) * z[i + c]).collect::<Vec<_>>()).collect();
    check::close("swiglu h", &f(&h[..s.rows * i]), &hr, 1e-2).unwrap();
    assert!(h[s.rows * i..].iter().all(|v| v.to_bits() == 0xffff), "h rows past the experts' end were written");
    if keep_z {
        check::close("swiglu z", &f(&z[..s.rows * 2 * i]), &zr, 1e-2).unwrap();
        assert!(z[s.rows * 2 * i..].iter().all(|v| v.to_bits() == 0xffff), "z rows past the end were written");
    } else {
        assert!(z.iter().all(|v| v.to_bits() == 0xffff), "z written though not asked for");
    }
    let bits = |v: &[bf16]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    (bits(&h), bits(&z))
}

gpu_test!(swiglu_ragged_h_only, swiglu(false));
gpu_test!(swiglu_ragged_h_and_z, swiglu(true));
// the epilogue-warps kernel (`MEGAMOE_SWIGLU=ew7`: 96 columns of h a tile, z and h stored by other warps from a
// bf16 copy of the tile): against the reference inside `swiglu_with`, on I = 192 (two whole tiles) and 320 (the last
// tile a third full), with and without z; whether it matches the cooperative kernel bit for bit is printed (the
// same k16 wgmma sequence and the same h arithmetic, but a different wgmma width)
gpu_test!(swiglu_epilogue_warps_matches_the_reference, {
    for i in [192, 320] {
        for keep_z in [false, true] {
            let seed = Rng::fresh_seed();
            let ew = gemm::with_swiglu_epilogue_warps(true, || swiglu_with(keep_z, i, seed));
            let coop = gemm::with_swiglu_epilogue_warps(false, || swiglu_with(keep_z, i, seed));
            eprintln!("swiglu ew7 I = {i} z {keep_z}: bitwise the cooperative kernel's: {}", ew == coop);
        }
    }
});

// I = 320: 3 column tiles (odd: the unclustered kernel); 448: 4, the last partial (with MEGAMOE_MC=1 the
// 2-CTA cluster kernel)
gpu_test!(dswiglu_ragged, {
    dswiglu(320, Rng::fresh_seed());
});
gpu_test!(dswiglu_ragged_even_column_tiles, {
    dswiglu(448, Rng::fresh_seed());
});
// the 2-CTA cluster variant (sharing A over column-tile pairs) gives dz and the partials bit for bit
gpu_test!(dswiglu_cluster_matches_single_cta, {
    let seed = Rng::fresh_seed();
    let pp = |share_a| {
        gemm::with_dswiglu(gemm::Dsw::PingPong, || gemm::with_clusters(share_a, false, || dswiglu(448, seed)))
    };
    let (one, two) = (pp(false), pp(true));
    assert!(one == two, "the cluster SwiGLU backward differs from the single-CTA one");
});

// the epilogue-warps kernels (`_ew`, the default: cooperative 128 x 256 main loop, dh handed to the producer
// warpgroup's idle warps in bf16; `_ew7`: 128 x 192 tiles, seven epilogue warps): against the f64 reference (inside
// `dswiglu`) on every column count, and close to the ping-pong kernel (dh rounded to bf16 first: not bitwise);
// every row past the end unwritten (the last case: 202 tiles on at most 132 blocks and K = 256, so blocks hand
// several tiles over and the rings wrap). I = 320 and 448 end in a partial 192-column tile.
gpu_test!(dswiglu_epilogue_warps_matches_the_reference, {
    let small: &[u32] = &[0, 1, 300, 129, 0, 17];
    let large: &[u32] = &[1300, 0, 2047, 129, 4000, 1, 2600, 2200];
    for (counts, i, k) in [(small, 320, 128), (small, 448, 128), (small, 768, 128), (large, 320, 256)] {
        let seed = Rng::fresh_seed();
        let (pp, _) = gemm::with_dswiglu(gemm::Dsw::PingPong, || dswiglu_with(counts, i, k, seed));
        let val = |b: &[u16]| -> Vec<f64> { b.iter().map(|&v| bf16::from_bits(v).to_f64()).collect() };
        let pp = val(&pp);
        // rows past the end hold the poison (NaN): compare the written ones
        let n = pp.iter().take_while(|v| !v.is_nan()).count();
        for d in [gemm::Dsw::Ew, gemm::Dsw::Ew7, gemm::Dsw::Ew7n] {
            let (ew, _) = gemm::with_dswiglu(d, || dswiglu_with(counts, i, k, seed));
            let ew = val(&ew);
            assert!(n > 0 && ew[n..].iter().all(|v| v.is_nan()), "{d:?} I = {i}: rows past the end written");
            check::close(&format!("dswiglu {d:?} against ping-pong"), &ew[..n], &pp[..n], 1e-2).unwrap();
        }
    }
});

// The narrow seven-warp kernel (`grouped_gemm_bt_dswiglu_ew7n`, 128-column tiles) against the 192-column one: dz
// bit for bit (each element of dh the same wgmma sum, the same epilogue), each row's dtopk partials summed over
// its tiles within f32 rounding of the other's (another grouping of the columns); both against the f64 reference
// inside `dswiglu_with`. I = 256 (two tiles either way), 128 (one), 320 (three against two) and 64; many blocks'
// worth of tiles (the rings wrap).
gpu_test!(dswiglu_narrow_tiles_give_the_same_dz, {
    let counts: &[u32] = &[1300, 0, 2047, 129, 4000, 1, 2600, 2200];
    for (i, k) in [(256, 256), (128, 192), (320, 128), (64, 128)] {
        let seed = Rng::fresh_seed();
        let run = |d| gemm::with_dswiglu(d, || (dswiglu_with(counts, i, k, seed), gemm::dswiglu_partials(i)));
        let (((wide, wp), wn), ((narrow, np), nn)) = (run(gemm::Dsw::Ew7), run(gemm::Dsw::Ew7n));
        assert_eq!(nn, i.div_ceil(128), "I = {i}: the narrow kernel's partial columns");
        assert!(wide == narrow, "I = {i}: the narrow kernel's dz differs from the 192-column kernel's");
        let rows = wide.len() / (2 * i);
        let sum = |p: &[u32], nt: usize| -> Vec<f64> {
            p.chunks(nt).take(rows).map(|r| r.iter().map(|&b| f32::from_bits(b) as f64).sum::<f64>()).collect()
        };
        let (ws, ns) = (sum(&wp, wn), sum(&np, nn));
        let written = ws.iter().take_while(|v| !v.is_nan()).count();
        assert!(written > 0 && ns[written..].iter().all(|v| v.is_nan()), "I = {i}: partial rows past the end");
        check::close(&format!("I = {i}: dtopk partials narrow"), &ns[..written], &ws[..written], 1e-5).unwrap();
    }
});

// The run-time tile counter in the epilogue-warps kernels (`grouped_gemm_swiglu_ew7_dyn`, GEMM1 + SwiGLU, and
// `grouped_gemm_bt_dswiglu_ew7_dyn`, dh + SwiGLU backward; the producer, the consumers and the epilogue warps all
// walk the queue): h, z, dz and the dtopk partials bitwise the static walk's, each against the f64 reference
// inside `swiglu_counts` / `dswiglu_with`, and the counter left at the tile count. ~300 experts: more tiles than
// blocks.
gpu_test!(ew7_dyn_sched_matches_static, {
    // 300 experts: the tiles' offsets read from global memory; 128: from the kernels' shared-memory copy
    ew7_dyn_sched(&(0..300).map(|e| (e * 97 % 301) as u32).collect::<Vec<_>>());
    ew7_dyn_sched(&(0..128).map(|e| (e * 211 % 601) as u32).collect::<Vec<_>>());
});

fn ew7_dyn_sched(counts: &[u32]) {
    let g = gpu();
    let counts = counts.to_vec();
    let (i, k) = (192, 128);
    let seed = Rng::fresh_seed();
    for keep_z in [false, true] {
        let run = |dynamic| {
            gemm::with_swiglu_epilogue_warps(true, || {
                gemm::with_gemm_sched(dynamic, || swiglu_counts(&counts, keep_z, i, k, seed))
            })
        };
        let stat = run(false);
        g.fill_tile_counter(0xff).unwrap();
        let dynamic = run(true);
        assert_eq!(g.tile_counter_value().unwrap(), 0, "GEMM1 + SwiGLU's tile counter (reset by its last take)");
        let again = megamoe::with_pdl(true, || run(true));
        assert!(again == dynamic, "GEMM1 + SwiGLU z {keep_z}: with programmatic dependent launch");
        assert!(stat == dynamic, "GEMM1 + SwiGLU z {keep_z}: the run-time walk's h / z differ from the static walk's");
    }
    for dsw in [gemm::Dsw::Ew7, gemm::Dsw::Ew7n] {
        let run =
            |dynamic| gemm::with_dswiglu(dsw, || gemm::with_gemm_sched(dynamic, || dswiglu_with(&counts, i, k, seed)));
        let stat = run(false);
        g.fill_tile_counter(0xff).unwrap();
        let dynamic = run(true);
        assert_eq!(g.tile_counter_value().unwrap(), 0, "dh + SwiGLU {dsw:?}'s tile counter (reset by its last take)");
        let again = megamoe::with_pdl(true, || run(true));
        assert!(again == dynamic, "dh + SwiGLU backward {dsw:?}: with programmatic dependent launch");
        assert!(
            stat == dynamic,
            "dh + SwiGLU backward {dsw:?}: the run-time walk's dz / partials differ from the static's"
        );
    }
}

/// The SwiGLU-backward GEMM on the inputs of `seed`, checked against the f64 reference; returns the bits of dz
/// and of the partial sums.
fn dswiglu(i: usize, seed: u64) -> (Vec<u16>, Vec<u32>) {
    dswiglu_with(&[0, 1, 300, 129, 0, 17], i, 128, seed)
}

/// [`dswiglu`] with the experts' row `counts` and K given.
fn dswiglu_with(counts: &[u32], i: usize, k: usize, seed: u64) -> (Vec<u16>, Vec<u32>) {
    let mut s = setup_seeded(counts, seed);
    let e = s.counts.len();
    let g = s.g.clone();
    let slots = s.rows + 11;
    let dy = s.r.bf16_vec(s.rows_max * k, 1.0);
    let w2 = s.r.bf16_vec(e * k * i, 2.0 / (k as f64).sqrt());
    let z = s.r.bf16_vec(s.rows_max * 2 * i, 3.0);
    let w: Vec<f32> = (0..slots).map(|_| s.r.uniform() as f32).collect();
    // a permutation of slots onto rows, every slot < slots
    let row_slot: Vec<u32> = (0..s.rows_max).map(|r| ((r * 7 + 3) % slots) as u32).collect();
    let (ddy, dw2, dzin) = (g.upload(&dy).unwrap(), g.upload(&w2).unwrap(), g.upload(&z).unwrap());
    let (dw, drs) = (g.upload(&w).unwrap(), g.upload(&row_slot).unwrap());
    let (doff, dtil) = (g.upload(&s.offsets).unwrap(), g.upload(&gemm::tile_offsets(&s.counts)).unwrap());
    let nt = gemm::dswiglu_partials(i);
    let mut ddz = g.alloc::<bf16>(s.rows_max * 2 * i).unwrap();
    let mut dpart = g.alloc::<f32>(s.rows_max * nt).unwrap();
    g.fill_bytes(&mut ddz, 0xff).unwrap();
    g.fill_bytes(&mut dpart, 0xff).unwrap();
    let args = DswigluArgs {
        dy: &ddy,
        w2: &dw2,
        z: &dzin,
        weights: &dw,
        row_slot: &drs,
        offsets: &doff,
        tile_offsets: &dtil,
        dz: &mut ddz,
        partial: &mut dpart,
        experts: e,
        i,
        k,
        rows_max: s.rows_max,
    };
    gemm::grouped_gemm_dswiglu(&g, args).unwrap();
    let (dz, part) = (g.download(&ddz).unwrap(), g.download(&dpart).unwrap());
    let (mut want_dz, mut want_part) = (vec![0.0; s.rows * 2 * i], vec![0.0; s.rows * nt]);
    let dh_ref = grouped_ref(&s.offsets, &dy, &w2, BLayout::KN, i, k);
    for ex in 0..e {
        for row in s.offsets[ex] as usize..s.offsets[ex + 1] as usize {
            let sw = w[row_slot[row] as usize] as f64;
            for c in 0..i {
                let dh = dh_ref[row * i + c];
                let (gv, uv) = (z[row * 2 * i + c].to_f64(), z[row * 2 * i + i + c].to_f64());
                let sg = sig(gv);
                want_dz[row * 2 * i + c] = sw * dh * uv * sg * (1.0 + gv * (1.0 - sg));
                want_dz[row * 2 * i + i + c] = sw * dh * gv * sg;
                want_part[row * nt + c / gemm::dswiglu_columns()] += dh * gv * sg * uv;
            }
        }
    }
    check::close("dswiglu dz", &f(&dz[..s.rows * 2 * i]), &want_dz, 1e-2).unwrap();
    let got_part: Vec<f64> = part[..s.rows * nt].iter().map(|&v| v as f64).collect();
    check::close("dswiglu partial", &got_part, &want_part, 1e-2).unwrap();
    assert!(dz[s.rows * 2 * i..].iter().all(|v| v.to_bits() == 0xffff), "dz rows past the end were written");
    assert!(part[s.rows * nt..].iter().all(|v| v.is_nan()), "partial rows past the end were written");
    (dz.iter().map(|v| v.to_bits()).collect(), part.iter().map(|v| v.to_bits()).collect())
}

/// The K-grouped weight gradient with output `W` (f32 or bf16) against the f64 reference; C starts as random
/// values (kept and added to with `accumulate`, overwritten without). bf16: each element is also the f32
/// kernel's rounded (the same accumulator; without `accumulate`).
/// The output types' conversions.
trait El: WgradElem + Default {
    fn of(v: f32) -> Self;
    fn f(self) -> f32;
}
impl El for f32 {
    fn of(v: f32) -> Self {
        v
    }
    fn f(self) -> f32 {
        self
    }
}
impl El for bf16 {
    fn of(v: f32) -> Self {
        bf16::from_f32(v)
    }
    fn f(self) -> f32 {
        self.to_f32()
    }
}

/// C_e (+)= A_e^T B_e in f64 over each expert's rows (A [rows, M], B [rows, N]), onto `c` ([E, M, N]).
fn wgrad_ref(offsets: &[u32], a: &[bf16], b: &[bf16], m: usize, n: usize, mut c: Vec<f64>) -> Vec<f64> {
    let (af, bf) = (f(a), f(b));
    for ex in 0..offsets.len() - 1 {
        let (r0, r1) = (offsets[ex] as usize, offsets[ex + 1] as usize);
        let (at, bt) = (Strided::transposed(&af[r0 * m..r1 * m], m), Strided::rows(&bf[r0 * n..r1 * n], n));
        matmul(m, n, r1 - r0, at, bt, &mut c[ex * m * n..(ex + 1) * m * n], true);
    }
    c
}

fn wgrad<W: El>(counts: &[u32], accumulate: bool) {
    wgrad_mn::<W>(counts, accumulate, 192, 320);
}

/// As `wgrad` for C_e of M x N (N a multiple of 8: the last box's columns past N clipped by the tensor map).
fn wgrad_mn<W: El>(counts: &[u32], accumulate: bool, m: usize, n: usize) {
    let mut s = setup(counts);
    let e = s.counts.len();
    let g = s.g.clone();
    let a = s.r.bf16_vec(s.rows_max * m, 1.0);
    let b = s.r.bf16_vec(s.rows_max * n, 1.0);
    let c0: Vec<W> = (0..e * m * n).map(|_| W::of(s.r.sym(1.0) as f32)).collect();
    let (da, db, doff) = (g.upload(&a).unwrap(), g.upload(&b).unwrap(), g.upload(&s.offsets).unwrap());
    let mut dc = g.upload(&c0).unwrap();
    let args =
        WgradArgs { a: &da, b: &db, offsets: &doff, c: &mut dc, experts: e, m, n, rows_max: s.rows_max, accumulate };
    gemm::grouped_wgrad(&g, args).unwrap();
    let c = g.download(&dc).unwrap();
    let want = wgrad_ref(
        &s.offsets,
        &a,
        &b,
        m,
        n,
        if accumulate { c0.iter().map(|&v| v.f() as f64).collect() } else { vec![0.0; e * m * n] },
    );
    let got: Vec<f64> = c.iter().map(|&v| v.f() as f64).collect();
    let tag = format!("wgrad {} counts {counts:?} accumulate {accumulate}", W::NAME);
    check::close(&tag, &got, &want, 1e-2).unwrap();
    if W::NAME == "bf16" && !accumulate {
        let mut c32 = g.upload(&vec![f32::NAN; e * m * n]).unwrap();
        let args = WgradArgs {
            a: &da,
            b: &db,
            offsets: &doff,
            c: &mut c32,
            experts: e,
            m,
            n,
            rows_max: s.rows_max,
            accumulate,
        };
        gemm::grouped_wgrad(&g, args).unwrap();
        let c32 = g.download(&c32).unwrap();
        if let Some(i) = (0..c.len()).find(|&i| c[i].f().to_bits() != W::of(c32[i]).f().to_bits()) {
            panic!("{tag}: C[{i}] = {} is not the f32 kernel's {} rounded", c[i].f(), c32[i]);
        }
    }
}

gpu_test!(wgrad_ragged_overwrite, wgrad::<f32>(&[0, 1, 300, 129, 0, 17], false));
gpu_test!(wgrad_ragged_accumulate, wgrad::<f32>(&[0, 1, 300, 129, 0, 17], true));
gpu_test!(wgrad_bf16_ragged_overwrite, wgrad::<bf16>(&[0, 1, 300, 129, 0, 17], false));
gpu_test!(wgrad_bf16_ragged_accumulate, wgrad::<bf16>(&[0, 1, 300, 129, 0, 17], true));
gpu_test!(wgrad_bf16_no_rows_zeroes_c, wgrad::<bf16>(&[0, 0, 0], false));
// N = 200, M = 64: one tile of 200 columns, its last box clipped at column 200 by the tensor map (f32: 32-column
// boxes, bf16: 64); the second warpgroup's rows lie past M and store nothing
gpu_test!(wgrad_n_not_a_multiple_of_the_box, wgrad_mn::<f32>(&[0, 1, 300, 129, 0, 17], false, 64, 200));
gpu_test!(wgrad_bf16_n_not_a_multiple_of_the_box, wgrad_mn::<bf16>(&[0, 1, 300, 129, 0, 17], true, 64, 200));
gpu_test!(wgrad_no_rows_zeroes_c, wgrad::<f32>(&[0, 0, 0], false));

/// 48 experts (every fourth without rows, every fourth with 1-3, the rest 40-299) of C_e 320 x 640: 3 x 3 tiles
/// an expert, 432 tiles over at most 132 blocks, so each block runs many tiles in a row through one ring and one
/// set of staging boxes (tiles without rows among them), as at the Qwen shapes; against the f64 reference.
fn wgrad_many_tiles<W: El>(accumulate: bool) {
    let counts: Vec<u32> = (0..48u32)
        .map(|i| match i % 4 {
            0 => 0,
            1 => 1 + i % 3,
            _ => 40 + (37 * i) % 260,
        })
        .collect();
    wgrad_mn::<W>(&counts, accumulate, 320, 640);
}
gpu_test!(wgrad_many_tiles_per_block, wgrad_many_tiles::<f32>(false));
gpu_test!(wgrad_many_tiles_per_block_accumulate, wgrad_many_tiles::<f32>(true));
gpu_test!(wgrad_bf16_many_tiles_per_block, wgrad_many_tiles::<bf16>(false));
gpu_test!(wgrad_bf16_many_tiles_per_block_accumulate, wgrad_many_tiles::<bf16>(true));

/// 40 experts: one with 1500 rows, three with ~350-800, 8 empty, the rest 1-60 (skewed routing).
fn skewed_counts() -> Vec<u32> {
    (0..40u32)
        .map(|i| match i {
            7 => 1500,
            3 | 21 | 30 => 300 + 17 * i,
            _ if i % 5 == 0 => 0,
            _ => 1 + (13 * i) % 60,
        })
        .collect()
}

/// Skewed routing (one expert with 40% of the rows, a few busy ones, most with a handful or none) over many
/// tiles: the weight gradients with the run-time tile schedule (three launches in a row, each into C poisoned
/// with NaN, then three accumulating onto finite values: each launch's counter must start from zero, no tile
/// skipped or taken twice) are the static schedule's bit for bit, every element written, and within 1e-2 of the
/// f64 reference.
fn wgrad_schedules_agree<W: El>() {
    let counts = skewed_counts();
    schedules_agree::<W>(&counts, 256, 768, false);
    schedules_agree::<W>(&counts, 256, 768, true);
}

/// As `wgrad_schedules_agree` for `counts` and C_e of m x n.
fn schedules_agree<W: El>(counts: &[u32], m: usize, n: usize, accumulate: bool) {
    schedule_agrees::<W>(gemm::WgradSched::Dynamic, counts, m, n, accumulate);
}

/// Three launches under schedule `other`, each bit for bit the static schedule's, which is within 1e-2 of f64.
fn schedule_agrees<W: El>(other: gemm::WgradSched, counts: &[u32], m: usize, n: usize, accumulate: bool) {
    let mut s = setup(counts);
    let e = s.counts.len();
    let g = s.g.clone();
    let a = s.r.bf16_vec(s.rows_max * m, 1.0);
    let b = s.r.bf16_vec(s.rows_max * n, 1.0);
    // overwritten: C poisoned with NaN (every element must be written); accumulated: onto finite values (a tile
    // taken twice would add twice)
    let c0: Vec<W> = (0..e * m * n).map(|_| W::of(if accumulate { s.r.sym(1.0) as f32 } else { f32::NAN })).collect();
    let (da, db, doff) = (g.upload(&a).unwrap(), g.upload(&b).unwrap(), g.upload(&s.offsets).unwrap());
    let run = |sched: gemm::WgradSched| -> Vec<f32> {
        let mut dc = g.upload(&c0).unwrap();
        let args = WgradArgs {
            a: &da,
            b: &db,
            offsets: &doff,
            c: &mut dc,
            experts: e,
            m,
            n,
            rows_max: s.rows_max,
            accumulate,
        };
        gemm::with_wgrad_sched(sched, || gemm::grouped_wgrad(&g, args)).unwrap();
        g.download(&dc).unwrap().iter().map(|v| v.f()).collect()
    };
    let st = run(gemm::WgradSched::Static);
    let tag = format!("wgrad {} skewed, accumulate {accumulate}, M {m}", W::NAME);
    for launch in 0..3 {
        let dy = run(other);
        if let Some(i) = (0..dy.len()).find(|&i| dy[i].to_bits() != st[i].to_bits()) {
            panic!(
                "{tag}, {other:?} schedule, launch {launch}: C[{i}] = {} against the static schedule's {}",
                dy[i], st[i]
            );
        }
    }
    let init = if accumulate { c0.iter().map(|v| v.f() as f64).collect() } else { vec![0.0; e * m * n] };
    let want = wgrad_ref(&s.offsets, &a, &b, m, n, init);
    let got: Vec<f64> = st.iter().map(|&v| v as f64).collect();
    check::close(&tag, &got, &want, 1e-2).unwrap();
}
gpu_test!(wgrad_schedules_agree_skewed, wgrad_schedules_agree::<f32>());
gpu_test!(wgrad_bf16_schedules_agree_skewed, wgrad_schedules_agree::<bf16>());
// more experts than the run-time schedule ranks in shared memory (256): their tiles in expert order; 300 one-tile
// experts, a few busy
gpu_test!(wgrad_schedules_agree_300_experts, {
    let counts: Vec<u32> = (0..300u32).map(|i| if i % 37 == 5 { 400 + i } else { (7 * i) % 50 }).collect();
    schedules_agree::<f32>(&counts, 64, 128, false);
});

/// The rows past an expert's end are never part of its gradient: the rows of two experts that follow partial last
/// k-steps hold NaN in A and B, as do the rows past the last expert (to rows_max); every other expert's gradient
/// is written, finite and within 1e-2 of the f64 reference (NaN poisoned C first).
fn wgrad_rows_past_the_end<W: El>(accumulate: bool) {
    // expert 0's second k-step holds 6 of its rows, then expert 1's (NaN) and expert 2's; expert 2's third holds
    // 2, then expert 3's (NaN); expert 6, the last, is followed by NaN rows to rows_max
    let counts = [70u32, 3, 130, 1, 64, 0, 45];
    let mut s = setup(&counts);
    let (e, m, n) = (counts.len(), 128, 256);
    let g = s.g.clone();
    let mut a = s.r.bf16_vec(s.rows_max * m, 1.0);
    let mut b = s.r.bf16_vec(s.rows_max * n, 1.0);
    let nan_rows =
        (s.offsets[1]..s.offsets[2]).chain(s.offsets[3]..s.offsets[4]).chain(s.rows as u32..s.rows_max as u32);
    for r in nan_rows.map(|r| r as usize) {
        a[r * m..(r + 1) * m].fill(bf16::NAN);
        b[r * n..(r + 1) * n].fill(bf16::NAN);
    }
    let c0: Vec<W> = (0..e * m * n).map(|_| W::of(if accumulate { s.r.sym(1.0) as f32 } else { f32::NAN })).collect();
    let (da, db, doff) = (g.upload(&a).unwrap(), g.upload(&b).unwrap(), g.upload(&s.offsets).unwrap());
    let mut dc = g.upload(&c0).unwrap();
    let args =
        WgradArgs { a: &da, b: &db, offsets: &doff, c: &mut dc, experts: e, m, n, rows_max: s.rows_max, accumulate };
    gemm::grouped_wgrad(&g, args).unwrap();
    let c: Vec<f64> = g.download(&dc).unwrap().iter().map(|v| v.f() as f64).collect();
    let init = if accumulate { c0.iter().map(|v| v.f() as f64).collect() } else { vec![0.0; e * m * n] };
    let want = wgrad_ref(&s.offsets, &a, &b, m, n, init);
    let (mut got_k, mut want_k) = (Vec::new(), Vec::new());
    for x in [0, 2, 4, 5, 6] {
        got_k.extend_from_slice(&c[x * m * n..(x + 1) * m * n]);
        want_k.extend_from_slice(&want[x * m * n..(x + 1) * m * n]);
    }
    let tag = format!("wgrad {} beside NaN rows, accumulate {accumulate}", W::NAME);
    assert!(got_k.iter().all(|v| v.is_finite()), "{tag}: a NaN reached a gradient (or an element was not written)");
    check::close(&tag, &got_k, &want_k, 1e-2).unwrap();
}
gpu_test!(wgrad_rows_past_the_end_unread, wgrad_rows_past_the_end::<f32>(false));
gpu_test!(wgrad_rows_past_the_end_unread_accumulate, wgrad_rows_past_the_end::<f32>(true));
gpu_test!(wgrad_bf16_rows_past_the_end_unread, wgrad_rows_past_the_end::<bf16>(false));

/// Two weight gradients back to back on the stream (no synchronisation between them), on different buffers and
/// different row counts (the second's experts permuted): each launch reads the per-expert tensor maps written just
/// before it, not the earlier launch's (a stale map would read the other buffers or past an expert's end, where
/// NaN rows lie). Both against the f64 reference, every element written (NaN poisoned C).
fn wgrad_back_to_back<W: El>() {
    let (m, n) = (128, 256);
    let runs: [&[u32]; 2] = [&[70, 3, 130, 1, 64, 0, 45], &[3, 70, 1, 130, 0, 64, 45]];
    let mut pending = Vec::new();
    for counts in runs {
        let mut s = setup(counts);
        let e = counts.len();
        let g = s.g.clone();
        let mut a = s.r.bf16_vec(s.rows_max * m, 1.0);
        let mut b = s.r.bf16_vec(s.rows_max * n, 1.0);
        a[s.rows * m..].fill(bf16::NAN);
        b[s.rows * n..].fill(bf16::NAN);
        let (da, db, doff) = (g.upload(&a).unwrap(), g.upload(&b).unwrap(), g.upload(&s.offsets).unwrap());
        let mut dc = g.upload(&vec![W::of(f32::NAN); e * m * n]).unwrap();
        let args = WgradArgs {
            a: &da,
            b: &db,
            offsets: &doff,
            c: &mut dc,
            experts: e,
            m,
            n,
            rows_max: s.rows_max,
            accumulate: false,
        };
        gemm::grouped_wgrad(&g, args).unwrap();
        pending.push((s, a, b, da, db, doff, dc));
    }
    for (i, (s, a, b, _da, _db, _doff, dc)) in pending.into_iter().enumerate() {
        let e = s.counts.len();
        let c: Vec<f64> = s.g.download(&dc).unwrap().iter().map(|v| v.f() as f64).collect();
        let want = wgrad_ref(&s.offsets, &a, &b, m, n, vec![0.0; e * m * n]);
        let tag = format!("wgrad {} launch {i} of two back to back", W::NAME);
        assert!(c.iter().all(|v| v.is_finite()), "{tag}: a NaN in C (read past an expert's end, or not written)");
        check::close(&tag, &c, &want, 1e-2).unwrap();
    }
}
gpu_test!(wgrad_back_to_back_reads_its_own_maps, wgrad_back_to_back::<f32>());
gpu_test!(wgrad_bf16_back_to_back_reads_its_own_maps, wgrad_back_to_back::<bf16>());

/// The 2-CTA cluster form (`WgradSched::Clusters`: pairs of m-tiles sharing B by multicast, taken at run time, the
/// cluster's leader handing each index to its peer, busiest first) against the static single-CTA schedule, bit for
/// bit, three launches each, on the skewed counts of `wgrad_schedules_agree`: M = 256 and 512 (2 and 4 m-tiles),
/// overwriting NaN-poisoned C and accumulating; M = 320 (3 m-tiles: the single-CTA kernel runs instead); 300
/// experts (past the ranking); and one hot expert among 199 mostly empty ones (the leaders run through long
/// stretches of empty tiles, each index still handed over: each cluster's two channel slots wrap ~6 times).
fn wgrad_clusters_agree<W: El>() {
    let counts = skewed_counts();
    for (m, n, accumulate) in [(256, 768, false), (256, 768, true), (512, 200, false), (320, 256, false)] {
        schedule_agrees::<W>(gemm::WgradSched::Clusters, &counts, m, n, accumulate);
    }
    // more experts than the ranking holds (the pairs in expert order)
    let many: Vec<u32> = (0..300u32).map(|i| if i % 37 == 5 { 400 + i } else { (7 * i) % 50 }).collect();
    schedule_agrees::<W>(gemm::WgradSched::Clusters, &many, 256, 128, false);
    let sparse: Vec<u32> = (0..200u32)
        .map(|i| {
            if i == 150 {
                900
            } else if i % 50 == 7 {
                3
            } else {
                0
            }
        })
        .collect();
    // 800 pairs (~12 a cluster on an H200), nearly all empty: overwriting (a pair not taken leaves NaN) and
    // accumulating (a pair taken twice adds twice)
    for accumulate in [false, true] {
        schedule_agrees::<W>(gemm::WgradSched::Clusters, &sparse, 512, 512, accumulate);
    }
    // the cluster form is what runs (M = 256), the single-CTA one at M = 320
    let s = setup(&[5, 70]);
    let g = s.g.clone();
    let (b, off) = (g.alloc::<bf16>(s.rows_max * 128).unwrap(), g.upload(&s.offsets).unwrap());
    for (m, want) in [(256, true), (320, false)] {
        let a = g.alloc::<bf16>(s.rows_max * m).unwrap();
        let mut c = g.alloc::<W>(2 * m * 128).unwrap();
        let args = WgradArgs {
            a: &a,
            b: &b,
            offsets: &off,
            c: &mut c,
            experts: 2,
            m,
            n: 128,
            rows_max: s.rows_max,
            accumulate: false,
        };
        let k = gemm::with_wgrad_sched(gemm::WgradSched::Clusters, || args.prepare(&g).unwrap().kernel()).unwrap();
        assert_eq!(k.ends_with("_mc"), want, "M = {m}: {k}");
    }
}
gpu_test!(wgrad_clusters_agree_with_single_cta, wgrad_clusters_agree::<f32>());
gpu_test!(wgrad_bf16_clusters_agree_with_single_cta, wgrad_clusters_agree::<bf16>());

gpu_test!(bad_arguments_are_rejected_before_launch, {
    let g = gpu();
    // B sized for three experts, the call names two
    let (a, b) = (g.alloc::<bf16>(64 * 128).unwrap(), g.alloc::<bf16>(3 * 64 * 128).unwrap());
    let (off, til) = (g.upload(&[0u32, 32, 64]).unwrap(), g.upload(&[0u32, 1, 2]).unwrap());
    let mut c = g.alloc::<bf16>(64 * 64).unwrap();
    let mut wc = g.alloc::<f32>(2 * 128 * 64).unwrap();
    let why = |r: megamoe::Result<()>| r.unwrap_err().to_string();
    let plain = |c: &mut _, k| {
        let args = GroupedGemmArgs {
            a: &a,
            b: &b,
            b_layout: BLayout::NK,
            offsets: &off,
            tile_offsets: &til,
            c,
            experts: 2,
            n: 64,
            k,
            rows_max: 64,
        };
        gemm::grouped_gemm(&g, args)
    };
    assert!(why(plain(&mut c, 96)).contains("K = 96"));
    assert!(why(plain(&mut c, 128)).contains("B has"));
    let args = WgradArgs {
        a: &a,
        b: &a,
        offsets: &off,
        c: &mut wc,
        experts: 2,
        m: 128,
        n: 128,
        rows_max: 64,
        accumulate: false,
    };
    assert!(why(gemm::grouped_wgrad(&g, args)).contains("C must be"));
    let args = WgradArgs {
        a: &a,
        b: &a,
        offsets: &til,
        c: &mut wc,
        experts: 3,
        m: 128,
        n: 64,
        rows_max: 64,
        accumulate: false,
    };
    assert!(why(gemm::grouped_wgrad(&g, args)).contains("offsets"));
});

// ---------------------------------------------------------------------------------------------------------------
// Device offsets not as promised: past rows_max, decreasing, a huge or garbage tile count. Every call returns Ok,
// its launch ends within a few seconds, and nothing outside the outputs' rows_max rows is written (each output
// sits at the front of a larger allocation whose tail, the guard zone, is poisoned and checked); the weight
// gradients also read nothing past A's and B's rows_max rows (their guard zones hold NaN, C must stay finite).
// The values written inside the outputs are unspecified. With offsets as promised the tests above hold the
// results bitwise to what they were.
// ---------------------------------------------------------------------------------------------------------------

/// The M-grouped cluster policies the bad-offsets tests run under (single CTA, A shared, B shared).
const CLUSTER_POLICIES: [(bool, bool); 3] = [(false, false), (true, false), (false, true)];

/// `grouped_gemm` (both B layouts, every cluster form) on every bad layout: Ok, bounded, C's guard zone untouched.
fn gemm_bad_offsets(layout: BLayout) {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, n, k, rows_max) = (BAD_E, 512, 128, 200);
    let da = g.upload(&r.bf16_vec(rows_max * k, 1.0)).unwrap();
    let db = g.upload(&r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt())).unwrap();
    for (name, off, til) in bad_layouts(rows_max as u32, &mut r) {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        for (sa, sb) in CLUSTER_POLICIES {
            let mut c = Guarded::<bf16>::new(&g, rows_max * n, 0xff);
            let what = format!("grouped_gemm {layout:?}, {name}, clusters A {sa} B {sb}");
            let args = GroupedGemmArgs {
                a: &da,
                b: &db,
                b_layout: layout,
                offsets: &doff,
                tile_offsets: &dtil,
                c: c.buf(),
                experts: e,
                n,
                k,
                rows_max,
            };
            let kernel = gemm::with_clusters(sa, sb, || {
                let p = args.prepare(&g)?;
                p.launch(&g)?;
                Ok::<_, megamoe::Error>(p.kernel())
            });
            let kernel = kernel.unwrap_or_else(|err| panic!("{what}: {err}"));
            finishes(&g, &what);
            assert!(c.guard_intact(&g, 0xff), "{what} ({kernel:?}): written past C's rows_max rows");
        }
    }
}
gpu_test!(nk_bad_offsets_stay_inside_the_buffers, gemm_bad_offsets(BLayout::NK));
gpu_test!(kn_bad_offsets_stay_inside_the_buffers, gemm_bad_offsets(BLayout::KN));

/// `grouped_gemm_scatter` on every bad layout: Ok, bounded, C's guard zone untouched (destinations are bounded by
/// c_rows already; the rows read from `dst_row` stay below rows_max).
fn scatter_bad_offsets(scaled: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, n, k, rows_max) = (BAD_E, 320, 128, 200);
    let c_rows = rows_max + 19;
    let da = g.upload(&r.bf16_vec(rows_max * k, 1.0)).unwrap();
    let db = g.upload(&r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt())).unwrap();
    // distinct destinations, 3 of them past C's end
    let dst: Vec<u32> = (0..rows_max).map(|i| ((7 * i + 5) % (c_rows + 3)) as u32).collect();
    let scale: Vec<f32> = (0..c_rows).map(|_| r.uniform() as f32 + 0.5).collect();
    let (ddst, dscale) = (g.upload(&dst).unwrap(), g.upload(&scale).unwrap());
    for (name, off, til) in bad_layouts(rows_max as u32, &mut r) {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        let mut c = Guarded::<bf16>::new(&g, c_rows * n, 0xff);
        let what = format!("grouped_gemm_scatter scaled {scaled}, {name}");
        let args = ScatterArgs {
            a: &da,
            b: &db,
            offsets: &doff,
            tile_offsets: &dtil,
            dst_row: &ddst,
            scale: if scaled { Some(&dscale) } else { None },
            c: c.buf(),
            c_rows,
            experts: e,
            n,
            k,
            rows_max,
        };
        gemm::grouped_gemm_scatter(&g, args).unwrap_or_else(|err| panic!("{what}: {err}"));
        finishes(&g, &what);
        assert!(c.guard_intact(&g, 0xff), "{what}: written past C's c_rows rows");
    }
}
gpu_test!(scatter_bad_offsets_stay_inside_the_buffers, {
    scatter_bad_offsets(true);
    scatter_bad_offsets(false);
});

// `grouped_gemm_swiglu` (the cooperative kernel and its cluster forms, the epilogue-warps kernel), h only and h
// with z, on every bad layout: Ok, bounded, the guard zones of h and z untouched.
gpu_test!(swiglu_bad_offsets_stay_inside_the_buffers, {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, i, k, rows_max) = (BAD_E, 256, 128, 200);
    let da = g.upload(&r.bf16_vec(rows_max * k, 1.0)).unwrap();
    let dw1 = g.upload(&r.bf16_vec(e * 2 * i * k, 1.7 / (k as f64).sqrt())).unwrap();
    for (name, off, til) in bad_layouts(rows_max as u32, &mut r) {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        for (ew7, (sa, sb)) in
            [(false, (false, false)), (false, (true, false)), (false, (false, true)), (true, (false, false))]
        {
            for keep_z in [false, true] {
                let mut h = Guarded::<bf16>::new(&g, rows_max * i, 0xff);
                let mut z = Guarded::<bf16>::new(&g, rows_max * 2 * i, 0xff);
                let what = format!("grouped_gemm_swiglu ew7 {ew7} clusters A {sa} B {sb} z {keep_z}, {name}");
                let args = SwigluArgs {
                    a: &da,
                    w1: &dw1,
                    offsets: &doff,
                    tile_offsets: &dtil,
                    h: h.buf(),
                    z: if keep_z { Some(z.buf()) } else { None },
                    experts: e,
                    i,
                    k,
                    rows_max,
                };
                let res = gemm::with_swiglu_epilogue_warps(ew7, || {
                    gemm::with_clusters(sa, sb, || gemm::grouped_gemm_swiglu(&g, args))
                });
                res.unwrap_or_else(|err| panic!("{what}: {err}"));
                finishes(&g, &what);
                assert!(h.guard_intact(&g, 0xff), "{what}: written past h's rows_max rows");
                assert!(z.guard_intact(&g, 0xff), "{what}: written past z's rows_max rows");
            }
        }
    }
});

// `grouped_gemm_dswiglu` (ping-pong, its cluster form, `_ew`, `_ew7`) on every bad layout, with some `row_slot`
// values at or past the weights' length: Ok, bounded, the guard zones of dz and the partial sums untouched. Then
// with offsets as promised: the rows whose slot is past the weights (which a NaN guard zone follows) get
// dz = 0 (weight 0, nothing read for them), and the others are finite.
gpu_test!(dswiglu_bad_offsets_stay_inside_the_buffers, {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, i, k, rows_max) = (BAD_E, 448, 128, 200);
    let slots = rows_max + 11;
    let ddy = g.upload(&r.bf16_vec(rows_max * k, 1.0)).unwrap();
    let dw2 = g.upload(&r.bf16_vec(e * k * i, 2.0 / (k as f64).sqrt())).unwrap();
    let dzin = g.upload(&r.bf16_vec(rows_max * 2 * i, 3.0)).unwrap();
    let w: Vec<f32> = (0..slots).map(|_| r.uniform() as f32 + 0.5).collect();
    // 0xff bytes: NaN weights past the end (a weight read there would make its row's dz NaN)
    let dw = Guarded::<f32>::with(&g, &w, 0xff);
    // every fifth row's slot at or past the weights' length
    let row_slot: Vec<u32> = (0..rows_max)
        .map(|row| match row % 5 {
            0 => [slots as u32, slots as u32 + 1, u32::MAX, 1 << 31][row / 5 % 4],
            _ => ((row * 7 + 3) % slots) as u32,
        })
        .collect();
    let drs = g.upload(&row_slot).unwrap();
    let kernels = [
        (gemm::Dsw::PingPong, false),
        (gemm::Dsw::PingPong, true),
        (gemm::Dsw::Ew, false),
        (gemm::Dsw::Ew7, false),
        (gemm::Dsw::Ew7n, false),
    ];
    let fits = [0u32, 1, rows_max as u32 / 2, 29, 0, 17];
    let mut valid = vec![0u32];
    for c in fits {
        valid.push(valid.last().unwrap() + c);
    }
    let mut layouts = bad_layouts(rows_max as u32, &mut r);
    layouts.push(("offsets as promised", valid.clone(), gemm::tile_offsets(&fits)));
    for (name, off, til) in layouts {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        for (dsw, share_a) in kernels {
            gemm::with_dswiglu(dsw, || {
                let nt = gemm::dswiglu_partials(i);
                let mut dz = Guarded::<bf16>::new(&g, rows_max * 2 * i, 0xff);
                let mut part = Guarded::<f32>::new(&g, rows_max * nt, 0xff);
                let what = format!("grouped_gemm_dswiglu {dsw:?} clusters {share_a}, {name}");
                let args = DswigluArgs {
                    dy: &ddy,
                    w2: &dw2,
                    z: &dzin,
                    weights: dw.front(),
                    row_slot: &drs,
                    offsets: &doff,
                    tile_offsets: &dtil,
                    dz: dz.buf(),
                    partial: part.buf(),
                    experts: e,
                    i,
                    k,
                    rows_max,
                };
                let res = gemm::with_clusters(share_a, false, || gemm::grouped_gemm_dswiglu(&g, args));
                res.unwrap_or_else(|err| panic!("{what}: {err}"));
                finishes(&g, &what);
                assert!(dz.guard_intact(&g, 0xff), "{what}: written past dz's rows_max rows");
                assert!(part.guard_intact(&g, 0xff), "{what}: written past the partial sums' rows_max rows");
                if name == "offsets as promised" {
                    let dzh = g.download(dz.front()).unwrap();
                    for row in 0..valid[BAD_E] as usize {
                        let v = &dzh[row * 2 * i..(row + 1) * 2 * i];
                        if row_slot[row] as usize >= slots {
                            assert!(v.iter().all(|x| x.to_f32() == 0.0), "{what}: row {row} (slot past w) not 0");
                        } else {
                            assert!(v.iter().all(|x| x.is_finite()), "{what}: row {row} not finite");
                        }
                    }
                }
            });
        }
    }
    assert!(dw.guard_intact(&g, 0xff));
});

/// `grouped_wgrad` (f32 or bf16 C; static, run-time and 2-CTA cluster schedules) on every bad layout: Ok, bounded,
/// C's guard zone untouched, and every element of C finite: A's and B's guard zones hold NaN, so a read past their
/// rows_max rows (an expert's tensor map reaching past the buffer) would put NaN into C.
fn wgrad_bad_offsets<W: El + bytemuck::Pod>() {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, m, n, rows_max) = (BAD_E, 256, 256, 200);
    let a = Guarded::<bf16>::with(&g, &r.bf16_vec(rows_max * m, 1.0), 0xff);
    let b = Guarded::<bf16>::with(&g, &r.bf16_vec(rows_max * n, 1.0), 0xff);
    for (name, off, _) in bad_layouts(rows_max as u32, &mut r) {
        let doff = g.upload(&off).unwrap();
        for sched in [gemm::WgradSched::Static, gemm::WgradSched::Dynamic, gemm::WgradSched::Clusters] {
            for accumulate in [false, true] {
                let mut c = Guarded::<W>::with(&g, &vec![W::of(0.5); e * m * n], 0xff);
                let what = format!("grouped_wgrad {} {sched:?} accumulate {accumulate}, {name}", W::NAME);
                let args = WgradArgs {
                    a: a.front(),
                    b: b.front(),
                    offsets: &doff,
                    c: c.buf(),
                    experts: e,
                    m,
                    n,
                    rows_max,
                    accumulate,
                };
                gemm::with_wgrad_sched(sched, || gemm::grouped_wgrad(&g, args))
                    .unwrap_or_else(|err| panic!("{what}: {err}"));
                finishes(&g, &what);
                assert!(c.guard_intact(&g, 0xff), "{what}: written past C");
                let ch = g.download(c.front()).unwrap();
                if let Some(x) = ch.iter().position(|v| !v.f().is_finite()) {
                    panic!("{what}: C[{x}] = {} (read past A or B, or not written)", ch[x].f());
                }
            }
        }
    }
    assert!(a.guard_intact(&g, 0xff) && b.guard_intact(&g, 0xff));
}
gpu_test!(wgrad_bad_offsets_stay_inside_the_buffers, wgrad_bad_offsets::<f32>());
gpu_test!(wgrad_bf16_bad_offsets_stay_inside_the_buffers, wgrad_bad_offsets::<bf16>());
