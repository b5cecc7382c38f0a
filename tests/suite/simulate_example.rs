//! `cargo run -p testenv --example simulate` (the README's "try it without a cluster") runs to
//! its end: every sample Runtime provisioned and deleted through the real `kim webhook` and
//! `kim controller`, the two illegal status writes it sends refused with the apiserver's 403,
//! and its summary with the webhook's own counters, as it prints them.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use testenv::process::Process;

/// The simulate example's binary, built (or found fresh) by `cargo build -p testenv --example
/// simulate` ([`testenv::process::cargo_command`]) with the cargo running this test, so that the test runs the example's current
/// source also under `cargo test --test suite`; located through cargo's JSON messages.
fn simulate_binary() -> PathBuf {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_runs_to_the_end_with_two_denied_writes() {
    let mut sim = Process::spawn(
        Command::new(simulate_binary())
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
            panic!("simulate still running after 300 s\n{out}\n{err}");
        }
    };
    let status = status.unwrap();
    assert!(
        status.success(),
        "{status}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let refused: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("was refused: HTTP 403"))
        .collect();
    assert_eq!(refused.len(), 2, "{stdout}");
    assert!(
        refused[0].contains("the rogue client's write"),
        "{}",
        refused[0]
    );
    assert!(
        refused[1].contains("the write with an unknown reason")
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
    // The webhook's counters as printed: the two writes denied by /validate, and every Runtime
    // Ready (and deleted) through allowed reviews.
    assert_eq!(
        counted(&stdout, &["path=\"/validate\"", "decision=\"denied\""]),
        2.0,
        "{stdout}"
    );
    assert!(
        counted(&stdout, &["path=\"/validate\"", "decision=\"allowed\""]) >= samples as f64,
        "{stdout}"
    );
    assert!(
        stdout.lines().filter(|l| l.contains(" Ready ")).count() >= samples,
        "every Runtime printed Ready: {stdout}"
    );
}
