//! Interpolation in time: which stored time steps a query time needs and with which
//! weights. `none` takes the nearest stored step; `pchip` is JHTDB's cubic Hermite through
//! t(n−1), t(n), t(n+1), t(n+2) with centred-difference slopes.

use crate::error::{number, Error, Result};
use crate::interp::names::{canonical, unknown, TEMPORAL_ALIASES, TEMPORAL_NAMES};

/// How values between stored times are obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporal {
    /// The nearest stored time step.
    None,
    /// Piecewise cubic Hermite with centred-difference slopes (4 stored steps).
    Pchip,
}

impl Temporal {
    /// Parses `none` or `pchip` or one of their aliases (case-insensitive).
    pub fn parse(name: &str) -> Result<Self> {
        match canonical(name, TEMPORAL_NAMES, TEMPORAL_ALIASES).unwrap_or("") {
            "none" => Ok(Temporal::None),
            "pchip" => Ok(Temporal::Pchip),
            _ => Err(unknown("temporal method", name, TEMPORAL_NAMES)),
        }
    }
}

/// The stored time indices and weights whose combination gives time `t`. Weights that are
/// exactly zero are dropped, so a query at a stored time reads one step.
pub fn time_weights(times: &[f64], t: f64, temporal: Temporal) -> Result<Vec<(usize, f64)>> {
    let nt = times.len();
    if nt == 0 {
        return Err(Error::Missing("the dataset has no stored times".into()));
    }
    let (first, last) = (times[0], times[nt - 1]);
    // Relative to the times' own size: 1e-9 of at least 1 let time 1.3e-9 through on times
    // 0 … 3e-10 (seconds), clamped onto the last step.
    let tolerance = 1e-9 * (last - first).abs().max(first.abs()).max(last.abs());
    if !t.is_finite() || t < first - tolerance || t > last + tolerance {
        return Err(Error::InvalidArgument(format!(
            "time {} is outside the stored range [{}, {}]",
            number(t),
            number(first),
            number(last)
        )));
    }
    let t = t.clamp(first, last);
    // n: the last stored time at or before t.
    let n = times.partition_point(|&s| s <= t).saturating_sub(1);
    let levels = match temporal {
        Temporal::None => {
            let nearest = if n + 1 < nt && (times[n + 1] - t) < (t - times[n]) {
                n + 1
            } else {
                n
            };
            vec![(nearest, 1.0)]
        }
        Temporal::Pchip => pchip(times, n, t),
    };
    Ok(levels.into_iter().filter(|&(_, w)| w != 0.0).collect())
}

fn pchip(times: &[f64], n: usize, t: f64) -> Vec<(usize, f64)> {
    let nt = times.len();
    if n + 1 >= nt {
        return vec![(n, 1.0)];
    }
    let h = times[n + 1] - times[n];
    let tau = (t - times[n]) / h;
    let (t2, t3) = (tau * tau, tau * tau * tau);
    let h00 = 2.0 * t3 - 3.0 * t2 + 1.0;
    let h10 = t3 - 2.0 * t2 + tau;
    let h01 = -2.0 * t3 + 3.0 * t2;
    let h11 = t3 - t2;
    let mut weights = vec![(n, h00), (n + 1, h01)];
    for (m, scale) in [(n, h10 * h), (n + 1, h11 * h)] {
        weights.extend(slope(times, m, n).map(|(i, w)| (i, scale * w)));
    }
    let mut merged: Vec<(usize, f64)> = Vec::new();
    for (i, w) in weights {
        match merged.iter_mut().find(|(j, _)| *j == i) {
            Some(entry) => entry.1 += w,
            None => merged.push((i, w)),
        }
    }
    merged.sort_by_key(|&(i, _)| i);
    merged
}

/// The weights of the stored steps whose sum is the slope at `t(m)`: the three-point
/// difference over `t(m−1), t(m), t(m+1)`, exact for quadratics also where the steps are
/// uneven (on even steps the centred difference `(f(m+1) − f(m−1))/(t(m+1) − t(m−1))`; on
/// uneven ones that is only first order: 14 % off for 3t² at t = 0.85 on steps 0.35 and 0.7
/// apart); one-sided over the interval `n` where `m` is the first or last stored step.
fn slope(times: &[f64], m: usize, n: usize) -> [(usize, f64); 3] {
    if m > 0 && m + 1 < times.len() {
        let (before, after) = (times[m] - times[m - 1], times[m + 1] - times[m]);
        let span = before + after;
        [
            (m - 1, -after / (before * span)),
            (m, (after - before) / (before * after)),
            (m + 1, before / (after * span)),
        ]
    } else {
        let h = times[n + 1] - times[n];
        [(n, -1.0 / h), (n + 1, 1.0 / h), (n, 0.0)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(times: &[f64], t: f64, f: impl Fn(f64) -> f64) -> f64 {
        time_weights(times, t, Temporal::Pchip)
            .unwrap()
            .iter()
            .map(|&(i, w)| w * f(times[i]))
            .sum()
    }

    #[test]
    fn pchip_reproduces_quadratics_in_the_interior_and_hits_stored_values() {
        let times: Vec<f64> = (0..10).map(|i| 0.5 + 0.1 * i as f64).collect();
        let f = |t: f64| 3.0 * t * t - t + 2.0;
        for &t in &[0.63, 0.75, 1.12] {
            assert!((eval(&times, t, f) - f(t)).abs() < 1e-12);
        }
        assert_eq!(time_weights(&times, 0.8, Temporal::Pchip).unwrap().len(), 1);
        assert!((eval(&times, 1.4, f) - f(1.4)).abs() < 1e-12);
    }

    #[test]
    fn pchip_reproduces_quadratics_on_uneven_steps_too() {
        // The probe's times: steps 0.1, 0.25, 0.15, 0.7, 0.1, 0.7 apart.
        let times = [0.0, 0.1, 0.35, 0.5, 1.2, 1.3, 2.0];
        let f = |t: f64| 3.0 * t * t - t + 2.0;
        for &t in &[0.2, 0.425, 0.85, 1.25] {
            assert!(
                (eval(&times, t, f) - f(t)).abs() < 1e-12,
                "t = {t}: {} against {}",
                eval(&times, t, f),
                f(t)
            );
        }
        // The weights sum to one (a constant is kept) and a stored time reads one step.
        for &t in &[0.05, 0.3, 0.85, 1.9] {
            let sum: f64 = time_weights(&times, t, Temporal::Pchip)
                .unwrap()
                .iter()
                .map(|w| w.1)
                .sum();
            assert!((sum - 1.0).abs() < 1e-12);
        }
        assert_eq!(
            time_weights(&times, 0.5, Temporal::Pchip).unwrap(),
            vec![(3, 1.0)]
        );
    }

    #[test]
    fn even_steps_keep_the_centred_difference_weights() {
        // τ = 0.3 on unit steps: the m1q4 weights of docs/methods.md §5.
        let times = [0.0, 1.0, 2.0, 3.0];
        let tau: f64 = 0.3;
        let want = [
            -tau * (1.0 - tau).powi(2) / 2.0,
            1.0 - 2.5 * tau * tau + 1.5 * tau.powi(3),
            tau / 2.0 + 2.0 * tau * tau - 1.5 * tau.powi(3),
            -tau * tau * (1.0 - tau) / 2.0,
        ];
        let got = time_weights(&times, 1.0 + tau, Temporal::Pchip).unwrap();
        assert_eq!(got.len(), 4);
        for ((i, w), want) in got.into_iter().zip(want) {
            assert!((w - want).abs() < 1e-15, "step {i}: {w} against {want}");
        }
    }

    #[test]
    fn times_far_outside_small_stored_times_are_refused() {
        // Times in seconds of a short run: 1.3e-9 is past the last, not within rounding.
        let times = [0.0, 1e-10, 2e-10, 3e-10];
        assert!(time_weights(&times, 1.3e-9, Temporal::None).is_err());
        assert!(time_weights(&times, -9e-10, Temporal::Pchip).is_err());
        assert!(time_weights(&times, 3e-10 * (1.0 + 1e-12), Temporal::None).is_ok());
        // Large times keep a tolerance of their own size.
        let late = [1000.0, 1000.5, 1001.0];
        assert!(time_weights(&late, 1001.0 + 1e-9, Temporal::None).is_ok());
    }

    #[test]
    fn nearest_picks_the_closest_step_and_ranges_are_checked() {
        let times = [0.0, 1.0, 2.0];
        assert_eq!(
            time_weights(&times, 1.4, Temporal::None).unwrap(),
            vec![(1, 1.0)]
        );
        assert_eq!(
            time_weights(&times, 1.6, Temporal::None).unwrap(),
            vec![(2, 1.0)]
        );
        assert!(time_weights(&times, 2.5, Temporal::None).is_err());
        assert!(time_weights(&times, f64::NAN, Temporal::None).is_err());
    }
}
