#!/usr/bin/python3
"""The docs' shell walk-throughs, run as written (issue 37 item 12: "the docs are not tested").

Usage (ctest runs it as docs_python):
    docs_test.py TOLLGATED TOLLGATE_CLI TOLLGATE_SIM SOURCE_DIR [unittest args]

What runs. The fenced ```sh, ```bash and ```console blocks of README.md and docs/operations.md,
taken from the files at test time, so that a doc that drifts fails here. A block is selected by
an HTML comment on the last non-blank line before its fence (invisible in rendered Markdown):

    <!-- test: NAME -->                 a step of scenario NAME; the blocks of one NAME (in one
                                        file) run in document order, in ONE bash process, as if
                                        pasted into one terminal: variables, `export`, `cd` and
                                        background jobs (`kill %1`) carry over from block to block
    <!-- test: NAME fixtures=F,G -->    also copies tests/docs/fixtures/F and G into its directory
                                        (files the walk-through takes as given, e.g. a broken.yaml)
    <!-- expect -->                     before a fenced block (```text): the whole output of the
                                        test block just before it, stdout and stderr together
    <!-- not tested: WHY -->            a shell block deliberately not run, and why

Every shell block of the two files must carry one of these (or be listed in UNMARKED_ON_PURPOSE,
for regions of operations.md edited by others): a new block nobody marked fails the test.

Output checks. In an expected block and after a console command, `...` stands for any text
within a line, and a line that is only `...` for any number of lines (as in doctest); a run of
spaces matches any run of spaces (columns widen with their values); trailing blanks, carriage
returns (curl -i) and trailing empty lines are ignored. A ```console block's `$ ` lines are
commands (a line ending in `\\` continues on the next); the lines up to the next `$ ` are that
command's output, and a command shown with no output is not checked for it. A console command
must exit 0, or with N if its line ends in the comment `# exit N`. In a sh/bash block every
command must succeed: an ERR trap (inherited by subshells, `set -E`) records each failing command
with its line in the doc, and ends the scenario there (what follows would fail for its sake);
commands in an `until`/`if` condition or before `&&`/`||` may fail, as in any script.

Daemons. The scenario directory is a fresh copy of the repository's layout: config/ copied,
build/src/daemon/tollgated, build/src/cli/tollgate and build/sim/tollgate-sim pointing at the
binaries under test (also on PATH as tollgated, tollgate, tollgate-sim). tollgated there is a
wrapper that records its pid and sends the daemon's log to a file of its own, so that daemon logs
do not mix into a block's checked output (they are printed when the scenario fails; the price:
what tollgated itself prints is never checked against the docs); then it execs the daemon, so
the pid, `kill %1` and the exit status are the daemon's. After the last block the driver sends
SIGTERM to every daemon still running and waits for each: every daemon started in the background
must exit 0, whether the docs stopped it or the test did (one that exited 1 at start, e.g. on a
port taken, fails the test; `wait` says 127 for one that ran in the foreground, which the ERR
trap judged). Whatever happens (a failed step, a hung `until`, the scenario's timeout), the
scenario's process group (its own session) is killed at the end, SIGTERM then SIGKILL, and a
timeout names the daemons that had exited by then.

Ports. The docs name fixed localhost ports (7101.., 7181.., 8080, ...), which tests run in
parallel could hold. Each scenario therefore runs in a network namespace of its own (`unshare
-rn`, a user namespace mapping us to root in it, and `ip link set lo up`), where 127.0.0.1 is
its alone. Where that is not permitted (user namespaces disabled, no `ip`), or with
TOLLGATE_DOCS_NO_NETNS=1 in the environment, the scenarios run on the machine's loopback one
after another and say so: a test holding one of those ports at the same moment then fails them
(the risk is small: they are below the ephemeral range that the other tests' free ports come
from). The environment is the caller's without *_proxy and TOLLGATE_ENDPOINT, and with a curl
config turning off the progress meter curl shows only when its output is not a terminal.

Fast and deterministic: nothing here or in the tested blocks sleeps for synchronisation. The docs
wait on observable state (`until curl -sf .../readyz`, `until ... | grep -q ...`: the `sleep` in
those loops is their polling interval); each scenario has a deadline (SCENARIO_TIMEOUT_S) and the
whole test takes a few seconds. curl must be installed (the docs' commands use it).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

TOLLGATED, TOLLGATE_CLI, TOLLGATE_SIM, SOURCE_DIR = [os.path.abspath(a) for a in sys.argv[1:5]]
del sys.argv[1:5]

DOCS = ["README.md", "docs/operations.md"]
SHELL_LANGS = {"sh", "bash", "console"}
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
SCENARIO_TIMEOUT_S = 30  # a scenario takes about a second (more under the sanitizers); this bounds a hung `until`

# Shell blocks left unmarked on purpose, in regions of docs/operations.md that another change
# edits: (file, first line of the block) -> why it does not run here.
UNMARKED_ON_PURPOSE = {
    ("docs/operations.md", "cmake --install build --prefix /usr/local        # installs /usr/local/bin/tollgated and tollgate"):
        "installs system-wide as root (systemd unit); package_deb tests the installed unit",
    ("docs/operations.md", "scripts/package                               # -> build/tollgate_0.1.0_amd64.deb, about 2.3 MB"):
        "builds and installs the .deb; package_deb does that",
    ("docs/operations.md", "install -m 600 -o tollgate -g tollgate /path/to/the/one/cluster.key /etc/tollgate/cluster.key"):
        "a step on an installed host",
    ("docs/operations.md", "tollgated --rules-url https://rules.internal/tollgate/rules.yaml --rules-cache /var/lib/tollgate/rules.yaml ..."):
        "needs a rules service; rules_retriever_python runs one",
    ("docs/operations.md", "tollgate admin faults [--drop-to ID,...] [--drop-from ID,...] [--loss P] [--delay 100ms] [--duplicate P]"):
        "a synopsis, not a command",
}


# ---------------------------------------------------------------------------------------------
# Parsing the Markdown


class Block:
    def __init__(self, doc, line, lang, text, marker, heading):
        self.doc = doc          # "README.md"
        self.line = line        # 1-based line of the block's first content line
        self.lang = lang
        self.text = text        # content, de-indented by the fence's indent
        self.marker = marker    # the HTML comment before the fence (inner text), or None
        self.heading = heading  # the section it is in
        self.expected = None    # for a test block: the Block of its <!-- expect --> output

    def where(self):
        return "%s:%d (%s)" % (self.doc, self.line, self.heading)


FENCE = re.compile(r"^( *)(`{3,}|~{3,})\s*([\w+-]*)\s*$")
COMMENT = re.compile(r"^\s*<!--\s*(.*?)\s*-->\s*$")


def parse_blocks(doc, text):
    lines = text.split("\n")
    blocks, heading, i = [], "(top)", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        m = FENCE.match(line)
        if not m:
            i += 1
            continue
        indent, fence, lang = len(m.group(1)), m.group(2), m.group(3)
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        cm = COMMENT.match(lines[j]) if j >= 0 else None
        marker = cm.group(1) if cm else None
        body, k = [], i + 1
        close = re.compile(r"^ {0,%d}%s%s*\s*$" % (indent + 3, re.escape(fence), re.escape(fence[0])))
        while k < len(lines) and not close.match(lines[k]):
            body.append(lines[k][indent:] if lines[k][:indent].strip() == "" else lines[k].lstrip())
            k += 1
        if k == len(lines):
            raise AssertionError("%s:%d: a code fence that is never closed" % (doc, i + 1))
        blocks.append(Block(doc, i + 2, lang, "\n".join(body), marker, heading))
        i = k + 1
    return blocks


class Step:
    """One test block of a scenario: a sh/bash script, or a console block's commands."""

    def __init__(self, block):
        self.block = block
        self.commands = []  # console: (doc line, command text, expected lines or None, status)
        if block.lang == "console":
            self._parse_console()

    def _parse_console(self):
        lines = self.block.text.split("\n")
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ "):
                raise AssertionError("%s: console line %d is output before any `$ ` command: %r"
                                     % (self.block.where(), i + 1, lines[i]))
            first, cmd = self.block.line + i, [lines[i][2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            i += 1
            out = []
            while i < len(lines) and not lines[i].startswith("$ "):
                out.append(lines[i])
                i += 1
            while out and not out[-1].strip():
                out.pop()
            status = re.search(r"#\s*exit\s+(\d+)\s*$", cmd[-1])
            self.commands.append((first, "\n".join(cmd), out or None, int(status.group(1)) if status else 0))


class Scenario:
    def __init__(self, doc, name):
        self.doc, self.name = doc, name
        self.steps, self.fixtures = [], []


def load_docs():
    """(every shell block, {scenario key: Scenario}) of DOCS; raises on a malformed marker."""
    shell, scenarios = [], {}
    for doc in DOCS:
        with open(os.path.join(SOURCE_DIR, doc)) as f:
            blocks = parse_blocks(doc, f.read())
        previous = None
        for b in blocks:
            marker = b.marker or ""
            if marker == "expect":
                if previous is None or not previous.marker or not previous.marker.startswith("test:"):
                    raise AssertionError("%s: <!-- expect --> does not follow a test block" % b.where())
                if previous.lang == "console":
                    raise AssertionError("%s: a console block shows its output inline, not in <!-- expect -->"
                                         % b.where())
                previous.expected = b
            elif marker.startswith("test:"):
                if b.lang not in SHELL_LANGS:
                    raise AssertionError("%s: <!-- test: --> on a ```%s block" % (b.where(), b.lang))
                words = marker[len("test:"):].split()
                if not words or not re.fullmatch(r"[\w-]+", words[0]):
                    raise AssertionError("%s: <!-- test: NAME [fixtures=F,...] -->, got %r" % (b.where(), marker))
                key = doc + ":" + words[0]
                sc = scenarios.setdefault(key, Scenario(doc, words[0]))
                for w in words[1:]:
                    if not w.startswith("fixtures="):
                        raise AssertionError("%s: unknown marker option %r" % (b.where(), w))
                    sc.fixtures += [f for f in w[len("fixtures="):].split(",") if f]
                sc.steps.append(Step(b))
            elif marker and not marker.startswith("not tested:") and b.lang in SHELL_LANGS:
                raise AssertionError("%s: unknown marker <!-- %s -->" % (b.where(), marker))
            if b.lang in SHELL_LANGS:
                shell.append(b)
            previous = b
    return shell, scenarios


# ---------------------------------------------------------------------------------------------
# Comparing output


def line_pattern(expected_line):
    parts = re.split(r"(\.\.\.|\s+)", expected_line.rstrip())
    out = []
    for p in parts:
        if p == "...":
            out.append(".*")
        elif p and p.isspace():
            out.append(r"\s+")
        else:
            out.append(re.escape(p))
    return re.compile("".join(out) + r"\s*")


def output_matches(expected, actual):
    """expected, actual: lists of lines. `...` alone matches any run of lines."""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip("\r\n").rstrip() for a in actual]
    while exp and not exp[-1]:
        exp.pop()
    while act and not act[-1]:
        act.pop()
    pats = [None if e.strip() == "..." else line_pattern(e) for e in exp]
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(pats):
            r = j == len(act)
        elif pats[i] is None:
            r = any(match(i + 1, k) for k in range(j, len(act) + 1))
        else:
            r = j < len(act) and pats[i].fullmatch(act[j]) is not None and match(i + 1, j + 1)
        memo[(i, j)] = r
        return r

    return match(0, 0)


# ---------------------------------------------------------------------------------------------
# Running a scenario


def probe_namespaces():
    """True when `unshare -rn` gives this process a network namespace with loopback up."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    try:
        r = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up && ip -o addr show lo"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and "127.0.0.1" in r.stdout


NAMESPACES = os.environ.get("TOLLGATE_DOCS_NO_NETNS") != "1" and probe_namespaces()

WRAPPER = """#!/bin/sh
# tollgated as the docs' commands start it (tests/docs/docs_test.py): its pid is recorded for the
# end-of-scenario checks and its log goes to a file of its own; then it is the daemon (exec).
echo $$ >> "$TOLLGATE_DOCS_STATE/daemons"
exec "$TOLLGATE_DOCS_TOLLGATED" "$@" > "$TOLLGATE_DOCS_STATE/tollgated.$$.log" 2>&1
"""


def make_layout(root, scenario):
    shutil.copytree(os.path.join(SOURCE_DIR, "config"), os.path.join(root, "config"))
    bindir = os.path.join(root, ".docs-test", "bin")
    os.makedirs(bindir)
    with open(os.path.join(bindir, "tollgated"), "w") as f:
        f.write(WRAPPER)
    os.chmod(os.path.join(bindir, "tollgated"), 0o755)
    os.symlink(TOLLGATE_CLI, os.path.join(bindir, "tollgate"))
    os.symlink(TOLLGATE_SIM, os.path.join(bindir, "tollgate-sim"))
    for sub, name in (("build/src/daemon", "tollgated"), ("build/src/cli", "tollgate"), ("build/sim", "tollgate-sim")):
        os.makedirs(os.path.join(root, sub), exist_ok=True)
        os.symlink(os.path.join(bindir, name), os.path.join(root, sub, name))
    for fx in scenario.fixtures:
        shutil.copy(os.path.join(FIXTURES, fx), os.path.join(root, fx))
    return bindir


def driver_script(scenario, state):
    """The bash script that runs the scenario's steps in order; returns (text, line map) where
    line map[driver line] = (step index, doc line)."""
    out, where = [], {}

    def emit(text, step=None, doc_line=None):
        for k, l in enumerate(text.split("\n")):
            out.append(l)
            if step is not None:
                where[len(out)] = (step, doc_line + k)

    q = "'" + state.replace("'", "'\\''") + "'"
    emit("# generated by tests/docs/docs_test.py from %s, scenario %s" % (scenario.doc, scenario.name))
    emit("__TG_STATE=%s" % q)
    emit("__TG_STEP=setup")
    emit("set -E")
    # The first command that fails ends the walk-through: what follows it would fail for its sake.
    emit("trap 'printf \"%s\\t%s\\t%s\\t%s\\n\" \"$?\" \"$__TG_STEP\" \"$LINENO\" \"$BASH_COMMAND\" >> \"$__TG_STATE/errors\"; exit 1' ERR")
    for n, step in enumerate(scenario.steps):
        b = step.block
        if b.lang == "console":
            for c, (doc_line, cmd, _, _) in enumerate(step.commands):
                emit("__TG_STEP=%d.%d" % (n, c))
                emit("{")
                emit(cmd, n, doc_line)
                emit("} > \"$__TG_STATE/out.%d.%d\" 2>&1 && __tg_rc=0 || __tg_rc=$?" % (n, c))
                emit("echo $__tg_rc > \"$__TG_STATE/rc.%d.%d\"" % (n, c))
        else:
            emit("__TG_STEP=%d" % n)
            emit("{")
            emit(b.text, n, b.line)
            emit("} > \"$__TG_STATE/out.%d\" 2>&1" % n)
        emit("echo %d >> \"$__TG_STATE/steps_done\"" % n)
    emit("""trap - ERR
__TG_STEP=end
touch "$__TG_STATE/daemons"
while read -r __tg_pid; do kill -0 "$__tg_pid" 2>/dev/null && kill -TERM "$__tg_pid"; done < "$__TG_STATE/daemons"
while read -r __tg_pid; do
  wait "$__tg_pid"; echo "$__tg_pid $?" >> "$__TG_STATE/statuses"
done < "$__TG_STATE/daemons"
echo done > "$__TG_STATE/finished"
""")
    return "\n".join(out) + "\n", where


def read(path, default=""):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return default


def running(pid):
    """False once the process has exited (a zombie not yet reaped by the shell included)."""
    stat = read("/proc/%s/stat" % pid)
    return bool(stat) and stat.rsplit(")", 1)[-1].split()[0] != "Z"


def group_alive(pgid):
    """Whether a process of group `pgid` still runs (zombies, which pid 1 reaps when it will, do
    not count)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = read("/proc/%s/stat" % entry).rsplit(")", 1)[-1].split()
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
                return True
    return False


def kill_group(proc):
    """SIGTERM to the scenario's process group (its own session), then SIGKILL to what is left."""
    for sig, wait_s in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait_s
        while group_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for the group to be gone, not synchronisation
        if not group_alive(proc.pid):
            return


def run_scenario(scenario):
    """Runs it; returns a list of failure messages (empty: passed) and the time taken."""
    root = tempfile.mkdtemp(prefix="tollgate-docs-%s-" % scenario.name)
    started = time.monotonic()
    try:
        bindir = make_layout(root, scenario)
        state = os.path.join(root, ".docs-test", "state")
        os.makedirs(state)
        script, where = driver_script(scenario, state)
        driver = os.path.join(root, ".docs-test", "driver.sh")
        with open(driver, "w") as f:
            f.write(script)
        env = {k: v for k, v in os.environ.items()
               if not k.lower().endswith("_proxy") and k != "TOLLGATE_ENDPOINT"}
        # curl shows a progress meter on stderr when its output is not a terminal, as here but
        # not in the terminal the docs are pasted into: its own config file turns it off.
        curl_home = os.path.join(root, ".docs-test", "curl")
        os.makedirs(curl_home)
        with open(os.path.join(curl_home, ".curlrc"), "w") as f:
            f.write("no-progress-meter\n")
        env.update(PATH=bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin"), LC_ALL="C.UTF-8",
                   CURL_HOME=curl_home, TOLLGATE_DOCS_STATE=state, TOLLGATE_DOCS_TOLLGATED=TOLLGATED)
        if NAMESPACES:
            argv = ["unshare", "-rn", "bash", "-c", 'ip link set lo up && exec bash "$0"', driver]
        else:
            argv = ["bash", driver]
        log = open(os.path.join(state, "driver.log"), "w")
        proc = subprocess.Popen(argv, cwd=root, env=env, stdin=subprocess.PIPE, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        proc.stdin.close()  # commands that read stdin see its end, as nothing is typed
        timed_out, gone = False, []
        try:
            proc.wait(timeout=SCENARIO_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            timed_out = True
            gone = [pid for pid in read(os.path.join(state, "daemons")).split() if not running(pid)]
        kill_group(proc)
        proc.wait()
        log.close()
        failures = check_results(scenario, state, where, timed_out, proc.returncode)
        for pid in gone:
            failures.insert(1, "tollgated %s had exited before the timeout (its log is below)" % pid)
        return failures, time.monotonic() - started
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_results(scenario, state, where, timed_out, returncode):
    failures = []
    done = [int(x) for x in read(os.path.join(state, "steps_done")).split()]
    if timed_out:
        n = len(done)
        b = scenario.steps[n].block if n < len(scenario.steps) else None
        failures.append("timed out after %d s%s" % (
            SCENARIO_TIMEOUT_S, " in the block at " + b.where() if b else " stopping the daemons"))
    elif not read(os.path.join(state, "finished")):
        failures.append("the shell exited (status %s) before the end" % returncode)
    for line in read(os.path.join(state, "errors")).splitlines():
        status, step, lineno, command = (line.split("\t", 3) + ["", "", "", ""])[:4]
        loc = where.get(int(lineno)) if lineno.isdigit() else None
        at = "%s:%d" % (scenario.doc, loc[1]) if loc else "driver line " + lineno
        failures.append("%s: exit %s: %s" % (at, status, command))
    for n, step in enumerate(scenario.steps):
        if n not in done:
            continue
        b = step.block
        if b.lang == "console":
            for c, (doc_line, cmd, expected, status) in enumerate(step.commands):
                got = read(os.path.join(state, "out.%d.%d" % (n, c)))
                rc = read(os.path.join(state, "rc.%d.%d" % (n, c))).strip()
                if rc != str(status):
                    failures.append("%s:%d: `%s` exited %s, the docs expect %d; its output:\n%s"
                                    % (scenario.doc, doc_line, cmd, rc, status, indent(got)))
                if expected is not None and not output_matches(expected, got.splitlines()):
                    failures.append("%s:%d: `%s` printed:\n%s\n  the docs show:\n%s"
                                    % (scenario.doc, doc_line, cmd, indent(got), indent("\n".join(expected))))
        elif b.expected is not None:
            got = read(os.path.join(state, "out.%d" % n))
            if not output_matches(b.expected.text.split("\n"), got.splitlines()):
                failures.append("the block at %s printed:\n%s\n  the docs show (%s:%d):\n%s"
                                % (b.where(), indent(got), scenario.doc, b.expected.line, indent(b.expected.text)))
    daemons = read(os.path.join(state, "daemons")).split()
    statuses = dict(l.split() for l in read(os.path.join(state, "statuses")).splitlines() if l.strip())
    for pid in daemons:
        if pid not in statuses:
            pass  # the shell ended early (failures above say why); the group was killed
        elif statuses[pid] not in ("0", "127"):  # 127: ran in the foreground (the ERR trap judged it)
            failures.append("tollgated %s exited %s: every daemon must exit 0 on SIGTERM" % (pid, statuses[pid]))
    if failures:
        for pid in daemons:
            failures.append("log of tollgated %s (its last 20 lines):\n%s" % (
                pid, indent("\n".join(read(os.path.join(state, "tollgated.%s.log" % pid)).splitlines()[-20:]))))
        shell_log = read(os.path.join(state, "driver.log"))
        if shell_log.strip():
            failures.append("the shell's own output:\n" + indent(shell_log))
    return failures


def indent(text):
    return "\n".join("    | " + l for l in text.rstrip("\n").split("\n"))


# ---------------------------------------------------------------------------------------------
# The tests


SHELL_BLOCKS, SCENARIOS = load_docs()


class DocsAreMarked(unittest.TestCase):
    def test_every_shell_block_is_tested_or_says_why_not(self):
        unmarked = []
        seen = set()
        for b in SHELL_BLOCKS:
            first = b.text.split("\n")[0]
            if (b.doc, first) in UNMARKED_ON_PURPOSE:
                seen.add((b.doc, first))
                self.assertIsNone(b.marker, "%s is marked now: remove it from UNMARKED_ON_PURPOSE" % b.where())
                continue
            if not b.marker or not (b.marker.startswith("test:") or b.marker.startswith("not tested:")):
                unmarked.append("%s: %s" % (b.where(), first))
        self.assertEqual(unmarked, [], "shell blocks with neither <!-- test: NAME --> nor <!-- not tested: WHY -->")
        self.assertEqual(set(UNMARKED_ON_PURPOSE) - seen, set(),
                         "UNMARKED_ON_PURPOSE lists blocks the docs no longer have")

    def test_the_walk_throughs_are_all_there(self):
        # A marker lost in an edit would silently drop a scenario: these must exist.
        for key in ("README.md:quick-start", "docs/operations.md:localhost-clusters",
                    "docs/operations.md:rules-lint", "docs/operations.md:http-endpoints"):
            self.assertIn(key, SCENARIOS)


class OutputMatching(unittest.TestCase):
    def test_ellipsis_and_spaces(self):
        self.assertTrue(output_matches(["a  ...  -", "x ... ago"], ["a 17 -", "x 4ms ago"]))
        self.assertFalse(output_matches(["a 1"], ["a 2"]))
        self.assertTrue(output_matches(["a", "...", "z"], ["a", "b", "c", "z"]))
        self.assertTrue(output_matches(["a", "...", "z"], ["a", "z"]))
        self.assertFalse(output_matches(["a", "z"], ["a", "b", "z"]))
        self.assertTrue(output_matches(["HTTP/1.1 200 OK", "", "{}"], ["HTTP/1.1 200 OK\r", "\r", "{}", ""]))
        self.assertFalse(output_matches(["a"], []))


def make_test(key):
    def test(self):
        failures, took = run_scenario(SCENARIOS[key])
        sys.stderr.write("\n  %s: %.1f s%s " % (key, took, "" if NAMESPACES else " (no network namespace)"))
        if failures:
            self.fail("scenario %s failed:\n%s" % (key, "\n".join(failures)))
    return test


class Walkthroughs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("curl"):
            raise AssertionError("curl is not installed: the docs' walk-throughs use it")
        if not NAMESPACES:
            sys.stderr.write("\nno network namespace (unshare -rn): the scenarios use the machine's "
                             "loopback ports, as the docs name them\n")


for _key in SCENARIOS:
    setattr(Walkthroughs, "test_" + re.sub(r"\W", "_", _key), make_test(_key))


if __name__ == "__main__":
    unittest.main(verbosity=2)
