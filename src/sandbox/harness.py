# rlx grading harness and warm sandbox worker. Written for rlx (Apache-2.0); embedded in the
# binary with include_str! (src/sandbox/harness.rs) and started once per worker slot.
#
# Process tree of one worker (see src/sandbox/local.rs for the Rust side):
#
#   W  worker: trusted, long-lived, never runs submitted code. Started by rlx with a scrubbed
#      environment; at start-up it enters its own mount/network/IPC/UTS namespaces (and a user
#      namespace when not root), builds a read-only root (system dirs + the Python install),
#      chroots into it, and imports everything the harness needs. Per submission it mounts a
#      fresh tmpfs as the working directory and unmounts it afterwards.
#   S0 long-lived: enters a new PID namespace and forks Z.
#   Z  long-lived PID 1 of that namespace (the zygote). It forks the next program process G as
#      soon as the previous one is done (the first before any job exists), and hands W, over a
#      unix socket, the write end of a pipe that only that G reads, the ends of G's stdout,
#      stderr, control and acknowledgement pipes, and a pidfd of G. When G is done (or W killed
#      it through the pidfd: fail-fast, a deadline, every test reported) Z SIGKILLs everything
#      else in the namespace, reaps it and tells W G's wait status, so every G starts in an empty
#      namespace.
#   G  the program's process: reads its own job from its pipe, drops to the slot's uid (or all
#      capabilities in a user namespace), sets the rlimits, then runs the tests in order: as
#      `__main__` with the test on stdin (stdin tests), calling the function (functional tests),
#      or running the asserts (MBPP, HumanEval). W reads its output from the pipes (capped, with
#      a deadline per test). A test that times out, hits a limit or kills G costs a fresh G.
#      (Until 2026-11 a runner process R sat between Z and G and read G's output for W: one fork,
#      one exit and ~590 copy-on-write faults per submission; see `zygote_main`.)
#
# Without a PID namespace (degraded mode) there is no S0: Z is W's child, a child subreaper, and
# the program is killed by process group (and, as root, by uid) instead of with its namespace.
#
# What a submission can read of another: nothing, by construction. A process holds every page of
# its parent's memory at the fork, freed ones included (a program can scan its own address space
# with ctypes), so no process that forks a submission's processes may ever have held another
# submission's data. W reads every job, file and expected output, and therefore forks nothing
# once the first job has arrived: Z was forked before that, and never reads a byte of a job (it
# only forks, passes file descriptors, kills and reaps); each G is forked from Z before its job
# exists and reads only its own. A pipe per G, so a G killed before it read all of its job cannot
# leave the rest to the next. A zygote that is lost is not replaced from W's memory: W answers
# the job at hand, says "retire", and rlx starts a fresh worker. (The files are written by W
# into a fresh tmpfs per submission, unmounted afterwards.)
#
# Why the verdict cannot be forged: the expected outputs reach W only after the job went to its
# first G, and W never hands them on, so no process that runs submitted code holds them (nor,
# by the above, an earlier submission's); G only produces raw output (stdout bytes, or an
# encoded return value on fd 3), and W compares. Exit codes, markers printed on stdout and
# os._exit/sys.exit therefore decide nothing. (For assert-based formats the asserts necessarily
# run inside G; see README.sandbox.md.)
#
# Comparison semantics are LiveCodeBench's (lcb_runner/evaluation/testing_util.py), re-implemented here
# without numpy: np.allclose(a, b) == all(|a-b| <= 1e-8 + 1e-5*|b|), plus its inf handling.
#
# Framing on every pipe: 4-byte big-endian length, then a UTF-8 JSON object; a job's files follow
# its frame raw, one length-prefixed frame each (`read_files`).

import base64
import ctypes
import errno
import gc
import io
import json
import math
import os
import select
import signal
import socket
import struct
import sys
import time
import traceback
import types

# ---------------------------------------------------------------- framing


def read_exact(fd, n):
    chunks = []
    while n > 0:
        b = os.read(fd, min(n, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def read_frame(fd):
    head = read_exact(fd, 4)
    if head is None:
        return None
    (n,) = struct.unpack(">I", head)
    body = read_exact(fd, n)
    if body is None:
        return None
    return json.loads(body)


def read_files(fd, names):
    """The request's files, sent by rlx right after the job frame as one raw frame each (4-byte
    big-endian length, then the bytes), in the order of `names`. Why not base64 inside the JSON
    frame, as before: decoding it here cost the worker ~1.4 ms per LiveCodeBench harness request
    (300 KB of files; `binascii.a2b_base64` plus parsing the 400 KB frame), where Rust decodes the
    request's base64 anyway. None if rlx closed the pipe."""
    files = {}
    for name in names:
        head = read_exact(fd, 4)
        data = None if head is None else read_exact(fd, struct.unpack(">I", head)[0])
        if data is None:
            return None
        files[name] = data
    return files


def write_frame(fd, obj):
    body = json.dumps(obj).encode()
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        k = os.write(fd, view)
        view = view[k:]


# ---------------------------------------------------------------- LCB comparison (trusted side)


def _allclose(outs, exps):
    for a, b in zip(outs, exps):
        if math.isinf(a) or math.isinf(b):
            if a != b:
                return False
            continue
        if not abs(a - b) <= 1e-8 + 1e-5 * abs(b):
            return False  # also False for NaN, as numpy's default equal_nan=False
    return True


def stdin_output_matches(captured, expected):
    """The LiveCodeBench stdin comparison ladder (lcb_runner/evaluation/testing_util.py)."""
    out = captured.splitlines()
    exp = expected
    # 1 and 2: joined output against the expected text, both stripped; then per-line stripped.
    if "\n".join(out).strip() == exp.strip():
        return True
    if "\n".join(o.strip() for o in out).strip() == exp.strip():
        return True
    # 3: the output equals the one-element list [expected].
    if out == [exp]:
        return True
    # 4: expected as its non-empty "\n" lines (filtered, then stripped, in the reference's order).
    exp_lines = [x.strip() for x in exp.split("\n") if len(x)]
    if out == exp_lines:
        return True
    # 5: output without its empty lines.
    out = [o for o in out if len(o)]
    if out == exp_lines:
        return True
    # 6: one float per line with numpy.allclose tolerance, unless every zipped pair is digits.
    try:
        all_ints = all(o.isdigit() and e.isdigit() for o, e in zip(out, exp_lines))
        if not all_ints:
            of = [float(o) for o in out]
            ef = [float(e) for e in exp_lines]
            if len(of) == len(ef) and _allclose(of, ef):
                return True
    except (ValueError, OverflowError):
        pass
    return False


def native_out_of_memory(raw):
    """A native program that ended for want of memory under RLIMIT_AS: C++'s `new` threw
    std::bad_alloc (terminate, SIGABRT), or the program could not even be loaded (its static
    arrays exceed the limit: execve fails with ENOMEM)."""
    err = _text(raw, "stderr")
    return "std::bad_alloc" in err or "Cannot allocate memory" in err


def _float_close(a, b, eps=1e-6):
    try:
        x, y = float(a), float(b)
    except ValueError:
        return a == b
    if math.isnan(x) or math.isnan(y):
        return False
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= eps * max(1.0, abs(y))


def check_output(checker, captured, expected):
    """Compare a program's stdout with the expected output by the problem's checker: `lcb`
    (LiveCodeBench's ladder), `exact` (equal after trailing whitespace of each line and of the
    whole output), `tokens` (the same whitespace-separated tokens, Codeforces' wcmp) or `float`
    (tokens; numbers within 1e-6 absolute or relative, Codeforces' rcmp6)."""
    if checker == "exact":
        norm = lambda t: "\n".join(line.rstrip() for line in t.replace("\r\n", "\n").rstrip().split("\n"))
        return norm(captured) == norm(expected)
    if checker == "tokens":
        return captured.split() == expected.split()
    if checker == "float":
        a, b = captured.split(), expected.split()
        return len(a) == len(b) and all(_float_close(x, y) for x, y in zip(a, b))
    return stdin_output_matches(captured, expected)


class Opaque:
    """A value the program returned that is not plain data; equal to nothing."""

    def __init__(self, desc):
        self.desc = desc

    def __eq__(self, other):
        return False

    def __ne__(self, other):
        return True

    __hash__ = object.__hash__


def decode_value(v):
    if isinstance(v, list):
        return [decode_value(x) for x in v]
    if isinstance(v, dict):
        (tag, body), = v.items()
        if tag == "t":
            return tuple(decode_value(x) for x in body)
        if tag == "d":
            out = {}
            for k, x in body:
                out[_hashable(decode_value(k))] = decode_value(x)
            return out
        if tag == "s":
            return set(_hashable(decode_value(x)) for x in body)
        if tag == "f":
            return frozenset(_hashable(decode_value(x)) for x in body)
        if tag == "i":
            return int(body)
        if tag == "x":
            return float(body)
        return Opaque(body)
    return v


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return Opaque(repr(v)[:100])


def _int_keys(d):
    out = {}
    for k, v in d.items():
        try:
            out[int(k)] = v
        except (ValueError, TypeError):
            out[k] = v
    return out


def functional_output_matches(result, expected_text):
    """LiveCodeBench's call-based comparison (plain ==, no float tolerance)."""
    expected = json.loads(expected_text)
    if isinstance(expected, dict):
        expected = _int_keys(expected)
    if isinstance(result, tuple):
        result = list(result)
    ok = result == expected
    if isinstance(expected, list) and expected:
        ok = ok or (result == expected[0])
    try:
        if isinstance(result[0], tuple):
            ok = ok or ([list(x) for x in result] == expected[0])
    except Exception:
        pass
    return bool(ok is True)


# ---------------------------------------------------------------- untrusted side: value encoding


def encode_value(v, depth=0):
    """Plain data only, by exact type; numbers and strings are copied by value so that a
    subclass's __eq__ cannot leak into the comparison."""
    if depth > 200:
        raise ValueError("return value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(2**53) < v < 2**53 else {"i": str(v)}
    if t is float:
        return v if math.isfinite(v) else {"x": repr(v)}
    if t is list:
        return [encode_value(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [encode_value(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[encode_value(k, depth + 1), encode_value(x, depth + 1)] for k, x in v.items()]}
    if t is set:
        return {"s": [encode_value(x, depth + 1) for x in v]}
    if t is frozenset:
        return {"f": [encode_value(x, depth + 1) for x in v]}
    import numbers

    if isinstance(v, bool):
        return bool.__bool__(v)
    if isinstance(v, numbers.Integral):
        return encode_value(int(v.__index__()) + 0, depth + 1)
    if isinstance(v, numbers.Real):
        return encode_value(float.__float__(float(v)) + 0.0, depth + 1)
    if isinstance(v, str):
        return str.__str__(v)[:]
    return {"o": t.__name__}


# ---------------------------------------------------------------- isolation primitives

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_SET_SECUREBITS, PR_SET_CHILD_SUBREAPER = 1, 38, 28, 36

_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def unshare(flags):
    _check(_libc.unshare(ctypes.c_int(flags)), "unshare")


def mount(src, dst, fstype, flags, data=None):
    enc = lambda s: None if s is None else s.encode()
    _check(_libc.mount(enc(src), enc(dst), enc(fstype), ctypes.c_ulong(flags), enc(data)), f"mount {dst}")


def prctl(option, arg):
    _check(_libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), 0, 0, 0), "prctl")


def drop_all_caps():
    """Empty effective/permitted/inheritable sets (used inside our own user namespace, where the
    sandboxed uid is the namespace's root) and lock SECBIT_NOROOT so exec cannot regain them."""
    try:
        prctl(PR_SET_SECUREBITS, 0x3 | 0xC | 0x30)
    except OSError:
        pass

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    hdr = Header(0x20080522, 0)
    data = (Data * 2)()
    _check(_libc.capset(ctypes.byref(hdr), ctypes.byref(data)), "capset")


def _write_file(path, text):
    with open(path, "w") as f:
        f.write(text)


def build_root(root, extra_ro, optional_ro=(), notes=None, roots=None):
    """Mount a tmpfs at `root`, bind the system directories read-only into it, chroot there.
    `optional_ro` (rlx's precompiled headers) are bound read-only too when they can be; one
    that cannot is left out with a note (its compiles then run without it, as g++ skips an
    include directory it does not find). `roots` (a host directory): the persistent roots of
    `rlx sandbox serve --protocol cwsandbox`, bound writable at ROOTS (see `enter_root`)."""
    for d in extra_ro:
        if d == WORKDIR or d.startswith(WORKDIR + "/") or WORKDIR.startswith(d + "/") or d == "/tmp":
            raise OSError(errno.EINVAL, f"the Python installation at {d} overlaps the sandbox working directory {WORKDIR}; install it (or the virtualenv) elsewhere")
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    mount("rlx-root", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    os.makedirs(root + "/tmp", exist_ok=True)
    # /tmp holds only the mount point of the per-submission working directory (a fresh tmpfs,
    # see `handle`) and the mount points of a Python installation or virtualenv that lives under
    # /tmp (bound below, so this tmpfs does not hide it). It and the root are then made
    # read-only: even a program whose uid owns them (inside our user namespace) cannot write
    # outside its working directory, and it has no capability left to remount.
    mount("rlx-tmp", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for d in ["/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc"] + extra_ro:
        if not os.path.lexists(d):
            continue
        SYSTEM_RO.append(d)
        target = root + d
        if os.path.islink(d) and d in ("/lib", "/lib64", "/lib32", "/bin", "/sbin"):
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if not os.path.lexists(target):
                os.symlink(os.readlink(d), target)
            continue
        if os.path.lexists(target) and not os.path.isdir(target):
            continue
        os.makedirs(target, exist_ok=True)
        mount(d, target, None, MS_BIND | MS_REC)
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for d in optional_ro:
        bind_optional(root, d, notes if notes is not None else [])
    os.makedirs(root + "/dev", exist_ok=True)
    for dev in ["null", "zero", "urandom", "random"]:
        open(root + "/dev/" + dev, "w").close()
        mount("/dev/" + dev, root + "/dev/" + dev, None, MS_BIND)
    os.mkdir(root + WORKDIR, 0o755)
    if roots:
        os.mkdir(root + ROOTS, 0o700)
        mount(roots, root + ROOTS, None, MS_BIND)
        try:
            mount(None, root + ROOTS, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
        except OSError:
            pass  # best effort: in a user namespace the host mount's locked flags may refuse it
    mount(None, root + "/tmp", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    mount(None, root, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chroot(root)
    os.chdir("/")


def bind_optional(root, d, notes):
    target = root + d
    if not os.path.isdir(d) or d == WORKDIR or d.startswith(WORKDIR + "/") or WORKDIR.startswith(d + "/") or d in ("/", "/tmp"):
        notes.append(f"{d} cannot be shown to the sandbox: C++ compiles run without precompiled headers")
        return
    try:
        os.makedirs(target, exist_ok=True)
        mount(d, target, None, MS_BIND | MS_REC)
    except OSError as e:
        notes.append(f"{d} cannot be shown to the sandbox ({e.strerror or e}): C++ compiles run without precompiled headers")
        return
    # Never left writable: if it cannot be made read-only it goes, and if it cannot go, the
    # whole read-only root fails (the worker then reports the mount namespace as missing).
    try:
        mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    except OSError as e:
        umount(target)
        notes.append(f"{d} cannot be shown read-only to the sandbox ({e.strerror or e}): C++ compiles run without precompiled headers")


WORKDIR = "/tmp/work"
MNT_DETACH = 2
# Where a worker of a sandbox with persistent roots (`roots` in its configuration) sees the host
# directory that holds them, one directory per CoreWeave-protocol sandbox.
ROOTS = "/tmp/roots"
# The directories `build_root` bound read-only (or linked): what every persistent root shows.
SYSTEM_RO = []


def enter_root(top, owner):
    """Make the persistent root `top` (a directory under ROOTS) a container's root view for one
    job: the system directories and the Python installation bound read-only at their paths, the
    /dev nodes bound, everything else the sandbox's own, writable and kept between jobs. The
    program's process chroots into it (`program_main`). Returns the mounts to undo.

    Why bind mounts into a writable directory rather than an overlayfs over the read-only root:
    the root view here is itself a stack of bind mounts, which an overlay's lower layer does not
    cross (it would show empty /usr), and an overlay in a user namespace needs kernel 5.11. Why
    every path component is checked: the directory is the sandbox's own, and a link planted by
    an earlier command must not redirect a mount (commands of one sandbox never run at once, so
    nothing changes it while this runs). `owner` (uid, gid): as root, the whole tree is handed
    to the slot's uid first, since the sandbox's commands may run on any slot."""
    if os.path.islink(top) or not os.path.isdir(top):
        raise OSError(errno.ENOENT, "the sandbox's filesystem is gone")
    if owner:
        os.lchown(top, *owner)
        for d, dirs, files in os.walk(top):
            for n in dirs + files:
                os.lchown(os.path.join(d, n), *owner)
    mounts = []
    try:
        for d in SYSTEM_RO:
            target = top + d
            if os.path.islink(d):
                if not os.path.lexists(target):
                    os.symlink(os.readlink(d), target)
                continue
            _plain_dirs(top, d)
            mount(d, target, None, MS_BIND | MS_REC)
            mounts.append(target)
            mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        _plain_dirs(top, "/dev")
        for dev in ["null", "zero", "urandom", "random"]:
            target = top + "/dev/" + dev
            if not os.path.lexists(target):
                os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666))
            elif os.path.islink(target) or not os.path.isfile(target):
                raise OSError(errno.EEXIST, f"/dev/{dev} in the sandbox is not a plain file")
            mount("/dev/" + dev, target, None, MS_BIND)
            mounts.append(target)
    except BaseException:
        leave_root(mounts)
        raise
    return mounts


def _plain_dirs(top, d):
    """Create `d` under `top`, refusing any component that is a link or not a directory."""
    p = top
    for part in d.strip("/").split("/"):
        p += "/" + part
        if not os.path.lexists(p):
            os.mkdir(p, 0o755)
        elif os.path.islink(p) or not os.path.isdir(p):
            raise OSError(errno.ENOTDIR, f"{p[len(top):]} in the sandbox is not a directory: the system directories cannot be shown there")


def leave_root(mounts):
    for m in reversed(mounts):
        try:
            umount(m)
        except OSError:
            pass


def umount(path):
    _check(_libc.umount2(path.encode(), ctypes.c_int(MNT_DETACH)), f"umount {path}")


# ---------------------------------------------------------------- the worker (W)

PRELUDE = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\n"
    "from random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\n"
    "from operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\n"
    "from builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\n"
    "import collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\n"
    "import statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\n"
    "import json\nimport builtins\nimport typing\n"
)

TMP_MB = 256
PROTECTION = {}
CFG = {}
PRELUDE_NS = {}
SEQ = [0]


def setup(cfg):
    global TMP_MB
    TMP_MB = int(cfg.get("tmp_mb", 256))
    prot = {
        "user_namespace": False,
        "network_namespace": False,
        "mount_namespace": False,
        "pid_namespace": False,
        "unprivileged_uid": False,
        "rlimits": True,
        "notes": [],
    }
    is_root = os.geteuid() == 0
    base = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    entered = False
    if not cfg.get("namespaces", True):
        prot["unprivileged_uid"] = is_root
        prot["notes"].append("namespaces disabled by configuration: no network, mount or PID isolation")
    elif is_root:
        # Programs always drop to the slot's uid when rlx is root, namespaces or not.
        prot["unprivileged_uid"] = True
        try:
            unshare(base)
            entered = True
        except OSError as e:
            prot["notes"].append(f"unshare(mount|net) as root failed: {e}")
    else:
        uid, gid = os.getuid(), os.getgid()
        try:
            unshare(CLONE_NEWUSER | base)
            _write_file("/proc/self/setgroups", "deny")
            _write_file("/proc/self/uid_map", f"0 {uid} 1")
            _write_file("/proc/self/gid_map", f"0 {gid} 1")
            entered = True
            prot["user_namespace"] = True
        except OSError as e:
            prot["notes"].append(f"user namespaces unavailable ({e}): no network, mount or PID isolation")
    if entered:
        prot["network_namespace"] = True
        try:
            extra = sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, sys.exec_prefix)})
            build_root(cfg["root_dir"], extra, cfg.get("ro_dirs") or [], prot["notes"], cfg.get("roots"))
            prot["mount_namespace"] = True
        except OSError as e:
            prot["notes"].append(f"read-only root could not be built: {e.strerror or e}")
    if not prot["mount_namespace"]:
        os.chdir(cfg["fallback_tmp"])
    # Probe the PID namespace once, the way every submission will use it.
    if entered:
        pid = os.fork()
        if pid == 0:
            try:
                unshare(CLONE_NEWPID)
                p2 = os.fork()
                if p2 == 0:
                    os._exit(0 if os.getpid() == 1 else 3)
                _, st = os.waitpid(p2, 0)
                os._exit(os.waitstatus_to_exitcode(st))
            except BaseException:
                os._exit(4)
        _, st = os.waitpid(pid, 0)
        prot["pid_namespace"] = os.waitstatus_to_exitcode(st) == 0
    if not prot["pid_namespace"]:
        prot["notes"].append("no PID namespace: stray processes are killed by process group only")
    if not is_root and not prot["user_namespace"]:
        prot["notes"].append("not root and no user namespace: programs run as the invoking user")
    return prot


def tmp_root():
    return "/tmp" if PROTECTION.get("mount_namespace") else os.getcwd()


def handle(job):
    """Run one submission; returns the reply frame for rlx."""
    SEQ[0] += 1
    uid, gid = CFG["uid"], CFG["gid"]
    private = PROTECTION.get("mount_namespace")
    if private:
        # A fresh tmpfs per submission: nothing survives it, and its size is capped.
        wd = WORKDIR
        owner = (0, 0) if PROTECTION.get("user_namespace") else (uid, gid)
        mount("rlx-work", wd, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700,uid=%d,gid=%d,size=%dm" % (owner + (TMP_MB,)))
    else:
        wd = os.path.join(tmp_root(), "s%d" % SEQ[0])
        os.mkdir(wd, 0o700)
    rooted = []
    try:
        chown = os.geteuid() == 0 and not PROTECTION.get("user_namespace")
        if CFG.get("roots"):
            # A worker of persistent roots runs nothing outside one (it sees them all at ROOTS).
            name = job.get("root")
            if not private or not isinstance(name, str) or not name or "/" in name or name.startswith("."):
                if read_expected(job) is False:
                    kill_zygote()
                    sys.exit(0)
                return {"error": "a job of a sandbox with persistent roots needs a root and the mount namespace"}
            job["root"] = ROOTS + "/" + name
            rooted = enter_root(job["root"], (uid, gid) if chown else None)
        if chown and not private:
            os.chown(wd, uid, gid)
        for rel, data in (job.get("files") or {}).items():
            if "IGNORE_THIS_FILE" in rel:
                continue
            path = os.path.normpath(os.path.join(wd, rel))
            if not path.startswith(wd + "/"):
                return {"error": f"file path `{rel}` leaves the working directory"}
            folder = os.path.dirname(path)
            if folder != wd:
                os.makedirs(folder, exist_ok=True)
            write_owned(path, data, 0o666, (uid, gid) if chown else None)
            if path.endswith(".py"):
                try:
                    write_cached_pyc(path, data, uid, gid)
                except OSError:
                    pass  # best effort: e.g. the request made `__pycache__` a file

        # The files are on disk now; the processes that run the program need the job without
        # them (every hop re-parses the frame).
        job = {k: v for k, v in job.items() if k != "files"}
        checker = None
        if job.get("checker_prog"):
            # Built before the submission runs, so that nothing the submission leaves in the
            # working directory (a planted header) can reach the checker's build.
            checker = build_checker(job, wd, uid, gid, chown)
            if isinstance(checker, str):
                if read_expected(job) is False:
                    kill_zygote()
                    sys.exit(0)
                # The problem's fault: grading again gives the same answer (rlx does not retry).
                return {"error": checker, "problem_fault": True}
        compiled = None
        if job.get("lang"):
            compiled = build(job, wd, uid, gid, chown)
            if compiled.get("status") != "ok":
                # Nothing to run: every test is a compile error. The expected outputs are still
                # read, to stay in step with rlx.
                if read_expected(job) is False:
                    kill_zygote()
                    sys.exit(0)
                return {"compile": compiled, "tests": []}
            job["exec"] = job["lang"]["run"]
        reply = supervise(job, wd)
        if checker is not None and "error" not in reply:
            failed = run_checks(job, wd, reply, checker)
            if failed:
                reply = failed
        if compiled is not None:
            reply["compile"] = compiled
        if job.get("fetch_files") and "error" not in reply:
            reply["files"] = fetch_files(wd, job["fetch_files"])
        return reply
    finally:
        leave_root(rooted)
        if private:
            umount(wd)
        else:
            _rmtree(wd)


# Bytecode for .py files that requests ship again and again, such as Sandbox Fusion's
# testing_util.py, which every LiveCodeBench harness request carries and imports: compiling it
# costs each submission ~8 ms of CPU. W compiles a file the second time it sees the same bytes
# (a one-off file, such as the model's code, is never compiled here) and from then on writes the
# bytecode next to it as a checked hash-based pyc (PEP 552): the import system still hashes the
# source and ignores the pyc if the program changed the file. The cache lives in W, which never
# runs submitted code, and a pyc is a function of the source bytes alone, so no submission can
# put anything in it for another. compile() does not run the code; a source that makes the
# compiler itself fail is simply not cached.
PYC_MAX_SOURCE = 1 << 20
PYC_MAX_ENTRIES = 32
PYC_SEEN = {}  # sha256 -> None (seen once) or pyc bytes (insertion order = age)


def write_owned(path, data, mode, owner):
    """Writes `data` to `path` (created with `mode`, truncated), owned by `owner` (uid, gid) when
    given. os.open rather than open(): the same flags as open(path, "wb"), without the buffered
    file object's fstat, isatty ioctl and lseek (strace: 9 of W's 91 system calls per
    LiveCodeBench request)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if owner:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)


def write_cached_pyc(path, data, uid, gid):
    import hashlib
    import importlib.util
    import marshal

    if len(data) > PYC_MAX_SOURCE:
        return
    key = hashlib.sha256(data).digest()
    if key not in PYC_SEEN:
        PYC_SEEN[key] = None
        while len(PYC_SEEN) > 4 * PYC_MAX_ENTRIES:
            PYC_SEEN.pop(next(iter(PYC_SEEN)))
        return
    pyc = PYC_SEEN[key]
    if pyc is None:
        try:
            code = compile(data, path, "exec", dont_inherit=True)
        except Exception:  # SyntaxError, ValueError (NUL bytes), RecursionError, ...
            return
        # MAGIC, flags (hash-based, check the source), the source hash, the code object.
        pyc = importlib.util.MAGIC_NUMBER + (0b11).to_bytes(4, "little") + importlib.util.source_hash(data) + marshal.dumps(code)
        if sum(1 for v in PYC_SEEN.values() if v is not None) >= PYC_MAX_ENTRIES:
            oldest = next(k for k, v in PYC_SEEN.items() if v is not None)
            del PYC_SEEN[oldest]
    PYC_SEEN.pop(key, None)
    PYC_SEEN[key] = pyc
    target = importlib.util.cache_from_source(path)
    folder = os.path.dirname(target)
    chown = os.geteuid() == 0 and not PROTECTION.get("user_namespace")
    if not os.path.isdir(folder):
        os.mkdir(folder, 0o755)
        if chown:
            os.chown(folder, uid, gid)
    with open(target, "wb") as f:
        f.write(pyc)
    if chown:
        os.chown(target, uid, gid)


# The most of a compiler's output a reply carries (the start: the first error is what counts).
COMPILE_OUTPUT_BYTES = 16 << 10
# The largest binary sent back to rlx for its cache.
BINARY_CACHE_BYTES = 16 << 20


def build(job, wd, uid, gid, chown):
    """The compile step of a compiled language, as a program of its own: the compiler runs in a
    program process G like any submission (the slot's uid, the namespaces, the read-only root,
    the rlimits of the compile step, its own wall-clock limit), with the source written by W.
    A binary rlx already has for this source (`cached`, sent as a file) skips it. Returns
    {"status": "ok" | "error" | "timeout", "time_ms", "exit", "output", "binary"?}; "binary"
    (base64) is the built program, for rlx's cache."""
    lang = job["lang"]
    src = os.path.join(wd, lang["source"])
    binary = os.path.join(wd, lang["binary"])
    write_owned(src, job["code"].encode("utf-8", "surrogateescape"), 0o644, (uid, gid) if chown else None)
    if lang.get("cached"):
        os.chmod(binary, 0o755)
        return {"status": "ok", "time_ms": 0, "exit": 0, "output": "", "cached": True}
    t = float(lang["compile_timeout_s"])
    cjob = {"kind": "run", "mode": "script", "exec": lang["compile"], "tests": [{"stdin": ""}],
            "timeout_s": t, "deadline_s": t + 5.0, "limits": lang["compile_limits"]}
    reply = supervise(cjob, wd)
    if "error" in reply:
        raise OSError(errno.EIO, reply["error"])
    r = reply["tests"][0]
    output = (_text(r, "stderr") + _text(r, "stdout")).strip()
    if len(output) > COMPILE_OUTPUT_BYTES:
        output = output[:COMPILE_OUTPUT_BYTES] + "\n... (compiler output cut)"
    out = {"time_ms": r.get("time_ms", 0), "exit": r.get("exit"), "output": output}
    if r["status"] == "timeout":
        out["status"] = "timeout"
    elif r["status"] == "ran" and r.get("exit") == 0 and os.path.isfile(binary):
        out["status"] = "ok"
        try:
            if os.path.getsize(binary) <= BINARY_CACHE_BYTES:
                with open(binary, "rb") as f:
                    out["binary"] = base64.b64encode(f.read()).decode()
        except OSError:
            pass
    else:
        out["status"] = "error"
    return out


# Checker programs built by this worker, by the SHA-256 rlx computed for their build: a
# problem's checker compiles once per worker, not once per submission. Bounded: oldest first out.
CHECKERS = {}
CHECKERS_MAX = 32
CHECKER = "rlx_checker"


def build_checker(job, wd, uid, gid, chown):
    """The problem's checker program (testlib-style: `checker input output answer`, exit 0 =
    accepted), from this worker's cache or built like a submission (same isolation and limits
    as the compile step); its files are then removed from the working directory, where the
    submission will run. Returns the binary's bytes, or a message saying why there is none
    (the problem's fault, never the submission's)."""
    ck = job["checker_prog"]
    if ck["key"] in CHECKERS:
        return CHECKERS[ck["key"]]
    out = build({"code": ck["code"], "lang": ck["lang"]}, wd, uid, gid, chown)
    for name in (ck["lang"]["source"], ck["lang"]["binary"]):
        try:
            os.unlink(os.path.join(wd, name))
        except OSError:
            pass
    if out.get("status") != "ok" or "binary" not in out:
        return "the problem's checker program did not build (%s): %s" % (out.get("status"), _clip(out.get("output") or ""))
    binary = base64.b64decode(out["binary"])
    while len(CHECKERS) >= CHECKERS_MAX:
        CHECKERS.pop(next(iter(CHECKERS)))
    CHECKERS[ck["key"]] = binary
    return binary


def run_checks(job, wd, reply, binary):
    """Judge the tests that ran cleanly with the checker program, one isolated run per test,
    in a directory made now (the submission is dead: nothing of it can touch the checker or its
    files). Updates `reply` in place; returns the error reply when the checker itself failed:
    with `problem_fault` when the checker program did (ran past its time limit, crashed, exited
    3), which is the problem's fault and must not be retried as the sandbox's would be."""
    ck = job["checker_prog"]
    tests = reply["tests"]
    d = None
    for n, t in enumerate(tests):
        if t["status"] != "check":
            continue
        stdout, answer = base64.b64decode(t.pop("_stdout")), t.pop("_answer")
        i = t.pop("_i")
        if d is None:
            while True:
                d = os.path.join(wd, ".rlx-check-" + os.urandom(6).hex())
                try:
                    os.mkdir(d, 0o755)
                    break
                except FileExistsError:
                    continue
            os.chmod(d, 0o755)  # whatever the umask: the program's uid reads and runs, never writes
            write_owned(os.path.join(d, CHECKER), binary, 0o755, None)
            os.chmod(os.path.join(d, CHECKER), 0o755)
        for name, data in (("input.txt", (job["tests"][i].get("stdin") or "").encode("utf-8", "surrogateescape")),
                           ("output.txt", stdout), ("answer.txt", answer.encode("utf-8", "surrogateescape"))):
            path = os.path.join(d, name)
            if os.path.lexists(path):
                os.unlink(path)
            write_owned(path, data, 0o644, None)
            os.chmod(path, 0o644)
        timeout = float(ck["timeout_s"])
        cjob = {"kind": "run", "mode": "script", "exec": ["./" + CHECKER, "input.txt", "output.txt", "answer.txt"],
                "tests": [{"stdin": ""}], "timeout_s": timeout, "deadline_s": timeout + 5.0, "limits": ck["limits"]}
        r = supervise(cjob, d)
        if "error" in r:
            return {"error": r["error"]}
        c = r["tests"][0]
        said = (_text(c, "stderr") + _text(c, "stdout")).strip()
        code = c.get("exit")
        if c["status"] == "ran" and code == 0:
            t["status"] = "passed"
        elif c["status"] == "ran" and code not in (None, 3) and not c.get("signal"):
            # testlib: 1 wrong answer, 2 presentation error, 7 partial points, 8 unexpected end.
            t["status"] = "wrong_answer"
            t["got"] = _clip(stdout.decode("utf-8", "replace"))
            if said:
                t["error"] = _clip("checker: " + said)
        else:
            how = "exit %s" % code if c["status"] == "ran" and code is not None else c["status"] if not c.get("signal") else "signal %s" % c["signal"]
            return {"error": "the problem's checker program failed on test %d (%s): %s" % (i + 1, how, _clip(said)), "problem_fault": True}
        if job.get("fail_fast") and t["status"] != "passed":
            del tests[n + 1:]
            break
    return None


def fetch_files(wd, names):
    """Read back files the program left (capped, never following a link out of `wd`)."""
    out = {}
    for rel in names:
        path = os.path.normpath(os.path.join(wd, rel))
        if not path.startswith(wd + "/") or os.path.realpath(path) != path:
            continue
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            import stat

            if stat.S_ISREG(os.fstat(fd).st_mode):
                out[rel] = base64.b64encode(os.read(fd, 16 << 20)).decode()
        finally:
            os.close(fd)
    return out


def _rmtree(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


ZYGOTE = {}
# Set by the worker; the Sandbox Fusion driver runs with the server's privileges.
DROP_PRIVILEGES = False
# Set when W lost its zygote: W answers the current job, says "retire" and exits, and rlx starts
# a fresh worker. Why not fork a new zygote: W has read every earlier job and expected output,
# and a zygote forked from it now would hand them down to every later submission.
RETIRE = [False]


def spawn_zygote(pidns):
    """Start Z, the one process that forks the programs' processes, before any job arrives (see
    the header).

    With a PID namespace, S0 (our child) enters a new namespace and forks Z, its PID 1, which
    SIGKILLs everything else in the namespace after each program process, so each starts in an
    empty namespace without paying for a new one. Without one (degraded mode), Z is our child, a
    child subreaper, and the program is killed by process group (and, as root, by uid).

    Z forks each program process G before G's job exists and hands us, over a unix socket, the
    write end of a pipe only that G reads, the read ends of its stdout, stderr and control pipes,
    the write end of its acknowledgement pipe, and a pidfd of G (to kill it at a deadline). G
    reads its job itself; Z never reads a byte of any job. Pipes per G, not shared: a G killed
    before it read its whole job cannot leave the rest for the next one."""
    w_sock, z_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    res_r, res_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            w_sock.close()
            os.close(res_r)
            keep = (res_w, z_sock.fileno())
            devnull = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            for fd in range(3, 1 << 10):
                if fd not in keep:
                    try:
                        os.close(fd)
                    except OSError:
                        pass
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if pidns:
                unshare(CLONE_NEWPID)
                z = os.fork()
                if z == 0:
                    zygote_main(res_w, z_sock, True)
                os.waitpid(z, 0)
            else:
                prctl(PR_SET_CHILD_SUBREAPER, 1)
                zygote_main(res_w, z_sock, False)
        finally:
            os._exit(0)
    z_sock.close()
    os.close(res_w)
    ZYGOTE.update(child=child, sock=w_sock, res_r=res_r, pidns=pidns)
    # The first program process: a zygote that cannot start fails the worker's start-up, not a job.
    first = next_program()
    if first is None:
        raise OSError(errno.ECHILD, "the sandbox zygote did not start")
    ZYGOTE["next"] = first


ZYGOTE_GONE = "the sandbox zygote is gone (the worker restarts)"
# What Z hands over per program process (see `spawn_zygote`), in this order.
G_FDS = 6


def next_program():
    """(job pipe, stdout, stderr, control, acknowledgement, pidfd) of the program process Z
    forked for the next job or test; None if Z is gone."""
    if "next" in ZYGOTE:
        return ZYGOTE.pop("next")
    try:
        _, fds, _, _ = socket.recv_fds(ZYGOTE["sock"], 16, G_FDS)
    except OSError:
        fds = []
    if len(fds) == G_FDS:
        return tuple(fds)
    for fd in fds:
        os.close(fd)
    return None


def kill_zygote():
    """Hard stop: Z (or S0, and Z through PR_SET_PDEATHSIG, the namespace with it) dies, and this
    worker retires (see RETIRE)."""
    RETIRE[0] = True
    if not ZYGOTE:
        return
    try:
        os.kill(ZYGOTE["child"], signal.SIGKILL)
    except ProcessLookupError:
        pass
    for fd in ZYGOTE.pop("next", ()):
        os.close(fd)
    ZYGOTE["sock"].close()
    os.close(ZYGOTE["res_r"])
    ZYGOTE.clear()
    # Not waiting: without a PID namespace a program's process that left its group may live on
    # (until its CPU limit); we exit next, and it is reaped by whoever inherits it.
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                return
        except ChildProcessError:
            return


def zygote_main(res_w, sock, pidns):
    """Z: fork a program process G, hand W its pipes and pidfd, wait for it, kill and reap what
    it left, report "done" (with G's wait status, which only Z, its parent, can read), and fork
    the next. Nothing here reads a job, so every G starts from the memory Z had when the worker
    started.

    Why G is Z's own child, with no runner process between them that reads its output (as
    before): W reads G's pipes itself. W holds every job anyway and forks nothing, so that adds
    nothing to what any process could leak, and a submission costs one fork and one exit fewer.
    Measured on Sandbox Fusion's LiveCodeBench request: the runner cost a fork (its page tables
    copied), an exit and ~590 copy-on-write page faults, ~11 % of the request's CPU."""
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    root_uid = DROP_PRIVILEGES and os.geteuid() == 0 and not PROTECTION.get("user_namespace")
    while True:
        job_r, job_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        g = os.fork()
        if g == 0:
            try:
                for fd in (job_w, out_r, err_r, ctl_r, ack_w, res_w):
                    os.close(fd)
                sock.close()
                program_main(job_r, pidns, out_w, err_w, ctl_w, ack_r)
            finally:
                os._exit(70)
        for fd in (job_r, out_w, err_w, ctl_w, ack_r):
            os.close(fd)
        pidfd = os.pidfd_open(g)
        handed = (job_w, out_r, err_r, ctl_r, ack_w, pidfd)
        try:
            socket.send_fds(sock, [b"g"], list(handed))
        except OSError:
            os._exit(0)  # W is gone
        for fd in handed:
            os.close(fd)
        status = None
        while True:
            try:
                pid, st = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            if pid == g:
                status = st
                break
        # G is done, or W killed it (deadline, fail-fast, all tests reported): kill what the
        # program left.
        if pidns:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            try:
                os.killpg(g, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if root_uid:
                kill_uid(CFG["uid"])
        reap_orphans()
        write_frame(res_w, {"done": True, "status": status})


def supervise(job, wd):
    """Run the job's tests on the program processes Z forked for it (a fresh one after a test
    that ended its process), send the expected outputs nowhere, and judge each test."""
    job = dict(job, wd=wd)
    n = len(job["tests"])
    deadline = time.monotonic() + job["deadline_s"]
    results = []
    expected = None
    first = True
    infra = None
    aborted = timed_out = False

    def emit(raw):
        results.append(judge(job, raw, expected))
        return bool(job.get("fail_fast") and results[-1]["status"] not in ("passed", "check"))

    while len(results) < n and not aborted and not timed_out:
        if not first and time.monotonic() >= deadline:
            timed_out = True  # the whole submission's deadline: no fresh G for the rest
            break
        fds = next_program() if ZYGOTE else None
        if fds is None:
            if first:
                read_expected(job)  # keep in step with rlx
            kill_zygote()
            return {"error": ZYGOTE_GONE}
        job_w, out_r, err_r, ctl_r, ack_w, pidfd = fds
        watch = None
        try:
            try:
                write_frame(job_w, dict(job, start=len(results)))
                wrote = True
            except OSError:
                wrote = False  # G died before reading its job
            finally:
                os.close(job_w)
            t0 = time.monotonic()
            if first:
                first = False
                # Only now, with the job in its G's pipe: the expected outputs never reach it.
                expected = read_expected(job)
                if expected is False:
                    kill_zygote()
                    sys.exit(0)
            if not wrote:
                infra, aborted = "the program's process died before reading its job", True
            else:
                watch = Watch(job, len(results), out_r, err_r, ctl_r, ack_w, pidfd, emit, t0, expect_ready=True)
                status, exited = watch.run(deadline)
                if watch.infra:
                    infra, aborted = watch.infra, True
                elif status == "stop":
                    aborted = True
                elif status == "deadline":
                    timed_out = True
            try:
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
            done = wait_done(ZYGOTE["res_r"], 5.0)
            if done is None:
                # Z is gone (end of file: an infrastructure failure, never the program's) or stuck.
                kill_zygote()
                return finish(job, results, ZYGOTE_GONE, True, False)
            if watch is not None and not aborted and not timed_out and watch.i < n:
                # The current test ended its process: charge it, and go on with a fresh one
                # (unless that failure stops a fail-fast job).
                if watch.final(status, exited, done["status"]):
                    aborted = True
        finally:
            for fd in (out_r, err_r, ctl_r, ack_w, pidfd):
                os.close(fd)
    return finish(job, results, infra, aborted, timed_out)


def read_expected(job):
    """The expected outputs, read from rlx only after the job went to its first G."""
    if job["kind"] == "grade" and job["mode"] in ("stdin", "functional"):
        frame = read_frame(0)
        if frame is None:
            return False
        return frame["expected"]
    return None


def split_frames(buf):
    """The complete length-prefixed JSON frames at the start of `buf`, and the bytes after them
    (a frame still arriving)."""
    frames = []
    while len(buf) >= 4:
        (k,) = struct.unpack(">I", buf[:4])
        if len(buf) < 4 + k:
            break
        frames.append(json.loads(buf[4 : 4 + k]))
        buf = buf[4 + k :]
    return frames, buf


def wait_done(res_r, timeout):
    """Z's "done" frame (with G's wait status); None if Z is gone or silent for `timeout`."""
    deadline = time.monotonic() + timeout
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        r, _, _ = select.select([res_r], [], [], left)
        if not r:
            return None
        chunk = os.read(res_r, 1 << 20)
        if not chunk:
            return None
        frames, buf = split_frames(buf + chunk)
        for raw in frames:
            if raw.get("done"):
                return raw


def collect(job, res_r, expected):
    """Sandbox Fusion driver: read the tests' frames from the child running them and judge each.
    Returns (results, infra, clean, aborted, timed_out): `clean` means nothing needs killing."""
    n = len(job["tests"])
    deadline = time.monotonic() + job["deadline_s"]
    results = []
    buf = b""
    aborted = False
    infra = None
    while not aborted and len(results) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        r, _, _ = select.select([res_r], [], [], left)
        if not r:
            break
        chunk = os.read(res_r, 1 << 20)
        if not chunk:
            break
        frames, buf = split_frames(buf + chunk)
        for raw in frames:
            if "infra" in raw:
                infra = raw["infra"]
                aborted = True
                break
            if len(results) < n:
                results.append(judge(job, raw, expected))
            if job.get("fail_fast") and results[-1]["status"] != "passed":
                aborted = True
                break
    return results, infra, len(results) >= n, aborted, time.monotonic() >= deadline


def finish(job, results, infra, aborted, timed_out):
    n = len(job["tests"])
    if infra:
        return {"error": infra}
    if len(results) < n and not aborted:
        for i in range(len(results), n):
            results.append({"status": "timeout" if timed_out else "runtime_error", "time_ms": 0})
    return {"tests": results}


def reap_orphans():
    """Reap every child, orphans included: Z (and W) are child subreapers, so a program's
    process whose parent died is re-parented to them and reaped here, and nothing of the
    submission (not even a zombie) outlives it."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


# What a failed test reports back for error feedback (multi-attempt rollouts): bounded, so a
# program that prints megabytes costs nothing downstream.
DETAIL_CHARS = 600


def _text(raw, key):
    try:
        return base64.b64decode(raw.get(key) or "").decode("utf-8", "replace")
    except Exception:
        return ""


def _clip(text, tail=False):
    if len(text) <= DETAIL_CHARS:
        return text
    return "..." + text[-DETAIL_CHARS:] if tail else text[:DETAIL_CHARS] + "..."


def judge(job, raw, expected):
    """Turn one raw test outcome from R into a test verdict (trusted side)."""
    out = _judge_status(job, raw, expected)
    if job["kind"] != "run" and out["status"] not in ("passed", "check"):
        # The traceback (or whatever the program wrote to stderr) and, for a wrong answer, what
        # the program produced: what a human would look at first.
        err = _text(raw, "stderr").strip()
        if err:
            out["error"] = _clip(err, tail=True)
        if out["status"] == "wrong_answer":
            if job["mode"] == "stdin":
                out["got"] = _clip(_text(raw, "stdout"))
            elif job["mode"] == "functional":
                try:
                    out["got"] = _clip(json.dumps(decode_value(raw["res"]["ok"]), default=repr))
                except Exception:
                    pass
    return out


def _judge_status(job, raw, expected):
    st = raw["status"]
    out = {"status": st, "time_ms": raw["time_ms"]}
    if job["kind"] == "run":
        out.update(raw)
        return out
    if st != "ran":
        return out
    mode = job["mode"]
    res = raw.get("res")
    if mode == "stdin":
        if raw["exit"] != 0 or (res and res.get("exc")):
            oom = (res and res.get("exc") == "MemoryError") or (job.get("exec") and native_out_of_memory(raw))
            out["status"] = "memory_limit" if oom else "runtime_error"
        else:
            if job.get("checker_prog"):
                # Judged by the problem's checker program once the submission is done.
                out.update(status="check", _stdout=raw["stdout"], _answer=expected[raw["i"]], _i=raw["i"])
                return out
            text = base64.b64decode(raw["stdout"]).decode("utf-8", "replace")
            ok = check_output(job.get("checker") or "lcb", text, expected[raw["i"]])
            out["status"] = "passed" if ok else "wrong_answer"
    elif mode == "functional":
        if not res or "ok" not in res:
            exc = res.get("exc") if res else None
            out["status"] = "memory_limit" if exc == "MemoryError" else "runtime_error"
        else:
            try:
                value = decode_value(res["ok"])
                ok = functional_output_matches(value, expected[raw["i"]])
            except Exception:
                ok = False
            out["status"] = "passed" if ok else "wrong_answer"
    else:  # assert, humaneval
        if res and res.get("ok") is True:
            out["status"] = "passed"
        elif res and res.get("exc") == "AssertionError":
            out["status"] = "wrong_answer"
        elif res and res.get("exc") == "MemoryError":
            out["status"] = "memory_limit"
        else:
            out["status"] = "runtime_error"
    return out


# ---------------------------------------------------------------- supervising the program (W)


def set_limits(job):
    import resource

    lim = job["limits"]
    resource.setrlimit(resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (lim["fsize_mb"] << 20, lim["fsize_mb"] << 20))
    resource.setrlimit(resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"]))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


class Watch:
    """Supervise one program process G from its pipes: collect each test's stdout and stderr
    (capped), tell G to go on after each test, enforce the per-test deadline, and hand every
    completed test's raw outcome to `emit` (which returns True to stop: fail-fast).

    G runs the tests from `i` on, in order, in one process (as the reference harness runs them),
    so a test costs a function call, not a fork. After each test G flushes its output and writes
    a frame on its control pipe; the bytes read so far are that test's output. A test that hits
    its deadline or a limit, or kills G, is charged to that test (`final`) and a fresh G goes on
    with the next one. The control pipe is writable by the program too; all it can say there is
    "this test is done" or its own return value. With `expect_ready`, G's first frame is its own
    (written before any program code runs): {"ready": true}, or {"infra": why} when setting
    itself up failed, which is the sandbox's failure, never the program's."""

    def __init__(self, job, i, out_r, err_r, ctl_r, ack_w, exit_fd, emit, t0, expect_ready=False):
        lim = job["limits"]
        self.job, self.i, self.n = job, i, len(job["tests"])
        self.out_r, self.err_r, self.ctl_r, self.ack_w, self.exit_fd = out_r, err_r, ctl_r, ack_w, exit_fd
        self.emit = emit
        self.bufs = {out_r: bytearray(), err_r: bytearray()}
        self.caps = {out_r: lim["output_bytes"], err_r: lim["stderr_bytes"]}
        self.err_truncated = False
        self.t0 = t0
        self.deadline = t0 + job["timeout_s"]
        self.ready = not expect_ready
        self.infra = None

    def drain(self, fd):
        try:
            os.set_blocking(fd, False)
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                if self.take(fd, chunk):
                    return "output_limit"
        except BlockingIOError:
            pass
        finally:
            os.set_blocking(fd, True)
        return None

    def take(self, fd, chunk):
        """Keep what fits under the cap; True when stdout overflowed (stderr is only flagged, and
        kept draining so that the program never blocks on it)."""
        room = self.caps[fd] - len(self.bufs[fd])
        self.bufs[fd] += chunk[: max(room, 0)]
        if len(chunk) > room:
            if fd == self.err_r:
                self.err_truncated = True
            else:
                return True
        return False

    def report(self, status, res, code, sig):
        """Emit the current test's outcome and start the next one's clock. True: stop."""
        now = time.monotonic()
        raw = {
            "i": self.i,
            "status": status,
            "time_ms": int((now - self.t0) * 1000),
            "exit": code,
            "signal": sig,
            "stdout": base64.b64encode(bytes(self.bufs[self.out_r])).decode(),
            "stderr": base64.b64encode(bytes(self.bufs[self.err_r])).decode(),
            "stderr_truncated": self.err_truncated,
            "res": res,
        }
        self.bufs[self.out_r].clear()
        self.bufs[self.err_r].clear()
        self.err_truncated = False
        self.i += 1
        self.t0 = now
        self.deadline = now + self.job["timeout_s"]
        return self.emit(raw)

    def run(self, hard_deadline=None):
        """Until G is done with its tests or has to be stopped. Returns (status, exited): status
        None (every test reported, or G exited), "timeout", "output_limit", "ran" (a garbled
        control stream), "stop" (`emit` said so), "deadline" (`hard_deadline` passed), "infra"."""
        poller = select.poll()
        for fd in (self.out_r, self.err_r, self.ctl_r, self.exit_fd):
            poller.register(fd, select.POLLIN)
        open_fds = {self.out_r, self.err_r, self.ctl_r}
        ctl = bytearray()
        exited = False
        status = None
        while self.i < self.n:
            now = time.monotonic()
            end = self.deadline if hard_deadline is None else min(self.deadline, hard_deadline)
            if now >= end:
                status = "timeout" if now >= self.deadline else "deadline"
                break
            for fd, _ in poller.poll(max(1, int((end - now) * 1000))):
                if fd == self.exit_fd:
                    exited = True
                    continue
                if fd not in open_fds:
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    poller.unregister(fd)
                    open_fds.discard(fd)
                    continue
                if fd == self.ctl_r:
                    ctl += chunk
                elif self.take(fd, chunk):
                    status = "output_limit"
            if status:
                break
            # Completed tests: G flushed its output before writing the frame, so what the
            # pipes hold now belongs to this test.
            while len(ctl) >= 4:
                (k,) = struct.unpack(">I", ctl[:4])
                if k > (64 << 20):
                    status = "ran"  # a garbled control stream ends this G
                    break
                if len(ctl) < 4 + k:
                    break
                try:
                    frame = json.loads(bytes(ctl[4 : 4 + k]))
                    res, code = frame.get("res"), int(frame.get("exit", 0))
                except (ValueError, TypeError, AttributeError):
                    frame, res, code = None, None, 1
                del ctl[: 4 + k]
                if not self.ready:
                    # G's own first frame, written before any program code ran.
                    self.ready = True
                    if isinstance(frame, dict) and "infra" in frame:
                        self.infra = str(frame["infra"])
                        status = "infra"
                        break
                    continue
                if self.drain(self.out_r):
                    status = "output_limit"
                    break
                self.drain(self.err_r)
                if self.report("ran", res, code, None):
                    status = "stop"
                    break
                if self.i >= self.n:
                    break
                # G waits for this before the next test, so output never straddles tests.
                try:
                    os.write(self.ack_w, b"k")
                except OSError:
                    pass
            if status or self.i >= self.n:
                break
            if exited:
                for fd in (self.out_r, self.err_r):
                    if fd in open_fds and self.drain(fd):
                        status = "output_limit"
                break
        return status, exited

    def final(self, status, exited, wait_status):
        """Charge the current test for the end of its process (G's `wait_status`). True: stop."""
        code = os.waitstatus_to_exitcode(wait_status) if wait_status is not None else -signal.SIGKILL
        sig = -code if code < 0 else None
        if status is None:
            elapsed = time.monotonic() - self.t0
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and elapsed >= self.job["timeout_s"] - 0.05):
                status = "timeout"
            elif sig == signal.SIGXFSZ:
                status = "output_limit"
            else:
                status = "ran"
        ran = status == "ran"
        return self.report(status, None, code if ran else None, sig if ran else None)


def drop_privileges(job):
    """In G, before any submitted code: the slot's uid (root) or no capabilities (user
    namespace), no new privileges, and the rlimits."""
    if os.geteuid() == 0 and not PROTECTION.get("user_namespace"):
        os.setgroups([])
        os.setgid(CFG["gid"])
        os.setuid(CFG["uid"])
    elif PROTECTION.get("user_namespace"):
        drop_all_caps()
    prctl(PR_SET_NO_NEW_PRIVS, 1)
    set_limits(job)


def prepare_program(job, in_pidns):
    """G, before any submitted code: its own process group (without a PID namespace), dropped
    privileges, the address-space and stack limits."""
    import resource

    if not in_pidns:
        os.setpgid(0, 0)
    if DROP_PRIVILEGES:
        drop_privileges(job)
    mem = job["limits"]["memory_mb"]
    if mem > 0:
        # The preloaded modules' address space is allowed on top: the limit is what the program
        # may add to a bare interpreter, whether numpy is preloaded or not.
        cap = (mem << 20) + PRELOADED["as_bytes"]
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    # Deep recursion through C frames (lru_cache, __eq__) needs more than the 8 MiB default stack
    # once the recursion limit is 600 000; the stack counts against the address-space limit
    # anyway. Best effort: the hard limit may be lower.
    try:
        stack = 256 << 20 if mem <= 0 else min(256, mem // 2) << 20
        hard = resource.getrlimit(resource.RLIMIT_STACK)[1]
        if hard != resource.RLIM_INFINITY:
            stack = min(stack, hard)
        resource.setrlimit(resource.RLIMIT_STACK, (stack, hard))
    except (ValueError, OSError):
        pass


def program_main(job_r, in_pidns, out_w, err_w, ctl_w, ack_r):
    """G as Z forked it: read its own job (with the worker's privileges), set itself up, say so
    on the control pipe (see `Watch`), then run the tests from the job's `start` on."""
    import resource

    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    job = read_frame(job_r)
    os.close(job_r)
    if job is None:
        os._exit(0)
    try:
        os.chdir(job["wd"])
        if job.get("root"):
            # A persistent root (see `enter_root`): the program's whole filesystem.
            os.chroot(job["root"])
            os.chdir(job.get("cwd") or "/")
        prepare_program(job, in_pidns)
        ready = {"ready": True}
    except BaseException as e:
        ready = {"infra": f"sandbox set-up failed: {type(e).__name__}: {e}"}
    write_frame(ctl_w, ready)
    if "infra" in ready:
        os._exit(0)
    child_loop(job, job["start"], out_w, err_w, ctl_w, ack_r, resource)


def kill_others(in_pidns, pgid):
    """Kill everything the program left (the caller is PID 1, or spared by kill(-1)) and reap it."""
    if in_pidns:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
    else:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if DROP_PRIVILEGES and os.geteuid() == 0 and not PROTECTION.get("user_namespace"):
            kill_uid(CFG["uid"])
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def kill_uid(uid):
    """Without a PID namespace, as root: every process of the slot's uid is the program's, so a
    helper that becomes that uid and calls kill(-1) reaches children that left the process
    group too (the helper itself is spared). Twice, for a fork racing the first pass."""
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            try:
                os.setgroups([])
                os.setgid(CFG["gid"])
                os.setuid(uid)
                os.kill(-1, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os._exit(0)
        os.waitpid(pid, 0)


def run_tests(job, in_pidns, res_w):
    """The Sandbox Fusion driver's runner: fork G itself for each run of tests (one G, unless a
    test ends it) and report one raw frame per test on `res_w`."""
    import resource

    n = len(job["tests"])
    i = 0
    while i < n:
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ctl_r, ctl_w = os.pipe()
        ack_r, ack_w = os.pipe()
        t0 = time.monotonic()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (out_r, err_r, ctl_r, ack_w):
                    os.close(fd)
                prepare_program(job, in_pidns)
                child_loop(job, i, out_w, err_w, ctl_w, ack_r, resource)
            finally:
                os._exit(70)
        for fd in (out_w, err_w, ctl_w, ack_r):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        emit = lambda raw: write_frame(res_w, raw)
        watch = Watch(job, i, out_r, err_r, ctl_r, ack_w, pidfd, emit, t0)
        status, exited = watch.run()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, st = os.waitpid(pid, 0)
        kill_others(in_pidns, pid)
        if watch.i < n:
            watch.final(status, exited, st)
        i = watch.i
        for fd in (out_r, err_r, ctl_r, pidfd, ack_w):
            os.close(fd)


# ---------------------------------------------------------------- the program's process (G)


def exec_test(job, start, out_w, err_w, resource):
    """G for a compiled program (or the compile step): become the program for test `start`, with
    the test on stdin. The control and acknowledgement pipes are closed first, so the program
    has no way to say anything but its output and its exit status (W charges the test when G
    ends, see `Watch.final`); the next test gets a fresh G. The address-space limit is the memory
    limit itself: no interpreter is preloaded under a native program."""
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    fd = os.memfd_create("stdin")
    view = memoryview((job["tests"][start].get("stdin") or "").encode("utf-8", "surrogateescape"))
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, 0)
    os.dup2(fd, 0)
    os.closerange(3, 1 << 16)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = int(ru.ru_utime + ru.ru_stime + math.ceil(job["timeout_s"])) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    argv = job["exec"]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LC_ALL", "HOME")}
    env["TMPDIR"] = job["wd"]
    mem = job["limits"]["memory_mb"]
    try:
        # Last, just before the exec: this interpreter may already map more than the limit.
        if mem > 0:
            resource.setrlimit(resource.RLIMIT_AS, (mem << 20, mem << 20))
        os.execve(argv[0], argv, env)
    except OSError as e:
        # What a shell says for a missing command, and its exit code.
        os.write(2, ("rlx: cannot execute %s: %s\n" % (argv[0], e.strerror)).encode())
        os._exit(127 if e.errno in (errno.ENOENT, errno.EACCES) else 126)


def child_loop(job, start, out_w, err_w, ctl_w, ack_r, resource):
    if job.get("exec"):
        exec_test(job, start, out_w, err_w, resource)
    os.dup2(out_w, 1)
    os.dup2(err_w, 2)
    os.dup2(ctl_w, 3)
    os.dup2(ack_r, 4)
    os.closerange(5, 1 << 16)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    t = job["timeout_s"]
    for i in range(start, len(job["tests"])):
        test = job["tests"][i]
        stdin_data = test.get("stdin") or ""
        fd = os.memfd_create("stdin")
        data = stdin_data.encode("utf-8", "surrogateescape")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.lseek(fd, 0, 0)
        os.dup2(fd, 0)
        os.close(fd)
        sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="surrogateescape")
        sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8", errors="surrogateescape")
        sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)), encoding="utf-8", errors="backslashreplace", line_buffering=True)
        # CPU time backs up the wall-clock deadline of this test (soft < hard: SIGXCPU first).
        ru = resource.getrusage(resource.RUSAGE_SELF)
        cpu = int(ru.ru_utime + ru.ru_stime + math.ceil(t)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        report, exit_code = run_test(job, test)
        try:
            sys.stdout.flush()
        except BaseException:
            exit_code = exit_code or 1
        try:
            sys.stderr.flush()
        except BaseException:
            pass
        try:
            frame = {"res": report or None, "exit": exit_code}
            try:
                body = json.dumps(frame).encode()
            except (ValueError, RecursionError, MemoryError):
                body = b'{"res": {"exc": "UnencodableResult"}, "exit": 1}'
            data = struct.pack(">I", len(body)) + body
            view = memoryview(data)
            while view:
                view = view[os.write(3, view):]
            if i + 1 < len(job["tests"]) and os.read(4, 1) != b"k":
                os._exit(0)
        except OSError:
            os._exit(71)
    os._exit(0)


def run_test(job, test):
    """Run one test in this process; returns (report for W, exit code)."""
    mode = job["mode"]
    code_text = job["code"]
    report = {}
    exit_code = 0
    try:
        if mode == "script":
            exit_code = run_script(code_text, job)
        elif mode == "stdin":
            g = dict(PRELUDE_NS)
            g["__name__"] = "__main__"
            run_main(code_text, g)
        elif mode == "functional":
            mod = types.ModuleType("tmp_sol")
            mod.__dict__.update(PRELUDE_NS)
            mod.__dict__["__name__"] = "tmp_sol"
            sys.modules["tmp_sol"] = mod
            exec(compile(code_text, "<solution>", "exec"), mod.__dict__)
            if "class Solution" in code_text:
                fn = getattr(mod.Solution(), job["fn_name"])
            else:
                fn = getattr(mod, job["fn_name"])
            args = [json.loads(line) for line in test["input"].split("\n")]
            result = fn(*args)
            report = {"ok": encode_value(result)}
        else:  # assert / humaneval: program, setup, then the test code in one namespace
            # Setup after the program, as MBPP's harness runs it: setup code may use the
            # program's definitions (task 367 builds trees with the solution's `Node`).
            g = {"__name__": "__main__", "__builtins__": __builtins__}
            exec(compile(code_text, "<solution>", "exec"), g)
            if job.get("setup"):
                exec(compile(job["setup"], "<setup>", "exec"), g)
            exec(compile(test["code"], "<test>", "exec"), g)
            report = {"ok": True}
    except SystemExit as e:
        # LiveCodeBench swallows SystemExit in stdin programs (sys.exit() ends the test
        # normally); anywhere else the test did not complete, so no result is reported.
        if mode == "script":
            exit_code = _exit_code(e)
        elif mode != "stdin":
            report = {"exc": "SystemExit"}
    except BaseException as e:
        report = {"exc": type(e).__name__}
        exit_code = 1
        try:
            traceback.print_exc()
        except BaseException:
            pass
    return report, exit_code


def _exit_code(e):
    c = e.code
    if c is None:
        return 0
    if isinstance(c, int):
        return c & 0xFF
    try:
        sys.stderr.write(str(c) + "\n")
    except BaseException:
        pass
    return 1


def run_main(code_text, g):
    mod = types.ModuleType("__main__")
    mod.__dict__.update(g)
    sys.modules["__main__"] = mod
    exec(compile(code_text, "<solution>", "exec"), mod.__dict__)


def run_script(code_text, job):
    """`python main.py` semantics for /run_code: __main__, sys.argv, exit codes, tracebacks."""
    # In a persistent root the code stays in memory: the root's files are the client's.
    in_root = bool(job.get("root"))
    path = "/rlx-launcher.py" if in_root else os.path.join(os.getcwd(), "main.py")
    if not in_root:
        with open(path, "w") as f:
            f.write(code_text)
    sys.argv = [path]
    sys.path[0] = os.getcwd()
    mod = types.ModuleType("__main__")
    mod.__dict__["__file__"] = path
    mod.__dict__["__builtins__"] = __builtins__
    sys.modules["__main__"] = mod
    try:
        exec(compile(code_text, path, "exec"), mod.__dict__)
    except SystemExit:
        raise
    except BaseException:
        traceback.print_exc()
        return 1
    return 0


# ---------------------------------------------------------------- entry points


# Imported by every warm worker before it forks, so that submissions find them in sys.modules
# instead of paying for them. Measured with `python -X importtime` on Sandbox Fusion's
# LiveCodeBench harness request (as Sandbox Fusion runs LiveCodeBench; ~330 ms of imports in all on
# the development machine, of which numpy ~120-200 ms and unittest.mock, through asyncio, ~40 ms;
# the rest: ast, platform, faulthandler, json, datetime, statistics, decimal, pickle, subprocess),
# plus what solutions commonly import themselves (the prelude's modules are imported above).
# Third-party modules come from the interpreter's own environment (its prefix or virtualenv);
# one that is missing is skipped and reported, and submissions importing it pay for it.
PRELOAD = (
    "numpy", "unittest.mock", "platform", "faulthandler", "ast", "json", "datetime", "statistics",
    "decimal", "fractions", "pickle", "subprocess", "array", "queue", "threading", "dataclasses",
)
# What the preload achieved: modules imported, modules missing (name -> why), and the address
# space it added (bytes), which the program's RLIMIT_AS allows on top of its memory limit.
PRELOADED = {"modules": [], "missing": {}, "as_bytes": 0}

# Thread pools of numeric libraries, pinned to one thread before numpy is imported. Why: with
# its default, OpenBLAS starts a thread pool when numpy is imported; forking a process that has
# other threads leaves the child with locks those threads may hold and a pool that no longer
# exists (the classic fork-with-threads hazard, seen as hangs in BLAS calls after fork), and a
# process with more than one thread can no longer enter new namespaces. One thread per program is
# also what a sandbox slot's CPU share is, and what Sandbox Fusion's harness sets (OMP_NUM_THREADS=1).
THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS",
               "VECLIB_MAXIMUM_THREADS", "BLIS_NUM_THREADS", "GOTO_NUM_THREADS")


def preload(statm_fd):
    """Import PRELOAD inside the sandbox's view of the filesystem (after the chroot, so a module
    is preloaded exactly when submissions could import it), then `warm_up`. `statm_fd` is
    /proc/self/statm, opened before the chroot: its first field before and after is the address
    space added."""
    for var in THREAD_VARS:
        os.environ[var] = "1"
    pages = lambda: 0 if statm_fd is None else int(os.pread(statm_fd, 200, 0).split()[0])
    before = pages()
    done, missing = [], {}
    for name in PRELOAD:
        try:
            __import__(name)
            done.append(name)
        except Exception as e:  # ImportError, or a broken install: skip it, say why
            missing[name] = f"{type(e).__name__}: {e}"[:200]
    # Inside the measurement: what the warm-up leaves allocated counts as preloaded too.
    warm_up()
    FILLER[:] = fill_pools()
    added = max(0, pages() - before) * os.sysconf("SC_PAGE_SIZE")
    return {"modules": done, "missing": missing, "as_bytes": added}


# Rounds of `warm_round` before the fork (see `warm_up`). Measured with callgrind on Sandbox
# Fusion's LiveCodeBench harness request (10 tests, correct solution), instructions of the forked
# program process: 178.4 M cold, 176.4 M warmed (30 rounds, with `warm_up`'s restore; 1 round
# of a bare mock/patch pass gave 176.3 M, 30 rounds without the restore 175.5 M); page faults of
# the whole submission 3,065 -> 2,834.
WARM_ROUNDS = 30


def warm_round():
    """One pass over the standard-library code that Sandbox Fusion's LiveCodeBench harness runs
    for every test (as LiveCodeBench grades call-based problems): `mock_open` and stacked `patch` decorators around a
    program that reads stdin through the patched `sys.stdin`, stdout captured in a StringIO, json,
    an Enum class, a module built with `exec`, `ast.parse`/`ast.unparse` of a `__main__` guard.
    Our own code with our own data, never a submission's."""
    import ast
    import enum
    from unittest.mock import mock_open, patch

    text = "2\n3 4\n"
    cases = json.loads(json.dumps({"inputs": [text], "outputs": ["7\n4\n"], "fn_name": None}))
    lines = iter(cases["inputs"][0].split("\n"))

    @patch("builtins.open", mock_open(read_data=text))
    @patch("sys.stdin", io.StringIO(text))
    @patch("sys.stdin.readline", lambda *args: next(lines))
    @patch("sys.stdin.readlines", lambda *args: text.split("\n"))
    @patch("sys.stdin.read", lambda *args: text)
    def call(program):
        try:
            return program()
        except SystemExit:
            pass

    def program():
        input()
        xs = list(map(int, input().split()))
        with open("input.txt") as f:
            f.read()
        print(sum(xs))
        print(max(xs))

    sys.stdout = io.StringIO()
    call(program)
    sys.stdout.getvalue().splitlines()

    class Kind(enum.Enum):
        call_based = 0
        standard_input = 1

    Kind(1)
    module = types.ModuleType("rlx_warm")
    exec("def code():\n    return 1\n", module.__dict__)
    module.code()
    tree = ast.parse("def main():\n    pass\nif __name__ == '__main__':\n    main()\n")
    ast.unparse(tree.body[-1].test)
    ast.unparse(tree.body[:-1])


def warm_up(rounds=WARM_ROUNDS):
    """Run `warm_round` before the fork, then put every module back as it was.

    Why: CPython 3.11+ specializes bytecode in place (PEP 659) once a function has run a few
    times, and some modules build caches on first use (`unittest.mock.file_spec`, the name
    pattern of `pkgutil.resolve_name`). Run only in the forked processes, the harness's
    standard-library code starts cold in every submission and each specialization writes to a
    code object shared with the worker, costing a copy-on-write page fault as well. Warmed here,
    the forks inherit the specialized code.

    The warm-up runs once, before any job, on our own data, so there is no submission state in
    it. What a fresh interpreter would show stays as it was: every module global it rebinds or
    adds (such as `file_spec`), `sys.modules` and the standard streams are restored, and its
    garbage is collected before `gc.freeze`. Left behind: specialized bytecode (an interpreter
    detail; the same code runs) and entries of `re`'s compiled-pattern cache. Rejected: also
    raising the collector's thresholds in the forks: measured +0.8 % instructions at 7,000 and
    +2.4 % at 100 (−1.7 % with collection off, which changes when finalizers run)."""
    missing = object()
    modules = dict(sys.modules)
    saved = {name: dict(vars(m)) for name, m in modules.items() if isinstance(m, types.ModuleType)}
    streams = (sys.stdin, sys.stdout, sys.stderr)
    try:
        for _ in range(rounds):
            warm_round()
        return True
    except Exception:
        return False  # best effort: a cold fork is only slower
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        for name in [n for n in sys.modules if n not in modules]:
            del sys.modules[name]
        sys.modules.update(modules)
        for name, before in saved.items():
            now = vars(modules[name])
            for key in [k for k in now if k not in before]:
                del now[key]
            for key, value in before.items():
                if now.get(key, missing) is not value:
                    now[key] = value
        gc.collect()


# Objects that fill the free blocks of the worker's partly used pymalloc pools (`fill_pools`).
FILLER = []


def pool_stats():
    """(size class in bytes, free blocks in partly used pools) from `sys._debugmallocstats()`,
    which writes to the C stderr; empty when pymalloc is not in use or the format is unknown."""
    r, w = os.pipe()
    saved = os.dup(2)
    try:
        os.dup2(w, 2)
        sys._debugmallocstats()  # a few KB: fits in the pipe, read below
    except Exception:
        os.close(r)
        return []
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(w)
    chunks = []
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    rows = []
    for line in b"".join(chunks).decode("ascii", "replace").splitlines():
        f = line.split()
        if len(f) == 5 and all(x.isdigit() for x in f):
            rows.append((int(f[1]), int(f[4])))
    return rows


def fill_pools(rounds=2):
    """Fill the free blocks of the worker's partly used pymalloc pools with objects it keeps, so
    that what a fork allocates goes to fresh pools instead.

    Why: after the imports and the warm-up (and its collection), pymalloc's pools are full of
    holes, and an allocation takes a hole of its size class first. In a fork, every hole it fills
    lies in a page still shared with the zygote: a copy-on-write fault for a few dozen bytes,
    spread over hundreds of pools. Filled here, the fork's objects are packed into fresh pools,
    a page fault per 4 KiB of them. Measured on Sandbox Fusion's LiveCodeBench request: ~7,000
    holes, the program's process 2,045 -> 1,951 page faults. The objects are bytes of the
    class's exact size (ints for the 32-byte class; the 16-byte class, which holds no object, is
    left): plain data, nothing of any job, never freed."""
    keep = []
    for _ in range(rounds):
        for size, avail in pool_stats():
            if avail <= 0:
                continue
            if size == 32:
                keep.append([(1 << 20) + i for i in range(avail)])
            elif size >= 48:
                keep.append([bytes(size - 33) for _ in range(avail)])
    return keep


def worker_main():
    global PROTECTION, CFG, DROP_PRIVILEGES
    DROP_PRIVILEGES = True
    CFG = json.loads(sys.argv[2])
    for name in ("resource", "shutil", "numbers", "traceback", "fractions", "decimal", "array", "ast", "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "random", "statistics", "itertools", "functools", "operator", "typing", "dataclasses", "enum", "textwrap", "unittest"):
        try:
            __import__(name)
        except ImportError:
            pass
    exec(PRELUDE, PRELUDE_NS)
    PRELUDE_NS.pop("__builtins__", None)
    PRELUDE_NS["__builtins__"] = __builtins__
    sys.setrecursionlimit(600000)
    # Opened before the chroot hides /proc; re-read after the preload (see `preload`).
    try:
        statm = os.open("/proc/self/statm", os.O_RDONLY)
    except OSError:
        statm = None  # no /proc: the allowance stays 0
    PROTECTION = setup(CFG)
    PRELOADED.update(preload(statm))
    if statm is not None:
        os.close(statm)
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        PROTECTION["notes"].append("cannot become a child subreaper: orphaned processes are reaped by init")
    # Everything imported so far lives as long as the worker: move it out of the collector's
    # reach, so that a submission's garbage collections neither walk nor touch (copy-on-write)
    # the preloaded modules' objects in every forked process (the documented pre-fork use of
    # gc.freeze).
    gc.freeze()
    # Now, before any job: no job, file or expected output was ever in the zygote's memory,
    # not even freed, and it never reads one (a zygote that is lost is not replaced: RETIRE).
    spawn_zygote(bool(PROTECTION.get("pid_namespace")))
    write_frame(1, {"ready": True, "protection": PROTECTION, "python": sys.version.split()[0],
                    "preloaded": PRELOADED["modules"], "not_preloaded": PRELOADED["missing"]})
    while True:
        job = read_frame(0)
        if job is None:
            return
        if "file_names" in job:
            job["files"] = read_files(0, job.pop("file_names"))
            if job["files"] is None:
                return
        try:
            reply = handle(job)
        except Exception as e:
            reply = {"error": f"{type(e).__name__}: {e}"}
        if RETIRE[0]:
            reply["retire"] = True
        write_frame(1, reply)
        if RETIRE[0]:
            return


def fusion_main():
    """Driver for a Sandbox Fusion /run_code request. The files are `job.json` (tests without
    expected outputs) and `expected.json` (expected outputs and a nonce). The expected outputs
    are unlinked and read only after the tests' process is forked, and the verdict line carries the
    nonce, so neither the program's stdout nor its exit code can stand in for a verdict. The
    isolation is whatever that server gives (none by default)."""
    exp_fd = os.open("expected.json", os.O_RDONLY)
    os.unlink("expected.json")
    with open("job.json") as f:
        job = json.load(f)
    os.unlink("job.json")
    exec(PRELUDE, PRELUDE_NS)
    PRELUDE_NS["__builtins__"] = __builtins__
    sys.setrecursionlimit(600000)
    sys.stdout.flush()
    res_r, res_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(exp_fd)
            os.close(res_r)
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1):
                os.dup2(devnull, fd)
            set_limits(job)
            run_tests(job, False, res_w)
        finally:
            os._exit(0)
    os.close(res_w)
    with os.fdopen(exp_fd) as f:
        exp = json.load(f)
    results, infra, clean, aborted, timed_out = collect(job, res_r, exp.get("expected"))
    if not clean:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    os.waitpid(pid, 0)
    reply = finish(job, results, infra, aborted, timed_out)
    sys.stdout.write("\nRLX-VERDICT %s %s\n" % (exp["nonce"], json.dumps(reply)))
    sys.stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "worker":
        worker_main()
    elif len(sys.argv) >= 2 and sys.argv[1] == "fusion":
        fusion_main()
    else:
        sys.stderr.write("usage: harness.py worker CONFIG_JSON\n")
        sys.exit(2)
