//! Every MPI function `src/` implements is called by some C test program
//! under `tests/c/`, whose checks then cover its semantics. The
//! implemented names are found as `build.rs` finds them (the `PMPI_`
//! entry points named in `src/*.rs`, among `functions.txt`'s); the
//! generated stubs are not counted. Needs no C compiler.

use std::collections::BTreeSet;
use std::path::Path;

fn manifest() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files of `dir` whose names end in `.ext`, sorted.
fn files(dir: &Path, ext: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .collect();
    v.sort();
    v
}

/// The `MPI_` functions of `functions.txt` that `src/` implements: the
/// rule `build.rs` uses to decide which names get no stub.
fn implemented() -> BTreeSet<String> {
    let all: BTreeSet<String> = read(&manifest().join("functions.txt"))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    let mut found = BTreeSet::new();
    for path in files(&manifest().join("src"), "rs") {
        for piece in read(&path).split("PMPI_").skip(1) {
            let name: String = piece
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.insert(format!("MPI_{name}"));
        }
    }
    found.intersection(&all).cloned().collect()
}

/// C source without its comments and string literals, so that a name
/// counts only where the program calls it.
fn code_only(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut it = src.chars().peekable();
    while let Some(c) = it.next() {
        match (c, it.peek()) {
            ('/', Some('*')) => {
                it.next();
                let mut prev = ' ';
                for d in it.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                out.push(' ');
            }
            ('/', Some('/')) => {
                for d in it.by_ref() {
                    if d == '\n' {
                        break;
                    }
                }
                out.push('\n');
            }
            ('"', _) => {
                let mut escaped = false;
                for d in it.by_ref() {
                    if !escaped && d == '"' {
                        break;
                    }
                    escaped = !escaped && d == '\\';
                }
                out.push_str("\"\"");
            }
            _ => out.push(c),
        }
    }
    out
}

/// The identifiers followed by `(` in C code: the calls (and macro uses).
fn called(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i].is_ascii_alphabetic() || b[i] == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let mut j = i;
            while j < b.len() && b[j].is_ascii_whitespace() {
                j += 1;
            }
            if j < b.len() && b[j] == b'(' {
                names.insert(code[start..i].to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn every_implemented_function_is_called_by_a_c_test() {
    let implemented = implemented();
    assert!(
        implemented.len() > 100,
        "found only {} implemented functions: has build.rs's rule changed?",
        implemented.len()
    );
    let mut calls = BTreeSet::new();
    let progs = files(&manifest().join("tests/c"), "c");
    assert!(!progs.is_empty(), "no C test programs");
    for p in &progs {
        calls.extend(called(&code_only(&read(p))));
    }
    let missing: Vec<&String> = implemented.difference(&calls).collect();
    assert!(
        missing.is_empty(),
        "{} implemented functions are called by no program in tests/c: {missing:?}",
        missing.len()
    );
}

/// The scanner sees calls, not mentions in comments or strings.
#[test]
fn the_call_scanner_ignores_comments_and_strings() {
    let src = "/* MPI_Send(x) */ int main() { // MPI_Recv(y)\n \
               printf(\"MPI_Bcast(z)\"); MPI_Barrier (MPI_COMM_WORLD); MPI_Wait; }";
    let c = called(&code_only(src));
    assert!(c.contains("MPI_Barrier") && c.contains("printf") && c.contains("main"));
    for n in ["MPI_Send", "MPI_Recv", "MPI_Bcast", "MPI_Wait"] {
        assert!(!c.contains(n), "{n} counted: {c:?}");
    }
}
