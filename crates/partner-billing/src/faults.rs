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

/// Points at which a test can hold work in place, while it checks what else goes on
/// (feature `fault-injection`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HoldPoint {
    /// A promo batch holding its generation turn (its account's slot and a global one),
    /// before it draws its codes. Held per account.
    PromoTurnTaken,
    /// A promo batch inside its write transaction, after the debit: a slow write, as a slow
    /// disk would make it. Held per account.
    PromoWriteOpen,
    /// A license group taken from its lane, before its transaction: a slow database, as a
    /// held lock would make it. Held per account (the group's first request's).
    LicenseGroupTaken,
}

/// The faults armed on one store, each consumed by the first check at its point, and the
/// holds set up.
#[derive(Debug, Clone, Default)]
pub(crate) struct Faults {
    #[cfg(feature = "fault-injection")]
    armed: Arc<Mutex<Vec<FaultPoint>>>,
    #[cfg(feature = "fault-injection")]
    holds: Arc<Mutex<Vec<HoldEntry>>>,
}

/// One hold: its point, its subject, and its state.
#[cfg(feature = "fault-injection")]
type HoldEntry = (HoldPoint, i64, Arc<HoldState>);

/// Work held at one point for one subject: how much arrived, and whether it is released.
#[cfg(feature = "fault-injection")]
#[derive(Debug)]
struct HoldState {
    arrived: tokio::sync::watch::Sender<usize>,
    released: tokio::sync::watch::Sender<bool>,
}

/// Holds every arrival at a [`HoldPoint`] for one subject until released (or dropped).
#[cfg(feature = "fault-injection")]
#[derive(Debug)]
pub struct Hold {
    state: Arc<HoldState>,
}

#[cfg(feature = "fault-injection")]
impl Hold {
    /// Waits until at least `n` arrivals are held.
    pub async fn wait_for_arrivals(&self, n: usize) {
        let mut arrived = self.state.arrived.subscribe();
        let _ = arrived.wait_for(|count| *count >= n).await;
    }

    /// How many arrived at the point so far.
    pub fn arrived(&self) -> usize {
        *self.state.arrived.borrow()
    }

    /// Lets everything held go on, and every later arrival pass.
    pub fn release(&self) {
        self.state.released.send_replace(true);
    }
}

#[cfg(feature = "fault-injection")]
impl Drop for Hold {
    fn drop(&mut self) {
        self.release();
    }
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

    /// Holds every later arrival at `point` for `subject` until the hold is released.
    #[cfg(feature = "fault-injection")]
    pub(crate) fn hold(&self, point: HoldPoint, subject: i64) -> Hold {
        let state = Arc::new(HoldState {
            arrived: tokio::sync::watch::Sender::new(0),
            released: tokio::sync::watch::Sender::new(false),
        });
        self.holds.lock().unwrap_or_else(|p| p.into_inner()).push((
            point,
            subject,
            Arc::clone(&state),
        ));
        Hold { state }
    }

    /// Waits at `point` while a hold for `subject` is set and not released.
    #[cfg(feature = "fault-injection")]
    pub(crate) async fn pass(&self, point: HoldPoint, subject: i64) {
        let held: Vec<Arc<HoldState>> = self
            .holds
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(p, s, _)| *p == point && *s == subject)
            .map(|(_, _, state)| Arc::clone(state))
            .collect();
        for state in held {
            let mut released = state.released.subscribe();
            state.arrived.send_modify(|count| *count += 1);
            let _ = released.wait_for(|released| *released).await;
        }
    }

    /// Without feature `fault-injection` nothing is held.
    #[cfg(not(feature = "fault-injection"))]
    #[inline(always)]
    pub(crate) async fn pass(&self, _point: HoldPoint, _subject: i64) {}

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
