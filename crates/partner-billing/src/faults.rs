//! Fault and crash injection for tests (feature `fault-injection`). Without the feature
//! nothing can be armed and every check is a constant `false` or a no-op.

#[cfg(feature = "fault-injection")]
use std::sync::{Arc, Mutex};

/// Steps of promo generation at which tests can make it fail (feature `fault-injection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// Drawing the random codes.
    DrawCodes,
    /// Sealing the recovery payload.
    SealPayload,
    /// After the debit, inside the transaction.
    AfterDebit,
    /// After the code hashes are inserted.
    AfterCodes,
    /// After every effect, just before the idempotency record and the COMMIT.
    BeforeCommit,
    /// Fails a license's writes after its debit, as a database error would: in a group
    /// transaction, every request of the group must fail and none commit.
    LicenseWrite,
    /// Panics in the request handler after drawing the codes, with a message that quotes one
    /// of them: the answer must be a plain 500 and neither the answer nor the log may hold it.
    Panic,
    /// Makes the batch's first code hash one that another batch already holds, as an 80-bit
    /// collision would: the code must be redrawn, not the batch failed.
    CodeCollision,
    /// Fails a change's transaction right after its audit entry is written, as a database
    /// error would: neither the change nor the entry may remain.
    AfterAuditEntry,
}

/// The faults armed on one store, each consumed by the first check at its point.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "fault-injection")]
    armed: Arc<Mutex<Vec<FaultPoint>>>,
}

impl Faults {
    /// Makes the next check at `point` fail (once).
    #[cfg(feature = "fault-injection")]
    pub(crate) fn inject(&self, point: FaultPoint) {
        self.armed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(point);
    }

    /// Whether a fault is armed at `point`; consumes it.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn take(&self, point: FaultPoint) -> bool {
        let mut armed = self.armed.lock().unwrap_or_else(|p| p.into_inner());
        match armed.iter().position(|f| *f == point) {
            Some(index) => {
                armed.remove(index);
                true
            }
            None => false,
        }
    }

    /// Without feature `fault-injection` nothing can be armed: no lock on the request path.
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub(crate) fn take(&self, _point: FaultPoint) -> bool {
        false
    }
}

/// Moments around the COMMIT of a keyed write at which a test build can kill its own process
/// (feature `fault-injection`), as a power cut or an OOM kill would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Every statement has run; the COMMIT has not been sent.
    BeforeCommit,
    /// The COMMIT has returned; the answer has not been sent.
    AfterCommit,
}

/// Environment variable arming a [`CrashPoint`] in a test build: `before-commit:N` or
/// `after-commit:N` kills the process with SIGKILL at the N-th keyed commit it makes.
#[cfg(feature = "fault-injection")]
pub const CRASH_AT_ENV: &str = "PARTNER_BILLING_CRASH_AT";

/// Kills this process with SIGKILL if [`CRASH_AT_ENV`] armed `point` for this commit.
#[cfg(feature = "fault-injection")]
pub(crate) fn crash_point(point: CrashPoint) {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    static ARMED: OnceLock<Option<(CrashPoint, u64)>> = OnceLock::new();
    static COMMITS: AtomicU64 = AtomicU64::new(0);
    let armed = ARMED.get_or_init(|| {
        let value = std::env::var(CRASH_AT_ENV).ok()?;
        let (name, n) = value.split_once(':')?;
        let point = match name {
            "before-commit" => CrashPoint::BeforeCommit,
            "after-commit" => CrashPoint::AfterCommit,
            _ => return None,
        };
        Some((point, n.parse().ok()?))
    });
    let Some((armed_point, nth)) = *armed else {
        return;
    };
    let commit = if point == CrashPoint::BeforeCommit {
        COMMITS.fetch_add(1, Ordering::SeqCst) + 1
    } else {
        COMMITS.load(Ordering::SeqCst)
    };
    // A commit attempt can end without committing (the license group's first try on
    // PostgreSQL fails whole when another process moved its rows), so an armed `after-commit`
    // fires at the first commit that returns once the N-th has been attempted.
    let reached = match point {
        CrashPoint::BeforeCommit => commit == nth,
        CrashPoint::AfterCommit => commit >= nth,
    };
    if point == armed_point && reached {
        tracing::warn!(?point, commit, "fault injection: killing this process");
        // The log's writer thread would not get to it before the kill: straight to stderr.
        eprintln!("fault injection: killing this process at {point:?} of commit {commit}");
        let _ = std::process::Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        // SIGKILL is asynchronous to the sender's return; never go on past the crash point.
        loop {
            std::thread::park();
        }
    }
}

/// Without feature `fault-injection` nothing can be armed.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn crash_point(_point: CrashPoint) {}
