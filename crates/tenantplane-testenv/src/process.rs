//! Child processes that cannot outlive the process that started them.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, so every
//! child is forked by one spawner thread that lives as long as the process: a child
//! then dies with the test binary (even on abort or SIGKILL), never with whichever
//! test thread happened to start it. Drop kills it in the ordinary case.
#![allow(unsafe_code)]

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};

use crate::{Error, Result, io_err};

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                for (mut command, reply) in rx {
                    // The receiver only goes away if the caller gave up; nothing to do then.
                    let _ = reply.send(command.spawn());
                }
            })
            .map(|_| ())
            .unwrap_or_else(|err| tracing::error!(%err, "could not start the spawner thread"));
        Mutex::new(tx)
    })
}

/// A running child process with its combined output in a log file.
pub(crate) struct ManagedChild {
    name: String,
    child: Child,
    log: PathBuf,
}

impl ManagedChild {
    pub(crate) fn spawn(name: &str, program: &Path, args: &[String], log: PathBuf) -> Result<Self> {
        let out = File::create(&log).map_err(io_err(format!("create {}", log.display())))?;
        let err = out
            .try_clone()
            .map_err(io_err("duplicate a log file handle"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group: a Ctrl-C in the terminal reaches only us, and we
            // stop the children in order.
            .process_group(0);
        // SAFETY: prctl and getppid are async-signal-safe and touch no memory of the
        // parent; this runs in the forked child before exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let (reply_tx, reply_rx) = mpsc::channel();
        let send = spawner()
            .lock()
            .map_err(|_| "spawner lock poisoned".to_owned())
            .and_then(|tx| {
                tx.send((command, reply_tx))
                    .map_err(|_| "spawner thread gone".to_owned())
            });
        let spawned = match send {
            Ok(()) => reply_rx
                .recv()
                .unwrap_or_else(|_| Err(std::io::Error::other("spawner thread gone"))),
            Err(message) => Err(std::io::Error::other(message)),
        };
        let child = spawned.map_err(io_err(format!("start {name} ({})", program.display())))?;
        Ok(Self {
            name: name.to_owned(),
            child,
            log,
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// The last `lines` lines of the process's output.
    pub(crate) fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    pub(crate) fn exited_error(&mut self, status: ExitStatus) -> Error {
        Error::Exited {
            process: self.name.clone(),
            status: status.to_string(),
            log_tail: self.log_tail(30),
        }
    }

    /// Kills the process and reaps it.
    pub(crate) fn kill(&mut self) {
        if self.exited().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for the end of its input, then removes the directory `$1`, retrying for a
/// while: the children writing in it die at the same moment as the writer.
const REMOVE_AT_EXIT: &str = "cat >/dev/null; i=0; while [ $i -lt 100 ]; do \
    rm -rf -- \"$1\" 2>/dev/null && exit 0; i=$((i + 1)); sleep 0.1; done; exit 1";

/// Removes `dir` once this process has exited, however it exits: for what lives in
/// a `static`, which never drops. A `sh` reads a pipe whose only writer is this
/// process (the write end is close-on-exec, so no other child holds it), so its
/// input ends when this process does. Not a [`ManagedChild`]: it has to outlive us,
/// so no `PR_SET_PDEATHSIG`, and its own process group so a Ctrl-C spares it.
pub(crate) fn remove_at_exit(dir: &Path) -> Result<()> {
    let mut janitor = Command::new("sh")
        .args(["-c", REMOVE_AT_EXIT, "remove-at-exit"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(io_err(format!("start a janitor for {}", dir.display())))?;
    // Our end of the pipe stays open until the process exits; the janitor is reaped
    // by whoever inherits it then.
    std::mem::forget(janitor.stdin.take());
    Ok(())
}

/// The last `lines` lines of a log file (reading at most its last 64 KiB).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(mut file) = File::open(path) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(64 * 1024)));
    let mut buf = Vec::new();
    let _ = file.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
