//! The log's writer: requests append their formatted lines to one buffer in memory, and a thread
//! of its own writes what gathered to stdout in one write, a few milliseconds after the first
//! line of a batch.
//!
//! A request never waits on stdout, and the writer thread is woken once per batch, not per line:
//! under load a line per request would wake it (and have it spin before sleeping again) for
//! every request, about a tenth of the server's CPU on a read (docs/performance.md, "The log's
//! writer"). Never lossy: past 4 MiB waiting, loggers wait until the writer takes them.
//! Dropping the [`LogGuard`] (at the end of the process) writes out what is waiting at once;
//! the thread goes on writing what comes after, without gathering, until the process ends.

use std::io::{self, ErrorKind, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long the writer thread gathers lines after the first of a batch before writing them.
const GATHER: Duration = Duration::from_millis(5);

/// Bytes of lines waiting at most (about 10 000 lines); past that, loggers wait for the writer
/// to take them.
const GATHERED_LIMIT: usize = 4 << 20;

/// How long dropping the guard waits for what is waiting to be written (a stuck stdout must
/// not hold the process's exit for ever).
const CLOSING_WAIT: Duration = Duration::from_secs(5);

/// How long the writer waits before writing again to an output that would block (a stdout
/// left non-blocking by whoever started the process).
const BLOCKED_RETRY: Duration = Duration::from_millis(1);

/// Lines waiting for the writer thread, and where the writer is.
#[derive(Default)]
struct Gathered {
    bytes: Vec<u8>,
    /// The writer holds a batch it has not finished writing.
    writing: bool,
    /// The guard was dropped: each batch is written at once, without gathering.
    closing: bool,
    /// The writer thread ended (it panicked): lines have nowhere to go.
    gone: bool,
}

#[derive(Default)]
struct Shared {
    gathered: Mutex<Gathered>,
    /// A batch has begun (the buffer was empty), or the guard was dropped.
    begun: Condvar,
    /// The writer took the buffer, or finished writing it.
    taken: Condvar,
}

impl Shared {
    /// The buffer; a logger that panicked while holding it left whole lines only (it appends
    /// each line in one `extend`), so a poisoned lock is taken as it is.
    fn lock(&self) -> MutexGuard<'_, Gathered> {
        self.gathered.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait<'a>(
        &self,
        on: &Condvar,
        gathered: MutexGuard<'a, Gathered>,
    ) -> MutexGuard<'a, Gathered> {
        on.wait(gathered).unwrap_or_else(PoisonError::into_inner)
    }
}

/// Hands lines to the writer thread (`tracing_subscriber`'s writer).
#[derive(Clone)]
pub struct LogWriter {
    shared: Arc<Shared>,
}

/// Writes out what is waiting when dropped.
pub struct LogGuard {
    shared: Arc<Shared>,
}

/// A writer for lines to `out`, and the guard that writes out what is waiting.
pub fn start<W: Write + Send + 'static>(out: W) -> io::Result<(LogWriter, LogGuard)> {
    let shared = Arc::new(Shared::default());
    std::thread::Builder::new()
        .name("log-writer".to_owned())
        .spawn({
            let shared = shared.clone();
            move || {
                let _gone = Gone(&shared);
                write_batches(&shared, out);
            }
        })?;
    Ok((
        LogWriter {
            shared: shared.clone(),
        },
        LogGuard { shared },
    ))
}

/// Marks the writer gone when its thread ends, so that no logger waits for it for ever.
struct Gone<'a>(&'a Shared);

impl Drop for Gone<'_> {
    fn drop(&mut self) {
        self.0.lock().gone = true;
        self.0.taken.notify_all();
    }
}

/// The writer thread: waits for a batch to begin, lets it gather, writes it in one go.
fn write_batches<W: Write>(shared: &Shared, mut out: W) {
    let mut batch = Vec::new();
    let mut failed = false;
    loop {
        let mut gathered = shared.lock();
        while gathered.bytes.is_empty() {
            gathered = shared.wait(&shared.begun, gathered);
        }
        if !gathered.closing {
            drop(gathered);
            std::thread::sleep(GATHER);
            gathered = shared.lock();
        }
        std::mem::swap(&mut gathered.bytes, &mut batch);
        gathered.writing = true;
        drop(gathered);
        shared.taken.notify_all();
        if let Err(err) = write_out(&mut out, &batch)
            && !failed
        {
            // The one place left to say it; said once, not for every batch (and not with
            // `eprintln!`, which panics when stderr is gone too).
            let _ = writeln!(
                io::stderr(),
                "the log could not be written to stdout ({err}); its lines are lost"
            );
            failed = true;
        }
        batch.clear();
        if batch.capacity() > GATHERED_LIMIT {
            // After a burst, keep one buffer of the limit's size at most, not two.
            batch = Vec::new();
        }
        shared.lock().writing = false;
        shared.taken.notify_all();
    }
}

/// Writes the whole batch, waiting out an output that would block.
fn write_out<W: Write>(out: &mut W, mut batch: &[u8]) -> io::Result<()> {
    while !batch.is_empty() {
        match out.write(batch) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(written) => batch = &batch[written..],
            Err(err) if err.kind() == ErrorKind::Interrupted => {}
            Err(err) if err.kind() == ErrorKind::WouldBlock => std::thread::sleep(BLOCKED_RETRY),
            Err(err) => return Err(err),
        }
    }
    out.flush()
}

impl LogWriter {
    fn append(&self, line: &[u8]) {
        let mut gathered = self.shared.lock();
        while gathered.bytes.len() >= GATHERED_LIMIT && !gathered.gone {
            gathered = self.shared.wait(&self.shared.taken, gathered);
        }
        if gathered.gone {
            return;
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
    /// From now on each batch is written at once; waits (up to [`CLOSING_WAIT`]) until what
    /// is waiting has been written.
    fn drop(&mut self) {
        let mut gathered = self.shared.lock();
        gathered.closing = true;
        self.shared.begun.notify_one();
        let _ = self
            .shared
            .taken
            .wait_timeout_while(gathered, CLOSING_WAIT, |g| {
                !g.gone && (g.writing || !g.bytes.is_empty())
            });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

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

    /// Opens the output when dropped: a failed assertion must not leave the loggers and the
    /// writer waiting on it for ever.
    struct OpenAtEnd<'a>(&'a Output);

    impl Drop for OpenAtEnd<'_> {
        fn drop(&mut self) {
            self.0.open();
        }
    }

    /// Lines from several threads at once while the output is stuck, three times what the
    /// buffer holds: the loggers fill the buffer to its limit and wait there (for a fifth of a
    /// second it grows no further and not every logger finishes); once the output moves, every line
    /// arrives whole, once, and each thread's lines in the order it wrote them.
    #[test]
    fn a_stuck_output_makes_loggers_wait_and_loses_no_line() {
        const THREADS: usize = 4;
        let padding = "x".repeat(200);
        let line_length = format!("00 00000000 {padding}\n").len();
        let lines = 3 * GATHERED_LIMIT / (THREADS * line_length);
        let output = Output::new(false);
        let (writer, guard) = start(output.clone()).unwrap();
        let finished = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            let _open = OpenAtEnd(&output);
            for thread in 0..THREADS {
                let writer = writer.clone();
                let (padding, finished) = (&padding, &finished);
                scope.spawn(move || {
                    for line in 0..lines {
                        let text = format!("{thread:02} {line:08} {padding}\n");
                        (&writer).write_all(text.as_bytes()).unwrap();
                    }
                    finished.fetch_add(1, Ordering::SeqCst);
                });
            }
            let deadline = Instant::now() + Duration::from_secs(30);
            while writer.shared.lock().bytes.len() < GATHERED_LIMIT {
                assert!(Instant::now() < deadline, "the buffer never filled");
                std::thread::yield_now();
            }
            let watched = Instant::now();
            while watched.elapsed() < Duration::from_millis(200) {
                let waiting = writer.shared.lock().bytes.len();
                assert!(
                    waiting < GATHERED_LIMIT + line_length,
                    "{waiting} bytes waiting: past the limit by more than a line"
                );
                // Three times the limit was logged: however the lines fell between the writer's
                // first batch and the buffer, some logger is still waiting.
                assert!(
                    finished.load(Ordering::SeqCst) < THREADS,
                    "the loggers wait"
                );
                std::thread::yield_now();
            }
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
        assert_eq!(next, [lines; THREADS], "every line, once");
    }

    /// A line written while nothing else is, and the guard kept: written all the same.
    #[test]
    fn a_lone_line_is_written_without_waiting_for_more() {
        let output = Output::new(true);
        let (writer, _guard) = start(output.clone()).unwrap();
        (&writer).write_all(b"alone\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while output.text().is_empty() {
            assert!(Instant::now() < deadline, "the line was written");
            std::thread::yield_now();
        }
        assert_eq!(output.text(), "alone\n");
    }

    /// Dropping the guard writes out what is waiting before it returns; a line logged after
    /// that is still written.
    #[test]
    fn dropping_the_guard_writes_what_waits_and_later_lines_still_go_out() {
        let output = Output::new(true);
        let (writer, guard) = start(output.clone()).unwrap();
        for line in 0..1000 {
            (&writer).write_all(format!("{line}\n").as_bytes()).unwrap();
        }
        drop(guard);
        assert_eq!(output.text().lines().count(), 1000);
        (&writer).write_all(b"after\n").unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !output.text().ends_with("after\n") {
            assert!(Instant::now() < deadline, "the later line was written");
            std::thread::yield_now();
        }
    }

    /// An output that would block at first (a non-blocking stdout that is full) delays the
    /// lines, never drops them.
    #[test]
    fn an_output_that_would_block_delays_lines_and_drops_none() {
        #[derive(Clone, Default)]
        struct Busy {
            refusals: Arc<AtomicUsize>,
            bytes: Arc<Mutex<Vec<u8>>>,
        }
        impl Write for Busy {
            fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
                if self.refusals.fetch_add(1, Ordering::SeqCst) < 3 {
                    return Err(ErrorKind::WouldBlock.into());
                }
                // A short write: half, then the rest on the next call.
                let taken = bytes.len().div_ceil(2);
                self.bytes
                    .lock()
                    .unwrap()
                    .extend_from_slice(&bytes[..taken]);
                Ok(taken)
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let busy = Busy::default();
        let (writer, guard) = start(busy.clone()).unwrap();
        (&writer).write_all(b"first line\nsecond line\n").unwrap();
        drop(guard);
        assert_eq!(&*busy.bytes.lock().unwrap(), b"first line\nsecond line\n");
    }
}
