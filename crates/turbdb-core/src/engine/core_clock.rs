//! The clock a core runs at, measured rather than read: `/proc/cpuinfo` gives a nominal
//! figure (2.6 GHz on a 2-core Intel Xeon whose core ran at about 3.8 GHz), so an
//! arithmetic bound computed from it was about 1.45× too low. A chain of dependent
//! register-to-register additions runs one a cycle on x86-64 and aarch64 cores, so its
//! rate is the clock. (Not additions of an immediate: recent Intel cores fold chains of
//! those at renaming, and such a chain "ran" at 21 GHz.)

use std::time::Instant;

/// Additions timed in one round.
const ADDS: u64 = 1 << 24;

/// The clock of the core running the calling thread, in Hz: the fastest of a few rounds of
/// a dependent chain of additions (a few tens of milliseconds). `None` on other CPUs.
pub fn measured_clock_hz() -> Option<f64> {
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let start = Instant::now();
        let chain = add_chain(ADDS / 16)?;
        std::hint::black_box(chain);
        best = best.min(start.elapsed().as_secs_f64());
    }
    Some(ADDS as f64 / best)
}

/// `rounds` × 16 dependent additions; the loop's own counting runs beside the chain.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn add_chain(rounds: u64) -> Option<u64> {
    // `x += one` in the architecture's syntax.
    #[cfg(target_arch = "x86_64")]
    macro_rules! add {
        () => {
            "add {x}, {one}"
        };
    }
    #[cfg(target_arch = "aarch64")]
    macro_rules! add {
        () => {
            "add {x}, {x}, {one}"
        };
    }
    let mut x: u64 = 0;
    for _ in 0..rounds {
        // SAFETY: register arithmetic only.
        unsafe {
            std::arch::asm!(
                add!(), add!(), add!(), add!(), add!(), add!(), add!(), add!(),
                add!(), add!(), add!(), add!(), add!(), add!(), add!(), add!(),
                x = inout(reg) x,
                one = in(reg) 1u64,
                options(nomem, nostack, pure),
            );
        }
    }
    Some(x)
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn add_chain(_rounds: u64) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_adds_what_it_says() {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert_eq!(add_chain(3), Some(48));
    }

    #[test]
    fn the_clock_is_that_of_a_real_core() {
        // Between 0.3 and 7 GHz: loose, as a loaded test machine may be slow, but a chain
        // the compiler folded away would give far more, and a broken timer far less.
        if let Some(hz) = measured_clock_hz() {
            assert!((0.3e9..7e9).contains(&hz), "{hz} Hz");
        }
    }
}
