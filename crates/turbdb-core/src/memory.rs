//! The memory this process may use: the machine's, or less where a control group (a
//! container, a batch job's allocation) or a resource limit (`ulimit -v`) limits it. Sized
//! from the machine's RAM alone, a container limited to 2 GiB on a 64 GiB host got a 4 GiB
//! cache and a 32 GiB result limit: a large query was killed by the kernel's OOM killer
//! (or, under `ulimit -v`, aborted) instead of refused.

use std::path::{Path, PathBuf};

/// The soft limit of a resource (`libc::RLIMIT_…`) in bytes; `None` when unlimited. A
/// macro: the constants' type differs between C libraries.
macro_rules! resource_limit {
    ($resource:expr) => {{
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes the struct it is given.
        let known = unsafe { libc::getrlimit($resource, &mut limit) } == 0;
        (known && limit.rlim_cur != libc::RLIM_INFINITY).then_some(limit.rlim_cur as u64)
    }};
}

/// The bytes of memory this process may use: the machine's RAM, or less where the tightest
/// memory limit of its control groups (cgroup v2 `memory.max`, v1
/// `memory.limit_in_bytes`, the group's own and every group above it) or its address-space
/// or data limit (`ulimit -v`, `ulimit -d`) is smaller. `None` where none is known.
pub fn usable_memory() -> Option<u64> {
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|groups| cgroup_limit(&groups, Path::new("/sys/fs/cgroup")));
    // Under `ulimit -v` an allocation past the limit aborted the process (Rust's
    // allocation failure) where a limit sized from what is left of it refuses the request
    // first. What the process has mapped already (libraries, thread stacks) is not left.
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let left = |limit: Option<u64>, used: &str| {
        limit.map(|limit| limit.saturating_sub(status_bytes(&status, used).unwrap_or(0)))
    };
    // Of the address space only half: shard mappings, thread stacks and the allocator's
    // arenas take address space beyond the bytes a query uses.
    let address_space = left(resource_limit!(libc::RLIMIT_AS), "VmSize:").map(|bytes| bytes / 2);
    let data = left(resource_limit!(libc::RLIMIT_DATA), "VmData:");
    [physical_memory(), cgroup, address_space, data]
        .into_iter()
        .flatten()
        .min()
}

/// A `/proc/self/status` line's size (`VmSize:   123456 kB`) in bytes.
fn status_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with(key))?;
    let kib: u64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// The machine's RAM in bytes.
pub fn physical_memory() -> Option<u64> {
    // SAFETY: sysconf only reads system constants.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page > 0).then(|| (pages as u64).saturating_mul(page as u64))
}

/// The tightest memory limit of the groups that `/proc/self/cgroup` (`groups`) names,
/// with the cgroup file systems mounted under `root`.
fn cgroup_limit(groups: &str, root: &Path) -> Option<u64> {
    let mut tightest: Option<u64> = None;
    for line in groups.lines() {
        // "0::/path" (v2, one hierarchy) or "N:memory:/path" (v1; controllers comma-joined).
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let (mount, file) = if controllers.is_empty() {
            (root.to_path_buf(), "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (root.join("memory"), "memory.limit_in_bytes")
        } else {
            continue;
        };
        // The group and each one above it up to the mount: the smallest limit binds. Inside
        // a container's cgroup namespace the path is "/", the mount's own files.
        let mut dir: PathBuf = mount.join(path.trim_start_matches('/'));
        loop {
            if let Some(limit) = read_limit(&dir.join(file)) {
                tightest = Some(tightest.map_or(limit, |t| t.min(limit)));
            }
            if dir == mount || !dir.pop() || !dir.starts_with(&mount) {
                break;
            }
        }
    }
    tightest
}

/// A limit file's bytes: `None` for "max", an unreadable file, or v1's "no limit" (a
/// page-rounded 2⁶³).
fn read_limit(file: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(file).ok()?;
    let text = text.trim();
    if text == "max" {
        return None;
    }
    text.parse::<u64>().ok().filter(|&bytes| bytes < 1 << 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, relative: &str, text: &str) {
        let file = root.join(relative);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    }

    #[test]
    fn a_v2_group_limit_binds_and_the_tightest_of_its_ancestors_wins() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory.max", "max\n");
        write(root.path(), "jobs/memory.max", "3221225472\n");
        write(root.path(), "jobs/job7/memory.max", "max\n");
        let limit = cgroup_limit("0::/jobs/job7\n", root.path());
        assert_eq!(limit, Some(3 << 30));
    }

    #[test]
    fn a_v1_memory_group_is_read_and_no_limit_reads_as_none() {
        let root = tempfile::tempdir().unwrap();
        write(
            root.path(),
            "memory/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        write(
            root.path(),
            "memory/box/memory.limit_in_bytes",
            "2147483648\n",
        );
        let groups = "12:cpu,cpuacct:/box\n4:memory:/box\n1:name=systemd:/box\n";
        assert_eq!(cgroup_limit(groups, root.path()), Some(2 << 30));
        let unlimited = "4:memory:/\n";
        assert_eq!(cgroup_limit(unlimited, root.path()), None);
    }

    #[test]
    fn a_container_namespace_reads_the_mounts_own_limit() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "memory.max", "1073741824\n");
        assert_eq!(cgroup_limit("0::/\n", root.path()), Some(1 << 30));
    }

    #[test]
    fn missing_or_misshapen_files_are_no_limit() {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), "a/memory.max", "lots\n");
        assert_eq!(cgroup_limit("0::/a/b\n", root.path()), None);
        assert_eq!(cgroup_limit("garbage\n", root.path()), None);
    }

    #[test]
    fn status_sizes_are_read_in_bytes() {
        let status = "Name:\tx\nVmSize:\t  123456 kB\nVmData:\t 42 kB\n";
        assert_eq!(status_bytes(status, "VmSize:"), Some(123_456 * 1024));
        assert_eq!(status_bytes(status, "VmData:"), Some(42 * 1024));
        assert_eq!(status_bytes(status, "VmRSS:"), None);
    }

    #[test]
    fn this_process_has_some_usable_memory_within_the_machines() {
        let usable = usable_memory().unwrap();
        assert!(usable > 0 && usable <= physical_memory().unwrap());
    }
}
