//! `kubectl`, as a user runs it, for tests that check what a user would see.

use std::path::Path;
use std::process::Command;

/// Runs `kubectl --kubeconfig=<kubeconfig> <args>`: its stdout, or (when it fails or
/// cannot start) its stdout and stderr, for the test's message.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .output()
        .map_err(|e| format!("run kubectl: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
