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

/// The peers (`remote address:port`, as `/proc/net/tcp{,6}` print them) of the ESTABLISHED
/// TCP connections whose local port is `port`: the clients connected to a server on it.
pub fn established_peers(port: u16) -> std::collections::HashSet<String> {
    let local = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .flat_map(|t| {
            t.lines()
                .skip(1)
                .filter_map(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    (f.len() > 3 && f[1].ends_with(&local) && f[3] == "01")
                        .then(|| f[2].to_string())
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// CPU seconds of the threads of `pid` alive now, from the nanoseconds on CPU of
/// `/proc/<pid>/task/*/schedstat` (finer than [`cpu_secs`]'s clock ticks; a thread that has
/// ended no longer counts); `None` once the process is gone.
pub fn threads_cpu_secs(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ns: u64 = tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(ns as f64 / 1e9)
}

/// The inodes of the sockets `pid` has open (`socket:[N]` links of `/proc/<pid>/fd`): a new
/// one is a connection accepted (or opened) since an earlier call. Cheap enough to sample
/// often, unlike `/proc/net/tcp`, which lists every socket of the machine.
pub fn socket_inodes(pid: u32) -> std::collections::HashSet<u64> {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Default::default();
    };
    fds.filter_map(Result::ok)
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            link.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect()
}
