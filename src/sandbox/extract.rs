//! Code extraction from a model completion: the last fenced code block.
//!
//! Same rule as tinker-cookbook and rLLM: the last match of ```` ```(?:\w+)?\n(.*?)``` ````
//! (DOTALL), stripped. A completion with no such block (or only an empty one) has no code, which
//! graders report as `format_error`. Written by hand rather than with `regex` to keep the
//! dependency out of the sandbox path; the scan mirrors the regex's left-to-right matching.

/// The content of the last fenced code block of `completion`, stripped; `None` if there is none.
pub fn extract_code(completion: &str) -> Option<String> {
    let mut last = None;
    let mut i = 0;
    while let Some(off) = completion[i..].find("```") {
        let p = i + off;
        let after = &completion[p + 3..];
        let lang_len: usize = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').map(char::len_utf8).sum();
        if !after[lang_len..].starts_with('\n') {
            // Not an opening fence here; the regex would retry one character later.
            i = p + 1;
            continue;
        }
        let body_start = p + 3 + lang_len + 1;
        match completion[body_start..].find("```") {
            Some(end) => {
                last = Some(&completion[body_start..body_start + end]);
                i = body_start + end + 3;
            }
            None => break,
        }
    }
    last.map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::extract_code;

    #[test]
    fn takes_the_last_block() {
        let text = "First:\n```python\nprint(1)\n```\nthen\n```\nprint(2)\n```\nend";
        assert_eq!(extract_code(text).as_deref(), Some("print(2)"));
    }

    #[test]
    fn no_block_is_none() {
        assert_eq!(extract_code("just prose, `inline` code"), None);
        assert_eq!(extract_code("```python\nunterminated"), None);
        assert_eq!(extract_code("```\n\n```"), None);
    }

    #[test]
    fn language_tag_must_end_the_fence_line() {
        // "```python x" is no opening fence; the block that follows it still is.
        assert_eq!(extract_code("```py3\nx=1\n```").as_deref(), Some("x=1"));
        assert_eq!(extract_code("``` python\nx=1\n```"), None);
    }
}
