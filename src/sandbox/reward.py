# The driver of Python rewards (rlx's own code, embedded in the binary by reward.rs).
#
# It runs in the program of a sandbox run, exactly where a submission's program runs: a fork of
# a warm worker, chrooted, without network, under an unprivileged uid and the run's limits. It
# is shipped as `rlx_reward_driver.py` and the program only imports it (its bytecode is then
# cached by the worker); the reward's directory was shipped as `reward/`; the batch (one problem
# and the completions of its group, each with its id) arrives on stdin.
#
# Why two kinds of process: a reward that executes the model's code (what code rewards do) runs
# that code inside the call, with everything the call's process can reach. So no call's process
# may be able to reach another call's score.
# - P, this process, loads the user's file (the user's code, run once, before any call) and then
#   only forks, waits and reads: it runs no code of any call. It alone writes the results
#   channel (its original stdout, at a descriptor no call's process has), one line per call,
#   tagged with the call's id:
#     {"loaded": true}                                    once the file loaded
#     {"call": id, "ok": number} | {"call": id, "ok": {name: number, ...}}
#     {"call": id, "failed": "load"|"raised"|"timeout"|"returned"|"crashed"|"forged",
#      "message": ..., "where": "file:line", "traceback": ...}
#     {"restart": true}                                   P cannot go on safely; rlx reruns the rest
# - C, one per call, forked from P after the load: what a call does to the module, its globals,
#   json, builtins or this driver dies with it. Before any user code it closes every descriptor
#   except stdin (/dev/null), stdout and stderr (a pipe of its own, whose tail explains a crash)
#   and its result pipe, made for this call alone. It writes one message there: the call's nonce
#   (random, made by P just before this fork, so no other call's nonce was ever in its memory),
#   then the result as JSON. P takes the result only when the pipe holds exactly that and C
#   exited 0; anything else written there (forged lines, bytes written to every descriptor) voids
#   the call ("forged"), never scores it. P checks the result again itself.
# P is not dumpable (a call's process, with the same uid, can neither ptrace it nor open its
# /proc/<pid>/fd or memory) and ignores catchable signals; SIGKILL or SIGSTOP end the run, and
# rlx reruns the calls that were not answered (reward.rs). After each call P kills what the call
# left running and puts the working directory back as the load left it.
import ctypes
import json
import linecache
import math
import os
import select
import signal
import stat
import sys
import time
import traceback
import types

DRIVER = os.path.abspath(__file__)
OUT = os.dup(1)
os.dup2(2, 1)

# The most bytes one call's result message may have, and the end of a call's output kept to
# explain a crash.
MAX_RESULT = 256 << 10
TAIL = 4000
# How long P waits past the call's timeout for C's own timer to report where it stopped.
GRACE_S = 1.0
PR_SET_PDEATHSIG, PR_SET_DUMPABLE = 1, 4
_libc = ctypes.CDLL(None)
try:
    from _json import make_encoder as _make_encoder

    # A call's result is encoded by an encoder made here, in C, before any call: a call that
    # replaces json's Python-level functions (json.dumps, JSONEncoder.encode) does not reach it.
    _ENCODER = _make_encoder(None, None, json.encoder.encode_basestring_ascii, None, ": ", ", ", False, False, True)
    ENCODE = lambda obj, _enc=_ENCODER, _join="".join: _join(_enc(obj, 0))
except ImportError:
    ENCODE = json.dumps
# Signals P ignores while calls run (a call's process has P's uid and may send them); each C
# gets the handlers back.
GUARDED = tuple(s for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
                            signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE, signal.SIGXCPU, signal.SIGVTALRM,
                            signal.SIGPROF, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU))


class CallTimeout(BaseException):
    """Raised by the timer inside the user's code: a BaseException, so that the user's
    `except Exception` does not swallow it."""


def on_alarm(signum, frame):
    raise CallTimeout()


def emit(obj):
    """A line on the results channel (P only)."""
    view = memoryview((json.dumps(obj) + "\n").encode())
    while view:
        view = view[os.write(OUT, view):]


def user_frames(exc):
    """The traceback's frames without the driver's own (its call into the user's code, the
    timer's handler): what the user wrote, and the library code it called."""
    return [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != DRIVER]


def failure(kind, exc, display, timeout_s):
    frames = user_frames(exc)
    if isinstance(exc, CallTimeout):
        message = "did not return within %g s" % timeout_s
        head = "Traceback (most recent call last, where it was stopped):\n"
        tail = "CallTimeout: " + message + "\n"
    else:
        message = traceback.format_exception_only(type(exc), exc)[-1].strip()
        head = "Traceback (most recent call last):\n"
        tail = "".join(traceback.format_exception_only(type(exc), exc))
    text = head + "".join(traceback.format_list(frames)) + tail if frames else tail
    where = None
    for f in frames:
        if f.filename == display:
            where = "%s:%d" % (f.filename, f.lineno)
    if where is None and isinstance(exc, SyntaxError) and exc.lineno:
        where = "%s:%d" % (exc.filename or display, exc.lineno)
    return {"failed": "timeout" if isinstance(exc, CallTimeout) else kind, "message": message, "where": where, "traceback": text[-8000:]}


def timed(fn, timeout_s):
    signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


NUMPY_NUMBERS = frozenset(("integer", "floating", "bool_", "bool"))


def as_number(v):
    """(float, None) for a number a reward may return: int, float, bool, and numpy's integer,
    floating and bool scalars (numpy need not be installed). (None, what it is) otherwise,
    also for an int too large for a float."""
    if isinstance(v, (bool, float)):
        return float(v), None
    if isinstance(v, int):
        try:
            return float(v), None
        except OverflowError:
            return None, "an int of %d bits, too large for a float" % v.bit_length()
    if any(c.__module__ == "numpy" and c.__name__ in NUMPY_NUMBERS for c in type(v).__mro__):
        try:
            return float(v), None
        except (OverflowError, ValueError, TypeError):
            return None, "a numpy %s that does not convert to a float" % type(v).__name__
    return None, None


def check_value(value, fn, display):
    """The function's value as a result, or a failure naming where the function is defined."""
    where = "%s:%d" % (display, fn.__code__.co_firstlineno) if hasattr(fn, "__code__") else display
    name = getattr(fn, "__name__", "reward")

    def bad(what):
        return {"failed": "returned", "message": "%s() returned %s; expected a number (int, float, bool or a numpy scalar) or a dict of str -> number" % (name, what), "where": where, "traceback": ""}

    def number(v, what):
        x, wrong = as_number(v)
        if x is None:
            return None, bad(what(wrong or "a value of type %s" % type(v).__name__))
        if not math.isfinite(x):
            return None, bad(what(repr(x)))
        return x, None

    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k or "/" in k or len(k) > 64:
                return bad("a dict with key %s (names are 1 to 64 characters without `/`)" % short(k))
            out[k], err = number(v, lambda w, k=k: "a dict whose %r is %s" % (k, w))
            if err:
                return err
        return {"ok": out}
    x, err = number(value, lambda w: w)
    return err or {"ok": x}


def short(v):
    """repr(v), clipped: a message names a value without carrying all of it."""
    try:
        r = repr(v)
    except BaseException:
        r = "<%s>" % type(v).__name__
    return r if len(r) <= 80 else r[:77] + "..."


def valid_result(obj):
    """P's own check of what a call's process sent: a result of the driver's shape, or None."""
    if not isinstance(obj, dict):
        return None
    ok = obj.get("ok")
    finite = lambda x: type(x) in (int, float) and math.isfinite(x)
    if "ok" in obj:
        if finite(ok):
            return {"ok": float(ok)}
        if isinstance(ok, dict) and all(isinstance(k, str) and 0 < len(k) <= 64 and "/" not in k and finite(v) for k, v in ok.items()):
            return {"ok": {k: float(v) for k, v in ok.items()}}
        return None
    text = lambda k: isinstance(obj.get(k), str)
    if obj.get("failed") in ("raised", "timeout", "returned") and text("message") and text("traceback") and (obj.get("where") is None or text("where")):
        return {k: obj[k] for k in ("failed", "message", "where", "traceback")}
    return None


def run_in_child(fn, args, display, timeout_s, nonce, res_w, out_w, handlers):
    """C: set up the call's process before any user code, call the function under its timer,
    write the one message, exit. Never returns into P's loop."""
    try:
        # A process group of its own: what the call leaves running is killed with it (P's
        # `kill_leftovers`).
        os.setpgid(0, 0)
        devnull = os.open("/dev/null", os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.closerange(3, res_w)
        os.closerange(res_w + 1, 1 << 16)
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        for sig, h in handlers.items():
            signal.signal(sig, h)
        # Bound here, before the user's code: a call that replaces json's functions or this
        # driver's (in `sys.modules`) does not change what is written below.
        write, encode, exit_, check, fail, clock = os.write, ENCODE, os._exit, check_value, failure, timed
        try:
            result = check(clock(lambda: fn(*args), timeout_s), fn, display)
        except BaseException as e:
            result = fail("raised", e, display, timeout_s)
        view = memoryview(nonce + encode(result).encode())
        while view:
            view = view[write(res_w, view):]
        exit_(0)
    finally:
        os._exit(70)


def read_into(fd, buf, cap):
    """Reads what `fd` has (it is readable); False at end of file. Past `cap` bytes, the rest is
    read and dropped (the length is what a check needs), so a writer never blocks on P."""
    chunk = os.read(fd, 65536)
    if not chunk:
        return False
    buf.extend(chunk[: max(0, cap + 1 - len(buf))])
    return True


def drain(fd, buf, cap):
    """What is left in `fd` once the call's process is gone, within bounds: a process the call
    left behind may hold the pipe open and keep writing."""
    os.set_blocking(fd, False)
    try:
        for _ in range(64):
            if not read_into(fd, buf, cap):
                return
    except BlockingIOError:
        pass


def crashed(message, out):
    return {"failed": "crashed", "message": message, "where": None, "traceback": out[-TAIL:].decode("utf-8", "replace")}


def run_call(fn, problem, call, display, timeout_s, handlers):
    """P: one call in a process of its own; its result as P judges it."""
    nonce = os.urandom(16).hex().encode()
    res_r, res_w = os.pipe()
    out_r, out_w = os.pipe()
    args = (problem, call["completion"], call["code"], call["verdict"])
    pid = os.fork()
    if pid == 0:
        run_in_child(fn, args, display, timeout_s, nonce, res_w, out_w, handlers)
    os.close(res_w)
    os.close(out_w)
    pidfd = os.pidfd_open(pid)
    msg, out = bytearray(), bytearray()
    deadline = time.monotonic() + timeout_s + GRACE_S
    killed = False
    open_fds = [res_r, out_r]
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
            break
        ready, _, _ = select.select(open_fds + [pidfd], [], [], left)
        if pidfd in ready:
            break
        for fd, buf, cap in ((res_r, msg, MAX_RESULT), (out_r, out, 1 << 20)):
            if fd in ready and not read_into(fd, buf, cap):
                open_fds.remove(fd)
        del out[:-TAIL]
    _, status = os.waitpid(pid, 0)
    kill_leftovers(pid)
    drain(res_r, msg, MAX_RESULT)
    drain(out_r, out, 1 << 20)
    for fd in (res_r, out_r, pidfd):
        os.close(fd)
    if killed:
        return {"failed": "timeout", "message": "did not return within %g s (its process was killed: the call's timer did not stop it)" % timeout_s, "where": None, "traceback": out[-TAIL:].decode("utf-8", "replace")}
    return judge(msg, nonce, status, out)


def judge(msg, nonce, status, out):
    """The call's result from its message and exit status."""
    if msg and not msg.startswith(nonce):
        return forged("bytes the driver did not write")
    if len(msg) > MAX_RESULT:
        return {"failed": "returned", "message": "the result is over %d KiB" % (MAX_RESULT >> 10), "where": None, "traceback": ""}
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        what = "was killed by signal %d" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exited with code %d" % os.WEXITSTATUS(status)
        return crashed("its process %s%s" % (what, " after it reported" if msg else ""), out)
    if not msg:
        return crashed("its process exited with code 0 before the function returned", out)
    try:
        obj = json.loads(bytes(msg[len(nonce):]))
    except ValueError:
        return forged("more than the driver's one message")
    result = valid_result(obj)
    return result if result is not None else forged("a result of the wrong shape")


def forged(what):
    return {"failed": "forged", "message": "its result channel held %s (code the function ran wrote to it); the call is void" % what, "where": None, "traceback": ""}


def kill_leftovers(pgid):
    """Kill what the call left running: its process group, and with a PID namespace (P's parent
    is then the namespace's PID 1, the sandbox's zygote) every process of the namespace but P
    and PID 1, which kill(-1) reaches, so also those that left the group. Without a namespace a
    process that left the group lives until the batch ends."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    if os.getppid() == 1:
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass


class Snapshot:
    """The working directory as the load left it, put back after every call: a call that edits
    the reward's data files, plants a module or leaves files behind changes nothing for the
    next."""

    def __init__(self, root):
        self.root = root
        dirs, self.files = self.scan()
        self.dirs = {rel: os.lstat(os.path.join(root, rel)).st_mode & 0o7777 for rel in dirs}
        self.mode = os.lstat(root).st_mode & 0o7777
        for rel in self.files:
            path = os.path.join(root, rel)
            with open(path, "rb") as f:
                self.files[rel] = (f.read(), os.lstat(path).st_mode & 0o7777)

    def scan(self):
        dirs, files = set(), {}
        for dirpath, dirnames, filenames in os.walk(self.root):
            rel = os.path.relpath(dirpath, self.root)
            for name in dirnames + filenames:
                r = os.path.normpath(os.path.join(rel, name))
                # A link (also one to a directory, which walk lists but does not enter) is a file here.
                if name in dirnames and not os.path.islink(os.path.join(dirpath, name)):
                    dirs.add(r)
                else:
                    files[r] = None
        return dirs, files

    def restore(self):
        # A directory the call made unreadable would hide what it holds from the scan. Modes
        # are changed only where the call changed them: the working directory itself belongs to
        # the sandbox, not to the uid calls run under.
        modes = dict(self.dirs, **{os.curdir: self.mode})
        for rel, mode in modes.items():
            set_mode(os.path.join(self.root, rel), mode | 0o700)
        dirs, files = self.scan()
        for rel in sorted(set(files) - set(self.files), reverse=True):
            os.unlink(os.path.join(self.root, rel))
        for rel in sorted(dirs - set(self.dirs), reverse=True):
            rmtree(os.path.join(self.root, rel))
        for rel in sorted(set(self.dirs) - dirs):
            os.mkdir(os.path.join(self.root, rel), self.dirs[rel])
        for rel, (data, mode) in self.files.items():
            path = os.path.join(self.root, rel)
            if same(path, data, mode):
                continue
            # Rewritten in place while it is still a regular file: the reward's own directory is
            # the sandbox's, where no call (nor P) may create or remove names.
            if os.path.isdir(path) and not os.path.islink(path):
                rmtree(path)
            elif os.path.lexists(path) and not stat.S_ISREG(os.lstat(path).st_mode):
                os.unlink(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        for rel, mode in modes.items():
            set_mode(os.path.join(self.root, rel), mode)


def set_mode(path, mode):
    """chmod, only when the mode differs (it may not be ours to change when it does not)."""
    if os.lstat(path).st_mode & 0o7777 != mode:
        os.chmod(path, mode)


def same(path, data, mode):
    """Whether `path` is still the regular file `data` with `mode` (opened without following a
    link nor blocking on a FIFO the call may have put there)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data) or st.st_mode & 0o7777 != mode:
            return False
        got = bytearray()
        while len(got) <= len(data):
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            got += chunk
        return got == data
    finally:
        os.close(fd)


def rmtree(path):
    set_mode(path, 0o700)
    for name in os.listdir(path):
        p = os.path.join(path, name)
        if os.path.isdir(p) and not os.path.islink(p):
            rmtree(p)
        else:
            os.unlink(p)
    os.rmdir(path)


def load(req, display, module_file, timeout_s):
    """The user's function, or the failure every call gets."""
    source = open(module_file, encoding="utf-8").read()
    # Tracebacks name the file as the user knows it, with its lines.
    linecache.cache[display] = (len(source), None, source.splitlines(True), display)
    mod = types.ModuleType(os.path.splitext(module_file)[0])
    mod.__file__ = os.path.abspath(module_file)
    sys.modules[mod.__name__] = mod
    try:
        timed(lambda: exec(compile(source, display, "exec"), mod.__dict__), timeout_s)
    except BaseException as e:
        return None, failure("load", e, display, timeout_s)
    fn = getattr(mod, req["function"], None)
    if not callable(fn):
        return None, {"failed": "load", "message": "%s defines no function `%s`" % (display, req["function"]), "where": None, "traceback": ""}
    return fn, None


def guard():
    """P, before the first call: not dumpable, deaf to the signals a call could send it. Returns
    the handlers each call's process gets back."""
    _libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    handlers = {}
    for sig in GUARDED:
        handlers[sig] = signal.getsignal(sig)
        signal.signal(sig, signal.SIG_IGN)
    return handlers


def main():
    req = json.loads(sys.stdin.read())
    wd = os.getcwd()
    # The reward's directory was shipped as `reward/` (beside this file and the program's
    # main.py): its files are the reward's working directory and its imports.
    os.chdir("reward")
    sys.path.insert(0, os.getcwd())
    display, module_file, timeout_s = req["display"], req["module"], float(req["timeout_s"])
    calls = req["calls"]
    signal.signal(signal.SIGALRM, on_alarm)
    fn, failed = load(req, display, module_file, timeout_s)
    if failed:
        for call in calls:
            emit(dict(failed, call=call["id"]))
        return
    snapshot = Snapshot(wd)
    handlers = guard()
    emit({"loaded": True})
    for call in calls:
        emit(dict(run_call(fn, req["problem"], call, display, timeout_s, handlers), call=call["id"]))
        try:
            snapshot.restore()
        except OSError as e:
            # The call left the directory in a state P cannot undo: the next calls would not
            # see what the first saw. rlx reruns them in a fresh sandbox run.
            os.write(2, ("rlx reward driver: cannot restore the working directory: %s\n" % e).encode())
            emit({"restart": True})
            return


main()
os._exit(0)
