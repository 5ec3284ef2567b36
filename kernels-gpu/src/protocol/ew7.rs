//! The epilogue-warp kernels: `grouped_gemm_bt_dswiglu_ew7` (and `_ew`, kernels/grouped_gemm_dswiglu_ew.rs) and
//! `grouped_gemm_swiglu_ew7` (`_ew7_mv`, kernels/grouped_gemm_swiglu_ew.rs). `setup`: a ring of `S_` stages
//! (`ring.init(8)`: one producer arrival plus the bytes, one arrival per consumer warp), the dh (z) tile's `full`
//! mbarrier (256 arrivals: every consumer thread) and `empty` (32 per epilogue warp: every lane). Thread 0 produces
//! (`produce_bt`, or swiglu_ew.rs `produce`: the same ring protocol, 3 or 2 + 1 boxes a stage); the consumer
//! warpgroups run `consume`: `mainloop_coop`, then wait on `empty` with parity (handed & 1) ^ 1 (the epilogue
//! warps' phase handed - 1), write their rows of the tile (each thread its own), arrive on `full`; the `EW`
//! epilogue warps run `epilogue` (both files): wait on `full` with parity taken & 1, read the tile, every lane
//! arrives on `empty`. All roles walk the same tiles (`walk::<0>`).
//!
//! Kernels: `_ew7` (S 4, EW 7), `_ew` (S 3, EW 3), swiglu `_ew7` (S 4, EW 7), `_ew7_mv` (S 4, EW 4) and
//! `_ew7_gather` (S 4, EW 4, `Ew::gather`: the producer warpgroup's four warps, see `model`), and dswiglu
//! `_ew7_gather` (the same protocol: `produce_gather` is shared, its B boxes by a closure; the write-out of the
//! gathered rows waits on each thread's own `cp.async` groups and touches global memory only). The
//! epilogue warps store to global memory from registers (no staging, no bulk groups); the `_mv` movers and the
//! producer's per-m-tile wait on their counts touch global memory only and are left out.
//!
//! The `_dyn` forms (`Ew::queue` = Q slots, kernels/grouped_gemm.rs `Tiles`): the roles learn each tile from the
//! producer through a `TileQueue` instead of walking on their own. Before each tile's loads, and once more for the
//! end, the producer waits on slot j % Q's `empty` (parity ((j / Q) & 1) ^ 1: the pops of index j - Q), writes the
//! slot and arrives on its `full` (one arrival); before each tile's work, and once more for the end, every
//! consumer and epilogue warp waits on `full` (parity (j / Q) & 1), reads the slot and arrives on `empty` with
//! every lane (`pop_each_lane`; `empty` counts 32 per warp). Which tile an index names (the counter's) does not
//! change the protocol: every role sees the same count of indices.
use super::{assert_fails, assert_ok, mainloop_coop, Kind, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// A block's work: ring stages, epilogue warps, tiles and k-steps per tile; `warps`: the consumer warps run the
/// main loop and their dh stores on their own (else each warpgroup's four in lock step, one actor).
#[derive(Clone, Debug)]
pub struct Ew {
    pub s: u32,
    pub ew: u32,
    pub tiles: u32,
    pub kt_n: u32,
    pub warps: bool,
    /// The `_dyn` forms' queue slots (0: the static walk, no queue).
    pub queue: u32,
    /// The gathering producer (`grouped_gemm_swiglu_ew7_gather[_dyn]`, `grouped_gemm_bt_dswiglu_ew7_gather[_dyn]`):
    /// the producer warpgroup's four warps, A by
    /// `cp.async`, the tile broadcast from thread 0 through shared memory.
    pub gather: bool,
    /// With `gather`: the look-ahead hand-off (`GEMM_GATHER_AHEAD`): two buffers of row tokens and two tile slots,
    /// tile j + 1 taken at tile j's start, read after a barrier at k-step kt_n / 2, its tokens written at tile j's
    /// end before the tile's one other barrier.
    pub ahead: bool,
}

/// Changes to the kernels' protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// `setup` initialises `empty` for one epilogue warp fewer.
    EmptyOneWarpShort,
    /// `setup` initialises `full` for one consumer warpgroup's 128 threads.
    FullOneWarpgroup,
    /// `consume` writes the tile without waiting on `empty`.
    NoEmptyWait,
    /// `epilogue` arrives on `empty` before its reads of the tile.
    ArriveBeforeReads,
    /// `consume`'s wait on `empty` with parity handed & 1 (the phase it is about to fill, not the last one).
    EmptyParity,
    /// `setup` initialises the queue's `empty` for one epilogue warp fewer.
    QueueOneWarpShort,
    /// The producer writes a slot without waiting on its `empty`.
    QueueNoEmptyWait,
    /// The gathering producer without named barrier 1 before the row tokens' stores (after the tile's read).
    GatherNoSyncBefore,
    /// The gathering producer without named barrier 1 after them.
    GatherNoSyncAfter,
    /// `setup`'s `init_with(128, ..)` for the gathering producer (its TMA thread's arrival not counted).
    GatherFullCount128,
    /// The look-ahead hand-off with one buffer of row tokens (the next tile's written into the one being read).
    AheadOneBuffer,
    /// The look-ahead hand-off without the barrier at k-step kt_n / 2 (the next tile read as thread 0 writes it).
    AheadNoMidSync,
}

/// The model of `c` (see the module): grouped_gemm_dswiglu_ew.rs `setup`, `produce_bt`, `consume`, `epilogue`
/// (grouped_gemm_swiglu_ew.rs `body`, `produce`, `epilogue`: the same protocol).
pub fn model(c: &Ew, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("ew {c:?} {mutation:?}"));
    // the gathering producer's stages: A's rows by the producer warps' `cp.async` (each warp its own rows:
    // partitioned), B by TMA; `full` counts the TMA thread's arrival and each gathering thread's (`noinc`)
    let parts: Vec<(super::Mask, super::Mask)> = if c.gather {
        (0..c.s).map(|i| (m.region(&format!("stage{i}.A"), true), m.region(&format!("stage{i}.B"), false))).collect()
    } else {
        Vec::new()
    };
    let ring = if c.gather {
        let full = if mutation == Mutation::GatherFullCount128 { 128 } else { 1 + 128 };
        Ring::with_stages(&mut m, c.s, full, 8, parts.iter().map(|(a, b)| a | b).collect())
    } else {
        Ring::new(&mut m, c.s, 1, 8)
    };
    if mutation == Mutation::GatherFullCount128 {
        for b in 0..m.mbars.len() {
            m.mbars[b].leftover_ok = true;
        }
    }
    let full = m.mbar("dh.full", if mutation == Mutation::FullOneWarpgroup { 128 } else { 256 });
    let ew_count = if mutation == Mutation::EmptyOneWarpShort { c.ew - 1 } else { c.ew };
    let empty = m.mbar("dh.empty", 32 * ew_count);
    if mutation == Mutation::EmptyOneWarpShort || mutation == Mutation::FullOneWarpgroup {
        m.mbars[full as usize].leftover_ok = true;
        m.mbars[empty as usize].leftover_ok = true;
    }
    // the dh tile: each consumer thread writes its own rows (partitioned among the consumers, team 1)
    let dh = m.region("dh", true);
    // stage bytes: A 128 x 64 + B 64 K x BN (192: `_ew7`, 40 KiB)
    let bytes = (128 + 192) * 64 * 2;
    // the `_dyn` queue: per slot `full` (the producer's one arrival), `empty` (every lane of the popping warps),
    // the slot's bytes
    let q_warps = if mutation == Mutation::QueueOneWarpShort { 8 + c.ew - 1 } else { 8 + c.ew };
    let slots: Vec<(u8, u8, super::Mask)> = (0..c.queue)
        .map(|s| {
            (
                m.mbar(&format!("q.full{s}"), 1),
                m.mbar(&format!("q.empty{s}"), 32 * q_warps),
                m.region(&format!("q{s}"), false),
            )
        })
        .collect();
    if mutation == Mutation::QueueOneWarpShort {
        for &(_, e, _) in &slots {
            m.mbars[e as usize].leftover_ok = true;
        }
    }
    let q = c.queue.max(1);
    let push = |j: u32| -> Vec<Op> {
        if c.queue == 0 {
            return Vec::new();
        }
        let (full, empty, slot) = slots[(j % q) as usize];
        let k = j / q;
        let mut ops = Vec::new();
        if mutation != Mutation::QueueNoEmptyWait {
            ops.push(Op::Wait { bar: empty, parity: ((k & 1) ^ 1) as u8, phase: k as i64 - 1 });
        }
        ops.extend([Op::BeginWrite(slot), Op::EndWrite(slot), Op::Arrive { bar: full, count: 1, phase: k as i64 }]);
        ops
    };
    // a popping actor of `lanes` lanes (a warp: 32; a warpgroup in lock step: 128)
    let pop = |j: u32, lanes: u32| -> Vec<Op> {
        if c.queue == 0 {
            return Vec::new();
        }
        let (full, empty, slot) = slots[(j % q) as usize];
        let k = j / q;
        std::vec![
            Op::Wait { bar: full, parity: (k & 1) as u8, phase: k as i64 },
            Op::BeginRead(slot),
            Op::EndRead(slot),
            Op::Arrive { bar: empty, count: lanes, phase: k as i64 },
        ]
    };

    if c.gather && c.ahead {
        // grouped_gemm_dswiglu_ew.rs `produce_gather` with GEMM_GATHER_AHEAD, per warp of the producer warpgroup:
        // thread 0 takes tile 0 into slot 0, barrier, every thread reads it and its row's token into buffer 0,
        // barrier; per tile j: thread 0 takes tile j + 1 (the `_dyn` push) into slot (j + 1) % 2; the k-steps from
        // buffer j % 2 with, before k-step kt_n / 2's, a barrier and every thread's read of slot (j + 1) % 2; then
        // (unless tile j was the last) every thread's token of tile j + 1 into buffer (j + 1) % 2; barrier
        let one = mutation == Mutation::AheadOneBuffer;
        let toks = [m.region("row tokens 0", true), m.region("row tokens 1", true)];
        let slot = [m.region("tile 0", false), m.region("tile 1", false)];
        let bar1 = m.named_bar("bar 1");
        let b_bytes: i64 = 192 * 64 * 2;
        let buf = |j: u32| if one { 0 } else { (j % 2) as usize };
        for w in 0..4 {
            let mut ops = Vec::new();
            let mut it = 0;
            if w == 0 {
                ops.extend(push(0));
                ops.extend([Op::BeginWrite(slot[0]), Op::EndWrite(slot[0])]);
            }
            ops.push(Op::Sync { id: bar1, warps: 4 });
            ops.extend([Op::BeginRead(slot[0]), Op::EndRead(slot[0])]);
            if c.tiles > 0 {
                ops.extend([Op::BeginWrite(toks[0]), Op::EndWrite(toks[0])]);
            }
            ops.push(Op::Sync { id: bar1, warps: 4 });
            for j in 0..c.tiles {
                let next = ((j + 1) % 2) as usize;
                if w == 0 {
                    ops.extend(push(j + 1));
                    ops.extend([Op::BeginWrite(slot[next]), Op::EndWrite(slot[next])]);
                }
                for kt in 0..c.kt_n {
                    if kt == c.kt_n / 2 {
                        if mutation != Mutation::AheadNoMidSync {
                            ops.push(Op::Sync { id: bar1, warps: 4 });
                        }
                        ops.extend([Op::BeginRead(slot[next]), Op::EndRead(slot[next])]);
                    }
                    ops.extend(ring.gather_step(it, w, b_bytes, &parts, toks[buf(j)]));
                    it += 1;
                }
                if j + 1 < c.tiles {
                    ops.extend([Op::BeginWrite(toks[buf(j + 1)]), Op::EndWrite(toks[buf(j + 1)])]);
                }
                ops.push(Op::Sync { id: bar1, warps: 4 });
            }
            m.actor(&format!("producer.warp{w}"), 3, ops);
        }
    } else if c.gather {
        // grouped_gemm_swiglu_ew.rs `produce_gather`, per warp of the producer warpgroup: per tile (and once more
        // for the end) thread 0 takes the tile (the `_dyn` forms: its push into the queue) and writes it into
        // shared memory, named barrier 1, every thread reads it; then each thread's row token into shared memory,
        // named barrier 1; per k-step every thread's `ring.wait_empty`, thread 0's arrive.expect_tx(B) and B's TMA
        // loads, each thread's token reads and `cp.async` copies of A and its `noinc` arrival (32 a warp)
        let toks = m.region("row tokens", true);
        let slot = m.region("tile", false);
        let bar1 = m.named_bar("bar 1");
        let b_bytes: i64 = 192 * 64 * 2;
        for w in 0..4 {
            let mut ops = Vec::new();
            let mut it = 0;
            for j in 0..=c.tiles {
                if w == 0 {
                    ops.extend(push(j));
                    ops.extend([Op::BeginWrite(slot), Op::EndWrite(slot)]);
                }
                ops.push(Op::Sync { id: bar1, warps: 4 });
                ops.extend([Op::BeginRead(slot), Op::EndRead(slot)]);
                if j == c.tiles {
                    break;
                }
                if mutation == Mutation::GatherNoSyncBefore {
                    // the tokens written before the barrier that orders the last tile's reads of them
                    let n = ops.len();
                    ops.truncate(n - 3);
                    ops.extend([Op::BeginWrite(toks), Op::EndWrite(toks)]);
                    ops.push(Op::Sync { id: bar1, warps: 4 });
                    ops.extend([Op::BeginRead(slot), Op::EndRead(slot)]);
                } else {
                    ops.extend([Op::BeginWrite(toks), Op::EndWrite(toks)]);
                }
                if mutation != Mutation::GatherNoSyncAfter {
                    ops.push(Op::Sync { id: bar1, warps: 4 });
                }
                for _ in 0..c.kt_n {
                    ops.extend(ring.gather_step(it, w, b_bytes, &parts, toks));
                    it += 1;
                }
            }
            m.actor(&format!("producer.warp{w}"), 3, ops);
        }
    } else {
        let mut p = Vec::new();
        for j in 0..c.tiles {
            p.extend(push(j));
            for it in j * c.kt_n..(j + 1) * c.kt_n {
                p.extend(ring.produce(it, bytes));
            }
        }
        p.extend(push(c.tiles));
        m.actor("producer", 0, p);
    }

    // `consume`: per warp (32 arrivals on `full`) or per warpgroup in lock step (128 arrivals, 4 releases)
    let (actors, warps) = if c.warps { (4, 1) } else { (1, 4) };
    for cw in 0..2 {
        let mut ops = Vec::new();
        let mut it = 0;
        for handed in 0..c.tiles {
            ops.extend(pop(handed, 32 * warps));
            mainloop_coop(&ring, &mut it, c.kt_n, warps, &mut ops);
            let parity = ((handed & 1) ^ 1) ^ (mutation == Mutation::EmptyParity) as u32;
            if mutation != Mutation::NoEmptyWait {
                ops.push(Op::Wait { bar: empty, parity: parity as u8, phase: handed as i64 - 1 });
            }
            ops.extend([Op::BeginWrite(dh), Op::EndWrite(dh)]);
            ops.push(Op::Arrive { bar: full, count: 32 * warps, phase: handed as i64 });
        }
        ops.extend(pop(c.tiles, 32 * warps));
        for w in 0..actors {
            let name = if c.warps { format!("wg{cw}.warp{w}") } else { format!("wg{cw}") };
            m.actor(&name, 1, ops.clone());
        }
    }

    // `epilogue`: every warp the same program (interchangeable)
    let mut e = Vec::new();
    for taken in 0..c.tiles {
        e.extend(pop(taken, 32));
        e.push(Op::Wait { bar: full, parity: (taken & 1) as u8, phase: taken as i64 });
        let arrive = Op::Arrive { bar: empty, count: 32, phase: taken as i64 };
        if mutation == Mutation::ArriveBeforeReads {
            e.extend([Op::BeginRead(dh), arrive, Op::EndRead(dh)]);
        } else {
            e.extend([Op::BeginRead(dh), Op::EndRead(dh), arrive]);
        }
    }
    e.extend(pop(c.tiles, 32));
    for w in 0..c.ew {
        m.actor(&format!("epilogue{w}"), 2, e.clone());
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;

    /// The four kernels' (S, EW) and S 2, 0..4 tiles of 1..5 k-steps, consumer warpgroups in lock step.
    #[test]
    fn ew_lockstep() {
        let mut states = 0;
        for (s, ew) in [(4, 7), (3, 3), (4, 4), (2, 7)] {
            for tiles in 0..=4 {
                for kt_n in 1..=5 {
                    states += assert_ok(&model(
                        &Ew { s, ew, tiles, kt_n, warps: false, queue: 0, gather: false, ahead: false },
                        Mutation::None,
                    ));
                }
            }
        }
        println!("ew, lock step: {states} states");
    }

    /// Every consumer warp on its own: small parameters.
    #[test]
    fn ew_warps() {
        let mut states = 0;
        for (s, ew, tiles, kt_n) in
            [(4, 7, 2, 1), (4, 7, 3, 2), (4, 7, 2, 4), (2, 3, 4, 1), (3, 3, 3, 2), (2, 2, 3, 3), (4, 4, 2, 5)]
        {
            states += assert_ok(&model(
                &Ew { s, ew, tiles, kt_n, warps: true, queue: 0, gather: false, ahead: false },
                Mutation::None,
            ));
        }
        println!("ew, per warp: {states} states");
    }

    #[test]
    fn ew_mutations() {
        let c = |tiles, warps| Ew { s: 4, ew: 3, tiles, kt_n: 1, warps, queue: 0, gather: false, ahead: false };
        for warps in [false, true] {
            let v = assert_fails(&model(&c(2, warps), Mutation::NoEmptyWait), Kind::Race);
            assert!(v.what.contains("writes dh"), "{v}");
            assert_fails(&model(&c(2, warps), Mutation::ArriveBeforeReads), Kind::Race);
            assert_fails(&model(&c(1, warps), Mutation::FullOneWarpgroup), Kind::Race);
            assert_fails(&model(&c(2, warps), Mutation::EmptyOneWarpShort), Kind::Race);
            // the first wait (parity 0 in phase 0) blocks though its phase (-1) is long done: it never passes
            let v = assert_fails(&model(&c(1, warps), Mutation::EmptyParity), Kind::Aliasing);
            assert!(v.what.contains("missed its phase"), "{v}");
        }
        // one tile: the wait on `empty` is for phase -1 (it passes at once), so leaving it out changes nothing;
        // the short count shows anyway (the last warp's arrival lands in the next phase)
        assert_ok(&model(&c(1, false), Mutation::NoEmptyWait));
        let v = assert_fails(&model(&c(1, false), Mutation::EmptyOneWarpShort), Kind::Aliasing);
        assert!(v.what.contains("dh.empty meant for phase 0 lands in phase 1"), "{v}");
    }

    /// The `_dyn` forms: the kernels' queue (4 slots) and tighter ones (1, 2), tiles past the slots, consumer
    /// warpgroups in lock step and (small) every warp on its own (the state count grows fast: ~30 s in release
    /// at 14 M states with one more of each).
    #[test]
    fn ew_dyn_queue() {
        let mut states = 0;
        for (s, ew, queue) in [(4, 7, 4), (3, 3, 2), (2, 3, 1)] {
            for tiles in 0..=4 {
                for kt_n in 1..=2 {
                    states += assert_ok(&model(
                        &Ew { s, ew, tiles, kt_n, warps: false, queue, gather: false, ahead: false },
                        Mutation::None,
                    ));
                }
            }
        }
        for (s, ew, tiles, kt_n, queue) in [(2, 2, 3, 1, 1), (3, 2, 2, 1, 2)] {
            states += assert_ok(&model(
                &Ew { s, ew, tiles, kt_n, warps: true, queue, gather: false, ahead: false },
                Mutation::None,
            ));
        }
        std::println!("ew, run-time walk: {states} states");
    }

    /// The gathering producer (`_ew7_gather`: S 4, EW 4; and S 2): the static walk (0..3 tiles of 1..3 k-steps) and
    /// the `_dyn` queue (1 or 2 slots, 0..2 tiles of 1..2 k-steps), consumer warpgroups in lock step; each with the
    /// tile hand-off in series and ahead.
    #[test]
    fn ew_gather() {
        let mut states = 0;
        for (s, ew, queue, max_tiles, max_kt) in [(4, 4, 0, 3, 3), (2, 4, 0, 3, 3), (2, 2, 1, 2, 2), (3, 2, 2, 2, 2)] {
            for (tiles, ahead) in (0..=max_tiles).flat_map(|t| [(t, false), (t, true)]) {
                // the look-ahead form's 3 tiles of 3 k-steps at 4 stages pass the checker's 5 M states
                for kt_n in (1..=max_kt).filter(|&k| !(ahead && s == 4 && tiles == 3 && k == 3)) {
                    let c = Ew { s, ew, tiles, kt_n, warps: false, queue, gather: true, ahead };
                    states += assert_ok(&model(&c, Mutation::None));
                }
            }
        }
        std::println!("ew, gathering producer: {states} states");
    }

    #[test]
    fn ew_gather_mutations() {
        let c = |tiles, queue| Ew { s: 2, ew: 2, tiles, kt_n: 1, warps: false, queue, gather: true, ahead: false };
        for queue in [0, 1] {
            let v = assert_fails(&model(&c(2, queue), Mutation::GatherNoSyncBefore), Kind::Race);
            assert!(v.what.contains("row tokens"), "{v}");
            // (the second barrier also orders every thread's read of the tile before thread 0 writes the next)
            let v = assert_fails(&model(&c(1, queue), Mutation::GatherNoSyncAfter), Kind::Race);
            assert!(v.what.contains("row tokens") || v.what.contains("writes tile"), "{v}");
            // the 129th arrival (the last warp's copies) overflows a phase of 128
            assert_fails(&model(&c(1, queue), Mutation::GatherFullCount128), Kind::Overflow);
        }
    }

    #[test]
    fn ew_gather_ahead_mutations() {
        let c = |tiles, kt_n, queue| Ew { s: 2, ew: 2, tiles, kt_n, warps: false, queue, gather: true, ahead: true };
        for queue in [0, 1] {
            let v = assert_fails(&model(&c(2, 2, queue), Mutation::AheadOneBuffer), Kind::Race);
            assert!(v.what.contains("row tokens"), "{v}");
            let v = assert_fails(&model(&c(2, 1, queue), Mutation::AheadNoMidSync), Kind::Race);
            assert!(v.what.contains("tile"), "{v}");
        }
    }

    #[test]
    fn ew_dyn_queue_mutations() {
        let c = |tiles, queue| Ew { s: 3, ew: 3, tiles, kt_n: 1, warps: false, queue, gather: false, ahead: false };
        let v = assert_fails(&model(&c(3, 1), Mutation::QueueNoEmptyWait), Kind::Race);
        assert!(v.what.contains("q0"), "{v}");
        assert_fails(&model(&c(3, 2), Mutation::QueueOneWarpShort), Kind::Aliasing);
    }
}
