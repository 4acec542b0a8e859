//! Provenance of results: which rrpdem (version and commit), run how (command line), when
//! (UTC), where (host, machine) and with how many threads; written into `summary.json`,
//! `study.json` and the bench reports, so that a result can be traced to what made it.

use serde::{Deserialize, Serialize};

/// What made a result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// rrpdem's version and the commit it was built from (`git describe --always --dirty` at
    /// build time; "unknown" without git).
    pub version: String,
    pub commit: String,
    /// The process's command line, as given.
    pub command_line: Vec<String>,
    /// When the run started, UTC, `YYYY-MM-DDThh:mm:ssZ`.
    pub date: String,
    /// The host's name (`/proc/sys/kernel/hostname`, else `HOSTNAME`, else "unknown").
    pub host: String,
    /// Threads of the CPU engine's pool (rayon).
    pub threads: usize,
    pub machine: Machine,
}

impl Provenance {
    /// This process, now.
    pub fn now() -> Provenance {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "unknown".into());
        Provenance {
            version: env!("CARGO_PKG_VERSION").to_string(),
            commit: env!("RRPDEM_COMMIT").to_string(),
            command_line: std::env::args().collect(),
            date: utc_timestamp(std::time::SystemTime::now()),
            host,
            threads: rayon::current_num_threads(),
            machine: Machine::this(),
        }
    }
}

/// The machine a report was measured on, as the process sees it (Linux `/proc`; `None` or
/// "unknown" elsewhere).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    /// CPU model (`/proc/cpuinfo` "model name").
    pub cpu: String,
    /// Logical CPUs this process may use.
    pub logical_cpus: usize,
    /// Physical memory, bytes (`/proc/meminfo` MemTotal).
    pub memory_bytes: Option<u64>,
    /// Operating system (`/etc/os-release` PRETTY_NAME).
    pub os: String,
    /// 1-, 5- and 15-minute load averages when the bench started (`/proc/loadavg`): other work
    /// on the machine moves the figures.
    pub load_average: Option<[f64; 3]>,
}

impl Machine {
    pub fn this() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).ok();
        let cpu = read("/proc/cpuinfo")
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("model name"))
                    .and_then(|l| l.split_once(':'))
                    .map(|(_, v)| v.trim().to_string())
            })
            .unwrap_or_else(|| std::env::consts::ARCH.to_string());
        let memory_bytes = read("/proc/meminfo").and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
        });
        let os = read("/etc/os-release")
            .and_then(|s| {
                s.lines().find_map(|l| l.strip_prefix("PRETTY_NAME=")).map(|v| v.trim_matches('"').to_string())
            })
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        let load_average = read("/proc/loadavg").and_then(|s| {
            let v: Vec<f64> = s.split_whitespace().take(3).filter_map(|x| x.parse().ok()).collect();
            (v.len() == 3).then(|| [v[0], v[1], v[2]])
        });
        Machine {
            cpu,
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            os,
            load_average,
        }
    }
}

/// `YYYY-MM-DDThh:mm:ssZ` of a time (UTC; times before 1970 are not expected and print as 1970).
pub fn utc_timestamp(t: std::time::SystemTime) -> String {
    let secs = t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

/// Proleptic Gregorian (year, month, day) of the day `z` days after 1970-01-01 (H. Hinnant's
/// `civil_from_days`: eras of 400 years counted from 0000-03-01).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn dates_match_known_calendar_days() {
        // Day numbers from Python's `datetime.date.toordinal() - date(1970, 1, 1).toordinal()`,
        // an independent implementation; leap days of 2000 (divisible by 400) and 2024, the
        // non-leap 2100 and the end of a year included.
        for (days, ymd) in [
            (0, (1970, 1, 1)),
            (11_016, (2000, 2, 29)),
            (11_017, (2000, 3, 1)),
            (19_782, (2024, 2, 29)),
            (20_416, (2025, 11, 24)),
            (20_453, (2025, 12, 31)),
            (20_783, (2026, 11, 26)),
            (47_540, (2100, 2, 28)),
            (47_541, (2100, 3, 1)),
        ] {
            assert_eq!(civil_from_days(days), ymd, "day {days}");
        }
        let t = UNIX_EPOCH + Duration::from_secs(20_783 * 86_400 + 3 * 3600 + 4 * 60 + 5);
        assert_eq!(utc_timestamp(t), "2026-11-26T03:04:05Z");
    }

    #[test]
    fn provenance_names_this_build_and_process() {
        let p = Provenance::now();
        assert_eq!(p.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(p.command_line, std::env::args().collect::<Vec<_>>());
        assert_eq!(p.threads, rayon::current_num_threads());
        assert!(p.date.ends_with('Z') && p.date.len() == 20, "{}", p.date);
    }
}
