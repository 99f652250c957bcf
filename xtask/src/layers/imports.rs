//! Rule (g): no import circles between the modules of a crate, except the allowed
//! handle/owner pairs ([`ALLOWED_CIRCLES`]).
//!
//! A module's imports are the `crate::..` and `super::..` paths in its code (`use` items
//! and inline paths; comments, string contents and `#[cfg(test)]` modules excluded), each
//! resolved to the longest module path it names. A module using its own ancestor or
//! descendant is ownership, not an import between modules, and is not counted. A circle is
//! a strongly connected set of two or more modules.

use std::collections::{BTreeMap, BTreeSet};

use super::source;

/// Module pairs of one crate that may import each other: a handle and its owner
/// (crate, module, module), in either order.
pub(crate) const ALLOWED_CIRCLES: [(&str, &str, &str); 4] = [
    // `HostPtr` (ptr) is the handle of a block of the pinned-host allocator (allocator).
    ("xpu-host", "allocator", "ptr"),
    // `Function` (function) is a handle on a kernel of its built program (program).
    ("xpu-kernel", "program", "function"),
    // `Stream` (stream) is a handle whose queue lives in the device's pool (native streams)
    // or in the external-stream registry, which hand out the handles.
    ("xpu-stream", "stream", "pool"),
    ("xpu-stream", "stream", "external"),
];

/// The module path of a source file under `src/` (`lib.rs`/`main.rs` is the root, `""`);
/// `None` for a file outside the module tree (`src/bin/..`).
pub(crate) fn module_of(rel: &str) -> Option<String> {
    let rel = rel.strip_suffix(".rs")?;
    if rel.starts_with("bin/") {
        return None;
    }
    if rel == "lib" || rel == "main" {
        return Some(String::new());
    }
    let rel = rel.strip_suffix("/mod").unwrap_or(rel);
    Some(rel.replace('/', "::"))
}

/// The code of `text` without comments, string contents and inline `#[cfg(test)]` modules,
/// and the names of the file modules it declares under `#[cfg(test)]`.
fn code_without_tests(text: &str) -> (String, Vec<String>) {
    let code: String = source::split(text)
        .into_iter()
        .map(|l| l.code)
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut test_files = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "#[cfg(test)]".len()..];
        let Some((name, body)) = test_module(after) else {
            out.push_str("#[cfg(test)]");
            rest = after;
            continue;
        };
        if let Some(after_decl) = body.strip_prefix(';') {
            test_files.push(name);
            rest = after_decl;
        } else {
            rest = skip_block(body);
        }
    }
    out.push_str(rest);
    (out, test_files)
}

/// After `#[cfg(test)]`: the module's name and the text from its `;` or `{`, when the
/// attribute is on a module (other attributes and `pub(..)` may come between).
fn test_module(after: &str) -> Option<(String, &str)> {
    let mut s = after.trim_start();
    while s.starts_with("#[") {
        s = s[s.find(']')? + 1..].trim_start();
    }
    if let Some(vis) = s.strip_prefix("pub") {
        s = vis.trim_start();
        if s.starts_with('(') {
            s = s[s.find(')')? + 1..].trim_start();
        }
    }
    let s = s.strip_prefix("mod")?;
    if !s.starts_with(char::is_whitespace) {
        return None;
    }
    let s = s.trim_start();
    let end = s.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
    let body = s[end..].trim_start();
    (body.starts_with(';') || body.starts_with('{')).then(|| (s[..end].to_owned(), body))
}

/// The text after the block that `s` opens with `{`.
fn skip_block(s: &str) -> &str {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return &s[i + 1..];
                }
            }
            _ => {}
        }
    }
    ""
}

/// The paths (as segments) that `code` names from `crate::` or `super::`, relative to
/// module `module` (segments of the current module): each resolved to an absolute path.
fn paths_in(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let start_ok = i == 0 || {
            let p = chars[i - 1];
            !(p.is_alphanumeric() || p == '_' || p == ':' || p == '$')
        };
        let word = ["crate::", "super::"]
            .into_iter()
            .find(|w| start_ok && starts_with(&chars, i, w));
        let Some(word) = word else {
            i += 1;
            continue;
        };
        let mut base: Vec<String> = Vec::new();
        let mut j = i;
        if word == "crate::" {
            j += word.len();
        } else {
            base = module.to_vec();
            while starts_with(&chars, j, "super::") {
                base.pop();
                j += "super::".len();
            }
        }
        j = parse_tree(&chars, j, base, &mut out);
        i = j.max(i + 1);
    }
    out
}

fn starts_with(chars: &[char], i: usize, w: &str) -> bool {
    w.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

/// Parses a path tail (`a::b`, `a::{b, c::d}`, `self`) at `i` with prefix `base`, pushing
/// each full path to `out`; returns the index after it.
fn parse_tree(
    chars: &[char],
    mut i: usize,
    mut base: Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        if chars.get(i) == Some(&'{') {
            i += 1;
            loop {
                while chars.get(i).is_some_and(|c| c.is_whitespace() || *c == ',') {
                    i += 1;
                }
                match chars.get(i) {
                    None => return i,
                    Some('}') => return i + 1,
                    _ => {}
                }
                let before = i;
                i = parse_tree(chars, i, base.clone(), out);
                if i == before {
                    i += 1;
                }
            }
        }
        let start = i;
        while chars
            .get(i)
            .is_some_and(|c| c.is_alphanumeric() || *c == '_')
        {
            i += 1;
        }
        if i > start {
            let seg: String = chars[start..i].iter().collect();
            if seg != "self" {
                base.push(seg);
            }
        }
        if i > start && starts_with(chars, i, "::") {
            i += 2;
            continue;
        }
        out.push(base);
        return i;
    }
}

/// The import edges between modules of one crate, from its files (module path, text).
pub(crate) fn edges(files: &[(String, String)]) -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<&str> = files.iter().map(|(m, _)| m.as_str()).collect();
    let parsed: Vec<(&str, String, Vec<String>)> = files
        .iter()
        .map(|(m, text)| {
            let (code, tests) = code_without_tests(text);
            (m.as_str(), code, tests)
        })
        .collect();
    let test_modules: Vec<String> = parsed
        .iter()
        .flat_map(|(m, _, tests)| tests.iter().map(move |t| join(m, t)))
        .collect();
    let is_test = |m: &str| {
        test_modules
            .iter()
            .any(|t| m == t || m.starts_with(&format!("{t}::")))
    };
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code, _) in &parsed {
        if is_test(module) {
            continue;
        }
        let segments: Vec<String> = if module.is_empty() {
            Vec::new()
        } else {
            module.split("::").map(str::to_owned).collect()
        };
        for path in paths_in(code, &segments) {
            let target = (0..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|p| modules.contains(p.as_str()))
                .unwrap_or_default();
            if is_test(&target) || related(module, &target) {
                continue;
            }
            out.entry((*module).to_owned()).or_default().insert(target);
        }
    }
    out
}

fn join(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_owned()
    } else {
        format!("{parent}::{child}")
    }
}

/// Whether one module is the other or an ancestor of it.
fn related(a: &str, b: &str) -> bool {
    let under = |x: &str, y: &str| y.is_empty() || x == y || x.starts_with(&format!("{y}::"));
    under(a, b) || under(b, a)
}

/// The circles (strongly connected sets of two or more modules, sorted) of `edges`, once
/// the edges between the pairs of `krate` in [`ALLOWED_CIRCLES`] are left out.
pub(crate) fn circles(krate: &str, edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let allowed = |a: &str, b: &str| {
        ALLOWED_CIRCLES
            .iter()
            .any(|&(k, x, y)| k == krate && ((a == x && b == y) || (a == y && b == x)))
    };
    let edges: BTreeMap<&str, Vec<&str>> = edges
        .iter()
        .map(|(a, bs)| {
            let to = bs
                .iter()
                .map(String::as_str)
                .filter(|b| !allowed(a, b))
                .collect();
            (a.as_str(), to)
        })
        .collect();
    let nodes: BTreeSet<&str> = edges
        .iter()
        .flat_map(|(a, bs)| std::iter::once(*a).chain(bs.iter().copied()))
        .collect();
    let reaches = |from: &str| {
        let mut seen: BTreeSet<&str> = BTreeSet::new();
        let mut stack = vec![from];
        while let Some(n) = stack.pop() {
            for &next in edges.get(n).into_iter().flatten() {
                if seen.insert(next) {
                    stack.push(next);
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&str, BTreeSet<&str>> = nodes.iter().map(|&n| (n, reaches(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut done: BTreeSet<&str> = BTreeSet::new();
    for &n in &nodes {
        if done.contains(n) {
            continue;
        }
        let set: Vec<&str> = nodes
            .iter()
            .copied()
            .filter(|&m| m == n || (reach[n].contains(m) && reach[m].contains(n)))
            .collect();
        done.extend(set.iter().copied());
        if set.len() > 1 {
            out.push(set.into_iter().map(str::to_owned).collect());
        }
    }
    out
}
