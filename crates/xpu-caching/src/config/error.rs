//! Typed errors of the allocator configuration string.

use thiserror::Error;

/// A problem in an `XPU_ALLOC_CONF` string or a `xpu_alloc::set_config` argument.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    /// The key is not one this allocator knows.
    #[error("unknown key '{key}' in the allocator config; allowed keys: {allowed}")]
    UnknownKey {
        /// The key as written.
        key: String,
        /// Comma-separated list of the accepted keys.
        allowed: String,
    },
    /// The key is known but its value is not acceptable.
    #[error("invalid value '{value}' for allocator config key '{key}': expected {expected}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// The accepted values, in words.
        expected: String,
    },
    /// The value is well-formed but the feature is not provided by this allocator.
    #[error("allocator config '{key}:{value}' is not supported: {reason}")]
    Unsupported {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// Why, and what to use instead.
        reason: String,
    },
    /// The configuration's environment variable (`XPU_ALLOC_CONF`) is not valid UTF-8; `text`
    /// is it with the invalid bytes replaced by U+FFFD.
    #[error("the allocator config is not UTF-8: {text:?}")]
    NotUtf8 {
        /// The value, lossily decoded.
        text: String,
    },
    /// The string does not follow the `key:value,key:[a:b,>:c]` grammar.
    #[error("malformed allocator config at token {index}: {message}")]
    Syntax {
        /// Index of the offending token (tokens are split on `,` `:` `[` `]`).
        index: usize,
        /// What was expected.
        message: String,
    },
}
