//! The languages a problem can be solved in: the one table to extend to add a language.
//!
//! A language is data, not a code path: its name in specs (`data.*.language`), the fence tags
//! that mark its code in a completion, the file its source is written to, how it is compiled
//! (if at all) and how it runs. The embedded sandbox (`sandbox::lang`) turns a row of this table
//! into the harness's compile and run commands; Sandbox Fusion gets [`Language::fusion_name`].
//! Adding a language is one variant here and its row in each `match` below (the compiler must
//! be reachable inside the sandbox's read-only view of `/usr`).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The language the problems of a source are to be solved in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Language {
    /// Python 3, run by the sandbox's warm interpreters (the default).
    #[default]
    Python,
    /// C++ (g++, `-O2 -std=c++17` unless `compile_flags` says otherwise), stdin/stdout tests.
    Cpp,
    /// C (gcc, `-O2 -std=c11` unless `compile_flags` says otherwise), stdin/stdout tests.
    C,
}

/// How a compiled language is built: `compiler`, then the flags, then `-o <binary> <source>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Toolchain {
    /// The compiler, looked up on `/usr/local/bin:/usr/bin:/bin`.
    pub compiler: &'static str,
    /// Flags when the source sets none.
    pub default_flags: &'static [&'static str],
    /// Flags always added after the user's (linking the math library for C).
    pub link_flags: &'static [&'static str],
}

impl Language {
    /// Every language, in the order docs list them.
    pub const ALL: [Language; 3] = [Language::Python, Language::Cpp, Language::C];

    /// The name specs and records use.
    pub fn name(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Cpp => "cpp",
            Language::C => "c",
        }
    }

    /// The name people read (`C++`).
    pub fn display_name(self) -> &'static str {
        match self {
            Language::Python => "Python",
            Language::Cpp => "C++",
            Language::C => "C",
        }
    }

    /// The language named `s` (a spec name or a fence tag, any case), if any.
    pub fn parse(s: &str) -> Option<Language> {
        let s = s.trim().to_ascii_lowercase();
        Language::ALL.into_iter().find(|l| l.name() == s || l.fences().contains(&s.as_str()))
    }

    /// Fence tags that mark a code block in this language (lower case); the first is the one
    /// prompts ask for. An untagged fence counts for every language.
    pub fn fences(self) -> &'static [&'static str] {
        match self {
            Language::Python => &["python", "py", "python3", "py3"],
            Language::Cpp => &["cpp", "c++", "cxx", "cc", "hpp"],
            Language::C => &["c", "h"],
        }
    }

    /// The file the source is written to in the sandbox's working directory.
    pub fn source_file(self) -> &'static str {
        match self {
            Language::Python => "main.py",
            Language::Cpp => "main.cpp",
            Language::C => "main.c",
        }
    }

    /// How it is compiled; `None` for interpreted languages.
    pub fn toolchain(self) -> Option<Toolchain> {
        match self {
            Language::Python => None,
            Language::Cpp => Some(Toolchain { compiler: "g++", default_flags: &["-O2", "-std=c++17"], link_flags: &[] }),
            Language::C => Some(Toolchain { compiler: "gcc", default_flags: &["-O2", "-std=c11"], link_flags: &["-lm"] }),
        }
    }

    /// Sandbox Fusion's `language` for this language, where it has one.
    pub fn fusion_name(self) -> Option<&'static str> {
        match self {
            Language::Python => Some("python"),
            Language::Cpp => Some("cpp"),
            Language::C => None,
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How a program's stdout is compared with the expected output.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Checker {
    /// LiveCodeBench's comparison ladder (stripped lines, then one float per line with
    /// `np.allclose` tolerance). The default.
    #[default]
    Lcb,
    /// Byte for byte, after trailing whitespace at the end of the output and of each line.
    Exact,
    /// The same whitespace-separated tokens (Codeforces' default `wcmp`).
    Tokens,
    /// Tokens, numbers equal within an absolute or relative error of 1e-6 (Codeforces' `rcmp6`).
    Float,
}

impl Checker {
    /// The name the harness reads.
    pub fn name(self) -> &'static str {
        match self {
            Checker::Lcb => "lcb",
            Checker::Exact => "exact",
            Checker::Tokens => "tokens",
            Checker::Float => "float",
        }
    }

    /// The checker named `s`, if any.
    pub fn parse(s: &str) -> Option<Checker> {
        [Checker::Lcb, Checker::Exact, Checker::Tokens, Checker::Float].into_iter().find(|c| c.name() == s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_fences_parse_back() {
        for l in Language::ALL {
            assert_eq!(Language::parse(l.name()), Some(l));
            for f in l.fences() {
                assert_eq!(Language::parse(f), Some(l), "{f}");
            }
        }
        assert_eq!(Language::parse("C++"), Some(Language::Cpp));
        assert_eq!(Language::parse("fortran"), None);
        assert!(Language::Python.toolchain().is_none() && Language::Cpp.toolchain().is_some());
    }
}
