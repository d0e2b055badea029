//! Code extraction from a model completion: the last fenced code block.
//!
//! Same rule as tinker-cookbook and rLLM: the last match of ```` ```(?:\w+)?\n(.*?)``` ````
//! (DOTALL), stripped. A completion with no such block (or only an empty one) has no code, which
//! graders report as `format_error`. Written by hand rather than with `regex` to keep the
//! dependency out of the sandbox path; the scan mirrors the regex's left-to-right matching
//! (for languages other than Python the tag may also hold `+`, for ```` ```c++ ````). For languages other than Python only
//! blocks tagged with that language (or untagged) count ([`extract_code_in`]).
//!
//! A thinking model's completion (Qwen3, Qwen3.5: `reasoning</think>answer`) is graded on its
//! answer, the text after the last `</think>`, as the cookbook grades the parsed message's text;
//! drafts inside finished reasoning are not the submission. A completion cut off inside its
//! reasoning has no `</think>`; the engine, which knows the prompt opened a `<think>` block,
//! submits nothing for it (`ChatTemplate::submitted`), and `rlx grade` reads it whole.

use crate::spec::types::Language;

/// The content of the last fenced code block of `completion`, stripped; `None` if there is none.
pub fn extract_code(completion: &str) -> Option<String> {
    last_block(answer(completion), false, |_| true)
}

/// The text after the last `</think>`, or all of it when there is none.
fn answer(completion: &str) -> &str {
    completion.rfind("</think>").map_or(completion, |i| &completion[i + "</think>".len()..])
}

/// The code to grade in `language`: for Python, the last fenced block whatever its tag (the
/// rule above, so Python verdicts stay those of tinker-cookbook and rLLM); for any other
/// language, the last block tagged with one of its fences (```` ```cpp ````, ```` ```c++ ````,
/// any case) or untagged, so that a Python sketch or a shell line after the C++ answer is not
/// what gets compiled.
pub fn extract_code_in(completion: &str, language: Language) -> Option<String> {
    if language == Language::Python {
        return extract_code(completion);
    }
    last_block(answer(completion), true, |tag| tag.is_empty() || language.fences().iter().any(|f| f.eq_ignore_ascii_case(tag)))
}

/// `plus`: a tag may hold `+` (```` ```c++ ````); off for Python, whose rule is the regex's `\w+`.
fn last_block(completion: &str, plus: bool, wanted: impl Fn(&str) -> bool) -> Option<String> {
    let mut last = None;
    let mut i = 0;
    while let Some(off) = completion[i..].find("```") {
        let p = i + off;
        let after = &completion[p + 3..];
        let lang_len: usize = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_' || (plus && *c == '+')).map(char::len_utf8).sum();
        if !after[lang_len..].starts_with('\n') {
            // Not an opening fence here; the regex would retry one character later.
            i = p + 1;
            continue;
        }
        let body_start = p + 3 + lang_len + 1;
        match completion[body_start..].find("```") {
            Some(end) => {
                if wanted(&after[..lang_len]) {
                    last = Some(&completion[body_start..body_start + end]);
                }
                i = body_start + end + 3;
            }
            None => break,
        }
    }
    last.map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::{Language, extract_code, extract_code_in};

    #[test]
    fn the_last_block_of_the_language() {
        let text = "```cpp\nint main(){}\n```\nor in Python:\n```python\nprint(1)\n```\n```C++\nint main(){return 0;}\n```\n```bash\ng++ x.cpp\n```";
        assert_eq!(extract_code_in(text, Language::Cpp).as_deref(), Some("int main(){return 0;}"));
        let shell_last = "```cpp\nint main(){}\n```\n```bash\ng++ x.cpp\n```";
        assert_eq!(extract_code_in(shell_last, Language::Python).as_deref(), Some("g++ x.cpp"), "Python keeps the any-tag rule");
        assert_eq!(extract_code_in(shell_last, Language::Cpp).as_deref(), Some("int main(){}"));
        assert_eq!(extract_code_in(text, Language::Python), extract_code(text));
        assert_eq!(extract_code_in("```\nint main(){}\n```", Language::Cpp).as_deref(), Some("int main(){}"));
        assert_eq!(extract_code_in("```python\nprint(1)\n```", Language::Cpp), None);
        assert_eq!(extract_code_in("```c\nint main(){}\n```", Language::C).as_deref(), Some("int main(){}"));
    }

    #[test]
    fn takes_the_last_block() {
        let text = "First:\n```python\nprint(1)\n```\nthen\n```\nprint(2)\n```\nend";
        assert_eq!(extract_code(text).as_deref(), Some("print(2)"));
    }

    #[test]
    fn a_thinking_models_answer_follows_its_reasoning() {
        let text = "draft:\n```python\nprint(0)\n```\n</think>\n\n```python\nprint(1)\n```";
        assert_eq!(extract_code(text).as_deref(), Some("print(1)"));
        // Reasoning with a draft but no answer after it: nothing was submitted.
        assert_eq!(extract_code("```python\nprint(0)\n```\n</think>\n\nI give up."), None);
        assert_eq!(extract_code_in("```cpp\nint a;\n```</think>```cpp\nint main(){}\n```", Language::Cpp).as_deref(), Some("int main(){}"));
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
