//! `kim` — thin CLI front: `webhook | review | check | policy | crd`.

use clap::{Parser, Subcommand};
use kim::cli;
use std::io::Write;
use std::process::ExitCode;

/// Kyma Infrastructure Manager runtime lifecycle: the Runtime status model, its admission
/// webhook and (soon) its reconciler.
#[derive(Debug, Parser)]
#[command(name = "kim", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Answer one AdmissionReview file exactly as the webhook would (exit 0 allowed, 1 denied, 2 unreadable).
    Review(cli::ReviewArgs),
    /// Check one status change of a Runtime, old -> new (exit 0 allowed, 1 denied, 2 unreadable).
    Check(cli::CheckArgs),
    /// Print the status model: states, transitions, condition types and reasons, rules.
    Policy(cli::PolicyCmdArgs),
    /// Print the Runtime CustomResourceDefinition (YAML).
    Crd,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let mut err = std::io::stderr().lock();
    let code = match cli.command {
        Command::Review(a) => cli::review(&a, &mut out, &mut err),
        Command::Check(a) => cli::check(&a, &mut out, &mut err),
        Command::Policy(a) => cli::policy(&a, &mut out, &mut err),
        Command::Crd => {
            let _ = write!(out, "{}", kim::crd::crd_yaml());
            cli::EXIT_ALLOWED
        }
    };
    let _ = out.flush();
    ExitCode::from(code)
}
