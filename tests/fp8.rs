//! Blockwise FP8 on the GPU (`megamoe::fp8`): the quantization kernels give the CPU reference's codes and scales
//! bit for bit; the grouped GEMM matches the f64 product of the dequantized operands (ragged experts with 0 and 1
//! rows, several tiles in N and K), outputs poisoned before, rows past the experts' end left alone; bad shapes
//! are refused before anything runs; with device offsets not as promised every call stays inside its buffers.
mod common;

use std::sync::Arc;

use common::bad_offsets::{bad_layouts, finishes, Guarded, BAD_E};
use cudarc::driver::CudaSlice;
use half::bf16;
use megamoe::fp8::{self, Fp8Variant, GroupedGemmFp8Args, QuantizeArgs, QuantizeTArgs, SwigluFp8Args, SwigluFp8QArgs};
use megamoe::rng::Rng;
use megamoe::{check, gemm, reference, Gpu};

/// A bf16 layer's configuration with the straight-through FP8 backward ([`Fp8Backward::Straight`]: the one these
/// tests compare with; the default runs dx in FP8).
fn straight_cfg(
    h: usize,
    i: usize,
    e: usize,
    k: usize,
    t: usize,
    save: megamoe::layer::Save,
) -> megamoe::layer::LayerConfig {
    use megamoe::layer::{Fp8Backward, LayerConfig};
    LayerConfig { fp8_backward: Fp8Backward::Straight, ..LayerConfig::bf16(h, i, e, k, t, save) }
}

fn gpu() -> Arc<Gpu> {
    megamoe::gpu(0).unwrap_or_else(|e| panic!("GPU tests need the GPU machine: {e}"))
}

/// An Rng on a fresh seed, printed (a failing run can be repeated with `Rng::new(seed)`).
fn fresh_rng() -> Rng {
    let seed = Rng::fresh_seed();
    eprintln!("seed {seed}");
    Rng::new(seed)
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

/// bf16 values of spread magnitudes (per row and per block), zeros among them, one all-zero 128-block.
fn spread(r: &mut Rng, rows: usize, cols: usize) -> Vec<bf16> {
    let mut x: Vec<bf16> = (0..rows * cols)
        .map(|i| {
            let mag = [1e-3, 0.02, 0.5, 3.0, 40.0][(i / cols + i / 128) % 5];
            if r.below(17) == 0 {
                bf16::from_f32(0.0)
            } else {
                bf16::from_f64(r.sym(mag))
            }
        })
        .collect();
    if rows * cols >= 256 {
        x[128..256].fill(bf16::from_f32(0.0));
    }
    x
}

fn quantize_matches(rows: usize, cols: usize, blocks: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let x = spread(&mut r, rows, cols);
    let dx = g.upload(&x).unwrap();
    let mut q = g.alloc::<u8>(rows * cols).unwrap();
    let ns = if blocks { rows / 128 * (cols / 128) } else { rows * (cols / 128) };
    let mut s = g.alloc::<f32>(ns).unwrap();
    g.fill_bytes(&mut q, 0x7f).unwrap();
    g.fill_bytes(&mut s, 0xff).unwrap();
    let a = QuantizeArgs { x: &dx, q: &mut q, scales: &mut s, rows, cols };
    if blocks {
        fp8::quantize_blocks(&g, a).unwrap();
    } else {
        fp8::quantize_rows(&g, a).unwrap();
    }
    g.sync().unwrap();
    let (q, s) = (g.download(&q).unwrap(), g.download(&s).unwrap());
    let (wq, ws) =
        if blocks { fp8::quantize_blocks_cpu(&x, rows, cols) } else { fp8::quantize_rows_cpu(&x, rows, cols) };
    if let Some(i) = (0..ns).find(|&i| s[i].to_bits() != ws[i].to_bits()) {
        panic!("scale {i}: {} against the reference's {}", s[i], ws[i]);
    }
    if let Some(i) = (0..rows * cols).find(|&i| q[i] != wq[i]) {
        panic!("code [{}, {}]: {:#04x} against {:#04x} (x = {})", i / cols, i % cols, q[i], wq[i], x[i]);
    }
}

gpu_test!(quantize_blocks_t_matches_the_reference_bitwise, {
    let g = gpu();
    let mut r = fresh_rng();
    let (b, rows, cols) = (3, 256, 384);
    let x = spread(&mut r, b * rows, cols);
    let dx = g.upload(&x).unwrap();
    let mut q = g.alloc::<u8>(b * rows * cols).unwrap();
    let mut s = g.alloc::<f32>(b * rows * cols / (128 * 128)).unwrap();
    g.fill_bytes(&mut q, 0x7f).unwrap();
    g.fill_bytes(&mut s, 0xff).unwrap();
    fp8::quantize_blocks_t(&g, QuantizeTArgs { x: &dx, q: &mut q, scales: &mut s, batches: b, rows, cols }).unwrap();
    let (q, s) = (g.download(&q).unwrap(), g.download(&s).unwrap());
    let (wq, ws) = fp8::quantize_blocks_t_cpu(&x, b, rows, cols);
    assert!(s.iter().zip(&ws).all(|(p, q)| p.to_bits() == q.to_bits()), "scales differ");
    if let Some(i) = (0..q.len()).find(|&i| q[i] != wq[i]) {
        panic!("code {i} (row {}, column {}): {:#04x} against {:#04x}", i / rows, i % rows, q[i], wq[i]);
    }
});

/// The column quantizer tests' expert layout of `counts`: E, the rows, room for 37 more, the row and m-tile offsets
/// (on the host and the device) and Kp.
struct ExpertRows {
    e: usize,
    rows: usize,
    rows_max: usize,
    offsets: Vec<u32>,
    tiles: Vec<u32>,
    kp: usize,
    doff: CudaSlice<u32>,
    dtil: CudaSlice<u32>,
}

impl ExpertRows {
    fn new(g: &Gpu, counts: &[u32]) -> Self {
        let e = counts.len();
        let rows = counts.iter().sum::<u32>() as usize;
        let rows_max = rows + 37;
        let (offsets, tiles) = (row_offsets(counts), gemm::tile_offsets(counts));
        let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&tiles).unwrap());
        ExpertRows { e, rows, rows_max, kp: fp8::cols_grouped_kp(rows_max, e), offsets, tiles, doff, dtil }
    }
}

/// `quantize_cols_grouped` of `v` [rows_max, cols] on the GPU into poisoned outputs (codes 0x7f, scales NaN: what the
/// quantizer does not write keeps them); `block`: one scale per 128 x 128 block. With `gather` = (row_slot, top_k,
/// tokens) `v` holds the tokens [tokens, cols] and the gather is fused, its bf16 copy of the gathered rows returned
/// too (poisoned 0xffff first).
#[allow(clippy::type_complexity)]
fn quantize_cols_dev_with(
    g: &Arc<Gpu>,
    v: &[bf16],
    cols: usize,
    (offsets, tile_offsets): (&CudaSlice<u32>, &CudaSlice<u32>),
    (rows_max, kp): (usize, usize),
    block: bool,
    gather: Option<(&[u32], usize, usize)>,
) -> (CudaSlice<u8>, CudaSlice<f32>, Option<CudaSlice<bf16>>) {
    let dv = g.upload(v).unwrap();
    let per_block = if block { cols / 128 } else { cols };
    let (mut q, mut s) = (g.alloc::<u8>(cols * kp).unwrap(), g.alloc::<f32>(per_block * (kp / 128)).unwrap());
    g.fill_bytes(&mut q, 0x7f).unwrap();
    g.fill_bytes(&mut s, 0xff).unwrap();
    let rs = gather.map(|(row_slot, _, _)| g.upload(row_slot).unwrap());
    let mut copy = gather.map(|_| g.alloc::<bf16>(rows_max * cols).unwrap());
    if let Some(c) = copy.as_mut() {
        g.fill_bytes(c, 0xff).unwrap();
    }
    let args = fp8::QuantizeColsArgs {
        x: &dv,
        offsets,
        tile_offsets,
        q: &mut q,
        scales: &mut s,
        experts: offsets.len() - 1,
        rows_max,
        cols,
        block_scales: block,
        gather: gather.map(|(_, top_k, tokens)| fp8::ColsGather {
            row_slot: rs.as_ref().unwrap(),
            top_k,
            tokens,
            copy: copy.as_mut(),
            weights: None,
        }),
        rows_out: None,
    };
    fp8::quantize_cols_grouped(g, args).unwrap();
    (q, s, copy)
}

/// The column quantizer writing the rows' row-wise codes too (`rows_out`, kernel `quantize_fp8_cols_grouped_rows`):
/// the column codes and scales as without it, the row codes and scales bitwise `quantize_rows_cpu` of the expert
/// rows (below offsets[E]), the rows past them left poisoned.
fn quantize_cols_rows_run(counts: &[u32], cols: usize) {
    let g = gpu();
    let mut r = fresh_rng();
    let ExpertRows { e, rows, rows_max, offsets, tiles, kp, doff, dtil } = ExpertRows::new(&g, counts);
    let x = spread(&mut r, rows_max, cols);
    let dv = g.upload(&x).unwrap();
    let (mut q, mut s) = (g.alloc::<u8>(cols * kp).unwrap(), g.alloc::<f32>(cols * (kp / 128)).unwrap());
    let (mut qr, mut sr) = (g.alloc::<u8>(rows_max * cols).unwrap(), g.alloc::<f32>(rows_max * cols / 128).unwrap());
    g.fill_bytes(&mut qr, 0x7f).unwrap();
    g.fill_bytes(&mut sr, 0xff).unwrap();
    let args = fp8::QuantizeColsArgs {
        x: &dv,
        offsets: &doff,
        tile_offsets: &dtil,
        q: &mut q,
        scales: &mut s,
        experts: e,
        rows_max,
        cols,
        block_scales: false,
        gather: None,
        rows_out: Some((&mut qr, &mut sr)),
    };
    fp8::quantize_cols_grouped(&g, args).unwrap();
    g.sync().unwrap();
    let (q, s, qr, sr) =
        (g.download(&q).unwrap(), g.download(&s).unwrap(), g.download(&qr).unwrap(), g.download(&sr).unwrap());
    let (wq, ws) = fp8::quantize_cols_grouped_cpu(&x, cols, &offsets, kp);
    let used = tiles[e] as usize;
    assert!((0..used * cols).all(|i| s[i].to_bits() == ws[i].to_bits()), "column scales differ");
    for c in 0..cols {
        assert!(q[c * kp..c * kp + 128 * used] == wq[c * kp..c * kp + 128 * used], "column codes of {c} differ");
    }
    let (rq, rs) = fp8::quantize_rows_cpu(&x[..rows * cols], rows, cols);
    for i in 0..rows * cols / 128 {
        assert!(sr[i].to_bits() == rs[i].to_bits(), "row scale {i}: {} against {}", sr[i], rs[i]);
    }
    if let Some(i) = (0..rows * cols).find(|&i| qr[i] != rq[i]) {
        panic!("row code {i} (row {}, column {}): {:#04x} against {:#04x}", i / cols, i % cols, qr[i], rq[i]);
    }
    assert!(qr[rows * cols..].iter().all(|&v| v == 0x7f), "row codes past the experts were written");
    assert!(sr[rows * cols / 128..].iter().all(|v| v.to_bits() == u32::MAX), "row scales past the experts written");
}
gpu_test!(quantize_cols_grouped_rows_bitwise, quantize_cols_rows_run(&[0, 1, 300, 129, 0, 64, 17, 256], 384));

/// The column-wise grouped quantization (the weight gradients' K-major operands) against its CPU reference, bit
/// for bit: ragged experts (0, 1, 129, 300 rows ...), zero rows, every written code and scale; the columns past
/// the experts' blocks keep their poison; `block`: one scale per 128 x 128 block.
fn quantize_cols_grouped_run(counts: &[u32], cols: usize, block: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let ExpertRows { e, rows, rows_max, offsets, tiles, kp, doff, dtil } = ExpertRows::new(&g, counts);
    let mut x = r.bf16_vec(rows_max * cols, 1.0);
    for row in (5..rows).step_by(61) {
        x[row * cols..(row + 1) * cols].fill(bf16::from_f32(0.0));
    }
    let (q, s, _) = quantize_cols_dev_with(&g, &x, cols, (&doff, &dtil), (rows_max, kp), block, None);
    g.sync().unwrap();
    let (q, s) = (g.download(&q).unwrap(), g.download(&s).unwrap());
    let (wq, ws) = if block {
        fp8::quantize_cols_grouped_blocks_cpu(&x, cols, &offsets, kp)
    } else {
        fp8::quantize_cols_grouped_cpu(&x, cols, &offsets, kp)
    };
    let used = tiles[e] as usize; // 128-row blocks written per column
    let (per_block, of) = if block { (cols / 128, 128) } else { (cols, 1) };
    for c in 0..cols {
        for kb in 0..kp / 128 {
            let (got, want) = (s[kb * per_block + c / of], ws[kb * per_block + c / of]);
            if kb < used {
                assert!(got.to_bits() == want.to_bits(), "scale of column {c} block {kb}: {got} against {want}");
            } else {
                assert!(got.to_bits() == u32::MAX, "scale of column {c} block {kb} past the experts was written");
            }
        }
        for k in 0..kp {
            let (got, want) = (q[c * kp + k], wq[c * kp + k]);
            if k < 128 * used {
                assert!(got == want, "code of column {c} at {k}: {got:#04x} against {want:#04x}");
            } else {
                assert!(got == 0x7f, "code of column {c} at {k} past the experts was written");
            }
        }
    }
}
/// The gather fused into the column-wise quantization: tokens [T, cols] read through a random row -> slot map
/// (one slot of a token past T: zeros), codes and scales bitwise the reference on the CPU-gathered rows, and the
/// bf16 copy bitwise the gathered rows (rows past offsets[E] keep their poison).
fn quantize_cols_gathered_run(counts: &[u32], cols: usize, block: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let ExpertRows { e, rows, rows_max, offsets, tiles, kp, doff, dtil } = ExpertRows::new(&g, counts);
    let (top_k, tokens) = (4usize, 97usize);
    let x = r.bf16_vec(tokens * cols, 1.0);
    let mut row_slot: Vec<u32> = (0..rows_max).map(|_| r.below(tokens * top_k) as u32).collect();
    if rows > 3 {
        row_slot[3] = (tokens * top_k + 1) as u32; // a token past T: read as zeros
    }
    let gathered: Vec<bf16> = (0..rows_max)
        .flat_map(|row| {
            let t = row_slot[row] as usize / top_k;
            (0..cols).map(move |c| (t, c))
        })
        .map(|(t, c)| if t < tokens { x[t * cols + c] } else { bf16::from_f32(0.0) })
        .collect();
    let (q, s, copy) =
        quantize_cols_dev_with(&g, &x, cols, (&doff, &dtil), (rows_max, kp), block, Some((&row_slot, top_k, tokens)));
    g.sync().unwrap();
    let (q, s, copy) = (g.download(&q).unwrap(), g.download(&s).unwrap(), g.download(&copy.unwrap()).unwrap());
    let (wq, ws) = if block {
        fp8::quantize_cols_grouped_blocks_cpu(&gathered, cols, &offsets, kp)
    } else {
        fp8::quantize_cols_grouped_cpu(&gathered, cols, &offsets, kp)
    };
    let used = tiles[e] as usize;
    let per_block = if block { cols / 128 } else { cols };
    for i in 0..used * per_block {
        assert!(s[i].to_bits() == ws[i].to_bits(), "scale {i}: {} against {}", s[i], ws[i]);
    }
    for c in 0..cols {
        for k in 0..128 * used {
            let (got, want) = (q[c * kp + k], wq[c * kp + k]);
            assert!(got == want, "code of column {c} at {k}: {got:#04x} against {want:#04x}");
        }
    }
    for row in 0..rows_max {
        for c in 0..cols {
            let got = copy[row * cols + c].to_bits();
            if row < rows {
                assert_eq!(got, gathered[row * cols + c].to_bits(), "copy of row {row} column {c}");
            } else {
                assert_eq!(got, 0xffff, "copy of row {row} past the experts was written");
            }
        }
    }
}
gpu_test!(quantize_cols_gathered_matches_the_reference_bitwise, {
    quantize_cols_gathered_run(&[0, 1, 300, 129, 0, 64, 17, 256], 256, false)
});
gpu_test!(quantize_cols_gathered_block_scales_bitwise, quantize_cols_gathered_run(&[5, 0, 257, 128, 1], 384, true));
gpu_test!(quantize_cols_grouped_matches_the_reference_bitwise, {
    quantize_cols_grouped_run(&[0, 1, 300, 129, 0, 64, 17, 256], 256, false)
});
gpu_test!(quantize_cols_grouped_qwen3_30b_width, quantize_cols_grouped_run(&[700, 0, 1024, 3, 555], 2048, false));
gpu_test!(quantize_cols_grouped_block_scales_bitwise, {
    quantize_cols_grouped_run(&[0, 1, 300, 129, 0, 64, 17, 256], 384, true)
});

/// A weight gradient's output type, from and to f32.
trait El: megamoe::gemm::WgradElem + Default {
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

/// The K-grouped FP8 weight gradient on operands quantized by `quantize_cols_grouped`: C_e = A_e^T B_e against
/// the f64 product of the dequantized codes (the CPU quantizer's, bitwise the GPU's) over each expert's padded K
/// blocks; ragged experts with 0 and 1 rows; C poisoned (or, accumulating, random) first.
fn wgrad_fp8_run<W: El>(counts: &[u32], m: usize, n: usize, accumulate: bool) {
    wgrad_fp8_run_with::<W>(counts, m, n, accumulate, false)
}

/// As [`wgrad_fp8_run`]; `b_block`: B quantized with one scale per 128 x 128 block (`grouped_wgrad_fp8b_*`).
fn wgrad_fp8_run_with<W: El>(counts: &[u32], m: usize, n: usize, accumulate: bool, b_block: bool) {
    let g = gpu();
    let mut r = fresh_rng();
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 29;
    let x = r.bf16_vec(rows_max * m, 1.0);
    let y = r.bf16_vec(rows_max * n, 1.0);
    let offsets = row_offsets(counts);
    let tiles = gemm::tile_offsets(counts);
    let kp = fp8::cols_grouped_kp(rows_max, e);
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&tiles).unwrap());
    let quant = |v: &[bf16], cols: usize, block| {
        let (q, s, _) = quantize_cols_dev_with(&g, v, cols, (&doff, &dtil), (rows_max, kp), block, None);
        (q, s)
    };
    let ((qa, sa), (qb, sb)) = (quant(&x, m, false), quant(&y, n, b_block));
    // C: poisoned (NaN) when overwritten, random when accumulated
    let c0: Vec<f32> = (0..e * m * n).map(|_| if accumulate { r.sym(1.0) as f32 } else { f32::NAN }).collect();
    let bf = W::NAME == "bf16";
    let c0: Vec<W> = c0.iter().map(|&v| W::of(v)).collect();
    // the run-time tile schedule (the default) and the static one: the same bits
    let run = |sched: gemm::WgradSched| -> Vec<f32> {
        let mut dc = g.upload(&c0).unwrap();
        let args = fp8::WgradFp8Args {
            a_t: &qa,
            a_scales: &sa,
            b_t: &qb,
            b_scales: &sb,
            tile_offsets: &dtil,
            c: &mut dc,
            experts: e,
            m,
            n,
            kp,
            accumulate,
            b_block_scales: b_block,
        };
        gemm::with_wgrad_sched(sched, || fp8::grouped_wgrad_fp8(&g, args)).unwrap();
        g.download(&dc).unwrap().iter().map(|&v| v.f()).collect()
    };
    // three run-time launches in a row (each must start its counter from zero), each the static one's bits
    let fixed = run(gemm::WgradSched::Static);
    let mut dynamic = Vec::new();
    for launch in 0..3 {
        dynamic = run(gemm::WgradSched::Dynamic);
        if let Some(q) = (0..dynamic.len()).find(|&q| dynamic[q].to_bits() != fixed[q].to_bits()) {
            panic!(
                "launch {launch}: C[{q}] = {} with the run-time schedule, {} with the static one",
                dynamic[q], fixed[q]
            );
        }
    }
    let got: Vec<f64> = dynamic.iter().map(|&v| v as f64).collect();
    if let Some(q) = got.iter().position(|v| v.is_nan()) {
        panic!("C[{q}] not written");
    }
    // the reference from the CPU quantizer (bitwise the GPU's: the quantize_cols_grouped tests)
    let deq = |v: &[bf16], cols: usize, block: bool| {
        let (q, s, per_block, of) = if block {
            let (q, s) = fp8::quantize_cols_grouped_blocks_cpu(v, cols, &offsets, kp);
            (q, s, cols / 128, 128)
        } else {
            let (q, s) = fp8::quantize_cols_grouped_cpu(v, cols, &offsets, kp);
            (q, s, cols, 1)
        };
        // scales [Kp / 128, C (/ 128)] to the [C, Kp / 128] of dequantize_cpu's 1 x 128 blocks
        let kbs = kp / 128;
        let st: Vec<f32> = (0..cols * kbs).map(|i| s[(i % kbs) * per_block + (i / kbs) / of]).collect();
        fp8::dequantize_cpu(&q, &st, cols, kp, 1)
    };
    let (ad, bd) = (deq(&x, m, false), deq(&y, n, b_block));
    let mut want: Vec<f64> = if accumulate { c0.iter().map(|&v| v.f() as f64).collect() } else { vec![0.0; e * m * n] };
    for ex in 0..e {
        let (k0, k1) = (128 * tiles[ex] as usize, 128 * tiles[ex + 1] as usize);
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (k0..k1).map(|k| ad[i * kp + k] * bd[j * kp + k]).sum();
                want[(ex * m + i) * n + j] += s;
            }
        }
    }
    let tag = format!("FP8 wgrad {} counts {counts:?} M {m} N {n} accumulate {accumulate} B blocks {b_block}", W::NAME);
    // f32: the tensor cores' own FP8 accumulation inside a 128-deep block is not exact (DeepSeek-V3 measured ~14
    // bits), hence 1e-3; bf16: its rounding
    let err = check::close(&tag, &got, &want, if bf { 1e-2 } else { 1e-3 }).unwrap();
    eprintln!("{tag}: rel err {err:.3e} against the dequantized f64 product");
}
gpu_test!(
    wgrad_fp8_matches_the_dequantized_product,
    wgrad_fp8_run::<f32>(&[0, 1, 300, 129, 0, 64, 17], 256, 384, false)
);
gpu_test!(wgrad_fp8_accumulates, wgrad_fp8_run::<f32>(&[0, 1, 300, 129, 0, 64, 17], 256, 384, true));
gpu_test!(wgrad_fp8_bf16, wgrad_fp8_run::<bf16>(&[0, 1, 300, 129, 0, 64, 17], 256, 384, false));
gpu_test!(wgrad_fp8_bf16_accumulates, wgrad_fp8_run::<bf16>(&[5, 0, 700, 129], 384, 256, true));
gpu_test!(wgrad_fp8_b_block_scales, wgrad_fp8_run_with::<f32>(&[0, 1, 300, 129, 0, 64, 17], 256, 384, false, true));
gpu_test!(wgrad_fp8_b_block_scales_bf16_accumulates, {
    wgrad_fp8_run_with::<bf16>(&[5, 0, 700, 129], 384, 256, true, true)
});
// skewed: one busy expert among 40, most with a few rows or none; 240 tiles over at most 132 blocks, so the run-time
// schedule hands out tiles past the first wave (busiest first)
fn skewed_counts() -> Vec<u32> {
    (0..40u32)
        .map(|i| {
            if i == 9 {
                1400
            } else if i % 6 == 0 {
                0
            } else {
                1 + (29 * i) % 150
            }
        })
        .collect()
}
gpu_test!(wgrad_fp8_skewed_many_tiles, wgrad_fp8_run_with::<f32>(&skewed_counts(), 256, 384, true, true));
// the per-row scales of B, bf16 C, overwritten (NaN poison: a skipped tile of an expert without rows shows)
gpu_test!(wgrad_fp8_bf16_skewed_many_tiles, wgrad_fp8_run_with::<bf16>(&skewed_counts(), 256, 384, false, false));
// more experts than the ranking's 256: tiles in expert order
gpu_test!(wgrad_fp8_300_experts, {
    let counts: Vec<u32> = (0..300u32).map(|i| if i % 37 == 5 { 300 + i } else { (7 * i) % 40 }).collect();
    wgrad_fp8_run_with::<f32>(&counts, 128, 256, false, false)
});

gpu_test!(quantize_rows_matches_the_reference_bitwise, quantize_matches(37, 768, false));
gpu_test!(quantize_blocks_matches_the_reference_bitwise, quantize_matches(384, 512, true));

/// Row offsets [E + 1] of per-expert row counts.
fn row_offsets(counts: &[u32]) -> Vec<u32> {
    std::iter::once(0)
        .chain(counts.iter().scan(0, |acc, &c| {
            *acc += c;
            Some(*acc)
        }))
        .collect()
}

/// Activations quantized per row (1 x 128) and weights per 128 x 128 block, on the GPU.
struct Quantized {
    qa: CudaSlice<u8>,
    sa: CudaSlice<f32>,
    qb: CudaSlice<u8>,
    sb: CudaSlice<f32>,
}

/// `x` [rows, k] and `w` [rows_w, k] uploaded and quantized by the kernels.
fn quantized(g: &Gpu, x: &[bf16], rows: usize, w: &[bf16], rows_w: usize, k: usize) -> Quantized {
    let (dx, dw) = (g.upload(x).unwrap(), g.upload(w).unwrap());
    let mut q = Quantized {
        qa: g.alloc::<u8>(rows * k).unwrap(),
        sa: g.alloc::<f32>(rows * (k / 128)).unwrap(),
        qb: g.alloc::<u8>(rows_w * k).unwrap(),
        sb: g.alloc::<f32>(rows_w / 128 * (k / 128)).unwrap(),
    };
    fp8::quantize_rows(g, QuantizeArgs { x: &dx, q: &mut q.qa, scales: &mut q.sa, rows, cols: k }).unwrap();
    fp8::quantize_blocks(g, QuantizeArgs { x: &dw, q: &mut q.qb, scales: &mut q.sb, rows: rows_w, cols: k }).unwrap();
    q
}

/// One FP8 grouped GEMM on fresh inputs, checked against the f64 product of the dequantized operands (and, for the
/// record, against the unquantized bf16 product); returns C's bits.
fn gemm_run(counts: &[u32], n: usize, k: usize, seed: u64) -> Vec<u16> {
    gemm_run_with(counts, n, k, seed, Fp8Variant::Staged)
}

fn gemm_run_with(counts: &[u32], n: usize, k: usize, seed: u64, store: Fp8Variant) -> Vec<u16> {
    let g = gpu();
    eprintln!("seed {seed}");
    let mut r = Rng::new(seed);
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37;
    let x = r.bf16_vec(rows_max * k, 1.0);
    let w = r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt());
    let offsets = row_offsets(counts);
    let Quantized { qa, sa, qb, sb } = quantized(&g, &x, rows_max, &w, e * n, k);
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    let mut dc = g.alloc::<bf16>(rows_max * n).unwrap();
    g.fill_bytes(&mut dc, 0xff).unwrap();
    let args = GroupedGemmFp8Args {
        a: &qa,
        a_scales: &sa,
        b: &qb,
        b_scales: &sb,
        offsets: &doff,
        tile_offsets: &dtil,
        c: &mut dc,
        experts: e,
        n,
        k,
        rows_max,
    };
    args.prepare_with(&g, store).unwrap().launch(&g).unwrap();
    g.sync().unwrap();
    let c = g.download(&dc).unwrap();
    // the reference from the CPU's own quantization (bitwise the GPU's: the tests above)
    let (cqa, csa) = fp8::quantize_rows_cpu(&x, rows_max, k);
    let (cqb, csb) = fp8::quantize_blocks_cpu(&w, e * n, k);
    let a64 = fp8::dequantize_cpu(&cqa, &csa, rows_max, k, 1);
    let b64 = fp8::dequantize_cpu(&cqb, &csb, e * n, k, 128);
    let want = fp8::grouped_gemm_fp8_cpu(&a64, &b64, &offsets, n, k);
    let got: Vec<f64> = c[..rows * n].iter().map(|v| v.to_f64()).collect();
    if let Some(i) = got.iter().position(|v| v.is_nan()) {
        panic!("C[{}, {}] not written", i / n, i % n);
    }
    let what = format!("FP8 grouped GEMM counts {counts:?} N {n} K {k}");
    let err = check::close(&what, &got, &want, 1e-2).unwrap();
    // against the unquantized operands: the format's own error (e4m3 keeps 3 mantissa bits)
    let xa: Vec<f64> = x.iter().map(|v| v.to_f64()).collect();
    let wb: Vec<f64> = w.iter().map(|v| v.to_f64()).collect();
    let exact = fp8::grouped_gemm_fp8_cpu(&xa, &wb, &offsets, n, k);
    let q_err = check::close(&format!("{what} against bf16"), &got, &exact, 1e-1).unwrap();
    eprintln!("rel err {err:.3e} against the dequantized operands, {q_err:.3e} against the bf16 ones");
    assert!(c[rows * n..].iter().all(|v| v.to_bits() == 0xffff), "rows past the experts' end were written");
    c.iter().map(|v| v.to_bits()).collect()
}

gpu_test!(gemm_ragged_with_empty_and_single_row_experts, {
    gemm_run(&[0, 1, 300, 129, 0, 17], 384, 256, Rng::fresh_seed());
});
gpu_test!(gemm_full_tiles, {
    gemm_run(&[256, 128, 384], 256, 512, Rng::fresh_seed());
});
gpu_test!(gemm_qwen3_30b_gemm2_shape_few_experts, {
    gemm_run(&[200, 1000, 0, 700], 2048, 768, Rng::fresh_seed());
});
gpu_test!(gemm_all_experts_empty, {
    gemm_run(&[0, 0, 0], 128, 128, Rng::fresh_seed());
});
gpu_test!(gemm_is_deterministic, {
    let seed = Rng::fresh_seed();
    let a = gemm_run(&[130, 0, 257], 256, 384, seed);
    let b = gemm_run(&[130, 0, 257], 256, 384, seed);
    assert!(a == b, "two runs on the same inputs differ");
});

gpu_test!(gemm_store_paths_give_the_same_bits, {
    // whole 64-row groups through the staging and the copy engine, partial ones from registers: against every
    // row from registers
    let seed = Rng::fresh_seed();
    let a = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17], 256, 256, seed, Fp8Variant::Staged);
    let b = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17], 256, 256, seed, Fp8Variant::Registers);
    assert!(a == b, "the staged and register epilogues differ");
});

gpu_test!(gemm_clusters_give_the_same_bits, {
    // pairs of column tiles sharing A by multicast: ragged experts (pairs across expert boundaries never happen:
    // a pair is one m-tile), two pairs per m-tile
    let seed = Rng::fresh_seed();
    let a = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17], 512, 256, seed, Fp8Variant::Staged);
    let b = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17], 512, 256, seed, Fp8Variant::Clusters);
    assert!(a == b, "the cluster kernel differs from the single-CTA one");
});

gpu_test!(gemm_wide_tiles_give_the_same_bits, {
    // 128 x 256 tiles (each half of a tile the 128 kernel's m64n128k32 products, promoted in the same order):
    // bitwise the 128 x 128 kernel; ragged experts, zero- and one-row ones, two wide tiles per m-tile, K = 384;
    // the first run also checks the product against the f64 reference (inside gemm_run_with)
    let seed = Rng::fresh_seed();
    let a = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17, 250], 512, 384, seed, Fp8Variant::Wide);
    let b = gemm_run_with(&[0, 1, 300, 129, 0, 64, 17, 250], 512, 384, seed, Fp8Variant::Staged);
    assert!(a == b, "the 128 x 256 kernel differs from the 128 x 128 one");
});

gpu_test!(gemm_wide_tiles_qwen3_30b_gemm2_shape, {
    // N = 2048, K = 768 (GEMM2 at 30B) over 8 experts with many tiles per block: bitwise the 128 x 128 kernel
    let seed = Rng::fresh_seed();
    let counts = [700, 0, 513, 1, 1024, 129, 300, 64];
    let a = gemm_run_with(&counts, 2048, 768, seed, Fp8Variant::Wide);
    let b = gemm_run_with(&counts, 2048, 768, seed, Fp8Variant::Staged);
    assert!(a == b, "the 128 x 256 kernel differs from the 128 x 128 one");
});

/// GEMM1 with the SwiGLU epilogue in FP8 on fresh inputs: h against silu(g) u of the f64 product of the
/// dequantized operands.
fn swiglu_run(counts: &[u32], i: usize, k: usize) {
    let g = gpu();
    let mut r = fresh_rng();
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37;
    let x = r.bf16_vec(rows_max * k, 1.0);
    let w = r.bf16_vec(e * 2 * i * k, 2.0 / (k as f64).sqrt());
    let offsets = row_offsets(counts);
    let Quantized { qa, sa, qb, sb } = quantized(&g, &x, rows_max, &w, e * 2 * i, k);
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    let mut dh = g.alloc::<bf16>(rows_max * i).unwrap();
    g.fill_bytes(&mut dh, 0xff).unwrap();
    let args = SwigluFp8Args {
        a: &qa,
        a_scales: &sa,
        w1: &qb,
        w1_scales: &sb,
        offsets: &doff,
        tile_offsets: &dtil,
        h: &mut dh,
        experts: e,
        i,
        k,
        rows_max,
    };
    fp8::grouped_gemm_fp8_swiglu(&g, args).unwrap();
    g.sync().unwrap();
    let h = g.download(&dh).unwrap();
    let (cqa, csa) = fp8::quantize_rows_cpu(&x, rows_max, k);
    let (cqb, csb) = fp8::quantize_blocks_cpu(&w, e * 2 * i, k);
    let a64 = fp8::dequantize_cpu(&cqa, &csa, rows_max, k, 1);
    let b64 = fp8::dequantize_cpu(&cqb, &csb, e * 2 * i, k, 128);
    let z = fp8::grouped_gemm_fp8_cpu(&a64, &b64, &offsets, 2 * i, k);
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let want: Vec<f64> =
        (0..rows * i).map(|q| silu(z[(q / i) * 2 * i + q % i]) * z[(q / i) * 2 * i + i + q % i]).collect();
    let got: Vec<f64> = h[..rows * i].iter().map(|v| v.to_f64()).collect();
    if let Some(q) = got.iter().position(|v| v.is_nan()) {
        panic!("h[{}, {}] not written", q / i, q % i);
    }
    let err = check::close(&format!("FP8 GEMM1 + SwiGLU counts {counts:?} I {i} H {k}"), &got, &want, 1e-2).unwrap();
    eprintln!("rel err {err:.3e}");
    assert!(h[rows * i..].iter().all(|v| v.to_bits() == 0xffff), "rows past the experts' end were written");
}

/// GEMM1 + SwiGLU with h quantized in the epilogue against the SwiGLU kernel followed by `quantize_rows`: the
/// same codes and scales bit for bit, rows past the experts' end untouched.
fn swiglu_q_run(counts: &[u32], i: usize, k: usize) {
    swiglu_q_run_with(counts, i, k, Fp8Variant::Staged);
}

/// As `swiglu_q_run` with the kernel of `variant` (`Wide`: `grouped_gemm_fp8w_swiglu_q`, 128 x 256 tiles).
fn swiglu_q_run_with(counts: &[u32], i: usize, k: usize, variant: Fp8Variant) {
    let g = gpu();
    let mut r = fresh_rng();
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37;
    let mut x = r.bf16_vec(rows_max * k, 1.0);
    // a few zero rows: h = 0, blocks of zeros (scale 1)
    for row in (3..rows_max).step_by(97) {
        x[row * k..(row + 1) * k].fill(bf16::from_f32(0.0));
    }
    let w = r.bf16_vec(e * 2 * i * k, 2.0 / (k as f64).sqrt());
    let offsets = row_offsets(counts);
    let Quantized { qa, sa, qb, sb } = quantized(&g, &x, rows_max, &w, e * 2 * i, k);
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    // the two kernels in a row
    let mut dh = g.alloc::<bf16>(rows_max * i).unwrap();
    let args = SwigluFp8Args {
        a: &qa,
        a_scales: &sa,
        w1: &qb,
        w1_scales: &sb,
        offsets: &doff,
        tile_offsets: &dtil,
        h: &mut dh,
        experts: e,
        i,
        k,
        rows_max,
    };
    fp8::grouped_gemm_fp8_swiglu(&g, args).unwrap();
    let (mut wq, mut ws) = (g.alloc::<u8>(rows_max * i).unwrap(), g.alloc::<f32>(rows_max * (i / 128)).unwrap());
    fp8::quantize_rows(&g, QuantizeArgs { x: &dh, q: &mut wq, scales: &mut ws, rows: rows_max, cols: i }).unwrap();
    // fused
    let (mut hq, mut hs) = (g.alloc::<u8>(rows_max * i).unwrap(), g.alloc::<f32>(rows_max * (i / 128)).unwrap());
    g.fill_bytes(&mut hq, 0x7f).unwrap();
    g.fill_bytes(&mut hs, 0xff).unwrap();
    let args = SwigluFp8QArgs {
        a: &qa,
        a_scales: &sa,
        w1: &qb,
        w1_scales: &sb,
        offsets: &doff,
        tile_offsets: &dtil,
        h8: &mut hq,
        h8_scales: &mut hs,
        experts: e,
        i,
        k,
        rows_max,
    };
    args.prepare_with(&g, variant).unwrap().launch(&g).unwrap();
    g.sync().unwrap();
    let (hq, hs, wq, ws) =
        (g.download(&hq).unwrap(), g.download(&hs).unwrap(), g.download(&wq).unwrap(), g.download(&ws).unwrap());
    let nb = i / 128;
    if let Some(q) = (0..rows * nb).find(|&q| hs[q].to_bits() != ws[q].to_bits()) {
        panic!("scale of row {} block {}: {} against {}", q / nb, q % nb, hs[q], ws[q]);
    }
    if let Some(q) = (0..rows * i).find(|&q| hq[q] != wq[q]) {
        panic!("code of row {} column {}: {:#04x} against {:#04x}", q / i, q % i, hq[q], wq[q]);
    }
    assert!(hq[rows * i..].iter().all(|&c| c == 0x7f), "codes past the experts' end were written");
    assert!(hs[rows * nb..].iter().all(|v| v.to_bits() == u32::MAX), "scales past the experts' end were written");
}

gpu_test!(swiglu_q_matches_swiglu_then_quantize_bitwise, swiglu_q_run(&[0, 1, 300, 129, 0, 64, 17], 256, 256));
gpu_test!(swiglu_q_qwen3_30b_width, swiglu_q_run(&[200, 0, 777], 768, 512));
// more tile pairs than SMs (~280 against 132): blocks run several pairs, reusing the codes box and the amax
gpu_test!(swiglu_q_many_pairs_per_block, swiglu_q_run(&[3000, 0, 2500, 1, 700], 768, 256));
// the same in 128 x 256 tiles (a tile: 128 columns of h from 128 rows of g and of u)
gpu_test!(swiglu_q_wide_matches_swiglu_then_quantize_bitwise, {
    swiglu_q_run_with(&[0, 1, 300, 129, 0, 64, 17], 256, 256, Fp8Variant::Wide)
});
gpu_test!(swiglu_q_wide_qwen3_30b_width, swiglu_q_run_with(&[200, 0, 777], 768, 512, Fp8Variant::Wide));
gpu_test!(swiglu_q_wide_many_tiles_per_block, swiglu_q_run_with(&[3000, 0, 2500, 1, 700], 768, 256, Fp8Variant::Wide));

gpu_test!(swiglu_ragged_with_empty_and_single_row_experts, swiglu_run(&[0, 1, 300, 129, 0, 64, 17], 192, 256));
gpu_test!(swiglu_qwen3_30b_width, swiglu_run(&[200, 0, 777], 768, 512));

/// The backward's dx in FP8: dx_rows = dz . W1_e for the rows of expert e, dz [rows, 2I] quantized per row (K =
/// 2I), W1 [E, 2I, H] quantized transposed (B = W1_e^T [H, 2I], K-major) by `quantize_blocks_t`; against the f64
/// product of dz and W1 dequantized (W1 from its untransposed blocks: the same numbers).
fn dgrad_run(counts: &[u32], h: usize, i2: usize) {
    let g = gpu();
    let mut r = fresh_rng();
    let e = counts.len();
    let rows: usize = counts.iter().sum::<u32>() as usize;
    let rows_max = rows + 37;
    let dz = r.bf16_vec(rows_max * i2, 1.0);
    let w1 = r.bf16_vec(e * i2 * h, 1.0 / (i2 as f64).sqrt());
    let mut offsets = vec![0u32; e + 1];
    for j in 0..e {
        offsets[j + 1] = offsets[j] + counts[j];
    }
    let (ddz, dw1) = (g.upload(&dz).unwrap(), g.upload(&w1).unwrap());
    let mut qa = g.alloc::<u8>(rows_max * i2).unwrap();
    let mut sa = g.alloc::<f32>(rows_max * (i2 / 128)).unwrap();
    let mut qb = g.alloc::<u8>(e * h * i2).unwrap();
    let mut sb = g.alloc::<f32>(e * h * i2 / (128 * 128)).unwrap();
    fp8::quantize_rows(&g, QuantizeArgs { x: &ddz, q: &mut qa, scales: &mut sa, rows: rows_max, cols: i2 }).unwrap();
    let args = QuantizeTArgs { x: &dw1, q: &mut qb, scales: &mut sb, batches: e, rows: i2, cols: h };
    fp8::quantize_blocks_t(&g, args).unwrap();
    let (doff, dtil) = (g.upload(&offsets).unwrap(), g.upload(&gemm::tile_offsets(counts)).unwrap());
    let mut dc = g.alloc::<bf16>(rows_max * h).unwrap();
    g.fill_bytes(&mut dc, 0xff).unwrap();
    let args = GroupedGemmFp8Args {
        a: &qa,
        a_scales: &sa,
        b: &qb,
        b_scales: &sb,
        offsets: &doff,
        tile_offsets: &dtil,
        c: &mut dc,
        experts: e,
        n: h,
        k: i2,
        rows_max,
    };
    fp8::grouped_gemm_fp8(&g, args).unwrap();
    g.sync().unwrap();
    let c = g.download(&dc).unwrap();
    let (cqa, csa) = fp8::quantize_rows_cpu(&dz, rows_max, i2);
    let a64 = fp8::dequantize_cpu(&cqa, &csa, rows_max, i2, 1);
    let (cqb, csb) = fp8::quantize_blocks_cpu(&w1, e * i2, h);
    let w64 = fp8::dequantize_cpu(&cqb, &csb, e * i2, h, 128);
    let mut want = vec![0f64; rows * h];
    for ex in 0..e {
        for row in offsets[ex] as usize..offsets[ex + 1] as usize {
            for q in 0..i2 {
                let av = a64[row * i2 + q];
                for col in 0..h {
                    want[row * h + col] += av * w64[(ex * i2 + q) * h + col];
                }
            }
        }
    }
    let got: Vec<f64> = c[..rows * h].iter().map(|v| v.to_f64()).collect();
    if let Some(q) = got.iter().position(|v| v.is_nan()) {
        panic!("dx[{}, {}] not written", q / h, q % h);
    }
    let err = check::close(&format!("FP8 dgrad counts {counts:?} H {h} 2I {i2}"), &got, &want, 1e-2).unwrap();
    eprintln!("rel err {err:.3e}");
    assert!(c[rows * h..].iter().all(|v| v.to_bits() == 0xffff), "rows past the experts' end were written");
}

gpu_test!(dgrad_dx_with_transposed_weights, dgrad_run(&[0, 1, 300, 129, 0, 64, 17], 384, 256));

gpu_test!(bad_shapes_are_refused_before_anything_runs, {
    let g = gpu();
    let x = g.upload(&vec![bf16::from_f32(1.0); 100 * 200]).unwrap();
    let mut q = g.alloc::<u8>(100 * 200).unwrap();
    let mut s = g.alloc::<f32>(100 * 2).unwrap();
    let e = fp8::quantize_rows(&g, QuantizeArgs { x: &x, q: &mut q, scales: &mut s, rows: 100, cols: 200 });
    assert!(format!("{:?}", e.unwrap_err()).contains("multiple of 128"));
    let e = fp8::quantize_blocks(&g, QuantizeArgs { x: &x, q: &mut q, scales: &mut s, rows: 100, cols: 200 });
    assert!(e.is_err());
    let (a, sa) = (g.alloc::<u8>(64 * 192).unwrap(), g.alloc::<f32>(64).unwrap());
    let (b, sb) = (g.alloc::<u8>(128 * 192).unwrap(), g.alloc::<f32>(2).unwrap());
    let (off, til) = (g.upload(&[0u32, 64]).unwrap(), g.upload(&[0u32, 1]).unwrap());
    let mut c = g.alloc::<bf16>(64 * 128).unwrap();
    g.fill_bytes(&mut c, 0xff).unwrap();
    let args = GroupedGemmFp8Args {
        a: &a,
        a_scales: &sa,
        b: &b,
        b_scales: &sb,
        offsets: &off,
        tile_offsets: &til,
        c: &mut c,
        experts: 1,
        n: 128,
        k: 192,
        rows_max: 64,
    };
    let e = fp8::grouped_gemm_fp8(&g, args).unwrap_err();
    assert!(format!("{e:?}").contains("K = 192"), "{e:?}");
    g.sync().unwrap();
    assert!(g.download(&c).unwrap().iter().all(|v| v.to_bits() == 0xffff), "a refused call wrote C");
});

/// The CPU models' inputs for an FP8 layer: the shape, the rank's inputs and the bf16 weights in f64, and the FP8
/// forward's dequantized x (1 x 128 per row) and W1 (128 x 128 blocks), z's operands (`zf`).
struct ModelInputs {
    shape: reference::Shape,
    ri: reference::RankInput,
    wr: reference::Weights,
    xd: Vec<f64>,
    w1d: Vec<f64>,
}

impl ModelInputs {
    #[allow(clippy::type_complexity)]
    fn new(
        (x, ids, wts, dy): (&[bf16], &[i32], &[f32], &[bf16]),
        (w1, w2): (&[bf16], &[bf16]),
        (tokens, h, i, e, k): (usize, usize, usize, usize, usize),
    ) -> Self {
        let (qx, sx) = fp8::quantize_rows_cpu(x, tokens, h);
        let (q1, s1) = fp8::quantize_blocks_cpu(w1, e * 2 * i, h);
        ModelInputs {
            shape: reference::Shape { h, i, e, k },
            ri: reference::RankInput {
                x: reference::to_f64(x),
                topk_ids: ids.to_vec(),
                topk_w: wts.iter().map(|&v| v as f64).collect(),
                dy: reference::to_f64(dy),
            },
            wr: reference::Weights { w1: reference::to_f64(w1), w2: reference::to_f64(w2) },
            xd: fp8::dequantize_cpu(&qx, &sx, tokens, h, 1),
            w1d: fp8::dequantize_cpu(&q1, &s1, e * 2 * i, h, 128),
        }
    }

    fn zf(&self) -> reference::ZFrom<'_> {
        reference::ZFrom { x: std::slice::from_ref(&self.xd), w1: &self.w1d }
    }
}

/// The layer's forward in FP8 against a CPU model of it: x, W1, W2 quantized as the kernels do (bitwise: the
/// quantization tests), z and h in f64 from the dequantized operands, h rounded to bf16 and quantized per row, y
/// from the dequantized h and W2, out = sum of the weighted rows. Ragged routing with masked slots; out poisoned.
fn layer_fp8_run(tokens: usize, h: usize, i: usize, e: usize, k: usize) {
    use megamoe::layer::{Fp8Inputs, Fp8Weights, Grads, Inputs, MoeLayer, Save};
    let g = gpu();
    let mut r = fresh_rng();
    let x = r.bf16_vec(tokens * h, 1.0);
    let mut ids = r.topk_ids(tokens, k, e);
    for t in (0..tokens).step_by(7) {
        ids[t * k + k - 1] = -1; // a masked slot every seventh token
    }
    let wts: Vec<f32> = (0..tokens * k).map(|_| r.uniform() as f32).collect();
    let w1 = r.bf16_vec(e * 2 * i * h, 2.0 / (h as f64).sqrt());
    let w2 = r.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let (dx, dids, dwts) = (g.upload(&x).unwrap(), g.upload(&ids).unwrap(), g.upload(&wts).unwrap());
    let (dw1, dw2) = (g.upload(&w1).unwrap(), g.upload(&w2).unwrap());
    let cfg = straight_cfg(h, i, e, k, tokens + 50, Save::InputsOnly);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(&g, &dw1, &dw2, &layer).unwrap();
    let mut saved = layer.alloc_saved(tokens).unwrap();
    let mut out = g.alloc::<bf16>(tokens * h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    let inp = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, weights: &fw };
    layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let got: Vec<f64> = g.download(&out).unwrap().iter().map(|v| v.to_f64()).collect();
    if let Some(q) = got.iter().position(|v| v.is_nan()) {
        panic!("out[{}, {}] not written", q / h, q % h);
    }
    // the CPU model
    let (qx, sx) = fp8::quantize_rows_cpu(&x, tokens, h);
    let xd = fp8::dequantize_cpu(&qx, &sx, tokens, h, 1);
    let (q1, s1) = fp8::quantize_blocks_cpu(&w1, e * 2 * i, h);
    let w1d = fp8::dequantize_cpu(&q1, &s1, e * 2 * i, h, 128);
    let (q2, s2) = fp8::quantize_blocks_cpu(&w2, e * h, i);
    let w2d = fp8::dequantize_cpu(&q2, &s2, e * h, i, 128);
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let mut want = vec![0f64; tokens * h];
    for t in 0..tokens {
        let xt = &xd[t * h..(t + 1) * h];
        for j in 0..k {
            let ex = ids[t * k + j];
            if ex < 0 {
                continue;
            }
            let ex = ex as usize;
            let hrow: Vec<bf16> = (0..i)
                .map(|c| {
                    let gv = dot(xt, &w1d[(ex * 2 * i + c) * h..(ex * 2 * i + c + 1) * h]);
                    let uv = dot(xt, &w1d[(ex * 2 * i + i + c) * h..(ex * 2 * i + i + c + 1) * h]);
                    bf16::from_f64(silu(gv) * uv)
                })
                .collect();
            let (qh, sh) = fp8::quantize_rows_cpu(&hrow, 1, i);
            let hd = fp8::dequantize_cpu(&qh, &sh, 1, i, 1);
            for c in 0..h {
                want[t * h + c] += wts[t * k + j] as f64 * dot(&hd, &w2d[(ex * h + c) * i..(ex * h + c + 1) * i]);
            }
        }
    }
    let err =
        check::close(&format!("FP8 layer forward T {tokens} H {h} I {i} E {e} k {k}"), &got, &want, 1e-2).unwrap();
    // the bf16 layer on the same inputs, for the record: the format's own error
    let mut out16 = g.alloc::<bf16>(tokens * h).unwrap();
    let inp16 = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, w1: &dw1, w2: &dw2 };
    let _saved = layer.forward(&inp16, &mut out16).unwrap();
    let o16: Vec<f64> = g.download(&out16).unwrap().iter().map(|v| v.to_f64()).collect();
    let d = check::rel_err(&got, &o16);
    eprintln!("rel err {err:.3e} against the FP8 model, {d:.3e} against the bf16 layer");
    assert!(d < 0.1, "the FP8 forward is {d} away from the bf16 layer");
    // the backward: the bf16 one refuses the FP8 forward's saved state before anything runs; backward_fp8 against
    // the straight-through model (z from the dequantized x and W1, then dh, dz, dx, dW1, dW2 and dtopk from
    // the bf16 x, W1, W2), every output poisoned first and checked written
    let dyh = r.bf16_vec(tokens * h, 1.0);
    let ddy = g.upload(&dyh).unwrap();
    let mut dx_out = g.alloc::<bf16>(tokens * h).unwrap();
    let mut gw1 = g.alloc::<f32>(e * 2 * i * h).unwrap();
    let mut gw2 = g.alloc::<f32>(e * h * i).unwrap();
    let mut dtopk = g.alloc::<f32>(tokens * k).unwrap();
    let grads = Grads { dx: &mut dx_out, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
    let err = layer.backward(&saved, &ddy, &inp16, grads).unwrap_err();
    assert!(format!("{err:?}").contains("backward_fp8"), "{err:?}");
    g.fill_bytes(&mut dx_out, 0xff).unwrap();
    g.fill_bytes(&mut gw1, 0xff).unwrap();
    g.fill_bytes(&mut gw2, 0xff).unwrap();
    g.fill_bytes(&mut dtopk, 0xff).unwrap();
    // the FP8 forward again (the bf16 forward above took the layer's routing workspace, not `saved`)
    layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
    let grads = Grads { dx: &mut dx_out, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward_fp8(&saved, &ddy, &inp16, &fw, grads).unwrap();
    g.sync().unwrap();
    let f32s = |v: Vec<f32>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
    let got_dx: Vec<f64> = g.download(&dx_out).unwrap().iter().map(|v| v.to_f64()).collect();
    let (got_w1, got_w2) = (f32s(g.download(&gw1).unwrap()), f32s(g.download(&gw2).unwrap()));
    let got_tk = f32s(g.download(&dtopk).unwrap());
    for (name, v) in [("dx", &got_dx), ("dW1", &got_w1), ("dW2", &got_w2), ("dtopk", &got_tk)] {
        if let Some(q) = v.iter().position(|x| x.is_nan()) {
            panic!("backward_fp8 left {name}[{q}] unwritten");
        }
    }
    let mi = ModelInputs::new((&x, &ids, &wts, &dyh), (&w1, &w2), (tokens, h, i, e, k));
    let (want, wg) =
        reference::forward_backward_z_from(&mi.shape, std::slice::from_ref(&mi.ri), &mi.wr, mi.zf()).unwrap();
    let tag = format!("backward_fp8 T {tokens} H {h} I {i} E {e} k {k}");
    let ex = check::close(&format!("{tag} dx"), &got_dx, &want[0].dx, 1e-2).unwrap();
    let et = check::close_scaled(&format!("{tag} dtopk"), &got_tk, &want[0].dtopk, &want[0].dtopk_scale, 1e-2).unwrap();
    let e1 = check::close(&format!("{tag} dW1"), &got_w1, &wg.dw1, 1e-2).unwrap();
    let e2 = check::close(&format!("{tag} dW2"), &got_w2, &wg.dw2, 1e-2).unwrap();
    eprintln!("{tag}: rel err dx {ex:.3e} dtopk {et:.3e} dW1 {e1:.3e} dW2 {e2:.3e} against the straight-through model");
}

gpu_test!(layer_forward_fp8_matches_the_fp8_model, layer_fp8_run(300, 512, 256, 8, 2));

/// A small layer's random inputs on the GPU for the FP8 layer tests: tokens x [T, H] in (-1, 1), routing (k
/// experts a token, uniform weights), W1 and W2 in (-0.1, 0.1), dy [T, H]; drawn in that order from `r`.
struct LayerBufs {
    x: CudaSlice<bf16>,
    ids: CudaSlice<i32>,
    wts: CudaSlice<f32>,
    w1: CudaSlice<bf16>,
    w2: CudaSlice<bf16>,
    dy: CudaSlice<bf16>,
}

impl LayerBufs {
    fn new(g: &Gpu, r: &mut Rng, (t, h, i, e, k): (usize, usize, usize, usize, usize)) -> Self {
        LayerBufs {
            x: g.upload(&r.bf16_vec(t * h, 1.0)).unwrap(),
            ids: g.upload(&r.topk_ids(t, k, e)).unwrap(),
            wts: g.upload(&(0..t * k).map(|_| r.uniform() as f32).collect::<Vec<_>>()).unwrap(),
            w1: g.upload(&r.bf16_vec(e * 2 * i * h, 0.1)).unwrap(),
            w2: g.upload(&r.bf16_vec(e * h * i, 0.1)).unwrap(),
            dy: g.upload(&r.bf16_vec(t * h, 1.0)).unwrap(),
        }
    }
}

gpu_test!(layer_forward_fp8_fused_h_is_bitwise_the_pass, {
    // GEMM1 quantizing h in its epilogue (the default) against h stored and quantized by a pass
    // (MEGAMOE_FP8_HQ=pass, read per call): the same output bit for bit
    use megamoe::layer::{Fp8Inputs, Fp8Weights, MoeLayer, Save};
    let g = gpu();
    let mut r = Rng::new(Rng::fresh_seed());
    let (t, h, i, e, k) = (300, 512, 256, 8, 4);
    let LayerBufs { x, ids, wts, w1, w2, .. } = LayerBufs::new(&g, &mut r, (t, h, i, e, k));
    let mut layer = MoeLayer::new(g.clone(), straight_cfg(h, i, e, k, t, Save::InputsOnly)).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(&g, &w1, &w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let mut out = g.alloc::<bf16>(t * h).unwrap();
    let mut outs = Vec::new();
    for mode in [None, Some("pass")] {
        match mode {
            Some(v) => std::env::set_var("MEGAMOE_FP8_HQ", v),
            None => std::env::remove_var("MEGAMOE_FP8_HQ"),
        }
        g.fill_bytes(&mut out, 0xff).unwrap();
        let inp = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
        outs.push(g.download(&out).unwrap());
    }
    std::env::remove_var("MEGAMOE_FP8_HQ");
    assert!(outs[0].iter().all(|v| !v.is_nan()), "out not fully written");
    assert!(outs[0].iter().zip(&outs[1]).all(|(p, q)| p.to_bits() == q.to_bits()), "fused and pass differ");
});
gpu_test!(layer_forward_fp8_qwen3_30b_widths, layer_fp8_run(64, 2048, 768, 16, 8));

gpu_test!(layer_fp8_wide_tiles_are_bitwise_the_128_ones, {
    // GEMM1 + SwiGLU, GEMM2 and z's recompute in 128 x 256 tiles (the default) against 128 x 128
    // (MEGAMOE_FP8_TILES=128, read per call): the forward's output and backward_fp8's gradients bit for bit
    use megamoe::layer::{Fp8Inputs, Fp8Weights, Grads, Inputs, MoeLayer, Save};
    let g = gpu();
    let mut r = Rng::new(Rng::fresh_seed());
    let (t, h, i, e, k) = (300, 512, 256, 8, 4);
    let LayerBufs { x, ids, wts, w1, w2, dy } = LayerBufs::new(&g, &mut r, (t, h, i, e, k));
    let mut layer = MoeLayer::new(g.clone(), straight_cfg(h, i, e, k, t, Save::InputsOnly)).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(&g, &w1, &w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let inp16 = Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, w1: &w1, w2: &w2 };
    let mut outs = Vec::new();
    for mode in [None, Some("128")] {
        match mode {
            Some(v) => std::env::set_var("MEGAMOE_FP8_TILES", v),
            None => std::env::remove_var("MEGAMOE_FP8_TILES"),
        }
        let mut out = g.alloc::<bf16>(t * h).unwrap();
        g.fill_bytes(&mut out, 0xff).unwrap();
        let inp = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
        let mut dx = g.alloc::<bf16>(t * h).unwrap();
        g.fill_bytes(&mut dx, 0xff).unwrap();
        let (mut gw1, mut gw2) = (g.alloc::<f32>(e * 2 * i * h).unwrap(), g.alloc::<f32>(e * h * i).unwrap());
        let mut dtopk = g.alloc::<f32>(t * k).unwrap();
        // poisoned: a fresh allocation may hold the other mode's results (the pool reuses memory)
        g.fill_bytes(&mut gw1, 0xff).unwrap();
        g.fill_bytes(&mut gw2, 0xff).unwrap();
        g.fill_bytes(&mut dtopk, 0xff).unwrap();
        let grads = Grads { dx: &mut dx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
        layer.backward_fp8(&saved, &dy, &inp16, &fw, grads).unwrap();
        let bits = |v: Vec<bf16>| v.into_iter().map(|x| x.to_bits()).collect::<Vec<u16>>();
        let fbits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect::<Vec<u32>>();
        outs.push((
            bits(g.download(&out).unwrap()),
            bits(g.download(&dx).unwrap()),
            fbits(g.download(&gw1).unwrap()),
            fbits(g.download(&gw2).unwrap()),
            fbits(g.download(&dtopk).unwrap()),
        ));
    }
    std::env::remove_var("MEGAMOE_FP8_TILES");
    assert!(outs[0].0.iter().all(|&v| v != 0xffff) && outs[0].1.iter().all(|&v| v != 0xffff), "not fully written");
    assert!(
        [&outs[0].2, &outs[0].3, &outs[0].4].iter().all(|v| v.iter().all(|&b| b != 0xffff_ffff)),
        "dW1, dW2 or dtopk not fully written"
    );
    assert!(outs[0] == outs[1], "128 x 256 and 128 x 128 tiles differ in the layer");
});

/// The bits of one FP8 step on `b`'s inputs: `forward_fp8` of a layer saving `save` whose backward runs `mode`,
/// then `backward_fp8` with bf16 weight gradients accumulated onto `gw0` (y, dx, dW1, dW2, dtopk); every output
/// poisoned first. Then checks that `backward_fp8` refuses a bf16 forward's state.
#[allow(clippy::type_complexity)]
fn fp8_step_bits(
    g: &Arc<Gpu>,
    b: &LayerBufs,
    (t, h, i, e, k): (usize, usize, usize, usize, usize),
    save: megamoe::layer::Save,
    mode: megamoe::layer::Fp8Backward,
    gw0: (&[bf16], &[bf16]),
) -> (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>) {
    use megamoe::layer::{Fp8Inputs, Fp8Weights, Grads, Inputs, LayerConfig, MoeLayer};
    let LayerBufs { x, ids, wts, w1, w2, dy } = b;
    let inp16 = Inputs { tokens: t, x, topk_ids: ids, topk_weights: wts, w1, w2 };
    let cfg = LayerConfig { fp8_backward: mode, ..straight_cfg(h, i, e, k, t, save) };
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(g, w1, w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let mut out = g.alloc::<bf16>(t * h).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    let inp = Fp8Inputs { tokens: t, x, topk_ids: ids, topk_weights: wts, weights: &fw };
    layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
    let mut dx = g.alloc::<bf16>(t * h).unwrap();
    g.fill_bytes(&mut dx, 0xff).unwrap();
    let (mut gw1, mut gw2) = (g.upload(gw0.0).unwrap(), g.upload(gw0.1).unwrap());
    let mut dtopk = g.alloc::<f32>(t * k).unwrap();
    g.fill_bytes(&mut dtopk, 0xff).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: true };
    layer.backward_fp8(&saved, dy, &inp16, &fw, grads).unwrap();
    let bits = |v: Vec<bf16>| v.into_iter().map(|x| x.to_bits() as u32).collect::<Vec<u32>>();
    let tk: Vec<u32> = g.download(&dtopk).unwrap().into_iter().map(f32::to_bits).collect();
    let res = (
        bits(g.download(&out).unwrap()),
        bits(g.download(&dx).unwrap()),
        bits(g.download(&gw1).unwrap()),
        bits(g.download(&gw2).unwrap()),
        tk,
    );
    // a bf16 forward's state is refused
    let sv16 = layer.forward(&inp16, &mut out).unwrap();
    let grads = Grads { dx: &mut dx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: true };
    let err = layer.backward_fp8(&sv16, dy, &inp16, &fw, grads).unwrap_err();
    assert!(format!("{err:?}").contains("forward_fp8"), "{err:?}");
    res
}

/// The GPU, a small layer's buffers (250 tokens, H 512, I 256, 8 experts, top-4), its dims and the weight
/// gradients' random starting values (the steps accumulate onto them): the setup of the FP8 step comparisons.
#[allow(clippy::type_complexity)]
fn step_setup() -> (Arc<Gpu>, LayerBufs, (usize, usize, usize, usize, usize), (Vec<bf16>, Vec<bf16>)) {
    let g = gpu();
    let mut r = Rng::new(Rng::fresh_seed());
    let dims = (250, 512, 256, 8, 4);
    let (_, h, i, e, _) = dims;
    let b = LayerBufs::new(&g, &mut r, dims);
    let gw = (r.bf16_vec(e * 2 * i * h, 0.01), r.bf16_vec(e * h * i, 0.01));
    (g, b, dims, gw)
}

gpu_test!(backward_fp8_is_the_same_in_both_save_modes, {
    // with Save::WithZ the FP8 forward's GEMM1 stores z (`grouped_gemm_fp8w_swiglu_qz`) and backward_fp8 reads it;
    // with Save::InputsOnly backward_fp8 recomputes it: the outputs and gradients bit for bit the same (bf16
    // weight gradients, accumulated onto random values), and the same again with dy gathered by the pass
    // instead of the dh GEMM's producer (`MEGAMOE_DY_GATHER=pass`); backward_fp8 refuses a bf16 forward's state
    use megamoe::layer::{Fp8Backward as M, Save};
    let (g, b, dims, (gw1_0, gw2_0)) = step_setup();
    let runs = [
        (Save::InputsOnly, true, M::Straight),
        (Save::WithZ, true, M::Straight),
        (Save::WithZ, false, M::Straight),
        (Save::InputsOnly, true, M::Dx),
        (Save::WithZ, true, M::Dx),
        (Save::InputsOnly, true, M::DxWgrad),
        (Save::WithZ, true, M::DxWgrad),
    ];
    let mut outs = Vec::new();
    for (save, dy_in_producer, mode) in runs {
        megamoe::gemm::with_dy_gather(dy_in_producer, || {
            outs.push(fp8_step_bits(&g, &b, dims, save, mode, (&gw1_0, &gw2_0)));
        });
    }
    assert!(outs[0].0.iter().all(|&v| v != 0xffff), "y not fully written");
    assert!(outs[0].1.iter().all(|&v| v != 0xffff), "dx not fully written");
    assert!(outs[0] == outs[1], "the two save modes give different outputs or gradients");
    assert!(outs[1] == outs[2], "dy gathered by the dh GEMM's producer and by the pass give different gradients");
    assert!(outs[3] == outs[4], "with the FP8 dx the two save modes give different outputs or gradients");
    assert!(outs[5] == outs[6], "with FP8 dx and weight gradients the two save modes differ");
    assert!(outs[0].0 == outs[3].0 && outs[3].0 == outs[5].0, "the forward depends on the backward's mode");
});

gpu_test!(backward_fp8_side_copy_off_is_bitwise_on, {
    // z saved, FP8 dx, bf16 weight gradients: x's rows for dW1 copied by the FP8 dx kernel's idle warps
    // (`grouped_gemm_fp8w_cpx`) or by the gather pass before the plain FP8 dx (`gemm::with_side_copy`): the outputs
    // and gradients bit for bit the same, every element written
    use megamoe::layer::{Fp8Backward as M, Save};
    let (g, b, dims, (gw1_0, gw2_0)) = step_setup();
    let outs: Vec<_> = [true, false]
        .into_iter()
        .map(|side| {
            megamoe::gemm::with_side_copy(Some(side), || {
                fp8_step_bits(&g, &b, dims, Save::WithZ, M::Dx, (&gw1_0, &gw2_0))
            })
        })
        .collect();
    assert!(outs[1].0.iter().all(|&v| v != 0xffff), "y not fully written");
    assert!(outs[1].1.iter().all(|&v| v != 0xffff), "dx not fully written");
    assert!(outs[0] == outs[1], "the side copy and the gather pass give different outputs or gradients");
});

gpu_test!(backward_fp8_dx_combine_pass_is_bitwise_movers, {
    // dx summed by the weight gradients' idle producer warps (bf16 `_mv` with an FP8 dx, FP8 `_mv` with FP8
    // weight gradients) or by the combine pass before them (`gemm::with_dx_combine`; the pass is the default at this
    // I = 256): the outputs and gradients bit for bit the same, every element written
    use megamoe::layer::{Fp8Backward as M, Save};
    let (g, b, dims, (gw1_0, gw2_0)) = step_setup();
    for (save, mode) in [(Save::WithZ, M::Dx), (Save::InputsOnly, M::DxWgrad)] {
        // the movers first, the pass second
        let outs: Vec<_> = [true, false]
            .into_iter()
            .map(|movers| {
                megamoe::gemm::with_dx_combine(Some(movers), || {
                    fp8_step_bits(&g, &b, dims, save, mode, (&gw1_0, &gw2_0))
                })
            })
            .collect();
        assert!(outs[1].1.iter().all(|&v| v != 0xffff), "{mode:?}: dx not fully written");
        assert!(outs[0] == outs[1], "{mode:?}: the movers' combine and the pass give different outputs or gradients");
    }
});

gpu_test!(backward_fp8_wgrad_gather_is_bitwise_the_copy, {
    // bf16 weight gradients (`Straight`: a bf16 dx too; `Dx`: the FP8 dx), dy gathered by the dh GEMM's producer:
    // dW2's A gathered by its own producer warpgroup (`gemm::with_wgrad_gather`, `grouped_wgrad_bf16_ga*`; the dh
    // kernel writes no copy of dy) against the expert-ordered copy, dx summed by the pass (the default at I = 256)
    // or by the movers (dW1's take the whole sum): outputs and gradients bit for bit the same
    use megamoe::layer::{Fp8Backward as M, Save};
    let (g, b, dims, (gw1_0, gw2_0)) = step_setup();
    for (save, mode, movers) in [(Save::InputsOnly, M::Straight, false), (Save::WithZ, M::Dx, true)] {
        megamoe::gemm::with_dx_combine(Some(movers), || {
            let copy = fp8_step_bits(&g, &b, dims, save, mode, (&gw1_0, &gw2_0));
            let (ga, ran) = common::kernels_of(&g, || {
                megamoe::gemm::with_wgrad_gather(Some(megamoe::gemm::WgradGather::Dy), || {
                    fp8_step_bits(&g, &b, dims, save, mode, (&gw1_0, &gw2_0))
                })
            });
            assert!(ran.iter().any(|k| k.starts_with("grouped_wgrad_bf16_ga")), "{mode:?}: no gathering dW2: {ran:?}");
            assert!(ga.1.iter().all(|&v| v != 0xffff), "{mode:?}: dx not fully written");
            assert!(copy == ga, "{save:?} {mode:?} movers {movers}: the gathering dW2 differs from the copy's");
        });
    }
});

/// x's codes and scales read from the tokens' rows by the 128 x 256 GEMMs' producer (`_gather`: the forward's GEMM1
/// in both save modes, the z recompute by the plain kernel and, with FP8 weight gradients, by `_zt`) against the
/// pass's expert-ordered copy (MEGAMOE_FP8_GATHER=pass, read per call): y and every gradient bit for bit, at
/// `dims` = (tokens, H, I, E, k).
fn x_gathered_is_the_pass(dims: (usize, usize, usize, usize, usize)) {
    use megamoe::layer::{Fp8Backward as M, Save};
    let g = gpu();
    let mut r = Rng::new(Rng::fresh_seed());
    let (_, h, i, e, _) = dims;
    let b = LayerBufs::new(&g, &mut r, dims);
    let (gw1_0, gw2_0) = (r.bf16_vec(e * 2 * i * h, 0.01), r.bf16_vec(e * h * i, 0.01));
    for (save, mode) in [(Save::InputsOnly, M::Straight), (Save::WithZ, M::Dx), (Save::InputsOnly, M::DxWgrad)] {
        let mut outs = Vec::new();
        for knob in [None, Some("pass")] {
            match knob {
                Some(v) => std::env::set_var("MEGAMOE_FP8_GATHER", v),
                None => std::env::remove_var("MEGAMOE_FP8_GATHER"),
            }
            outs.push(fp8_step_bits(&g, &b, dims, save, mode, (&gw1_0, &gw2_0)));
        }
        std::env::remove_var("MEGAMOE_FP8_GATHER");
        assert!(outs[0].0.iter().all(|&v| v != 0xffff), "y not fully written ({save:?}, {mode:?})");
        assert!(outs[0].1.iter().all(|&v| v != 0xffff), "dx not fully written ({save:?}, {mode:?})");
        assert!(outs[0].4.iter().all(|&v| v != u32::MAX), "dtopk not fully written ({save:?}, {mode:?})");
        assert!(outs[0] == outs[1], "the producer's gather and the pass differ ({save:?}, {mode:?})");
    }
}

// ragged counts (~17 rows an expert: every tile partial, rows past each expert's end zero-filled), 8 k-blocks a
// tile over a 4-stage ring
gpu_test!(fp8_x_gathered_in_the_producer_is_bitwise_the_pass, x_gathered_is_the_pass((133, 1024, 256, 24, 3)));
// ~256 rows an expert: mostly whole tiles (the partner of layer_forward's `in_producer_fp8_test_dims` for
// racecheck, docs/NOTES.md 2026-12-06g)
gpu_test!(fp8_x_gathered_in_the_producer_whole_tiles, x_gathered_is_the_pass((2048, 1024, 256, 24, 3)));

gpu_test!(layer_forward_fp8_replays_as_a_cuda_graph, {
    // after one eager call on the same buffers, the FP8 forward captured once and replayed on new contents of x:
    // each replay bitwise the eager call on the same inputs
    use cudarc::driver::sys;
    use megamoe::layer::{Fp8Inputs, Fp8Weights, MoeLayer, Save};
    let g = gpu();
    let mut r = Rng::new(Rng::fresh_seed());
    let (t, h, i, e, k) = (200, 512, 256, 8, 4);
    let (xa, xb) = (r.bf16_vec(t * h, 1.0), r.bf16_vec(t * h, 1.0));
    let ids = g.upload(&r.topk_ids(t, k, e)).unwrap();
    let wts = g.upload(&(0..t * k).map(|_| r.uniform() as f32).collect::<Vec<_>>()).unwrap();
    let w1 = g.upload(&r.bf16_vec(e * 2 * i * h, 0.1)).unwrap();
    let w2 = g.upload(&r.bf16_vec(e * h * i, 0.1)).unwrap();
    let mut layer = MoeLayer::new(g.clone(), straight_cfg(h, i, e, k, t, Save::InputsOnly)).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(&g, &w1, &w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let mut x = g.upload(&xa).unwrap();
    let mut out = g.alloc::<bf16>(t * h).unwrap();
    let mut eager = Vec::new();
    for xv in [&xa, &xb] {
        g.write(&mut x, xv).unwrap();
        g.fill_bytes(&mut out, 0xff).unwrap();
        let inp = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
        eager.push(g.download(&out).unwrap());
    }
    assert!(eager[0].iter().all(|v| !v.is_nan()), "the eager call left out unwritten");
    let s = g.stream().clone();
    s.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
    let res = {
        let inp = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved)
    };
    let graph = s.end_capture(sys::CUgraphInstantiate_flags(0));
    res.unwrap();
    let graph = graph.unwrap().expect("a captured graph");
    for (xv, want) in [(&xa, &eager[0]), (&xb, &eager[1]), (&xa, &eager[0])] {
        g.write(&mut x, xv).unwrap();
        g.fill_bytes(&mut out, 0xff).unwrap();
        graph.launch().unwrap();
        let got = g.download(&out).unwrap();
        assert!(
            got.iter().zip(want.iter()).all(|(p, q)| p.to_bits() == q.to_bits()),
            "a replay differs from the eager call"
        );
    }
});

/// `backward_fp8` with some of its GEMMs in FP8 (`mode`: `Fp8Backward::Dx`, `Wgrad` or `DxWgrad`) against the
/// straight backward on the same inputs and against the CPU model of the FP8 products
/// (`reference::forward_backward_fp8`: dz per row for dx against the forward's dequantized W1; dy and dz in 1 x 128
/// blocks along each expert's rows and s h and x in 128 x 128 blocks for the weight gradients, quantized as the
/// kernels do). What stays bf16 must be bit for bit the straight backward's (dtopk always), every output poisoned
/// and checked written; f32 gradients, then bf16 ones accumulated onto random values. Ragged routing with masked
/// slots.
fn backward_fp8_mode_run(
    (tokens, h, i, e, k): (usize, usize, usize, usize, usize),
    gather: megamoe::layer::Gather,
    mode: megamoe::layer::Fp8Backward,
) {
    use megamoe::layer::{Fp8Backward, Fp8Inputs, Fp8Weights, Grads, Inputs, LayerConfig, MoeLayer, Save};
    let g = gpu();
    let mut r = fresh_rng();
    let x = r.bf16_vec(tokens * h, 1.0);
    let mut ids = r.topk_ids(tokens, k, e);
    for t in (0..tokens).step_by(7) {
        ids[t * k + k - 1] = -1;
    }
    let wts: Vec<f32> = (0..tokens * k).map(|_| r.uniform() as f32).collect();
    let w1 = r.bf16_vec(e * 2 * i * h, 2.0 / (h as f64).sqrt());
    let w2 = r.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let dyh = r.bf16_vec(tokens * h, 1.0);
    let (dx, dids, dwts) = (g.upload(&x).unwrap(), g.upload(&ids).unwrap(), g.upload(&wts).unwrap());
    let (dw1, dw2, ddy) = (g.upload(&w1).unwrap(), g.upload(&w2).unwrap(), g.upload(&dyh).unwrap());
    let inp16 = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, w1: &dw1, w2: &dw2 };
    let (n1, n2) = (e * 2 * i * h, e * h * i);
    let (init1, init2) = (r.bf16_vec(n1, 0.01), r.bf16_vec(n2, 0.01));
    let f64s = |v: Vec<f32>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
    let b64s = |v: Vec<bf16>| v.into_iter().map(|x| x.to_f64()).collect::<Vec<f64>>();
    // (dx, dtopk, dW1, dW2) of each mode with f32 gradients, and `mode`'s bf16 gradients accumulated
    let mut runs = Vec::new();
    let mut acc16 = None;
    for m in [Fp8Backward::Straight, mode] {
        let base = straight_cfg(h, i, e, k, tokens + 50, Save::InputsOnly);
        let cfg = LayerConfig { fp8_backward: m, gather, ..base };
        let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
        let mut fw = Fp8Weights::alloc(&layer).unwrap();
        fw.quantize(&g, &dw1, &dw2, &layer).unwrap();
        let mut saved = layer.alloc_saved(tokens).unwrap();
        let mut out = g.alloc::<bf16>(tokens * h).unwrap();
        let inp = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
        let mut dx_out = g.alloc::<bf16>(tokens * h).unwrap();
        let (mut gw1, mut gw2) = (g.alloc::<f32>(n1).unwrap(), g.alloc::<f32>(n2).unwrap());
        let mut dtopk = g.alloc::<f32>(tokens * k).unwrap();
        g.fill_bytes(&mut dx_out, 0xff).unwrap();
        g.fill_bytes(&mut gw1, 0xff).unwrap();
        g.fill_bytes(&mut gw2, 0xff).unwrap();
        g.fill_bytes(&mut dtopk, 0xff).unwrap();
        let grads = Grads { dx: &mut dx_out, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
        layer.backward_fp8(&saved, &ddy, &inp16, &fw, grads).unwrap();
        g.sync().unwrap();
        layer.routing_error().unwrap();
        let got = (
            b64s(g.download(&dx_out).unwrap()),
            f64s(g.download(&dtopk).unwrap()),
            f64s(g.download(&gw1).unwrap()),
            f64s(g.download(&gw2).unwrap()),
        );
        for (name, v) in [("dx", &got.0), ("dtopk", &got.1), ("dW1", &got.2), ("dW2", &got.3)] {
            if let Some(q) = v.iter().position(|x| x.is_nan()) {
                panic!("backward_fp8 ({m:?}) left {name}[{q}] unwritten");
            }
        }
        runs.push(got);
        if m == mode {
            let (mut b1, mut b2) = (g.upload(&init1).unwrap(), g.upload(&init2).unwrap());
            let grads = Grads { dx: &mut dx_out, dw1: &mut b1, dw2: &mut b2, dtopk: &mut dtopk, accumulate: true };
            layer.backward_fp8(&saved, &ddy, &inp16, &fw, grads).unwrap();
            acc16 = Some((b64s(g.download(&b1).unwrap()), b64s(g.download(&b2).unwrap())));
        }
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    let same = |a: &[f64], b: &[f64]| bits(a) == bits(b);
    assert!(same(&runs[0].1, &runs[1].1), "dtopk differs between the straight and the {mode:?} backward");
    if !mode.dx() {
        assert!(same(&runs[0].0, &runs[1].0), "dx differs between the straight and the {mode:?} backward");
    }
    if !mode.wgrad() {
        assert!(same(&runs[0].2, &runs[1].2), "dW1 differs between the straight and the {mode:?} backward");
        assert!(same(&runs[0].3, &runs[1].3), "dW2 differs between the straight and the {mode:?} backward");
    }
    // the CPU model
    let mi = ModelInputs::new((&x, &ids, &wts, &dyh), (&w1, &w2), (tokens, h, i, e, k));
    let which = reference::Fp8Grads { dx: mode.dx(), wgrad: mode.wgrad(), dw1_codes: false, dh: false };
    let ris = std::slice::from_ref(&mi.ri);
    let (mo, model) = reference::forward_backward_fp8(&mi.shape, ris, &mi.wr, mi.zf(), which).unwrap();
    let (so, straight) = reference::forward_backward_z_from(&mi.shape, ris, &mi.wr, mi.zf()).unwrap();
    // Tolerance: the GPU's FP8 operands (dz from bf16 z and an f32 dh, s h from bf16 g and u) differ from the model's
    // f64 ones by bf16 rounding, and such a perturbation moves a code across an e4m3 rounding boundary (a whole
    // e4m3 step, 6-12%) often enough to cost ~1e-2 (docs/NOTES.md: 0.84e-2 simulated for A perturbed at bf16's
    // half ulp; 1.24e-2 measured on dW1). So 2.5e-2 against the model, and each FP8 product must be markedly closer
    // to the FP8 model than to the bf16 (straight-through) one (~3-6e-2 away: e4m3's own error).
    let tag = format!("backward_fp8 ({mode:?}) T {tokens} H {h} I {i} E {e} k {k}");
    let mut line = format!("{tag}: rel err against the FP8 model / the straight-through one:");
    if mode.dx() {
        let d = check::close(&format!("{tag} dx"), &runs[1].0, &mo[0].dx, 2.5e-2).unwrap();
        let ds = check::rel_err(&runs[1].0, &so[0].dx);
        assert!(d < 0.6 * ds, "{tag}: dx no closer to the FP8 model ({d:.3e}) than to the bf16 one ({ds:.3e})");
        line += &format!(" dx {d:.3e} / {ds:.3e}");
    }
    if mode.wgrad() {
        let e1 = check::close(&format!("{tag} dW1"), &runs[1].2, &model.dw1, 2.5e-2).unwrap();
        let e2 = check::close(&format!("{tag} dW2"), &runs[1].3, &model.dw2, 2.5e-2).unwrap();
        let (s1e, s2e) = (check::rel_err(&runs[1].2, &straight.dw1), check::rel_err(&runs[1].3, &straight.dw2));
        assert!(
            e1 < 0.6 * s1e && e2 < 0.6 * s2e,
            "{tag}: no closer to the FP8 model ({e1:.3e}, {e2:.3e}) than to the bf16 gradients ({s1e:.3e}, {s2e:.3e})"
        );
        line += &format!(" dW1 {e1:.3e} / {s1e:.3e} dW2 {e2:.3e} / {s2e:.3e}");
    }
    // the bf16 gradients accumulated onto init: against init + the model's (the straight model's when bf16)
    let (acc1, acc2) = acc16.unwrap();
    let add = |init: &[bf16], m: &[f64]| init.iter().zip(m).map(|(a, b)| a.to_f64() + b).collect::<Vec<f64>>();
    let a1 = check::close(&format!("{tag} dW1 bf16 accumulated"), &acc1, &add(&init1, &model.dw1), 2.5e-2).unwrap();
    let a2 = check::close(&format!("{tag} dW2 bf16 accumulated"), &acc2, &add(&init2, &model.dw2), 2.5e-2).unwrap();
    eprintln!("{line}; bf16 gradients accumulated {a1:.3e} {a2:.3e}");
}
// with the default overlapped gather dx's combine runs in the weight gradients' idle warps (`_mv` kernels), with
// the gather pass by its own pass
gpu_test!(backward_fp8_wgrad_matches_the_fp8_model, {
    use megamoe::layer::{Fp8Backward, Gather};
    backward_fp8_mode_run((300, 512, 256, 8, 4), Gather::Overlapped, Fp8Backward::Wgrad)
});
gpu_test!(backward_fp8_wgrad_with_the_gather_pass, {
    use megamoe::layer::{Fp8Backward, Gather};
    backward_fp8_mode_run((260, 512, 256, 8, 4), Gather::Pass, Fp8Backward::Wgrad)
});
gpu_test!(backward_fp8_dx_matches_the_fp8_model, {
    use megamoe::layer::{Fp8Backward, Gather};
    backward_fp8_mode_run((300, 512, 256, 8, 4), Gather::Overlapped, Fp8Backward::Dx)
});
gpu_test!(backward_fp8_dx_wgrad_qwen3_30b_widths, {
    use megamoe::layer::{Fp8Backward, Gather};
    backward_fp8_mode_run((200, 2048, 768, 16, 8), Gather::Overlapped, Fp8Backward::DxWgrad)
});

/// `dequantize_rows` of codes the CPU quantizer made gives `dequantize_rows_bf16_cpu`'s bf16 bit for bit, every
/// element written over a poison (rows of 8, 1 and several 16-code chunks a thread: one row a block and several).
fn dequantize_matches(rows: usize, cols: usize) {
    let g = gpu();
    let mut r = fresh_rng();
    let x = spread(&mut r, rows, cols);
    let (q, sc) = fp8::quantize_rows_cpu(&x, rows, cols);
    let (dq, ds) = (g.upload(&q).unwrap(), g.upload(&sc).unwrap());
    let mut out = g.alloc::<bf16>(rows * cols).unwrap();
    g.fill_bytes(&mut out, 0xff).unwrap();
    fp8::dequantize_rows(&g, &dq, &ds, &mut out, rows, cols).unwrap();
    let got = g.download(&out).unwrap();
    let want = fp8::dequantize_rows_bf16_cpu(&q, &sc, rows, cols);
    if let Some(i) = (0..rows * cols).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "[{}, {}]: {:#06x} against {:#06x} (code {:#04x})",
            i / cols,
            i % cols,
            got[i].to_bits(),
            want[i].to_bits(),
            q[i]
        );
    }
    // the rounding is bf16's of the f32 product: within half a bf16 ulp of the exact value
    let exact = fp8::dequantize_cpu(&q, &sc, rows, cols, 1);
    assert!((0..rows * cols).all(|i| (got[i].to_f64() - exact[i]).abs() <= exact[i].abs() * 2f64.powi(-8)));
    // bad shapes are refused, nothing written
    g.fill_bytes(&mut out, 0xff).unwrap();
    let e = fp8::dequantize_rows(&g, &dq, &ds, &mut out, rows, cols - 64).unwrap_err().to_string();
    assert!(e.contains("cols"), "{e}");
    let e = fp8::dequantize_rows(&g, &dq, &ds, &mut out, rows + 1, cols).unwrap_err().to_string();
    assert!(e.contains("q has"), "{e}");
    assert!(g.download(&out).unwrap().iter().all(|v| v.to_bits() == 0xffff), "a refused call wrote");
}

gpu_test!(dequantize_rows_is_the_cpu_model_bit_for_bit, {
    // 2300 rows of 2048: one row a block, more rows than the grid (16 blocks an SM) takes at once
    for (rows, cols) in [(1, 128), (37, 384), (2300, 2048), (19, 4096)] {
        dequantize_matches(rows, cols);
    }
});

/// dx's bits, dtopk, dW1 and dW2 of a backward.
type GradsOut = (Vec<u16>, Vec<f64>, Vec<f64>, Vec<f64>);

/// (dx's bits, dtopk, dW1, dW2) of one FP8 forward + backward of a single-GPU layer of `cfg` on `inp16`'s tokens
/// and weights (quantized afresh) and upstream gradient `dy`: every gradient poisoned first and checked written
/// (no NaN), f32 weight gradients, no accumulation. With whether the weights carried W2's transpose.
fn fp8_backward_once(
    g: &Arc<Gpu>,
    cfg: megamoe::layer::LayerConfig,
    inp16: &megamoe::layer::Inputs,
    dy: &CudaSlice<bf16>,
    tag: &str,
) -> (GradsOut, bool) {
    use megamoe::layer::{Fp8Inputs, Fp8Weights, Grads, MoeLayer};
    let (tokens, h, k) = (inp16.tokens, cfg.hidden, cfg.top_k);
    let (n1, n2) = (cfg.experts * 2 * cfg.intermediate * h, cfg.experts * h * cfg.intermediate);
    let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
    let mut fw = Fp8Weights::alloc(&layer).unwrap();
    fw.quantize(g, inp16.w1, inp16.w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(tokens).unwrap();
    let mut out = g.alloc::<bf16>(tokens * h).unwrap();
    let (x, topk_ids, topk_weights) = (inp16.x, inp16.topk_ids, inp16.topk_weights);
    let inp = Fp8Inputs { tokens, x, topk_ids, topk_weights, weights: &fw };
    layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
    let mut dx_out = g.alloc::<bf16>(tokens * h).unwrap();
    let (mut gw1, mut gw2) = (g.alloc::<f32>(n1).unwrap(), g.alloc::<f32>(n2).unwrap());
    let mut dtopk = g.alloc::<f32>(tokens * k).unwrap();
    g.fill_bytes(&mut dx_out, 0xff).unwrap();
    g.fill_bytes(&mut gw1, 0xff).unwrap();
    g.fill_bytes(&mut gw2, 0xff).unwrap();
    g.fill_bytes(&mut dtopk, 0xff).unwrap();
    let grads = Grads { dx: &mut dx_out, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
    layer.backward_fp8(&saved, dy, inp16, &fw, grads).unwrap();
    g.sync().unwrap();
    layer.routing_error().unwrap();
    let f64s = |v: Vec<f32>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
    let dxv = g.download(&dx_out).unwrap();
    if let Some(q) = dxv.iter().position(|x| x.is_nan()) {
        panic!("{tag}: backward_fp8 left dx[{q}] unwritten");
    }
    let got = (
        dxv.iter().map(|v| v.to_bits()).collect(),
        f64s(g.download(&dtopk).unwrap()),
        f64s(g.download(&gw1).unwrap()),
        f64s(g.download(&gw2).unwrap()),
    );
    for (name, v) in [("dtopk", &got.1), ("dW1", &got.2), ("dW2", &got.3)] {
        if let Some(q) = v.iter().position(|x| x.is_nan()) {
            panic!("{tag}: backward_fp8 left {name}[{q}] unwritten");
        }
    }
    (got, fw.w2t.is_some())
}

/// `Fp8Dw1X::Codes` (dW1 from x's row codes dequantized, the EP FP8 backward's single-GPU twin), with z recomputed
/// and with z saved (x quantized again in the backward): dx, dtopk and dW2 bit for bit the `Fp8Dw1X::Bf16`
/// backward's; dW1 within 2.5e-2 of the model that takes dW1 from the dequantized codes, and markedly closer to it
/// than to the model that takes the bf16 x (e4m3's error, ~3-4%, apart). Outputs poisoned, checked written.
fn backward_fp8_dw1_codes_run((tokens, h, i, e, k): (usize, usize, usize, usize, usize), save: megamoe::layer::Save) {
    use megamoe::layer::{Fp8Backward, Fp8Dw1X, Inputs, LayerConfig};
    let g = gpu();
    let mut r = fresh_rng();
    let x = r.bf16_vec(tokens * h, 1.0);
    let mut ids = r.topk_ids(tokens, k, e);
    for t in (0..tokens).step_by(5) {
        ids[t * k] = -1;
    }
    let wts: Vec<f32> = (0..tokens * k).map(|_| r.uniform() as f32).collect();
    let w1 = r.bf16_vec(e * 2 * i * h, 2.0 / (h as f64).sqrt());
    let w2 = r.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let dyh = r.bf16_vec(tokens * h, 1.0);
    let (dx, dids, dwts) = (g.upload(&x).unwrap(), g.upload(&ids).unwrap(), g.upload(&wts).unwrap());
    let (dw1, dw2, ddy) = (g.upload(&w1).unwrap(), g.upload(&w2).unwrap(), g.upload(&dyh).unwrap());
    let inp16 = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, w1: &dw1, w2: &dw2 };
    let mut runs = Vec::new();
    for m in [Fp8Dw1X::Bf16, Fp8Dw1X::Codes] {
        let cfg = LayerConfig {
            fp8_backward: Fp8Backward::Dx,
            fp8_dw1_x: m,
            ..LayerConfig::bf16(h, i, e, k, tokens + 20, save)
        };
        runs.push(fp8_backward_once(&g, cfg, &inp16, &ddy, &format!("{m:?}, {save:?}")).0);
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    assert!(runs[0].0 == runs[1].0, "dx differs between Fp8Dw1X::Bf16 and Codes");
    assert!(bits(&runs[0].1) == bits(&runs[1].1), "dtopk differs between Fp8Dw1X::Bf16 and Codes");
    assert!(bits(&runs[0].3) == bits(&runs[1].3), "dW2 differs between Fp8Dw1X::Bf16 and Codes");
    let mi = ModelInputs::new((&x, &ids, &wts, &dyh), (&w1, &w2), (tokens, h, i, e, k));
    let ris = std::slice::from_ref(&mi.ri);
    let model = |dw1_codes: bool| {
        let which = reference::Fp8Grads { dx: true, wgrad: false, dw1_codes, dh: false };
        reference::forward_backward_fp8(&mi.shape, ris, &mi.wr, mi.zf(), which).unwrap().1.dw1
    };
    let tag = format!("backward_fp8 Fp8Dw1X::Codes ({save:?}) T {tokens} H {h} I {i} E {e} k {k}");
    let ec = check::close(&format!("{tag} dW1"), &runs[1].2, &model(true), 2.5e-2).unwrap();
    let eb = check::rel_err(&runs[1].2, &model(false));
    let e16 = check::rel_err(&runs[0].2, &model(false));
    assert!(ec < 0.6 * eb, "{tag}: dW1 no closer to the codes model ({ec:.3e}) than to the bf16-x one ({eb:.3e})");
    eprintln!(
        "{tag}: dW1 rel err {ec:.3e} against its model, {eb:.3e} against the bf16-x model (Bf16 mode: {e16:.3e})"
    );
}

gpu_test!(backward_fp8_dw1_from_codes_z_recomputed, {
    backward_fp8_dw1_codes_run((300, 512, 256, 8, 4), megamoe::layer::Save::InputsOnly)
});
gpu_test!(backward_fp8_dw1_from_codes_z_saved, {
    backward_fp8_dw1_codes_run((260, 512, 256, 8, 4), megamoe::layer::Save::WithZ)
});

// `Fp8Dy::Codes` is the backward on dy's dequantized codes: bit for bit the `Fp8Dy::Bf16` backward given those values
// (made on the CPU) as its dy; every gradient written (poisoned before), dx within e4m3's error of the bf16-dy one.
gpu_test!(backward_fp8_dy_codes_is_the_backward_of_the_dequantized_dy, {
    use megamoe::layer::{Fp8Backward, Fp8Dy, Fp8Inputs, Fp8Weights, Grads, Inputs, LayerConfig, MoeLayer, Save};
    let g = gpu();
    let mut r = fresh_rng();
    let (tokens, h, i, e, k) = (230, 512, 256, 8, 4);
    let x = r.bf16_vec(tokens * h, 1.0);
    let ids = r.topk_ids(tokens, k, e);
    let wts: Vec<f32> = (0..tokens * k).map(|_| r.uniform() as f32).collect();
    let w1 = r.bf16_vec(e * 2 * i * h, 2.0 / (h as f64).sqrt());
    let w2 = r.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let dyh = spread(&mut r, tokens, h);
    let (qd, sd) = fp8::quantize_rows_cpu(&dyh, tokens, h);
    let dyq = fp8::dequantize_rows_bf16_cpu(&qd, &sd, tokens, h);
    let (dx, dids, dwts) = (g.upload(&x).unwrap(), g.upload(&ids).unwrap(), g.upload(&wts).unwrap());
    let (dw1, dw2) = (g.upload(&w1).unwrap(), g.upload(&w2).unwrap());
    let (ddy, ddyq) = (g.upload(&dyh).unwrap(), g.upload(&dyq).unwrap());
    let inp16 = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, w1: &dw1, w2: &dw2 };
    let mut runs = Vec::new();
    for (mode, dy) in [(Fp8Dy::Codes, &ddy), (Fp8Dy::Bf16, &ddyq), (Fp8Dy::Bf16, &ddy)] {
        let cfg = LayerConfig {
            fp8_backward: Fp8Backward::Dx,
            fp8_dy: mode,
            ..LayerConfig::bf16(h, i, e, k, tokens, Save::InputsOnly)
        };
        let mut layer = MoeLayer::new(g.clone(), cfg).unwrap();
        let mut fw = Fp8Weights::alloc(&layer).unwrap();
        fw.quantize(&g, &dw1, &dw2, &layer).unwrap();
        let mut saved = layer.alloc_saved(tokens).unwrap();
        let mut out = g.alloc::<bf16>(tokens * h).unwrap();
        let inp = Fp8Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, weights: &fw };
        layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
        let mut gx = g.alloc::<bf16>(tokens * h).unwrap();
        let (mut g1, mut g2) = (g.alloc::<f32>(e * 2 * i * h).unwrap(), g.alloc::<f32>(e * h * i).unwrap());
        let mut gt = g.alloc::<f32>(tokens * k).unwrap();
        g.fill_bytes(&mut gx, 0xff).unwrap();
        g.fill_bytes(&mut g1, 0xff).unwrap();
        g.fill_bytes(&mut g2, 0xff).unwrap();
        g.fill_bytes(&mut gt, 0xff).unwrap();
        let grads = Grads { dx: &mut gx, dw1: &mut g1, dw2: &mut g2, dtopk: &mut gt, accumulate: false };
        layer.backward_fp8(&saved, dy, &inp16, &fw, grads).unwrap();
        g.sync().unwrap();
        let b16: Vec<u16> = g.download(&gx).unwrap().iter().map(|v| v.to_bits()).collect();
        let b32 = |v: &CudaSlice<f32>| -> Vec<u32> { g.download(v).unwrap().iter().map(|v| v.to_bits()).collect() };
        let got = (b16, b32(&gt), b32(&g1), b32(&g2));
        assert!(got.0.iter().all(|&b| b != 0xffff), "{mode:?}: dx left unwritten");
        for (name, v) in [("dtopk", &got.1), ("dW1", &got.2), ("dW2", &got.3)] {
            assert!(v.iter().all(|&b| b != 0xffff_ffff), "{mode:?}: {name} left unwritten");
        }
        runs.push(got);
    }
    assert!(runs[0] == runs[1], "Fp8Dy::Codes differs from the backward of dy's dequantized codes");
    let f = |v: &[u16]| v.iter().map(|&b| bf16::from_bits(b).to_f64()).collect::<Vec<f64>>();
    let d = check::rel_err(&f(&runs[0].0), &f(&runs[2].0));
    eprintln!("Fp8Dy::Codes: bitwise the backward of the dequantized dy; dx {d:.3e} from the bf16-dy backward's");
    assert!(d > 0.0 && d < 0.1, "dx {d} from the bf16-dy backward's");
});

/// `Fp8Dh::Fp8` (dh = dy W2 in FP8 with the SwiGLU backward in the epilogue, `grouped_gemm_fp8w_dswiglu_gather`)
/// against the CPU model of it (dy's row codes, W2's block codes; dx in FP8 too): dx, dtopk and dW1 within 2.5e-2 of
/// the model and dtopk markedly closer to it than to the bf16-dh model; dW2 (from the bf16 dy and the epilogue's
/// s h, the bf16 kernel's arithmetic on the same z) bit for bit the bf16-dh backward's. Outputs poisoned, checked
/// written. With z recomputed and saved.
fn backward_fp8_dh_run((tokens, h, i, e, k): (usize, usize, usize, usize, usize), save: megamoe::layer::Save) {
    use megamoe::layer::{Fp8Backward, Fp8Dh, Inputs, LayerConfig};
    let g = gpu();
    let mut r = fresh_rng();
    let x = r.bf16_vec(tokens * h, 1.0);
    let mut ids = r.topk_ids(tokens, k, e);
    for t in (0..tokens).step_by(6) {
        ids[t * k + 1] = -1;
    }
    let wts: Vec<f32> = (0..tokens * k).map(|_| r.uniform() as f32).collect();
    let w1 = r.bf16_vec(e * 2 * i * h, 2.0 / (h as f64).sqrt());
    let w2 = r.bf16_vec(e * h * i, 2.0 / (i as f64).sqrt());
    let dyh = r.bf16_vec(tokens * h, 1.0);
    let (dx, dids, dwts) = (g.upload(&x).unwrap(), g.upload(&ids).unwrap(), g.upload(&wts).unwrap());
    let (dw1, dw2, ddy) = (g.upload(&w1).unwrap(), g.upload(&w2).unwrap(), g.upload(&dyh).unwrap());
    let inp16 = Inputs { tokens, x: &dx, topk_ids: &dids, topk_weights: &dwts, w1: &dw1, w2: &dw2 };
    let mut runs = Vec::new();
    for m in [Fp8Dh::Bf16, Fp8Dh::Fp8] {
        let cfg =
            LayerConfig { fp8_backward: Fp8Backward::Dx, fp8_dh: m, ..LayerConfig::bf16(h, i, e, k, tokens + 9, save) };
        let ((dxb, dtopk, gw1, gw2), w2t) = fp8_backward_once(&g, cfg, &inp16, &ddy, &format!("{m:?}, {save:?}"));
        assert_eq!(w2t, m == Fp8Dh::Fp8, "W2's transpose allocated for an FP8 dh only");
        runs.push((dxb.into_iter().map(|b| bf16::from_bits(b).to_f64()).collect::<Vec<f64>>(), dtopk, gw1, gw2));
    }
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    assert!(bits(&runs[0].3) == bits(&runs[1].3), "dW2 differs between the bf16 and the FP8 dh");
    let mi = ModelInputs::new((&x, &ids, &wts, &dyh), (&w1, &w2), (tokens, h, i, e, k));
    let ris = std::slice::from_ref(&mi.ri);
    let model = |dh: bool| {
        let which = reference::Fp8Grads { dx: true, wgrad: false, dw1_codes: false, dh };
        reference::forward_backward_fp8(&mi.shape, ris, &mi.wr, mi.zf(), which).unwrap()
    };
    let ((mo, mg), (bo, _)) = (model(true), model(false));
    let tag = format!("backward_fp8 Fp8Dh::Fp8 ({save:?}) T {tokens} H {h} I {i} E {e} k {k}");
    let ex = check::close(&format!("{tag} dx"), &runs[1].0, &mo[0].dx, 2.5e-2).unwrap();
    let et = check::close(&format!("{tag} dtopk"), &runs[1].1, &mo[0].dtopk, 2.5e-2).unwrap();
    let e1 = check::close(&format!("{tag} dW1"), &runs[1].2, &mg.dw1, 2.5e-2).unwrap();
    let eb = check::rel_err(&runs[1].1, &bo[0].dtopk);
    assert!(et < 0.6 * eb, "{tag}: dtopk no closer to the FP8-dh model ({et:.3e}) than to the bf16-dh one ({eb:.3e})");
    eprintln!("{tag}: rel err against the model dx {ex:.3e} dtopk {et:.3e} (bf16-dh model {eb:.3e}) dW1 {e1:.3e}");
}

gpu_test!(backward_fp8_dh_matches_the_fp8_model, {
    backward_fp8_dh_run((300, 512, 256, 8, 4), megamoe::layer::Save::InputsOnly)
});
gpu_test!(backward_fp8_dh_z_saved_qwen3_30b_widths, {
    backward_fp8_dh_run((150, 2048, 768, 16, 8), megamoe::layer::Save::WithZ)
});

gpu_test!(backward_fp8_dx_refuses_weights_without_w1_transpose, {
    // an FP8 dx needs W1's transposed codes, which `Fp8Weights::alloc` makes only for a layer whose backward uses
    // them: weights allocated for a straight layer are refused before anything runs (the gradients keep their
    // poison)
    use megamoe::layer::{Fp8Backward, Fp8Inputs, Fp8Weights, Grads, Inputs, LayerConfig, MoeLayer, Save};
    let g = gpu();
    let mut r = fresh_rng();
    let (t, h, i, e, k) = (100, 512, 256, 8, 4);
    let LayerBufs { x, ids, wts, w1, w2, dy } = LayerBufs::new(&g, &mut r, (t, h, i, e, k));
    let base = straight_cfg(h, i, e, k, t, Save::InputsOnly);
    let straight = MoeLayer::new(g.clone(), base).unwrap();
    let mut fw = Fp8Weights::alloc(&straight).unwrap();
    assert!(fw.w1t.is_none(), "a straight layer's weights carry no W1 transpose");
    let mut layer = MoeLayer::new(g.clone(), LayerConfig { fp8_backward: Fp8Backward::Dx, ..base }).unwrap();
    fw.quantize(&g, &w1, &w2, &layer).unwrap();
    let mut saved = layer.alloc_saved(t).unwrap();
    let mut out = g.alloc::<bf16>(t * h).unwrap();
    let inp = Fp8Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, weights: &fw };
    layer.forward_fp8(&inp, &mut out, &mut saved).unwrap();
    let (mut dx, mut gw1, mut gw2) =
        (g.alloc::<bf16>(t * h).unwrap(), g.alloc::<f32>(e * 2 * i * h).unwrap(), g.alloc::<f32>(e * h * i).unwrap());
    let mut dtopk = g.alloc::<f32>(t * k).unwrap();
    g.fill_bytes(&mut dx, 0xff).unwrap();
    g.fill_bytes(&mut gw1, 0xff).unwrap();
    let inp16 = Inputs { tokens: t, x: &x, topk_ids: &ids, topk_weights: &wts, w1: &w1, w2: &w2 };
    let grads = Grads { dx: &mut dx, dw1: &mut gw1, dw2: &mut gw2, dtopk: &mut dtopk, accumulate: false };
    let err = layer.backward_fp8(&saved, &dy, &inp16, &fw, grads).unwrap_err();
    assert!(format!("{err:?}").contains("transpose"), "{err:?}");
    g.sync().unwrap();
    assert!(g.download(&dx).unwrap().iter().all(|v| v.to_bits() == 0xffff), "a refused backward wrote dx");
    assert!(g.download(&gw1).unwrap().iter().all(|v| v.to_bits() == u32::MAX), "a refused backward wrote dW1");
});

// ---------------------------------------------------------------------------------------------------------------
// Device offsets not as promised (the bad layouts of tests/grouped_gemm.rs: past rows_max, near 2^32, decreasing,
// a huge or garbage tile count, random words): every FP8 call that takes device offsets returns Ok, its launch
// ends within a few seconds, and nothing past its outputs is written (each output at the front of a larger
// allocation whose poisoned tail is checked). The values written inside the outputs are unspecified.
// ---------------------------------------------------------------------------------------------------------------

// `grouped_gemm_fp8` (every variant: staged, registers, clusters, probe, wide), `grouped_gemm_fp8_swiglu` and
// the h-quantizing `grouped_gemm_fp8_swiglu_q` / `grouped_gemm_fp8w_swiglu_q` on every bad layout: Ok, bounded,
// the guard zones of C, h, h's codes and h's scales untouched; and nothing read past the inputs: A, B and their
// scales sit in front of guard zones of NaN (0xff in e4m3 and f32) and the outputs start as zeros, so a read past
// any input would leave a NaN in C or h (or a NaN code / scale in h's quantized form), which every run checks.
gpu_test!(gemm_fp8_bad_offsets_stay_inside_the_buffers, {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, n, i, k, rows_max) = (BAD_E, 512, 256, 256, 200);
    let x = r.bf16_vec(rows_max * k, 1.0);
    let w = r.bf16_vec(e * n * k, 1.0 / (k as f64).sqrt());
    let w1 = r.bf16_vec(e * 2 * i * k, 2.0 / (k as f64).sqrt());
    let Quantized { qa, sa, qb, sb } = quantized(&g, &x, rows_max, &w, e * n, k);
    let Quantized { qb: qw1, sb: sw1, .. } = quantized(&g, &x, rows_max, &w1, e * 2 * i, k);
    let nan_tail = |b: &CudaSlice<u8>| Guarded::copy_of(&g, b, 0xff);
    let (qa, qb, qw1) = (nan_tail(&qa), nan_tail(&qb), nan_tail(&qw1));
    let nan_tail = |b: &CudaSlice<f32>| Guarded::copy_of(&g, b, 0xff);
    let (sa, sb, sw1) = (nan_tail(&sa), nan_tail(&sb), nan_tail(&sw1));
    let finite = |v: &[bf16]| v.iter().all(|x| x.is_finite());
    let variants =
        [Fp8Variant::Staged, Fp8Variant::Registers, Fp8Variant::Clusters, Fp8Variant::Probe, Fp8Variant::Wide];
    for (name, off, til) in bad_layouts(rows_max as u32, &mut r) {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        for v in variants {
            let mut c = Guarded::<bf16>::new(&g, rows_max * n, 0xff);
            c.zero_front(&g);
            let what = format!("grouped_gemm_fp8 {v:?}, {name}");
            let args = GroupedGemmFp8Args {
                a: qa.front(),
                a_scales: sa.front(),
                b: qb.front(),
                b_scales: sb.front(),
                offsets: &doff,
                tile_offsets: &dtil,
                c: c.buf(),
                experts: e,
                n,
                k,
                rows_max,
            };
            args.prepare_with(&g, v).and_then(|p| p.launch(&g)).unwrap_or_else(|err| panic!("{what}: {err}"));
            finishes(&g, &what);
            assert!(c.guard_intact(&g, 0xff), "{what}: written past C's rows_max rows");
            assert!(finite(&c.front_host(&g)), "{what}: NaN in C: read past A, B or their scales");
        }
        let mut h = Guarded::<bf16>::new(&g, rows_max * i, 0xff);
        h.zero_front(&g);
        let what = format!("grouped_gemm_fp8_swiglu, {name}");
        let args = SwigluFp8Args {
            a: qa.front(),
            a_scales: sa.front(),
            w1: qw1.front(),
            w1_scales: sw1.front(),
            offsets: &doff,
            tile_offsets: &dtil,
            h: h.buf(),
            experts: e,
            i,
            k,
            rows_max,
        };
        fp8::grouped_gemm_fp8_swiglu(&g, args).unwrap_or_else(|err| panic!("{what}: {err}"));
        finishes(&g, &what);
        assert!(h.guard_intact(&g, 0xff), "{what}: written past h's rows_max rows");
        assert!(finite(&h.front_host(&g)), "{what}: NaN in h: read past A, W1 or their scales");
        for v in [Fp8Variant::Staged, Fp8Variant::Wide] {
            let mut hq = Guarded::<u8>::new(&g, rows_max * i, 0xff);
            let mut hs = Guarded::<f32>::new(&g, rows_max * (i / 128), 0xff);
            hq.zero_front(&g);
            hs.zero_front(&g);
            let what = format!("grouped_gemm_fp8 SwiGLU with h quantized, {v:?}, {name}");
            let args = SwigluFp8QArgs {
                a: qa.front(),
                a_scales: sa.front(),
                w1: qw1.front(),
                w1_scales: sw1.front(),
                offsets: &doff,
                tile_offsets: &dtil,
                h8: hq.buf(),
                h8_scales: hs.buf(),
                experts: e,
                i,
                k,
                rows_max,
            };
            args.prepare_with(&g, v).and_then(|p| p.launch(&g)).unwrap_or_else(|err| panic!("{what}: {err}"));
            finishes(&g, &what);
            assert!(hq.guard_intact(&g, 0xff), "{what}: written past h's codes");
            assert!(hs.guard_intact(&g, 0xff), "{what}: written past h's scales");
            assert!(hq.front_host(&g).iter().all(|&c| c & 0x7f != 0x7f), "{what}: a NaN code in h: read past an input");
            assert!(hs.front_host(&g).iter().all(|s| s.is_finite()), "{what}: a NaN scale of h: read past an input");
        }
    }
    assert!([&qa, &qb, &qw1].iter().all(|b| b.guard_intact(&g, 0xff)), "an input's guard zone changed");
    assert!([&sa, &sb, &sw1].iter().all(|b| b.guard_intact(&g, 0xff)), "an input's guard zone changed");
});

// `quantize_cols_grouped` (per-column and block scales, with the row-wise codes, gathering with the bf16 copy
// and the routing weights) on every bad layout: Ok, bounded, the guard zones of the codes, scales, row codes,
// row scales and the copy untouched; the inputs (the rows, the gathered tokens, the weights) sit in front of guard
// zones of NaN and the outputs start as zeros, so a read past an input would leave a NaN code, scale or copied
// value, which every run checks.
gpu_test!(quantize_cols_grouped_bad_offsets_stay_inside_the_buffers, {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, cols, rows_max, top_k, tokens) = (BAD_E, 256, 200, 2, 90);
    let kp = fp8::cols_grouped_kp(rows_max, e);
    let x = Guarded::<bf16>::with(&g, &r.bf16_vec(rows_max * cols, 1.0), 0xff);
    let xt = Guarded::<bf16>::with(&g, &r.bf16_vec(tokens * cols, 1.0), 0xff);
    let wts: Vec<f32> = (0..tokens * top_k).map(|_| r.uniform() as f32 + 0.5).collect();
    let dw = Guarded::<f32>::with(&g, &wts, 0xff);
    // slots of the gathered rows, some of them past the tokens
    let row_slot: Vec<u32> = (0..rows_max)
        .map(|row| match row % 7 {
            0 => [(tokens * top_k) as u32, u32::MAX, 1 << 31][row / 7 % 3],
            _ => ((row * 5 + 1) % (tokens * top_k)) as u32,
        })
        .collect();
    let drs = g.upload(&row_slot).unwrap();
    for (name, off, til) in bad_layouts(rows_max as u32, &mut r) {
        let (doff, dtil) = (g.upload(&off).unwrap(), g.upload(&til).unwrap());
        // (block scales, row-wise codes too, gathering)
        for (block, rows_out, gather) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (true, true, false),
            (false, false, true),
            (true, false, true),
        ] {
            let per_block = if block { cols / 128 } else { cols };
            let mut q = Guarded::<u8>::new(&g, cols * kp, 0xff);
            let mut s = Guarded::<f32>::new(&g, per_block * (kp / 128), 0xff);
            let mut qr = Guarded::<u8>::new(&g, rows_max * cols, 0xff);
            let mut sr = Guarded::<f32>::new(&g, rows_max * (cols / 128), 0xff);
            let mut copy = Guarded::<bf16>::new(&g, rows_max * cols, 0xff);
            q.zero_front(&g);
            s.zero_front(&g);
            qr.zero_front(&g);
            sr.zero_front(&g);
            copy.zero_front(&g);
            let what = format!("quantize_cols_grouped block {block} rows {rows_out} gather {gather}, {name}");
            let args = fp8::QuantizeColsArgs {
                x: if gather { xt.front() } else { x.front() },
                offsets: &doff,
                tile_offsets: &dtil,
                q: q.buf(),
                scales: s.buf(),
                experts: e,
                rows_max,
                cols,
                block_scales: block,
                gather: gather.then(|| fp8::ColsGather {
                    row_slot: &drs,
                    top_k,
                    tokens,
                    copy: Some(copy.buf()),
                    weights: Some(dw.front()),
                }),
                rows_out: if rows_out { Some((qr.buf(), sr.buf())) } else { None },
            };
            fp8::quantize_cols_grouped(&g, args).unwrap_or_else(|err| panic!("{what}: {err}"));
            finishes(&g, &what);
            assert!(q.guard_intact(&g, 0xff), "{what}: written past the codes");
            assert!(s.guard_intact(&g, 0xff), "{what}: written past the scales");
            assert!(qr.guard_intact(&g, 0xff), "{what}: written past the row codes");
            assert!(sr.guard_intact(&g, 0xff), "{what}: written past the row scales");
            assert!(copy.guard_intact(&g, 0xff), "{what}: written past the gathered copy");
            let no_nan_code = |b: &Guarded<u8>| b.front_host(&g).iter().all(|&c| c & 0x7f != 0x7f);
            let finite = |b: &Guarded<f32>| b.front_host(&g).iter().all(|v| v.is_finite());
            assert!(no_nan_code(&q) && no_nan_code(&qr), "{what}: a NaN code: read past an input");
            assert!(finite(&s) && finite(&sr), "{what}: a NaN scale: read past an input");
            assert!(copy.front_host(&g).iter().all(|v| v.is_finite()), "{what}: NaN in the copy: read past x");
        }
    }
    assert!(x.guard_intact(&g, 0xff) && xt.guard_intact(&g, 0xff) && dw.guard_intact(&g, 0xff));
});

/// `grouped_wgrad_fp8` (f32 and bf16 C, B's scales per column and per block, the probe; static and run-time
/// schedules, written and accumulated) on every bad layout's tile offsets: Ok, bounded, C's guard zone
/// untouched, and every element of C finite: the operands are finite e4m3 codes and scales whose guard zones
/// hold NaN (0xff), so a read of a K block past Kp (a scale's bulk copy past its buffer) would put NaN into C.
fn wgrad_fp8_bad_offsets<W: El + bytemuck::Pod>() {
    let g = gpu();
    let mut r = fresh_rng();
    let (e, m, n, rows_max) = (BAD_E, 256, 384, 200);
    let kp = fp8::cols_grouped_kp(rows_max, e);
    // finite e4m3 codes (exponent field at most 14: never the NaN pattern 0x7f / 0xff) and positive scales
    let mut codes = |len: usize| (0..len).map(|_| r.next_u64() as u8 & 0x77).collect::<Vec<u8>>();
    let (a_t, b_t) = (codes(m * kp), codes(n * kp));
    let mut scales = |len: usize| (0..len).map(|_| 1e-3 * (r.uniform() as f32 + 0.5)).collect::<Vec<f32>>();
    let (sa, sb, sbb) = (scales(kp / 128 * m), scales(kp / 128 * n), scales(kp / 128 * (n / 128)));
    let a_t = Guarded::<u8>::with(&g, &a_t, 0xff);
    let b_t = Guarded::<u8>::with(&g, &b_t, 0xff);
    let (sa, sb, sbb) = (
        Guarded::<f32>::with(&g, &sa, 0xff),
        Guarded::<f32>::with(&g, &sb, 0xff),
        Guarded::<f32>::with(&g, &sbb, 0xff),
    );
    for (name, _, til) in bad_layouts(rows_max as u32, &mut r) {
        let dtil = g.upload(&til).unwrap();
        // (B's scales per block, the probe)
        let mut kinds = vec![(false, false), (true, false)];
        if W::NAME == "bf16" {
            kinds.push((false, true));
        }
        for (b_block, probe) in kinds {
            for sched in [gemm::WgradSched::Static, gemm::WgradSched::Dynamic] {
                for accumulate in [false, true] {
                    let mut c = Guarded::<W>::with(&g, &vec![W::of(0.5); e * m * n], 0xff);
                    let what = format!(
                        "grouped_wgrad_fp8 {} B blocks {b_block} probe {probe} {sched:?} accumulate {accumulate}, {name}",
                        W::NAME
                    );
                    let args = fp8::WgradFp8Args {
                        a_t: a_t.front(),
                        a_scales: sa.front(),
                        b_t: b_t.front(),
                        b_scales: if b_block { sbb.front() } else { sb.front() },
                        tile_offsets: &dtil,
                        c: c.buf(),
                        experts: e,
                        m,
                        n,
                        kp,
                        accumulate,
                        b_block_scales: b_block,
                    };
                    gemm::with_wgrad_sched(sched, || {
                        let p = if probe { args.prepare_probe(&g) } else { args.prepare(&g) }?;
                        p.launch(&g)
                    })
                    .unwrap_or_else(|err| panic!("{what}: {err}"));
                    finishes(&g, &what);
                    assert!(c.guard_intact(&g, 0xff), "{what}: written past C");
                    let ch = g.download(c.front()).unwrap();
                    if let Some(x) = ch.iter().position(|v| !v.f().is_finite()) {
                        panic!("{what}: C[{x}] = {} (read past the operands, or not written)", ch[x].f());
                    }
                }
            }
        }
    }
    for b in [&sa, &sb, &sbb] {
        assert!(b.guard_intact(&g, 0xff));
    }
    assert!(a_t.guard_intact(&g, 0xff) && b_t.guard_intact(&g, 0xff));
}
gpu_test!(wgrad_fp8_bad_offsets_stay_inside_the_buffers, wgrad_fp8_bad_offsets::<f32>());
gpu_test!(wgrad_fp8_bf16_bad_offsets_stay_inside_the_buffers, wgrad_fp8_bad_offsets::<bf16>());
