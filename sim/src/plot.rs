//! `--plot FILE.svg`: the expiry lateness histogram (plotters, SVG backend).
//!
//! The lateness axis is logarithmic, from 1 µs up, in ten bins per decade; each bin's height
//! is the share (%) of that kind's expiries whose lateness falls in it, so idle and request
//! expiries compare though their counts differ by orders of magnitude. The tick and the
//! design bar (one tick + 0.5 ms) are marked. With `--compare`, a second panel draws every
//! timer's expiries (idle and request together) the same way.

use crate::args::Config;
use crate::figures::Outcome;
use crate::histogram::Snapshot;
use crate::units::group;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// Bins per decade of lateness. The axis starts at 1 µs; 0 µs is counted in the first bin.
const BINS_PER_DECADE: f64 = 10.0;
const MIN_US: f64 = 1.0;

/// A histogram re-binned on the log axis: `(bin start µs, bin end µs, % of expiries)`, from
/// the first bin that holds anything. A bucket (at most ~3 % wide; a bin is ~26 %) goes to
/// the bin of its middle.
pub fn log_bins(s: &Snapshot) -> Vec<(f64, f64, f64)> {
    let edge = |i: usize| 10f64.powf(i as f64 / BINS_PER_DECADE);
    let bin_of = |us: f64| (us.max(MIN_US).log10() * BINS_PER_DECADE).floor() as usize;
    let mut bins = vec![0.0; s.max().map_or(0, |max| bin_of(max as f64) + 1)];
    s.buckets().for_each(|(low, high, n)| bins[bin_of((low + high) as f64 / 2.0)] += n as f64);
    let first = bins.iter().position(|&n| n > 0.0).unwrap_or(0);
    let last = bins.iter().rposition(|&n| n > 0.0).map_or(0, |i| i + 1);
    (first..last).map(|i| (edge(i), edge(i + 1), 100.0 * bins[i] / s.count() as f64)).collect()
}

/// `1 µs`, `10 µs`, `1.5 ms`, `1 s`: axis labels for a value in µs.
fn us_label(us: f64) -> String {
    let (v, unit) = [(1e6, "s"), (1e3, "ms")].into_iter().find(|s| us >= s.0).map_or((us, "µs"), |(s, u)| (us / s, u));
    format!("{} {unit}", trim(v))
}

/// One decimal, none when it is 0.
fn trim(v: f64) -> String {
    format!("{v:.1}").trim_end_matches(".0").to_owned()
}

/// The step outline of a binned histogram, for a line series.
fn outline(bins: &[(f64, f64, f64)]) -> Vec<(f64, f64)> {
    let steps = bins.iter().flat_map(|&(start, end, pct)| [(start, pct), (end, pct)]);
    bins.first().map(|b| (b.0, 0.0)).into_iter().chain(steps).chain(bins.last().map(|b| (b.1, 0.0))).collect()
}

type PlotResult = Result<(), Box<dyn std::error::Error>>;
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
/// The tick, and the lateness axis's first and last value, all in µs.
type Axis = (f64, f64, f64);

/// A series of a panel: its label, its lateness, whether to draw filled bars.
type Series<'a> = (&'a str, &'a Snapshot, bool);

/// One panel: every series, the tick and the bar marked.
fn panel(area: &Area<'_>, caption: &str, series: &[Series<'_>], (tick_us, x_min, x_max): Axis) -> PlotResult {
    let binned: Vec<Vec<(f64, f64, f64)>> = series.iter().map(|(_, s, _)| log_bins(s)).collect();
    let y_max = binned.iter().flatten().map(|b| b.2).fold(0.0f64, f64::max).max(1.0) * 1.12;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .margin_right(40)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("expiry lateness: task ran − requested deadline (log scale)")
        .y_desc("share of expiries per bin (%)")
        .x_label_formatter(&|v| us_label(*v))
        .y_label_formatter(&|v| format!("{v:.0} %"))
        .label_style(("sans-serif", 14))
        .axis_desc_style(("sans-serif", 15))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for (k, ((label, snapshot, filled), bins)) in series.iter().zip(&binned).enumerate() {
        let color = Palette99::pick(k);
        let bars = bins.iter().filter(|_| *filled);
        let rects = bars.map(|&(start, end, pct)| Rectangle::new([(start, 0.0), (end, pct)], color.mix(0.25).filled()));
        chart.draw_series(rects)?;
        let [p99, max] =
            [snapshot.quantile(0.99), snapshot.max()].map(|v| v.map_or("—".to_owned(), |v| us_label(v as f64)));
        chart
            .draw_series(LineSeries::new(outline(bins), color.stroke_width(2)))?
            .label(format!("{label}: {} fired, p99 {p99}, max {max}", group(snapshot.count())))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 18, y + 5)], color.filled()));
    }
    let bar = tick_us + 500.0;
    let marks = [
        (tick_us, format!("tick = {}", us_label(tick_us)), BLACK),
        (bar, format!("bar: tick + 0.5 ms = {}", us_label(bar)), RGBColor(120, 120, 120)),
    ];
    for (x, label, color) in marks.into_iter().filter(|m| m.0 < x_max) {
        chart
            .draw_series(DashedLineSeries::new([(x, 0.0), (x, y_max)], 6, 4, color.stroke_width(2)))?
            .label(label)
            .legend(move |(lx, ly)| PathElement::new([(lx, ly), (lx + 18, ly)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 14))
        .draw()?;
    Ok(())
}

/// Writes the plot of `runs` (`runs[0]` shardwheel's) to `path`.
pub fn write(path: &Path, config: &Config, runs: &[Outcome]) -> PlotResult {
    let (main, all): (_, Vec<Snapshot>) = (&runs[0], runs.iter().map(Outcome::all_lateness).collect());
    let tick_us = main.tick.as_secs_f64() * 1e6;
    // From the decade of the smallest lateness (at most a tenth of the tick) up to the
    // decade above the worst, and at least past the bar.
    let worst = all.iter().filter_map(Snapshot::max).max().unwrap_or(0) as f64;
    let x_max = 10f64.powf((worst.max(tick_us * 3.0).max(10.0)).log10().floor() + 1.0);
    let best = all.iter().filter_map(|s| s.buckets().next().map(|b| b.0)).min().unwrap_or(0) as f64;
    let x_min = 10f64.powf(best.max(MIN_US).min(tick_us / 10.0).log10().floor());
    let (axis, height) = ((tick_us, x_min, x_max), if runs.len() > 1 { 1200 } else { 640 });
    let root = SVGBackend::new(path, (1200, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let (connections, rate) = (group(config.connections as u64), group(config.rate));
    let (idle, request) = (config.idle_timeout.as_millis(), config.request_timeout.as_millis());
    let (tick, shards, secs) = (us_label(tick_us), config.shards, trim(config.duration.as_secs_f64()));
    let setup = format!("{connections} connections, {rate} events/s, idle {idle} ms, request {request} ms");
    let caption = format!("shardwheel expiry lateness: {setup}, tick {tick}, {shards} shards, {secs} s");
    let mine = [("idle timeouts", &main.lateness[0], true), ("request timeouts", &main.lateness[1], true)];
    if runs.len() == 1 {
        panel(&root, &caption, &mine, axis)?;
    } else {
        let (top, bottom) = root.split_vertically(height / 2);
        panel(&top, &caption, &mine, axis)?;
        let series: Vec<Series<'_>> = runs.iter().zip(&all).map(|(o, s)| (o.timer, s, false)).collect();
        panel(&bottom, "every timer, same scenario: all expiries (idle and request)", &series, axis)?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::figures::tests::outcome;
    use crate::histogram::Histogram;
    use crate::report::tests::config;

    fn bins(values: &[u64]) -> Vec<(f64, f64, f64)> {
        let h = Histogram::new();
        values.iter().for_each(|&v| h.record(v));
        log_bins(&h.snapshot())
    }

    #[test]
    fn bins_cover_every_value_and_sum_to_100_percent() {
        let b = bins(&[0, 1, 5, 900, 1_000, 1_100, 2_000, 50_000]);
        assert!((b.iter().map(|b| b.2).sum::<f64>() - 100.0).abs() < 1e-9, "{b:?}");
        // 0 and 1 µs land in the first bin; bins are contiguous and reach the largest value;
        // empty bins below the smallest value are left out.
        assert!(b[0].0 == 1.0 && (b[0].2 - 25.0).abs() < 1e-9, "{b:?}");
        assert!(b.windows(2).all(|w| (w[0].1 - w[1].0).abs() < 1e-9) && b.last().unwrap().1 > 50_000.0);
        let one = bins(&[1_100]);
        assert!(one.len() == 1 && one[0].0 <= 1_100.0 && one[0].1 > 1_100.0 && bins(&[]).is_empty(), "{one:?}");
        assert_eq!([1.0, 1_000.0, 1_500.0, 2e6].map(us_label), ["1 µs", "1 ms", "1.5 ms", "2 s"]);
    }

    #[test]
    fn writes_an_svg_with_title_axes_and_tick() {
        let dir = std::env::temp_dir().join(format!("shardwheel-sim-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (one, two) = (dir.join("one.svg"), dir.join("two.svg"));
        write(&one, &config(), &[outcome("shardwheel", 1)]).unwrap();
        write(&two, &config(), &[outcome("shardwheel", 1), outcome("binary-heap", 4)]).unwrap();
        let [one, two] = [one, two].map(|path| std::fs::read_to_string(path).unwrap());
        assert!(one.starts_with("<svg"), "{}", &one[..100.min(one.len())]);
        for text in ["shardwheel expiry lateness", "expiry lateness: task ran", "share of expiries", "tick = 1 ms"] {
            assert!(one.contains(text), "the plot lacks {text:?}");
        }
        assert!(two.contains("every timer, same scenario") && two.contains("binary-heap"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
