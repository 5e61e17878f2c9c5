//! Which cells, and which of their atoms, the stencil of a point touches.

use crate::interp::method::MAX_WIDTH;
use crate::interp::stencil::Kernel;
use crate::storage::axis::Axis;

/// Finds the cells a point's stencil touches, and which of their atoms.
pub(crate) struct CellFinder<'a> {
    pub(crate) kernel: &'a Kernel,
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
    pub(crate) fn new(
        kernel: &'a Kernel,
        axes: &'a [Axis; 3],
        atom: usize,
        cell_atoms: [usize; 3],
    ) -> Self {
        let side = cell_atoms.map(|c| c * atom);
        Self {
            kernel,
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

    /// Calls `f(linear cell number, x, y and z masks of the atoms)` for every cell the
    /// stencil of grid position `s` touches.
    #[inline(always)]
    pub(crate) fn visit(&self, s: &[f64; 3], mut f: impl FnMut(usize, u8, u8, u8)) {
        // Filled in place: a returned span was copied out with wide loads over its byte
        // stores, a store-forwarding stall per axis that took half of the grouping's time.
        let [mut x, mut y, mut z] = [Span::EMPTY; 3];
        self.along(0, s[0], &mut x);
        self.along(1, s[1], &mut y);
        self.along(2, s[2], &mut z);
        for (&cz, &mz) in z.cells().zip(z.masks()) {
            for (&cy, &my) in y.cells().zip(y.masks()) {
                let row = (cz * self.cells_per_axis[1] + cy) * self.cells_per_axis[0];
                for (&cx, &mx) in x.cells().zip(x.masks()) {
                    f(row + cx, mx, my, mz);
                }
            }
        }
    }

    /// Adds to the empty `span` the cells along `axis` that hold the stencil of position
    /// `s`, each with the mask of its atoms the stencil's nodes fall in.
    #[inline(always)]
    fn along(&self, axis: usize, s: f64, span: &mut Span) {
        let n = self.axes[axis].n;
        let first = self.kernel.first_node(s, &self.axes[axis]);
        let (side, width) = (self.side[axis], self.kernel.width());
        let (cs, ats) = (self.side_shift[axis], self.atom_shift);
        let atoms =
            |lo: usize, hi: usize| ((1u16 << ((hi >> ats) + 1)) - (1u16 << (lo >> ats))) as u8;
        let last = first + width - 1;
        if last < n && width <= side {
            // The usual case: no wrap, one cell or two neighbours.
            let (c0, c1) = (first >> cs, last >> cs);
            let (lo, hi) = (first & (side - 1), last & (side - 1));
            if c0 == c1 {
                span.push(c0, atoms(lo, hi));
            } else {
                span.push(c0, atoms(lo, side - 1));
                span.push(c1, atoms(0, hi));
            }
            return;
        }
        let before_wrap = width.min(n - first);
        for (start, end) in [(first, first + before_wrap), (0, width - before_wrap)] {
            if start == end {
                continue;
            }
            for cell in start >> cs..=(end - 1) >> cs {
                let lo = start.max(cell * side) - cell * side;
                let hi = end.min((cell + 1) * side) - cell * side - 1;
                // Only a stencil that wraps onto its own cells meets a cell twice.
                match span.cells().position(|&c| c == cell) {
                    Some(i) => span.mask[i] |= atoms(lo, hi),
                    None => span.push(cell, atoms(lo, hi)),
                }
            }
        }
    }
}

/// The cells a stencil touches along one axis, with the masks of their atoms it covers.
#[derive(Clone, Copy)]
struct Span {
    cell: [usize; MAX_WIDTH],
    mask: [u8; MAX_WIDTH],
    count: usize,
}

impl Span {
    const EMPTY: Span = Span {
        cell: [0; MAX_WIDTH],
        mask: [0; MAX_WIDTH],
        count: 0,
    };

    #[inline]
    fn push(&mut self, cell: usize, mask: u8) {
        self.cell[self.count] = cell;
        self.mask[self.count] = mask;
        self.count += 1;
    }

    fn cells(&self) -> std::slice::Iter<'_, usize> {
        self.cell[..self.count].iter()
    }

    fn masks(&self) -> std::slice::Iter<'_, u8> {
        self.mask[..self.count].iter()
    }
}
