#!/usr/bin/env python3
"""chat_test.py: `edgespec chat` tested as a person uses it, in a terminal: under tmux, typing
with send-keys and reading the screen with capture-pane.

- A scripted 20-turn chat on a small context overflows it several times (the chat reports its
  context shifts) and runs to the end; with --spec stream, draft and dsi its text equals the
  plain run's, line for line.
- Ctrl-C during a long answer stops that answer, not the program: the prompt comes back and the
  next message is answered; Ctrl-C at the prompt gives the prompt back. Ctrl-C while the answer
  waits on a reader that does not keep up (a full pipe) stops it too, without a write error.
- /save FILE, /reset, /load FILE: after the load, a message gets the answer it got right after the
  save; a missing or foreign file is a clear error and the chat goes on.

--smoke (the suite under qemu-user, where the full test took 260 s): the scripted chat plain and
with --spec stream only (draft and dsi are the suite's cli_spec and spec tests' there); Ctrl-C and
sessions as always.

Usage: chat_test.py --cli EDGESPEC --model M --draft D [--backend cpu|vulkan] [--smoke]
"""
import argparse
import array
import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import termios
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import testlib  # noqa: E402
from testlib import check  # noqa: E402

TURNS = [
    "In the beginning", "And the LORD said", "Blessed are the meek", "And Moses went up",
    "Let there be light", "The LORD is my shepherd", "And it came to pass", "Thus saith the LORD",
    "Hear, O Israel", "And David said", "Jesus wept", "Love thy neighbour", "And he went out",
    "Behold, I stand at the door", "And the earth was without form", "Praise ye the LORD",
    "Remember the sabbath day", "And Jacob said", "Wisdom is the principal thing", "Amen",
]
PROMPT = "> "
PANES = []  # every tmux server started, killed at the end whatever happened


def is_prompt(line):
    """capture-pane drops trailing blanks, so an empty prompt reads as ">"."""
    return line.startswith(PROMPT) or line == PROMPT.rstrip()


class Pane:
    """One edgespec chat in a detached tmux session on a private server."""

    def __init__(self, workdir, name, command):
        self.sock = os.path.join(workdir, "tmux-" + name)
        self.name = name
        conf = os.path.join(workdir, "tmux.conf")
        with open(conf, "w") as f:
            f.write("set -g history-limit 100000\nset -g remain-on-exit on\n")
        # the server, and so the chat, inherits this process's environment (Vulkan's included)
        PANES.append(self)
        self.tmux("-f", conf, "new-session", "-d", "-s", name, "-x", "240", "-y", "50", command)

    def tmux(self, *args):
        return subprocess.run(["tmux", "-S", self.sock] + list(args), capture_output=True, text=True, timeout=30)

    def screen(self):
        """The whole scrollback, wrapped lines joined, trailing whitespace dropped."""
        return self.tmux("capture-pane", "-p", "-J", "-S", "-", "-t", self.name).stdout.rstrip()

    def alive(self):
        r = self.tmux("display-message", "-p", "-t", self.name, "#{pane_dead}")
        return r.returncode == 0 and r.stdout.strip() == "0"

    def wait(self, pred, timeout=120.0):
        """Polls the screen until pred(screen) holds; returns the screen or None at the timeout."""
        end = time.time() + timeout
        while time.time() < end:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.05)
        return None

    def prompts(self, s=None):
        s = self.screen() if s is None else s
        return sum(1 for line in s.split("\n") if is_prompt(line))

    def at_prompt(self, n):
        """Waits for the n-th prompt with nothing typed after it."""
        return self.wait(lambda s: self.prompts(s) >= n and s.endswith(PROMPT.rstrip()))

    def type(self, text):
        self.tmux("send-keys", "-t", self.name, "-l", text)
        self.tmux("send-keys", "-t", self.name, "Enter")

    def say(self, text):
        """Types a line and waits for the next prompt; the screen then, or None."""
        n = self.prompts()
        self.type(text)
        return self.at_prompt(n + 1)

    def close(self):
        self.tmux("kill-server")


def answers(screen):
    """The transcript's lines after the first prompt, each typed line with what followed it."""
    lines = screen.split("\n")
    first = next((i for i, l in enumerate(lines) if is_prompt(l)), len(lines))
    return [l for l in lines[first:] if l.strip() and l.strip() != PROMPT.strip()]


def start(args, workdir, name, extra):
    cmd = f"{shlex.join(testlib.wrap([args.cli]))} chat -m {args.model} --backend {args.backend} --temp 0 {extra}"
    p = Pane(workdir, name, cmd)
    if not check(p.at_prompt(1) is not None, f"{name}: the first prompt appears"):
        print(p.screen()[-2000:], file=sys.stderr)
    return p


def scripted(args, workdir, name, extra):
    """The 20-turn chat on a 96-token context; its transcript and its exit report."""
    p = start(args, workdir, name, "-c 96 -n 40 " + extra)
    for i, t in enumerate(TURNS):
        if not check(p.say(t) is not None, f"{name}: turn {i + 1} is answered"):
            break
    p.type("/quit")
    s = p.wait(lambda s: "context shifts dropped" in s)
    check(s is not None, f"{name}: /quit ends the chat with its report")
    s = s or p.screen()
    p.close()
    m = re.search(r"(\d+) context shifts dropped (\d+) tokens", s)
    shifts = int(m.group(1)) if m else 0
    body = s.split("\n" + PROMPT + "/quit")[0]
    return answers(body), shifts


def check_scripted(args, workdir, smoke):
    plain, shifts = scripted(args, workdir, "plain", "")
    check(shifts >= 2, f"the plain chat overflowed its context at least twice ({shifts} shifts)")
    check(len(plain) >= 2 * len(TURNS), f"the transcript has the 20 turns ({len(plain)} lines)")
    for name, extra in (("stream", "--spec stream"), ("draft", f"--spec draft -md {args.draft}"),
                        ("dsi", f"--spec dsi -md {args.draft} --targets 2")):
        if smoke and name != "stream":
            continue
        got, n = scripted(args, workdir, name, extra)
        check(n == shifts, f"--spec {name} shifts as often as plain ({n} vs {shifts})")
        diff = next((i for i, (a, b) in enumerate(zip(plain, got)) if a != b), None)
        check(got == plain, f"--spec {name}: the transcript equals the plain one "
              f"(first difference at line {diff}: {plain[diff] if diff is not None else ''!r} vs "
              f"{got[diff] if diff is not None else ''!r}; {len(got)} vs {len(plain)} lines)")


def check_ctrl_c(args, workdir):
    # chatml's end of turn never comes from this model: answers run to -n unless stopped
    p = start(args, workdir, "ctrlc", "--template chatml -c 8192 -n 4096")
    p.type("In the beginning")
    s = p.wait(lambda s: len(s.split("In the beginning", 1)[-1].strip()) > 20)
    check(s is not None, "a long answer starts")
    p.tmux("send-keys", "-t", p.name, "C-c")
    s = p.wait(lambda s: "(stopped)" in s and s.endswith(PROMPT.rstrip()), timeout=30)
    check(s is not None and p.alive(), "Ctrl-C stops the answer and the prompt comes back")
    if s is None:  # what the screen showed instead (a CI run under ASan once got here)
        print("the screen's last 1,000 characters:\n" + p.screen()[-1000:], file=sys.stderr)
    n = p.prompts()
    p.tmux("send-keys", "-t", p.name, "C-c")
    check(p.wait(lambda s: p.prompts(s) > n and s.endswith(PROMPT.rstrip()), timeout=30) is not None and p.alive(),
          "Ctrl-C at the prompt gives the prompt back")
    p.type("/quit")
    check(p.wait(lambda s: "context shifts dropped" in s, timeout=60) is not None, "the chat still quits normally")
    p.close()


def check_ctrl_c_blocked(args):
    """Ctrl-C while the answer's write waits on a reader that is slow (a busy terminal): the
    answer stops as at a free one, and is not reported as a failed write (EINTR)."""
    r, w = os.pipe()
    fcntl.fcntl(w, 1031, 4096)  # F_SETPIPE_SZ: a small pipe, full after a few hundred tokens
    cmd = testlib.wrap([args.cli]) + ["chat", "-m", args.model, "--backend", args.backend, "--temp", "0",
                                      "--template", "chatml", "-c", "8192", "-n", "4096"]
    env = testlib.vulkan_env() if args.backend == "vulkan" else None  # leak checking stays on for the CPU
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=w, stderr=subprocess.PIPE, text=True, env=env)
    os.close(w)
    p.stdin.write("In the beginning\n")
    p.stdin.flush()
    end = time.time() + 120
    avail = array.array("i", [0])
    while time.time() < end and p.poll() is None:
        fcntl.ioctl(r, termios.FIONREAD, avail)
        if avail[0] >= 4000:
            break
        time.sleep(0.05)
    check(avail[0] >= 4000, f"the answer fills a 4 KiB pipe nobody reads ({avail[0]} bytes)")
    time.sleep(0.3)  # the chat is now blocked in a write
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    with os.fdopen(r, "rb") as f:
        p.stdin.write("/quit\n")
        p.stdin.close()
        f.read()
    err = p.stderr.read()
    p.wait(timeout=60)
    check(p.returncode == 0 and "(stopped)" in err,
          f"Ctrl-C during a blocked write stops the answer (rc {p.returncode}): " + err[-2000:].strip())
    check("writing the answer" not in err, "... and is not a write error: " + err.strip().replace("\n", " | "))


def last_answer(screen, typed):
    lines = screen.split("\n")
    idx = max(i for i, l in enumerate(lines) if l == PROMPT + typed)
    return lines[idx + 1] if idx + 1 < len(lines) else None


def check_sessions(args, workdir):
    p = start(args, workdir, "session", "-c 256 -n 40")
    sess = os.path.join(workdir, "chat.session")
    p.say("In the beginning")
    p.say("And the LORD said")
    s = p.say("/save " + sess)
    check(s is not None and f"(saved to {sess}: 4 messages)" in s, "/save reports the file and the messages")
    check(os.path.exists(sess) and os.path.exists(sess + ".messages"), "/save writes the session and its messages")
    want = last_answer(p.say("And Moses went up") or "", "And Moses went up")
    s = p.say("/reset")
    check(s is not None and "(the conversation starts again)" in s, "/reset says so")
    p.say("Let there be light")
    s = p.say("/load " + sess)
    check(s is not None and f"(loaded {sess}: 4 messages)" in s, "/load reports the messages")
    s = p.say("/load " + os.path.join(workdir, "missing.session"))
    check(s is not None and "missing.session.messages: No such file" in s, "/load of a missing file names it")
    bad = os.path.join(workdir, "bad.session")
    with open(bad, "wb") as f:
        f.write(b"not a session")
    with open(bad + ".messages", "w") as f:
        f.write("edgespec-chat 1\nuser 5\nhello\n")
    s = p.say("/load " + bad)
    check(s is not None and "/load: " in s.split("/load " + bad)[-1], "/load of a foreign file is an error")
    got = last_answer(p.say("And Moses went up") or "", "And Moses went up")
    check(want is not None and got == want,
          f"after /load, and two that failed, the answer is the one given after /save ({got!r} vs {want!r})")
    p.type("/quit")
    check(p.wait(lambda s: "context shifts dropped" in s, timeout=60) is not None, "the chat quits")
    p.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--smoke", action="store_true", help="the scripted chat plain and with --spec stream only")
    args = ap.parse_args()
    args.smoke = args.smoke or os.environ.get("ES_TEST_SMOKE") == "1"  # as cli_spec_test.py
    if not shutil.which("tmux"):
        check(False, "tmux is installed (apt-get install tmux; README's test command does)")
        return testlib.finish()
    with tempfile.TemporaryDirectory() as workdir:
        try:
            check_scripted(args, workdir, args.smoke)
            check_ctrl_c(args, workdir)
            check_ctrl_c_blocked(args)
            check_sessions(args, workdir)
        finally:
            for p in PANES:
                p.close()
    return testlib.finish()


if __name__ == "__main__":
    sys.exit(main())
