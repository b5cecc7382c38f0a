//! Rollout benchmark: paced `runtimes/status` writes through a real kube-apiserver while kim's two
//! webhook replicas behind HAProxy ([`testenv::rollout`]) are restarted one after the other with
//! SIGTERM, have their certificate renewed by kubelet's symlink swap, and one is SIGKILLed.
//! Prints per run the writes made and failed (with the client's messages), latencies from the
//! scheduled send, what happened when, kube-apiserver's webhook counters and kim's, and the goals
//! as met / NOT met: 0 failed writes across the restart and the renewal; after the SIGKILL, no
//! more failed writes than were in flight on the killed replica (rate × p99.9, an upper estimate).
//!
//! Needs kube-apiserver, etcd (`scripts/install-control-plane.sh`) and haproxy
//! (`scripts/install-haproxy.sh`). Environment: `ROLLOUT_BENCH_RATE` (writes/s, 200),
//! `ROLLOUT_BENCH_SECS` (60), `ROLLOUT_BENCH_RUNTIMES` (50), `ROLLOUT_BENCH_DELAY` (the replicas'
//! `--shutdown-delay-seconds`, 4), `ROLLOUT_BENCH_CHECK_MS` (HAProxy's health-check interval,
//! 1000: a replica is out after two failed checks, as a Service drops an unready pod within a
//! second or two). Figures: docs/control-plane.md, "The webhook rolled out behind a load balancer".

use std::time::Duration;
use testenv::rollout::{self, Fault, Options};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() -> Result<(), String> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let opts = Options {
        kim: env!("CARGO_BIN_EXE_kim").into(),
        rate: env("ROLLOUT_BENCH_RATE", 200.0),
        seconds: env("ROLLOUT_BENCH_SECS", 60.0),
        runtimes: env("ROLLOUT_BENCH_RUNTIMES", 50),
        shutdown_delay_secs: env("ROLLOUT_BENCH_DELAY", 4),
        health_check: Duration::from_millis(env("ROLLOUT_BENCH_CHECK_MS", 1000)),
        faults: vec![
            Fault::RollingRestart,
            Fault::RotateCertificate,
            Fault::KillOne,
        ],
        cpu: None,
        webhook_args: Vec::new(),
    };
    println!(
        "== rollout: {} writes/s for {} s over {} Runtimes; replicas with --shutdown-delay-seconds {}; health checks every {} ms",
        opts.rate,
        opts.seconds,
        opts.runtimes,
        opts.shutdown_delay_secs,
        opts.health_check.as_millis()
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let report = rt.block_on(rollout::run(&opts))?;
    for (at, what) in &report.events {
        println!("  {:>8}  {what}", ms(*at));
    }
    println!(
        "writes: {} sent, {} ok, {} failed; latency p50 {} p99 {} p99.9 {} max {}",
        report.sent,
        report.ok,
        report.failed.len(),
        ms(report.quantile(0.5)),
        ms(report.quantile(0.99)),
        ms(report.quantile(0.999)),
        ms(report.quantile(1.0)),
    );
    for f in &report.failed {
        println!("  failed at {}: {}", ms(f.at), f.message);
    }
    println!("kube-apiserver:");
    // The admission duration histogram's buckets are the overload benchmark's to read.
    for (k, v) in report
        .apiserver
        .iter()
        .filter(|(k, _)| !k.contains("_bucket{"))
    {
        println!("  {k} {v}");
    }
    println!("kim (all processes):");
    for (k, v) in &report.kim {
        println!("  {k} {v}");
    }
    let kill_at = report
        .events
        .iter()
        .find(|(_, e)| e.starts_with("SIGKILL"))
        .map(|(at, _)| *at)
        .unwrap_or(Duration::MAX);
    let (before_kill, after_kill): (Vec<_>, Vec<_>) =
        report.failed.iter().partition(|f| f.at < kill_at);
    let in_flight = (opts.rate * report.quantile(0.999).as_secs_f64()).ceil() as usize;
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!(
        "goal: 0 failed writes across the rolling restart and the renewal: {} ({})",
        before_kill.len(),
        verdict(before_kill.is_empty())
    );
    println!(
        "goal: failed writes after the SIGKILL <= writes in flight (rate x p99.9 = {in_flight}): {} ({})",
        after_kill.len(),
        verdict(after_kill.len() <= in_flight)
    );
    Ok(())
}
