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
    let per = experts / world;
    let first = owner(e, experts, world) * per;
    let mut row = 0u32;
    // every row of the owner's earlier local experts, from every source
    let mut x = first;
    while x < e {
        let mut s = 0;
        while s < world {
            row += counts[(s * experts + x) as usize];
            s += 1;
        }
        x += 1;
    }
    // then the rows of expert e from earlier sources
    let mut s = 0;
    while s < src {
        row += counts[(s * experts + e) as usize];
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

/// Bytes of each region of one rank's symmetric workspace, every region 256-byte aligned, identical on every
/// rank (so one rank's offset is every rank's offset and a peer pointer is `peer_base + offset`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workspace {
    /// u32 [world, experts]: the all-gathered counts (each source writes its row).
    pub counts: u64,
    /// u32 [world]: count flags (epoch numbers; source s releases flag s after writing its counts row).
    pub count_flags: u64,
    /// bf16 [max_recv_rows, hidden]: dispatched rows (x forward, dy backward).
    pub recv: u64,
    /// f32 [max_recv_rows]: the routing weight of each received row (the backward's s).
    pub recv_w: u64,
    /// u32 [world]: data flags (source s releases flag s after its rows landed).
    pub data_flags: u64,
    /// bf16 [max_tokens * k, hidden]: rows returned to this rank, at (token, slot) (y forward, dx backward).
    pub back: u64,
    /// u32 [world]: combine flags (owner r releases flag r after its rows landed here).
    pub back_flags: u64,
    /// u32 [4]: the error record of a bounded wait that expired (phase, rank waited for, epoch, 1 = set).
    pub error: u64,
    /// Total bytes.
    pub bytes: u64,
}

const fn align(x: u64) -> u64 {
    (x + 255) & !255
}

impl Workspace {
    /// The layout for `max_tokens` tokens per rank with `k` slots, rows of `hidden` bf16, `experts` experts over
    /// `world` ranks. A rank receives at most `world * max_tokens * k` rows (every slot of every rank).
    pub const fn new(max_tokens: u64, k: u64, hidden: u64, experts: u64, world: u64) -> Self {
        let max_recv = world * max_tokens * k;
        let counts = 0;
        let count_flags = align(counts + 4 * world * experts);
        let recv = align(count_flags + 4 * world);
        let recv_w = align(recv + 2 * max_recv * hidden);
        let data_flags = align(recv_w + 4 * max_recv);
        let back = align(data_flags + 4 * world);
        let back_flags = align(back + 2 * max_tokens * k * hidden);
        let error = align(back_flags + 4 * world);
        let bytes = align(error + 16);
        Workspace { counts, count_flags, recv, recv_w, data_flags, back, back_flags, error, bytes }
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
        let w = Workspace::new(2048, 8, 2048, 128, 8);
        let regions = [w.counts, w.count_flags, w.recv, w.recv_w, w.data_flags, w.back, w.back_flags, w.error, w.bytes];
        for pair in regions.windows(2) {
            assert!(pair[0] < pair[1]);
            assert_eq!(pair[1] % 256, 0);
        }
        // the receive buffer holds every slot of every rank: 8 * 2048 * 8 rows of 4 KiB
        assert!(w.recv_w - w.recv >= 8 * 2048 * 8 * 2048 * 2);
    }

    #[test]
    fn phases_round_trip() {
        for p in [Phase::Counts, Phase::Dispatch, Phase::Combine] {
            assert_eq!(Phase::from_code(p as u32), Some(p));
        }
        assert_eq!(Phase::from_code(0), None);
    }
}
