//! `kim` — thin CLI front: `webhook | controller | review | check | audit | policy | crd`.

use clap::{Parser, Subcommand};
use kim::cli;
use std::io::Write;
use std::os::fd::AsFd;
use std::process::ExitCode;

/// Kyma Infrastructure Manager runtime lifecycle: the Runtime status model, its admission
/// webhook and its reconciler.
#[derive(Debug, Parser)]
#[command(name = "kim", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the admission webhook over HTTPS (`POST /validate`, `POST /mutate`).
    Webhook(kim::webhook::WebhookArgs),
    /// Run the Runtime reconciler (provision, update and delete runtimes through Gardener).
    Controller(kim::reconciler::ControllerArgs),
    /// Answer one AdmissionReview file exactly as the webhook would (exit 0 allowed, 1 denied, 2 unreadable or refused by the CRD schema).
    Review(cli::ReviewArgs),
    /// Check one status change of a Runtime, old -> new (exit 0 allowed, 1 denied, 2 unreadable or refused by the CRD schema).
    Check(cli::CheckArgs),
    /// Report which per-object rules the stored status of each Runtime of a cluster breaks
    /// (exit 0 none, 1 any violation, also one whose action is warn, 2 the cluster cannot be
    /// read).
    Audit(kim::audit::AuditArgs),
    /// Print the status model: states, transitions, condition types and reasons, rules.
    Policy(cli::PolicyCmdArgs),
    /// Print the Runtime CustomResourceDefinition (YAML).
    Crd,
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Webhook(a) => webhook(a),
        Command::Controller(a) => controller(a),
        Command::Review(a) => offline(|out, err| cli::review(&a, out, err)),
        Command::Check(a) => offline(|out, err| cli::check(&a, out, err)),
        Command::Audit(a) => audit(a),
        Command::Policy(a) => offline(|out, err| cli::policy(&a, out, err)),
        Command::Crd => offline(cli::crd),
    }
}

/// Runs an offline command. Its output goes to a duplicate of file descriptor 1, not through
/// `std::io::stdout()`: std's stdout takes a write refused with EBADF (stdout opened
/// read-only) as written, so the command would exit 0 having written nothing. (A descriptor
/// closed before the start, `kim crd >&-`, is reopened on /dev/null by Rust's runtime before
/// `main`, indistinguishable from a caller's /dev/null: that output is discarded, exit 0.) A duplicate that cannot be made, or a write that fails, is exit 2
/// with `kim: cannot write the output: …`, as a full disk is. The command writes and flushes
/// its output itself and fails when that fails (`cli`).
fn offline(f: impl FnOnce(&mut dyn Write, &mut dyn Write) -> u8) -> ExitCode {
    let mut err = std::io::stderr().lock();
    let fd = match std::io::stdout().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            let _ = writeln!(err, "kim: cannot write the output: {e}");
            return ExitCode::from(cli::EXIT_OUTPUT);
        }
    };
    let mut out = std::io::BufWriter::new(std::fs::File::from(fd));
    let code = f(&mut out, &mut err);
    let _ = out.flush();
    ExitCode::from(code)
}

/// Runs `kim audit` on a single-threaded tokio runtime. Neither stdout nor stderr is locked:
/// the progress line is drawn from another thread.
fn audit(args: kim::audit::AuditArgs) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("kim audit: cannot start the async runtime: {e}");
            return ExitCode::from(kim::audit::EXIT_UNREADABLE);
        }
    };
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut err = std::io::stderr();
    let code = rt.block_on(kim::audit::run(&args, &mut out, &mut err));
    let _ = out.flush();
    ExitCode::from(code)
}

fn webhook(args: kim::webhook::WebhookArgs) -> ExitCode {
    kim::telemetry::init_tracing(args.log_format);
    serve("kim webhook", kim::webhook::run(args))
}

fn controller(args: kim::reconciler::ControllerArgs) -> ExitCode {
    kim::telemetry::init_tracing(args.log_format);
    serve("kim controller", kim::reconciler::run(args))
}

/// Runs a server command on a multi-threaded tokio runtime; an error is one line on stderr
/// (the error and its causes, never a backtrace) and exit code 1.
fn serve(name: &str, command: impl std::future::Future<Output = anyhow::Result<()>>) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{name}: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match rt.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: {e:#}");
            ExitCode::from(1)
        }
    }
}
