# The program the embedded sandbox runs for one `Exec`/`StreamExec` of `rlx sandbox serve
# --protocol cwsandbox`: our code, embedded in the binary. The sandbox's files arrive under
# `fs/` (an absolute path `/a/b` as `fs/a/b`), the command in `rlx-exec.json`. Arguments naming a
# path under `fs/` are rewritten to it and `python`/`python3` to this interpreter, the command
# runs with `fs/` as its working directory and this process's stdin/stdout/stderr, and the
# files under `fs/` afterwards go back in `rlx-fs.json`, so the next call sees what this one wrote.
import base64, json, os, re, subprocess, sys

with open("rlx-exec.json") as f:
    job = json.load(f)
os.unlink("rlx-exec.json")
root = os.path.abspath("fs")
os.makedirs(root, exist_ok=True)
for path, data in job["files"].items():
    p = os.path.join(root, path.lstrip("/"))
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p, "wb") as f:
        f.write(base64.b64decode(data))
del job["files"]


def local(arg):
    if arg.startswith("/") and not arg.startswith(root):
        p = os.path.join(root, arg.lstrip("/"))
        if os.path.exists(p) or os.path.isdir(os.path.dirname(p)):
            return p
    return arg


argv = [local(a) for a in job["argv"]]
if re.fullmatch(r"python(3(\.\d+)?)?", os.path.basename(argv[0])):
    argv[0] = sys.executable
env = dict(os.environ)
env.update(job["env"])
sys.stdout.flush()
try:
    code = subprocess.call(argv, cwd=root, env=env)
except (FileNotFoundError, PermissionError) as e:
    print(f"{job['argv'][0]}: {e.strerror}", file=sys.stderr)
    code = 127 if isinstance(e, FileNotFoundError) else 126
out = {}
for d, _, names in os.walk(root):
    for n in names:
        p = os.path.join(d, n)
        if os.path.isfile(p) and not os.path.islink(p):
            with open(p, "rb") as f:
                out["/" + os.path.relpath(p, root)] = base64.b64encode(f.read()).decode()
with open("rlx-fs.json", "w") as f:
    json.dump(out, f)
sys.stdout.flush()
sys.exit(code if code >= 0 else 128 - code)
