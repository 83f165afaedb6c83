//! The log's writer: requests append their formatted lines to one buffer in memory, and a thread
//! of its own writes what gathered to stdout in one write, a few milliseconds after the first
//! line of a batch.
//!
//! A request never waits on stdout, and the writer thread is woken once per batch, not per line:
//! under load a line per request would wake it (and have it spin before sleeping again) for
//! every request, about a tenth of the server's CPU on a read (docs/performance.md, "The log's
//! writer"). Never lossy: past 4 MiB waiting, loggers wait for the write.
//! Keep the [`LogGuard`] until the process ends: dropping it writes out what is left.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writer thread gathers lines after the first of a batch before writing them.
const GATHER: Duration = Duration::from_millis(5);

/// Bytes of lines waiting at most (about 10 000 lines); past that, loggers wait for the write.
const GATHERED_LIMIT: usize = 4 << 20;

/// Lines waiting for the writer thread.
#[derive(Default)]
struct Gathered {
    bytes: Vec<u8>,
    /// The guard was dropped: write what is left and stop.
    closing: bool,
}

#[derive(Default)]
struct Shared {
    gathered: Mutex<Gathered>,
    /// A batch has begun (the buffer was empty), or the guard was dropped.
    begun: Condvar,
    /// The buffer was taken for writing: loggers waiting on a full buffer may go on.
    taken: Condvar,
}

impl Shared {
    /// The buffer; a logger that panicked while holding it left whole lines only (it appends
    /// each line in one `extend`), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, Gathered> {
        self.gathered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Hands lines to the writer thread (`tracing_subscriber`'s writer).
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
}

/// Writes out what is left when dropped, then ends the writer thread.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// A writer for lines to `out`, and the guard that ends it.
pub fn start<W: Write + Send + 'static>(out: W) -> io::Result<(LogWriter, LogGuard)> {
    let shared = Arc::new(Shared::default());
    let thread = std::thread::Builder::new()
        .name("log-writer".to_owned())
        .spawn({
            let shared = shared.clone();
            move || write_batches(&shared, out)
        })?;
    Ok((
        LogWriter {
            shared: shared.clone(),
        },
        LogGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

/// The writer thread: waits for a batch to begin, lets it gather, writes it in one go.
fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    loop {
        let mut gathered = shared.lock();
        while gathered.bytes.is_empty() && !gathered.closing {
            gathered = shared
                .begun
                .wait(gathered)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if !gathered.closing {
            drop(gathered);
            std::thread::sleep(GATHER);
            gathered = shared.lock();
        }
        let closing = gathered.closing;
        std::mem::swap(&mut gathered.bytes, &mut batch);
        drop(gathered);
        shared.taken.notify_all();
        // Nowhere to report a failed write to: the lines are dropped, as a closed stdout
        // would drop them.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        batch.clear();
        if closing {
            return;
        }
    }
}

impl LogWriter {
    fn append(&self, line: &[u8]) {
        let mut gathered = self.shared.lock();
        while gathered.bytes.len() >= GATHERED_LIMIT && !gathered.closing {
            gathered = self
                .shared
                .taken
                .wait(gathered)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let begins = gathered.bytes.is_empty();
        gathered.bytes.extend_from_slice(line);
        drop(gathered);
        if begins {
            self.shared.begun.notify_one();
        }
    }
}

impl Write for &LogWriter {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        self.append(line);
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogWriter {
    type Writer = &'a LogWriter;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.lock().closing = true;
        self.shared.begun.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An output a test can read, and hold shut: until it opens, a write waits.
    #[derive(Clone)]
    struct Output {
        bytes: Arc<Mutex<Vec<u8>>>,
        open: Arc<(Mutex<bool>, Condvar)>,
    }

    impl Output {
        fn new(open: bool) -> Self {
            Self {
                bytes: Arc::default(),
                open: Arc::new((Mutex::new(open), Condvar::new())),
            }
        }

        fn open(&self) {
            *self.open.0.lock().unwrap() = true;
            self.open.1.notify_all();
        }

        fn text(&self) -> String {
            String::from_utf8(self.bytes.lock().unwrap().clone()).unwrap()
        }
    }

    impl Write for Output {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let (open, opened) = &*self.open;
            let _open = opened
                .wait_while(open.lock().unwrap(), |open| !*open)
                .unwrap();
            self.bytes.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Lines from several threads at once while the output is stuck: the loggers fill the
    /// buffer to its limit and wait there (it grows no further); once the output moves, every
    /// line arrives whole, once, and each thread's lines in the order it wrote them.
    #[test]
    fn a_stuck_output_makes_loggers_wait_and_loses_no_line() {
        const THREADS: usize = 4;
        const LINES: usize = 10_000;
        let output = Output::new(false);
        let (writer, guard) = start(output.clone()).unwrap();
        let padding = "x".repeat(200);
        let line_length = padding.len() + 16;
        std::thread::scope(|scope| {
            for thread in 0..THREADS {
                let writer = writer.clone();
                let padding = &padding;
                scope.spawn(move || {
                    for line in 0..LINES {
                        let text = format!("{thread} {line} {padding}\n");
                        (&writer).write_all(text.as_bytes()).unwrap();
                    }
                });
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let waiting = loop {
                let waiting = writer.shared.lock().bytes.len();
                if waiting >= GATHERED_LIMIT {
                    break waiting;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{waiting} bytes waiting"
                );
                std::thread::yield_now();
            };
            assert!(
                waiting < GATHERED_LIMIT + THREADS * line_length,
                "{waiting} bytes waiting: past the limit by at most a line per logger"
            );
            output.open();
        });
        drop(guard);
        let text = output.text();
        let mut next = [0usize; THREADS];
        for line in text.lines() {
            let mut words = line.split(' ');
            let thread: usize = words.next().unwrap().parse().unwrap();
            let number: usize = words.next().unwrap().parse().unwrap();
            assert_eq!(words.next(), Some(padding.as_str()), "a whole line");
            assert_eq!(number, next[thread], "thread {thread}'s lines in order");
            next[thread] += 1;
        }
        assert_eq!(next, [LINES; THREADS], "every line, once");
    }

    /// A line written while nothing else is: out within the gathering time, without the guard
    /// being dropped.
    #[test]
    fn a_lone_line_is_written_without_waiting_for_more() {
        let output = Output::new(true);
        let (writer, guard) = start(output.clone()).unwrap();
        (&writer).write_all(b"alone\n").unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while output.text().is_empty() {
            assert!(std::time::Instant::now() < deadline, "the line was written");
            std::thread::yield_now();
        }
        assert_eq!(output.text(), "alone\n");
        drop(guard);
    }
}
