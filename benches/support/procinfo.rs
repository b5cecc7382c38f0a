//! What the benches read of processes and the machine from `/proc`, through `procfs`: CPU
//! seconds and memory of a process, the load average, the CPU model. One copy for every bench
//! (each includes it with `#[path]`), so their figures are measured the same way.

#![allow(dead_code)] // each bench uses a part

use procfs::process::Process;
use procfs::{Current, FromRead};

/// User + system CPU seconds of the process `pid` (`utime` + `stime` of `/proc/<pid>/stat`
/// over the kernel's clock ticks per second); `None` once it is gone.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = Process::new(i32::try_from(pid).ok()?).ok()?.stat().ok()?;
    Some((stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64)
}

/// CPU seconds of the calling thread so far (`/proc/thread-self/stat`: robust to other load on
/// the machine, unlike wall time); NaN if unreadable.
pub fn thread_cpu_secs() -> f64 {
    procfs::process::Stat::from_file("/proc/thread-self/stat").map_or(f64::NAN, |stat| {
        (stat.utime + stat.stime) as f64 / procfs::ticks_per_second() as f64
    })
}

/// CPU seconds of this process so far.
pub fn self_cpu_secs() -> f64 {
    cpu_secs(std::process::id()).unwrap_or(0.0)
}

/// Peak and current resident memory of `pid` (`VmHWM`, `VmRSS` of `/proc/<pid>/status`), MiB;
/// `None` once it is gone.
pub fn memory_mib(pid: u32) -> Option<(f64, f64)> {
    let status = Process::new(i32::try_from(pid).ok()?).ok()?.status().ok()?;
    let mib = |kb: Option<u64>| kb.map(|kb| kb as f64 / 1024.0);
    Some((mib(status.vmhwm)?, mib(status.vmrss)?))
}

/// `VmHWM` of `pid`, MiB (NaN once it is gone).
pub fn hwm_mib(pid: u32) -> f64 {
    memory_mib(pid).map_or(f64::NAN, |(hwm, _)| hwm)
}

/// `VmRSS` of `pid`, MiB (NaN once it is gone).
pub fn rss_mib(pid: u32) -> f64 {
    memory_mib(pid).map_or(f64::NAN, |(_, rss)| rss)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` prints them (empty if unreadable).
pub fn loadavg() -> String {
    procfs::LoadAverage::current()
        .map(|l| format!("{:.2} {:.2} {:.2}", l.one, l.five, l.fifteen))
        .unwrap_or_default()
}

/// The model name of the first CPU (`unknown` if unreadable).
pub fn cpu_model() -> String {
    procfs::CpuInfo::current()
        .ok()
        .and_then(|c| c.model_name(0).map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}
