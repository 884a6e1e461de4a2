//! The paired-Δ forest plot of the ghost-call evaluation, in the style of Ghost Tool Calls
//! (arXiv 2606.02483) Figure 2 (notes §2.17: Table 8 / Fig. 2): one row per policy, the paired
//! Δ recovery against Naive as a point with its 95% bootstrap CI as a horizontal bar, a dashed
//! line at Δ = 0, and rows with sign-test p < 0.05 drawn as filled markers.
//!
//! Rendering uses `plotters` (bitmap backend, PNG encoder, `ab_glyph` text). No system font
//! library is linked: a TrueType font is loaded at run time from `$SECURECLAW_FONT` or from a
//! few common paths ([`FONT_CANDIDATES`]); without one, [`delta_plot`] returns
//! [`PlotError::NoFont`] and draws nothing, so callers can warn and skip the figure.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::FontStyle;

/// Environment variable naming a `.ttf`/`.otf` file to render text with; overrides
/// [`FONT_CANDIDATES`].
pub const FONT_ENV: &str = "SECURECLAW_FONT";

/// Font files tried, in order, when [`FONT_ENV`] is not set (Debian/Ubuntu, Arch, Fedora,
/// Alpine, macOS and Windows locations of DejaVu Sans, Liberation Sans, Noto Sans, FreeSans and
/// Arial).
pub const FONT_CANDIDATES: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu-sans-fonts/DejaVuSans.ttf",
    "/usr/share/fonts/ttf-dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/liberation2/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation-sans/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/Library/Fonts/Arial.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "C:\\Windows\\Fonts\\arial.ttf",
];

/// Font family name the loaded font is registered under (plotters' default family).
const FAMILY: &str = "sans-serif";

/// Errors of [`delta_plot`].
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// No usable font: [`FONT_ENV`] is unset and none of [`FONT_CANDIDATES`] exists. The figure
    /// was not drawn; callers should warn and carry on.
    #[error("no TrueType font found for the plot (tried: {tried}); set {FONT_ENV} to a .ttf file")]
    NoFont {
        /// The paths that were tried, comma-separated.
        tried: String,
    },
    /// The font file (from [`FONT_ENV`] or a candidate path) could not be read.
    #[error("cannot read font {path}: {source}")]
    FontRead {
        /// The font file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The font file is not a font `ab_glyph` can parse.
    #[error("{path} is not a usable TrueType/OpenType font (set {FONT_ENV} to another one)")]
    InvalidFont {
        /// The font file.
        path: PathBuf,
    },
    /// Drawing or writing the PNG failed (e.g. the output directory does not exist).
    #[error("cannot draw plot {path}: {message}")]
    Draw {
        /// The output file.
        path: PathBuf,
        /// The backend's error message.
        message: String,
    },
}

/// One row of the forest plot: a policy and its paired Δ recovery against Naive.
///
/// Units are recovery fractions (Δ in `[-1, 1]`). Non-finite values are tolerated: a row with
/// NaN `delta` is labelled "n/a" and draws no point; NaN bounds draw no bar.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotRow {
    /// Tick label (policy name), drawn left of the row.
    pub label: String,
    /// Point estimate: mean(policy − Naive) over the paired rows.
    pub delta: f64,
    /// Lower bound of the 95% bootstrap CI of the Δ.
    pub lo: f64,
    /// Upper bound of the 95% bootstrap CI of the Δ.
    pub hi: f64,
    /// Exact sign test p < 0.05: drawn as a filled marker (hollow otherwise).
    pub significant: bool,
}

/// The font registered with plotters in this process, if any.
static REGISTERED: Mutex<Option<PathBuf>> = Mutex::new(None);

/// Picks the font file: `env` (the value of [`FONT_ENV`]) if set and non-empty, else the first
/// of `candidates` that exists.
fn find_font(env: Option<std::ffi::OsString>, candidates: &[&str]) -> Result<PathBuf, PlotError> {
    if let Some(path) = env.filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(path));
    }
    candidates
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .ok_or_else(|| PlotError::NoFont {
            tried: candidates.join(", "),
        })
}

/// Loads and registers the font once per process (the bytes are leaked, once).
fn ensure_font() -> Result<PathBuf, PlotError> {
    let mut guard = REGISTERED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(path) = guard.as_ref() {
        return Ok(path.clone());
    }
    let path = find_font(std::env::var_os(FONT_ENV), FONT_CANDIDATES)?;
    let bytes = std::fs::read(&path).map_err(|source| PlotError::FontRead {
        path: path.clone(),
        source,
    })?;
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    plotters::style::register_font(FAMILY, FontStyle::Normal, bytes)
        .map_err(|_| PlotError::InvalidFont { path: path.clone() })?;
    *guard = Some(path.clone());
    Ok(path)
}

/// Plot width in pixels.
const WIDTH: u32 = 900;

/// Plot height in pixels for `rows` rows: `120 + 36 · rows`, counting at least 3 rows so a
/// short plot still has room for the legend (capped at 2,000 rows' worth).
fn height(rows: usize) -> u32 {
    let rows = u32::try_from(rows.clamp(3, 2000)).unwrap_or(2000);
    120 + 36 * rows
}

/// Finite x range covering every finite `delta`/`lo`/`hi` and 0, padded by 8%.
fn x_range(rows: &[PlotRow]) -> (f64, f64) {
    let (lo, hi) = rows
        .iter()
        .flat_map(|r| [r.delta, r.lo, r.hi])
        .filter(|v| v.is_finite())
        .fold((0.0f64, 0.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let span = hi - lo;
    if span <= 0.0 {
        return (lo - 0.05, hi + 0.05);
    }
    (lo - 0.08 * span, hi + 0.08 * span)
}

/// Tick-label format for Δ values: explicit sign, precision from the axis span.
fn fmt_delta(x: f64, span: f64) -> String {
    if x.abs() < span * 1e-9 {
        return "0".to_string();
    }
    if span < 0.2 {
        format!("{x:+.3}")
    } else {
        format!("{x:+.2}")
    }
}

/// Colour of significant rows.
const SIG: RGBColor = RGBColor(0xb2, 0x18, 0x2b);
/// Colour of non-significant rows.
const NS: RGBColor = RGBColor(0x4d, 0x4d, 0x4d);

/// Renders the Figure-2-style forest plot of paired Δ recovery vs Naive to a PNG at `path`
/// (900 × (120 + 36·max(rows, 3)) px; rows top to bottom in the order given).
///
/// Each row: policy name as y tick label, a marker at `delta` (filled red when `significant`,
/// i.e. sign-test p < 0.05; hollow grey otherwise) and a horizontal CI bar `[lo, hi]` with end
/// caps; a dashed vertical line marks Δ = 0; `title` is the caption and `x_label` the x-axis
/// description. Empty `rows` draws empty axes; NaN values are skipped (see [`PlotRow`]).
///
/// # Errors
/// [`PlotError::NoFont`] when no font is available (nothing is written; warn and skip),
/// [`PlotError::FontRead`] / [`PlotError::InvalidFont`] for a bad font file, and
/// [`PlotError::Draw`] when plotters cannot draw or write the file.
pub fn delta_plot(
    path: &Path,
    title: &str,
    x_label: &str,
    rows: &[PlotRow],
) -> Result<(), PlotError> {
    ensure_font()?;
    let draw_err = |e: &dyn std::fmt::Display| PlotError::Draw {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let n = rows.len();
    let n_i32 = i32::try_from(n).unwrap_or(i32::MAX - 1);
    let (x_lo, x_hi) = x_range(rows);
    let span = x_hi - x_lo;

    let root = BitMapBackend::new(path, (WIDTH, height(n))).into_drawing_area();
    root.fill(&WHITE).map_err(|e| draw_err(&e))?;

    let longest = rows
        .iter()
        .map(|r| r.label.chars().count())
        .max()
        .unwrap_or(4);
    let label_area = u32::try_from(longest.saturating_mul(9).saturating_add(24))
        .unwrap_or(320)
        .clamp(80, 320);
    let mut chart = ChartBuilder::on(&root)
        .caption(title, (FAMILY, 22))
        .margin(16)
        .x_label_area_size(52)
        .y_label_area_size(label_area)
        .build_cartesian_2d(x_lo..x_hi, -2i32..n_i32)
        .map_err(|e| draw_err(&e))?;

    // Row i (0-based, in input order) sits at y = n − 1 − i, so the first row is on top; the
    // two units below row n − 1 stay empty for the legend.
    let label_of = |y: &i32| -> String {
        let Ok(y) = usize::try_from(*y) else {
            return String::new();
        };
        let Some(i) = n.checked_sub(1).and_then(|top| top.checked_sub(y)) else {
            return String::new();
        };
        match rows.get(i) {
            Some(r) if r.delta.is_finite() => r.label.clone(),
            Some(r) => format!("{} (n/a)", r.label),
            None => String::new(),
        }
    };
    let x_fmt = |x: &f64| fmt_delta(*x, span);
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(n + 2)
        .y_label_formatter(&label_of)
        .x_labels(7)
        .x_label_formatter(&x_fmt)
        .x_desc(x_label)
        .axis_desc_style((FAMILY, 16))
        .label_style((FAMILY, 15))
        .light_line_style(TRANSPARENT)
        .bold_line_style(RGBColor(0xe4, 0xe4, 0xe4))
        .draw()
        .map_err(|e| draw_err(&e))?;

    // Δ = 0 reference line.
    chart
        .draw_series(std::iter::once(DashedPathElement::new(
            vec![(0.0, -2), (0.0, n_i32)],
            6,
            5,
            BLACK.stroke_width(1),
        )))
        .map_err(|e| draw_err(&e))?;

    for (i, row) in rows.iter().enumerate() {
        let y = n_i32 - 1 - i32::try_from(i).unwrap_or(n_i32 - 1);
        let color = if row.significant { SIG } else { NS };
        if row.lo.is_finite() && row.hi.is_finite() {
            let (lo, hi) = (row.lo.min(row.hi), row.lo.max(row.hi));
            let bar = color.stroke_width(2);
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(lo, y), (hi, y)],
                    bar,
                )))
                .map_err(|e| draw_err(&e))?;
            chart
                .draw_series([lo, hi].into_iter().map(|x| {
                    EmptyElement::at((x, y)) + PathElement::new(vec![(0, -7), (0, 7)], bar)
                }))
                .map_err(|e| draw_err(&e))?;
        }
        if row.delta.is_finite() {
            let at = (row.delta, y);
            if row.significant {
                chart
                    .draw_series(std::iter::once(Circle::new(at, 6, color.filled())))
                    .map_err(|e| draw_err(&e))?;
            } else {
                chart
                    .draw_series([
                        Circle::new(at, 6, WHITE.filled()),
                        Circle::new(at, 6, color.stroke_width(2)),
                    ])
                    .map_err(|e| draw_err(&e))?;
            }
        }
    }

    // Legend for the marker convention (empty series, so it lands in the key box); skipped for
    // an empty plot, which has no room for it.
    if !rows.is_empty() {
        chart
            .draw_series(std::iter::empty::<Circle<(f64, i32), i32>>())
            .map_err(|e| draw_err(&e))?
            .label("sign test p < 0.05")
            .legend(|(x, y)| Circle::new((x + 8, y), 6, SIG.filled()));
        chart
            .draw_series(std::iter::empty::<Circle<(f64, i32), i32>>())
            .map_err(|e| draw_err(&e))?
            .label("not significant")
            .legend(|(x, y)| Circle::new((x + 8, y), 6, NS.stroke_width(2)));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .label_font((FAMILY, 14))
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(0xbb, 0xbb, 0xbb))
            .draw()
            .map_err(|e| draw_err(&e))?;
    }

    root.present().map_err(|e| draw_err(&e))?;
    Ok(())
}

#[cfg(test)]
#[allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]
mod tests {
    use super::*;

    /// Table 8 / Fig. 2 of the paper: Δ vs Naive and CIs (notes §2.16), p < 0.05 marked. The
    /// FIDES-style row's CI is illustrative (the paper gives only its recovery), and the last
    /// row exercises NaN handling.
    fn table8_rows() -> Vec<PlotRow> {
        let row = |label: &str, delta: f64, lo: f64, hi: f64, significant: bool| PlotRow {
            label: label.to_string(),
            delta,
            lo,
            hi,
            significant,
        };
        vec![
            row("SIA", 0.020, 0.004, 0.038, true),
            row("Pre-Scrub", 0.013, -0.009, 0.036, false),
            row("Late-Scrub", 0.0, -0.013, 0.011, false),
            row("ACL", 0.0, -0.013, 0.013, false),
            row("FIDES-style", 0.027, -0.004, 0.058, false),
            row("No-Spec", -0.024, -0.047, -0.002, false),
            row("Gate (τ = 0.7)", -0.024, -0.049, 0.0, false),
            row("Drop", -0.027, -0.051, -0.004, true),
            row("Taint", -0.027, -0.053, 0.0, false),
            row("Taint-F", -0.033, -0.060, -0.009, true),
            row("Rewrite", -0.076, -0.104, -0.047, true),
            row("Shadow", -0.104, -0.133, -0.076, true),
            row("Broken (NaN)", f64::NAN, f64::NAN, f64::NAN, false),
        ]
    }

    fn render(rows: &[PlotRow]) -> Option<(tempfile::TempDir, PathBuf)> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("delta.png");
        match delta_plot(
            &path,
            "Paired Δ recovery vs Naive (150 tasks × 3 seeds)",
            "Δ recovery vs Naive (95% bootstrap CI)",
            rows,
        ) {
            Ok(()) => Some((dir, path)),
            Err(e @ PlotError::NoFont { .. }) => {
                eprintln!("skipping plot test: {e}");
                None
            }
            Err(e) => panic!("plot failed: {e}"),
        }
    }

    #[test]
    fn renders_thirteen_rows() {
        let rows = table8_rows();
        assert_eq!(rows.len(), 13);
        if let Some((_dir, path)) = render(&rows) {
            let bytes = std::fs::read(&path).unwrap();
            assert!(bytes.len() > 5 * 1024, "PNG only {} bytes", bytes.len());
            assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
            // IHDR: width and height.
            let w = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
            let h = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
            assert_eq!((w, h), (900, 120 + 36 * 13));
        }
    }

    #[test]
    fn renders_empty_and_degenerate_inputs() {
        assert!(render(&[]).is_none_or(|(_d, p)| p.is_file()));
        let all_nan = vec![PlotRow {
            label: "x".into(),
            delta: f64::NAN,
            lo: f64::INFINITY,
            hi: f64::NEG_INFINITY,
            significant: true,
        }];
        assert!(render(&all_nan).is_none_or(|(_d, p)| p.is_file()));
        let zero = vec![PlotRow {
            label: "Late-Scrub".into(),
            delta: 0.0,
            lo: 0.0,
            hi: 0.0,
            significant: false,
        }];
        assert!(render(&zero).is_none_or(|(_d, p)| p.is_file()));
    }

    #[test]
    fn missing_output_directory_is_an_error_not_a_panic() {
        if find_font(std::env::var_os(FONT_ENV), FONT_CANDIDATES).is_err() {
            return;
        }
        let err = delta_plot(
            Path::new("/nonexistent-dir-for-test/x.png"),
            "t",
            "x",
            &table8_rows(),
        )
        .unwrap_err();
        assert!(matches!(err, PlotError::Draw { .. }), "{err}");
    }

    #[test]
    fn font_lookup() {
        let err = find_font(None, &["/no/such/font.ttf", "/nor/this.ttf"]).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, PlotError::NoFont { .. }));
        assert!(msg.contains("/no/such/font.ttf") && msg.contains("/nor/this.ttf"));
        assert!(msg.contains(FONT_ENV));
        let env = find_font(Some("/custom/font.ttf".into()), &[]).unwrap();
        assert_eq!(env, PathBuf::from("/custom/font.ttf"));
        // An empty variable counts as unset.
        assert!(find_font(Some("".into()), &[]).is_err());
    }

    #[test]
    fn axis_helpers() {
        assert_eq!(height(0), 228);
        assert_eq!(height(1), 228);
        assert_eq!(height(13), 588);
        let (lo, hi) = x_range(&table8_rows());
        assert!(lo < -0.133 && hi > 0.058);
        assert_eq!(x_range(&[]), (-0.05, 0.05));
        assert_eq!(fmt_delta(0.02, 0.19), "+0.020");
        assert_eq!(fmt_delta(-1e-18, 0.19), "0");
        assert_eq!(fmt_delta(-0.5, 1.0), "-0.50");
    }
}
