//! The machine-wide state a real node changes, saved before it starts and put back
//! when it stops: iptables rules, sysctls, network links and namespaces, mounts and
//! the `kubepods` cgroup trees, plus every process it leaves behind.
//!
//! The snapshot lives in files in the node's directory, so a run that died without
//! unwinding (SIGKILL, abort) is undone by the next one: see [`restore`].

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::config::{NODE_BRIDGE, POD_BRIDGE};
use crate::{Error, Result, io_err};

/// Sysctls the kubelet (`vm.*`, `kernel.*`), kube-proxy (`route_localnet`) and the node
/// itself (`ip_forward`) change.
const SYSCTLS: [&str; 9] = [
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/ip_forward",
    "net/ipv4/conf/all/route_localnet",
    "net/bridge/bridge-nf-call-iptables",
];

/// An iptables family: its save and restore tools and its nftables family.
struct Family {
    save: &'static str,
    restore: &'static str,
    nft: &'static str,
}

const FAMILIES: [Family; 2] = [
    Family {
        save: "iptables-save",
        restore: "iptables-restore",
        nft: "ip",
    },
    Family {
        save: "ip6tables-save",
        restore: "ip6tables-restore",
        nft: "ip6",
    },
];
/// The tables the kubelet, kube-proxy and the CNI plugins write.
const TABLES: [&str; 3] = ["filter", "nat", "mangle"];
const SYSCTL_FILE: &str = "sysctl.before";
const NETNS_FILE: &str = "netns.before";
const NETNS_DIR: &str = "/run/netns";
/// In [`NETNS_FILE`]: the directory did not exist (containerd creates it).
const NO_NETNS_DIR: &str = "/run/netns did not exist\n";

/// Runs `program args`, returning its stdout; a failure is an error naming it.
pub(super) fn run(program: &str, args: &[&str]) -> Result<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(io_err(format!("run {program}")))?;
    if !out.status.success() {
        return Err(Error::Node(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(io_err(format!("write {}", path.display())))
}

fn netns_names() -> BTreeSet<String> {
    std::fs::read_dir(NETNS_DIR)
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Saves what [`restore`] puts back into `dir`.
pub(super) fn snapshot(dir: &Path) -> Result<()> {
    for family in FAMILIES {
        let mut rules = run(family.save, &[])?;
        // A table absent now is created by the node: restore clears it, then deletes it.
        let mut absent = String::new();
        for table in TABLES {
            if !rules.lines().any(|l| l == format!("*{table}")) {
                rules.push_str(&format!("*{table}\nCOMMIT\n"));
                absent.push_str(&format!("{table}\n"));
            }
        }
        write(&dir.join(format!("{}.before", family.save)), &rules)?;
        write(&dir.join(format!("{}.absent", family.save)), &absent)?;
    }
    let sysctls: String = SYSCTLS
        .iter()
        .filter_map(|key| {
            let value = std::fs::read_to_string(Path::new("/proc/sys").join(key)).ok()?;
            Some(format!("{key}={}\n", value.trim()))
        })
        .collect();
    write(&dir.join(SYSCTL_FILE), &sysctls)?;
    let mut netns: String = netns_names().into_iter().map(|n| n + "\n").collect();
    if !Path::new(NETNS_DIR).exists() {
        netns.push_str(NO_NETNS_DIR);
    }
    write(&dir.join(NETNS_FILE), &netns)
}

pub(super) fn set_sysctl(key: &str, value: &str) -> Result<()> {
    let path = Path::new("/proc/sys").join(key);
    std::fs::write(&path, value).map_err(io_err(format!("set {}", path.display())))
}

/// Undoes everything the node did, as far as it can, and removes `dir`. Each step
/// runs even when an earlier one failed; the failures are returned for the log.
pub(super) fn restore(dir: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let mut note = |step: &str, result: Result<()>| {
        if let Err(err) = result {
            failures.push(format!("{step}: {err}"));
        }
    };
    let socket = dir.join("containerd/containerd.sock");
    note("stop containers", stop_containers(&socket));
    note(
        "kill shims",
        kill_matching(&format!("-address {}", socket.display())),
    );
    note("kill pod processes", kill_kubepods());
    note("remove pod network namespaces", remove_new_netns(dir));
    note("unmount", unmount_under(dir));
    for link in [POD_BRIDGE, NODE_BRIDGE] {
        if Path::new("/sys/class/net").join(link).exists() {
            note(
                &format!("delete link {link}"),
                run("ip", &["link", "del", link]).map(drop),
            );
        }
    }
    note("restore iptables", restore_iptables(dir));
    note("restore sysctls", restore_sysctls(dir));
    note("remove kubepods cgroups", remove_kubepods());
    if dir.exists() {
        note(
            "remove the node directory",
            std::fs::remove_dir_all(dir).map_err(io_err(format!("remove {}", dir.display()))),
        );
    }
    failures
}

/// Kills and removes every container of the node's containerd, while it still runs.
pub(super) fn stop_containers(socket: &Path) -> Result<()> {
    if !socket.exists() {
        return Ok(());
    }
    let sock = socket.display().to_string();
    let ctr = |args: &[&str]| {
        let mut all = vec!["-a", sock.as_str(), "-n", "k8s.io", "--timeout", "10s"];
        all.extend_from_slice(args);
        run("ctr", &all)
    };
    let Ok(tasks) = ctr(&["tasks", "ls", "-q"]) else {
        return Ok(()); // containerd is gone: the shims and cgroups steps take over
    };
    for task in tasks.lines() {
        let _ = ctr(&["tasks", "kill", "-s", "SIGKILL", task]);
    }
    for task in tasks.lines() {
        let _ = ctr(&["tasks", "rm", "-f", task]);
    }
    for container in ctr(&["containers", "ls", "-q"])?.lines() {
        let _ = ctr(&["containers", "rm", container]);
    }
    Ok(())
}

fn proc_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn kill9(pid: i32) {
    // Skip ourselves whatever a pid file or cgroup says.
    if pid > 1 && pid != std::process::id() as i32 {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
}

/// Kills the processes whose command line contains `needle` (the shims of our
/// containerd carry its socket path).
fn kill_matching(needle: &str) -> Result<()> {
    for pid in proc_pids() {
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(needle) {
            kill9(pid);
        }
    }
    Ok(())
}

/// The `kubepods` cgroup trees (cgroup v1 hierarchies and v2).
fn kubepods_roots() -> Vec<PathBuf> {
    let mut roots = vec![PathBuf::from("/sys/fs/cgroup/kubepods")];
    if let Ok(dir) = std::fs::read_dir("/sys/fs/cgroup") {
        roots.extend(
            dir.filter_map(|e| e.ok())
                .map(|e| e.path().join("kubepods")),
        );
    }
    roots.retain(|r| r.is_dir());
    roots
}

fn subdirs_depth_first(root: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(dir) = std::fs::read_dir(root) {
        for entry in dir.filter_map(|e| e.ok()) {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                subdirs_depth_first(&entry.path(), out);
            }
        }
    }
    out.push(root.to_owned());
}

/// Kills what still runs in a Pod cgroup (containers whose shim is gone).
fn kill_kubepods() -> Result<()> {
    for root in kubepods_roots() {
        let mut dirs = Vec::new();
        subdirs_depth_first(&root, &mut dirs);
        for dir in dirs {
            let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.lines().filter_map(|p| p.trim().parse().ok()) {
                kill9(pid);
            }
        }
    }
    Ok(())
}

fn remove_kubepods() -> Result<()> {
    let mut left = Vec::new();
    for root in kubepods_roots() {
        let mut dirs = Vec::new();
        subdirs_depth_first(&root, &mut dirs);
        for dir in dirs {
            // A cgroup goes once its last process has been reaped: retry briefly.
            let mut removed = false;
            for _ in 0..50 {
                if std::fs::remove_dir(&dir).is_ok() || !dir.exists() {
                    removed = true;
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            if !removed {
                left.push(dir.display().to_string());
            }
        }
    }
    if left.is_empty() {
        Ok(())
    } else {
        Err(Error::Node(format!("cgroups left: {}", left.join(", "))))
    }
}

fn remove_new_netns(dir: &Path) -> Result<()> {
    let Ok(before) = std::fs::read_to_string(dir.join(NETNS_FILE)) else {
        return Ok(()); // no snapshot: this run never got as far as creating any
    };
    let before: BTreeSet<&str> = before.lines().collect();
    for name in netns_names() {
        // Only the CNI's (`cni-<uuid>`) that appeared while the node ran.
        if name.starts_with("cni-") && !before.contains(name.as_str()) {
            let path = format!("/run/netns/{name}");
            let _ = run("umount", &[&path]);
            let _ = std::fs::remove_file(&path);
        }
    }
    if before.contains(NO_NETNS_DIR.trim_end()) && netns_names().is_empty() {
        // It may be a bind mount onto itself (as `ip netns` makes it).
        let _ = run("umount", &[NETNS_DIR]);
        let _ = std::fs::remove_dir(NETNS_DIR);
    }
    Ok(())
}

/// Lazily unmounts everything mounted under `dir`, deepest first (the kubelet
/// bind-mounts its root onto itself; sandboxes mount `shm` and volumes there).
fn unmount_under(dir: &Path) -> Result<()> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(io_err("read /proc/self/mountinfo"))?;
    let prefix = format!("{}/", dir.display());
    let mut targets: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|t| t.starts_with(&prefix))
        .collect();
    targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
    targets.dedup();
    for target in targets {
        let _ = run("umount", &["-l", target]);
    }
    Ok(())
}

fn restore_iptables(dir: &Path) -> Result<()> {
    for family in FAMILIES {
        let Ok(rules) = std::fs::read(dir.join(format!("{}.before", family.save))) else {
            continue;
        };
        let mut child = Command::new(family.restore)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(io_err(format!("run {}", family.restore)))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(&rules)
                .map_err(io_err(format!("write to {}", family.restore)))?;
        }
        let out = child
            .wait_with_output()
            .map_err(io_err(format!("wait for {}", family.restore)))?;
        if !out.status.success() {
            return Err(Error::Node(format!(
                "{} failed: {}",
                family.restore,
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        // Tables that did not exist before go again (iptables-nft keeps empty ones).
        let absent = std::fs::read_to_string(dir.join(format!("{}.absent", family.save)))
            .unwrap_or_default();
        for table in absent.lines().filter(|t| TABLES.contains(t)) {
            let _ = run("nft", &["delete", "table", family.nft, table]);
        }
    }
    Ok(())
}

fn restore_sysctls(dir: &Path) -> Result<()> {
    let Ok(saved) = std::fs::read_to_string(dir.join(SYSCTL_FILE)) else {
        return Ok(());
    };
    for line in saved.lines() {
        if let Some((key, value)) = line.split_once('=')
            && SYSCTLS.contains(&key)
        {
            set_sysctl(key, value)?;
        }
    }
    Ok(())
}
