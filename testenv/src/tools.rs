//! The client binaries `scripts/install-tools.sh` installs (kubectl with kustomize built in,
//! helm), as tests find them.
//!
//! They live in `<workspace>/target/tools/bin` (or `$KIM_TOOLS_DIR/bin`). A test that needs
//! one calls [`require`]: under CI (`CI=true`, as `.ci/run` runs) a missing binary fails the
//! test, since `.ci/run` installs them first; elsewhere the test is skipped with a note on
//! stderr saying how to install them.

use std::path::PathBuf;

/// The directory the tools are installed in: `$KIM_TOOLS_DIR/bin`, else
/// `<workspace>/target/tools/bin`.
pub fn dir() -> PathBuf {
    match std::env::var_os("KIM_TOOLS_DIR") {
        Some(d) => PathBuf::from(d).join("bin"),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("testenv lives in the kim workspace")
            .join("target/tools/bin"),
    }
}

/// Whether this is a CI run (`CI=true` or `CI=1`).
pub fn under_ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// The path of tool `name` (`kubectl`, `helm`) if it is installed. When it is not: panics
/// under CI ([`under_ci`]), else prints on stderr that `test` is skipped and how to install
/// the tools, and returns `None`.
pub fn require(name: &str, test: &str) -> Option<PathBuf> {
    let path = dir().join(name);
    if path.is_file() {
        return Some(path);
    }
    let how = "install it with `bash scripts/install-tools.sh`";
    assert!(
        !under_ci(),
        "{test}: {} is missing under CI ({how}; .ci/run does so before the tests)",
        path.display()
    );
    eprintln!("SKIPPED {test}: {} not found; {how}", path.display());
    None
}
