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

    /// Skewed routing: for each of `tokens` tokens, `k` distinct expert ids in 0..e (k <= e), each draw picking
    /// the expert of popularity rank r (0-based) with probability proportional to 1 / (r + 1)^s (Zipf; s = 0 is
    /// uniform), the ranks dealt to the expert ids by a random permutation (the hot experts are not the first
    /// ids). Repeats within a token are drawn again. Row-major [tokens, k].
    pub fn topk_ids_zipf(&mut self, tokens: usize, k: usize, e: usize, s: f64) -> Vec<i32> {
        assert!(k <= e, "top-{k} of {e} experts");
        assert!(s.is_finite() && s >= 0.0, "Zipf exponent {s}");
        let mut cdf: Vec<f64> = (0..e).map(|r| 1.0 / ((r + 1) as f64).powf(s)).collect();
        for r in 1..e {
            cdf[r] += cdf[r - 1];
        }
        let total = cdf[e - 1];
        let mut perm: Vec<i32> = (0..e as i32).collect();
        for i in (1..e).rev() {
            perm.swap(i, self.below(i + 1));
        }
        let mut ids = Vec::with_capacity(tokens * k);
        for _ in 0..tokens {
            let first = ids.len();
            while ids.len() < first + k {
                let u = self.uniform() * total;
                let r = cdf.partition_point(|&c| c <= u).min(e - 1);
                let id = perm[r];
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

    #[test]
    fn zipf_ids_are_distinct_in_range_and_skewed() {
        let mut r = Rng::new(12);
        let (t, k, e) = (4000, 8, 64);
        let ids = r.topk_ids_zipf(t, k, e, 1.0);
        assert_eq!(ids.len(), t * k);
        let mut counts = vec![0usize; e];
        for row in ids.chunks(k) {
            assert!(row.iter().all(|&i| (0..e as i32).contains(&i)));
            let mut s = row.to_vec();
            s.sort_unstable();
            s.dedup();
            assert_eq!(s.len(), k, "{row:?}");
            for &i in row {
                counts[i as usize] += 1;
            }
        }
        let (max, min) = (*counts.iter().max().unwrap(), *counts.iter().min().unwrap());
        // popularity 1 against 1 / 64 per draw: the hottest expert in most tokens, the coldest in few
        assert!(max > 5 * t * k / e && min < t * k / (3 * e), "max {max} min {min}");
        // s = 0 is uniform: no expert far from t k / e
        let flat = r.topk_ids_zipf(t, k, e, 0.0);
        let mut c0 = vec![0usize; e];
        for &i in &flat {
            c0[i as usize] += 1;
        }
        assert!(c0.iter().all(|&c| c > t * k / e / 2 && c < 2 * t * k / e), "{c0:?}");
    }
}
