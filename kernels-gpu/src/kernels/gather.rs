//! Row gather into expert order: dst[r] = src[row_slot[r] / k] (16-byte copies), optionally scaled per slot.
use crate::params::Gather;
use crate::ptx::{math, regs};

/// One block per possible row (grid = slots); blocks past offsets[E] return. 128 threads.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gather_rows(p: Gather) {
    let r = regs::bid();
    let rows = *(p.offsets as *const u32).add(p.experts as usize);
    if r >= rows {
        return;
    }
    let slot = *(p.row_slot as *const u32).add(r as usize);
    let tok = slot / p.k;
    let chunks = p.cols / 8;
    let src = (p.src as *const [u32; 4]).add((tok * chunks) as usize);
    let dst = (p.dst as *mut [u32; 4]).add((r * chunks) as usize);
    let mut c = regs::tid();
    if p.scale == 0 {
        while c < chunks {
            *dst.add(c as usize) = *src.add(c as usize);
            c += regs::ntid();
        }
    } else {
        let s = *(p.scale as *const f32).add(slot as usize);
        while c < chunks {
            let v = *src.add(c as usize);
            let mut o = [0u32; 4];
            crate::unroll!(Q in [0, 1, 2, 3] {
                let lo = s * math::bf16_to_f32(v[Q] as u16);
                let hi = s * math::bf16_to_f32((v[Q] >> 16) as u16);
                o[Q] = math::pack_bf16x2(lo, hi);
            });
            *dst.add(c as usize) = o;
            c += regs::ntid();
        }
    }
}
