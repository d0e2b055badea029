//! The problem model that prompting and grading share: a [`Problem`], its [`Tests`] in one of
//! four shapes, and the metadata keys its accessors read.

use serde::{Deserialize, Serialize};

use crate::spec::types::{Checker, Language};

/// One programming problem with its tests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Problem {
    /// Stable identifier: the dataset's own id (`task_id`, `question_id`), or `<file stem>/<row>`
    /// when rows have none.
    pub id: String,
    /// The problem statement shown to the model.
    pub statement: String,
    /// Code the answer must start from (LeetCode `class Solution` stub, HumanEval prompt), if any.
    pub starter_code: Option<String>,
    /// How a solution is checked.
    pub tests: Tests,
    /// Everything else the row carried that downstream code may want (difficulty, platform, ...).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

/// Metadata key of the language a problem is to be solved in (absent: Python).
pub const META_LANGUAGE: &str = "language";
/// Metadata key of the compiler flags replacing the language's defaults.
pub const META_COMPILE_FLAGS: &str = "compile_flags";
/// Metadata key of the compile step's time limit, seconds.
pub const META_COMPILE_TIMEOUT: &str = "compile_timeout_s";
/// Metadata key of the output checker (`lcb`, `exact`, `tokens`, `float`).
pub const META_CHECKER: &str = "checker";
/// Metadata key of the problem's checker program (C++ source, testlib-style).
pub const META_CHECKER_PROGRAM: &str = "checker_program";
/// Metadata key of the problem's own time limit per test, seconds (from its row, as its source
/// scaled or capped it).
pub const META_TIME_LIMIT: &str = "time_limit_s";
/// Metadata key of the problem's own memory limit, MiB.
pub const META_MEMORY_LIMIT: &str = "memory_limit_mb";
/// Metadata key of the problem's category (a row's `category`: the list-function task's
/// operation), which `rlx compare` and `rlx doctor` break pass@1 down by.
pub const META_CATEGORY: &str = "category";

impl Problem {
    /// The language the problem is to be solved in: its metadata's `language` (set from the
    /// source's `language`, or carried by the row itself), Python when absent or unknown.
    pub fn language(&self) -> Language {
        self.metadata.get(META_LANGUAGE).and_then(serde_json::Value::as_str).and_then(Language::parse).unwrap_or_default()
    }

    /// The output checker the problem names, LiveCodeBench's ladder when none.
    pub fn checker(&self) -> Checker {
        self.metadata.get(META_CHECKER).and_then(serde_json::Value::as_str).and_then(Checker::parse).unwrap_or_default()
    }

    /// Compiler flags replacing the language's defaults, if the source set them.
    pub fn compile_flags(&self) -> Option<Vec<String>> {
        let flags = self.metadata.get(META_COMPILE_FLAGS)?.as_array()?;
        Some(flags.iter().filter_map(|f| f.as_str().map(str::to_owned)).collect())
    }

    /// The compile step's time limit, if the source set one.
    pub fn compile_timeout_s(&self) -> Option<f64> {
        self.metadata.get(META_COMPILE_TIMEOUT).and_then(serde_json::Value::as_f64)
    }

    /// The problem's checker program, if it ships one: C++ source run as `checker input output
    /// answer` per test, exit 0 meaning accepted (Codeforces/testlib style).
    pub fn checker_program(&self) -> Option<&str> {
        self.metadata.get(META_CHECKER_PROGRAM).and_then(serde_json::Value::as_str).filter(|s| !s.trim().is_empty())
    }

    /// The problem's own time limit per test, seconds, if its row carried one.
    pub fn time_limit_s(&self) -> Option<f64> {
        self.metadata.get(META_TIME_LIMIT).and_then(serde_json::Value::as_f64).filter(|t| *t > 0.0 && t.is_finite())
    }

    /// The problem's own memory limit, MiB, if its row carried one.
    pub fn memory_limit_mb(&self) -> Option<u64> {
        self.metadata.get(META_MEMORY_LIMIT).and_then(serde_json::Value::as_u64).filter(|m| *m > 0)
    }

    /// The problem's category, if its row named one.
    pub fn category(&self) -> Option<&str> {
        self.metadata.get(META_CATEGORY).and_then(serde_json::Value::as_str).map(str::trim).filter(|c| !c.is_empty())
    }

    /// The same problem to be solved in `language` (tests and checker unchanged).
    pub fn in_language(mut self, language: Language) -> Problem {
        if language == Language::Python {
            self.metadata.remove(META_LANGUAGE);
        } else {
            self.metadata.insert(META_LANGUAGE.into(), language.name().into());
        }
        self
    }
}

/// The tests of a problem, in the shape the grading harness runs them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Tests {
    /// The program reads `input` on stdin; its stdout is compared with `output` by the
    /// LiveCodeBench comparison ladder.
    Stdin {
        /// The cases, run in order.
        cases: Vec<IoCase>,
    },
    /// `fn_name` (on `Solution()` when the code defines `class Solution`) is called with the
    /// arguments in `input` (one JSON value per line); the return value must equal `output`
    /// (one JSON value).
    Functional {
        /// Name of the function or method to call.
        fn_name: String,
        /// The cases, run in order.
        cases: Vec<IoCase>,
    },
    /// MBPP style: the program, then `setup`, then each assert statement (one test each).
    Asserts {
        /// Code run before the program (imports, helpers); may be empty.
        setup: String,
        /// Assert statements, each one test.
        asserts: Vec<String>,
    },
    /// HumanEval style: `test` defines `check(candidate)`, called with `entry_point`.
    Check {
        /// Source defining `def check(candidate)`.
        test: String,
        /// Name of the function under test.
        entry_point: String,
        /// The prompt (signature and docstring), prepended when the program lacks the function.
        prompt: String,
    },
}

/// One input/output case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IoCase {
    /// Stdin text, or the newline-separated JSON arguments of a functional call.
    pub input: String,
    /// Expected stdout, or the JSON of the expected return value.
    pub output: String,
}

impl Tests {
    /// Number of individually graded tests.
    pub fn len(&self) -> usize {
        match self {
            Tests::Stdin { cases } | Tests::Functional { cases, .. } => cases.len(),
            Tests::Asserts { asserts, .. } => asserts.len(),
            Tests::Check { .. } => 1,
        }
    }

    /// True when there is nothing to run.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
