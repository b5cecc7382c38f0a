//! Names and files the controller tests share: the namespaces and the controller's user as the
//! shipped manifests and `docs/config.example.yaml` set them, the Runtime samples and the
//! example converter configuration.

use std::path::{Path, PathBuf};

/// The Gardener project namespace of `docs/config.example.yaml` (project `kyma-dev`).
pub const GARDEN_NS: &str = "garden-kyma-dev";
/// The controller's user as kube-apiserver authenticates its ServiceAccount.
pub const CONTROLLER_USER: &str = "system:serviceaccount:kim-system:kim-controller";

/// `CARGO_MANIFEST_DIR`.
pub fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The shared Runtime samples.
pub fn samples_dir() -> PathBuf {
    manifest_dir().join("samples/runtimes")
}

/// The example converter configuration.
pub fn config() -> kim::gardener::Config {
    kim::reconciler::load_config(&manifest_dir().join("docs/config.example.yaml"), None)
        .expect("example config loads")
}
