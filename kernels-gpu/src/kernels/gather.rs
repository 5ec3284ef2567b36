//! Row gather into expert order: dst[r] = src[row_slot[r] / k] (16-byte loads and stores).
use crate::params::Gather;
use crate::ptx::{global, regs};
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
