//! ldmatrix / stmatrix self-test: the fragment layouts, plain and transposed (`ptx::warp`).
use crate::params::MatrixTest;
use crate::ptx::{regs, smem, sync, warp};

/// One warp, 1536 bytes of dynamic shared memory (three 512-byte regions). Lane l addresses row l % 8 of matrix
/// l / 8 (16 bytes at 128 (l / 8) + 16 (l % 8) of a region). Region 0: stmatrix.x4 of the lane's registers
/// regs[4 l..]; region 1: the same with .trans; region 2: `mem`, loaded back by ldmatrix.x4 and ldmatrix.x4.trans.
/// out: regions 0 and 1 (128 words each), then the two loads' registers (lane l's at 4 l).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_matrix(p: MatrixTest) {
    let base = smem::base();
    let l = regs::tid() % 32;
    let at = 128 * (l / 8) + 16 * (l % 8);
    let src = p.regs as *const u32;
    let v = [
        *src.add(4 * l as usize),
        *src.add(4 * l as usize + 1),
        *src.add(4 * l as usize + 2),
        *src.add(4 * l as usize + 3),
    ];
    warp::stmatrix_x4(base + at, v);
    warp::stmatrix_x4_trans(base + 512 + at, v);
    smem::st_v4(base + 1024 + 16 * l, *(p.mem as *const [u32; 4]).add(l as usize));
    sync::block_sync();
    let a = warp::ldmatrix_x4(base + 1024 + at);
    let b = warp::ldmatrix_x4_trans(base + 1024 + at);
    let out = p.out as *mut u32;
    crate::unroll!(J in [0, 1, 2, 3] {
        let w = 4 * l as usize + J;
        *out.add(w) = smem::ld_u32(base + 4 * w as u32);
        *out.add(128 + w) = smem::ld_u32(base + 512 + 4 * w as u32);
        *out.add(256 + w) = a[J];
        *out.add(384 + w) = b[J];
    });
}
