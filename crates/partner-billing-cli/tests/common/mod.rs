//! What the CLI tests share: a temporary directory (the workspace's test kit's) and the checks
//! of the output contract. Every test binary (`admin`, `product`, `promo`) uses all of it.

use std::process::Output;

pub use partner_billing_testkit::TempDir;

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A success, or the command and everything it printed.
pub fn assert_success(out: &Output, args: &[&str]) {
    assert!(
        out.status.success(),
        "{args:?} failed ({:?}): stdout {:?} stderr {:?}",
        out.status.code(),
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A failure: non-zero exit, nothing on stdout, one `error: ` line on stderr holding
/// `expected` and no canary secret.
pub fn assert_one_line_error(out: &Output, expected: &str) -> String {
    assert!(
        !out.status.success(),
        "expected failure, got stdout {:?}",
        text(&out.stdout)
    );
    assert!(
        out.stdout.is_empty(),
        "stdout on failure: {:?}",
        text(&out.stdout)
    );
    let stderr = text(&out.stderr);
    assert_eq!(
        stderr.lines().count(),
        1,
        "stderr is not one line: {stderr:?}"
    );
    assert!(stderr.starts_with("error: "), "{stderr:?}");
    assert!(stderr.contains(expected), "{stderr:?} lacks {expected:?}");
    assert!(!stderr.contains("canary"), "{stderr:?}");
    stderr
}
