//! Studies (MODEL §8): a base scenario and its variants, each an override of scenario fields by
//! JSON Pointer (RFC 6901) — an explicit list, a full grid or seeded random samples — resolved
//! and validated before anything runs; shards of a study for a cluster, and `study.csv`, one row
//! per variant with its varied values and outcome measures, assembled from the variants'
//! `summary.json` (the same code for a whole run and for merging shards).

use crate::error::ScenarioError;
use crate::scenario::{Scenario, is_safe_name};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

mod engines;
mod folder;
mod resume;
mod shape;
mod table;
pub use folder::{
    Difference, Holder, ResumePlan, VariantState, holder, inspect, list, plan_resume, prepare_folder, study_difference,
};
pub use resume::resume_variants;
pub use table::{OUTCOME_COLUMNS, Table, csv_records, table};

/// Convenience pointer: impact speed, applied to every body's `velocity` as
/// `−speed (cos a n + sin a t)` with `n` the first wall's normal, `t` a unit vector across it
/// and `a` the impact angle (`/@impact_angle`, degrees from the normal, default 0).
pub const IMPACT_SPEED: &str = "/@impact_speed";
/// Convenience pointer: impact angle in degrees from the first wall's normal (see `IMPACT_SPEED`).
pub const IMPACT_ANGLE: &str = "/@impact_angle";

// No `#[source]` fields: the CLI prints an error's whole chain, and each message below already
// holds its cause's text (a source would print it twice).
#[derive(Debug, Error)]
pub enum StudyError {
    #[error("{path}: cannot read: {error}")]
    Io { path: PathBuf, error: std::io::Error },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
    /// A variant that does not resolve into a valid scenario: the study file, the variant, its
    /// overrides and what is wrong (naming the field, or the CSV file and line).
    #[error("{path}: variant {variant} ({overrides}): {detail}")]
    Variant { path: PathBuf, variant: usize, overrides: String, detail: String },
    /// A study's output folder that this study cannot use as asked (another study's, or
    /// variants already there): what is there and the options.
    #[error("{path}: {message}")]
    Folder { path: PathBuf, message: String },
}

/// A study file. `base` is a scenario file (relative to the study file) or an inline scenario.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub base: Value,
    /// Overrides applied to every variant (pointer → value), before the varied ones.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, Value>,
    pub vary: Vary,
}

/// How the variants are made.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum Vary {
    /// One variant per object of pointer → value.
    List(Vec<BTreeMap<String, Value>>),
    /// The Cartesian product of pointer → list of values (the last pointer varies fastest).
    Grid(BTreeMap<String, Vec<Value>>),
    /// `samples` variants, each pointer drawn uniformly (or log-uniformly) in its range.
    Random { samples: usize, seed: u64, ranges: BTreeMap<String, Range> },
}

/// A range of a random study: `[lo, hi]`, or `{"lo", "hi", "log": true}` for log-uniform.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Range {
    Pair([f64; 2]),
    Spec {
        lo: f64,
        hi: f64,
        #[serde(default)]
        log: bool,
    },
}

/// A resolved study: the base scenario's JSON and every variant's overrides, in order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Study {
    pub name: String,
    /// The varied pointers, in column order.
    pub columns: Vec<String>,
    pub variants: Vec<BTreeMap<String, Value>>,
    pub base: Value,
    /// Folder the base scenario's relative paths (CSV bodies) are taken from.
    pub base_dir: PathBuf,
    /// The study's `set` (already applied to `base`), to say where a bad value came from.
    pub set: Vec<(String, Value)>,
}

fn invalid(path: &Path, message: impl Into<String>) -> StudyError {
    StudyError::Invalid { path: path.to_owned(), message: message.into() }
}

impl Study {
    /// Reads a study file, resolves its variants and validates every one (model included).
    pub fn load(path: &Path) -> Result<Study, StudyError> {
        let text = std::fs::read_to_string(path).map_err(|error| StudyError::Io { path: path.to_owned(), error })?;
        Study::from_json(&text, path)
    }

    /// `load` of study text that was not read from a file (the Python package's study dicts):
    /// `path` names it in errors, and its folder anchors a `base` file name and CSV bodies.
    pub fn from_json(text: &str, path: &Path) -> Result<Study, StudyError> {
        shape::check_shape(text).map_err(|m| invalid(path, m))?;
        let file: StudyFile = serde_json::from_str(text).map_err(|e| invalid(path, e.to_string()))?;
        if !is_safe_name(&file.name) {
            return Err(invalid(path, format!("field `name`: `{}` cannot name the output folder", file.name)));
        }
        let dir = path.parent().unwrap_or(Path::new(".")).to_owned();
        let (base, base_dir) = match &file.base {
            Value::String(rel) => {
                let p = dir.join(rel);
                let text = std::fs::read_to_string(&p).map_err(|error| StudyError::Io { path: p.clone(), error })?;
                let v: Value = serde_json::from_str(&text).map_err(|e| invalid(&p, e.to_string()))?;
                (v, p.parent().unwrap_or(Path::new(".")).to_owned())
            }
            Value::Object(_) => (file.base.clone(), dir),
            _ => return Err(invalid(path, "field `base`: a scenario file name or an inline scenario object")),
        };
        let (columns, variants) = expand(&file.vary, path)?;
        let mut base = base;
        for (p, v) in &file.set {
            if !p.starts_with('/') || p.starts_with("/@") {
                return Err(invalid(path, format!("field `set`: `{p}` must be a JSON Pointer into the scenario")));
            }
            check_not_name(p).map_err(|m| invalid(path, format!("field `set`: {m}")))?;
            set_pointer(&mut base, p, v.clone()).map_err(|m| invalid(path, format!("field `set`: {p}: {m}")))?;
        }
        // A velocity set for every variant and an impact pointer of one would both decide it.
        if let Some((p, _)) = file.set.iter().find(|(p, v)| sets_velocity(p, v))
            && let Some((k, q)) = variants
                .iter()
                .enumerate()
                .find_map(|(k, o)| o.keys().find(|q| *q == IMPACT_SPEED || *q == IMPACT_ANGLE).map(|q| (k, q.clone())))
        {
            return Err(invalid(
                path,
                format!(
                    "field `set`: `{p}` sets a body's velocity, and variant {k}'s `{q}` sets every body's velocity \
                     too; give the velocity one way only (drop `{p}`, or the impact pointers)"
                ),
            ));
        }
        let set = file.set.iter().map(|(p, v)| (p.clone(), v.clone())).collect();
        let study = Study { name: file.name, columns, variants, base, base_dir, set };
        for k in 0..study.variants.len() {
            let s = study.scenario(k, path)?;
            let model = s.build_model().map_err(|e| study.variant_error(k, path, e))?;
            // What the engine would refuse at its start (an integrator that cannot move the
            // model) is refused here, before any variant runs.
            crate::engine::cpu::check_integrator(&model, s.integrator)
                .map_err(|e| study.variant_detail(k, path, e.to_string()))?;
            let est = crate::stability::estimate(&model);
            if let Err(e) = crate::stability::check_step(s.dt, s.force_dt, &est) {
                return Err(study.variant_detail(k, path, e.to_string()));
            }
        }
        Ok(study)
    }

    /// The file name variant `k` is parsed as (it does not exist: its folder is the base's, so
    /// that CSV bodies resolve as there).
    fn as_file(&self, k: usize) -> PathBuf {
        self.base_dir.join(format!("{}_{k}.json", self.name))
    }

    /// A scenario error of variant `k`, without the name of the file the variant was parsed as
    /// (`as_file`, which does not exist): the study file and the variant say where it is.
    fn variant_error(&self, k: usize, path: &Path, e: ScenarioError) -> StudyError {
        let fake = self.as_file(k);
        let detail = match e {
            ScenarioError::Parse { path, message } if path == fake => {
                // serde's position is in the variant's generated one-line JSON: no help.
                let message = match message.rfind(" at line ") {
                    Some(i) => message[..i].to_string(),
                    None => message,
                };
                let field = message.strip_prefix("field `").and_then(|m| m.split_once('`')).map(|(f, _)| f);
                match field.and_then(|f| self.set_note(k, f)) {
                    Some(note) => format!("{message} ({note})"),
                    None => message,
                }
            }
            ScenarioError::Invalid { path, field, message } if path == fake => match self.set_note(k, &field) {
                Some(note) => format!("field `{field}`: {message} ({note})"),
                None => format!("field `{field}`: {message}"),
            },
            other => other.to_string(),
        };
        self.variant_detail(k, path, detail)
    }

    /// Where the study's `set`, not variant `k`'s own overrides, put the value of `field` that
    /// a scenario error names: its value comes from `set`, or `set` wrote into it (a misspelt
    /// name it made up, a member of an object).
    fn set_note(&self, k: usize, field: &str) -> Option<String> {
        let own = |f: fn(&str, &str) -> bool| self.variants[k].keys().any(|q| f(field, q));
        let from = |f: fn(&str, &str) -> bool| {
            if own(f) { None } else { self.set.iter().find(|(p, _)| f(field, p)) }
        };
        match (from(under_pointer), from(reaches_into)) {
            (Some((p, v)), _) => Some(format!("its value comes from the study's `set`: {p} = {v}")),
            (None, Some((p, v))) => Some(format!("the study's `set` writes into it: {p} = {v}")),
            (None, None) => None,
        }
    }

    fn variant_detail(&self, k: usize, path: &Path, detail: String) -> StudyError {
        StudyError::Variant { path: path.to_owned(), variant: k, overrides: self.describe(k), detail }
    }

    /// `pointer = value, …` of variant `k` ("no overrides" where it has none).
    pub fn describe(&self, k: usize) -> String {
        if self.variants[k].is_empty() {
            return "no overrides".into();
        }
        self.variants[k].iter().map(|(p, v)| format!("{p} = {v}")).collect::<Vec<_>>().join(", ")
    }

    /// Variant `k` as a validated scenario (named `<study>_<k>`).
    pub fn scenario(&self, k: usize, path: &Path) -> Result<Scenario, StudyError> {
        let mut v = self.base.clone();
        let fail = |detail: String| self.variant_detail(k, path, detail);
        let over = &self.variants[k];
        for (p, val) in over.iter().filter(|(p, _)| !p.starts_with("/@")) {
            check_not_name(p).map_err(&fail)?;
            set_pointer(&mut v, p, val.clone()).map_err(|m| fail(format!("{p}: {m}")))?;
        }
        let speed = over.get(IMPACT_SPEED).map(|s| s.as_f64().ok_or("must be a number"));
        let angle = over.get(IMPACT_ANGLE).map(|s| s.as_f64().ok_or("must be a number"));
        if speed.is_some() || angle.is_some() {
            let (q, _) = over.iter().find(|(q, _)| *q == IMPACT_SPEED || *q == IMPACT_ANGLE).expect("one is there");
            if let Some((p, _)) = over.iter().find(|(p, v)| sets_velocity(p, v)) {
                return Err(fail(format!(
                    "`{q}` sets every body's velocity, and `{p}` sets a body's velocity too; give the velocity one \
                     way only"
                )));
            }
            let speed = speed.transpose().map_err(|m| fail(format!("{IMPACT_SPEED}: {m}")))?;
            if let Some(s) = speed.filter(|s| *s < 0.0) {
                return Err(fail(format!(
                    "{IMPACT_SPEED}: {s} is negative; the speed is towards the wall (≥ 0), tilt it with {IMPACT_ANGLE}"
                )));
            }
            let angle = angle.transpose().map_err(|m| fail(format!("{IMPACT_ANGLE}: {m}")))?.unwrap_or(0.0);
            set_impact(&mut v, speed, angle).map_err(fail)?;
        }
        if let Some(o) = v.as_object_mut() {
            o.insert("name".into(), Value::String(format!("{}_{k}", self.name)));
        }
        let text = serde_json::to_string(&v).expect("JSON value serialises");
        Scenario::from_json(&text, &self.as_file(k)).map_err(|e| self.variant_error(k, path, e))
    }
}

/// Refuses an override of the scenario's `name`: every variant is named `<study>_<k>`.
fn check_not_name(pointer: &str) -> Result<(), String> {
    match pointer {
        "/name" => Err(format!(
            "`{pointer}`: variants are named `<study>_<k>` after the study's `name`; the scenario's name cannot be \
             set or varied"
        )),
        _ => Ok(()),
    }
}

/// Whether the override `pointer = value` sets a body's velocity: `/bodies/<k>/velocity` (or one
/// of its components), or a body or the list of bodies that holds one.
fn sets_velocity(pointer: &str, value: &Value) -> bool {
    let tokens: Vec<&str> = pointer.split('/').skip(1).collect();
    match tokens.as_slice() {
        ["bodies"] => value.as_array().is_some_and(|a| a.iter().any(|b| b.get("velocity").is_some())),
        ["bodies", _] => value.get("velocity").is_some(),
        ["bodies", _, "velocity", ..] => true,
        _ => false,
    }
}

/// The varied pointers and each variant's overrides.
type Expanded = (Vec<String>, Vec<BTreeMap<String, Value>>);

/// The variants' overrides and the varied pointers.
fn expand(vary: &Vary, path: &Path) -> Result<Expanded, StudyError> {
    let check = |p: &str| {
        if !p.starts_with('/') {
            Err(invalid(
                path,
                format!("`{p}` is not a JSON Pointer (it must start with `/`, e.g. `/stiffness/contact`)"),
            ))
        } else if p.starts_with("/@") && p != IMPACT_SPEED && p != IMPACT_ANGLE {
            Err(invalid(path, format!("`{p}`: the convenience pointers are `{IMPACT_SPEED}` and `{IMPACT_ANGLE}`")))
        } else {
            Ok(())
        }
    };
    match vary {
        Vary::List(list) => {
            if list.is_empty() {
                return Err(invalid(path, "field `vary.list`: at least one variant"));
            }
            let mut cols: Vec<String> = Vec::new();
            for o in list {
                for p in o.keys() {
                    check(p)?;
                    if !cols.contains(p) {
                        cols.push(p.clone());
                    }
                }
            }
            Ok((cols, list.clone()))
        }
        Vary::Grid(grid) => {
            let mut out = vec![BTreeMap::new()];
            for (p, values) in grid {
                check(p)?;
                if values.is_empty() {
                    return Err(invalid(path, format!("field `vary.grid.{p}`: at least one value")));
                }
                out = out
                    .into_iter()
                    .flat_map(|o| {
                        values.iter().map(move |v| {
                            let mut o = o.clone();
                            o.insert(p.clone(), v.clone());
                            o
                        })
                    })
                    .collect();
            }
            Ok((grid.keys().cloned().collect(), out))
        }
        Vary::Random { samples, seed, ranges } => {
            if *samples == 0 {
                return Err(invalid(path, "field `vary.random.samples`: at least 1"));
            }
            let mut bounds = Vec::new();
            for (p, r) in ranges {
                check(p)?;
                let (lo, hi, log) = match *r {
                    Range::Pair([lo, hi]) => (lo, hi, false),
                    Range::Spec { lo, hi, log } => (lo, hi, log),
                };
                if !(lo.is_finite() && hi.is_finite() && lo <= hi) || (log && lo <= 0.0) {
                    return Err(invalid(
                        path,
                        format!(
                            "field `vary.random.ranges.{p}`: need finite lo ≤ hi (and lo > 0 for log), got [{lo}, {hi}]"
                        ),
                    ));
                }
                bounds.push((p.clone(), lo, hi, log));
            }
            let mut state = *seed;
            let out = (0..*samples)
                .map(|_| {
                    bounds
                        .iter()
                        .map(|(p, lo, hi, log)| {
                            let u = uniform(&mut state);
                            let v = if *log { (lo.ln() + u * (hi.ln() - lo.ln())).exp() } else { lo + u * (hi - lo) };
                            (p.clone(), Value::from(v))
                        })
                        .collect()
                })
                .collect();
            Ok((ranges.keys().cloned().collect(), out))
        }
    }
}

/// The next draw of a SplitMix64 sequence, uniform in [0, 1).
fn uniform(state: &mut u64) -> f64 {
    let u = crate::rng::unit(crate::rng::splitmix64(*state));
    *state = state.wrapping_add(crate::rng::GOLDEN);
    u
}

/// Sets `pointer` in `v` to `value`, creating missing object members on the way (so
/// `/rupture/tension` works on a base without `rupture`); array elements must exist.
pub fn set_pointer(v: &mut Value, pointer: &str, value: Value) -> Result<(), String> {
    if pointer.is_empty() {
        return Err("the empty pointer would replace the whole scenario".into());
    }
    let tokens: Vec<String> = pointer[1..].split('/').map(|t| t.replace("~1", "/").replace("~0", "~")).collect();
    let mut cur = v;
    for (n, t) in tokens.iter().enumerate() {
        let last = n + 1 == tokens.len();
        cur = match cur {
            Value::Object(map) => {
                if last {
                    map.insert(t.clone(), value);
                    return Ok(());
                }
                map.entry(t.clone()).or_insert_with(|| Value::Object(Default::default()))
            }
            Value::Array(items) => {
                let i: usize = t.parse().map_err(|_| format!("`{t}` is not an array index"))?;
                let len = items.len();
                let slot = items.get_mut(i).ok_or_else(|| format!("index {i} is past the end ({len} elements)"))?;
                if last {
                    *slot = value;
                    return Ok(());
                }
                slot
            }
            other => return Err(format!("`{t}` cannot be looked up in {other}")),
        };
    }
    unreachable!("the loop returns at the last token")
}

/// Applies the impact convenience pointers to every body's velocity.
fn set_impact(v: &mut Value, speed: Option<f64>, angle_deg: f64) -> Result<(), String> {
    let normal = v
        .pointer("/walls/0/normal")
        .and_then(|n| serde_json::from_value::<[f64; 3]>(n.clone()).ok())
        .ok_or("the impact pointers need a wall (`walls[0].normal`)")?;
    let n = glam::DVec3::from(normal).normalize();
    let t = n.any_orthonormal_vector();
    let bodies = v.get_mut("bodies").and_then(Value::as_array_mut).ok_or("no `bodies`")?;
    for b in bodies {
        let o = b.as_object_mut().ok_or("a body is not an object")?;
        let current = o
            .get("velocity")
            .and_then(|x| serde_json::from_value::<[f64; 3]>(x.clone()).ok())
            .map_or(0.0, |x| glam::DVec3::from(x).length());
        let s = speed.unwrap_or(current);
        let (sin, cos) = shape::sin_cos_degrees(angle_deg);
        let vel = -s * (cos * n + sin * t);
        o.insert("velocity".into(), serde_json::json!(vel.to_array()));
    }
    Ok(())
}

/// Which variants shard `i` of `n` runs: `k ≡ i (mod n)`.
pub fn shard_variants(count: usize, shard: Option<(usize, usize)>) -> Vec<usize> {
    match shard {
        None => (0..count).collect(),
        Some((i, n)) => (0..count).filter(|k| k % n == i).collect(),
    }
}

/// Parses `i/n` (0 ≤ i < n).
pub fn parse_shard(text: &str) -> Result<(usize, usize), String> {
    let (i, n) = text.split_once('/').ok_or_else(|| format!("`{text}`: expected i/n, e.g. 0/4"))?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| format!("`{text}`: `{i}` is not a whole number"))?,
        n.trim().parse().map_err(|_| format!("`{text}`: `{n}` is not a whole number"))?,
    );
    if n == 0 || i >= n {
        return Err(format!("`{text}`: task i of n needs 0 ≤ i < n"));
    }
    Ok((i, n))
}

/// Folder of variant `k` in a study's output folder.
pub fn variant_dir(out: &Path, k: usize) -> PathBuf {
    out.join("variants").join(k.to_string())
}

/// Why a variant did not complete: the run's error text, and whether it was an interrupt (the
/// variant can continue from its checkpoint) rather than a failure.
#[derive(Clone, Debug, Error)]
#[error("{message}")]
pub struct VariantError {
    pub interrupted: bool,
    pub message: String,
}

impl VariantError {
    /// A run's error, as a variant's.
    pub fn of(e: &crate::run::RunError) -> VariantError {
        VariantError { interrupted: matches!(e, crate::run::RunError::Interrupted { .. }), message: e.to_string() }
    }
}

impl From<crate::run::RunError> for VariantError {
    fn from(e: crate::run::RunError) -> VariantError {
        VariantError::of(&e)
    }
}

/// What ran of a study: per variant, its index and the run's summary or error.
pub struct StudyReport {
    pub ran: Vec<(usize, Result<crate::run::Summary, VariantError>)>,
}

/// Runs the variants `which` of `study` into `out/variants/<k>/`, each exactly as `rrpdem run`
/// would run it alone (same preparation, same driver, same outputs), as replicas of batches:
/// variants with the same engine kind, integrator and time step share a batch engine and step
/// in lockstep (`run::run_batch`); a variant's results do not depend on its batch. (One
/// difference from `rrpdem run`: on the GPU a study does not re-sort a mixing flow's particle
/// order during the run, `crate::order`.) On the CPU a
/// batch steps its replicas in parallel; on the GPU it is one state holding all of them.
/// `tick` is called as each variant finishes. VTK frames (`vtk`, over each variant's `output`
/// block) carry the variant's index as `replica`.
#[allow(clippy::too_many_arguments)]
pub fn run_variants(
    study: &Study,
    path: &Path,
    which: &[usize],
    out: &Path,
    overrides: &crate::run::EngineChoice,
    vtk: crate::run::VtkOptions,
    overwrite: bool,
    bars: Option<indicatif::MultiProgress>,
    tick: &(dyn Fn(usize, &Result<crate::run::Summary, VariantError>) + Sync),
) -> Result<StudyReport, StudyError> {
    let scenarios: Vec<(usize, Scenario)> =
        which.iter().map(|&k| study.scenario(k, path).map(|s| (k, s))).collect::<Result<_, _>>()?;
    // Groups of variants that can share an engine, each in variant order.
    let mut groups: Vec<(BatchKey, Vec<&(usize, Scenario)>)> = Vec::new();
    for v in &scenarios {
        let key = BatchKey::of(&v.1, overrides);
        match groups.iter_mut().find(|g| g.0 == key) {
            Some(g) => g.1.push(v),
            None => groups.push((key, vec![v])),
        }
    }
    let mut ran = Vec::with_capacity(scenarios.len());
    for (key, members) in groups {
        let max_replicas = max_replicas_per_batch();
        let mut rest = members.as_slice();
        while !rest.is_empty() {
            // Variants are prepared (model, checks, folder) as the batch fills, so that only
            // one batch's models are in memory at a time.
            let mut batch = Vec::new();
            let mut particles = 0usize;
            while let Some((&&(k, ref s), tail)) = rest.split_first() {
                // After an interrupt no further variant starts.
                if crate::run::INTERRUPT.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                if batch.len() >= max_replicas || (particles >= MAX_BATCH_PARTICLES && !batch.is_empty()) {
                    break;
                }
                rest = tail;
                match crate::run::prepare(s, &variant_dir(out, k), overwrite, overrides, &|_| {}) {
                    Ok(p) => {
                        particles += p.model.particles.len();
                        batch.push((k, s, p));
                    }
                    Err(e) => {
                        let r = Err(VariantError::from(e));
                        tick(k, &r);
                        ran.push((k, r));
                    }
                }
            }
            if batch.is_empty() {
                break;
            }
            let gpu = crate::gpu::GpuOptions { memory_budget: overrides.gpu_memory, ..Default::default() };
            for part in split_for_device(&key, batch, gpu) {
                ran.extend(run_batch(&key, part, vtk, gpu, bars.as_ref(), tick));
            }
        }
    }
    ran.sort_by_key(|r| r.0);
    Ok(StudyReport { ran })
}

/// What variants must share to step together in one batch engine.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BatchKey {
    backend: crate::scenario::Backend,
    precision: Option<crate::engine::Precision>,
    integrator: crate::integrator::Integrator,
    dt: u64,
}

impl BatchKey {
    fn of(s: &Scenario, choice: &crate::run::EngineChoice) -> BatchKey {
        let (backend, precision) = choice.resolve(s);
        BatchKey { backend, precision, integrator: s.integrator, dt: s.dt.to_bits() }
    }
}

/// Particles above which a batch takes no further variant: bounds the host memory of the
/// models (and, on the CPU, the engines) held at once.
const MAX_BATCH_PARTICLES: usize = 2_000_000;

/// Replicas per batch: each holds its output folder's lock (an open file) while it runs, so
/// the process's open-file limit (soft, from /proc/self/limits; 1024 where unknown) bounds it.
fn max_replicas_per_batch() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3).and_then(|v| v.parse::<usize>().ok()))
        })
        .unwrap_or(1024);
    // Half for the locks, the rest for the device, the logs being written and VTK frames.
    (soft / 2).saturating_sub(64).max(16)
}

/// A GPU batch split into parts that each fit the device (its binding limit and the memory
/// budget, from the memory estimate of `gpu::split_batches`); other batches whole.
fn split_for_device<'s>(
    key: &BatchKey,
    batch: Vec<(usize, &'s Scenario, crate::run::Prepared)>,
    options: crate::gpu::GpuOptions,
) -> Vec<Vec<(usize, &'s Scenario, crate::run::Prepared)>> {
    use crate::gpu::{AdapterChoice, GpuEngine};
    if key.backend != crate::scenario::Backend::Gpu || batch.len() < 2 {
        return vec![batch];
    }
    let precision = key.precision.unwrap_or(crate::engine::Precision::F32);
    // Without a device the batch stays whole: building its engine reports why.
    let Ok(limits) = GpuEngine::batch_limits(AdapterChoice::Any, precision, options) else {
        return vec![batch];
    };
    let models: Vec<&crate::model::Model> = batch.iter().map(|b| &b.2.model).collect();
    let ranges = crate::gpu::split_batches(&models, precision, limits);
    drop(models);
    let mut rest = batch.into_iter();
    ranges.into_iter().map(|r| rest.by_ref().take(r.len()).collect()).collect()
}

/// Runs one batch of prepared variants on one engine; returns their results. A GPU batch the
/// device has no memory for (wgpu cannot tell how much it has) is halved until it fits.
fn run_batch(
    key: &BatchKey,
    mut batch: Vec<(usize, &Scenario, crate::run::Prepared)>,
    vtk: crate::run::VtkOptions,
    gpu: crate::gpu::GpuOptions,
    bars: Option<&indicatif::MultiProgress>,
    tick: &(dyn Fn(usize, &Result<crate::run::Summary, VariantError>) + Sync),
) -> Vec<(usize, Result<crate::run::Summary, VariantError>)> {
    use crate::run::{Job, Start};
    use engines::StartError;
    if batch.is_empty() {
        return Vec::new();
    }
    let ks: Vec<usize> = batch.iter().map(|b| b.0).collect();
    let (integrator, dt) = (key.integrator, f64::from_bits(key.dt));
    let fail_all = |e: String| -> Vec<(usize, Result<crate::run::Summary, VariantError>)> {
        ks.iter()
            .map(|&k| {
                let r = Err(VariantError { interrupted: false, message: format!("cannot start the engine: {e}") });
                tick(k, &r);
                (k, r)
            })
            .collect()
    };
    let owned: Vec<std::borrow::Cow<crate::model::Model>> = batch.iter().map(|b| b.2.engine_model()).collect();
    let models: Vec<&crate::model::Model> = owned.iter().map(|m| m.as_ref()).collect();
    // On the GPU one state holding every replica (the caller has split the batch to fit).
    let made = engines::batch_engine(key.backend, key.precision, integrator, dt, &models, gpu);
    drop(models);
    drop(owned);
    let mut engine = match made {
        Ok(e) => e,
        Err(StartError::Gpu(crate::gpu::GpuError::OutOfMemory { .. })) if batch.len() > 1 => {
            let second = batch.split_off(batch.len() / 2);
            let mut ran = run_batch(key, batch, vtk, gpu, bars, tick);
            ran.extend(run_batch(key, second, vtk, gpu, bars, tick));
            return ran;
        }
        Err(StartError::Gpu(e)) => return fail_all(e.to_string()),
        Err(StartError::Engine(r, e)) => {
            return fail_all(crate::order::error_to_user(batch[r].2.order.as_ref(), e).to_string());
        }
    };
    let jobs: Vec<Job> = batch
        .iter()
        .map(|(k, s, p)| Job {
            scenario: s,
            model: &p.model,
            order: p.order.as_ref(),
            start: Start::Fresh { stability: p.stability.clone() },
            dir: &p.dir,
            vtk: crate::run::VtkOptions { replica: i32::try_from(*k).unwrap_or(i32::MAX), ..vtk },
            warnings: p.warnings.clone(),
        })
        .collect();
    engines::drive(jobs, &ks, engine.as_mut(), bars, tick)
}

/// Name of the resolved study written into its output folder (what `--merge` reads).
pub const STUDY_FILE: &str = crate::output::STUDY_FILE;

/// Writes the resolved study into its output folder, atomically (a file beside it, renamed):
/// a shard starting meanwhile never reads half of it.
pub fn write_resolved(study: &Study, out: &Path) -> Result<(), StudyError> {
    let p = out.join(STUDY_FILE);
    let tmp = out.join(format!(".{STUDY_FILE}.{}.tmp", std::process::id()));
    let text = resolved_json(study);
    std::fs::create_dir_all(out)
        .and_then(|()| std::fs::write(&tmp, text))
        .map_err(|error| StudyError::Io { path: tmp.clone(), error })?;
    std::fs::rename(&tmp, &p).map_err(|error| StudyError::Io { path: p, error })
}

/// The text of `study.json`: the resolved study and the provenance of the process that wrote it
/// (`crate::provenance`; not part of the study, so `read_resolved` and the folder checks leave
/// it out).
pub(crate) fn resolved_json(study: &Study) -> String {
    let mut v = serde_json::to_value(study).expect("a study serialises");
    if let Some(o) = v.as_object_mut() {
        let p = serde_json::to_value(crate::provenance::Provenance::now()).expect("provenance serialises");
        o.insert("provenance".into(), p);
    }
    serde_json::to_string_pretty(&v).expect("a study serialises")
}

/// Reads the resolved study of an output folder.
pub fn read_resolved(out: &Path) -> Result<Study, StudyError> {
    let p = out.join(STUDY_FILE);
    let text = std::fs::read_to_string(&p).map_err(|error| StudyError::Io { path: p.clone(), error })?;
    serde_json::from_str(&text).map_err(|e| invalid(&p, e.to_string()))
}

/// Outcomes drawn against the varied parameters by `plot`.
pub const PLOTTED_OUTCOMES: [&str; 4] = ["max_rel_energy_error", "n_broken", "peak_wall_force", "restitution"];

/// `study.png`: each outcome against each numeric varied parameter (at most four), one colour
/// per value of the first text-valued parameter (for example the shear law).
pub fn plot(study: &Study, out: &Path) -> Result<PathBuf, crate::plot::PlotError> {
    let numeric = |c: &String| study.variants.iter().all(|v| v.get(c).is_none_or(|x| x.is_number())) && !c.is_empty();
    let x: Vec<String> = study.columns.iter().filter(|c| numeric(c)).take(4).cloned().collect();
    let group_by = study.columns.iter().find(|c| !numeric(c)).cloned();
    let spec = crate::plot::ScatterSpec {
        title: format!("study {}: outcomes per variant", study.name),
        x,
        y: PLOTTED_OUTCOMES.iter().map(|s| s.to_string()).collect(),
        group_by,
        log: vec![],
        labels: vec![],
        connect: study.columns.clone(),
    };
    let png = out.join("study.png");
    let table = completed_outcomes(crate::plot::Table::read(&out.join("study.csv"))?, &PLOTTED_OUTCOMES);
    crate::plot::scatter(&table, &spec, &png)?;
    Ok(png)
}

/// `table` (a `study.csv`) with the `outcomes` of every variant that did not complete left
/// empty: a failed run's values describe its last good step (0 for one refused at its first
/// step), an interrupted one's a point in the middle, a missing one's nothing; drawn, they would
/// read as outcomes. An empty cell is a missing value, which breaks its line.
fn completed_outcomes(mut table: crate::plot::Table, outcomes: &[&str]) -> crate::plot::Table {
    let Some(status) = table.column("status") else { return table };
    let columns: Vec<usize> = outcomes.iter().filter_map(|o| table.column(o)).collect();
    for row in table.rows.iter_mut().filter(|r| r.get(status).is_none_or(|s| s.trim() != "completed")) {
        for &c in &columns {
            if let Some(cell) = row.get_mut(c) {
                cell.clear();
            }
        }
    }
    table
}

/// Fragment outcomes drawn against the varied parameters by `plot_fragments`.
pub const FRAGMENT_OUTCOMES: [&str; 2] = ["n_fragments", "largest_fragment_fraction"];

/// `study_fragments.png`: the number of fragments and the largest fragment's mass fraction
/// against each numeric varied parameter, as `study.png` draws its outcomes; `None` (nothing
/// drawn) when no variant broke into more than one fragment.
pub fn plot_fragments(study: &Study, out: &Path) -> Result<Option<PathBuf>, crate::plot::PlotError> {
    let csv = out.join("study.csv");
    let table = completed_outcomes(crate::plot::Table::read(&csv)?, &FRAGMENT_OUTCOMES);
    let broke = table.has("n_fragments") && table.numbers("n_fragments")?.iter().any(|&n| n > 1.0);
    let png = out.join("study_fragments.png");
    if !broke {
        // An earlier run's figure in this folder would describe other outcomes.
        if png.exists() {
            std::fs::remove_file(&png).map_err(|source| crate::plot::PlotError::Write { path: png, source })?;
        }
        return Ok(None);
    }
    let numeric = |c: &String| study.variants.iter().all(|v| v.get(c).is_none_or(|x| x.is_number())) && !c.is_empty();
    let spec = crate::plot::ScatterSpec {
        title: format!("study {}: fragments per variant", study.name),
        x: study.columns.iter().filter(|c| numeric(c)).take(4).cloned().collect(),
        y: FRAGMENT_OUTCOMES.iter().map(|s| s.to_string()).collect(),
        group_by: study.columns.iter().find(|c| !numeric(c)).cloned(),
        log: vec![],
        labels: vec![],
        connect: study.columns.clone(),
    };
    crate::plot::scatter(&table, &spec, &png)?;
    Ok(Some(png))
}

/// Whether the scenario field `field` (as errors name it: `damping.restitution`,
/// `bodies[0].velocity`) lies at or under the JSON Pointer `pointer` (`/damping`, `/bodies/0`).
fn under_pointer(field: &str, pointer: &str) -> bool {
    let name = pointer_field(pointer);
    !name.is_empty()
        && field.strip_prefix(name.as_str()).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// Whether the JSON Pointer `pointer` reaches into `field` or below it (as `/dampng/restitution`
/// into an unknown field `dampng`): the field is named by a leading part of the pointer.
fn reaches_into(field: &str, pointer: &str) -> bool {
    let name = pointer_field(pointer);
    !field.is_empty() && name.strip_prefix(field).is_some_and(|rest| rest.is_empty() || rest.starts_with(['.', '[']))
}

/// A JSON Pointer as the field name scenario errors use (`/bodies/0/velocity` →
/// `bodies[0].velocity`).
fn pointer_field(pointer: &str) -> String {
    let mut name = String::new();
    for seg in pointer.split('/').skip(1) {
        if !seg.is_empty() && seg.bytes().all(|b| b.is_ascii_digit()) {
            name.push_str(&format!("[{seg}]"));
        } else {
            if !name.is_empty() {
                name.push('.');
            }
            name.push_str(&seg.replace("~1", "/").replace("~0", "~"));
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_completed_variants_have_outcomes_to_draw() {
        let csv = "variant,/dt,status,max_rel_energy_error,n_broken,peak_wall_force,restitution\n\
                   0,0.1,completed,1e-3,4,10.5,0.8\n\
                   1,0.2,failed,0.0,0,0.0,\n\
                   2,0.3,interrupted,2e-3,1,3.5,\n\
                   3,0.4,missing,,,,\n";
        let t = crate::plot::Table::parse(Path::new("study.csv"), csv).unwrap();
        let t = completed_outcomes(t, &PLOTTED_OUTCOMES);
        assert_eq!(t.numbers("max_rel_energy_error").unwrap()[0], 1e-3);
        for o in PLOTTED_OUTCOMES {
            let v = t.numbers(o).unwrap();
            assert!(v[1..].iter().all(|x| x.is_nan()), "{o}: {v:?}");
        }
        // The parameters and the status stay.
        assert_eq!(t.numbers("/dt").unwrap(), [0.1, 0.2, 0.3, 0.4]);
        assert_eq!(t.texts("status").unwrap(), ["completed", "failed", "interrupted", "missing"]);
    }

    #[test]
    fn a_field_lies_under_a_pointer_by_whole_segments() {
        assert!(under_pointer("damping.restitution", "/damping/restitution"));
        assert!(under_pointer("damping.restitution", "/damping"));
        assert!(under_pointer("bodies[0].velocity", "/bodies/0"));
        assert!(!under_pointer("damping.restitution_wall", "/damping/restitution"));
        assert!(!under_pointer("bodies[1].velocity", "/bodies/0"));
        assert!(!under_pointer("damping", "/damping/restitution"));
        assert!(reaches_into("dampng", "/dampng/restitution") && reaches_into("damping", "/damping"));
        assert!(reaches_into("bodies[0]", "/bodies/0/velocity"));
        assert!(!reaches_into("damp", "/damping/restitution") && !reaches_into("bodies[1]", "/bodies/10"));
    }
}
