use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use eviction_autoscaler::{certs, config::ServeOpts, crd, run};

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(opts) => {
            run::init_logging(opts.log_format);
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("error: cannot start the runtime: {e}");
                    return ExitCode::FAILURE;
                }
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
                    println!("wrote {0}/ca.crt {0}/tls.crt {0}/tls.key", out.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Command::Crd => match crd::crd_yaml() {
            Ok(y) => {
                print!("{y}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
