# The driver of Python rewards (rlx's own code, embedded in the binary by reward.rs).
#
# It runs as the program of a sandbox run, exactly where a submission's program runs: a fork of
# a warm worker, chrooted, without network, under an unprivileged uid and the run's limits. The
# reward's directory was shipped into the working directory; the batch (one problem and the
# completions of its group) arrives on stdin. For each completion it calls the user's function
# with a per-call timer and writes one JSON line per call to the results channel:
#   {"ok": number} | {"ok": {name: number, ...}}
#   {"failed": "raised"|"timeout"|"returned"|"load", "message": ..., "where": "file:line",
#    "traceback": ...}
# The results channel is the original stdout; fd 1 is pointed at stderr before the user's code
# loads, so what the function prints cannot be taken for a result.
import copy
import json
import linecache
import math
import os
import signal
import sys
import traceback
import types

DRIVER = os.path.abspath(__file__)
OUT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


class CallTimeout(BaseException):
    """Raised by the timer inside the user's code: a BaseException, so that the user's
    `except Exception` does not swallow it."""


def on_alarm(signum, frame):
    raise CallTimeout()


def emit(obj):
    OUT.write(json.dumps(obj) + "\n")
    OUT.flush()


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


def check_value(value, fn, display):
    """The function's value as JSON, or a failure naming where the function is defined."""
    where = "%s:%d" % (display, fn.__code__.co_firstlineno) if hasattr(fn, "__code__") else display
    name = getattr(fn, "__name__", "reward")

    def bad(what):
        return {"failed": "returned", "message": "%s() returned %s; expected a number or a dict of str -> number" % (name, what), "where": where, "traceback": ""}

    if isinstance(value, (int, float)):
        v = float(value)
        return {"ok": v} if math.isfinite(v) else bad(repr(value))
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k or "/" in k or len(k) > 64:
                return bad("a dict with key %r (names are 1 to 64 characters without `/`)" % (k,))
            if not isinstance(v, (int, float)) or not math.isfinite(float(v)):
                return bad("a dict whose %r is %r" % (k, v))
            out[k] = float(v)
        return {"ok": out}
    return bad("a value of type %s" % type(value).__name__)


def main():
    req = json.loads(sys.stdin.read())
    # The reward's directory was shipped as `reward/` (beside the driver's own main.py): its
    # files are the reward's working directory and its imports.
    os.chdir("reward")
    sys.path.insert(0, os.getcwd())
    display, module_file, timeout_s = req["display"], req["module"], float(req["timeout_s"])
    calls = req["calls"]
    signal.signal(signal.SIGALRM, on_alarm)
    source = open(module_file, encoding="utf-8").read()
    # Tracebacks name the file as the user knows it, with its lines.
    linecache.cache[display] = (len(source), None, source.splitlines(True), display)
    mod = types.ModuleType(os.path.splitext(module_file)[0])
    mod.__file__ = os.path.abspath(module_file)
    sys.modules[mod.__name__] = mod
    try:
        timed(lambda: exec(compile(source, display, "exec"), mod.__dict__), timeout_s)
        fn = getattr(mod, req["function"], None)
        if not callable(fn):
            for _ in calls:
                emit({"failed": "load", "message": "%s defines no function `%s`" % (display, req["function"]), "where": None, "traceback": ""})
            return
    except BaseException as e:
        f = failure("load", e, display, timeout_s)
        for _ in calls:
            emit(f)
        return
    for call in calls:
        # Fresh copies: what one call does to its arguments does not reach the next.
        args = (copy.deepcopy(req["problem"]), call["completion"], call["code"], copy.deepcopy(call["verdict"]))
        try:
            value = timed(lambda: fn(*args), timeout_s)
        except BaseException as e:
            emit(failure("raised", e, display, timeout_s))
            continue
        emit(check_value(value, fn, display))


main()
OUT.flush()
os._exit(0)
