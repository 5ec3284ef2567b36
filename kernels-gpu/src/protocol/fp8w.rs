//! The 128 x 256 FP8 GEMM with its consumer warpgroups' column halves in strict turn (`grouped_gemm_fp8w_ord1..3`:
//! kernels/grouped_gemm_fp8w.rs `body` with ORD > 0, `consume`, `run_half`, `Order`): thread 0 produces every
//! tile's k-blocks into the `FP8W_STAGES` ring (`init_with(1, 8)`); every consumer thread waits on a stage's full
//! barrier, its warpgroup runs the block's two column halves in turn with the other warpgroup (`Order::take`: a
//! `bar.sync` of 256 threads on the other's barrier, 6 - cw, skipped by warpgroup 0 for its very first half;
//! `Order::give`: a `bar.arrive` of 256 on its own, 5 + cw, once the half's first wgmma group has completed),
//! then lane 0 of each warp releases the stage. A tile's epilogue per warpgroup is its staged boxes (`store_box`:
//! named barrier 2 + cw of 128 threads, the leader's `wait_group.read 1`, store and commit), or none (the register
//! path). After the last tile warpgroup 0's warps wait once more on barrier 6 (`Order::finish`), and each
//! warpgroup's leader waits for its stores (`wait_group 0`).
//!
//! Actors: the producer thread; every consumer warp (the order barriers count all eight): warp 0 of a warpgroup is
//! its leader (the staging's TMA stores).
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// grouped_gemm_fp8w.rs `STAGE_BYTES`: A 128 x 128 + B 256 x 128 e4m3.
const STAGE_BYTES: i64 = (128 + 256) * 128;

/// A block's work: ring stages, 128-deep k-blocks a tile, per tile the staged boxes of each consumer warpgroup.
#[derive(Clone, Debug)]
pub struct Fp8wOrder {
    pub s: u32,
    pub kb_n: u32,
    pub tiles: Vec<[u32; 2]>,
}

/// Changes to the kernel's protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// Warpgroup 0 without `Order::finish`: warpgroup 1's last hand-over is left a partial generation.
    NoFinish,
    /// Warpgroup 0 waits for a hand-over before its first half too.
    TakeFirst,
    /// Both warpgroups hand over on barrier 5 (and wait on it).
    OneBarrier,
}

/// The model of `c` (see the module).
pub fn model(c: &Fp8wOrder, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("fp8w order {c:?} {mutation:?}"));
    let ring = Ring::new(&mut m, c.s, 1, 8);
    let boxes: Vec<[Mask; 2]> =
        (0..2).map(|cw| [m.region(&format!("box{cw}.0"), true), m.region(&format!("box{cw}.1"), true)]).collect();
    let stage_bars: Vec<u8> = (0..2).map(|cw| m.named_bar(&format!("bar {}", 2 + cw))).collect();
    // `Order`: barrier 5 + cw is warpgroup cw's hand-over
    let order = [m.named_bar("bar 5"), m.named_bar("bar 6")];
    let give_id = |cw: usize| -> (u8, u8) {
        if mutation == Mutation::OneBarrier {
            (order[0], order[0])
        } else {
            (order[cw], order[1 - cw])
        }
    };

    let mut p = Vec::new();
    for it in 0..c.tiles.len() as u32 * c.kb_n {
        p.extend(ring.produce(it, STAGE_BYTES));
    }
    m.actor("producer", 0, p);

    for cw in 0..2usize {
        let (give, take) = give_id(cw);
        for w in 0..4 {
            let leader = w == 0;
            let mut ops = Vec::new();
            let (mut it, mut halves, mut k) = (0u32, 0u32, 0u32);
            for t in &c.tiles {
                for _ in 0..c.kb_n {
                    ops.push(ring.wait_full(it));
                    ops.push(Op::BeginRead(ring.region(it)));
                    for _ in 0..2 {
                        if cw == 1 || halves > 0 || mutation == Mutation::TakeFirst {
                            ops.push(Op::Sync { id: take, warps: 8 });
                        }
                        halves += 1;
                        ops.push(Op::BarArrive { id: give, warps: 8 });
                    }
                    // both halves' wgmma have completed: the stage is read; lane 0 releases it
                    ops.push(Op::EndRead(ring.region(it)));
                    ops.push(ring.release_prev(it + 1, 1));
                    it += 1;
                }
                for _ in 0..t[cw] {
                    let bx = boxes[cw][(k % 2) as usize];
                    if leader {
                        ops.push(Op::WaitRead(1));
                    }
                    ops.push(Op::Sync { id: stage_bars[cw], warps: 4 });
                    ops.extend([Op::BeginWrite(bx), Op::EndWrite(bx)]);
                    ops.push(Op::Sync { id: stage_bars[cw], warps: 4 });
                    if leader {
                        ops.extend([Op::Store(bx), Op::Commit]);
                    }
                    k += 1;
                }
            }
            if cw == 0 && halves > 0 && mutation != Mutation::NoFinish {
                ops.push(Op::Sync { id: take, warps: 8 });
            }
            if leader {
                ops.push(Op::WaitRead(0));
            }
            m.actor(&format!("wg{cw}.warp{w}"), 1 + cw as u8, ops);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;

    fn c(s: u32, kb_n: u32, tiles: &[[u32; 2]]) -> Fp8wOrder {
        Fp8wOrder { s, kb_n, tiles: tiles.to_vec() }
    }

    /// The turns over the ring's parameters, across tiles and their epilogues (the staging boxes of both
    /// warpgroups, or none), and a block with no tile.
    #[test]
    fn fp8w_order_turns() {
        let mut states = 0;
        for (s, kb_n, t) in [
            (2, 1, &[][..]),
            (2, 1, &[[1, 1]][..]),
            (2, 2, &[[1, 1], [0, 0]][..]),
            (2, 1, &[[2, 0], [1, 1], [0, 2]][..]),
            (3, 2, &[[1, 0], [0, 1]][..]),
            (4, 3, &[[1, 1]][..]),
        ] {
            states += assert_ok(&model(&c(s, kb_n, t), Mutation::None));
        }
        println!("fp8w order: {states} states");
    }

    /// Each mutation caught as what it is.
    #[test]
    fn fp8w_order_mutations() {
        let v = assert_fails(&model(&c(2, 1, &[[1, 1]]), Mutation::NoFinish), Kind::UncleanEnd);
        assert!(v.what.contains("bar 6"), "{v}");
        assert_fails(&model(&c(2, 1, &[[1, 1]]), Mutation::TakeFirst), Kind::Deadlock);
        assert_fails(&model(&c(2, 1, &[[1, 1]]), Mutation::OneBarrier), Kind::Deadlock);
    }
}
