//! Reading a password: one line from stdin, or a no-echo prompt on the terminal. Never a flag,
//! never printed.

use std::io::{BufRead, IsTerminal, Write};
use std::process::{Command, Stdio};

use anyhow::{Context, Result};

use crate::args::usage;

/// Reads one line from stdin, without its line ending: a password, one line piped in.
pub fn read_stdin_line() -> Result<String> {
    read_stdin_password("no password on stdin: pipe one line into the command")
}

/// Reads one line from stdin, without its line ending; `missing` is the error when there is
/// none.
pub fn read_stdin_password(missing: &str) -> Result<String> {
    let mut line = String::new();
    let read = std::io::stdin()
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    if read == 0 {
        return Err(usage(missing));
    }
    let trimmed = line.strip_suffix('\n').unwrap_or(&line);
    let trimmed = trimmed.strip_suffix('\r').unwrap_or(trimmed);
    if trimmed.is_empty() {
        return Err(usage("the password on stdin is empty"));
    }
    Ok(trimmed.to_owned())
}

/// The password from stdin when it is piped, else from a prompt on the terminal with echo off.
pub async fn read_password(prompt: &str) -> Result<String> {
    if !std::io::stdin().is_terminal() {
        return read_stdin_line();
    }
    let prompt = prompt.to_owned();
    let read = tokio::task::spawn_blocking(move || {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        let echo_off = set_echo(false);
        let result = read_stdin_line();
        if echo_off {
            set_echo(true);
        }
        eprintln!();
        result
    });
    tokio::select! {
        result = read => result.context("the password prompt failed")?,
        _ = tokio::signal::ctrl_c() => {
            set_echo(true);
            eprintln!();
            std::process::exit(130);
        }
    }
}

/// Turns terminal echo on or off through `stty` (no unsafe code, no extra crate). Returns
/// whether it worked.
fn set_echo(on: bool) -> bool {
    let Ok(tty) = std::fs::File::open("/dev/tty") else {
        return false;
    };
    Command::new("stty")
        .arg(if on { "echo" } else { "-echo" })
        .stdin(Stdio::from(tty))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
