//! One axis of the grid: its nodes, where they sit, and whether it wraps around. Physical
//! positions become grid units here, for stencils and for cutouts alike.

use crate::error::{Error, Result};

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
    /// refused outside `[0, n − 1]` on a non-periodic one.
    #[inline]
    pub fn grid_position(&self, x: f64, name: char) -> Result<f64> {
        let s = (x - self.origin) / self.spacing;
        if self.periodic {
            let n = self.n as f64;
            if (0.0..n).contains(&s) {
                return Ok(s);
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
                "{name} = {x} is outside the domain [{}, {}] of the non-periodic {name} axis",
                self.origin,
                self.origin + last * self.spacing
            )));
        }
        Ok(s.clamp(0.0, last))
    }
}
