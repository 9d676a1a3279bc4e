//! The Quirl configuration record returned by `load_config`.
//!
//! The protocol checks its shape only; the semantic checks (known keymaps,
//! theme colours, …) belong to the host that applies the configuration.

use crate::json::{Validate, decode_record};
use serde::Serialize;
use std::collections::BTreeMap;

/// The top-level configuration (Quirl config schema 4). Every field is required on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct QuirlConfig {
    /// Configuration schema version.
    pub schema_version: u32,
    /// Editor behaviour.
    pub editor: EditorConfig,
    /// Picker presentation.
    pub picker: PickerConfig,
    /// Prompt composition.
    pub prompt: PromptConfig,
    /// Terminal surface.
    pub ui: UiConfig,
    /// Automatic completion.
    pub completion: CompletionConfig,
}
decode_record!(QuirlConfig "configuration" {
    schema_version: req,
    editor: req,
    picker: req,
    prompt: req,
    ui: req,
    completion: req,
});
impl Validate for QuirlConfig {}

/// Editor configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EditorConfig {
    /// `emacs`, `vim` or `helix`.
    pub keymap: String,
    /// Catalog-backed hints while typing.
    pub semantic_hints: bool,
    /// `full`, `compact` or `none`.
    pub banner: String,
}
decode_record!(EditorConfig "editor configuration" {
    keymap: req,
    semantic_hints: req,
    banner: req,
});
impl Validate for EditorConfig {}

/// Picker configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PickerConfig {
    /// `adaptive`, `bottom` or `full`.
    pub layout: String,
    /// Whether a preview pane may be shown.
    pub preview: bool,
}
decode_record!(PickerConfig "picker configuration" { layout: req, preview: req });
impl Validate for PickerConfig {}

/// Prompt configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PromptConfig {
    /// Symbol profile.
    pub symbols: String,
    /// Left segments.
    pub left: Vec<String>,
    /// Right segments.
    pub right: Vec<String>,
    /// Transient prompt.
    pub transient: bool,
}
decode_record!(PromptConfig "prompt configuration" {
    symbols: req,
    left: req,
    right: req,
    transient: req,
});
impl Validate for PromptConfig {}

/// Terminal UI configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UiConfig {
    /// `auto`, `rich` or `simple`.
    pub surface: String,
    /// Selected theme.
    pub theme: String,
    /// Custom themes by name.
    pub themes: BTreeMap<String, ThemeColors>,
    /// Status line.
    pub statusline: StatuslineConfig,
}
decode_record!(UiConfig "ui configuration" {
    surface: req,
    theme: req,
    themes: req,
    statusline: req,
});
impl Validate for UiConfig {}

/// The fourteen colour roles of a theme, each `#RRGGBB`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
decode_record!(ThemeColors "theme colors" {
    accent_command: req,
    accent_data: req,
    context_primary: req,
    context_secondary: req,
    muted: req,
    border: req,
    status_background: req,
    error: req,
    warning: req,
    hint: req,
    string: req,
    operator: req,
    expansion: req,
    number: req,
});
impl Validate for ThemeColors {}

impl ThemeColors {
    /// The fourteen role names, in wire order.
    pub const ROLES: [&'static str; 14] = [
        "accent_command",
        "accent_data",
        "context_primary",
        "context_secondary",
        "muted",
        "border",
        "status_background",
        "error",
        "warning",
        "hint",
        "string",
        "operator",
        "expansion",
        "number",
    ];

    /// Each role's colour, in the order of [`ThemeColors::ROLES`].
    pub fn colors(&self) -> [&str; 14] {
        [
            &self.accent_command,
            &self.accent_data,
            &self.context_primary,
            &self.context_secondary,
            &self.muted,
            &self.border,
            &self.status_background,
            &self.error,
            &self.warning,
            &self.hint,
            &self.string,
            &self.operator,
            &self.expansion,
            &self.number,
        ]
    }

    /// Build a theme from one colour per role, in the order of
    /// [`ThemeColors::ROLES`] (for a host that reads a theme from another
    /// representation, such as a Lua table).
    pub fn from_colors(colors: [String; 14]) -> Self {
        let [
            accent_command,
            accent_data,
            context_primary,
            context_secondary,
            muted,
            border,
            status_background,
            error,
            warning,
            hint,
            string,
            operator,
            expansion,
            number,
        ] = colors;
        Self {
            accent_command,
            accent_data,
            context_primary,
            context_secondary,
            muted,
            border,
            status_background,
            error,
            warning,
            hint,
            string,
            operator,
            expansion,
            number,
        }
    }
}

/// Status line configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StatuslineConfig {
    /// Whether hints are shown.
    pub hints: bool,
}
decode_record!(StatuslineConfig "statusline configuration" { hints: req });
impl Validate for StatuslineConfig {}

/// Completion configuration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CompletionConfig {
    /// Automatic completion.
    pub auto: bool,
    /// Minimum typed characters.
    pub min_chars: u16,
}
decode_record!(CompletionConfig "completion configuration" { auto: req, min_chars: req });
impl Validate for CompletionConfig {}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn theme_roles_follow_the_wire_order_of_the_record() {
        let theme = ThemeColors::from_colors(ThemeColors::ROLES.map(str::to_owned));
        let json = serde_json::to_value(&theme).unwrap();
        let object = json.as_object().unwrap();
        assert_eq!(object.len(), ThemeColors::ROLES.len());
        for (role, color) in ThemeColors::ROLES.iter().zip(theme.colors()) {
            assert_eq!(object[*role], *role, "role {role} holds its own name");
            assert_eq!(color, *role);
        }
    }
}
