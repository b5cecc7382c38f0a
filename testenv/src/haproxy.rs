//! HAProxy (Debian's package, `scripts/install-haproxy.sh`) in front of webhook replicas on
//! loopback, as a Kubernetes Service spreads a webhook's pods: TCP mode (TLS passes through to
//! the replicas), round robin, each replica health-checked with `GET /readyz` on its metrics
//! port every `interval` (down after two failed checks, up after one good one: about the
//! second or two a Service's endpoints take to drop a pod that turned unready). Readiness is what
//! takes a replica out: after SIGTERM `kim webhook --shutdown-delay-seconds N` answers 503 on
//! `/readyz` while it keeps serving, so HAProxy stops sending new connections before the
//! listener closes — the part a Service's endpoints play in a cluster.
//!
//! The process runs in the foreground (`-db`) under [`crate::process::Process`]: killed with
//! its owner. Its state is read from its admin socket (`show stat`).

use crate::process::Process;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// One replica behind the load balancer.
#[derive(Clone, Debug)]
pub struct Backend {
    /// Server name in HAProxy's configuration and stats.
    pub name: String,
    /// The replica's TLS listener.
    pub addr: SocketAddr,
    /// Where its `/readyz` is served (plain HTTP).
    pub health: SocketAddr,
}

/// A running HAProxy.
pub struct Haproxy {
    /// The frontend: what webhook configurations call.
    pub addr: SocketAddr,
    _process: Process,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Haproxy {
    /// Starts `haproxy` (the binary on `PATH`) with `backends`, and waits until its admin
    /// socket answers.
    ///
    /// # Errors
    /// haproxy is missing, rejects the configuration, exits, or its socket does not answer
    /// within 10 s (its output is in the message).
    pub async fn start(backends: &[Backend], interval: Duration) -> Result<Haproxy, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let socket = dir.path().join("admin.sock");
        // A port another process takes between this probe and haproxy's bind makes haproxy
        // exit with a bind error: try again with another.
        let mut last = String::new();
        for _ in 0..5 {
            let port = crate::controlplane::free_port().map_err(|e| e.to_string())?;
            let mut cfg = format!(
                "global\n  maxconn 4096\n  stats socket {} mode 600 level admin\n\
                 defaults\n  mode tcp\n  timeout connect 1s\n  timeout client 60s\n  timeout server 60s\n\
                 frontend webhook\n  bind 127.0.0.1:{port}\n  default_backend replicas\n\
                 backend replicas\n  balance roundrobin\n  option httpchk GET /readyz\n  http-check expect status 200\n\
                 \x20 default-server inter {}ms fall 2 rise 1\n",
                socket.display(),
                interval.as_millis()
            );
            for b in backends {
                cfg.push_str(&format!(
                    "  server {} {} check port {}\n",
                    b.name,
                    b.addr,
                    b.health.port()
                ));
            }
            let path = dir.path().join("haproxy.cfg");
            std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
            let mut cmd = Command::new("haproxy");
            cmd.arg("-db").arg("-f").arg(&path);
            let mut process = Process::spawn(&mut cmd).map_err(|e| {
                format!("haproxy: {e} (install it with: sudo bash scripts/install-haproxy.sh)")
            })?;
            let started = Instant::now();
            loop {
                if let Some(status) = process.exited() {
                    last = format!(
                        "haproxy exited ({status}): {}{}",
                        process.stdout(),
                        process.stderr()
                    );
                    break;
                }
                if admin(&socket, "show info").is_ok() {
                    return Ok(Haproxy {
                        addr: SocketAddr::from(([127, 0, 0, 1], port)),
                        _process: process,
                        socket,
                        _dir: dir,
                    });
                }
                if started.elapsed() > Duration::from_secs(10) {
                    return Err("haproxy's admin socket did not answer within 10 s".into());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Err(last)
    }

    /// Each server's status (`UP`, `DOWN`, `MAINT`, …) by name, from `show stat`.
    ///
    /// # Errors
    /// The admin socket does not answer.
    pub fn states(&self) -> Result<Vec<(String, String)>, String> {
        let csv = admin(&self.socket, "show stat")?;
        let mut lines = csv.lines();
        let header: Vec<&str> = lines
            .next()
            .unwrap_or_default()
            .trim_start_matches("# ")
            .split(',')
            .collect();
        let col = |name: &str| header.iter().position(|h| *h == name);
        let (px, sv, st) = (
            col("pxname").ok_or("no pxname")?,
            col("svname").ok_or("no svname")?,
            col("status").ok_or("no status")?,
        );
        Ok(lines
            .map(|l| l.split(',').collect::<Vec<_>>())
            .filter(|f| {
                f.len() > st && f[px] == "replicas" && f[sv] != "BACKEND" && f[sv] != "FRONTEND"
            })
            .map(|f| (f[sv].to_string(), f[st].to_string()))
            .collect())
    }

    /// Waits (polling the admin socket every 20 ms, at most `limit`) until server `name`'s
    /// status starts with `UP` (`up`) or not.
    ///
    /// # Errors
    /// Not reached within `limit`; the last states read.
    pub async fn wait_server(&self, name: &str, up: bool, limit: Duration) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let states = self.states()?;
            if states
                .iter()
                .any(|(n, s)| n == name && s.starts_with("UP") == up)
            {
                return Ok(());
            }
            if started.elapsed() > limit {
                return Err(format!(
                    "{name} not {} within {limit:?}: {states:?}",
                    if up { "UP" } else { "down" }
                ));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// One command on the admin socket; its answer.
fn admin(socket: &std::path::Path, command: &str) -> Result<String, String> {
    let mut s = UnixStream::connect(socket).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    s.write_all(format!("{command}\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut out = String::new();
    s.read_to_string(&mut out).map_err(|e| e.to_string())?;
    Ok(out)
}
