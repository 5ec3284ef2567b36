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
//! Kernels: `_ew7` (S 4, EW 7), `_ew` (S 3, EW 3), swiglu `_ew7` (S 4, EW 7) and `_ew7_mv` (S 4, EW 4). The
//! epilogue warps store to global memory from registers (no staging, no bulk groups); the `_mv` movers and the
//! producer's per-m-tile wait on their counts touch global memory only and are left out.
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
}

/// The model of `c` (see the module): grouped_gemm_dswiglu_ew.rs `setup`, `produce_bt`, `consume`, `epilogue`
/// (grouped_gemm_swiglu_ew.rs `body`, `produce`, `epilogue`: the same protocol).
pub fn model(c: &Ew, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("ew {c:?} {mutation:?}"));
    let ring = Ring::new(&mut m, c.s, 1, 8);
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

    let mut p = Vec::new();
    for it in 0..c.tiles * c.kt_n {
        p.extend(ring.produce(it, bytes));
    }
    m.actor("producer", 0, p);

    // `consume`: per warp (32 arrivals on `full`) or per warpgroup in lock step (128 arrivals, 4 releases)
    let (actors, warps) = if c.warps { (4, 1) } else { (1, 4) };
    for cw in 0..2 {
        let mut ops = Vec::new();
        let mut it = 0;
        for handed in 0..c.tiles {
            mainloop_coop(&ring, &mut it, c.kt_n, warps, &mut ops);
            let parity = ((handed & 1) ^ 1) ^ (mutation == Mutation::EmptyParity) as u32;
            if mutation != Mutation::NoEmptyWait {
                ops.push(Op::Wait { bar: empty, parity: parity as u8, phase: handed as i64 - 1 });
            }
            ops.extend([Op::BeginWrite(dh), Op::EndWrite(dh)]);
            ops.push(Op::Arrive { bar: full, count: 32 * warps, phase: handed as i64 });
        }
        for w in 0..actors {
            let name = if c.warps { format!("wg{cw}.warp{w}") } else { format!("wg{cw}") };
            m.actor(&name, 1, ops.clone());
        }
    }

    // `epilogue`: every warp the same program (interchangeable)
    let mut e = Vec::new();
    for taken in 0..c.tiles {
        e.push(Op::Wait { bar: full, parity: (taken & 1) as u8, phase: taken as i64 });
        let arrive = Op::Arrive { bar: empty, count: 32, phase: taken as i64 };
        if mutation == Mutation::ArriveBeforeReads {
            e.extend([Op::BeginRead(dh), arrive, Op::EndRead(dh)]);
        } else {
            e.extend([Op::BeginRead(dh), Op::EndRead(dh), arrive]);
        }
    }
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
                    states += assert_ok(&model(&Ew { s, ew, tiles, kt_n, warps: false }, Mutation::None));
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
            states += assert_ok(&model(&Ew { s, ew, tiles, kt_n, warps: true }, Mutation::None));
        }
        println!("ew, per warp: {states} states");
    }

    #[test]
    fn ew_mutations() {
        let c = |tiles, warps| Ew { s: 4, ew: 3, tiles, kt_n: 1, warps };
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
}
