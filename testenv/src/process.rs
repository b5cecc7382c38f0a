//! A process that tests and benches spawn (`kim webhook`, `kim controller`) with its output
//! captured ([`crate::capture`]): search what it printed so far, wait for a line, signal it,
//! wait for its exit. Killed and reaped when dropped, so a failing test leaves no process behind.

use std::ffi::OsString;
use std::io;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::capture::{Captured, capture};

/// A spawned child with stdout and stderr captured.
pub struct Process {
    child: Child,
    stdout: Captured,
    stderr: Captured,
    readers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("pid", &self.child.id())
            .finish()
    }
}

impl Process {
    /// Spawns `cmd` with stdin from `/dev/null` and stdout and stderr captured.
    pub fn spawn(cmd: &mut Command) -> io::Result<Process> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let (stdout, h1) = capture(child.stdout.take().expect("piped stdout"));
        let (stderr, h2) = capture(child.stderr.take().expect("piped stderr"));
        Ok(Process {
            child,
            stdout,
            stderr,
            readers: vec![h1, h2],
        })
    }

    /// Its process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Everything it wrote to stdout so far (lossy UTF-8).
    pub fn stdout(&self) -> String {
        self.stdout
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Everything it wrote to stderr so far (lossy UTF-8).
    pub fn stderr(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Its exit status, if it has exited (reaps it).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends signal `name` (`TERM`, `INT`, `KILL`, …) through `kill(1)`; `false` if that failed
    /// (e.g. the process is gone).
    pub fn signal(&self, name: &str) -> bool {
        Command::new("kill")
            .args([&format!("-{name}"), &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Waits until `found` returns a value for (stdout, stderr) as captured so far: what the
    /// process printed accumulates, so nothing it printed can be missed. `Err` with both
    /// outputs if it exits first or nothing is found within `limit`.
    pub async fn wait_output<T>(
        &mut self,
        limit: Duration,
        mut found: impl FnMut(&str, &str) -> Option<T>,
    ) -> Result<T, String> {
        let start = Instant::now();
        loop {
            let (out, err) = (self.stdout(), self.stderr());
            if let Some(v) = found(&out, &err) {
                return Ok(v);
            }
            if let Some(status) = self.exited() {
                self.join_readers();
                let (out, err) = (self.stdout(), self.stderr());
                return match found(&out, &err) {
                    Some(v) => Ok(v),
                    None => Err(format!("exited ({status}):\n{out}\n{err}")),
                };
            }
            if start.elapsed() > limit {
                return Err(format!("nothing within {limit:?}:\n{out}\n{err}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The string field `field` of the first JSON line on stdout that has one (kim's
    /// `--log-format json` start-up lines: `addr`, `metrics_addr`), waiting up to `limit`.
    pub async fn logged(&mut self, field: &str, limit: Duration) -> Result<String, String> {
        self.wait_output(limit, |out, _| {
            out.lines().find_map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).ok()?;
                v[field].as_str().map(String::from)
            })
        })
        .await
        .map_err(|e| format!("no {field} logged: {e}"))
    }

    /// Waits up to `limit` for the exit; once exited, also until its output is read to the
    /// end. `None` if it is still running.
    pub async fn exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        let status = loop {
            if let Some(s) = self.exited() {
                break s;
            }
            if start.elapsed() >= limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        self.join_readers();
        Some(status)
    }

    /// Stops it as Kubernetes stops a container ([`crate::capture::terminate`]: SIGTERM, then
    /// SIGKILL after `grace`), waits until its output is read to the end and returns
    /// (stdout, stderr).
    pub fn terminate(&mut self, grace: Duration) -> (String, String) {
        crate::capture::terminate(&mut self.child, grace);
        self.join_readers();
        (self.stdout(), self.stderr())
    }

    /// SIGKILL (no clean-up in the process), reaped; returns (stdout, stderr).
    pub fn kill(&mut self) -> (String, String) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.join_readers();
        (self.stdout(), self.stderr())
    }

    /// After the exit: the pipes close, the reader threads end with everything captured.
    fn join_readers(&mut self) {
        for h in std::mem::take(&mut self.readers) {
            let _ = h.join();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The arguments the tests and the simulate example run `kim webhook` with: HTTPS and
/// `/metrics` on ephemeral ports of 127.0.0.1, certificates from `cert_dir` (with `dev`:
/// `--dev`, which generates them there on first start and prints the ports on stderr).
pub fn kim_webhook_args(cert_dir: &Path, dev: bool) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["webhook".into()];
    if dev {
        args.push("--dev".into());
    }
    args.extend(
        [
            "--addr",
            "127.0.0.1:0",
            "--metrics-addr",
            "127.0.0.1:0",
            "--cert-dir",
        ]
        .map(OsString::from),
    );
    args.push(cert_dir.into());
    args
}

/// The arguments the tests, benches and the simulate example run `kim controller` with: the
/// control cluster's and Gardener's kubeconfig files, the converter configuration, the
/// Runtimes' namespace, `/metrics` on an ephemeral port, JSON logs (its start-up line carries
/// `metrics_addr`, see [`Process::logged`]), Gardener retries after 1 s, and
/// `--leader-elect=<leader_elect>`.
pub fn kim_controller_args(
    kcp_kubeconfig: &Path,
    garden_kubeconfig: &Path,
    config: &Path,
    namespace: &str,
    leader_elect: bool,
) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec!["controller".into(), "--kubeconfig".into()];
    args.push(kcp_kubeconfig.into());
    args.push("--gardener-kubeconfig".into());
    args.push(garden_kubeconfig.into());
    args.push("--config".into());
    args.push(config.into());
    args.extend(
        [
            "--namespace",
            namespace,
            &format!("--leader-elect={leader_elect}"),
            "--metrics-addr",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--gardener-retry-seconds",
            "1",
        ]
        .map(OsString::from),
    );
    args
}

/// A `cargo` command (`$CARGO`, the cargo running this process, else `cargo` from `PATH`)
/// without the variables cargo sets for the crate it runs (`CARGO_PKG_*`, `CARGO_MANIFEST_*`,
/// `CARGO_CRATE_*`, `CARGO_BIN_*`, `CARGO_PRIMARY_PACKAGE`, `OUT_DIR`): inherited, they make
/// build scripts that watch them (ring's) rerun, so the nested build and the next plain
/// `cargo build` would recompile kim.
pub fn cargo_command() -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_MANIFEST_")
            || k.starts_with("CARGO_CRATE_")
            || k.starts_with("CARGO_BIN_")
            || k == "CARGO_PRIMARY_PACKAGE"
            || k == "OUT_DIR"
        {
            cmd.env_remove(&key);
        }
    }
    cmd
}
