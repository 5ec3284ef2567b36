//! pipeline.rs's ring and grouped_gemm.rs's cooperative main loop as generators of the models' ops.
use super::{Mask, Model, Op};
use std::format;
use std::vec::Vec;

/// pipeline.rs's `Ring<S>` in a model: per stage a `full` mbarrier (`producer_arrivals`), an `empty` one
/// (`consumer_warps`), and the stage's region; the ops of its methods for iteration `it`.
pub struct Ring {
    pub s: u32,
    pub full: Vec<u8>,
    pub empty: Vec<u8>,
    pub stage: Vec<Mask>,
}

impl Ring {
    /// pipeline.rs `Ring::init_with`.
    pub fn new(m: &mut Model, s: u32, producer_arrivals: u32, consumer_warps: u32) -> Self {
        let stage = (0..s).map(|i| m.region(&format!("stage{i}"), false)).collect();
        Self::with_stages(m, s, producer_arrivals, consumer_warps, stage)
    }
    /// The same with the stages' regions given (a stage of several regions).
    pub fn with_stages(m: &mut Model, s: u32, producer_arrivals: u32, consumer_warps: u32, stage: Vec<Mask>) -> Self {
        Self::named(m, "", s, producer_arrivals, consumer_warps, stage)
    }
    /// The same with the barriers' names prefixed (`cta0.`: a CTA of a cluster).
    pub fn named(
        m: &mut Model,
        pre: &str,
        s: u32,
        producer_arrivals: u32,
        consumer_warps: u32,
        stage: Vec<Mask>,
    ) -> Self {
        let full = (0..s).map(|i| m.mbar(&format!("{pre}full[{i}]"), producer_arrivals)).collect();
        let empty = (0..s).map(|i| m.mbar(&format!("{pre}empty[{i}]"), consumer_warps)).collect();
        Ring { s, full, empty, stage }
    }
    fn st(&self, it: u32) -> usize {
        (it % self.s) as usize
    }
    /// pipeline.rs `Ring::wait_empty`: wait_parity(empty[it % S], ((it / S) & 1) ^ 1), meaning the consumers'
    /// phase it / S - 1 of the stage (their release of iteration it - S) has completed.
    pub fn wait_empty(&self, it: u32) -> Op {
        Op::Wait {
            bar: self.empty[self.st(it)],
            parity: (((it / self.s) & 1) ^ 1) as u8,
            phase: (it / self.s) as i64 - 1,
        }
    }
    /// pipeline.rs `Ring::produce(it, bytes)`: `wait_empty`, then arrive.expect_tx(bytes) on full[it % S]; then
    /// the loads of the stage (one copy event of `bytes`, completing on that barrier).
    pub fn produce(&self, it: u32, bytes: i64) -> [Op; 3] {
        let (st, ph) = (self.st(it), (it / self.s) as i64);
        [
            self.wait_empty(it),
            Op::ArriveTx { bar: self.full[st], bytes, phase: ph },
            Op::Load { bar: self.full[st], bytes, write: self.stage[st], phase: ph },
        ]
    }
    /// A gathering producer warp's k-step `it` (grouped_gemm.rs `produce_gather`, `GatherRows`): `wait_empty`,
    /// warp 0's arrive.expect_tx(`b_bytes`) and B's TMA loads into `parts[stage].1`, the warp's reads of the row
    /// tokens `toks` and its `cp.async` copies into `parts[stage].0` with their 32 `noinc` arrivals.
    pub fn gather_step(&self, it: u32, warp: u32, b_bytes: i64, parts: &[(Mask, Mask)], toks: Mask) -> Vec<Op> {
        let (st, ph) = (self.st(it), (it / self.s) as i64);
        let mut ops = std::vec![self.wait_empty(it)];
        if warp == 0 {
            let fb = self.full[st];
            ops.push(Op::ArriveTx { bar: fb, bytes: b_bytes, phase: ph });
            ops.push(Op::Load { bar: fb, bytes: b_bytes, write: parts[st].1, phase: ph });
        }
        ops.extend([Op::BeginRead(toks), Op::EndRead(toks)]);
        ops.push(Op::CpAsync { bar: self.full[st], count: 32, write: parts[st].0, phase: ph });
        ops
    }
    /// pipeline.rs `Ring::wait_full`: wait_parity(full[it % S], (it / S) & 1), phase it / S.
    pub fn wait_full(&self, it: u32) -> Op {
        Op::Wait { bar: self.full[self.st(it)], parity: ((it / self.s) & 1) as u8, phase: (it / self.s) as i64 }
    }
    /// pipeline.rs `Ring::release_prev(it)` (lane 0 of a consumer warp): arrive on empty[(it + S - 1) % S], the
    /// stage of iteration it - 1, in its phase (it - 1) / S.
    pub fn release_prev(&self, it: u32, warps: u32) -> Op {
        let (bar, phase) =
            (self.empty[((it + self.s - 1) % self.s) as usize], (it as i64 - 1).div_euclid(self.s as i64));
        Op::Arrive { bar, count: warps, phase }
    }
    /// The region of the stage of iteration `it`.
    pub fn region(&self, it: u32) -> Mask {
        self.stage[self.st(it)]
    }
}

/// grouped_gemm.rs `mainloop_coop` (one consumer warp of a cooperative warpgroup) over the `kt_n` stages from
/// iteration `*it`: wait_full, the wgmma's reads of the stage from their issue, `wgmma.wait_group 1` (the previous
/// k-step's wgmma complete: its reads end) and `release(ring, it, lane, kt > 0)`; after the loop `wait_group 0`
/// and `release(ring, it, lane, true)`. `warps`: the consumer warps this actor stands for (1, or a whole
/// warpgroup's 4 in lock step: each of its releases is their 4 arrivals).
pub fn mainloop_coop(ring: &Ring, it: &mut u32, kt_n: u32, warps: u32, ops: &mut Vec<Op>) {
    let mut kt = 0;
    while kt < kt_n {
        ops.push(ring.wait_full(*it));
        ops.push(Op::BeginRead(ring.region(*it)));
        // commit_group; wait_group<1>: the wgmma of iteration it - 1 have read their stage
        if kt > 0 {
            ops.push(Op::EndRead(ring.region(*it - 1)));
            ops.push(ring.release_prev(*it, warps));
        }
        *it += 1;
        kt += 1;
    }
    // wait_group<0>, release(.., true)
    if *it > 0 {
        ops.push(Op::EndRead(ring.region(*it - 1)));
    }
    ops.push(ring.release_prev(*it, warps));
}
