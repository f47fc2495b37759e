use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use eviction_autoscaler::{certs, config::ServeOpts, crd, doctor, run, uninstall};

#[derive(Parser)]
#[command(name = "eviction-autoscaler", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the webhooks and controllers.
    Serve(Box<ServeOpts>),
    /// Write a CA and a serving certificate (ca.crt, tls.crt, tls.key) for local use.
    Certs {
        #[arg(long)]
        out: PathBuf,
        /// DNS subject alternative name (repeatable).
        #[arg(long = "dns-name")]
        dns_names: Vec<String>,
        /// IP subject alternative name (repeatable).
        #[arg(long = "ip")]
        ips: Vec<IpAddr>,
    },
    /// Print the EvictionAutoScaler CustomResourceDefinition as YAML.
    Crd,
    // Help text: the doc comment of doctor::Args.
    Doctor(Box<doctor::Args>),
    /// Revert active surges and delete the PDBs and EvictionAutoScalers the
    /// product owns. Remove the webhooks and the Deployment first.
    Uninstall {
        /// Show what would change (server-side dry run).
        #[arg(long)]
        dry_run: bool,
        /// Go on even while a controller holds the Lease (it may surge again
        /// or make PDBs again right after).
        #[arg(long)]
        force: bool,
        /// Namespace of the product's Lease.
        #[arg(long, env = "POD_NAMESPACE", default_value = "eviction-autoscaler")]
        namespace: String,
    },
}

fn runtime(mut b: tokio::runtime::Builder) -> Option<tokio::runtime::Runtime> {
    match b.enable_all().build() {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            None
        }
    }
}

/// A line to stdout. A closed or full stdout (`| head`, `> /dev/full`) is
/// not a panic: the work is done by then, and the exit code tells the rest.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(opts) => {
            run::init_logging(opts.log_format);
            let Some(rt) = runtime(tokio::runtime::Builder::new_multi_thread()) else {
                return ExitCode::FAILURE;
            };
            match rt.block_on(run::serve(*opts)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!(error = %e, "exiting");
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Certs {
            out,
            dns_names,
            ips,
        } => {
            let dns = if dns_names.is_empty() && ips.is_empty() {
                vec!["localhost".to_string()]
            } else {
                dns_names
            };
            match certs::generate(&dns, &ips).and_then(|g| certs::write(&out, &g)) {
                Ok(()) => {
                    out!("wrote {0}/ca.crt {0}/tls.crt {0}/tls.key", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Doctor(args) => {
            let Some(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
                return ExitCode::from(doctor::EXIT_CANNOT_CHECK);
            };
            rt.block_on(doctor::main(&args))
        }
        Command::Uninstall {
            dry_run,
            force,
            namespace,
        } => {
            let opts = uninstall::Options {
                dry_run,
                force,
                namespace,
                ..Default::default()
            };
            let Some(rt) = runtime(tokio::runtime::Builder::new_current_thread()) else {
                return ExitCode::FAILURE;
            };
            let result = rt.block_on(async {
                let client = eviction_autoscaler::client::infer().await?.api;
                uninstall::run(client, &opts).await
            });
            match result {
                Ok(r) => {
                    let how = if dry_run { " (dry run)" } else { "" };
                    for x in &r.reverted {
                        out!("reverted surge{how}: {x}");
                    }
                    for x in &r.cleaned {
                        out!("markers removed, value kept{how}: {x}");
                    }
                    for x in &r.released_pdbs {
                        out!("released to its user{how} (our owner reference dropped): {x}");
                    }
                    for x in r.deleted_pdbs.iter().chain(&r.deleted_eas) {
                        out!("deleted{how}: {x}");
                    }
                    for x in &r.released_finalizers {
                        out!("the Go project's finalizers removed{how} (what they guard is done): {x}");
                    }
                    for x in &r.failed {
                        eprintln!("failed{how}: {x}");
                    }
                    out!(
                        "{} objects reverted, {} with markers only removed, {} PDBs and {} EvictionAutoScalers deleted{how}",
                        r.reverted.len(),
                        r.cleaned.len(),
                        r.deleted_pdbs.len(),
                        r.deleted_eas.len()
                    );
                    if r.failed.is_empty() {
                        ExitCode::SUCCESS
                    } else {
                        eprintln!(
                            "error: {} objects could not be changed (listed above); \
                             the others were, and uninstall can be run again",
                            r.failed.len()
                        );
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd => match crd::crd_yaml() {
            Ok(y) => {
                use std::io::Write;
                match std::io::stdout().lock().write_all(y.as_bytes()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: writing the CRD: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
