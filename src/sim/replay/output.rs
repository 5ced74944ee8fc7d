//! A replay's report as text, SVG, JSON and HTML.

use super::ReplayReport;
use crate::sim::SimError;
use crate::sim::plot::{Body, Figure, Mark, Panel, Series, render};
use crate::sim::report::{STYLE, escape, html_table, inline_svg, text_table};
use plotters::prelude::SeriesLabelPosition;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn pct(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

impl ReplayReport {
    /// The per-policy table: a header row, then one row per policy.
    pub fn table(&self) -> Vec<Vec<String>> {
        let span = (self.last_time - self.first_time).max(self.bucket_secs);
        let mut t = vec![
            [
                "policy",
                "requests",
                "admitted",
                "denied",
                "admitted/s (mean)",
                "offered/s (mean)",
                "most denied keys",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for p in &self.policies {
            let top: Vec<String> = p
                .top_denied
                .iter()
                .take(3)
                .map(|k| {
                    if k.overcount > 0 {
                        format!("{} ({}, at most {} over)", k.key, k.denied, k.overcount)
                    } else {
                        format!("{} ({})", k.key, k.denied)
                    }
                })
                .collect();
            t.push(vec![
                p.policy.clone(),
                p.requests.to_string(),
                format!("{} ({})", p.admitted, pct(p.admitted, p.requests)),
                format!("{} ({})", p.denied, pct(p.denied, p.requests)),
                format!("{:.2}", p.admitted as f64 / span),
                format!("{:.2}", self.requests as f64 / span),
                top.join(", "),
            ]);
        }
        t
    }

    /// A plain-text report for a terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} lines ({}), {} requests over {:.0} s, {} malformed, {} skipped for their status",
            self.lines,
            match self.format {
                super::LogFormat::Csv => "CSV",
                super::LogFormat::Nginx => "nginx",
            },
            self.requests,
            self.last_time - self.first_time,
            self.malformed,
            self.skipped_status,
        );
        for w in &self.warnings {
            let _ = writeln!(out, "warning: {w}");
        }
        for m in &self.malformed_lines {
            let _ = writeln!(out, "  line {}: {} ({:?})", m.line, m.reason, m.text);
        }
        if self.malformed > self.malformed_lines.len() as u64 {
            let _ = writeln!(
                out,
                "  ... and {} more",
                self.malformed - self.malformed_lines.len() as u64
            );
        }
        out.push('\n');
        out.push_str(&text_table(&self.table()));
        for p in &self.policies {
            if p.never_pass > 0 {
                let _ = writeln!(
                    out,
                    "  {}: {} requests cost more than it can ever admit",
                    p.policy, p.never_pass
                );
            }
            if p.overflowed > 0 {
                let _ = writeln!(
                    out,
                    "  {}: {} new keys found the key cap full and shared one state",
                    p.policy, p.overflowed
                );
            }
        }
        if let Some(rss) = self.peak_rss_bytes {
            let _ = writeln!(
                out,
                "\npeak resident memory: {:.1} MiB",
                rss as f64 / (1024.0 * 1024.0)
            );
        }
        out
    }

    /// Admitted per second against offered, one line per policy.
    pub fn svg(&self) -> Result<String, SimError> {
        let span = (self.offered_per_bucket.len() as f64 * self.bucket_secs).max(1.0);
        let (unit, scale) = if span <= 600.0 {
            ("s", 1.0)
        } else if span <= 3.0 * 3600.0 {
            ("minutes", 60.0)
        } else {
            ("hours", 3600.0)
        };
        // At most ~150 steps, so that lines stay readable.
        let k = self.offered_per_bucket.len().div_ceil(150).max(1);
        let w = self.bucket_secs * k as f64;
        let rate = |counts: &[u64]| -> Vec<(f64, f64)> {
            let merged: Vec<u64> = counts.chunks(k).map(|c| c.iter().sum()).collect();
            let mut pts: Vec<(f64, f64)> = merged
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as f64 * w / scale, n as f64 / w))
                .collect();
            if let Some(&(x, y)) = pts.last() {
                pts.push((x + w / scale, y));
            }
            pts
        };
        let mut series = vec![Series::new(
            format!("offered: {} requests", self.requests),
            Mark::Backdrop,
            6,
            rate(&self.offered_per_bucket),
        )];
        for (i, p) in self.policies.iter().enumerate() {
            series.push(Series::new(
                format!("{}: {} admitted", p.policy, p.admitted),
                Mark::Step,
                i,
                rate(&p.admitted_per_bucket),
            ));
        }
        let mut panel = Panel::new(
            format!(
                "Admitted per second against offered (mean over {} s buckets)",
                crate::sim::plot::trim(w)
            ),
            &format!("time since the first request ({unit})"),
            "requests per second",
            Body::Xy(series),
        );
        panel.x_range = Some((0.0, span / scale));
        panel.legend = SeriesLabelPosition::UpperRight;
        render(&Figure {
            title: format!("Replay: {} requests, {} policies", self.requests, self.policies.len()),
            note: "Every policy runs on a rategate keyed limiter on a manual clock set to each request's time.".into(),
            panels: vec![panel],
            cols: 1,
            width: 1100,
            panel_height: 480,
        })
    }

    /// Writes `replay.svg`, `replay.json` and `replay.html` into `dir`.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, SimError> {
        std::fs::create_dir_all(dir).map_err(|e| SimError::io(dir, e))?;
        let svg = self.svg()?;
        let json = serde_json::to_string_pretty(self).map_err(|e| SimError::Json(e.to_string()))?;
        let mut html = format!(
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>rategate replay</title>\
             <style>{STYLE}</style></head><body>\n<h1>Replay</h1>\n<p>{} lines, {} requests, {} malformed, {} skipped for their status.</p>\n",
            self.lines, self.requests, self.malformed, self.skipped_status
        );
        for w in &self.warnings {
            let _ = writeln!(html, "<p><strong>Warning:</strong> {}</p>", escape(w));
        }
        html.push_str(&html_table(&self.table()));
        if !self.malformed_lines.is_empty() {
            html.push_str("<h2>Malformed lines</h2>\n<ul>\n");
            for m in &self.malformed_lines {
                let _ = writeln!(
                    html,
                    "<li>line {}: {} <code>{}</code></li>",
                    m.line,
                    escape(&m.reason),
                    escape(&m.text)
                );
            }
            html.push_str("</ul>\n");
        }
        html.push_str(inline_svg(&svg));
        html.push_str("\n</body></html>\n");
        let mut written = Vec::new();
        for (name, text) in [
            ("replay.svg", &svg),
            ("replay.json", &json),
            ("replay.html", &html),
        ] {
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| SimError::io(&path, e))?;
            written.push(path);
        }
        Ok(written)
    }
}
