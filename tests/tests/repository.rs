//! The repository stands on its own: no file cites a document that is not in it, and
//! `docs/design.md`, the contract, lists every error code the API defines.
//!
//! Plain text checks over the repository's files, no server and no database. Applied
//! migrations are left as they are (sqlx checksums them), so `migrations/` folders are skipped.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root: this package lives in `tests/`.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

/// The repository's files, relative to the root: what git tracks plus new files it does not
/// ignore; without git, a walk that skips `.git` and `target`.
fn repository_files(root: &Path) -> Vec<PathBuf> {
    let listed = Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output();
    match listed {
        Ok(output) if output.status.success() => output
            .stdout
            .split(|byte| *byte == 0)
            .filter(|name| !name.is_empty())
            .map(|name| PathBuf::from(String::from_utf8_lossy(name).into_owned()))
            .collect(),
        _ => {
            let mut files = Vec::new();
            walk(root, Path::new(""), &mut files);
            files
        }
    }
}

fn walk(root: &Path, relative: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root.join(relative)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == ".git" || name == "target" {
            continue;
        }
        let path = relative.join(&name);
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => walk(root, &path, files),
            Ok(kind) if kind.is_file() => files.push(path),
            _ => {}
        }
    }
}

/// What a citation of an outside document looks like: the two documents' names as upper-case
/// words (whether a section number or `.md` follows), or a bare section sign before a number:
/// this repository's docs name their sections, they do not number them. The names are
/// assembled here so that this file does not match itself.
fn citation_in(line: &str) -> Option<String> {
    let names = [["DES", "IGN"].concat(), ["SP", "EC"].concat()];
    for name in &names {
        for (at, _) in line.match_indices(name.as_str()) {
            let before = line[..at].chars().next_back();
            let after = line[at + name.len()..].chars().next();
            let word_edge = |c: Option<char>| !c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            if word_edge(before) && word_edge(after) {
                return Some(name.clone());
            }
        }
    }
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c == SECTION {
            while chars.next_if(|c| *c == ' ').is_some() {}
            if chars.peek().is_some_and(char::is_ascii_digit) {
                return Some("a numbered section".to_owned());
            }
        }
    }
    None
}

#[test]
fn no_file_cites_a_document_outside_the_repository() {
    let root = root();
    let files = repository_files(&root);
    assert!(
        files.iter().any(|f| f.ends_with("docs/design.md")),
        "the file list looks wrong: {} files",
        files.len()
    );
    let mut citations = Vec::new();
    for file in &files {
        if file.components().any(|c| c.as_os_str() == "migrations") {
            continue;
        }
        // Binary files (screenshots) and files deleted but still listed are not text to read.
        let Ok(text) = std::fs::read_to_string(root.join(file)) else {
            continue;
        };
        for (number, line) in text.lines().enumerate() {
            if let Some(what) = citation_in(line) {
                citations.push(format!("{}:{}: {what}", file.display(), number + 1));
            }
        }
    }
    assert!(
        citations.is_empty(),
        "these lines cite a document that is not in the repository; state the rule in \
         docs/design.md (or the doc of its topic) and point there:\n{}",
        citations.join("\n")
    );
}

/// The `code` strings of `ErrorCode::as_str`, read from the source.
fn defined_error_codes(source: &str) -> Vec<String> {
    let body = source
        .split_once("fn as_str")
        .expect("ErrorCode::as_str exists")
        .1;
    let body = body.split_once("\n    }\n").map_or(body, |(body, _)| body);
    body.split('"')
        .skip(1)
        .step_by(2)
        .filter(|text| text.contains('.') && !text.contains(' '))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_design_doc_lists_every_error_code() {
    let root = root();
    let source = std::fs::read_to_string(root.join("crates/partner-billing/src/wire/problem.rs"))
        .expect("wire/problem.rs");
    let codes = defined_error_codes(&source);
    assert!(
        codes.len() >= 25,
        "only {} codes read: {codes:?}",
        codes.len()
    );
    let design = std::fs::read_to_string(root.join("docs/design.md")).expect("docs/design.md");
    let missing: Vec<&String> = codes
        .iter()
        .filter(|code| !design.contains(&format!("`{code}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/design.md does not list these error codes (add each to its table of codes, with \
         its status and when it is answered): {missing:?}"
    );
}

/// The section sign, spelled so that this file does not match itself.
const SECTION: char = '\u{a7}';

#[test]
fn the_citation_rule_reads_lines_as_meant() {
    let design = ["DES", "IGN"].concat();
    let spec = ["SP", "EC"].concat();
    for cited in [
        format!("see {design} {SECTION}16"),
        format!("({design}.md)"),
        format!("{spec}.md rule 3"),
        format!("as {spec} says"),
        format!("the rule of {SECTION}19"),
        format!("{SECTION} 7"),
    ] {
        assert!(citation_in(&cited).is_some(), "{cited}");
    }
    for clean in [
        "see docs/design.md".to_owned(),
        format!("`docs/design.md` {SECTION} Layers"),
        format!("OPENAPI_{spec} and {design}ER"),
        "the spec says".to_owned(),
    ] {
        assert_eq!(citation_in(&clean), None, "{clean}");
    }
}
