//! VTK output for ParaView: one XML PolyData frame per output step (`vtk/particles_NNNNNN.vtp`:
//! particles as points, bonds as lines, appended raw binary), the walls as quads
//! (`vtk/walls.vtp`), and `particles.pvd`, the collection that lists every frame with its time.
//! Frames are written by a thread of their own so that a run keeps stepping meanwhile.

use crate::diagnostics::fmt17;
use crate::integrator::Kinematics;
use crate::interactions::rupture::rupture_measures;
use crate::model::{Model, bond_terms};
use crate::rrp;
use glam::DVec3;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};
use thiserror::Error;

/// The collection of frames, in the run's folder.
pub const COLLECTION: &str = "particles.pvd";
/// The folder of the frames and of `walls.vtp`, in the run's folder.
pub const FOLDER: &str = "vtk";
/// The walls' file, in `FOLDER`.
pub const WALLS: &str = "walls.vtp";

/// Floating-point type of the VTK arrays (integers and the frame's time are exact either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum VtkPrecision {
    /// Half the size; values rounded to nearest.
    F32,
    /// The engine's values exactly.
    #[default]
    F64,
}

/// What a run writes as VTK.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VtkSettings {
    /// A frame at every step that is a multiple of this (and at the last step).
    pub every: u64,
    pub precision: VtkPrecision,
    /// The `replica` point array: a study's variant index, 0 for a single run.
    pub replica: i32,
}

#[derive(Debug, Error)]
pub enum VtkError {
    #[error("{path}: cannot write the VTK output: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: cannot continue this frame collection: {message}")]
    Collection { path: PathBuf, message: String },
    #[error("the VTK writer stopped: {0}")]
    Writer(String),
}

fn io_err(path: &Path) -> impl Fn(io::Error) -> VtkError + '_ {
    move |source| VtkError::Io { path: path.to_owned(), source }
}

/// A frame as the run driver hands it over: the state at `step` and which bonds are broken
/// (one flag per bond of the model).
pub struct Frame {
    pub step: u64,
    pub t: f64,
    pub state: Vec<Kinematics>,
    pub broken: Vec<bool>,
    /// With friction: each particle's largest tangential displacement |ξ| (MODEL §10,
    /// `Engine::tangential_displacement`), written as the point array `tangential_displacement`.
    pub tangential: Option<Vec<f64>>,
}

/// Name of frame `index` inside `FOLDER`.
pub fn frame_name(index: usize) -> String {
    format!("particles_{index:06}.vtp")
}

// ---------------------------------------------------------------------------------------------
// XML PolyData with appended raw data.

#[derive(Clone, Copy, PartialEq)]
enum Section {
    Field,
    Point,
    Cell,
    Points,
    Verts,
    Lines,
    Polys,
}

#[derive(Clone, Copy)]
enum Ty {
    Float(VtkPrecision),
    I64,
    I32,
    U8,
}

impl Ty {
    fn name(self) -> &'static str {
        match self {
            Ty::Float(VtkPrecision::F64) => "Float64",
            Ty::Float(VtkPrecision::F32) => "Float32",
            Ty::I64 => "Int64",
            Ty::I32 => "Int32",
            Ty::U8 => "UInt8",
        }
    }

    fn size(self) -> usize {
        match self {
            Ty::Float(VtkPrecision::F64) | Ty::I64 => 8,
            Ty::Float(VtkPrecision::F32) | Ty::I32 => 4,
            Ty::U8 => 1,
        }
    }
}

type Fill<'a> = Box<dyn Fn(&mut Vec<u8>) + 'a>;

/// One data array: where it goes, its type and shape, and what fills its bytes.
struct Array<'a> {
    section: Section,
    name: &'static str,
    ty: Ty,
    comps: usize,
    tuples: usize,
    fill: Fill<'a>,
}

impl<'a> Array<'a> {
    fn new(section: Section, name: &'static str, ty: Ty, comps: usize, tuples: usize, fill: Fill<'a>) -> Self {
        Array { section, name, ty, comps, tuples, fill }
    }

    fn bytes(&self) -> usize {
        self.ty.size() * self.comps * self.tuples
    }
}

/// Appends a float in the asked precision (`as f32` rounds to nearest).
#[inline(always)]
fn put_f(buf: &mut Vec<u8>, p: VtkPrecision, v: f64) {
    match p {
        VtkPrecision::F64 => buf.extend_from_slice(&v.to_le_bytes()),
        VtkPrecision::F32 => buf.extend_from_slice(&(v as f32).to_le_bytes()),
    }
}

/// Writes a PolyData file to `path` through `path.tmp` and a rename, so that a reader never
/// sees a partial file under the final name. Not synced to disk: that would make the writer
/// as slow as the disk for no gain against interrupts (the OS finishes the write).
fn write_polydata(path: &Path, points: usize, cells: [usize; 3], arrays: &[Array]) -> Result<(), VtkError> {
    let mut xml = String::with_capacity(4096);
    xml.push_str(
        "<?xml version=\"1.0\"?>\n<VTKFile type=\"PolyData\" version=\"1.0\" byte_order=\"LittleEndian\" \
         header_type=\"UInt64\">\n  <PolyData>\n",
    );
    let mut offsets = Vec::with_capacity(arrays.len());
    let mut offset = 0usize;
    for a in arrays {
        offsets.push(offset);
        offset += 8 + a.bytes();
    }
    let section = |xml: &mut String, s: Section, tag: &str, indent: &str| {
        let mut any = false;
        for (a, off) in arrays.iter().zip(&offsets).filter(|(a, _)| a.section == s) {
            if !any {
                let _ = writeln!(xml, "{indent}<{tag}>");
                any = true;
            }
            let _ = write!(xml, "{indent}  <DataArray type=\"{}\" Name=\"{}\"", a.ty.name(), a.name);
            if a.comps != 1 {
                let _ = write!(xml, " NumberOfComponents=\"{}\"", a.comps);
            }
            if s == Section::Field {
                let _ = write!(xml, " NumberOfTuples=\"{}\"", a.tuples);
            }
            let _ = writeln!(xml, " format=\"appended\" offset=\"{off}\"/>");
        }
        if any {
            let _ = writeln!(xml, "{indent}</{tag}>");
        }
    };
    section(&mut xml, Section::Field, "FieldData", "    ");
    let _ = writeln!(
        xml,
        "    <Piece NumberOfPoints=\"{points}\" NumberOfVerts=\"{}\" NumberOfLines=\"{}\" NumberOfStrips=\"0\" \
         NumberOfPolys=\"{}\">",
        cells[0], cells[1], cells[2]
    );
    for (s, tag) in [
        (Section::Point, "PointData"),
        (Section::Cell, "CellData"),
        (Section::Points, "Points"),
        (Section::Verts, "Verts"),
        (Section::Lines, "Lines"),
        (Section::Polys, "Polys"),
    ] {
        section(&mut xml, s, tag, "      ");
    }
    xml.push_str("    </Piece>\n  </PolyData>\n  <AppendedData encoding=\"raw\">\n_");

    let tmp = tmp_path(path);
    let write = || -> io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(xml.as_bytes())?;
        let mut buf = Vec::new();
        for a in arrays {
            buf.clear();
            buf.reserve(8 + a.bytes());
            buf.extend_from_slice(&(a.bytes() as u64).to_le_bytes());
            (a.fill)(&mut buf);
            assert_eq!(buf.len(), 8 + a.bytes(), "array {} filled with the wrong size", a.name);
            file.write_all(&buf)?;
        }
        file.write_all(b"\n  </AppendedData>\n</VTKFile>\n")?;
        Ok(())
    };
    write().map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// The threads that compute the frames' bond values. Not rayon's global pool: a run driver
/// waits for its writer (a full queue, a checkpoint, the end), and when a study runs variants
/// in parallel the drivers are the global pool's threads, so a writer that needed that pool
/// could wait for a driver that waits for it. `None` if no thread could be started.
fn pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    POOL.get_or_init(|| rayon::ThreadPoolBuilder::new().thread_name(|i| format!("rrpdem-vtk-{i}")).build().ok())
        .as_ref()
}

/// Per-bond cell values: signed tension strain `L/L0 − 1`, bending, twist and shear angles
/// (MODEL §6, with the model's shear law), and the bond energy (0 once broken).
fn bond_values(model: &Model, state: &[Kinematics], broken: &[bool]) -> Vec<[f64; 5]> {
    let one = |(b, &gone): (&crate::model::Bond, &bool)| {
        let (ki, kj) = (&state[b.i as usize], &state[b.j as usize]);
        let d = ki.x - kj.x;
        let dq_i = ki.q * b.q_i0.conjugate();
        let dq_j = kj.q * b.q_j0.conjugate();
        // `rupture_measures` clamps tension at 0 (compression never breaks); the strain
        // shown is signed so that compressed bonds can be seen too.
        let [_, shear, bending, twist] = rupture_measures(model.params.shear, d, b.l0, b.dhat0, dq_i, dq_j);
        let energy = if gone {
            0.0
        } else {
            let t = bond_terms(b, ki.x, kj.x, ki.q, kj.q, &model.params);
            t.u_bend + t.u_axial + t.u_shear
        };
        [d.length() / b.l0 - 1.0, bending, twist, shear, energy]
    };
    match pool() {
        Some(pool) => pool.install(|| model.bonds.par_iter().zip(broken).with_min_len(4096).map(one).collect()),
        None => model.bonds.iter().zip(broken).map(one).collect(),
    }
}

/// Writes one frame: a point (and a vertex cell) per particle, a line cell per bond. Cell data
/// covers the vertex cells first (bond −1, NaN measures, not broken), then the bonds.
pub fn write_frame(path: &Path, model: &Model, frame: &Frame, settings: &VtkSettings) -> Result<(), VtkError> {
    let (n, nb) = (frame.state.len(), model.bonds.len());
    assert_eq!(frame.broken.len(), nb, "one broken flag per bond");
    let values = bond_values(model, &frame.state, &frame.broken);
    // Labelled here, on the writer's thread, from the same broken flags the frame shows.
    let fragment = crate::fragments::label_model(model, &frame.broken);
    let (t, step) = (frame.t, frame.step);
    let mut arrays = vec![
        Array::new(
            Section::Field,
            "TimeValue",
            Ty::Float(VtkPrecision::F64),
            1,
            1,
            Box::new(move |b| put_f(b, VtkPrecision::F64, t)),
        ),
        Array::new(
            Section::Field,
            "step",
            Ty::I64,
            1,
            1,
            Box::new(move |b| b.extend_from_slice(&(step as i64).to_le_bytes())),
        ),
    ];
    arrays.extend(point_arrays(model, frame, settings, &fragment));
    arrays.extend(cell_arrays(frame, n, settings.precision, &values));
    arrays.extend(topology_arrays(model, frame, settings.precision));
    write_polydata(path, n, [n, nb, 0], &arrays)
}

/// Fills a point array of three components per particle from `get`.
fn vec3_fill<'a>(st: &'a [Kinematics], p: VtkPrecision, get: impl Fn(&Kinematics) -> DVec3 + 'a) -> Fill<'a> {
    Box::new(move |b| {
        for k in st {
            let v = get(k);
            put_f(b, p, v.x);
            put_f(b, p, v.y);
            put_f(b, p, v.z);
        }
    })
}

/// The point data of a frame: one value per particle.
fn point_arrays<'a>(model: &'a Model, frame: &'a Frame, settings: &VtkSettings, fragment: &'a [u32]) -> Vec<Array<'a>> {
    let st = &frame.state;
    let n = st.len();
    let p = settings.precision;
    let f = Ty::Float(p);
    let parts = &model.particles;
    let replica = settings.replica;
    use Section::Point;
    let mut arrays = vec![
        Array::new(
            Point,
            "id",
            Ty::I64,
            1,
            n,
            Box::new(move |b| (0..n as i64).for_each(|i| b.extend_from_slice(&i.to_le_bytes()))),
        ),
        Array::new(
            Point,
            "diameter",
            f,
            1,
            n,
            Box::new(move |b| parts.radius.iter().for_each(|r| put_f(b, p, 2.0 * r))),
        ),
        Array::new(Point, "velocity", f, 3, n, vec3_fill(st, p, |k| k.v)),
        Array::new(Point, "angular_velocity", f, 3, n, vec3_fill(st, p, |k| k.w)),
        Array::new(
            Point,
            "quaternion",
            f,
            4,
            n,
            Box::new(move |b| {
                for k in st {
                    let q = rrp::canonical(k.q);
                    for c in [q.w, q.x, q.y, q.z] {
                        put_f(b, p, c);
                    }
                }
            }),
        ),
        Array::new(Point, "axis_1", f, 3, n, vec3_fill(st, p, |k| k.q * DVec3::X)),
        Array::new(Point, "axis_2", f, 3, n, vec3_fill(st, p, |k| k.q * DVec3::Y)),
        Array::new(Point, "axis_3", f, 3, n, vec3_fill(st, p, |k| k.q * DVec3::Z)),
        Array::new(Point, "fixed", Ty::U8, 1, n, Box::new(move |b| b.extend(parts.fixed.iter().map(|&x| x as u8)))),
        Array::new(
            Point,
            "replica",
            Ty::I32,
            1,
            n,
            Box::new(move |b| (0..n).for_each(|_| b.extend_from_slice(&replica.to_le_bytes()))),
        ),
        Array::new(
            Point,
            "fragment",
            Ty::I64,
            1,
            n,
            Box::new(move |b| fragment.iter().for_each(|&l| b.extend_from_slice(&(l as i64).to_le_bytes()))),
        ),
    ];
    if let Some(xi) = &frame.tangential {
        // Models with friction only: the spring–slider's largest stretch at each particle.
        let fill = Box::new(move |b: &mut Vec<u8>| xi.iter().for_each(|&x| put_f(b, p, x)));
        arrays.push(Array::new(Point, "tangential_displacement", f, 1, n, fill));
    }
    arrays
}

/// The cell data of a frame: the `n` vertex cells first, then one value per bond.
fn cell_arrays<'a>(frame: &'a Frame, n: usize, p: VtkPrecision, values: &'a [[f64; 5]]) -> Vec<Array<'a>> {
    let nb = values.len();
    let f = Ty::Float(p);
    let bond_value = |c: usize| -> Fill<'a> {
        Box::new(move |b| {
            for _ in 0..n {
                put_f(b, p, f64::NAN);
            }
            for v in values {
                put_f(b, p, v[c]);
            }
        })
    };
    use Section::Cell;
    vec![
        Array::new(
            Cell,
            "bond",
            Ty::I64,
            1,
            n + nb,
            Box::new(move |b| (-(n as i64)..nb as i64).for_each(|k| b.extend_from_slice(&k.max(-1).to_le_bytes()))),
        ),
        Array::new(Cell, "tension", f, 1, n + nb, bond_value(0)),
        Array::new(Cell, "bending", f, 1, n + nb, bond_value(1)),
        Array::new(Cell, "twist", f, 1, n + nb, bond_value(2)),
        Array::new(Cell, "shear", f, 1, n + nb, bond_value(3)),
        Array::new(Cell, "energy", f, 1, n + nb, bond_value(4)),
        Array::new(
            Cell,
            "broken",
            Ty::U8,
            1,
            n + nb,
            Box::new(move |b| {
                b.resize(b.len() + n, 0);
                b.extend(frame.broken.iter().map(|&x| x as u8));
            }),
        ),
    ]
}

/// The points and the cells of a frame: a vertex per particle, a line per bond.
fn topology_arrays<'a>(model: &'a Model, frame: &'a Frame, p: VtkPrecision) -> Vec<Array<'a>> {
    let (n, nb) = (frame.state.len(), model.bonds.len());
    vec![
        Array::new(Section::Points, "Points", Ty::Float(p), 3, n, vec3_fill(&frame.state, p, |k| k.x)),
        Array::new(
            Section::Verts,
            "connectivity",
            Ty::I64,
            1,
            n,
            Box::new(move |b| (0..n as i64).for_each(|i| b.extend_from_slice(&i.to_le_bytes()))),
        ),
        Array::new(
            Section::Verts,
            "offsets",
            Ty::I64,
            1,
            n,
            Box::new(move |b| (1..=n as i64).for_each(|i| b.extend_from_slice(&i.to_le_bytes()))),
        ),
        Array::new(
            Section::Lines,
            "connectivity",
            Ty::I64,
            1,
            2 * nb,
            Box::new(|b| {
                for bond in &model.bonds {
                    b.extend_from_slice(&(bond.i as i64).to_le_bytes());
                    b.extend_from_slice(&(bond.j as i64).to_le_bytes());
                }
            }),
        ),
        Array::new(
            Section::Lines,
            "offsets",
            Ty::I64,
            1,
            nb,
            Box::new(move |b| (1..=nb as i64).for_each(|k| b.extend_from_slice(&(2 * k).to_le_bytes()))),
        ),
    ]
}

/// Writes `walls.vtp`: each wall as a square around the projection of the particles' centroid
/// onto it, wide enough for the particles' extent in the wall's plane (radii included) plus a
/// quarter. Cell data: `wall` (the index in the scenario) and `normal`.
pub fn write_walls(path: &Path, model: &Model, precision: VtkPrecision) -> Result<(), VtkError> {
    let walls = &model.params.walls;
    let parts = &model.particles;
    let n = parts.len().max(1) as f64;
    let centroid = parts.x.iter().copied().sum::<DVec3>() / n;
    let corners: Vec<DVec3> = walls
        .iter()
        .flat_map(|w| {
            let c = centroid - (centroid - w.point).dot(w.normal) * w.normal;
            let t1 = w.normal.any_orthonormal_vector();
            let t2 = w.normal.cross(t1);
            let half = parts
                .x
                .iter()
                .zip(&parts.radius)
                .map(|(x, r)| ((x - c).dot(t1).abs() + r).max((x - c).dot(t2).abs() + r))
                .fold(0.0, f64::max);
            let s = if half > 0.0 { 1.25 * half } else { 1.0 };
            [c - s * t1 - s * t2, c + s * t1 - s * t2, c + s * t1 + s * t2, c - s * t1 + s * t2]
        })
        .collect();
    let nw = walls.len();
    let p = precision;
    let f = Ty::Float(p);
    let vecs = |v: Vec<DVec3>| -> Fill {
        Box::new(move |b| {
            for a in &v {
                put_f(b, p, a.x);
                put_f(b, p, a.y);
                put_f(b, p, a.z);
            }
        })
    };
    let arrays = [
        Array::new(
            Section::Cell,
            "wall",
            Ty::I32,
            1,
            nw,
            Box::new(|b| (0..nw as i32).for_each(|k| b.extend_from_slice(&k.to_le_bytes()))),
        ),
        Array::new(Section::Cell, "normal", f, 3, nw, vecs(walls.iter().map(|w| w.normal).collect())),
        Array::new(Section::Points, "Points", f, 3, 4 * nw, vecs(corners)),
        Array::new(
            Section::Polys,
            "connectivity",
            Ty::I64,
            1,
            4 * nw,
            Box::new(|b| (0..4 * nw as i64).for_each(|k| b.extend_from_slice(&k.to_le_bytes()))),
        ),
        Array::new(
            Section::Polys,
            "offsets",
            Ty::I64,
            1,
            nw,
            Box::new(|b| (1..=nw as i64).for_each(|k| b.extend_from_slice(&(4 * k).to_le_bytes()))),
        ),
    ];
    write_polydata(path, 4 * nw, [0, 0, nw], &arrays)
}

// ---------------------------------------------------------------------------------------------
// The collection (particles.pvd).

/// `particles.pvd`: every frame written so far with its time. Rewritten (through a temporary
/// file and a rename) after each frame, so that it always lists complete frames only.
struct Collection {
    path: PathBuf,
    times: Vec<f64>,
}

impl Collection {
    fn render(&self) -> String {
        let mut s = String::from(
            "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"LittleEndian\">\n  \
             <Collection>\n",
        );
        for (k, t) in self.times.iter().enumerate() {
            let _ = writeln!(
                s,
                "    <DataSet timestep=\"{}\" group=\"\" part=\"0\" file=\"{FOLDER}/{}\"/>",
                fmt17(*t),
                frame_name(k)
            );
        }
        s.push_str("  </Collection>\n</VTKFile>\n");
        s
    }

    fn save(&self) -> Result<(), VtkError> {
        let tmp = tmp_path(&self.path);
        std::fs::write(&tmp, self.render()).map_err(io_err(&tmp))?;
        std::fs::rename(&tmp, &self.path).map_err(io_err(&self.path))
    }

    /// Reads a collection this module wrote: frame `k` must be `vtk/particles_k.vtp`.
    fn load(path: &Path) -> Result<Collection, VtkError> {
        let text = std::fs::read_to_string(path).map_err(io_err(path))?;
        let bad = |message: String| VtkError::Collection { path: path.to_owned(), message };
        let attr = |line: &str, name: &str| -> Option<String> {
            let start = line.find(&format!(" {name}=\""))? + name.len() + 3;
            let len = line[start..].find('"')?;
            Some(line[start..start + len].to_owned())
        };
        let mut times = Vec::new();
        for (no, line) in text.lines().enumerate().filter(|(_, l)| l.trim_start().starts_with("<DataSet")) {
            let t = attr(line, "timestep").and_then(|t| t.parse::<f64>().ok());
            let file = attr(line, "file");
            let want = format!("{FOLDER}/{}", frame_name(times.len()));
            match (t, file) {
                (Some(t), Some(f)) if f == want => times.push(t),
                _ => {
                    return Err(bad(format!(
                        "line {}: expected a DataSet with a timestep and file=\"{want}\"",
                        no + 1
                    )));
                }
            }
        }
        if !text.contains("</Collection>") {
            return Err(bad("the file is incomplete (no </Collection>)".into()));
        }
        Ok(Collection { path: path.to_owned(), times })
    }
}

/// Takes the run's folder for frames: a fresh collection, or, when resuming at time `resume_at`,
/// the earlier one without the frames after it (their files are removed, as are frames no
/// collection lists, left by a run that stopped while writing one).
fn prepare(dir: &Path, resume_at: Option<f64>) -> Result<Collection, VtkError> {
    let folder = dir.join(FOLDER);
    std::fs::create_dir_all(&folder).map_err(io_err(&folder))?;
    let path = dir.join(COLLECTION);
    let mut c = match resume_at {
        Some(_) if path.exists() => Collection::load(&path)?,
        _ => Collection { path, times: Vec::new() },
    };
    if let Some(t0) = resume_at {
        c.times.retain(|&t| t <= t0);
        let entries = std::fs::read_dir(&folder).map_err(io_err(&folder))?;
        for e in entries {
            let e = e.map_err(io_err(&folder))?;
            let name = e.file_name();
            let index = name
                .to_str()
                .and_then(|s| s.strip_prefix("particles_"))
                .and_then(|s| s.strip_suffix(".vtp"))
                .and_then(|s| s.parse::<usize>().ok());
            if index.is_some_and(|k| k >= c.times.len()) {
                std::fs::remove_file(e.path()).map_err(io_err(&e.path()))?;
            }
        }
    }
    c.save()?;
    Ok(c)
}

// ---------------------------------------------------------------------------------------------
// The writer thread.

enum Job {
    Frame(Box<Frame>),
    /// Answered once every earlier frame is on disk and listed.
    Sync(SyncSender<()>),
}

/// Writes frames on a thread of its own while the run steps on. At most one frame waits in the
/// queue (and one is being written), which bounds the memory held to two snapshots; a third
/// frame waits for the first. A write error stops the thread; the driver learns of it at the
/// next `submit`, `sync` or at `finish`. Dropping the writer waits for the queued frames.
pub struct VtkWriter<'scope> {
    tx: Option<SyncSender<Job>>,
    handle: Option<ScopedJoinHandle<'scope, Result<(), VtkError>>>,
    settings: VtkSettings,
    /// Time of the last frame listed or queued.
    last_t: Option<f64>,
}

impl<'scope> VtkWriter<'scope> {
    /// Prepares `dir` (see `prepare`), writes `walls.vtp` and starts the thread. `resume_at`:
    /// the time of the state a resumed run starts from (`None` for a fresh run).
    pub fn start(
        scope: &'scope Scope<'scope, '_>,
        dir: &Path,
        model: &'scope Model,
        settings: VtkSettings,
        resume_at: Option<f64>,
    ) -> Result<VtkWriter<'scope>, VtkError> {
        let mut collection = prepare(dir, resume_at)?;
        let last_t = collection.times.last().copied();
        let folder = dir.join(FOLDER);
        let walls = folder.join(WALLS);
        // A resumed run keeps the walls sized from t = 0; its model starts at the checkpoint.
        if !model.params.walls.is_empty() && (resume_at.is_none() || !walls.exists()) {
            write_walls(&walls, model, settings.precision)?;
        }
        let (tx, rx): (SyncSender<Job>, Receiver<Job>) = sync_channel(1);
        let handle = std::thread::Builder::new()
            .name("rrpdem-vtk".into())
            .spawn_scoped(scope, move || {
                for job in rx {
                    match job {
                        Job::Frame(frame) => {
                            let path = folder.join(frame_name(collection.times.len()));
                            write_frame(&path, model, &frame, &settings)?;
                            collection.times.push(frame.t);
                            collection.save()?;
                        }
                        Job::Sync(ack) => {
                            let _ = ack.send(());
                        }
                    }
                }
                Ok(())
            })
            .map_err(|e| VtkError::Writer(format!("cannot start the writer thread: {e}")))?;
        Ok(VtkWriter { tx: Some(tx), handle: Some(handle), settings, last_t })
    }

    /// Whether `step` gets a frame: multiples of `every` and the run's last step.
    pub fn due(&self, step: u64, total: u64) -> bool {
        step.is_multiple_of(self.settings.every) || step == total
    }

    pub fn every(&self) -> u64 {
        self.settings.every
    }

    /// Whether the last frame listed or queued is at time `t` (a resumed run does not write the
    /// frame of its starting state again).
    pub fn has_frame_at(&self, t: f64) -> bool {
        self.last_t == Some(t)
    }

    /// Queues a frame; waits while another frame is already queued. Returns the error of an
    /// earlier frame, if one failed.
    pub fn submit(&mut self, frame: Frame) -> Result<(), VtkError> {
        let t = frame.t;
        let finished = self.handle.as_ref().is_none_or(|h| h.is_finished());
        let sent = !finished && self.tx.as_ref().is_some_and(|tx| tx.send(Job::Frame(Box::new(frame))).is_ok());
        if !sent {
            return Err(self.stop());
        }
        self.last_t = Some(t);
        Ok(())
    }

    /// Waits until every queued frame is written and listed (before a checkpoint, so that a
    /// checkpoint never precedes its frames on disk).
    pub fn sync(&mut self) -> Result<(), VtkError> {
        let (ack_tx, ack_rx) = sync_channel(1);
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(Job::Sync(ack_tx)).is_ok());
        if sent && ack_rx.recv().is_ok() {
            return Ok(());
        }
        Err(self.stop())
    }

    /// Writes the queued frames, stops the thread and returns the first error, if any.
    pub fn finish(mut self) -> Result<(), VtkError> {
        self.tx = None;
        match self.handle.take() {
            Some(h) => joined(h),
            None => Ok(()),
        }
    }

    /// Stops the thread after an error and returns it.
    fn stop(&mut self) -> VtkError {
        self.tx = None;
        match self.handle.take() {
            Some(h) => joined(h).err().unwrap_or_else(|| VtkError::Writer("the writer thread ended early".into())),
            None => VtkError::Writer("the writer was already stopped by an earlier error".into()),
        }
    }
}

fn joined(h: ScopedJoinHandle<'_, Result<(), VtkError>>) -> Result<(), VtkError> {
    match h.join() {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".into());
            Err(VtkError::Writer(format!("the writer thread panicked: {msg}")))
        }
    }
}

impl Drop for VtkWriter<'_> {
    /// Waits for the queued frames (the scope would too, but would turn a panic of the thread
    /// into a panic of the run).
    fn drop(&mut self) {
        self.tx = None;
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
