//! Webhook benchmark: what one admission review costs, for three servers measured in one run with
//! the same ~15 KB `runtimes/status` UPDATE review, the same TLS set-up (kim's rustls
//! `ServerConfig`) and the same keep-alive HTTP/1.1 connections: (a) the floor, a bare axum +
//! rustls endpoint that reads the body and answers a constant review (`--serve-floor`); (b) the
//! peer, the webhook a kube-rs user would write ([`peer_answer`]: axum `Json` into
//! `AdmissionReview<DynamicObject>`, the typed `Runtime`, kim's evaluation, a `json_patch::diff`
//! answer; `--serve-peer`); (c) `kim webhook` with its production defaults, logging included;
//! optionally (d), an earlier `kim` build (`WEBHOOK_BENCH_KIM_BASELINE`) in the same rounds, the
//! before/after comparison that does not depend on the hour (target: (c) within 2× of (d)).
//!
//! Per server and hook: **server CPU per review** (the primary figure: the server process's
//! user and system time over a closed loop's window, divided by the reviews answered), **pinned
//! throughput** (server on CPU 0, generator on CPU 1), **paced latency** (open loop at a fixed
//! rate, each latency from the scheduled send time, so coordinated omission is avoided) and
//! **peak RSS**. Server CPU is the primary figure because on a 2-core machine the generator
//! competes with the server for throughput. The passes run in rounds, each running every server
//! and hook in turn, so that other processes disturb all alike; CPU figures are the median round.
//! Evaluation alone runs first on one thread, and the peer's verdicts are checked against kim's.
//!
//! Run commands, environment variables, other modes and the figures: BENCHMARKS.md, "Webhook
//! benchmark". The targets are printed as met / NOT met; only a broken set-up aborts.

#[path = "support/procinfo.rs"]
mod procinfo;

use anyhow::{Context, anyhow, bail, ensure};
use axum::body::Bytes;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use kim::admission::{self, Hook};
use kim::status::{self, Facts, Policy, Snapshot};
use kim::testing::model;
use kim::testing::webhook::devcerts;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};
use testenv::tls;

/// The names the rotation certificates are made for.
const LOCALHOST: &[&str] = &["localhost", "127.0.0.1"];
/// Argument that turns this binary into the floor server (followed by the cert dir).
const SERVE_FLOOR: &str = "--serve-floor";
/// Argument that turns this binary into the peer server (followed by the cert dir).
const SERVE_PEER: &str = "--serve-peer";
/// The `request.uid` of the review templates; replaced by a fresh uid on every request.
const UID_PLACEHOLDER: &str = "00000000-0000-4000-8000-000000000000";
/// The uid of the floor's constant answer.
const FLOOR_UID: &str = "c0ffee00-0000-4000-8000-000000000000";
/// The floor's constant answer: an allowed AdmissionReview shaped like kim's allowed answer.
const FLOOR_ANSWER: &str = concat!(
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":"#,
    r#"{"uid":"c0ffee00-0000-4000-8000-000000000000","allowed":true,"status":{"code":200}}}"#
);
/// A request (or a connection) that takes longer counts as an error and the connection is
/// replaced; keeps a stuck server from hanging the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Rounds of the evaluation-only loops (interleaved, so that a change in the machine's speed
/// touches every loop alike); the median round counts.
const EVAL_ROUNDS: u32 = 6;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str);
    if let Some(i) = args.iter().position(|a| a == SERVE_FLOOR) {
        return serve(
            Path::new(arg(i + 1).context("--serve-floor DIR")?),
            floor_router(),
        );
    }
    if let Some(i) = args.iter().position(|a| a == SERVE_PEER) {
        return serve(
            Path::new(arg(i + 1).context("--serve-peer DIR")?),
            peer_router(),
        );
    }
    if args.iter().any(|a| a == EVAL) {
        return eval_only();
    }
    if args.iter().any(|a| a == ROTATION) {
        return rotation();
    }
    if let Some(i) = args.iter().position(|a| a == EVAL_COUNT) {
        let n: u64 = arg(i + 1)
            .and_then(|n| n.parse().ok())
            .context("--eval-count N [DIR]")?;
        return eval_count(n, arg(i + 2).map(Path::new));
    }
    if let Some(i) = args.iter().position(|a| a == SEND) {
        let usage = "--send ADDR PATH N CA_FILE [CONNECTIONS]";
        let addr: SocketAddr = arg(i + 1).and_then(|a| a.parse().ok()).context(usage)?;
        let path = arg(i + 2).context(usage)?;
        let n: u64 = arg(i + 3).and_then(|n| n.parse().ok()).context(usage)?;
        let ca = arg(i + 4).context(usage)?;
        let conns: usize = arg(i + 5).map_or(Ok(64), str::parse).context(usage)?;
        return send(addr, path, n, Path::new(ca), conns);
    }
    bench()
}

/// Argument that runs only the rotation pass, see [`rotation`].
const ROTATION: &str = "--rotation";
/// Paced rate of the rotation pass, requests per second.
const ROTATION_RATE: f64 = 500.0;

/// One request of the rotation pass.
struct Sent {
    /// Scheduled send time and actual send time.
    due: Instant,
    sent: Instant,
    end: Instant,
    /// `Ok(certificate index)`; `Err((refused before sending, message))`.
    got: Result<Option<usize>, (bool, String)>,
}

/// Certificate rotation and SIGTERM under an open-loop paced load, against the release `kim`
/// binary: requests are sent on a fixed 500/s schedule (a send is never held back by a slow
/// answer) over 16 keep-alive HTTP/1.1 clients; a Secret-volume style cert dir is swapped to a
/// certificate of a new CA after 3 s; SIGTERM after 6 s while the load goes on. Reports the
/// achieved rate, late sends (> 5 ms behind schedule), failures, swap -> new certificate on a
/// new connection, and the exit time.
fn rotation() -> anyhow::Result<()> {
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let one = devcerts::generate("rotation CA one", LOCALHOST).expect("generate certs");
        let two = devcerts::generate("rotation CA two", LOCALHOST).expect("generate certs");
        let (old_der, new_der) = (tls::der_of(&one.cert_pem), tls::der_of(&two.cert_pem));
        let mut kd = tls::KubeletDir::new(&one.cert_pem, &one.key_pem);
        let mut server = Server::kim(kd.path(), Some("warn"))?;
        let addr = server.addr;
        let cas = [one.ca_pem.as_str(), two.ca_pem.as_str()];
        let clients: Vec<reqwest::Client> = (0..16)
            .map(|_| tls::client(&cas, addr, true))
            .collect();
        let known = Arc::new(vec![old_der, new_der.clone()]);
        let bodies = Arc::new([
            ("/validate", reviews.validate.clone(), false),
            ("/mutate", reviews.mutate.clone(), true),
        ]);
        let start = Instant::now();
        let period = Duration::from_secs_f64(1.0 / ROTATION_RATE);
        let mut tasks = Vec::new();
        let (mut swapped, mut signalled, mut new_cert_after, mut exited) = (None, None, None, None);
        let probe = tls::builder(&cas, addr, true)
            .pool_max_idle_per_host(0)
            .build()?;
        for n in 0u64.. {
            let due = start + period * n as u32;
            tokio::time::sleep_until(due.into()).await;
            let now = Instant::now();
            if swapped.is_none() && now - start >= Duration::from_secs(3) {
                kd.swap(&two.cert_pem, &two.key_pem);
                let at = Instant::now();
                swapped = Some(at);
                // A fresh connection every 50 ms until it presents the new certificate.
                let (probe, new_der) = (probe.clone(), new_der.clone());
                new_cert_after = Some(tokio::spawn(async move {
                    while at.elapsed() < Duration::from_secs(20) {
                        if let Ok(r) = probe.get(tls::url(addr, "/healthz")).send().await
                            && tls::peer_cert(&r) == new_der
                        {
                            return Some(at.elapsed());
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    None
                }));
            }
            if signalled.is_none() && now - start >= Duration::from_secs(6) {
                Command::new("kill")
                    .arg("-TERM")
                    .arg(server.pid().to_string())
                    .status()?;
                signalled = Some(Instant::now());
            }
            if let Some(sig) = signalled {
                if exited.is_none()
                    && let Some(status) = server.child.try_wait()?
                {
                    exited = Some((Instant::now() - sig, status));
                }
                if now - sig >= Duration::from_secs(2) {
                    break;
                }
            }
            let client = clients[n as usize % clients.len()].clone();
            let (bodies, known) = (bodies.clone(), known.clone());
            tasks.push(tokio::spawn(async move {
                let (path, template, patch) = &bodies[n as usize % 2];
                let uid = format!("{n:08}-0000-4000-8000-000000000000");
                let body = String::from_utf8_lossy(template).replace(UID_PLACEHOLDER, &uid);
                let sent = Instant::now();
                let r = client
                    .post(tls::url(addr, path))
                    .header("content-type", "application/json")
                    .body(body)
                    .send()
                    .await;
                let got = match r {
                    Err(e) => Err((e.is_connect(), e.to_string())),
                    Ok(resp) => {
                        let cert = resp
                            .extensions()
                            .get::<reqwest::tls::TlsInfo>()
                            .and_then(|i| i.peer_certificate())
                            .and_then(|d| known.iter().position(|k| k == d));
                        match resp.bytes().await {
                            Err(e) => Err((false, e.to_string())),
                            Ok(b) => check_answer(
                                &b,
                                &uid,
                                Expect {
                                    uid: None,
                                    patch: *patch,
                                },
                            )
                            .map(|()| cert)
                            .map_err(|m| (false, m)),
                        }
                    }
                };
                Sent {
                    due,
                    sent,
                    end: Instant::now(),
                    got,
                }
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await?);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while exited.is_none() && Instant::now() < deadline {
            if let Some(status) = server.child.try_wait()? {
                exited = Some((signalled.map_or(Duration::ZERO, |s| s.elapsed()), status));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let sig = signalled.context("no SIGTERM sent")?;
        let before: Vec<&Sent> = all.iter().filter(|s| s.sent < sig).collect();
        let ok_before = before.iter().filter(|s| s.got.is_ok()).count();
        let failed_before: Vec<&String> = before
            .iter()
            .filter_map(|s| s.got.as_ref().err().map(|e| &e.1))
            .collect();
        let after: Vec<&Sent> = all.iter().filter(|s| s.sent >= sig).collect();
        let refused = after
            .iter()
            .filter(|s| matches!(s.got, Err((true, _))))
            .count();
        let broken: Vec<&String> = after
            .iter()
            .filter_map(|s| match &s.got {
                Err((false, m)) => Some(m),
                _ => None,
            })
            .collect();
        let late = all
            .iter()
            .filter(|s| s.sent - s.due > Duration::from_millis(5))
            .count();
        let window = (sig - start).as_secs_f64();
        let new_cert_answers = before
            .iter()
            .filter(|s| matches!(s.got, Ok(Some(1))))
            .count();
        let mut lat: Vec<f64> = before
            .iter()
            .filter(|s| s.got.is_ok())
            .map(|s| (s.end - s.sent).as_secs_f64() * 1e3)
            .collect();
        lat.sort_by(f64::total_cmp);
        let p99 = lat
            .get((lat.len() * 99 / 100).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(f64::NAN);
        println!("== rotation pass, release kim binary, RUST_LOG=warn");
        println!(
            "paced load: {ROTATION_RATE} req/s open loop over 16 keep-alive HTTP/1.1 clients, /validate and /mutate alternating; {} sends, {late} more than 5 ms late",
            all.len()
        );
        println!(
            "before SIGTERM ({window:.1} s): {ok_before} correct answers = {:.0} answers/s, {} failed{}; p99 {p99:.1} ms; {new_cert_answers} answers on connections with the new certificate",
            ok_before as f64 / window,
            failed_before.len(),
            failed_before
                .first()
                .map_or(String::new(), |m| format!(" (e.g. {m})"))
        );
        let new_cert_after = match new_cert_after {
            Some(t) => t.await?,
            None => None,
        };
        println!(
            "certificate swap -> new certificate on a new connection: {}",
            new_cert_after.map_or("not seen within 20 s".to_string(), |d| format!(
                "{:.0} ms",
                d.as_secs_f64() * 1e3
            ))
        );
        println!(
            "after SIGTERM: {} sends, {} answered, {refused} refused connections (never accepted), {} failed after sending{}",
            after.len(),
            after.iter().filter(|s| s.got.is_ok()).count(),
            broken.len(),
            broken.first().map_or(String::new(), |m| format!(" (e.g. {m})"))
        );
        println!(
            "exit after SIGTERM: {}",
            exited.map_or("did not exit within 30 s".to_string(), |(d, st)| format!(
                "{:.0} ms, {st}",
                d.as_secs_f64() * 1e3
            ))
        );
        Ok(())
    })
}

/// Argument for instruction counting (`valgrind --tool=callgrind`): builds the reviews,
/// optionally writes them to DIR (`validate.json`, `mutate.json`, `kim-era.json`), then runs
/// each evaluation N times and exits; no servers. `WEBHOOK_BENCH_EVAL_HOOK` selects one:
/// `validate`, `mutate`, `kim-era` (kim), `peer-validate`, `peer-mutate`, `skip` (serde_json
/// skipping the /validate body).
const EVAL_COUNT: &str = "--eval-count";

fn eval_count(n: u64, dump: Option<&Path>) -> anyhow::Result<()> {
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    if let Some(dir) = dump {
        std::fs::write(dir.join("validate.json"), &reviews.validate)?;
        std::fs::write(dir.join("mutate.json"), &reviews.mutate)?;
        std::fs::write(dir.join("kim-era.json"), &reviews.kim_era)?;
    }
    let now = Utc::now();
    let only = std::env::var("WEBHOOK_BENCH_EVAL_HOOK").unwrap_or_default();
    let kim = |hook: Hook, body: &[u8]| {
        std::hint::black_box(admission::review(
            hook,
            &policy,
            std::hint::black_box(body),
            now,
        ));
    };
    let peer = |hook: Hook, body: &[u8]| {
        std::hint::black_box(peer_in_process(
            &policy,
            hook,
            std::hint::black_box(body),
            now,
        ));
    };
    let skip = |body: &[u8]| {
        let _ = std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(
            std::hint::black_box(body),
        ));
    };
    let runs: [(&str, &dyn Fn()); 6] = [
        ("validate", &|| kim(Hook::Validate, &reviews.validate)),
        ("mutate", &|| kim(Hook::Mutate, &reviews.mutate)),
        ("kim-era", &|| kim(Hook::Validate, &reviews.kim_era)),
        ("peer-validate", &|| peer(Hook::Validate, &reviews.validate)),
        ("peer-mutate", &|| peer(Hook::Mutate, &reviews.mutate)),
        ("skip", &|| skip(&reviews.validate)),
    ];
    for (name, run) in runs {
        // Without a selection: kim's two hooks only, as before.
        let selected = if only.is_empty() {
            name == "validate" || name == "mutate"
        } else {
            only == name
        };
        if selected {
            for _ in 0..n {
                run();
            }
        }
    }
    println!(
        "{n} evaluations each (/validate {} bytes, /mutate {} bytes, KIM-era /validate {} bytes)",
        reviews.validate.len(),
        reviews.mutate.len(),
        reviews.kim_era.len()
    );
    Ok(())
}

/// Argument that sends N reviews to a server started by hand (`kim webhook` under valgrind or
/// `perf record`, or this binary with `--serve-floor`/`--serve-peer`), closed loop over the
/// given number of connections, every answer checked; prints the count and the wall time.
const SEND: &str = "--send";

fn send(addr: SocketAddr, path: &str, n: u64, ca: &Path, conns: usize) -> anyhow::Result<()> {
    kim::testing::webhook::certs::install_default_provider();
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    CA_PEM
        .set(std::fs::read(ca).with_context(|| format!("reading {}", ca.display()))?)
        .map_err(|_| anyhow!("CA set twice"))?;
    let (path, body, patch): (&'static str, &Vec<u8>, bool) = match path {
        "/validate" => ("/validate", &reviews.validate, false),
        "/mutate" => ("/mutate", &reviews.mutate, true),
        other => bail!("path {other:?}: /validate or /mutate"),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let started = Instant::now();
    let pass = rt.block_on(closed_loop(
        None,
        Job {
            addr,
            path,
            template: Arc::new(body.clone()),
            uid_at: uid_at(body)?,
            expect: Expect { uid: None, patch },
            warmup: Duration::ZERO,
            measure: Duration::from_secs(3600),
            remaining: Some(Arc::new(AtomicI64::new(n as i64))),
        },
        conns,
    ))?;
    println!(
        "{} answers checked, {} errors{}, {:.2} s",
        pass.requests,
        pass.errors,
        pass.first_error
            .map_or(String::new(), |e| format!(" (first: {e})")),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    warmup: Duration,
    measure: Duration,
    paced: Duration,
    paced_rate: f64,
    eval: Duration,
    connections: usize,
    rounds: u32,
    pin: bool,
    /// `RUST_LOG` of the kim child; `None`: unset (kim's default).
    kim_rust_log: Option<String>,
}

impl Config {
    fn from_env(cores: usize) -> anyhow::Result<Config> {
        let number = |name: &str, default: f64| -> anyhow::Result<f64> {
            match std::env::var(name) {
                Ok(v) => {
                    let s: f64 = v.trim().parse().with_context(|| format!("{name}={v:?}"))?;
                    ensure!(s >= 0.0 && s.is_finite(), "{name}={v:?}: not a number >= 0");
                    Ok(s)
                }
                Err(_) => Ok(default),
            }
        };
        let secs = |name: &str, default: f64| number(name, default).map(Duration::from_secs_f64);
        let connections = number("WEBHOOK_BENCH_CONNECTIONS", 64.0)? as usize;
        ensure!(connections >= 1, "WEBHOOK_BENCH_CONNECTIONS must be >= 1");
        let measure = secs("WEBHOOK_BENCH_SECS", 8.0)?;
        ensure!(!measure.is_zero(), "WEBHOOK_BENCH_SECS must be > 0");
        let paced = secs("WEBHOOK_BENCH_PACED_SECS", 8.0)?;
        ensure!(!paced.is_zero(), "WEBHOOK_BENCH_PACED_SECS must be > 0");
        let paced_rate = number("WEBHOOK_BENCH_PACED_RATE", 2000.0)?;
        ensure!(paced_rate >= 1.0, "WEBHOOK_BENCH_PACED_RATE must be >= 1");
        Ok(Config {
            warmup: secs("WEBHOOK_BENCH_WARMUP_SECS", 0.5)?,
            measure,
            paced,
            paced_rate,
            eval: secs("WEBHOOK_BENCH_EVAL_SECS", 3.0)?,
            connections,
            rounds: (number("WEBHOOK_BENCH_ROUNDS", 4.0)? as u32).max(1),
            pin: cores >= 2 && std::env::var("WEBHOOK_BENCH_PIN").map_or(true, |v| v.trim() != "0"),
            kim_rust_log: std::env::var("WEBHOOK_BENCH_KIM_RUST_LOG")
                .ok()
                .filter(|v| !v.is_empty()),
        })
    }
}

// ---------------------------------------------------------------------------------------------
// The reviews

/// An object's field set in `FieldsV1` form, as the apiserver records it in `managedFields`:
/// `f:<name>` per field, `"."` for a map that is itself owned, lists atomic (`{}`) except the
/// list-type map `status.conditions`, keyed `k:{"type":…}`.
fn fields_v1(v: &Value, owned: bool) -> Value {
    match v {
        Value::Object(m) => {
            let mut out = Map::new();
            if owned {
                out.insert(".".into(), json!({}));
            }
            for (k, x) in m {
                let sub = if k == "conditions" {
                    let mut keyed = Map::new();
                    for c in x.as_array().into_iter().flatten() {
                        let key = format!("k:{{\"type\":{}}}", c["type"]);
                        keyed.insert(key, fields_v1(c, true));
                    }
                    Value::Object(keyed)
                } else {
                    fields_v1(x, true)
                };
                out.insert(format!("f:{k}"), sub);
            }
            Value::Object(out)
        }
        _ => json!({}),
    }
}

fn entry(manager: &str, operation: &str, sub: Option<&str>, time: &str, fields: Value) -> Value {
    let mut e = json!({
        "apiVersion": "infrastructuremanager.kyma-project.io/v1",
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
        "manager": manager,
        "operation": operation,
        "time": time,
    });
    if let Some(s) = sub {
        e["subresource"] = json!(s);
    }
    e
}

/// The managedFields of a Runtime that KEB created and updated, SREs edited with kubectl, the
/// original KIM controller labelled, and the reconciler (`kim`) keeps the status of.
fn managed_fields(obj: &Value) -> Value {
    let meta = &obj["metadata"];
    let keb_fields = json!({
        "f:metadata": {"f:labels": fields_v1(&meta["labels"], true)},
        "f:spec": fields_v1(&obj["spec"], true),
    });
    let sre_fields = json!({
        "f:spec": {"f:shoot": {
            "f:kubernetes": {"f:version": {}},
            "f:provider": {"f:workers": {}},
        }},
    });
    let kim_labels = json!({
        "f:metadata": {
            "f:annotations": fields_v1(&meta["annotations"], true),
            "f:finalizers": {".": {}, "v:\"runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook\"": {}},
        },
    });
    let status_fields = json!({"f:status": fields_v1(&obj["status"], true)});
    json!([
        entry(
            "kyma-environment-broker",
            "Update",
            None,
            "2026-11-01T09:59:00Z",
            keb_fields.clone()
        ),
        entry(
            "kyma-environment-broker",
            "Apply",
            None,
            "2026-11-01T10:00:20Z",
            keb_fields
        ),
        entry(
            "kubectl-edit",
            "Update",
            None,
            "2026-11-01T10:00:40Z",
            sre_fields
        ),
        entry(
            "infrastructure-manager",
            "Update",
            None,
            "2026-11-01T10:00:41Z",
            kim_labels
        ),
        entry(
            "kim",
            "Update",
            Some("status"),
            "2026-11-01T10:01:00Z",
            status_fields
        ),
    ])
}

/// A stored Runtime as the apiserver sends it: creation timestamp, annotations, finalizer and
/// managedFields.
fn as_stored(rt: &model::Rt) -> Value {
    let mut o = rt.obj.clone();
    let meta = &mut o["metadata"];
    meta["creationTimestamp"] = json!("2026-11-01T09:59:00Z");
    meta["annotations"] = json!({
        "operator.kyma-project.io/existing-runtime": "false",
        "infrastructuremanager.kyma-project.io/shoot-spec-hash": "4c2a9f0e6b1d7c3a",
    });
    meta["finalizers"] =
        json!(["runtime-controller.infrastructure-manager.kyma-project.io/deletion-hook"]);
    let mf = managed_fields(&o);
    o["metadata"]["managedFields"] = mf;
    o
}

struct Reviews {
    /// Sent to `/mutate`: the writer left out `lastTransitionTime` and `message` of every
    /// condition, so kim answers with a defaulting JSONPatch.
    mutate: Vec<u8>,
    /// Sent to `/validate`: the same write after the patch (what the apiserver sends to the
    /// validating webhook after the mutating one).
    validate: Vec<u8>,
    /// A `/validate` review of a Runtime KIM wrote in 2024: its stored status keeps conditions
    /// of types KIM has retired since (`AuditlogConfigured`, `OidcConfigured`), which every
    /// later write carries unchanged, so each review ratchets them (evaluation only).
    kim_era: Vec<u8>,
    /// Operations in the mutate answer's patch.
    patch_ops: usize,
    /// Ratcheted violations of the KIM-era review.
    kim_era_ratcheted: usize,
}

fn build_reviews(policy: &Policy) -> anyhow::Result<Reviews> {
    let (_, sample) = model::sample_runtimes()
        .into_iter()
        .find(|(name, _)| name == "infrastructuremanager_v1_runtime.yaml")
        .context("sample infrastructuremanager_v1_runtime.yaml")?;
    let seq = model::lifecycle(sample.clone());
    // Update flow, "Pending -> Ready" after the configuration completed (three conditions).
    let (old, new) = (&seq[7], &seq[8]);
    ensure!(new.obj["status"]["state"] == "Ready" && old.obj["status"]["state"] == "Pending");
    let stripped = new.with(|o| {
        for c in o["status"]["conditions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            let c = c.as_object_mut().expect("condition object");
            c.remove("lastTransitionTime");
            c.remove("message");
        }
    });
    let review = |old: &model::Rt, new: &model::Rt| -> Value {
        let mut r = model::status_review(
            UID_PLACEHOLDER,
            old,
            new,
            model::RECONCILER,
            &[
                "system:serviceaccounts",
                "system:serviceaccounts:kim-system",
                "system:authenticated",
            ],
            false,
        );
        r["request"]["object"] = as_stored(new);
        r["request"]["oldObject"] = as_stored(old);
        r
    };
    let mutate = serde_json::to_vec(&review(old, &stripped))?;
    let now = Utc::now();
    let m = admission::review(Hook::Mutate, policy, &mutate, now);
    ensure!(m.allowed && m.patched, "mutate review: {}", m.detail);
    let patch = model::patch_of(&model::response_of(&m.body, UID_PLACEHOLDER))
        .context("mutate answer has a patch")?;
    let mut patched = review(old, &stripped);
    json_patch::patch(&mut patched["request"]["object"], &patch)?;
    let validate = serde_json::to_vec(&patched)?;
    let v = admission::review(Hook::Validate, policy, &validate, now);
    ensure!(v.allowed && !v.patched, "validate review: {}", v.detail);

    // KIM's update of a Runtime it provisioned in 2024-10: Ready -> Pending, the retired
    // conditions left as they were.
    let era = model::Rt::new(sample)
        .write(
            "Ready",
            &[
                ("Provisioned", "True", "ShootCreationCompleted"),
                ("KubeconfigReady", "True", "GardenerClusterCRReady"),
                ("AuditlogConfigured", "True", "AuditLogConfigured"),
                ("OidcConfigured", "True", "OidcConfigured"),
                ("Configured", "True", "ConfigurationCompleted"),
            ],
        )
        .completed();
    let era_write = era
        .bump_generation()
        .write("Pending", &[("Provisioned", "Unknown", "Processing")]);
    let kim_era = serde_json::to_vec(&review(&era, &era_write))?;
    let k = admission::review(Hook::Validate, policy, &kim_era, now);
    let kim_era_ratcheted = k
        .violations
        .iter()
        .filter(|(_, a)| *a == status::Action::Ratcheted)
        .count();
    ensure!(
        k.allowed && kim_era_ratcheted >= 2,
        "KIM-era review: allowed {}, {kim_era_ratcheted} ratcheted: {}",
        k.allowed,
        k.detail
    );
    Ok(Reviews {
        mutate,
        validate,
        kim_era,
        patch_ops: patch.0.len(),
        kim_era_ratcheted,
    })
}

fn uid_at(body: &[u8]) -> anyhow::Result<usize> {
    body.windows(UID_PLACEHOLDER.len())
        .position(|w| w == UID_PLACEHOLDER.as_bytes())
        .context("uid placeholder in the review")
}

// ---------------------------------------------------------------------------------------------
// The floor (a) and the peer (b): servers run by this binary as child processes

/// Serves `app` over HTTPS with kim's exact rustls `ServerConfig`
/// (`kim::testing::webhook::certs::load_dir`) on the runtime `kim webhook` uses (multi-threaded, one
/// worker per core); prints `PORT <port>` once listening.
fn serve(dir: &Path, app: axum::Router) -> anyhow::Result<()> {
    kim::testing::webhook::certs::install_default_provider();
    let (_, loaded) = kim::testing::webhook::certs::load_dir(dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let tls = axum_server::tls_rustls::RustlsConfig::from_config(loaded.config);
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)?;
        println!("PORT {port}");
        std::io::stdout().flush()?;
        server.serve(app.into_make_service()).await?;
        Ok(())
    })
}

fn floor_router() -> axum::Router {
    use axum::routing::post;
    axum::Router::new()
        .route("/validate", post(floor))
        .route("/mutate", post(floor))
}

/// The floor's handler: the whole body read (axum's `Bytes` extractor), a constant answer.
async fn floor(body: Bytes) -> impl axum::response::IntoResponse {
    std::hint::black_box(body.len());
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        FLOOR_ANSWER,
    )
}

fn peer_router() -> axum::Router {
    use axum::extract::{DefaultBodyLimit, Json, State};
    use axum::routing::post;
    type Review = AdmissionReview<DynamicObject>;
    async fn validate(State(p): State<Arc<Policy>>, Json(r): Json<Review>) -> Json<Value> {
        Json(peer_answer(&p, Hook::Validate, r, Utc::now()))
    }
    async fn mutate(State(p): State<Arc<Policy>>, Json(r): Json<Review>) -> Json<Value> {
        Json(peer_answer(&p, Hook::Mutate, r, Utc::now()))
    }
    axum::Router::new()
        .route("/validate", post(validate))
        .route("/mutate", post(mutate))
        // kim's limit (axum's default is 2 MB).
        .layer(DefaultBodyLimit::max(kim::webhook::BODY_LIMIT))
        .with_state(Arc::new(Policy::builtin()))
}

/// An object as a kube-rs user reads it: as the typed `kim::api::Runtime`
/// (`DynamicObject::try_parse` is `serde_json::to_value` + `from_value`; here `deserialize`
/// from the same `Value`, which skips one copy), and its JSON for kim's evaluation
/// (`serde_json::to_value` of the typed object). An object the typed Runtime cannot hold is
/// evaluated as received: k8s-openapi's `Condition` requires `lastTransitionTime`, which is
/// what `/mutate` is there to default.
fn peer_object(obj: &DynamicObject) -> Value {
    let Ok(raw) = serde_json::to_value(obj) else {
        return Value::Null;
    };
    match kim::api::Runtime::deserialize(&raw) {
        Ok(rt) => serde_json::to_value(&rt).unwrap_or(raw),
        Err(_) => raw,
    }
}

/// The peer's answer to a review, as a kube-rs webhook builds it: `AdmissionRequest` from the
/// review, `AdmissionResponse::from(&req)`, kim's `status::validate` (denial message, code and
/// warnings) or `status::mutate` (its patch applied to the object's JSON, the response's patch
/// the `json_patch::diff` of before and after, `AdmissionResponse::with_patch`).
///
/// kube-core serialises `AdmissionResponse.patch` (`Vec<u8>`) as an array of numbers
/// (kube-rs/kube#1781); the API server expects a base64 string. So the patch is taken out of
/// the response before it is serialised and put back in as base64: `patchType` stays, set by
/// `with_patch`.
fn peer_answer(
    policy: &Policy,
    hook: Hook,
    review: AdmissionReview<DynamicObject>,
    now: DateTime<Utc>,
) -> Value {
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return peer_encode(AdmissionResponse::invalid(e)),
    };
    let mut res = AdmissionResponse::from(&req);
    let (Some(new), Some(old)) = (&req.object, &req.old_object) else {
        res = res.deny("object and oldObject are required for a Runtime status UPDATE");
        res.result.code = 400;
        return peer_encode(res);
    };
    let facts = Facts {
        user: req.user_info.username.clone().unwrap_or_default(),
        groups: req.user_info.groups.clone().unwrap_or_default(),
        dry_run: req.dry_run,
        now,
    };
    let (old, new) = (peer_object(old), peer_object(new));
    let (old_s, new_s) = (Snapshot::of_object(&old), Snapshot::of_object(&new));
    match hook {
        Hook::Validate => {
            let violations = status::validate(policy, Some(&old_s), &new_s, &facts);
            if !violations.allowed() {
                res = res.deny(violations.denial_message());
                res.result.code = violations.denial_code();
            }
            let warnings = violations.warnings();
            if !warnings.is_empty() {
                res.warnings = Some(warnings);
            }
        }
        Hook::Mutate => {
            let patch = status::mutate(policy, Some(&old_s), &new_s, &facts);
            if !patch.0.is_empty() {
                let mut after = new.clone();
                if let Err(e) = json_patch::patch(&mut after, &patch) {
                    res = res.deny(format!("defaulting patch does not apply: {e}"));
                    res.result.code = 500;
                    return peer_encode(res);
                }
                res = match res.with_patch(json_patch::diff(&new, &after)) {
                    Ok(r) => r,
                    Err(e) => AdmissionResponse::invalid(e),
                };
            }
        }
    }
    peer_encode(res)
}

fn peer_encode(mut res: AdmissionResponse) -> Value {
    let patch = res.patch.take();
    let mut review = serde_json::to_value(res.into_review()).unwrap_or_default();
    if let Some(p) = patch {
        review["response"]["patch"] =
            Value::String(base64::engine::general_purpose::STANDARD.encode(p));
    }
    review
}

/// The peer's whole review in-process: what its handler does with a body (axum's `Json`
/// decodes with `serde_json::from_slice` and answers with `serde_json::to_vec`).
fn peer_in_process(policy: &Policy, hook: Hook, body: &[u8], now: DateTime<Utc>) -> Vec<u8> {
    match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(review) => {
            serde_json::to_vec(&peer_answer(policy, hook, review, now)).unwrap_or_default()
        }
        Err(_) => Vec::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// Child processes and /proc

/// A server child process, killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
    metrics_addr: Option<SocketAddr>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// This binary re-executed as the floor (`--serve-floor`) or the peer (`--serve-peer`).
    fn own(mode: &str, cert_dir: &Path) -> anyhow::Result<Server> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(mode)
            .arg(cert_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("re-executing the bench binary with {mode}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("child stdout")?).read_line(&mut line)?;
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("{mode} server said {line:?}"))?;
        Ok(Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            metrics_addr: None,
        })
    }

    fn kim(cert_dir: &Path, rust_log: Option<&str>) -> anyhow::Result<Server> {
        Server::kim_from(&kim_bin(), cert_dir, rust_log)
    }

    /// `kim webhook` of the binary `bin`.
    fn kim_from(bin: &Path, cert_dir: &Path, rust_log: Option<&str>) -> anyhow::Result<Server> {
        let addr = free_port()?;
        let metrics_addr = free_port()?;
        let mut cmd = Command::new(bin);
        cmd.arg("webhook")
            .arg("--cert-dir")
            .arg(cert_dir)
            .arg("--addr")
            .arg(addr.to_string())
            .arg("--metrics-addr")
            .arg(metrics_addr.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("KIM_") {
                cmd.env_remove(k);
            }
        }
        cmd.env_remove("RUST_LOG");
        if let Some(l) = rust_log {
            cmd.env("RUST_LOG", l);
        }
        let child = cmd.spawn().context("spawning kim webhook")?;
        let mut server = Server {
            child,
            addr,
            metrics_addr: Some(metrics_addr),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = server.child.try_wait()? {
                bail!("kim webhook exited during start-up: {status}");
            }
            if http_get(metrics_addr, "/readyz").is_ok_and(|r| r.starts_with("HTTP/1.0 200")) {
                return Ok(server);
            }
            ensure!(
                Instant::now() < deadline,
                "kim webhook not ready within 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `(sum seconds, count)` of kim's `request_duration_seconds` histogram for `path`.
    fn handler_time(&self, path: &str) -> Option<(f64, f64)> {
        let text = http_get(self.metrics_addr?, "/metrics").ok()?;
        let label = format!("path=\"{path}\"");
        let mut sum = 0.0;
        let mut count = 0.0;
        for line in text.lines() {
            let value = || line.rsplit(' ').next()?.parse::<f64>().ok();
            if !line.contains(&label) {
                continue;
            }
            if line.starts_with("kim_webhook_request_duration_seconds_sum{") {
                sum += value()?;
            } else if line.starts_with("kim_webhook_request_duration_seconds_count{") {
                count += value()?;
            }
        }
        Some((sum, count))
    }
}

/// The `kim` binary the bench runs: `WEBHOOK_BENCH_KIM_BIN` (another build, for a before/after
/// comparison in one run), else the one cargo built with this bench.
fn kim_bin() -> std::path::PathBuf {
    std::env::var_os("WEBHOOK_BENCH_KIM_BIN")
        .filter(|v| !v.is_empty())
        .map_or_else(|| env!("CARGO_BIN_EXE_kim").into(), Into::into)
}

/// Sets the CPU affinity of every thread of process `pid` (`taskset -a -p -c CPUS PID`);
/// threads started later inherit it.
fn pin(pid: u32, cpus: &str) -> anyhow::Result<()> {
    let out = Command::new("taskset")
        .args(["-a", "-p", "-c", cpus, &pid.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("running taskset (util-linux)")?;
    ensure!(
        out.status.success(),
        "taskset -a -p -c {cpus} {pid}: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

fn free_port() -> anyhow::Result<SocketAddr> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

/// A plain HTTP/1.0 GET; returns the whole response (status line included).
fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// ESTABLISHED TCP connections whose local port is `port` (the server side of the load).
fn established(port: u16) -> usize {
    let port_hex = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .map(|t| {
            t.lines()
                .skip(1)
                .filter(|l| {
                    let f: Vec<&str> = l.split_whitespace().collect();
                    f.len() > 3 && f[1].ends_with(&port_hex) && f[3] == "01"
                })
                .count()
        })
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Load generator

/// What a correct answer looks like.
#[derive(Clone, Copy)]
struct Expect {
    /// `None`: the request's own uid must be echoed; `Some(u)`: the constant `u`.
    uid: Option<&'static str>,
    /// A JSONPatch must (true) or must not (false) be present.
    patch: bool,
}

#[derive(Deserialize)]
struct Answer<'a> {
    #[serde(borrow)]
    response: AnswerResponse<'a>,
}

#[derive(Deserialize)]
struct AnswerResponse<'a> {
    uid: &'a str,
    allowed: bool,
    #[serde(rename = "patchType")]
    patch_type: Option<&'a str>,
    patch: Option<&'a str>,
}

fn check_answer(body: &[u8], uid: &str, expect: Expect) -> Result<(), String> {
    let a: Answer<'_> = serde_json::from_slice(body).map_err(|e| {
        format!(
            "answer is not a review ({e}): {}",
            String::from_utf8_lossy(body)
        )
    })?;
    let r = a.response;
    let want_uid = expect.uid.unwrap_or(uid);
    if r.uid != want_uid {
        return Err(format!("uid {:?}, expected {want_uid:?}", r.uid));
    }
    if !r.allowed {
        return Err(format!("denied: {}", String::from_utf8_lossy(body)));
    }
    let has_patch = r.patch.is_some() && r.patch_type == Some("JSONPatch");
    if has_patch != expect.patch {
        return Err(format!(
            "patch present: {has_patch}, expected {}",
            expect.patch
        ));
    }
    Ok(())
}

type Sender = http1::SendRequest<Full<Bytes>>;

async fn connect(addr: SocketAddr, tls: &tokio_rustls::TlsConnector) -> anyhow::Result<Sender> {
    tokio::time::timeout(REQUEST_TIMEOUT, connect_inner(addr, tls))
        .await
        .map_err(|_| anyhow!("no TLS connection within {REQUEST_TIMEOUT:?}"))?
}

async fn connect_inner(
    addr: SocketAddr,
    tls: &tokio_rustls::TlsConnector,
) -> anyhow::Result<Sender> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let stream = tls
        .connect(ServerName::try_from("localhost")?.to_owned(), tcp)
        .await?;
    let (_, conn) = stream.get_ref();
    ensure!(
        conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3),
        "negotiated {:?}, expected TLS 1.3",
        conn.protocol_version()
    );
    ensure!(
        conn.alpn_protocol() == Some(b"http/1.1".as_slice()),
        "ALPN {:?}, expected http/1.1",
        conn.alpn_protocol().map(String::from_utf8_lossy)
    );
    let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

async fn one_request(
    sender: &mut Sender,
    path: &'static str,
    body: Bytes,
) -> Result<Bytes, (bool, String)> {
    let req = hyper::Request::post(path)
        .header(hyper::header::HOST, "localhost")
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(body))
        .map_err(|e| (false, e.to_string()))?;
    sender
        .ready()
        .await
        .map_err(|e| (true, format!("connection: {e}")))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| (true, format!("request: {e}")))?;
    let status = resp.status();
    let bytes = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| (true, format!("response body: {e}")))?
        .to_bytes();
    if status != hyper::StatusCode::OK {
        return Err((false, format!("HTTP {status}")));
    }
    Ok(bytes)
}

#[derive(Default)]
struct TaskResult {
    latencies_ns: Vec<u64>,
    /// Paced loop: how late each measured review was sent (after its scheduled time).
    late_ns: Vec<u64>,
    errors: u64,
    reconnects: u64,
    first_error: Option<String>,
}

impl TaskResult {
    fn note(&mut self, msg: String) {
        self.errors += 1;
        self.first_error.get_or_insert(msg);
    }

    fn merge(&mut self, r: TaskResult) {
        self.latencies_ns.extend(r.latencies_ns);
        self.late_ns.extend(r.late_ns);
        self.errors += r.errors;
        self.reconnects += r.reconnects;
        if self.first_error.is_none() {
            self.first_error = r.first_error;
        }
    }
}

struct Job {
    addr: SocketAddr,
    path: &'static str,
    template: Arc<Vec<u8>>,
    uid_at: usize,
    expect: Expect,
    warmup: Duration,
    measure: Duration,
    /// Reviews left to send (`--send`); `None`: until the window ends.
    remaining: Option<Arc<AtomicI64>>,
}

impl Job {
    /// The template with a fresh uid: the body of one request.
    fn body(&self, uid: &str) -> Bytes {
        let mut body = self.template.as_ref().clone();
        body[self.uid_at..self.uid_at + UID_PLACEHOLDER.len()].copy_from_slice(uid.as_bytes());
        Bytes::from(body)
    }
}

/// One keep-alive connection of a load: (re)connects, sends, checks each answer.
struct Lane {
    id: usize,
    seq: u64,
    sender: Option<Sender>,
}

impl Lane {
    async fn open(
        id: usize,
        job: &Job,
        tls: &tokio_rustls::TlsConnector,
        res: &mut TaskResult,
    ) -> Lane {
        let sender = match connect(job.addr, tls).await {
            Ok(s) => Some(s),
            Err(e) => {
                res.note(format!("connect: {e:#}"));
                None
            }
        };
        Lane { id, seq: 0, sender }
    }

    /// Sends one review (reconnecting first if needed); `Some(answered at)` when it was
    /// answered correctly, `None` after an error (noted in `res`).
    async fn review(
        &mut self,
        job: &Job,
        tls: &tokio_rustls::TlsConnector,
        res: &mut TaskResult,
    ) -> Option<Instant> {
        if self.sender.is_none() {
            match connect(job.addr, tls).await {
                Ok(s) => {
                    res.reconnects += 1;
                    self.sender = Some(s);
                }
                Err(e) => {
                    res.note(format!("reconnect: {e:#}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    return None;
                }
            }
        }
        let s = self.sender.as_mut()?;
        self.seq += 1;
        let uid = format!("{:08x}-0000-4000-8000-{:012x}", self.id, self.seq);
        let answer =
            tokio::time::timeout(REQUEST_TIMEOUT, one_request(s, job.path, job.body(&uid)))
                .await
                .unwrap_or_else(|_| Err((true, format!("no answer within {REQUEST_TIMEOUT:?}"))));
        let done = Instant::now();
        match answer {
            Ok(bytes) => match check_answer(&bytes, &uid, job.expect) {
                Ok(()) => Some(done),
                Err(msg) => {
                    res.note(msg);
                    None
                }
            },
            Err((broken, msg)) => {
                res.note(msg);
                if broken {
                    self.sender = None;
                }
                None
            }
        }
    }
}

/// A closed-loop client: one connection, one review at a time, until the window ends.
async fn closed_task(
    id: usize,
    job: Arc<Job>,
    tls: tokio_rustls::TlsConnector,
    barrier: Arc<tokio::sync::Barrier>,
) -> TaskResult {
    let mut res = TaskResult::default();
    let mut lane = Lane::open(id, &job, &tls, &mut res).await;
    barrier.wait().await;
    let t0 = Instant::now();
    let (from, until) = (t0 + job.warmup, t0 + job.warmup + job.measure);
    while Instant::now() < until {
        if let Some(left) = &job.remaining
            && left.fetch_sub(1, Ordering::Relaxed) <= 0
        {
            break;
        }
        let started = Instant::now();
        if let Some(done) = lane.review(&job, &tls, &mut res).await
            && done >= from
            && done <= until
        {
            res.latencies_ns.push((done - started).as_nanos() as u64);
        }
    }
    res
}

/// An open-loop client: takes the next scheduled review from the dispatcher, sends it on its
/// connection, records its latency from the scheduled time.
async fn paced_task(
    id: usize,
    job: Arc<Job>,
    tls: tokio_rustls::TlsConnector,
    barrier: Arc<tokio::sync::Barrier>,
    due: Arc<tokio::sync::Mutex<tokio::sync::mpsc::UnboundedReceiver<Instant>>>,
    from: Arc<std::sync::OnceLock<Instant>>,
) -> TaskResult {
    let mut res = TaskResult::default();
    let mut lane = Lane::open(id, &job, &tls, &mut res).await;
    barrier.wait().await;
    loop {
        let next = due.lock().await.recv().await;
        let Some(scheduled) = next else { break };
        let sent = Instant::now();
        if let Some(done) = lane.review(&job, &tls, &mut res).await
            && from.get().is_some_and(|f| scheduled >= *f)
        {
            res.latencies_ns.push((done - scheduled).as_nanos() as u64);
            res.late_ns
                .push(sent.saturating_duration_since(scheduled).as_nanos() as u64);
        }
    }
    res
}

/// Snapshot taken at the start and the end of the measured window.
struct Probe {
    at: Instant,
    server_cpu: f64,
    client_cpu: f64,
    handler: Option<(f64, f64)>,
}

fn probe(server: Option<&Server>, path: &str) -> Probe {
    Probe {
        at: Instant::now(),
        server_cpu: server.map_or(f64::NAN, |s| {
            procinfo::cpu_secs(s.pid()).unwrap_or(f64::NAN)
        }),
        client_cpu: procinfo::self_cpu_secs(),
        handler: server.and_then(|s| s.handler_time(path)),
    }
}

/// The figures of one pass over one server and hook.
#[derive(Default)]
struct Pass {
    requests: u64,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    p999_us: f64,
    max_us: f64,
    /// Paced loop: p99 of how late reviews were sent after their scheduled time.
    late_p99_us: f64,
    errors: u64,
    reconnects: u64,
    first_error: Option<String>,
    /// CPU µs per review of the server process / of the load generator.
    server_cpu_us: f64,
    client_cpu_us: f64,
    /// Server CPU time over the window, in cores (1.0 = one core busy all the time).
    server_cores: f64,
    /// kim's own mean server time per review (its `request_duration_seconds` histogram).
    handler_mean_us: Option<f64>,
    established: usize,
    /// Measured window, seconds.
    window_s: f64,
    /// Server CPU µs per review of each round ([`merge`]); one value for a single pass.
    server_cpu_rounds: Vec<f64>,
    /// The latencies and send delays behind the percentiles (ns, sorted).
    latencies_ns: Vec<u64>,
    late_ns: Vec<u64>,
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64 / 1000.0
}

fn figures(
    mut all: TaskResult,
    p0: &Probe,
    p1: &Probe,
    window: Duration,
    established: usize,
) -> Pass {
    let lat = &mut all.latencies_ns;
    lat.sort_unstable();
    all.late_ns.sort_unstable();
    let n = lat.len() as u64;
    // CPU over the probes' interval, scaled to the window the reviews were counted in.
    let probed = (p1.at - p0.at).as_secs_f64();
    let per_review = |d: f64| d / n.max(1) as f64 * 1e6 * window.as_secs_f64() / probed;
    let handler_mean_us = match (p0.handler, p1.handler) {
        (Some((s0, c0)), Some((s1, c1))) if c1 > c0 => Some((s1 - s0) / (c1 - c0) * 1e6),
        _ => None,
    };
    let server_cpu_us = per_review(p1.server_cpu - p0.server_cpu);
    Pass {
        requests: n,
        rps: n as f64 / window.as_secs_f64(),
        p50_us: percentile(lat, 0.50),
        p99_us: percentile(lat, 0.99),
        p999_us: percentile(lat, 0.999),
        max_us: lat.last().map_or(f64::NAN, |&x| x as f64 / 1000.0),
        late_p99_us: percentile(&all.late_ns, 0.99),
        errors: all.errors,
        reconnects: all.reconnects,
        first_error: all.first_error,
        server_cpu_us,
        client_cpu_us: per_review(p1.client_cpu - p0.client_cpu),
        server_cores: (p1.server_cpu - p0.server_cpu) / probed,
        handler_mean_us,
        established,
        window_s: window.as_secs_f64(),
        server_cpu_rounds: vec![server_cpu_us],
        latencies_ns: all.latencies_ns,
        late_ns: all.late_ns,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// One server and hook's rounds as one pass: CPU figures are the median round (robust to a
/// round that other processes on the machine disturbed), latencies and counts pooled.
fn merge(rounds: Vec<Pass>) -> Pass {
    let mut lat: Vec<u64> = rounds
        .iter()
        .flat_map(|p| p.latencies_ns.iter().copied())
        .collect();
    let mut late: Vec<u64> = rounds
        .iter()
        .flat_map(|p| p.late_ns.iter().copied())
        .collect();
    lat.sort_unstable();
    late.sort_unstable();
    let requests: u64 = rounds.iter().map(|p| p.requests).sum();
    let window_s: f64 = rounds.iter().map(|p| p.window_s).sum();
    let med = |f: fn(&Pass) -> f64| median(rounds.iter().map(f).collect());
    let handler: Vec<f64> = rounds.iter().filter_map(|p| p.handler_mean_us).collect();
    Pass {
        requests,
        rps: requests as f64 / window_s,
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
        p999_us: percentile(&lat, 0.999),
        max_us: lat.last().map_or(f64::NAN, |&x| x as f64 / 1000.0),
        late_p99_us: percentile(&late, 0.99),
        errors: rounds.iter().map(|p| p.errors).sum(),
        reconnects: rounds.iter().map(|p| p.reconnects).sum(),
        first_error: rounds.iter().find_map(|p| p.first_error.clone()),
        server_cpu_us: med(|p| p.server_cpu_us),
        client_cpu_us: med(|p| p.client_cpu_us),
        server_cores: med(|p| p.server_cores),
        handler_mean_us: (!handler.is_empty()).then(|| median(handler)),
        // The first round that saw another count than the others, else the common count.
        established: rounds
            .iter()
            .map(|p| p.established)
            .find(|&e| e != rounds[0].established)
            .unwrap_or_else(|| rounds.first().map_or(0, |p| p.established)),
        window_s,
        server_cpu_rounds: rounds.iter().map(|p| p.server_cpu_us).collect(),
        latencies_ns: Vec::new(),
        late_ns: Vec::new(),
    }
}

/// Closed loop over `connections` connections: warm-up, then the measured window.
async fn closed_loop(
    server: Option<&Server>,
    job: Job,
    connections: usize,
) -> anyhow::Result<Pass> {
    let tls = tls_connector()?;
    let job = Arc::new(job);
    let barrier = Arc::new(tokio::sync::Barrier::new(connections + 1));
    let tasks: Vec<_> = (0..connections)
        .map(|id| tokio::spawn(closed_task(id, job.clone(), tls.clone(), barrier.clone())))
        .collect();
    barrier.wait().await;
    let t0 = Instant::now();
    let mut p0 = probe(server, job.path);
    let mut p1 = p0.clone_at(t0);
    let mut conns = 0;
    if job.remaining.is_none() {
        tokio::time::sleep_until((t0 + job.warmup).into()).await;
        p0 = probe(server, job.path);
        tokio::time::sleep_until((t0 + job.warmup + job.measure / 2).into()).await;
        conns = established(job.addr.port());
        tokio::time::sleep_until((t0 + job.warmup + job.measure).into()).await;
        p1 = probe(server, job.path);
    }
    let mut all = TaskResult::default();
    for t in tasks {
        all.merge(t.await?);
    }
    // Lets the connections' tasks see their senders gone and close (on a current-thread
    // runtime they run only while it is driven).
    tokio::time::sleep(Duration::from_millis(30)).await;
    let window = if job.remaining.is_some() {
        t0.elapsed()
    } else {
        job.measure
    };
    Ok(figures(all, &p0, &p1, window, conns))
}

impl Probe {
    fn clone_at(&self, at: Instant) -> Probe {
        Probe {
            at,
            server_cpu: self.server_cpu,
            client_cpu: self.client_cpu,
            handler: self.handler,
        }
    }
}

/// Open loop at `rate` reviews/s over `connections` connections: a dispatcher thread
/// schedules review n at `start + n / rate` (sleeping, not spinning) and hands its scheduled
/// time to the next free connection; latency counts from the scheduled time.
async fn paced_loop(
    server: &Server,
    job: Job,
    connections: usize,
    rate: f64,
) -> anyhow::Result<Pass> {
    let tls = tls_connector()?;
    let job = Arc::new(job);
    let barrier = Arc::new(tokio::sync::Barrier::new(connections + 1));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let from = Arc::new(std::sync::OnceLock::new());
    let tasks: Vec<_> = (0..connections)
        .map(|id| {
            tokio::spawn(paced_task(
                id,
                job.clone(),
                tls.clone(),
                barrier.clone(),
                rx.clone(),
                from.clone(),
            ))
        })
        .collect();
    barrier.wait().await;
    let start = Instant::now() + Duration::from_millis(20);
    let (warm_until, until) = (start + job.warmup, start + job.warmup + job.measure);
    let _ = from.set(warm_until);
    let period = Duration::from_secs_f64(1.0 / rate);
    let dispatcher = std::thread::spawn(move || {
        for n in 0u32.. {
            let due = start + period * n;
            if due >= until {
                break;
            }
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            if tx.send(due).is_err() {
                break;
            }
        }
    });
    tokio::time::sleep_until(warm_until.into()).await;
    let p0 = probe(Some(server), job.path);
    tokio::time::sleep_until((warm_until + job.measure / 2).into()).await;
    let conns = established(job.addr.port());
    tokio::time::sleep_until(until.into()).await;
    let p1 = probe(Some(server), job.path);
    let mut all = TaskResult::default();
    for t in tasks {
        all.merge(t.await?);
    }
    dispatcher
        .join()
        .map_err(|_| anyhow!("dispatcher thread panicked"))?;
    tokio::time::sleep(Duration::from_millis(30)).await;
    Ok(figures(all, &p0, &p1, job.measure, conns))
}

static CA_PEM: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

fn tls_connector() -> anyhow::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(CA_PEM.get().context("CA not loaded")?) {
        roots.add(cert?)?;
    }
    let mut config =
        rustls::ClientConfig::builder_with_provider(kim::testing::webhook::certs::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

// ---------------------------------------------------------------------------------------------
// Evaluation only

/// One evaluation loop: its label and the thread CPU µs per call of each round.
struct Eval {
    label: &'static str,
    rounds_us: Vec<f64>,
}

impl Eval {
    /// The median round, CPU µs per call.
    fn us(&self) -> f64 {
        median(self.rounds_us.clone())
    }
}

/// Runs each loop for `total / EVAL_ROUNDS` per round, the loops taking turns, and records the
/// thread's CPU time per call (`/proc/thread-self/stat`, robust to other load).
fn eval_rounds(total: Duration, loops: &mut [(&'static str, &mut dyn FnMut())]) -> Vec<Eval> {
    let per_round = total / EVAL_ROUNDS;
    // Short warm-up (caches, allocator).
    for (_, f) in loops.iter_mut() {
        let warm = Instant::now();
        while warm.elapsed() < per_round.min(Duration::from_millis(100)) {
            f();
        }
    }
    let mut out: Vec<Eval> = loops
        .iter()
        .map(|(label, _)| Eval {
            label,
            rounds_us: Vec::new(),
        })
        .collect();
    for _ in 0..EVAL_ROUNDS {
        for (i, (_, f)) in loops.iter_mut().enumerate() {
            let start = Instant::now();
            let cpu0 = procinfo::thread_cpu_secs();
            let mut n: u64 = 0;
            loop {
                for _ in 0..32 {
                    f();
                }
                n += 32;
                if start.elapsed() >= per_round {
                    break;
                }
            }
            let cpu = procinfo::thread_cpu_secs() - cpu0;
            out[i].rounds_us.push(cpu / n as f64 * 1e6);
        }
    }
    out
}

/// Evaluation alone on one thread: kim's two hooks and the KIM-era review, serde_json skipping
/// each body, and the peer's whole review in-process.
fn evaluations(cfg: &Config, policy: &Policy, reviews: &Reviews, now: DateTime<Utc>) -> Vec<Eval> {
    println!(
        "-- evaluation only ({:.1} s per loop in {EVAL_ROUNDS} interleaved rounds, one thread) ...",
        cfg.eval.as_secs_f64()
    );
    let (rv, rm, rk) = (&reviews.validate, &reviews.mutate, &reviews.kim_era);
    let p = policy;
    eval_rounds(
        cfg.eval,
        &mut [
            ("kim admission::review, /validate", &mut || {
                std::hint::black_box(admission::review(
                    Hook::Validate,
                    p,
                    std::hint::black_box(rv),
                    now,
                ));
            }),
            ("kim admission::review, /mutate", &mut || {
                std::hint::black_box(admission::review(
                    Hook::Mutate,
                    p,
                    std::hint::black_box(rm),
                    now,
                ));
            }),
            ("kim admission::review, KIM-era /validate", &mut || {
                std::hint::black_box(admission::review(
                    Hook::Validate,
                    p,
                    std::hint::black_box(rk),
                    now,
                ));
            }),
            (
                "serde_json skipping the /validate body (IgnoredAny)",
                &mut || {
                    let _ = std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(
                        std::hint::black_box(rv),
                    ));
                },
            ),
            (
                "serde_json skipping the /mutate body (IgnoredAny)",
                &mut || {
                    let _ = std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(
                        std::hint::black_box(rm),
                    ));
                },
            ),
            (
                "serde_json skipping the KIM-era body (IgnoredAny)",
                &mut || {
                    let _ = std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(
                        std::hint::black_box(rk),
                    ));
                },
            ),
            ("peer in-process, /validate", &mut || {
                std::hint::black_box(peer_in_process(
                    p,
                    Hook::Validate,
                    std::hint::black_box(rv),
                    now,
                ));
            }),
            ("peer in-process, /mutate", &mut || {
                std::hint::black_box(peer_in_process(
                    p,
                    Hook::Mutate,
                    std::hint::black_box(rm),
                    now,
                ));
            }),
        ],
    )
}

/// Argument that runs only the evaluation loops (no servers) and prints their table and
/// targets.
const EVAL: &str = "--eval";

fn eval_only() -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = Config::from_env(cores)?;
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    println!("load average at start {}", procinfo::loadavg());
    let evals = evaluations(&cfg, &policy, &reviews, Utc::now());
    report_evals(&evals);
    println!();
    eval_targets(&evals);
    println!("load average at end {}", procinfo::loadavg());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The peer's verdicts against kim's

/// What the API server would do with an answer: allow or deny (with which code), and the object
/// it would store (the request's object with the answer's patch applied).
#[derive(Debug, PartialEq)]
struct Verdict {
    allowed: bool,
    code: u64,
    object: Value,
}

fn verdict(answer: &[u8], request: &[u8]) -> anyhow::Result<Verdict> {
    let a: Value = serde_json::from_slice(answer).context("answer is not JSON")?;
    let r = &a["response"];
    let allowed = r["allowed"].as_bool().context("response.allowed")?;
    // An allowed answer without a code is a 200 for the API server.
    let code = r["status"]["code"]
        .as_u64()
        .filter(|c| *c != 0)
        .unwrap_or(if allowed { 200 } else { 403 });
    let req: Value = serde_json::from_slice(request)?;
    let mut object = req["request"]["object"].clone();
    if let Some(p) = r.get("patch") {
        ensure!(
            r["patchType"] == "JSONPatch",
            "patch without patchType JSONPatch"
        );
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(p.as_str().context("patch is not a base64 string")?)?;
        let patch: json_patch::Patch = serde_json::from_slice(&bytes)?;
        json_patch::patch(&mut object, &patch).context("patch does not apply")?;
    }
    Ok(Verdict {
        allowed,
        code,
        object,
    })
}

/// kim's and the peer's verdicts on one review, over HTTPS (kim) and in-process (the peer, the
/// code its server runs).
async fn same_verdicts(
    kim: &Server,
    peer: &Server,
    path: &'static str,
    body: &[u8],
) -> anyhow::Result<()> {
    let tls = tls_connector()?;
    let mut answers = Vec::new();
    for server in [kim, peer] {
        let mut s = connect(server.addr, &tls).await?;
        let uid = "0b7b6a8c-0000-4000-8000-00000000c0de";
        let text = String::from_utf8_lossy(body).replace(UID_PLACEHOLDER, uid);
        let a = one_request(&mut s, path, Bytes::from(text.clone()))
            .await
            .map_err(|(_, e)| anyhow!("{path}: {e}"))?;
        answers.push((verdict(&a, text.as_bytes())?, a));
    }
    let (k, p) = (&answers[0], &answers[1]);
    ensure!(
        k.0 == p.0,
        "{path}: the peer's verdict differs from kim's\nkim:  {}\npeer: {}",
        String::from_utf8_lossy(&k.1),
        String::from_utf8_lossy(&p.1)
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The run

/// One server and hook: its passes and its process's peak RSS.
struct Column {
    label: String,
    closed: Pass,
    paced: Pass,
    pinned: Option<Pass>,
    rss_mib: f64,
}

/// What a server answers on one hook: the path, the body sent, what a correct answer is.
struct Route {
    label: &'static str,
    path: &'static str,
    body: Arc<Vec<u8>>,
    expect: Expect,
}

/// Every pass of every server and hook, in rounds: each round runs every route once, so that
/// a change in the machine's load (other processes) touches all servers alike. Per route: the
/// closed loop (unpinned), the paced loop, and, if pinning, the closed loop with the server on
/// CPU 0 and the generator on CPU 1.
fn measure_all(
    cfg: &Config,
    cores: usize,
    rt: &tokio::runtime::Runtime,
    targets: &[(&Server, Route)],
) -> anyhow::Result<Vec<Column>> {
    let rounds = cfg.rounds.max(1);
    let per_round = |d: Duration| d / rounds;
    let job =
        |server: &Server, r: &Route, warmup: Duration, measure: Duration| -> anyhow::Result<Job> {
            Ok(Job {
                addr: server.addr,
                path: r.path,
                template: r.body.clone(),
                uid_at: uid_at(&r.body)?,
                expect: r.expect,
                warmup,
                measure,
                remaining: None,
            })
        };
    let n = targets.len();
    let empty = || (0..n).map(|_| Vec::new()).collect::<Vec<Vec<Pass>>>();
    let (mut closed, mut paced, mut pinned) = (empty(), empty(), empty());
    for round in 1..=rounds {
        println!(
            "-- round {round}/{rounds}: closed loop, {} connections, every server and hook ...",
            cfg.connections
        );
        for (i, (server, r)) in targets.iter().enumerate() {
            settle(server);
            let j = job(server, r, cfg.warmup, per_round(cfg.measure))?;
            closed[i].push(rt.block_on(closed_loop(Some(server), j, cfg.connections))?);
        }
        println!(
            "-- round {round}/{rounds}: paced {:.0} reviews/s, every server and hook ...",
            cfg.paced_rate
        );
        for (i, (server, r)) in targets.iter().enumerate() {
            settle(server);
            let j = job(
                server,
                r,
                cfg.warmup.min(Duration::from_millis(500)),
                per_round(cfg.paced),
            )?;
            paced[i].push(rt.block_on(paced_loop(server, j, cfg.connections, cfg.paced_rate))?);
        }
        if cfg.pin {
            println!(
                "-- round {round}/{rounds}: closed loop pinned (server CPU 0, generator CPU 1) ..."
            );
            let me = std::process::id();
            // One core, one thread: the generator on a current-thread runtime.
            let one = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            pin(me, "1")?;
            let result = (|| -> anyhow::Result<()> {
                for (i, (server, r)) in targets.iter().enumerate() {
                    settle(server);
                    pin(server.pid(), "0")?;
                    let j = job(server, r, cfg.warmup, per_round(cfg.measure))?;
                    let pass = one.block_on(closed_loop(Some(server), j, cfg.connections));
                    pin(server.pid(), &format!("0-{}", cores - 1))?;
                    pinned[i].push(pass?);
                }
                Ok(())
            })();
            pin(me, &format!("0-{}", cores - 1))?;
            result?;
        }
    }
    Ok(targets
        .iter()
        .zip(closed.into_iter().zip(paced).zip(pinned))
        .map(|((server, r), ((closed, paced), pinned))| Column {
            label: r.label.to_string(),
            closed: merge(closed),
            paced: merge(paced),
            pinned: (!pinned.is_empty()).then(|| merge(pinned)),
            rss_mib: procinfo::hwm_mib(server.pid()),
        })
        .collect())
}

/// Waits (at most 2 s) until the previous pass's connections are closed on the server side, so
/// that each pass counts only its own.
fn settle(server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while established(server.addr.port()) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn bench() -> anyhow::Result<()> {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cfg = Config::from_env(cores)?;
    kim::testing::webhook::certs::install_default_provider();
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;

    let tmp = tempfile::tempdir()?;
    let cert_dir = tmp.path().join("certs");
    kim::testing::webhook::devcerts::ensure(&cert_dir)?;
    CA_PEM
        .set(std::fs::read(cert_dir.join("ca.crt"))?)
        .map_err(|_| anyhow!("CA set twice"))?;

    let now = Utc::now();
    let v_answer = admission::review(Hook::Validate, &policy, &reviews.validate, now).body;
    let m_answer = admission::review(Hook::Mutate, &policy, &reviews.mutate, now).body;
    let p_v_answer = peer_in_process(&policy, Hook::Validate, &reviews.validate, now);
    let p_m_answer = peer_in_process(&policy, Hook::Mutate, &reviews.mutate, now);
    let kim_log = match &cfg.kim_rust_log {
        Some(l) => format!("RUST_LOG={l}"),
        None => "its default logging (RUST_LOG unset)".into(),
    };

    println!(
        "== kim webhook benchmark: cost per review against a kube-rs peer and the bare TLS floor"
    );
    println!(
        "machine: {cores} cores, {}; load average at start {}",
        procinfo::cpu_model(),
        procinfo::loadavg()
    );
    println!(
        "review: /validate body {} bytes, /mutate body {} bytes (runtimes/status UPDATE Pending -> Ready, \
         object + oldObject with 5 managedFields entries each, userInfo, options); KIM-era /validate \
         body {} bytes ({} ratcheted violations, evaluation only)",
        reviews.validate.len(),
        reviews.mutate.len(),
        reviews.kim_era.len(),
        reviews.kim_era_ratcheted
    );
    println!(
        "answers: floor {} bytes (constant); kim /validate {} bytes, /mutate {} bytes (JSONPatch of {} ops); \
         peer /validate {} bytes, /mutate {} bytes",
        FLOOR_ANSWER.len(),
        v_answer.len(),
        m_answer.len(),
        reviews.patch_ops,
        p_v_answer.len(),
        p_m_answer.len()
    );
    println!(
        "servers: (a) floor and (b) peer: this bench binary re-executed with {SERVE_FLOOR} / {SERVE_PEER}; \
         (c) {} webhook with {kim_log}; stdout/stderr to /dev/null; each its own process with a \
         multi-threaded tokio runtime (one worker per core) and kim's rustls ServerConfig",
        kim_bin().display()
    );
    println!(
        "load: {} keep-alive HTTP/1.1 connections over TLS 1.3, fresh uid per review, every answer checked; \
         {} rounds, each running every server and hook in turn (new connections and a {:.1} s warm-up each time); \
         closed loop measured {:.1} s, paced {:.0}/s open loop measured {:.1} s per server and hook in all; {}",
        cfg.connections,
        cfg.rounds,
        cfg.warmup.as_secs_f64(),
        cfg.measure.as_secs_f64(),
        cfg.paced_rate,
        cfg.paced.as_secs_f64(),
        if cfg.pin {
            "closed loop pinned (server taskset CPU 0, generator CPU 1)"
        } else {
            "no pinned passes"
        }
    );
    println!();

    let evals = evaluations(&cfg, &policy, &reviews, now);

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let routes = |label_v: &'static str,
                  label_m: &'static str,
                  expect_uid: Option<&'static str>,
                  patch: bool| {
        vec![
            Route {
                label: label_v,
                path: "/validate",
                body: Arc::new(reviews.validate.clone()),
                expect: Expect {
                    uid: expect_uid,
                    patch: false,
                },
            },
            Route {
                label: label_m,
                path: "/mutate",
                body: Arc::new(reviews.mutate.clone()),
                expect: Expect {
                    uid: expect_uid,
                    patch,
                },
            },
        ]
    };
    let floor = Server::own(SERVE_FLOOR, &cert_dir)?;
    let peer = Server::own(SERVE_PEER, &cert_dir)?;
    let kim = Server::kim(&cert_dir, cfg.kim_rust_log.as_deref())?;
    // Verdicts first: the peer must answer as kim does, or its figures mean nothing.
    for (path, body) in [
        ("/validate", &reviews.validate),
        ("/mutate", &reviews.mutate),
        ("/validate", &reviews.kim_era),
    ] {
        rt.block_on(same_verdicts(&kim, &peer, path, body))?;
    }
    println!(
        "-- verdicts: the peer answers the three reviews as kim does (allowed, code, object after the patch)"
    );
    let mut targets: Vec<(&Server, Route)> = Vec::new();
    for (server, (v, m, uid, patch)) in [
        (
            &floor,
            (
                "(a) floor, /validate body",
                "(a) floor, /mutate body",
                Some(FLOOR_UID),
                false,
            ),
        ),
        (
            &peer,
            ("(b) peer, /validate", "(b) peer, /mutate", None, true),
        ),
        (&kim, ("(c) kim, /validate", "(c) kim, /mutate", None, true)),
    ] {
        targets.extend(routes(v, m, uid, patch).into_iter().map(|r| (server, r)));
    }
    // An earlier kim build measured in the same rounds, for a before/after comparison.
    let baseline = match std::env::var_os("WEBHOOK_BENCH_KIM_BASELINE").filter(|v| !v.is_empty()) {
        Some(bin) => {
            // Its own RUST_LOG if given (e.g. to measure the log line: the same binary with
            // `warn`), else that of (c).
            let log = std::env::var("WEBHOOK_BENCH_BASELINE_RUST_LOG").ok();
            let log = log.as_deref().or(cfg.kim_rust_log.as_deref());
            Some(Server::kim_from(Path::new(&bin), &cert_dir, log)?)
        }
        None => None,
    };
    if let Some(b) = &baseline {
        targets.extend(
            routes(
                "(d) baseline, /validate",
                "(d) baseline, /mutate",
                None,
                true,
            )
            .into_iter()
            .map(|r| (b, r)),
        );
    }
    let columns = measure_all(&cfg, cores, &rt, &targets)?;

    report(&cfg, cores, &columns, &evals);
    Ok(())
}

fn report_evals(evals: &[Eval]) {
    println!(
        "== evaluation only, one thread: CPU µs per call, median of {EVAL_ROUNDS} interleaved rounds (min-max)"
    );
    for e in evals {
        let lo = e.rounds_us.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = e.rounds_us.iter().copied().fold(0.0, f64::max);
        println!("{:<56} {:>8.2}   ({lo:.2}-{hi:.2})", e.label, e.us());
    }
}

/// The evaluation rows of the targets table (ratios, no targets).
fn eval_targets(evals: &[Eval]) {
    let eval_us = |l: &str| {
        evals
            .iter()
            .find(|e| e.label == l)
            .map_or(f64::NAN, Eval::us)
    };
    // No targets: kim decodes with serde_json, which reads what it skips no faster than
    // `IgnoredAny` does; the ratios say what decoding and evaluation add to a bare skip.
    for (what, kim, skip) in [
        (
            "evaluation ÷ serde_json skip, /validate",
            "kim admission::review, /validate",
            "serde_json skipping the /validate body (IgnoredAny)",
        ),
        (
            "evaluation ÷ serde_json skip, /mutate",
            "kim admission::review, /mutate",
            "serde_json skipping the /mutate body (IgnoredAny)",
        ),
        (
            "evaluation ÷ serde_json skip, KIM-era /validate",
            "kim admission::review, KIM-era /validate",
            "serde_json skipping the KIM-era body (IgnoredAny)",
        ),
    ] {
        let r = eval_us(kim) / eval_us(skip);
        println!("{what:<58} {:>10} {r:>10.3}  (no target)", "");
    }
}

fn verdict_word(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn report(cfg: &Config, cores: usize, columns: &[Column], evals: &[Eval]) {
    println!();
    println!("== results, load average now {}", procinfo::loadavg());
    let label_w = 46;
    for line in 0..2 {
        print!("{:<label_w$}", "");
        for c in columns {
            let (server, hook) = c.label.split_once(", ").unwrap_or((c.label.as_str(), ""));
            print!(" {:>14}", if line == 0 { server } else { hook });
        }
        println!();
    }
    let row = |name: &str, f: &dyn Fn(&Column) -> String| {
        print!("{name:<label_w$}");
        for c in columns {
            print!(" {:>14}", f(c));
        }
        println!();
    };
    let num = |x: f64, prec: usize| {
        if x.is_finite() {
            format!("{x:.prec$}")
        } else {
            "-".to_string()
        }
    };
    let n = cfg.connections;
    let rounds = cfg.rounds;
    println!("closed loop, {n} connections, unpinned (CPU: the median of {rounds} rounds):");
    row("  server CPU µs per review  (primary)", &|c| {
        num(c.closed.server_cpu_us, 1)
    });
    row("    rounds min-max", &|c| {
        let r = &c.closed.server_cpu_rounds;
        let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = r.iter().copied().fold(0.0, f64::max);
        format!("{}-{}", num(lo, 1), num(hi, 1))
    });
    row("  generator CPU µs per review", &|c| {
        num(c.closed.client_cpu_us, 1)
    });
    row("  reviews/s", &|c| num(c.closed.rps, 0));
    row("  kim's own mean server time µs (histogram)", &|c| {
        c.closed.handler_mean_us.map_or("-".into(), |h| num(h, 1))
    });
    if cfg.pin {
        println!(
            "closed loop, {n} connections, server on CPU 0, generator on CPU 1 (CPU: median round):"
        );
        let pinned =
            |c: &Column, f: &dyn Fn(&Pass) -> String| c.pinned.as_ref().map_or("-".into(), f);
        row("  reviews/s  (pinned throughput)", &|c| {
            pinned(c, &|p| num(p.rps, 0))
        });
        row("  server CPU µs per review", &|c| {
            pinned(c, &|p| num(p.server_cpu_us, 1))
        });
        row("  server core busy %", &|c| {
            pinned(c, &|p| num(p.server_cores * 100.0, 0))
        });
        row("  generator CPU µs per review", &|c| {
            pinned(c, &|p| num(p.client_cpu_us, 1))
        });
    }
    println!(
        "paced {:.0} reviews/s, open loop, latency from the scheduled send time (all rounds), µs:",
        cfg.paced_rate
    );
    row("  p50", &|c| num(c.paced.p50_us, 0));
    row("  p99", &|c| num(c.paced.p99_us, 0));
    row("  p99.9", &|c| num(c.paced.p999_us, 0));
    row("  max", &|c| num(c.paced.max_us, 0));
    row("  sent late p99 (dispatch + free connection)", &|c| {
        num(c.paced.late_p99_us, 0)
    });
    row("  reviews/s achieved", &|c| num(c.paced.rps, 0));
    row("  server CPU µs per review", &|c| {
        num(c.paced.server_cpu_us, 1)
    });
    row("peak RSS of the server process (VmHWM), MiB", &|c| {
        num(c.rss_mib, 1)
    });
    row("errors (all passes)", &|c| {
        (c.closed.errors + c.paced.errors + c.pinned.as_ref().map_or(0, |p| p.errors)).to_string()
    });
    row("connections seen by the server (mid-run)", &|c| {
        let mut v = vec![c.closed.established, c.paced.established];
        v.extend(c.pinned.as_ref().map(|p| p.established));
        v.iter().map(usize::to_string).collect::<Vec<_>>().join("/")
    });
    for c in columns {
        for (what, p) in [
            ("closed", Some(&c.closed)),
            ("paced", Some(&c.paced)),
            ("pinned", c.pinned.as_ref()),
        ] {
            let Some(p) = p else { continue };
            if p.errors > 0 || p.reconnects > 0 {
                println!(
                    "  {} {what}: {} errors, {} reconnects; first: {}",
                    c.label,
                    p.errors,
                    p.reconnects,
                    p.first_error.as_deref().unwrap_or("-")
                );
            }
        }
    }

    println!();
    report_evals(evals);

    let col = |prefix: &str| columns.iter().find(|c| c.label.starts_with(prefix));
    println!();
    println!("== targets ({cores} cores)");
    println!(
        "{:<58} {:>10} {:>10}  verdict",
        "target", "wanted", "measured"
    );
    let target = |what: String, wanted: &str, measured: f64, met: bool| {
        println!(
            "{what:<58} {wanted:>10} {measured:>10.3}  {}",
            verdict_word(met)
        );
    };
    let no_target = |what: String, measured: f64| {
        println!("{what:<58} {:>10} {measured:>10.3}  (no target)", "");
    };
    for (hook, floor, peer, kim) in [
        (
            "/validate",
            "(a) floor, /validate",
            "(b) peer, /validate",
            "(c) kim, /validate",
        ),
        (
            "/mutate",
            "(a) floor, /mutate",
            "(b) peer, /mutate",
            "(c) kim, /mutate",
        ),
    ] {
        let (Some(f), Some(p), Some(k)) = (col(floor), col(peer), col(kim)) else {
            continue;
        };
        // Retired as a target: what a review costs users is the status write through
        // kube-apiserver (`benches/apiserver.rs`), not kim's share of a bare TLS round trip.
        let r = f.closed.server_cpu_us / k.closed.server_cpu_us;
        no_target(format!("server CPU per review, floor ÷ kim, {hook}"), r);
        if let Some(b) = col(&format!("(d) baseline, {hook}")) {
            let r = k.closed.server_cpu_us / b.closed.server_cpu_us;
            target(
                format!("server CPU per review, kim ÷ baseline (d), {hook}"),
                "<= 2",
                r,
                r <= 2.0,
            );
        }
        let r = k.closed.server_cpu_us / p.closed.server_cpu_us;
        target(
            format!("server CPU per review, kim ÷ peer, {hook}"),
            "<= 0.333",
            r,
            r <= 1.0 / 3.0,
        );
        target(
            format!("paced p99 ms, kim {hook}"),
            "<= 1",
            k.paced.p99_us / 1000.0,
            k.paced.p99_us <= 1000.0,
        );
    }
    eval_targets(evals);
    if let Some(k) = col("(c) kim, /validate") {
        target(
            "kim peak RSS, MiB".into(),
            "<= 64",
            k.rss_mib,
            k.rss_mib <= 64.0,
        );
    }
    let errors: u64 = columns
        .iter()
        .map(|c| c.closed.errors + c.paced.errors + c.pinned.as_ref().map_or(0, |p| p.errors))
        .sum();
    target("errors, all passes".into(), "0", errors as f64, errors == 0);
    let conns_ok = columns.iter().all(|c| {
        c.closed.established == cfg.connections
            && c.paced.established == cfg.connections
            && c.pinned
                .as_ref()
                .is_none_or(|p| p.established == cfg.connections)
    });
    println!(
        "{:<58} {:>10} {:>10}  {}",
        "connections seen by the server",
        "as set",
        if conns_ok { "yes" } else { "differs" },
        verdict_word(conns_ok)
    );
    println!("load average at end {}", procinfo::loadavg());
}
