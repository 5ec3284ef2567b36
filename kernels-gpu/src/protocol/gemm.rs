//! The cooperative M-grouped GEMMs (`grouped_gemm_bf16`, `_bt_bf16`, `_swiglu`, `_scatter`, `_swiglu_mv` without its
//! row counts, and with `gather` `_swiglu_gather`: kernels/grouped_gemm.rs `grouped_gemm` with DSW = false, MC = 0):
//! thread 0 is the producer (`produce` + `load_stage`; or the producer warpgroup's four warps, `produce_gather`),
//! warpgroups 1 and 2 the consumers (`consume_coop`: `mainloop_coop`, then `store_bf16` /
//! `store_swiglu` through `store_box`, or the register paths), over a `STAGES`-stage ring (`Ring::init_with(1, 8)`:
//! one producer arrival plus the stage's bytes, one arrival per consumer warp), each consumer warpgroup's two
//! staging boxes ordered by named barrier 2 + cw and its leader's bulk groups. Both roles walk the block's tiles
//! (`walk`: a static stride; no tile queue), every tile `kt_n = K / 64` k-steps (K a positive multiple of 64: the
//! host's check, host/src/gemm.rs `Check::multiple`, so kt_n >= 1).
//!
//! Actors: the producer thread; per consumer warpgroup its leader warp (warp 0: lane 0 releases its stages, thread
//! 0 of the warpgroup waits on and issues the TMA stores) and its three other warps. With `warps` every consumer
//! warp runs the main loop on its own (lane 0 of each releases: the empty barrier's count of 8); without, a
//! warpgroup's four warps run it in lock step (its leader's releases are their four arrivals) and the others only
//! the epilogue (its named barriers and staging writes). A tile's epilogue per warpgroup is a number of 64 x 64
//! boxes through the staging (`store_bf16`: up to 4, columns < N; `store_swiglu`: per 64 columns h and z's g and u
//! boxes, up to 6), or 0: the register path of a warpgroup with rows past the expert's end (`store_scatter`,
//! always; no shared memory, no barrier).
use super::{assert_fails, assert_ok, mainloop_coop, Kind, Mask, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// grouped_gemm.rs `STAGE_BYTES` (A 128 x 64 + B 256 x 64, bf16: `load_stage`'s A box and two B boxes).
const STAGE_BYTES: i64 = (128 + 256) * 64 * 2;

/// A block's work: ring stages, k-steps per tile, per tile the staged boxes of each consumer warpgroup, whether
/// consumer warps run the main loop on their own (see the module), and whether the producer gathers A
/// (`grouped_gemm_swiglu_gather`: `produce_gather`).
#[derive(Clone, Debug)]
pub struct Coop {
    pub s: u32,
    pub kt_n: u32,
    pub tiles: Vec<[u32; 2]>,
    pub warps: bool,
    pub gather: bool,
}

/// Changes to the kernel's protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// `mainloop_coop` releases a stage before `wgmma.wait_group 1` has seen its wgmma complete.
    ReleaseBeforeWaitGroup,
    /// The ring's empty barriers initialised for 7 consumer warps.
    EmptyCount7,
    /// `store_box` without the leader's `wait_group.read 1`.
    NoWaitRead,
    /// `store_box`'s named barrier counting 64 threads.
    NamedBarrier64,
    /// `consume_coop` without the leader's final `wait_group 0`.
    NoFinalWait,
    /// `Ring::wait_full` with the parity of `wait_empty` (((it / S) & 1) ^ 1).
    ConsumerParity,
    /// `produce_gather` without the named barrier before the row tokens' stores.
    GatherNoSyncBefore,
    /// `produce_gather` without the named barrier after them.
    GatherNoSyncAfter,
    /// `grouped_gemm`'s `init_with(128, ..)` for the gathering producer (its thread 0's arrival not counted).
    GatherFullCount128,
}

/// The model of `c` (see the module): grouped_gemm.rs `grouped_gemm` (barrier init), `produce`, `consume_coop`,
/// `mainloop_coop`, `store_bf16` / `store_swiglu`, `store_box`.
pub fn model(c: &Coop, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("grouped_gemm coop {c:?} {mutation:?}"));
    // `grouped_gemm`: ring.init_with(if GATHER { 1 + 128 } else { 1 }, 8) (consumer_warps = 8: both warpgroups'
    // warps); a gathered stage is A's rows, copied by the producer's four warps (each its own: partitioned), and B
    // by TMA
    let mut parts: Vec<(Mask, Mask)> = Vec::new();
    for i in 0..c.s {
        if c.gather {
            parts.push((m.region(&format!("stage{i}.A"), true), m.region(&format!("stage{i}.B"), false)));
        } else {
            parts.push((0, m.region(&format!("stage{i}"), false)));
        }
    }
    let stages = parts.iter().map(|(a, b)| a | b).collect();
    let full = match (c.gather, mutation) {
        (false, _) => 1,
        (true, Mutation::GatherFullCount128) => 128,
        (true, _) => 1 + 128,
    };
    let ring = Ring::with_stages(&mut m, c.s, full, if mutation == Mutation::EmptyCount7 { 7 } else { 8 }, stages);
    if mutation == Mutation::EmptyCount7 || mutation == Mutation::GatherFullCount128 {
        for b in 0..m.mbars.len() {
            m.mbars[b].leftover_ok = true;
        }
    }
    // the staging: two boxes per consumer warpgroup (`wst = staging + cw * 2 * C_BOX`), each written by its four
    // warps (each its own rows: partitioned)
    let boxes: Vec<[Mask; 2]> =
        (0..2).map(|cw| [m.region(&format!("box{cw}.0"), true), m.region(&format!("box{cw}.1"), true)]).collect();
    let bars: Vec<u8> = (0..2).map(|cw| m.named_bar(&format!("bar {}", 2 + cw))).collect();
    let sync_warps = if mutation == Mutation::NamedBarrier64 { 2 } else { 4 };

    // `produce`: per tile (the walk's), per k-step `ring.produce(it, stage_bytes)` then `load_stage`'s loads into
    // the stage (one copy event of the stage's bytes, completing on its full barrier)
    if c.gather {
        produce_gather(&mut m, c, &ring, &parts, mutation);
    } else {
        let mut p = Vec::new();
        let mut it = 0;
        for _ in &c.tiles {
            for _ in 0..c.kt_n {
                p.extend(ring.produce(it, STAGE_BYTES));
                it += 1;
            }
        }
        m.actor("producer", 0, p);
    }

    for cw in 0..2 {
        for w in 0..4 {
            let leader = w == 0;
            let mut ops = Vec::new();
            let mut it = 0;
            // `boxes`: the warpgroup's staging boxes used so far, across tiles
            let mut k = 0u32;
            for t in &c.tiles {
                let before = ops.len();
                if c.warps {
                    mainloop_coop(&ring, &mut it, c.kt_n, 1, &mut ops);
                } else if leader {
                    mainloop_coop(&ring, &mut it, c.kt_n, 4, &mut ops);
                }
                mutate_mainloop(&mut ops[before..], mutation);
                for _ in 0..t[cw] {
                    let bx = boxes[cw][(k % 2) as usize];
                    // `store_box`: the leader's wait_group.read 1, named_sync(2 + cw, 128), the fragment stores,
                    // fence.proxy.async, named_sync, the leader's store and commit
                    if leader && mutation != Mutation::NoWaitRead {
                        ops.push(Op::WaitRead(1));
                    }
                    ops.push(Op::Sync { id: bars[cw], warps: sync_warps });
                    ops.extend([Op::BeginWrite(bx), Op::EndWrite(bx)]);
                    ops.push(Op::Sync { id: bars[cw], warps: sync_warps });
                    if leader {
                        ops.extend([Op::Store(bx), Op::Commit]);
                    }
                    k += 1;
                }
            }
            // `consume_coop`'s end: the leader's `tma::wait_group::<0>()`
            if leader && mutation != Mutation::NoFinalWait {
                ops.push(Op::WaitRead(0));
            }
            m.actor(&format!("wg{cw}.warp{w}"), 1 + cw as u8, ops);
        }
    }
    m
}

/// grouped_gemm.rs `produce_gather`, per warp of the producer warpgroup (team 3): per tile named barrier 1 (128
/// threads), each thread's row token into shared memory, named barrier 1; per k-step every thread's
/// `ring.wait_empty(it)`, thread 0's arrive.expect_tx(B_BYTES) and B's two TMA loads, each thread's eight
/// `cp.async` 16-byte copies of A's rows (their token read from shared memory first) and its
/// `cp.async.mbarrier.arrive.noinc` (the warp's 32 arrivals when its copies complete).
fn produce_gather(m: &mut Model, c: &Coop, ring: &Ring, parts: &[(Mask, Mask)], mutation: Mutation) {
    let toks = m.region("row tokens", true);
    let bar1 = m.named_bar("bar 1");
    const B_BYTES: i64 = 256 * 64 * 2;
    for w in 0..4 {
        let mut ops = Vec::new();
        let mut it = 0;
        for _ in &c.tiles {
            if mutation != Mutation::GatherNoSyncBefore {
                ops.push(Op::Sync { id: bar1, warps: 4 });
            }
            ops.extend([Op::BeginWrite(toks), Op::EndWrite(toks)]);
            if mutation != Mutation::GatherNoSyncAfter {
                ops.push(Op::Sync { id: bar1, warps: 4 });
            }
            for _ in 0..c.kt_n {
                ops.extend(ring.gather_step(it, w, B_BYTES, parts, toks));
                it += 1;
            }
        }
        m.actor(&format!("producer.warp{w}"), 3, ops);
    }
}

/// The main-loop mutations, on one tile's ops of a consumer actor.
fn mutate_mainloop(ops: &mut [Op], mutation: Mutation) {
    match mutation {
        Mutation::ReleaseBeforeWaitGroup => {
            for i in 1..ops.len() {
                if matches!(ops[i], Op::Arrive { .. }) && matches!(ops[i - 1], Op::EndRead(_)) {
                    ops.swap(i, i - 1);
                }
            }
        }
        Mutation::ConsumerParity => {
            for op in ops.iter_mut() {
                if let Op::Wait { parity, .. } = op {
                    *parity ^= 1;
                }
            }
        }
        _ => {}
    }
}

/// `n` tiles of `boxes` staged boxes per warpgroup.
fn tiles(n: usize, boxes: [u32; 2]) -> Vec<[u32; 2]> {
    (0..n).map(|_| boxes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;

    /// The ring over its parameters: S 2..4 stages, 1..5 k-steps a tile, 0..3 tiles of one box per warpgroup,
    /// warpgroups in lock step.
    #[test]
    fn coop_ring_lockstep() {
        let mut states = 0;
        for s in 2..=4 {
            for kt_n in 1..=5 {
                for n in 0..=3 {
                    states += assert_ok(&model(
                        &Coop { s, kt_n, tiles: tiles(n, [1, 1]), warps: false, gather: false },
                        Mutation::None,
                    ));
                }
            }
        }
        println!("coop ring, lock step: {states} states");
    }

    /// The epilogue over tile sequences: every sequence of up to 2 tiles whose warpgroups store 0 (registers), 1, 2,
    /// 3, 4 or 6 boxes (the second warpgroup 0 or as many as the first: its rows past the expert's end), and 12 of 3
    /// tiles, at 2 stages and 1 k-step a tile (the ring's part is `coop_ring_lockstep`'s), warpgroups in lock step;
    /// then the single tiles at 4 stages and 2 k-steps.
    #[test]
    fn coop_epilogue_lockstep() {
        let kinds: [[u32; 2]; 8] = [[0, 0], [1, 1], [2, 0], [2, 2], [3, 3], [4, 0], [6, 0], [4, 4]];
        let mut seqs: Vec<Vec<[u32; 2]>> = Vec::new();
        for a in kinds {
            seqs.push([a].into());
            for b in &kinds[..7] {
                seqs.push([a, *b].into());
            }
        }
        for t in [[1, 1], [2, 0]] {
            for u in [[0, 0], [1, 1], [2, 2]] {
                for v in [[3, 3], [6, 0]] {
                    seqs.push([t, u, v].into());
                }
            }
        }
        let mut states = 0;
        for t in &seqs {
            states += assert_ok(&model(
                &Coop { s: 2, kt_n: 1, tiles: t.clone(), warps: false, gather: false },
                Mutation::None,
            ));
        }
        for a in kinds {
            states += assert_ok(&model(
                &Coop { s: 4, kt_n: 2, tiles: [a].into(), warps: false, gather: false },
                Mutation::None,
            ));
        }
        println!("coop epilogue, lock step: {} sequences, {states} states", seqs.len());
    }

    /// Every consumer warp on its own (the ring's count of 8 arrivals from 8 independent warps): small parameters.
    #[test]
    fn coop_warps() {
        let mut states = 0;
        for (s, kt_n, t) in [
            (2, 1, [[1, 1], [1, 1], [1, 1]].to_vec()),
            (2, 2, [[1, 1], [2, 0], [0, 0]].to_vec()),
            (4, 1, [[1, 0], [1, 1], [0, 1]].to_vec()),
            (2, 3, tiles(2, [1, 0])),
            (3, 3, tiles(2, [1, 0])),
            (3, 5, tiles(1, [1, 0])),
        ] {
            states += assert_ok(&model(&Coop { s, kt_n, tiles: t, warps: true, gather: false }, Mutation::None));
        }
        println!("coop, per warp: {states} states");
    }

    #[test]
    fn coop_mutations() {
        let c = |s, kt_n, t: Vec<[u32; 2]>, warps| Coop { s, kt_n, tiles: t, warps, gather: false };
        for warps in [false, true] {
            let v =
                assert_fails(&model(&c(2, 2, tiles(2, [1, 1]), warps), Mutation::ReleaseBeforeWaitGroup), Kind::Race);
            assert!(v.what.contains("TMA load into stage"), "{v}");
            assert_fails(&model(&c(2, 2, tiles(1, [1, 1]), warps), Mutation::ConsumerParity), Kind::Aliasing);
        }
        // the eighth warp's release falls into the next phase (lock step: the second warpgroup's four overflow it)
        assert_fails(&model(&c(2, 1, tiles(3, [0, 0]), true), Mutation::EmptyCount7), Kind::Aliasing);
        assert_fails(&model(&c(2, 1, tiles(3, [0, 0]), false), Mutation::EmptyCount7), Kind::Overflow);
        // a box rewritten while its store reads it
        let v = assert_fails(&model(&c(2, 1, tiles(1, [3, 0]), false), Mutation::NoWaitRead), Kind::Race);
        assert!(v.what.contains("TMA stores of wg0.warp0"), "{v}");
        assert_fails(&model(&c(2, 1, tiles(1, [2, 0]), false), Mutation::NamedBarrier64), Kind::Race);
        assert_fails(&model(&c(2, 1, tiles(1, [1, 0]), false), Mutation::NoFinalWait), Kind::UncleanEnd);
        // and none of them is visible where the code they change does not run
        assert_ok(&model(&c(2, 1, tiles(1, [2, 0]), false), Mutation::NoWaitRead));
        assert_ok(&model(&c(2, 1, tiles(1, [0, 0]), false), Mutation::NamedBarrier64));
        assert_ok(&model(&c(2, 1, tiles(1, [0, 0]), false), Mutation::NoFinalWait));
    }

    /// The gathering producer (`grouped_gemm_swiglu_gather`: 4 stages; 2 and 3 too), 0..3 tiles of 1..3 k-steps
    /// (at 4 stages up to 4 k-steps in all), consumer warpgroups in lock step storing from registers; then two tiles
    /// through the staging.
    #[test]
    fn coop_gather_lockstep() {
        let mut states = 0;
        for s in 2..=4 {
            for kt_n in 1..=3 {
                for n in 0..=3 {
                    if s == 4 && n as u32 * kt_n > 4 {
                        continue;
                    }
                    let c = Coop { s, kt_n, tiles: tiles(n, [0, 0]), warps: false, gather: true };
                    states += assert_ok(&model(&c, Mutation::None));
                }
            }
        }
        let c = Coop { s: 2, kt_n: 1, tiles: [[1, 1], [2, 0]].into(), warps: false, gather: true };
        states += assert_ok(&model(&c, Mutation::None));
        println!("coop gather, lock step: {states} states");
    }

    #[test]
    fn coop_gather_mutations() {
        let c = |n| Coop { s: 2, kt_n: 1, tiles: tiles(n, [0, 0]), warps: false, gather: true };
        let v = assert_fails(&model(&c(2), Mutation::GatherNoSyncBefore), Kind::Race);
        assert!(v.what.contains("row tokens"), "{v}");
        let v = assert_fails(&model(&c(1), Mutation::GatherNoSyncAfter), Kind::Race);
        assert!(v.what.contains("row tokens"), "{v}");
        assert_fails(&model(&c(1), Mutation::GatherFullCount128), Kind::Overflow);
    }

    /// K < 64 (kt_n = 0, which the host rejects) would break the ring: `mainloop_coop`'s release after its loop
    /// is unconditional, a stray arrival on the empty barrier of the stage before.
    #[test]
    fn coop_zero_k_steps_breaks_the_ring() {
        let v = assert_fails(
            &model(&Coop { s: 2, kt_n: 0, tiles: tiles(1, [0, 0]), warps: false, gather: false }, Mutation::None),
            Kind::Aliasing,
        );
        assert!(v.what.contains("meant for phase -1"), "{v}");
    }
}
