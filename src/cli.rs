//! Command line: `run`, `check`, `migrate`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::config::{self, Config};
use crate::fault::Faults;
use crate::{app, check, migrate, shutdown, telemetry};

#[derive(Debug, Parser)]
#[command(name = "handoff", version, about = "Outbox → Redis Streams → inbox, without cross-database writes")]
pub struct Cli {
    /// Path of the TOML configuration file.
    #[arg(long, short, global = true, env = "HANDOFF_CONFIG", default_value = "config/handoff.toml")]
    pub config: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run every configured relay until SIGTERM / SIGINT.
    Run,
    /// Validate the config, connect to the database and Redis, prepare and check every statement.
    Check,
    /// Apply the reference schema (idempotent).
    Migrate {
        /// Print the SQL instead of applying it.
        #[arg(long)]
        print: bool,
    },
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Migrate { print: true } = cli.command {
        for (version, sql) in migrate::POSTGRES {
            println!("-- {version}\n{sql}");
        }
        return ExitCode::SUCCESS;
    }
    let config = match config::load(&cli.config) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{}: {e}", cli.config.display());
            return ExitCode::from(2);
        }
    };
    telemetry::logging::init(config.telemetry.log_format, &config.telemetry.log_level);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(dispatch(cli.command, config))
}

async fn dispatch(command: Command, config: Config) -> ExitCode {
    match command {
        Command::Run => match app::run(config, Faults::from_env(), shutdown::first_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                tracing::error!(error = format!("{e:#}"), "handoff stopped with an error");
                ExitCode::FAILURE
            }
        },
        Command::Check => match check::check(&config).await {
            Ok(lines) => {
                lines.iter().for_each(|l| println!("ok: {l}"));
                ExitCode::SUCCESS
            }
            Err(problems) => {
                problems.iter().for_each(|p| eprintln!("error: {p}"));
                ExitCode::FAILURE
            }
        },
        Command::Migrate { .. } => {
            let result = async {
                let pool = crate::store::postgres::pool(&config.database, "handoff-migrate")?;
                migrate::postgres(&pool).await
            };
            match result.await {
                Ok(applied) if applied.is_empty() => {
                    println!("schema is up to date");
                    ExitCode::SUCCESS
                }
                Ok(applied) => {
                    println!("applied: {}", applied.join(", "));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("migrate failed: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
    }
}
