//! One axis of the grid: its nodes, where they sit, and whether it wraps around. Physical
//! positions become grid units here, for stencils and for cutouts alike.

use crate::error::{bound, number, Error, Result};

/// Grid spacings from an axis's first node beyond which a periodic position is refused: a
/// float64 that large keeps its place in a cell only to 2⁻²¹ of a spacing (5 × 10⁻⁷), and
/// past 2⁵² not at all (1e20 and 1e308 fell on the same node).
pub const MAX_WRAP: f64 = (1u64 << 31) as f64;

/// One axis of the grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Axis {
    /// Number of nodes.
    pub n: usize,
    /// Position of node 0.
    pub origin: f64,
    /// Distance between nodes.
    pub spacing: f64,
    /// Whether the axis wraps around.
    pub periodic: bool,
}

impl Axis {
    /// `n` nodes at 0, 1, …, n − 1: positions are grid units (tests, profiling examples).
    pub fn unit(n: usize, periodic: bool) -> Self {
        Self {
            n,
            origin: 0.0,
            spacing: 1.0,
            periodic,
        }
    }

    /// The position in grid units (node i at i); wrapped into `[0, n)` on a periodic axis,
    /// refused outside `[0, n − 1]` on a non-periodic one, and on a periodic one beyond
    /// [`MAX_WRAP`] spacings, where it no longer says where in its cell the point is.
    #[inline]
    pub fn grid_position(&self, x: f64, name: char) -> Result<f64> {
        let s = (x - self.origin) / self.spacing;
        if self.periodic {
            let n = self.n as f64;
            if (0.0..n).contains(&s) {
                return Ok(s);
            }
            if s.is_nan() || s.abs() >= MAX_WRAP {
                return Err(Error::OutOfDomain(format!(
                    "{name} = {} is too far from the periodic {name} axis [{}, {}) to wrap onto \
                     it: more than 2^{} grid spacings away, where a float64 no longer says \
                     where in its cell a point is (has a coordinate run away?)",
                    number(x),
                    bound(self.origin),
                    bound(self.origin + n * self.spacing),
                    MAX_WRAP.log2()
                )));
            }
            let wrapped = s - n * (s / n).floor();
            return Ok(if (0.0..n).contains(&wrapped) {
                wrapped
            } else {
                0.0
            });
        }
        let last = (self.n - 1) as f64;
        let tolerance = 1e-9 * last.max(1.0);
        if !(s >= -tolerance && s <= last + tolerance) {
            return Err(Error::OutOfDomain(format!(
                "{name} = {} is outside the domain [{}, {}] of the non-periodic {name} axis",
                number(x),
                bound(self.origin),
                bound(self.origin + last * self.spacing)
            )));
        }
        Ok(s.clamp(0.0, last))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn periodic() -> Axis {
        Axis {
            n: 64,
            origin: 0.0,
            spacing: std::f64::consts::TAU / 64.0,
            periodic: true,
        }
    }

    #[test]
    fn a_periodic_position_wraps_onto_the_axis() {
        let axis = periodic();
        let s = axis
            .grid_position(1.0 + 1000.0 * std::f64::consts::TAU, 'x')
            .unwrap();
        assert!((s - 1.0 / axis.spacing).abs() < 1e-9, "{s}");
        let s = axis.grid_position(-0.5, 'x').unwrap();
        assert!((s - (64.0 - 0.5 / axis.spacing)).abs() < 1e-12, "{s}");
    }

    #[test]
    fn a_runaway_periodic_position_is_refused_not_wrapped() {
        let axis = periodic();
        // Just inside the limit: still wrapped.
        let near = (MAX_WRAP - 64.0) * axis.spacing;
        assert!(axis.grid_position(near, 'y').is_ok());
        assert!(axis.grid_position(-near, 'y').is_ok());
        for x in [MAX_WRAP * axis.spacing, 1e20, -1e15, 1e308] {
            let Err(Error::OutOfDomain(m)) = axis.grid_position(x, 'y') else {
                panic!("{x} was wrapped");
            };
            assert!(
                m.starts_with(&format!("y = {} is too far", number(x))),
                "{m}"
            );
        }
        assert!(axis
            .grid_position(1e308, 'y')
            .unwrap_err()
            .to_string()
            .starts_with("y = 1e308 is too far from the periodic y axis [0, 6.28318530718)"));
    }
}
