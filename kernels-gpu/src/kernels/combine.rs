//! Combine: out[t] = sum over j of w[t, j] * y[row of (t, j)], in f32, in j order (deterministic), to bf16.
//! Writes nothing when the routing error word is set (an expert id outside -1..E in the forward).
use crate::kernels::routing_failed;
use crate::params::Combine;
use crate::ptx::{global, math, regs};

/// One block per token, 256 threads, 8 columns (16 bytes) a step. No barriers.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn combine_rows(p: Combine) {
    crate::kernels::pdl_entry();
    let t = regs::bid();
    if t >= p.tokens || routing_failed(p.error) {
        return;
    }
    let mut c = regs::tid();
    while c < p.cols / 8 {
        token_chunk::<8>(&p, t, c);
        c += regs::ntid();
    }
}

/// 16-byte chunk `c` of token `t`'s output row: the weighted sum of its slots' rows of `p.y` into `p.out`, the
/// slots' rows fetched `B` (8 or 2) at a time ([`weighted_sum`], [`weighted_sum_2`]: the same sum either way).
/// SAFETY: `t` < p.tokens, `c` < p.cols / 8; the buffers as `combine_rows` takes them.
#[inline(always)]
pub(crate) unsafe fn token_chunk<const B: u32>(p: &Combine, t: u32, c: u32) {
    let chunks = p.cols / 8;
    let slot_row = p.slot_row as *const i32;
    let row = |j: u32| {
        let slot = (t * p.k + j) as usize;
        let row = *slot_row.add(slot);
        if row < 0 {
            return None;
        }
        let wt = if p.w == 0 { 1.0 } else { *(p.w as *const f32).add(slot) };
        Some((wt, global::ld_v4((p.y as *const [u32; 4]).add(row as usize * chunks as usize + c as usize))))
    };
    let sum = if B == 8 { weighted_sum(p.k, row) } else { weighted_sum_2(p.k, row) };
    global::st_v4((p.out as *mut [u32; 4]).add((t * chunks + c) as usize), sum);
}

/// The combine's arithmetic, shared by `combine_rows` and `ep_combine` (so EP = R sums bitwise as EP = 1):
/// the f32 sum over j = 0..k, in j order, of wt_j * (8 bf16 of row_j) for the slots `row(j)` gives
/// (masked slots: None), rounded to 8 bf16. The rows are fetched 8 slots at a time before they are summed
/// (their loads in flight together), the sum itself in j order.
#[inline(always)]
pub(crate) unsafe fn weighted_sum(k: u32, row: impl Fn(u32) -> Option<(f32, [u32; 4])>) -> [u32; 4] {
    let mut acc = [0f32; 8];
    let mut j0 = 0;
    while j0 < k {
        let mut got = [None; 8];
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
            if j0 + (J as u32) < k {
                got[J] = row(j0 + J as u32);
            }
        });
        crate::unroll!(J in [0, 1, 2, 3, 4, 5, 6, 7] {
            if let Some((wt, v)) = got[J] {
                add_row(&mut acc, wt, v);
            }
        });
        j0 += 8;
    }
    pack8(&acc)
}

/// [`weighted_sum`] fetching two slots at a time (for the 40-register mover warps of `grouped_wgrad_f32_mv` and `grouped_wgrad_bf16_mv`):
/// the same sum in the same order, so bitwise the same result.
#[inline(always)]
pub(crate) unsafe fn weighted_sum_2(k: u32, row: impl Fn(u32) -> Option<(f32, [u32; 4])>) -> [u32; 4] {
    let mut acc = [0f32; 8];
    let mut j0 = 0;
    while j0 < k {
        let a = row(j0);
        let b = if j0 + 1 < k { row(j0 + 1) } else { None };
        if let Some((wt, v)) = a {
            add_row(&mut acc, wt, v);
        }
        if let Some((wt, v)) = b {
            add_row(&mut acc, wt, v);
        }
        j0 += 2;
    }
    pack8(&acc)
}

/// acc += wt * (8 bf16 of `v`), in f32.
#[inline(always)]
fn add_row(acc: &mut [f32; 8], wt: f32, v: [u32; 4]) {
    crate::unroll!(Q in [0, 1, 2, 3] {
        acc[2 * Q] += wt * math::bf16_to_f32(v[Q] as u16);
        acc[2 * Q + 1] += wt * math::bf16_to_f32((v[Q] >> 16) as u16);
    });
}

/// 8 f32 rounded to 8 packed bf16.
#[inline(always)]
fn pack8(acc: &[f32; 8]) -> [u32; 4] {
    [
        math::pack_bf16x2(acc[0], acc[1]),
        math::pack_bf16x2(acc[2], acc[3]),
        math::pack_bf16x2(acc[4], acc[5]),
        math::pack_bf16x2(acc[6], acc[7]),
    ]
}
