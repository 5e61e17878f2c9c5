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
    let tolerance = range_tolerance(times);
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
            // Ties to the later step, as giverny's `floor(t/Δt + 0.5)` and the spatial
            // `none` (halves up).
            let nearest = if n + 1 < nt && (times[n + 1] - t) <= (t - times[n]) {
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

/// How far past the first or last stored time a query time is taken as that time.
/// Relative to the times' own size: 1e-9 of at least 1 let time 1.3e-9 through on times
/// 0 … 3e-10 (seconds). And up to one float32 step of the end itself, so that a stored time
/// read back as float32 (HDF5 files, JHTDB's time arrays) is that time (0.72f32 is
/// 0.7200000286), but never more than a thousandth of the step at that end.
pub fn range_tolerance(times: &[f64]) -> f64 {
    let (first, last) = (times[0], times[times.len() - 1]);
    let scale = (last - first).abs().max(first.abs()).max(last.abs());
    let end_step = match times.len() {
        1 => f64::INFINITY,
        n => (times[1] - first).min(times[n - 1] - times[n - 2]),
    };
    let float32 = f32::EPSILON as f64 * first.abs().max(last.abs());
    (1e-9 * scale).max(float32.min(1e-3 * end_step))
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
/// apart). At the first or last stored step, the one-sided three-point difference over it
/// and the two steps next to it (exact for quadratics too: the secant of the end interval
/// put 1 + 2t − 3t² 0.39 off there); the secant where only two steps are stored.
fn slope(times: &[f64], m: usize, n: usize) -> [(usize, f64); 3] {
    let nt = times.len();
    if m > 0 && m + 1 < nt {
        let (before, after) = (times[m] - times[m - 1], times[m + 1] - times[m]);
        let span = before + after;
        [
            (m - 1, -after / (before * span)),
            (m, (after - before) / (before * after)),
            (m + 1, before / (after * span)),
        ]
    } else if nt >= 3 && m == 0 {
        let (h1, h2) = (times[1] - times[0], times[2] - times[1]);
        let span = h1 + h2;
        [
            (0, -(h1 + span) / (h1 * span)),
            (1, span / (h1 * h2)),
            (2, -h1 / (h2 * span)),
        ]
    } else if nt >= 3 {
        let (h1, h2) = (times[m - 1] - times[m - 2], times[m] - times[m - 1]);
        let span = h1 + h2;
        [
            (m - 2, h2 / (h1 * span)),
            (m - 1, -span / (h1 * h2)),
            (m, (h2 + span) / (h2 * span)),
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
    fn pchip_reproduces_quadratics_in_the_end_intervals_too() {
        // The probe's field 1 + 2t − 3t²: the end intervals' secant slopes put it 0.39 off.
        let f = |t: f64| 1.0 + 2.0 * t - 3.0 * t * t;
        for times in [
            &[0.0, 0.3, 1.0][..],
            &[0.0, 0.1, 0.35, 0.5],
            &[1.0, 1.5, 2.0, 2.5, 3.0],
        ] {
            let (first, last) = (times[0], times[times.len() - 1]);
            for k in 0..=40 {
                let t = first + (last - first) * k as f64 / 40.0;
                assert!(
                    (eval(times, t, f) - f(t)).abs() < 1e-12,
                    "times {times:?}, t = {t}: {} against {}",
                    eval(times, t, f),
                    f(t)
                );
            }
        }
        // Two stored steps: the line through them.
        let two = [0.0, 1.0];
        let line = |t: f64| 2.0 - 3.0 * t;
        assert!((eval(&two, 0.3, line) - line(0.3)).abs() < 1e-12);
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

    #[test]
    fn an_exact_tie_takes_the_later_step_as_giverny_does() {
        // giverny: floor(t/Δt + 0.5); binary-exact midpoints are common (0.25 of 0.5 steps).
        let times = [2.0, 2.5, 3.0, 3.5, 4.0];
        assert_eq!(
            time_weights(&times, 2.25, Temporal::None).unwrap(),
            vec![(1, 1.0)]
        );
        assert_eq!(
            time_weights(&times, 3.75, Temporal::None).unwrap(),
            vec![(4, 1.0)]
        );
        assert_eq!(
            time_weights(&times, 3.7499, Temporal::None).unwrap(),
            vec![(3, 1.0)]
        );
    }

    #[test]
    fn a_stored_time_rounded_to_float32_is_that_time() {
        let times = [0.0, 0.24, 0.48, 0.72];
        let last = 0.72f32 as f64; // 0.7200000286…
        assert_eq!(
            time_weights(&times, last, Temporal::None).unwrap(),
            vec![(3, 1.0)]
        );
        assert_eq!(
            time_weights(&times, last, Temporal::Pchip).unwrap(),
            vec![(3, 1.0)]
        );
        assert!(time_weights(&times, 0.7201, Temporal::None).is_err());
        // Never more than a thousandth of the end step: steps 1e-4 apart at t = 1e6 are
        // finer than float32 there, and 0.01 past the end is 100 steps past it.
        let late: Vec<f64> = (0..4).map(|i| 1e6 + 1e-4 * i as f64).collect();
        assert!(time_weights(&late, late[3] + 1e-2, Temporal::None).is_err());
        assert!(time_weights(&late, late[3] + 1e-8, Temporal::None).is_ok());
    }
}
