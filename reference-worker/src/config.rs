//! Quirl's configuration schema (`quirl.config@4`): the record `load_config`
//! returns, with its defaults, its closed value domains and the migration of
//! schema versions 0–3 to 4.

use crate::error::{Label, OpError, has_terminal_controls};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Schema version written after migration.
pub const SCHEMA_VERSION: u32 = 4;
/// Custom themes per configuration.
pub const CUSTOM_THEMES_MAX: usize = 32;
/// Bytes in a theme name.
pub const THEME_NAME_BYTES_MAX: usize = 64;

/// Built-in palette names (Quirl 0.1's catalog).
pub const BUILTIN_THEMES: &[&str] = &[
    "ansi",
    "ayu-dark",
    "catppuccin-mocha",
    "cobalt-2",
    "dracula",
    "everforest-dark-medium",
    "github-dark",
    "gotham",
    "gruvbox-dark",
    "horizon-dark",
    "kanagawa-wave",
    "material",
    "monokai-dark",
    "moonfly",
    "night-owl",
    "nord",
    "oceanic-next",
    "one-dark",
    "one-half-black",
    "oxocarbon-dark",
    "palenight",
    "papercolor-dark",
    "rose-pine-moon",
    "snazzy",
    "solarized-dark",
    "sonokai",
    "srcery",
    "synthwave",
    "tokyo-night",
    "tomorrow-night",
    "zenburn",
];

/// Top-level configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct QuirlConfig {
    #[serde(default = "default_version")]
    pub schema_version: u32,
    #[serde(default)]
    pub editor: EditorConfig,
    #[serde(default)]
    pub picker: PickerConfig,
    #[serde(default)]
    pub prompt: PromptConfig,
    #[serde(default)]
    pub ui: UiConfig,
    #[serde(default)]
    pub completion: CompletionConfig,
}

fn default_version() -> u32 {
    SCHEMA_VERSION
}

/// Editor settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct EditorConfig {
    pub keymap: String,
    pub semantic_hints: bool,
    pub banner: String,
}

impl Default for EditorConfig {
    fn default() -> Self {
        Self {
            keymap: "emacs".to_owned(),
            semantic_hints: true,
            banner: "compact".to_owned(),
        }
    }
}

/// Picker settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PickerConfig {
    pub layout: String,
    pub preview: bool,
}

impl Default for PickerConfig {
    fn default() -> Self {
        Self {
            layout: "adaptive".to_owned(),
            preview: true,
        }
    }
}

/// Prompt settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PromptConfig {
    pub symbols: String,
    pub left: Vec<String>,
    pub right: Vec<String>,
    pub transient: bool,
}

impl Default for PromptConfig {
    fn default() -> Self {
        Self {
            symbols: "auto".to_owned(),
            left: ["directory", "git_branch", "git_state"]
                .map(str::to_owned)
                .to_vec(),
            right: ["rust_version", "jobs", "duration", "status"]
                .map(str::to_owned)
                .to_vec(),
            transient: true,
        }
    }
}

/// UI settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct UiConfig {
    pub surface: String,
    pub theme: String,
    pub themes: BTreeMap<String, ThemeColors>,
    pub statusline: StatuslineConfig,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            surface: "auto".to_owned(),
            theme: "tokyo-night".to_owned(),
            themes: BTreeMap::new(),
            statusline: StatuslineConfig::default(),
        }
    }
}

/// A custom palette: every role an exact `#RRGGBB`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct ThemeColors {
    pub accent_command: String,
    pub accent_data: String,
    pub context_primary: String,
    pub context_secondary: String,
    pub muted: String,
    pub border: String,
    pub status_background: String,
    pub error: String,
    pub warning: String,
    pub hint: String,
    pub string: String,
    pub operator: String,
    pub expansion: String,
    pub number: String,
}

impl ThemeColors {
    fn roles(&self) -> [(&'static str, &str); 14] {
        [
            ("accent_command", &self.accent_command),
            ("accent_data", &self.accent_data),
            ("context_primary", &self.context_primary),
            ("context_secondary", &self.context_secondary),
            ("muted", &self.muted),
            ("border", &self.border),
            ("status_background", &self.status_background),
            ("error", &self.error),
            ("warning", &self.warning),
            ("hint", &self.hint),
            ("string", &self.string),
            ("operator", &self.operator),
            ("expansion", &self.expansion),
            ("number", &self.number),
        ]
    }
}

/// Status line settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct StatuslineConfig {
    pub hints: bool,
}

impl Default for StatuslineConfig {
    fn default() -> Self {
        Self { hints: true }
    }
}

/// Completion settings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
#[allow(missing_docs)]
pub struct CompletionConfig {
    pub auto: bool,
    pub min_chars: u16,
}

impl Default for CompletionConfig {
    fn default() -> Self {
        Self {
            auto: true,
            min_chars: 1,
        }
    }
}

fn schema_error(source: &str, message: impl Into<String>) -> OpError {
    OpError::validation(message)
        .with_label(Label {
            source: Some(source.to_owned()),
            start: 0,
            end: 0,
            message: "schema mismatch".to_owned(),
        })
        .with_help("Check the documented Lua SDK shape and remove unknown fields or invalid values")
}

fn theme_limit(source: &str, what: &str, observed: String, label: &str, help: &str) -> OpError {
    OpError::resource_limit(format!("{what} exceeds its byte limit"))
        .with_context(observed)
        .with_label(Label {
            source: Some(source.to_owned()),
            start: 0,
            end: 0,
            message: label.to_owned(),
        })
        .with_help(help)
}

impl QuirlConfig {
    /// Read a configuration from the JSON form of the value the chunk
    /// returned, migrate old schema versions and validate.
    pub fn from_lua_json(value: &Value, source: &str) -> Result<Self, OpError> {
        let mut config: Self = crate::lenient::from_json(value).map_err(|e| {
            schema_error(
                source,
                format!("configuration does not match the Rust schema: {e}"),
            )
        })?;
        if config.schema_version < SCHEMA_VERSION {
            config.schema_version = SCHEMA_VERSION;
        }
        config.validate(source)?;
        Ok(config)
    }

    /// Quirl's `QuirlConfig::validate`.
    pub fn validate(&self, source: &str) -> Result<(), OpError> {
        if self.schema_version != SCHEMA_VERSION {
            return Err(schema_error(
                source,
                format!(
                    "config schema_version {} is unsupported; expected {SCHEMA_VERSION}",
                    self.schema_version
                ),
            ));
        }
        if !matches!(self.editor.keymap.as_str(), "helix" | "emacs" | "vim") {
            return Err(schema_error(
                source,
                "editor.keymap must be `helix`, `emacs`, or `vim`",
            ));
        }
        if !matches!(self.editor.banner.as_str(), "full" | "compact" | "none") {
            return Err(OpError::validation(
                "editor.banner must be `full`, `compact`, or `none`",
            )
            .with_help("Use `full` for the welcome and shortcuts, `compact` for one line, or `none` to hide it"));
        }
        if !matches!(self.picker.layout.as_str(), "adaptive" | "bottom" | "full") {
            return Err(schema_error(
                source,
                "picker.layout must be `adaptive`, `bottom`, or `full`",
            ));
        }
        if !matches!(
            self.prompt.symbols.as_str(),
            "auto" | "plain" | "unicode" | "nerd_font"
        ) {
            return Err(schema_error(
                source,
                "prompt.symbols must be `auto`, `plain`, `unicode`, or `nerd_font`",
            ));
        }
        if !matches!(self.ui.surface.as_str(), "auto" | "rich" | "simple") {
            return Err(schema_error(
                source,
                "ui.surface must be `auto`, `rich`, or `simple`",
            ));
        }
        self.validate_themes(source)?;
        if self.completion.min_chars > 4096 {
            return Err(schema_error(
                source,
                "completion.min_chars must be at most 4096",
            ));
        }
        Ok(())
    }

    fn validate_themes(&self, source: &str) -> Result<(), OpError> {
        theme_name(source, "ui.theme", &self.ui.theme)?;
        if self.ui.themes.len() > CUSTOM_THEMES_MAX {
            return Err(
                OpError::resource_limit("custom theme count exceeds its configured limit")
                    .with_context(format!(
                        "themes: {}; limit: {CUSTOM_THEMES_MAX}",
                        self.ui.themes.len()
                    ))
                    .with_label(Label {
                        source: Some(source.to_owned()),
                        start: 0,
                        end: 0,
                        message: "too many custom themes".to_owned(),
                    })
                    .with_help("Keep only the themes used by this configuration"),
            );
        }
        for (name, colors) in &self.ui.themes {
            theme_name(source, "custom theme name", name)?;
            if BUILTIN_THEMES.contains(&name.as_str()) {
                return Err(schema_error(
                    source,
                    format!("custom theme `{name}` must not shadow a built-in theme"),
                ));
            }
            for (role, color) in colors.roles() {
                if color.len() > 7 {
                    return Err(theme_limit(
                        source,
                        &format!("ui.themes.{name}.{role}"),
                        format!("bytes: {}; limit: 7", color.len()),
                        "theme color is too long",
                        "Use one exact #RRGGBB color",
                    ));
                }
                let valid = color.len() == 7
                    && color.starts_with('#')
                    && color.as_bytes()[1..].iter().all(u8::is_ascii_hexdigit);
                if !valid {
                    return Err(schema_error(
                        source,
                        format!("ui.themes.{name}.{role} must be an exact #RRGGBB color"),
                    ));
                }
            }
        }
        if !BUILTIN_THEMES.contains(&self.ui.theme.as_str())
            && !self.ui.themes.contains_key(&self.ui.theme)
        {
            return Err(schema_error(
                source,
                format!(
                    "ui.theme `{}` is not built in or defined in ui.themes",
                    self.ui.theme
                ),
            ));
        }
        Ok(())
    }

    /// The `load_config` result (keys sorted, every field present).
    pub fn to_json(&self) -> Result<Value, OpError> {
        serde_json::to_value(self)
            .map(crate::convert::sort_keys)
            .map_err(|e| OpError::validation(format!("could not encode the configuration: {e}")))
    }
}

fn theme_name(source: &str, what: &str, name: &str) -> Result<(), OpError> {
    if name.len() > THEME_NAME_BYTES_MAX {
        return Err(theme_limit(
            source,
            what,
            format!("bytes: {}; limit: {THEME_NAME_BYTES_MAX}", name.len()),
            "theme name is too long",
            "Use a shorter stable ASCII theme name",
        ));
    }
    if name.is_empty()
        || has_terminal_controls(name)
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(schema_error(
            source,
            format!("{what} `{name}` must use lowercase ASCII letters, digits, or dash"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn an_empty_table_is_the_default_configuration() {
        let config = QuirlConfig::from_lua_json(&json!({}), "init.lua").unwrap();
        let text = serde_json::to_string(&config.to_json().unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"completion":{"auto":true,"min_chars":1},"editor":{"banner":"compact","keymap":"emacs","semantic_hints":true},"picker":{"layout":"adaptive","preview":true},"prompt":{"left":["directory","git_branch","git_state"],"right":["rust_version","jobs","duration","status"],"symbols":"auto","transient":true},"schema_version":4,"ui":{"statusline":{"hints":true},"surface":"auto","theme":"tokyo-night","themes":{}}}"#
        );
    }

    #[test]
    fn old_versions_migrate_and_future_versions_fail() {
        let config = QuirlConfig::from_lua_json(&json!({"schema_version": 2}), "c").unwrap();
        assert_eq!(config.schema_version, SCHEMA_VERSION);
        assert!(QuirlConfig::from_lua_json(&json!({"schema_version": 5}), "c").is_err());
    }

    #[test]
    fn unknown_fields_and_closed_domains_are_enforced() {
        assert!(QuirlConfig::from_lua_json(&json!({"extra": 1}), "c").is_err());
        assert!(QuirlConfig::from_lua_json(&json!({"editor": {"keymap": "ed"}}), "c").is_err());
        assert!(QuirlConfig::from_lua_json(&json!({"ui": {"theme": "nope"}}), "c").is_err());
        let empty_left = QuirlConfig::from_lua_json(&json!({"prompt": {"left": {}}}), "c").unwrap();
        assert!(empty_left.prompt.left.is_empty());
    }
}
