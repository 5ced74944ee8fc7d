//! Charts as SVG: a small description of panels and series, drawn with
//! plotters' SVG backend (text is left to the viewer's sans-serif font, so
//! no font files are read).

use super::SimError;
use plotters::coord::Shift;
use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Okabe-Ito colours: distinguishable with the common colour-vision
/// deficiencies.
const PALETTE: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(230, 159, 0),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

pub(crate) fn color(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

const GREY: RGBColor = RGBColor(110, 110, 110);

/// A dashed legend glyph: two short strokes (a macro because the composed
/// element's type depends on the backend's lifetime).
macro_rules! dash {
    ($x:expr, $y:expr, $c:expr) => {
        EmptyElement::at(($x, $y))
            + PathElement::new(vec![(0, 0), (7, 0)], $c.stroke_width(2))
            + PathElement::new(vec![(11, 0), (18, 0)], $c.stroke_width(2))
    };
}

/// How a series is drawn.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Mark {
    Line,
    /// A staircase: each value holds until the next point.
    Step,
    Dashed,
    /// A dashed staircase.
    DashedStep,
    /// A wide, light staircase to draw thin lines over (offered load).
    Backdrop,
}

pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub mark: Mark,
    pub color: usize,
}

impl Series {
    pub(crate) fn new(
        name: impl Into<String>,
        mark: Mark,
        color: usize,
        points: Vec<(f64, f64)>,
    ) -> Series {
        Series {
            name: name.into(),
            points,
            mark,
            color,
        }
    }
}

pub(crate) enum Body {
    Xy(Vec<Series>),
    /// One bar per (label, value), coloured in order.
    Bars(Vec<(String, f64)>),
}

pub(crate) struct Panel {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub body: Body,
    /// Horizontal reference lines (value, legend text).
    pub hlines: Vec<(f64, String)>,
    /// Vertical reference lines (value, legend text).
    pub vlines: Vec<(f64, String)>,
    pub x_range: Option<(f64, f64)>,
    pub y_range: Option<(f64, f64)>,
    /// Tick labels on the x axis, from the value.
    pub x_fmt: Option<fn(f64) -> String>,
    pub legend: SeriesLabelPosition,
}

impl Panel {
    pub(crate) fn new(title: impl Into<String>, x_label: &str, y_label: &str, body: Body) -> Panel {
        Panel {
            title: title.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            body,
            hlines: Vec::new(),
            vlines: Vec::new(),
            x_range: None,
            y_range: None,
            x_fmt: None,
            legend: SeriesLabelPosition::UpperLeft,
        }
    }
}

pub(crate) struct Figure {
    pub title: String,
    /// A line under the panels (what is modelled, what is not).
    pub note: String,
    pub panels: Vec<Panel>,
    pub cols: usize,
    pub width: u32,
    pub panel_height: u32,
}

fn plot_err<E: std::fmt::Display>(e: E) -> SimError {
    SimError::Plot(e.to_string())
}

/// Draws the figure; returns the SVG document.
pub(crate) fn render(fig: &Figure) -> Result<String, SimError> {
    let cols = fig.cols.max(1);
    let rows = fig.panels.len().div_ceil(cols).max(1);
    let title_h = 40;
    let note_h = if fig.note.is_empty() { 0 } else { 30 };
    let height = title_h + rows as u32 * fig.panel_height + note_h;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (fig.width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let (top, rest) = root.split_vertically(title_h);
        top.draw_text(
            &fig.title,
            &("sans-serif", 20).into_font().color(&BLACK),
            (12, 12),
        )
        .map_err(plot_err)?;
        let (body, foot) = rest.split_vertically(rows as u32 * fig.panel_height);
        if !fig.note.is_empty() {
            foot.draw_text(
                &fig.note,
                &("sans-serif", 13).into_font().color(&GREY),
                (12, 6),
            )
            .map_err(plot_err)?;
        }
        let areas = body.split_evenly((rows, cols));
        for (panel, area) in fig.panels.iter().zip(areas.iter()) {
            match &panel.body {
                Body::Xy(series) => draw_xy(area, panel, series)?,
                Body::Bars(bars) => draw_bars(area, panel, bars)?,
            }
        }
        root.present().map_err(plot_err)?;
    }
    Ok(svg)
}

fn bounds(series: &[Series], panel: &Panel) -> ((f64, f64), (f64, f64)) {
    let pts = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    for &(y, _) in &panel.hlines {
        y1 = y1.max(y);
    }
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    let x = panel.x_range.unwrap_or((x0, x1));
    let y = panel
        .y_range
        .unwrap_or((0.0, if y1 > 0.0 { y1 * 1.12 } else { 1.0 }));
    (x, y)
}

fn draw_xy(
    area: &DrawingArea<SVGBackend, Shift>,
    panel: &Panel,
    series: &[Series],
) -> Result<(), SimError> {
    let ((x0, x1), (y0, y1)) = bounds(series, panel);
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(plot_err)?;
    let fmt = panel.x_fmt;
    let x_fmt = move |x: &f64| match fmt {
        Some(f) => f(*x),
        None => trim(*x),
    };
    let y_fmt = |y: &f64| trim(*y);
    chart
        .configure_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_labels(8)
        .y_labels(8)
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(plot_err)?;

    for s in series {
        let c = color(s.color);
        let style = ShapeStyle::from(&c).stroke_width(2);
        let anno = match s.mark {
            Mark::Line => chart
                .draw_series(LineSeries::new(s.points.iter().copied(), style))
                .map_err(plot_err)?,
            Mark::Step => chart
                .draw_series(LineSeries::new(steps(&s.points), style))
                .map_err(plot_err)?,
            Mark::Dashed => chart
                .draw_series(DashedLineSeries::new(s.points.iter().copied(), 6, 4, style))
                .map_err(plot_err)?,
            Mark::Backdrop => chart
                .draw_series(LineSeries::new(
                    steps(&s.points),
                    c.mix(0.35).stroke_width(7),
                ))
                .map_err(plot_err)?,
            Mark::DashedStep => chart
                .draw_series(DashedLineSeries::new(steps(&s.points), 6, 4, style))
                .map_err(plot_err)?,
        };
        let anno = anno.label(s.name.as_str());
        match s.mark {
            Mark::Dashed | Mark::DashedStep => {
                anno.legend(move |(x, y)| dash!(x, y, c));
            }
            Mark::Backdrop => {
                anno.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.mix(0.35).stroke_width(7))
                });
            }
            Mark::Line | Mark::Step => {
                anno.legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
            }
        }
    }
    let refs = panel
        .hlines
        .iter()
        .map(|(v, l)| (vec![(x0, *v), (x1, *v)], l))
        .chain(
            panel
                .vlines
                .iter()
                .map(|(v, l)| (vec![(*v, y0), (*v, y1)], l)),
        );
    for (line, label) in refs {
        let style = ShapeStyle::from(&GREY).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(line, 4, 4, style))
            .map_err(plot_err)?
            .label(label.as_str())
            .legend(move |(x, y)| dash!(x, y, GREY));
    }
    chart
        .configure_series_labels()
        .position(panel.legend.clone())
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(200, 200, 200))
        .label_font(("sans-serif", 12))
        .draw()
        .map_err(plot_err)?;
    Ok(())
}

fn draw_bars(
    area: &DrawingArea<SVGBackend, Shift>,
    panel: &Panel,
    bars: &[(String, f64)],
) -> Result<(), SimError> {
    let n = bars.len().max(1) as u32;
    let top = bars
        .iter()
        .map(|b| b.1)
        .chain(panel.hlines.iter().map(|h| h.0))
        .fold(1.0f64, f64::max);
    let (y0, y1) = panel.y_range.unwrap_or((0.0, top * 1.15));
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(64)
        // Integer ranges are inclusive: 0..=n-1 gives n segments.
        .build_cartesian_2d((0u32..n - 1).into_segmented(), y0..y1)
        .map_err(plot_err)?;
    let names: Vec<&str> = bars.iter().map(|b| b.0.as_str()).collect();
    let x_fmt = |v: &SegmentValue<u32>| match v {
        SegmentValue::CenterOf(i) => names.get(*i as usize).copied().unwrap_or("").to_string(),
        _ => String::new(),
    };
    let y_fmt = |y: &f64| trim(*y);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(panel.x_label.as_str())
        .y_desc(panel.y_label.as_str())
        .x_labels(bars.len())
        .x_label_formatter(&x_fmt)
        .y_label_formatter(&y_fmt)
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 12))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(plot_err)?;
    for (i, (_, v)) in bars.iter().enumerate() {
        let i = i as u32;
        let c = color(i as usize);
        let mut bar = Rectangle::new(
            [
                (SegmentValue::Exact(i), 0.0),
                (SegmentValue::Exact(i + 1), *v),
            ],
            c.filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        chart.draw_series(std::iter::once(bar)).map_err(plot_err)?;
        let label = Text::new(
            trim(*v),
            (SegmentValue::CenterOf(i), *v + (y1 - y0) * 0.02),
            ("sans-serif", 13)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Center, VPos::Bottom)),
        );
        chart
            .draw_series(std::iter::once(label))
            .map_err(plot_err)?;
    }
    for (v, label) in &panel.hlines {
        let style = ShapeStyle::from(&GREY).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(SegmentValue::Exact(0), *v), (SegmentValue::Last, *v)],
                4,
                4,
                style,
            ))
            .map_err(plot_err)?
            .label(label.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 13, y)], GREY.stroke_width(1))
            });
    }
    if !panel.hlines.is_empty() {
        chart
            .configure_series_labels()
            .position(panel.legend.clone())
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(200, 200, 200))
            .label_font(("sans-serif", 12))
            .draw()
            .map_err(plot_err)?;
    }
    Ok(())
}

/// A staircase through the points: each y holds until the next x.
fn steps(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(points.len() * 2);
    for (i, &(x, y)) in points.iter().enumerate() {
        if i > 0 {
            out.push((x, points[i - 1].1));
        }
        out.push((x, y));
    }
    out
}

/// A number without trailing zeros: `100`, `2.5`, `0.25`.
pub(crate) fn trim(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}
