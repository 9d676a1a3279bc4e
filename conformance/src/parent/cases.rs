//! Parent cases as data (`conformance/cases/parent.json`).
//!
//! A case names the command-line flags the parent under test gets, the
//! script the fake worker plays (`worker`), and what the parent must do
//! (`expect`). `quirl-conformance fake-worker CASE` plays the script; the
//! runner judges the parent's exit status, output, timing and leftovers.

use serde::Deserialize;
use serde_json::Value;

/// The parent case file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentCaseFile {
    /// What the file covers.
    pub about: String,
    /// The cases.
    pub cases: Vec<ParentCaseData>,
}

/// One parent case.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentCaseData {
    /// Unique name, after the MUST it checks.
    pub name: String,
    /// SPEC.md section(s).
    pub spec: String,
    /// The requirement, in words.
    pub must: String,
    /// Tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `--wall-time-ms` given to the parent.
    #[serde(default = "default_wall")]
    pub wall_time_ms: u64,
    /// Whether `--allow-process` is given.
    #[serde(default)]
    pub allow_process: bool,
    /// `--grant` values.
    #[serde(default)]
    pub grants: Vec<String>,
    /// The source of the `eval`.
    #[serde(default = "default_source")]
    pub source: String,
    /// Text the parent finds on its standard input (a pipe holding it,
    /// then closed); without it, stdin is the null device (SPEC §19.3).
    #[serde(default)]
    pub parent_stdin: Option<String>,
    /// The fake worker's script.
    pub worker: Vec<FakeStep>,
    /// What the parent must do.
    pub expect: ParentExpect,
}

fn default_wall() -> u64 {
    400
}

fn default_source() -> String {
    "return 1".to_owned()
}

/// What the parent under test must do.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParentExpect {
    /// Exit status (one, or a list of acceptable ones).
    pub exit: ExitCodes,
    /// Error code that stderr must name (one, or a list of acceptable ones).
    #[serde(default)]
    pub code: Option<Codes>,
    /// Exact JSON stdout must hold (success cases). In its strings,
    /// `${CWD}`, `${PATH}` and `${HOME}` stand for the runner's working
    /// directory and environment, which the parent inherits, and
    /// `${PRIVATE_DIR}` for any absolute path that is none of `/`, the
    /// runner's `HOME` and working directory, nor a directory above them
    /// (a command's own directory, SPEC §19.3-d).
    #[serde(default)]
    pub stdout: Option<Value>,
    /// JSON stdout must contain (subset match).
    #[serde(default)]
    pub stdout_subset: Option<Value>,
    /// Text stdout must not contain.
    #[serde(default)]
    pub stdout_excludes: Option<String>,
    /// Time bound: `deadline` (request read → parent exit ≤ wall time +
    /// 200 ms), `prompt` (≤ half the wall time: the parent must not wait for
    /// its deadline), or a number of milliseconds from the request.
    #[serde(default)]
    pub bound: Option<Bound>,
    /// Facts the fake worker records about its own start (spawn checks).
    #[serde(default)]
    pub spawn: Option<SpawnChecks>,
}

/// Exit statuses.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ExitCodes {
    /// Exactly this.
    One(i32),
    /// Any of these.
    Many(Vec<i32>),
}

impl ExitCodes {
    /// Whether `code` is acceptable.
    pub fn contains(&self, code: i32) -> bool {
        match self {
            ExitCodes::One(one) => *one == code,
            ExitCodes::Many(many) => many.contains(&code),
        }
    }
    /// For messages.
    pub fn describe(&self) -> String {
        match self {
            ExitCodes::One(one) => one.to_string(),
            ExitCodes::Many(many) => many
                .iter()
                .map(i32::to_string)
                .collect::<Vec<_>>()
                .join(" or "),
        }
    }
}

/// Error codes.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Codes {
    /// Exactly this.
    One(String),
    /// Any of these.
    Many(Vec<String>),
}

impl Codes {
    /// The acceptable codes.
    pub fn list(&self) -> Vec<&str> {
        match self {
            Codes::One(one) => vec![one.as_str()],
            Codes::Many(many) => many.iter().map(String::as_str).collect(),
        }
    }
}

/// A time bound.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Bound {
    /// `deadline` or `prompt`.
    Named(String),
    /// Milliseconds after the request.
    Millis(u64),
}

/// Spawn facts to check.
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnChecks {
    /// The worker leads its own process group (§3.1 MUST).
    #[serde(default)]
    pub own_group: bool,
    /// No controlling terminal (§3.1 MUST).
    #[serde(default)]
    pub no_terminal: bool,
    /// stdout is the null device (§3.1).
    #[serde(default)]
    pub stdout_null: bool,
    /// The parent's environment did not leak (§3.1 SHOULD).
    #[serde(default)]
    pub clean_environment: bool,
    /// No descriptor beyond 0, 1, 2 inherited (§3.1 SHOULD).
    #[serde(default)]
    pub no_extra_descriptors: bool,
}

/// A host call the fake worker sends.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeHostCall {
    /// Command text (`${MARKER}` is replaced by the case's marker).
    pub command: String,
    /// Call id (default: one more than the previous call).
    pub call_id: Option<u64>,
    /// Added to the in-flight request id (default 0).
    #[serde(default)]
    pub request_id_offset: i64,
    /// `deadline_ms` (default 60,000).
    pub deadline_ms: Option<u64>,
    /// `max_output_bytes` (default 1,048,576).
    pub max_output_bytes: Option<u64>,
    /// Repeat this call so many times, reading each answer (default 1).
    pub repeat: Option<u32>,
    /// Read the host response after sending (default true).
    pub read_answer: Option<bool>,
}

/// A padded frame.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakePadded {
    /// Before the padding.
    #[serde(default)]
    pub prefix: String,
    /// Repeated.
    pub fill: String,
    /// Repetitions.
    pub count: usize,
    /// After the padding.
    #[serde(default)]
    pub suffix: String,
    /// Declared length instead of the true one.
    pub declare: Option<u32>,
}

/// Bytes written slowly.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeSlowly {
    /// Payload text, framed.
    pub text: String,
    /// Bytes per write.
    #[serde(default = "one")]
    pub chunk: usize,
    /// Pause between writes.
    #[serde(default)]
    pub interval_ms: u64,
}

fn one() -> usize {
    1
}

/// One step of the fake worker.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum FakeStep {
    /// Read a request with this operation (strictly decoded and checked).
    Read(String),
    /// Answer the request in flight with `ok: true` and this result.
    Answer(Value),
    /// Answer the request in flight with an error of this code and message.
    AnswerError(Value),
    /// Answer with a summary of the host responses received so far.
    AnswerHostSummary(bool),
    /// Answer with the host responses received so far, each outcome's
    /// stdout as its sorted lines (an error as `{error, code}`).
    AnswerHostLines(bool),
    /// Write this payload text as one frame (`${ID}`, `${ID+1}`, `${ID-1}`,
    /// `${DESCRIPTOR}`, `${MARKER}` are replaced).
    Write(String),
    /// Write several payload texts as frames in one single write (so that
    /// they arrive together).
    WriteMany(Vec<String>),
    /// Write raw bytes (hex).
    WriteBytes(String),
    /// Write a bare length prefix.
    WriteHeader(u32),
    /// Write a padded frame.
    WritePadded(FakePadded),
    /// Write a frame a few bytes at a time.
    WriteSlowly(FakeSlowly),
    /// Write this many bytes to stdout.
    FloodStdout(usize),
    /// Send a host call (and read its answer unless told not to).
    HostCall(FakeHostCall),
    /// Sleep.
    SleepMs(u64),
    /// Sleep forever.
    Hang(bool),
    /// Exit with this status.
    Exit(i32),
    /// Die of this signal (`SEGV`, `ABRT`, `KILL`).
    Signal(String),
    /// Close the protocol output (stderr) and go on.
    CloseOutput(bool),
    /// Ignore SIGTERM from now on.
    IgnoreSigterm(bool),
    /// Start a grandchild that holds stdin/stderr open and sleeps forever.
    ForkHolder(bool),
}
