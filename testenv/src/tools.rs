//! The binaries the tests drive, as tests find them: the client tools `scripts/install-tools.sh`
//! installs (kubectl with kustomize built in, helm) and the control plane
//! `scripts/install-control-plane.sh` builds (kube-apiserver, etcd, gardener-apiserver).
//!
//! They live in `<workspace>/target/tools/bin` (or `$KIM_TOOLS_DIR/bin`). kube-apiserver and
//! etcd come in one version per supported Kubernetes minor; `$KIM_KUBERNETES` ([`KUBERNETES_VAR`])
//! selects it for the whole test run: unset (or [`DEFAULT_KUBERNETES`]) takes the ones in `bin`,
//! another minor those in `k8s-<minor>/bin` beside it ([`path`]). The install
//! script reads the same variable, so `KIM_KUBERNETES=1.37 bash scripts/test.sh` builds and
//! tests the newest. Every other tool is the same for every minor.
//!
//! A test that needs a tool calls [`require`], which fails the test when the binary is missing:
//! no test is skipped for want of a tool. `bash scripts/test.sh` installs every tool before it
//! runs the tests.

use std::io;
use std::path::PathBuf;

/// The environment variable that selects the Kubernetes minor of kube-apiserver and etcd for
/// the whole test run (`1.35`, `1.37`); read here and by `scripts/install-control-plane.sh`.
pub const KUBERNETES_VAR: &str = "KIM_KUBERNETES";

/// The minor the tests run on when [`KUBERNETES_VAR`] is unset or empty: the oldest supported
/// one, whose kube-apiserver and etcd are in `<tools>/bin`. The same default is written in
/// `scripts/install-control-plane.sh`.
pub const DEFAULT_KUBERNETES: &str = "1.35";

/// The binaries that exist once per Kubernetes minor (see [`path`]).
const PER_MINOR: [&str; 2] = ["kube-apiserver", "etcd"];

/// The tools' root: `$KIM_TOOLS_DIR`, else `<workspace>/target/tools`.
fn root() -> PathBuf {
    match std::env::var_os("KIM_TOOLS_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("testenv lives in the kim workspace")
            .join("target/tools"),
    }
}

/// The Kubernetes minor selected for this run, `1.<n>`: `$KIM_KUBERNETES`, else
/// [`DEFAULT_KUBERNETES`].
///
/// # Errors
/// `InvalidInput` when the variable is set to anything but `1.<n>` (such as `all`, which only
/// the install script takes).
pub fn kubernetes() -> io::Result<String> {
    select(std::env::var_os(KUBERNETES_VAR))
}

/// [`kubernetes`] for the variable's value `value`.
fn select(value: Option<std::ffi::OsString>) -> io::Result<String> {
    let value = match value {
        None => return Ok(DEFAULT_KUBERNETES.into()),
        Some(v) if v.is_empty() => return Ok(DEFAULT_KUBERNETES.into()),
        Some(v) => v.to_string_lossy().into_owned(),
    };
    let minor_ok = value
        .strip_prefix("1.")
        .is_some_and(|m| !m.is_empty() && m.bytes().all(|b| b.is_ascii_digit()));
    if minor_ok {
        Ok(value)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{KUBERNETES_VAR}={value:?}: a test run takes one Kubernetes minor such as \
                 {DEFAULT_KUBERNETES} or 1.37 (`all` is for scripts/install-control-plane.sh only)"
            ),
        ))
    }
}

/// Where tool `name` is installed (the file need not exist): `<tools>/bin`, except
/// kube-apiserver and etcd of a minor ([`kubernetes`]) other than [`DEFAULT_KUBERNETES`],
/// which are in `<tools>/k8s-<minor>/bin`.
///
/// # Errors
/// As [`kubernetes`], for kube-apiserver and etcd.
pub fn path(name: &str) -> io::Result<PathBuf> {
    let minor = if PER_MINOR.contains(&name) {
        kubernetes()?
    } else {
        DEFAULT_KUBERNETES.into()
    };
    Ok(if minor == DEFAULT_KUBERNETES {
        root().join("bin").join(name)
    } else {
        root().join(format!("k8s-{minor}/bin")).join(name)
    })
}

/// The command that installs tool `name`, for the messages of a missing tool.
pub fn install_hint(name: &str) -> String {
    if !matches!(name, "kube-apiserver" | "etcd" | "gardener-apiserver") {
        return "bash scripts/install-tools.sh".into();
    }
    match kubernetes() {
        Ok(minor) if minor != DEFAULT_KUBERNETES && PER_MINOR.contains(&name) => {
            format!("{KUBERNETES_VAR}={minor} bash scripts/install-control-plane.sh")
        }
        _ => "bash scripts/install-control-plane.sh".into(),
    }
}

/// The path of tool `name` (`kubectl`, `helm`, `kube-apiserver`, …), which `test` needs.
///
/// # Panics
/// When it is not installed, saying how to install it, or when `$KIM_KUBERNETES` is invalid.
pub fn require(name: &str, test: &str) -> PathBuf {
    let path = path(name).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert!(
        path.is_file(),
        "{test}: {} is missing; install it with `{}` (or run every test with `bash \
         scripts/test.sh`, which installs all the tools first)",
        path.display(),
        install_hint(name)
    );
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    fn select_str(v: Option<&str>) -> io::Result<String> {
        select(v.map(Into::into))
    }

    #[test]
    fn unset_or_empty_selects_the_default_and_a_minor_selects_itself() {
        assert_eq!(select_str(None).unwrap(), DEFAULT_KUBERNETES);
        assert_eq!(select_str(Some("")).unwrap(), DEFAULT_KUBERNETES);
        assert_eq!(select_str(Some("1.37")).unwrap(), "1.37");
        assert_eq!(select_str(Some("1.35")).unwrap(), "1.35");
    }

    #[test]
    fn anything_but_one_minor_is_refused() {
        for bad in ["all", "1.", "1", "v1.37", "1.37.2", "1.3x", " 1.37"] {
            let e = select_str(Some(bad)).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad}");
            assert!(e.to_string().contains(KUBERNETES_VAR), "{bad}: {e}");
        }
    }
}
