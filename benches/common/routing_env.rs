//! The routing a benchmark times, from `MEGAMOE_BENCH_ROUTING` (shared by the benches through `#[path]`).
use megamoe::rng::Rng;

/// `random` (default): k distinct random experts per token; `balanced`: every expert exactly tokens * k / E rows
/// (token t's j-th expert is (t k + j) % E: k distinct experts when k <= E), so no m-tile is partial when that
/// count is a multiple of 128; `zipf:S`: k distinct experts drawn with popularity 1 / rank^S (hot and cold
/// experts: the weight gradients' tiles then differ in cost).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Kind {
    Random,
    Balanced,
    Zipf(f64),
}

/// The routing `MEGAMOE_BENCH_ROUTING` asks for; panics on a value it does not know.
pub fn kind() -> Kind {
    let v = std::env::var("MEGAMOE_BENCH_ROUTING").unwrap_or_default();
    match v.as_str() {
        "" | "random" => Kind::Random,
        "balanced" => Kind::Balanced,
        z => match z.strip_prefix("zipf:").and_then(|s| s.parse::<f64>().ok()) {
            Some(s) if s.is_finite() && s >= 0.0 => Kind::Zipf(s),
            _ => panic!("MEGAMOE_BENCH_ROUTING={v}: expected random, balanced or zipf:S (S >= 0)"),
        },
    }
}

/// Expert ids [tokens, k] of that routing.
pub fn ids(rng: &mut Rng, tokens: usize, k: usize, e: usize) -> Vec<i32> {
    match kind() {
        Kind::Random => rng.topk_ids(tokens, k, e),
        Kind::Balanced => {
            assert!(k <= e && (tokens * k) % e == 0, "balanced routing needs k <= E and E | T k");
            (0..tokens * k).map(|i| (i % e) as i32).collect()
        }
        Kind::Zipf(s) => rng.topk_ids_zipf(tokens, k, e, s),
    }
}
