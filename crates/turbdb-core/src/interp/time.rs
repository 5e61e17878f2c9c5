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
    let tolerance = 1e-9 * (last - first).abs().max(1.0);
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
    // slope at t(n): centred over t(n−1), t(n+1); one-sided at the first stored step
    let (lo, hi) = if n > 0 { (n - 1, n + 1) } else { (n, n + 1) };
    let a = h10 * h / (times[hi] - times[lo]);
    weights.push((lo, -a));
    weights.push((hi, a));
    // slope at t(n+1): centred over t(n), t(n+2); one-sided at the last stored step
    let (lo, hi) = if n + 2 < nt { (n, n + 2) } else { (n, n + 1) };
    let b = h11 * h / (times[hi] - times[lo]);
    weights.push((lo, -b));
    weights.push((hi, b));
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
