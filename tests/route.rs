//! The routing layout on the device, both forms (`route_fused`, one launch; `route_count`, `route_scan`,
//! `route_place`), against its CPU model (`megamoe::route_layout::model`, itself unit-tested against a stable sort)
//! on random routings: masked slots, empty experts, all slots on one expert, slot counts that are not multiples of
//! the chunk, E = 1 and E = 4096, and invalid ids (the error word set, offsets all zero, rows untouched). Outputs and
//! the error word are poisoned before each run. GPU tests: ignored without a GPU.
mod common;

use common::{gpu, rng};
use megamoe::rng::Rng;
use megamoe::route::{self, with_route_kernels, HostLayout, RouteKernels};
use megamoe::route_layout::{chunk_slots, model, Layout};
use megamoe::Gpu;
use megamoe_kernels::kernels_host::GEMM_BM;

const POISON: u8 = 0xa5;
const POISON_U32: u32 = 0xa5a5_a5a5;

/// The CPU model's layout of `ids`, with the rows and slots the model leaves alone holding the poison.
fn expected(ids: &[i32], experts: usize) -> HostLayout {
    let slots = ids.len();
    let mut counts = vec![POISON_U32; experts];
    let mut offsets = vec![POISON_U32; experts + 1];
    let mut tile_offsets = vec![POISON_U32; experts + 1];
    let mut row_slot = vec![POISON_U32; slots];
    let mut slot_row = vec![POISON_U32 as i32; slots];
    let chunk = chunk_slots(slots as u32);
    let mut ws = vec![0u32; route::workspace_words(slots, experts)];
    let mut out = Layout {
        counts: &mut counts,
        offsets: &mut offsets,
        tile_offsets: &mut tile_offsets,
        row_slot: &mut row_slot,
        slot_row: &mut slot_row,
        chunk_counts: &mut ws,
    };
    let error = model(ids, experts as u32, GEMM_BM, chunk, &mut out) as u32;
    HostLayout { error, counts, offsets, tile_offsets, row_slot, slot_row }
}

/// Both routing forms against the model (the fused one must run as one launch).
fn compare(g: &Gpu, ids: &[i32], experts: usize, what: &str) {
    for k in [RouteKernels::Fused, RouteKernels::Split] {
        let (got, ms) = with_route_kernels(k, || route::layout(g, ids, experts, GEMM_BM, POISON, false)).unwrap();
        let names: Vec<&str> = ms.iter().map(|&(n, _)| n).collect();
        let want_names: &[&str] =
            if k == RouteKernels::Fused { &["route_fused"] } else { &["route_count", "route_scan", "route_place"] };
        assert_eq!(names, want_names, "{what}: the launches of {k:?}");
        check(&got, ids, experts, &format!("{what} ({k:?})"));
    }
}

fn check(got: &HostLayout, ids: &[i32], experts: usize, what: &str) {
    let want = expected(ids, experts);
    let what = format!("{what}: {} slots, E = {experts}", ids.len());
    assert_eq!(got.error, want.error, "{what}: error word");
    assert_eq!(got.counts, want.counts, "{what}: counts");
    assert_eq!(got.offsets, want.offsets, "{what}: offsets");
    assert_eq!(got.tile_offsets, want.tile_offsets, "{what}: tile offsets");
    if let Some(r) = (0..ids.len()).find(|&r| got.row_slot[r] != want.row_slot[r]) {
        panic!("{what}: row_slot[{r}] = {} (expected {})", got.row_slot[r], want.row_slot[r]);
    }
    if let Some(s) = (0..ids.len()).find(|&s| got.slot_row[s] != want.slot_row[s]) {
        panic!("{what}: slot_row[{s}] = {} (expected {}; id {})", got.slot_row[s], want.slot_row[s], ids[s]);
    }
    if want.error != 0 {
        assert!(got.offsets.iter().chain(&got.tile_offsets).all(|&v| v == 0), "{what}: offsets not zero");
    }
}

/// `tokens` tokens of `k` distinct experts each (uniform), a fraction `masked` of the slots set to -1.
fn topk(r: &mut Rng, tokens: usize, k: usize, experts: usize, masked: f64) -> Vec<i32> {
    let mut ids = Vec::with_capacity(tokens * k);
    for _ in 0..tokens {
        let mut row: Vec<i32> = Vec::with_capacity(k);
        while row.len() < k {
            let id = r.below(experts) as i32;
            if k > experts || !row.contains(&id) {
                row.push(id);
            }
        }
        for id in row.iter_mut() {
            if r.uniform() < masked {
                *id = -1;
            }
        }
        ids.extend(row);
    }
    ids
}

gpu_test!(route_matches_model_on_random_routings, {
    let g = gpu();
    let mut r = rng();
    for &(tokens, k, e) in &[
        (1usize, 1usize, 1usize),
        (3, 2, 8),
        (1000, 8, 128),
        (16384, 8, 128),
        (16385, 8, 128),
        (5000, 3, 5),
        (777, 1, 1),
        (4000, 8, 4096),
        (131_072, 8, 4096),
        (32768, 6, 60),
    ] {
        for masked in [0.0, 0.1, 0.7] {
            let ids = topk(&mut r, tokens, k, e, masked);
            compare(&g, &ids, e, &format!("top-{k}, {masked} masked"));
        }
    }
    compare(&g, &[], 8, "no slots");
});

gpu_test!(route_matches_model_on_skewed_routings, {
    let g = gpu();
    let mut r = rng();
    for &(slots, e) in &[(1usize, 1usize), (255, 3), (1025, 128), (131_072, 128), (300_001, 4096), (1 << 20, 4096)] {
        compare(&g, &vec![(e - 1) as i32; slots], e, "all on the last expert");
        let ids: Vec<i32> = (0..slots).map(|_| 2 * r.below(e.div_ceil(2)) as i32).collect();
        compare(&g, &ids, e, "only even experts");
        let ids: Vec<i32> = (0..slots).map(|_| if r.uniform() < 0.5 { -1 } else { r.below(e.min(3)) as i32 }).collect();
        compare(&g, &ids, e, "half masked, three experts");
    }
});

gpu_test!(route_invalid_ids_set_the_error_word, {
    let g = gpu();
    let mut r = rng();
    for &(slots, e) in &[(1usize, 1usize), (100, 8), (131_072, 128), (50_000, 4096)] {
        let mut ids = topk(&mut r, slots, 1, e, 0.1);
        let bad = [e as i32, -2, i32::MIN, i32::MAX, (e + 7) as i32];
        for _ in 0..1 + r.below(4) {
            let s = r.below(slots);
            ids[s] = bad[r.below(bad.len())];
        }
        compare(&g, &ids, e, "invalid ids");
        for k in [RouteKernels::Fused, RouteKernels::Split] {
            let (got, _) = with_route_kernels(k, || route::layout(&g, &ids, e, GEMM_BM, POISON, false)).unwrap();
            assert_eq!(got.error, 1);
            assert!(got.row_slot.iter().all(|&v| v == POISON_U32), "rows written despite the error ({k:?})");
            assert!(got.slot_row.iter().all(|&v| v == POISON_U32 as i32), "slots written despite the error ({k:?})");
        }
    }
});

gpu_test!(route_fused_reuses_its_barrier_word_over_calls_of_any_grid, {
    // one barrier word over 60 routings of 1..128 blocks, valid and invalid: each leaves the word with no arrivals
    // and its generation two on (two barriers), or one on with an invalid id (the second barrier is skipped)
    let g = gpu();
    let mut r = rng();
    let mut word = g.alloc::<u32>(1).unwrap();
    g.fill_bytes(&mut word, 0).unwrap();
    let mut gen = 0u32;
    for i in 0..60 {
        let e = [1usize, 8, 128, 4096][i % 4];
        let slots = [1usize, 700, 5000, 131_072, 1 << 20][r.below(5)];
        let mut ids = topk(&mut r, slots, 1, e, 0.2);
        let invalid = i % 7 == 3;
        if invalid {
            ids[r.below(slots)] = -5;
        }
        let (got, ms) =
            with_route_kernels(RouteKernels::Fused, || route::layout_on(&g, &ids, e, GEMM_BM, POISON, false, &word))
                .unwrap();
        assert_eq!(ms.len(), 1);
        check(&got, &ids, e, &format!("call {i}, one barrier word"));
        let w = g.download(&word).unwrap()[0];
        gen = (gen + if invalid { 1 } else { 2 }) & 0xfff;
        assert_eq!(w, gen << 20, "call {i}: the barrier word after the routing");
    }
});

gpu_test!(route_timing_at_the_benchmark_size, {
    let g = gpu();
    let mut r = rng();
    for &(tokens, k, e) in &[(16384usize, 8usize, 128usize), (131_072, 8, 4096)] {
        let ids = topk(&mut r, tokens, k, e, 0.0);
        for form in [RouteKernels::Fused, RouteKernels::Split] {
            let mut best: Vec<(&str, f64)> = Vec::new();
            for _ in 0..10 {
                let (_, ms) = with_route_kernels(form, || route::layout(&g, &ids, e, GEMM_BM, POISON, true)).unwrap();
                if best.is_empty() {
                    best = ms;
                } else {
                    for (b, m) in best.iter_mut().zip(ms) {
                        b.1 = b.1.min(m.1);
                    }
                }
            }
            let each: Vec<String> = best.iter().map(|(n, ms)| format!("{n} {:.1} us", ms * 1e3)).collect();
            eprintln!(
                "routing of {} slots, E = {e}, {form:?}: {} (best of 10, each launch timed alone)",
                tokens * k,
                each.join(", ")
            );
        }
    }
});
