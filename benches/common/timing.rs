//! The timing loop the micro-benchmarks share: the median of several timed rounds.

use std::time::{Duration, Instant};

pub const ROUNDS: usize = 7;
pub const ROUND_TIME: Duration = Duration::from_millis(150);

/// Median seconds per iteration of `f`; with `quick` (a smoke run under `cargo test`),
/// one iteration and NaN.
pub fn median(quick: bool, mut f: impl FnMut()) -> f64 {
    if quick {
        f();
        return f64::NAN;
    }
    let mut per_iter = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < ROUND_TIME {
            f();
            n += 1;
        }
        per_iter.push(start.elapsed().as_secs_f64() / n as f64);
    }
    per_iter.sort_by(f64::total_cmp);
    per_iter[ROUNDS / 2]
}
