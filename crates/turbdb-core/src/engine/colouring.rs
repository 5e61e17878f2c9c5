//! Colours of cells: two cells a stencil could both touch never share a colour, so the cells
//! of one colour can add into the result at the same time.

use crate::storage::axis::Axis;

/// How cells are coloured so that no two cells of one colour serve the same point: along
/// each axis, cells closer than the most cells one stencil spans differ in colour.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Colouring {
    /// Colours along each axis.
    per_axis: [usize; 3],
}

impl Colouring {
    pub(crate) fn new(axes: &[Axis; 3], side: [usize; 3], width: usize) -> Self {
        let per_axis = [0, 1, 2].map(|a| {
            let cells = axes[a].n.div_ceil(side[a]);
            // A stencil that wraps past a short last cell can reach one cell further.
            let short_last = axes[a].periodic && !axes[a].n.is_multiple_of(side[a]);
            let span = ((width - 1).div_ceil(side[a]) + 1 + usize::from(short_last)).min(cells);
            // A periodic axis whose cell count the span does not divide would give the last
            // and the first cell (neighbours across the wrap) one colour: every cell its own.
            if cells <= span || (axes[a].periodic && !cells.is_multiple_of(span)) {
                cells
            } else {
                span
            }
        });
        Self { per_axis }
    }

    pub(crate) fn colours(&self) -> usize {
        self.per_axis.iter().product()
    }

    pub(crate) fn colour(&self, cell: [usize; 3]) -> usize {
        let [kx, ky, kz] = self.per_axis;
        ((cell[2] % kz) * ky + cell[1] % ky) * kx + cell[0] % kx
    }
}
