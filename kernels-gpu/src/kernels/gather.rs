//! Row gather into expert order: dst[r] = src[row_slot[r] / k] (16-byte loads and stores).
use crate::params::{Gather, GatherDequant};
use crate::ptx::{global, math, regs};
use crate::scheduler::gather_rows_per_block;

/// Rows `bid * rpb ..` of the launch, `rpb` = [`gather_rows_per_block`] of the row's 16-byte chunks (one row a
/// block, its threads looping over it, for rows at least a block wide; else whole rows on consecutive threads, one
/// chunk a thread); the host's grid is the possible rows (slots) over `rpb`, rounded up. Rows past offsets[E]
/// return. 128 threads, no barriers.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gather_rows(p: Gather) {
    crate::kernels::pdl_entry();
    let rows = *(p.offsets as *const u32).add(p.experts as usize);
    let chunks = p.cols / 8;
    let (t, nt) = (regs::tid(), regs::ntid());
    let rpb = gather_rows_per_block(chunks, nt);
    // this thread's row of the block, its first chunk and the stride over the row's chunks
    let (sub, c0, step) = if rpb == 1 { (0, t, nt) } else { (t / chunks, t % chunks, chunks) };
    let r = regs::bid() * rpb + sub;
    // threads past the block's last whole row, and rows past the routed ones
    if sub >= rpb || r >= rows {
        return;
    }
    let slot = *(p.row_slot as *const u32).add(r as usize);
    let tok = slot / p.k;
    let src = (p.src as *const [u32; 4]).add((tok * chunks) as usize);
    let dst = (p.dst as *mut [u32; 4]).add((r * chunks) as usize);
    let mut c = c0;
    while c < chunks {
        global::st_v4(dst.add(c as usize), global::ld_v4(src.add(c as usize)));
        c += step;
    }
}

/// [`gather_rows`] of e4m3 rows back to bf16 (`GatherDequant`): dst\[r\] = bf16(codes\[t\] * scale) for t =
/// row_slot\[r\] / k (or r), r below min(offsets\[E\], rows_max) (or rows_max), each
/// code decoded exactly ([`crate::fp8::e4m3_to_f32`]), times its 1 x 128 block's f32 scale, rounded once to
/// nearest-even bf16 (what the host's `fp8::dequantize_rows_bf16_cpu` computes). A thread converts 16 codes (one
/// 16-byte load, two 16-byte stores) at a time; a block takes `rpb` rows as `gather_rows` with 16-code chunks, then
/// the rows a grid further (the grid may be smaller than the rows: the host sizes it for the SMs, since the device's
/// count can be far below `rows_max`). 128 threads, no barriers.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gather_rows_dequant(p: GatherDequant) {
    crate::kernels::pdl_entry();
    let rows =
        if p.offsets == 0 { p.rows_max } else { (*(p.offsets as *const u32).add(p.experts as usize)).min(p.rows_max) };
    let chunks = p.cols / 16;
    let (t, nt) = (regs::tid(), regs::ntid());
    let rpb = gather_rows_per_block(chunks, nt);
    let (sub, c0, step) = if rpb == 1 { (0, t, nt) } else { (t / chunks, t % chunks, chunks) };
    if sub >= rpb {
        return;
    }
    let mut r = regs::bid() * rpb + sub;
    let stride = regs::nctaid() * rpb;
    while r < rows {
        let tok = if p.row_slot == 0 { r } else { *(p.row_slot as *const u32).add(r as usize) / p.k };
        let src = (p.src as *const [u32; 4]).add((tok * chunks) as usize);
        let scales = (p.scales as *const f32).add((tok * (p.cols / 128)) as usize);
        let dst = (p.dst as *mut [u32; 4]).add((r * 2 * chunks) as usize);
        let mut c = c0;
        while c < chunks {
            let q = global::ld_v4(src.add(c as usize));
            // 8 chunks of 16 codes a 128-code block
            let s = *scales.add((c / 8) as usize);
            let mut out = [0u32; 8];
            crate::unroll!(W in [0, 1, 2, 3] {
                let w = q[W];
                let d = |b: u32| crate::fp8::e4m3_to_f32((w >> (8 * b)) as u8) * s;
                out[2 * W] = math::pack_bf16x2(d(0), d(1));
                out[2 * W + 1] = math::pack_bf16x2(d(2), d(3));
            });
            let o = dst.add(2 * c as usize);
            global::st_v4(o, [out[0], out[1], out[2], out[3]]);
            global::st_v4(o.add(1), [out[4], out[5], out[6], out[7]]);
            c += step;
        }
        r += stride;
    }
}
