# The program the embedded sandbox runs for one `Exec`/`StreamExec` of `rlx sandbox serve
# --protocol cwsandbox`: our code, embedded in the binary, with the command in JOB (base64 JSON,
# put before this text by the server). It runs inside the sandbox's persistent root (its whole
# filesystem, `enter_root` in harness.py), so every path means what it means in a container and
# nothing is rewritten: the command gets this process's stdin, stdout and stderr, the image's
# environment with the call's on top, and the interpreter's folder first on PATH (`python` and
# `python3` are the Python the server provides, from argv and from shells alike).
import base64, json, os, re, subprocess, sys

job = json.loads(base64.b64decode(JOB))  # noqa: F821 (prepended)
argv = job["argv"]
if re.fullmatch(r"python(3(\.\d+)?)?", argv[0]):
    argv[0] = sys.executable
env = dict(os.environ)
env["PATH"] = os.path.dirname(sys.executable) + ":" + env.get("PATH", "/usr/local/bin:/usr/bin:/bin")
env["HOME"] = "/root"
env.update(job["env"])
sys.stdout.flush()
try:
    code = subprocess.call(argv, env=env)
except (FileNotFoundError, PermissionError, NotADirectoryError) as e:
    print(f"{argv[0]}: {e.strerror}", file=sys.stderr)
    code = 127 if isinstance(e, FileNotFoundError) else 126
sys.stdout.flush()
sys.exit(code if code >= 0 else 128 - code)
