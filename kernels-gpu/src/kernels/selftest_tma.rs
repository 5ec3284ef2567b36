//! Copy-engine self-tests: tensor-map boxes (2D and 3D) and contiguous bulk copies, global -> shared -> global,
//! with the raw shared-memory tile dumped so the host can check the swizzle.
use crate::params::{TmaMcTest, TmaRowsTest, TmaTest};
use crate::ptx::{cluster, fence, mbarrier, regs, smem, sync, tma};

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

/// Bytes of the row-gather test's tile: 128 rows x 128 bytes.
const ROWS_TILE: u32 = 128 * 128;

/// Row gather by TMA (one block of 128 threads; shared memory: the 16 KiB tile at the 1024-byte aligned base, then
/// three mbarriers). Three phases into the same tile, each dumped to `smem_dump[phase]`, each timed by thread 0
/// from before the first issue to the end of its wait: (0) thread t loads row `rows[t]` as a one-row box at
/// tile + 128 t; (1) thread 0 issues all 128 of them; (2) thread 0 loads rows 0..128 as one 128-row box. The
/// 128-byte swizzle is a function of the shared-memory address (chunk c of the 128 bytes at tile + 128 t lands at
/// chunk c ^ (t % 8) when the tile is 1024-byte aligned), so the one-row boxes should leave exactly the layout the
/// 128-row box leaves: the host checks all three dumps.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_tma_rows(p: TmaRowsTest) {
    let tile = smem::base();
    let bar = tile + ROWS_TILE;
    let t = regs::tid();
    if t == 0 {
        let mut i = 0;
        while i < 3 {
            mbarrier::init(bar + 8 * i, 1);
            i += 1;
        }
        fence::mbarrier_init();
        tma::prefetch_tensormap(p.map_row as *const u8);
        tma::prefetch_tensormap(p.map_tile as *const u8);
    }
    sync::block_sync();
    let rows = p.rows as *const u32;
    let cycles = p.cycles as *mut u64;
    let col = p.col0 as i32;
    let mut phase = 0;
    while phase < 3 {
        let b = bar + 8 * phase;
        let start = regs::clock64();
        if t == 0 {
            mbarrier::arrive_expect_tx(b, ROWS_TILE);
        }
        if phase == 0 {
            // expect_tx before any complete_tx of this phase: the others issue after the barrier below
            sync::block_sync();
            tma::load_2d(tile + 128 * t, p.map_row as *const u8, col, *rows.add(t as usize) as i32, b);
        } else if t == 0 {
            if phase == 1 {
                let mut r = 0;
                while r < 128 {
                    tma::load_2d(tile + 128 * r, p.map_row as *const u8, col, *rows.add(r as usize) as i32, b);
                    r += 1;
                }
            } else {
                tma::load_2d(tile, p.map_tile as *const u8, col, 0, b);
            }
        }
        mbarrier::wait_parity(b, 0);
        if t == 0 {
            *cycles.add(phase as usize) = regs::clock64() - start;
        }
        dump_tile(tile, (p.smem_dump as *mut u8).add((phase * ROWS_TILE) as usize) as *mut [u32; 4], ROWS_TILE);
        // the generic-proxy reads of the dump before the next phase's async-proxy writes of the same tile
        fence::proxy_async_shared_cta();
        sync::block_sync();
        phase += 1;
    }
}

/// Multicast (see [`TmaMcTest`]): launched in clusters of 2 CTAs along x (`.reqnctapercluster 2`), 128 threads;
/// shared memory one 16 KiB box + 16. Per box: thread 0 of each CTA expects the box's bytes on its own barrier
/// (the peer's multicast may complete them before: the tx-count goes below zero and the phase waits for the
/// arrival), the box lands (mode 0: each CTA's own load; mode 1: CTA 0's multicast into both), every thread sums
/// its words, and a cluster barrier keeps the next load out of a tile the peer may still read.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_tma_mc(p: TmaMcTest) {
    const BOX: u32 = 128 * 64 * 2;
    let (tile, bar) = setup(BOX);
    // the peer's barrier is initialised before any multicast reaches it
    cluster::sync();
    let (b, t) = (regs::bid(), regs::tid());
    let (rank, pair) = (b % 2, b / 2);
    let mut sum = 0u32;
    let mut i = 0;
    while i < p.iters {
        let row = ((pair * p.iters + i) * 128) as i32;
        if t == 0 {
            mbarrier::arrive_expect_tx(bar, BOX);
            if p.mode == 0 {
                tma::load_2d(tile, p.map_src as *const u8, 0, row, bar);
            } else if rank == 0 {
                tma::load_2d_mc(tile, p.map_src as *const u8, 0, row, bar, 0b11);
            }
        }
        mbarrier::wait_parity(bar, i & 1);
        let mut w = t;
        while w < BOX / 4 {
            sum = sum.wrapping_add(smem::ld_u32(tile + 4 * w));
            w += 128;
        }
        cluster::sync();
        i += 1;
    }
    *(p.sums as *mut u32).add((b * 128 + t) as usize) = sum;
}
