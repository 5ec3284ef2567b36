//! Blockwise FP8 quantization ([`crate::fp8`] gives the rule, the host's reference the same codes bit for bit):
//! `quantize_fp8_rows` (1 x 128 blocks: activations) and `quantize_fp8_blocks` (128 x 128 blocks: weights).
use crate::fp8::scale_and_factor;
use crate::params::{QuantFp8, QuantFp8Cols, QuantFp8T};
use crate::ptx::{global, math, regs, smem, sync, warp};

/// The largest of `v` over the warp, NaN ignored as `f32::max` ignores it (the host's reference folds with it).
#[inline(always)]
unsafe fn warp_max(v: f32) -> f32 {
    let mut v = v;
    let mut m = 16;
    while m > 0 {
        v = v.max(f32::from_bits(warp::shfl_xor(v.to_bits(), m)));
        m /= 2;
    }
    v
}

/// |x| of the two bf16 of `w`, the larger.
#[inline(always)]
fn amax2(w: u32) -> f32 {
    let lo = math::bf16_to_f32(w as u16).abs();
    let hi = math::bf16_to_f32((w >> 16) as u16).abs();
    lo.max(hi)
}

/// Two packed bf16 pairs times `f`, as four e4m3 codes (byte i: element i).
#[inline(always)]
fn codes(w0: u32, w1: u32, f: f32) -> u32 {
    let e = |w: u32, h: u32| math::bf16_to_f32((w >> (16 * h)) as u16) * f;
    math::pack_e4m3x4([e(w0, 0), e(w0, 1), e(w1, 0), e(w1, 1)])
}

/// Units (row, 128-column block) a warp of `quantize_fp8_rows` converts: their loads are issued together, so a
/// warp has 1 KiB in flight instead of 256 bytes (the kernel was latency-bound at ~1.7 TB/s).
pub const ROWS_UNITS: u32 = crate::kernels_host::FP8_ROWS_UNITS;
const _: () = assert!(ROWS_UNITS == 4, "the unrolled loops of quantize_fp8_rows take 4 units");

/// ROWS_UNITS consecutive (row, 128-column block) units per warp, 8 warps a block (256 threads; grid =
/// ceil(rows * cols / 128 / (8 ROWS_UNITS))): for each unit a lane converts 4 consecutive values, lane 0 writes
/// the scale. No block barriers; a unit past the end is skipped by the whole warp (its shuffles stay uniform).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_fp8_rows(p: QuantFp8) {
    crate::kernels::pdl_entry();
    let g0 = (regs::bid() * 8 + regs::tid() / 32) * ROWS_UNITS;
    let lane = regs::tid() % 32;
    let kbs = p.cols / 128;
    let rows = if p.rows_at == 0 { p.rows } else { (*(p.rows_at as *const u32)).min(p.rows) };
    let units = rows * kbs;
    // a unit's element index: units are consecutive 128-value blocks of the row-major x
    let at = |u: u32| ((g0 + u) * 128 + 4 * lane) as usize;
    let mut w = [0u64; ROWS_UNITS as usize];
    crate::unroll!(U in [0, 1, 2, 3] {
        if g0 + (U as u32) < units {
            w[U] = *(p.x as *const u64).add(at(U as u32) / 4);
        }
    });
    crate::unroll!(U in [0, 1, 2, 3] {
        if g0 + (U as u32) < units {
            let (w0, w1) = (w[U] as u32, (w[U] >> 32) as u32);
            let amax = warp_max(amax2(w0).max(amax2(w1)));
            let (scale, f) = scale_and_factor(amax);
            *(p.q as *mut u32).add(at(U as u32) / 4) = codes(w0, w1, f);
            if lane == 0 {
                *(p.scales as *mut f32).add((g0 + U as u32) as usize) = scale;
            }
        }
    });
}

/// One block of 256 threads per 128 x 128 block (grid = rows / 128 * cols / 128, 32 bytes of dynamic shared
/// memory): thread t converts 64 values of row t / 2; the block's largest magnitude through one barrier.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_fp8_blocks(p: QuantFp8) {
    crate::kernels::pdl_entry();
    let cbs = p.cols / 128;
    let (bi, bj) = (regs::bid() / cbs, regs::bid() % cbs);
    let t = regs::tid();
    let row = bi * 128 + t / 2;
    let at = (row * p.cols + bj * 128 + 64 * (t % 2)) as usize; // element index, a multiple of 8
    let src = (p.x as *const [u32; 4]).add(at / 8);
    let mut v = [[0u32; 4]; 8];
    let mut amax = 0f32;
    crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
        v[I] = global::ld_v4(src.add(I));
        crate::unroll!(J in [0, 1, 2, 3] {
            amax = amax.max(amax2(v[I][J]));
        });
    });
    let red = smem::base();
    amax = warp_max(amax);
    if t % 32 == 0 {
        smem::st_u32(red + 4 * (t / 32), amax.to_bits());
    }
    sync::block_sync();
    let mut all = 0f32;
    crate::unroll!(W in [0, 1, 2, 3, 4, 5, 6, 7] {
        all = all.max(f32::from_bits(smem::ld_u32(red + 4 * W as u32)));
    });
    let (scale, f) = scale_and_factor(all);
    let dst = (p.q as *mut [u32; 4]).add(at / 16);
    crate::unroll!(I in [0, 1, 2, 3] {
        let (a, b) = (v[2 * I], v[2 * I + 1]);
        global::st_v4(
            dst.add(I),
            [codes(a[0], a[1], f), codes(a[2], a[3], f), codes(b[0], b[1], f), codes(b[2], b[3], f)],
        );
    });
    if t == 0 {
        *(p.scales as *mut f32).add(regs::bid() as usize) = scale;
    }
}

/// `quantize_fp8_blocks` of each batch's transpose: `x` bf16 [B, R, C] (R = `rows` / B of each batch, C = `cols`,
/// both multiples of 128) into codes [B, C, R] and scales [B, C / 128, R / 128] (so W_b^T's blocks are W_b's
/// blocks, their scales the same numbers): what a GEMM that reads W_b^T K-major (the backward's dgrad) needs.
/// One block of 256 threads per 128 x 128 block (grid = rows / 128 * cols / 128), 32 KiB + 32 bytes of dynamic
/// shared memory: the tile is staged (rows padded to 264 bytes against bank conflicts on the transposed
/// reads), its amax reduced as `quantize_fp8_blocks` does, then thread t writes 64 codes of output row t / 2.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_fp8_blocks_t(p: QuantFp8T) {
    crate::kernels::pdl_entry();
    const PITCH: u32 = 264; // bytes per staged row of 128 bf16 (+8)
    let (r_blocks, c_blocks) = (p.batch_rows / 128, p.cols / 128);
    let per = r_blocks * c_blocks;
    let (b, rest) = (regs::bid() / per, regs::bid() % per);
    let (bi, bj) = (rest / c_blocks, rest % c_blocks);
    let t = regs::tid();
    let tile = smem::base();
    let red = tile + 128 * PITCH;
    // stage the 128 x 128 tile: thread t copies 64 values of input row t / 2
    let row = b * p.batch_rows + bi * 128 + t / 2;
    let at = (row * p.cols + bj * 128 + 64 * (t % 2)) as usize;
    let src = (p.x as *const [u32; 4]).add(at / 8);
    let mut amax = 0f32;
    crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
        let v = global::ld_v4(src.add(I));
        crate::unroll!(J in [0, 1, 2, 3] {
            amax = amax.max(amax2(v[J]));
            smem::st_u32(tile + (t / 2) * PITCH + 128 * (t % 2) + 16 * I as u32 + 4 * J as u32, v[J]);
        });
    });
    amax = warp_max(amax);
    if t % 32 == 0 {
        smem::st_u32(red + 4 * (t / 32), amax.to_bits());
    }
    sync::block_sync();
    let mut all = 0f32;
    crate::unroll!(W in [0, 1, 2, 3, 4, 5, 6, 7] {
        all = all.max(f32::from_bits(smem::ld_u32(red + 4 * W as u32)));
    });
    let (scale, f) = scale_and_factor(all);
    // output row oc = input column t / 2 of the tile, its 64 codes from input rows 64 (t % 2) ..
    let oc = t / 2;
    let r0 = 64 * (t % 2);
    let out_row = b * p.cols + bj * 128 + oc;
    let dst = (p.q as *mut [u32; 4]).add(((out_row * p.batch_rows + bi * 128 + r0) / 16) as usize);
    let val = |r: u32| {
        let w = smem::ld_u32(tile + r * PITCH + 2 * (oc & !1));
        math::bf16_to_f32((w >> (16 * (oc & 1))) as u16) * f
    };
    crate::unroll!(I in [0, 1, 2, 3] {
        let mut words = [0u32; 4];
        crate::unroll!(J in [0, 1, 2, 3] {
            let r = r0 + 16 * I as u32 + 4 * J as u32;
            words[J] = math::pack_e4m3x4([val(r), val(r + 1), val(r + 2), val(r + 3)]);
        });
        global::st_v4(dst.add(I), words);
    });
    if t == 0 {
        // scales [B, C / 128, R / 128]
        *(p.scales as *mut f32).add(((b * c_blocks + bj) * r_blocks + bi) as usize) = scale;
    }
}

/// See [`crate::kernels_host::FP8_COLS_PITCH`].
const COLS_PITCH: u32 = crate::kernels_host::FP8_COLS_PITCH;
/// Bytes between two columns' codes in `quantize_fp8_cols_grouped`'s staging (128 + 16: see there).
const CODES_PITCH: u32 = 144;
const _: () =
    assert!(crate::kernels_host::FP8_COLS_SMEM == 128 * COLS_PITCH + 1056 + 128 * CODES_PITCH, "host and kernel agree");

/// See [`QuantFp8Cols`]. One block of 256 threads per (128-row block kb of the expert-padded K, 128 columns):
/// grid = Kp / 128 * C / 128, `FP8_COLS_SMEM` bytes of dynamic shared memory (the tile transposed, bf16; the two
/// half-columns' maxima; the warps' maxima with `block`; the codes, staged). Blocks past tile_offsets[E] return; the
/// others find their expert by counting the m-tile offsets at or below kb (one barrier reduction). Thread t loads 64 values (columns
/// 64 (t / 128) ..) of row t % 128 (rows past the expert's block: zeros; gathering, of its token's row) and stores
/// them transposed (a warp: one column, 32 consecutive rows, free of bank conflicts); then it takes column t % 128,
/// rows 64 (t / 128) .. (a quarter-warp's 16-byte reads: 8 columns, 68 words apart, in distinct banks): the
/// column's largest magnitude over its 128 rows through shared memory (with `block`: over the whole block), the
/// scale, 64 codes (16-byte stores). The values are read from shared memory twice (the maximum, then the codes)
/// rather than held, so the block stays under 64 registers a thread and four blocks fit an SM, enough loads in
/// flight to approach the memory's bandwidth.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_fp8_cols_grouped(p: QuantFp8Cols) {
    crate::kernels::pdl_entry();
    cols_grouped::<false>(&p);
}

/// As `quantize_fp8_cols_grouped`, and the rows also quantized row-wise into `q_rows` / `s_rows` from the same read
/// (the rule of `quantize_fp8_rows`): both operands an FP8 backward needs of dz (dx's A row-wise, dW1's A
/// column-wise) in one pass. Its own kernel: the row codes need registers that would halve the plain one's blocks
/// an SM.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn quantize_fp8_cols_grouped_rows(p: QuantFp8Cols) {
    crate::kernels::pdl_entry();
    cols_grouped::<true>(&p);
}

#[inline(always)]
unsafe fn cols_grouped<const ROWS: bool>(p: &QuantFp8Cols) {
    const PITCH: u32 = COLS_PITCH;
    let cbs = p.cols / 128;
    let (kb, cc) = (regs::bid() / cbs, regs::bid() % cbs);
    let to = p.tile_offsets as *const u32;
    if kb >= *to.add(p.experts as usize) {
        return; // uniform: the whole block
    }
    let t = regs::tid();
    // the expert whose m-tiles hold block kb: the last e with to[e] <= kb (empty experts have to[e] = to[e + 1]);
    // to is non-decreasing from to[0] = 0, so that e is the count of e' in 1..E with to[e'] <= kb: every thread
    // tests 1 / 256 of them at once, one round trip to memory instead of a binary search's log2(E) dependent ones
    // (the trip count depends on E only: uniform)
    let mut lo = 0u32;
    let mut first = 1u32;
    while first < p.experts {
        let e = first + t;
        lo += sync::block_count(e < p.experts && *to.add(e as usize) <= kb);
        first += 256;
    }
    // whatever the device offsets hold: kb < Kp / 128 (the grid), lo < E, and every row read or written below is
    // tested against r_end <= rows_max first (r0 may be anything): inside x, row_slot, copy and the row codes
    let off = p.offsets as *const u32;
    let r0 = *off.add(lo as usize) + 128 * (kb - *to.add(lo as usize));
    let r_end = (*off.add(lo as usize + 1)).min(p.rows_max);
    let tile = smem::base();
    let halves = tile + 128 * PITCH; // f32 [2][128]: each half-column's maximum
    let slots = halves + 1024; // f32 [8]: the warps' maxima (block scales)
    let stage = slots + 32; // the codes, [128 columns][CODES_PITCH bytes]
    {
        // the tile transposed into shared memory, rows swizzled: logical row r of column c at tile + PITCH c +
        // 2 (r ^ sw(c)), sw(c) = 4 ((c / 8) % 16). Each load instruction reads whole 128-byte lines: warp w, step I
        // covers rows 16 w + 2 I and + 1 (lane / 16), each row's two lines ((lane / 8) % 2) by 8 lanes of 16 bytes
        // (lane % 8), so a thread holds the same 8 columns c_t .. of 8 rows. Its transposed stores: 16 lanes
        // write 16 columns 8 apart (68-word pitch: the same banks unswizzled; the swizzle spreads the 16 over
        // distinct banks), the two rows of a step share a 4-byte word.
        let lane = t % 32;
        let rsub = lane / 16;
        let c_t = 64 * ((lane / 8) % 2) + 8 * (lane % 8);
        let sw = 4 * ((c_t / 8) % 16);
        let rbase = 16 * (t / 32) + rsub;
        let mut w = [[0u32; 4]; 8];
        // each row's routing weight when `w` scales the gathered rows (1 otherwise)
        let mut sw8 = [1f32; 8];
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            let row = r0 + rbase + 2 * I as u32;
            // the row read: row of x, or (gathering) its token's row; none past the expert's rows (zeros)
            let src = if row >= r_end {
                None
            } else if p.row_slot == 0 {
                Some(row)
            } else {
                let slot = *(p.row_slot as *const u32).add(row as usize);
                let token = slot / p.top_k;
                if p.w != 0 && token < p.src_rows {
                    sw8[I] = *(p.w as *const f32).add(slot as usize);
                }
                (token < p.src_rows).then_some(token)
            };
            if let Some(sr) = src {
                w[I] = global::ld_v4((p.x as *const [u32; 4]).add(((sr * p.cols + cc * 128 + c_t) / 8) as usize));
            }
        });
        crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
            let row = r0 + rbase + 2 * I as u32;
            if p.copy != 0 && row < r_end {
                global::st_v4((p.copy as *mut [u32; 4]).add(((row * p.cols + cc * 128 + c_t) / 8) as usize), w[I]);
            }
            if p.w != 0 {
                // the values quantized: s x, rounded to bf16 (the copy above stays unscaled; uniform branch)
                crate::unroll!(J in [0, 1, 2, 3] {
                    let v = w[I][J];
                    let lo = math::bf16_to_f32(v as u16) * sw8[I];
                    let hi = math::bf16_to_f32((v >> 16) as u16) * sw8[I];
                    w[I][J] = math::pack_bf16x2(lo, hi);
                });
            }
            // with q_rows, the row's 1 x 128 block too: its amax over the 16 lanes holding the row (uniform
            // shuffles), its scale, this lane's 8 codes (a row's 16 lanes store one whole 128-byte line)
            if ROWS && p.q_rows != 0 {
                let mut ra = 0f32;
                crate::unroll!(J in [0, 1, 2, 3] {
                    ra = ra.max(amax2(w[I][J]));
                });
                crate::unroll!(S in [1, 2, 4, 8] {
                    ra = ra.max(f32::from_bits(warp::shfl_xor(ra.to_bits(), S as u32)));
                });
                if row < r_end {
                    let (rs, rf) = scale_and_factor(ra);
                    let at = (row * p.cols + cc * 128 + c_t) / 8;
                    let v = [codes(w[I][0], w[I][1], rf), codes(w[I][2], w[I][3], rf)];
                    global::st_v2((p.q_rows as *mut [u32; 2]).add(at as usize), v);
                    if lane % 16 == 0 {
                        *(p.s_rows as *mut f32).add((row * (p.cols / 128) + cc) as usize) = rs;
                    }
                }
            }
            let r = (rbase + 2 * I as u32) ^ sw;
            crate::unroll!(J in [0, 1, 2, 3] {
                let c = c_t + 2 * J as u32;
                smem::st_u16(tile + PITCH * c + 2 * r, w[I][J] & 0xffff);
                smem::st_u16(tile + PITCH * (c + 1) + 2 * r, w[I][J] >> 16);
            });
        });
    }
    sync::block_sync();
    let c = t % 128;
    let half = t / 128;
    // this thread's 64 rows of column c: 128 bytes (in a swizzled order that keeps them in this range)
    let src = tile + PITCH * c + 128 * half;
    let mut amax = 0f32;
    crate::unroll!(I in [0, 1, 2, 3, 4, 5, 6, 7] {
        let v = smem::ld_v4(src + 16 * I as u32);
        crate::unroll!(J in [0, 1, 2, 3] {
            amax = amax.max(amax2(v[J]));
        });
    });
    smem::st_u32(halves + 4 * t, amax.to_bits());
    if p.block != 0 {
        // one scale for the 128 x 128 block: the warps' maxima through shared memory (uniform branch: every thread
        // of the block takes it or none)
        amax = warp_max(amax);
        if t % 32 == 0 {
            smem::st_u32(slots + 4 * (t / 32), amax.to_bits());
        }
    }
    sync::block_sync();
    if p.block != 0 {
        crate::unroll!(W in [0, 1, 2, 3, 4, 5, 6, 7] {
            amax = amax.max(f32::from_bits(smem::ld_u32(slots + 4 * W as u32)));
        });
    } else {
        amax = amax.max(f32::from_bits(smem::ld_u32(halves + 4 * (t ^ 128))));
    }
    let (scale, f) = scale_and_factor(amax);
    let col = cc * 128 + c;
    // 64 codes of the values read again in logical order, staged (column c's 128 codes at stage + CODES_PITCH c: a
    // quarter-warp's 16-byte stores, 8 columns 36 words apart, in distinct banks). Logical 8-row chunk L of the half
    // sits at physical chunk L ^ (k / 2), k = (c / 8) % 16, its two 4-row halves swapped when k is odd.
    let k = (c / 8) % 16;
    let chunk = |l: u32| {
        let v = smem::ld_v4(src + 16 * (l ^ (k / 2)));
        if k % 2 == 1 {
            [v[2], v[3], v[0], v[1]]
        } else {
            v
        }
    };
    crate::unroll!(I in [0, 1, 2, 3] {
        let a = chunk(2 * I as u32);
        let b = chunk(2 * I as u32 + 1);
        smem::st_v4(
            stage + CODES_PITCH * c + 64 * half + 16 * I as u32,
            [codes(a[0], a[1], f), codes(a[2], a[3], f), codes(b[0], b[1], f), codes(b[2], b[3], f)],
        );
    });
    sync::block_sync();
    // then stored by whole lines: a warp writes 4 columns' 128 codes, 8 lanes a column
    crate::unroll!(P in [0, 1, 2, 3] {
        let oc = 32 * P as u32 + t / 8;
        let ch = t % 8;
        let v = smem::ld_v4(stage + CODES_PITCH * oc + 16 * ch);
        let at = ((cc * 128 + oc) * p.kp + kb * 128) / 16 + ch;
        global::st_v4((p.q as *mut [u32; 4]).add(at as usize), v);
    });
    if p.block != 0 {
        if t == 0 {
            *(p.scales as *mut f32).add((kb * cbs + cc) as usize) = scale;
        }
    } else if half == 0 {
        *(p.scales as *mut f32).add((kb * p.cols + col) as usize) = scale;
    }
}
