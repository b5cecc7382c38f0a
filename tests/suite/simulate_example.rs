//! `cargo run -p testenv --example simulate` (the README's "try it without a cluster") runs to
//! its end, in both modes (in-memory control cluster, and `--real-apiserver`: etcd +
//! kube-apiserver with kim's manifests installed): every sample Runtime provisioned and
//! deleted through the real `kim webhook` and `kim controller`, the two illegal status writes
//! it sends refused with the apiserver's 403, and its summary with the webhook's own counters,
//! as it prints them.

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

/// Runs the example with `args` (at most 300 s) and returns its stdout; panics with both
/// outputs when it fails.
async fn run_simulate(args: &[&str]) -> String {
    let mut sim = Process::spawn(
        Command::new(simulate_binary())
            .args(args)
            .env("KIM_BIN", env!("CARGO_BIN_EXE_kim"))
            .env_remove("RUST_LOG"),
    )
    .expect("spawn the simulate example");
    // A bound, not a speed goal: the example takes well under a minute on two busy cores.
    let status = sim.exit(Duration::from_secs(300)).await;
    let (stdout, stderr) = match status {
        Some(_) => (sim.stdout(), sim.stderr()),
        None => {
            let (out, err) = sim.terminate(Duration::from_secs(10));
            panic!("simulate {args:?} still running after 300 s\n{out}\n{err}");
        }
    };
    let status = status.unwrap();
    assert!(
        status.success(),
        "{status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    stdout
}

/// What both modes print at the end: the two refusals (403 from kim's validating webhook),
/// every sample Runtime Ready, then provisioned and deleted, 2 writes denied, and the
/// webhook's counters with `validate_denied` denials by /validate (the real apiserver's
/// readiness probe adds one). Returns the two refusal lines.
fn assert_end_result(stdout: &str, validate_denied: f64) -> (String, String) {
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
            && refused[0].contains("[writer]"),
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
    let samples = std::fs::read_dir(testenv::model::samples_dir().join("runtimes"))
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
    assert!(stdout.contains("admitted, 2 denied;"), "{stdout}");
    // The webhook's counters as printed: the denied writes by /validate, and every Runtime
    // Ready (and deleted) through allowed reviews.
    assert_eq!(
        counted(stdout, &["path=\"/validate\"", "decision=\"denied\""]),
        validate_denied,
        "{stdout}"
    );
    assert!(
        counted(stdout, &["path=\"/validate\"", "decision=\"allowed\""]) >= samples as f64,
        "{stdout}"
    );
    assert!(
        stdout.lines().filter(|l| l.contains(" Ready ")).count() >= samples,
        "every Runtime printed Ready: {stdout}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(" deleted")).count(),
        samples,
        "every Runtime printed deleted once: {stdout}"
    );
    (refused[0].to_string(), refused[1].to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_runs_to_the_end_with_two_denied_writes() {
    let stdout = run_simulate(&[]).await;
    assert!(stdout.contains("kim on in-memory API servers"), "{stdout}");
    assert_end_result(&stdout, 2.0);
}

/// `--real-apiserver` (needs kube-apiserver, etcd and gardener-apiserver from
/// `scripts/install-control-plane.sh`, kubectl from `scripts/install-tools.sh`): the same end,
/// with the controller as its ServiceAccount under the shipped RBAC, the real Gardener API with
/// the simulated gardenlet and real runtime clusters, and the rogue client a certificate user
/// whom RBAC lets write, so that kim's writer rule is what refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_on_a_real_apiserver_runs_to_the_end_with_two_denied_writes() {
    let stdout = run_simulate(&["--real-apiserver"]).await;
    for phrase in [
        "kim on a real etcd + kube-apiserver",
        "real Gardener API (gardener-apiserver), a simulated gardenlet and real runtime",
        "serving the Gardener API (gardener-apiserver, project kyma-dev)",
        "installed: namespace kcp-system, manifests/crd.yaml, manifests/base",
        "admission in effect",
        "kim controller running (as system:serviceaccount:kim-system:kim-controller: a TokenRequest token",
    ] {
        assert!(stdout.contains(phrase), "{phrase:?} not printed:\n{stdout}");
    }
    let (rogue, _) = assert_end_result(&stdout, 3.0);
    assert!(
        rogue.contains("user \"rogue\" may not write Runtime status"),
        "{rogue}"
    );
    assert!(
        stdout.contains("writes kube-apiserver sent to kim webhook's /validate:"),
        "{stdout}"
    );
}
