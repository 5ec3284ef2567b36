//! The per-expert tensor maps of the K-grouped weight gradients (`wgrad_expert_maps`): each expert's rows of A
//! and B as a tensor map of their own, so the copy engine reads zeros past an expert's last row (the whole-buffer
//! maps would read the next expert's rows there, which the consumers then had to zero in shared memory). One
//! thread a map: a copy of the whole-buffer template, pointed at the expert's first row with the expert's rows,
//! both clamped to the buffers' `rows_max` (so a map never reaches past A or B whatever the offsets hold).
use crate::kernels::routing_failed;
use crate::params::WgradMaps;
use crate::ptx::{regs, tma};

const THREADS: u32 = crate::kernels_host::WGRAD_MAPS_THREADS;

/// Grid: ceil(2 E / THREADS) blocks of THREADS threads. Thread i writes map i = (expert i / 2, operand i % 2).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn wgrad_expert_maps(p: WgradMaps) {
    crate::kernels::pdl_entry();
    // the weight gradient returns at entry on the same word, reading none of these maps
    if routing_failed(p.error) {
        return;
    }
    let i = regs::bid() * THREADS + regs::tid();
    if i >= 2 * p.experts {
        return;
    }
    let e = (i / 2) as usize;
    // operand by selection, not by a run-time index into the parameter arrays (that copies them to the stack)
    let (template, base, row_bytes) = if i % 2 == 0 {
        (p.template[0], p.base[0], p.row_bytes[0])
    } else {
        (p.template[1], p.base[1], p.row_bytes[1])
    };
    let off = p.offsets as *const u32;
    // the expert's rows inside the buffers (as the weight gradient's tiles take them), whatever the offsets say
    let (r0, r1) = crate::kernels::grouped_wgrad::expert_rows(*off.add(e), *off.add(e + 1), p.rows_max);
    let src = template as *const u128;
    let dst = (p.out as *mut u128).add(i as usize * 8);
    let mut w = 0;
    while w < 8 {
        *dst.add(w) = *src.add(w);
        w += 1;
    }
    let map = dst as *mut u8;
    tma::tensormap_set_address(map, base + r0 as u64 * row_bytes as u64);
    // an extent of 0 is not a valid map; an expert without rows has no tiles that load
    tma::tensormap_set_rows(map, (r1 - r0).max(1));
    tma::tensormap_release();
}
