#!/usr/bin/python3
"""The Debian package (cmake/Packaging.cmake, scripts/package), installed on this machine.

Builds the .deb with cpack from the already built tree (into a scratch directory), checks its
control fields and contents, installs it with `dpkg -i`, runs the installed programs, verifies
the unit with `systemd-analyze verify`, checks the conffiles, the tollgate user and the cluster
key that postinst made, starts the installed daemon as that user with the shipped config, then
purges the package and checks that nothing it installed or created is left (but the user, which
Debian packages keep; the test removes it when it created it).

Needs root. Exits 77 (ctest: skipped) without root. Fails when a tollgate package, or a file the
package would install or create, is already on this machine: it never clobbers an installation.
It does not start the service: systemd need not be running here.

Usage (ctest runs it): deb_test.py BUILD_DIR VERSION
"""
import glob
import itertools
import os
import pwd
import grp
import shutil
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pylib"))
from tollgate_testing import free_port, terminate, wait_until  # noqa: E402

BUILD_DIR, VERSION = os.path.abspath(sys.argv[1]), sys.argv[2]
SKIP = 77
# Present while this test has the package installed: a later run that finds it knows a killed run
# left the package behind, and cleans up instead of skipping.
MARKER = "/var/lib/tollgate-deb-test.installed"

PROGRAMS = ["tollgated", "tollgate", "tollgate-load", "tollgate-sim", "tollgate-debt-demo"]
CONFFILES = ["/etc/tollgate/tollgate.yaml", "/etc/tollgate/rules.yaml"]
UNIT = "/lib/systemd/system/tollgated.service"
# Every file of the package, exactly: the programs, the conffiles and the unit; nothing of the
# development files (headers, static libraries, CMake package) that `cmake --install` adds.
EXPECTED_FILES = sorted(["/usr/bin/" + p for p in PROGRAMS] + CONFFILES + [UNIT])
# Made by postinst, or by systemd when the service starts (StateDirectory=); purge deletes them.
CREATED = ["/etc/tollgate/cluster.key", "/var/lib/tollgate"]


def skip(why):
    print("SKIPPED: " + why)
    sys.exit(SKIP)


def run(*cmd, check=True, **kw):
    """Runs cmd; its CompletedProcess (text). With check, a non-zero exit fails with its output."""
    p = subprocess.run(list(cmd), capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError("`%s` exited %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p


def dpkg(*args):
    """dpkg with args. Another dpkg or apt holding dpkg's lock (unattended-upgrades on a fresh CI
    machine) is waited for, up to a minute; any other failure fails at once."""
    deadline = time.monotonic() + 60
    for attempt in itertools.count():
        p = run("dpkg", *args, check=False)
        if p.returncode == 0:
            return p
        if "locked by another process" not in p.stderr or time.monotonic() > deadline:
            raise AssertionError("`dpkg %s` exited %d\nstdout:\n%s\nstderr:\n%s"
                                 % (" ".join(args), p.returncode, p.stdout, p.stderr))
        if attempt == 0:
            print("dpkg %s: %s; retrying for up to 60 s" % (args[0], p.stderr.strip().split("\n")[0]))
        time.sleep(0.5)  # a retry while another dpkg runs, not synchronisation


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def package_status():
    """dpkg's status of the tollgate package, "" when dpkg knows none."""
    p = run("dpkg-query", "-W", "-f=${Status}", "tollgate", check=False)
    return p.stdout.strip() if p.returncode == 0 else ""


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def group_exists(name):
    try:
        grp.getgrnam(name)
        return True
    except KeyError:
        return False


def build_deb(out_dir):
    cpack = shutil.which("cpack") or "/usr/bin/cpack"
    run(cpack, "--config", os.path.join(BUILD_DIR, "CPackConfig.cmake"), "-B", out_dir)
    debs = glob.glob(os.path.join(out_dir, "*.deb"))
    expect(len(debs) == 1, "cpack made %r, expected one .deb" % debs)
    return debs[0]


def check_deb(deb):
    arch = run("dpkg", "--print-architecture").stdout.strip()
    expect(os.path.basename(deb) == "tollgate_%s_%s.deb" % (VERSION, arch),
           "package file name %s, expected tollgate_%s_%s.deb" % (os.path.basename(deb), VERSION, arch))
    fields = {}
    for name in ("Package", "Version", "Architecture", "Depends", "Section"):
        fields[name] = run("dpkg-deb", "--field", deb, name).stdout.strip()
    print("control: %r" % fields)
    expect(fields["Package"] == "tollgate" and fields["Version"] == VERSION and fields["Architecture"] == arch,
           "control fields %r" % fields)
    # Depends computed by dpkg-shlibdeps from what the programs link, plus adduser for postinst.
    depends = [d.strip().split(" ")[0] for d in fields["Depends"].split(",")]
    for prefix in ("adduser", "libc6", "libstdc++6", "libprotobuf", "libgrpc++", "libyaml-cpp",
                   "libspdlog", "libssl3", "libprometheus-cpp-core", "liburiparser", "libnghttp2-14"):
        expect(any(d.startswith(prefix) for d in depends), "Depends lacks %s: %s" % (prefix, fields["Depends"]))
    expect("libnghttp2-14 (>= 1.52.0-1+deb12u3)" in fields["Depends"],
           "Depends does not ask for nghttp2's deb12u3 fix: %s" % fields["Depends"])

    listing = run("dpkg-deb", "--contents", deb).stdout.splitlines()
    files = sorted(os.path.normpath(line.split()[-1].lstrip(".")) for line in listing if not line.startswith("d"))
    expect(files == EXPECTED_FILES, "package files:\n  %s\nexpected:\n  %s"
           % ("\n  ".join(files), "\n  ".join(EXPECTED_FILES)))

    with tempfile.TemporaryDirectory() as control:
        run("dpkg-deb", "--control", deb, control)
        with open(os.path.join(control, "conffiles")) as f:
            conffiles = f.read()
        expect(sorted(conffiles.split()) == sorted(CONFFILES), "the package's conffiles: %r" % conffiles)
        for script in ("postinst", "prerm", "postrm"):
            mode = stat.S_IMODE(os.stat(os.path.join(control, script)).st_mode)
            expect(mode == 0o755, "%s has mode %o, expected 755" % (script, mode))
    # Every path of the package, directories too (normalised: "./etc/" is "/etc").
    return sorted(os.path.normpath(line.split()[-1].lstrip(".") or "/") for line in listing)


def preexisting(paths):
    return [p for p in paths if os.path.lexists(p)]


def check_installed():
    expect(package_status() == "install ok installed", "dpkg status %r after dpkg -i" % package_status())
    for program in PROGRAMS:
        path = "/usr/bin/" + program
        expect(os.access(path, os.X_OK), path + " is not an executable")

    out = run("/usr/bin/tollgated", "--version").stdout
    expect(VERSION in out, "tollgated --version printed %r, expected the version %s" % (out, VERSION))
    out = run("/usr/bin/tollgate", "--help").stdout
    for word in ("check", "members", "stats", "keygen"):
        expect(word in out, "tollgate --help lacks %r:\n%s" % (word, out))
    out = run("/usr/bin/tollgated", "--config", "/etc/tollgate/tollgate.yaml", "--help").stdout
    expect("--cluster-key-file" in out, "tollgated --help lacks --cluster-key-file:\n" + out)

    # The unit as installed: the packaged path, the sandbox, and systemd's own verdict.
    with open(UNIT) as f:
        unit = f.read()
    for line in ("ExecStart=/usr/bin/tollgated --config /etc/tollgate/tollgate.yaml ",
                 "User=tollgate", "RuntimeDirectory=tollgate", "StateDirectory=tollgate",
                 "ProtectSystem=strict", "NoNewPrivileges=true", "LimitNOFILE=65536",
                 # never stop restarting (systemd's default start limit would switch limiting off)
                 "StartLimitIntervalSec=0"):
        expect(line in unit, "%s lacks %r" % (UNIT, line))
    p = run("systemd-analyze", "verify", UNIT, check=False)
    print("systemd-analyze verify %s: exit %d %s%s" % (UNIT, p.returncode, p.stdout, p.stderr))
    expect(p.returncode == 0 and "tollgated" not in p.stdout + p.stderr,
           "systemd-analyze verify %s: exit %d\n%s%s" % (UNIT, p.returncode, p.stdout, p.stderr))

    # Conffiles, as dpkg registered them (path and md5 of the shipped file).
    registered = run("dpkg-query", "--showformat=${Conffiles}", "-W", "tollgate").stdout.split("\n")
    registered = sorted(line.split()[0] for line in registered if line.strip())
    expect(registered == sorted(CONFFILES), "registered conffiles %r, expected %r" % (registered, CONFFILES))
    with open("/var/lib/dpkg/info/tollgate.conffiles") as f:
        expect(sorted(f.read().split()) == sorted(CONFFILES), "/var/lib/dpkg/info/tollgate.conffiles")

    # postinst: a system user and group, and a cluster key readable by that user alone.
    user = pwd.getpwnam("tollgate")
    expect(grp.getgrgid(user.pw_gid).gr_name == "tollgate", "tollgate's primary group is not tollgate")
    expect(user.pw_uid < 1000 and user.pw_shell.endswith("nologin"), "tollgate is not a system user: %r" % (user,))
    st = os.stat("/etc/tollgate/cluster.key")
    expect(stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == user.pw_uid,
           "cluster.key: mode %o uid %d, expected 600 and tollgate's" % (stat.S_IMODE(st.st_mode), st.st_uid))
    with open("/etc/tollgate/cluster.key") as f:
        keys = [line for line in f.read().split("\n") if line and not line.startswith("#")]
    expect(len(keys) == 1 and len(keys[0]) == 64 and all(c in "0123456789abcdef" for c in keys[0]),
           "cluster.key holds %r, expected one 32-byte hex key" % keys)
    return user


def check_daemon_starts(user):
    """The shipped tollgate.yaml, with only what is per host overridden (node id, bind, peers)
    and the socket moved out of /run/tollgate (systemd makes that one), starts as user tollgate
    with the key postinst made, and answers."""
    work = tempfile.mkdtemp(prefix="tollgate-deb-")
    try:
        os.chown(work, user.pw_uid, user.pw_gid)
        port = free_port()
        peers = os.path.join(work, "peers.txt")
        with open(peers, "w") as f:
            f.write("deb-test 127.0.0.1:%d\n" % port)
        sock = os.path.join(work, "tollgated.sock")
        log_path = os.path.join(work, "tollgated.log")
        with open(log_path, "w") as log:
            daemon = subprocess.Popen(
                ["setpriv", "--reuid=tollgate", "--regid=tollgate", "--clear-groups",
                 "/usr/bin/tollgated", "--config", "/etc/tollgate/tollgate.yaml", "--node-id", "deb-test",
                 "--bind", "127.0.0.1:%d" % port, "--peers-file", peers, "--listen", "unix:" + sock],
                stdout=log, stderr=subprocess.STDOUT, cwd="/")

        def daemon_log():
            with open(log_path, errors="replace") as f:
                return "\ntollgated's log:\n" + f.read()
        try:
            def answers():
                expect(daemon.poll() is None, "tollgated exited %s" % daemon.returncode + daemon_log())
                return run("/usr/bin/tollgate", "--endpoint", "unix:" + sock, "check", "api:login:deb-test",
                           check=False).returncode == 0
            wait_until("the installed tollgated to answer a check", answers, context=daemon_log)
            out = run("/usr/bin/tollgate", "--endpoint", "unix:" + sock, "members").stdout
            expect("deb-test (self)" in out, "members:\n" + out)
        finally:
            code = terminate(daemon)
        log = daemon_log()
        print(log)
        expect(code == 0, "tollgated exited %d on SIGTERM" % code + log)
        # state-dir: /var/lib/tollgate (the shipped tollgate.yaml): written as it left.
        expect(os.path.exists("/var/lib/tollgate/state"), "no /var/lib/tollgate/state after SIGTERM" + log)
        expect("cluster key file is accessible" not in log, "the key postinst made draws a warning" + log)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    if os.geteuid() != 0:
        skip("needs root to install a .deb with dpkg -i (CI runs it as root)")
    for tool in ("dpkg", "dpkg-deb", "dpkg-query", "dpkg-shlibdeps", "systemd-analyze", "adduser", "setpriv"):
        expect(shutil.which(tool), tool + " is missing: it is needed to build, install or check the package")
    status = package_status()
    if status not in ("", "unknown ok not-installed") and os.path.exists(MARKER):
        # A run of this test was killed with the package installed: take it away and go on, rather
        # than skip for ever (a skip in CI is a test that no longer runs).
        print("a killed run left the package installed (%s): purging it" % status)
        dpkg("--purge", "tollgate")
        for path in CREATED + ["/etc/tollgate"]:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
        os.remove(MARKER)
        status = package_status()
    # Anything else of tollgate's on this machine is not this test's to remove: fail, loudly.
    expect(status in ("", "unknown ok not-installed"),
           "a tollgate package is installed (%s), not by this test: remove it (dpkg --purge tollgate) to run it" % status)
    before = preexisting(EXPECTED_FILES + CREATED + ["/etc/tollgate"])
    expect(not before, "files the package installs or creates already exist, not touching them: " + ", ".join(before))
    had_user, had_group = user_exists("tollgate"), group_exists("tollgate")

    out_dir = tempfile.mkdtemp(prefix="tollgate-cpack-")
    installed = False
    try:
        deb = build_deb(out_dir)
        print("built %s, %d bytes" % (deb, os.path.getsize(deb)))
        paths = check_deb(deb)
        # What was there before (/usr/bin, /etc ...) stays after the purge; nothing else may.
        existed = {p for p in paths + ancestors(paths) if os.path.lexists(p)}

        installed = True
        with open(MARKER, "w") as f:  # removed with the package; says a killed run installed it
            f.write("installed by tests/package/deb_test.py\n")
        p = dpkg("-i", deb)
        print(p.stdout + p.stderr)
        user = check_installed()
        with open("/etc/tollgate/cluster.key") as f:
            key = f.read()
        # Installing again (as an upgrade does) keeps the user and the key.
        dpkg("-i", deb)
        with open("/etc/tollgate/cluster.key") as f:
            expect(f.read() == key, "dpkg -i over the installed package changed the cluster key")
        expect(pwd.getpwnam("tollgate").pw_uid == user.pw_uid, "a second dpkg -i changed the tollgate user")

        check_daemon_starts(user)

        # What purge must take away besides the package's own files: the key, and the state
        # directory (postinst made it, as systemd's StateDirectory=tollgate would), with the
        # daemon's state in it and a rules cache.
        st = os.stat("/var/lib/tollgate")
        expect(st.st_uid == user.pw_uid and (st.st_mode & 0o777) == 0o750,
               "/var/lib/tollgate is not tollgate's with mode 0750 after postinst")
        with open("/var/lib/tollgate/rules.yaml", "w") as f:
            f.write("rules: []\n")
        listed = [line for line in run("dpkg", "-L", "tollgate").stdout.split("\n") if line.startswith("/")]
        expect(set(EXPECTED_FILES) <= set(listed), "dpkg -L lacks some of %r:\n%s" % (EXPECTED_FILES, listed))
        p = dpkg("--purge", "tollgate")
        print(p.stdout + p.stderr)
        installed = False
        expect(package_status() in ("", "unknown ok not-installed"),
               "dpkg status %r after --purge" % package_status())
        # Everything dpkg -L listed is gone, but the directories that were there before.
        left = [p for p in listed if os.path.normpath(p) not in existed and os.path.lexists(p)]
        left += [p for p in CREATED + ["/etc/tollgate"] if os.path.lexists(p)]
        expect(not left, "left behind by dpkg --purge: %r" % left)
        expect(user_exists("tollgate"), "purge removed the tollgate user; Debian packages keep it")
        print("PASS: installed, checked and purged %s" % os.path.basename(deb))
    finally:
        # Leave the machine as found, after a failure too (none of these existed before).
        if installed and package_status():
            try:
                dpkg("--purge", "tollgate")
            except AssertionError as e:
                print("cleaning up: %s" % e)
        if package_status() in ("", "unknown ok not-installed") and os.path.exists(MARKER):
            os.remove(MARKER)
        for path in CREATED + ["/etc/tollgate"]:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.unlink(path)
        if not had_user and user_exists("tollgate"):
            run("deluser", "--system", "--quiet", "tollgate", check=False)
        if not had_group and group_exists("tollgate"):
            run("delgroup", "--system", "--quiet", "tollgate", check=False)
        shutil.rmtree(out_dir, ignore_errors=True)


def ancestors(paths):
    out = set()
    for p in paths:
        while p != "/":
            p = os.path.dirname(p)
            out.add(p)
    return sorted(out)


if __name__ == "__main__":
    main()
