//! `--config`: the allocator configuration option of the commands that configure a caching
//! allocator (`xpu replay`, `xpu replay-all`, `xpu bench`), with its one parsing rule.

use anyhow::Context as _;
use xpu_alloc::AllocConfig;

/// The allocator configuration option, flattened into each command that takes it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AllocConfArg {
    /// Allocator configuration (`XPU_ALLOC_CONF` grammar, e.g. `max_split_size_mb:128`);
    /// default: the `XPU_ALLOC_CONF` environment variable. An invalid one is an error.
    #[arg(long)]
    pub config: Option<String>,
}

impl AllocConfArg {
    /// The allocator configuration: `--config` when given, else the `XPU_ALLOC_CONF`
    /// environment variable (as in a real program), else the defaults; returned with its text
    /// (empty for the defaults).
    ///
    /// # Errors
    /// An invalid configuration, naming where it came from (`invalid --config '...'`,
    /// `invalid XPU_ALLOC_CONF '...'`); an `XPU_ALLOC_CONF` that is not UTF-8.
    pub fn alloc_config(&self) -> anyhow::Result<(String, AllocConfig)> {
        let (text, origin) = match &self.config {
            Some(t) => (t.clone(), "--config"),
            None => match std::env::var(xpu_alloc::CONFIG_ENV) {
                Ok(t) => (t, xpu_alloc::CONFIG_ENV),
                Err(std::env::VarError::NotPresent) => {
                    return Ok((String::new(), AllocConfig::default()))
                }
                Err(std::env::VarError::NotUnicode(text)) => {
                    anyhow::bail!("invalid {} {:?}: not UTF-8", xpu_alloc::CONFIG_ENV, text)
                }
            },
        };
        let config =
            AllocConfig::parse(&text).with_context(|| format!("invalid {origin} '{text}'"))?;
        Ok((text, config))
    }

    /// The checked configuration text for a replay ([`crate::replay::replay_file`]): `None`
    /// for the defaults.
    ///
    /// # Errors
    /// See [`AllocConfArg::alloc_config`].
    pub fn replay_text(&self) -> anyhow::Result<Option<String>> {
        let (text, _) = self.alloc_config()?;
        Ok((!text.is_empty()).then_some(text))
    }
}
