//! The one random-number primitive of the solver: SplitMix64, used counter-based (a draw is a
//! function of its key, not of a sequence's position), so results depend on neither thread
//! count nor processing order.

/// SplitMix64's golden-ratio increment.
pub const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64's output function of `z + GOLDEN` (a bijective mixer of 64 bits).
#[inline]
pub fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLDEN);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The top 53 bits of `bits` as a number in [0, 1).
#[inline]
pub fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// A permutation of `0..n` drawn from `seed` (Fisher–Yates over SplitMix64 draws keyed by
/// seed and position): the same for a given `(n, seed)` everywhere. For shuffled test inputs
/// and benchmarks.
pub fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut perm: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let draw = splitmix64(splitmix64(seed) ^ i as u64);
        perm.swap(i, (draw % (i as u64 + 1)) as usize);
    }
    perm
}

#[cfg(test)]
mod tests {
    #[test]
    fn permutations_are_permutations_and_depend_on_the_seed() {
        let a = super::permutation(1000, 1);
        let mut sorted = a.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
        assert_ne!(a, (0..1000).collect::<Vec<_>>());
        assert_ne!(a, super::permutation(1000, 2));
        assert_eq!(a, super::permutation(1000, 1));
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        // SplitMix64 seeded with 0: its first outputs (the reference implementation's state
        // starts at 0 and adds GOLDEN before mixing).
        assert_eq!(super::splitmix64(0), 0xE220_A839_7B1D_CDAF);
        assert_eq!(super::splitmix64(super::GOLDEN), 0x6E78_9E6A_A1B9_65F4);
    }
}
