//! The process-wide tracing subscriber of the test binary (one per process, so one for every
//! test): every event at `info` and above, from every target, and the webhook's per-review
//! lines at `debug` too (routine answers are logged there), in kim's production text format
//! (`kim::webhook::init_tracing`, without colours as in a container) into a buffer that tests
//! search ([`captured`]); and, filtered by `RUST_LOG` (errors only when unset), the same events
//! to the test harness's output. Tests that need every level install their own subscriber for
//! their thread with `tracing::subscriber::set_default`.

use std::sync::{Arc, Mutex, OnceLock};
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// The buffer keeps at most this many bytes (64 MiB); later events are dropped.
const LIMIT: usize = 64 * 1024 * 1024;

static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let mut buf = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if buf.len() < LIMIT {
            buf.extend_from_slice(b);
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Installs the subscriber (once; later calls do nothing).
pub fn init() {
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = buf.clone();
        let capture = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(move || LogWriter(w.clone()))
            .with_filter(tracing_subscriber::EnvFilter::new(
                "info,kim::webhook::server=debug",
            ));
        let harness = tracing_subscriber::fmt::layer()
            .with_test_writer()
            .with_filter(tracing_subscriber::EnvFilter::from_default_env());
        let subscriber = tracing_subscriber::registry().with(capture).with(harness);
        let _ = tracing::subscriber::set_global_default(subscriber);
        buf
    });
}

/// Everything captured so far (lossy UTF-8), from every test of the process: search it for
/// lines only the caller's test can have written (its own uid, its own secrets).
pub fn captured() -> String {
    init();
    let buf = LOGS.get().expect("initialised");
    String::from_utf8_lossy(&buf.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
}
