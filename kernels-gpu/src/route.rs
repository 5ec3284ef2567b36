//! Routing layout math (pure; shared by the host and the kernels `route_fused`, `route_count`, `route_scan`,
//! `route_place`), and CPU models of the exact algorithms those kernels run.
//!
//! The slots are cut into chunks of [`chunk_slots`] slots (at most [`MAX_CHUNKS`] chunks).
//! 1. `route_count`, one block per chunk: the chunk's rows per expert, `chunk_counts[c * E + e]` (shared-memory
//!    counters; integer sums, so their order does not matter). Any id outside -1..E sets the error word.
//! 2. `route_scan`, one block: per expert, [`scan_group`] threads split the chunks into segments and scan them
//!    (segment sums, a segmented warp scan); the totals are `counts`, a block scan over the experts gives
//!    `offsets` and `tile_offsets`, and `chunk_counts[c * E + e]` is overwritten with the chunk's first row of
//!    expert e: `offsets[e] + sum over c' < c of chunk_counts[c' * E + e]`.
//! 3. `route_place`, one block of [`THREADS`] per chunk: rounds of one slot per thread in slot order; in a round,
//!    each warp groups its lanes by expert (`match.any.sync`); a lane's row is the expert's running row (shared
//!    memory, from step 2) plus the lanes of its group below it; the warps take their turn in order (one barrier
//!    each), the highest lane of each group advancing the running row. So each expert's rows follow slot order.
//!
//! `route_fused` runs the same three steps in one launch of one block per chunk (all resident at once), its step 2
//! spread over the blocks between two grid barriers ([`crate::grid`]): each block scans its share of the experts
//! over the chunks, then each block computes the offsets itself and its chunk's first rows ([`model_fused`]).

/// Threads per block of `route_count` and `route_place`.
pub const THREADS: u32 = 256;
/// Warps per block of `route_count` and `route_place`.
pub const WARPS: u32 = THREADS / 32;
/// Threads of the single `route_scan` block.
pub const SCAN_THREADS: u32 = 1024;
/// Fewest slots per chunk.
pub const CHUNK_MIN: u32 = 1024;
/// Most chunks of one call (bounds the workspace and `route_scan`'s work per expert).
pub const MAX_CHUNKS: u32 = 128;

/// Slots per chunk for a call of `slots` slots: at least [`CHUNK_MIN`], a multiple of [`THREADS`], and at most
/// [`MAX_CHUNKS`] chunks.
pub const fn chunk_slots(slots: u32) -> u32 {
    let c = slots.div_ceil(MAX_CHUNKS).div_ceil(THREADS) * THREADS;
    if c < CHUNK_MIN {
        CHUNK_MIN
    } else {
        c
    }
}

/// Chunks of a call (0 for no slots).
pub const fn chunks(slots: u32, chunk: u32) -> u32 {
    slots.div_ceil(chunk)
}

/// Grid of `route_count` and `route_place`: the chunks, at least one block (a call of no slots still writes
/// one row of zero chunk counts).
pub const fn grid(slots: u32, chunk: u32) -> u32 {
    let c = chunks(slots, chunk);
    if c == 0 {
        1
    } else {
        c
    }
}

/// Rows of the chunk-count workspace (u32 `[rows, E]`) that covers every call of at most `max_slots` slots.
pub const fn max_chunks(max_slots: u32) -> u32 {
    let c = max_slots.div_ceil(CHUNK_MIN);
    if c == 0 {
        1
    } else if c > MAX_CHUNKS {
        MAX_CHUNKS
    } else {
        c
    }
}

/// Whether a raw id is outside -1..E (sets the error word).
#[inline(always)]
pub const fn invalid(raw: i32, experts: u32) -> bool {
    raw < -1 || (raw >= 0 && raw as u32 >= experts)
}

/// The expert of a raw id, or -1 for a masked or invalid one (invalid ids are read as masked).
#[inline(always)]
pub const fn expert_of(raw: i32, experts: u32) -> i32 {
    if raw < 0 || raw as u32 >= experts {
        -1
    } else {
        raw
    }
}

/// Threads of `route_scan` per expert: a power of two in 1..=32, `SCAN_THREADS / E` rounded down (clamped).
pub const fn scan_group(experts: u32) -> u32 {
    let mut g = 32;
    while g > 1 && g * experts > SCAN_THREADS {
        g /= 2;
    }
    g
}

/// Passes of `route_scan` over the experts (`SCAN_THREADS / group` experts per pass).
pub const fn scan_passes(experts: u32) -> u32 {
    (experts * scan_group(experts)).div_ceil(SCAN_THREADS)
}

/// The chunks `lo..hi` of member `g` of a scan group of `group` threads, over `chunks` chunks.
#[inline(always)]
pub const fn segment(g: u32, group: u32, chunks: u32) -> (u32, u32) {
    let len = chunks.div_ceil(group);
    let lo = g * len;
    let hi = lo + len;
    let lo = if lo < chunks { lo } else { chunks };
    let hi = if hi < chunks { hi } else { chunks };
    (lo, hi)
}

/// Experts `lo..hi` whose offsets thread `t` of `route_scan` computes (consecutive runs).
#[inline(always)]
pub const fn scan_experts(t: u32, experts: u32) -> (u32, u32) {
    segment(t, SCAN_THREADS, experts)
}

/// Dynamic shared memory of `route_count` and `route_place`: one u32 per expert.
pub const fn chunk_smem(experts: u32) -> u32 {
    4 * experts
}

/// Byte offset of the segment prefixes in `route_scan`'s shared memory (after one u32 per expert).
pub const fn scan_seg_at(experts: u32) -> u32 {
    4 * experts
}

/// Byte offset of the block-scan scratch in `route_scan`'s shared memory (after the segment prefixes).
pub const fn scan_scratch_at(experts: u32) -> u32 {
    scan_seg_at(experts) + 4 * SCAN_THREADS * scan_passes(experts)
}

/// Dynamic shared memory of `route_scan`: per-expert words, the segment prefixes, 32 words of scratch.
pub const fn scan_smem(experts: u32) -> u32 {
    scan_scratch_at(experts) + 4 * 32
}

/// Byte offset of `route_fused`'s two control words in its shared memory (after one u32 per expert).
pub const fn fused_ctl_at(experts: u32) -> u32 {
    4 * experts
}

/// Byte offset of `route_fused`'s block-scan scratch (after the control words, 16 bytes).
pub const fn fused_scratch_at(experts: u32) -> u32 {
    fused_ctl_at(experts) + 16
}

/// Dynamic shared memory of `route_fused`: one u32 per expert, the control words, 32 words of scratch.
pub const fn fused_smem(experts: u32) -> u32 {
    fused_scratch_at(experts) + 4 * 32
}

#[cfg(not(target_arch = "nvptx64"))]
/// The outputs of the routing layout (the CPU model writes the same buffers the kernels do).
pub struct Layout<'a> {
    /// u32 `[E]`.
    pub counts: &'a mut [u32],
    /// u32 `[E + 1]`.
    pub offsets: &'a mut [u32],
    /// u32 `[E + 1]`.
    pub tile_offsets: &'a mut [u32],
    /// u32 `[slots]` (rows `0..offsets[E]` written).
    pub row_slot: &'a mut [u32],
    /// i32 `[slots]`.
    pub slot_row: &'a mut [i32],
    /// u32 `[chunks(slots, chunk) max 1, E]`: the workspace (per-chunk counts, then first rows).
    pub chunk_counts: &'a mut [u32],
}

#[cfg(not(target_arch = "nvptx64"))]
/// CPU model of the three kernels, step by step as they run (blocks, rounds, warps and lanes in their order).
/// Returns the error word (true: an id outside -1..E; then `counts` holds the valid ids' counts, the offsets and
/// tile offsets are all zero, and `row_slot` / `slot_row` are not written, as on the device).
pub fn model(ids: &[i32], experts: u32, tile_m: u32, chunk: u32, out: &mut Layout<'_>) -> bool {
    let slots = ids.len() as u32;
    let e_n = experts as usize;
    let n_chunks = chunks(slots, chunk);
    let error = model_count(ids, experts, chunk, out.chunk_counts);
    // route_scan, thread by thread as the kernel splits the work: 1. segment sums and the group scan
    let cc = &mut *out.chunk_counts;
    let group = scan_group(experts);
    let per_pass = SCAN_THREADS / group;
    let passes = scan_passes(experts);
    let mut seg = [0u32; 4 * SCAN_THREADS as usize];
    let mut tot = Run::new(e_n);
    for pass in 0..passes {
        for t in (0..SCAN_THREADS).step_by(group as usize) {
            let e = pass * per_pass + t / group;
            let mut incl = 0u32;
            for g in 0..group {
                let (lo, hi) = segment(g, group, n_chunks);
                let mut sum = 0;
                if e < experts {
                    for c in lo..hi {
                        sum += cc[c as usize * e_n + e as usize];
                    }
                }
                seg[(pass * SCAN_THREADS + t + g) as usize] = incl;
                incl += sum;
            }
            if e < experts {
                tot.set(e as usize, incl);
                out.counts[e as usize] = incl;
            }
        }
    }
    // 2. offsets and tile offsets over each thread's run of experts
    let (mut o, mut tl) = (0u32, 0u32);
    for t in 0..SCAN_THREADS {
        let (lo, hi) = scan_experts(t, experts);
        for e in lo as usize..hi as usize {
            let n = tot.get(e);
            out.offsets[e] = if error { 0 } else { o };
            out.tile_offsets[e] = if error { 0 } else { tl };
            tot.set(e, o);
            o += n;
            tl += n.div_ceil(tile_m);
        }
    }
    out.offsets[e_n] = if error { 0 } else { o };
    out.tile_offsets[e_n] = if error { 0 } else { tl };
    if error {
        return true;
    }
    // 3. each chunk's first row per expert
    for pass in 0..passes {
        for t in 0..SCAN_THREADS {
            let e = pass * per_pass + t / group;
            if e < experts {
                let (lo, hi) = segment(t % group, group, n_chunks);
                let mut run = tot.get(e as usize) + seg[(pass * SCAN_THREADS + t) as usize];
                for c in lo..hi {
                    let at = c as usize * e_n + e as usize;
                    let n = cc[at];
                    cc[at] = run;
                    run += n;
                }
            }
        }
    }
    // route_place
    let mut run = Run::new(e_n);
    for c in 0..n_chunks {
        run.load(&out.chunk_counts[c as usize * e_n..(c as usize + 1) * e_n]);
        model_place(ids, experts, chunk, c, &mut run, out);
    }
    false
}

#[cfg(not(target_arch = "nvptx64"))]
/// CPU model of `route_fused`, phase by phase: the counts as `route_count`; after the first grid barrier, block b's
/// experts `segment(b, grid, E)` scanned over the chunks (each chunk's prefix written over its count); after the
/// second, each block's offsets from the counts and its chunk's first rows (offset plus prefix), then its rows as
/// `route_place`. The same outputs and error word as [`model`]; `chunk_counts` ends holding the prefixes.
pub fn model_fused(ids: &[i32], experts: u32, tile_m: u32, chunk: u32, out: &mut Layout<'_>) -> bool {
    let slots = ids.len() as u32;
    let e_n = experts as usize;
    let n = grid(slots, chunk);
    assert!(n <= MAX_CHUNKS, "route_fused scans at most {MAX_CHUNKS} chunks (four strips of a warp)");
    // 1. counts; the first barrier ORs the error
    let error = model_count(ids, experts, chunk, out.chunk_counts);
    // 2. each block's experts, one warp an expert: strips of 32 chunks, exclusive prefixes
    for b in 0..n {
        let (lo, hi) = segment(b, n, experts);
        for e in lo as usize..hi as usize {
            let mut carry = 0u32;
            for c in 0..n as usize {
                let at = c * e_n + e;
                let v = out.chunk_counts[at];
                if !error {
                    out.chunk_counts[at] = carry;
                }
                carry += v;
            }
            out.counts[e] = carry;
        }
    }
    if error {
        out.offsets[..=e_n].fill(0);
        out.tile_offsets[..=e_n].fill(0);
        return true;
    }
    // 3. per block: offsets from the counts (block 0 writes them), the chunk's first rows, its rows
    let mut run = Run::new(e_n);
    for c in 0..n {
        let (mut o, mut tl) = (0u32, 0u32);
        for e in 0..e_n {
            let k = out.counts[e];
            if c == 0 {
                out.offsets[e] = o;
                out.tile_offsets[e] = tl;
            }
            run.set(e, o + out.chunk_counts[c as usize * e_n + e]);
            o += k;
            tl += k.div_ceil(tile_m);
        }
        if c == 0 {
            out.offsets[e_n] = o;
            out.tile_offsets[e_n] = tl;
        }
        if chunks(slots, chunk) > 0 {
            model_place(ids, experts, chunk, c, &mut run, out);
        }
    }
    false
}

#[cfg(not(target_arch = "nvptx64"))]
/// `route_count` (and `route_fused`'s first phase) over every chunk: `chunk_counts` rows (one row of zeros for no
/// slots); returns whether an id lies outside -1..E.
fn model_count(ids: &[i32], experts: u32, chunk: u32, chunk_counts: &mut [u32]) -> bool {
    let slots = ids.len() as u32;
    let e_n = experts as usize;
    let mut error = false;
    for c in 0..grid(slots, chunk) {
        let row = &mut chunk_counts[c as usize * e_n..(c as usize + 1) * e_n];
        row.fill(0);
        let lo = c * chunk;
        let hi = if lo + chunk < slots { lo + chunk } else { slots };
        for s in lo..hi {
            let raw = ids[s as usize];
            error |= invalid(raw, experts);
            let e = expert_of(raw, experts);
            if e >= 0 {
                row[e as usize] += 1;
            }
        }
    }
    error
}

#[cfg(not(target_arch = "nvptx64"))]
/// The place step of chunk `c` (`route_place`, `route_fused`'s last): rounds of [`THREADS`] slots, warps in turn,
/// lanes grouped by expert, from the running rows `run` (each expert's first row in the chunk; advanced here).
fn model_place(ids: &[i32], experts: u32, chunk: u32, c: u32, run: &mut Run, out: &mut Layout<'_>) {
    let slots = ids.len() as u32;
    let lo = c * chunk;
    let hi = if lo + chunk < slots { lo + chunk } else { slots };
    let mut base = lo;
    while base < hi {
        for w in 0..WARPS {
            // the warp's 32 slots; lanes past the chunk hold -1
            let mut id = [-1i32; 32];
            for (lane, v) in id.iter_mut().enumerate() {
                let s = base + w * 32 + lane as u32;
                if s < hi {
                    *v = expert_of(ids[s as usize], experts);
                }
            }
            for lane in 0..32u32 {
                let s = base + w * 32 + lane;
                let mine = id[lane as usize];
                let mask = match_any(&id, mine);
                if mine < 0 {
                    if s < hi {
                        out.slot_row[s as usize] = -1;
                    }
                    continue;
                }
                let rank = (mask & ((1u32 << lane) - 1)).count_ones();
                let row = run.get(mine as usize) + rank;
                out.row_slot[row as usize] = s;
                out.slot_row[s as usize] = row as i32;
            }
            // the highest lane of each group advances the expert's running row
            for lane in 0..32u32 {
                let mine = id[lane as usize];
                let mask = match_any(&id, mine);
                if mine >= 0 && highest_lane(mask) == lane {
                    let e = mine as usize;
                    run.set(e, run.get(e) + mask.count_ones());
                }
            }
        }
        base += THREADS;
    }
}

#[cfg(not(target_arch = "nvptx64"))]
/// The lanes whose value equals `v` (`match.any.sync.b32`).
fn match_any(ids: &[i32; 32], v: i32) -> u32 {
    let mut m = 0;
    for (l, &x) in ids.iter().enumerate() {
        if x == v {
            m |= 1 << l;
        }
    }
    m
}

/// The highest set lane of a non-zero mask.
#[inline(always)]
pub const fn highest_lane(mask: u32) -> u32 {
    31 - mask.leading_zeros()
}

#[cfg(not(target_arch = "nvptx64"))]
/// The running rows of the model's `route_place` block (shared memory there), without an allocator: up to 4096
/// experts.
struct Run {
    v: [u32; 4096],
    n: usize,
}

#[cfg(not(target_arch = "nvptx64"))]
impl Run {
    fn new(n: usize) -> Run {
        assert!(n <= 4096, "the routing model takes at most 4096 experts");
        Run { v: [0; 4096], n }
    }
    fn load(&mut self, from: &[u32]) {
        self.v[..self.n].copy_from_slice(&from[..self.n]);
    }
    fn get(&self, e: usize) -> u32 {
        self.v[e]
    }
    fn set(&mut self, e: usize, x: u32) {
        self.v[e] = x;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::vec;
    use std::vec::Vec;

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u32) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as u32
        }
    }

    const POISON: u32 = 0xdead_beef;

    /// (counts, offsets, tile_offsets, row_slot, slot_row, error), by a stable sort of the slots by expert.
    type Ref = (Vec<u32>, Vec<u32>, Vec<u32>, Vec<u32>, Vec<i32>, bool);

    fn reference(ids: &[i32], experts: u32, tile_m: u32) -> Ref {
        let e_n = experts as usize;
        let error = ids.iter().any(|&x| x < -1 || x >= experts as i32);
        let valid = |x: i32| x >= 0 && x < experts as i32;
        let mut counts = vec![0u32; e_n];
        for &x in ids.iter().filter(|&&x| valid(x)) {
            counts[x as usize] += 1;
        }
        let mut offsets = vec![0u32; e_n + 1];
        let mut tiles = vec![0u32; e_n + 1];
        for e in 0..e_n {
            offsets[e + 1] = offsets[e] + counts[e];
            tiles[e + 1] = tiles[e] + counts[e].div_ceil(tile_m);
        }
        let mut order: Vec<u32> = (0..ids.len() as u32).filter(|&s| valid(ids[s as usize])).collect();
        order.sort_by_key(|&s| ids[s as usize]); // stable: slot order within an expert
        let mut slot_row = vec![-1i32; ids.len()];
        for (r, &s) in order.iter().enumerate() {
            slot_row[s as usize] = r as i32;
        }
        if error {
            offsets.fill(0);
            tiles.fill(0);
        }
        (counts, offsets, tiles, order, slot_row, error)
    }

    fn check(ids: &[i32], experts: u32, chunk: u32) {
        if grid(ids.len() as u32, chunk) <= MAX_CHUNKS {
            check_one(ids, experts, chunk, true);
        }
        check_one(ids, experts, chunk, false);
    }

    fn check_one(ids: &[i32], experts: u32, chunk: u32, fused: bool) {
        let tile_m = 128;
        let slots = ids.len();
        let e_n = experts as usize;
        let mut counts = vec![POISON; e_n];
        let mut offsets = vec![POISON; e_n + 1];
        let mut tiles = vec![POISON; e_n + 1];
        let mut row_slot = vec![POISON; slots];
        let mut slot_row = vec![POISON as i32; slots];
        let mut ws = vec![POISON; grid(slots as u32, chunk) as usize * e_n];
        let mut out = Layout {
            counts: &mut counts,
            offsets: &mut offsets,
            tile_offsets: &mut tiles,
            row_slot: &mut row_slot,
            slot_row: &mut slot_row,
            chunk_counts: &mut ws,
        };
        let err = if fused {
            model_fused(ids, experts, tile_m, chunk, &mut out)
        } else {
            model(ids, experts, tile_m, chunk, &mut out)
        };
        let (rc, ro, rt, rrs, rsr, rerr) = reference(ids, experts, tile_m);
        let what = format!("{slots} slots, E = {experts}, chunk {chunk}, fused {fused}");
        assert_eq!(err, rerr, "{what}: error word");
        assert_eq!(counts, rc, "{what}: counts");
        assert_eq!(offsets, ro, "{what}: offsets");
        assert_eq!(tiles, rt, "{what}: tile offsets");
        if err {
            assert!(row_slot.iter().all(|&v| v == POISON), "{what}: row_slot written despite the error");
            assert!(slot_row.iter().all(|&v| v == POISON as i32), "{what}: slot_row written despite the error");
        } else {
            assert_eq!(&row_slot[..rrs.len()], &rrs[..], "{what}: row_slot");
            assert!(row_slot[rrs.len()..].iter().all(|&v| v == POISON), "{what}: rows past the end written");
            assert_eq!(slot_row, rsr, "{what}: slot_row");
        }
    }

    fn random(rng: &mut Rng, slots: usize, experts: u32, masked_pct: u32, bad_pct: u32) -> Vec<i32> {
        (0..slots)
            .map(|_| {
                let r = rng.below(100);
                if r < masked_pct {
                    -1
                } else if r < masked_pct + bad_pct {
                    if rng.below(2) == 0 {
                        -2 - rng.below(5) as i32
                    } else {
                        (experts + rng.below(3)) as i32
                    }
                } else {
                    rng.below(experts) as i32
                }
            })
            .collect()
    }

    /// Every chunk size the kernels may meet, and small ones (many chunks, partial rounds, sizes that are not
    /// multiples of the block).
    fn chunk_sizes(slots: usize) -> Vec<u32> {
        vec![chunk_slots(slots as u32), 256, 300, 32, 1]
    }

    #[test]
    fn model_matches_the_reference_on_random_routings() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        for &(slots, experts) in
            &[(0usize, 8u32), (1, 1), (5, 3), (1000, 8), (4096, 128), (5000, 128), (20_000, 60), (3333, 4096)]
        {
            for masked in [0, 10, 60] {
                let ids = random(&mut rng, slots, experts, masked, 0);
                for chunk in chunk_sizes(slots) {
                    check(&ids, experts, chunk);
                }
            }
        }
    }

    #[test]
    fn model_at_the_benchmark_size() {
        let mut rng = Rng(77);
        let ids = random(&mut rng, 131_072, 128, 5, 0);
        check(&ids, 128, chunk_slots(131_072));
        check(&ids, 128, 2048);
    }

    #[test]
    fn model_all_slots_on_one_expert_and_empty_experts() {
        for experts in [1u32, 2, 7, 4096] {
            for slots in [1usize, 255, 256, 257, 1023, 1024, 1025, 9000] {
                let ids = vec![(experts - 1) as i32; slots];
                check(&ids, experts, chunk_slots(slots as u32));
                check(&ids, experts, 256);
                let ids: Vec<i32> = (0..slots).map(|s| if s % 3 == 0 { -1 } else { 0 }).collect();
                check(&ids, experts, chunk_slots(slots as u32));
                check(&ids, experts, 300);
            }
        }
        // only even experts get rows
        let mut rng = Rng(99);
        let ids: Vec<i32> = (0..7777).map(|_| 2 * rng.below(32) as i32).collect();
        check(&ids, 64, chunk_slots(7777));
        check(&ids, 64, 1000);
    }

    #[test]
    fn model_e_4096_many_slots() {
        let mut rng = Rng(4096);
        let ids = random(&mut rng, 200_000, 4096, 3, 0);
        check(&ids, 4096, chunk_slots(200_000));
    }

    #[test]
    fn model_invalid_ids_set_the_error_and_zero_offsets() {
        let mut rng = Rng(5);
        for &(slots, experts) in &[(1usize, 1u32), (100, 8), (5000, 128), (3000, 4096)] {
            let mut ids = random(&mut rng, slots, experts, 10, 2);
            ids[rng.below(slots as u32) as usize] = experts as i32; // at least one
            for chunk in chunk_sizes(slots) {
                check(&ids, experts, chunk);
            }
        }
        check(&[-2], 4, 1024);
        check(&[0, 1, 2, 3, 4], 4, 1024);
    }

    #[test]
    fn chunking_bounds() {
        for slots in [0u32, 1, 255, 1024, 1025, 131_072, 131_073, 1 << 20, (1 << 20) + 5, 3 << 22] {
            let c = chunk_slots(slots);
            assert!(c >= CHUNK_MIN && c.is_multiple_of(THREADS), "{slots}");
            assert!(chunks(slots, c) <= MAX_CHUNKS, "{slots}");
            for max in [slots, slots + 1, 2 * slots + 7] {
                assert!(grid(slots, c) <= max_chunks(max), "{slots} <= {max}");
            }
        }
        assert_eq!(chunk_slots(131_072), 1024);
        assert_eq!(chunks(131_072, 1024), 128);
        assert_eq!(max_chunks(0), 1);
    }

    #[test]
    fn scan_shapes() {
        for experts in 1..=4096u32 {
            let g = scan_group(experts);
            assert!(g.is_power_of_two() && g <= 32);
            assert!(g == 1 || g * experts <= SCAN_THREADS, "{experts}");
            assert!(2 * g * experts > SCAN_THREADS || g == 32, "{experts}: group could be larger");
            // the static shared-memory budget (48 KiB without opting in)
            assert!(scan_smem(experts) <= 48 * 1024, "{experts}");
            assert!(chunk_smem(experts) <= 48 * 1024);
        }
        for chunks in 0..300u32 {
            for group in [1u32, 2, 4, 8, 16, 32] {
                let mut next = 0;
                for g in 0..group {
                    let (lo, hi) = segment(g, group, chunks);
                    assert_eq!(lo.min(chunks), next.min(chunks));
                    assert!(lo <= hi && hi <= chunks);
                    next = hi;
                }
                assert_eq!(next, chunks);
            }
        }
    }
}
