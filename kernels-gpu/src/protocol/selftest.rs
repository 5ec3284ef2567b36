//! The checker's own tests: small protocols, each wrong in one way and reported so, and its correct version
//! passing.
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op};
use std::format;
use std::vec::Vec;

/// Options of [`ring`]'s mutations.
#[derive(Clone, Copy, Default)]
struct RingBugs {
    /// The empty barriers expect one arrival more than there are consumer warps.
    extra_count: bool,
    /// The producer does not wait for `empty` before loading.
    no_empty_wait: bool,
    /// The consumers release a stage before their reads of it end.
    release_early: bool,
    /// The load's bytes differ from those announced.
    bytes_off: i64,
}

/// A producer and `c` consumer warps over an `s`-stage ring (full: the producer's arrival and the copy's
/// bytes; empty: one arrival per consumer warp), `n` iterations, as pipeline.rs's `Ring` counts them.
fn ring(s: u32, c: u32, n: u32, bugs: RingBugs) -> Model {
    let mut m = Model::new(&format!("ring S={s} C={c} N={n}"));
    let full: Vec<u8> = (0..s).map(|i| m.mbar(&format!("full[{i}]"), 1)).collect();
    let empty: Vec<u8> = (0..s).map(|i| m.mbar(&format!("empty[{i}]"), c + bugs.extra_count as u32)).collect();
    if bugs.extra_count {
        for i in 0..s {
            m.mbars[empty[i as usize] as usize].leftover_ok = true;
        }
    }
    let stage: Vec<Mask> = (0..s).map(|i| m.region(&format!("stage{i}"), false)).collect();
    let mut p = Vec::new();
    for it in 0..n {
        let (st, ph) = ((it % s) as usize, (it / s) as i64);
        if !bugs.no_empty_wait {
            p.push(Op::Wait { bar: empty[st], parity: (((it / s) & 1) ^ 1) as u8, phase: ph - 1 });
        }
        p.push(Op::ArriveTx { bar: full[st], bytes: 100, phase: ph });
        p.push(Op::Load { bar: full[st], bytes: 100 + bugs.bytes_off, write: stage[st], phase: ph });
    }
    m.actor("producer", 0, p);
    let mut q = Vec::new();
    for it in 0..n {
        let (st, ph) = ((it % s) as usize, (it / s) as i64);
        q.push(Op::Wait { bar: full[st], parity: ((it / s) & 1) as u8, phase: ph });
        q.push(Op::BeginRead(stage[st]));
        if bugs.release_early {
            q.push(Op::Arrive { bar: empty[st], count: 1, phase: ph });
            q.push(Op::EndRead(stage[st]));
        } else {
            q.push(Op::EndRead(stage[st]));
            q.push(Op::Arrive { bar: empty[st], count: 1, phase: ph });
        }
    }
    for w in 0..c {
        m.actor(&format!("consumer{w}"), 0, q.clone());
    }
    m
}

#[test]
fn ring_correct_passes() {
    for s in 1..=3 {
        for c in 1..=3 {
            for n in 0..=7 {
                assert_ok(&ring(s, c, n, RingBugs::default()));
            }
        }
    }
}

#[test]
fn ring_one_arrival_too_few_deadlocks() {
    let v = assert_fails(&ring(2, 2, 5, RingBugs { extra_count: true, ..Default::default() }), Kind::Deadlock);
    assert!(v.what.contains("producer at wait empty"), "{v}");
    // a ring that never wraps needs no release: the bug is invisible there
    assert_ok(&ring(2, 2, 2, RingBugs { extra_count: true, ..Default::default() }));
}

#[test]
fn ring_without_empty_wait_races() {
    let v = assert_fails(&ring(2, 1, 3, RingBugs { no_empty_wait: true, ..Default::default() }), Kind::Race);
    assert!(v.what.contains("TMA load into stage0"), "{v}");
}

#[test]
fn ring_release_before_end_of_reads_races() {
    assert_fails(&ring(2, 2, 3, RingBugs { release_early: true, ..Default::default() }), Kind::Race);
}

#[test]
fn ring_wrong_bytes() {
    // more bytes than announced: the tx-count goes negative once the arrival is in
    assert_fails(&ring(2, 1, 2, RingBugs { bytes_off: 16, ..Default::default() }), Kind::Overflow);
    // fewer: the phase never completes
    assert_fails(&ring(2, 1, 2, RingBugs { bytes_off: -16, ..Default::default() }), Kind::Deadlock);
}

/// A hand-over of `n` items from one side to the other through one mbarrier `full` (count 1), the item of
/// phase i in buffer i % `bufs`; with `back_pressure` an `empty` barrier returns each buffer (the consumer's
/// arrival), else the producer runs on.
fn handover(n: u32, bufs: u32, back_pressure: bool) -> Model {
    let mut m = Model::new(&format!("hand-over n={n} bufs={bufs} back_pressure={back_pressure}"));
    let full = m.mbar("full", 1);
    let empty = m.mbar("empty", 1);
    let buf: Vec<Mask> = (0..bufs).map(|i| m.region(&format!("buf{i}"), false)).collect();
    let mut p = Vec::new();
    let mut c = Vec::new();
    for i in 0..n {
        let (b, ph) = (buf[(i % bufs) as usize], i as i64);
        if back_pressure {
            p.push(Op::Wait { bar: empty, parity: ((i & 1) ^ 1) as u8, phase: ph - 1 });
        }
        p.push(Op::BeginWrite(b));
        p.push(Op::EndWrite(b));
        p.push(Op::Arrive { bar: full, count: 1, phase: ph });
        c.push(Op::Wait { bar: full, parity: (i & 1) as u8, phase: ph });
        c.push(Op::BeginRead(b));
        c.push(Op::EndRead(b));
        if back_pressure {
            c.push(Op::Arrive { bar: empty, count: 1, phase: ph });
        }
    }
    m.actor("producer", 0, p);
    m.actor("consumer", 0, c);
    m
}

#[test]
fn handover_two_phases_ahead_aliases() {
    // three buffers, no back-pressure: the producer may complete phases 0, 1 and 2 before the consumer's
    // first wait (parity 0) looks: it passes in phase 3
    assert_fails(&handover(3, 3, false), Kind::Aliasing);
    // a consumer that takes only the second item waits on parity 1 at once: it passes in phase 0
    let mut m = handover(2, 2, false);
    m.actors[1].ops.drain(..3);
    let v = assert_fails(&m, Kind::Aliasing);
    assert!(v.what.contains("for phase 1 passes in phase 0"), "{v}");
    // one buffer: the producer rewrites it under the consumer's reads first
    assert_fails(&handover(3, 1, false), Kind::Race);
    // two phases: the consumer's wait for phase 0 sees phase 2, of the same parity, and waits for ever
    let v = assert_fails(&handover(2, 2, false), Kind::Aliasing);
    assert!(v.what.contains("yet to wait for its phase 0"), "{v}");
    assert_ok(&handover(1, 1, false));
    assert_ok(&handover(6, 1, true));
    assert_ok(&handover(6, 3, true));
}

/// `warps` warps of a team fill a staging box `boxes` times; the leader (warp 0) stores each through the
/// copy engine: wait_group.read 0, bar.sync, the writes, bar.sync, the store (as `store_box` runs it), with
/// `count` warps in the bar.sync.
fn staging(warps: u32, boxes: u32, count: u32, final_wait: bool) -> Model {
    let mut m = Model::new(&format!("staging warps={warps} boxes={boxes} count={count}"));
    let bar = m.named_bar("bar 2");
    let bx = m.region("box", true);
    for w in 0..warps {
        let mut ops = Vec::new();
        for _ in 0..boxes {
            if w == 0 {
                ops.push(Op::WaitRead(0));
            }
            ops.push(Op::Sync { id: bar, warps: count });
            ops.push(Op::BeginWrite(bx));
            ops.push(Op::EndWrite(bx));
            ops.push(Op::Sync { id: bar, warps: count });
            if w == 0 {
                ops.push(Op::Store(bx));
                ops.push(Op::Commit);
            }
        }
        if w == 0 && final_wait {
            ops.push(Op::WaitRead(0));
        }
        m.actor(&format!("warp{w}"), 1, ops);
    }
    m
}

#[test]
fn staging_named_barrier_counts() {
    for boxes in 1..=3 {
        assert_ok(&staging(4, boxes, 4, true));
    }
    // bar.sync counting 2 of the 4 warps: a warp rewrites the box while the copy engine reads it
    assert_fails(&staging(4, 2, 2, true), Kind::Race);
    // counting 5: nobody leaves
    assert_fails(&staging(4, 1, 5, true), Kind::Deadlock);
    // without the final wait the block may exit with the store reading the box
    assert_fails(&staging(4, 1, 4, false), Kind::UncleanEnd);
}

#[test]
fn stray_and_misplaced_arrivals() {
    let mut m = Model::new("two arrivals on a one-arrival barrier");
    let b = m.mbar("bar", 1);
    m.actor("a", 0, [Op::Arrive { bar: b, count: 1, phase: 0 }].into());
    m.actor("b", 0, [Op::Arrive { bar: b, count: 1, phase: 0 }].into());
    assert_fails(&m, Kind::Aliasing);
    let mut m = Model::new("a stray arrival");
    let b = m.mbar("bar", 2);
    m.actor("a", 0, [Op::Arrive { bar: b, count: 1, phase: 0 }].into());
    assert_fails(&m, Kind::UncleanEnd);
    let mut m = Model::new("a warp arrives on a barrier counting threads of half a warp");
    let b = m.mbar("bar", 16);
    m.actor("a", 0, [Op::Arrive { bar: b, count: 32, phase: 0 }].into());
    assert_fails(&m, Kind::Overflow);
}

#[test]
fn flags_order_a_handover() {
    for correct in [true, false] {
        let mut m = Model::new("flag hand-over");
        let f = m.flag("ready");
        let r = m.region("buf", false);
        m.actor("writer", 0, [Op::BeginWrite(r), Op::EndWrite(r), Op::FlagStore { flag: f, value: 1 }].into());
        let mut c = Vec::new();
        if correct {
            c.push(Op::FlagWaitGe { flag: f, value: 1 });
        }
        c.extend([Op::BeginRead(r), Op::EndRead(r)]);
        m.actor("reader", 0, c);
        if correct {
            assert_ok(&m);
        } else {
            assert_fails(&m, Kind::Race);
        }
    }
}

/// A region with disjoint writers (several ranks filling one buffer, each its own rows): two writers of different
/// teams at once pass, a reader while one writes is a race; the same region declared plainly races on the writes.
#[test]
fn disjoint_writers_race_only_with_readers() {
    for (disjoint, reader) in [(true, false), (true, true), (false, false)] {
        let mut m = Model::new("disjoint writers");
        let r = if disjoint { m.region_disjoint("recv") } else { m.region("recv", true) };
        m.actor("rank0", 1, [Op::BeginWrite(r), Op::EndWrite(r)].into());
        m.actor("rank1", 2, [Op::BeginWrite(r), Op::EndWrite(r)].into());
        if reader {
            m.actor("owner", 3, [Op::BeginRead(r), Op::EndRead(r)].into());
        }
        if disjoint && !reader {
            assert_ok(&m);
        } else {
            let v = assert_fails(&m, Kind::Race);
            assert!(v.what.contains("recv"), "{v}");
        }
    }
}

/// A hand-over of `n` buffers through named barriers (CUTLASS's `NamedBarrier` pipeline): the producer warp
/// writes, `bar.arrive full`; the consumer warp `bar.sync full`, reads, `bar.arrive empty`; the producer `bar.sync
/// empty` before it rewrites (`back_pressure`).
fn named_handover(n: u32, back_pressure: bool) -> Model {
    let mut m = Model::new(&format!("named hand-over n={n} back_pressure={back_pressure}"));
    let (full, empty) = (m.named_bar("full"), m.named_bar("empty"));
    let buf = m.region("buf", false);
    let (mut p, mut c) = (Vec::new(), Vec::new());
    for i in 0..n {
        if i > 0 && back_pressure {
            p.push(Op::Sync { id: empty, warps: 2 });
        }
        p.extend([Op::BeginWrite(buf), Op::EndWrite(buf), Op::BarArrive { id: full, warps: 2 }]);
        c.extend([Op::Sync { id: full, warps: 2 }, Op::BeginRead(buf), Op::EndRead(buf)]);
        if i + 1 < n {
            c.push(Op::BarArrive { id: empty, warps: 2 });
        }
    }
    m.actor("producer", 0, p);
    m.actor("consumer", 0, c);
    m
}

#[test]
fn named_barrier_handover() {
    for n in 1..=4 {
        assert_ok(&named_handover(n, true));
    }
    assert_ok(&named_handover(1, false));
    assert_fails(&named_handover(2, false), Kind::Race);
}

/// Options of [`channel`]'s mutations.
#[derive(Clone, Copy, Default)]
struct ChannelBugs {
    /// The receiver gives the slot back before it reads it.
    release_before_read: bool,
    /// The sender does not wait for the slot's `empty`.
    no_empty_wait: bool,
    /// The receiver announces the bytes after its wait.
    expect_after_wait: bool,
}

/// pipeline.rs `PairChannel` reduced: `n` values from a sender (one CTA) to a receiver (the other) through `q`
/// slots in the receiver's shared memory; per slot `full` (in the receiver: its own arrive.expect_tx(4) plus the
/// 4 bytes of the sender's `st.async`) and `empty` (in the sender: the receiver's remote arrival once it has read
/// the slot).
fn channel(n: u32, q: u32, bugs: ChannelBugs) -> Model {
    let mut m = Model::new(&format!("channel n={n} q={q}"));
    let full: Vec<u8> = (0..q).map(|i| m.mbar(&format!("full[{i}]"), 1)).collect();
    let empty: Vec<u8> = (0..q).map(|i| m.mbar(&format!("empty[{i}]"), 1)).collect();
    let slot: Vec<Mask> = (0..q).map(|i| m.region(&format!("slot{i}"), false)).collect();
    let (mut p, mut c) = (Vec::new(), Vec::new());
    for j in 0..n {
        let (s, ph) = ((j % q) as usize, (j / q) as i64);
        if !bugs.no_empty_wait {
            p.push(Op::Wait { bar: empty[s], parity: (((j / q) & 1) ^ 1) as u8, phase: ph - 1 });
        }
        p.push(Op::StAsync { bar: full[s], bytes: 4, write: slot[s], phase: ph });
        let expect = Op::ArriveTx { bar: full[s], bytes: 4, phase: ph };
        if !bugs.expect_after_wait {
            c.push(expect);
        }
        c.push(Op::Wait { bar: full[s], parity: ((j / q) & 1) as u8, phase: ph });
        if bugs.expect_after_wait {
            c.push(expect);
        }
        let back = Op::Arrive { bar: empty[s], count: 1, phase: ph };
        if bugs.release_before_read {
            c.extend([back, Op::BeginRead(slot[s]), Op::EndRead(slot[s])]);
        } else {
            c.extend([Op::BeginRead(slot[s]), Op::EndRead(slot[s]), back]);
        }
    }
    m.actor("sender", 0, p);
    m.actor("receiver", 0, c);
    m
}

#[test]
fn st_async_channel() {
    // the store's bytes may land before the receiver's expect_tx (the tx-count goes negative first)
    for q in 1..=2 {
        for n in 0..=6 {
            assert_ok(&channel(n, q, ChannelBugs::default()));
        }
    }
    // the slot given back before it is read: the next store into it races with the read
    let v = assert_fails(&channel(3, 2, ChannelBugs { release_before_read: true, ..Default::default() }), Kind::Race);
    assert!(v.what.contains("an st.async into slot0"), "{v}");
    assert_ok(&channel(2, 2, ChannelBugs { release_before_read: true, ..Default::default() }));
    // no back-pressure: a second store into the slot while the first is in flight
    let v = assert_fails(&channel(3, 2, ChannelBugs { no_empty_wait: true, ..Default::default() }), Kind::Race);
    assert!(v.what.contains("an st.async into slot0 writes slot0 while an st.async into slot0"), "{v}");
    // the receiver's arrival is one of the phase's: it never completes without it
    assert_fails(&channel(1, 2, ChannelBugs { expect_after_wait: true, ..Default::default() }), Kind::Deadlock);
}

/// Two CTAs' warps each arrive on the other's barrier (a remote arrive: in flight until it lands) and on their own,
/// and wait on their own; with `sync` both end with a cluster sync (its arrival waits for the actor's remote
/// arrives to land).
fn remote(sync: bool, wait: bool) -> Model {
    let mut m = Model::new(&format!("remote arrives sync={sync} wait={wait}"));
    let bars = [m.mbar("cta0.bar", 2), m.mbar("cta1.bar", 2)];
    let id = m.named_bar("cluster");
    for r in 0..2 {
        let mut ops = [
            Op::ArriveRemote { bar: bars[1 - r], count: 1, phase: 0 },
            Op::Arrive { bar: bars[r], count: 1, phase: 0 },
        ]
        .to_vec();
        if wait {
            ops.push(Op::Wait { bar: bars[r], parity: 0, phase: 0 });
        }
        if sync {
            ops.push(Op::ClusterSync { id, warps: 2 });
        }
        m.actor(&format!("cta{r}.warp"), 0, ops);
    }
    m
}

#[test]
fn remote_arrives_and_cluster_sync() {
    assert_ok(&remote(true, false));
    assert_ok(&remote(true, true));
    // each CTA waits for the other's arrival: it has landed before either finishes
    assert_ok(&remote(false, true));
    // nobody waits: a CTA may leave with its arrival still on its way to the other
    let v = assert_fails(&remote(false, false), Kind::UncleanEnd);
    assert!(v.what.contains("copy in flight"), "{v}");
}
