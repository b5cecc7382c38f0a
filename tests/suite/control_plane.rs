//! The test control plane itself (`testenv::controlplane`: real etcd and kube-apiserver), and
//! what only a real API server can judge about the shipped CRD: it installs and is
//! `Established`, and every sample Runtime is stored and read back with no field pruned.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use testenv::controlplane::ControlPlane;

use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};

/// Where a forked child reports its control plane: `<etcd pid> <apiserver pid> <dir>`.
const REPORT_ENV: &str = "TESTENV_CONTROL_PLANE_REPORT";
/// How the forked child ends: `panic` (unwinds, so the handle is dropped) or `abort` (no
/// destructor runs, as when a test process is killed).
const END_ENV: &str = "TESTENV_CONTROL_PLANE_END";

fn alive(pid: u32) -> bool {
    // A zombie still has /proc/<pid>; its state letter is Z.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit(')').next().map(|r| r.trim_start().to_string()))
        .is_some_and(|state| !state.starts_with('Z'))
}

fn forked_child_ends(end: &str) {
    let report = tempfile::NamedTempFile::new().unwrap();
    let report_path = report.path().to_path_buf();
    let end_owned = end.to_string();
    rusty_fork::fork(
        rusty_fork::rusty_fork_test_name!(
            a_test_that_panics_or_aborts_leaves_no_control_plane_behind
        ),
        rusty_fork::rusty_fork_id!(),
        move |cmd| {
            cmd.env(REPORT_ENV, &report_path).env(END_ENV, &end_owned);
        },
        |child, _| {
            let status = child.wait().expect("the child's exit");
            assert!(!status.success(), "the child was meant to fail ({end})");
        },
        child_body,
    )
    .expect("fork");
    let text = std::fs::read_to_string(report.path()).unwrap();
    let parts: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(parts.len(), 3, "child report {text:?}");
    let pids: Vec<u32> = parts[..2].iter().map(|p| p.parse().unwrap()).collect();
    let dir = PathBuf::from(parts[2]);
    // The supervisor stops both within 10 s each; wait for what happened, bounded.
    let deadline = Instant::now() + Duration::from_secs(40);
    while (pids.iter().any(|p| alive(*p)) || dir.exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    for pid in &pids {
        assert!(!alive(*pid), "{end}: process {pid} still runs");
    }
    assert!(!dir.exists(), "{end}: {} still exists", dir.display());
}

/// In the forked child: start a control plane, report it, then fail as told.
fn child_body() {
    let cp = ControlPlane::start().expect("control plane");
    let (etcd, api) = cp.pids();
    let report = std::env::var_os(REPORT_ENV).expect("report path");
    std::fs::write(&report, format!("{etcd} {api} {}", cp.dir().display())).unwrap();
    match std::env::var(END_ENV).as_deref() {
        Ok("abort") => std::process::abort(),
        _ => panic!("deliberate panic with a control plane running"),
    }
}

/// A test that panics (the handle is dropped while unwinding) or aborts (no destructor runs,
/// as when the test process is killed) leaves neither etcd nor kube-apiserver running, nor
/// their directory.
#[test]
fn a_test_that_panics_or_aborts_leaves_no_control_plane_behind() {
    forked_child_ends("panic");
    forked_child_ends("abort");
}

/// Dropping the handle stops both processes and removes the directory before `drop` returns.
#[test]
fn dropping_the_handle_stops_the_control_plane() {
    let cp = ControlPlane::start().expect("control plane");
    let (etcd, api) = cp.pids();
    let dir = cp.dir().to_path_buf();
    assert!(alive(etcd) && alive(api) && dir.is_dir());
    let t = Instant::now();
    drop(cp);
    eprintln!(
        "control plane stopped in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    assert!(!alive(etcd), "etcd {etcd} still runs");
    assert!(!alive(api), "kube-apiserver {api} still runs");
    assert!(!dir.exists(), "{} still exists", dir.display());
}

/// Waits (at most 30 s) until none of `pids` runs; says which still do.
fn wait_gone(pids: &[u32], what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while pids.iter().any(|p| alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<_> = pids.iter().filter(|p| alive(**p)).collect();
    assert!(left.is_empty(), "{what}: {left:?} still run");
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// A supervisor killed with SIGKILL takes both servers with it (parent-death signal), and
/// the handle still removes the directory.
#[test]
fn a_killed_supervisor_takes_its_servers_with_it() {
    let cp = ControlPlane::start().expect("control plane");
    let (etcd, api) = cp.pids();
    let dir = cp.dir().to_path_buf();
    signal(cp.supervisor_pid().expect("running"), "KILL");
    wait_gone(&[etcd, api], "after SIGKILL of the supervisor");
    drop(cp);
    assert!(!dir.exists(), "{} still exists", dir.display());
}

/// SIGTERM or SIGINT to the supervisor (a `timeout` or Ctrl-C reaching the test's process
/// group) stops both servers and removes the directory, as when the pipe closes.
#[test]
fn a_signalled_supervisor_cleans_up() {
    for sig in ["TERM", "INT"] {
        let cp = ControlPlane::start().expect("control plane");
        let (etcd, api) = cp.pids();
        let dir = cp.dir().to_path_buf();
        signal(cp.supervisor_pid().expect("running"), sig);
        wait_gone(&[etcd, api], &format!("after SIG{sig} to the supervisor"));
        let deadline = Instant::now() + Duration::from_secs(30);
        while dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        assert!(!dir.exists(), "SIG{sig}: {} still exists", dir.display());
        drop(cp);
    }
}

/// kube-apiserver and etcd killed with SIGKILL and started again keep their URL, certificates
/// and data: a client made before the kills reads what was written before them, and after
/// the handle is dropped none of the processes (old or restarted) runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_servers_start_again_on_the_same_url_with_their_data() {
    use k8s_openapi::api::core::v1::ConfigMap;
    let cp = ControlPlane::start().expect("control plane");
    let client = cp.admin().await;
    let maps: Api<ConfigMap> = Api::namespaced(client, "default");
    let cm: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "before-the-kills"}})).unwrap();
    maps.create(&PostParams::default(), &cm)
        .await
        .expect("create");
    let (etcd0, api0) = cp.pids();

    cp.kill_apiserver().expect("kill kube-apiserver");
    assert!(!alive(api0), "kube-apiserver {api0} still runs");
    assert!(
        maps.get("before-the-kills").await.is_err(),
        "answered while down"
    );
    let took = tokio::task::block_in_place(|| cp.start_apiserver()).expect("restart");
    let (_, api1) = cp.pids();
    assert_ne!(api0, api1);
    assert!(
        maps.get("before-the-kills").await.is_ok(),
        "read after the restart"
    );

    cp.kill_etcd().expect("kill etcd");
    assert!(!alive(etcd0), "etcd {etcd0} still runs");
    let took_etcd = tokio::task::block_in_place(|| cp.start_etcd()).expect("etcd again");
    let (etcd1, _) = cp.pids();
    assert!(
        maps.get("before-the-kills").await.is_ok(),
        "read after etcd's restart"
    );
    eprintln!(
        "kube-apiserver ready {:.1} s after its restart; etcd restarted and kube-apiserver ready in {:.1} s",
        took.as_secs_f64(),
        took_etcd.as_secs_f64()
    );
    drop(cp);
    for pid in [etcd0, api0, etcd1, api1] {
        assert!(!alive(pid), "process {pid} still runs");
    }
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn runtime_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("infrastructuremanager.kyma-project.io", "v1", "Runtime"),
        "runtimes",
    )
}

/// The members of `sent` that `stored` lacks or holds differently, as JSON pointers (the
/// server adds members of its own, such as metadata.uid; those are not differences).
fn lost(sent: &Value, stored: &Value, at: &str, out: &mut Vec<String>) {
    match (sent, stored) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let here = format!("{at}/{k}");
                match b.get(k) {
                    Some(w) => lost(v, w, &here, out),
                    None => out.push(here),
                }
            }
        }
        (a, b) if a == b => {}
        _ => out.push(at.to_string()),
    }
}

/// The shipped CRD (`manifests/crd.yaml`) installs on kube-apiserver and becomes Established;
/// every sample Runtime is created, given a status through the status subresource, and read
/// back with every field it was sent (nothing pruned, nothing changed).
#[tokio::test]
async fn the_shipped_crd_stores_every_sample_runtime_unchanged() {
    let cp = ControlPlane::shared();
    let crd = std::fs::read_to_string(repo().join("manifests/crd.yaml")).unwrap();
    let names = cp
        .install_crds(&crd)
        .await
        .expect("the shipped CRD installs");
    assert_eq!(names, ["runtimes.infrastructuremanager.kyma-project.io"]);
    let ns = cp.namespace("crd-samples").await;
    let api: Api<DynamicObject> = Api::namespaced_with(cp.admin().await, &ns, &runtime_resource());
    let status = json!({
        "state": "Pending",
        "conditions": [{
            "type": "Provisioned",
            "status": "Unknown",
            "reason": "ShootCreationPending",
            "message": "Shoot creation in progress",
            "lastTransitionTime": "2026-11-01T10:00:00Z",
            "observedGeneration": 1
        }]
    });
    let samples = kim::testing::model::sample_runtimes();
    assert!(samples.len() >= 6);
    for (file, mut obj) in samples {
        obj["metadata"]["namespace"] = json!(ns);
        let name = obj["metadata"]["name"].as_str().unwrap().to_string();
        let sent: DynamicObject = serde_json::from_value(obj.clone()).unwrap();
        let created = api
            .create(&PostParams::default(), &sent)
            .await
            .unwrap_or_else(|e| panic!("{file}: create refused: {e}"));
        let mut diffs = Vec::new();
        lost(
            &obj,
            &serde_json::to_value(&created).unwrap(),
            "",
            &mut diffs,
        );
        assert!(
            diffs.is_empty(),
            "{file}: the server pruned or changed {diffs:?}"
        );

        let patch = json!({"status": status});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap_or_else(|e| panic!("{file}: status write refused: {e}"));
        let stored = serde_json::to_value(api.get(&name).await.unwrap()).unwrap();
        let mut want = obj.clone();
        want["status"] = status.clone();
        let mut diffs = Vec::new();
        lost(&want, &stored, "", &mut diffs);
        assert!(
            diffs.is_empty(),
            "{file}: after the status write, pruned or changed {diffs:?}"
        );
    }
}
