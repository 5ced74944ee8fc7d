//! `rategate-sim`: the classic scenarios drawn, and a user's access log
//! replayed under several policies. Everything runs the real rategate
//! limiters on a manual clock, offline and deterministic for a seed.
//!
//! ```text
//! rategate-sim [simulate] [--out sim-report] [--seed N]
//! rategate-sim replay --policy "leaky:10r/s burst=20 nodelay" [--policy ...] FILE
//! rategate-sim sample-log --lines 3000 --format nginx --out sample.log
//! ```

use clap::{Parser, Subcommand, ValueEnum};
use rategate::sim::replay::{LogFormat, ReplayOptions, replay, replay_file};
use rategate::sim::{LimitSpec, SimError, sample, simulate, text_table, write_report};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rategate-sim",
    version,
    about = "Simulate rate-limiting algorithms and replay access logs under rategate policies"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run every scenario and write the SVGs, summary.json and index.html.
    Simulate {
        /// Where to write the report.
        #[arg(long, default_value = "sim-report")]
        out: PathBuf,
        /// Seed of the random traces.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
    },
    /// Replay a log (CSV `time,key[,cost]` or nginx combined; "-" for stdin).
    Replay {
        /// The log file.
        file: PathBuf,
        /// A policy: ALGORITHM:QUOTA, e.g. "leaky:100r/m burst=20 nodelay",
        /// "token:5000/h", "fixed:60/hour", "log:100/m", "counter:100/m".
        #[arg(long = "policy", short, required = true)]
        policies: Vec<String>,
        /// The log's format (guessed from the first line when absent).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// Keys each policy's limiter holds at most.
        #[arg(long, default_value_t = 100_000)]
        max_keys: usize,
        /// How many most-denied keys to report.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Also write replay.svg, replay.json and replay.html here.
        #[arg(long)]
        out: Option<PathBuf>,
        /// No progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Write a seeded sample log (the README's is made with the defaults).
    SampleLog {
        /// Lines to write.
        #[arg(long, default_value_t = 3000)]
        lines: u64,
        /// Seed.
        #[arg(long, default_value_t = DEFAULT_SEED)]
        seed: u64,
        /// Format.
        #[arg(long, value_enum, default_value = "nginx")]
        format: Format,
        /// The file to write ("-" for stdout).
        #[arg(long, default_value = "-")]
        out: PathBuf,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Csv,
    Nginx,
}

const DEFAULT_SEED: u64 = 0x5EED_2024;

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rategate-sim: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), SimError> {
    let command = cli.command.unwrap_or(Command::Simulate {
        out: PathBuf::from("sim-report"),
        seed: DEFAULT_SEED,
    });
    match command {
        Command::Simulate { out, seed } => {
            let sim = simulate(seed)?;
            for s in &sim.scenarios {
                println!("== {}\n{}", s.title, text_table(&s.table));
            }
            let files = write_report(&sim, &out)?;
            println!(
                "wrote {} files to {} (open {})",
                files.len(),
                out.display(),
                out.join("index.html").display()
            );
            Ok(())
        }
        Command::Replay {
            file,
            policies,
            format,
            max_keys,
            top,
            out,
            quiet,
        } => {
            let policies = policies
                .iter()
                .map(|p| p.parse::<LimitSpec>())
                .collect::<Result<Vec<_>, _>>()?;
            let mut opts = ReplayOptions::new(policies);
            opts.format = format.map(|f| match f {
                Format::Csv => LogFormat::Csv,
                Format::Nginx => LogFormat::Nginx,
            });
            opts.max_keys = max_keys;
            opts.top = top;
            opts.progress = !quiet;
            let report = if file.as_os_str() == "-" {
                replay(std::io::stdin().lock(), None, &opts)?
            } else {
                replay_file(&file, &opts)?
            };
            print!("{}", report.text());
            if let Some(dir) = out {
                let files = report.write(&dir)?;
                println!("wrote {} files to {}", files.len(), dir.display());
            }
            Ok(())
        }
        Command::SampleLog {
            lines,
            seed,
            format,
            out,
        } => {
            let io = |e| SimError::Io {
                path: out.clone(),
                source: e,
            };
            let writer: Box<dyn std::io::Write> = if out.as_os_str() == "-" {
                Box::new(std::io::stdout().lock())
            } else {
                Box::new(std::fs::File::create(&out).map_err(io)?)
            };
            let writer = std::io::BufWriter::new(writer);
            match format {
                Format::Nginx => sample::write_nginx_log(writer, lines, seed),
                Format::Csv => sample::write_csv_log(writer, lines, seed),
            }
            .map_err(io)
        }
    }
}
