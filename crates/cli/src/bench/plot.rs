//! The PNG of `bench fs`: for each workload, ratio against write MB/s and against read
//! MB/s, one labelled point per method (tarball workloads: the tree's ratio).

use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use super::report::{FsReport, FsRow};

const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
];

fn register_font() -> Result<(), String> {
    static ONCE: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    ONCE.get_or_init(|| {
        for f in FONTS {
            if let Ok(bytes) = std::fs::read(f) {
                let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                return register_font_bytes(bytes).map_err(|_| format!("{f}: not a usable font"));
            }
        }
        Err(format!(
            "no font to label the plot with (looked for {}); install fonts-dejavu-core",
            FONTS.join(", ")
        ))
    })
    .clone()
}

fn register_font_bytes(bytes: &'static [u8]) -> Result<(), ()> {
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes).map_err(|_| ())
}

/// The ratio plotted: the tree's for a tarball workload (all its methods have one).
fn ratio(r: &FsRow) -> f64 {
    r.tree.as_ref().map_or(r.ratio, |t| t.ratio)
}

fn color(method: &str) -> RGBColor {
    if method.starts_with("squeezefs+pack") {
        RGBColor(148, 103, 189)
    } else if method.starts_with("squeezefs") {
        RGBColor(31, 119, 180)
    } else if method.starts_with("btrfs (no") {
        RGBColor(127, 127, 127)
    } else if method.starts_with("btrfs") {
        RGBColor(214, 39, 40)
    } else if method.starts_with("squashfs") {
        RGBColor(255, 127, 14)
    } else {
        RGBColor(44, 160, 44)
    }
}

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    xlabel: &str,
    rows: &[&FsRow],
    x: impl Fn(&FsRow) -> f64,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("drawing the plot: {e}");
    let xmax = rows.iter().map(|r| x(r)).fold(1.0, f64::max) * 1.25;
    let ymax = rows.iter().map(|r| ratio(r)).fold(1.0, f64::max) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(xlabel)
        .y_desc(if rows[0].tree.is_some() {
            "tree ratio (logical / on disk)"
        } else {
            "ratio (logical / on disk)"
        })
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| err(&e))?;
    for r in rows {
        let c = color(&r.method);
        let p = (x(r), ratio(r));
        // The label sits beside the point, not on it.
        let point = EmptyElement::at(p)
            + Circle::new((0, 0), 5, c.filled())
            + Text::new(
                r.method.clone(),
                (8, -6),
                ("sans-serif", 13).into_font().color(&c),
            );
        chart.draw_series(std::iter::once(point)).map_err(|e| err(&e))?;
    }
    Ok(())
}

pub fn draw(report: &FsReport, out: &Path) -> Result<(), String> {
    register_font()?;
    let mut workloads: Vec<&str> = report.rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    if workloads.is_empty() {
        return Err("nothing to plot".into());
    }
    let height = 420 * workloads.len() as u32 + 40;
    let root = BitMapBackend::new(out, (1200, height)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| format!("drawing {}: {e}", out.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (head, body) = root.split_vertically(40);
    head.draw(&Text::new(
        format!("squeezefs bench fs, {}: {}", report.date, report.machine),
        (10, 12),
        ("sans-serif", 16),
    ))
    .map_err(|e| err(&e))?;
    let cells = body.split_evenly((workloads.len(), 2));
    for (i, w) in workloads.iter().enumerate() {
        let rows: Vec<&FsRow> = report.rows.iter().filter(|r| r.workload == *w).collect();
        panel(&cells[2 * i], &format!("{w}: write"), "write MB/s", &rows, |r| {
            r.write_mb_s
        })?;
        panel(
            &cells[2 * i + 1],
            &format!("{w}: read"),
            "read MB/s",
            &rows,
            |r| r.read_mb_s,
        )?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
