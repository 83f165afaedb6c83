//! The real binaries as child processes: the server on port 0, and the CLI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A binary of the workspace, in the target directory above this test executable.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is not built: run `cargo test --workspace` (it builds every binary)",
        path.display()
    );
    path
}

/// A running `partner-billing-server`; killed on drop.
pub struct ServerProcess {
    child: Child,
    pub base_url: String,
    /// Every line the server writes on stdout, in order.
    log: std::sync::mpsc::Receiver<String>,
}

impl ServerProcess {
    /// Starts the server on 127.0.0.1:0 with `env` (plus a database URL) in `dir`, and waits
    /// for the address it logs.
    pub fn start(database_url: &str, dir: &Path, env: &[(&str, &str)]) -> Self {
        Self::start_binary(
            &binary("partner-billing-server"),
            &[],
            database_url,
            dir,
            env,
        )
    }

    /// As [`start`](Self::start), with another program (and its arguments) that serves like
    /// the server: the crash tests run their own test executable, which has the crash points of
    /// feature `fault-injection` that no shipped binary has.
    pub fn start_binary(
        program: &Path,
        args: &[&str],
        database_url: &str,
        dir: &Path,
        env: &[(&str, &str)],
    ) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .env("PARTNER_BILLING_DATABASE_URL", database_url)
            .env("PARTNER_BILLING_LISTEN", "127.0.0.1:0")
            .env("PARTNER_BILLING_LOG", "info")
            .envs(env.iter().copied())
            .current_dir(dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start server");
        let stdout = child.stdout.take().expect("server stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        let (log_tx, log) = std::sync::mpsc::channel();
        // Reads the log until the address shows, then keeps draining it so the server never
        // blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = log_tx.send(strip_ansi(&line));
                let line = strip_ansi(&line);
                // A server error line reaches the test's output, so a failure shows its cause.
                if line.contains("ERROR") {
                    eprintln!("server: {line}");
                }
                if let Some(rest) = line.split(" address=").nth(1) {
                    let _ = tx.send(
                        rest.split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned(),
                    );
                } else if let Some(rest) = line.split("\"address\":\"").nth(1) {
                    // `--log-format json`
                    let _ = tx.send(rest.split('"').next().unwrap_or_default().to_owned());
                }
            }
        });
        let mut server = Self {
            child,
            base_url: String::new(),
            log,
        };
        let address = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the server logs its address within a minute");
        server.base_url = format!("http://{address}");
        server
    }

    /// The process id, e.g. to read its memory use from `/proc`.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits (bounded) for a log line containing `text`; returns it.
    pub fn wait_for_log(&self, text: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.checked_duration_since(Instant::now())?;
            match self.log.recv_timeout(left) {
                Ok(line) if line.contains(text) => return Some(line),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// SIGKILL: the process dies wherever it is, mid-transaction included.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Whether the process has exited (killed, or ended by itself).
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(status.success(), "kill -TERM failed");
        let started = Instant::now();
        while started.elapsed() < within {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A log line without terminal colour sequences.
pub fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}
