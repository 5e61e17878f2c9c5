//! One point's stencil gathered out of the atoms it spans into a small dense block, so the
//! kernel sums it in one contribution instead of one per atom.
//!
//! A lag8 stencil spans about 6.5 atoms of side 8. Summed atom by atom (the partial sums of
//! the batch kernel) every piece pays the kernel's fixed cost — its runs, its row set-up,
//! the x weights folded per piece — for a few rows each. When a batch holds every atom of a
//! point (a query served whole from the cache, or a batch that happens to hold them all)
//! the engine copies the stencil's rows into a `width³` block instead and sums that once,
//! as the streaming executor does with its cell blocks.
//!
//! The atoms of a large query are far bigger than the CPU's caches and a stencil's rows are
//! scattered over them, so the copy would wait on memory row after row; the rows of the
//! next few points are prefetched while one point is gathered ([`Stencil::prefetch`]).

use crate::engine::accumulate::{Block, Runs, MAX_ROW, PADDING};
use crate::engine::atom_rows::{AtomRows, AxisRows};
use crate::engine::cache::AtomData;
use crate::engine::short_copy::copy_exact;
use crate::interp::method::MAX_WIDTH;
use crate::interp::stencil::AxisWeights;

/// Most atoms a stencil spans along one axis that the gather handles (two, or three where
/// the grid ends in a short atom and the stencil wraps); wider spans are summed atom by atom.
pub(crate) const MAX_SPANS: usize = 3;

/// A stencil's nodes along one axis, split by the atom they lie in.
#[derive(Clone, Copy, Default)]
struct Spans {
    /// Per span: the atom's coordinate, the span's first stencil node, its first node
    /// inside the atom, and its length.
    spans: [(u32, u8, u8, u8); MAX_SPANS],
    count: u8,
}

impl Spans {
    /// The `width` nodes from `wrapped` (wrapping past `n`) in atoms of side `atom`; `None`
    /// if they span more than [`MAX_SPANS`] atoms.
    #[inline(always)]
    fn new(wrapped: usize, width: usize, n: usize, atom: usize) -> Option<Self> {
        let mut s = Spans::default();
        let (mut k, mut node) = (0, wrapped);
        while k < width {
            if s.count as usize == MAX_SPANS {
                return None;
            }
            if node >= n {
                node -= n;
            }
            let coord = node / atom;
            let local = node - coord * atom;
            let len = ((coord + 1) * atom).min(n).min(node + width - k) - node;
            s.spans[s.count as usize] = (coord as u32, k as u8, local as u8, len as u8);
            s.count += 1;
            k += len;
            node += len;
        }
        Some(s)
    }

    /// The spans in the atom at `coord`: none if the stencil does not reach it, two if it
    /// wraps back into the atom it started in (an axis of fewer than two atoms' nodes more
    /// than the stencil: 8 nodes in one atom, or 12 in atoms of 8).
    #[inline(always)]
    fn all(&self, coord: u32) -> impl Iterator<Item = usize> + '_ {
        self.spans[..self.count as usize]
            .iter()
            .enumerate()
            .filter(move |(_, s)| s.0 == coord)
            .map(|(i, _)| i)
    }

    fn count(&self) -> usize {
        self.count as usize
    }
}

/// One point's stencil: its weights, and where its nodes lie in the batch's atoms.
#[derive(Clone, Copy, Default)]
pub(crate) struct Stencil {
    /// The weights per axis.
    pub(crate) w: [AxisWeights; 3],
    spans: [Spans; 3],
    /// Atom slot per `(z span, y span, x span)`, [`ABSENT`] where the batch does not hold
    /// that atom; meaningful only if `present` > 0.
    slots: [u32; MAX_SPANS * MAX_SPANS * MAX_SPANS],
    /// Atoms of the stencil at hand (0 where it spans too many atoms to be gathered).
    present: u8,
    /// Whether every atom the stencil spans is at hand.
    complete: bool,
}

/// The slot of an atom of the stencil that is not at hand.
const ABSENT: u32 = u32::MAX;

impl Stencil {
    /// Places the stencil of weights `self.w` (set by the caller) among the point's atoms
    /// `atoms`, `(grid coordinates, slot in the batch or None)`, on a grid of `n` nodes per
    /// axis in atoms of side `atom`.
    #[inline(always)]
    pub(crate) fn place(
        &mut self,
        width: usize,
        n: [usize; 3],
        atom: usize,
        atoms: impl Iterator<Item = ([u32; 3], Option<u32>)>,
    ) {
        self.complete = false;
        self.present = 0;
        for k in 0..3 {
            match Spans::new(self.w[k].wrapped, width, n[k], atom) {
                Some(spans) => self.spans[k] = spans,
                None => return,
            }
        }
        let [sx, sy, sz] = &self.spans;
        let cells = sx.count() * sy.count() * sz.count();
        self.slots[..cells].fill(ABSENT);
        let (mut present, mut set) = (0, 0);
        for (coords, slot) in atoms {
            let Some(slot) = slot else { continue };
            // Every cell of the atom: a stencil that wraps back into its first atom meets it
            // twice along that axis, and each part must be summed.
            let before = set;
            for iz in sz.all(coords[2]) {
                for iy in sy.all(coords[1]) {
                    for ix in sx.all(coords[0]) {
                        self.slots[(iz * sy.count() + iy) * sx.count() + ix] = slot;
                        set += 1;
                    }
                }
            }
            present += usize::from(set > before);
        }
        // A point's atoms are distinct and each cell is one atom's, so as many cells set as
        // there are means every cell is set.
        self.present = present as u8;
        self.complete = set == cells;
    }

    /// The index in `slots` of the atom of x, y and z spans `ix`, `iy`, `iz`.
    #[inline(always)]
    fn cell(&self, ix: usize, iy: usize, iz: usize) -> usize {
        let [sx, sy, _] = &self.spans;
        (iz * sy.count() + iy) * sx.count() + ix
    }

    /// How many of the stencil's atoms are at hand (0 where it cannot be gathered).
    pub(crate) fn present(&self) -> usize {
        self.present as usize
    }

    /// Asks the CPU to start loading the cache lines of the atom rows the gather will copy:
    /// only the stencil's part of each row.
    #[inline(always)]
    pub(crate) fn prefetch(&self, atom: usize, ncomp: usize, data: &[AtomData]) {
        if !self.complete {
            return;
        }
        let [sx, sy, sz] = &self.spans;
        let (row, plane) = (atom * ncomp, atom * atom * ncomp);
        for iz in 0..sz.count() {
            let (_, _, lz, zlen) = sz.spans[iz];
            for iy in 0..sy.count() {
                let (_, _, ly, ylen) = sy.spans[iy];
                for ix in 0..sx.count() {
                    let (_, _, lx, xlen) = sx.spans[ix];
                    let slot = self.slots[self.cell(ix, iy, iz)];
                    let values = data[slot as usize].as_ptr();
                    let len = xlen as usize * ncomp * 4;
                    for z in lz as usize..(lz + zlen) as usize {
                        for y in ly as usize..(ly + ylen) as usize {
                            let at = z * plane + y * row + lx as usize * ncomp;
                            let start = values.wrapping_add(at) as usize;
                            let mut line = start & !(LINE - 1);
                            while line < start + len {
                                prefetch(line as *const f32);
                                line += LINE;
                            }
                        }
                    }
                }
            }
        }
    }

    /// The stencil's rows where they lie in its atoms `data` (of side `atom`, `ncomp`
    /// components), to be summed without a copy; `None` unless every atom is at hand and
    /// its x nodes span at most two atoms.
    #[inline(always)]
    pub(crate) fn atom_rows<'d>(
        &self,
        width: usize,
        atom: usize,
        ncomp: usize,
        data: &'d [AtomData],
    ) -> Option<AtomRows<'d>> {
        let [sx, sy, sz] = &self.spans;
        if !self.complete || sx.count() > 2 {
            return None;
        }
        let (row, plane) = (atom * ncomp, atom * atom * ncomp);
        let along = |spans: &Spans, stride: usize| {
            let mut rows = AxisRows {
                span: [0; MAX_WIDTH],
                offset: [0; MAX_WIDTH],
            };
            for (i, &(_, first, local, len)) in spans.spans[..spans.count()].iter().enumerate() {
                for j in 0..len as usize {
                    rows.span[first as usize + j] = i as u8;
                    rows.offset[first as usize + j] = ((local as usize + j) * stride) as u32;
                }
            }
            rows
        };
        let (_, _, x_local, x_len) = sx.spans[0];
        Some(AtomRows::new(
            |ix, iy, iz| &data[self.slots[self.cell(ix, iy, iz)] as usize][..],
            atom * atom * atom * ncomp,
            [sx.count(), sy.count(), sz.count()],
            x_local as usize * ncomp,
            x_len as usize * ncomp,
            along(sy, row),
            along(sz, plane),
            width,
        ))
    }
}

/// Reusable space for one point's gathered stencil.
pub(crate) struct Gathered {
    values: Vec<f32>,
    /// The block's runs: the whole stencil along each axis.
    runs: [Runs; 3],
    width: usize,
    ncomp: usize,
}

impl Gathered {
    /// Whether stencils `width` nodes wide of `ncomp` components have rows the kernel
    /// takes whole (at most [`MAX_ROW`] values).
    pub(crate) fn supports(width: usize, ncomp: usize) -> bool {
        width > 0 && width * ncomp <= MAX_ROW && width <= MAX_WIDTH
    }

    /// Space for stencils `width` nodes wide of `ncomp` components; `None` where a row is
    /// longer than the kernel's fixed-size rows (more than [`MAX_ROW`] values), so the
    /// caller sums atom by atom.
    pub(crate) fn new(width: usize, ncomp: usize) -> Option<Self> {
        if !Self::supports(width, ncomp) {
            return None;
        }
        Some(Self {
            values: vec![0.0; width * width * width * ncomp + PADDING],
            runs: [0; 3].map(|_| Runs::new(0, width, width, 0, width)),
            width,
            ncomp,
        })
    }

    /// Copies a stencil with atoms at hand (see [`Stencil::present`]) out of its atoms
    /// `data`, of side `atom`, into the block, zeros where its atoms are not at hand;
    /// returns the block and its runs. Summed, the block adds the part of the point's sum
    /// in the atoms at hand, as their pieces summed one by one would.
    ///
    /// Each row is copied exactly: reading past a span would load cache lines of the atom
    /// the stencil does not use, and the gather is bound by those loads.
    #[inline(always)]
    pub(crate) fn gather<'s>(
        &'s mut self,
        stencil: &Stencil,
        atom: usize,
        data: &[AtomData],
    ) -> (Block<'s, f32>, &'s [Runs; 3]) {
        debug_assert!(stencil.present > 0);
        let (width, nc) = (self.width, self.ncomp);
        let [sx, sy, sz] = &stencil.spans;
        let (row_out, plane_out) = (width * nc, width * width * nc);
        let (row_in, plane_in) = (atom * nc, atom * atom * nc);
        assert!(self.values.len() >= width * plane_out);
        if !stencil.complete {
            self.values[..width * plane_out].fill(0.0);
        }
        for (ix, &(_, kx, lx, xlen)) in sx.spans[..sx.count()].iter().enumerate() {
            let len = xlen as usize * nc;
            for (iz, &(_, kz, lz, zlen)) in sz.spans[..sz.count()].iter().enumerate() {
                for (iy, &(_, ky, ly, ylen)) in sy.spans[..sy.count()].iter().enumerate() {
                    let slot = stencil.slots[stencil.cell(ix, iy, iz)];
                    if slot == ABSENT {
                        continue;
                    }
                    let values = &data[slot as usize];
                    let first = lz as usize * plane_in + ly as usize * row_in + lx as usize * nc;
                    let last =
                        first + (zlen as usize - 1) * plane_in + (ylen as usize - 1) * row_in;
                    assert!(last + len <= values.len(), "a span lies inside its atom");
                    let out = kz as usize * plane_out + ky as usize * row_out + kx as usize * nc;
                    for z in 0..zlen as usize {
                        for y in 0..ylen as usize {
                            // SAFETY: the source row's `len` values are in the atom
                            // (checked above); the block holds `width` planes of
                            // `plane_out` values, and a span's `len` values end at or
                            // before the end of its row.
                            unsafe {
                                copy_exact(
                                    values.as_ptr().add(first + z * plane_in + y * row_in),
                                    self.values
                                        .as_mut_ptr()
                                        .add(out + z * plane_out + y * row_out),
                                    len,
                                );
                            }
                        }
                    }
                }
            }
        }
        let block = Block::dense(&self.values[..], [width, width]);
        (block, &self.runs)
    }
}

/// Bytes in a cache line.
const LINE: usize = 64;

/// Starts loading the cache line at `p` into the core's level-2 cache (a hint; nothing on
/// paths without one). Not level 1: the rows of the points ahead are more than it holds.
#[inline(always)]
fn prefetch(p: *const f32) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
