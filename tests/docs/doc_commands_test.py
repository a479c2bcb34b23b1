#!/usr/bin/env python3
"""Runs the commands that README.md and docs/*.md show, so that the docs cannot drift (issue 24).

Usage: python3 tests/docs/doc_commands_test.py SOURCE_DIR BUILD_DIR   (ctest runs it as doc_commands_test)

Every fenced code block of README.md and docs/*.md is read. A line is a command when it starts with `$ `
or with one of PROGRAMS (or build/..., ./tools/..., tools/...); `\\` at its end continues it on the next
line, and so do the indented lines under a usage line. In a block with `$ ` prompts the other lines are
the output the doc shows for the command above them. A line such as `autouvmd: profile store: memory`
(a program's name and a colon) is output too. Each of these is looked up, by its exact text (a trailing
`# comment` dropped), in TABLE (doc_commands_table.py), which says what to do with it:

  run          run it for real, through bash, against the test's daemon, and check its exit status, the
               output the doc shows under it (`...` matches anything; `# exit N` is the exit status) and
               whatever else the entry asks for;
  synopsis     a usage line with placeholders: every --flag it names must be in the program's --help;
  elsewhere    not runnable here, for the reason given (its --flags are still checked where it says);
  config_error a line of docs/configuration.md: the entry's my.yaml must stop autouvmd with exit 2 and
               exactly that line on stderr (`...` matching its time);
  log          a log line that autouvmd must print in the scenario the entry names.

A command in the docs that TABLE lacks fails the test, and so does an entry of TABLE that no doc shows,
so that the table follows the docs. What a `run` command must be changed to run here is adapted, and
only that: the programs are BUILD_DIR's, autouvm-cli gets `--addr` of the test's daemon when the command
has none, and an entry's `replace` pairs swap what only exists elsewhere (a remote host, a file in /etc)
for the test's own.

The test starts one daemon (a temporary repository and state, ports picked by the kernel, an admin
token, so that the token examples run), waits for it to serve, runs the commands in the docs' order,
then stops it with SIGTERM and expects exit 0. Everything it writes is under one temporary directory,
removed at the end. The last line it prints is `N passed, M failed`; it exits 0 only when M is 0.
"""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import traceback

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from doc_blocks import PROGRAMS, read_docs, summary_pattern  # noqa: E402
from doc_commands_table import TABLE  # noqa: E402

BINARIES = {  # where each program is in BUILD_DIR
    'autouvm-cli': 'clients/autouvm-cli',
    'autouvmd': 'server/autouvmd',
    'autouvm-mkmodel': 'tools/autouvm-mkmodel',
    'autouvm-convert': 'tools/autouvm-convert',
    'autouvm-sim': 'tools/autouvm-sim',
}
ADMIN_TOKEN = 'doc-commands-test-token'
START_TIMEOUT_S = 120  # the daemon generates the tiny-llama model on its first start


# --- Running --------------------------------------------------------------------------------------------


class Result:
    def __init__(self, returncode, stdout, stderr, timed_out=False):
        self.returncode, self.stdout, self.stderr, self.timed_out = returncode, stdout, stderr, timed_out


def run_process(argv, cwd, env=None, timeout=60):
    """Runs argv in a session of its own; past the timeout the whole session is killed."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        timed_out = True
    decode = lambda b: b.decode('utf-8', errors='backslashreplace')
    return Result(proc.returncode, decode(out), decode(err), timed_out)


def here(text, build_dir, addr=None):
    """The command with BUILD_DIR's programs, and autouvm-cli pointed at addr unless it names an --addr."""
    add_addr = addr is not None and '--addr' not in text

    def program(m):
        path = shlex.quote(os.path.join(build_dir, BINARIES[m.group(1)]))
        return path + (' --addr ' + addr if m.group(1) == 'autouvm-cli' and add_addr else '')

    names = '|'.join(re.escape(p) for p in PROGRAMS)
    return re.sub(r'(?<![\w./-])(?:build/(?:clients|server|tools)/)?(' + names + r')(?![\w.-])', program, text)


def shown_pattern(line, numbers, adapt):
    """A regular expression for one line of output the doc shows."""
    if line in adapt:
        return re.compile(adapt[line])
    special = r'(\.\.\.|\d+(?:\.\d+)?| +)' if numbers else r'(\.\.\.)'
    regex = ''
    for piece in re.split(special, line):
        if piece == '...':
            regex += '.*'
        elif numbers and re.fullmatch(r'\d+(?:\.\d+)?', piece):
            regex += r'\d+(?:\.\d+)?'
        elif numbers and piece and not piece.strip(' '):
            regex += ' +'
        else:
            regex += re.escape(piece)
    return re.compile(regex)


EXIT_NOTE = re.compile(r'\s+#\s*exit\s+(\d+)\s*$')


def check_shown(item, entry, result):
    """The doc's output lines, in order, against the output; the `# exit N` it notes against the table."""
    problems = []
    lines = (result.stdout + result.stderr).split('\n')  # not splitlines: text may hold \x1c, \x85...
    at = 0
    for shown in item.shown:
        m = EXIT_NOTE.search(shown)
        if m:
            shown = shown[:m.start()]
            if int(m.group(1)) != entry['exit']:
                problems.append(f'the doc says exit {m.group(1)}, the table {entry["exit"]}')
        pattern = shown_pattern(shown.rstrip(), entry['numbers'], entry['adapt_shown'])
        while at < len(lines) and not pattern.fullmatch(lines[at].rstrip()):
            at += 1
        if at == len(lines):
            problems.append(f'no output line (in order) matches the doc\'s {shown.rstrip()!r}')
            break
        at += 1
    return problems


def dotted(obj, key):
    for part in key.split('.'):
        if not isinstance(obj, dict) or part not in obj:
            raise KeyError(key)
        obj = obj[part]
    return obj


def check_run(item, entry, ctx):
    """Runs a `run` command, adapted to ctx's daemon and directory; returns what is wrong with it."""
    cmd = item.text
    for doc_text, text_here in entry['replace']:
        if doc_text not in cmd:
            return [f'the table replaces {doc_text!r}, which the command does not have']
        cmd = cmd.replace(doc_text, text_here.format(addr=ctx['addr'], token_file=ctx['token_file']))
    cmd = here(cmd, ctx['build_dir'], ctx['addr'])
    env = dict(os.environ)
    env.pop('AUTOUVM_ADMIN_TOKEN', None)
    if entry['token']:
        env['AUTOUVM_ADMIN_TOKEN'] = ADMIN_TOKEN
    result = run_process(['bash', '-c', cmd], ctx['work'], env, entry['timeout'])
    problems = []
    if result.timed_out:
        problems.append(f'still running after {entry["timeout"]} s')
    elif result.returncode != entry['exit']:
        problems.append(f'exit {result.returncode}, expected {entry["exit"]}')
    problems += check_shown(item, entry, result)
    for name in ('stdout', 'stderr'):
        if entry[name] and not re.search(entry[name], getattr(result, name), re.M):
            problems.append(f'{name} does not match {entry[name]!r}')
    if entry['summary']:
        if ctx['summary'] is None:
            problems.append('docs/cli.md shows no summary line (finish_reason=...)')
        elif not ctx['summary'].match(result.stderr):
            problems.append('stderr is not one summary line of the form docs/cli.md shows')
    if entry['one_line'] and (result.stdout.count('\n') != 1 or not result.stdout.endswith('\n')):
        problems.append('stdout is not one line')
    if entry['json_line'] is not None:
        try:
            lines = result.stdout.rstrip('\n').split('\n')
            if len(lines) != 1 or not result.stdout.endswith('\n'):
                raise ValueError(f'{len(lines)} lines')
            obj = json.loads(lines[0])
            for key, want in entry['json_line'].items():
                got = dotted(obj, key)
                if want is not None and got != want:
                    problems.append(f'JSON {key} is {got!r}, expected {want!r}')
        except (ValueError, KeyError) as e:
            problems.append(f'stdout is not the JSON line expected ({e})')
    for path in entry['files']:
        if not os.path.isfile(os.path.join(ctx['work'], path)):
            problems.append(f'{path} was not written')
    if entry['repeat'] and not problems:
        again = run_process(['bash', '-c', cmd], ctx['work'], env, entry['timeout'])
        if again.returncode != result.returncode or again.stdout != result.stdout:
            problems.append('a second run printed other text (greedy or seeded: it must not)')
    if problems:
        problems.append(f'ran: {cmd}')
        for name in ('stdout', 'stderr'):
            text = getattr(result, name).rstrip('\n')
            problems += [f'  {name}: ' + printable(l) for l in text.split('\n')[-8:] if text]
    return problems


def printable(text):
    """The text with control characters escaped: a random model's output must not drive the terminal."""
    return ''.join(c if c.isprintable() or c == '\t' else repr(c)[1:-1] for c in text)


def check_flags(text, help_command, build_dir, tmp):
    """Every --flag of a doc command must be one the program's --help lists."""
    result = run_process(['bash', '-c', here(help_command, build_dir)], tmp, timeout=30)
    if result.returncode != 0:
        return [f'{help_command}: exit {result.returncode}: {result.stderr.strip()[:200]}']
    flags = sorted(set(re.findall(r'(?<![\w-])--[a-z][a-z0-9-]*', text)))
    return [f'{f} is not in `{help_command}`' for f in flags
            if not re.search(r'(?<![\w-])' + re.escape(f) + r'(?![\w-])', result.stdout)]


def check_config_error(line, entry, build_dir, tmp, index):
    cwd = os.path.join(tmp, f'config-{index}')
    os.mkdir(cwd)
    with open(os.path.join(cwd, 'my.yaml'), 'w') as f:
        f.write(entry['yaml'])
    # Ports picked by the kernel, so that a file that is wrongly accepted takes no fixed port.
    argv = [os.path.join(build_dir, BINARIES['autouvmd']), '--config', 'my.yaml', '--listen', '127.0.0.1:0',
            '--metrics-listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0']
    result = run_process(argv, cwd, timeout=15)  # it exits before it opens anything
    problems = []
    if result.timed_out:
        problems.append('the daemon accepted the file and ran (killed after 15 s)')
    elif result.returncode != 2:
        problems.append(f'exit {result.returncode}, expected 2')
    pattern = shown_pattern(line, False, {})  # `[...]`: the line's time
    if not any(pattern.fullmatch(l) for l in result.stderr.splitlines()):
        last = result.stderr.rstrip('\n').split('\n')[-3:]
        problems.append('stderr has not that line: ' + ' | '.join(printable(l) for l in last))
    return problems


def corrupt_store_log(build_dir, tmp):
    """stderr of a daemon whose profile store cannot be opened, up to its `profile store:` line."""
    cwd = os.path.join(tmp, 'corrupt-store')
    os.makedirs(os.path.join(cwd, 'state', 'profiles'))
    with open(os.path.join(cwd, 'state', 'profiles', 'CURRENT'), 'w') as f:
        f.write('not a manifest name')  # RocksDB: Corruption: CURRENT file does not end with newline
    with open(os.path.join(cwd, 'my.yaml'), 'w') as f:
        f.write('repository:\n  generate_default_model: ""\n')  # no model: the store is what matters
    argv = [os.path.join(build_dir, BINARIES['autouvmd']), '--config', 'my.yaml', '--listen', '127.0.0.1:0',
            '--metrics-listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0', '--port-file', 'port']
    with open(os.path.join(cwd, 'log'), 'wb') as log_file:
        proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file,
                                start_new_session=True)
        # The port file is written after the store is opened: its log lines are in by then.
        deadline = time.monotonic() + 60
        while (not os.path.exists(os.path.join(cwd, 'port')) and proc.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.1)
        code = stop(proc)
    with open(os.path.join(cwd, 'log'), encoding='utf-8', errors='backslashreplace') as f:
        return f.read(), code


def stop(proc, timeout=60):
    """SIGTERM, then the exit status (None, and SIGKILL, if it does not exit within timeout)."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return None


class Daemon:
    """The one daemon the `run` commands talk to."""

    def __init__(self, build_dir, tmp):
        self.dir = os.path.join(tmp, 'daemon')
        os.mkdir(self.dir)
        self.token_file = os.path.join(tmp, 'admin.token')
        with open(self.token_file, 'w') as f:
            f.write(ADMIN_TOKEN + '\n')
        with open(os.path.join(self.dir, 'autouvmd.yaml'), 'w') as f:
            f.write(f'admin:\n  token_file: {json.dumps(self.token_file)}\n')
        self.port_file = os.path.join(self.dir, 'port')
        self.log_path = os.path.join(self.dir, 'autouvmd.log')
        self.cli = os.path.join(build_dir, BINARIES['autouvm-cli'])
        # Relative repository and state: `autouvm-cli server` shows `profile_store: rocksdb state/profiles`.
        argv = [os.path.join(build_dir, BINARIES['autouvmd']), '--config', 'autouvmd.yaml',
                '--listen', '127.0.0.1:0', '--metrics-listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0',
                '--port-file', self.port_file,
                '--model-repository', 'models', '--state-dir', 'state']
        self.log = open(self.log_path, 'wb')
        self.proc = subprocess.Popen(argv, cwd=self.dir, stdin=subprocess.DEVNULL, stdout=self.log,
                                     stderr=self.log, start_new_session=True)
        self.addr = None

    def wait_serving(self):
        """Waits (bounded) for the port file, then for health SERVING; returns a problem or None."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None:
                return f'autouvmd exited with {self.proc.returncode} before listening'
            if time.monotonic() > deadline:
                return f'no port file after {START_TIMEOUT_S} s'
            time.sleep(0.1)
        with open(self.port_file) as f:
            self.addr = '127.0.0.1:' + f.read().strip()
        while True:
            r = run_process([self.cli, '--addr', self.addr, '--timeout', '2', 'health'], self.dir, timeout=10)
            if r.returncode == 0 and r.stdout.strip() == 'SERVING':
                return None
            if self.proc.poll() is not None:
                return f'autouvmd exited with {self.proc.returncode} before serving'
            if time.monotonic() > deadline:
                return f'not SERVING after {START_TIMEOUT_S} s (health: {r.stdout.strip()}{r.stderr.strip()})'
            time.sleep(0.2)

    def stop(self):
        code = stop(self.proc)
        self.log.close()
        return code

    def log_tail(self, n=15):
        with open(self.log_path, encoding='utf-8', errors='backslashreplace') as f:
            return f.read().splitlines()[-n:]


# --- The test -------------------------------------------------------------------------------------------


class Report:
    def __init__(self):
        self.passed = self.failed = self.skipped = 0

    def line(self, verdict, label, text, detail=''):
        if verdict == 'PASS':
            self.passed += 1
        elif verdict == 'FAIL':
            self.failed += 1
        else:
            self.skipped += 1
        print(f'{verdict} {label}: {text}' + (f'  ({detail})' if detail else ''), flush=True)

    def problems(self, label, text, problems, ok_detail=''):
        if problems:
            self.line('FAIL', label, text)
            for p in problems:
                print('    ' + p)
        else:
            self.line('PASS', label, text, ok_detail)


def check_table(items, report):
    """The items TABLE knows; a FAIL for each it lacks and for each entry no doc shows any longer."""
    known = []
    for item in items:
        if item.text in TABLE:
            known.append(item)
        else:
            what = 'command' if item.kind == 'command' else 'output line'
            report.line('FAIL', f'unlisted {item.where()}', item.text,
                        f'a {what} that TABLE in tests/docs/doc_commands_table.py lacks: add it, by its exact text')
    shown = {item.text for item in items}
    for text in TABLE:
        if text not in shown:
            report.line('FAIL', 'stale TABLE entry', text, 'no doc shows it any longer: change or remove it')
    return known


class Checks:
    """Checks the items of one test run, in order; the `run` ones against ctx['addr']."""

    def __init__(self, report, ctx, tmp):
        self.report, self.ctx, self.tmp = report, ctx, tmp
        self.build_dir = ctx['build_dir']
        self.store_log = None  # (stderr, exit status) of the corrupt-store daemon, once it ran

    def check(self, index, item, daemon_problem):
        entry = TABLE[item.text]
        label = f'{entry["cls"]} {item.where()}'
        cls = entry['cls']
        if cls == 'run':
            if daemon_problem:
                self.report.line('FAIL', label, item.text, 'no daemon to run against')
            else:
                self.report.problems(label, item.text, check_run(item, entry, self.ctx))
        elif cls == 'synopsis':
            self.report.problems(label, item.text, check_flags(item.text, entry['help'], self.build_dir, self.tmp),
                                 f'its flags are in `{entry["help"]}`')
        elif cls == 'elsewhere':
            flags = check_flags(item.text, entry['help'], self.build_dir, self.tmp) if entry['help'] else []
            if flags:
                self.report.problems(label, item.text, flags)
            else:
                self.report.line('SKIP', label, item.text, entry['reason'] + (
                    f'; its flags are in `{entry["help"]}`' if entry['help'] else ''))
        elif cls == 'config_error':
            self.report.problems(label, item.text,
                                 check_config_error(item.text, entry, self.build_dir, self.tmp, index),
                                 'exit 2 with this line')
        elif cls == 'log':
            self.report.problems(label, item.text, self.check_log(item.text, entry), entry['reason'])
        else:
            self.report.line('FAIL', label, item.text, f'unknown class {cls!r} in TABLE')

    def check_log(self, line, entry):
        if entry['scenario'] != 'corrupt_store':
            return [f'unknown scenario {entry["scenario"]!r} in TABLE']
        if self.store_log is None:
            self.store_log = corrupt_store_log(self.build_dir, self.tmp)
        text, code = self.store_log
        pattern = shown_pattern(line, False, {})
        problems = [] if any(pattern.fullmatch(l) for l in text.splitlines()) else [
            'the daemon did not log it: ' + ' | '.join(printable(l) for l in text.splitlines()[:3])]
        if code != 0:
            problems.append(f'that daemon exited {code} on SIGTERM, expected 0')
        return problems


def run_checks(known, build_dir, summary, report):
    with tempfile.TemporaryDirectory(prefix='doc_commands_test.') as tmp:
        work = os.path.join(tmp, 'work')  # where the commands run: `--repo models` writes here
        os.mkdir(work)
        ctx = dict(build_dir=build_dir, work=work, addr=None, token_file=None, summary=summary)
        daemon, problem = None, None
        try:
            if any(TABLE[i.text]['cls'] == 'run' for i in known):
                daemon = Daemon(build_dir, tmp)
                problem = daemon.wait_serving()
                if problem:
                    report.line('FAIL', 'daemon', 'start', problem)
                    for l in daemon.log_tail():
                        print('    log: ' + printable(l))
                ctx.update(addr=daemon.addr, token_file=daemon.token_file)
            checks = Checks(report, ctx, tmp)
            for index, item in enumerate(known):
                checks.check(index, item, problem)
        finally:
            if daemon is not None:
                code = daemon.stop()
                if code == 0:
                    report.line('PASS', 'daemon', 'SIGTERM', 'exit 0')
                else:
                    report.line('FAIL', 'daemon', 'SIGTERM', f'exit {code}, expected 0')
                    for l in daemon.log_tail():
                        print('    log: ' + printable(l))


def main(argv):
    if len(argv) != 3:
        print('usage: doc_commands_test.py SOURCE_DIR BUILD_DIR', file=sys.stderr)
        return 2
    source_dir, build_dir = (os.path.abspath(a) for a in argv[1:])
    started = time.monotonic()
    report = Report()
    try:
        missing = [p for p in BINARIES.values() if not os.access(os.path.join(build_dir, p), os.X_OK)]
        if missing:
            report.line('FAIL', 'build', ', '.join(missing), f'not built in {build_dir}')
        else:
            items, texts = read_docs(source_dir)
            known = check_table(items, report)
            run_checks(known, build_dir, summary_pattern(texts.get('docs/cli.md', '')), report)
    except Exception:  # a bug here, or a binary replaced under the test: a failure, not a silent crash
        report.line('FAIL', 'test', 'internal error', traceback.format_exc().strip().splitlines()[-1])
        traceback.print_exc(file=sys.stdout)
    print(f'run time: {time.monotonic() - started:.1f} s; {report.skipped} skipped')
    print(f'{report.passed} passed, {report.failed} failed')
    return 0 if report.failed == 0 else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv))
