//! The repository's real inputs: sample Runtimes and AdmissionReviews from public projects
//! (`samples/README.md` names each file's origin).

use serde_json::Value;
use std::path::{Path, PathBuf};

/// The repository's `samples/` directory (read at run time from the source tree).
pub fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("samples")
}

/// Every sample Runtime of `samples/runtimes/` as (file name, JSON object), by file name.
///
/// Panics when the directory cannot be read, a file is not YAML, or there are fewer than the
/// six samples the tests are written for.
pub fn sample_runtimes() -> Vec<(String, Value)> {
    let out: Vec<(String, Value)> = files(&samples_dir().join("runtimes"), "yaml")
        .into_iter()
        .map(|p| {
            let text =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            let v =
                serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (file_name(&p), v)
        })
        .collect();
    assert!(out.len() >= 6, "expected the six sample runtimes");
    out
}

/// Every AdmissionReview of `samples/admission/` as (file name, bytes), by file name.
///
/// Panics when the directory cannot be read or does not hold exactly the five samples.
pub fn sample_reviews() -> Vec<(String, Vec<u8>)> {
    let out: Vec<(String, Vec<u8>)> = files(&samples_dir().join("admission"), "json")
        .into_iter()
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (file_name(&p), bytes)
        })
        .collect();
    assert_eq!(out.len(), 5, "expected the five sample reviews");
    out
}

/// The files of `dir` whose extension is `ext`, sorted (a fixed order for every run).
fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    paths.sort();
    paths
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}
