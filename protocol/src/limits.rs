//! Every numeric limit of `quirl.lua-worker@1`, in one place.
//!
//! SPEC.md and [`LUA_WORKER_PROTOCOL_DESCRIPTOR`] quote these values; the
//! decoder, the encoder and the session machines read them from here and
//! nowhere else. Limits marked "Quirl" are the values Quirl 0.1 enforces;
//! the others are bounds this implementation adds and documents.

/// The only protocol version of this crate. Versions 0 and 2+ fail closed.
pub const PROTOCOL_VERSION: u32 = 1;

/// The command-line argument that puts a Quirl executable into worker mode.
pub const WORKER_ARGUMENT: &str = "--internal-lua-worker-v1";

/// The exact descriptor string the parent sends in `initialize` (Quirl).
///
/// A worker compares it byte for byte; any difference is a
/// `descriptor_mismatch`. The numbers it names are the constants of this
/// module (a test checks each of them).
pub const LUA_WORKER_PROTOCOL_DESCRIPTOR: &str = "quirl.lua-worker@1{frame:u32be-length<=5242880+json;request:{deny_unknown,version=1,id:u64,operation};response:{deny_unknown,version=1,id:u64,ok:bool,result:any,error?:ShellError{labels.start/end:u32}};host-call:{deny_unknown,request_id:u64,call_id:u32,command<=1048576,deadline_ms:u64,max_output_bytes<=1048576};event.output.bytes:u64;context.capture.max_bytes_per_stream:u64;test-count:u64;policy:{memory_bytes:1..=67108864,instructions:1..=100000000,wall_time_ms:1..=60000};host-calls-per-request<=16;timeout|cancel|protocol-failure:kill-tree+reap+poison;stdio:stdin+stderr-protocol,stdout=null,terminal:none}";

/// Width of the big-endian frame length prefix, in bytes.
pub const FRAME_HEADER_BYTES: usize = 4;

/// Maximum UTF-8 bytes of one Lua source (Quirl: 4 MiB).
pub const SOURCE_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Protocol context allowed in a frame on top of the largest source (Quirl: 1 MiB).
pub const FRAME_CONTEXT_BYTES: usize = 1024 * 1024;

/// Maximum JSON payload of one frame, the length prefix excluded (Quirl: 5,242,880).
///
/// A declared length of 0 or above this value is rejected before any
/// payload byte is buffered.
pub const FRAME_BYTES_MAX: usize = SOURCE_BYTES_MAX + FRAME_CONTEXT_BYTES;

/// Maximum nesting depth of arrays and objects in one frame, envelope included.
///
/// 127 is the deepest document `serde_json` (and so Quirl 0.1) accepts; a
/// deeper frame could never have come from, or reached, a Quirl peer. Each
/// nesting level of a structured value costs two JSON levels (the `list`
/// object and its `value` array), so inside a `run` frame the deepest
/// structured value that fits is about 60 lists: this limit, not
/// [`VALUE_DEPTH_MAX`], is the one reached first on the wire (SPEC.md §14).
pub const JSON_DEPTH_MAX: usize = 127;

/// Maximum host calls (proxied process runs) during one request (Quirl: 16).
///
/// Call ids run 1, 2, … up to this value; the 17th call is a
/// `host_call_limit` violation.
pub const HOST_CALLS_PER_REQUEST_MAX: u32 = 16;

/// Maximum UTF-8 bytes of one host-call command (Quirl: 1 MiB).
pub const HOST_COMMAND_BYTES_MAX: usize = 1024 * 1024;

/// Maximum `max_output_bytes` of one host call, per stream (Quirl: 1 MiB).
pub const HOST_OUTPUT_BYTES_MAX: u64 = 1024 * 1024;

/// Upper bound of `Policy::memory_limit_bytes` (Quirl: 64 MiB); the lower bound is 1.
pub const POLICY_MEMORY_BYTES_MAX: u64 = 64 * 1024 * 1024;

/// Upper bound of `Policy::instruction_limit` (Quirl: 100,000,000); the lower bound is 1.
pub const POLICY_INSTRUCTIONS_MAX: u64 = 100_000_000;

/// Upper bound of `Policy::wall_time_ms` (Quirl: 60,000); the lower bound is 1.
pub const POLICY_WALL_TIME_MS_MAX: u64 = 60_000;

/// Maximum items in each list (labels, context, help) of one error record (Quirl: 64).
pub const ERROR_ITEMS_MAX: usize = 64;

/// Maximum UTF-8 text of one error record, all strings together (Quirl: 256 KiB).
pub const ERROR_TEXT_BYTES_MAX: usize = 256 * 1024;

/// Maximum nodes of one structured value (Quirl: 100,000).
pub const VALUE_NODES_MAX: usize = 100_000;

/// Maximum nesting depth of one structured value (Quirl: 64).
pub const VALUE_DEPTH_MAX: usize = 64;

/// Maximum UTF-8 bytes of strings and record keys in one structured value (Quirl: 8 MiB).
pub const VALUE_TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Maximum bytes of one execution input or output byte stream (Quirl: 8 MiB).
pub const EXECUTION_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Maximum `max_bytes_per_stream` of a capture output target (Quirl: 1 MiB); the lower bound is 1.
pub const CAPTURE_BYTES_MAX: u64 = 1024 * 1024;

/// Maximum arguments in one execution context (Quirl: 1,024).
pub const ARGUMENTS_MAX: usize = 1_024;

/// Maximum UTF-8 bytes of all arguments of one execution context (Quirl: 1 MiB).
pub const ARGUMENT_BYTES_MAX: usize = 1024 * 1024;

/// Maximum environment entries of one execution context (Quirl: 256).
pub const ENVIRONMENT_ENTRIES_MAX: usize = 256;

/// Maximum UTF-8 bytes of names and values of one environment (Quirl: 64 KiB).
pub const ENVIRONMENT_BYTES_MAX: usize = 64 * 1024;

/// Maximum UTF-8 bytes of a working directory (Quirl: 4 KiB).
pub const WORKING_DIRECTORY_BYTES_MAX: usize = 4 * 1024;

/// Maximum non-fatal diagnostics of one execution outcome (Quirl: 64).
pub const DIAGNOSTICS_MAX: usize = 64;

/// Maximum actions of one event handler report (Quirl: 64).
pub const EVENT_ACTIONS_MAX: usize = 64;

/// Maximum items of a `complete` result (Quirl: 1,000).
pub const COMPLETION_ITEMS_MAX: usize = 1_000;

/// Maximum UTF-8 bytes of the strings of one completion item, keys not counted (Quirl: 16 KiB).
pub const COMPLETION_ITEM_BYTES_MAX: usize = 16 * 1024;

/// Maximum UTF-8 bytes of the strings of all items of a `complete` result (Quirl: 256 KiB).
pub const COMPLETION_RESULT_BYTES_MAX: usize = 256 * 1024;

/// Maximum UTF-8 bytes of a `render_prompt` result (Quirl: 16 KiB).
pub const PROMPT_RETURN_BYTES_MAX: usize = 16 * 1024;

/// The extension event protocol version an `event` request must carry (Quirl: 2).
///
/// Quirl's worker runtime refuses every other value, so the codec does too
/// (`domain_bounds`): a parent never sends an event the worker must refuse.
pub const EXTENSION_PROTOCOL_VERSION: u32 = 2;

/// Maximum nodes of a free-form `annotate_result` value (Quirl: 100,000).
pub const ANNOTATION_NODES_MAX: usize = 100_000;

/// Maximum nesting depth of a free-form `annotate_result` value (Quirl: 64).
pub const ANNOTATION_DEPTH_MAX: usize = 64;

/// Maximum UTF-8 bytes of keys and strings of an `annotate_result` value (Quirl: 8 MiB).
pub const ANNOTATION_TEXT_BYTES_MAX: usize = 8 * 1024 * 1024;

/// Plugin registrations: maximum prompt segments (Quirl: 64).
pub const PROMPT_SEGMENTS_MAX: usize = 64;
/// Plugin registrations: maximum bytes of all prompt segment names (Quirl: 8 KiB).
pub const PROMPT_SEGMENT_BYTES_MAX: usize = 8 * 1024;
/// Plugin registrations: maximum completion providers (Quirl: 64).
pub const COMPLETION_PROVIDERS_MAX: usize = 64;
/// Plugin registrations: maximum bytes of all completion provider commands (Quirl: 16 KiB).
pub const COMPLETION_PROVIDER_BYTES_MAX: usize = 16 * 1024;
/// Plugin registrations: maximum commands (Quirl: 64).
pub const PLUGIN_COMMANDS_MAX: usize = 64;
/// Plugin registrations: maximum bytes of all command metadata (Quirl: 256 KiB).
pub const PLUGIN_COMMAND_BYTES_MAX: usize = 256 * 1024;
/// Plugin registrations: maximum event handlers (Quirl: 64).
pub const EVENT_HANDLERS_MAX: usize = 64;
/// Plugin registrations: maximum bytes of all event handler declarations (Quirl: 64 KiB).
pub const EVENT_HANDLER_BYTES_MAX: usize = 64 * 1024;
/// Plugin registrations: maximum contributions (Quirl: 64).
pub const CONTRIBUTIONS_MAX: usize = 64;
/// Plugin registrations: maximum bytes of all contributions (Quirl: 64 KiB).
pub const CONTRIBUTION_BYTES_MAX: usize = 64 * 1024;
/// Plugin registrations: maximum panel contributions (Quirl: 16).
pub const PANELS_MAX: usize = 16;
/// Plugin registrations: maximum bytes of all panel contributions (Quirl: 32 KiB).
pub const PANEL_BYTES_MAX: usize = 32 * 1024;
/// Maximum UTF-8 bytes of one registration name (Quirl: 128).
pub const REGISTRATION_NAME_BYTES_MAX: usize = 128;
/// Maximum UTF-8 bytes of a command signature or summary (Quirl: 2 KiB).
pub const REGISTRATION_DESCRIPTION_BYTES_MAX: usize = 2 * 1024;
/// Maximum UTF-8 bytes of command details (Quirl: 16 KiB).
pub const COMMAND_DETAILS_BYTES_MAX: usize = 16 * 1024;
/// Maximum UTF-8 bytes of a command input or output type (Quirl: 256).
pub const COMMAND_TYPE_BYTES_MAX: usize = 256;
/// Maximum examples of one command (Quirl: 32).
pub const COMMAND_EXAMPLES_MAX: usize = 32;
/// Maximum UTF-8 bytes of one command example (Quirl: 4 KiB).
pub const COMMAND_EXAMPLE_BYTES_MAX: usize = 4 * 1024;
/// Maximum effects of one command (Quirl: 32).
pub const COMMAND_EFFECTS_MAX: usize = 32;
/// Maximum UTF-8 bytes of one command effect (Quirl: 256).
pub const COMMAND_EFFECT_BYTES_MAX: usize = 256;
/// Maximum error codes of one command (Quirl: 64).
pub const COMMAND_ERROR_CODES_MAX: usize = 64;
/// Maximum UTF-8 bytes of one command error code name (Quirl: 256).
pub const COMMAND_ERROR_CODE_BYTES_MAX: usize = 256;
/// Maximum UTF-8 bytes of one command error description (Quirl: 2 KiB).
pub const COMMAND_ERROR_DESCRIPTION_BYTES_MAX: usize = 2 * 1024;
/// Maximum UTF-8 bytes of a panel's plain fallback (Quirl: 16 KiB).
pub const PANEL_FALLBACK_BYTES_MAX: usize = 16 * 1024;
/// Inclusive upper bound of a prompt segment deadline in ms (Quirl: 100); the lower bound is 1.
pub const PROMPT_DEADLINE_MS_MAX: u64 = 100;
/// Inclusive upper bound of an extension callback deadline in ms (Quirl: 250); the lower bound is 1.
pub const EXTENSION_DEADLINE_MS_MAX: u64 = 250;
/// Deadline of a completion-provider callback (Quirl's fixed 50 ms, DESIGN §15.6).
///
/// The worker stops a `complete` callback at this deadline with its own
/// clock; the parent holds the callback to it (plus its slack) before it
/// kills the worker.
pub const COMPLETION_DEADLINE: std::time::Duration = std::time::Duration::from_millis(50);
