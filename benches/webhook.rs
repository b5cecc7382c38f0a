//! Webhook benchmark (issue 3, "Must show"): one `cargo bench --bench webhook` run measures
//!
//! - (a) the ceiling: a bare axum + axum-server/rustls endpoint with kim's exact rustls
//!   `ServerConfig` (TLS 1.3, ALPN `h2`/`http/1.1`) that reads the body and returns a constant
//!   allowed AdmissionReview — served by this bench binary re-executed as a child process;
//! - (b) `kim webhook` `POST /validate` and (c) `POST /mutate` — the real `kim` binary as a
//!   child process — with a realistic ~15 KB `runtimes/status` UPDATE review;
//!
//! each with N (default 64) concurrent keep-alive HTTP/1.1-over-TLS connections (one connection
//! per client task, closed loop) and with one connection, plus evaluation-only throughput of
//! `kim::admission::review` on one thread and each server process's peak RSS (`VmHWM`).
//!
//! Environment (all optional; seconds may be fractional, for a CI smoke run):
//! `WEBHOOK_BENCH_WARMUP_SECS` (2), `WEBHOOK_BENCH_SECS` (8), `WEBHOOK_BENCH_EVAL_SECS` (3),
//! `WEBHOOK_BENCH_CONNECTIONS` (64), `WEBHOOK_BENCH_KIM_RUST_LOG` (`RUST_LOG` of the kim child;
//! unset or empty: kim's default logging, `info`, one text line per review, as in production;
//! `warn` drops the per-review lines). The child's stdout/stderr go to /dev/null either way.
//!
//! The targets of the issue are printed next to the figures as met / not met; nothing is
//! asserted on them (a benchmark, not a test). Only broken set-up (a review that does not
//! produce the expected answer in-process, a server that does not start) aborts the run.

use anyhow::{Context, anyhow, bail, ensure};
use axum::body::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use kim::admission::{self, Hook};
use kim::status::Policy;
use kim::webhook::devcerts;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};
use testenv::{model, tls};

/// The names the rotation certificates are made for.
const LOCALHOST: &[&str] = &["localhost", "127.0.0.1"];
/// Argument that turns this binary into the ceiling server (followed by the cert dir).
const SERVE_CEILING: &str = "--serve-ceiling";
/// The `request.uid` of the review templates; replaced by a fresh uid on every request.
const UID_PLACEHOLDER: &str = "00000000-0000-4000-8000-000000000000";
/// The uid of the ceiling's constant answer.
const CEILING_UID: &str = "c0ffee00-0000-4000-8000-000000000000";
/// The ceiling's constant answer: an allowed AdmissionReview shaped like kim's allowed answer.
const CEILING_ANSWER: &str = concat!(
    r#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":"#,
    r#"{"uid":"c0ffee00-0000-4000-8000-000000000000","allowed":true,"status":{"code":200}}}"#
);
/// A request (or a connection) that takes longer counts as an error and the connection is
/// replaced; keeps a stuck server from hanging the run.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Linux `USER_HZ`: the unit of utime/stime in `/proc/<pid>/stat`.
const CLOCK_TICKS_PER_SEC: f64 = 100.0;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == SERVE_CEILING) {
        let dir = args.get(i + 1).context("--serve-ceiling DIR")?;
        return serve_ceiling(Path::new(dir));
    }
    if args.iter().any(|a| a == ROTATION) {
        return rotation();
    }
    if let Some(i) = args.iter().position(|a| a == EVAL_COUNT) {
        let n: u64 = args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .context("--eval-count N [DIR]")?;
        return eval_count(n, args.get(i + 2).map(Path::new));
    }
    bench()
}

/// Argument that runs only the rotation pass (issue 6 item 3), see [`rotation`].
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
        println!("== rotation pass (issue 6 item 3), release kim binary, RUST_LOG=warn");
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

/// Argument for instruction counting (`valgrind --tool=callgrind`): builds the two reviews,
/// optionally writes them to DIR (`validate.json`, `mutate.json`), then runs
/// `admission::review` N times per hook and exits; no servers.
const EVAL_COUNT: &str = "--eval-count";

fn eval_count(n: u64, dump: Option<&Path>) -> anyhow::Result<()> {
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    if let Some(dir) = dump {
        std::fs::write(dir.join("validate.json"), &reviews.validate)?;
        std::fs::write(dir.join("mutate.json"), &reviews.mutate)?;
    }
    let now = chrono::Utc::now();
    // `WEBHOOK_BENCH_EVAL_HOOK=validate|mutate` runs only that hook.
    let only = std::env::var("WEBHOOK_BENCH_EVAL_HOOK").unwrap_or_default();
    for (hook, body) in [
        (Hook::Validate, &reviews.validate),
        (Hook::Mutate, &reviews.mutate),
    ] {
        if !only.is_empty() && only != hook.as_str() {
            continue;
        }
        for _ in 0..n {
            std::hint::black_box(admission::review(
                hook,
                &policy,
                std::hint::black_box(body),
                now,
            ));
        }
    }
    println!(
        "{n} reviews per hook (/validate {} bytes, /mutate {} bytes)",
        reviews.validate.len(),
        reviews.mutate.len()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Configuration

struct Config {
    warmup: Duration,
    measure: Duration,
    eval: Duration,
    connections: usize,
    /// `RUST_LOG` of the kim child; `None`: unset (kim's default, `info`).
    kim_rust_log: Option<String>,
}

impl Config {
    fn from_env() -> anyhow::Result<Config> {
        let secs = |name: &str, default: f64| -> anyhow::Result<Duration> {
            match std::env::var(name) {
                Ok(v) => {
                    let s: f64 = v.trim().parse().with_context(|| format!("{name}={v:?}"))?;
                    ensure!(s >= 0.0 && s.is_finite(), "{name}={v:?}: not a duration");
                    Ok(Duration::from_secs_f64(s))
                }
                Err(_) => Ok(Duration::from_secs_f64(default)),
            }
        };
        let connections = match std::env::var("WEBHOOK_BENCH_CONNECTIONS") {
            Ok(v) => v
                .trim()
                .parse()
                .with_context(|| format!("WEBHOOK_BENCH_CONNECTIONS={v:?}"))?,
            Err(_) => 64,
        };
        ensure!(connections >= 1, "WEBHOOK_BENCH_CONNECTIONS must be >= 1");
        let measure = secs("WEBHOOK_BENCH_SECS", 8.0)?;
        ensure!(!measure.is_zero(), "WEBHOOK_BENCH_SECS must be > 0");
        Ok(Config {
            warmup: secs("WEBHOOK_BENCH_WARMUP_SECS", 2.0)?,
            measure,
            eval: secs("WEBHOOK_BENCH_EVAL_SECS", 3.0)?,
            connections,
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
    /// Operations in the mutate answer's patch.
    patch_ops: usize,
}

fn build_reviews(policy: &Policy) -> anyhow::Result<Reviews> {
    let (_, sample) = model::sample_runtimes()
        .into_iter()
        .find(|(name, _)| name == "infrastructuremanager_v1_runtime.yaml")
        .context("sample infrastructuremanager_v1_runtime.yaml")?;
    let seq = model::lifecycle(sample);
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
    let review = |new: &model::Rt| -> Value {
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
    let mutate = serde_json::to_vec(&review(&stripped))?;
    let now = chrono::Utc::now();
    let m = admission::review(Hook::Mutate, policy, &mutate, now);
    ensure!(m.allowed && m.patched, "mutate review: {}", m.detail);
    let patch = model::patch_of(&model::response_of(&m.body, UID_PLACEHOLDER))
        .context("mutate answer has a patch")?;
    let mut patched = review(&stripped);
    json_patch::patch(&mut patched["request"]["object"], &patch)?;
    let validate = serde_json::to_vec(&patched)?;
    let v = admission::review(Hook::Validate, policy, &validate, now);
    ensure!(v.allowed && !v.patched, "validate review: {}", v.detail);
    Ok(Reviews {
        mutate,
        validate,
        patch_ops: patch.0.len(),
    })
}

// ---------------------------------------------------------------------------------------------
// The ceiling server (child process)

fn serve_ceiling(dir: &Path) -> anyhow::Result<()> {
    use axum::routing::post;
    kim::webhook::certs::install_default_provider();
    let (_, loaded) = kim::webhook::certs::load_dir(dir)?;
    // Same runtime as `kim webhook`: multi-threaded, one worker per core.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let tls = axum_server::tls_rustls::RustlsConfig::from_config(loaded.config);
        let server = axum_server::tls_rustls::from_tcp_rustls(listener, tls)?;
        let app = axum::Router::new()
            .route("/validate", post(ceiling))
            .route("/mutate", post(ceiling));
        println!("PORT {port}");
        std::io::stdout().flush()?;
        server.serve(app.into_make_service()).await?;
        Ok(())
    })
}

async fn ceiling(body: Bytes) -> impl axum::response::IntoResponse {
    std::hint::black_box(body.len());
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        CEILING_ANSWER,
    )
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

    fn ceiling(cert_dir: &Path) -> anyhow::Result<Server> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg(SERVE_CEILING)
            .arg(cert_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .context("re-executing the bench binary as the ceiling server")?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("child stdout")?).read_line(&mut line)?;
        let port: u16 = line
            .trim()
            .strip_prefix("PORT ")
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("ceiling server said {line:?}"))?;
        Ok(Server {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            metrics_addr: None,
        })
    }

    fn kim(cert_dir: &Path, rust_log: Option<&str>) -> anyhow::Result<Server> {
        let addr = free_port()?;
        let metrics_addr = free_port()?;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kim"));
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

/// user + system CPU time of a process, in seconds.
fn cpu_secs(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return f64::NAN;
    };
    let Some((_, rest)) = stat.rsplit_once(") ") else {
        return f64::NAN;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        f.get(i)
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    // Fields 14 (utime) and 15 (stime) of proc(5); `rest` starts at field 3.
    (ticks(11) + ticks(12)) / CLOCK_TICKS_PER_SEC
}

/// A `kB` field of `/proc/<pid>/status` (`VmHWM`, `VmRSS`), in MiB.
fn status_mib(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(str::to_string))
        })
        .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
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

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, v)| v.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
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
    errors: u64,
    reconnects: u64,
    first_error: Option<String>,
}

struct Job {
    addr: SocketAddr,
    path: &'static str,
    template: Arc<Vec<u8>>,
    uid_at: usize,
    expect: Expect,
    warmup: Duration,
    measure: Duration,
}

async fn client_task(
    id: usize,
    job: Arc<Job>,
    tls: tokio_rustls::TlsConnector,
    barrier: Arc<tokio::sync::Barrier>,
) -> TaskResult {
    let mut res = TaskResult::default();
    let note = |res: &mut TaskResult, msg: String| {
        res.errors += 1;
        res.first_error.get_or_insert(msg);
    };
    let mut sender = match connect(job.addr, &tls).await {
        Ok(s) => Some(s),
        Err(e) => {
            note(&mut res, format!("connect: {e:#}"));
            None
        }
    };
    barrier.wait().await;
    let t0 = Instant::now();
    let (from, until) = (t0 + job.warmup, t0 + job.warmup + job.measure);
    let mut seq: u64 = 0;
    while Instant::now() < until {
        let Some(s) = sender.as_mut() else {
            match connect(job.addr, &tls).await {
                Ok(s) => {
                    res.reconnects += 1;
                    sender = Some(s);
                }
                Err(e) => {
                    note(&mut res, format!("reconnect: {e:#}"));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            continue;
        };
        seq += 1;
        let uid = format!("{id:08x}-0000-4000-8000-{seq:012x}");
        let mut body = job.template.as_ref().clone();
        body[job.uid_at..job.uid_at + UID_PLACEHOLDER.len()].copy_from_slice(uid.as_bytes());
        let started = Instant::now();
        let answer =
            tokio::time::timeout(REQUEST_TIMEOUT, one_request(s, job.path, Bytes::from(body)))
                .await
                .unwrap_or_else(|_| Err((true, format!("no answer within {REQUEST_TIMEOUT:?}"))));
        let done = Instant::now();
        match answer {
            Ok(bytes) => match check_answer(&bytes, &uid, job.expect) {
                Ok(()) => {
                    if done >= from && done <= until {
                        res.latencies_ns.push((done - started).as_nanos() as u64);
                    }
                }
                Err(msg) => note(&mut res, msg),
            },
            Err((broken, msg)) => {
                note(&mut res, msg);
                if broken {
                    sender = None;
                }
            }
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

fn probe(server: &Server, path: &str) -> Probe {
    Probe {
        at: Instant::now(),
        server_cpu: cpu_secs(&server.pid().to_string()),
        client_cpu: cpu_secs("self"),
        handler: server.handler_time(path),
    }
}

struct Pass {
    label: String,
    connections: usize,
    requests: u64,
    rps: f64,
    p50_us: f64,
    p99_us: f64,
    max_us: f64,
    mean_us: f64,
    errors: u64,
    reconnects: u64,
    first_error: Option<String>,
    server_cpu_us: f64,
    client_cpu_us: f64,
    handler_mean_us: Option<f64>,
    established: usize,
    /// CPU time of server + load generator over the window, as a share of all cores.
    cpu_share: f64,
}

async fn run_pass(
    label: &str,
    server: &Server,
    job: Job,
    connections: usize,
) -> anyhow::Result<Pass> {
    let tls = tls_connector()?;
    let job = Arc::new(job);
    let barrier = Arc::new(tokio::sync::Barrier::new(connections + 1));
    let tasks: Vec<_> = (0..connections)
        .map(|id| tokio::spawn(client_task(id, job.clone(), tls.clone(), barrier.clone())))
        .collect();
    barrier.wait().await;
    let t0 = Instant::now();
    tokio::time::sleep_until((t0 + job.warmup).into()).await;
    let p0 = probe(server, job.path);
    tokio::time::sleep_until((t0 + job.warmup + job.measure / 2).into()).await;
    let established = established(server.addr.port());
    tokio::time::sleep_until((t0 + job.warmup + job.measure).into()).await;
    let p1 = probe(server, job.path);
    let mut all = TaskResult::default();
    for t in tasks {
        let r = t.await?;
        all.latencies_ns.extend(r.latencies_ns);
        all.errors += r.errors;
        all.reconnects += r.reconnects;
        if all.first_error.is_none() {
            all.first_error = r.first_error;
        }
    }
    let lat = &mut all.latencies_ns;
    lat.sort_unstable();
    let n = lat.len() as u64;
    let pct = |p: f64| -> f64 {
        if lat.is_empty() {
            return f64::NAN;
        }
        let i = ((p * lat.len() as f64).ceil() as usize).clamp(1, lat.len()) - 1;
        lat[i] as f64 / 1000.0
    };
    let window = (p1.at - p0.at).as_secs_f64();
    let per_req = |d: f64| d / n.max(1) as f64 * 1e6;
    let handler_mean_us = match (p0.handler, p1.handler) {
        (Some((s0, c0)), Some((s1, c1))) if c1 > c0 => Some((s1 - s0) / (c1 - c0) * 1e6),
        _ => None,
    };
    Ok(Pass {
        label: label.to_string(),
        connections,
        requests: n,
        rps: n as f64 / job.measure.as_secs_f64(),
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        max_us: lat.last().map_or(f64::NAN, |&x| x as f64 / 1000.0),
        mean_us: lat.iter().sum::<u64>() as f64 / n.max(1) as f64 / 1000.0,
        errors: all.errors,
        reconnects: all.reconnects,
        first_error: all.first_error,
        server_cpu_us: per_req(p1.server_cpu - p0.server_cpu) * job.measure.as_secs_f64() / window,
        client_cpu_us: per_req(p1.client_cpu - p0.client_cpu) * job.measure.as_secs_f64() / window,
        handler_mean_us,
        established,
        cpu_share: (p1.server_cpu - p0.server_cpu + p1.client_cpu - p0.client_cpu)
            / (window * std::thread::available_parallelism().map_or(1, |n| n.get()) as f64),
    })
}

static CA_PEM: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

fn tls_connector() -> anyhow::Result<tokio_rustls::TlsConnector> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(CA_PEM.get().context("CA not loaded")?) {
        roots.add(cert?)?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(kim::webhook::certs::provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

// ---------------------------------------------------------------------------------------------
// Evaluation only

struct Eval {
    label: &'static str,
    /// Per second of wall-clock time.
    per_sec: f64,
    /// Per second of this thread's CPU time (robust to other load on a shared machine).
    per_cpu_sec: f64,
}

fn eval_loop(label: &'static str, secs: Duration, mut f: impl FnMut()) -> Eval {
    // Short warm-up (caches, allocator), then the timed loop.
    let warm = Instant::now();
    while warm.elapsed() < secs.min(Duration::from_millis(300)) {
        f();
    }
    let start = Instant::now();
    let cpu0 = cpu_secs("thread-self");
    let mut n: u64 = 0;
    loop {
        for _ in 0..64 {
            f();
        }
        n += 64;
        if start.elapsed() >= secs {
            break;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let cpu = cpu_secs("thread-self") - cpu0;
    Eval {
        label,
        per_sec: n as f64 / wall,
        per_cpu_sec: n as f64 / cpu,
    }
}

// ---------------------------------------------------------------------------------------------
// The run

fn bench() -> anyhow::Result<()> {
    let cfg = Config::from_env()?;
    kim::webhook::certs::install_default_provider();
    let policy = Policy::builtin();
    let reviews = build_reviews(&policy)?;
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());

    let tmp = tempfile::tempdir()?;
    let cert_dir = tmp.path().join("certs");
    kim::webhook::devcerts::ensure(&cert_dir)?;
    CA_PEM
        .set(std::fs::read(cert_dir.join("ca.crt"))?)
        .map_err(|_| anyhow!("CA set twice"))?;

    let now = chrono::Utc::now();
    let v_answer = admission::review(Hook::Validate, &policy, &reviews.validate, now).body;
    let m_answer = admission::review(Hook::Mutate, &policy, &reviews.mutate, now).body;
    let kim_log = match &cfg.kim_rust_log {
        Some(l) => format!("RUST_LOG={l} (no per-review log lines), stdout/stderr to /dev/null"),
        None => "default logging (RUST_LOG unset = info: one text log line per review), stdout/stderr to /dev/null".into(),
    };

    println!("== kim webhook benchmark (issue 3)");
    println!(
        "machine: {cores} cores, {}; load average at start {}",
        cpu_model(),
        loadavg()
    );
    println!(
        "NOTE: the load generator (this process) shares these {cores} cores with the server under test; \
         its CPU per request is shown in the 'gen CPU' column"
    );
    println!(
        "review: /validate body {} bytes, /mutate body {} bytes (runtimes/status UPDATE Pending -> Ready, \
         object + oldObject with 5 managedFields entries each, userInfo, options)",
        reviews.validate.len(),
        reviews.mutate.len()
    );
    println!(
        "answers: ceiling {} bytes (constant), kim /validate {} bytes, kim /mutate {} bytes (JSONPatch of {} ops)",
        CEILING_ANSWER.len(),
        v_answer.len(),
        m_answer.len(),
        reviews.patch_ops
    );
    println!(
        "load: {} keep-alive HTTP/1.1 connections over TLS 1.3 (one per client task, closed loop, fresh uid per request, \
         every answer checked for uid, allowed and patch) and a 1-connection pass; warm-up {:.1} s discarded, \
         measured {:.1} s",
        cfg.connections,
        cfg.warmup.as_secs_f64(),
        cfg.measure.as_secs_f64()
    );
    println!(
        "servers: (a) this bench binary re-executed with {SERVE_CEILING}; (b)/(c) {} webhook, {kim_log}; \
         each in its own process, both with a multi-threaded tokio runtime (one worker per core)",
        env!("CARGO_BIN_EXE_kim")
    );
    println!();

    // Evaluation only, before any server runs.
    println!(
        "-- evaluation only ({:.1} s each, one thread) ...",
        cfg.eval.as_secs_f64()
    );
    let evals = vec![
        eval_loop("admission::review Validate", cfg.eval, || {
            std::hint::black_box(admission::review(
                Hook::Validate,
                &policy,
                std::hint::black_box(&reviews.validate),
                now,
            ));
        }),
        eval_loop("admission::review Mutate", cfg.eval, || {
            std::hint::black_box(admission::review(
                Hook::Mutate,
                &policy,
                std::hint::black_box(&reviews.mutate),
                now,
            ));
        }),
        eval_loop(
            "  reference: serde_json parse only (IgnoredAny)",
            cfg.eval,
            || {
                let _ = std::hint::black_box(serde_json::from_slice::<serde::de::IgnoredAny>(
                    std::hint::black_box(&reviews.validate),
                ));
            },
        ),
        eval_loop("  reference: serde_json parse to Value", cfg.eval, || {
            let _ = std::hint::black_box(serde_json::from_slice::<Value>(std::hint::black_box(
                &reviews.validate,
            )));
        }),
    ];

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let uid_at = |body: &[u8]| -> anyhow::Result<usize> {
        body.windows(UID_PLACEHOLDER.len())
            .position(|w| w == UID_PLACEHOLDER.as_bytes())
            .context("uid placeholder in the review")
    };
    let job = |path: &'static str, body: &Vec<u8>, expect: Expect| -> anyhow::Result<Job> {
        Ok(Job {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            path,
            template: Arc::new(body.clone()),
            uid_at: uid_at(body)?,
            expect,
            warmup: cfg.warmup,
            measure: cfg.measure,
        })
    };
    let mut passes: Vec<Pass> = Vec::new();
    let mut rss: Vec<(&str, f64, f64)> = Vec::new();

    {
        let server = Server::ceiling(&cert_dir)?;
        let label = "(a) ceiling";
        let expect = Expect {
            uid: Some(CEILING_UID),
            patch: false,
        };
        for conns in [cfg.connections, 1] {
            println!("-- {label} (body of /validate), {conns} connection(s) ...");
            let j = Job {
                addr: server.addr,
                ..job("/validate", &reviews.validate, expect)?
            };
            passes.push(rt.block_on(run_pass(label, &server, j, conns))?);
        }
        rss.push((
            "(a) ceiling",
            status_mib(server.pid(), "VmHWM"),
            status_mib(server.pid(), "VmRSS"),
        ));
    }
    {
        let server = Server::kim(&cert_dir, cfg.kim_rust_log.as_deref())?;
        let plan: [(&str, &'static str, &Vec<u8>, Expect); 2] = [
            (
                "(b) kim /validate",
                "/validate",
                &reviews.validate,
                Expect {
                    uid: None,
                    patch: false,
                },
            ),
            (
                "(c) kim /mutate",
                "/mutate",
                &reviews.mutate,
                Expect {
                    uid: None,
                    patch: true,
                },
            ),
        ];
        for (label, path, body, expect) in plan {
            for conns in [cfg.connections, 1] {
                println!("-- {label}, {conns} connection(s) ...");
                let j = Job {
                    addr: server.addr,
                    ..job(path, body, expect)?
                };
                passes.push(rt.block_on(run_pass(label, &server, j, conns))?);
            }
        }
        rss.push((
            "(b/c) kim webhook",
            status_mib(server.pid(), "VmHWM"),
            status_mib(server.pid(), "VmRSS"),
        ));
    }

    report(&cfg, cores, &passes, &evals, &rss);
    Ok(())
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

fn report(cfg: &Config, cores: usize, passes: &[Pass], evals: &[Eval], rss: &[(&str, f64, f64)]) {
    println!();
    println!("== results (latency = client-observed round trip of one review, µs)");
    println!(
        "{:<20} {:>5} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>9} {:>9} {:>6} {:>10} {:>8}",
        "server",
        "conns",
        "req/s",
        "requests",
        "p50",
        "p99",
        "max",
        "mean",
        "errors",
        "srv CPU",
        "gen CPU",
        "CPU%",
        "handler",
        "conns@srv"
    );
    for p in passes {
        println!(
            "{:<20} {:>5} {:>9.0} {:>8} {:>8.0} {:>8.0} {:>8.0} {:>8.0} {:>6} {:>9.1} {:>9.1} {:>6.0} {:>10} {:>8}",
            p.label,
            p.connections,
            p.rps,
            p.requests,
            p.p50_us,
            p.p99_us,
            p.max_us,
            p.mean_us,
            p.errors,
            p.server_cpu_us,
            p.client_cpu_us,
            p.cpu_share * 100.0,
            p.handler_mean_us
                .map_or_else(|| "-".to_string(), |h| format!("{h:.1}")),
            p.established
        );
    }
    println!(
        "  srv CPU / gen CPU: CPU time (user+system) of the server process / of the load generator per \
         request, µs; CPU%: (server + generator CPU) / (cores x window), the rest of the cores went \
         to idle time or to other processes; handler: kim's own mean server time per request from its \
         request_duration_seconds histogram (body read + review + metrics), µs; conns@srv: ESTABLISHED \
         connections on the server port at mid-run"
    );
    for p in passes {
        if p.errors > 0 || p.reconnects > 0 {
            println!(
                "  {} ({} conns): {} errors, {} reconnects; first: {}",
                p.label,
                p.connections,
                p.errors,
                p.reconnects,
                p.first_error.as_deref().unwrap_or("-")
            );
        }
    }
    let find = |prefix: &str, conns: usize| {
        passes
            .iter()
            .find(|p| p.label.starts_with(prefix) && p.connections == conns)
    };
    let n = cfg.connections;
    let (Some(a), Some(b), Some(c)) = (find("(a)", n), find("(b)", n), find("(c)", n)) else {
        return;
    };
    let (b1, c1) = (find("(b)", 1), find("(c)", 1));
    let rb = b.rps / a.rps;
    let rc = c.rps / a.rps;
    println!();
    println!("ratio (b)/(a) at {n} connections: {rb:.3}");
    println!("ratio (c)/(a) at {n} connections: {rc:.3}");
    println!(
        "server CPU per request, ceiling / kim (the same ratio if the server alone had the cores): \
         /validate {:.3}, /mutate {:.3}",
        a.server_cpu_us / b.server_cpu_us,
        a.server_cpu_us / c.server_cpu_us
    );
    println!(
        "Little's law at {n} connections (closed loop): mean latency = {n} / throughput, e.g. /validate \
         {n} / {:.0} req/s = {:.0} µs (measured mean {:.0} µs); p99 <= 1 ms at {n} connections needs well over \
         {} req/s",
        b.rps,
        n as f64 / b.rps * 1e6,
        b.mean_us,
        n * 1000
    );
    println!();
    println!(
        "== evaluation only (one thread, same bodies): per second of wall-clock time, and per \
         second of the thread's CPU time (= per core; other processes' load does not count)"
    );
    println!(
        "{:<50} {:>12} {:>9} {:>14} {:>9}",
        "", "wall /s", "µs each", "per CPU-s", "µs each"
    );
    for e in evals {
        println!(
            "{:<50} {:>12.0} {:>9.1} {:>14.0} {:>9.1}",
            e.label,
            e.per_sec,
            1e6 / e.per_sec,
            e.per_cpu_sec,
            1e6 / e.per_cpu_sec
        );
    }
    println!();
    println!("== peak RSS of the server processes (after the load)");
    for (label, hwm, now) in rss {
        println!("{label:<20} VmHWM {hwm:>6.1} MiB  (VmRSS now {now:.1} MiB)");
    }

    let eval_of = |l: &str| {
        evals
            .iter()
            .find(|e| e.label.ends_with(l))
            .map_or(f64::NAN, |e| e.per_cpu_sec)
    };
    let kim_rss = rss
        .iter()
        .find(|r| r.0.contains("kim"))
        .map_or(f64::NAN, |r| r.1);
    println!();
    println!("== targets (issue 3); machine: {cores} cores shared by load generator and server");
    println!(
        "{:<40} {:>12} {:>16}  verdict",
        "target", "wanted", "measured"
    );
    let row = |what: String, wanted: &str, measured: String, met: bool| {
        println!("{what:<40} {wanted:>12} {measured:>16}  {}", verdict(met));
    };
    row(
        "ratio (b)/(a) /validate".into(),
        ">= 0.80",
        format!("{rb:.3}"),
        rb >= 0.8,
    );
    row(
        "ratio (c)/(a) /mutate".into(),
        ">= 0.80",
        format!("{rc:.3}"),
        rc >= 0.8,
    );
    row(
        format!("p99 /validate, {n} connections"),
        "<= 1000 µs",
        format!("{:.0} µs", b.p99_us),
        b.p99_us <= 1000.0,
    );
    row(
        format!("p99 /mutate, {n} connections"),
        "<= 1000 µs",
        format!("{:.0} µs", c.p99_us),
        c.p99_us <= 1000.0,
    );
    if let Some(b1) = b1 {
        row(
            "p99 /validate, 1 connection".into(),
            "<= 1000 µs",
            format!("{:.0} µs", b1.p99_us),
            b1.p99_us <= 1000.0,
        );
    }
    if let Some(c1) = c1 {
        row(
            "p99 /mutate, 1 connection".into(),
            "<= 1000 µs",
            format!("{:.0} µs", c1.p99_us),
            c1.p99_us <= 1000.0,
        );
    }
    let ev = eval_of("Validate");
    let em = eval_of("Mutate");
    row(
        "evaluation Validate, per CPU-second".into(),
        ">= 50000/s",
        format!("{ev:.0}/s"),
        ev >= 50_000.0,
    );
    row(
        "evaluation Mutate, per CPU-second".into(),
        ">= 50000/s",
        format!("{em:.0}/s"),
        em >= 50_000.0,
    );
    row(
        "kim peak RSS under load (VmHWM)".into(),
        "<= 64 MiB",
        format!("{kim_rss:.1} MiB"),
        kim_rss <= 64.0,
    );
    let errors: u64 = passes.iter().map(|p| p.errors).sum();
    row(
        "errors (all passes)".into(),
        "0",
        errors.to_string(),
        errors == 0,
    );
    let conns_ok = passes.iter().all(|p| p.established == p.connections);
    row(
        "connections seen by the server".into(),
        "as configured",
        if conns_ok {
            "yes".into()
        } else {
            "differs".into()
        },
        conns_ok,
    );
    println!("load average at end {}", loadavg());
}
