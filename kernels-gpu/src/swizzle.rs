//! Shared-memory swizzle math of the copy engine's `CU_TENSOR_MAP_SWIZZLE_*` modes (and wgmma's layouts).

/// Byte offset inside a 128-byte-swizzled tile (rows of 128 bytes, 1024-byte aligned) of the unswizzled byte
/// offset `off`: 16-byte chunk c of row r lands at chunk c ^ (r % 8).
#[inline(always)]
pub const fn sw128(off: u32) -> u32 {
    off ^ (((off >> 7) & 7) << 4)
}

/// Byte offset inside a 64-byte-swizzled tile (rows of 64 bytes, 512-byte aligned): chunk c of row r at
/// c ^ ((r / 2) % 4).
#[inline(always)]
pub const fn sw64(off: u32) -> u32 {
    off ^ (((off >> 7) & 3) << 4)
}

/// Byte offset of element (row, col) of a tile of `elem`-byte elements whose rows are `row_bytes` long, with
/// 128-byte swizzle applied when `swizzled`.
#[inline(always)]
pub const fn tile_offset(row: u32, col: u32, elem: u32, row_bytes: u32, swizzled: bool) -> u32 {
    let off = row * row_bytes + col * elem;
    if swizzled {
        sw128(off)
    } else {
        off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sw128_is_a_permutation_of_each_atom() {
        let mut seen = [false; 1024 / 16];
        for chunk in 0..64u32 {
            let o = sw128(chunk * 16);
            assert!(o < 1024);
            assert_eq!(o % 16, 0);
            assert!(!seen[(o / 16) as usize]);
            seen[(o / 16) as usize] = true;
        }
    }

    #[test]
    fn sw128_row_zero_is_identity_and_row_r_xors_r() {
        for r in 0..8u32 {
            for c in 0..8u32 {
                assert_eq!(sw128(r * 128 + c * 16), r * 128 + ((c ^ r) * 16));
            }
        }
        // bytes inside a chunk stay in place; the next atom repeats the pattern
        assert_eq!(sw128(3 * 128 + 16 + 5), 3 * 128 + (1 ^ 3) * 16 + 5);
        assert_eq!(sw128(1024 + 3 * 128 + 16), 1024 + 3 * 128 + (1 ^ 3) * 16);
    }

    #[test]
    fn sw64_pairs_rows() {
        // with 64-byte rows, rows 2r and 2r+1 share one 128-byte line: chunk c of row r at c ^ ((r / 2) % 4)
        for r in 0..16u32 {
            for c in 0..4u32 {
                assert_eq!(sw64(r * 64 + c * 16), r * 64 + (c ^ ((r / 2) % 4)) * 16);
            }
        }
    }

    #[test]
    fn tile_offset_plain_and_swizzled() {
        assert_eq!(tile_offset(2, 10, 2, 128, false), 2 * 128 + 20);
        assert_eq!(tile_offset(2, 10, 2, 128, true), sw128(2 * 128 + 20));
    }
}
