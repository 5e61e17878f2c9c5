//! Where each point's stencil reaches: its first node along each axis and the stencil's
//! width, so that a mediator can send a point to every partition its stencil touches.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::interp::method::{Method, Operator};
use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;

/// The first stencil node of every point along x, y and z (wrapped into `0..n` on periodic
/// axes, shifted inside on bounded ones), and the number of nodes a stencil spans along an
/// axis. A point's stencil covers nodes `first + k` (wrapped), `k < width`, on each axis.
/// Checks the points and the method as a query would, with the same errors.
pub fn stencil_reach(
    points: &[[f64; 3]],
    method: Method,
    operator: Operator,
    axes: &[Axis; 3],
) -> Result<(Vec<[u32; 3]>, usize)> {
    method.check_supports(operator)?;
    let kernel = Kernel::new(method, operator.max_order())?;
    for (axis, name) in axes.iter().zip(['x', 'y', 'z']) {
        kernel.check_axis(axis, name)?;
    }
    let first = points
        .par_iter()
        .enumerate()
        .map(|(i, p)| {
            let mut node = [0u32; 3];
            for a in 0..3 {
                if !p[a].is_finite() {
                    return Err(Error::InvalidArgument(format!(
                        "point {i} is not finite: {p:?}"
                    )));
                }
                let s = axes[a]
                    .grid_position(p[a], ['x', 'y', 'z'][a])
                    .map_err(|e| match e {
                        Error::OutOfDomain(m) => Error::OutOfDomain(format!("point {i}: {m}")),
                        other => other,
                    })?;
                node[a] = kernel.first_node(s, &axes[a]) as u32;
            }
            Ok(node)
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((first, kernel.width()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lagrange_stencils_start_below_the_point_and_wrap() {
        let axes = [
            Axis::unit(16, true),
            Axis::unit(16, true),
            Axis::unit(16, false),
        ];
        let (first, width) = stencil_reach(
            &[[5.5, 0.5, 0.5]],
            Method::Lagrange(4),
            Operator::Field,
            &axes,
        )
        .unwrap();
        assert_eq!(width, 4);
        // x: floor 5 - 1 = 4; y: floor 0 - 1 wraps to 15; z (bounded): shifted in to 0.
        assert_eq!(first, vec![[4, 15, 0]]);
    }

    #[test]
    fn points_outside_a_bounded_axis_are_refused_by_number() {
        let axes = [
            Axis::unit(16, true),
            Axis::unit(16, true),
            Axis::unit(16, false),
        ];
        let err = stencil_reach(
            &[[1.0, 1.0, 1.0], [1.0, 1.0, 99.0]],
            Method::Lagrange(4),
            Operator::Field,
            &axes,
        )
        .unwrap_err();
        assert!(err.to_string().contains("point 1"), "{err}");
    }
}
