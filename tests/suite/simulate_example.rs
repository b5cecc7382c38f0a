//! `cargo run -p testenv --example simulate` (the README's "try it without a cluster") runs to
//! its end on etcd + kube-apiserver with gardener-apiserver aggregated behind it, kim's
//! manifests installed, the simulated gardenlet and real runtime clusters: every sample Runtime
//! provisioned (with kim's `Ready` Event) and deleted through the real `kim webhook` and
//! `kim controller`, the two illegal status writes it sends refused with kube-apiserver's 403,
//! and its summary with the webhook's own counters and its log of the denials, as it prints
//! them. `--real-apiserver`, the name of the only mode, is still accepted.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;
use testenv::process::Process;

/// The simulate example's binary, built (or found fresh) by `cargo build -p testenv --example
/// simulate` ([`testenv::process::cargo_command`]) with the cargo running this test, so that
/// the test runs the example's current source also under `cargo test --test suite`; located
/// through cargo's JSON messages. Built once per test process.
fn simulate_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(build_simulate).clone()
}

fn build_simulate() -> PathBuf {
    let out = testenv::process::cargo_command()
        .args(["build", "-p", "testenv", "--example", "simulate"])
        .args(["--message-format", "json-render-diagnostics"])
        .arg("--manifest-path")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo build");
    assert!(
        out.status.success(),
        "building the example: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "simulate")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// The sum of the printed `kim_webhook_requests_total{…}` lines whose labels contain all of
/// `labels`.
fn counted(stdout: &str, labels: &[&str]) -> f64 {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("kim_webhook_requests_total{"))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// Runs the example with `args` (at most 300 s) and returns its exit status, stdout and
/// stderr; panics with both outputs when it is still running then.
async fn run_simulate(args: &[&str]) -> (std::process::ExitStatus, String, String) {
    let mut sim = Process::spawn(
        Command::new(simulate_binary())
            .args(args)
            .env("KIM_BIN", env!("CARGO_BIN_EXE_kim"))
            .env_remove("RUST_LOG"),
    )
    .expect("spawn the simulate example");
    // A bound, not a speed goal: the example takes about a minute on two busy cores.
    match sim.exit(Duration::from_secs(300)).await {
        Some(status) => (status, sim.stdout(), sim.stderr()),
        None => {
            let (out, err) = sim.terminate(Duration::from_secs(10));
            panic!("simulate {args:?} still running after 300 s\n{out}\n{err}");
        }
    }
}

/// The example's end: the two refusals (403 from kim's validating webhook, the rogue
/// certificate user's by the writer rule), every sample Runtime Ready with its `Ready` Event,
/// then deleted, 2 writes denied, the webhook's counters with 3 denials by /validate (the
/// readiness probe's and the two) and its log of the same 3 denials with their users.
fn assert_end_result(stdout: &str) {
    let refused: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("was refused: HTTP 403"))
        .collect();
    assert_eq!(refused.len(), 2, "{stdout}");
    let by_webhook =
        "admission webhook \"runtime-status.validate.kim.kyma-project.io\" denied the request";
    assert!(
        refused[0].contains("the rogue client's write")
            && refused[0].contains(by_webhook)
            && refused[0].contains("[writer]")
            && refused[0].contains("user \"rogue\" may not write Runtime status"),
        "{}",
        refused[0]
    );
    assert!(
        refused[1].contains("the write with an unknown reason")
            && refused[1].contains(by_webhook)
            && refused[1].contains("BecauseISaidSo"),
        "{}",
        refused[1]
    );
    let samples = std::fs::read_dir(kim::testing::model::samples_dir().join("runtimes"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "yaml")
        })
        .count();
    assert!(
        stdout.contains(&format!("{samples} Runtimes provisioned and deleted")),
        "{stdout}"
    );
    assert!(
        stdout.contains("writes kube-apiserver sent to kim webhook's /validate:")
            && stdout.contains("admitted, 2 denied;"),
        "{stdout}"
    );
    // The webhook's counters as printed: the denied writes by /validate, and every Runtime
    // Ready (and deleted) through allowed reviews.
    assert_eq!(
        counted(stdout, &["path=\"/validate\"", "decision=\"denied\""]),
        3.0,
        "{stdout}"
    );
    assert!(
        counted(stdout, &["path=\"/validate\"", "decision=\"allowed\""]) >= samples as f64,
        "{stdout}"
    );
    // The watch's lines (`[  1.2s] <name> <state> …`).
    let watched = |l: &&str| l.starts_with('[');
    assert!(
        stdout
            .lines()
            .filter(watched)
            .filter(|l| l.contains(" Ready "))
            .count()
            >= samples,
        "every Runtime printed Ready: {stdout}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(watched)
            .filter(|l| l.ends_with(" deleted"))
            .count(),
        samples,
        "every Runtime printed deleted once: {stdout}"
    );
    let events: Vec<&str> = stdout
        .lines()
        .filter(|l| l.trim_start().starts_with("Normal Ready runtime/"))
        .collect();
    assert_eq!(
        events.len(),
        samples,
        "one Ready Event per Runtime: {stdout}"
    );
    // The webhook's log, one line per denial: the probe's (as the admin), the rogue's, the
    // second controller token's.
    let log = stdout
        .split_once("kim webhook's log of the reviews it denied")
        .unwrap_or_else(|| panic!("no log of the denials printed: {stdout}"))
        .1;
    let denials: Vec<&str> = log
        .lines()
        .skip(1)
        .take_while(|l| l.contains(" user="))
        .collect();
    assert_eq!(denials.len(), 3, "{stdout}");
    assert!(
        denials[1].contains("user=rogue code=403 rules=writer"),
        "{}",
        denials[1]
    );
    assert!(
        denials[2].contains("user=system:serviceaccount:kim-system:kim-controller code=403")
            && denials[2].contains("BecauseISaidSo"),
        "{}",
        denials[2]
    );
}

/// Needs kube-apiserver, etcd and gardener-apiserver from `scripts/install-control-plane.sh`,
/// kubectl from `scripts/install-tools.sh`: the controller runs as its ServiceAccount under the
/// shipped RBAC, on the real Gardener API with the simulated gardenlet and real runtime
/// clusters, and the rogue client is a certificate user whom RBAC lets write, so that kim's
/// writer rule is what refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_runs_to_the_end_with_two_denied_writes() {
    let (status, stdout, stderr) = run_simulate(&[]).await;
    assert!(
        status.success(),
        "{status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    for phrase in [
        "kim on a real etcd + kube-apiserver",
        "real Gardener API (gardener-apiserver), a simulated gardenlet and real runtime",
        "serving the Gardener API (gardener-apiserver, project kyma-dev)",
        "installed: namespace kcp-system, manifests/crd.yaml, manifests/base",
        "admission in effect",
        "kim controller running (as system:serviceaccount:kim-system:kim-controller: a TokenRequest token",
        "Events kim's controller published (events.k8s.io/v1, kcp-system):",
    ] {
        assert!(stdout.contains(phrase), "{phrase:?} not printed:\n{stdout}");
    }
    assert!(
        !stdout.contains("--real-apiserver changes nothing"),
        "{stdout}"
    );
    assert_end_result(&stdout);
}

/// `--real-apiserver` (once the name of the mode that is now the only one) is accepted and
/// said to change nothing; an unknown option after it is still refused, before any cluster
/// starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_accepts_the_real_apiserver_flag_and_refuses_an_unknown_option() {
    let (status, stdout, stderr) = run_simulate(&["--real-apiserver", "--in-memory"]).await;
    assert_eq!(status.code(), Some(1), "{status}\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("note: --real-apiserver changes nothing"),
        "{stdout}"
    );
    assert!(
        stderr.contains(
            "SIMULATION FAILED: unknown option --in-memory; usage: simulate [SAMPLES_DIR]"
        ),
        "{stderr}"
    );
    assert!(
        !stdout.contains("SIMULATION —"),
        "no cluster started: {stdout}"
    );
}
