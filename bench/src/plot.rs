//! SVG line charts (plotters): a measure against message size, one line per
//! implementation. The x axis is log2 of the size with power-of-two ticks;
//! the y axis is logarithmic or linear.

use std::path::Path;

use plotters::prelude::*;

use crate::error::{BenchError, Result};
use crate::impls::{family_of, Family};
use crate::params::size_label;

/// One line: an implementation's points (size in bytes, value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text (the implementation label).
    pub label: String,
    /// (size, value) pairs; sizes of 0 and non-positive values on a log
    /// axis are left out.
    pub points: Vec<(u64, f64)>,
}

/// A chart to draw.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Y axis description (with unit).
    pub y_desc: String,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// Fixed y range (e.g. 0–100 for percentages); `None`: from the data.
    pub y_range: Option<(f64, f64)>,
    /// The lines.
    pub series: Vec<Series>,
}

/// Colour of the `i`-th line: a fixed, distinguishable palette.
fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 16] = [
        RGBColor(31, 119, 180),
        RGBColor(214, 39, 40),
        RGBColor(44, 160, 44),
        RGBColor(255, 127, 14),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
        RGBColor(0, 0, 0),
        RGBColor(0, 0, 140),
        RGBColor(140, 0, 0),
        RGBColor(0, 110, 60),
        RGBColor(255, 200, 0),
        RGBColor(120, 0, 120),
    ];
    C[i % C.len()]
}

fn err(path: &Path, e: impl std::fmt::Display) -> BenchError {
    BenchError::Plot {
        file: path.display().to_string(),
        why: e.to_string(),
    }
}

/// Draw `chart` into an SVG file at `path`. A chart without any drawable
/// point is not written (returns `Ok(false)`).
pub fn draw(chart: &Chart, path: &Path) -> Result<bool> {
    let keep = |&(s, v): &(u64, f64)| s > 0 && v.is_finite() && (!chart.log_y || v > 0.0);
    let series: Vec<(String, Vec<(f64, f64)>)> = chart
        .series
        .iter()
        .map(|s| {
            let pts = s
                .points
                .iter()
                .filter(|p| keep(p))
                .map(|&(sz, v)| ((sz as f64).log2(), v))
                .collect::<Vec<_>>();
            (s.label.clone(), pts)
        })
        .filter(|(_, p)| !p.is_empty())
        .collect();
    let all: Vec<(f64, f64)> = series.iter().flat_map(|(_, p)| p.iter().copied()).collect();
    if all.is_empty() {
        return Ok(false);
    }
    let xmin = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .floor();
    let xmax = all
        .iter()
        .map(|p| p.0)
        .fold(f64::NEG_INFINITY, f64::max)
        .ceil();
    let (xmin, xmax) = if xmax > xmin {
        (xmin, xmax)
    } else {
        (xmin - 1.0, xmax + 1.0)
    };
    let (ymin, ymax) = chart.y_range.unwrap_or_else(|| {
        let lo = all.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = all.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        if chart.log_y {
            (lo / 1.5, hi * 1.5)
        } else {
            (0.0, if hi > 0.0 { hi * 1.1 } else { 1.0 })
        }
    });
    let root = SVGBackend::new(path, (1100, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(path, e))?;
    // The legend gets a column of its own, so it never hides a point.
    let (plot_area, legend_area) = root.split_horizontally(880);
    let xfmt = |x: &f64| {
        if (x - x.round()).abs() < 1e-9 && *x >= 0.0 && *x < 63.0 {
            size_label(1u64 << (x.round() as u32))
        } else {
            String::new()
        }
    };
    macro_rules! body {
        ($ctx:expr) => {{
            let mut ctx = $ctx;
            ctx.configure_mesh()
                .x_desc("message size (bytes)")
                .y_desc(chart.y_desc.as_str())
                .x_labels(((xmax - xmin) as usize + 1).min(26))
                .x_label_formatter(&xfmt)
                .y_label_formatter(&|y: &f64| format!("{y}"))
                .light_line_style(RGBColor(235, 235, 235))
                .draw()
                .map_err(|e| err(path, e))?;
            for (i, (label, pts)) in series.iter().enumerate() {
                let c = color(i);
                let width = if family_of(label) == Family::Project {
                    3
                } else {
                    1
                };
                ctx.draw_series(LineSeries::new(
                    pts.iter().copied(),
                    ShapeStyle::from(&c).stroke_width(width),
                ))
                .map_err(|e| err(path, e))?;
                ctx.draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                    .map_err(|e| err(path, e))?;
                let y = 60 + 24 * i as i32;
                legend_area
                    .draw(&PathElement::new(
                        vec![(6, y), (36, y)],
                        ShapeStyle::from(&c).stroke_width(width.max(2)),
                    ))
                    .map_err(|e| err(path, e))?;
                legend_area
                    .draw(&Circle::new((21, y), 3, c.filled()))
                    .map_err(|e| err(path, e))?;
                legend_area
                    .draw(&Text::new(
                        label.clone(),
                        (44, y - 7),
                        ("sans-serif", 14).into_font(),
                    ))
                    .map_err(|e| err(path, e))?;
            }
        }};
    }
    let mut builder = ChartBuilder::on(&plot_area);
    builder
        .caption(chart.title.as_str(), ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(46)
        .y_label_area_size(80);
    if chart.log_y {
        body!(builder
            .build_cartesian_2d(xmin..xmax, (ymin..ymax).log_scale())
            .map_err(|e| err(path, e))?);
    } else {
        body!(builder
            .build_cartesian_2d(xmin..xmax, ymin..ymax)
            .map_err(|e| err(path, e))?);
    }
    root.present().map_err(|e| err(path, e))?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_log_and_linear_charts() {
        let dir = std::env::temp_dir().join(format!("ptl-bench-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let series = vec![
            Series {
                label: "mpi-tcp-thread".into(),
                points: vec![(0, 5.0), (8, 10.0), (1024, 12.0), (1 << 20, 400.0)],
            },
            Series {
                label: "openmpi-tcp".into(),
                points: vec![(8, 9.0), (1024, 11.0), (1 << 20, 350.0)],
            },
        ];
        let mut c = Chart {
            title: "latency".into(),
            y_desc: "half round trip (us)".into(),
            log_y: true,
            y_range: None,
            series,
        };
        let p = dir.join("log.svg");
        assert!(draw(&c, &p).expect("draw"));
        let svg = std::fs::read_to_string(&p).expect("svg");
        assert!(svg.contains("<svg") && svg.contains("mpi-tcp-thread") && svg.contains("1M"));
        c.log_y = false;
        c.y_range = Some((0.0, 100.0));
        assert!(draw(&c, &dir.join("lin.svg")).expect("draw"));
        c.series.clear();
        assert!(!draw(&c, &dir.join("empty.svg")).expect("nothing to draw"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
