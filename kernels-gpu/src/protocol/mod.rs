//! An exhaustive model checker for the warp-role synchronisation protocols of the persistent kernels (host tests
//! only; `cargo test -p megamoe-kernels protocol`). Actors (warps, or a warp's one issuing thread) run
//! straight-line programs of [`Op`]s that the models generate from a kernel's parameters, mirroring its loops; the
//! checker explores every interleaving of them and of the copy engine's asynchronous completions, depth first with
//! a visited set of state digests, and reports the number of states and, per kind, the first violation found with
//! the schedule of steps that led to it (each naming its actor and ops):
//!
//! 1. deadlock: an actor has not finished and nothing (no actor, no copy in flight) can step;
//! 2. phase aliasing: every op carries the phase it means. An arrival (or a copy's bytes) landing in another phase;
//!    a wait for "phase n has completed" that passes while the barrier is not in phase n + 1 (it ran ahead: the
//!    data may be a later phase's; or the wait passed early), or that blocks in a phase past n; and, checked when
//!    a phase completes, a barrier reaching phase n + 2 while an actor has yet to wait for its phase n (that wait
//!    will see a phase of the same parity and block for ever, or pass on a later phase's data);
//! 3. race: a write interval (a warp's stores, a TMA load or `cp.async` copies in flight) overlapping another
//!    agent's read or write interval of the same shared-memory region (a TMA store reads its box until a
//!    `wait_group.read` covers it; its reads are an agent of their own, so a warp rewriting its own box under its
//!    store races too); writes of one team into a partitioned region (each warp its own rows) do not race, nor do
//!    any two writes into a region declared with disjoint writers (each writer its own rows, whatever its team);
//! 4. overflow: more arrivals or bytes than a phase expects, a named barrier used with two counts at once;
//! 5. an unclean end: the block exits with a copy in flight, or an mbarrier holds stray arrivals or bytes, or a
//!    named barrier a partial generation.
//!
//! Semantics (PTX, sm_90):
//! - mbarrier (count C): phase P (from 0), pending arrivals (from C), tx-count (from 0, signed). `arrive`
//!   decrements pending, `arrive.expect_tx(b)` adds b to tx then arrives, a TMA load's completion subtracts its
//!   bytes, `cp.async.mbarrier.arrive.noinc` arrives when the thread's copies complete; pending = 0 and tx = 0
//!   complete the phase (P += 1, pending = C). `try_wait.parity(p)` passes iff (P & 1) != p.
//! - named barrier (`bar.sync id, n` / `bar.arrive id, n`, in warps): a generation completes when n / 32 warps
//!   have arrived; `bar.sync` waits for it.
//! - bulk async-groups of TMA stores: a store reads its box from its issue until its group completes (in order);
//!   `wait_group.read N` returns once at most N committed groups are left.
//! - global flags: u32 words, `st.release` and a spin `ld.acquire` until >= a value.
//! - `st.async ... mbarrier::complete_tx::bytes` (a store into another CTA of the cluster): a write of its region
//!   from its issue until its bytes complete on the barrier (of the CTA it writes), as a TMA load's.
//! - 2-CTA clusters: both CTAs' actors in one model, every barrier a global object: a remote arrival
//!   (`mapa` + `mbarrier.arrive.shared::cluster`) is an arrival by an actor of the other CTA that travels there
//!   (in flight from its issue, as a copy: the issuing warp goes on), a TMA multicast one load per CTA it writes
//!   (each completing on that CTA's barrier); `cluster::sync()` a barrier of all actors whose arrival (a release)
//!   waits until the actor's remote arrives have landed.
//!
//! Reductions, each keeping every violation reachable:
//! - symmetry: actors of one team whose programs are the same up to a renaming of their private regions (no other
//!   actor names them) are interchangeable: a state is hashed with their (renamed) states sorted, and of several of
//!   them in the same state only the first steps;
//! - ops that open an interval (`Begin*`, a TMA store's or load's or `cp.async`'s issue) or touch only what no
//!   other actor's step reads or could disable (`commit_group`, either half of a `bar.sync` once it can run) run in
//!   the same step as the op before them: an interval opened earlier only adds races, and the others commute with
//!   every other step;
//! - ops that close an interval (`End*`, and `wait_group.read`, at which the copy engine finishes the groups it
//!   waits for: as late as possible) run in the same step as the op after them when that one can run now (an
//!   interval closed later only adds races), else as a step of their own;
//! - late copies: a copy in flight (a TMA load's or an `st.async`'s bytes, `cp.async` copies' or a remote
//!   arrive's arrivals) lands (a step) only while an actor's next op (past its `End*` ops) waits or arrives on its
//!   barrier (or is a cluster sync waiting for it to land), or no actor can step. In any run, a landing moved
//!   later, up to the first state where an actor's next op is on its barrier (with the other landings on that
//!   barrier moved there, in their order), passes only steps that do not touch that barrier (nothing else does: no
//!   actor's next op is on it), so their barrier states and the checks on them (an arrival's phase, a wait's,
//!   `settle`'s look at the actors' next waits) are the same, and its write interval stays open longer (only more
//!   races): every run reorders into one of these that reaches the same violation (a deadlock, or the end: its
//!   state once the landings left over have landed; a race: a state with the same intervals open and more; the
//!   others: the same barrier state at the step or state that shows them).
//!
//! A state's digest is 128 bits (each actor's state first folded to 64): two states of one digest would prune one
//! of them. At most [`LIMIT`] states a check (then a [`Kind::Limit`] violation).
//!
//! The kernels' models: [`gemm`] (the cooperative M-grouped GEMMs, the gathering producer), [`ew7`] (the
//! epilogue-warp kernels), [`wgrad`] (the K-grouped weight gradients, single CTAs and the 2-CTA cluster forms with
//! static or run-time pairs), [`pingpong`] (the ping-pong SwiGLU backward); [`ring`] generates pipeline.rs's ring
//! ops for them. [`ep`] is of another scale: the expert-parallel protocol across ranks and calls (blocks as
//! actors, global flags, launch boundaries as barriers).
use std::collections::HashSet;
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

pub use ring::{mainloop_coop, Ring};

mod ep;
mod ew7;
mod fp8w;
mod gemm;
mod pingpong;
mod ring;
mod selftest;
mod wgrad;

/// A set of shared-memory regions (bit r: region r of [`Model::regions`], r < 32; the checker keeps bits 32.. for
/// its renaming of private regions).
pub type Mask = u64;

/// One step of an actor's program. Phases are the mbarrier phase numbers the op *means* (checked, not used to
/// decide): an arrival "in phase n", a wait "until phase n has completed" (n = -1: nothing to wait for).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `mbarrier.arrive` by `count` threads (a lane: 1, a warp: 32) in phase `phase`.
    Arrive {
        bar: u8,
        count: u32,
        phase: i64,
    },
    /// `mbarrier.arrive.expect_tx`: tx-count += `bytes`, then one arrival, in phase `phase`.
    ArriveTx {
        bar: u8,
        bytes: i64,
        phase: i64,
    },
    /// Spin on `mbarrier.try_wait.parity(parity)`, meaning "phase `phase` has completed".
    Wait {
        bar: u8,
        parity: u8,
        phase: i64,
    },
    /// A TMA load (`cp.async.bulk.tensor ... complete_tx::bytes`) writing `write` until it completes `bytes` on
    /// `bar` in phase `phase`.
    Load {
        bar: u8,
        bytes: i64,
        write: Mask,
        phase: i64,
    },
    /// `st.async.shared::cluster.mbarrier::complete_tx::bytes` (a store into a CTA of the cluster, usually the
    /// peer's): writes `write` until it completes `bytes` on `bar` (of the CTA it writes) in phase `phase`. The
    /// same semantics as [`Op::Load`] (an asynchronous write whose bytes complete on a barrier), named apart.
    StAsync {
        bar: u8,
        bytes: i64,
        write: Mask,
        phase: i64,
    },
    /// `mbarrier.arrive.shared::cluster` on a barrier of another CTA of the cluster (an address from `mapa`):
    /// `count` arrivals in phase `phase` that travel to it (in flight from their issue, landing as a copy's
    /// arrivals do).
    ArriveRemote {
        bar: u8,
        count: u32,
        phase: i64,
    },
    /// `count` threads' `cp.async` copies writing `write`, each thread's followed by `cp.async.mbarrier.arrive.noinc`
    /// on `bar`: `count` arrivals in phase `phase` once the copies complete. (Copies of one team into a partitioned
    /// region do not race with each other: each thread its own bytes.)
    CpAsync {
        bar: u8,
        count: u32,
        write: Mask,
        phase: i64,
    },
    /// Generic-proxy reads / writes of regions by this actor, from Begin to End.
    BeginRead(Mask),
    EndRead(Mask),
    BeginWrite(Mask),
    EndWrite(Mask),
    /// A TMA store (`cp.async.bulk.tensor` shared -> global, `bulk_group`) reading `Mask` until its group
    /// completes.
    Store(Mask),
    /// `cp.async.bulk.commit_group`.
    Commit,
    /// `cp.async.bulk.wait_group.read N` (or `wait_group N`: the same for shared memory).
    WaitRead(u8),
    /// `bar.sync id, 32 * warps`.
    Sync {
        id: u8,
        warps: u32,
    },
    /// `cluster::sync()` (`barrier.cluster.arrive.release` + `wait.acquire`) among `warps` actors (of both CTAs),
    /// as a `bar.sync` on named barrier `id`: its arrival (a release) only once this actor's remote arrives have
    /// landed.
    ClusterSync {
        id: u8,
        warps: u32,
    },
    /// `bar.arrive id, 32 * warps`.
    BarArrive {
        id: u8,
        warps: u32,
    },
    /// `st.release` of `value` into global flag `flag`.
    FlagStore {
        flag: u8,
        value: u32,
    },
    /// Spin until global flag `flag` >= `value` (acquire).
    FlagWaitGe {
        flag: u8,
        value: u32,
    },
}

impl Op {
    /// Ops that close intervals: an `End*`, or a `wait_group.read` (the copy engine finishes the reads of the groups
    /// it waits for when it runs: as late as the wait lets it).
    fn is_end(&self) -> bool {
        matches!(self, Op::EndRead(_) | Op::EndWrite(_) | Op::WaitRead(_))
    }
}

/// An mbarrier of a model: its name, its arrival count, and whether it may end with arrivals pending (a model
/// whose protocol leaves one behind on purpose).
#[derive(Clone, Debug)]
pub struct MbarDecl {
    pub name: String,
    pub count: u32,
    pub leftover_ok: bool,
}

/// A shared-memory region; `partitioned`: actors of one team write disjoint parts of it at once (each its own
/// rows), so writes of one team do not race with each other there; `disjoint_writers`: every writer, of any team,
/// writes its own part (a buffer that several ranks fill, each its own rows), so no two writes race there (a read
/// while anyone writes still does).
#[derive(Clone, Debug)]
pub struct RegionDecl {
    pub name: String,
    pub partitioned: bool,
    pub disjoint_writers: bool,
}

/// An actor: a warp (or its issuing lane) with its program, of `team` (> 0) for partitioned regions.
#[derive(Clone, Debug)]
pub struct Actor {
    pub name: String,
    pub ops: Vec<Op>,
    pub team: u8,
}

/// A protocol: its barriers, named barriers, regions, flags and actors.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub name: String,
    pub mbars: Vec<MbarDecl>,
    pub named: Vec<String>,
    pub regions: Vec<RegionDecl>,
    pub flags: Vec<String>,
    pub actors: Vec<Actor>,
}

impl Model {
    pub fn new(name: &str) -> Self {
        Model { name: name.into(), ..Default::default() }
    }
    /// Declare an mbarrier of `count` arrivals; its index.
    pub fn mbar(&mut self, name: &str, count: u32) -> u8 {
        self.mbars.push(MbarDecl { name: name.into(), count, leftover_ok: false });
        (self.mbars.len() - 1) as u8
    }
    /// Declare a named barrier (ids are the model's indices: give them the kernel's ids' names); its index.
    pub fn named_bar(&mut self, name: &str) -> u8 {
        self.named.push(name.into());
        (self.named.len() - 1) as u8
    }
    /// Declare a region; its mask.
    pub fn region(&mut self, name: &str, partitioned: bool) -> Mask {
        self.regions.push(RegionDecl { name: name.into(), partitioned, disjoint_writers: false });
        assert!(self.regions.len() <= 32, "at most 32 regions");
        1 << (self.regions.len() - 1)
    }
    /// Declare a region whose writers write disjoint parts (see [`RegionDecl`]); its mask.
    pub fn region_disjoint(&mut self, name: &str) -> Mask {
        let m = self.region(name, false);
        self.regions.last_mut().expect("just declared").disjoint_writers = true;
        m
    }
    /// Declare a global flag; its index.
    pub fn flag(&mut self, name: &str) -> u8 {
        self.flags.push(name.into());
        (self.flags.len() - 1) as u8
    }
    /// Add an actor.
    pub fn actor(&mut self, name: &str, team: u8, ops: Vec<Op>) {
        self.actors.push(Actor { name: name.into(), ops, team });
    }

    fn bar_name(&self, b: u8) -> &str {
        &self.mbars[b as usize].name
    }
    fn mask_name(&self, m: Mask) -> String {
        let mut s = String::new();
        for (r, d) in self.regions.iter().enumerate() {
            if m & (1 << r) != 0 {
                if !s.is_empty() {
                    s.push('+');
                }
                s.push_str(&d.name);
            }
        }
        s
    }
    /// `op`, in words.
    pub fn op_name(&self, op: &Op) -> String {
        match *op {
            Op::Arrive { bar, count, phase } => format!("arrive x{count} on {} (phase {phase})", self.bar_name(bar)),
            Op::ArriveTx { bar, bytes, phase } => {
                format!("arrive.expect_tx {bytes} B on {} (phase {phase})", self.bar_name(bar))
            }
            Op::Wait { bar, parity, phase } => {
                format!("wait {} parity {parity} (phase {phase} done)", self.bar_name(bar))
            }
            Op::Load { bar, bytes, write, phase } => {
                format!("TMA load {bytes} B into {} on {} (phase {phase})", self.mask_name(write), self.bar_name(bar))
            }
            Op::StAsync { bar, bytes, write, phase } => {
                format!("st.async {bytes} B into {} on {} (phase {phase})", self.mask_name(write), self.bar_name(bar))
            }
            Op::ArriveRemote { bar, count, phase } => {
                format!("remote arrive x{count} on {} (phase {phase})", self.bar_name(bar))
            }
            Op::CpAsync { bar, count, write, phase } => format!(
                "cp.async x{count} into {} with arrive.noinc on {} (phase {phase})",
                self.mask_name(write),
                self.bar_name(bar)
            ),
            Op::BeginRead(m) => format!("begin read {}", self.mask_name(m)),
            Op::EndRead(m) => format!("end read {}", self.mask_name(m)),
            Op::BeginWrite(m) => format!("begin write {}", self.mask_name(m)),
            Op::EndWrite(m) => format!("end write {}", self.mask_name(m)),
            Op::Store(m) => format!("TMA store from {}", self.mask_name(m)),
            Op::Commit => "commit_group".into(),
            Op::WaitRead(n) => format!("wait_group.read {n}"),
            Op::Sync { id, warps } => format!("bar.sync {} ({warps} warps)", self.named[id as usize]),
            Op::ClusterSync { id, warps } => format!("cluster sync {} ({warps} actors)", self.named[id as usize]),
            Op::BarArrive { id, warps } => format!("bar.arrive {} ({warps} warps)", self.named[id as usize]),
            Op::FlagStore { flag, value } => format!("st.release {} = {value}", self.flags[flag as usize]),
            Op::FlagWaitGe { flag, value } => format!("wait {} >= {value}", self.flags[flag as usize]),
        }
    }
}

/// The kinds of violation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Deadlock,
    Aliasing,
    Race,
    /// An arrival or a copy's bytes beyond what the phase expects, a named barrier's count mismatch.
    Overflow,
    /// The end: a copy in flight, stray arrivals or bytes, a partial named-barrier generation.
    UncleanEnd,
    /// The model exceeds the checker's bounds (bulk groups in flight, states).
    Limit,
}

/// A violation: its kind, what happened, and the steps from the start that led to it.
#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub what: String,
    pub trace: Vec<String>,
}

impl core::fmt::Display for Violation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        writeln!(f, "{:?}: {}", self.kind, self.what)?;
        writeln!(f, "trace ({} steps):", self.trace.len())?;
        for (i, s) in self.trace.iter().enumerate() {
            writeln!(f, "  {i:4} {s}")?;
        }
        Ok(())
    }
}

/// The outcome of a check: the states explored and the violations found, the first of each kind (a state that
/// violates is not explored further; the others are).
#[derive(Debug)]
pub struct Report {
    pub states: usize,
    pub violations: Vec<Violation>,
}

impl Report {
    /// The first violation of kind `k`.
    pub fn of(&self, k: Kind) -> Option<&Violation> {
        self.violations.iter().find(|v| v.kind == k)
    }
}

/// Committed bulk groups an actor may have in flight.
const GROUPS: usize = 6;

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct ActorState {
    pc: u16,
    /// In `bar.sync`: 1 + the generation it arrived in (0: not in one).
    sync: u32,
    reads: Mask,
    writes: Mask,
    /// TMA stores not yet committed, then the committed groups (oldest first).
    open: Mask,
    ng: u8,
    groups: [Mask; GROUPS],
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Mbar {
    phase: i64,
    pending: i64,
    tx: i64,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Named {
    gen: u32,
    arrived: u32,
    warps: u32,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Event {
    bar: u8,
    bytes: i64,
    write: Mask,
    phase: i64,
    /// 0: a TMA load's (or an `st.async`'s) bytes; else the arrivals of `cp.async` copies (or of a remote arrive).
    arrivals: u32,
    /// What it is: [`EV_LOAD`], [`EV_ST_ASYNC`], [`EV_CP_ASYNC`], [`EV_REMOTE`].
    kind: u8,
    /// A remote arrive: the actor that issued it (`cluster::sync` waits for its landing); else 0.
    issuer: u8,
    /// `cp.async` copies: their issuer's team (copies of one team into a partitioned region write disjoint parts).
    team: u8,
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct State {
    actors: Vec<ActorState>,
    mbars: Vec<Mbar>,
    named: Vec<Named>,
    events: Vec<Event>,
    flags: Vec<u32>,
}

/// A step: actor i, or copy event i (a TMA load completing). (A bulk group finishes its reads when a
/// `wait_group.read` needs it to.)
#[derive(Clone, Copy, Debug)]
enum Step {
    Actor(usize),
    Load(usize),
}

type Fail = (Kind, String);

const EV_LOAD: u8 = 0;
const EV_ST_ASYNC: u8 = 1;
const EV_CP_ASYNC: u8 = 2;
const EV_REMOTE: u8 = 3;

/// Two 64-bit lanes of multiply-xorshift mixing over the state's words: a 128-bit digest per state (the
/// visited set keeps digests, not states; two states of one digest would prune one of them).
struct Digest(u64, u64);

impl Digest {
    fn word(&mut self, w: u64) {
        self.0 = (self.0 ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 ^= self.0 >> 29;
        self.1 = (self.1.rotate_left(21) ^ w).wrapping_mul(0xd6e8_feb8_6659_fd93);
        self.1 ^= self.1 >> 32;
    }
    fn finish128(&self) -> u128 {
        let mix = |mut z: u64| {
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        ((mix(self.0) as u128) << 64) | mix(self.1) as u128
    }
}

impl core::hash::Hasher for Digest {
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.word(u64::from_le_bytes(w));
        }
    }
    fn write_u8(&mut self, v: u8) {
        self.word(v as u64 | 1 << 62);
    }
    fn write_u16(&mut self, v: u16) {
        self.word(v as u64 | 2 << 62);
    }
    fn write_u32(&mut self, v: u32) {
        self.word(v as u64);
    }
    fn write_u64(&mut self, v: u64) {
        self.word(v);
    }
    fn write_i64(&mut self, v: i64) {
        self.word(v as u64);
    }
    fn write_usize(&mut self, v: usize) {
        self.word(v as u64 ^ 3 << 62);
    }
    fn finish(&self) -> u64 {
        self.finish128() as u64
    }
}

/// The visited set's hasher: its keys are digests already.
#[derive(Default)]
struct Ident(u64);

impl core::hash::Hasher for Ident {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().take(8) {
            self.0 = self.0 << 8 | b as u64;
        }
    }
    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type Visited = HashSet<u128, core::hash::BuildHasherDefault<Ident>>;

struct Checker<'a> {
    m: &'a Model,
    /// Symmetry: the classes of interchangeable actors (their states are sorted when hashing), and each actor's
    /// class (1 + its index; 0: alone).
    classes: Vec<Vec<usize>>,
    class_of: Vec<usize>,
    /// Per actor: its private regions (no other actor's op names them) and their names in a class's common
    /// renaming (region bit -> bit 32 + k, k in the order of first use).
    privs: Vec<(Mask, Vec<(Mask, Mask)>)>,
    /// Per actor, per mbarrier b and pc: the phase of its first wait on b at or after pc (i64::MAX: none), at
    /// [b * (ops + 1) + pc].
    next_wait: Vec<Vec<i64>>,
    partitioned: Mask,
    disjoint: Mask,
}

/// The regions an op names.
fn regions_of(op: &Op) -> Mask {
    match *op {
        Op::BeginRead(m) | Op::EndRead(m) | Op::BeginWrite(m) | Op::EndWrite(m) | Op::Store(m) => m,
        Op::Load { write, .. } | Op::StAsync { write, .. } | Op::CpAsync { write, .. } => write,
        _ => 0,
    }
}

/// `m` with the private regions of `p` renamed.
fn rename(p: &(Mask, Vec<(Mask, Mask)>), m: Mask) -> Mask {
    if m & p.0 == 0 {
        return m;
    }
    p.1.iter().fold(m & !p.0, |r, &(from, to)| if m & from != 0 { r | to } else { r })
}

impl<'a> Checker<'a> {
    fn new(m: &'a Model) -> Self {
        let n = m.actors.len();
        assert!(n <= 64, "at most 64 actors");
        assert!(m.mbars.len() <= 128, "at most 128 mbarriers");
        for a in &m.actors {
            assert!(a.ops.len() < u16::MAX as usize, "programs of fewer than 65535 ops");
        }
        // the actors naming each region
        let mut users = [0u64; 32];
        for (i, a) in m.actors.iter().enumerate() {
            for op in &a.ops {
                let r = regions_of(op);
                assert!(r >> 32 == 0, "regions are bits 0..32");
                for (b, u) in users.iter_mut().enumerate() {
                    if r & 1 << b != 0 {
                        *u |= 1 << i;
                    }
                }
            }
        }
        let privs: Vec<(Mask, Vec<(Mask, Mask)>)> = m
            .actors
            .iter()
            .enumerate()
            .map(|(i, a)| {
                let mut p = (0, Vec::new());
                for op in &a.ops {
                    let r = regions_of(op);
                    for (b, &u) in users.iter().enumerate() {
                        if r & 1 << b != 0 && u == 1 << i && p.0 & 1 << b == 0 {
                            p.0 |= 1 << b;
                            p.1.push((1 << b, 1 << (32 + p.1.len())));
                        }
                    }
                }
                p
            })
            .collect();
        // interchangeable actors: one team, one program up to the renaming of their private regions
        let canon = |i: usize| -> Vec<Op> {
            let p = &privs[i];
            m.actors[i]
                .ops
                .iter()
                .map(|op| match *op {
                    Op::BeginRead(r) => Op::BeginRead(rename(p, r)),
                    Op::EndRead(r) => Op::EndRead(rename(p, r)),
                    Op::BeginWrite(r) => Op::BeginWrite(rename(p, r)),
                    Op::EndWrite(r) => Op::EndWrite(rename(p, r)),
                    Op::Store(r) => Op::Store(rename(p, r)),
                    Op::Load { bar, bytes, write, phase } => Op::Load { bar, bytes, write: rename(p, write), phase },
                    Op::StAsync { bar, bytes, write, phase } => {
                        Op::StAsync { bar, bytes, write: rename(p, write), phase }
                    }
                    Op::CpAsync { bar, count, write, phase } => {
                        Op::CpAsync { bar, count, write: rename(p, write), phase }
                    }
                    o => o,
                })
                .collect()
        };
        let progs: Vec<Vec<Op>> = (0..n).map(canon).collect();
        let mut classes: Vec<Vec<usize>> = Vec::new();
        let mut class_of = vec![0; n];
        for i in 0..n {
            if class_of[i] != 0 {
                continue;
            }
            let v: Vec<usize> =
                (i..n).filter(|&k| m.actors[k].team == m.actors[i].team && progs[k] == progs[i]).collect();
            if v.len() > 1 {
                for &k in &v {
                    class_of[k] = classes.len() + 1;
                }
                classes.push(v);
            }
        }
        let next_wait = m
            .actors
            .iter()
            .map(|a| {
                let n = a.ops.len() + 1;
                let mut t = vec![i64::MAX; m.mbars.len() * n];
                for b in 0..m.mbars.len() {
                    for pc in (0..a.ops.len()).rev() {
                        t[b * n + pc] = match a.ops[pc] {
                            Op::Wait { bar, phase, .. } if bar as usize == b => phase,
                            _ => t[b * n + pc + 1],
                        };
                    }
                }
                t
            })
            .collect();
        let partitioned = m.regions.iter().enumerate().filter(|(_, r)| r.partitioned).fold(0, |k, (r, _)| k | 1 << r);
        let disjoint = m.regions.iter().enumerate().filter(|(_, r)| r.disjoint_writers).fold(0, |k, (r, _)| k | 1 << r);
        Checker { m, classes, class_of, privs, next_wait, partitioned, disjoint }
    }

    /// Actor `i`'s state with its private regions renamed (the same for interchangeable actors in the same state).
    fn canon(&self, i: usize, a: &ActorState) -> ActorState {
        let p = &self.privs[i];
        if p.0 == 0 {
            return *a;
        }
        let mut c = *a;
        c.reads = rename(p, a.reads);
        c.writes = rename(p, a.writes);
        c.open = rename(p, a.open);
        for g in c.groups.iter_mut() {
            *g = rename(p, *g);
        }
        c
    }

    fn initial(&self) -> Result<State, Fail> {
        let mut st = State {
            actors: vec![
                ActorState { pc: 0, sync: 0, reads: 0, writes: 0, open: 0, ng: 0, groups: [0; GROUPS] };
                self.m.actors.len()
            ],
            mbars: self.m.mbars.iter().map(|b| Mbar { phase: 0, pending: b.count as i64, tx: 0 }).collect(),
            named: vec![Named { gen: 0, arrived: 0, warps: 0 }; self.m.named.len()],
            events: Vec::new(),
            flags: vec![0; self.m.flags.len()],
        };
        for i in 0..st.actors.len() {
            self.eager(&mut st, i, &mut None)?;
        }
        Ok(st)
    }

    fn digest(&self, st: &State) -> u128 {
        use core::hash::Hash;
        // each actor's state to a word; the words of a class's actors sorted (they are interchangeable)
        let mut words = [0u64; 64];
        assert!(st.actors.len() <= 64, "at most 64 actors");
        for (i, a) in st.actors.iter().enumerate() {
            let c = self.canon(i, a);
            let mut h = (c.pc as u64) << 32 ^ c.sync as u64 ^ (c.ng as u64) << 48;
            let mix = |h: u64, w: u64| {
                let x = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                x ^ x >> 31
            };
            h = mix(h, 0x5851_f42d_4c95_7f2d);
            for w in [c.reads, c.writes, c.open].into_iter().chain(c.groups[..c.ng as usize].iter().copied()) {
                h = mix(h, w);
            }
            words[i] = mix(h, 0x1405_7b7e_f767_814f);
        }
        for cl in &self.classes {
            let mut v = [0u64; 64];
            for (k, &i) in cl.iter().enumerate() {
                v[k] = words[i];
            }
            v[..cl.len()].sort_unstable();
            for (k, &i) in cl.iter().enumerate() {
                words[i] = v[k];
            }
        }
        let mut d = Digest(0xa409_3822_299f_31d0, 0x082e_fa98_ec4e_6c89);
        for &w in &words[..st.actors.len()] {
            d.word(w);
        }
        st.mbars.hash(&mut d);
        st.named.hash(&mut d);
        st.events.hash(&mut d);
        st.flags.hash(&mut d);
        d.finish128()
    }

    /// Whether op `op` of actor `i` can run now.
    fn enabled(&self, st: &State, i: usize, op: &Op) -> bool {
        let a = &st.actors[i];
        match *op {
            Op::Wait { bar, parity, .. } => (st.mbars[bar as usize].phase & 1) as u8 != parity,
            Op::Sync { id, .. } => a.sync == 0 || st.named[id as usize].gen != a.sync - 1,
            Op::ClusterSync { id, .. } if a.sync != 0 => st.named[id as usize].gen != a.sync - 1,
            // the arrival's release: this actor's remote arrives have landed
            Op::ClusterSync { .. } => !st.events.iter().any(|e| e.kind == EV_REMOTE && e.issuer as usize == i),
            Op::FlagWaitGe { flag, value } => st.flags[flag as usize] >= value,
            _ => true,
        }
    }

    /// Whether actor `i` can step: its op can run, or it stands at `End*` ops (they run alone if the op after
    /// them cannot).
    fn actor_enabled(&self, st: &State, i: usize) -> bool {
        let ops = &self.m.actors[i].ops;
        let pc = st.actors[i].pc as usize;
        pc < ops.len() && (ops[pc].is_end() || self.enabled(st, i, &ops[pc]))
    }

    /// Whether an op of actor `i` runs without an interleaving point before it, once it can: it opens an
    /// interval (an earlier open only adds races), or touches nothing another actor's step reads or could
    /// disable (the bulk groups, a named barrier's count and generation), so it commutes with every other step.
    fn is_eager(&self, st: &State, i: usize, op: &Op) -> bool {
        match op {
            Op::BeginRead(_)
            | Op::BeginWrite(_)
            | Op::Store(_)
            | Op::Commit
            | Op::Load { .. }
            | Op::StAsync { .. }
            | Op::ArriveRemote { .. }
            | Op::CpAsync { .. } => true,
            Op::Sync { .. } | Op::ClusterSync { .. } => self.enabled(st, i, op),
            _ => false,
        }
    }

    fn arrive(&self, st: &mut State, bar: u8, count: i64, tx: i64, phase: i64) -> Result<(), Fail> {
        let b = &mut st.mbars[bar as usize];
        let name = self.m.bar_name(bar);
        if b.phase != phase {
            return Err((
                Kind::Aliasing,
                format!("arrival on {name} meant for phase {phase} lands in phase {}", b.phase),
            ));
        }
        if b.pending < count {
            return Err((
                Kind::Overflow,
                format!("{count} arrivals on {name} in phase {phase}, which expects {} more", b.pending),
            ));
        }
        b.tx += tx;
        b.pending -= count;
        self.settle(st, bar)
    }

    /// Complete the phase of `bar` if its arrivals and bytes are all in; then no actor may still have a wait
    /// on it for a phase two or more behind (it would see the parity of its phase again, or pass on a later
    /// one).
    fn settle(&self, st: &mut State, bar: u8) -> Result<(), Fail> {
        let b = &mut st.mbars[bar as usize];
        if b.pending == 0 && b.tx == 0 {
            b.phase += 1;
            b.pending = self.m.mbars[bar as usize].count as i64;
            let p = b.phase;
            for (i, a) in st.actors.iter().enumerate() {
                let n = self.m.actors[i].ops.len() + 1;
                let w = self.next_wait[i][bar as usize * n + a.pc as usize];
                if w != i64::MAX && w + 2 <= p {
                    return Err((
                        Kind::Aliasing,
                        format!(
                            "{} completes phase {} while {} has yet to wait for its phase {w}: that wait will see \
                             phase {p} or later ({})",
                            self.m.bar_name(bar),
                            p - 1,
                            self.m.actors[i].name,
                            if (p - w) & 1 == 0 {
                                "same parity: it blocks for ever"
                            } else {
                                "it passes on a later phase"
                            }
                        ),
                    ));
                }
            }
        } else if b.pending == 0 && b.tx < 0 {
            return Err((
                Kind::Overflow,
                format!("{} has {} bytes more than announced in phase {}", self.m.bar_name(bar), -b.tx, b.phase),
            ));
        }
        Ok(())
    }

    /// Run op `op` of actor `i` (enabled); advances its pc unless it is the arrival half of a `bar.sync`.
    fn exec(&self, st: &mut State, i: usize, op: Op, log: &mut Option<&mut Vec<String>>) -> Result<(), Fail> {
        if let Some(l) = log {
            let what = match op {
                Op::Sync { .. } | Op::ClusterSync { .. } if st.actors[i].sync != 0 => {
                    format!("{} (leaves)", self.m.op_name(&op))
                }
                Op::Sync { .. } | Op::ClusterSync { .. } => format!("{} (arrives)", self.m.op_name(&op)),
                _ => self.m.op_name(&op),
            };
            l.push(what);
        }
        let mut advance = true;
        match op {
            Op::Arrive { bar, count, phase } => self.arrive(st, bar, count as i64, 0, phase)?,
            Op::ArriveTx { bar, bytes, phase } => self.arrive(st, bar, 1, bytes, phase)?,
            Op::Wait { bar, phase, parity } => {
                let p = st.mbars[bar as usize].phase;
                if p != phase + 1 {
                    return Err((
                        Kind::Aliasing,
                        format!(
                            "{}: wait on {} for phase {phase} passes in phase {p} (parity {parity})",
                            self.m.actors[i].name,
                            self.m.bar_name(bar)
                        ),
                    ));
                }
            }
            Op::FlagWaitGe { .. } => {}
            Op::WaitRead(n) => {
                // the copy engine finishes reading the oldest groups now (as late as the wait lets it: a read
                // interval closed later only adds races)
                let a = &mut st.actors[i];
                while a.ng > n {
                    a.groups.copy_within(1..GROUPS, 0);
                    a.groups[GROUPS - 1] = 0;
                    a.ng -= 1;
                }
            }
            Op::Load { bar, bytes, write, phase } => {
                st.events.push(Event { bar, bytes, write, phase, arrivals: 0, team: 0, kind: EV_LOAD, issuer: 0 });
                st.events.sort_unstable();
            }
            Op::StAsync { bar, bytes, write, phase } => {
                st.events.push(Event { bar, bytes, write, phase, arrivals: 0, team: 0, kind: EV_ST_ASYNC, issuer: 0 });
                st.events.sort_unstable();
            }
            Op::CpAsync { bar, count, write, phase } => {
                let team = self.m.actors[i].team;
                st.events.push(Event {
                    bar,
                    bytes: 0,
                    write,
                    phase,
                    arrivals: count,
                    team,
                    kind: EV_CP_ASYNC,
                    issuer: 0,
                });
                st.events.sort_unstable();
            }
            Op::ArriveRemote { bar, count, phase } => {
                let issuer = i as u8;
                st.events.push(Event {
                    bar,
                    bytes: 0,
                    write: 0,
                    phase,
                    arrivals: count,
                    team: 0,
                    kind: EV_REMOTE,
                    issuer,
                });
                st.events.sort_unstable();
            }
            Op::BeginRead(m) => st.actors[i].reads |= m,
            Op::EndRead(m) => st.actors[i].reads &= !m,
            Op::BeginWrite(m) => st.actors[i].writes |= m,
            Op::EndWrite(m) => st.actors[i].writes &= !m,
            Op::Store(m) => st.actors[i].open |= m,
            Op::Commit => {
                let a = &mut st.actors[i];
                if a.open != 0 {
                    if a.ng as usize == GROUPS {
                        return Err((Kind::Limit, format!("more than {GROUPS} bulk groups in flight")));
                    }
                    a.groups[a.ng as usize] = a.open;
                    a.ng += 1;
                    a.open = 0;
                }
            }
            Op::Sync { id, warps } | Op::ClusterSync { id, warps } | Op::BarArrive { id, warps } => {
                let is_sync = matches!(op, Op::Sync { .. } | Op::ClusterSync { .. });
                if is_sync && st.actors[i].sync != 0 {
                    // the waiting half: the generation it arrived in has completed
                    st.actors[i].sync = 0;
                } else {
                    let nb = &mut st.named[id as usize];
                    if nb.arrived > 0 && nb.warps != warps {
                        return Err((
                            Kind::Overflow,
                            format!(
                                "{} with {warps} warps while its generation counts {}",
                                self.m.named[id as usize], nb.warps
                            ),
                        ));
                    }
                    nb.warps = warps;
                    nb.arrived += 1;
                    let gen = nb.gen;
                    if nb.arrived == warps {
                        nb.gen = nb.gen.wrapping_add(1);
                        nb.arrived = 0;
                    }
                    if is_sync {
                        st.actors[i].sync = gen + 1;
                        advance = false;
                    }
                }
            }
            Op::FlagStore { flag, value } => st.flags[flag as usize] = value,
        }
        if advance {
            st.actors[i].pc += 1;
        }
        Ok(())
    }

    /// Run actor `i`'s eager ops (see [`Checker::is_eager`]) from its pc.
    fn eager(&self, st: &mut State, i: usize, log: &mut Option<&mut Vec<String>>) -> Result<(), Fail> {
        let ops = &self.m.actors[i].ops;
        while let Some(op) = ops.get(st.actors[i].pc as usize) {
            if !self.is_eager(st, i, op) {
                break;
            }
            self.exec(st, i, *op, log)?;
        }
        Ok(())
    }

    /// Actor `i`'s step: its `End*` ops (with the op after them when that one can run: an interval closed later
    /// only adds races), its op, then its eager ops.
    fn step_actor(&self, st: &mut State, i: usize, log: &mut Option<&mut Vec<String>>) -> Result<(), Fail> {
        let ops = &self.m.actors[i].ops;
        let mut pc = st.actors[i].pc as usize;
        if ops[pc].is_end() {
            let mut j = pc;
            while j < ops.len() && ops[j].is_end() {
                j += 1;
            }
            let next_runs = j < ops.len() && self.enabled(st, i, &ops[j]);
            while pc < j {
                self.exec(st, i, ops[pc], log)?;
                pc += 1;
            }
            if !next_runs {
                return Ok(());
            }
        }
        self.exec(st, i, ops[pc], log)?;
        self.eager(st, i, log)
    }

    fn apply(&self, st: &mut State, s: Step, log: &mut Option<&mut Vec<String>>) -> Result<(), Fail> {
        match s {
            Step::Actor(i) => self.step_actor(st, i, log),
            Step::Load(k) if st.events[k].arrivals > 0 => {
                let e = st.events.remove(k);
                if let Some(l) = log {
                    l.push(if e.kind == EV_REMOTE {
                        format!("remote arrive x{} lands on {}", e.arrivals, self.m.bar_name(e.bar))
                    } else {
                        format!(
                            "cp.async into {} complete: {} arrivals on {}",
                            self.m.mask_name(e.write),
                            e.arrivals,
                            self.m.bar_name(e.bar)
                        )
                    });
                }
                self.arrive(st, e.bar, e.arrivals as i64, 0, e.phase)
            }
            Step::Load(k) => {
                let e = st.events.remove(k);
                let what = if e.kind == EV_ST_ASYNC { "st.async" } else { "TMA load" };
                if let Some(l) = log {
                    l.push(format!(
                        "{what} into {} completes {} B on {}",
                        self.m.mask_name(e.write),
                        e.bytes,
                        self.m.bar_name(e.bar)
                    ));
                }
                let b = &mut st.mbars[e.bar as usize];
                if b.phase != e.phase {
                    return Err((
                        Kind::Aliasing,
                        format!(
                            "{what} into {} completes on {} in phase {}, meant for phase {}",
                            self.m.mask_name(e.write),
                            self.m.bar_name(e.bar),
                            b.phase,
                            e.phase
                        ),
                    ));
                }
                b.tx -= e.bytes;
                self.settle(st, e.bar)
            }
        }
    }

    fn steps(&self, st: &State, v: &mut Vec<Step>) {
        v.clear();
        for i in 0..st.actors.len() {
            let c = self.class_of[i];
            // of interchangeable actors in the same state, only the first steps
            if c > 0
                && (0..i).any(|k| self.class_of[k] == c && self.canon(k, &st.actors[k]) == self.canon(i, &st.actors[i]))
            {
                continue;
            }
            if self.actor_enabled(st, i) {
                v.push(Step::Actor(i));
            }
        }
        if st.events.is_empty() {
            return;
        }
        // a copy lands only where it matters (see the module: late copies)
        let stuck = v.is_empty();
        let mut faced: u128 = 0;
        if !stuck {
            for (i, a) in st.actors.iter().enumerate() {
                let ops = &self.m.actors[i].ops;
                let mut pc = a.pc as usize;
                while pc < ops.len() && ops[pc].is_end() {
                    pc += 1;
                }
                match ops.get(pc) {
                    Some(Op::Wait { bar, .. } | Op::Arrive { bar, .. } | Op::ArriveTx { bar, .. }) => faced |= 1 << bar,
                    // a cluster sync's arrival waits for this actor's remote arrives to land
                    Some(Op::ClusterSync { .. }) if a.sync == 0 => {
                        for e in st.events.iter().filter(|e| e.kind == EV_REMOTE && e.issuer as usize == i) {
                            faced |= 1 << e.bar;
                        }
                    }
                    _ => {}
                }
            }
        }
        for k in 0..st.events.len() {
            let e = &st.events[k];
            if (k == 0 || *e != st.events[k - 1]) && (stuck || faced & 1 << e.bar != 0) {
                v.push(Step::Load(k));
            }
        }
    }

    /// Agent `x` of a state (0..actors: an actor; then its TMA stores; then the loads in flight), in words.
    fn agent_name(&self, st: &State, x: usize) -> String {
        let n = st.actors.len();
        if x < n {
            self.m.actors[x].name.clone()
        } else if x < 2 * n {
            format!("the TMA stores of {}", self.m.actors[x - n].name)
        } else {
            let e = &st.events[x - 2 * n];
            let what = match e.kind {
                EV_CP_ASYNC => "cp.async copies",
                EV_REMOTE => "a remote arrive",
                EV_ST_ASYNC => "an st.async",
                _ => "a TMA load",
            };
            format!("{what} into {}", self.m.mask_name(e.write))
        }
    }

    /// (reads, writes, team) of agent `x` (see [`Checker::agent_name`]).
    fn agent(&self, st: &State, x: usize) -> (Mask, Mask, u8) {
        let n = st.actors.len();
        if x < n {
            let a = &st.actors[x];
            (a.reads, a.writes, self.m.actors[x].team)
        } else if x < 2 * n {
            let a = &st.actors[x - n];
            (a.groups[..a.ng as usize].iter().fold(a.open, |r, g| r | g), 0, 0)
        } else {
            let e = &st.events[x - 2 * n];
            (0, e.write, e.team)
        }
    }

    /// The checks of a state: aliased or late waits, races, and (nothing can step) deadlock or an unclean end.
    fn check_state(&self, st: &State, steps: &[Step]) -> Result<(), Fail> {
        for (i, a) in st.actors.iter().enumerate() {
            if let Some(Op::Wait { bar, parity, phase }) = self.m.actors[i].ops.get(a.pc as usize) {
                let p = st.mbars[*bar as usize].phase;
                let passes = (p & 1) as u8 != *parity;
                let name = &self.m.actors[i].name;
                let bn = self.m.bar_name(*bar);
                if passes && p != phase + 1 {
                    return Err((
                        Kind::Aliasing,
                        format!("{name}: wait on {bn} for phase {phase} passes in phase {p} (parity {parity})"),
                    ));
                }
                if !passes && p > *phase {
                    return Err((
                        Kind::Aliasing,
                        format!(
                            "{name}: wait on {bn} for phase {phase} blocks in phase {p} (parity {parity}): it has \
                             missed its phase"
                        ),
                    ));
                }
            }
        }
        let agents = 2 * st.actors.len() + st.events.len();
        assert!(agents <= 128, "at most 128 agents");
        let mut ag = [(0 as Mask, 0 as Mask, 0u8); 128];
        let mut writers: Mask = 0;
        for (x, a) in ag.iter_mut().enumerate().take(agents) {
            *a = self.agent(st, x);
            writers |= a.1;
        }
        if writers != 0 {
            for x in 0..agents {
                let (_, wx, tx) = ag[x];
                if wx == 0 {
                    continue;
                }
                for (y, &(ry, wy, ty)) in ag.iter().enumerate().take(agents) {
                    if x == y || (ry | wy) & wx == 0 {
                        continue;
                    }
                    let mut ww = wx & wy & !self.disjoint;
                    if tx > 0 && tx == ty {
                        ww &= !self.partitioned;
                    }
                    let c = (wx & ry) | ww;
                    if c != 0 {
                        return Err((
                            Kind::Race,
                            format!(
                                "{} writes {} while {} accesses it",
                                self.agent_name(st, x),
                                self.m.mask_name(c),
                                self.agent_name(st, y)
                            ),
                        ));
                    }
                }
            }
        }
        if steps.is_empty() {
            let stuck: Vec<String> = st
                .actors
                .iter()
                .enumerate()
                .filter(|(i, a)| (a.pc as usize) < self.m.actors[*i].ops.len())
                .map(|(i, a)| {
                    format!("{} at {}", self.m.actors[i].name, self.m.op_name(&self.m.actors[i].ops[a.pc as usize]))
                })
                .collect();
            if !stuck.is_empty() {
                return Err((Kind::Deadlock, format!("nothing can step; blocked: {}", stuck.join("; "))));
            }
            for (b, d) in st.mbars.iter().zip(&self.m.mbars) {
                if !d.leftover_ok && (b.pending != d.count as i64 || b.tx != 0) {
                    return Err((
                        Kind::UncleanEnd,
                        format!(
                            "{} ends in phase {} with {} of {} arrivals pending and tx {}",
                            d.name, b.phase, b.pending, d.count, b.tx
                        ),
                    ));
                }
            }
            for (n, name) in st.named.iter().zip(&self.m.named) {
                if n.arrived != 0 {
                    return Err((Kind::UncleanEnd, format!("{name} ends with {} warps arrived", n.arrived)));
                }
            }
        }
        if st.actors.iter().enumerate().all(|(i, a)| a.pc as usize >= self.m.actors[i].ops.len())
            && (!st.events.is_empty() || st.actors.iter().any(|a| a.ng > 0 || a.open != 0))
        {
            return Err((Kind::UncleanEnd, "every actor has finished (the block exits) with a copy in flight".into()));
        }
        Ok(())
    }

    /// Step `s` from `st`, in words.
    fn step_name(&self, st: &State, s: Step) -> String {
        let mut log = Vec::new();
        let mut c = st.clone();
        let _ = self.apply(&mut c, s, &mut Some(&mut log));
        match s {
            Step::Actor(i) => format!("{}: {}  [pc {}]", self.m.actors[i].name, log.join(", "), st.actors[i].pc),
            Step::Load(_) => format!("copy engine: {}", log.join(", ")),
        }
    }
}

/// Explore every interleaving of `m` (at most `limit` states; until a violation of kind `until`, if given): the
/// states explored and the violations.
pub fn check_limit(m: &Model, limit: usize, until: Option<Kind>) -> Report {
    let ck = Checker::new(m);
    struct Frame {
        st: State,
        steps: Vec<Step>,
        next: usize,
    }
    let mut violations: Vec<Violation> = Vec::new();
    // records the first violation of each kind; true once one of kind `until` is in
    let mut record = |frames: &[Frame], last: Option<(&State, Step)>, (kind, what): Fail| -> bool {
        if violations.iter().any(|v| v.kind == kind) {
            return Some(kind) == until;
        }
        let mut trace: Vec<String> =
            frames.windows(2).map(|w| ck.step_name(&w[0].st, w[0].steps[w[0].next - 1])).collect();
        if let Some((st, s)) = last {
            trace.push(ck.step_name(st, s));
        }
        violations.push(Violation { kind, what, trace });
        Some(kind) == until
    };
    let init = match ck.initial() {
        Ok(s) => s,
        Err(f) => {
            record(&[], None, f);
            return Report { states: 0, violations };
        }
    };
    let mut seen = Visited::default();
    seen.insert(ck.digest(&init));
    let mut steps = Vec::new();
    ck.steps(&init, &mut steps);
    if let Err(f) = ck.check_state(&init, &steps) {
        record(&[], None, f);
        return Report { states: 1, violations };
    }
    let mut stack = vec![Frame { st: init, steps, next: 0 }];
    let mut spare: Vec<Vec<Step>> = Vec::new();
    while let Some(top) = stack.last_mut() {
        if top.next == top.steps.len() {
            let f = stack.pop().unwrap();
            spare.push(f.steps);
            continue;
        }
        let s = top.steps[top.next];
        top.next += 1;
        let mut st = top.st.clone();
        if let Err(f) = ck.apply(&mut st, s, &mut None) {
            let top = stack.last().unwrap();
            if record(&stack, Some((&top.st, s)), f) {
                break;
            }
            continue;
        }
        if !seen.insert(ck.digest(&st)) {
            continue;
        }
        let mut steps = spare.pop().unwrap_or_default();
        ck.steps(&st, &mut steps);
        if let Err(f) = ck.check_state(&st, &steps) {
            let top = stack.last().unwrap();
            if record(&stack, Some((&top.st, s)), f) {
                break;
            }
            continue;
        }
        if seen.len() >= limit {
            record(&stack, None, (Kind::Limit, format!("more than {limit} states")));
            break;
        }
        stack.push(Frame { st, steps, next: 0 });
    }
    Report { states: seen.len(), violations }
}

/// States explored per check at most (a bound on the tests' time and memory).
pub const LIMIT: usize = 5_000_000;

/// [`check_limit`] with [`LIMIT`], every state.
pub fn check(m: &Model) -> Report {
    check_limit(m, LIMIT, None)
}

/// Assert that `m` passes; its states explored.
#[track_caller]
pub fn assert_ok(m: &Model) -> usize {
    let r = check(m);
    if let Some(v) = r.violations.first() {
        panic!("{}: expected no violation, found after {} states:\n{v}", m.name, r.states);
    }
    r.states
}

/// Assert that `m` fails with a violation of `kind` (among those found); that violation.
#[track_caller]
pub fn assert_fails(m: &Model, kind: Kind) -> Violation {
    let r = check_limit(m, LIMIT, Some(kind));
    match r.of(kind) {
        Some(v) => v.clone(),
        None if r.violations.is_empty() => {
            panic!("{}: expected a {kind:?} violation, none in {} states", m.name, r.states)
        }
        None => panic!("{}: expected a {kind:?} violation, found others:\n{}", m.name, r.violations[0]),
    }
}
