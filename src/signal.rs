//! Process signals shared by the long-running commands (`kim webhook`, `kim controller`).

use anyhow::Context as _;

/// Waits for SIGTERM or SIGINT; returns its name.
pub(crate) async fn shutdown_signal() -> anyhow::Result<&'static str> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = term.recv() => Ok("SIGTERM"),
            r = tokio::signal::ctrl_c() => r.map(|_| "SIGINT").context("waiting for SIGINT"),
        }
    }
    #[cfg(not(unix))]
    {
        tokio::signal::ctrl_c()
            .await
            .context("waiting for Ctrl-C")?;
        Ok("SIGINT")
    }
}
