//! Copy-engine self-tests: tensor-map boxes (2D and 3D) and contiguous bulk copies, global -> shared -> global,
//! with the raw shared-memory tile dumped so the host can check the swizzle.
use crate::params::TmaTest;
use crate::ptx::{fence, mbarrier, regs, smem, sync, tma};

/// Shared memory: the box (1024-byte aligned at the base), then the mbarrier.
#[inline(always)]
unsafe fn setup(box_bytes: u32) -> (u32, u32) {
    let tile = smem::base();
    let bar = tile + ((box_bytes + 15) & !15);
    if regs::tid() == 0 {
        mbarrier::init(bar, 1);
        fence::mbarrier_init();
    }
    sync::block_sync();
    (tile, bar)
}

/// Every thread copies the raw tile into `dump` (16 bytes a step).
#[inline(always)]
unsafe fn dump_tile(tile: u32, dump: *mut [u32; 4], box_bytes: u32) {
    let mut i = regs::tid();
    while i < box_bytes / 16 {
        *dump.add(i as usize) = smem::ld_v4(tile + 16 * i);
        i += regs::ntid();
    }
}

/// Block b's box coordinates (elements), boxes numbered innermost first.
#[inline(always)]
fn box_coords(p: &TmaTest) -> [i32; 3] {
    let b = regs::bid();
    let x = b % p.boxes[0];
    let y = (b / p.boxes[0]) % p.boxes[1];
    let z = b / (p.boxes[0] * p.boxes[1]);
    [(x * p.box_dims[0]) as i32, (y * p.box_dims[1]) as i32, (z * p.box_dims[2]) as i32]
}

/// 2D: one box per block, load by TMA, dump, store by TMA. 128 threads; shared memory box_bytes + 16.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_tma_2d(p: TmaTest) {
    let (tile, bar) = setup(p.box_bytes);
    let c = box_coords(&p);
    if regs::tid() == 0 {
        tma::prefetch_tensormap(p.map_src as *const u8);
        mbarrier::arrive_expect_tx(bar, p.box_bytes);
        tma::load_2d(tile, p.map_src as *const u8, c[0], c[1], bar);
    }
    mbarrier::wait_parity(bar, 0);
    dump_tile(tile, (p.smem_dump as *mut u8).add((regs::bid() * p.box_bytes) as usize) as *mut [u32; 4], p.box_bytes);
    if regs::tid() == 0 {
        tma::store_2d(p.map_dst as *const u8, c[0], c[1], tile);
        tma::commit_group();
        tma::wait_group::<0>();
    }
}

/// 3D: as [`selftest_tma_2d`] with a 3D map.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_tma_3d(p: TmaTest) {
    let (tile, bar) = setup(p.box_bytes);
    let c = box_coords(&p);
    if regs::tid() == 0 {
        tma::prefetch_tensormap(p.map_src as *const u8);
        mbarrier::arrive_expect_tx(bar, p.box_bytes);
        tma::load_3d(tile, p.map_src as *const u8, c[0], c[1], c[2], bar);
    }
    mbarrier::wait_parity(bar, 0);
    dump_tile(tile, (p.smem_dump as *mut u8).add((regs::bid() * p.box_bytes) as usize) as *mut [u32; 4], p.box_bytes);
    if regs::tid() == 0 {
        tma::store_3d(p.map_dst as *const u8, c[0], c[1], c[2], tile);
        tma::commit_group();
        tma::wait_group::<0>();
    }
}

/// Contiguous bulk copy: block b moves bytes [b * box_bytes, (b + 1) * box_bytes) of `map_src` (a plain
/// pointer here) to `map_dst` through shared memory, after overwriting the tile's first 16 bytes with ordinary
/// stores (published with `fence.proxy.async.shared::cta`), so the store must see the generic-proxy write.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_bulk_1d(p: TmaTest) {
    let (tile, bar) = setup(p.box_bytes);
    let off = (regs::bid() * p.box_bytes) as usize;
    if regs::tid() == 0 {
        mbarrier::arrive_expect_tx(bar, p.box_bytes);
        tma::load_1d(tile, (p.map_src as *const u8).add(off), p.box_bytes, bar);
    }
    mbarrier::wait_parity(bar, 0);
    if regs::tid() == 0 {
        smem::st_v4(tile, [regs::bid(), 0xA5A5_0000, 0x5A5A_0000, !regs::bid()]);
        fence::proxy_async_shared_cta();
    }
    sync::block_sync();
    if regs::tid() == 0 {
        tma::store_1d((p.map_dst as *mut u8).add(off), tile, p.box_bytes);
        tma::commit_group();
        tma::wait_group::<0>();
    }
}
