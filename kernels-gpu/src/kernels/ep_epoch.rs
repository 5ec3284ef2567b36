//! The call counter of the expert-parallel layer (docs/EP.md): `ep_epoch_next`, the first launch of every call.
//!
//! The epoch of a call (flags are epoch numbers; waits are `flag >= epoch`; error records carry it) lives on the
//! device, in each rank's workspace (`ep::Workspace::epoch`), not in a kernel parameter, so a CUDA graph that
//! captured a call replays it with a new epoch each time. Invariant: every rank advances its own counter exactly
//! once per call and reads only its own, so ranks that make the same sequence of calls hold equal counters in
//! every call (emulated ranks: one launch advances all R counters, which start at 0 together).
use crate::kernels::ep_common::pick;
use crate::params::{EpEpoch, MAX_RANKS};
use crate::ptx::regs;

/// Threads per block (one block).
pub const THREADS: u32 = 32;

/// The first launch of every expert-parallel call (forward or backward), before any kernel of the call reads the
/// epoch: thread i < `p.ranks` of block 0 adds 1 to counter i (saturating at `u32::MAX`, exhausted: the EP
/// kernels then do nothing, and the host reports it). A separate launch so that every block of the call's
/// dispatch and combine is stream-ordered after the increment. 1 block of 32 threads.
#[no_mangle]
pub unsafe extern "ptx-kernel" fn ep_epoch_next(p: EpEpoch) {
    let t = regs::tid();
    if regs::bid() != 0 || t >= p.ranks || t >= MAX_RANKS as u32 {
        return;
    }
    let c = pick(&p.counter, t) as *mut u32;
    let v = core::ptr::read_volatile(c);
    if v != u32::MAX {
        core::ptr::write_volatile(c, v + 1);
    }
}
