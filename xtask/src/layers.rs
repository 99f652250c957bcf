//! `cargo xtask check-layers`: the crate layering and the `unsafe` rules, checked from
//! `cargo metadata` and the sources.
//!
//! Rules:
//! - (a) a layer crate depends (normal and build dependencies) only on layer crates before it
//!   in [`LAYERS`]; its dev-dependencies may also name itself. The [`TOOL_LAYERS`] (benchmarks,
//!   trace replay, the `xpu` command) close the order: no library crate depends on them. Other workspace packages
//!   (xtask) depend on no layer crate, except [`TEST_CRATE`], which depends only on layers up to
//!   [`TEST_CRATE_ABOVE`] and which the layers above it name as a dev-dependency only.
//! - (b) only [`UNSAFE_CRATE`] depends on the OpenCL bindings ([`FFI_CRATES`]).
//! - (c) only [`UNSAFE_CRATE`] contains `unsafe`; every other crate root has
//!   `#![forbid(unsafe_code)]`.
//! - (d) every `unsafe {` block and `unsafe impl` in [`UNSAFE_CRATE`] has a `// SAFETY:`
//!   comment within the [`SAFETY_WINDOW`] lines above it (or a comment block reaching them).
//! - (e) the exception to (c): the [`UNSAFE_CALLER_CRATES`] (the launch layer, whose
//!   `Launch::enqueue` must be an `unsafe fn` because a kernel is arbitrary code, and the
//!   burn backend, whose kernels are launched through it) may hold
//!   `unsafe fn` declarations, each documented with a `# Safety` section, and `unsafe {}`
//!   blocks, each with a `// SAFETY:` comment as in (d), that call the unsafe API of
//!   [`UNSAFE_CRATE`]; nothing else unsafe (no `unsafe impl`/`trait`/`extern`, no `extern`
//!   blocks), no OpenCL bindings (b), and the crate root says `#![deny(unsafe_code)]` so that
//!   every such item also carries an `#[allow(unsafe_code)]`.
//! - (f) the exception to (c) for users of xpu's unsafe API: the files under the `examples/`
//!   directory of [`FACADE_CRATE`] (never its `src/` or `tests/`), under the `benches/`
//!   directory of any crate (but [`UNSAFE_CRATE`] and the [`UNSAFE_CALLER_CRATES`], which
//!   have rules (d) and (e)), and every file of the [`TOOL_CRATES`] may hold `unsafe {}`
//!   blocks, each with a `// SAFETY:` comment as in (d): a user launches a kernel with
//!   `unsafe { stream.launch(..)...enqueue() }`, and an example can show a foreign C library
//!   (loaded at run time) on xpu's streams and memory. Nothing else unsafe there (no
//!   `unsafe fn`/`impl`/`trait`, no `extern` blocks: such a library's entry points are
//!   function pointers (`unsafe extern "C" fn(..)` types) loaded at run time), no OpenCL
//!   bindings (b), and a tool crate's roots say `#![deny(unsafe_code)]` so that each item
//!   holding such a block also carries an `#[allow(unsafe_code)]`.
//! - (g) no import circles between the modules of a crate's `src/`, except the handle/owner
//!   pairs of [`imports::ALLOWED_CIRCLES`] (see [`imports`]).

mod imports;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::cmd::Cmd;
use source::Line;

/// The layer crates, lowest first: each may depend only on crates before it. The library
/// crates come first, the [`TOOL_LAYERS`] last, so that no library crate may depend on a tool.
pub(crate) const LAYERS: [&str; 13] = [
    "xpu-caching",
    "xpu-device",
    "xpu-stream",
    "xpu-event",
    "xpu-host",
    "xpu-alloc",
    "xpu-kernel",
    "xpu-lazy",
    "xpu",
    "xpu-burn",
    "xpu-bench",
    "xpu-replay",
    "xpu-cli",
];

/// The tool crates, the end of [`LAYERS`]: users of the runtime (benchmarks, trace replay, the
/// `xpu` command) that may depend on any library crate and on which no library crate depends.
pub(crate) const TOOL_LAYERS: [&str; 3] = ["xpu-bench", "xpu-replay", "xpu-cli"];

/// The test-support crate: it depends (normally) only on layers up to [`TEST_CRATE_ABOVE`],
/// and layer crates above that may name it under `[dev-dependencies]` only.
pub(crate) const TEST_CRATE: &str = "xpu-testing";

/// The highest layer [`TEST_CRATE`] may depend on.
pub(crate) const TEST_CRATE_ABOVE: &str = "xpu-device";

/// The one crate allowed to contain `unsafe` code and to use the OpenCL bindings.
pub(crate) const UNSAFE_CRATE: &str = "xpu-device";

/// Crates that may declare `unsafe fn`s and call the unsafe API of [`UNSAFE_CRATE`] from
/// `unsafe {}` blocks, nothing more (rule (e)).
pub(crate) const UNSAFE_CALLER_CRATES: [&str; 2] = ["xpu-kernel", "xpu-burn"];

/// The facade crate, whose examples may hold commented `unsafe {}` blocks (rule (f)).
pub(crate) const FACADE_CRATE: &str = "xpu";

/// The tool crates that launch kernels (benchmarks, the `xpu` command), users of the runtime
/// whose every file may hold commented `unsafe {}` blocks calling xpu's `unsafe fn`s, nothing
/// more (rule (f)). The other tool crate, xpu-replay, calls no unsafe API: rule (c) holds it
/// (no `unsafe`, `#![forbid(unsafe_code)]`).
pub(crate) const TOOL_CRATES: [&str; 2] = ["xpu-bench", "xpu-cli"];

/// The OpenCL binding crates.
pub(crate) const FFI_CRATES: [&str; 3] = ["opencl3", "cl3", "opencl-sys"];

/// How many lines above an `unsafe` block its `// SAFETY:` comment may start.
pub(crate) const SAFETY_WINDOW: usize = 3;

/// The directories of a package whose `.rs` files are scanned (plus `build.rs`).
const SOURCE_DIRS: [&str; 4] = ["src", "tests", "benches", "examples"];

/// The kind of a dependency, as `cargo metadata` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DepKind {
    Normal,
    Dev,
    Build,
}

impl DepKind {
    fn section(self) -> &'static str {
        match self {
            DepKind::Normal => "dependencies",
            DepKind::Dev => "dev-dependencies",
            DepKind::Build => "build-dependencies",
        }
    }
}

/// One dependency of a workspace package.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dep {
    pub(crate) name: String,
    pub(crate) kind: DepKind,
}

/// A workspace package, as far as the rules need it.
#[derive(Debug, Clone)]
pub(crate) struct Package {
    pub(crate) name: String,
    /// The manifest path, relative to the workspace root when it lies inside.
    pub(crate) manifest: PathBuf,
    pub(crate) deps: Vec<Dep>,
    /// Library / binary crate roots, relative to the workspace root when inside it.
    pub(crate) roots: Vec<PathBuf>,
}

impl Package {
    fn dir(&self) -> &Path {
        self.manifest.parent().unwrap_or(Path::new(""))
    }
}

/// A broken rule: the crate, where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) krate: String,
    pub(crate) location: String,
    pub(crate) message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.krate, self.location, self.message)
    }
}

/// Runs every rule on the workspace at `root`; fails listing each violation.
pub(crate) fn check(root: &Path) -> Result<()> {
    let metadata = metadata(root)?;
    let packages = parse_metadata(&metadata, root)?;
    let mut violations = check_dependencies(&packages, |p| read(root, p));
    for package in &packages {
        violations.extend(check_package_sources(root, package)?);
        violations.extend(check_package_imports(root, package)?);
    }
    if violations.is_empty() {
        println!(
            "check-layers: ok ({} packages; order {}; only {UNSAFE_CRATE} uses OpenCL and unsafe; \
             {} only call its unsafe API; {}, benches and {FACADE_CRATE}'s examples hold \
             commented unsafe blocks only; no module import circles)",
            packages.len(),
            LAYERS.join(" < "),
            UNSAFE_CALLER_CRATES.join(", "),
            TOOL_CRATES.join(", ")
        );
        return Ok(());
    }
    for v in &violations {
        eprintln!("check-layers: {v}");
    }
    let mut crates: Vec<&str> = Vec::new();
    for v in &violations {
        if !crates.contains(&v.krate.as_str()) {
            crates.push(&v.krate);
        }
    }
    bail!(
        "check-layers found {} violation(s) in {}; first: {}",
        violations.len(),
        crates.join(", "),
        violations[0]
    )
}

/// `cargo metadata --format-version 1 --no-deps` for the workspace at `root`.
pub(crate) fn metadata(root: &Path) -> Result<Value> {
    let cmd = Cmd::cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root);
    let out = cmd
        .output()
        .with_context(|| format!("cannot run `{}`", cmd.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` failed:\n{}",
            cmd.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    serde_json::from_slice(&out.stdout).context("cargo metadata printed invalid JSON")
}

fn read(root: &Path, rel: &Path) -> Option<String> {
    std::fs::read_to_string(root.join(rel)).ok()
}

fn relative(path: &Path, root: &Path) -> PathBuf {
    path.strip_prefix(root).unwrap_or(path).to_path_buf()
}

/// The workspace packages of `cargo metadata` output, paths made relative to `root`.
pub(crate) fn parse_metadata(metadata: &Value, root: &Path) -> Result<Vec<Package>> {
    let packages = metadata["packages"]
        .as_array()
        .context("cargo metadata has no `packages` array")?;
    packages
        .iter()
        .map(|p| {
            let name = p["name"].as_str().context("package without a name")?;
            let manifest = p["manifest_path"]
                .as_str()
                .with_context(|| format!("package {name} has no manifest_path"))?;
            let deps = p["dependencies"]
                .as_array()
                .map(|deps| deps.iter().filter_map(parse_dep).collect())
                .unwrap_or_default();
            let roots = p["targets"]
                .as_array()
                .map(|targets| targets.iter().filter_map(crate_root).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .map(|r| relative(&r, root))
                .collect();
            Ok(Package {
                name: name.to_owned(),
                manifest: relative(Path::new(manifest), root),
                deps,
                roots,
            })
        })
        .collect()
}

fn parse_dep(dep: &Value) -> Option<Dep> {
    let kind = match dep["kind"].as_str() {
        None => DepKind::Normal,
        Some("dev") => DepKind::Dev,
        Some("build") => DepKind::Build,
        Some(_) => return None,
    };
    Some(Dep {
        name: dep["name"].as_str()?.to_owned(),
        kind,
    })
}

/// The source path of a library or binary target (not tests, benches, examples, build.rs).
fn crate_root(target: &Value) -> Option<PathBuf> {
    let kinds = target["kind"].as_array()?;
    let is_root = kinds.iter().filter_map(Value::as_str).any(|k| {
        matches!(
            k,
            "lib" | "rlib" | "dylib" | "cdylib" | "staticlib" | "proc-macro" | "bin"
        )
    });
    is_root.then(|| PathBuf::from(target["src_path"].as_str().unwrap_or_default()))
}

fn layer_index(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// Rules (a) and (b). `manifest_text` gives a manifest's text (for line numbers).
pub(crate) fn check_dependencies(
    packages: &[Package],
    manifest_text: impl Fn(&Path) -> Option<String>,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for layer in LAYERS {
        if !packages.iter().any(|p| p.name == layer) {
            out.push(Violation {
                krate: layer.to_owned(),
                location: "Cargo.toml".to_owned(),
                message: format!(
                    "layer crate {layer} is not a workspace member (order: {})",
                    LAYERS.join(" < ")
                ),
            });
        }
    }
    for p in packages {
        let text = manifest_text(&p.manifest);
        let at = |dep: &Dep| {
            let line = text.as_deref().and_then(|t| manifest_line(t, dep));
            match line {
                Some(n) => format!("{}:{n}", p.manifest.display()),
                None => p.manifest.display().to_string(),
            }
        };
        for dep in &p.deps {
            if FFI_CRATES.contains(&dep.name.as_str()) && p.name != UNSAFE_CRATE {
                out.push(Violation {
                    krate: p.name.clone(),
                    location: at(dep),
                    message: format!(
                        "depends on {} ({}); only {UNSAFE_CRATE} may use the OpenCL bindings",
                        dep.name,
                        dep.kind.section()
                    ),
                });
            }
            let above = layer_index(TEST_CRATE_ABOVE);
            if dep.name == TEST_CRATE {
                let message = if dep.kind != DepKind::Dev {
                    Some(format!(
                        "depends on {TEST_CRATE} ({}); test support is a dev-dependency only",
                        dep.kind.section()
                    ))
                } else if layer_index(&p.name).is_some_and(|own| Some(own) <= above) {
                    Some(format!(
                        "depends on {TEST_CRATE} (dev-dependencies), which depends on it"
                    ))
                } else {
                    None
                };
                if let Some(message) = message {
                    out.push(Violation {
                        krate: p.name.clone(),
                        location: at(dep),
                        message,
                    });
                }
                continue;
            }
            let Some(dep_index) = layer_index(&dep.name) else {
                continue;
            };
            if p.name == TEST_CRATE {
                if Some(dep_index) > above {
                    out.push(Violation {
                        krate: p.name.clone(),
                        location: at(dep),
                        message: format!(
                            "depends on {} ({}); {TEST_CRATE} may depend only on layers up to \
                             {TEST_CRATE_ABOVE}",
                            dep.name,
                            dep.kind.section()
                        ),
                    });
                }
                continue;
            }
            let message = match layer_index(&p.name) {
                Some(own) => {
                    let allowed = match dep.kind {
                        DepKind::Dev => dep_index <= own,
                        DepKind::Normal | DepKind::Build => dep_index < own,
                    };
                    let library_on_tool = TOOL_LAYERS.contains(&dep.name.as_str())
                        && !TOOL_LAYERS.contains(&p.name.as_str());
                    (!allowed).then(|| {
                        if library_on_tool {
                            format!(
                                "depends on {} ({}), a tool crate ({}); no library crate may \
                                 depend on a tool",
                                dep.name,
                                dep.kind.section(),
                                TOOL_LAYERS.join(", ")
                            )
                        } else {
                            format!(
                                "depends on {} ({}), which is not before it in the layer order {}",
                                dep.name,
                                dep.kind.section(),
                                LAYERS.join(" < ")
                            )
                        }
                    })
                }
                None => Some(format!(
                    "depends on the layer crate {} ({}); packages outside the layers ({}) \
                     must not depend on them",
                    dep.name,
                    dep.kind.section(),
                    p.name
                )),
            };
            if let Some(message) = message {
                out.push(Violation {
                    krate: p.name.clone(),
                    location: at(dep),
                    message,
                });
            }
        }
    }
    out
}

/// The 1-based line of `dep` in its section of a manifest, best effort.
pub(crate) fn manifest_line(manifest: &str, dep: &Dep) -> Option<usize> {
    let wanted = dep.kind.section();
    let mut in_section = false;
    for (i, line) in manifest.lines().enumerate() {
        let t = line.trim();
        if let Some(header) = t.strip_prefix('[').and_then(|h| h.split(']').next()) {
            let header = header.trim();
            if header == format!("{wanted}.{}", dep.name) {
                return Some(i + 1);
            }
            in_section = header == wanted || header.ends_with(&format!(".{wanted}"));
            continue;
        }
        if in_section {
            if let Some(rest) = t.strip_prefix(dep.name.as_str()) {
                if rest.starts_with([' ', '=', '.']) {
                    return Some(i + 1);
                }
            }
        }
    }
    None
}

/// Rules (c) and (d) for the files of one package read from disk.
fn check_package_sources(root: &Path, package: &Package) -> Result<Vec<Violation>> {
    let mut files = Vec::new();
    for dir in SOURCE_DIRS {
        collect_rs_files(root, &package.dir().join(dir), &mut files)?;
    }
    let build_rs = package.dir().join("build.rs");
    if root.join(&build_rs).is_file() {
        files.push(build_rs);
    }
    for r in &package.roots {
        if !files.contains(r) {
            files.push(r.clone());
        }
    }
    files.sort();
    let mut out = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(root.join(file))
            .with_context(|| format!("cannot read {}", file.display()))?;
        let is_root = package.roots.contains(file);
        out.extend(check_source(
            &package.name,
            &file.display().to_string(),
            &text,
            is_root,
        ));
    }
    Ok(out)
}

/// Rule (g) for the `src/` files of one package read from disk.
fn check_package_imports(root: &Path, package: &Package) -> Result<Vec<Violation>> {
    let src = package.dir().join("src");
    let mut paths = Vec::new();
    collect_rs_files(root, &src, &mut paths)?;
    paths.sort();
    let mut files = Vec::new();
    for path in &paths {
        let rel = path.strip_prefix(&src).unwrap_or(path);
        let Some(module) = imports::module_of(&rel.to_string_lossy()) else {
            continue;
        };
        let text = std::fs::read_to_string(root.join(path))
            .with_context(|| format!("cannot read {}", path.display()))?;
        files.push((module, text));
    }
    Ok(import_violations(&package.name, &files))
}

/// Rule (g) for the files (module path, text) of crate `krate`.
pub(crate) fn import_violations(krate: &str, files: &[(String, String)]) -> Vec<Violation> {
    let edges = imports::edges(files);
    imports::circles(krate, &edges)
        .into_iter()
        .map(|set| Violation {
            krate: krate.to_owned(),
            location: "src".to_owned(),
            message: format!(
                "import circle between modules {} (break it so data flows one way, or allow a \
                 handle/owner pair in xtask's ALLOWED_CIRCLES)",
                set.join(", ")
            ),
        })
        .collect()
}

fn collect_rs_files(root: &Path, rel_dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(root.join(rel_dir)) else {
        return Ok(());
    };
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot list {}", rel_dir.display()))?;
        let rel = rel_dir.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect_rs_files(root, &rel, out)?;
        } else if rel.extension().is_some_and(|e| e == "rs") {
            out.push(rel);
        }
    }
    Ok(())
}

/// Rules (c) and (d) for one file of crate `krate`; `is_root` for a lib / bin crate root.
pub(crate) fn check_source(krate: &str, file: &str, text: &str, is_root: bool) -> Vec<Violation> {
    let lines = source::split(text);
    let violation = |line: usize, message: String| Violation {
        krate: krate.to_owned(),
        location: format!("{file}:{line}"),
        message,
    };
    let mut out = Vec::new();
    if UNSAFE_CALLER_CRATES.contains(&krate) {
        for (i, line) in lines.iter().enumerate() {
            for pos in source::word_positions(&line.code, "extern") {
                let rest = line.code[pos + "extern".len()..].trim_start();
                if rest.starts_with(['"', '{']) {
                    out.push(violation(
                        i + 1,
                        format!("`extern` block in {krate}: only {UNSAFE_CRATE} may declare FFI"),
                    ));
                }
            }
            for pos in source::word_positions(&line.code, "unsafe") {
                let rest = next_code(&lines, i, pos);
                if rest.starts_with('{') {
                    if !has_safety_comment(&lines, i) {
                        out.push(violation(
                            i + 1,
                            format!(
                                "`unsafe` block without a `// SAFETY:` comment in the \
                                 {SAFETY_WINDOW} lines above it"
                            ),
                        ));
                    }
                } else if source::word_positions(rest, "fn").first() == Some(&0) {
                    if !has_safety_doc(&lines, i) {
                        out.push(violation(
                            i + 1,
                            "`unsafe fn` without a `# Safety` section in its doc comment"
                                .to_owned(),
                        ));
                    }
                } else {
                    out.push(violation(
                        i + 1,
                        format!(
                            "`unsafe` item in {krate}: only `unsafe fn` and `unsafe {{}}` blocks \
                             calling {UNSAFE_CRATE}'s unsafe API are allowed here"
                        ),
                    ));
                }
            }
        }
        if is_root && !source::unsafe_code_lint_is(&lines, "deny") {
            out.push(violation(
                1,
                "crate root lacks `#![deny(unsafe_code)]`".to_owned(),
            ));
        }
        return out;
    }
    if may_hold_commented_unsafe_blocks(krate, file) {
        for (i, line) in lines.iter().enumerate() {
            for pos in source::word_positions(&line.code, "extern") {
                let rest = line.code[pos + "extern".len()..].trim_start();
                if rest.starts_with(['"', '{']) && !is_fn_pointer_type(&line.code[pos..]) {
                    out.push(violation(
                        i + 1,
                        format!(
                            "`extern` block in {}: load the library at run time",
                            place(krate, file)
                        ),
                    ));
                }
            }
            for pos in source::word_positions(&line.code, "unsafe") {
                let rest = next_code(&lines, i, pos);
                if is_fn_pointer_type(rest) {
                    continue;
                }
                if !rest.starts_with('{') {
                    out.push(violation(
                        i + 1,
                        format!(
                            "`unsafe` item in {}: only commented `unsafe {{}}` blocks are allowed \
                             there",
                            place(krate, file)
                        ),
                    ));
                } else if !has_safety_comment(&lines, i) {
                    out.push(violation(
                        i + 1,
                        format!(
                            "`unsafe` block without a `// SAFETY:` comment in the \
                             {SAFETY_WINDOW} lines above it"
                        ),
                    ));
                }
            }
        }
        if is_root
            && !source::unsafe_code_lint_is(&lines, "deny")
            && !source::unsafe_code_lint_is(&lines, "forbid")
        {
            out.push(violation(
                1,
                "crate root lacks `#![deny(unsafe_code)]`".to_owned(),
            ));
        }
        return out;
    }
    if krate != UNSAFE_CRATE {
        for (i, line) in lines.iter().enumerate() {
            if !source::word_positions(&line.code, "unsafe").is_empty() {
                out.push(violation(
                    i + 1,
                    format!(
                        "`unsafe` outside {UNSAFE_CRATE}: only {UNSAFE_CRATE} may hold unsafe code"
                    ),
                ));
            }
        }
        if is_root && !source::unsafe_code_lint_is(&lines, "forbid") {
            out.push(violation(
                1,
                "crate root lacks `#![forbid(unsafe_code)]`".to_owned(),
            ));
        }
        return out;
    }
    for (i, line) in lines.iter().enumerate() {
        for pos in source::word_positions(&line.code, "unsafe") {
            let Some(what) = unsafe_item(&lines, i, pos) else {
                continue;
            };
            if !has_safety_comment(&lines, i) {
                out.push(violation(
                    i + 1,
                    format!(
                        "`unsafe` {what} without a `// SAFETY:` comment in the {SAFETY_WINDOW} \
                         lines above it"
                    ),
                ));
            }
        }
    }
    out
}

/// Whether `code` starts a function pointer type (`fn(`, `extern "C" fn(`), the type of a
/// symbol loaded at run time, not an item.
fn is_fn_pointer_type(code: &str) -> bool {
    let mut rest = code.trim_start();
    if let Some(r) = rest.strip_prefix("extern") {
        rest = r.trim_start();
        if let Some(r) = rest.strip_prefix('"') {
            rest = r
                .split_once('"')
                .map_or("", |(_, after)| after)
                .trim_start();
        }
    }
    rest.strip_prefix("fn")
        .is_some_and(|r| r.trim_start().starts_with('('))
}

/// Rule (f): whether `file` of crate `krate` may hold commented `unsafe {}` blocks: any file
/// of a [`TOOL_CRATES`] crate, the facade's examples, and benches (of the crates that rules
/// (d) and (e) do not cover).
fn may_hold_commented_unsafe_blocks(krate: &str, file: &str) -> bool {
    TOOL_CRATES.contains(&krate)
        || (krate == FACADE_CRATE && target_dir(file) == Some("examples"))
        || (krate != UNSAFE_CRATE
            && !UNSAFE_CALLER_CRATES.contains(&krate)
            && target_dir(file) == Some("benches"))
}

/// Where rule (f) allows commented `unsafe {}` blocks in `file` of crate `krate`, for messages.
fn place(krate: &str, file: &str) -> String {
    match target_dir(file) {
        Some(dir @ ("examples" | "benches")) if !TOOL_CRATES.contains(&krate) => {
            format!("the {dir} of {krate}")
        }
        _ => krate.to_owned(),
    }
}

/// The target directory of a package that `file` (a path relative to the workspace root or to
/// the package) lies in: its first `src`, `tests`, `benches` or `examples` component.
fn target_dir(file: &str) -> Option<&str> {
    Path::new(file)
        .components()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| matches!(*c, "src" | "tests" | "benches" | "examples"))
}

/// `Some("block")` or `Some("impl")` when the `unsafe` at `lines[i].code[pos..]` opens a block
/// or an impl; `None` for `unsafe fn`, `unsafe trait`, `unsafe extern`.
fn unsafe_item(lines: &[Line], i: usize, pos: usize) -> Option<&'static str> {
    let rest = next_code(lines, i, pos);
    if rest.starts_with('{') {
        Some("block")
    } else if source::word_positions(rest, "impl").first() == Some(&0) {
        Some("impl")
    } else {
        None
    }
}

/// The code after the `unsafe` at `lines[i].code[pos..]`, on the next non-empty line when
/// nothing follows it on its own.
fn next_code(lines: &[Line], i: usize, pos: usize) -> &str {
    let rest = lines[i].code[pos + "unsafe".len()..].trim_start();
    if rest.is_empty() {
        lines[i + 1..]
            .iter()
            .map(|l| l.code.trim_start())
            .find(|c| !c.is_empty())
            .unwrap_or("")
    } else {
        rest
    }
}

/// Whether the doc comment and attributes right above line `i` (an `unsafe fn`) hold a
/// `# Safety` section.
fn has_safety_doc(lines: &[Line], i: usize) -> bool {
    lines[..i]
        .iter()
        .rev()
        .take_while(|l| l.is_comment_only() || l.code.trim_start().starts_with("#["))
        .any(|l| l.comment.contains("# Safety"))
}

/// Whether a comment holding `SAFETY:` sits in the [`SAFETY_WINDOW`] lines above line `i`, or
/// in a comment block that reaches into that window.
fn has_safety_comment(lines: &[Line], i: usize) -> bool {
    let mut top = i.saturating_sub(SAFETY_WINDOW);
    while top > 0 && lines[top - 1].is_comment_only() && lines[top].is_comment_only() {
        top -= 1;
    }
    lines[top..i].iter().any(|l| l.comment.contains("SAFETY:"))
}

#[cfg(test)]
mod tests;
