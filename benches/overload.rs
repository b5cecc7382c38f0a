//! Overload benchmark: kim's two webhook replicas behind HAProxy, each CPU-limited by a cgroup
//! quota (as `limits.cpu` does) until they, not kube-apiserver, are the bottleneck, under paced
//! `runtimes/status` writes through a real kube-apiserver ([`testenv::rollout`], no faults).
//! Run it at a few rates: below the replicas' capacity (0 failed writes) and above it, to see
//! what kube-apiserver and its clients get from a webhook that cannot keep up.
//!
//! `cargo bench --bench overload` prints, per rate: the writes made, succeeded and failed (the
//! client's error texts grouped, digits shown as `N`), client latency p50 / p99 / max from the
//! scheduled send, kube-apiserver's webhook calls by code, rejections by `error_type`,
//! fail-open counts and the admission duration of each webhook
//! (`apiserver_admission_webhook_admission_duration_seconds`: count, mean, p50 / p99 from the
//! buckets), kim's answers by path, decision and code, the highest
//! `kim_webhook_requests_in_flight` seen per replica, each replica's CFS throttling, and the
//! load average.
//!
//! Needs root (a cgroup v1 `cpu` hierarchy at `/sys/fs/cgroup/cpu`; it fails with a message
//! otherwise), kube-apiserver and etcd (`scripts/install-control-plane.sh`) and haproxy
//! (`scripts/install-haproxy.sh`). Environment: `OVERLOAD_RATES` (writes/s, comma-separated,
//! `20,40`), `OVERLOAD_SECS` (seconds per rate, 45), `OVERLOAD_RUNTIMES` (50),
//! `OVERLOAD_PERIOD_US` / `OVERLOAD_QUOTA_US` (each replica's CFS period and quota, 100 000 /
//! 1 000: `limits.cpu: 10m`; `OVERLOAD_QUOTA_US=0` for no limit), `OVERLOAD_ARGS` (flags added
//! to every replica, split on spaces).

use std::collections::BTreeMap;
use std::time::Duration;
use testenv::rollout::{self, CpuLimit, Options, Report};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// A client error with its numbers (ports, uids, durations) shown as `N`, for grouping.
fn shape(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut in_digits = false;
    for c in message.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(c);
        }
    }
    out
}

/// The value of label `name` in a series `metric{a="x",b="y"}`.
fn label<'a>(series: &'a str, name: &str) -> &'a str {
    let pat = format!("{name}=\"");
    series
        .find(&pat)
        .map(|i| &series[i + pat.len()..])
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
}

/// Sums `report.apiserver` series starting with `prefix` by the given labels.
fn by_labels(report: &Report, prefix: &str, labels: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for (k, v) in report
        .apiserver
        .iter()
        .filter(|(k, _)| k.starts_with(prefix))
    {
        let key: Vec<String> = labels
            .iter()
            .map(|l| format!("{l}={}", label(k, l)))
            .collect();
        *out.entry(key.join(" ")).or_insert(0.0) += v;
    }
    out
}

/// Count, mean and the p50 / p99 bucket bounds of kube-apiserver's admission duration
/// histogram of each webhook over the run.
fn durations(report: &Report) -> Vec<String> {
    let p = "apiserver_admission_webhook_admission_duration_seconds_";
    let mut names: Vec<&str> = report
        .apiserver
        .keys()
        .filter(|k| k.starts_with(p))
        .map(|k| label(k, "name"))
        .collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for name in names {
        let of = |suffix: &str| {
            report
                .apiserver
                .iter()
                .filter(|(k, _)| k.starts_with(&format!("{p}{suffix}")) && label(k, "name") == name)
                .map(|(k, v)| (k.clone(), *v))
                .collect::<Vec<_>>()
        };
        let count: f64 = of("count").iter().map(|(_, v)| v).sum();
        let sum: f64 = of("sum").iter().map(|(_, v)| v).sum();
        let mut buckets: BTreeMap<u64, f64> = BTreeMap::new();
        for (k, v) in of("bucket") {
            let le = label(&k, "le");
            let le = if le == "+Inf" {
                u64::MAX
            } else {
                (le.parse::<f64>().unwrap_or(0.0) * 1e6) as u64
            };
            *buckets.entry(le).or_insert(0.0) += v;
        }
        let q = |q: f64| {
            buckets
                .iter()
                .find(|(_, c)| **c >= q * count)
                .map(|(le, _)| {
                    if *le == u64::MAX {
                        "+Inf".to_string()
                    } else {
                        format!("<= {} s", *le as f64 / 1e6)
                    }
                })
                .unwrap_or_default()
        };
        if count > 0.0 {
            out.push(format!(
                "{name}: {count} calls, mean {}, p50 {}, p99 {}",
                ms(Duration::from_secs_f64(sum / count)),
                q(0.5),
                q(0.99)
            ));
        }
    }
    out
}

fn main() -> Result<(), String> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let rates: Vec<f64> = std::env::var("OVERLOAD_RATES")
        .unwrap_or_else(|_| "20,40".into())
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .map_err(|_| format!("OVERLOAD_RATES: {r:?}"))
        })
        .collect::<Result<_, _>>()?;
    let quota: u64 = env("OVERLOAD_QUOTA_US", 1000);
    let cpu = (quota > 0).then(|| CpuLimit {
        period_us: env("OVERLOAD_PERIOD_US", 100_000),
        quota_us: quota,
    });
    let webhook_args: Vec<String> = std::env::var("OVERLOAD_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(String::from)
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    for rate in rates {
        let opts = Options {
            kim: env!("CARGO_BIN_EXE_kim").into(),
            rate,
            seconds: env("OVERLOAD_SECS", 45.0),
            runtimes: env("OVERLOAD_RUNTIMES", 50),
            shutdown_delay_secs: 0,
            health_check: Duration::from_secs(1),
            faults: Vec::new(),
            cpu,
            webhook_args: webhook_args.clone(),
        };
        println!(
            "== overload: {} writes/s for {} s over {} Runtimes; each replica {}; flags {:?}",
            opts.rate,
            opts.seconds,
            opts.runtimes,
            match cpu {
                Some(l) => format!("{} us CPU per {} us", l.quota_us, l.period_us),
                None => "not CPU-limited".into(),
            },
            opts.webhook_args
        );
        let report = rt.block_on(rollout::run(&opts))?;
        println!(
            "writes: {} sent, {} ok, {} failed ({:.1} ok/s); latency of the ok ones p50 {} p99 {} max {}",
            report.sent,
            report.ok,
            report.failed.len(),
            report.ok as f64 / opts.seconds,
            ms(report.quantile(0.5)),
            ms(report.quantile(0.99)),
            ms(report.quantile(1.0)),
        );
        let mut errors: BTreeMap<String, (usize, Duration)> = BTreeMap::new();
        for f in &report.failed {
            errors.entry(shape(&f.message)).or_insert((0, f.at)).0 += 1;
        }
        for (m, (n, first)) in &errors {
            println!("  {n} x (first at {}) {m}", ms(*first));
        }
        println!(
            "load average: at start {}; at end {}",
            report.load_average.0, report.load_average.1
        );
        println!("kube-apiserver webhook calls:");
        for (k, v) in by_labels(
            &report,
            "apiserver_admission_webhook_request_total{",
            &["type", "code", "rejected"],
        ) {
            println!("  {k}: {v}");
        }
        println!("kube-apiserver rejections:");
        for (k, v) in by_labels(
            &report,
            "apiserver_admission_webhook_rejection_count{",
            &["type", "error_type", "rejection_code"],
        ) {
            println!("  {k}: {v}");
        }
        println!(
            "kube-apiserver fail-open: {}",
            report.apiserver_sum("apiserver_admission_webhook_fail_open_count{", &[])
        );
        for line in durations(&report) {
            println!("  {line}");
        }
        println!("kim (all processes):");
        for (k, v) in &report.kim {
            println!("  {k} {v}");
        }
        println!("kim in flight, highest seen: {:?}", report.in_flight_max);
        for (name, (periods, throttled, ns)) in &report.throttling {
            println!(
                "replica {name}: throttled in {throttled} of {periods} periods, {:.1} s in all",
                *ns as f64 / 1e9
            );
        }
    }
    Ok(())
}
