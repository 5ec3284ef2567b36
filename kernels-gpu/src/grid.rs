//! A grid-wide barrier in one u32 word of global memory, for a kernel whose blocks are all resident at once
//! (the host checks the grid against the device's occupancy before it picks such a kernel).
//!
//! The word packs three fields: the blocks arrived so far (bits 0..10), how many of them arrived with their
//! flag set (bits 10..20: an OR over the grid that the last arrival learns, `route_fused`'s invalid ids), and a
//! generation (bits 20..32). One thread per block adds [`arrival`]; the add that returns `n - 1` arrivals is the
//! last, and it releases the others by a compare-and-swap that zeroes both counts and advances the generation
//! ([`release`]), so the word is ready for the next barrier, of this launch or a later one of any grid size,
//! with no memset. A waiter watches for the generation to change. A waiter whose bound expires takes its
//! arrival back by a compare-and-swap that only succeeds while the generation is unchanged, so an expired
//! barrier leaves the word as it found it: the last arrival's release then finds fewer than `n` arrivals, takes
//! its own back too and reports the expiry (every block of that launch ends on it; nothing is released).
//!
//! Pure arithmetic here (host-tested below, with interleavings of arrivals, releases and withdrawals); the
//! device loop is `arrive`, on the nvptx64 target only.

/// Bits of each count field.
pub const COUNT_BITS: u32 = 10;
/// Most blocks one barrier takes.
pub const MAX_BLOCKS: u32 = (1 << COUNT_BITS) - 1;
const FIELD: u32 = (1 << COUNT_BITS) - 1;
const FLAG_SHIFT: u32 = COUNT_BITS;
const GEN_SHIFT: u32 = 2 * COUNT_BITS;
const LOW: u32 = (1 << GEN_SHIFT) - 1;

/// What one block adds to the word as it arrives.
#[inline(always)]
pub const fn arrival(flag: bool) -> u32 {
    1 + ((flag as u32) << FLAG_SHIFT)
}

/// Blocks arrived, in a word's value.
#[inline(always)]
pub const fn arrived(word: u32) -> u32 {
    word & FIELD
}

/// Arrivals with their flag set, in a word's value.
#[inline(always)]
pub const fn flags(word: u32) -> u32 {
    (word >> FLAG_SHIFT) & FIELD
}

/// The generation, in a word's value.
#[inline(always)]
pub const fn generation(word: u32) -> u32 {
    word >> GEN_SHIFT
}

/// The released value of a word that holds `full` (every arrival of the barrier in): both counts zero, the
/// generation one on (wrapping).
#[inline(always)]
pub const fn released(full: u32) -> u32 {
    (full & !LOW).wrapping_add(1 << GEN_SHIFT)
}

/// How an arrival at the barrier ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pass {
    /// Every block arrived; `flags` of them with their flag set.
    Released { flags: u32 },
    /// The bound expired (or another block's did): this block's arrival was taken back; nothing was released.
    Expired,
}

/// The last arrival's step, given the word's value `full` it read (or its own add left): the value to swap
/// in, or `None` when the word no longer holds `n` arrivals (a waiter took its arrival back: the barrier has
/// expired, and the last arrival must take its own back).
#[inline(always)]
pub const fn release(full: u32, n: u32) -> Option<u32> {
    if arrived(full) == n {
        Some(released(full))
    } else {
        None
    }
}

#[cfg(target_arch = "nvptx64")]
/// One thread of each block (the others wait at a block barrier after it): arrive at the barrier at `word` of
/// `n` blocks with `flag`, and wait until all have arrived (a spin on `ld.acquire.gpu`, bounded by `timeout_ns`
/// of `%globaltimer`). The last arrival calls `on_last` with the count of flags set before it releases the
/// others (its writes there are released with the barrier). The block's earlier global writes (made visible to this thread by a block barrier before
/// the call) are released to the other blocks, and theirs acquired, on [`Pass::Released`].
/// SAFETY: `word` a u32 of global memory that every block of the grid passes, holding zero arrivals before the
/// first barrier of a launch (as every released or expired barrier leaves it); `n` the grid's block count,
/// 1..=[`MAX_BLOCKS`]; one thread per block, every block calling as many barriers in the same order.
pub unsafe fn arrive(word: *mut u32, n: u32, flag: bool, timeout_ns: u64, on_last: impl FnOnce(u32)) -> Pass {
    use crate::ptx::{fence, regs, sync};
    let mine = arrival(flag);
    fence::acq_rel_gpu();
    let old = sync::atom_add_acq_rel_gpu(word, mine);
    let gen = generation(old);
    let full = old.wrapping_add(mine);
    if arrived(full) == n {
        // the last arrival: what the others read after the barrier, then the released value swapped in unless
        // a waiter has taken its arrival back meanwhile
        on_last(flags(full));
        let mut cur = full;
        loop {
            match release(cur, n) {
                Some(next) => {
                    let seen = sync::atom_cas_acq_rel_gpu(word, cur, next);
                    if seen == cur {
                        return Pass::Released { flags: flags(cur) };
                    }
                    cur = seen;
                }
                None => return withdraw(word, mine, gen),
            }
        }
    }
    let start = regs::globaltimer();
    loop {
        let v = sync::ld_acquire_gpu(word);
        if generation(v) != gen {
            return Pass::Released { flags: 0 };
        }
        if regs::globaltimer().wrapping_sub(start) > timeout_ns {
            return withdraw(word, mine, gen);
        }
        sync::nanosleep(32);
    }
}

#[cfg(target_arch = "nvptx64")]
/// Take the arrival `mine` back from the barrier of generation `gen`, unless it has been released meanwhile.
/// SAFETY: as [`arrive`], by the thread that added `mine`.
unsafe fn withdraw(word: *mut u32, mine: u32, gen: u32) -> Pass {
    use crate::ptx::sync;
    let mut cur = sync::ld_acquire_gpu(word);
    loop {
        if generation(cur) != gen {
            return Pass::Released { flags: 0 };
        }
        let seen = sync::atom_cas_acq_rel_gpu(word, cur, cur.wrapping_sub(mine));
        if seen == cur {
            return Pass::Expired;
        }
        cur = seen;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// One block's state in the model of [`arrive`] (each step one atomic operation on the word).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum B {
        NotYet,
        /// arrived; waiting on generation `gen`; `last` when its add completed the count
        Waiting {
            gen: u32,
            last: bool,
            mine: u32,
        },
        Done(Pass),
    }

    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % n as u64) as usize
        }
    }

    /// Run one barrier of `n` blocks from `word`, blocks stepping in a random order; a waiting block in `expire`
    /// may time out at any step, and once one has, every waiting block may (they share one bound). Returns the
    /// final word and every block's outcome.
    fn run(word: u32, n: u32, flag: &[bool], expire: &[bool], rng: &mut Rng) -> (u32, Vec<Pass>) {
        let mut w = word;
        let mut any_expired = false;
        let mut b = std::vec![B::NotYet; n as usize];
        let mut steps = 0;
        while b.iter().any(|x| !matches!(x, B::Done(_))) {
            steps += 1;
            assert!(steps < 100_000, "the barrier model did not finish");
            let i = rng.below(n as usize);
            b[i] = match b[i] {
                B::NotYet => {
                    let mine = arrival(flag[i]);
                    let old = w;
                    w = w.wrapping_add(mine);
                    B::Waiting { gen: generation(old), last: arrived(w) == n, mine }
                }
                B::Waiting { gen, last: true, mine } => {
                    // one compare-and-swap attempt on the current value (or the withdrawal when the count fell)
                    match release(w, n) {
                        Some(next) => {
                            let f = flags(w);
                            w = next;
                            B::Done(Pass::Released { flags: f })
                        }
                        None => {
                            assert_eq!(generation(w), gen);
                            w = w.wrapping_sub(mine);
                            B::Done(Pass::Expired)
                        }
                    }
                }
                B::Waiting { gen, last: false, mine } => {
                    if generation(w) != gen {
                        B::Done(Pass::Released { flags: 0 })
                    } else if (expire[i] || any_expired) && rng.below(3) == 0 {
                        any_expired = true;
                        w = w.wrapping_sub(mine);
                        B::Done(Pass::Expired)
                    } else {
                        B::Waiting { gen, last: false, mine }
                    }
                }
                d => d,
            };
        }
        let out = b.iter().map(|x| if let B::Done(p) = x { *p } else { unreachable!() }).collect();
        (w, out)
    }

    #[test]
    fn every_block_is_released_and_the_word_is_reset() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut word = 0u32;
        for round in 0..400 {
            let n = 1 + rng.below(if round % 4 == 0 { MAX_BLOCKS as usize } else { 160 }) as u32;
            let flag: Vec<bool> = (0..n).map(|_| rng.below(7) == 0).collect();
            let set = flag.iter().filter(|&&f| f).count() as u32;
            let (w, out) = run(word, n, &flag, &std::vec![false; n as usize], &mut rng);
            assert_eq!(arrived(w), 0);
            assert_eq!(flags(w), 0);
            assert_eq!(generation(w), (generation(word) + 1) & ((1 << (32 - GEN_SHIFT)) - 1));
            let lasts: Vec<&Pass> =
                out.iter().filter(|p| matches!(p, Pass::Released { flags } if *flags > 0)).collect();
            assert!(out.iter().all(|p| matches!(p, Pass::Released { .. })));
            // exactly one block (the last) learns the flag count
            if set > 0 {
                assert_eq!(lasts.len(), 1);
                assert_eq!(*lasts[0], Pass::Released { flags: set });
            }
            word = w;
        }
    }

    #[test]
    fn the_generation_wraps() {
        let top = 0xfff << GEN_SHIFT;
        let mut rng = Rng(7);
        let (w, out) = run(top, 5, &[false, true, false, false, true], &[false; 5], &mut rng);
        assert_eq!(w, 0);
        assert!(out.iter().all(|p| matches!(p, Pass::Released { .. })));
    }

    #[test]
    fn an_expired_barrier_releases_no_one_and_leaves_the_word_as_it_was() {
        let mut rng = Rng(0x1234_5678);
        let word = 3 << GEN_SHIFT;
        let mut expired_runs = 0;
        for _ in 0..2000 {
            let n = 2 + rng.below(40) as u32;
            let flag: Vec<bool> = (0..n).map(|_| rng.below(5) == 0).collect();
            let expire: Vec<bool> = (0..n).map(|_| rng.below(4) == 0).collect();
            let (w, out) = run(word, n, &flag, &expire, &mut rng);
            let n_released = out.iter().filter(|p| matches!(p, Pass::Released { .. })).count();
            // all or nothing
            if n_released == n as usize {
                assert_eq!(w, released(word));
            } else {
                expired_runs += 1;
                assert_eq!(n_released, 0, "{out:?}");
                assert_eq!(w, word, "an expired barrier must leave the word unchanged");
            }
        }
        assert!(expired_runs > 100);
    }
}
