//! Synchronisation self-tests: mbarrier transaction counting, flags between blocks, register reallocation.
use crate::params::{FlagTest, MbarrierTest, STATUS_TIMEOUT};
use crate::ptx::{fence, mbarrier, regs, smem, sync, tma};

/// One block of 128 threads; shared memory 2 * bytes + 16.
///
/// Phase 0: thread 0 records try_wait(parity 1) (true: the phase "before" the first counts as complete) and
/// try_wait(parity 0) (false: nobody has arrived), then arrives with expect_tx(bytes) and issues two bulk
/// copies of bytes / 2; the other 127 threads arrive plainly. All wait on parity 0. Thread 0 records
/// try_wait(0) (true) and try_wait(1) (false).
/// Phase 1: thread 0 announces the bytes with expect_tx (no arrival), issues one copy, then arrives; the others
/// arrive; all wait on parity 1; thread 0 records try_wait(1) (true) and try_wait(0) (false: phase 2 is open).
/// status = [1, 0, 1, 0, 1, 0, 0, 0] when the hardware counts as documented; out = src.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_mbarrier_tx(p: MbarrierTest) {
    let tile = smem::base();
    let bar = tile + 2 * p.bytes;
    let t = regs::tid();
    let st = p.status as *mut u32;
    let src = p.src as *const u8;
    if t == 0 {
        mbarrier::init(bar, 128);
        fence::mbarrier_init();
    }
    sync::block_sync();
    let half = p.bytes / 2;
    if t == 0 {
        *st = mbarrier::try_wait_parity(bar, 1) as u32;
        *st.add(1) = mbarrier::try_wait_parity(bar, 0) as u32;
        mbarrier::arrive_expect_tx(bar, p.bytes);
        tma::load_1d(tile, src, half, bar);
        tma::load_1d(tile + half, src.add(half as usize), half, bar);
    } else {
        mbarrier::arrive(bar);
    }
    mbarrier::wait_parity(bar, 0);
    if t == 0 {
        *st.add(2) = mbarrier::try_wait_parity(bar, 0) as u32;
        *st.add(3) = mbarrier::try_wait_parity(bar, 1) as u32;
        mbarrier::expect_tx(bar, p.bytes);
        tma::load_1d(tile + p.bytes, src.add(p.bytes as usize), p.bytes, bar);
    }
    mbarrier::arrive(bar);
    mbarrier::wait_parity(bar, 1);
    if t == 0 {
        *st.add(4) = mbarrier::try_wait_parity(bar, 1) as u32;
        *st.add(5) = mbarrier::try_wait_parity(bar, 0) as u32;
        *st.add(6) = 0;
        *st.add(7) = 0;
    }
    let out = p.out as *mut [u32; 4];
    let mut i = t;
    while i < 2 * p.bytes / 16 {
        *out.add(i as usize) = smem::ld_v4(tile + 16 * i);
        i += 128;
    }
}

/// Wait until the acquire load of `flag` (system scope if `sys_scope`, else GPU scope) gives a value >= `want` or `timeout_ns` pass; false on timeout.
#[inline(always)]
unsafe fn wait_at_least(sys_scope: bool, flag: *const u32, want: u32, timeout_ns: u64) -> bool {
    let start = regs::globaltimer();
    loop {
        let v = if sys_scope { sync::ld_acquire_sys(flag) } else { sync::ld_acquire_gpu(flag) };
        if v >= want {
            return true;
        }
        if regs::globaltimer().wrapping_sub(start) > timeout_ns {
            return false;
        }
        sync::nanosleep(64);
    }
}

/// A chain of blocks (grid <= the SM count, so all are resident). Modes 0 and 1: block 0 writes
/// data[0][i] = i + 1; block b > 0 waits for flag[b - 1] (ld.acquire at gpu / sys scope), then writes
/// data[b][i] = data[b - 1][i] + b, then releases flag[b] (st.release). Mode 2: every block b > 0 writes
/// data[b][i] = b * words + i and adds 1 to the counter with red.release.gpu; block 0 waits for the counter
/// to reach blocks - 1 and writes data[0][i] = sum over b > 0 of data[b][i]. A wait that passes timeout_ns sets
/// status[b] = STATUS_TIMEOUT and the block carries on (writing zeros), so the launch always ends. With bit 8
/// of the mode set, block 0 never releases its flag (the fault test).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_flags(p: FlagTest) {
    let b = regs::bid();
    let nb = regs::nctaid();
    let t = regs::tid();
    let flags = p.flags as *mut u32;
    let data = p.data as *mut u32;
    let ok_s = smem::base();
    let w = p.words;
    let mode = p.mode & 0xff;
    let withhold = p.mode & 0x100 != 0;
    if mode < 2 {
        if t == 0 {
            let mut ok = true;
            if b > 0 {
                ok = wait_at_least(mode == 1, flags.add(b as usize - 1), 1, p.timeout_ns);
            }
            smem::st_u32(ok_s, ok as u32);
            if !ok {
                *(p.status as *mut u32).add(b as usize) = STATUS_TIMEOUT;
            }
        }
        sync::block_sync();
        let ok = smem::ld_u32(ok_s) != 0;
        let mut i = t;
        while i < w {
            let v = if b == 0 {
                i + 1
            } else if ok {
                *data.add(((b - 1) * w + i) as usize) + b
            } else {
                0
            };
            *data.add((b * w + i) as usize) = v;
            i += regs::ntid();
        }
        sync::block_sync();
        if t == 0 && !(withhold && b == 0) {
            if mode == 0 {
                sync::st_release_gpu(flags.add(b as usize), 1);
            } else {
                sync::st_release_sys(flags.add(b as usize), 1);
            }
        }
    } else if b > 0 {
        let mut i = t;
        while i < w {
            *data.add((b * w + i) as usize) = b * w + i;
            i += regs::ntid();
        }
        sync::block_sync();
        if t == 0 {
            sync::red_release_gpu(p.counter as *mut u32, 1);
        }
    } else {
        if t == 0 {
            let ok = wait_at_least(false, p.counter as *const u32, nb - 1, p.timeout_ns);
            if !ok {
                *(p.status as *mut u32) = STATUS_TIMEOUT;
            }
        }
        sync::block_sync();
        let mut i = t;
        while i < w {
            let mut s = 0u32;
            let mut bb = 1;
            while bb < nb {
                s = s.wrapping_add(*data.add((bb * w + i) as usize));
                bb += 1;
            }
            *data.add(i as usize) = s;
            i += regs::ntid();
        }
    }
}

/// Three warpgroups (384 threads): warpgroup 0 gives registers back (setmaxnreg.dec 40), warpgroups 1 and 2
/// take them (setmaxnreg.inc 232), as a producer / two-consumer kernel does; then every thread writes
/// out[tid] = tid * 3 + warpgroup. Runs only if the kernel carries a register cap (`.maxntid 384`).
#[no_mangle]
pub unsafe extern "ptx-kernel" fn selftest_setmaxnreg(out: *mut u32) {
    let t = regs::tid();
    let wg = t / 128;
    if wg == 0 {
        regs::setmaxnreg_dec::<40>();
    } else {
        regs::setmaxnreg_inc::<232>();
    }
    *out.add(t as usize) = t * 3 + wg;
}
