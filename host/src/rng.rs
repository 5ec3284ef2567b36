//! Fresh random inputs for every run: a small, fast generator (SplitMix64), seeded from the clock unless
//! `MEGAMOE_SEED` asks for a given seed (printed by the callers so a failure can be replayed).
use half::bf16;

/// SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator with this seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// `MEGAMOE_SEED` if set, else a seed from the clock and the process id.
    pub fn fresh_seed() -> u64 {
        if let Some(s) = std::env::var("MEGAMOE_SEED").ok().and_then(|s| s.parse().ok()) {
            return s;
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        t ^ ((std::process::id() as u64) << 32) ^ 0x9e37_79b9_7f4a_7c15
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [-a, a).
    pub fn sym(&mut self, a: f64) -> f64 {
        (2.0 * self.uniform() - 1.0) * a
    }

    /// Uniform integer in 0..n (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Uniform random routing: for each of `tokens` tokens, `k` distinct expert ids in 0..e (k <= e), row-major
    /// [tokens, k].
    pub fn topk_ids(&mut self, tokens: usize, k: usize, e: usize) -> Vec<i32> {
        assert!(k <= e, "top-{k} of {e} experts");
        let mut ids = Vec::with_capacity(tokens * k);
        for _ in 0..tokens {
            let first = ids.len();
            while ids.len() < first + k {
                let id = self.below(e) as i32;
                if !ids[first..].contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }

    /// `n` bf16 values uniform in [-a, a).
    pub fn bf16_vec(&mut self, n: usize, a: f64) -> Vec<bf16> {
        (0..n).map(|_| bf16::from_f64(self.sym(a))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_in_range_and_not_constant() {
        let mut r = Rng::new(7);
        let v: Vec<f64> = (0..1000).map(|_| r.uniform()).collect();
        assert!(v.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = v.iter().sum::<f64>() / 1000.0;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
        assert!((0..1000).map(|_| r.below(10)).all(|x| x < 10));
    }

    #[test]
    fn topk_ids_are_distinct_per_token_and_in_range() {
        let mut r = Rng::new(11);
        let ids = r.topk_ids(500, 8, 20);
        assert_eq!(ids.len(), 4000);
        for row in ids.chunks(8) {
            assert!(row.iter().all(|&i| (0..20).contains(&i)));
            let mut s = row.to_vec();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), 8, "{row:?}");
        }
        assert_eq!(r.topk_ids(3, 4, 4).len(), 12);
    }
}
