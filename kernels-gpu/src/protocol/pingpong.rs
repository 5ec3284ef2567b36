//! The ping-pong SwiGLU backward (`grouped_gemm_bt_dswiglu`: kernels/grouped_gemm.rs `grouped_gemm` with DSW = true,
//! MC = 0): thread 0 produces every tile of the block's walk into a `DSW_STAGES` ring (`init_with(1, 4)`: one
//! consumer warpgroup's warps release a stage); consumer warpgroup cw runs the block's tiles cw, cw + 2, ..
//! (`consume_pp`), its ring iterations cw kt_n.. (skipping the other's), its main loop after a wait on its order
//! barrier (the other warpgroup has waited for every stage of the block's previous tile; count 1, the other's
//! leader's arrival after its main loop). Its epilogue (`store_dswiglu`) takes the tile's z batches that go through
//! the copy engine through two staging slots (a g and a u box; batch q: slot q % 2, phase q / 2 of the slot's
//! mbarrier, count 1: the leader's arrive.expect_tx): batches 0 and 1 loaded by `z_prefetch` under the main loop
//! (after `wait_group.read 0`), batch i + 2 after batch i's stores have read the slot; each batch: every thread
//! waits on the slot's mbarrier, (with s * h) the leader's `wait_group.read 0` and named barrier 2 + cw, every
//! thread's in-place writes of dg, du (and s h into the warpgroup's sh box), named barrier 2 + cw, the leader's
//! stores and commit. At the end the leader's `wait_group 0`.
//!
//! Actors: the producer thread; per consumer warpgroup its leader warp, which stands for the warpgroup's four warps
//! in the ring and the order barriers (lock step: its releases are four arrivals), and its other three warps, which
//! run the epilogue (their waits on the z slots, the named barriers, their writes). A tile is (nb, halves): its
//! 64-column batches (1, 2) and its 64-row halves through the copy engine (0, 1, 2: `dsw_batches`' ntma = nb
//! halves); the other halves store from registers.
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// `DSW_STAGE_BYTES` (A 128 x 64 + B 64 K x 128 N) and a z batch's bytes (a g box and a u box of 64 x 64 bf16).
const STAGE_BYTES: i64 = (128 + 128) * 64 * 2;
const Z_BYTES: i64 = 2 * 64 * 64 * 2;

/// A block's work: ring stages, k-steps a tile, its tiles' (nb, TMA halves), and whether s * h is stored.
#[derive(Clone, Debug)]
pub struct PingPong {
    pub s: u32,
    pub kt_n: u32,
    pub tiles: Vec<(u32, u32)>,
    pub sh: bool,
}

/// Changes to the kernel's protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// No order barriers: the warpgroups' main loops do not alternate.
    NoOrder,
    /// `z_prefetch` without its `wait_group.read 0`.
    PrefetchNoWaitRead,
    /// The reload of batch i + 2 without its `wait_group.read 0`.
    ReloadNoWaitRead,
    /// `store_dswiglu` without the named barrier after the writes.
    NoSyncAfterWrites,
    /// The order barrier's wait of warpgroup 0 with parity mine & 1 (not (mine - 1) & 1).
    OrderParity,
}

/// The model of `c` (see the module): grouped_gemm.rs `grouped_gemm` (DSW: barrier init), `produce`, `consume_pp`,
/// `z_prefetch`, `z_load_batch`, `store_dswiglu`.
pub fn model(c: &PingPong, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("dswiglu ping-pong {c:?} {mutation:?}"));
    let ring = Ring::new(&mut m, c.s, 1, 4);
    // `init(order, 1)`, `init(order + 8, 1)`: one arrival (the other warpgroup's leader) a phase
    let order = [m.mbar("order[0]", 1), m.mbar("order[1]", 1)];
    let zbar: Vec<[u8; 2]> = (0..2).map(|cw| [0, 1].map(|k| m.mbar(&format!("zbar{cw}.{k}"), 1))).collect();
    let zslot: Vec<[Mask; 2]> = (0..2).map(|cw| [0, 1].map(|k| m.region(&format!("z{cw}.slot{k}"), true))).collect();
    let shbox: Vec<Mask> = (0..2).map(|cw| m.region(&format!("sh{cw}"), true)).collect();
    let bars: Vec<u8> = (0..2).map(|cw| m.named_bar(&format!("bar {}", 2 + cw))).collect();
    let n = c.tiles.len() as u32;

    let mut p = Vec::new();
    for it in 0..n * c.kt_n {
        p.extend(ring.produce(it, STAGE_BYTES));
    }
    m.actor("producer", 0, p);

    for cw in 0..2u32 {
        let cwu = cw as usize;
        // z_load_batch: batch q into slot q % 2 (the leader)
        let z_load = |q: u32, ops: &mut Vec<Op>| {
            let (k, ph) = ((q % 2) as usize, (q / 2) as i64);
            ops.push(Op::ArriveTx { bar: zbar[cwu][k], bytes: Z_BYTES, phase: ph });
            ops.push(Op::Load { bar: zbar[cwu][k], bytes: Z_BYTES, write: zslot[cwu][k], phase: ph });
        };
        for w in 0..4 {
            let leader = w == 0;
            let mut ops = Vec::new();
            let mut it = cw * c.kt_n;
            let mut mine = 0u32;
            let mut zq = 0u32;
            let mut q = cw;
            while q < n {
                let (nb, halves) = c.tiles[q as usize];
                let ntma = nb * halves;
                if leader {
                    if (cw == 1 || mine > 0) && mutation != Mutation::NoOrder {
                        let (parity, phase) = if cw == 0 {
                            let par = if mutation == Mutation::OrderParity { mine & 1 } else { (mine - 1) & 1 };
                            (par, mine as i64 - 1)
                        } else {
                            (mine & 1, mine as i64)
                        };
                        ops.push(Op::Wait { bar: order[cwu], parity: parity as u8, phase });
                    }
                    for kt in 0..c.kt_n {
                        ops.push(ring.wait_full(it));
                        ops.push(Op::BeginRead(ring.region(it)));
                        if kt > 0 {
                            ops.push(Op::EndRead(ring.region(it - 1)));
                            ops.push(ring.release_prev(it, 4));
                        }
                        if ntma > 0 && kt == 0 {
                            // z_prefetch
                            if mutation != Mutation::PrefetchNoWaitRead {
                                ops.push(Op::WaitRead(0));
                            }
                            for b in 0..ntma.min(2) {
                                z_load(zq + b, &mut ops);
                            }
                        }
                        it += 1;
                    }
                    if mutation != Mutation::NoOrder {
                        ops.push(Op::Arrive { bar: order[1 - cwu], count: 1, phase: mine as i64 });
                    }
                    // wait_group<0>, release(.., true)
                    ops.push(Op::EndRead(ring.region(it - 1)));
                    ops.push(ring.release_prev(it, 4));
                }
                // store_dswiglu
                let mut zb = zq;
                for i in 0..ntma {
                    let (k, ph) = ((zb % 2) as usize, (zb / 2) as i64);
                    ops.push(Op::Wait { bar: zbar[cwu][k], parity: ((zb / 2) & 1) as u8, phase: ph });
                    let mut wr = zslot[cwu][k];
                    if c.sh {
                        if leader {
                            ops.push(Op::WaitRead(0));
                        }
                        ops.push(Op::Sync { id: bars[cwu], warps: 4 });
                        wr |= shbox[cwu];
                    }
                    ops.extend([Op::BeginWrite(wr), Op::EndWrite(wr)]);
                    if mutation != Mutation::NoSyncAfterWrites {
                        ops.push(Op::Sync { id: bars[cwu], warps: 4 });
                    }
                    if leader {
                        ops.extend([Op::Store(wr), Op::Commit]);
                        if i + 2 < ntma {
                            if mutation != Mutation::ReloadNoWaitRead {
                                ops.push(Op::WaitRead(0));
                            }
                            z_load(zb + 2, &mut ops);
                        }
                    }
                    zb += 1;
                }
                zq = zb;
                it += c.kt_n;
                mine += 1;
                q += 2;
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

    /// The ring and the order barriers: 4 stages (2, 3 too), 0..6 tiles of 1..5 k-steps, epilogues from registers.
    #[test]
    fn pingpong_ring_and_order() {
        let mut states = 0;
        for s in 2..=4 {
            for kt_n in 1..=5 {
                for n in 0..=6 {
                    let tiles = (0..n).map(|_| (1, 0)).collect();
                    states += assert_ok(&model(&PingPong { s, kt_n, tiles, sh: false }, Mutation::None));
                }
            }
        }
        println!("ping-pong ring and order: {states} states");
    }

    /// The z staging: tiles of 1 or 2 batches and 0, 1 or 2 halves through the copy engine, with and without s * h.
    #[test]
    fn pingpong_z_staging() {
        let kinds = [(1, 0), (1, 1), (2, 1), (1, 2), (2, 2)];
        let mut states = 0;
        for sh in [false, true] {
            for a in kinds {
                for b in kinds {
                    let c = PingPong { s: 4, kt_n: 1, tiles: [a, b].into(), sh };
                    states += assert_ok(&model(&c, Mutation::None));
                }
            }
            for t in [[(2, 2), (1, 0), (2, 1)], [(1, 1), (2, 2), (2, 2)]] {
                let c = PingPong { s: 2, kt_n: 2, tiles: t.into(), sh };
                states += assert_ok(&model(&c, Mutation::None));
            }
        }
        println!("ping-pong z staging: {states} states");
    }

    #[test]
    fn pingpong_mutations() {
        // without the order barriers warpgroup 0 waits for stage 3's phase 1 while the producer has not filled
        // phase 0 (warpgroup 1's iteration 3): the parity passes at once
        let c = PingPong { s: 4, kt_n: 3, tiles: [(1, 0); 3].into(), sh: false };
        let v = assert_fails(&model(&c, Mutation::NoOrder), Kind::Aliasing);
        assert!(v.what.contains("passes in phase 0"), "{v}");
        assert_fails(&model(&c, Mutation::OrderParity), Kind::Aliasing);
        let c = PingPong { s: 4, kt_n: 1, tiles: [(2, 1), (1, 0), (2, 1)].into(), sh: false };
        assert_fails(&model(&c, Mutation::PrefetchNoWaitRead), Kind::Race);
        let c = PingPong { s: 4, kt_n: 1, tiles: [(1, 2), (1, 0), (2, 2)].into(), sh: false };
        assert_fails(&model(&c, Mutation::ReloadNoWaitRead), Kind::Race);
        let c = PingPong { s: 4, kt_n: 1, tiles: [(1, 1)].into(), sh: false };
        assert_fails(&model(&c, Mutation::NoSyncAfterWrites), Kind::Race);
    }
}
