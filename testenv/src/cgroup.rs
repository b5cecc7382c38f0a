//! A CPU quota for a process, as a container's `resources.limits.cpu` sets it: a cgroup v1
//! `cpu` group under `/sys/fs/cgroup/cpu` with `cpu.cfs_period_us` / `cpu.cfs_quota_us`
//! (kubelet writes the same two files; `limits.cpu: 10m` is 1 000 µs per 100 000 µs).
//!
//! Needs root and a writable cgroup v1 `cpu` hierarchy. The group is removed when the
//! [`CpuGroup`] is dropped: processes still in it are moved back to the root group first.

use std::path::{Path, PathBuf};

const ROOT: &str = "/sys/fs/cgroup/cpu";

/// A cgroup v1 `cpu` group with a CFS quota; removed on drop.
#[derive(Debug)]
pub struct CpuGroup {
    dir: PathBuf,
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value).map_err(|e| format!("write {value:?} to {}: {e}", path.display()))
}

impl CpuGroup {
    /// Creates `/sys/fs/cgroup/cpu/<name>` allowing `quota_us` of CPU time every `period_us`
    /// (both in µs; the kernel accepts quotas from 1 000 µs and periods from 1 000 µs to 1 s).
    ///
    /// # Errors
    /// No writable cgroup v1 `cpu` hierarchy (not root, or cgroup v2 only), or the kernel
    /// refuses the values; the message says which file and why.
    pub fn new(name: &str, period_us: u64, quota_us: u64) -> Result<CpuGroup, String> {
        let root = Path::new(ROOT);
        if !root.join("cpu.cfs_quota_us").exists() {
            return Err(format!(
                "no cgroup v1 cpu hierarchy at {ROOT}: a CPU-limited replica needs one (and root)"
            ));
        }
        let dir = root.join(name);
        std::fs::create_dir(&dir).map_err(|e| {
            format!(
                "cannot create the cgroup {}: {e} (a CPU-limited replica needs root)",
                dir.display()
            )
        })?;
        let group = CpuGroup { dir };
        write(&group.dir.join("cpu.cfs_period_us"), &period_us.to_string())?;
        write(&group.dir.join("cpu.cfs_quota_us"), &quota_us.to_string())?;
        Ok(group)
    }

    /// Moves process `pid` (all its threads) into the group.
    ///
    /// # Errors
    /// The kernel refuses (no such process).
    pub fn add(&self, pid: u32) -> Result<(), String> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())
    }

    /// `nr_periods nr_throttled throttled_time(ns)` of `cpu.stat`: how often the group ran
    /// out of quota.
    pub fn throttling(&self) -> (u64, u64, u64) {
        let text = std::fs::read_to_string(self.dir.join("cpu.stat")).unwrap_or_default();
        let get = |k: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(k)?.trim().parse().ok())
                .unwrap_or(0)
        };
        (
            get("nr_periods "),
            get("nr_throttled "),
            get("throttled_time "),
        )
    }
}

impl Drop for CpuGroup {
    fn drop(&mut self) {
        let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = std::fs::write(Path::new(ROOT).join("cgroup.procs"), pid);
        }
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("cannot remove the cgroup {}: {e}", self.dir.display());
        }
    }
}
