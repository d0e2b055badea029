//! Problems → chat messages, with the spec's prompt templates (`prompt.system`, `prompt.user`,
//! `prompt.feedback`).
//!
//! Templates see `problem` (see [`problem_context`]) and `vars` (the spec's `prompt.vars`); the
//! feedback template also sees `feedback`, `attempt` and `max_attempts`. Rendered text loses its
//! trailing newlines (template files end with one; the chat template adds its own separators).

use serde_json::{Value, json};

use super::Error;
use super::chat::{Message, hf_environment};
use super::limits::{Bounded, FUEL, MAX_RENDERED_BYTES};
use crate::data::{Problem, Tests};

/// How many tests a prompt may show (`problem.tests_preview`): MBPP shows its asserts, which
/// also tell the model the function's name.
pub(crate) const PREVIEW_TESTS: usize = 3;

/// The spec's prompt templates, compiled.
#[derive(Debug)]
pub struct PromptTemplates {
    env: minijinja::Environment<'static>,
    has_system: bool,
    has_feedback: bool,
    vars: Value,
    /// What messages call each template (`system` → `template `prompts/sys.j2``).
    names: Vec<(String, String)>,
}

impl PromptTemplates {
    /// Compiles a plan's templates, `(key, path, text)` with keys `prompt.system`, `prompt.user`
    /// and `prompt.feedback` (their text was read and checked when planning).
    ///
    /// # Errors
    /// [`Error::Template`] when a template does not compile.
    pub fn compile<'a>(templates: impl IntoIterator<Item = (&'a str, &'a std::path::Path, &'a str)>, vars: Value) -> Result<Self, Error> {
        let mut env = hf_environment();
        let mut has_system = false;
        let mut has_feedback = false;
        let mut names = vec![];
        for (role, path, text) in templates {
            let name = match role {
                "prompt.system" => {
                    has_system = true;
                    "system"
                }
                "prompt.user" => "user",
                "prompt.feedback" => {
                    has_feedback = true;
                    "feedback"
                }
                _ => continue,
            };
            env.add_template_owned(name.to_string(), text.to_string())
                .map_err(|e| Error::Template { what: format!("template `{}`", path.display()), source: e })?;
            names.push((name.to_string(), format!("the {name} template `{}`", path.display())));
        }
        Ok(PromptTemplates { env, has_system, has_feedback, vars, names })
    }

    /// Templates from text, for tests and tools: `(role, source)` with roles `system`, `user`,
    /// `feedback`.
    ///
    /// # Errors
    /// [`Error::Template`].
    pub fn from_sources(sources: &[(&str, &str)], vars: Value) -> Result<Self, Error> {
        let mut env = hf_environment();
        for (role, src) in sources {
            env.add_template_owned(role.to_string(), src.to_string()).map_err(|e| Error::Template { what: format!("template `{role}`"), source: e })?;
        }
        let has = |r: &str| sources.iter().any(|(role, _)| *role == r);
        let names = sources.iter().map(|(role, _)| (role.to_string(), format!("the {role} template"))).collect();
        Ok(PromptTemplates { has_system: has("system"), has_feedback: has("feedback"), env, vars, names })
    }

    /// Renders one template within [`super::limits`]: past either limit, an error that names
    /// the template and the limit.
    fn render(&self, name: &str, ctx: Value) -> Result<String, Error> {
        let what = self.names.iter().find(|(n, _)| n == name).map_or_else(|| format!("the {name} template"), |(_, w)| w.clone());
        let t = self.env.get_template(name).map_err(|e| Error::Template { what: what.clone(), source: e })?;
        let mut out = Bounded::new(MAX_RENDERED_BYTES);
        let rendered = t.render_captured_to(minijinja::Value::from(minijinja::value::Serde(ctx)), &mut out);
        if let Err(e) = rendered {
            let what = if out.overflowed() {
                format!("{what} wrote more than {MAX_RENDERED_BYTES} bytes (1 MiB), the most a rendered prompt may hold")
            } else if e.kind() == minijinja::ErrorKind::OutOfFuel {
                format!("{what} ran {FUEL} instructions without finishing, the most one render may run (a loop that does not end?)")
            } else {
                format!("rendering {what}")
            };
            return Err(Error::Template { what, source: e });
        }
        let text = String::from_utf8(out.into_inner()).map_err(|e| Error::Template {
            what: format!("rendering {what}"),
            source: minijinja::Error::new(minijinja::ErrorKind::BadSerialization, e.to_string()),
        })?;
        Ok(text.trim_end_matches(['\n', '\r']).to_string())
    }

    /// Renders every template once for `problem` (the feedback template with a sample failed
    /// attempt): what `rlx validate` does so that a template that cannot finish, or fails on
    /// real data, is caught before a run.
    ///
    /// # Errors
    /// [`Error::Template`], as a run would meet it.
    pub fn render_once(&self, problem: &Problem, max_attempts: u32) -> Result<(), Error> {
        self.messages(problem)?;
        if self.has_feedback {
            let sample = json!({"status": "wrong_answer", "input": "1\n", "expected": "2\n", "got": "3\n", "error": null});
            self.feedback(problem, &sample, 2, max_attempts.max(2))?;
        }
        Ok(())
    }

    /// The first turn for a problem: optional system message, then the user message.
    ///
    /// # Errors
    /// [`Error::Template`] when rendering fails (e.g. an undefined variable used in a test).
    pub fn messages(&self, problem: &Problem) -> Result<Vec<Message>, Error> {
        let ctx = json!({"problem": problem_context(problem), "vars": self.vars});
        let mut out = vec![];
        if self.has_system {
            out.push(Message::new("system", self.render("system", ctx.clone())?));
        }
        out.push(Message::new("user", self.render("user", ctx)?));
        Ok(out)
    }

    /// The feedback turn after a failed attempt. `feedback` holds `status`, `input`, `expected`,
    /// `got`, `error` (any may be null).
    ///
    /// # Errors
    /// [`Error::Template`]; also when the spec has no feedback template.
    pub fn feedback(&self, problem: &Problem, feedback: &Value, attempt: u32, max_attempts: u32) -> Result<Message, Error> {
        if !self.has_feedback {
            return Err(Error::Template {
                what: "feedback".into(),
                source: minijinja::Error::new(minijinja::ErrorKind::TemplateNotFound, "the spec has no `prompt.feedback` template"),
            });
        }
        let ctx = json!({"problem": problem_context(problem), "vars": self.vars, "feedback": feedback, "attempt": attempt, "max_attempts": max_attempts});
        Ok(Message::new("user", self.render("feedback", ctx)?))
    }
}

/// What templates see as `problem`: `id`, `statement`, `starter_code` (empty string when none),
/// `kind` (`stdin`, `functional`, `asserts`, `check`), `fn_name` (functional and check problems),
/// `tests_preview` (up to [`PREVIEW_TESTS`] assert lines of MBPP-style problems), `metadata`,
/// `language` (`python`, `cpp`, ...), `language_name` (`C++`) and `fence` (the tag its code
/// block should carry).
pub(crate) fn problem_context(p: &Problem) -> Value {
    let language = p.language();
    let (kind, fn_name, preview): (&str, Option<&str>, Vec<String>) = match &p.tests {
        Tests::Stdin { .. } => ("stdin", None, vec![]),
        Tests::Functional { fn_name, .. } => ("functional", Some(fn_name.as_str()), vec![]),
        Tests::Asserts { asserts, .. } => ("asserts", None, asserts.iter().take(PREVIEW_TESTS).cloned().collect()),
        Tests::Check { entry_point, .. } => ("check", Some(entry_point.as_str()), vec![]),
    };
    json!({
        "id": p.id,
        "statement": p.statement,
        "starter_code": p.starter_code.clone().unwrap_or_default(),
        "kind": kind,
        "fn_name": fn_name,
        "tests_preview": preview,
        "metadata": p.metadata,
        "language": language.name(),
        "language_name": language.display_name(),
        "fence": language.fences()[0],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::IoCase;

    fn mbpp() -> Problem {
        Problem {
            id: "7".into(),
            statement: "Write add(a, b).".into(),
            starter_code: None,
            tests: Tests::Asserts { setup: String::new(), asserts: vec!["assert add(1, 2) == 3".into(), "assert add(0, 0) == 0".into()] },
            metadata: Default::default(),
        }
    }

    #[test]
    fn shipped_templates_render_problems() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let read = |f: &str| std::fs::read_to_string(root.join(f)).unwrap();
        let (user, lcb, fb) = (read("mbpp_user.j2"), read("lcb_user.j2"), read("feedback.j2"));
        let t = PromptTemplates::from_sources(&[("user", &user), ("feedback", &fb)], json!({})).unwrap();
        let m = t.messages(&mbpp()).unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].content, "Write add(a, b).\nYour code should pass these tests:\nassert add(1, 2) == 3\nassert add(0, 0) == 0\n\nWrite the function in Python and put it in one ```python code block.");
        let f = t.feedback(&mbpp(), &json!({"status": "wrong_answer", "input": "1 2", "expected": "3", "got": "4", "error": null}), 2, 3).unwrap();
        assert!(f.content.starts_with("Your solution did not pass the tests (wrong answer)."), "{}", f.content);
        assert!(f.content.contains("Expected output:\n```\n3\n```") && f.content.contains("Your output:\n```\n4\n```"), "{}", f.content);
        assert!(f.content.ends_with("(attempt 2 of 3). Answer with the complete corrected program in one ```python code block."), "{}", f.content);
        assert!(!f.content.contains("Error:"));

        let t = PromptTemplates::from_sources(&[("user", &lcb)], json!({})).unwrap();
        let stdin = Problem { tests: Tests::Stdin { cases: vec![IoCase { input: "1\n".into(), output: "1\n".into() }] }, ..mbpp() };
        let m = t.messages(&stdin).unwrap();
        assert!(m[0].content.contains("Read the input from standard input"), "{}", m[0].content);
        let functional = Problem { starter_code: Some("class Solution:\n    def f(self, x):".into()), ..stdin };
        let m = t.messages(&functional).unwrap();
        assert!(m[0].content.contains("```python\nclass Solution:\n    def f(self, x):\n```"), "{}", m[0].content);
        assert!(!m[0].content.contains("standard input"));
    }

    #[test]
    fn a_template_that_does_not_finish_or_writes_too_much_stops_with_the_limit_named() {
        let endless = "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}";
        let t = PromptTemplates::from_sources(&[("user", endless)], json!({})).unwrap();
        let e = t.messages(&mbpp()).unwrap_err().to_string();
        assert!(e.contains("the user template ran 5000000 instructions without finishing"), "{e}");
        let bomb = "{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}";
        let t = PromptTemplates::from_sources(&[("system", bomb), ("user", "hi")], json!({})).unwrap();
        let e = t.messages(&mbpp()).unwrap_err().to_string();
        assert!(e.contains("the system template wrote more than 1048576 bytes (1 MiB)"), "{e}");
        // Just under the cap renders.
        let fits = format!("{{{{ 'x' * {} }}}}", MAX_RENDERED_BYTES);
        let t = PromptTemplates::from_sources(&[("user", &fits)], json!({})).unwrap();
        assert_eq!(t.messages(&mbpp()).unwrap()[0].content.len(), MAX_RENDERED_BYTES);
    }

    #[test]
    fn shipped_templates_use_a_sliver_of_the_fuel() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts");
        let feedback = json!({"status": "wrong_answer", "input": "1 2", "expected": "3", "got": "4", "error": "Traceback"});
        let ctx = json!({"problem": problem_context(&mbpp()), "vars": {}, "feedback": feedback, "attempt": 2, "max_attempts": 3});
        for f in ["mbpp_user.j2", "lcb_user.j2", "lcb_system.j2", "feedback.j2"] {
            let env = hf_environment();
            let text = std::fs::read_to_string(root.join(f)).unwrap();
            let captured = env.template_from_str(&text).unwrap().render_captured(minijinja::Value::from(minijinja::value::Serde(&ctx))).unwrap();
            let (consumed, _) = captured.state().fuel_levels().unwrap();
            assert!(consumed > 0 && consumed < FUEL / 1000, "{f}: {consumed}");
        }
    }

    #[test]
    fn vars_and_missing_feedback() {
        let t = PromptTemplates::from_sources(&[("system", "You write {{ vars.lang }}."), ("user", "{{ problem.statement }}")], json!({"lang": "Python"})).unwrap();
        let m = t.messages(&mbpp()).unwrap();
        assert_eq!(m[0], Message::new("system", "You write Python."));
        assert!(t.feedback(&mbpp(), &json!({}), 2, 2).is_err());
    }
}
