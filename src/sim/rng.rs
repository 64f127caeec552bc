//! A small deterministic random number generator (SplitMix64): one seed fixes every choice of a run, and the same
//! code gives the same numbers on every machine. The generator is the allocator's (`Random` pools draw from it too).

use crate::ipam::SplitMix64;

#[derive(Clone, Debug, Default)]
pub struct Rng(SplitMix64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(SplitMix64::new(seed))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A number in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }

    /// An index into `weights`, chosen with probability proportional to its weight; `None` when all are 0.
    pub fn weighted(&mut self, weights: &[u32]) -> Option<usize> {
        let total: u64 = weights.iter().map(|w| u64::from(*w)).sum();
        if total == 0 {
            return None;
        }
        let mut r = self.next_u64() % total;
        for (i, w) in weights.iter().enumerate() {
            if r < u64::from(*w) {
                return Some(i);
            }
            r -= u64::from(*w);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_seed_gives_one_sequence() {
        let a: Vec<u64> = (0..5).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..5).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
        let c: Vec<u64> = (0..5).scan(Rng::new(8), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(1);
        assert!((0..1000).all(|_| r.below(3) < 3));
        assert_eq!(r.weighted(&[0, 0]), None);
        assert!((0..100).all(|_| r.weighted(&[0, 5, 0]) == Some(1)));
    }
}
