//! Tile schedulers of the grouped GEMMs: which (expert, rows, columns) a linear tile index stands for. Pure
//! logic over accessors of the device-side offsets, so the kernels read global memory and the host tests read
//! slices, through the same code.
//!
//! M-grouped (forward, dgrad): the rows of expert e are `offsets[e]..offsets[e + 1]`, cut into m-tiles of `bm`
//! rows numbered by `tile_offsets` (`tile_offsets[e + 1] - tile_offsets[e]` = ceil(rows_e / bm)); tile t is
//! m-tile t / n_tiles, n-tile t % n_tiles. A persistent block takes tiles b, b + grid, ...; every warp role of
//! the block walks the same sequence.

/// One tile of an M-grouped GEMM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MTile {
    /// Expert.
    pub e: u32,
    /// First row (of the expert-ordered rows).
    pub row0: u32,
    /// End of the expert's rows: rows row0..min(row0 + bm, row_end) belong to the tile.
    pub row_end: u32,
    /// Column tile.
    pub n_tile: u32,
}

impl MTile {
    /// The tile with its rows inside a buffer of `rows_max` rows: `row_end` at most `rows_max`, `row0` at most
    /// `row_end`. A tile of offsets as promised (nondecreasing, `offsets[E] <= rows_max`) is left as it is; any
    /// other content of the device arrays gives a tile whose rows row0..min(row0 + bm, row_end) stay below
    /// `rows_max` (none when row0 = row_end), so every store and load bounded by `row_end` stays in the buffers.
    #[inline(always)]
    pub const fn clamped(self, rows_max: u32) -> MTile {
        let row_end = if self.row_end < rows_max { self.row_end } else { rows_max };
        let row0 = if self.row0 < row_end { self.row0 } else { row_end };
        MTile { row0, row_end, ..self }
    }
}

/// A bound on the m-tiles of `bm` rows that at most `rows` rows over `experts` experts make: each expert's
/// ceil(rows_e / bm) is at most floor(rows_e / bm) + 1 for a non-empty expert, so the total is at most
/// floor(rows / bm) + min(experts, rows). The kernels walk at most this many m-tiles whatever `tile_offsets[E]`
/// says (offsets as promised never reach it); the host sizes its per-m-tile arrays for at least as many
/// (`gemm::m_tiles_max`: ceil(rows / bm) + min(experts, rows)).
#[inline(always)]
pub const fn m_tiles_bound(rows: u32, experts: u32, bm: u32) -> u32 {
    rows / bm + if experts < rows { experts } else { rows }
}

/// The block of 128-row K blocks (the expert-padded K of `quantize_fp8_cols_grouped`'s layout, each expert's rows
/// from block `tile_offset_e`) that the rows of an M-tile of expert e from `row0` fall in: tile_offsets\[e\] +
/// (row0 - offsets\[e\]) / bm, the tile's m-tile index for offsets as promised (so below tile_offsets\[E\]).
/// Wrapping: any other content gives some u32, which the caller bounds by the blocks its buffers hold.
#[inline(always)]
pub const fn k_block(row0: u32, offset_e: u32, tile_offset_e: u32, bm: u32) -> u32 {
    tile_offset_e.wrapping_add(row0.wrapping_sub(offset_e) / bm)
}

/// The M-grouped tile `tile`: `tile_offsets(i)` and `offsets(i)` read entry i (0..=experts) of the m-tile and
/// row offsets. The expert is found by binary search (empty experts have equal bounds and are never chosen).
/// `tile` must be below `tile_offsets(experts) * n_tiles`. Whatever the arrays hold, the expert is below
/// `experts` (for experts >= 1) and the arithmetic wraps (no overflow check): [`MTile::clamped`] then bounds the
/// rows.
#[inline(always)]
pub fn m_tile(
    tile: u32,
    n_tiles: u32,
    experts: u32,
    bm: u32,
    tile_offsets: impl Fn(u32) -> u32,
    offsets: impl Fn(u32) -> u32,
) -> MTile {
    let m = tile / n_tiles;
    let n_tile = tile % n_tiles;
    // the expert e with tile_offsets[e] <= m < tile_offsets[e + 1]
    let (mut lo, mut hi) = (0u32, experts);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if tile_offsets(mid) <= m {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let e = lo;
    // wrapping: the same instructions as + and * on the device, and no overflow panic in the host tests when
    // the arrays are not as promised
    let row0 = offsets(e).wrapping_add(m.wrapping_sub(tile_offsets(e)).wrapping_mul(bm));
    MTile { e, row0, row_end: offsets(e + 1), n_tile }
}

/// A block's walk over `total` M-grouped tiles of `n_tiles` columns each: (first index, step, count) for block
/// `bid` of `grid`. One CTA per walk (`cluster` 1): every tile, bid + i * grid. A 2-CTA cluster (`cluster` 2,
/// `grid` even, `n_tiles` even): the pairs of n-tiles (2j, 2j + 1) of one m-tile, cluster bid / 2 + i * grid / 2;
/// [`walk_tile`] gives a CTA its tile of a pair. Both CTAs of a cluster walk the same number of pairs.
#[inline(always)]
pub const fn walk(bid: u32, grid: u32, total: u32, cluster: u32) -> (u32, u32, u32) {
    if cluster == 2 {
        (bid / 2, grid / 2, total / 2)
    } else {
        (bid, grid, total)
    }
}

/// The tile of walk index `q` (see [`walk`]) for block `bid`: with 2-CTA clusters, rank bid % 2 takes n-tile
/// 2j + rank of the pair's m-tile.
#[inline(always)]
pub const fn walk_tile(q: u32, bid: u32, n_tiles: u32, cluster: u32) -> u32 {
    if cluster == 2 {
        let h = n_tiles / 2;
        (q / h) * n_tiles + 2 * (q % h) + bid % 2
    } else {
        q
    }
}

/// Units of the B-sharing cluster walk over `m_total` m-tiles and `n_tiles` n-tiles: pairs of m-tiles (2i, 2i + 1)
/// times n-tiles, walked by the clusters as [`walk`] walks tiles.
#[inline(always)]
pub const fn pair_units(m_total: u32, n_tiles: u32) -> u32 {
    m_total.div_ceil(2) * n_tiles
}

/// Unit `u` of the B-sharing walk for CTA `rank` (0, 1) of its cluster: (m-tile, n-tile, ghost). The pair is
/// m-tiles 2i, 2i + 1 (i = u / n_tiles) of n-tile u % n_tiles; rank r takes 2i + r, or, when that is past the
/// last m-tile, its peer's 2i as a ghost (it computes and stores nothing, keeping the rings in step).
#[inline(always)]
pub const fn pair_unit(u: u32, n_tiles: u32, m_total: u32, rank: u32) -> (u32, u32, bool) {
    let (mp, n) = (u / n_tiles, u % n_tiles);
    let m = 2 * mp + rank;
    if m >= m_total {
        (2 * mp, n, true)
    } else {
        (m, n, false)
    }
}

/// Kinds of work item of the fused forward's walk (docs/FUSED.md, step 1: GEMM1 + GEMM2 in one launch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FusedKind {
    /// A GEMM1 (+ SwiGLU) tile: m-tile, column tile of h.
    Gemm1,
    /// A GEMM2 tile: m-tile, column tile of y. Needs every GEMM1 tile of its m-tile.
    Gemm2,
}

/// One item of the fused walk: kind, m-tile (the engine's numbering over all experts), column tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FusedItem {
    pub kind: FusedKind,
    pub m: u32,
    pub n: u32,
}

/// The fused forward's global order of `fused_items(m_total, n1, n2)` items: step s holds the GEMM1 tiles of
/// m-tile s (while s < m_total), then the GEMM2 tiles of m-tile s - lag (once s >= lag). Every GEMM2 tile comes
/// after all GEMM1 tiles of its m-tile (they are `lag` steps earlier), so block b taking items b, b + grid, ..
/// in order, all blocks resident, cannot deadlock waiting on a GEMM2's inputs: the earliest unfinished item's
/// inputs are all earlier, hence finished, and its block is at it. `lag` lets GEMM1 run ahead so a GEMM2 tile's
/// inputs are usually complete before its block reaches it.
#[inline(always)]
pub const fn fused_items(m_total: u32, n1: u32, n2: u32) -> u32 {
    m_total * (n1 + n2)
}

/// Item `q` of the fused walk (see [`fused_items`]); `lag` >= 1.
#[inline(always)]
pub const fn fused_item(q: u32, m_total: u32, n1: u32, n2: u32, lag: u32) -> FusedItem {
    // steps 0..lag hold only GEMM1 tiles (n1 each), steps lag..m_total both (n1 + n2), steps m_total.. only
    // GEMM2 tiles (n2 each); lag >= m_total leaves no middle part
    let head = if lag < m_total { lag } else { m_total };
    if q < head * n1 {
        return FusedItem { kind: FusedKind::Gemm1, m: q / n1, n: q % n1 };
    }
    let q = q - head * n1;
    let mid = m_total - head;
    if q < mid * (n1 + n2) {
        let (s, r) = (head + q / (n1 + n2), q % (n1 + n2));
        return if r < n1 {
            FusedItem { kind: FusedKind::Gemm1, m: s, n: r }
        } else {
            FusedItem { kind: FusedKind::Gemm2, m: s - lag, n: r - n1 }
        };
    }
    let q = q - mid * (n1 + n2);
    FusedItem { kind: FusedKind::Gemm2, m: m_total - head + q / n2, n: q % n2 }
}

/// The first of the parts of m-tile `m` that block `bid` of `grid` copies as a mover (the overlapped gather): the
/// m-tile's rows are cut into one part per tile that needs them, part n going to the block that runs the
/// m-tile's n-th tile, which is walk index `first + n` (`first`: the index of the m-tile's tile 0; the block
/// taking index i is i % grid). Parts n, n + grid, ... below the part count are the block's (none when the
/// result is at or past it).
#[inline(always)]
pub const fn mover_part(first: u32, bid: u32, grid: u32) -> u32 {
    (bid + grid - first % grid) % grid
}

/// The rows of a part: part `n` of `parts` of the m-tile's rows `row0..end`, mover warp `w` of 3 takes rows
/// row0 + n + parts (w + 3 i) below `end`; this is the first (>= end: none) and the stride.
#[inline(always)]
pub const fn mover_rows(row0: u32, n: u32, parts: u32, w: u32) -> (u32, u32) {
    (row0 + n + parts * w, 3 * parts)
}

/// Rows a `gather_rows` block of `threads` threads copies, for rows of `chunks` 16-byte chunks: one (its threads
/// loop over the row) when a row has at least as many chunks as the block has threads, else as many whole rows as
/// fit, a row's chunks on consecutive threads (the FP8 forward's scale rows are 4 chunks at H = 2048: one row a
/// block left 124 of 128 threads idle and made the launch 131072 blocks of one 64-byte row). Host and kernel share
/// it: the host's grid is the rows divided by it, rounded up.
#[inline(always)]
pub const fn gather_rows_per_block(chunks: u32, threads: u32) -> u32 {
    if chunks == 0 || chunks >= threads {
        1
    } else {
        threads / chunks
    }
}

/// A lag of the fused walk with which, in its middle part, every GEMM2 item within `grid` positions after a
/// GEMM1 item of m-tile m is of an m-tile below m: `ffn_fused_fwd` then rarely has to count a GEMM1 tile at once
/// (it defers the count past its block's next item only when that item cannot depend on it).
#[inline(always)]
pub const fn fused_lag_min(grid: u32, n1: u32, n2: u32) -> u32 {
    let n = if n1 < n2 { n1 } else { n2 };
    grid.div_ceil(if n == 0 { 1 } else { n }) + 2
}

/// The walk index of item (GEMM1, m, 0) of the fused walk (see [`fused_item`]; item (GEMM1, m, n) is this + n).
#[inline(always)]
pub const fn fused_gemm1_item(m: u32, m_total: u32, n1: u32, n2: u32, lag: u32) -> u32 {
    let head = if lag < m_total { lag } else { m_total };
    if m < head {
        m * n1
    } else {
        head * n1 + (m - head) * (n1 + n2)
    }
}

/// The rank of expert `e` among `n` experts by row count (`count(f)`), busiest first, ties by lower id: the
/// number of experts that come before it. Over e = 0..n the ranks are a permutation of 0..n (a strict total
/// order). The weight gradients' run-time schedule hands out the tiles of the expert ranked r as indices
/// r per .. (r + 1) per ([`busiest_first_tile`]).
#[inline(always)]
pub fn busiest_rank(e: u32, n: u32, count: impl Fn(u32) -> u32) -> u32 {
    let c = count(e);
    let mut rank = 0;
    let mut f = 0;
    while f < n {
        let cf = count(f);
        rank += (cf > c || (cf == c && f < e)) as u32;
        f += 1;
    }
    rank
}

/// The tile of schedule index `i` (< experts * per) when the experts go busiest first: tile i % per of the expert
/// ranked i / per (`expert_at(rank)`: the inverse of [`busiest_rank`]), tiles numbered expert * per + its own.
#[inline(always)]
pub fn busiest_first_tile(i: u32, per: u32, expert_at: impl Fn(u32) -> u32) -> u32 {
    expert_at(i / per) * per + i % per
}

/// Whether the run-time counter's take that returned `old` is a launch's last of a walk over `units` indices:
/// every block whose first index (its block id, or its cluster's) is below `units` takes one index per further
/// tile and one past the end, `units` takes in all, so the one that finds `units - 1` comes after every other and
/// may reset the counter to 0 for the next launch (`pipeline::TileWalk`).
#[inline(always)]
pub const fn last_take(old: u32, units: u32) -> bool {
    units > 0 && old == units - 1
}

/// Division of any n < 2^31 by a divisor d >= 1 fixed for a kernel (a slot's token: slot / top_k), as a multiply-high,
/// an add and a shift (a `u32 /` by a run-time divisor is ~20 instructions with a reciprocal in series): with
/// l = ceil(log2 d) and m = floor(2^32 (2^l - d) / d) + 1 (Granlund and Montgomery's round-up multiplier, below
/// 2^32), n / d = (mulhi(n, m) + n) >> l; mulhi(n, m) <= n, so the sum fits 32 bits while n < 2^31.
#[derive(Clone, Copy)]
pub struct FastDiv {
    m: u32,
    l: u32,
}

impl FastDiv {
    /// The divisor `d` (>= 1; 0 gives the divisor 1).
    #[inline(always)]
    pub const fn new(d: u32) -> Self {
        let d = if d == 0 { 1 } else { d };
        let l = 32 - (d - 1).leading_zeros();
        let m = (((1u64 << 32) * ((1u64 << l) - d as u64)) / d as u64 + 1) as u32;
        FastDiv { m, l }
    }

    /// n / d, for n < 2^31.
    #[inline(always)]
    pub const fn div(self, n: u32) -> u32 {
        let hi = ((n as u64 * self.m as u64) >> 32) as u32;
        (hi + n) >> self.l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of every block is whole and each thread has at most one row: the rows a block takes times their
    /// chunks fit the block, and a row at least a block wide goes alone.
    #[test]
    fn gather_rows_per_block_fits_whole_rows() {
        for threads in [32u32, 128, 256] {
            for chunks in 0..600u32 {
                let r = gather_rows_per_block(chunks, threads);
                assert!(r >= 1);
                if chunks >= threads || chunks == 0 {
                    assert_eq!(r, 1, "chunks {chunks}");
                } else {
                    assert!(r * chunks <= threads && (r + 1) * chunks > threads, "chunks {chunks}: {r}");
                }
            }
        }
        assert_eq!(gather_rows_per_block(4, 128), 32);
        assert_eq!(gather_rows_per_block(256, 128), 1);
    }
    use std::vec::Vec;

    fn prefix(v: &[u32]) -> Vec<u32> {
        let mut o = std::vec![0u32];
        for &x in v {
            o.push(o.last().unwrap() + x);
        }
        o
    }

    /// Every row of every expert is covered by exactly one tile per n-tile, tiles never cross an expert's end,
    /// and tiles come in expert order.
    fn check(counts: &[u32], bm: u32, n_tiles: u32) {
        let offsets = prefix(counts);
        let tiles: Vec<u32> = counts.iter().map(|c| c.div_ceil(bm)).collect();
        let tile_offsets = prefix(&tiles);
        let e_n = counts.len() as u32;
        let total = tile_offsets[e_n as usize] * n_tiles;
        let mut covered = std::vec![0u32; offsets[e_n as usize] as usize * n_tiles as usize];
        let mut last_e = 0;
        for t in 0..total {
            let mt = m_tile(t, n_tiles, e_n, bm, |i| tile_offsets[i as usize], |i| offsets[i as usize]);
            // the z recompute's h^T block of the tile: its m-tile, inside Kp / 128 >= tile_offsets[E] (never
            // skipped by the kernel's bound)
            let kb = k_block(mt.row0, offsets[mt.e as usize], tile_offsets[mt.e as usize], bm);
            assert_eq!(kb, t / n_tiles);
            assert!(kb < tile_offsets[e_n as usize]);
            assert!(mt.e >= last_e, "tiles out of expert order");
            last_e = mt.e;
            assert!(counts[mt.e as usize] > 0, "a tile of the empty expert {}", mt.e);
            assert_eq!(mt.row_end, offsets[mt.e as usize + 1]);
            // offsets as promised: the kernels' clamp to the buffer changes nothing
            assert_eq!(mt.clamped(offsets[e_n as usize]), mt);
            assert_eq!(mt.clamped(offsets[e_n as usize] + 1000), mt);
            assert!(mt.row0 >= offsets[mt.e as usize] && mt.row0 < mt.row_end);
            for r in mt.row0..(mt.row0 + bm).min(mt.row_end) {
                covered[(r * n_tiles + mt.n_tile) as usize] += 1;
            }
        }
        assert!(covered.iter().all(|&c| c == 1), "a row covered {:?} times", covered.iter().find(|&&c| c != 1));
    }

    #[test]
    fn m_tiles_cover_every_row_once() {
        check(&[0, 1, 300, 129, 0, 17], 128, 3);
        check(&[128, 128, 128], 128, 1);
        check(&[0, 0, 5], 64, 2);
        check(&[1000], 128, 4);
        let mut x = 12345u64;
        let random: Vec<u32> = (0..128)
            .map(|_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                ((x >> 33) % 2000) as u32 * (!(x >> 20).is_multiple_of(3)) as u32
            })
            .collect();
        check(&random, 128, 6);
    }

    /// Device offsets not as promised (past the buffer, decreasing, a huge tile count): the clamped tiles of the
    /// bounded walk keep their rows inside the buffer and their expert below E.
    #[test]
    fn clamped_tiles_stay_inside_the_buffer_whatever_the_offsets() {
        let mut x = 777u64;
        let mut rnd = move || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 32) as u32
        };
        for case in 0..200 {
            let e_n = 1 + rnd() % 9;
            let rows_max = [0u32, 1, 127, 128, 129, 1000][case % 6];
            // the arrays: small values, values around rows_max, anything (u32::MAX included)
            let mut pick = |_| match rnd() % 4 {
                0 => rnd() % 400,
                1 => rows_max.wrapping_add(rnd() % 5).wrapping_sub(2),
                2 => u32::MAX - rnd() % 3,
                _ => rnd(),
            };
            let offsets: Vec<u32> = (0..=e_n).map(&mut pick).collect();
            let tile_offsets: Vec<u32> = (0..=e_n).map(&mut pick).collect();
            let bound = m_tiles_bound(rows_max, e_n, 128);
            let m_total = tile_offsets[e_n as usize].min(bound);
            let n_tiles = 3;
            for t in 0..m_total * n_tiles {
                let mt = m_tile(t, n_tiles, e_n, 128, |i| tile_offsets[i as usize], |i| offsets[i as usize])
                    .clamped(rows_max);
                assert!(mt.e < e_n && mt.n_tile < n_tiles);
                assert!(mt.row0 <= mt.row_end && mt.row_end <= rows_max, "{mt:?} rows_max {rows_max}");
            }
        }
    }

    /// The walk's bound is at least the m-tiles of any counts within the rows, and at most the host's
    /// `m_tiles_max` (ceil(rows / 128) + min(E, rows)), which sizes the per-m-tile arrays.
    #[test]
    fn the_m_tile_bound_holds_every_valid_layout() {
        let mut x = 4242u64;
        let mut rnd = move |n: u32| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((x >> 33) % n as u64) as u32
        };
        for _ in 0..2000 {
            let e_n = 1 + rnd(300);
            let rows = rnd(5000);
            // counts summing to at most rows: often many small experts (a partial tile each)
            let mut left = rows;
            let counts: Vec<u32> = (0..e_n)
                .map(|_| {
                    let c = if rnd(2) == 0 { rnd(3).min(left) } else { rnd(left + 1) };
                    left -= c;
                    c
                })
                .collect();
            let tiles: u32 = counts.iter().map(|c| c.div_ceil(128)).sum();
            let bound = m_tiles_bound(rows, e_n, 128);
            assert!(tiles <= bound, "counts {counts:?}: {tiles} m-tiles > bound {bound}");
            assert!(bound <= rows.div_ceil(128) + e_n.min(rows));
        }
        // the tightest cases: one row per expert, and whole tiles plus one row each
        assert_eq!(m_tiles_bound(5, 8, 128), 5);
        assert_eq!(m_tiles_bound(4 * 129, 4, 128), 8);
        assert_eq!(m_tiles_bound(0, 8, 128), 0);
    }

    /// Every tile is walked exactly once over the grid, and the two CTAs of a cluster walk the same number of
    /// pairs, each pair one m-tile's n-tiles 2j and 2j + 1 (what the shared A multicast needs).
    #[test]
    fn cluster_walk_covers_every_tile_once_in_lock_step() {
        for &(m_tiles, n_tiles, grid) in &[(1u32, 2u32, 2u32), (7, 6, 132), (1031, 4, 132), (5, 12, 8), (3, 2, 10)] {
            let total = m_tiles * n_tiles;
            for cluster in [1u32, 2] {
                let mut seen = std::vec![0u32; total as usize];
                for bid in 0..grid {
                    let (q0, step, count) = walk(bid, grid, total, cluster);
                    let mut q = q0;
                    let mut mine = std::vec::Vec::new();
                    while q < count {
                        let t = walk_tile(q, bid, n_tiles, cluster);
                        seen[t as usize] += 1;
                        mine.push(t);
                        q += step;
                    }
                    if cluster == 2 && bid % 2 == 1 {
                        // the peer (bid - 1) walked the same pairs: same m-tile, n-tiles 2j and 2j + 1
                        let (p0, pstep, pcount) = walk(bid - 1, grid, total, cluster);
                        let peer: std::vec::Vec<u32> = (0..)
                            .map(|i| p0 + i * pstep)
                            .take_while(|&q| q < pcount)
                            .map(|q| walk_tile(q, bid - 1, n_tiles, 2))
                            .collect();
                        assert_eq!(peer.len(), mine.len());
                        for (a, b) in peer.iter().zip(&mine) {
                            assert_eq!(a / n_tiles, b / n_tiles);
                            assert_eq!((a % n_tiles) % 2, 0);
                            assert_eq!(b % n_tiles, a % n_tiles + 1);
                        }
                    }
                }
                assert!(
                    seen.iter().all(|&c| c == 1),
                    "m {m_tiles} n {n_tiles} grid {grid} cluster {cluster}: {seen:?}"
                );
            }
        }
    }

    /// The B-sharing walk: every (m-tile, n-tile) computed and stored exactly once (ghosts store nothing), the
    /// two CTAs of a cluster on the same n-tile and consecutive m-tiles, ghosts only for an odd m-tile count.
    #[test]
    fn b_sharing_walk_covers_every_tile_once() {
        for &(m_total, n_tiles, grid) in &[(1u32, 3u32, 2u32), (7, 6, 132), (1031, 4, 132), (6, 1, 8), (0, 2, 4)] {
            let mut seen = std::vec![0u32; (m_total * n_tiles) as usize];
            let units = pair_units(m_total, n_tiles);
            for bid in 0..grid {
                let (mut u, step) = (bid / 2, grid / 2);
                while u < units {
                    let (m, n, ghost) = pair_unit(u, n_tiles, m_total, bid % 2);
                    let (pm, pn, pghost) = pair_unit(u, n_tiles, m_total, 1 - bid % 2);
                    assert_eq!(n, pn);
                    assert!(!(ghost && pghost));
                    if !ghost && !pghost {
                        assert_eq!(m / 2, pm / 2);
                        assert_ne!(m, pm);
                    }
                    if ghost {
                        assert!(bid % 2 == 1 && m_total % 2 == 1 && m == m_total - 1 && m == pm);
                    } else {
                        seen[(m * n_tiles + n) as usize] += 1;
                    }
                    u += step;
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "m {m_total} n {n_tiles} grid {grid}");
        }
    }

    /// The movers' split (mover_part, mover_rows): every row of every m-tile is copied by exactly one (block,
    /// warp), and that block runs one of the m-tile's tiles (plain walk: tile m n_tiles + n; fused walk: item
    /// fused_gemm1_item(m) + n), for grids below, at and above the tile count.
    #[test]
    fn movers_copy_every_row_once_in_a_block_that_needs_it() {
        for &(m_total, n1, n2, grid, rows_last) in &[
            (7u32, 6u32, 8u32, 132u32, 128u32),
            (300, 6, 8, 132, 37),
            (16, 3, 2, 5, 1),
            (1, 1, 1, 1, 128),
            (9, 8, 4, 2, 64),
        ] {
            for fused in [false, true] {
                let lag = 5;
                let first = |m: u32| if fused { fused_gemm1_item(m, m_total, n1, n2, lag) } else { m * n1 };
                let mut copied = std::vec![0u32; (m_total * 128) as usize];
                for b in 0..grid {
                    for w in 0..3 {
                        for m in 0..m_total {
                            let end = if m + 1 == m_total { rows_last } else { 128 };
                            let mut n = mover_part(first(m), b, grid);
                            while n < n1 {
                                // the block runs this m-tile's tile n
                                assert_eq!((first(m) + n) % grid, b);
                                let (mut r, step) = mover_rows(0, n, n1, w);
                                while r < end {
                                    copied[(m * 128 + r) as usize] += 1;
                                    r += step;
                                }
                                n += grid;
                            }
                        }
                    }
                }
                for m in 0..m_total {
                    let end = if m + 1 == m_total { rows_last } else { 128 };
                    for r in 0..128 {
                        assert_eq!(
                            copied[(m * 128 + r) as usize],
                            (r < end) as u32,
                            "m-tile {m} row {r} fused {fused}"
                        );
                    }
                }
            }
        }
    }

    /// The fused walk lists every GEMM1 and GEMM2 tile once, each GEMM2 tile after all GEMM1 tiles of its
    /// m-tile; and resident blocks walking it statically (block b: items b, b + grid, ..), each item taking a
    /// random time and a GEMM2 item starting only once its m-tile's GEMM1 tiles are done, always finish.
    #[test]
    fn fused_walk_is_a_dependency_order_and_cannot_deadlock() {
        let mut x = 99u64;
        let mut rnd = move |n: u64| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (x >> 33) % n
        };
        for &(m_total, n1, n2, lag, grid) in &[
            (1u32, 6u32, 8u32, 1u32, 132u32),
            (1088, 6, 8, 22, 132),
            (37, 3, 2, 5, 7),
            (5, 1, 1, 9, 2),
            (0, 6, 8, 3, 4),
            // fewer m-tiles than the lag (every expert's rows on one expert at 30B, T = 256: the H200 deadlock of
            // the unconditional deferral) and a lag of 1
            (16, 6, 8, 24, 132),
            (40, 6, 8, 1, 132),
            (300, 6, 8, 24, 132),
        ] {
            let total = fused_items(m_total, n1, n2);
            let items: Vec<FusedItem> = (0..total).map(|q| fused_item(q, m_total, n1, n2, lag)).collect();
            let mut seen1 = std::vec![0u32; (m_total * n1) as usize];
            let mut seen2 = std::vec![0u32; (m_total * n2) as usize];
            let mut g1_done_at = std::vec![0u32; m_total as usize]; // GEMM1 tiles of the m-tile seen so far
            for (q, it) in items.iter().enumerate() {
                if it.kind == FusedKind::Gemm1 {
                    assert_eq!(fused_gemm1_item(it.m, m_total, n1, n2, lag) + it.n, q as u32, "{it:?}");
                }
                assert!(it.m < m_total);
                match it.kind {
                    FusedKind::Gemm1 => {
                        assert!(it.n < n1);
                        seen1[(it.m * n1 + it.n) as usize] += 1;
                        g1_done_at[it.m as usize] += 1;
                    }
                    FusedKind::Gemm2 => {
                        assert!(it.n < n2);
                        seen2[(it.m * n2 + it.n) as usize] += 1;
                        assert_eq!(g1_done_at[it.m as usize], n1, "GEMM2 of m-tile {} before its GEMM1 tiles", it.m);
                    }
                }
            }
            assert!(seen1.iter().chain(&seen2).all(|&c| c == 1));
            // simulation: each block runs its items in order; a GEMM2 item waits for its m-tile's GEMM1 count.
            // Deferred (the kernel): with a head (min(lag, m-tiles)) of at least fused_lag_min, a GEMM1 item is
            // counted only once the block's next item has run (or the block has none left), else at once.
            for deferred in [false, true] {
                let items: Vec<FusedItem> = (0..total).map(|q| fused_item(q, m_total, n1, n2, lag)).collect();
                let mut next: Vec<u32> = (0..grid).collect(); // the block's current item
                let mut left = std::vec![0u64; grid as usize]; // time left on it (0: not started)
                let mut pending = std::vec![None::<u32>; grid as usize]; // a GEMM1 m-tile not yet counted
                let mut g1_done = std::vec![0u32; m_total as usize];
                let mut finished = 0u32;
                let mut ticks = 0u64;
                while finished < total || pending.iter().any(|p| p.is_some()) {
                    ticks += 1;
                    assert!(ticks < 100 * total as u64 + 1000, "deadlock: {finished} of {total} items finished");
                    for b in 0..grid as usize {
                        let q = next[b];
                        if q >= total {
                            if let Some(m) = pending[b].take() {
                                g1_done[m as usize] += 1;
                            }
                            continue;
                        }
                        let it = items[q as usize];
                        if left[b] == 0 {
                            if it.kind == FusedKind::Gemm2 && g1_done[it.m as usize] < n1 {
                                continue; // waits (bounded in the kernel)
                            }
                            left[b] = 1 + rnd(5);
                        }
                        left[b] -= 1;
                        if left[b] == 0 {
                            if let Some(m) = pending[b].take() {
                                g1_done[m as usize] += 1;
                            }
                            // the kernel's rule: defer only with a head of at least fused_lag_min (and a next
                            // item), which makes the next item a GEMM1 item or a GEMM2 item of an earlier m-tile
                            let nq = q + grid;
                            let safe = lag.min(m_total) >= fused_lag_min(grid, n1, n2) && nq < total;
                            if safe && it.kind == FusedKind::Gemm1 {
                                let n = items[nq as usize];
                                assert!(n.kind == FusedKind::Gemm1 || n.m < it.m, "{n:?} after {it:?}");
                            }
                            if it.kind == FusedKind::Gemm1 {
                                if deferred && safe {
                                    pending[b] = Some(it.m);
                                } else {
                                    g1_done[it.m as usize] += 1;
                                }
                            }
                            finished += 1;
                            next[b] += grid;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn busiest_first_order_is_a_permutation_by_rows() {
        let counts: Vec<u32> = (0..97u32)
            .map(|e| match e % 7 {
                0 => 0,
                3 => 1500 - e,
                _ => (e * 37) % 50,
            })
            .collect();
        let n = counts.len() as u32;
        let mut order = std::vec![u32::MAX; counts.len()];
        for e in 0..n {
            let r = busiest_rank(e, n, |f| counts[f as usize]) as usize;
            assert_eq!(order[r], u32::MAX, "rank {r} given twice");
            order[r] = e;
        }
        for w in order.windows(2) {
            let (a, b) = (w[0] as usize, w[1] as usize);
            assert!(counts[a] > counts[b] || (counts[a] == counts[b] && a < b), "{a} before {b}");
        }
        // every tile of every expert exactly once, an expert's tiles adjacent
        let per = 6;
        let mut seen = std::vec![false; counts.len() * per as usize];
        for i in 0..n * per {
            let t = busiest_first_tile(i, per, |r| order[r as usize]);
            assert!(!seen[t as usize], "tile {t} twice");
            seen[t as usize] = true;
            assert_eq!(t / per, order[(i / per) as usize]);
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn the_counter_is_taken_units_times_and_its_last_take_is_last() {
        // blocks of a grid walk `units` indices from a counter in random interleavings: every index below `units`
        // is processed once, the counter is taken exactly `units` times, and the take that `last_take` names
        // comes after every other (so its reset is never followed by a take of the same launch)
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..3000 {
            let grid = 1 + next(40) as u32;
            let units = next(120) as u32;
            let mut counter = 0u32;
            let mut index: std::vec::Vec<u32> = (0..grid).collect();
            let mut done = std::vec![0u32; units as usize];
            let mut takes = 0u32;
            let mut last_seen = false;
            loop {
                let live: std::vec::Vec<usize> = (0..grid as usize).filter(|&b| index[b] < units).collect();
                if live.is_empty() {
                    break;
                }
                let b = live[next(live.len())];
                done[index[b] as usize] += 1;
                let old = counter;
                counter += 1;
                takes += 1;
                assert!(!last_seen, "a take after the last one");
                if last_take(old, units) {
                    last_seen = true;
                    counter = 0;
                }
                index[b] = grid + old;
            }
            assert!(done.iter().all(|&d| d == 1), "grid {grid} units {units}: {done:?}");
            assert_eq!(takes, units, "grid {grid} units {units}");
            assert_eq!(counter, 0, "grid {grid} units {units}: the counter after the launch");
            assert_eq!(last_seen, units > 0);
        }
    }

    /// `FastDiv` is `/` for every divisor up to 300 (top-k and beyond) and its powers of two, on every n below 2^16, a
    /// stride through the rest of 0..2^31 and the values around each multiple of d near 2^31.
    #[test]
    fn fast_div_is_division() {
        let mut ds: Vec<u32> = (1..=300).collect();
        ds.extend((9..31).map(|b| 1u32 << b));
        ds.extend([(1 << 31) - 1, 1_000_003, 65_537]);
        for &d in &ds {
            let f = FastDiv::new(d);
            let check = |n: u32| assert_eq!(f.div(n), n / d, "{n} / {d}");
            (0..1 << 16).for_each(check);
            (0..(1u32 << 31)).step_by(7_919).for_each(check);
            let top = (1u32 << 31) - 1;
            for q in [top / d, top / d - 1] {
                for n in [q * d, q * d + d - 1, (q * d).saturating_sub(1)] {
                    if n <= top {
                        check(n);
                    }
                }
            }
        }
    }
}
