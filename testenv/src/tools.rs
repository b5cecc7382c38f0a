//! The client binaries `scripts/install-tools.sh` installs (kubectl with kustomize built in,
//! helm), as tests find them.
//!
//! They live in `<workspace>/target/tools/bin` (or `$KIM_TOOLS_DIR/bin`). A test that needs
//! one calls [`require`], which fails the test when the binary is missing: no test is skipped
//! for want of a tool. `bash scripts/test.sh` installs every tool before it runs the tests.

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

/// The path of tool `name` (`kubectl`, `helm`), which `test` needs. Panics when it is not
/// installed, saying how to install it.
pub fn require(name: &str, test: &str) -> PathBuf {
    let path = dir().join(name);
    assert!(
        path.is_file(),
        "{test}: {} is missing; install it with `bash scripts/install-tools.sh` \
         (or run every test with `bash scripts/test.sh`, which installs all the tools first)",
        path.display()
    );
    path
}
