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

/// The M-grouped tile `tile`: `tile_offsets(i)` and `offsets(i)` read entry i (0..=experts) of the m-tile and
/// row offsets. The expert is found by binary search (empty experts have equal bounds and are never chosen).
/// `tile` must be below `tile_offsets(experts) * n_tiles`.
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
    let row0 = offsets(e) + (m - tile_offsets(e)) * bm;
    MTile { e, row0, row_end: offsets(e + 1), n_tile }
}

#[cfg(test)]
mod tests {
    use super::*;
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
            assert!(mt.e >= last_e, "tiles out of expert order");
            last_e = mt.e;
            assert!(counts[mt.e as usize] > 0, "a tile of the empty expert {}", mt.e);
            assert_eq!(mt.row_end, offsets[mt.e as usize + 1]);
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
}
