//! Renders spec diagnostics as rustc/uv-style snippets: an `error:` line, the source excerpt with
//! a caret at file:line:column, the key path, then `help:` lines; and finds the `help:` lines
//! that an error's causes call for ([`hints`]), so every command gets them from one place.

use annotate_snippets::{AnnotationKind, Group, Level, Renderer, Snippet};

use crate::spec::Diagnostic;

/// Renders one diagnostic; `styled` adds colours (for terminals).
pub(crate) fn render(d: &Diagnostic, styled: bool) -> String {
    let renderer = if styled { Renderer::styled() } else { Renderer::plain() };
    let mut group: Group<'_> = match &d.span {
        Some(span) => {
            let label = if d.label.is_empty() { None } else { Some(d.label.as_str()) };
            let mut ann = AnnotationKind::Primary.span(span.range.clone());
            if let Some(l) = label {
                ann = ann.label(l);
            }
            Level::ERROR.primary_title(d.message.as_str()).element(
                Snippet::source(span.source.text.as_str()).path(span.source.name.as_str()).fold(true).annotation(ann),
            )
        }
        None => Level::ERROR.primary_title(d.message.as_str()).elements(std::iter::empty::<annotate_snippets::Message<'_>>()),
    };
    let key_note = d.path.as_ref().map(|p| format!("key: `{p}`"));
    if let Some(k) = &key_note {
        group = group.element(Level::NOTE.message(k.as_str()));
    }
    for h in &d.hints {
        group = group.element(Level::HELP.message(h.as_str()));
    }
    let mut out = renderer.render(&[group]);
    // The location line carries file:line:column; add it for span-less snippets' consumers too.
    if let Some(span) = &d.span
        && !out.contains(&span.location())
    {
        out.push_str(&format!("\n  at {}", span.location()));
    }
    out
}

/// The `help:` lines an error calls for, from the types in its chain: what the user can do about
/// it, beyond what the messages say. Empty for most errors.
pub(crate) fn hints(err: &anyhow::Error) -> Vec<String> {
    let mut out = Vec::new();
    for e in err.chain() {
        if let Some(crate::sandbox::Error::Incomplete { .. }) = e.downcast_ref::<crate::sandbox::Error>() {
            out.push(
                "to run with the isolation this machine has (with a warning), set `sandbox.strict: false` in the spec, or leave out `--strict` (`rlx grade`, `rlx sandbox serve`)".into(),
            );
        }
        if let Some(crate::sandbox::Error::Preflight { hint, .. }) = e.downcast_ref::<crate::sandbox::Error>() {
            out.push(hint.clone());
        }
        if let Some(crate::sandbox::Error::Python { .. }) = e.downcast_ref::<crate::sandbox::Error>() {
            out.push("the local sandbox runs Python 3: install `python3`, or grade on Sandbox Fusion (`sandbox.kind: fusion`)".into());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::source::{Source, Span};
    use std::path::Path;

    #[test]
    fn plain_rendering_has_location_snippet_and_hint() {
        let src = Source::file(Path::new("specs/grpo.yaml"), "optimizer:\n  learning_rte: 1e-6\n".into());
        let d = Diagnostic::new("unknown field `learning_rte` in `optimizer`", Some(Span::new(&src, 13..25)))
            .at("optimizer.learning_rte")
            .label("not a field of `optimizer`")
            .hint("did you mean `learning_rate`?");
        let out = render(&d, false);
        assert!(out.contains("error: unknown field `learning_rte` in `optimizer`"), "{out}");
        assert!(out.contains("specs/grpo.yaml:2:3"), "{out}");
        assert!(out.contains("learning_rte: 1e-6"), "{out}");
        assert!(out.contains("^^^^^^^^^^^^ not a field of `optimizer`"), "{out}");
        assert!(out.contains("help: did you mean `learning_rate`?"), "{out}");
    }
}
