//! `partner-billing completions SHELL` and `partner-billing man`: shell completions
//! (clap_complete) and the man page in roff (clap_mangen), generated from the command
//! definition itself so they never drift from it.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::output::Watched;

/// `completions` arguments.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for, e.g. `bash`, `zsh` or `fish`.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Prints the completion script for `shell` on stdout.
pub fn completions(mut command: clap::Command, args: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    let name = command.get_name().to_owned();
    // Written whole afterwards: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, name, &mut script);
    let mut stdout = Watched::new(std::io::stdout().lock());
    let written = stdout
        .write_all(&script)
        .and_then(|()| stdout.flush())
        .context("cannot write the completion script");
    stdout.unless_closed(written)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the man page (roff) on stdout: `partner-billing man > partner-billing.1`.
pub fn man(command: clap::Command) -> anyhow::Result<ExitCode> {
    let mut stdout = Watched::new(std::io::stdout().lock());
    let written = clap_mangen::Man::new(command)
        .render(&mut stdout)
        .context("cannot write the man page");
    stdout.unless_closed(written)?;
    Ok(ExitCode::SUCCESS)
}
