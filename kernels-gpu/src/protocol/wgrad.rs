//! The K-grouped weight gradients (`grouped_wgrad_f32`, `_bf16`, `_f32_mv`, `_bf16_mv`: kernels/grouped_wgrad.rs
//! `grouped_wgrad` with MC = false). Thread 0 is the producer (`produce`): per tile it pushes the tile's index on
//! the tile queue (pipeline.rs `TileQueue::push`: wait on the slot's `empty`, store the index, arrive on its `full`),
//! then loads its `kt_n` k-tiles into the ring (`Ring::produce`; kt_n = the expert's rows / 64 rounded up: 0 for an
//! expert without rows), and at the end pushes an index past the last. The consumer warps (`consume`) pop each
//! index (`TileQueue::pop`: wait on `full`, read the slot, lane 0 arrives on `empty`), run `kstep` per k-tile
//! (wait_full, the wgmma's reads, `wait_group 1`, release of the previous k-tile's stage when kt > 0), then
//! `wait_group 0` and the release of the last stage when kt_n > 0; then, when the warpgroup's rows are inside M,
//! the epilogue: per warp `store` (f32, up to 8 boxes of 16 x 32) or `store_bf16` (up to 4 of 16 x 64), each box
//! through `box_out` (lane 0: `wait_group.read 0` at the tile's first box, else `.read 1`; the warp's writes into its
//! staging box B % 2; lane 0's store and commit); at the end lane 0's `wait_group 0`. `queue.init(8)`,
//! `ring.init(8)`: one arrival per consumer warp.
//!
//! Actors: the producer thread and the consumer warps, each on its own (`warps`), or each warpgroup's four in lock
//! step as one actor (4 arrivals a release or a pop; its staging boxes and bulk groups stand for each of its warps'
//! own, which the warps use alike and alone: `box_out` has no barrier between warps). Not modelled: the 2-CTA
//! cluster forms (MC), the combine warps of `_mv` (global memory only), the tensor-map acquire (no barrier).
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// grouped_wgrad.rs `STAGE_BYTES` (A two 64 x 64 boxes, B four: six 8 KiB boxes).
const STAGE_BYTES: i64 = 6 * 64 * 64 * 2;

/// One tile: its k-tiles, and the staged boxes of each consumer warpgroup (0: its rows start at or past M).
#[derive(Clone, Copy, Debug)]
pub struct Tile {
    pub kt_n: u32,
    pub boxes: [u32; 2],
}

/// A block's work: ring stages, queue slots, tiles, and whether the consumer warps run on their own.
#[derive(Clone, Debug)]
pub struct Wgrad {
    pub s: u32,
    pub q: u32,
    pub tiles: Vec<Tile>,
    pub warps: bool,
}

/// Changes to the kernel's protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// `box_out` with `wait_group.read 1` at a tile's first box too.
    FirstBoxRead1,
    /// `consume` releases the last stage after its k-tiles without the kt_n > 0 guard.
    NoEmptyTileGuard,
    /// `kstep` releases the previous stage at kt = 0 too.
    ReleaseAtFirstKstep,
    /// `TileQueue::push` without its wait on the slot's `empty`.
    PushWithoutWait,
    /// `TileQueue::pop` gives the slot back before reading it.
    PopReleaseBeforeRead,
    /// `consume` without the final `wait_group 0`.
    NoFinalWait,
}

/// The model of `c` (see the module): grouped_wgrad.rs `grouped_wgrad`, `produce`, `consume`, `kstep`, `store` /
/// `store_bf16`, `box_out`; pipeline.rs `TileQueue`, `Ring`.
pub fn model(c: &Wgrad, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("grouped_wgrad {c:?} {mutation:?}"));
    let ring = Ring::new(&mut m, c.s, 1, 8);
    let qfull: Vec<u8> = (0..c.q).map(|i| m.mbar(&format!("queue.full[{i}]"), 1)).collect();
    let qempty: Vec<u8> = (0..c.q).map(|i| m.mbar(&format!("queue.empty[{i}]"), 8)).collect();
    let slot: Vec<Mask> = (0..c.q).map(|i| m.region(&format!("slot{i}"), false)).collect();
    let (actors, warps) = if c.warps { (4, 1) } else { (1, 4) };
    // the staging: two boxes per consumer warp (per warpgroup in lock step)
    let boxes: Vec<[Mask; 2]> = (0..2 * actors)
        .map(|a| [m.region(&format!("box{a}.0"), false), m.region(&format!("box{a}.1"), false)])
        .collect();

    // `produce`
    let push = |j: u32, ops: &mut Vec<Op>| {
        let (s, ph) = ((j % c.q) as usize, (j / c.q) as i64);
        if mutation != Mutation::PushWithoutWait {
            ops.push(Op::Wait { bar: qempty[s], parity: (((j / c.q) & 1) ^ 1) as u8, phase: ph - 1 });
        }
        ops.extend([Op::BeginWrite(slot[s]), Op::EndWrite(slot[s])]);
        ops.push(Op::Arrive { bar: qfull[s], count: 1, phase: ph });
    };
    let mut p = Vec::new();
    let mut it = 0;
    for (j, t) in c.tiles.iter().enumerate() {
        push(j as u32, &mut p);
        for _ in 0..t.kt_n {
            p.extend(ring.produce(it, STAGE_BYTES));
            it += 1;
        }
    }
    // the index past the last: the consumers' end
    push(c.tiles.len() as u32, &mut p);
    m.actor("producer", 0, p);

    for cw in 0..2 {
        for w in 0..actors {
            let a = cw * actors + w;
            let mut ops = Vec::new();
            let pop = |j: u32, ops: &mut Vec<Op>| {
                let (s, ph) = ((j % c.q) as usize, (j / c.q) as i64);
                ops.push(Op::Wait { bar: qfull[s], parity: ((j / c.q) & 1) as u8, phase: ph });
                let arrive = Op::Arrive { bar: qempty[s], count: warps, phase: ph };
                if mutation == Mutation::PopReleaseBeforeRead {
                    ops.extend([Op::BeginRead(slot[s]), arrive, Op::EndRead(slot[s])]);
                } else {
                    ops.extend([Op::BeginRead(slot[s]), Op::EndRead(slot[s]), arrive]);
                }
            };
            let mut it = 0;
            for (j, t) in c.tiles.iter().enumerate() {
                pop(j as u32, &mut ops);
                // `kstep` per k-tile
                for kt in 0..t.kt_n {
                    ops.push(ring.wait_full(it));
                    ops.push(Op::BeginRead(ring.region(it)));
                    // commit; wait_group<1>: the previous k-tile's wgmma have read their stage
                    if kt > 0 {
                        ops.push(Op::EndRead(ring.region(it - 1)));
                        ops.push(ring.release_prev(it, warps));
                    } else if mutation == Mutation::ReleaseAtFirstKstep {
                        ops.push(ring.release_prev(it, warps));
                    }
                    it += 1;
                }
                // wait_group<0>; `if kt_n > 0 { release(..) }`
                if t.kt_n > 0 {
                    ops.push(Op::EndRead(ring.region(it - 1)));
                }
                if t.kt_n > 0 || mutation == Mutation::NoEmptyTileGuard {
                    ops.push(ring.release_prev(it, warps));
                }
                // `row0 < p.m`: `store` / `store_bf16`, one `box_out` per box B (buffer B % 2)
                for b in 0..t.boxes[cw] {
                    let bx = boxes[a][(b % 2) as usize];
                    let first = b == 0 && mutation != Mutation::FirstBoxRead1;
                    ops.push(Op::WaitRead(if first { 0 } else { 1 }));
                    ops.extend([Op::BeginWrite(bx), Op::EndWrite(bx), Op::Store(bx), Op::Commit]);
                }
            }
            pop(c.tiles.len() as u32, &mut ops);
            if mutation != Mutation::NoFinalWait {
                ops.push(Op::WaitRead(0));
            }
            let name = if c.warps { format!("wg{cw}.warp{w}") } else { format!("wg{cw}") };
            m.actor(&name, 0, ops);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;

    fn t(kt_n: u32, b0: u32, b1: u32) -> Tile {
        Tile { kt_n, boxes: [b0, b1] }
    }

    /// Every sequence of up to 3 tiles of 0..4 k-tiles (both warpgroups storing 1 box, or 0 and 2), S 2..4 stages,
    /// queues of 2 and 4 slots, consumer warpgroups in lock step.
    #[test]
    fn wgrad_ring_and_queue_lockstep() {
        let mut states = 0;
        let mut seqs: Vec<Vec<Tile>> = [Vec::new()].into();
        for n in 1..=3 {
            let mut next = Vec::new();
            for s in seqs.iter().filter(|s| s.len() == n - 1) {
                for kt in 0..=4 {
                    let mut v = s.clone();
                    v.push(if kt % 2 == 0 { t(kt, 1, 1) } else { t(kt, 0, 2) });
                    next.push(v);
                }
            }
            seqs.extend(next);
        }
        for tiles in &seqs {
            for (s, q) in [(2, 2), (3, 4), (4, 4)] {
                states += assert_ok(&model(&Wgrad { s, q, tiles: tiles.clone(), warps: false }, Mutation::None));
            }
        }
        println!("wgrad ring and queue, lock step: {} sequences, {states} states", seqs.len());
    }

    /// The epilogue's staging over box counts (f32: up to 8, bf16: up to 4) and tile sequences, 1 or 0 k-tiles.
    #[test]
    fn wgrad_epilogue_lockstep() {
        let mut states = 0;
        for a in [1, 2, 3, 8] {
            for b in [0, 1, 2, 4] {
                for (ka, kb) in [(1, 1), (0, 2), (2, 0)] {
                    let tiles = [t(ka, a, b), t(kb, b, a), t(1, 1, 3)].into();
                    states += assert_ok(&model(&Wgrad { s: 4, q: 4, tiles, warps: false }, Mutation::None));
                }
            }
        }
        println!("wgrad epilogue, lock step: {states} states");
    }

    /// Every consumer warp on its own (with its own staging and bulk groups): small parameters.
    #[test]
    fn wgrad_warps() {
        let mut states = 0;
        for (s, q, tiles) in [
            (2, 2, [t(1, 1, 0), t(0, 0, 0)].to_vec()),
            (2, 2, [t(1, 0, 0), t(1, 0, 0)].to_vec()),
            (2, 2, [t(0, 0, 0), t(2, 0, 0)].to_vec()),
            (4, 4, [t(0, 0, 0); 5].to_vec()),
            (2, 2, [t(0, 0, 0), t(0, 0, 0), t(1, 0, 0)].to_vec()),
            (3, 4, [t(3, 0, 0), t(1, 0, 0)].to_vec()),
            (2, 2, [t(0, 2, 0)].to_vec()),
        ] {
            states += assert_ok(&model(&Wgrad { s, q, tiles, warps: true }, Mutation::None));
        }
        println!("wgrad, per warp: {states} states");
    }

    #[test]
    fn wgrad_mutations() {
        let w = |tiles: Vec<Tile>, warps| Wgrad { s: 2, q: 2, tiles, warps };
        // the first box of a tile after a tile that ended on the same buffer (1 box: buffer 0)
        let v = assert_fails(&model(&w([t(1, 1, 0), t(1, 1, 0)].into(), false), Mutation::FirstBoxRead1), Kind::Race);
        assert!(v.what.contains("TMA stores of wg0"), "{v}");
        // ... which cannot happen after a tile that ended on buffer 1
        assert_ok(&model(&w([t(1, 2, 0), t(1, 1, 0)].into(), false), Mutation::FirstBoxRead1));
        for warps in [false, true] {
            assert_fails(
                &model(&w([t(1, 0, 0), t(0, 0, 0)].into(), warps), Mutation::NoEmptyTileGuard),
                Kind::Aliasing,
            );
            assert_fails(&model(&w([t(2, 0, 0)].into(), warps), Mutation::ReleaseAtFirstKstep), Kind::Aliasing);
            assert_fails(&model(&w([t(0, 0, 0); 3].into(), warps), Mutation::PushWithoutWait), Kind::Race);
            assert_fails(&model(&w([t(0, 0, 0); 2].into(), warps), Mutation::PopReleaseBeforeRead), Kind::Race);
            assert_fails(&model(&w([t(1, 1, 0)].into(), warps), Mutation::NoFinalWait), Kind::UncleanEnd);
        }
        // a tile without k-tiles at the start has no previous stage: the unguarded release is then an arrival in
        // phase 0 meant for the stage before iteration 0
        assert_fails(&model(&w([t(0, 0, 0)].into(), false), Mutation::NoEmptyTileGuard), Kind::Aliasing);
    }
}
