//! Reader of the allocator trace format (`/shared/traces/README.md`): a `#` header, then
//! `ACTION ADDR SIZE STREAM` lines, gzip-compressed or plain.

use std::io::{BufRead, BufReader, Read};

use super::ReplayError;

/// What a trace line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// A block was handed out.
    Alloc,
    /// The user freed a block.
    FreeRequested,
    /// The block became reusable.
    FreeCompleted,
    /// The allocator obtained a segment (informational).
    SegmentAlloc,
    /// The allocator released a segment (informational).
    SegmentFree,
}

/// One trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceEvent {
    /// The action.
    pub action: Action,
    /// Original device address (a key matching frees to allocations).
    pub addr: u64,
    /// Requested size (alloc/free) or segment size, in bytes.
    pub size: u64,
    /// Trace stream number (0: main stream).
    pub stream: u32,
}

/// A parsed trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// Events the replay acts on or reports, in order (unknown actions removed).
    pub events: Vec<TraceEvent>,
    /// Event lines read, including skipped actions.
    pub lines: u64,
}

fn parse_line(number: u64, text: &str) -> Result<Option<TraceEvent>, ReplayError> {
    let malformed = || ReplayError::Malformed {
        line: number,
        text: text.to_owned(),
    };
    let mut fields = text.split(' ');
    let action = match fields.next().unwrap_or("") {
        "alloc" => Action::Alloc,
        "free_requested" => Action::FreeRequested,
        "free_completed" => Action::FreeCompleted,
        "segment_alloc" => Action::SegmentAlloc,
        "segment_free" => Action::SegmentFree,
        "" => return Err(malformed()),
        _ => return Ok(None),
    };
    let mut number_field = || {
        fields
            .next()
            .and_then(|f| f.parse::<u64>().ok())
            .ok_or_else(malformed)
    };
    let addr = number_field()?;
    let size = number_field()?;
    let stream = u32::try_from(number_field()?).map_err(|_| malformed())?;
    if fields.next().is_some() {
        return Err(malformed());
    }
    Ok(Some(TraceEvent {
        action,
        addr,
        size,
        stream,
    }))
}

/// Reads a trace, decompressing it when it starts with the gzip magic bytes.
///
/// # Errors
/// [`ReplayError::Io`] on read errors; [`ReplayError::Malformed`] with the line number
/// (1-based) and text for a line of a known action that is not `ACTION ADDR SIZE STREAM`.
pub fn read_trace(reader: impl Read) -> Result<Trace, ReplayError> {
    let mut reader = BufReader::new(reader);
    let gzip = reader.fill_buf()?.starts_with(&[0x1f, 0x8b]);
    let lines: Box<dyn BufRead> = if gzip {
        Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(reader)))
    } else {
        Box::new(reader)
    };
    let mut trace = Trace::default();
    for (i, line) in lines.lines().enumerate() {
        let line = line?;
        let text = line.trim_end_matches('\r');
        if text.is_empty() || text.starts_with('#') {
            continue;
        }
        trace.lines += 1;
        if let Some(event) = parse_line(i as u64 + 1, text)? {
            trace.events.push(event);
        }
    }
    Ok(trace)
}
