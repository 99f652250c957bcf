//! A small command builder that prints what it runs, so every step can be reproduced by hand.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, Context, Result};

/// A command line plus the environment variables it sets, printable as a shell line.
#[derive(Debug, Clone)]
pub(crate) struct Cmd {
    program: OsString,
    shown: String,
    args: Vec<OsString>,
    envs: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    hint: Option<String>,
}

impl Cmd {
    /// A command running `program`, found through `PATH` when it has no slash.
    pub(crate) fn new(program: impl Into<OsString>) -> Self {
        let program = program.into();
        let shown = program.to_string_lossy().into_owned();
        Cmd {
            program,
            shown,
            args: Vec::new(),
            envs: Vec::new(),
            cwd: None,
            hint: None,
        }
    }

    /// The cargo that runs this xtask (`$CARGO`), shown as `cargo`.
    pub(crate) fn cargo() -> Self {
        let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Cmd::new(program);
        cmd.shown = "cargo".to_owned();
        cmd
    }

    /// Appends one argument.
    pub(crate) fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appends several arguments.
    pub(crate) fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets an environment variable for the command (shown in front of it).
    pub(crate) fn env(mut self, key: &str, value: impl Into<String>) -> Self {
        self.envs.push((key.to_owned(), value.into()));
        self
    }

    /// Sets several environment variables.
    pub(crate) fn envs(mut self, envs: &[(String, String)]) -> Self {
        self.envs.extend(envs.iter().cloned());
        self
    }

    /// Runs the command in `dir`.
    pub(crate) fn current_dir(mut self, dir: &Path) -> Self {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    /// A line printed after the failure message of [`Cmd::run_step`].
    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The command as a shell line: `KEY=value program args`.
    pub(crate) fn display(&self) -> String {
        let mut parts: Vec<String> = self
            .envs
            .iter()
            .map(|(k, v)| format!("{k}={}", shell_quote(v)))
            .collect();
        parts.push(shell_quote(&self.shown));
        parts.extend(self.args.iter().map(|a| shell_quote(&a.to_string_lossy())));
        parts.join(" ")
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args);
        for (k, v) in &self.envs {
            cmd.env(k, v);
        }
        if let Some(dir) = &self.cwd {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Prints `==> [step] <command>`, runs it with the terminal attached and fails naming the
    /// step when it cannot start or exits unsuccessfully.
    pub(crate) fn run_step(&self, step: &str) -> Result<()> {
        println!("==> [{step}] {}", self.display());
        let status = self
            .command()
            .status()
            .with_context(|| format!("step `{step}` failed: cannot start `{}`", self.display()))?;
        self.check_step(step, status)
    }

    /// Fails naming the step (and the hint) when the command exited unsuccessfully.
    fn check_step(&self, step: &str, status: std::process::ExitStatus) -> Result<()> {
        if !status.success() {
            let code = status
                .code()
                .map_or_else(|| "a signal".to_owned(), |c| c.to_string());
            let mut msg = format!(
                "step `{step}` failed: `{}` exited with {code}",
                self.display()
            );
            if let Some(hint) = &self.hint {
                msg.push_str("\n  hint: ");
                msg.push_str(hint);
            }
            bail!(msg);
        }
        Ok(())
    }

    /// Like [`Cmd::run_step`], but returns what the command wrote to stdout (its stderr still
    /// goes to the terminal): for `cargo ... --message-format json-render-diagnostics`.
    pub(crate) fn stdout_of_step(&self, step: &str) -> Result<String> {
        println!("==> [{step}] {}", self.display());
        let out = self
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .output()
            .with_context(|| format!("step `{step}` failed: cannot start `{}`", self.display()))?;
        self.check_step(step, out.status)?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs the command quietly and captures its output; `None` when it cannot start.
    pub(crate) fn output(&self) -> Option<Output> {
        self.command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .ok()
    }

    /// Runs the command quietly; `Some(stdout)` when it ran and succeeded.
    pub(crate) fn stdout_if_ok(&self) -> Option<String> {
        let out = self.output()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The `executable` of the last `compiler-artifact` message for target `name` of kind `kind`
/// in cargo's JSON messages (one object per line; other lines are skipped).
pub(crate) fn find_executable(messages: &str, name: &str, kind: &str) -> Option<PathBuf> {
    artifacts(messages)
        .filter(|m| m["target"]["name"] == name)
        .filter(|m| {
            m["target"]["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == kind))
        })
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .last()
}

/// The `compiler-artifact` messages in cargo's JSON messages (one object per line; other
/// lines are skipped).
pub(crate) fn artifacts(messages: &str) -> impl Iterator<Item = serde_json::Value> + '_ {
    messages
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["reason"] == "compiler-artifact")
}

/// Quotes `s` for a POSIX shell when it holds anything but plain word characters.
pub(crate) fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// The first executable called `name` in `PATH` (like `which`).
pub(crate) fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_quotes_env_and_args() {
        let cmd = Cmd::cargo()
            .args(["test", "--workspace"])
            .env("POCL_DEVICES", "pthread pthread")
            .env("XPU_REQUIRE_DEVICE", "1");
        assert_eq!(
            cmd.display(),
            "POCL_DEVICES='pthread pthread' XPU_REQUIRE_DEVICE=1 cargo test --workspace"
        );
    }

    #[test]
    fn shell_quote_escapes_single_quotes() {
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
        assert_eq!(shell_quote("-D warnings"), "'-D warnings'");
        assert_eq!(shell_quote("a/b.rs"), "a/b.rs");
    }

    #[test]
    fn which_finds_sh_and_not_nonsense() {
        assert!(which("sh").is_some());
        assert!(which("definitely-not-a-command-xtask").is_none());
    }
}
