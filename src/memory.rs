//! Handing freed heap memory back to the operating system (glibc targets).
//!
//! glibc's malloc keeps what a program frees in its arenas (one per thread that allocated, up to
//! eight per core) and returns only the free space at the top of each heap. The controller's
//! caches churn: every watch event decodes a new copy of its object and drops the old one, a
//! cold start decodes whole list answers, every reconcile builds and drops request bodies. The
//! holes this leaves in the middle of the heaps stay resident until reused, so the RSS grows
//! well past the live heap (1.7× at 3 000 Runtimes, BENCHMARKS.md). The webhook's large
//! reviews do the same: bodies of up to 7 MiB and up to 16 MiB of decoded values each, freed
//! in the arenas of whichever threads held them. `malloc_trim(0)` walks the arenas and hands
//! every whole free page back (`madvise(MADV_DONTNEED)`); it keeps the allocations where they
//! are, so it costs no copying, only the walk, which runs on a blocking thread. Both `kim
//! controller` and `kim webhook` trim every [`DEFAULT_TRIM_SECONDS`] by default ([`TrimArgs`]).

use std::time::Duration;

/// How often the controller and the webhook trim by default, in seconds
/// (`--malloc-trim-seconds`).
pub const DEFAULT_TRIM_SECONDS: u64 = 10;

/// The flag of `kim controller` and `kim webhook` that sets how often they trim.
#[derive(Debug, Clone, clap::Args)]
pub struct TrimArgs {
    /// Seconds between two hand-backs of freed heap pages to the operating system
    /// (`malloc_trim`, glibc only: `crate::memory`). `0`: never.
    #[arg(long, env = "KIM_MALLOC_TRIM_SECONDS", default_value_t = DEFAULT_TRIM_SECONDS)]
    pub malloc_trim_seconds: u64,
}

impl TrimArgs {
    /// The period for [`spawn_trimmer`]; zero: never.
    pub fn period(&self) -> Duration {
        Duration::from_secs(self.malloc_trim_seconds)
    }
}

/// Trims the heap every `every` until the returned task is aborted; `None` when `every` is zero
/// or the C library is not glibc (other allocators return memory on their own terms).
pub fn spawn_trimmer(every: Duration) -> Option<tokio::task::JoinHandle<()>> {
    if every.is_zero() || !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return None;
    }
    Some(tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // A walk of every arena holds each arena's lock in turn: off the async workers.
            if tokio::task::spawn_blocking(trim).await.is_err() {
                return;
            }
        }
    }))
}

/// Bytes from which glibc serves an allocation with its own `mmap` and unmaps it when freed:
/// 128 KiB, glibc's initial value, kept fixed (see [`unmap_large_blocks`]).
pub const LARGE_BLOCK: usize = 128 * 1024;

/// Makes glibc's malloc give every allocation of [`LARGE_BLOCK`] or more back to the operating
/// system when it is freed, for the whole process (glibc only; elsewhere nothing). By default
/// glibc raises that threshold to the size of each large block freed, up to 32 MiB, so after
/// the first 7 MiB request body every later body and decoded review is carved from the heaps
/// of the threads that held them and stays resident; setting it once turns that off (and fixes
/// the heap-top trim threshold at the same size). Measured on `kim webhook` (2026-12-03, debug
/// build, 12 concurrent 7 MiB reviews over HTTP/2 from another process): peak RSS 188–229 MiB
/// with glibc's default, 130 MiB with both thresholds at 128 KiB; resting RSS 15 s after
/// the burst 106 against 33 MiB. A review of a Runtime (~8 KiB) is far below the threshold.
#[allow(unsafe_code)]
pub fn unmap_large_blocks() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt takes two integers and no pointers; glibc serialises it with the main
    // arena's lock, so it is safe to call from any thread at any time.
    unsafe {
        let bytes = LARGE_BLOCK as libc::c_int;
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes);
        libc::mallopt(libc::M_TRIM_THRESHOLD, bytes);
    }
}

/// One `malloc_trim(0)`.
#[allow(unsafe_code)]
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// The process's resident set (`VmRSS` of /proc/self/status), in KiB.
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// Freed pages below a live allocation stay resident until trimmed: 64 MiB in 4 KiB blocks
    /// (under glibc's mmap threshold, so on the heap), all freed but the last, which pins the
    /// top of the heap so that `free` cannot give anything back by itself.
    #[test]
    fn trim_hands_back_pages_freed_below_a_live_allocation() {
        let mut blocks: Vec<Vec<u8>> = (0..16 * 1024).map(|_| vec![1u8; 4096]).collect();
        let pin = blocks.pop();
        drop(blocks);
        let before = rss_kib();
        trim();
        let after = rss_kib();
        drop(pin);
        assert!(
            before.saturating_sub(after) >= 32 * 1024,
            "RSS {before} KiB before the trim, {after} KiB after: less than 32 MiB handed back"
        );
    }

    /// Once [`unmap_large_blocks`] ran, a large block is unmapped when freed, also after a
    /// first one was (glibc's default raises its threshold to the size of the first block
    /// freed, so the next ones come from the heap and stay resident when freed). Each block
    /// keeps a small allocation after it, so the heap's top cannot give it back either. Other
    /// tests allocate in this process meanwhile: the best of three later blocks counts.
    #[test]
    fn large_blocks_go_back_when_freed() {
        unmap_large_blocks();
        let mut kept = Vec::new();
        let mut handed_back = Vec::new();
        for _ in 0..4 {
            let block = vec![1u8; 16 * 1024 * 1024];
            kept.push(vec![1u8; 64]);
            let before = rss_kib();
            drop(block);
            handed_back.push(before.saturating_sub(rss_kib()));
        }
        assert!(
            handed_back[1..].iter().any(|&kib| kib >= 12 * 1024),
            "RSS handed back when each 16 MiB block was freed, KiB: {handed_back:?}"
        );
    }

    #[test]
    fn no_trimmer_for_a_zero_period() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            assert!(spawn_trimmer(Duration::ZERO).is_none());
            let t = spawn_trimmer(Duration::from_secs(3600)).expect("a trimmer");
            t.abort();
        });
    }
}
