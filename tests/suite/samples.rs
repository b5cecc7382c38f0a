//! `samples/` against a reference copy of the same files kept outside the repository
//! (`../shared/samples`, present in CI, absent from a clone): every data file
//! is byte-identical in both places, and neither has a file the other lacks. Ignored by default
//! because a clone has nothing to compare with; `.ci/run` runs it with `--ignored`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Every file below `dir` except README.md files (each side documents its own copy), as
/// (path relative to `dir`, bytes).
fn files(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, out);
            } else if path.file_name().is_some_and(|n| n != "README.md") {
                let bytes = std::fs::read(&path).unwrap();
                out.insert(path.strip_prefix(root).unwrap().to_path_buf(), bytes);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

#[test]
#[ignore = "needs the reference copy ../shared/samples beside the repository (CI has it)"]
fn match_their_reference_copy() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let reference = repo.join("../shared/samples");
    assert!(
        reference.is_dir(),
        "{} is missing: this test compares samples/ with it",
        reference.display()
    );
    let ours = files(&repo.join("samples"));
    let theirs = files(&reference);
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&ours),
        names(&theirs),
        "samples/ and {} list different files",
        reference.display()
    );
    for (path, bytes) in &ours {
        assert!(
            *bytes == theirs[path],
            "samples/{} differs from its reference copy: copy the reference file unchanged",
            path.display()
        );
    }
    assert!(
        ours.len() >= 14,
        "expected the 14 sample files, found {}",
        ours.len()
    );
}
