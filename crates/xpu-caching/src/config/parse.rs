//! Tokenizer and parser of the allocator configuration grammar.

use super::{AllocConfig, ConfigError, MemoryKind, ReleasePolicy, Relocation};
use crate::size_constants::{MIB, ROUNDUP_INTERVALS};

/// A parsed value: a single token or a bracketed list of `a:b` pairs.
enum Value {
    Scalar(String),
    List(Vec<(String, String)>),
}

impl Value {
    fn text(&self) -> String {
        match self {
            Self::Scalar(s) => s.clone(),
            Self::List(items) => {
                let inner: Vec<String> = items.iter().map(|(a, b)| format!("{a}:{b}")).collect();
                format!("[{}]", inner.join(","))
            }
        }
    }
}

fn is_separator(token: &str) -> bool {
    matches!(token, "," | ":" | "[" | "]")
}

/// Splits on `,` `:` `[` `]` (each its own token) after removing all whitespace.
fn tokenize(text: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    for c in text.chars().filter(|c| !c.is_whitespace()) {
        if matches!(c, ',' | ':' | '[' | ']') {
            if !current.is_empty() {
                tokens.push(std::mem::take(&mut current));
            }
            tokens.push(c.to_string());
        } else {
            current.push(c);
        }
    }
    if !current.is_empty() {
        tokens.push(current);
    }
    tokens
}

struct Tokens {
    tokens: Vec<String>,
    index: usize,
}

impl Tokens {
    fn next(&mut self, what: &str) -> Result<String, ConfigError> {
        let token = self
            .tokens
            .get(self.index)
            .cloned()
            .ok_or_else(|| ConfigError::Syntax {
                index: self.index,
                message: format!("expected {what} but reached the end of the config"),
            })?;
        self.index += 1;
        Ok(token)
    }

    fn expect(&mut self, separator: &str) -> Result<(), ConfigError> {
        let at = self.index;
        let token = self.next(&format!("'{separator}'"))?;
        if token == separator {
            Ok(())
        } else {
            Err(ConfigError::Syntax {
                index: at,
                message: format!("expected '{separator}' but got '{token}'"),
            })
        }
    }

    fn word(&mut self, what: &str) -> Result<String, ConfigError> {
        let at = self.index;
        let token = self.next(what)?;
        if is_separator(&token) {
            return Err(ConfigError::Syntax {
                index: at,
                message: format!("expected {what} but got '{token}'"),
            });
        }
        Ok(token)
    }

    fn value(&mut self) -> Result<Value, ConfigError> {
        if self.tokens.get(self.index).map(String::as_str) != Some("[") {
            return Ok(Value::Scalar(self.word("a value")?));
        }
        self.index += 1;
        let mut items = Vec::new();
        loop {
            let at = self.index;
            let first = self.next("a list entry or ']'")?;
            if first == "]" {
                return Ok(Value::List(items));
            }
            if first == "," && !items.is_empty() {
                continue;
            }
            if is_separator(&first) && first != ">" {
                return Err(ConfigError::Syntax {
                    index: at,
                    message: format!("expected a list entry but got '{first}'"),
                });
            }
            self.expect(":")?;
            let second = self.word("a list value")?;
            items.push((first, second));
        }
    }
}

fn invalid(key: &str, value: &Value, expected: &str) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_owned(),
        value: value.text(),
        expected: expected.to_owned(),
    }
}

fn scalar<'v>(key: &str, value: &'v Value, expected: &str) -> Result<&'v str, ConfigError> {
    match value {
        Value::Scalar(s) => Ok(s),
        Value::List(_) => Err(invalid(key, value, expected)),
    }
}

fn integer(key: &str, value: &Value, expected: &str) -> Result<u64, ConfigError> {
    scalar(key, value, expected)?
        .parse::<u64>()
        .map_err(|_| invalid(key, value, expected))
}

fn megabytes(key: &str, value: &Value, min_mb: u64, expected: &str) -> Result<u64, ConfigError> {
    let mb = integer(key, value, expected)?;
    if mb < min_mb {
        return Err(invalid(key, value, expected));
    }
    mb.checked_mul(MIB)
        .ok_or_else(|| invalid(key, value, expected))
}

fn boolean(key: &str, value: &Value) -> Result<bool, ConfigError> {
    match scalar(key, value, "True or False")? {
        "True" => Ok(true),
        "False" => Ok(false),
        _ => Err(invalid(key, value, "True or False (case-sensitive)")),
    }
}

fn interval_index(mb: u64) -> usize {
    (63 - mb.leading_zeros() as usize).min(ROUNDUP_INTERVALS - 1)
}

fn roundup_divisions(key: &str, value: &Value) -> Result<[u64; ROUNDUP_INTERVALS], ConfigError> {
    const SINGLE: &str =
        "a power of two, or a list [MB:N,...,>:N] with MB a power of two and N 0 or a power of two";
    let mut out = [0u64; ROUNDUP_INTERVALS];
    match value {
        Value::Scalar(_) => {
            let n = integer(key, value, SINGLE)?;
            if !n.is_power_of_two() {
                return Err(invalid(key, value, SINGLE));
            }
            out = [n; ROUNDUP_INTERVALS];
        }
        Value::List(items) => {
            let mut last: Option<usize> = None;
            for (boundary, divisions) in items {
                let n: u64 = divisions.parse().map_err(|_| invalid(key, value, SINGLE))?;
                if n != 0 && !n.is_power_of_two() {
                    return Err(invalid(key, value, SINGLE));
                }
                if boundary == ">" {
                    let start = last.map_or(0, |i| i + 1);
                    for slot in out.iter_mut().skip(start) {
                        *slot = n;
                    }
                    last = Some(ROUNDUP_INTERVALS - 1);
                    continue;
                }
                let mb: u64 = boundary.parse().map_err(|_| invalid(key, value, SINGLE))?;
                if !mb.is_power_of_two() {
                    return Err(invalid(key, value, SINGLE));
                }
                let index = interval_index(mb);
                if last.is_none() {
                    for slot in &mut out[..=index] {
                        *slot = n;
                    }
                } else {
                    out[index] = n;
                }
                last = Some(index);
            }
        }
    }
    Ok(out)
}

fn apply(config: &mut AllocConfig, key: &str, value: &Value) -> Result<(), ConfigError> {
    let large_mb = config.large_segment_size / MIB;
    match key {
        "large_segment_size_mb" => {
            let bytes = megabytes(key, value, 11, "an integer number of MiB greater than 10")?;
            config.large_segment_size = bytes;
            config.max_non_split_rounding = bytes;
        }
        "max_split_size_mb" => {
            let expected = format!("an integer number of MiB >= {large_mb}");
            config.max_split_size = megabytes(key, value, large_mb, &expected)?;
        }
        "max_non_split_rounding_mb" => {
            let expected = format!("an integer number of MiB >= {large_mb}");
            config.max_non_split_rounding = megabytes(key, value, large_mb, &expected)?;
        }
        "garbage_collection_threshold" => {
            const EXPECTED: &str = "a number in the open interval (0.0, 1.0)";
            let x: f64 = scalar(key, value, EXPECTED)?
                .parse()
                .map_err(|_| invalid(key, value, EXPECTED))?;
            if !(x > 0.0 && x < 1.0) {
                return Err(invalid(key, value, EXPECTED));
            }
            config.garbage_collection_threshold = x;
        }
        "roundup_power2_divisions" => {
            config.roundup_power2_divisions = roundup_divisions(key, value)?
        }
        "expandable_segments" => {
            if boolean(key, value)? {
                return Err(ConfigError::Unsupported {
                    key: key.to_owned(),
                    value: value.text(),
                    reason: "OpenCL has no virtual memory mapping; use expandable_segments:False \
                             (the default) and release_policy:before_grow to limit fragmentation"
                        .to_owned(),
                });
            }
            config.expandable_segments = false;
        }
        // PyTorch's pinned-host keys: checked, then ignored (see the module docs).
        "pinned_use_background_threads" => {
            boolean(key, value)?;
        }
        "pinned_num_register_threads" => {
            const EXPECTED: &str = "a power of two between 1 and 128";
            let n = integer(key, value, EXPECTED)?;
            if !n.is_power_of_two() || n > 128 {
                return Err(invalid(key, value, EXPECTED));
            }
        }
        "pinned_reserve_segment_size_mb" => {
            megabytes(key, value, 1, "an integer number of MiB > 0")?;
        }
        "memory_kind" => {
            config.memory_kind = match scalar(key, value, "buffer")? {
                "buffer" => MemoryKind::Buffer,
                "svm" => {
                    return Err(ConfigError::Unsupported {
                        key: key.to_owned(),
                        value: "svm".to_owned(),
                        reason: "SVM segments were removed: copies and kernel arguments of SVM \
                                 blocks had no path; use memory_kind:buffer (the default)"
                            .to_owned(),
                    })
                }
                _ => return Err(invalid(key, value, "buffer")),
            };
        }
        "release_policy" => {
            config.release_policy = match scalar(key, value, "on_oom or before_grow")? {
                "on_oom" => ReleasePolicy::OnOom,
                "before_grow" => ReleasePolicy::BeforeGrow,
                _ => return Err(invalid(key, value, "on_oom or before_grow")),
            };
        }
        "regrow_factor" => {
            const EXPECTED: &str = "an integer >= 1";
            let n = integer(key, value, EXPECTED)?;
            if n == 0 {
                return Err(invalid(key, value, EXPECTED));
            }
            config.regrow_factor = n;
        }
        "regrow_peak_fraction" => {
            const EXPECTED: &str = "a number in (0.0, 1.0], or 0 for no limit";
            let x: f64 = scalar(key, value, EXPECTED)?
                .parse()
                .map_err(|_| invalid(key, value, EXPECTED))?;
            if !(x == 0.0 || (x > 0.0 && x <= 1.0)) {
                return Err(invalid(key, value, EXPECTED));
            }
            config.regrow_peak_fraction = x;
        }
        "split_segments" => config.split_segments = Some(boolean(key, value)?),
        "consolidate_live" => config.consolidate_live = boolean(key, value)?,
        "relocation" => {
            config.relocation = match scalar(key, value, "off, merge or merge_all")? {
                "off" => Relocation::Off,
                "merge" => Relocation::Merge,
                "merge_all" => Relocation::MergeAll,
                _ => return Err(invalid(key, value, "off, merge or merge_all")),
            };
        }
        _ => {
            return Err(ConfigError::UnknownKey {
                key: key.to_owned(),
                allowed: AllocConfig::KEYS.join(", "),
            });
        }
    }
    Ok(())
}

pub(super) fn parse(text: &str) -> Result<AllocConfig, ConfigError> {
    let mut tokens = Tokens {
        tokens: tokenize(text),
        index: 0,
    };
    let mut entries: Vec<(String, Value)> = Vec::new();
    let mut more = !tokens.tokens.is_empty();
    while more {
        let key = tokens.word("a key")?;
        tokens.expect(":")?;
        let value = tokens.value()?;
        entries.push((key, value));
        more = tokens.index < tokens.tokens.len();
        if more {
            tokens.expect(",")?;
        }
    }
    let mut config = AllocConfig::default();
    // `large_segment_size_mb` first: it sets the minimum of the other size keys.
    for (key, value) in entries.iter().filter(|(k, _)| k == "large_segment_size_mb") {
        apply(&mut config, key, value)?;
    }
    for (key, value) in entries.iter().filter(|(k, _)| k != "large_segment_size_mb") {
        apply(&mut config, key, value)?;
    }
    Ok(config)
}
