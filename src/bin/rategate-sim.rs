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
        /// The log's format (guessed from the first lines when absent).
        #[arg(long, value_enum)]
        format: Option<Format>,
        /// The nginx log_format the log was written with, as in nginx's
        /// configuration (default: combined), e.g.
        /// '$remote_addr - $remote_user [$time_local] "$request" $status
        /// $body_bytes_sent "$http_referer" "$http_user_agent" $msec $request_time'.
        #[arg(long)]
        log_format: Option<String>,
        /// The nginx variable that keys requests.
        #[arg(long, default_value = "$remote_addr")]
        key: String,
        /// The nginx variable that holds each request's cost (default: 1).
        #[arg(long)]
        cost: Option<String>,
        /// nginx statuses not replayed, comma-separated, or "none"
        /// (default: 400,408,414,494, answered before limit_req runs).
        #[arg(long)]
        skip_status: Option<String>,
        /// Decide requests in time order within this many seconds of the
        /// log's time (nginx logs a request when it ends).
        #[arg(long, default_value_t = 0.0)]
        reorder: f64,
        /// Write every request's decisions to this CSV file.
        #[arg(long)]
        decisions: Option<PathBuf>,
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
            log_format,
            key,
            cost,
            skip_status,
            reorder,
            decisions,
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
            opts.log_format = log_format;
            opts.key = key;
            opts.cost = cost;
            if let Some(list) = skip_status {
                opts.skip_status = parse_statuses(&list)?;
            }
            opts.reorder_secs = reorder;
            opts.decisions = decisions;
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

/// `400,408` or `none`.
fn parse_statuses(list: &str) -> Result<Vec<u16>, SimError> {
    if list.trim() == "none" {
        return Ok(Vec::new());
    }
    list.split(',')
        .map(|s| {
            s.trim()
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=999).contains(s))
                .ok_or_else(|| {
                    SimError::Invalid(format!(
                        "--skip-status {list:?}: statuses are numbers from 100 to 999, comma-separated, or none"
                    ))
                })
        })
        .collect()
}
