//! The kernel's workers carry their own name, not that of the thread that first used the
//! pool (its own test binary: nothing here has built rayon's global pool before).

use turbdb_core::engine::kernel_pool::{name_kernel_threads, KERNEL_THREAD_PREFIX};

#[test]
fn the_kernel_workers_are_named_even_when_a_named_thread_starts_them() {
    // As the engine does: a thread with a name of its own names the pool, then uses it.
    let names = std::thread::Builder::new()
        .name("turbdb-engine".into())
        .spawn(|| {
            name_kernel_threads();
            name_kernel_threads(); // a second call changes nothing
            rayon::broadcast(|_| std::thread::current().name().map(str::to_owned))
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(names.len(), rayon::current_num_threads());
    let mut indices: Vec<usize> = names
        .iter()
        .map(|name| {
            let name = name.as_deref().expect("a named worker");
            name.strip_prefix(KERNEL_THREAD_PREFIX)
                .unwrap_or_else(|| panic!("{name:?} is not a kernel worker's name"))
                .parse()
                .expect("the worker's index")
        })
        .collect();
    indices.sort_unstable();
    assert_eq!(indices, (0..names.len()).collect::<Vec<_>>());
}
