//! The producer / consumer ring of a warp-specialised kernel: `S` shared-memory stages, each with a `full`
//! mbarrier (one producer arrival plus the copy engine's transaction bytes) and an `empty` mbarrier (one arrival
//! per consumer warp). Producer and consumers count the same iterations `it` over the same tile sequence, so
//! stage = it % S and phase = (it / S) & 1 on both sides, and the ring cannot deadlock.
use crate::ptx::{cluster, fence, mbarrier};

/// The barriers of a ring of `S` stages: full[S], then empty[S], 8 bytes each.
#[derive(Clone, Copy)]
pub struct Ring<const S: u32> {
    full: u32,
    empty: u32,
}

impl<const S: u32> Ring<S> {
    /// Shared-memory bytes of the barriers.
    pub const BYTES: u32 = 16 * S;

    /// The ring whose barriers start at shared address `at` (8-byte aligned).
    #[inline(always)]
    pub const fn at(at: u32) -> Self {
        Ring { full: at, empty: at + 8 * S }
    }

    /// Initialise every barrier: `full` expects one producer arrival (plus the copy engine's bytes).
    /// SAFETY: one thread, before the block barrier that publishes the ring.
    #[inline(always)]
    pub unsafe fn init(&self, consumer_warps: u32) {
        self.init_with(1, consumer_warps);
    }

    /// Initialise every barrier, `full` expecting `producer_arrivals` arrivals per phase (a gathering producer:
    /// one arrival with the copy engine's bytes and one per thread that copied with `cp.async`).
    /// SAFETY: one thread, before the block barrier that publishes the ring.
    #[inline(always)]
    pub unsafe fn init_with(&self, producer_arrivals: u32, consumer_warps: u32) {
        let mut s = 0;
        while s < S {
            mbarrier::init(self.full + 8 * s, producer_arrivals);
            mbarrier::init(self.empty + 8 * s, consumer_warps);
            s += 1;
        }
        fence::mbarrier_init();
    }

    /// Producer thread: wait until the stage of `it` is free (no arrival). SAFETY: producer threads, in
    /// iteration order.
    #[inline(always)]
    pub unsafe fn wait_empty(&self, it: u32) {
        mbarrier::wait_parity(self.empty + 8 * (it % S), ((it / S) & 1) ^ 1);
    }

    /// The `full` barrier of the stage of `it`.
    #[inline(always)]
    pub const fn full_bar(&self, it: u32) -> u32 {
        self.full + 8 * (it % S)
    }

    /// Stage of iteration `it`.
    #[inline(always)]
    pub const fn stage(it: u32) -> u32 {
        it % S
    }

    /// Producer: wait until the stage of `it` is free, announce `bytes` of copies on it, and return its full
    /// barrier (the copies complete on it). SAFETY: the producer thread, in iteration order.
    #[inline(always)]
    pub unsafe fn produce(&self, it: u32, bytes: u32) -> u32 {
        let s = it % S;
        let ph = (it / S) & 1;
        mbarrier::wait_parity(self.empty + 8 * s, ph ^ 1);
        let fb = self.full + 8 * s;
        mbarrier::arrive_expect_tx(fb, bytes);
        fb
    }

    /// Consumer: wait until the stage of `it` holds its data. SAFETY: consumer threads, in iteration order.
    #[inline(always)]
    pub unsafe fn wait_full(&self, it: u32) {
        mbarrier::wait_parity(self.full + 8 * (it % S), (it / S) & 1);
    }

    /// Consumer warp, lanes 0 and 1 of a 2-CTA cluster: lane `rank` gives back the stage of iteration `it - 1`
    /// in CTA `rank` (a peer's multicast may write into it: its empty barrier counts both CTAs' warps).
    /// SAFETY: lanes 0 and 1 of each consumer warp, once per iteration, `it` >= 1; both CTAs run the same ring.
    #[inline(always)]
    pub unsafe fn release_prev_cluster(&self, it: u32, rank: u32) {
        mbarrier::arrive_cluster(cluster::map_shared(self.empty + 8 * ((it + S - 1) % S), rank));
    }

    /// Consumer warp (one lane): give back the stage of iteration `it - 1` (the wgmma that read it are
    /// complete). SAFETY: one lane of each consumer warp, once per iteration, `it` >= 1.
    #[inline(always)]
    pub unsafe fn release_prev(&self, it: u32) {
        mbarrier::arrive(self.empty + 8 * ((it + S - 1) % S));
    }
}

/// The order of a persistent kernel's tiles, from its scheduling thread (the producer) to its consumer warps: `Q` slots
/// of a u32 tile index and a u32 the kernel gives it (the weight gradients: the tile's rows, which the producer has
/// read already, so the consumers need no global load before the tile's first wgmma), each with a `full` mbarrier (one
/// arrival: the producer's, releasing its store of the index) and an `empty` one (one arrival per consumer warp). The
/// producer pushes the j-th tile it will load, then that tile's stages; the consumers pop the j-th index before the
/// tile's first stage. An index the kernel does not have (>= its tile count) ends the sequence. Lets the producer pick
/// tiles at run time (a global counter: blocks that finish early take more) while the consumers follow it.
#[derive(Clone, Copy)]
pub struct TileQueue<const Q: u32> {
    full: u32,
    empty: u32,
    slots: u32,
}

impl<const Q: u32> TileQueue<Q> {
    /// Shared-memory bytes: the barriers (16 a slot), then the slots (8 each).
    pub const BYTES: u32 = 24 * Q;

    /// The queue whose barriers start at shared address `at` (8-byte aligned).
    #[inline(always)]
    pub const fn at(at: u32) -> Self {
        TileQueue { full: at, empty: at + 8 * Q, slots: at + 16 * Q }
    }

    /// Initialise every barrier: `empty` expects `arrivals` arrivals a phase (32 per popping warp for
    /// [`TileQueue::pop_each_lane`]). SAFETY: one thread, before the
    /// block barrier that publishes the queue (and before a `fence::mbarrier_init`, as [`Ring::init`] issues).
    #[inline(always)]
    pub unsafe fn init(&self, arrivals: u32) {
        let mut s = 0;
        while s < Q {
            mbarrier::init(self.full + 8 * s, 1);
            mbarrier::init(self.empty + 8 * s, arrivals);
            s += 1;
        }
    }

    /// Producer thread: publish `tile` (with `aux`) as the `j`-th (j = 0, 1, ...), once its slot's previous index
    /// has been read by every consumer warp. SAFETY: the one producer thread, in order of `j`.
    #[inline(always)]
    pub unsafe fn push(&self, j: u32, tile: u32, aux: u32) {
        let s = j % Q;
        mbarrier::wait_parity(self.empty + 8 * s, ((j / Q) & 1) ^ 1);
        crate::ptx::smem::st_v2(self.slots + 8 * s, tile, aux);
        // release (the default semantics of `mbarrier.arrive`): the store above is seen by the waiters
        mbarrier::arrive(self.full + 8 * s);
    }

    /// Consumer warp (every lane): the `j`-th tile index and its `aux`; every lane gives the slot back once it has
    /// read it (the queue initialised with 32 arrivals per consumer warp: each lane's arrival releases its own read,
    /// with no warp barrier between the reads and one lane's arrival, which racecheck reports as a hazard).
    /// SAFETY: every lane of each consumer warp, in order of `j`.
    #[inline(always)]
    pub unsafe fn pop_each_lane(&self, j: u32) -> (u32, u32) {
        let s = j % Q;
        mbarrier::wait_parity(self.full + 8 * s, (j / Q) & 1);
        let [tile, aux] = crate::ptx::smem::ld_v2(self.slots + 8 * s);
        mbarrier::arrive(self.empty + 8 * s);
        (tile, aux)
    }
}

/// A cluster's run-time tile index, from the leader CTA's producer thread (rank 0, which takes it from the grid-wide
/// counter) to its peer's (rank 1), `Q` indices in flight: slots of one u32 in the peer's shared memory, each with
/// a `full` mbarrier in the peer (one arrival, the peer's own, expecting the 4 bytes that the leader's `st.async`
/// completes) and an `empty` one in the leader (one arrival: the peer's, remote, once it has read the slot). Both
/// waits acquire and the peer's arrival releases at cluster scope (the ring's stages get by with CTA scope because
/// `wgmma.wait_group` has ended their reads before the arrival; nothing ends the peer's slot read but a release):
/// a memory barrier once a tile, not per stage. Both CTAs lay it out alike.
#[derive(Clone, Copy)]
pub struct PairChannel<const Q: u32> {
    full: u32,
    empty: u32,
    slots: u32,
}

impl<const Q: u32> PairChannel<Q> {
    /// Shared-memory bytes: the barriers (16 a slot), then the slots (4 each).
    pub const BYTES: u32 = 20 * Q;

    /// The channel whose barriers start at shared address `at` (8-byte aligned).
    #[inline(always)]
    pub const fn at(at: u32) -> Self {
        PairChannel { full: at, empty: at + 8 * Q, slots: at + 16 * Q }
    }

    /// Initialise every barrier. SAFETY: one thread of each CTA, before the cluster barrier that publishes them
    /// and before a `fence::mbarrier_init` (no fence here: [`Ring::init`], called after it by the same thread,
    /// issues it).
    #[inline(always)]
    pub unsafe fn init(&self) {
        let mut s = 0;
        while s < Q {
            mbarrier::init(self.full + 8 * s, 1);
            mbarrier::init(self.empty + 8 * s, 1);
            s += 1;
        }
    }

    /// The leader's producer thread: send `v` as the `j`-th index (j = 0, 1, ...) into the peer's slot, once the
    /// peer has read the slot's previous index. SAFETY: the producer thread of the cluster's rank 0, in order of `j`.
    #[inline(always)]
    pub unsafe fn send(&self, j: u32, v: u32) {
        let s = j % Q;
        mbarrier::wait_parity_cluster(self.empty + 8 * s, ((j / Q) & 1) ^ 1);
        cluster::st_async_u32(cluster::map_shared(self.slots + 4 * s, 1), v, cluster::map_shared(self.full + 8 * s, 1));
    }

    /// The peer's producer thread: the `j`-th index; the slot goes back to the leader once read. SAFETY: the
    /// producer thread of the cluster's rank 1, in order of `j`, as often as the leader sends.
    #[inline(always)]
    pub unsafe fn recv(&self, j: u32) -> u32 {
        let s = j % Q;
        mbarrier::arrive_expect_tx(self.full + 8 * s, 4);
        mbarrier::wait_parity_cluster(self.full + 8 * s, (j / Q) & 1);
        let v = crate::ptx::smem::ld_u32(self.slots + 4 * s);
        // release at cluster scope: the read above is done before the leader may overwrite the slot
        mbarrier::arrive_release_cluster(cluster::map_shared(self.empty + 8 * s, 0));
        v
    }
}

/// Indices a cluster's leader may run ahead of its peer ([`PairChannel`]).
pub const PAIR_Q: u32 = 2;

/// The order in which a persistent producer takes its tiles (the weight gradients' schedules): index i starts at
/// this block's id; the next is the block's own grid-th (static round robin) or, with a run-time counter, the grid
/// plus the counter's next value (the counter zeroed by the host before the launch: blocks that finish early take
/// more). With `order` (shared memory, u32 [experts]: the experts busiest first, `order[rank] = expert`) index i
/// is tile i % per of the expert ranked i / per, else tile i; past `total` it is `total` (the end). `PAIRS`: 2-CTA
/// clusters walking pairs of m-tiles (one expert, one n-tile), index i the cluster's (this block's id / 2, the
/// cluster count the grid) and the block's tile m-tile 2 m-pair + its rank in the cluster; with the counter the
/// leader (rank 0) takes each next index and hands it to its peer through a [`PairChannel`].
#[derive(Clone, Copy)]
pub struct TileWalk<const PAIRS: bool> {
    index: u32,
    total: u32,
    per: u32,
    n_tiles: u32,
    order: Option<u32>,
    sched: *mut u32,
    chan: PairChannel<PAIR_Q>,
    j: u32,
}

impl<const PAIRS: bool> TileWalk<PAIRS> {
    /// Tiles in a pair unit (`PAIRS`) or in a walk index.
    const DIV: u32 = if PAIRS { 2 } else { 1 };

    /// This block's walk over `total` tiles, `per` an expert (`n_tiles` of them in a row of m-tiles); `sched` the
    /// counter (0: static); `order` as above; `chan` the cluster's channel (`PAIRS` with the counter).
    /// SAFETY: the one producer thread of each block; `sched` 0 or a u32 zeroed before the launch; `order` written
    /// and published by a block barrier before; with `PAIRS` an even number of m-tiles and a cluster launch, and
    /// with the counter `chan` initialised in both CTAs and published by a cluster barrier before.
    #[inline(always)]
    pub unsafe fn new(
        total: u32,
        per: u32,
        n_tiles: u32,
        sched: u64,
        order: Option<u32>,
        chan: PairChannel<PAIR_Q>,
    ) -> Self {
        let index = crate::ptx::regs::bid() / Self::DIV;
        TileWalk { index, total, per, n_tiles, order, sched: sched as *mut u32, chan, j: 0 }
    }

    /// The current index's tile (`total`: none left). SAFETY: the thread that made the walk.
    #[inline(always)]
    pub unsafe fn tile(&self) -> u32 {
        let units = self.per / Self::DIV;
        if self.index >= self.total / Self::DIV {
            return self.total;
        }
        let unit = match self.order {
            Some(order) => {
                crate::scheduler::busiest_first_tile(self.index, units, |r| crate::ptx::smem::ld_u32(order + 4 * r))
            }
            None => self.index,
        };
        if PAIRS {
            // pair unit (expert, m-pair, n-tile) -> this block's tile (m-tile 2 m-pair + its rank)
            let (e, local, rank) = (unit / units, unit % units, crate::ptx::regs::bid() % 2);
            e * self.per + (2 * (local / self.n_tiles) + rank) * self.n_tiles + local % self.n_tiles
        } else {
            unit
        }
    }

    /// On to the next index. With the counter, call it once the current tile's loads are issued: nothing is
    /// published through it (relaxed; its latency hides behind the ring's stages in flight). The counter resets
    /// itself: a walk of `units` indices takes exactly `units` of them from it (every block whose first index is
    /// below `units` takes one per further tile and a last one past the end; `crate::scheduler`'s tests), so the
    /// take that finds `units - 1` is the launch's last and stores 0, and the next launch finds it zero with no
    /// memset between them. SAFETY: the thread that made the walk, once per tile it took; with `PAIRS` and the
    /// counter, both CTAs of the cluster alike (the peer waits for the leader's index).
    #[inline(always)]
    pub unsafe fn advance(&mut self) {
        let grid = crate::ptx::regs::nctaid() / Self::DIV;
        self.index = if self.sched.is_null() {
            self.index + grid
        } else if !PAIRS {
            grid + self.take()
        } else {
            let j = self.j;
            self.j += 1;
            if crate::ptx::regs::bid() % 2 == 0 {
                let v = grid + self.take();
                self.chan.send(j, v);
                v
            } else {
                self.chan.recv(j)
            }
        };
    }

    /// One index from the counter; the launch's last take (`units - 1`) resets it to 0. SAFETY: as `advance`.
    #[inline(always)]
    unsafe fn take(&self) -> u32 {
        let old = crate::ptx::sync::atom_add_relaxed_gpu(self.sched, 1);
        if crate::scheduler::last_take(old, self.total / Self::DIV) {
            crate::ptx::sync::st_relaxed_gpu(self.sched, 0);
        }
        old
    }
}
