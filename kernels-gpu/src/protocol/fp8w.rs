//! The gathering 128 x 256 FP8 GEMMs (`grouped_gemm_fp8w_gather` and its SwiGLU forms: kernels/grouped_gemm_fp8w.rs
//! `body` with GA, `produce_gather`, `consume`): the producer warpgroup's four warps (team 3) write each tile's row
//! tokens into half l % 2 of the tokens' buffer between two named barriers 1 (128 threads), then per k-block every
//! thread waits on the empty stage, thread 0 writes the tile's slot (slot l % SLOTS, at the tile's first k-block),
//! announces B's bytes and loads B by TMA, and every thread's `cp.async` copies of A's rows arrive on the stage's
//! full barrier (`.noinc`: `init_with(1 + 128, 8)`). The consumer warpgroups (in lock step: a leader stands for its
//! four warps, each release their four arrivals) wait on the tile's first full stage, read the tile's slot and their
//! rows' tokens (the scales' rows), then per k-block wait on the full stage, read it until their wgmma complete and
//! release it; after the main loop they read the slot again (the tile's rows for the epilogue) and store their
//! boxes through the staging as the bf16 GEMMs (`store_box`). Block `tiles`, each of `kb_n` k-blocks.
//!
//! What it shows: the tokens' two halves are safe when a tile has at least three k-blocks (2 kb_n - 1 >= S = 4:
//! the producer rewrites half l % 2 for tile l + 2 only after its wait for the stage of tile l + 1's last k-block,
//! which the consumers release after reading tile l's tokens); the FP8 layer asks H to be a multiple of 512
//! (kb_n >= 4). With one or two k-blocks a tile (at four stages) the checker finds the race.
use super::{assert_fails, assert_ok, Kind, Mask, Model, Op, Ring};
use std::format;
use std::vec::Vec;

/// grouped_gemm_fp8w.rs: B's two 128-row boxes of a stage (256 x 128 e4m3).
const B_BYTES: i64 = 256 * 128;
/// kernels_host `FP8_SLOTS`.
const SLOTS: u32 = 8;

/// A block's work: ring stages, k-blocks a tile, per tile the staged boxes of each consumer warpgroup.
#[derive(Clone, Debug)]
pub struct Fp8wGather {
    pub s: u32,
    pub kb_n: u32,
    pub tiles: Vec<[u32; 2]>,
}

/// Changes to the kernel's protocol that the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// One buffer of row tokens, not two by tile parity.
    OneTokensBuffer,
    /// The tile slots indexed modulo the ring's stages, not `SLOTS`.
    SlotsAsStages,
}

/// The model of `c` (see the module).
pub fn model(c: &Fp8wGather, mutation: Mutation) -> Model {
    let mut m = Model::new(&format!("fp8w gather {c:?} {mutation:?}"));
    let mut parts: Vec<(Mask, Mask)> = Vec::new();
    for i in 0..c.s {
        parts.push((m.region(&format!("stage{i}.A"), true), m.region(&format!("stage{i}.B"), false)));
    }
    let stages = parts.iter().map(|(a, b)| a | b).collect();
    let ring = Ring::with_stages(&mut m, c.s, 1 + 128, 8, stages);
    // the row tokens: two halves (each warp of the producer writes its 32 rows: partitioned)
    let toks: Vec<Mask> = (0..2).map(|h| m.region(&format!("row tokens[{h}]"), true)).collect();
    let tok = |l: usize| if mutation == Mutation::OneTokensBuffer { toks[0] } else { toks[l % 2] };
    let n_slots = if mutation == Mutation::SlotsAsStages { c.s } else { SLOTS };
    let slots: Vec<Mask> = (0..n_slots).map(|i| m.region(&format!("slot{i}"), false)).collect();
    let slot = |l: usize| slots[l % n_slots as usize];
    let boxes: Vec<[Mask; 2]> =
        (0..2).map(|cw| [m.region(&format!("box{cw}.0"), true), m.region(&format!("box{cw}.1"), true)]).collect();
    let stage_bars: Vec<u8> = (0..2).map(|cw| m.named_bar(&format!("bar {}", 2 + cw))).collect();
    let bar1 = m.named_bar("bar 1");

    for w in 0..4u32 {
        let mut ops = Vec::new();
        let mut it = 0;
        for l in 0..c.tiles.len() {
            ops.push(Op::Sync { id: bar1, warps: 4 });
            ops.extend([Op::BeginWrite(tok(l)), Op::EndWrite(tok(l))]);
            ops.push(Op::Sync { id: bar1, warps: 4 });
            for kb in 0..c.kb_n {
                let mut step = ring.gather_step(it, w, B_BYTES, &parts, tok(l));
                if w == 0 && kb == 0 {
                    // after `wait_empty`, before the arrival that publishes it: thread 0's slot store
                    step.splice(1..1, [Op::BeginWrite(slot(l)), Op::EndWrite(slot(l))]);
                }
                ops.extend(step);
                it += 1;
            }
        }
        m.actor(&format!("producer.warp{w}"), 3, ops);
    }

    for cw in 0..2usize {
        for w in 0..4 {
            let leader = w == 0;
            let mut ops = Vec::new();
            let (mut it, mut k) = (0u32, 0u32);
            for (l, t) in c.tiles.iter().enumerate() {
                if leader {
                    // the tile's first stage, then its slot and the rows' tokens (the scales' rows)
                    ops.push(ring.wait_full(it));
                    ops.extend([Op::BeginRead(slot(l)), Op::EndRead(slot(l))]);
                    ops.extend([Op::BeginRead(tok(l)), Op::EndRead(tok(l))]);
                    for _ in 0..c.kb_n {
                        ops.push(ring.wait_full(it));
                        ops.extend([Op::BeginRead(ring.region(it)), Op::EndRead(ring.region(it))]);
                        ops.push(ring.release_prev(it + 1, 4));
                        it += 1;
                    }
                    // the slot again for the epilogue's rows
                    ops.extend([Op::BeginRead(slot(l)), Op::EndRead(slot(l))]);
                }
                for _ in 0..t[cw] {
                    let bx = boxes[cw][(k % 2) as usize];
                    if leader {
                        ops.push(Op::WaitRead(1));
                    }
                    ops.push(Op::Sync { id: stage_bars[cw], warps: 4 });
                    ops.extend([Op::BeginWrite(bx), Op::EndWrite(bx)]);
                    ops.push(Op::Sync { id: stage_bars[cw], warps: 4 });
                    if leader {
                        ops.extend([Op::Store(bx), Op::Commit]);
                    }
                    k += 1;
                }
            }
            if leader {
                ops.push(Op::WaitRead(0));
            }
            m.actor(&format!("wg{cw}.warp{w}"), 1 + cw as u8, ops);
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::println;

    fn c(s: u32, kb_n: u32, tiles: &[[u32; 2]]) -> Fp8wGather {
        Fp8wGather { s, kb_n, tiles: tiles.to_vec() }
    }

    /// Tiles of 2 kb_n - 1 >= S k-blocks, over three tiles (the producer two tiles ahead at most), with and without
    /// the epilogue's staging: the kernel's four stages with 3 k-blocks (H = 384; the layer asks a multiple of
    /// 512: 4 and more), and smaller rings at their bound. (Four stages with 4 k-blocks exceed the checker's bound.)
    #[test]
    fn fp8w_gather_tokens_and_slots() {
        let mut states = 0;
        for (s, kb_n, t) in [
            (4, 3, &[[0, 0], [0, 0], [0, 0]][..]),
            (2, 2, &[[0, 0], [0, 0], [0, 0]][..]),
            (3, 2, &[[0, 0], [0, 0], [0, 0]][..]),
            (2, 2, &[[1, 1], [0, 0], [1, 0]][..]),
        ] {
            states += assert_ok(&model(&c(s, kb_n, t), Mutation::None));
        }
        println!("fp8w gather: {states} states");
    }

    /// Tiles of 2 kb_n - 1 < S k-blocks (the kernel's four stages with one or two, H = 128 or 256; two stages with
    /// one): the producer runs two tiles ahead and rewrites a half of the row tokens that the consumers have yet to
    /// read (why the FP8 layer asks H to be a multiple of 512).
    #[test]
    fn fp8w_gather_tokens_race_with_short_tiles() {
        for (s, kb_n) in [(4, 1), (4, 2), (2, 1)] {
            let v = assert_fails(&model(&c(s, kb_n, &[[0, 0]; 3]), Mutation::None), Kind::Race);
            assert!(v.what.contains("row tokens"), "{v}");
        }
    }

    /// Each mutation caught as the race it is.
    #[test]
    fn fp8w_gather_mutations() {
        let v = assert_fails(&model(&c(2, 2, &[[0, 0]; 2]), Mutation::OneTokensBuffer), Kind::Race);
        assert!(v.what.contains("row tokens"), "{v}");
        let v = assert_fails(&model(&c(2, 1, &[[0, 0]; 4]), Mutation::SlotsAsStages), Kind::Race);
        assert!(v.what.contains("slot"), "{v}");
    }
}
