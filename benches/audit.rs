//! `kim audit` at scale: seeds N Runtimes (default 10 000) into a testenv API server in this
//! process and runs the real `kim audit -A -o json` binary against it as its own process, several
//! times: wall time, the audit's peak RSS and CPU (GNU time, `/usr/bin/time`), list requests.
//!
//! The statuses mix clean ones with every kind of violation (the proportions are in
//! [`audit_seed`]), so the audit reads, judges and reports at realistic cost. Each run must exit
//! 1 and report exactly N Runtimes and the expected broken ones; nothing is asserted on the
//! figures. Environment variables (`AUDIT_BENCH_RUNTIMES`, `_RUNS`, `_ARGS`) and figures:
//! BENCHMARKS.md, "`kim audit`".

use anyhow::{Context, bail, ensure};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;
use std::time::Instant;
use testenv::{Gvr, ServerConfig, Verb};

#[path = "support/audit_seed.rs"]
mod audit_seed;
#[path = "support/procinfo.rs"]
mod procinfo;
use audit_seed::{runtime, sample_specs, seed_statuses};

fn main() -> anyhow::Result<()> {
    let n: usize = env_or("AUDIT_BENCH_RUNTIMES", 10_000)?;
    let runs: usize = env_or("AUDIT_BENCH_RUNS", 3)?;
    let extra: Vec<String> = std::env::var("AUDIT_BENCH_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let time = Path::new("/usr/bin/time");
    ensure!(
        time.exists(),
        "/usr/bin/time (GNU time) is needed for the peak RSS: apt-get install time"
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("tokio runtime")?;
    let server = rt
        .block_on(testenv::start(
            ServerConfig::default().request_log_limit(10_000),
        ))
        .context("testenv server")?;
    let dir = tempfile::tempdir()?;
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, server.kubeconfig_yaml(None))?;

    let specs = sample_specs()?;
    let seed = seed_statuses()?;
    let started = Instant::now();
    let mut broken = BTreeSet::new();
    let mut bytes = 0usize;
    for i in 0..n {
        let (obj, is_broken) = runtime(i, &specs, &seed);
        bytes += obj.to_string().len();
        if is_broken {
            broken.insert(obj["metadata"]["name"].as_str().unwrap_or("").to_string());
        }
        server
            .put(&Gvr::runtimes(), obj)
            .map_err(|e| anyhow::anyhow!("seeding: {}", e.message))?;
    }
    println!(
        "seeded {n} Runtimes ({:.1} MiB of JSON, {} broken) in {:.1} s; load {}",
        bytes as f64 / (1024.0 * 1024.0),
        broken.len(),
        started.elapsed().as_secs_f64(),
        procinfo::loadavg()
    );

    let mut results = Vec::new();
    for run in 1..=runs {
        server.clear_requests();
        let stats = dir.path().join("time.txt");
        let load = procinfo::loadavg();
        let t0 = Instant::now();
        let out = Command::new(time)
            .arg("-f")
            .arg("%M %U %S")
            .arg("-o")
            .arg(&stats)
            .arg(env!("CARGO_BIN_EXE_kim"))
            .args(["audit", "-A", "-o", "json", "--kubeconfig"])
            .arg(&kubeconfig)
            .args(&extra)
            .env_remove("KUBECONFIG")
            .output()
            .context("running kim audit")?;
        let wall = t0.elapsed().as_secs_f64();
        ensure!(
            out.status.code() == Some(1),
            "kim audit exited {:?}: {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        check_report(&out.stdout, n, &broken)?;
        let (rss_kib, user, sys) = parse_time(&std::fs::read_to_string(&stats)?)?;
        let lists = server.count_requests(|r| r.verb == Some(Verb::List) && r.is("runtimes", None));
        println!(
            "run {run}: wall {wall:.2} s, peak RSS {:.1} MiB, CPU {user:.2} s user + {sys:.2} s sys, {lists} list requests, stdout {:.1} MiB; load before {load}",
            rss_kib as f64 / 1024.0,
            out.stdout.len() as f64 / (1024.0 * 1024.0),
        );
        if run == 1 {
            println!(
                "   stderr: {}",
                String::from_utf8_lossy(&out.stderr).trim_end()
            );
        }
        results.push((wall, rss_kib, user + sys, lists));
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    if let Some((wall, rss, cpu, lists)) = results.get(results.len() / 2) {
        println!(
            "median of {runs}: {n} Runtimes, wall {wall:.2} s, peak RSS {:.1} MiB, CPU {cpu:.2} s, {lists} list requests; load now {}",
            *rss as f64 / 1024.0,
            procinfo::loadavg()
        );
    }
    server.shutdown();
    Ok(())
}

fn env_or(name: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(name) {
        Ok(v) => v.parse().with_context(|| format!("{name}={v}")),
        Err(_) => Ok(default),
    }
}

/// The report must name every broken Runtime once and count all `n`.
fn check_report(stdout: &[u8], n: usize, broken: &BTreeSet<String>) -> anyhow::Result<()> {
    let doc: Value = serde_json::from_slice(stdout).context("kim audit -o json output")?;
    ensure!(
        doc["summary"]["runtimes"] == n,
        "summary: {}",
        doc["summary"]
    );
    let mut seen = BTreeSet::new();
    for item in doc["items"].as_array().context("items")? {
        let name = item["name"].as_str().unwrap_or("").to_string();
        if !seen.insert(name.clone()) {
            bail!("{name} reported twice");
        }
    }
    ensure!(
        &seen == broken,
        "reported {} Runtimes, expected {}",
        seen.len(),
        broken.len()
    );
    Ok(())
}

/// `%M %U %S` of GNU time: peak RSS (KiB), user and system CPU seconds.
fn parse_time(text: &str) -> anyhow::Result<(u64, f64, f64)> {
    let line = text.lines().last().context("empty /usr/bin/time output")?;
    let f: Vec<&str> = line.split_whitespace().collect();
    ensure!(f.len() == 3, "/usr/bin/time output: {text}");
    Ok((f[0].parse()?, f[1].parse()?, f[2].parse()?))
}
