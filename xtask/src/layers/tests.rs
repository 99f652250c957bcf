//! Tests of the layer rules on small in-memory inputs.

use super::*;
use serde_json::json;

fn package(name: &str, deps: &[(&str, DepKind)]) -> Package {
    let dir = if name == "xtask" {
        "xtask".to_owned()
    } else {
        format!("crates/{name}")
    };
    Package {
        name: name.to_owned(),
        manifest: PathBuf::from(format!("{dir}/Cargo.toml")),
        deps: deps
            .iter()
            .map(|&(n, kind)| Dep {
                name: n.to_owned(),
                kind,
            })
            .collect(),
        roots: vec![PathBuf::from(format!("{dir}/src/lib.rs"))],
    }
}

/// Each violation as (crate, message).
fn by_crate(v: &[Violation]) -> Vec<(&str, &str)> {
    v.iter()
        .map(|v| (v.krate.as_str(), v.message.as_str()))
        .collect()
}

/// Each violation as (location, message).
fn by_location(v: &[Violation]) -> Vec<(&str, &str)> {
    v.iter()
        .map(|v| (v.location.as_str(), v.message.as_str()))
        .collect()
}

/// The intended workspace: each layer depends on the one below it.
fn good_workspace() -> Vec<Package> {
    let mut packages = vec![package(
        "xpu-device",
        &[("opencl3", DepKind::Normal), ("thiserror", DepKind::Normal)],
    )];
    // The backend-independent caching crate (first layer) depends on no layer crate.
    for pair in LAYERS.windows(2).filter(|pair| pair[0] != "xpu-caching") {
        packages.push(package(
            pair[1],
            &[(pair[0], DepKind::Normal), (pair[1], DepKind::Dev)],
        ));
    }
    packages.push(package("xpu-caching", &[("thiserror", DepKind::Normal)]));
    packages.push(package("xtask", &[("anyhow", DepKind::Normal)]));
    packages
}

fn dep(name: &str, kind: DepKind) -> Dep {
    Dep {
        name: name.to_owned(),
        kind,
    }
}

fn no_manifest(_: &Path) -> Option<String> {
    None
}

#[test]
fn the_intended_layering_passes() {
    assert_eq!(check_dependencies(&good_workspace(), no_manifest), vec![]);
}

#[test]
fn the_caching_crate_depends_on_no_device_crate() {
    let mut ws = good_workspace();
    let caching = ws.iter().position(|p| p.name == "xpu-caching").unwrap();
    ws[caching].deps.push(dep("xpu-device", DepKind::Normal));
    ws[caching].deps.push(dep("opencl3", DepKind::Normal));
    let v = check_dependencies(&ws, no_manifest);
    let named = by_crate(&v);
    assert_eq!(named.len(), 2, "{v:?}");
    assert!(
        named.iter().all(|(krate, _)| *krate == "xpu-caching"),
        "{v:?}"
    );
    assert!(named[0].1.starts_with("depends on xpu-device"), "{v:?}");
}

#[test]
fn a_dependency_on_a_later_layer_is_named() {
    let mut ws = good_workspace();
    ws[1].deps.push(Dep {
        name: "xpu-event".to_owned(),
        kind: DepKind::Normal,
    });
    let manifest = "[package]\nname = \"xpu-stream\"\n\n[dependencies]\n\
                    xpu-device.workspace = true\nxpu-event = { workspace = true }\n";
    let v = check_dependencies(&ws, |p| {
        (p == Path::new("crates/xpu-stream/Cargo.toml")).then(|| manifest.to_owned())
    });
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].krate, "xpu-stream");
    assert_eq!(v[0].location, "crates/xpu-stream/Cargo.toml:6");
    assert!(v[0]
        .message
        .starts_with("depends on xpu-event (dependencies), which is not before it"));
}

#[test]
fn the_tool_crates_close_the_layer_order() {
    assert_eq!(LAYERS[LAYERS.len() - TOOL_LAYERS.len()..], TOOL_LAYERS);
}

#[test]
fn no_library_crate_may_depend_on_a_tool_crate() {
    let mut ws = good_workspace();
    let at = |ws: &[Package], name: &str| ws.iter().position(|p| p.name == name).unwrap();
    // The replay tool may use the allocator, and the command the replay tool.
    let (replay, cli) = (at(&ws, "xpu-replay"), at(&ws, "xpu-cli"));
    ws[replay].deps.push(dep("xpu-alloc", DepKind::Normal));
    ws[cli].deps.push(dep("xpu-replay", DepKind::Normal));
    assert_eq!(check_dependencies(&ws, no_manifest), vec![]);
    // No library crate may use it, not even in its tests.
    let (alloc, facade) = (at(&ws, "xpu-alloc"), at(&ws, "xpu"));
    ws[alloc].deps.push(dep("xpu-replay", DepKind::Normal));
    ws[facade].deps.push(dep("xpu-replay", DepKind::Dev));
    let v = check_dependencies(&ws, no_manifest);
    let tool =
        "a tool crate (xpu-bench, xpu-replay, xpu-cli); no library crate may depend on a tool";
    assert_eq!(
        by_crate(&v),
        vec![
            (
                "xpu-alloc",
                format!("depends on xpu-replay (dependencies), {tool}").as_str()
            ),
            (
                "xpu",
                format!("depends on xpu-replay (dev-dependencies), {tool}").as_str()
            ),
        ]
    );
}

#[test]
fn the_test_crate_is_a_dev_dependency_above_the_device_crate_only() {
    let mut ws = good_workspace();
    ws.push(package(TEST_CRATE, &[(TEST_CRATE_ABOVE, DepKind::Normal)]));
    let at = |ws: &[Package], name: &str| ws.iter().position(|p| p.name == name).unwrap();
    let (stream, alloc, testing) = (
        at(&ws, "xpu-stream"),
        at(&ws, "xpu-alloc"),
        at(&ws, TEST_CRATE),
    );
    ws[stream].deps.push(dep(TEST_CRATE, DepKind::Dev));
    ws[alloc].deps.push(dep(TEST_CRATE, DepKind::Dev));
    assert_eq!(check_dependencies(&ws, no_manifest), vec![]);
    // Not as a normal dependency ...
    ws[alloc].deps.push(dep(TEST_CRATE, DepKind::Normal));
    // ... nor in the device crate it depends on ...
    ws[0].deps.push(dep(TEST_CRATE, DepKind::Dev));
    // ... and it depends on nothing above the device crate.
    ws[testing].deps.push(dep("xpu-stream", DepKind::Normal));
    let v = check_dependencies(&ws, no_manifest);
    let named: Vec<&str> = v.iter().map(|v| v.krate.as_str()).collect();
    assert_eq!(named, ["xpu-device", "xpu-alloc", TEST_CRATE], "{v:?}");
    assert!(v[1].message.contains("dev-dependency only"), "{v:?}");
}

#[test]
fn dev_dependencies_may_use_earlier_crates_only() {
    let mut ws = good_workspace();
    let alloc = ws.iter().position(|p| p.name == "xpu-alloc").unwrap();
    // xpu-alloc's tests may use xpu-device (earlier) ...
    ws[alloc].deps.push(Dep {
        name: "xpu-device".to_owned(),
        kind: DepKind::Dev,
    });
    assert_eq!(check_dependencies(&ws, no_manifest), vec![]);
    // ... but not the facade (later).
    ws[alloc].deps.push(Dep {
        name: "xpu".to_owned(),
        kind: DepKind::Dev,
    });
    let v = check_dependencies(&ws, no_manifest);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].krate, "xpu-alloc");
    assert!(v[0].message.contains("xpu (dev-dependencies)"));
    // A normal dependency on itself is not allowed either (cargo would reject it anyway).
    let mut ws = good_workspace();
    ws[2].deps.push(Dep {
        name: "xpu-event".to_owned(),
        kind: DepKind::Build,
    });
    assert_eq!(check_dependencies(&ws, no_manifest).len(), 1);
}

#[test]
fn only_the_device_crate_may_use_opencl() {
    let mut ws = good_workspace();
    let at = |ws: &[Package], name: &str| ws.iter().position(|p| p.name == name).unwrap();
    let (facade, cli) = (at(&ws, "xpu"), at(&ws, "xpu-cli"));
    ws[facade].deps.push(Dep {
        name: "cl3".to_owned(),
        kind: DepKind::Dev,
    });
    ws[cli].deps.push(Dep {
        name: "opencl3".to_owned(),
        kind: DepKind::Normal,
    });
    let v = check_dependencies(&ws, no_manifest);
    let named = by_crate(&v);
    assert_eq!(
        named,
        vec![
            (
                "xpu",
                "depends on cl3 (dev-dependencies); only xpu-device may use the OpenCL bindings"
            ),
            (
                "xpu-cli",
                "depends on opencl3 (dependencies); only xpu-device may use the OpenCL bindings"
            ),
        ]
    );
}

#[test]
fn xtask_must_not_depend_on_layers_and_layers_must_exist() {
    let mut ws = good_workspace();
    ws.last_mut().unwrap().deps.push(Dep {
        name: "xpu-device".to_owned(),
        kind: DepKind::Normal,
    });
    ws.retain(|p| p.name != "xpu-lazy");
    // xpu depends on the removed xpu-lazy: still fine by order; the missing layer is reported.
    let v = check_dependencies(&ws, no_manifest);
    let crates: Vec<&str> = v.iter().map(|v| v.krate.as_str()).collect();
    assert_eq!(crates, vec!["xpu-lazy", "xtask"], "{v:?}");
    assert!(v[0].message.contains("not a workspace member"));
    assert!(v[1].message.contains("packages outside the layers (xtask)"));
}

#[test]
fn metadata_is_parsed_with_kinds_roots_and_relative_paths() {
    let meta = json!({
        "packages": [{
            "name": "xpu-cli",
            "manifest_path": "/ws/crates/xpu-cli/Cargo.toml",
            "dependencies": [
                {"name": "xpu", "kind": null},
                {"name": "proptest", "kind": "dev"},
                {"name": "cc", "kind": "build"}
            ],
            "targets": [
                {"kind": ["bin"], "src_path": "/ws/crates/xpu-cli/src/main.rs"},
                {"kind": ["test"], "src_path": "/ws/crates/xpu-cli/tests/cli.rs"},
                {"kind": ["custom-build"], "src_path": "/ws/crates/xpu-cli/build.rs"}
            ]
        }]
    });
    let packages = parse_metadata(&meta, Path::new("/ws")).unwrap();
    assert_eq!(packages.len(), 1);
    let p = &packages[0];
    assert_eq!(p.name, "xpu-cli");
    assert_eq!(p.manifest, PathBuf::from("crates/xpu-cli/Cargo.toml"));
    assert_eq!(p.dir(), Path::new("crates/xpu-cli"));
    assert_eq!(p.roots, vec![PathBuf::from("crates/xpu-cli/src/main.rs")]);
    let kinds: Vec<(&str, DepKind)> = p.deps.iter().map(|d| (d.name.as_str(), d.kind)).collect();
    assert_eq!(
        kinds,
        vec![
            ("xpu", DepKind::Normal),
            ("proptest", DepKind::Dev),
            ("cc", DepKind::Build)
        ]
    );
    assert!(parse_metadata(&json!({}), Path::new("/ws")).is_err());
}

#[test]
fn manifest_lines_are_found_per_section() {
    let manifest = "[package]\nname = \"x\"\n\n[dependencies]\nopencl3.workspace = true\n\
                    xpu-device = { path = \"../d\" }\n\n[dev-dependencies]\nxpu-device.workspace = true\n\
                    \n[target.'cfg(unix)'.build-dependencies]\ncc = \"1\"\n[dependencies.libc]\n";
    let dep = |name: &str, kind| Dep {
        name: name.to_owned(),
        kind,
    };
    for (name, kind, want) in [
        ("opencl3", DepKind::Normal, Some(5)),
        ("xpu-device", DepKind::Normal, Some(6)),
        ("xpu-device", DepKind::Dev, Some(9)),
        ("cc", DepKind::Build, Some(12)),
        ("libc", DepKind::Normal, Some(13)),
        ("serde", DepKind::Normal, None),
    ] {
        assert_eq!(
            manifest_line(manifest, &dep(name, kind)),
            want,
            "{name} as {kind:?}"
        );
    }
}

#[test]
fn unsafe_outside_the_device_crate_is_named_with_its_line() {
    let text = "//! Streams.\n#![forbid(unsafe_code)]\n\npub fn f() {\n    unsafe { g() }\n}\n";
    let v = check_source("xpu-stream", "crates/xpu-stream/src/lib.rs", text, true);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(
        v[0].to_string(),
        "xpu-stream: crates/xpu-stream/src/lib.rs:5: `unsafe` outside xpu-device: only \
         xpu-device may hold unsafe code"
    );
}

#[test]
fn unsafe_in_comments_strings_and_lint_names_is_not_code() {
    let text = "//! Never `unsafe`.\n#![forbid(unsafe_code)]\n#![deny(unsafe_op_in_unsafe_fn)]\n\
                /* unsafe { } */\nconst S: &str = \"unsafe { }\";\nconst R: &str = r#\"\nunsafe {\n\"#;\n\
                // unsafe impl Send for X {}\n";
    assert_eq!(check_source("xpu", "src/lib.rs", text, true), vec![]);
}

#[test]
fn crate_roots_must_forbid_unsafe_code() {
    let v = check_source(
        "xpu-lazy",
        "crates/xpu-lazy/src/lib.rs",
        "fn main() {}\n",
        true,
    );
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].location, "crates/xpu-lazy/src/lib.rs:1");
    assert_eq!(v[0].message, "crate root lacks `#![forbid(unsafe_code)]`");
    // Non-root files need no attribute; the device crate needs none either.
    assert_eq!(
        check_source("xpu-cli", "src/run.rs", "fn x() {}\n", false),
        vec![]
    );
    assert_eq!(
        check_source("xpu-device", "src/lib.rs", "fn x() {}\n", true),
        vec![]
    );
}

#[test]
fn device_unsafe_blocks_need_a_nearby_safety_comment() {
    let good =
        "fn f(p: *const u8) -> u8 {\n    // SAFETY: p is valid (clGetDeviceInfo wrote it).\n\
                \n    let v = unsafe { *p };\n    v\n}\n";
    assert_eq!(check_source("xpu-device", "src/a.rs", good, false), vec![]);

    let far =
        "// SAFETY: too far away.\nlet a = 1;\nlet b = 2;\nlet c = 3;\nlet v = unsafe { g() };\n";
    let v = check_source("xpu-device", "crates/xpu-device/src/a.rs", far, false);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].location, "crates/xpu-device/src/a.rs:5");
    assert!(v[0]
        .message
        .starts_with("`unsafe` block without a `// SAFETY:` comment"));

    let missing = "fn f() {\n    unsafe {\n        g()\n    }\n}\n";
    assert_eq!(check_source("xpu-device", "a.rs", missing, false).len(), 1);

    // A word in a string is not a SAFETY comment.
    let in_string = "let s = \"SAFETY: no\";\nunsafe { g() };\n";
    assert_eq!(
        check_source("xpu-device", "a.rs", in_string, false).len(),
        1
    );
}

#[test]
fn a_long_safety_comment_block_counts_as_a_whole() {
    let text = "// SAFETY: the queue handle is retained by `Queue` (clRetainCommandQueue),\n\
                // and OpenCL allows concurrent use of a queue from several threads\n\
                // as long as each enqueue names a valid event wait list, which\n\
                // `WaitList` guarantees.\n\
                unsafe impl Send for Queue {}\n";
    assert_eq!(check_source("xpu-device", "a.rs", text, false), vec![]);
    let bare = "struct Queue;\nunsafe impl Sync for Queue {}\n";
    let v = check_source("xpu-device", "a.rs", bare, false);
    assert_eq!(v.len(), 1);
    assert!(v[0].message.starts_with("`unsafe` impl without"));
}

#[test]
fn unsafe_fn_and_block_on_the_next_line() {
    // `unsafe fn` needs `# Safety` docs (clippy), not a SAFETY comment.
    let text = "/// # Safety\n/// p must be valid.\npub unsafe fn f(p: *const u8) {}\n";
    assert_eq!(check_source("xpu-device", "a.rs", text, false), vec![]);
    let split = "let v = unsafe\n{\n    g()\n};\n";
    assert_eq!(check_source("xpu-device", "a.rs", split, false).len(), 1);
}

#[test]
fn the_launch_crate_may_declare_documented_unsafe_fns_and_commented_unsafe_blocks() {
    let good = "#![deny(unsafe_code)]\n\
                /// Queues it.\n/// # Safety\n/// The kernel stays in bounds.\n\
                #[allow(unsafe_code)]\npub unsafe fn enqueue() {\n\
                \x20   // SAFETY: forwarded from this function's contract.\n\
                \x20   unsafe { q.enqueue_kernel() }\n}\n";
    assert_eq!(check_source("xpu-kernel", "src/lib.rs", good, true), vec![]);
    // Its tests call the unsafe fn from commented blocks too.
    let test = "fn t() {\n    // SAFETY: in bounds.\n    unsafe { l.enqueue() }\n}\n";
    assert_eq!(
        check_source("xpu-kernel", "tests/launch.rs", test, false),
        vec![]
    );

    let bad = "#![forbid(unsafe_code)]\n\
               pub unsafe fn enqueue() {}\n\
               fn f() {\n    unsafe { g() }\n}\n\
               unsafe impl Send for X {}\n\
               extern \"C\" { fn clFinish(); }\n";
    let v = check_source("xpu-kernel", "src/lib.rs", bad, true);
    let got = by_location(&v);
    assert_eq!(
        got,
        vec![
            (
                "src/lib.rs:2",
                "`unsafe fn` without a `# Safety` section in its doc comment"
            ),
            (
                "src/lib.rs:4",
                "`unsafe` block without a `// SAFETY:` comment in the 3 lines above it"
            ),
            (
                "src/lib.rs:6",
                "`unsafe` item in xpu-kernel: only `unsafe fn` and `unsafe {}` blocks calling \
                 xpu-device's unsafe API are allowed here"
            ),
            (
                "src/lib.rs:7",
                "`extern` block in xpu-kernel: only xpu-device may declare FFI"
            ),
            ("src/lib.rs:1", "crate root lacks `#![deny(unsafe_code)]`"),
        ]
    );
    // Other crates keep the strict rule.
    assert_eq!(
        check_source("xpu-lazy", "src/lib.rs", good, true).len(),
        3,
        "unsafe fn, block, and the missing forbid"
    );
}

#[test]
fn facade_examples_may_hold_commented_unsafe_blocks_only() {
    let good = "type F = unsafe extern \"C\" fn(i32) -> i32;\n\
                fn main() {\n    // SAFETY: the symbol has this C signature.\n\
                \x20   let f = unsafe { lib.get::<F>(b\"f\") };\n}\n";
    assert_eq!(
        check_source("xpu", "crates/xpu/examples/clblast_gemm.rs", good, false),
        vec![]
    );
    let bad = "fn main() {\n    unsafe { g() }\n}\n\
               unsafe fn h() {}\n\
               unsafe impl Send for X {}\n\
               extern \"C\" { fn f(); }\n";
    let v = check_source("xpu", "crates/xpu/examples/clblast_gemm.rs", bad, false);
    let lines: Vec<&str> = v.iter().map(|v| v.location.as_str()).collect();
    assert_eq!(
        lines,
        vec![
            "crates/xpu/examples/clblast_gemm.rs:2",
            "crates/xpu/examples/clblast_gemm.rs:4",
            "crates/xpu/examples/clblast_gemm.rs:5",
            "crates/xpu/examples/clblast_gemm.rs:6",
        ]
    );
    // Never in the facade's library or tests, nor in another crate's examples.
    for (krate, file) in [
        ("xpu", "crates/xpu/src/lib.rs"),
        ("xpu", "crates/xpu/src/examples/a.rs"),
        ("xpu", "crates/xpu/tests/a.rs"),
        ("xpu-lazy", "crates/xpu-lazy/examples/a.rs"),
        // Nor in a library's sources or tests (only its benches).
        ("xpu-alloc", "crates/xpu-alloc/src/lib.rs"),
        ("xpu-alloc", "crates/xpu-alloc/tests/benches.rs"),
    ] {
        let v = check_source(krate, file, good, false);
        assert_eq!(v.len(), 2, "{krate} {file}: {v:?}");
        assert!(v[0].message.starts_with("`unsafe` outside xpu-device"));
    }
}

#[test]
fn tools_and_benches_may_hold_commented_unsafe_blocks_and_an_undocumented_one_is_named() {
    // A user of the launch API: a commented block in an item allowed to hold it ...
    let launch = "#[allow(unsafe_code)]\nfn go() {\n    // SAFETY: in bounds; the kernel ends.\n\
                  \x20   unsafe { s.launch(&f, &[1], None)?.arg(&x)?.enqueue()? };\n}\n";
    // ... and the same block without its comment.
    let bare = launch.replace("// SAFETY: in bounds; the kernel ends.", "let a = 1;");
    for (krate, file) in [
        ("xpu-cli", "crates/xpu-cli/src/demo.rs"),
        ("xpu-cli", "crates/xpu-cli/tests/demo.rs"),
        ("xpu-bench", "crates/xpu-bench/src/launch.rs"),
        ("xpu-bench", "crates/xpu-bench/examples/e.rs"),
        ("xpu-bench", "crates/xpu-bench/benches/b.rs"),
        ("xpu-alloc", "crates/xpu-alloc/benches/alloc.rs"),
        ("xpu", "crates/xpu/examples/support/mlp.rs"),
    ] {
        let ok = check_source(krate, file, launch, false);
        assert_eq!(ok, vec![], "{krate} {file}");
        let named = check_source(krate, file, &bare, false);
        let want = "`unsafe` block without a `// SAFETY:` comment in the 3 lines above it";
        let at = format!("{file}:4");
        assert_eq!(by_location(&named), vec![(at.as_str(), want)], "{krate}");
    }
    // A tool crate's root denies unsafe code, so each such item opts in.
    let root = format!("#![deny(unsafe_code)]\n{launch}");
    assert_eq!(check_source("xpu-bench", "src/lib.rs", &root, true), vec![]);

    // Nothing else unsafe there.
    let bad = "fn main() {}\n\
               /// # Safety\n/// None.\nunsafe fn h() {}\n\
               unsafe impl Send for X {}\n\
               extern \"C\" { fn f(); }\n";
    let v = check_source("xpu-cli", "crates/xpu-cli/src/main.rs", bad, true);
    let only_blocks =
        "`unsafe` item in xpu-cli: only commented `unsafe {}` blocks are allowed there";
    assert_eq!(
        by_location(&v),
        vec![
            ("crates/xpu-cli/src/main.rs:4", only_blocks),
            ("crates/xpu-cli/src/main.rs:5", only_blocks),
            (
                "crates/xpu-cli/src/main.rs:6",
                "`extern` block in xpu-cli: load the library at run time"
            ),
            (
                "crates/xpu-cli/src/main.rs:1",
                "crate root lacks `#![deny(unsafe_code)]`"
            ),
        ]
    );
    let v = check_source("xpu-host", "crates/xpu-host/benches/host.rs", bad, false);
    assert_eq!(v.len(), 3, "{v:?}");
    assert!(
        v[0].message
            .starts_with("`unsafe` item in the benches of xpu-host: only commented"),
        "{v:?}"
    );
}

/// The circles rule (g) reports for crate `krate` with files (module, text).
fn circles_of(krate: &str, files: &[(&str, &str)]) -> Vec<String> {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|&(m, t)| (m.to_owned(), t.to_owned()))
        .collect();
    import_violations(krate, &files)
        .into_iter()
        .map(|v| v.message)
        .collect()
}

/// Asserts that rule (g) reports exactly one circle for crate `krate` with `files`, between
/// exactly `modules` (as the message lists them).
fn assert_one_circle(krate: &str, files: &[(&str, &str)], modules: &str) {
    let v = circles_of(krate, files);
    let start = format!("import circle between modules {modules} (");
    assert!(
        v.len() == 1 && v[0].starts_with(&start),
        "want one circle between {modules}: {v:?}"
    );
}

#[test]
fn module_paths_of_source_files() {
    assert_eq!(imports::module_of("lib.rs").as_deref(), Some(""));
    assert_eq!(imports::module_of("main.rs").as_deref(), Some(""));
    assert_eq!(imports::module_of("size.rs").as_deref(), Some("size"));
    assert_eq!(
        imports::module_of("config/mod.rs").as_deref(),
        Some("config")
    );
    assert_eq!(
        imports::module_of("allocator/shard.rs").as_deref(),
        Some("allocator::shard")
    );
    assert_eq!(imports::module_of("bin/tool.rs"), None);
    assert_eq!(imports::module_of("notes.txt"), None);
}

#[test]
fn two_modules_importing_each_other_are_a_circle() {
    assert_one_circle(
        "c",
        &[
            ("", "mod a;\nmod b;\n"),
            ("a", "use crate::b::B;\npub struct A;\n"),
            ("b", "use crate::a::A;\npub struct B;\n"),
        ],
        "a, b",
    );
}

#[test]
fn group_imports_inline_paths_and_super_count() {
    // `a` names `b` in a `use` group, `b` names `a` through an inline `super::` path.
    assert_one_circle(
        "c",
        &[
            ("p::a", "use crate::{p::b, x::Y};\nfn f() { b::g() }\n"),
            ("p::b", "pub fn g() { super::a::f2() }\n"),
            ("x", "pub struct Y;\n"),
        ],
        "p::a, p::b",
    );
    // An inline `crate::` path in an expression.
    assert_one_circle(
        "c",
        &[
            ("a", "fn f() { crate::b::g(); }\n"),
            ("b", "fn g() { let _ = crate::a::f; }\n"),
        ],
        "a, b",
    );
}

#[test]
fn comments_strings_and_test_modules_do_not_import() {
    let v = circles_of(
        "c",
        &[
            ("", "mod a;\nmod b;\n"),
            ("a", "use crate::b::B;\n"),
            (
                "b",
                "/// See [`crate::a::A`].\n// use crate::a::A;\nconst S: &str = \"crate::a::A\";\n\
                 #[cfg(test)]\nmod tests {\n    use crate::a::A;\n    fn t() { { crate::a::f(); } }\n}\n\
                 #[cfg(test)]\n#[path = \"x.rs\"]\nmod more;\n",
            ),
            ("b::more", "use crate::a::A;\n"),
        ],
    );
    assert_eq!(v, Vec::<String>::new());
    // The code after a `#[cfg(test)]` module still counts.
    assert_one_circle(
        "c",
        &[
            ("a", "use crate::b::B;\n"),
            (
                "b",
                "#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nuse crate::a::A;\n",
            ),
        ],
        "a, b",
    );
}

#[test]
fn owners_and_their_children_are_not_circles() {
    // A parent using its child, and the child using an item of its parent.
    let v = circles_of(
        "c",
        &[
            ("m", "mod k;\nuse self::k::K;\npub struct P;\n"),
            ("m::k", "use super::P;\npub struct K;\n"),
            ("", "use crate::m::P;\n"),
        ],
    );
    assert_eq!(v, Vec::<String>::new());
}

#[test]
fn longer_circles_are_found_and_allowed_pairs_are_not() {
    assert_one_circle(
        "c",
        &[
            ("a", "use crate::b::B;\n"),
            ("b", "use crate::c::C;\n"),
            ("c", "use crate::a::A;\n"),
            ("d", "use crate::a::A;\n"),
        ],
        "a, b, c",
    );
    // xpu-host's HostPtr (ptr) and its allocator: a handle and its owner.
    let files = [
        ("allocator", "use crate::ptr::HostPtr;\n"),
        ("ptr", "use crate::allocator::Allocator;\n"),
    ];
    assert_eq!(circles_of("xpu-host", &files), Vec::<String>::new());
    assert_one_circle("xpu-alloc", &files, "allocator, ptr");
}
