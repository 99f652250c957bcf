//! Offset parameters: every `__global` / `__constant` pointer parameter of a kernel gets a
//! hidden byte offset beside it, so an allocation inside a larger buffer (a block of a
//! caching allocator's segment) reaches the kernel as the segment's buffer plus the block's
//! byte offset, with no sub-buffer (`clCreateSubBuffer`, OpenCL 3.0 §5.2.1).
//!
//! Why: NVIDIA's OpenCL (H200, driver 580) crashes when several threads use sub-buffers of
//! one buffer (docs/performance.md, 2026-12-03), while several threads sharing one buffer by
//! offsets run clean (`ci/diag/nvidia_subbuffer_repro.c`, mode `O`). OpenCL C has no other way
//! to hand a kernel a pointer into the middle of a buffer.
//!
//! [`add_offset_params`] rewrites OpenCL C source before it is compiled. For each kernel
//! (`__kernel` / `kernel`) and each of its `__global` / `__constant` pointer parameters `p`:
//! - a parameter `ulong xpu_offset__p` is inserted right after `p`;
//! - the kernel's body starts with `p = (T)((__global uchar *)p + xpu_offset__p);`, `T` being
//!   `p`'s declared type (a `const` of the pointer itself is dropped, so `p` can be assigned);
//!   the pointee keeps its qualifiers.
//! - in a prototype (a declaration with no body), an unnamed pointer parameter gets an
//!   unnamed `ulong` after it, so that the prototype matches the rewritten definition.
//!
//! No newline is inserted, so the compiler's line numbers stay those of the source as written,
//! and a kernel defined inside a `#define` stays on its logical line. A kernel whose parameter
//! list cannot be read with certainty (a parameter from a macro, `##` pasting, attributes
//! inside the list) is left exactly as written: its pointers take plain buffers only (the
//! kernel sees no offset parameter, see [`super::Kernel::takes_offset`]). Kernels that call
//! other kernels as functions do not compile once rewritten; [`super::Program::build`] then
//! builds the source as written.

/// The name of the offset parameter inserted after pointer parameter `name` is this prefix
/// followed by `name` (as written: inside a macro, `name` may be a macro parameter). Reserved:
/// a `ulong` parameter whose name starts with it, right after a `__global` / `__constant`
/// pointer, is taken for that pointer's offset parameter ([`super::Kernel::takes_offset`]).
pub const OFFSET_PARAM_PREFIX: &str = "xpu_offset__";

/// `source` with an offset parameter after every `__global` / `__constant` pointer parameter
/// of every kernel it can read (see the module docs), and the pointer advanced by it at the
/// start of the kernel's body. Returns `None` when no kernel was changed.
#[must_use]
pub fn add_offset_params(source: &str) -> Option<String> {
    let code = mask(source);
    let bytes = code.as_slice();
    let mut edits: Vec<Edit> = Vec::new();
    let mut at = 0;
    while let Some(end) = find_kernel_keyword(bytes, at) {
        at = end;
        // A keyword in a directive (`#define KERNEL __kernel`) is read within its logical
        // line only: what follows the directive is no part of it.
        let scope = &bytes[..directive_end(bytes, end).unwrap_or(bytes.len())];
        if let Some((kernel_edits, next)) = rewrite_kernel(scope, end) {
            edits.extend(kernel_edits);
            at = next;
        }
    }
    if edits.is_empty() {
        return None;
    }
    edits.sort_by_key(|e| e.at);
    let mut out = String::with_capacity(source.len() + 64 * edits.len());
    let mut last = 0;
    for e in edits {
        out.push_str(&source[last..e.at]);
        out.push_str(&e.insert);
        last = e.at + e.remove;
    }
    out.push_str(&source[last..]);
    Some(out)
}

/// `source` with comments and the contents of string and character literals replaced by
/// spaces (newlines kept): the same byte positions, only code left to scan.
fn mask(source: &str) -> Vec<u8> {
    let b = source.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = b[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .map_or(b.len(), |p| i + p);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = b[i + 2..]
                    .windows(2)
                    .position(|w| w == b"*/")
                    .map_or(b.len(), |p| i + 2 + p + 2);
                blank(&mut out, i, end);
                i = end;
            }
            q @ (b'"' | b'\'') => {
                let mut j = i + 1;
                while j < b.len() && b[j] != q && b[j] != b'\n' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                let end = (j + 1).min(b.len());
                blank(&mut out, i + 1, end.saturating_sub(1).max(i + 1));
                i = end;
            }
            _ => i += 1,
        }
    }
    out
}

/// The end of the logical line (continuations joined) holding position `at` of the masked
/// code, when that line is a preprocessor directive (its first non-blank character is `#`).
fn directive_end(code: &[u8], at: usize) -> Option<usize> {
    let ends_line = |j: usize| {
        code[j] == b'\n' && {
            let before = &code[..j];
            let before = before.strip_suffix(b"\r").unwrap_or(before);
            !before.ends_with(b"\\")
        }
    };
    let start = (0..at).rev().find(|&j| ends_line(j)).map_or(0, |j| j + 1);
    let first = code[start..at]
        .iter()
        .find(|c| !c.is_ascii_whitespace() && **c != b'\\');
    (first == Some(&b'#')).then(|| {
        (at..code.len())
            .find(|&j| ends_line(j))
            .unwrap_or(code.len())
    })
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The end of the first `__kernel` or `kernel` keyword of the masked code at or after `from`.
fn find_kernel_keyword(code: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i < code.len() {
        if is_ident(code[i]) && (i == 0 || !is_ident(code[i - 1])) {
            let end = i + code[i..].iter().take_while(|&&c| is_ident(c)).count();
            let word = &code[i..end];
            if word == b"__kernel" || word == b"kernel" {
                return Some(end);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    None
}

fn skip_space(code: &[u8], mut i: usize) -> usize {
    while i < code.len() && (code[i].is_ascii_whitespace() || code[i] == b'\\') {
        i += 1;
    }
    i
}

/// The position after the parenthesis that closes the one at `open`.
fn matching_paren(code: &[u8], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// The edits of the kernel whose keyword ends at `after_keyword`, and where scanning goes on;
/// `None` when the kernel is left as written.
fn rewrite_kernel(code: &[u8], after_keyword: usize) -> Option<(Vec<Edit>, usize)> {
    // Return type, attributes and name, up to the parameter list's `(`.
    let mut i = skip_space(code, after_keyword);
    let mut words = 0;
    loop {
        if i >= code.len() {
            return None;
        }
        let c = code[i];
        if is_ident(c) {
            let end = i + code[i..].iter().take_while(|&&c| is_ident(c)).count();
            if &code[i..end] == b"__attribute__" {
                let open = skip_space(code, end);
                if code.get(open) != Some(&b'(') {
                    return None;
                }
                i = skip_space(code, matching_paren(code, open)?);
                continue;
            }
            words += 1;
            i = skip_space(code, end);
        } else if c == b'(' {
            break;
        } else {
            return None;
        }
    }
    if words < 2 {
        return None; // `kernel(`: not a kernel definition (no return type and name).
    }
    let open = i;
    let close = matching_paren(code, open)? - 1;
    // After the list: attributes, then the body's `{` (or `;` for a declaration).
    let mut j = skip_space(code, close + 1);
    loop {
        match code.get(j)? {
            b'{' => break,
            b';' => break,
            c if is_ident(*c) => {
                let end = j + code[j..].iter().take_while(|&&c| is_ident(c)).count();
                if &code[j..end] != b"__attribute__" {
                    return None;
                }
                let p = skip_space(code, end);
                if code.get(p) != Some(&b'(') {
                    return None;
                }
                j = skip_space(code, matching_paren(code, p)?);
            }
            _ => return None,
        }
    }
    let body = (code[j] == b'{').then_some(j + 1);

    let mut params = Vec::new();
    let mut start = open + 1;
    for (k, &c) in code.iter().enumerate().take(close + 1).skip(open + 1) {
        if c == b',' || k == close {
            params.push((start, k));
            start = k + 1;
        }
    }
    let text = |a: usize, b: usize| String::from_utf8_lossy(&code[a..b]).into_owned();
    let mut edits = Vec::new();
    let mut prologue = String::new();
    for (from, to) in params {
        let Some(p) = read_param(&code[from..to])? else {
            continue;
        };
        // The pointer's own `const` goes: the body advances the pointer by its offset.
        for &(a, b) in &p.pointer_consts {
            edits.push(Edit {
                at: from + a,
                remove: b - a,
                insert: String::new(),
            });
        }
        let Some(name_at) = p.name else {
            // An unnamed pointer: a prototype's gets an unnamed offset, to match its
            // definition's; a definition's cannot be used by its body anyway.
            if body.is_some() {
                return None;
            }
            edits.push(Edit {
                at: from + p.end,
                remove: 0,
                insert: ", ulong".to_string(),
            });
            continue;
        };
        let name = text(from + name_at.0, from + name_at.1);
        // The cast: the declared type up to the last `*` (the pointer's own qualifiers, which
        // follow it, left out), read from the masked code (no comment inside).
        let cast = text(from, from + p.last_star + 1)
            .replace('\\', " ")
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        edits.push(Edit {
            at: from + name_at.1,
            remove: 0,
            insert: format!(", ulong {OFFSET_PARAM_PREFIX}{name}"),
        });
        let space = if p.constant { "__constant" } else { "__global" };
        prologue.push_str(&format!(
            " {name} = ({cast})(({space} uchar *){name} + {OFFSET_PARAM_PREFIX}{name});"
        ));
    }
    if let (Some(b), false) = (body, prologue.is_empty()) {
        edits.push(Edit {
            at: b,
            remove: 0,
            insert: prologue,
        });
    }
    Some((edits, close + 1))
}

/// One change to the source: `remove` bytes at `at` replaced by `insert`.
struct Edit {
    at: usize,
    remove: usize,
    insert: String,
}

/// One parameter, read from its masked text.
struct Param {
    /// The name's byte range; `None` for an unnamed pointer (of a prototype).
    name: Option<(usize, usize)>,
    /// The end of the parameter's last token.
    end: usize,
    /// The position of the last `*`.
    last_star: usize,
    /// Byte ranges of `const` tokens after the last `*` (the pointer's own).
    pointer_consts: Vec<(usize, usize)>,
    /// A `__constant` pointer (else `__global`).
    constant: bool,
}

/// `Some(Some(param))` for a `__global` / `__constant` pointer parameter, `Some(None)` for any
/// other parameter (left as written), `None` when the text cannot be read with certainty (the
/// whole kernel is then left as written).
fn read_param(text: &[u8]) -> Option<Option<Param>> {
    let mut tokens: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < text.len() {
        let c = text[i];
        if c.is_ascii_whitespace() || c == b'\\' {
            i += 1;
        } else if is_ident(c) {
            let end = i + text[i..].iter().take_while(|&&c| is_ident(c)).count();
            tokens.push((i, end));
            i = end;
        } else if c == b'*' {
            tokens.push((i, i + 1));
            i += 1;
        } else {
            // `(` (attributes, function pointers), `#`, `[`, `<`...: not read.
            return None;
        }
    }
    if tokens.is_empty() {
        return None; // `f()` or `f(a,)`: nothing to read.
    }
    let word = |t: (usize, usize)| &text[t.0..t.1];
    let Some(last_star_tok) = tokens.iter().rposition(|&t| word(t) == b"*") else {
        return Some(None);
    };
    let mut global = false;
    let mut constant = false;
    for &t in &tokens[..last_star_tok] {
        match word(t) {
            b"__global" | b"global" => global = true,
            b"__constant" | b"constant" => constant = true,
            _ => {}
        }
    }
    if !(global || constant) {
        return Some(None); // `__local`, `__private` or generic pointers stay as written.
    }
    let &last = tokens.last()?;
    let qualifier = |t: (usize, usize)| {
        matches!(
            word(t),
            b"const" | b"restrict" | b"__restrict" | b"volatile"
        )
    };
    // Unnamed (`__global float *const`): the last token is the `*` or a qualifier.
    let name = (word(last) != b"*" && !qualifier(last)).then_some(last);
    if !tokens[last_star_tok + 1..]
        .iter()
        .all(|&t| qualifier(t) || Some(t) == name)
    {
        return None;
    }
    if name.is_some_and(|n| !(word(n)[0].is_ascii_alphabetic() || word(n)[0] == b'_')) {
        return None;
    }
    let pointer_consts = tokens[last_star_tok + 1..]
        .iter()
        .copied()
        .filter(|&t| word(t) == b"const")
        .collect();
    Some(Some(Param {
        name,
        end: last.1,
        last_star: tokens[last_star_tok].0,
        pointer_consts,
        constant,
    }))
}

#[cfg(test)]
mod tests {
    use super::add_offset_params;

    #[test]
    fn each_global_and_constant_pointer_gets_an_offset_and_the_body_applies_it() {
        let src =
            "__kernel void f(__global float *out, __constant int* k, float a) { out[0] = a; }";
        assert_eq!(
            add_offset_params(src).unwrap(),
            "__kernel void f(__global float *out, ulong xpu_offset__out, __constant int* k, \
             ulong xpu_offset__k, float a) { out = (__global float *)((__global uchar *)out + \
             xpu_offset__out); k = (__constant int*)((__constant uchar *)k + xpu_offset__k); \
             out[0] = a; }"
        );
    }

    #[test]
    fn the_pointers_own_const_is_dropped_and_the_pointee_keeps_its_qualifiers() {
        let src = "kernel void g(global const volatile uint *const restrict p) {}";
        assert_eq!(
            add_offset_params(src).unwrap(),
            "kernel void g(global const volatile uint * restrict p, ulong xpu_offset__p) { p = \
             (global const volatile uint *)((__global uchar *)p + xpu_offset__p);}"
        );
    }

    #[test]
    fn local_private_and_scalar_parameters_stay_as_written() {
        assert_eq!(
            add_offset_params("__kernel void h(__local float *l, int n, float4 v) { }"),
            None
        );
        assert_eq!(add_offset_params("kernel void z(void) {}"), None);
    }

    #[test]
    fn comments_strings_attributes_and_declarations_are_read_right() {
        let src = "// __kernel void no(__global int *x) {}\n\
                   /* kernel void no2(global int *y) {} */\n\
                   __attribute__((reqd_work_group_size(1, 1, 1))) __kernel void \
                   __attribute__((vec_type_hint(float))) k(__global /* in */ float *x) \
                   __attribute__((x(1))) { printf(\"kernel void s(global int *q)\"); }";
        let out = add_offset_params(src).unwrap();
        assert!(out.starts_with("// __kernel void no(__global int *x) {}\n"));
        assert!(out.contains("k(__global /* in */ float *x, ulong xpu_offset__x)"));
        assert!(
            out.contains("{ x = (__global float *)((__global uchar *)x + xpu_offset__x); printf(")
        );
        assert!(out.contains("\"kernel void s(global int *q)\""));
        assert_eq!(
            out.lines().count(),
            src.lines().count(),
            "no newline inserted"
        );
    }

    #[test]
    fn a_kernel_in_a_macro_is_rewritten_on_its_logical_line() {
        let src = "#define K(N) __kernel void N(__global T *o, \\\n  __global const T *i) { o[0] = i[0]; }\nK(a)\n";
        let out = add_offset_params(src).unwrap();
        assert_eq!(
            out,
            "#define K(N) __kernel void N(__global T *o, ulong xpu_offset__o, \\\n  __global \
             const T *i, ulong xpu_offset__i) { o = (__global T *)((__global uchar *)o + \
             xpu_offset__o); i = (__global const T *)((__global uchar *)i + xpu_offset__i); \
             o[0] = i[0]; }\nK(a)\n"
        );
    }

    #[test]
    fn a_kernel_keyword_in_an_object_like_macro_does_not_rewrite_the_function_after_it() {
        // `KERNEL` expands to `__kernel` where it is used; the function on the next line is
        // no kernel: rewritten, its call in `k` would not compile and the whole program would
        // be built as written (no kernel taking offsets).
        let src = "#define KERNEL __kernel\n\
                   void store(__global uint *p, uint v) { p[0] = v; }\n\
                   __kernel void k(__global uint *o) { store(o, 7); }";
        assert_eq!(
            add_offset_params(src).unwrap(),
            "#define KERNEL __kernel\n\
             void store(__global uint *p, uint v) { p[0] = v; }\n\
             __kernel void k(__global uint *o, ulong xpu_offset__o) { o = (__global uint *)\
             ((__global uchar *)o + xpu_offset__o); store(o, 7); }"
        );
    }

    #[test]
    fn a_prototype_with_unnamed_pointers_gets_unnamed_offsets_to_match_its_definition() {
        // Rewritten alone, the definition would conflict with the prototype as written, and
        // the whole program would be built as written.
        let src = "__kernel void f(__global float *, __constant int *const, int);\n\
                   __kernel void f(__global float *a, __constant int *const k, int n) { }";
        assert_eq!(
            add_offset_params(src).unwrap(),
            "__kernel void f(__global float *, ulong, __constant int *, ulong, int);\n\
             __kernel void f(__global float *a, ulong xpu_offset__a, __constant int * k, ulong \
             xpu_offset__k, int n) { a = (__global float *)((__global uchar *)a + \
             xpu_offset__a); k = (__constant int *)((__constant uchar *)k + xpu_offset__k); }"
        );
    }

    #[test]
    fn a_parameter_list_that_cannot_be_read_leaves_its_kernel_as_written() {
        // A macro pasting the name leaves its kernel exactly as written. A parameter with no
        // `*` (here a macro that may expand to pointers) is left as written while the
        // pointers beside it are rewritten: the kernel's argument information says which
        // pointers have an offset parameter (`Kernel::takes_offset`).
        let src = "__kernel void p(__global float *P##x) {}\n\
                   __kernel void q(__global float *a, PARAMS) {}\n\
                   __kernel void r(__global float *b) {}";
        let out = add_offset_params(src).unwrap();
        assert!(out.starts_with(
            "__kernel void p(__global float *P##x) {}\n__kernel void q(__global float *a, ulong \
             xpu_offset__a, PARAMS) { a = (__global float *)((__global uchar *)a + \
             xpu_offset__a);}\n"
        ));
        assert!(out.ends_with(
            "__kernel void r(__global float *b, ulong xpu_offset__b) { b = (__global float *)\
             ((__global uchar *)b + xpu_offset__b);}"
        ));
    }
}
