//! kim's webhook rolled out under load as a cluster does it, on a real kube-apiserver: two
//! replicas behind HAProxy (health-checked on `/readyz`), the shipped webhook configurations
//! with `failurePolicy: Fail`, paced status writes through kube-apiserver while the replicas
//! are restarted one after the other with SIGTERM and `--shutdown-delay-seconds 4` (HAProxy
//! takes a replica out after two failed checks a second apart), and while
//! their serving certificate is renewed by kubelet's symlink swap ([`testenv::rollout`]).
//! Not one write may fail, kube-apiserver must have called both webhooks for every one, and
//! none may have gone through unchecked. The SIGKILL case and the full load are the rollout
//! benchmark's (`cargo bench --bench rollout`).

use testenv::rollout::{self, Fault, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs CPU to spare: on a machine already saturated, kube-apiserver's webhook calls time out (timeoutSeconds 5) whatever kim does; run it with -- --ignored"]
async fn no_status_write_fails_while_the_webhook_rolls_and_renews_its_certificate() {
    let test = "no_status_write_fails_while_the_webhook_rolls_and_renews_its_certificate";
    testenv::tools::require("kube-apiserver", test);
    assert!(
        std::process::Command::new("haproxy")
            .arg("-v")
            .output()
            .is_ok_and(|o| o.status.success()),
        "{test} needs haproxy; install it with: sudo bash scripts/install-haproxy.sh"
    );
    let opts = Options {
        kim: env!("CARGO_BIN_EXE_kim").into(),
        rate: 25.0,
        seconds: 24.0,
        runtimes: 10,
        shutdown_delay_secs: 4,
        health_check: std::time::Duration::from_secs(1),
        faults: vec![Fault::RollingRestart, Fault::RotateCertificate],
        cpu: None,
        webhook_args: Vec::new(),
    };
    let report = rollout::run(&opts).await.expect("the rollout runs");
    for (at, what) in &report.events {
        eprintln!("{:>7.0} ms  {what}", at.as_secs_f64() * 1e3);
    }
    eprintln!(
        "{} writes, {} failed; kube-apiserver: {:?}; kim: {:?}",
        report.sent,
        report.failed.len(),
        report.apiserver,
        report.kim
    );
    // The restarts and the renewal happened during the load.
    for what in [
        "SIGTERM a",
        "a back in haproxy",
        "SIGTERM b",
        "b back in haproxy",
        "b serves the new certificate",
    ] {
        assert!(
            report.events.iter().any(|(_, e)| e == what),
            "{what} did not happen: {:?}",
            report.events
        );
    }
    assert_eq!(report.sent, (opts.rate * opts.seconds) as u64);
    assert!(
        report.failed.is_empty(),
        "failed writes: {:#?}",
        report.failed
    );
    let calls = |ty: &str| {
        report.apiserver_sum(
            "apiserver_admission_webhook_request_total{",
            &[&format!("type=\"{ty}\""), "rejected=\"false\""],
        )
    };
    for ty in ["validating", "admit"] {
        assert!(
            calls(ty) >= report.sent as f64,
            "kube-apiserver made {} {ty} webhook calls for {} writes: {:?}",
            calls(ty),
            report.sent,
            report.apiserver
        );
    }
    // No write went through unchecked. (Single calls that failed and were retried by
    // kube-apiserver show in `…_rejection_count`, which is printed above: a loaded machine
    // has some, the writes still succeed.)
    assert_eq!(
        report.apiserver_sum("apiserver_admission_webhook_fail_open_count{", &[]),
        0.0,
        "{:?}",
        report.apiserver
    );
}
