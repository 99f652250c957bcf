//! Reader of the allocator trace format (`/shared/traces/README.md`): a `#` header, then
//! `ACTION ADDR SIZE STREAM` lines (single spaces, decimal integers), gzip-compressed or
//! plain.
//!
//! Validation, following the README: action names are lowercase (`[a-z][a-z0-9_]*`) and
//! case-sensitive; the seven actions the replay needs are parsed (PyTorch's five block and
//! segment actions, and xpu's `move_from` / `move_to` of a relocated block, see
//! [`xpu_caching::history`]), any other action with the four fields (`oom`, `snapshot`,
//! `segment_map`, ...) is skipped and counted in
//! [`Trace::skipped`]. Every other line (a wrong number of fields, tabs, an upper-case
//! action, a non-numeric field) is [`TraceError::Malformed`](super::TraceError::Malformed) naming the line; a trace
//! without event lines is [`TraceError::Empty`](super::TraceError::Empty) and one without an `alloc` line
//! [`TraceError::NoAlloc`](super::TraceError::NoAlloc).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};

use xpu_caching::TraceAction;

use super::TraceError as ReplayError;

/// The replay's name for the trace vocabulary: [`TraceAction`], the actions history recording
/// writes (the replay acts on those where [`TraceAction::replayed`] holds).
pub use xpu_caching::TraceAction as Action;

/// The action of a name the replay acts on (case-sensitive, as the trace README writes them).
fn replayed_action(name: &str) -> Option<TraceAction> {
    TraceAction::from_name(name).filter(|a| a.replayed())
}

/// One trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The action.
    pub action: TraceAction,
    /// Original device address (a key matching frees and moves to allocations).
    pub addr: u64,
    /// Requested size (alloc/free) or segment size, in bytes.
    pub size: u64,
    /// Trace stream number (0: main stream).
    pub stream: u32,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Events the replay acts on or reports, in order (skipped actions removed).
    pub events: Vec<TraceEvent>,
    /// Event lines read, including skipped actions.
    pub lines: u64,
    /// Lines of actions the replay does not need, skipped: action name -> count.
    pub skipped: BTreeMap<String, u64>,
}

/// A valid action name: lowercase ASCII letters, digits and `_`, starting with a letter.
fn is_action_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// One event line: `Ok(Err(name))` for a well-formed line of an action the replay skips.
fn parse_line(number: u64, text: &str) -> Result<Result<TraceEvent, String>, ReplayError> {
    let malformed = |reason: String| ReplayError::Malformed {
        line: number,
        text: text.to_owned(),
        reason,
    };
    let fields: Vec<&str> = text.split(' ').collect();
    if text.contains('\t') {
        return Err(malformed(
            "fields are separated by tabs, not single spaces".to_owned(),
        ));
    }
    if fields.iter().any(|f| f.is_empty()) {
        return Err(malformed(
            "fields must be separated by single spaces".to_owned(),
        ));
    }
    if fields.len() != 4 {
        return Err(malformed(format!("{} fields, not 4", fields.len())));
    }
    let name = fields[0];
    if !is_action_name(name) {
        let hint = replayed_action(&name.to_ascii_lowercase())
            .map(|_| {
                format!(
                    " (actions are case-sensitive: did you mean `{}`?)",
                    name.to_ascii_lowercase()
                )
            })
            .unwrap_or_default();
        return Err(malformed(format!(
            "`{name}` is not an action name (lowercase letters, digits and `_`){hint}"
        )));
    }
    let number_field = |i: usize, what: &str| {
        fields[i]
            .parse::<u64>()
            .map_err(|_| malformed(format!("{what} `{}` is not a decimal integer", fields[i])))
    };
    let addr = number_field(1, "ADDR")?;
    let size = number_field(2, "SIZE")?;
    let stream = number_field(3, "STREAM")?;
    let stream = u32::try_from(stream)
        .map_err(|_| malformed(format!("STREAM {stream} is above {}", u32::MAX)))?;
    Ok(match replayed_action(name) {
        Some(action) => Ok(TraceEvent {
            action,
            addr,
            size,
            stream,
        }),
        None => Err(name.to_owned()),
    })
}

/// Reads a trace, decompressing it when it starts with the gzip magic bytes.
///
/// # Errors
/// [`TraceError::Io`](super::TraceError::Io) on read errors (a corrupt gzip stream included);
/// [`TraceError::Malformed`](super::TraceError::Malformed) with the line number (1-based), the text and the reason for a
/// line that is not `ACTION ADDR SIZE STREAM`; [`TraceError::Empty`](super::TraceError::Empty) when there is no event
/// line; [`TraceError::NoAlloc`](super::TraceError::NoAlloc) when no line is an `alloc`.
pub fn read_trace(reader: impl Read) -> Result<Trace, ReplayError> {
    let mut reader = BufReader::new(reader);
    let gzip = reader.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let lines: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(reader)))
    } else {
        Box::new(reader)
    };
    let mut trace = Trace::default();
    for (i, line) in lines.split(b'\n').enumerate() {
        let line = line?;
        let line = match String::from_utf8(line) {
            Ok(line) => line,
            Err(e) => {
                let bytes = e.into_bytes();
                let text = String::from_utf8_lossy(&bytes);
                return Err(ReplayError::Malformed {
                    line: i as u64 + 1,
                    text: text.trim_end_matches('\r').to_owned(),
                    reason: "not UTF-8".to_owned(),
                });
            }
        };
        let text = line.trim_end_matches('\r');
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        trace.lines += 1;
        match parse_line(i as u64 + 1, text)? {
            Ok(event) => trace.events.push(event),
            Err(skipped) => *trace.skipped.entry(skipped).or_default() += 1,
        }
    }
    if trace.lines == 0 {
        return Err(ReplayError::Empty);
    }
    if !trace.events.iter().any(|e| e.action == TraceAction::Alloc) {
        return Err(ReplayError::NoAlloc { lines: trace.lines });
    }
    Ok(trace)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Trace, ReplayError> {
        read_trace(text.as_bytes())
    }

    fn reason(text: &str) -> (u64, String) {
        match read(text) {
            Err(ReplayError::Malformed { line, reason, .. }) => (line, reason),
            other => panic!("{text:?}: expected Malformed, got {other:?}"),
        }
    }

    /// A line that is not UTF-8 is a malformed line with its number, as any other bad line
    /// (review h23: it was an I/O error naming no line).
    #[test]
    fn a_line_that_is_not_utf8_is_malformed_with_its_number() {
        match read_trace(&b"alloc 1 2 0\nalloc 1 \xff 0\nalloc 3 4 0\n"[..]) {
            Err(ReplayError::Malformed { line, text, reason }) => {
                assert_eq!((line, text.as_str()), (2, "alloc 1 \u{fffd} 0"));
                assert_eq!(reason, "not UTF-8");
            }
            other => panic!("expected Malformed, got {other:?}"),
        }
    }

    #[test]
    fn lines_that_are_not_four_fields_are_errors_naming_the_line() {
        let ok = "# h\nalloc 1 2 0\n";
        assert_eq!(
            reason(&format!("{ok}alloc\t1\t2\t3\n")),
            (
                3,
                "fields are separated by tabs, not single spaces".to_owned()
            )
        );
        assert_eq!(
            reason(&format!("{ok}oom 1 2\n")),
            (3, "3 fields, not 4".to_owned())
        );
        assert_eq!(
            reason(&format!("{ok}user_defined whatever\n")),
            (3, "2 fields, not 4".to_owned())
        );
        assert_eq!(
            reason(&format!("{ok}alloc  1 2 0\n")).1,
            "fields must be separated by single spaces"
        );
        let (line, why) = reason(&format!("{ok}ALLOC 1 2 3\n"));
        assert_eq!(line, 3);
        assert!(why.contains("did you mean `alloc`"), "{why}");
        assert_eq!(
            reason(&format!("{ok}snapshot x 2 3\n")).1,
            "ADDR `x` is not a decimal integer"
        );
    }

    #[test]
    fn other_actions_with_four_fields_are_skipped_and_counted() {
        let t = read("alloc 1 2 0\noom 0 0 0\nsegment_map 1 2 0\noom 0 0 0\n").unwrap();
        assert_eq!(t.lines, 4);
        assert_eq!(t.events.len(), 1);
        assert_eq!(
            t.skipped.into_iter().collect::<Vec<_>>(),
            vec![("oom".to_owned(), 2), ("segment_map".to_owned(), 1)]
        );
    }

    #[test]
    fn moves_are_parsed_with_their_four_fields() {
        let t = read("alloc 1 2 0\nmove_from 1 2 0\nmove_to 9 2 0\n").unwrap();
        let got: Vec<(TraceAction, u64)> = t.events.iter().map(|e| (e.action, e.addr)).collect();
        assert_eq!(
            got,
            [
                (TraceAction::Alloc, 1),
                (TraceAction::MoveFrom, 1),
                (TraceAction::MoveTo, 9)
            ]
        );
        assert!(t.skipped.is_empty());
        assert_eq!(
            reason("alloc 1 2 0\nmove_from 1 2 0 9\n"),
            (2, "5 fields, not 4".to_owned())
        );
    }

    #[test]
    fn an_empty_trace_and_one_without_alloc_are_errors() {
        assert!(matches!(read(""), Err(ReplayError::Empty)));
        assert!(matches!(
            read("# only a header\n\n"),
            Err(ReplayError::Empty)
        ));
        assert!(matches!(
            read("segment_alloc 1 2 0\noom 0 0 0\n"),
            Err(ReplayError::NoAlloc { lines: 2 })
        ));
    }
}
