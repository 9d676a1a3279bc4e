//! Quirl's configuration schema (`quirl.config@4`): the record `load_config`
//! returns, with its defaults, its closed value domains and the migration of
//! schema versions 0–3 to 4.

use crate::error::{Label, OpError, has_terminal_controls};
use crate::records_from_lua::{Fields, ReadError};
use quirl_lua_protocol::records::{
    CompletionConfig, EditorConfig, OperationResult, PickerConfig, PromptConfig, QuirlConfig,
    StatuslineConfig, ThemeColors, UiConfig,
};
use serde_json::Value as Json;
use std::collections::BTreeMap;

/// Schema version written after migration.
pub const SCHEMA_VERSION: u32 = 4;
/// Worker-only (a semantic rule of Quirl's configuration, which the
/// protocol leaves to the host; DESIGN §15.10): custom themes per configuration.
pub const CUSTOM_THEMES_MAX: usize = 32;
/// Worker-only (likewise): bytes in a theme name.
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

/// Read the configuration from the JSON form of the table the chunk
/// returned, with Quirl's defaults for every absent member: the protocol's
/// [`QuirlConfig`] record, not yet migrated or validated.
fn read(value: &Json) -> Result<QuirlConfig, ReadError> {
    let mut top = Fields::of(value, "")?;
    let schema_version = top
        .optional_integer("schema_version")?
        .unwrap_or(SCHEMA_VERSION);
    let editor = read_editor(&mut top)?;
    let picker = read_picker(&mut top)?;
    let prompt = read_prompt(&mut top)?;
    let ui = read_ui(&mut top)?;
    let completion = read_completion(&mut top)?;
    top.finish()?;
    Ok(QuirlConfig {
        schema_version,
        editor,
        picker,
        prompt,
        ui,
        completion,
    })
}

/// The `editor` table, with Quirl's defaults.
fn read_editor(top: &mut Fields<'_>) -> Result<EditorConfig, ReadError> {
    let mut editor = top.nested("editor")?;
    let editor_config = EditorConfig {
        keymap: editor.string_or("keymap", "emacs")?,
        semantic_hints: editor.bool_or("semantic_hints", true)?,
        banner: editor.string_or("banner", "compact")?,
    };
    editor.finish()?;
    Ok(editor_config)
}

/// The `picker` table, with Quirl's defaults.
fn read_picker(top: &mut Fields<'_>) -> Result<PickerConfig, ReadError> {
    let mut picker = top.nested("picker")?;
    let picker_config = PickerConfig {
        layout: picker.string_or("layout", "adaptive")?,
        preview: picker.bool_or("preview", true)?,
    };
    picker.finish()?;
    Ok(picker_config)
}

/// The `prompt` table, with Quirl's defaults.
fn read_prompt(top: &mut Fields<'_>) -> Result<PromptConfig, ReadError> {
    let mut prompt = top.nested("prompt")?;
    let prompt_config = PromptConfig {
        symbols: prompt.string_or("symbols", "auto")?,
        left: prompt
            .optional_strings("left")?
            .unwrap_or_else(|| owned(&["directory", "git_branch", "git_state"])),
        right: prompt
            .optional_strings("right")?
            .unwrap_or_else(|| owned(&["rust_version", "jobs", "duration", "status"])),
        transient: prompt.bool_or("transient", true)?,
    };
    prompt.finish()?;
    Ok(prompt_config)
}

/// The `ui` table (its custom themes and `statusline` included), with
/// Quirl's defaults.
fn read_ui(top: &mut Fields<'_>) -> Result<UiConfig, ReadError> {
    let mut ui = top.nested("ui")?;
    let surface = ui.string_or("surface", "auto")?;
    let theme = ui.string_or("theme", "tokyo-night")?;
    let themes = read_themes(&mut ui)?;
    let mut statusline = ui.nested("statusline")?;
    let statusline_config = StatuslineConfig {
        hints: statusline.bool_or("hints", true)?,
    };
    statusline.finish()?;
    ui.finish()?;
    Ok(UiConfig {
        surface,
        theme,
        themes,
        statusline: statusline_config,
    })
}

/// `ui.themes`: each custom theme with every colour role present.
fn read_themes(ui: &mut Fields<'_>) -> Result<BTreeMap<String, ThemeColors>, ReadError> {
    let mut themes = BTreeMap::new();
    if let Some(value) = ui.value("themes") {
        for (name, colors) in Fields::of(value, "ui.themes")?.entries() {
            let mut colors = Fields::of(colors, &format!("ui.themes.{name}"))?;
            let mut read: [String; 14] = Default::default();
            for (color, role) in read.iter_mut().zip(ThemeColors::ROLES) {
                *color = colors.string(role)?;
            }
            colors.finish()?;
            themes.insert(name.clone(), ThemeColors::from_colors(read));
        }
    }
    Ok(themes)
}

/// The `completion` table, with Quirl's defaults.
fn read_completion(top: &mut Fields<'_>) -> Result<CompletionConfig, ReadError> {
    let mut completion = top.nested("completion")?;
    let completion_config = CompletionConfig {
        auto: completion.bool_or("auto", true)?,
        min_chars: completion.optional_integer("min_chars")?.unwrap_or(1),
    };
    completion.finish()?;
    Ok(completion_config)
}

fn owned(names: &[&str]) -> Vec<String> {
    names.iter().map(|name| (*name).to_owned()).collect()
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

/// Read a configuration from the JSON form of the value the chunk
/// returned, migrate old schema versions and validate.
pub fn from_lua_json(value: &Json, source: &str) -> Result<QuirlConfig, OpError> {
    let mut config = read(value).map_err(|e| {
        schema_error(
            source,
            format!("configuration does not match the Rust schema: {e}"),
        )
    })?;
    if config.schema_version < SCHEMA_VERSION {
        config.schema_version = SCHEMA_VERSION;
    }
    validate(&config, source)?;
    Ok(config)
}

/// Quirl's `QuirlConfig::validate`: the closed value domains and the
/// custom themes (the host's semantic checks, which the protocol leaves to
/// the host).
pub fn validate(config: &QuirlConfig, source: &str) -> Result<(), OpError> {
    if config.schema_version != SCHEMA_VERSION {
        return Err(schema_error(
            source,
            format!(
                "config schema_version {} is unsupported; expected {SCHEMA_VERSION}",
                config.schema_version
            ),
        ));
    }
    if !matches!(config.editor.keymap.as_str(), "helix" | "emacs" | "vim") {
        return Err(schema_error(
            source,
            "editor.keymap must be `helix`, `emacs`, or `vim`",
        ));
    }
    if !matches!(config.editor.banner.as_str(), "full" | "compact" | "none") {
        return Err(OpError::validation(
                "editor.banner must be `full`, `compact`, or `none`",
            )
            .with_help("Use `full` for the welcome and shortcuts, `compact` for one line, or `none` to hide it"));
    }
    if !matches!(
        config.picker.layout.as_str(),
        "adaptive" | "bottom" | "full"
    ) {
        return Err(schema_error(
            source,
            "picker.layout must be `adaptive`, `bottom`, or `full`",
        ));
    }
    if !matches!(
        config.prompt.symbols.as_str(),
        "auto" | "plain" | "unicode" | "nerd_font"
    ) {
        return Err(schema_error(
            source,
            "prompt.symbols must be `auto`, `plain`, `unicode`, or `nerd_font`",
        ));
    }
    if !matches!(config.ui.surface.as_str(), "auto" | "rich" | "simple") {
        return Err(schema_error(
            source,
            "ui.surface must be `auto`, `rich`, or `simple`",
        ));
    }
    validate_themes(config, source)?;
    if config.completion.min_chars > 4096 {
        return Err(schema_error(
            source,
            "completion.min_chars must be at most 4096",
        ));
    }
    Ok(())
}

fn validate_themes(config: &QuirlConfig, source: &str) -> Result<(), OpError> {
    theme_name(source, "ui.theme", &config.ui.theme)?;
    if config.ui.themes.len() > CUSTOM_THEMES_MAX {
        return Err(
            OpError::resource_limit("custom theme count exceeds its configured limit")
                .with_context(format!(
                    "themes: {}; limit: {CUSTOM_THEMES_MAX}",
                    config.ui.themes.len()
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
    for (name, colors) in &config.ui.themes {
        theme_name(source, "custom theme name", name)?;
        if BUILTIN_THEMES.contains(&name.as_str()) {
            return Err(schema_error(
                source,
                format!("custom theme `{name}` must not shadow a built-in theme"),
            ));
        }
        check_theme_colors(source, name, colors)?;
    }
    if !BUILTIN_THEMES.contains(&config.ui.theme.as_str())
        && !config.ui.themes.contains_key(&config.ui.theme)
    {
        return Err(schema_error(
            source,
            format!(
                "ui.theme `{}` is not built in or defined in ui.themes",
                config.ui.theme
            ),
        ));
    }
    Ok(())
}

/// Every colour of custom theme `name` is an exact `#RRGGBB`.
fn check_theme_colors(source: &str, name: &str, colors: &ThemeColors) -> Result<(), OpError> {
    for (role, color) in ThemeColors::ROLES.into_iter().zip(colors.colors()) {
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
    Ok(())
}

/// The `load_config` result (keys sorted, every field present).
pub fn to_json(config: &QuirlConfig) -> Result<Json, OpError> {
    OperationResult::Config(config.clone())
        .to_value()
        .map_err(|e| OpError::validation(format!("could not encode the configuration: {e}")))
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
        let config = from_lua_json(&json!({}), "init.lua").unwrap();
        let text = serde_json::to_string(&to_json(&config).unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"completion":{"auto":true,"min_chars":1},"editor":{"banner":"compact","keymap":"emacs","semantic_hints":true},"picker":{"layout":"adaptive","preview":true},"prompt":{"left":["directory","git_branch","git_state"],"right":["rust_version","jobs","duration","status"],"symbols":"auto","transient":true},"schema_version":4,"ui":{"statusline":{"hints":true},"surface":"auto","theme":"tokyo-night","themes":{}}}"#
        );
    }

    #[test]
    fn old_versions_migrate_and_future_versions_fail() {
        let config = from_lua_json(&json!({"schema_version": 2}), "c").unwrap();
        assert_eq!(config.schema_version, SCHEMA_VERSION);
        assert!(from_lua_json(&json!({"schema_version": 5}), "c").is_err());
    }

    #[test]
    fn unknown_fields_and_closed_domains_are_enforced() {
        assert!(from_lua_json(&json!({"extra": 1}), "c").is_err());
        assert!(from_lua_json(&json!({"editor": {"keymap": "ed"}}), "c").is_err());
        assert!(from_lua_json(&json!({"ui": {"theme": "nope"}}), "c").is_err());
        let empty_left = from_lua_json(&json!({"prompt": {"left": {}}}), "c").unwrap();
        assert!(empty_left.prompt.left.is_empty());
    }

    #[test]
    fn the_configuration_is_the_protocols_record_and_round_trips() {
        let roles: serde_json::Map<String, Json> = ThemeColors::ROLES
            .iter()
            .map(|role| ((*role).to_owned(), json!("#a0b1c2")))
            .collect();
        let config = from_lua_json(
            &json!({"ui": {"theme": "mine", "themes": {"mine": roles}},
                    "completion": {"min_chars": 2}}),
            "c",
        )
        .unwrap();
        let wire = to_json(&config).unwrap();
        assert_eq!(
            OperationResult::decode(
                quirl_lua_protocol::records::OperationKind::LoadConfig,
                &wire
            )
            .unwrap(),
            OperationResult::Config(config)
        );
        let mut missing = roles_without("number");
        missing.insert("extra".to_owned(), json!("#000000"));
        let error = from_lua_json(&json!({"ui": {"themes": {"mine": missing}}}), "c").unwrap_err();
        assert!(error.message.contains("ui.themes.mine.number"), "{error:?}");
    }

    fn roles_without(role: &str) -> serde_json::Map<String, Json> {
        ThemeColors::ROLES
            .iter()
            .filter(|name| **name != role)
            .map(|name| ((*name).to_owned(), json!("#000000")))
            .collect()
    }
}
