//! JAWS's adaptive starvation resistance (Wang et al. §V-A): the age bias α is adjusted at
//! the end of every run of `r` queries from the run's mean response time and throughput,
//! smoothed over past runs (`x'(i) = 0.2·x(i) + 0.8·x'(i−1)`):
//!
//! 1. response time rose and throughput did not rise as much: lower α (favour contention);
//! 2. response time fell and throughput fell by more: raise α (favour arrival order);
//!
//! each by the gap between the two ratios. When α has not moved for two runs it is nudged
//! to explore, so that a poor starting value is not kept forever.

/// Weight of the newest run in the smoothed response time and throughput.
const NEWEST: f64 = 0.2;
/// How far α is nudged when it has not moved for two runs.
const EXPLORE_STEP: f64 = 0.1;

/// The age bias and what it remembers of past runs.
#[derive(Debug, Clone)]
pub struct AgeBias {
    alpha: f64,
    adaptive: bool,
    /// Smoothed (response time, throughput) of the previous run.
    smoothed: Option<(f64, f64)>,
    still_runs: u32,
    explore_up: bool,
}

impl AgeBias {
    /// Starts at `alpha`; `adaptive = false` keeps it fixed (LifeRaft).
    pub fn new(alpha: f64, adaptive: bool) -> Self {
        Self {
            alpha: alpha.clamp(0.0, 1.0),
            adaptive,
            smoothed: None,
            still_runs: 0,
            explore_up: alpha < 0.5,
        }
    }

    /// The current α.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Ends a run whose queries took `response` seconds on average and completed at
    /// `throughput` queries per second; returns the α of the next run.
    pub fn end_run(&mut self, response: f64, throughput: f64) -> f64 {
        if !(self.adaptive && response > 0.0 && throughput > 0.0) {
            return self.alpha;
        }
        let Some((rt_prev, tp_prev)) = self.smoothed else {
            self.smoothed = Some((response, throughput));
            return self.alpha;
        };
        let rt = NEWEST * response + (1.0 - NEWEST) * rt_prev;
        let tp = NEWEST * throughput + (1.0 - NEWEST) * tp_prev;
        self.smoothed = Some((rt, tp));
        let (rt_ratio, tp_ratio) = (rt / rt_prev, tp / tp_prev);
        let before = self.alpha;
        if rt_ratio >= 1.0 && tp_ratio < rt_ratio {
            self.alpha -= (rt_ratio - tp_ratio).min(self.alpha);
        } else if rt_ratio < 1.0 && tp_ratio < rt_ratio {
            self.alpha += (rt_ratio - tp_ratio).min(1.0 - self.alpha);
        }
        if self.alpha == before {
            self.still_runs += 1;
            if self.still_runs >= 2 {
                if self.alpha >= 1.0 {
                    self.explore_up = false;
                } else if self.alpha <= 0.0 {
                    self.explore_up = true;
                }
                let step = if self.explore_up {
                    EXPLORE_STEP
                } else {
                    -EXPLORE_STEP
                };
                self.alpha = (self.alpha + step).clamp(0.0, 1.0);
                self.explore_up = !self.explore_up;
                self.still_runs = 0;
            }
        } else {
            self.still_runs = 0;
        }
        self.alpha
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rising_response_time_without_throughput_lowers_alpha() {
        let mut bias = AgeBias::new(0.5, true);
        // The first run is only remembered.
        bias.end_run(1.0, 10.0);
        // rt doubles, tp unchanged: rt' = 1.2 (ratio 1.2), tp' = 10 (ratio 1): α − 0.2.
        let alpha = bias.end_run(2.0, 10.0);
        assert!((alpha - 0.3).abs() < 1e-12, "{alpha}");
    }

    #[test]
    fn falling_throughput_without_better_response_raises_alpha() {
        let mut bias = AgeBias::new(0.5, true);
        bias.end_run(1.0, 10.0);
        // rt 0.9 (rt' 0.98, ratio 0.98), tp 5 (tp' 9, ratio 0.9): α + 0.08.
        let alpha = bias.end_run(0.9, 5.0);
        assert!((alpha - 0.58).abs() < 1e-12, "{alpha}");
    }

    #[test]
    fn alpha_stays_within_zero_and_one() {
        let mut bias = AgeBias::new(0.1, true);
        bias.end_run(1.0, 10.0);
        assert_eq!(bias.end_run(100.0, 10.0), 0.0); // the step is capped at α itself
        let mut bias = AgeBias::new(0.95, true);
        bias.end_run(1.0, 100.0);
        assert!((bias.end_run(0.99, 0.01) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn a_still_alpha_is_nudged_to_explore_after_two_runs() {
        let mut bias = AgeBias::new(0.5, true);
        let steady = [(1.0, 10.0); 4];
        let seen: Vec<f64> = steady
            .iter()
            .map(|&(rt, tp)| bias.end_run(rt, tp))
            .collect();
        // Run 1 remembered, runs 2 and 3 unchanged, then the nudge.
        assert_eq!(seen[..2], [0.5, 0.5]);
        assert!(
            (seen[2] - 0.4).abs() < 1e-12 || (seen[2] - 0.6).abs() < 1e-12,
            "{seen:?}"
        );
    }

    #[test]
    fn a_fixed_bias_never_moves() {
        let mut bias = AgeBias::new(0.7, false);
        for (rt, tp) in [(1.0, 1.0), (5.0, 0.1), (0.1, 50.0), (1.0, 1.0), (1.0, 1.0)] {
            assert_eq!(bias.end_run(rt, tp), 0.7);
        }
    }
}
