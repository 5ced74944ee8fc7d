//! Running every scenario, and writing the SVGs, `summary.json` and a
//! self-contained HTML report.

use super::SimError;
use super::scenarios::{self, Scenario};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Every scenario of one run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Simulation {
    /// The seed the random traces were drawn from.
    pub seed: u64,
    /// The scenarios, in the report's order.
    pub scenarios: Vec<Scenario<serde_json::Value>>,
}

/// Runs every scenario with `seed`. The same seed gives the same numbers
/// and the same pictures on every machine.
pub fn simulate(seed: u64) -> Result<Simulation, SimError> {
    Ok(Simulation {
        seed,
        scenarios: vec![
            scenarios::boundary_burst()?.erase()?,
            scenarios::burst_vs_smoothing()?.erase()?,
            scenarios::three_servers(seed)?.erase()?,
            scenarios::counter_vs_log(seed)?.erase()?,
            scenarios::vendor_quotas(seed)?.erase()?,
            scenarios::outbound_adaptation(seed)?.erase()?,
        ],
    })
}

/// Writes `<id>.svg` for each scenario, `summary.json` and `index.html`
/// (the SVGs inline: one file to open or send) into `dir`, creating it.
/// Returns the files written.
pub fn write_report(sim: &Simulation, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
    std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
    let mut written = Vec::new();
    let mut write = |name: &str, text: &str| -> Result<(), SimError> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| SimError::io(&path, e))?;
        written.push(path);
        Ok(())
    };
    for s in &sim.scenarios {
        write(&format!("{}.svg", s.id), &s.svg)?;
    }
    let json = serde_json::to_string_pretty(sim).map_err(|e| SimError::Json(e.to_string()))?;
    write("summary.json", &json)?;
    write("index.html", &html(sim))?;
    Ok(written)
}

/// A plain-text rendering of a table (rows of cells, the first the header),
/// columns padded, each line indented by two spaces.
///
/// # Examples
///
/// ```
/// let table = vec![vec!["a".to_string(), "bb".to_string()], vec!["ccc".to_string(), "d".to_string()]];
/// assert_eq!(rategate::sim::text_table(&table), "  a    bb\n  ccc  d\n");
/// ```
pub fn text_table(table: &[Vec<String>]) -> String {
    let cols = table.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            table
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in table {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(s, w)| format!("{s:<w$}"))
            .collect();
        let _ = writeln!(out, "  {}", line.join("  ").trim_end());
    }
    out
}

pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

pub(crate) fn html_table(table: &[Vec<String>]) -> String {
    let mut out = String::from("<table>\n");
    for (i, r) in table.iter().enumerate() {
        let cell = if i == 0 { "th" } else { "td" };
        out.push_str("<tr>");
        for c in r {
            let _ = write!(out, "<{cell}>{}</{cell}>", escape(c));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    out
}

pub(crate) const STYLE: &str = "body{font-family:sans-serif;max-width:1340px;margin:2em auto;\
    padding:0 1em;color:#222}table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid \
    #ccc;padding:4px 8px;text-align:left}th{background:#f3f3f3}svg{max-width:100%;height:auto}\
    p{max-width:60em;line-height:1.4}";

fn html(sim: &Simulation) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rategate simulation</title>\
         <style>{STYLE}</style></head><body>\n<h1>rategate: what each algorithm does</h1>\n\
         <p>Every scenario runs the real rategate limiters on a manual clock. Seed {}.</p>\n",
        sim.seed
    );
    for s in &sim.scenarios {
        let _ = write!(
            out,
            "<h2 id=\"{}\">{}</h2>\n<p>{}</p>\n{}{}\n",
            s.id,
            escape(s.title),
            escape(&s.about),
            html_table(&s.table),
            inline_svg(&s.svg)
        );
    }
    out.push_str("</body></html>\n");
    out
}

/// The SVG without its XML declaration, to sit inside HTML.
pub(crate) fn inline_svg(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}
