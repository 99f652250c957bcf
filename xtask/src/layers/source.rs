//! A line-preserving split of Rust source into code and comment text, so that `unsafe` in
//! strings and comments is not mistaken for code. Not a full lexer: enough for the layer rules.

/// One source line: its code with string and char literal contents removed, and its
/// comment text.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Line {
    /// The code on this line; a string literal shows as `""`, a char literal as `' '`.
    pub(crate) code: String,
    /// The text of the comments on this line, markers included.
    pub(crate) comment: String,
}

impl Line {
    /// True when the line holds a comment and no code.
    pub(crate) fn is_comment_only(&self) -> bool {
        self.code.trim().is_empty() && !self.comment.trim().is_empty()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Code,
    LineComment,
    BlockComment(u32),
    Str,
    RawStr(usize),
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where the chars consumed by one step of [`split`] go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Nowhere (string contents).
    Drop,
    /// To the line's code, as they are.
    Code,
    /// To the line's code, replaced by this text (a literal's stand-in).
    CodeAs(&'static str),
    /// To the line's comment, as they are.
    Comment,
}

/// One step of [`split`] in `state` at `chars[i]` (not a line break): the state after it,
/// how many chars it consumes and where they go.
fn step(state: State, chars: &[char], i: usize) -> (State, usize, Out) {
    let at = |k: usize| chars.get(k).copied().unwrap_or('\0');
    let (c, next) = (chars[i], at(i + 1));
    match state {
        State::Code => {
            if c == '/' && next == '/' {
                (State::LineComment, 2, Out::Comment)
            } else if c == '/' && next == '*' {
                (State::BlockComment(1), 2, Out::Comment)
            } else if c == '"' {
                (State::Str, 1, Out::Code)
            } else if let Some((hashes, len)) = raw_string_start(chars, i) {
                (State::RawStr(hashes), len, Out::CodeAs("r\""))
            } else if c == '\'' {
                match char_literal_len(chars, i) {
                    Some(len) => (State::Code, len, Out::CodeAs("' '")),
                    None => (State::Code, 1, Out::Code),
                }
            } else {
                (State::Code, 1, Out::Code)
            }
        }
        State::LineComment => (state, 1, Out::Comment),
        State::BlockComment(depth) => match (c, next) {
            ('/', '*') => (State::BlockComment(depth + 1), 2, Out::Comment),
            ('*', '/') if depth == 1 => (State::Code, 2, Out::Comment),
            ('*', '/') => (State::BlockComment(depth - 1), 2, Out::Comment),
            _ => (state, 1, Out::Comment),
        },
        State::Str => match c {
            '\\' if next != '\n' => (state, 2, Out::Drop),
            '"' => (State::Code, 1, Out::Code),
            _ => (state, 1, Out::Drop),
        },
        State::RawStr(hashes) => {
            if c == '"' && (1..=hashes).all(|k| at(i + k) == '#') {
                (State::Code, 1 + hashes, Out::CodeAs("\""))
            } else {
                (state, 1, Out::Drop)
            }
        }
    }
}

/// Splits `text` into one [`Line`] per source line (line `n` of the file is index `n - 1`).
pub(crate) fn split(text: &str) -> Vec<Line> {
    let chars: Vec<char> = text.chars().collect();
    let mut lines = vec![Line::default()];
    let mut state = State::Code;
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '\n' {
            lines.push(Line::default());
            if state == State::LineComment {
                state = State::Code;
            }
            i += 1;
            continue;
        }
        let (next, len, out) = step(state, &chars, i);
        let line = lines.last_mut().expect("lines is never empty");
        let consumed = chars[i..chars.len().min(i + len)].iter();
        match out {
            Out::Drop => {}
            Out::Code => line.code.extend(consumed),
            Out::CodeAs(text) => line.code.push_str(text),
            Out::Comment => line.comment.extend(consumed),
        }
        state = next;
        i += len;
    }
    lines
}

/// At a raw string start (`r"`, `r#"`, `br##"`, `cr"`), the number of `#` and the length of
/// the opening.
fn raw_string_start(chars: &[char], i: usize) -> Option<(usize, usize)> {
    if chars[i] != 'r' {
        return None;
    }
    let before = |k: usize| i.checked_sub(k).map(|j| chars[j]);
    let starts_token = match before(1) {
        None => true,
        Some('b' | 'c') => !matches!(before(2), Some(p) if is_ident(p)),
        Some(p) => !is_ident(p),
    };
    if !starts_token {
        return None;
    }
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + 1 + hashes) == Some(&'"')).then_some((hashes, 2 + hashes))
}

/// At a `'`, the length of the char literal starting there, or `None` for a lifetime.
fn char_literal_len(chars: &[char], i: usize) -> Option<usize> {
    let at = |k: usize| chars.get(k).copied();
    if at(i + 1) == Some('\\') {
        // Escape: skip the escaped char, then up to the closing quote (`'\u{1F600}'`).
        let close = (i + 3..chars.len().min(i + 16)).find(|&k| chars[k] == '\'')?;
        return Some(close - i + 1);
    }
    match (at(i + 1), at(i + 2)) {
        (Some(c), Some('\'')) if c != '\n' => Some(3),
        _ => None,
    }
}

/// The byte offsets in `code` where the word `word` starts (not part of a longer identifier).
pub(crate) fn word_positions(code: &str, word: &str) -> Vec<usize> {
    code.match_indices(word)
        .filter(|&(pos, _)| {
            let before = code[..pos].chars().next_back();
            let after = code[pos + word.len()..].chars().next();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        })
        .map(|(pos, _)| pos)
        .collect()
}

/// Whether the code holds `#![forbid(..., unsafe_code, ...)]`, spaces and line breaks allowed.
#[cfg(test)]
pub(crate) fn forbids_unsafe_code(lines: &[Line]) -> bool {
    unsafe_code_lint_is(lines, "forbid")
}

/// Whether the code holds `#![<level>(..., unsafe_code, ...)]` (`level`: `forbid`, `deny`),
/// spaces and line breaks allowed.
pub(crate) fn unsafe_code_lint_is(lines: &[Line], level: &str) -> bool {
    let code: String = lines
        .iter()
        .flat_map(|l| l.code.chars())
        .filter(|c| !c.is_whitespace())
        .collect();
    let open = format!("#![{level}(");
    code.match_indices(open.as_str()).any(|(pos, open)| {
        let rest = &code[pos + open.len()..];
        rest.split_once(")]")
            .is_some_and(|(list, _)| list.split(',').any(|lint| lint == "unsafe_code"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(text: &str) -> Vec<String> {
        split(text).into_iter().map(|l| l.code).collect()
    }

    #[test]
    fn comments_are_separated_and_lines_kept() {
        let lines = split("let a = 1; // unsafe here\n/* one\n unsafe { */ let b;\n");
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].code, "let a = 1; ");
        assert_eq!(lines[0].comment, "// unsafe here");
        assert_eq!(lines[1].code, "");
        assert!(lines[1].is_comment_only());
        assert_eq!(lines[2].code, " let b;");
        assert_eq!(lines[2].comment, " unsafe { */");
    }

    #[test]
    fn nested_block_comments_end_at_the_matching_close() {
        let c = codes("/* a /* b */ unsafe */ code");
        assert_eq!(c, vec![" code"]);
    }

    #[test]
    fn strings_lose_their_contents_and_keep_line_breaks() {
        let c = codes("let s = \"unsafe { \\\" \n still string\"; let t = 1;");
        assert_eq!(c, vec!["let s = \"", "\"; let t = 1;"]);
    }

    #[test]
    fn raw_strings_with_hashes_span_lines() {
        let text = "let s = r#\"\nunsafe { \"quoted\" }\n\"#; let x = br\"unsafe\";";
        let c = codes(text);
        assert_eq!(c, vec!["let s = r\"", "", "\"; let x = br\"\";"]);
        // `r` at the end of an identifier is not a raw string.
        assert_eq!(codes("for\"x\""), vec!["for\"\""]);
    }

    #[test]
    fn char_literals_and_lifetimes() {
        assert_eq!(codes("let q = '\"'; unsafe"), vec!["let q = ' '; unsafe"]);
        assert_eq!(codes("let e = '\\''; x"), vec!["let e = ' '; x"]);
        assert_eq!(codes("let u = '\\u{1F600}';"), vec!["let u = ' ';"]);
        assert_eq!(
            codes("fn f<'a>(x: &'a str) -> &'a str"),
            vec!["fn f<'a>(x: &'a str) -> &'a str"]
        );
    }

    #[test]
    fn words_are_whole_identifiers() {
        assert_eq!(word_positions("unsafe { x }", "unsafe"), vec![0]);
        assert!(word_positions("#![forbid(unsafe_code)]", "unsafe").is_empty());
        assert!(word_positions("not_unsafe()", "unsafe").is_empty());
        assert_eq!(word_positions("a(unsafe)unsafe", "unsafe"), vec![2, 9]);
    }

    #[test]
    fn forbid_attribute_is_found_in_code_only() {
        assert!(forbids_unsafe_code(&split(
            "//! doc\n#![forbid(unsafe_code)]\n"
        )));
        assert!(forbids_unsafe_code(&split(
            "#![forbid(\n    missing_docs,\n    unsafe_code,\n)]"
        )));
        assert!(!forbids_unsafe_code(&split("// #![forbid(unsafe_code)]\n")));
        assert!(!forbids_unsafe_code(&split("#![deny(unsafe_code)]\n")));
        assert!(!forbids_unsafe_code(&split(
            "#![forbid(unsafe_op_in_unsafe_fn)]\n"
        )));
    }
}
