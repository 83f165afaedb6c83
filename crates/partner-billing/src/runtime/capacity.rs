//! What one process runs at once, all derived from one setting: its database connections.
//!
//! A PostgreSQL license commit lane holds a pool connection (two during a locked retry) and a
//! promo batch holds one while it writes; whatever is left serves every other request. So the
//! lanes and the promo permits are cut from the pool, leaving at least a quarter of it free.

/// The process's concurrency limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Capacity {
    /// License group commit lanes: groups that commit in parallel, an account always in the
    /// same one.
    pub commit_lanes: i64,
    /// Promo batches drawn and stored at once.
    pub promo_batches: usize,
}

impl Capacity {
    /// For a pool of `connections` on `cpus` CPUs. `parallel_writers`: the database runs
    /// writers side by side (PostgreSQL) rather than one at a time (SQLite).
    ///
    /// One writer at a time: one commit lane (every write takes the one lock anyway), and a
    /// batch per connection (each holds up to 1000 codes and a 2000-parameter statement, about
    /// 1 MB; more in parallel would only hold memory while they queue). Writers side by side:
    /// half the connections for promo batches, so that while some draw and seal their codes
    /// others insert theirs; a lane per two CPUs, at most one per eight connections (fewer
    /// lanes make bigger groups, more overlap their round trips: on two CPUs one lane measured
    /// best, docs/performance.md).
    pub(crate) fn for_pool(connections: u32, parallel_writers: bool, cpus: usize) -> Self {
        let connections = usize::try_from(connections).unwrap_or(usize::MAX).max(1);
        if !parallel_writers {
            return Self {
                commit_lanes: 1,
                promo_batches: connections,
            };
        }
        let lanes = (cpus / 2).clamp(1, (connections / 8).max(1));
        Self {
            commit_lanes: i64::try_from(lanes).unwrap_or(1),
            promo_batches: (connections / 2).max(1),
        }
    }

    /// [`for_pool`](Self::for_pool) on this machine's CPUs.
    pub(crate) fn for_this_machine(connections: u32, parallel_writers: bool) -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
        Self::for_pool(connections, parallel_writers, cpus)
    }
}

#[cfg(test)]
mod tests {
    use super::Capacity;

    #[test]
    fn limits_follow_the_pool() {
        // SQLite's pool of four: one lane, four batches.
        assert_eq!(
            Capacity::for_pool(4, false, 8),
            Capacity {
                commit_lanes: 1,
                promo_batches: 4
            }
        );
        // PostgreSQL's pool of 16: eight batches, a lane per two CPUs up to two, so at least
        // four connections stay free for everything else.
        for (cpus, lanes) in [(1, 1), (2, 1), (4, 2), (64, 2)] {
            let capacity = Capacity::for_pool(16, true, cpus);
            assert_eq!(capacity.promo_batches, 8);
            assert_eq!(capacity.commit_lanes, lanes, "{cpus} CPUs");
            let held = capacity.promo_batches + 2 * usize::try_from(lanes).unwrap();
            assert!(16 - held >= 4);
        }
    }
}
