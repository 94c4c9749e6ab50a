//! Random timings (kill points, SIGTERM delays) a failing run can replay: the seed is printed.

/// A sequence of random delays from one seed: `RULEOP_TEST_SEED` when set (to replay a failure),
/// else the clock's nanoseconds. The seed is printed on stderr, which a failing test shows.
pub struct RandomTimings {
    seed: u64,
    round: u64,
}

impl RandomTimings {
    /// The timings of `test`, its seed printed.
    pub fn new(test: &str) -> Self {
        Self::with_seed(test, None)
    }

    /// Like [`RandomTimings::new`], with `seed` taking precedence over `RULEOP_TEST_SEED` (a
    /// harness's own variable, such as the soak's `SOAK_SEED`).
    pub fn with_seed(test: &str, seed: Option<u64>) -> Self {
        let seed = seed
            .or_else(|| std::env::var("RULEOP_TEST_SEED").ok().and_then(|s| s.parse().ok()))
            .unwrap_or_else(clock_seed);
        eprintln!("{test}: RULEOP_TEST_SEED={seed}");
        RandomTimings { seed, round: 0 }
    }

    /// The seed that replays this sequence.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The next value below `limit` (splitmix64 of the seed and the round).
    pub fn below(&mut self, limit: u64) -> u64 {
        self.round += 1;
        let mut z = self.seed.wrapping_add(self.round.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % limit
    }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()) ^ d.as_secs())
}

#[test]
fn one_seed_gives_one_sequence() {
    let mut a = RandomTimings { seed: 42, round: 0 };
    let mut b = RandomTimings::with_seed("one_seed_gives_one_sequence", Some(42));
    assert_eq!(b.seed(), 42, "a harness's own seed comes first");
    let first: Vec<u64> = (0..5).map(|_| a.below(1_000)).collect();
    assert_eq!(first, (0..5).map(|_| b.below(1_000)).collect::<Vec<_>>());
    assert!(first.iter().all(|v| *v < 1_000));
    assert!(first.windows(2).any(|w| w[0] != w[1]), "{first:?}");
}
