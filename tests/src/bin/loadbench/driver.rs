//! The closed-loop load driver: N tasks, each issuing its next request as soon as the previous
//! one answered, for a warm-up and then a measured window.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// At most this many distinct error messages are kept per run, for the log.
const ERROR_SAMPLES: usize = 5;

/// What one closed-loop run measured. Only requests *started* inside the measured window count.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Successful requests.
    pub ok: u64,
    /// Failed requests (non-2xx or transport error).
    pub errors: u64,
    /// Every request answered, the warm-up's included.
    pub attempts: u64,
    /// From the window's start to the end of its last counted request.
    pub window: Duration,
    /// Latency of each success, sorted, in nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// A few distinct error messages.
    pub error_samples: Vec<String>,
}

impl Measured {
    /// Successes per second over the window.
    pub fn throughput(&self) -> f64 {
        if self.window.is_zero() {
            0.0
        } else {
            self.ok as f64 / self.window.as_secs_f64()
        }
    }

    /// Nearest-rank percentile of the successes' latency, in milliseconds.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.latencies_ns.is_empty() {
            return f64::NAN;
        }
        let n = self.latencies_ns.len();
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        self.latencies_ns[rank.clamp(1, n) - 1] as f64 / 1e6
    }
}

struct WorkerResult {
    ok: u64,
    errors: u64,
    attempts: u64,
    last_done: Option<Instant>,
    latencies_ns: Vec<u64>,
    error_samples: Vec<String>,
}

/// Runs `clients` workers; worker `w` calls `op(w, seq)` with `seq` = 0, 1, 2, … until the
/// window closes. `op` answers `Ok(None)` to be timed from the outside, `Ok(Some(d))` to report
/// its own latency (the raw promo insert excludes drawing its random rows), or `Err(message)`.
pub async fn closed_loop<F, Fut>(
    clients: usize,
    warmup: Duration,
    measure: Duration,
    op: F,
) -> Measured
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Option<Duration>, String>> + Send + 'static,
{
    let op = Arc::new(op);
    let window_start = Instant::now() + warmup;
    let window_end = window_start + measure;
    let mut handles = Vec::with_capacity(clients);
    for worker in 0..clients {
        let op = Arc::clone(&op);
        handles.push(tokio::spawn(async move {
            let mut result = WorkerResult {
                ok: 0,
                errors: 0,
                attempts: 0,
                last_done: None,
                latencies_ns: Vec::new(),
                error_samples: Vec::new(),
            };
            let mut seq = 0u64;
            loop {
                let started = Instant::now();
                if started >= window_end {
                    break;
                }
                let outcome = op(worker, seq).await;
                let done = Instant::now();
                seq += 1;
                result.attempts += 1;
                if started < window_start {
                    continue;
                }
                result.last_done = Some(done);
                match outcome {
                    Ok(own) => {
                        result.ok += 1;
                        let latency = own.unwrap_or_else(|| done - started);
                        result
                            .latencies_ns
                            .push(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
                    }
                    Err(message) => {
                        result.errors += 1;
                        if result.error_samples.len() < ERROR_SAMPLES
                            && !result.error_samples.contains(&message)
                        {
                            result.error_samples.push(message);
                        }
                    }
                }
            }
            result
        }));
    }
    let mut measured = Measured::default();
    let mut last_done = window_start;
    for handle in handles {
        let Ok(result) = handle.await else {
            measured.errors += 1;
            measured
                .error_samples
                .push("a load worker panicked".to_owned());
            continue;
        };
        measured.ok += result.ok;
        measured.errors += result.errors;
        measured.attempts += result.attempts;
        measured.latencies_ns.extend(result.latencies_ns);
        for sample in result.error_samples {
            if measured.error_samples.len() < ERROR_SAMPLES
                && !measured.error_samples.contains(&sample)
            {
                measured.error_samples.push(sample);
            }
        }
        if let Some(done) = result.last_done {
            last_done = last_done.max(done);
        }
    }
    measured.window = last_done - window_start;
    measured.latencies_ns.sort_unstable();
    measured
}
