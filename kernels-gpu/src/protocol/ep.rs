//! The expert-parallel protocol across ranks and calls (docs/EP.md; kernels/ep_dispatch.rs, ep_combine.rs and
//! host/src/ep.rs's launch order): what each rank's blocks write into other ranks' workspaces, the epoch flags
//! that order it, and the stream order between a rank's launches, over several calls in a row. The question it
//! answers is the one the emulated ranks on one GPU cannot: with one GPU per rank every rank's launches run on
//! its own stream, so a fast rank may start the next call's dispatch (writing into a slow rank's `counts`,
//! `recv`, `recv_meta`, `recv_dy` and `back`) while the slow rank still reads them for the call before; the
//! design says no such write can start before the reads it would overwrite are done (each source's combine waits
//! for every owner's back flags, which each owner releases only after its last read of the call). Both forms are
//! models: `lockstep` (the emulated ranks: one launch serves all ranks, so a launch boundary is one for all of
//! them) and not (one stream per rank: a boundary orders only that rank's blocks).
//!
//! Actors: block b of rank r (team r + 1). Regions, per rank r, each written by several ranks' blocks in disjoint rows
//! (declared with disjoint writers: two writes never race, a read during any write does): `counts[r]` (row s written by
//! source s), `recv[r]` (the x rows the sources pushed, or r's movers pulled), `meta[r]` (their `recv_w`, `recv_meta`,
//! and with the pull each source's x address `src_x[s]`), `dy[r]` (`recv_dy`), `back[r]` (r's `back` and `back_w`
//! slots, each owner's rows in its own); and r's inputs `x[r]` and `dyin[r]`, written by the user (block 0, one launch)
//! before each call. Up to 4 ranks (28 regions of the checker's 32). Flags (epochs, call c has epoch c + 1):
//! `count[o][s]`, `data[o][s, b]`, `back[s][o, b]`. Waits for several flags are taken one after another (they only
//! rise: the same as the kernels' parallel waits). Left out: each rank's own buffers (routing, y, h, z, dz, outputs),
//! the error record and timeouts (a wait that never passes shows as a deadlock), the GEMMs' internal protocols (their
//! own models), and the pull's per-m-tile arrival counters (a barrier of the rank's blocks between the movers' writes
//! and the loads stands for them: stronger than the kernel's, which is not the question here).
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op};
use std::format;
use std::vec::Vec;

/// One call of the EP layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    Forward,
    /// The backward of the latest forward (the workspace holds its state): dy rows alone.
    Backward,
    /// The backward of an older forward (`EpParams::resend_x`): the forward's count all-gather again, and each
    /// row's x (into `recv`, with its weight and slot) besides its dy.
    BackwardResend,
}

/// A configuration: ranks (2 to 4), blocks per rank, the calls in order, the modes.
#[derive(Clone, Debug)]
pub struct Ep {
    pub ranks: u32,
    pub blocks: u32,
    pub calls: Vec<Call>,
    /// Pull dispatch (`set_pull_dispatch`): the owner's GEMM1 movers copy the rows from the sources' x.
    pub pull: bool,
    /// Combine by scatter (`set_scatter_combine`): the owner's GEMM2 stores its rows into the sources' `back`.
    pub scatter: bool,
    /// The emulated form: one launch for all ranks (its boundaries order every rank's blocks).
    pub lockstep: bool,
}

/// Changes to the protocol the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// The source's combine waits for its own rank's back flags only (not for the other owners').
    CombineWaitsOwnRankOnly,
    /// The source's combine waits for its own and the next rank's back flags only (all of them when R = 2).
    CombineWaitsNextRankOnly,
    /// The dispatch releases its data flags before pushing its rows.
    DataFlagsBeforeRows,
    /// The combine releases its back flags before it reads `recv_meta` and returns its rows.
    BackFlagsBeforeRows,
    /// The owner's weight gradients (reading `recv` and `recv_dy`) run after its backward combine.
    WgradAfterCombine,
    /// The backward's dispatch waits for count flags of its own epoch (the forward wrote the counts).
    BackwardWaitsCounts,
    /// Only block 0 of the owner waits for the data flags, and the GEMMs start in the same launch (no boundary).
    GemmsInDispatchLaunch,
}

/// [o][s] index of a per-pair region or flag.
fn at(ranks: u32, o: u32, s: u32) -> usize {
    (o * ranks + s) as usize
}

/// The model of `c`.
pub fn model(c: &Ep, mutation: Mutation) -> Model {
    let (rn, bn) = (c.ranks, c.blocks);
    let mut m = Model::new(&format!("ep {c:?} {mutation:?}"));
    assert!((2..=4).contains(&rn), "2 to 4 ranks");
    let mut per_rank =
        |name: &str| -> Vec<Mask> { (0..rn).map(|r| m.region_disjoint(&format!("{name}[{r}]"))).collect() };
    let (counts, recv, meta, dy, back) =
        (per_rank("counts"), per_rank("recv"), per_rank("meta"), per_rank("dy"), per_rank("back"));
    let (x, dyin) = (per_rank("x"), per_rank("dyin"));
    let mut count_f = Vec::new();
    let mut data_f = Vec::new();
    let mut back_f = Vec::new();
    for o in 0..rn {
        for s in 0..rn {
            count_f.push(m.flag(&format!("count_flags[{o}][{s}]")));
            for b in 0..bn {
                data_f.push(m.flag(&format!("data_flags[{o}][{s}.{b}]")));
                back_f.push(m.flag(&format!("back_flags[{o}][{s}.{b}]")));
            }
        }
    }
    // a launch boundary: every block of the launch has finished before the next launch starts (the same stream)
    let grid = m.named_bar("grid");
    let streams: Vec<u8> = (0..rn).map(|r| m.named_bar(&format!("stream{r}"))).collect();
    let arrivals: Vec<u8> = (0..rn).map(|r| m.named_bar(&format!("arrivals{r}"))).collect();
    let flag = |v: &Vec<u8>, o: u32, s: u32, b: u32| v[(at(rn, o, s) as u32 * bn + b) as usize];
    // rank o's region (what o reads of it: every source's rows), and every rank's (what a source writes: its rows
    // into each of them)
    let all = |v: &Vec<Mask>, o: u32| v[o as usize];
    let to_all = |v: &Vec<Mask>, _s: u32| v.iter().fold(0, |k, m| k | m);
    let rw = |ops: &mut Vec<Op>, read: Mask, write: Mask| {
        if read != 0 {
            ops.extend([Op::BeginRead(read), Op::EndRead(read)]);
        }
        if write != 0 {
            ops.extend([Op::BeginWrite(write), Op::EndWrite(write)]);
        }
    };

    for r in 0..rn {
        for b in 0..bn {
            let boundary = |ops: &mut Vec<Op>| {
                ops.push(if c.lockstep {
                    Op::Sync { id: grid, warps: rn * bn }
                } else {
                    Op::Sync { id: streams[r as usize], warps: bn }
                })
            };
            let mut ops = Vec::new();
            let mut fwd_seen = false;
            for (ci, &call) in c.calls.iter().enumerate() {
                let e = ci as u32 + 1;
                let fwd = call == Call::Forward;
                let resend = call == Call::BackwardResend;
                // the forward's count all-gather and rows (x, weights, slots)
                let full = fwd || resend;
                // the user's input for the call (a launch of its own on the rank's stream; a resending backward
                // reads the forward's x again, which the user left as it was)
                if b == 0 {
                    rw(&mut ops, 0, if fwd { x[r as usize] } else { dyin[r as usize] });
                }
                boundary(&mut ops);

                // ep_dispatch
                if full && b == 0 {
                    rw(&mut ops, 0, to_all(&counts, r));
                    for o in 0..rn {
                        ops.push(Op::FlagStore { flag: count_f[at(rn, o, r)], value: e });
                    }
                }
                if full || mutation == Mutation::BackwardWaitsCounts {
                    for s in 0..rn {
                        ops.push(Op::FlagWaitGe { flag: count_f[at(rn, r, s)], value: e });
                    }
                } else {
                    assert!(fwd_seen, "a backward follows a forward");
                }
                // recv_row_by over the gathered counts (a backward's without resend: the forward's, still there)
                rw(&mut ops, all(&counts, r), 0);
                let release_data = |ops: &mut Vec<Op>| {
                    for o in 0..rn {
                        ops.push(Op::FlagStore { flag: flag(&data_f, o, r, b), value: e });
                    }
                };
                if mutation == Mutation::DataFlagsBeforeRows {
                    release_data(&mut ops);
                }
                // the rows: x (push) or dy rows, their weights and (rank, slot), with the pull x's address; a
                // resending backward's x rows, weights and slots and dy rows
                let rows = if resend {
                    to_all(&recv, r) | to_all(&meta, r) | to_all(&dy, r)
                } else if !fwd {
                    to_all(&dy, r)
                } else if c.pull {
                    to_all(&meta, r)
                } else {
                    to_all(&recv, r) | to_all(&meta, r)
                };
                let input = if fwd {
                    x[r as usize]
                } else if resend {
                    x[r as usize] | dyin[r as usize]
                } else {
                    dyin[r as usize]
                };
                rw(&mut ops, if fwd && c.pull { 0 } else { input }, rows);
                if mutation != Mutation::DataFlagsBeforeRows {
                    release_data(&mut ops);
                }
                // block 0 waits for every source block's rows; the launch boundary holds the GEMMs back for it
                if b == 0 {
                    for s in 0..rn {
                        for bb in 0..bn {
                            ops.push(Op::FlagWaitGe { flag: flag(&data_f, r, s, bb), value: e });
                        }
                    }
                }
                if mutation != Mutation::GemmsInDispatchLaunch {
                    boundary(&mut ops);
                }

                // the rank's experts
                let wgrad = |ops: &mut Vec<Op>| rw(ops, all(&recv, r) | all(&dy, r), 0);
                if fwd {
                    if c.pull {
                        // GEMM1's movers: each row from its source's x (its address and slot from meta)
                        rw(&mut ops, all(&meta, r) | (0..rn).fold(0, |k, s| k | x[s as usize]), all(&recv, r));
                        ops.push(Op::Sync { id: arrivals[r as usize], warps: bn });
                    }
                    // GEMM1 + SwiGLU over recv (TMA), GEMM2 (scatter: rows to the sources' back, slots from meta)
                    rw(&mut ops, all(&recv, r), 0);
                    if c.scatter {
                        rw(&mut ops, all(&meta, r), to_all(&back, r));
                    }
                } else {
                    // z again from recv, dh + SwiGLU backward (dy rows, weights), dx rows; the weight gradients
                    rw(&mut ops, all(&recv, r) | all(&dy, r) | all(&meta, r), 0);
                    if mutation != Mutation::WgradAfterCombine {
                        wgrad(&mut ops);
                    }
                }
                boundary(&mut ops);

                // ep_combine: as owner, rows back (not when GEMM2 scattered them), then the back flags
                let release_back = |ops: &mut Vec<Op>| {
                    for s in 0..rn {
                        ops.push(Op::FlagStore { flag: flag(&back_f, s, r, b), value: e });
                    }
                };
                if mutation == Mutation::BackFlagsBeforeRows {
                    release_back(&mut ops);
                }
                if !(fwd && c.scatter) {
                    rw(&mut ops, all(&meta, r), to_all(&back, r));
                }
                if mutation != Mutation::BackFlagsBeforeRows {
                    release_back(&mut ops);
                }
                if mutation == Mutation::WgradAfterCombine && !fwd {
                    wgrad(&mut ops);
                }
                // as source: every owner block's flags, then the sums over its own back
                for o in 0..rn {
                    if (mutation == Mutation::CombineWaitsOwnRankOnly && o != r)
                        || (mutation == Mutation::CombineWaitsNextRankOnly && o != r && o != (r + 1) % rn)
                    {
                        continue;
                    }
                    for bb in 0..bn {
                        ops.push(Op::FlagWaitGe { flag: flag(&back_f, r, o, bb), value: e });
                    }
                }
                rw(&mut ops, all(&back, r), 0);
                boundary(&mut ops);
                fwd_seen |= fwd;
            }
            m.actor(&format!("rank{r}.block{b}"), r as u8 + 1, ops);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;
    use std::vec;

    fn cfg(blocks: u32, calls: &[Call], pull: bool, scatter: bool, lockstep: bool) -> Ep {
        Ep { ranks: 2, blocks, calls: calls.to_vec(), pull, scatter, lockstep }
    }

    fn ranks(ranks: u32, calls: &[Call], pull: bool, scatter: bool, lockstep: bool) -> Ep {
        Ep { ranks, ..cfg(1, calls, pull, scatter, lockstep) }
    }

    use Call::{Backward as B, BackwardResend as Rb, Forward as F};

    /// Every mode, both forms, call sequences with a forward after a backward, two forwards in a row and two
    /// backwards of one forward.
    #[test]
    fn ep_ranks_and_calls() {
        let mut states = 0;
        for calls in [vec![F, F], vec![F, B, F], vec![F, F, B], vec![F, B, B], vec![F, B, F, B]] {
            for (pull, scatter) in [(false, false), (true, false), (false, true), (true, true)] {
                for lockstep in [false, true] {
                    states += assert_ok(&model(&cfg(1, &calls, pull, scatter, lockstep), Mutation::None));
                }
            }
        }
        println!("ep, one block a rank: {states} states");
    }

    /// One layer serving two model layers: forward A, forward B, then their backwards in either order (the older
    /// forward's resends its rows), two backwards of one forward, a forward after a resending backward.
    #[test]
    fn ep_backward_resend() {
        let mut states = 0;
        for calls in [vec![F, F, B, Rb], vec![F, F, Rb, Rb], vec![F, Rb, F, B], vec![F, F, Rb, B]] {
            for (pull, scatter) in [(false, false), (true, false), (false, true), (true, true)] {
                for lockstep in [false, true] {
                    states += assert_ok(&model(&cfg(1, &calls, pull, scatter, lockstep), Mutation::None));
                }
            }
        }
        for calls in [vec![F, F, B, Rb], vec![F, Rb, B]] {
            states += assert_ok(&model(&cfg(2, &calls, false, false, false), Mutation::None));
        }
        states += assert_ok(&model(&ranks(3, &[F, F, Rb], false, false, false), Mutation::None));
        println!("ep, resending backwards: {states} states");
    }

    /// Two blocks a rank (each releases its own flags; only block 0 waits for the data flags).
    #[test]
    fn ep_two_blocks() {
        let mut states = 0;
        for calls in [vec![F, F], vec![F, B, F], vec![F, B, B]] {
            for (pull, scatter) in [(false, false), (true, false), (false, true), (true, true)] {
                for lockstep in [false, true] {
                    states += assert_ok(&model(&cfg(2, &calls, pull, scatter, lockstep), Mutation::None));
                }
            }
        }
        println!("ep, two blocks a rank: {states} states");
    }

    /// Three and four ranks of one block: every wait is for all the others, which two ranks cannot tell from a
    /// wait for "the other one".
    #[test]
    fn ep_three_and_four_ranks() {
        let mut states = 0;
        for calls in [vec![F, B, F], vec![F, B, B]] {
            for (pull, scatter) in [(false, false), (true, true)] {
                for lockstep in [false, true] {
                    states += assert_ok(&model(&ranks(3, &calls, pull, scatter, lockstep), Mutation::None));
                }
            }
        }
        states += assert_ok(&model(&ranks(4, &[F, B], false, false, false), Mutation::None));
        states += assert_ok(&model(&ranks(4, &[F, F], true, true, false), Mutation::None));
        println!("ep, three and four ranks: {states} states");
    }

    #[test]
    fn ep_mutations() {
        // a source waiting for the next rank only: all there is with two ranks, a race with three
        assert_ok(&model(&ranks(2, &[F, B], false, false, false), Mutation::CombineWaitsNextRankOnly));
        let v =
            assert_fails(&model(&ranks(3, &[F], false, false, false), Mutation::CombineWaitsNextRankOnly), Kind::Race);
        assert!(v.what.contains("back"), "{v}");
        let one = |calls: &[Call], pull, scatter| cfg(1, calls, pull, scatter, false);
        // a source that does not wait for the other owner reads its back while that owner still returns rows
        let v = assert_fails(&model(&one(&[F], false, false), Mutation::CombineWaitsOwnRankOnly), Kind::Race);
        assert!(v.what.contains("back"), "{v}");
        let v = assert_fails(&model(&one(&[F], false, false), Mutation::DataFlagsBeforeRows), Kind::Race);
        assert!(v.what.contains("recv") || v.what.contains("meta"), "{v}");
        // the source sums its back while the owner still returns rows into it
        let v = assert_fails(&model(&one(&[F], false, false), Mutation::BackFlagsBeforeRows), Kind::Race);
        assert!(v.what.contains("back"), "{v}");
        // a second backward's dispatch (no count all-gather first) writes recv_dy under the owner's weight
        // gradients; a forward next would not: its dispatch waits for every rank's counts of the new call before
        // it pushes a row, and no rank writes those before it has finished the backward
        let v = assert_fails(&model(&one(&[F, B, B], false, false), Mutation::WgradAfterCombine), Kind::Race);
        assert!(v.what.contains("dy["), "{v}");
        assert_ok(&model(&one(&[F, B, F], false, false), Mutation::WgradAfterCombine));
        assert_fails(&model(&one(&[F, B], false, false), Mutation::BackwardWaitsCounts), Kind::Deadlock);
        let two = cfg(2, &[F], false, false, false);
        let v = assert_fails(&model(&two, Mutation::GemmsInDispatchLaunch), Kind::Race);
        assert!(v.what.contains("recv"), "{v}");
        // what the emulated form (one launch for all ranks) cannot show: a release too early for the next call
        // races only when every rank runs on its own stream
        assert_ok(&model(&cfg(1, &[F, B, B], false, false, true), Mutation::WgradAfterCombine));
    }
}
