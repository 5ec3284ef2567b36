//! Expert-parallel layout math (pure; shared by the host and, later, the dispatch and combine kernels).
//!
//! R ranks, E experts, expert e owned by rank `e / (E / R)` as local expert `e % (E / R)`. Every rank
//! all-gathers the per-expert row counts of every source rank, `counts[s * E + e]`, and computes the same layout
//! from them: on the owner, the rows of a local expert are ordered by source rank, then by slot order within the
//! source. That is exactly the EP = 1 order of the batch formed by concatenating the ranks' tokens in rank order,
//! so every expert sees its rows in the same order as at EP = 1, and the grouped GEMMs (whose per-row results and
//! per-expert row-order sums do not depend on which other rows share a tile) give bitwise the EP = 1 results.

/// Owner rank of expert `e`.
#[inline(always)]
pub const fn owner(e: u32, experts: u32, world: u32) -> u32 {
    e / (experts / world)
}

/// First row of source rank `src`'s rows of global expert `e` in the owner's receive buffer, given the gathered
/// counts `[world, experts]`. The owner's local experts are laid out one after another, each holding its
/// sources in rank order.
pub fn recv_row(counts: &[u32], experts: u32, world: u32, e: u32, src: u32) -> u32 {
    recv_row_by(|s, x| counts[(s * experts + x) as usize], experts, world, e, src)
}

/// [`recv_row`] over any accessor `count(source, expert)` (the kernels read the gathered counts through a
/// pointer). Sums wrap instead of overflowing; callers bound the result against the receive buffer.
#[inline(always)]
pub fn recv_row_by(count: impl Fn(u32, u32) -> u32, experts: u32, world: u32, e: u32, src: u32) -> u32 {
    let per = experts / world;
    let first = owner(e, experts, world) * per;
    let mut row = 0u32;
    // every row of the owner's earlier local experts, from every source
    let mut x = first;
    while x < e {
        let mut s = 0;
        while s < world {
            row = row.wrapping_add(count(s, x));
            s += 1;
        }
        x += 1;
    }
    // then the rows of expert e from earlier sources
    let mut s = 0;
    while s < src {
        row = row.wrapping_add(count(s, e));
        s += 1;
    }
    row
}

/// Rows rank `r` receives in all (the size of its expert-ordered batch).
pub fn recv_total(counts: &[u32], experts: u32, world: u32, r: u32) -> u32 {
    let per = experts / world;
    let mut total = 0;
    let mut e = r * per;
    while e < (r + 1) * per {
        let mut s = 0;
        while s < world {
            total += counts[(s * experts + e) as usize];
            s += 1;
        }
        e += 1;
    }
    total
}

/// The owner's local routing layout for the grouped GEMMs: for local expert i of rank `r`, its rows
/// `offsets[i]..offsets[i + 1]` of the receive buffer and its first m-tile `tiles[i]` (tiles of `tile_m` rows),
/// `per + 1` entries each. Counts are clamped so that no offset passes `max_rows` (a bound that valid counts
/// never reach; it keeps every index in its buffer whatever the counts hold). Written through `put(i, offset,
/// tile)`; returns the rows in all.
#[inline(always)]
pub fn local_layout(
    count: impl Fn(u32, u32) -> u32,
    experts: u32,
    world: u32,
    r: u32,
    tile_m: u32,
    max_rows: u32,
    mut put: impl FnMut(u32, u32, u32),
) -> u32 {
    let per = experts / world;
    let (mut o, mut t) = (0u32, 0u32);
    let mut i = 0;
    while i < per {
        put(i, o, t);
        let mut c = 0u32;
        let mut s = 0;
        while s < world {
            c = c.saturating_add(count(s, r * per + i));
            s += 1;
        }
        let c = if c > max_rows - o { max_rows - o } else { c };
        o += c;
        t += c.div_ceil(tile_m);
        i += 1;
    }
    put(per, o, t);
    o
}

/// Bytes of each region of one rank's symmetric workspace, every region 256-byte aligned, identical on every
/// rank (so one rank's offset is every rank's offset and a peer pointer is `peer_base + offset`). Passed to the
/// kernels as it is (`#[repr(C)]`, all `u64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Workspace {
    /// u32 [world, experts]: the all-gathered counts (each source writes its row).
    pub counts: u64,
    /// u32 \[world\]: count flags (epoch numbers; source s releases flag s after writing its counts row).
    pub count_flags: u64,
    /// bf16 [max_recv, hidden]: dispatched x rows (kept from the forward for the backward).
    pub recv: u64,
    /// bf16 [max_recv, hidden]: dispatched dy rows (backward).
    pub recv_dy: u64,
    /// f32 \[max_recv\]: the routing weight of each received row (the backward's s).
    pub recv_w: u64,
    /// u32 [max_recv, 2]: (source rank, source slot `t * k + j`) of each received row: where its result goes.
    pub recv_meta: u64,
    /// u32 [world, blocks]: data flags (block b of source s releases flag `s * blocks + b` after its rows landed).
    pub data_flags: u64,
    /// bf16 [max_slots, hidden]: rows returned to this rank, at slot `t * k + j` (y forward, dx backward).
    pub back: u64,
    /// f32 \[max_slots\]: values returned to this rank at slot `t * k + j` (the backward's dtopk).
    pub back_w: u64,
    /// u32 [world, blocks]: combine flags (block b of owner r releases flag `r * blocks + b` after its rows
    /// landed here).
    pub back_flags: u64,
    /// u32 [experts + 1]: this rank's local experts' row offsets in `recv` (the first `experts / world + 1`
    /// used); local, written by the rank itself.
    pub local_offsets: u64,
    /// u32 [experts + 1]: this rank's local experts' first m-tiles; local.
    pub local_tiles: u64,
    /// u32 \[4\]: the error record of a bounded wait that expired (phase, rank waited for, epoch, 1 = set).
    pub error: u64,
    /// u32 \[1\]: the rank's call counter, the epoch of its current call (0 before the first). `ep_epoch_next`, the
    /// first launch of every call, adds 1; the call's dispatch and combine kernels read it at their start, so the
    /// epoch lives on the device and a CUDA graph replays new epochs. Every rank advances its own counter once
    /// per call and reads only its own, so ranks that make the same calls agree on every call's epoch.
    /// `u32::MAX` means exhausted: the kernels then do nothing (the host refuses calls before). Then u32 \[3\]:
    /// the state tag (the host's number of the forward whose state the workspace holds: written by the dispatch of
    /// a forward and of a backward that sends its rows again, `EpParams::state`), the state error (the epoch
    /// of a backward whose dispatch found another tag: it ran on another forward's state) and the routing error
    /// (the epoch of the latest call whose dispatch ran over a failed routing of the rank); `EpLayer::check`
    /// reports both.
    pub epoch: u64,
    /// u64 \[8\]: each source rank's x address (pull dispatch: written by the source, read by this rank's GEMM1).
    pub src_x: u64,
    /// u64 \[8\]: each rank's `back` region as this rank addresses it (written by this rank's `ep_dispatch`,
    /// read by its GEMM2 when it scatters its rows straight to their sources).
    pub back_ptrs: u64,
    /// u32 [recv m-tiles]: rows of each local m-tile copied by this rank's GEMM1 (pull dispatch; zeroed by
    /// this rank's `ep_dispatch`); then u32 \[1\]: that GEMM's error word (`params::FUSED_TIMEOUT` when a wait for
    /// an m-tile's rows expired).
    pub arrive: u64,
    /// Total bytes.
    pub bytes: u64,
    /// Rows `recv` holds: `world * max_tokens * k`.
    pub max_recv: u64,
    /// Slots `back` holds: `max_tokens * k`.
    pub max_slots: u64,
    /// Blocks per rank of the dispatch and combine kernels (flags per source).
    pub blocks: u64,
}

/// `x` rounded up to 256 bytes, None past `u64::MAX`.
const fn align(x: u64) -> Option<u64> {
    match x.checked_add(255) {
        Some(v) => Some(v & !255),
        None => None,
    }
}

/// The value of an `Option` in a `const fn` (where `?` is not allowed), or return None.
macro_rules! some {
    ($e:expr) => {
        match $e {
            Some(v) => v,
            None => return None,
        }
    };
}

/// `a * b + c` (`c` a byte offset, `a * b` a region's size), None on overflow.
const fn after(c: u64, a: u64, b: u64) -> Option<u64> {
    match a.checked_mul(b) {
        Some(n) => c.checked_add(n),
        None => None,
    }
}

impl Workspace {
    /// Words of the `arrive` region: one per possible local m-tile of 128 rows (each local expert adds at most
    /// one partial m-tile), then the error word. Callers pass the bounds of a layout [`Workspace::new`] accepted.
    pub const fn arrive_words(max_recv: u64, experts: u64) -> u64 {
        max_recv.div_ceil(128) + experts + 1
    }

    /// The layout for `max_tokens` tokens per rank with `k` slots, rows of `hidden` bf16, `experts` experts over
    /// `world` ranks, `blocks` blocks per rank in the dispatch and combine kernels. A rank receives at most
    /// `world * max_tokens * k` rows (every slot of every rank). None when a size or an offset does not fit in
    /// a u64 (arithmetic that wrapped would size the regions for a few rows, which a normal call then writes
    /// past); callers also bound the row counts for the kernels' 32-bit element offsets.
    pub const fn new(max_tokens: u64, k: u64, hidden: u64, experts: u64, world: u64, blocks: u64) -> Option<Self> {
        let max_slots = some!(max_tokens.checked_mul(k));
        let max_recv = some!(world.checked_mul(max_slots));
        let row = some!(hidden.checked_mul(2)); // bytes of a bf16 row
        let (flag_words, count_words) = (some!(world.checked_mul(blocks)), some!(world.checked_mul(experts)));
        let expert_words = some!(experts.checked_add(1));
        let arrive_words = some!(some!(max_recv.div_ceil(128).checked_add(experts)).checked_add(1));
        let counts = 0;
        let count_flags = some!(align(some!(after(counts, 4, count_words))));
        let recv = some!(align(some!(after(count_flags, 4, world))));
        let recv_dy = some!(align(some!(after(recv, row, max_recv))));
        let recv_w = some!(align(some!(after(recv_dy, row, max_recv))));
        let recv_meta = some!(align(some!(after(recv_w, 4, max_recv))));
        let data_flags = some!(align(some!(after(recv_meta, 8, max_recv))));
        let back = some!(align(some!(after(data_flags, 4, flag_words))));
        let back_w = some!(align(some!(after(back, row, max_slots))));
        let back_flags = some!(align(some!(after(back_w, 4, max_slots))));
        let local_offsets = some!(align(some!(after(back_flags, 4, flag_words))));
        let local_tiles = some!(align(some!(after(local_offsets, 4, expert_words))));
        let error = some!(align(some!(after(local_tiles, 4, expert_words))));
        let epoch = some!(align(some!(after(error, 4, 4))));
        let src_x = some!(align(some!(after(epoch, 4, 4))));
        let back_ptrs = some!(align(some!(after(src_x, 8, 8))));
        let arrive = some!(align(some!(after(back_ptrs, 8, 8))));
        let bytes = some!(align(some!(after(arrive, 4, arrive_words))));
        Some(Workspace {
            counts,
            count_flags,
            recv,
            recv_dy,
            recv_w,
            recv_meta,
            data_flags,
            back,
            back_w,
            back_flags,
            local_offsets,
            local_tiles,
            error,
            epoch,
            src_x,
            back_ptrs,
            arrive,
            bytes,
            max_recv,
            max_slots,
            blocks,
        })
    }
}

/// The phases a bounded wait can expire in (the error record's first word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Phase {
    /// Waiting for a source's counts.
    Counts = 1,
    /// Waiting for a source's dispatched rows.
    Dispatch = 2,
    /// Waiting for an owner's returned rows.
    Combine = 3,
}

impl Phase {
    /// The phase of an error record's code.
    pub const fn from_code(c: u32) -> Option<Phase> {
        match c {
            1 => Some(Phase::Counts),
            2 => Some(Phase::Dispatch),
            3 => Some(Phase::Combine),
            _ => None,
        }
    }
    /// A name for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Counts => "count exchange",
            Phase::Dispatch => "dispatch",
            Phase::Combine => "combine",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// counts[s][e] for some routing of `slots[s]` (lists of expert ids per source).
    fn counts_of(slots: &[Vec<u32>], experts: u32) -> Vec<u32> {
        let mut c = std::vec![0u32; slots.len() * experts as usize];
        for (s, ids) in slots.iter().enumerate() {
            for &e in ids {
                c[s * experts as usize + e as usize] += 1;
            }
        }
        c
    }

    fn sample(world: u32, experts: u32, seed: u64) -> Vec<Vec<u32>> {
        let mut x = seed;
        (0..world)
            .map(|s| {
                let n = if s == 1 { 0 } else { 5 + (s as usize) * 7 }; // rank 1 has no tokens
                (0..n)
                    .map(|_| {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                        ((x >> 33) % experts as u64) as u32
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn every_row_lands_once_per_owner() {
        for world in [1u32, 2, 4, 8] {
            let experts = 16;
            let slots = sample(world, experts, 7 + world as u64);
            let c = counts_of(&slots, experts);
            for r in 0..world {
                let total = recv_total(&c, experts, world, r);
                let mut used = std::vec![false; total as usize];
                for (s, ids) in slots.iter().enumerate() {
                    for e in (0..experts).filter(|&e| owner(e, experts, world) == r) {
                        let base = recv_row(&c, experts, world, e, s as u32);
                        let n = ids.iter().filter(|&&x| x == e).count() as u32;
                        for q in base..base + n {
                            assert!(!used[q as usize], "row {q} of rank {r} written twice");
                            used[q as usize] = true;
                        }
                    }
                }
                assert!(used.iter().all(|&u| u), "rank {r} has rows nobody writes");
            }
        }
    }

    #[test]
    fn owner_order_is_the_ep1_order_of_the_concatenated_batch() {
        // EP = 1 over the ranks' tokens concatenated in rank order: expert e's rows in slot order, i.e. by source
        // rank, then by the source's own slot order. At EP = R the owner holds the same sequence per expert.
        let (world, experts) = (4u32, 8u32);
        let slots = sample(world, experts, 99);
        let c = counts_of(&slots, experts);
        for e in 0..experts {
            let mut ep1: Vec<(usize, usize)> = Vec::new(); // (source, index in source)
            for (s, ids) in slots.iter().enumerate() {
                ep1.extend(ids.iter().enumerate().filter(|(_, &x)| x == e).map(|(i, _)| (s, i)));
            }
            let mut epr: Vec<(u32, usize, usize)> = Vec::new(); // (row on the owner, source, index)
            for (s, ids) in slots.iter().enumerate() {
                let base = recv_row(&c, experts, world, e, s as u32);
                for (q, (i, _)) in ids.iter().enumerate().filter(|(_, &x)| x == e).enumerate() {
                    epr.push((base + q as u32, s, i));
                }
            }
            epr.sort();
            let epr: Vec<(usize, usize)> = epr.into_iter().map(|(_, s, i)| (s, i)).collect();
            assert_eq!(ep1, epr, "expert {e}");
        }
    }

    #[test]
    fn workspace_regions_are_aligned_and_disjoint() {
        let w = Workspace::new(2048, 8, 2048, 128, 8, 16).unwrap();
        let regions = [
            w.counts,
            w.count_flags,
            w.recv,
            w.recv_dy,
            w.recv_w,
            w.recv_meta,
            w.data_flags,
            w.back,
            w.back_w,
            w.back_flags,
            w.local_offsets,
            w.local_tiles,
            w.error,
            w.epoch,
            w.src_x,
            w.back_ptrs,
            w.arrive,
            w.bytes,
        ];
        for pair in regions.windows(2) {
            assert!(pair[0] < pair[1]);
            assert_eq!(pair[1] % 256, 0);
        }
        // the receive buffer holds every slot of every rank: 8 * 2048 * 8 rows of 4 KiB
        assert!(w.recv_dy - w.recv >= 8 * 2048 * 8 * 2048 * 2 && w.recv_w - w.recv_dy >= 8 * 2048 * 8 * 2048 * 2);
        assert!(w.back_flags - w.back_w >= 4 * 2048 * 8);
        assert_eq!(w.max_recv, 8 * 2048 * 8);
        assert!(w.back_flags - w.data_flags >= 4 * 8 * 16 && w.local_offsets - w.back_flags >= 4 * 8 * 16);
        assert!(w.back_flags - w.back >= 2048 * 8 * 2048 * 2);
        assert!(w.back_ptrs - w.src_x >= 8 * 8 && w.arrive - w.back_ptrs >= 8 * 8);
        // the call counter, the state tag, the state error and the routing error
        assert!(w.src_x - w.epoch >= 4 * 4);
        // an m-tile counter per 128 received rows, one more per local expert, and the error word
        assert!(w.bytes - w.arrive >= 4 * (8 * 2048 * 8 / 128 + 128 + 1));
    }

    #[test]
    fn workspace_sizes_that_overflow_are_refused() {
        // max_tokens * k, world * max_slots, the rows' bytes, the regions' sum, the last alignment: each wrapping
        // would size the regions for a few rows
        assert_eq!(Workspace::new(6148914691236517206, 3, 64, 8, 1, 1), None);
        assert_eq!(Workspace::new(u64::MAX / 4, 2, 64, 8, 4, 1), None);
        assert_eq!(Workspace::new(1, 1, 1 << 63, 8, 1, 1), None);
        assert_eq!(Workspace::new(1 << 20, 8, 1 << 40, 8, 8, 1), None);
        assert_eq!(Workspace::new(1, 1, (u64::MAX - 1024) / 4, 8, 1, 1), None);
        assert_eq!(Workspace::new(1, 1, 64, u64::MAX / 2, 1, 1), None);
        assert_eq!(Workspace::new(1, 1, 64, 8, 1, u64::MAX), None);
        // the largest sizes of the layer still fit
        let w = Workspace::new(1 << 20, 8, 8192, 4096, 8, 16).unwrap();
        assert_eq!(w.max_recv, 8 << 23);
    }

    #[test]
    fn local_layout_matches_recv_rows_and_is_clamped() {
        for world in [1u32, 2, 4, 8] {
            let experts = 16;
            let per = experts / world;
            let slots = sample(world, experts, 3 + world as u64);
            let c = counts_of(&slots, experts);
            let count = |s: u32, e: u32| c[(s * experts + e) as usize];
            for r in 0..world {
                let mut offs = std::vec![u32::MAX; per as usize + 1];
                let mut tiles = std::vec![u32::MAX; per as usize + 1];
                let total = local_layout(count, experts, world, r, 4, u32::MAX, |i, o, t| {
                    offs[i as usize] = o;
                    tiles[i as usize] = t;
                });
                assert_eq!(total, recv_total(&c, experts, world, r));
                for i in 0..per {
                    let e = r * per + i;
                    assert_eq!(offs[i as usize], recv_row(&c, experts, world, e, 0));
                    let n = offs[i as usize + 1] - offs[i as usize];
                    assert_eq!(tiles[i as usize + 1] - tiles[i as usize], n.div_ceil(4));
                }
                // a bound below the total: offsets stop at the bound and never pass it
                if total > 3 {
                    let mut last = 0;
                    let t = local_layout(count, experts, world, r, 4, 3, |_, o, _| {
                        assert!(o <= 3);
                        last = o;
                    });
                    assert_eq!((t, last), (3, 3));
                }
            }
        }
    }

    #[test]
    fn phases_round_trip() {
        for p in [Phase::Counts, Phase::Dispatch, Phase::Combine] {
            assert_eq!(Phase::from_code(p as u32), Some(p));
        }
        assert_eq!(Phase::from_code(0), None);
    }
}
