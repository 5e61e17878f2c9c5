//! The baselines of Kanov et al. that the benchmarks compare against: `direct` evaluates
//! each point on its own, in arrival order, reading every atom its stencil touches;
//! `sorted` does the same after sorting the points in Morton order.

use std::sync::atomic::Ordering;

use rayon::prelude::*;

use crate::engine::accumulate::{accumulate_on, Block, Runs, TermSet, PADDING};
use crate::engine::plan::Plan;
use crate::engine::stream::{StreamStats, TimeLevel};
use crate::error::Result;
use crate::interp::stencil::AxisWeights;
use crate::storage::morton;
use crate::storage::reader::AtomRequest;
use crate::storage::reader::AtomSource;

/// Points handed to one worker at a time.
const CHUNK: usize = 256;

/// Evaluates every point independently, in arrival order, or in Morton order if `sorted`.
pub fn execute_direct(
    plan: &Plan,
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    sorted: bool,
    stats: &StreamStats,
) -> Result<Vec<f64>> {
    let g = &plan.geometry;
    let terms = TermSet::new(plan.operator.terms(), plan.operator.slots());
    let out_len = g.ncomp * terms.slots();
    *stats.kernel.lock().expect("stats") = Some(plan.kernel_path());
    // The positions in the caller's order.
    let mut positions = vec![[0.0; 3]; plan.order.len()];
    for (&p, &s) in plan.order.iter().zip(plan.sorted.iter()) {
        positions[p as usize] = s;
    }
    let mut order: Vec<u32> = (0..positions.len() as u32).collect();
    if sorted {
        order.par_sort_by_cached_key(|&p| {
            let s = positions[p as usize];
            let atom = s.map(|v| (v.max(0.0) as usize / g.atom) as u32);
            morton::encode(atom[0], atom[1], atom[2])
        });
    }
    let chunks: Vec<Vec<f64>> = order
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut out = vec![0.0; chunk.len() * out_len];
            let mut atom_buffer = vec![0f32; g.atom_values() + PADDING];
            for (i, &p) in chunk.iter().enumerate() {
                evaluate_point(
                    plan,
                    positions[p as usize],
                    source,
                    levels,
                    &terms,
                    &mut atom_buffer,
                    &mut out[i * out_len..][..out_len],
                    stats,
                )?;
            }
            Ok(out)
        })
        .collect::<Result<_>>()?;
    let mut result = vec![0.0; positions.len() * out_len];
    for (chunk, values) in order.chunks(CHUNK).zip(chunks) {
        for (i, &p) in chunk.iter().enumerate() {
            result[p as usize * out_len..][..out_len]
                .copy_from_slice(&values[i * out_len..][..out_len]);
        }
    }
    Ok(result)
}

#[allow(clippy::too_many_arguments)]
fn evaluate_point(
    plan: &Plan,
    s: [f64; 3],
    source: &dyn AtomSource,
    levels: &[TimeLevel],
    terms: &TermSet,
    buffer: &mut [f32],
    out: &mut [f64],
    stats: &StreamStats,
) -> Result<()> {
    let g = &plan.geometry;
    let (a, per_shard, width) = (g.atom, g.atoms_per_side(), plan.kernel.width());
    let mut w = [AxisWeights::default(); 3];
    let mut atoms_along: [Vec<usize>; 3] = Default::default();
    for axis in 0..3 {
        plan.kernel.weights(s[axis], &plan.axes[axis], &mut w[axis]);
        let n = plan.axes[axis].n as i64;
        for k in 0..width as i64 {
            let atom = (w[axis].base + k).rem_euclid(n) as usize / a;
            if !atoms_along[axis].contains(&atom) {
                atoms_along[axis].push(atom);
            }
        }
    }
    let mut reads = 0;
    for level in levels {
        for &az in &atoms_along[2] {
            for &ay in &atoms_along[1] {
                for &ax in &atoms_along[0] {
                    let atom = [ax, ay, az];
                    let request = AtomRequest {
                        local: atom.map(|v| v % per_shard),
                        slot: 0,
                    };
                    source.read_atoms(level.t, atom.map(|v| v / per_shard), &[request], buffer)?;
                    reads += 1;
                    let runs = [
                        Runs::new(w[0].wrapped, width, plan.axes[0].n, atom[0] * a, a),
                        Runs::new(w[1].wrapped, width, plan.axes[1].n, atom[1] * a, a),
                        Runs::new(w[2].wrapped, width, plan.axes[2].n, atom[2] * a, a),
                    ];
                    accumulate_on(
                        plan.kernel_path(),
                        g.ncomp,
                        Block::dense(&*buffer, [a, a]),
                        &runs,
                        &w,
                        terms,
                        level.weight,
                        out,
                    );
                }
            }
        }
    }
    stats.atoms_read.fetch_add(reads, Ordering::Relaxed);
    stats.read_calls.fetch_add(reads, Ordering::Relaxed);
    stats.contributions.fetch_add(reads, Ordering::Relaxed);
    Ok(())
}
