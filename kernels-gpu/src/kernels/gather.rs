//! Row gather into expert order: dst[r] = src[row_slot[r] / k] (16-byte loads and stores).
use crate::params::Gather;
use crate::ptx::{global, regs};

/// One block per possible row (grid = slots); blocks past offsets[E] return. 128 threads.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn gather_rows(p: Gather) {
    crate::kernels::pdl_entry();
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
    while c < chunks {
        global::st_v4(dst.add(c as usize), global::ld_v4(src.add(c as usize)));
        c += regs::ntid();
    }
}
