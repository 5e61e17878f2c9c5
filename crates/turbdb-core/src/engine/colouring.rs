//! Colours of cells: two cells a stencil could both touch never share a colour, so the cells
//! of one colour can add into the result at the same time.

use crate::storage::axis::Axis;

/// How cells are coloured so that no two cells of one colour serve the same point: along
/// each axis, cells closer than the most cells one stencil spans differ in colour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Colouring {
    /// Colours along each axis.
    per_axis: [usize; 3],
    /// The most cells one stencil spans along each axis.
    span: [usize; 3],
    /// Cells along each axis.
    cells: [usize; 3],
    /// Whether each axis wraps.
    periodic: [bool; 3],
}

impl Colouring {
    pub(crate) fn new(axes: &[Axis; 3], side: [usize; 3], width: usize) -> Self {
        let cells = [0, 1, 2].map(|a| axes[a].n.div_ceil(side[a]));
        let span = [0, 1, 2].map(|a| {
            // A stencil that wraps past a short last cell can reach one cell further.
            let short_last = axes[a].periodic && !axes[a].n.is_multiple_of(side[a]);
            ((width - 1).div_ceil(side[a]) + 1 + usize::from(short_last)).min(cells[a])
        });
        let per_axis = [0, 1, 2].map(|a| {
            // A periodic axis whose cell count the span does not divide would give the last
            // and the first cell (neighbours across the wrap) one colour: every cell its own.
            if cells[a] <= span[a] || (axes[a].periodic && !cells[a].is_multiple_of(span[a])) {
                cells[a]
            } else {
                span[a]
            }
        });
        Self {
            per_axis,
            span,
            cells,
            periodic: axes.map(|a| a.periodic),
        }
    }

    /// The cells along `axis` that one stencil may touch together with cell `c` (`c`
    /// included): those fewer than the span away, across the wrap on a periodic axis.
    pub(crate) fn neighbours_along(&self, axis: usize, c: usize) -> Vec<usize> {
        let (reach, n) = (self.span[axis] as isize - 1, self.cells[axis] as isize);
        let mut near: Vec<usize> = (-reach..=reach)
            .map(|d| c as isize + d)
            .filter_map(|k| match self.periodic[axis] {
                true => Some(k.rem_euclid(n) as usize),
                false => (0..n).contains(&k).then_some(k as usize),
            })
            .collect();
        near.sort_unstable();
        near.dedup();
        near
    }

    pub(crate) fn colours(&self) -> usize {
        self.per_axis.iter().product()
    }

    pub(crate) fn colour(&self, cell: [usize; 3]) -> usize {
        let [kx, ky, kz] = self.per_axis;
        ((cell[2] % kz) * ky + cell[1] % ky) * kx + cell[0] % kx
    }
}
