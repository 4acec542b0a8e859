//! Figures (`rrpdem plot`): every PNG decodes at 1200×800, curves land on the pixels the
//! documented axis mapping gives, energy terms that are zero throughout are left out, and the
//! study scatter works on a synthetic table.

use rrpdem::plot::{
    self, AxisSpec, Curve, Figure, HEIGHT, Panel, PlotArea, PlotError, ScatterSpec, Stroke, Style, Table, WIDTH,
};
use std::path::Path;
use std::process::Command;

/// Width, height and RGB pixels of an 8-bit RGB PNG.
fn decode(path: &Path) -> (u32, u32, Vec<u8>) {
    let file = std::io::BufReader::new(std::fs::File::open(path).unwrap());
    let mut reader = png::Decoder::new(file).read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Rgb, png::BitDepth::Eight), "{}", path.display());
    buf.truncate(info.line_size * info.height as usize);
    (info.width, info.height, buf)
}

fn at(pixels: &[u8], (x, y): (i32, i32)) -> (u8, u8, u8) {
    let i = 3 * (y as usize * WIDTH as usize + x as usize);
    (pixels[i], pixels[i + 1], pixels[i + 2])
}

fn count(pixels: &[u8], colour: (u8, u8, u8)) -> usize {
    pixels.chunks(3).filter(|p| (p[0], p[1], p[2]) == colour).count()
}

/// A series.csv in the run's format, its columns shuffled, with an unknown column and
/// `E_released`, as later versions may write: the plots read columns by name.
fn write_run(dir: &Path, with_summary: bool) {
    write_run_until(dir, with_summary, 10.0);
}

/// [`write_run`] over `0 ≤ t ≤ t_end` (201 rows).
fn write_run_until(dir: &Path, with_summary: bool, t_end: f64) {
    let mut text = String::from(
        "t,step,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,E_released,future_column,E,P_x,P_y,P_z,S_x,S_y,S_z,L_x,L_y,L_z\n",
    );
    for k in 0..=200 {
        let t = k as f64 * t_end / 200.0;
        let (trans, rot, bend) = (2.0 + t.cos(), 1.0 + t.sin(), 0.5 * t.sin().powi(2));
        let released = 0.01 * t;
        let e = trans + rot + bend + released + 1e-6 * (3.0 * t).sin();
        // U_axial, U_shear, U_contact, U_wall, U_gravity stay zero.
        text.push_str(&format!(
            "{t},{k},{trans},{rot},{bend},0,0,0,0,0,{released},7,{e},{},{},0,1,0,{},0,0,{}\n",
            3.0 - 0.1 * t,
            1e-15 * t.sin(),
            1e-14 * t.cos(),
            0.2 * t
        ));
    }
    std::fs::write(dir.join("series.csv"), text).unwrap();
    if with_summary {
        let summary = r#"{
  "status": "completed",
  "scenario": { "name": "synthetic", "integrator": "rrp-newmark", "dt": 0.05 },
  "energy_and_momenta": {
    "e0": 4.0,
    "conserved": { "p": [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], "s": [[0.0, 0.0, 1.0]], "l": [] }
  }
}"#;
        std::fs::write(dir.join("summary.json"), summary).unwrap();
    }
}

#[test]
fn run_figures_are_1200_by_800_pngs_with_and_without_summary() {
    for with_summary in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        write_run(dir.path(), with_summary);
        let out = dir.path().join("figs");
        let files = plot::plot_run_dir(dir.path(), &out).unwrap();
        let names: Vec<_> = files.iter().map(|f| f.file_name().unwrap().to_str().unwrap().to_string()).collect();
        assert_eq!(names, ["energy.png", "energy_error.png", "momentum_drift.png"]);
        for f in &files {
            assert!(f.starts_with(&out));
            let (w, h, pixels) = decode(f);
            assert_eq!((w, h), (WIDTH, HEIGHT));
            assert_eq!((w, h), (1200, 800));
            // Something besides the white background was drawn, and mostly background remains.
            let white = count(&pixels, (255, 255, 255));
            assert!(white < (w * h) as usize && white > (w * h) as usize / 2, "{}: {white}", f.display());
        }
    }
}

#[test]
fn energy_figure_draws_the_active_terms_and_leaves_out_the_zero_ones() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), true);
    plot::plot_run_dir(dir.path(), dir.path()).unwrap();
    let (_, _, pixels) = decode(&dir.path().join("energy.png"));
    for term in ["E", "E_trans", "E_rot", "U_bend", "E_released"] {
        let c = plot::energy_colour(term).unwrap();
        assert!(count(&pixels, c) > 200, "{term} is drawn");
    }
    for term in ["U_axial", "U_shear", "U_contact", "U_wall", "U_gravity"] {
        let c = plot::energy_colour(term).unwrap();
        assert_eq!(count(&pixels, c), 0, "{term} is zero throughout and must be neither drawn nor in the legend");
    }
}

/// A converge.csv of three integrators of orders 2, 2 and 1, four steps each.
fn converge_text() -> String {
    let mut text = String::from(rrpdem::converge::CONVERGE_HEADER);
    text.push('\n');
    for (name, p, c) in [("rrp-newmark", 2, 0.5), ("rrp-exact", 2, 4.0), ("campello", 1, 0.6)] {
        for k in 0..4 {
            let dt = 0.1 / 2f64.powi(k);
            let e = c * dt.powi(p);
            let order = if k == 0 { String::new() } else { format!("{p}.0") };
            text.push_str(&format!(
                "{name},{dt:e},{},{e:e},{order},{:e},{order},{:e},{order},0e0\n",
                100 << k,
                2.0 * e,
                e
            ));
        }
    }
    text
}

#[test]
fn convergence_figure_from_converge_csv() {
    let dir = tempfile::tempdir().unwrap();
    let text = converge_text();
    let csv = dir.path().join("converge.csv");
    std::fs::write(&csv, text).unwrap();
    let file = plot::plot_converge(&csv, &dir.path().join("o")).unwrap();
    assert_eq!(file, dir.path().join("o").join("convergence.png"));
    let (w, h, pixels) = decode(&file);
    assert_eq!((w, h), (1200, 800));
    // The integrators' colours (Tableau blue, orange, green) are all there.
    for c in [(31, 119, 180), (255, 127, 14), (44, 160, 44)] {
        assert!(count(&pixels, c) > 100, "{c:?}");
    }
}

#[test]
fn plot_dir_plots_what_it_finds_and_refuses_an_empty_folder() {
    let dir = tempfile::tempdir().unwrap();
    let e = plot::plot_dir(dir.path(), dir.path()).unwrap_err();
    assert!(matches!(e, PlotError::NothingToPlot { .. }), "{e}");
    write_run(dir.path(), true);
    assert_eq!(plot::plot_dir(dir.path(), dir.path()).unwrap().len(), 3);
}

#[test]
fn a_malformed_series_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("series.csv"), "step,t,E\n0,0,1\n1,0.1,abc\n").unwrap();
    let e = plot::plot_run_dir(dir.path(), dir.path()).unwrap_err();
    assert!(matches!(e, PlotError::Csv { line: 3, .. }), "{e}");
    assert!(e.to_string().contains("`abc` is not a number"), "{e}");
    std::fs::write(dir.path().join("series.csv"), "step,E\n0,1\n").unwrap();
    let e = plot::plot_run_dir(dir.path(), dir.path()).unwrap_err();
    assert!(matches!(&e, PlotError::MissingColumn { column, .. } if column == "t"), "{e}");
}

const RED: (u8, u8, u8) = (200, 30, 30);

fn one_panel(x: AxisSpec, y: AxisSpec, points: Vec<(f64, f64)>) -> Figure {
    let curve = Curve { label: "y".into(), points, style: Style::line(RED) };
    let panel = Panel { title: "known".into(), x, y, curves: vec![curve], legend: true, notes: vec![] };
    Figure { title: "mapping".into(), rows: 1, cols: 1, panels: vec![panel], ..Figure::default() }
}

/// The pixel of `(x, y)` computed here from the documented mapping, not by the library.
fn expected_pixel(a: &PlotArea, x: f64, y: f64) -> (i32, i32) {
    let u = |v: f64, log: bool| if log { v.log10() } else { v };
    let fx = (u(x, a.x_log) - u(a.x.0, a.x_log)) / (u(a.x.1, a.x_log) - u(a.x.0, a.x_log));
    let fy = (u(y, a.y_log) - u(a.y.0, a.y_log)) / (u(a.y.1, a.y_log) - u(a.y.0, a.y_log));
    (
        (a.left as f64 + fx * (a.right - a.left) as f64).round() as i32,
        (a.bottom as f64 - fy * (a.bottom - a.top) as f64).round() as i32,
    )
}

/// Whether `colour` is within one pixel of `p`.
fn near(pixels: &[u8], p: (i32, i32), colour: (u8, u8, u8)) -> bool {
    (-1..=1).any(|dx| (-1..=1).any(|dy| at(pixels, (p.0 + dx, p.1 + dy)) == colour))
}

#[test]
fn a_straight_line_lands_on_the_pixels_of_the_axis_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("line.png");
    let axis = |label: &str| AxisSpec { label: label.into(), range: Some((0.0, 10.0)), ..AxisSpec::default() };
    let fig = one_panel(axis("t"), axis("y"), (0..=100).map(|k| (k as f64 / 10.0, k as f64 / 10.0)).collect());
    let areas = plot::render(&fig, &path).unwrap();
    assert_eq!(areas.len(), 1);
    let a = areas[0];
    assert_eq!((a.x, a.y, a.x_log, a.y_log), ((0.0, 10.0), (0.0, 10.0), false, false));
    // A usable plotting rectangle inside the figure.
    assert!(0 < a.left && a.left + 400 < a.right && (a.right as u32) < WIDTH, "{a:?}");
    assert!(0 < a.top && a.top + 400 < a.bottom && (a.bottom as u32) < HEIGHT, "{a:?}");
    let (_, _, pixels) = decode(&path);
    for k in 1..20 {
        let t = k as f64 * 0.5;
        let p = expected_pixel(&a, t, t);
        assert_eq!(a.pixel(t, t), p);
        assert!(near(&pixels, p, RED), "y = t at t = {t}: no curve near {p:?}");
    }
    // Half-integer points off the line are clear of the grid lines (ticks fall on integers):
    // nothing but background there.
    for k in 0..7 {
        let t = 0.5 + k as f64;
        for (x, y) in [(t, t + 3.0), (t + 3.0, t)] {
            let p = expected_pixel(&a, x, y);
            assert_eq!(at(&pixels, p), (255, 255, 255), "({x}, {y}) at {p:?} is off the line");
        }
    }
    // The whole curve lies inside the plotting rectangle (the legend sample aside, right of it).
    for y in 0..HEIGHT as i32 {
        for x in 0..a.right + 2 {
            if at(&pixels, (x, y)) == RED {
                assert!(x >= a.left - 1 && y >= a.top - 1 && y <= a.bottom + 1, "curve pixel outside at ({x}, {y})");
            }
        }
    }
}

#[test]
fn a_power_law_is_straight_on_log_axes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loglog.png");
    let x = AxisSpec { label: "h".into(), log: true, range: Some((1e-3, 1.0)), pad: false };
    let y = AxisSpec { label: "error".into(), log: true, range: Some((1e-6, 1.0)), pad: false };
    let pts = (0..=30).map(|k| 10f64.powf(-3.0 + k as f64 * 0.1)).map(|h| (h, h * h)).collect();
    let a = plot::render(&one_panel(x, y, pts), &path).unwrap()[0];
    let (_, _, pixels) = decode(&path);
    for k in 1..30 {
        let h = 10f64.powf(-3.0 + k as f64 * 0.1);
        let p = expected_pixel(&a, h, h * h);
        assert!(near(&pixels, p, RED), "h = {h}: no curve near {p:?}");
        // On log axes y = h² is the straight line from corner to corner.
        let f = k as f64 / 30.0;
        let straight = (a.left as f64 + f * (a.right - a.left) as f64, a.bottom as f64 - f * (a.bottom - a.top) as f64);
        assert!((p.0 as f64 - straight.0).abs() <= 1.0 && (p.1 as f64 - straight.1).abs() <= 1.0);
    }
    // A linear mapping of the same points would put the curve elsewhere: h = 0.1 lies at a
    // tenth of the width on a linear axis, two thirds of it on this one.
    let wrong = (a.left as f64 + 0.1 * (a.right - a.left) as f64).round() as i32;
    let right = expected_pixel(&a, 0.1, 0.01);
    assert!(right.0 - wrong > 100);
}

#[test]
fn unusable_ranges_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = AxisSpec { log: true, range: Some((0.0, 1.0)), ..AxisSpec::default() };
    let e = plot::render(&one_panel(x, AxisSpec::default(), vec![(0.5, 0.5)]), &dir.path().join("x.png")).unwrap_err();
    assert!(matches!(e, PlotError::Spec(_)), "{e}");
}

/// A study table as a later `study.csv` may look: a text column, parameters, outcomes, one
/// failed variant with empty outcome cells.
fn study(dir: &Path) -> std::path::PathBuf {
    let text = "\
variant,dt,k_shear,status,max_energy_error,steps
a,0.001,100,completed,1e-4,1000
b,0.002,100,completed,4e-4,500
c,0.004,100,completed,1.6e-3,250
d,0.001,400,completed,2e-4,1000
e,0.002,400,completed,8e-4,500
f,0.008,400,failed,,125
";
    let path = dir.join("study.csv");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn scatter_of_a_study_table() {
    let dir = tempfile::tempdir().unwrap();
    let csv = study(dir.path());
    let spec = ScatterSpec {
        title: "synthetic study".into(),
        x: vec!["dt".into(), "k_shear".into()],
        y: vec!["max_energy_error".into(), "steps".into()],
        group_by: Some("status".into()),
        log: vec!["dt".into(), "max_energy_error".into()],
        ..ScatterSpec::default()
    };
    let out = dir.path().join("scatter.png");
    let areas = plot::scatter_csv(&csv, &spec, &out).unwrap();
    assert_eq!(areas.len(), 4, "2 outcomes × 2 parameters");
    assert!(areas[0].x_log && areas[0].y_log && !areas[1].x_log && !areas[2].y_log);
    // Panels run row by row: the second is right of the first, the third below it.
    assert!(areas[1].left > areas[0].right && areas[2].top > areas[0].bottom);
    let (w, h, pixels) = decode(&out);
    assert_eq!((w, h), (1200, 800));
    // Group "completed" is the first colour: its marker sits on variant a (dt 1e-3, error 1e-4).
    let blue = (31, 119, 180);
    assert!(near(&pixels, expected_pixel(&areas[0], 0.001, 1e-4), blue));
    // The failed variant has no error value: nothing of its colour in the error panels, but it
    // is in the steps panels.
    let orange = (255, 127, 14);
    let in_panel = |a: &PlotArea| {
        (a.top..=a.bottom)
            .flat_map(|y| (a.left..=a.right).map(move |x| (x, y)))
            .filter(|&p| at(&pixels, p) == orange)
            .count()
    };
    assert_eq!(in_panel(&areas[0]) + in_panel(&areas[1]), 0);
    assert!(in_panel(&areas[2]) > 0 && in_panel(&areas[3]) > 0);
    assert!(near(&pixels, expected_pixel(&areas[2], 0.008, 125.0), orange));
}

#[test]
fn scatter_errors_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let table = Table::read(&study(dir.path())).unwrap();
    let out = dir.path().join("s.png");
    let spec = |x: &[&str], y: &[&str]| ScatterSpec {
        x: x.iter().map(|s| s.to_string()).collect(),
        y: y.iter().map(|s| s.to_string()).collect(),
        ..ScatterSpec::default()
    };
    let e = plot::scatter(&table, &spec(&["nope"], &["steps"]), &out).unwrap_err();
    assert!(matches!(&e, PlotError::MissingColumn { column, .. } if column == "nope"), "{e}");
    let e = plot::scatter(&table, &spec(&["dt"], &["status"]), &out).unwrap_err();
    assert!(matches!(e, PlotError::Csv { line: 2, .. }), "{e}");
    let many = ["dt"; 5];
    let e = plot::scatter(&table, &spec(&many, &["steps", "dt", "k_shear", "max_energy_error"]), &out).unwrap_err();
    assert!(matches!(e, PlotError::Spec(_)), "{e}");
    assert!(!out.exists());
}

#[test]
fn cli_plot_writes_into_out() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), true);
    let out = dir.path().join("png");
    let o = Command::new(env!("CARGO_BIN_EXE_rrpdem"))
        .args(["plot", dir.path().to_str().unwrap(), "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    for f in ["energy.png", "energy_error.png", "momentum_drift.png"] {
        assert!(out.join(f).is_file() && stdout.contains(f), "{stdout}");
    }
    let empty = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_rrpdem")).args(["plot", empty.path().to_str().unwrap()]).output().unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("nothing to plot"));
}

const BLUE: (u8, u8, u8) = (31, 119, 180);

/// A rupturing run's `series.csv` in the guard's format (issue 22): `E_released` grows as bonds
/// break while `E` falls by as much plus a small error `δ(t) = 2e-3 sin 3t`; `U_gravity` is a
/// constant −1.5, which `E_scale` (the last column: the running maximum of the other terms'
/// sum, here about 5.5, not |E₀| = 4) leaves out. Without `with_scale` the column is left out as
/// in older runs. `summary_max` goes into summary.json's `max_rel_energy_deviation`. Returns per
/// row `(t, E + E_released, E_scale)` as written.
fn write_rupture_run(dir: &Path, with_scale: bool, summary_max: Option<f64>) -> Vec<(f64, f64, f64)> {
    let mut text = String::from(
        "step,t,E,E_trans,E_rot,U_bend,U_axial,U_shear,U_contact,U_wall,U_gravity,P_x,P_y,P_z,S_x,S_y,S_z,\
         L_x,L_y,L_z,E_released,n_broken,F_wall_x,F_wall_y,F_wall_z,x_cm,y_cm,z_cm,v_cm_x,v_cm_y,v_cm_z",
    );
    text.push_str(if with_scale { ",E_scale\n" } else { "\n" });
    let mut rows = Vec::new();
    let mut scale = 0.0f64;
    for k in 0..=200 {
        let t = k as f64 * 0.01;
        let (trans, rot, bend, gravity) = (3.0 - 0.4 * t, 1.0, 0.2 + 0.1 * (5.0 * t).sin().powi(2), -1.5);
        let released = 0.5 * t;
        let target = 4.0 - released + 2e-3 * (3.0 * t).sin();
        let axial = target - (trans + rot + bend + gravity);
        let e = trans + rot + bend + axial + gravity;
        scale = scale.max(trans + rot + bend + axial);
        text.push_str(&format!(
            "{k},{t},{e},{trans},{rot},{bend},{axial},0,0,0,{gravity},1,0,0,0,0,0,0,0,0,{released},{},0,0,0,0,0,0,0,0,0",
            k / 10
        ));
        text.push_str(&if with_scale { format!(",{scale}\n") } else { "\n".into() });
        rows.push((t, e + released, scale));
    }
    std::fs::write(dir.join("series.csv"), text).unwrap();
    if let Some(max) = summary_max {
        let summary = format!(
            r#"{{"status": "completed", "scenario": {{"name": "rupture", "integrator": "rrp-newmark", "dt": 0.01}},
               "energy_and_momenta": {{"e0": 4.0, "max_rel_energy_deviation": {max}}}}}"#
        );
        std::fs::write(dir.join("summary.json"), summary).unwrap();
    }
    rows
}

/// The figure named `name` of the run in `dir`, drawn: the figure, its panels' areas, pixels.
fn drawn(dir: &Path, name: &str) -> (Figure, Vec<PlotArea>, Vec<u8>) {
    let fig = plot::run_figures(dir).unwrap().into_iter().find(|(n, _)| *n == name).unwrap().1;
    let path = dir.join(format!("drawn_{name}"));
    let areas = plot::render(&fig, &path).unwrap();
    (fig, areas, decode(&path).2)
}

/// H3: the error plotted is the guard's `(E + E_released − E₀)/E_scale`, computed here from the
/// written columns, and lands where the axis mapping puts it; the old `(E − E₀)/|E₀|` would
/// reach −0.25 by the end of this run and draw nowhere near these pixels.
#[test]
fn energy_error_is_the_guarded_quantity_with_e_released_over_e_scale() {
    let dir = tempfile::tempdir().unwrap();
    let rows = write_rupture_run(dir.path(), true, Some(7.5e-4));
    let (fig, areas, pixels) = drawn(dir.path(), "energy_error.png");
    let budget0 = rows[0].1;
    let expected: Vec<(f64, f64)> = rows.iter().map(|&(t, b, s)| (t, (b - budget0) / s)).collect();
    let panel = &fig.panels[0];
    assert!(fig.title.contains("guard"), "{}", fig.title);
    assert!(panel.y.label.contains("E_released") && panel.y.label.contains("E_scale"), "{}", panel.y.label);
    let curve = panel.curves.iter().find(|c| c.style.color == BLUE).unwrap();
    assert_eq!(curve.points.len(), expected.len());
    // Same numbers, summed possibly in another order: a few ulp of E ≈ 4 over E_scale ≈ 5.5.
    for (got, want) in curve.points.iter().zip(&expected) {
        assert!(got.0 == want.0 && (got.1 - want.1).abs() < 1e-14, "{got:?} vs {want:?}");
    }
    let a = areas[0];
    assert!(a.y.0 > -1e-3 && a.y.1 < 1e-3, "y range {:?} fits |δ|/E_scale ≤ 3.7e-4", a.y);
    for &(t, err) in expected.iter().skip(3).step_by(7) {
        assert!(near(&pixels, expected_pixel(&a, t, err), BLUE), "t = {t}: no curve at error {err:e}");
    }
    let notes = panel.notes.join("\n");
    let rows_max = expected.iter().map(|e| e.1.abs()).fold(0.0, f64::max);
    assert!(notes.contains("7.500e-4") && notes.contains("summary.json"), "{notes}");
    assert!(notes.contains(&format!("{rows_max:.3e}")) && notes.contains("recorded rows"), "{notes}");
    assert!(!notes.contains("no E_scale"), "{notes}");
}

/// Runs written before `E_scale` existed: relative to |E₀| of `E + E_released`, said on the
/// figure; without summary.json the largest error is the recorded rows' one, said so.
#[test]
fn energy_error_without_e_scale_falls_back_to_e0_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let rows = write_rupture_run(dir.path(), false, None);
    let (fig, areas, pixels) = drawn(dir.path(), "energy_error.png");
    let budget0 = rows[0].1;
    let panel = &fig.panels[0];
    assert!(panel.y.label.contains("|E₀|") && panel.y.label.contains("E_released"), "{}", panel.y.label);
    let notes = panel.notes.join("\n");
    assert!(
        notes.contains("no E_scale") && notes.contains("recorded rows") && !notes.contains("summary.json"),
        "{notes}"
    );
    let curve = panel.curves.iter().find(|c| c.style.color == BLUE).unwrap();
    for (got, &(t, b, _)) in curve.points.iter().zip(&rows) {
        let want = (b - budget0) / budget0.abs();
        assert!(got.0 == t && (got.1 - want).abs() < 1e-14, "{got:?} vs {want}");
    }
    let (t, b, _) = rows[150];
    assert!(near(&pixels, expected_pixel(&areas[0], t, (b - budget0) / budget0.abs()), BLUE));
}

/// L9: every panel of the run figures labels at least three ticks on each axis, also where
/// the time axis ends at 3 (two ticks, 0 and 2, before).
#[test]
fn every_run_panel_labels_at_least_three_ticks() {
    for t_end in [3.0, 0.3, 10.0, 30.0] {
        let dir = tempfile::tempdir().unwrap();
        write_run_until(dir.path(), true, t_end);
        for (name, fig) in plot::run_figures(dir.path()).unwrap() {
            let areas = plot::render(&fig, &dir.path().join(name)).unwrap();
            for (k, a) in areas.iter().enumerate() {
                assert!(a.x_ticks >= 3 && a.y_ticks >= 3, "t_end {t_end}, {name} panel {k}: {a:?}");
            }
        }
    }
}

/// Adds an `impact` object with the given contact interval to the run's summary.json.
fn set_contact(dir: &Path, first: f64, last: f64) {
    let p = dir.join("summary.json");
    let mut v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v["impact"] =
        serde_json::json!({ "first_contact_t": first, "last_contact_t": last, "contact_duration": last - first });
    std::fs::write(&p, v.to_string()).unwrap();
}

/// L9: a short impact in a long run gets a second panel on the contact interval (from
/// summary.json's `impact`), where the curves land on the zoomed axes; a contact that fills
/// most of the run does not.
#[test]
fn energy_figure_zooms_on_a_short_impact() {
    let dir = tempfile::tempdir().unwrap();
    write_run(dir.path(), true);
    set_contact(dir.path(), 1.0, 1.6);
    let (fig, areas, pixels) = drawn(dir.path(), "energy.png");
    assert_eq!((fig.panels.len(), areas.len()), (2, 2));
    let (a, b) = fig.panels[1].x.range.unwrap();
    assert!(a <= 1.0 && b >= 1.6 && b - a < 10.0 / 3.0, "window [{a}, {b}]");
    assert_eq!(areas[1].x, (a, b));
    let blue = plot::energy_colour("E_trans").unwrap();
    let mut inside = 0;
    for k in 0..=200 {
        let t = k as f64 * 0.05;
        if (a..=b).contains(&t) {
            inside += 1;
            assert!(near(&pixels, expected_pixel(&areas[1], t, 2.0 + t.cos()), blue), "E_trans at t = {t}");
        }
    }
    assert!(inside >= 10, "{inside} rows in the window");
    // The contact interval gets at least three times the pixels per unit time it has above.
    let per_t = |a: &PlotArea| (a.right - a.left) as f64 / (a.x.1 - a.x.0);
    assert!(per_t(&areas[1]) > 3.0 * per_t(&areas[0]), "{:?} vs {:?}", areas[1], areas[0]);
    set_contact(dir.path(), 0.5, 9.0);
    assert_eq!(drawn(dir.path(), "energy.png").0.panels.len(), 1);
}

/// L9: the convergence title names the scenario, from a `scenario` column, the folder's
/// summary.json or scenario.json, or the caller; never the folder's name.
#[test]
fn convergence_title_names_the_scenario_not_the_folder() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("my_results_folder");
    std::fs::create_dir(&folder).unwrap();
    let csv = folder.join("converge.csv");
    std::fs::write(&csv, converge_text()).unwrap();
    let title = |name: Option<&str>| plot::converge_figure(&csv, name).unwrap().title;
    let plain = title(None);
    assert!(!plain.contains("my_results_folder") && plain.starts_with("convergence"), "{plain}");
    assert!(title(Some("pendulum")).starts_with("pendulum: convergence"), "{}", title(Some("pendulum")));
    std::fs::write(folder.join("scenario.json"), r#"{"name": "two_rings", "dt": 0.001}"#).unwrap();
    assert!(title(None).starts_with("two_rings: "), "{}", title(None));
    std::fs::write(folder.join("summary.json"), r#"{"scenario": {"name": "from_summary"}}"#).unwrap();
    assert!(title(None).starts_with("from_summary: "), "{}", title(None));
    // A `scenario` column (as converge.csv may carry) comes first.
    let with_column: String = converge_text()
        .lines()
        .enumerate()
        .map(|(k, l)| if k == 0 { format!("scenario,{l}\n") } else { format!("pendulum_b,{l}\n") })
        .collect();
    std::fs::write(&csv, with_column).unwrap();
    assert!(title(None).starts_with("pendulum_b: "), "{}", title(None));
    let file = plot::plot_converge(&csv, &folder).unwrap();
    assert_eq!(decode(&file).0, WIDTH);
}

/// A grid study's table: 3 speeds × 2 shear laws × 2 wall stiffnesses (the last varying
/// fastest, as `vary.grid` orders them), outcome `speed² · K/1000 · (1 paper, ½ objective)`:
/// distinct for every variant. Returns the table and the spec `study.png` would use.
fn grid_study(dir: &Path) -> (Table, ScatterSpec) {
    let mut text = String::from("variant,/@impact_speed,/shear,/stiffness/wall,status,max_rel_energy_error\n");
    let mut k = 0;
    for speed in [1.0, 2.0, 4.0] {
        for (shear, f) in [("paper", 1.0), ("objective", 0.5)] {
            for wall in [1000.0, 5000.0] {
                text.push_str(&format!("{k},{speed},{shear},{wall},completed,{}\n", speed * speed * wall / 1000.0 * f));
                k += 1;
            }
        }
    }
    let path = dir.join("study.csv");
    std::fs::write(&path, text).unwrap();
    let spec = ScatterSpec {
        title: "grid".into(),
        x: vec!["/@impact_speed".into(), "/stiffness/wall".into()],
        y: vec!["max_rel_energy_error".into()],
        group_by: Some("/shear".into()),
        connect: vec!["/@impact_speed".into(), "/shear".into(), "/stiffness/wall".into()],
        ..ScatterSpec::default()
    };
    (Table::read(&path).unwrap(), spec)
}

/// L9: axes carry readable names, and in a grid the variants that differ only in the plotted
/// parameter are joined by one line per combination of the other varied values, each in the
/// legend: the line's colour lies halfway between two of its points.
#[test]
fn study_grid_lines_join_variants_that_differ_only_in_the_plotted_parameter() {
    let dir = tempfile::tempdir().unwrap();
    let (table, spec) = grid_study(dir.path());
    let fig = plot::scatter_figure(&table, &spec).unwrap();
    assert_eq!(fig.panels[0].x.label, "impact speed");
    assert_eq!(fig.panels[1].x.label, "stiffness wall");
    assert_eq!(fig.panels[0].y.label, "max_rel_energy_error");
    let legend: Vec<&str> = fig.legend.iter().map(|(l, _)| l.as_str()).collect();
    for want in [
        "against impact speed:",
        "shear = objective, stiffness wall = 5000",
        "against stiffness wall:",
        "impact speed = 4, shear = paper",
    ] {
        assert!(legend.contains(&want), "{want:?} not in {legend:?}");
    }
    // 4 lines against speed (2 shear × 2 K), 6 against K (3 speeds × 2 shear), two headings.
    assert_eq!(legend.len(), 4 + 6 + 2, "{legend:?}");
    let colour = |label: &str| fig.legend.iter().find(|(l, _)| l == label).unwrap().1.color;
    let path = dir.path().join("grid.png");
    let areas = plot::scatter(&table, &spec, &path).unwrap();
    let (_, _, pixels) = decode(&path);
    // paper, K 5000: (1, 5), (2, 20), (4, 80) against speed; speed 4, paper: (1000, 16), (5000, 80).
    let c = colour("shear = paper, stiffness wall = 5000");
    assert!(
        near(&pixels, expected_pixel(&areas[0], 1.5, 12.5), c)
            && near(&pixels, expected_pixel(&areas[0], 3.0, 50.0), c)
    );
    let c = colour("impact speed = 4, shear = paper");
    assert!(near(&pixels, expected_pixel(&areas[1], 3000.0, 48.0), c));
    // Drawn on one figure: every line of a panel has 3 (speed) or 2 (K) points.
    for (k, panel) in fig.panels.iter().enumerate() {
        assert!(panel.curves.iter().all(|c| c.points.len() == 3 - k && c.style.stroke == Stroke::Solid), "panel {k}");
    }
}

/// Without rows that differ in one parameter only (a random study: speed and K drawn) nothing is joined: points
/// coloured by the group column, as before.
#[test]
fn study_scatter_without_shared_combinations_draws_points() {
    let dir = tempfile::tempdir().unwrap();
    let (mut table, spec) = grid_study(dir.path());
    for (k, row) in table.rows.iter_mut().enumerate() {
        row[1] = format!("{}", 1.0 + k as f64 * 0.37);
        row[3] = format!("{}", 1000.0 + k as f64 * 37.0);
    }
    let fig = plot::scatter_figure(&table, &spec).unwrap();
    assert!(fig.panels.iter().flat_map(|p| &p.curves).all(|c| c.style.stroke == Stroke::None));
    let legend: Vec<&str> = fig.legend.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(legend, ["shear = paper", "shear = objective"]);
    // A variant that does not set the grouping parameter keeps the base's value: said so, not
    // an empty "shear = ".
    table.rows[0][2] = String::new();
    let fig = plot::scatter_figure(&table, &spec).unwrap();
    let legend: Vec<&str> = fig.legend.iter().map(|(l, _)| l.as_str()).collect();
    assert!(legend.contains(&"shear = (base)") && !legend.contains(&"shear = "), "{legend:?}");
}

/// M4: array-valued overrides reach study.csv quoted (RFC 4180); the scatter reads them as
/// one value each and names them in the legend.
#[test]
fn study_scatter_reads_quoted_array_values() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("study.csv");
    let mut text = String::from("variant,/dt,/gravity,status,max_rel_energy_error\n");
    for (k, (dt, g)) in [(1e-3, "[0, 0, -9.81]"), (2e-3, "[0, 0, -9.81]"), (1e-3, "[0, 0, 0]"), (2e-3, "[0, 0, 0]")]
        .into_iter()
        .enumerate()
    {
        text.push_str(&format!("{k},{dt},\"{g}\",completed,{}\n", dt * (k + 1) as f64));
    }
    std::fs::write(&path, text).unwrap();
    let spec = ScatterSpec {
        x: vec!["/dt".into()],
        y: vec!["max_rel_energy_error".into()],
        group_by: Some("/gravity".into()),
        connect: vec!["/dt".into(), "/gravity".into()],
        ..ScatterSpec::default()
    };
    let fig = plot::scatter_figure(&Table::read(&path).unwrap(), &spec).unwrap();
    let legend: Vec<&str> = fig.legend.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(legend, ["against dt:", "gravity = [0, 0, -9.81]", "gravity = [0, 0, 0]"]);
    assert_eq!(fig.panels[0].curves[1].points, [(1e-3, 3e-3), (2e-3, 8e-3)]);
}
