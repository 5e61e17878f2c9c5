//! Which cell, and which atom of it, a point lies in.

use crate::storage::axis::Axis;

/// The cells of a grid: aligned boxes of `side` nodes, numbered x fastest.
pub(crate) struct CellFinder<'a> {
    pub(crate) axes: &'a [Axis; 3],
    /// Nodes along each side of a cell.
    pub(crate) side: [usize; 3],
    /// log2 of the atom's and the cells' sides (all powers of two): shifts, not
    /// divisions, in the per-point loops.
    pub(crate) atom_shift: u32,
    pub(crate) side_shift: [u32; 3],
    pub(crate) cells_per_axis: [usize; 3],
}

impl<'a> CellFinder<'a> {
    pub(crate) fn new(axes: &'a [Axis; 3], atom: usize, cell_atoms: [usize; 3]) -> Self {
        let side = cell_atoms.map(|c| c * atom);
        Self {
            axes,
            side,
            atom_shift: atom.trailing_zeros(),
            side_shift: side.map(|s| s.trailing_zeros()),
            cells_per_axis: [0, 1, 2].map(|a| axes[a].n.div_ceil(side[a])),
        }
    }

    pub(crate) fn total_cells(&self) -> usize {
        self.cells_per_axis.iter().product()
    }

    /// The coordinates of the cell numbered `cell`.
    pub(crate) fn coords(&self, cell: usize) -> [usize; 3] {
        let [cx, cy, _] = self.cells_per_axis;
        [cell % cx, cell / cx % cy, cell / (cx * cy)]
    }
}
