//! Slow clients (docs/operations.md, "Connections"): poem 3.1's `Server` offers only an idle timeout,
//! so the acceptor is wrapped. It bounds the connections open at once, and each connection's
//! stream enforces time limits on the client's reads:
//!
//! - a new connection, and each request after the first on a keep-alive one, must send its
//!   headers (up to the blank line) within `headers` (10 s) of its first byte (of the accept,
//!   for the first request);
//! - once the headers are in, the rest of the request (its `Content-Length` bytes, or a chunked
//!   body until the answer starts) must arrive within `body` (30 s);
//! - a keep-alive connection with no request for `idle` (60 s) is closed, and so is one whose
//!   answer the client stops reading for as long (the limit restarts with every write).
//!
//! A read that stays pending past its deadline fails with `TimedOut`, which ends the
//! connection; a stalled client holds a task and a socket, never a request slot. Once the whole
//! request is in, the deadline is the service's own time to answer ([`ANSWER_LIMIT`], beyond
//! any wait of the service: a write waiting its turn is answered, never cut off). Blank lines
//! before a request start nothing; an interim `100 Continue` is not the answer; an HTTP/2
//! connection (prior knowledge or ALPN) is held to the idle limit, restarted by every frame
//! either way.

use std::io::Result as IoResult;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use poem::http::uri::Scheme;
use poem::listener::Acceptor;
use poem::web::{LocalAddr, RemoteAddr};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

/// The time limits on a client.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// From a request's first byte (or the accept) to the end of its headers.
    pub headers: Duration,
    /// From the end of the headers to the end of the request.
    pub body: Duration,
    /// A keep-alive connection waiting for its next request.
    pub idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            headers: Duration::from_secs(10),
            body: Duration::from_secs(30),
            idle: Duration::from_secs(60),
        }
    }
}

/// An acceptor that holds at most `max` connections open and puts limits on each.
pub struct GuardedAcceptor<A> {
    inner: A,
    permits: Arc<Semaphore>,
    limits: Limits,
}

impl<A> GuardedAcceptor<A> {
    pub fn new(inner: A, max: usize, limits: Limits) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(max.max(1))),
            limits,
        }
    }
}

impl<A: Acceptor> Acceptor for GuardedAcceptor<A> {
    type Io = GuardedStream<A::Io>;

    fn local_addr(&self) -> Vec<LocalAddr> {
        self.inner.local_addr()
    }

    async fn accept(&mut self) -> IoResult<(Self::Io, LocalAddr, RemoteAddr, Scheme)> {
        // At the limit, no accept happens: new connections wait in the kernel's backlog.
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(std::io::Error::other)?;
        let (io, local, remote, scheme) = self.inner.accept().await?;
        Ok((
            GuardedStream::new(io, permit, self.limits),
            local,
            remote,
            scheme,
        ))
    }
}

/// Where a connection is in its current request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the first byte of a request (after an answer, on keep-alive).
    Idle,
    /// Reading headers; `matched` bytes of `\r\n\r\n` seen so far, `started` once a byte other
    /// than CR or LF came (blank lines before a request line are skipped, as the parser does).
    Headers { matched: u8, started: bool },
    /// Headers complete; reading the body: `remaining` bytes of a `Content-Length` body, or
    /// `None` for a chunked one (read until the answer starts).
    Body { remaining: Option<u64> },
    /// The whole request is in and the service works on its answer.
    Waiting,
    /// An HTTP/2 connection: frames, not lines; idle limit only.
    Http2,
}

/// How long the service may take to start an answer once the whole request is in: beyond its
/// longest wait (a SQLite write's turn and connection, 30 s each).
pub const ANSWER_LIMIT: Duration = Duration::from_secs(120);

/// The first line of HTTP/2 with prior knowledge (the connection preface of RFC 9113).
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0";

/// Header bytes kept to find the body's length: requests' headers are small; past this, the
/// body is treated as of unknown length (deadline until the answer starts).
const HEADER_BYTES_KEPT: usize = 8 * 1024;

/// What the headers say of the body: its length, `Some(0)` when there is none, `None` when it
/// is chunked or the headers could not be read whole.
fn body_length(headers: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(headers).ok()?;
    let mut length = Some(0);
    for line in text.split("\r\n").skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case("transfer-encoding") {
            return None;
        }
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse().ok()?);
        }
    }
    length
}

/// Where a chunk of header bytes stands against the `\r\n\r\n` that ends the headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeaderScan {
    /// The headers end within the chunk, just before this index.
    End(usize),
    /// They go on; the chunk ends with this many bytes of the terminator.
    Partial(u8),
}

/// Finds the end of the headers in `bytes`, whose predecessors ended with `matched` bytes of
/// `\r\n\r\n`. A match begun before the chunk completes within its first three bytes; any
/// other lies wholly inside it; what the chunk ends with is in its last three.
fn headers_end(matched: u8, bytes: &[u8]) -> HeaderScan {
    const END: &[u8; 4] = b"\r\n\r\n";
    // The longest end of what was read that begins the terminator, one byte more.
    let step = |matched: u8, byte: u8| {
        if byte == END[usize::from(matched)] {
            matched + 1
        } else {
            u8::from(byte == b'\r')
        }
    };
    let mut carried = matched;
    for (at, &byte) in bytes.iter().take(3).enumerate() {
        carried = step(carried, byte);
        if carried == 4 {
            return HeaderScan::End(at + 1);
        }
    }
    if let Some(at) = bytes.windows(4).position(|w| w == END) {
        return HeaderScan::End(at + 4);
    }
    match bytes.len().checked_sub(3) {
        Some(tail) if tail > 0 => {
            HeaderScan::Partial(bytes[tail..].iter().fold(0, |m, &b| step(m, b)))
        }
        _ => HeaderScan::Partial(carried),
    }
}

/// A client connection with read deadlines; gives its slot back when dropped.
pub struct GuardedStream<Io> {
    inner: Io,
    _permit: OwnedSemaphorePermit,
    limits: Limits,
    phase: Phase,
    deadline: Pin<Box<Sleep>>,
    /// The current request's header bytes (up to [`HEADER_BYTES_KEPT`]), for its body length.
    headers: Vec<u8>,
}

impl<Io> GuardedStream<Io> {
    fn new(inner: Io, permit: OwnedSemaphorePermit, limits: Limits) -> Self {
        Self {
            inner,
            _permit: permit,
            limits,
            // The first request's headers must all arrive within the header limit of the
            // accept: a client that connects and says nothing is a slow client.
            phase: Phase::Headers {
                matched: 0,
                started: false,
            },
            deadline: Box::pin(tokio::time::sleep(limits.headers)),
            headers: Vec::new(),
        }
    }

    fn restart(&mut self, phase: Phase, limit: Duration) {
        self.phase = phase;
        self.deadline.as_mut().reset(Instant::now() + limit);
    }

    /// Follows the request through the bytes just read.
    fn saw(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            match self.phase {
                Phase::Http2 => {
                    self.restart(Phase::Http2, self.limits.idle);
                    return;
                }
                // A new request (after an answer, or pipelined behind one being answered).
                Phase::Idle | Phase::Waiting => {
                    self.headers.clear();
                    self.restart(
                        Phase::Headers {
                            matched: 0,
                            started: false,
                        },
                        self.limits.headers,
                    );
                }
                Phase::Body { remaining: None } => return,
                Phase::Body {
                    remaining: Some(left),
                } => {
                    // The body's bytes in one step; what follows it is the next request.
                    let taken = usize::try_from(left).unwrap_or(usize::MAX).min(bytes.len());
                    let left = left - taken as u64;
                    if left == 0 {
                        self.restart(Phase::Waiting, ANSWER_LIMIT);
                    } else {
                        self.phase = Phase::Body {
                            remaining: Some(left),
                        };
                    }
                    bytes = &bytes[taken..];
                }
                Phase::Headers { matched, started } => {
                    bytes = self.saw_headers(matched, started, bytes);
                }
            }
        }
    }

    /// Header bytes: kept (the first [`HEADER_BYTES_KEPT`]) until `\r\n\r\n` ends them, then
    /// on to the body. Returns what follows the headers. The chunk is searched as a whole, not
    /// byte by byte: this runs on every request's every byte.
    fn saw_headers<'b>(&mut self, matched: u8, started: bool, mut bytes: &'b [u8]) -> &'b [u8] {
        if !started {
            // Blank lines before a request line are skipped, as the parser does.
            let blank = bytes
                .iter()
                .take_while(|&&b| b == b'\r' || b == b'\n')
                .count();
            bytes = &bytes[blank..];
            if bytes.is_empty() {
                return bytes;
            }
        }
        let (taken, ended) = match headers_end(matched, bytes) {
            HeaderScan::End(end) => (end, true),
            HeaderScan::Partial(matched) => {
                self.phase = Phase::Headers {
                    matched,
                    started: true,
                };
                (bytes.len(), false)
            }
        };
        let room = HEADER_BYTES_KEPT.saturating_sub(self.headers.len());
        self.headers.extend_from_slice(&bytes[..taken.min(room)]);
        if !ended {
            return &[];
        }
        if self.headers.starts_with(HTTP2_PREFACE) {
            self.restart(Phase::Http2, self.limits.idle);
            return &[];
        }
        let length = if self.headers.len() < HEADER_BYTES_KEPT {
            body_length(&self.headers)
        } else {
            None
        };
        match length {
            Some(0) => self.restart(Phase::Waiting, ANSWER_LIMIT),
            remaining => self.restart(Phase::Body { remaining }, self.limits.body),
        }
        &bytes[taken..]
    }

    /// The server wrote `bytes`: the answer has started (an interim `1xx` has not), and the
    /// next bytes from the client start a new request. The idle limit restarts with every write,
    /// so an answer is cut off only when the client stops reading it for that long.
    fn wrote(&mut self, bytes: &[u8]) {
        match self.phase {
            Phase::Http2 => self.restart(Phase::Http2, self.limits.idle),
            _ if is_interim(bytes) => {}
            _ => self.restart(Phase::Idle, self.limits.idle),
        }
    }
}

/// Whether a write is an interim HTTP/1 answer (`100 Continue`): the request goes on.
fn is_interim(bytes: &[u8]) -> bool {
    (bytes.starts_with(b"HTTP/1.1 1") || bytes.starts_with(b"HTTP/1.0 1"))
        && bytes.get(12) == Some(&b' ')
}

impl<Io: AsyncRead + Unpin> AsyncRead for GuardedStream<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<IoResult<()>> {
        let before = buf.filled().len();
        match Pin::new(&mut self.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                self.saw(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(err)) => Poll::Ready(Err(err)),
            Poll::Pending => match self.deadline.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the client was too slow",
                ))),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for GuardedStream<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<IoResult<usize>> {
        self.wrote(buf);
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<IoResult<usize>> {
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        self.wrote(first);
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IoResult<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<IoResult<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::Semaphore;

    use super::{GuardedStream, HeaderScan, Limits, Phase, body_length, headers_end};

    async fn stream() -> GuardedStream<tokio::io::DuplexStream> {
        let (io, _other) = tokio::io::duplex(64);
        let permit = Arc::new(Semaphore::new(1)).acquire_owned().await.unwrap();
        GuardedStream::new(io, permit, Limits::default())
    }

    #[tokio::test]
    async fn the_phase_follows_the_request() {
        let mut s = stream().await;
        // Blank lines before a request start nothing: still before its first line.
        s.saw(b"\r\n\r\n\r\n");
        assert!(
            matches!(s.phase, Phase::Headers { started: false, .. }),
            "{:?}",
            s.phase
        );
        s.saw(b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nab");
        assert_eq!(s.phase, Phase::Body { remaining: Some(3) });
        // An interim answer is not the answer: the body is still due.
        s.wrote(b"HTTP/1.1 100 Continue\r\n\r\n");
        assert_eq!(s.phase, Phase::Body { remaining: Some(3) });
        s.saw(b"cde");
        assert_eq!(s.phase, Phase::Waiting);
        s.wrote(b"HTTP/1.1 200 OK\r\n");
        assert_eq!(s.phase, Phase::Idle);
        s.saw(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n");
        assert_eq!(s.phase, Phase::Waiting);
    }

    #[tokio::test]
    async fn http2_is_held_to_the_idle_limit() {
        let mut s = stream().await;
        s.saw(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        assert_eq!(s.phase, Phase::Http2);
        s.saw(&[0, 0, 4, 8, 0, 0, 0, 0, 0, 0x0d, 0x0a, 0x0d, 0x0a]);
        assert_eq!(s.phase, Phase::Http2);
    }

    #[test]
    fn the_body_length_comes_from_the_headers() {
        let headers = |lines: &str| format!("POST /x HTTP/1.1\r\n{lines}\r\n").into_bytes();
        assert_eq!(body_length(&headers("Host: a\r\n")), Some(0));
        assert_eq!(body_length(&headers("content-length: 42\r\n")), Some(42));
        assert_eq!(
            body_length(&headers("Content-Length:7\r\nHost: a\r\n")),
            Some(7)
        );
        assert_eq!(
            body_length(&headers("Transfer-Encoding: chunked\r\n")),
            None,
            "chunked: until the answer starts"
        );
        assert_eq!(body_length(&headers("Content-Length: x\r\n")), None);
        assert_eq!(body_length(&[0xff, 0xfe]), None);
    }

    /// However the bytes arrive, the same request is seen: every split of a stream in two and
    /// in three gives the phase and kept headers of the stream read whole.
    #[tokio::test]
    async fn the_phase_does_not_depend_on_how_the_bytes_arrive() {
        let streams: [&[u8]; 4] = [
            b"\r\n\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n",
            b"POST /x HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nX: \r\r\n\r",
            b"GET / HTTP/1.1\r\nA: b\r\n\r\r\n\r\n",
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        ];
        for whole in streams {
            let mut reference = stream().await;
            reference.saw(whole);
            for i in 0..=whole.len() {
                for j in i..=whole.len() {
                    let mut s = stream().await;
                    s.saw(&whole[..i]);
                    s.saw(&whole[i..j]);
                    s.saw(&whole[j..]);
                    assert_eq!(s.phase, reference.phase, "{whole:?} split at {i} and {j}");
                    assert_eq!(
                        s.headers, reference.headers,
                        "{whole:?} split at {i} and {j}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_headers_end_is_found_across_chunks() {
        assert_eq!(headers_end(0, b"a\r\n\r\nb"), HeaderScan::End(5));
        assert_eq!(headers_end(3, b"\nb"), HeaderScan::End(1));
        assert_eq!(headers_end(2, b"\r\n"), HeaderScan::End(2));
        assert_eq!(headers_end(1, b"\n\r"), HeaderScan::Partial(3));
        assert_eq!(headers_end(3, b"\r"), HeaderScan::Partial(1));
        assert_eq!(headers_end(0, b"abc\r\n\r"), HeaderScan::Partial(3));
        assert_eq!(headers_end(2, b"x\r\n\r"), HeaderScan::Partial(3));
        assert_eq!(headers_end(0, b""), HeaderScan::Partial(0));
    }
}
