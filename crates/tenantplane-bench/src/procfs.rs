//! What the benchmark reads from `/proc`: its own memory, and the CPU time of
//! itself and of the etcd / kube-apiserver processes it started.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};

/// A field of `/proc/self/status` in KiB (`VmRSS`, `VmHWM`).
pub fn status_kib(field: &str) -> Result<u64> {
    process_status_kib("self", field)
}

/// A field of `/proc/<process>/status` in KiB; `process` is a PID or `self`.
pub fn process_status_kib(process: &str, field: &str) -> Result<u64> {
    let path = format!("/proc/{process}/status");
    let text = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    text.lines()
        .find_map(|line| {
            let rest = line.strip_prefix(field)?.strip_prefix(':')?;
            rest.trim().strip_suffix("kB")?.trim().parse().ok()
        })
        .with_context(|| format!("no {field} in {path}"))
}

/// Resets the process's peak RSS (`VmHWM`) to its current RSS (Linux >= 4.0:
/// writing 5 to `clear_refs`).
pub fn reset_peak_rss() -> Result<()> {
    std::fs::write("/proc/self/clear_refs", "5").context("reset VmHWM via /proc/self/clear_refs")
}

/// Clock ticks per second of `/proc/<pid>/stat` times.
pub fn clock_ticks() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|&t| t > 0)
        .unwrap_or(100)
}

/// `(comm, ppid, utime + stime in ticks)` of a process.
fn stat(pid: u32) -> Option<(String, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_owned();
    // After ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt
    // cmajflt utime stime ...
    let fields: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, ppid, utime + stime))
}

/// The processes whose CPU time the report shows, by role.
pub struct Watched {
    pids: BTreeMap<&'static str, u32>,
    ticks: u64,
}

impl Watched {
    /// This process, the two API servers, and etcd (found as a child named `etcd`).
    pub fn new(host_apiserver: Option<u32>, tenant_apiserver: Option<u32>) -> Self {
        let me = std::process::id();
        let mut pids = BTreeMap::new();
        pids.insert("benchmark (controller + clients)", me);
        if let Some(pid) = host_apiserver {
            pids.insert("host kube-apiserver", pid);
        }
        if let Some(pid) = tenant_apiserver {
            pids.insert("tenant kube-apiserver", pid);
        }
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|s| s.parse::<u32>().ok())
                else {
                    continue;
                };
                if let Some((comm, ppid, _)) = stat(pid)
                    && ppid == me
                    && comm == "etcd"
                {
                    pids.insert("etcd", pid);
                }
            }
        }
        Self {
            pids,
            ticks: clock_ticks(),
        }
    }

    /// Also counts the CPU time of process `pid` (a controller process), as `role`.
    pub fn watch(&mut self, role: &'static str, pid: u32) {
        self.pids.insert(role, pid);
    }

    /// CPU time used so far, by role.
    pub fn cpu(&self) -> BTreeMap<&'static str, Duration> {
        self.pids
            .iter()
            .filter_map(|(role, pid)| {
                let (_, _, ticks) = stat(*pid)?;
                Some((
                    *role,
                    Duration::from_secs_f64(ticks as f64 / self.ticks as f64),
                ))
            })
            .collect()
    }
}

/// CPU used between two [`Watched::cpu`] snapshots, as "role 1.23 s" items.
pub fn cpu_since(
    before: &BTreeMap<&'static str, Duration>,
    after: &BTreeMap<&'static str, Duration>,
) -> Vec<(&'static str, Duration)> {
    after
        .iter()
        .map(|(role, t)| {
            (
                *role,
                t.saturating_sub(before.get(role).copied().unwrap_or_default()),
            )
        })
        .collect()
}

/// The one-minute load average, to show how busy the shared machine was.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}
