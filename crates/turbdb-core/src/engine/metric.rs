//! The workload-throughput metric of LifeRaft and JAWS (Wang et al., eqs. 1–2): how fast
//! reading one atom and serving its queue would consume pending work,
//! `U_t = W / (T_b·φ + T_m·W)`, and its aged form `U_e = U_t·(1 − α) + E·α`, which lets the
//! oldest waiting work win once it has waited long enough. `W` counts pending points, `φ`
//! is 1 when the atom must be read, `T_b` is the time to read an atom and `T_m` the time to
//! add one point's part of one atom; times are in milliseconds, so `U_t` is in points per
//! millisecond and the age `E` in milliseconds, as in the paper.

/// The measured costs the metric weighs: both are running averages of what the engine
/// observed, so the metric follows the machine (a cold disk, a busy CPU).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostModel {
    /// Milliseconds to read one atom that is not cached.
    pub t_b: f64,
    /// Milliseconds to add one point's contribution of one atom.
    pub t_m: f64,
}

/// Weight of a new observation in the running averages.
const SMOOTHING: f64 = 0.2;

impl Default for CostModel {
    /// Starting guesses, from this machine: a 6 KiB direct read takes about 80 µs, a lag8
    /// partial sum about 150 ns.
    fn default() -> Self {
        Self {
            t_b: 0.08,
            t_m: 0.000_15,
        }
    }
}

impl CostModel {
    /// Folds in a batch that read `atoms` atoms in `read_ms` milliseconds.
    pub fn observe_reads(&mut self, atoms: u64, read_ms: f64) {
        if atoms > 0 && read_ms > 0.0 {
            self.t_b += SMOOTHING * (read_ms / atoms as f64 - self.t_b);
        }
    }

    /// Folds in a batch that added `contributions` partial sums in `compute_ms`.
    pub fn observe_compute(&mut self, contributions: u64, compute_ms: f64) {
        if contributions > 0 && compute_ms > 0.0 {
            self.t_m += SMOOTHING * (compute_ms / contributions as f64 - self.t_m);
        }
    }

    /// Milliseconds a query of `atoms` atom reads and `contributions` partial sums takes
    /// alone on a cold cache.
    pub fn solo_ms(&self, atoms: u64, contributions: u64) -> f64 {
        atoms as f64 * self.t_b + contributions as f64 * self.t_m
    }
}

/// `U_t` of an atom with `points` pending points; `cached` when it need not be read.
#[inline]
pub fn workload_throughput(points: f64, cached: bool, cost: &CostModel) -> f64 {
    if points <= 0.0 {
        return 0.0;
    }
    let read = if cached { 0.0 } else { cost.t_b };
    points / (read + cost.t_m * points)
}

/// `U_e` of an atom whose workload throughput is `u_t` and whose oldest pending sub-query
/// has waited `age_ms`.
#[inline]
pub fn aged(u_t: f64, age_ms: f64, alpha: f64) -> f64 {
    u_t * (1.0 - alpha) + age_ms * alpha
}

/// The part of `U_e` that does not change while the atom waits: `U_e = key + α·now` for
/// an atom whose oldest sub-query arrived at `oldest_ms`. Orders by `key` are orders by
/// `U_e` at any one time, so queues can be kept sorted without re-aging them.
#[inline]
pub fn static_key(u_t: f64, oldest_ms: f64, alpha: f64) -> f64 {
    u_t * (1.0 - alpha) - oldest_ms * alpha
}

#[cfg(test)]
mod tests {
    use super::*;

    const COST: CostModel = CostModel {
        t_b: 0.1,
        t_m: 0.001,
    };

    #[test]
    fn throughput_rewards_long_queues_and_cached_atoms() {
        // One point on an uncached atom: 1 / (0.1 + 0.001).
        assert!((workload_throughput(1.0, false, &COST) - 1.0 / 0.101).abs() < 1e-9);
        // A longer queue spreads the read over more points.
        assert!(workload_throughput(100.0, false, &COST) > workload_throughput(10.0, false, &COST));
        // A cached atom runs at the compute rate, whatever its queue.
        assert!((workload_throughput(5.0, true, &COST) - 1000.0).abs() < 1e-9);
        assert_eq!(workload_throughput(0.0, false, &COST), 0.0);
    }

    #[test]
    fn age_bias_moves_between_contention_and_arrival_order() {
        let (busy, old) = (workload_throughput(500.0, false, &COST), 2000.0);
        let quiet = workload_throughput(1.0, false, &COST);
        // α = 0: the busy atom wins however old the quiet one's work is.
        assert!(aged(busy, 0.0, 0.0) > aged(quiet, old, 0.0));
        // α = 1: the older work wins.
        assert!(aged(busy, 0.0, 1.0) < aged(quiet, old, 1.0));
        // The static key orders atoms as U_e does at any time.
        let now = 5000.0;
        for alpha in [0.0, 0.3, 0.5, 1.0] {
            let a = (busy, now - 10.0);
            let b = (quiet, now - old);
            let by_ue = aged(a.0, now - a.1, alpha) > aged(b.0, now - b.1, alpha);
            let by_key = static_key(a.0, a.1, alpha) > static_key(b.0, b.1, alpha);
            assert_eq!(by_ue, by_key, "alpha {alpha}");
            assert!(
                (static_key(a.0, a.1, alpha) + alpha * now - aged(a.0, now - a.1, alpha)).abs()
                    < 1e-9
            );
        }
    }

    #[test]
    fn costs_follow_observations() {
        let mut cost = CostModel::default();
        for _ in 0..100 {
            cost.observe_reads(10, 5.0);
            cost.observe_compute(1000, 0.5);
        }
        assert!((cost.t_b - 0.5).abs() < 1e-6 && (cost.t_m - 0.0005).abs() < 1e-9);
        assert!((cost.solo_ms(2, 1000) - 1.5).abs() < 1e-6);
    }
}
