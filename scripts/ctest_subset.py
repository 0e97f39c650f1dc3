#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""Which tests of a second build still have to run, so that CI runs every test once.

  ctest_subset.py FIRST_RUN_LOG FIRST_BUILD SECOND_BUILD [LABEL_EXCLUDE]

FIRST_RUN_LOG is the output of `ctest` in FIRST_BUILD (the sanitizer build). Prints the
`ctest -I` specification of the tests of SECOND_BUILD (the Release build) that did not run
there: those the first run skipped (exit 77: what sanitizers cannot run, such as an
address-space limit under ASan; when the log holds several runs of a test, its last), and those the first build does not have (the benchmark smoke
tests and the install test, built only without sanitizers). Prints nothing when none is left;
a line per test on stderr says why it runs."""
import re
import subprocess
import sys


def names(build, exclude):
    cmd = ["ctest", "--test-dir", build, "-N"] + (["-LE", exclude] if exclude else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    tests = {}
    for line in out.splitlines():
        m = re.match(r"\s*Test\s+#(\d+): (.*\S)\s*$", line)
        if m:
            tests[m.group(2)] = int(m.group(1))
    return tests


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    log, first, second = argv[1:4]
    exclude = argv[4] if len(argv) > 4 else ""
    skipped = set()
    with open(log, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"\s*\d+/\d+ Test\s+#\d+: (.*?) \.+\s*\**(Skipped|Not Run|Passed)",
                         line)
            if m and m.group(2) == "Passed":  # the log's last word on a test counts
                skipped.discard(m.group(1).strip())
            elif m:
                skipped.add(m.group(1).strip())
    have = names(first, exclude)
    todo = []
    for name, index in sorted(names(second, exclude).items(), key=lambda t: t[1]):
        if name in skipped:
            print("release: %s (skipped in the sanitizer build)" % name, file=sys.stderr)
            todo.append(index)
        elif name not in have:
            print("release: %s (not in the sanitizer build)" % name, file=sys.stderr)
            todo.append(index)
    if todo:
        print("0,0,0," + ",".join(str(i) for i in todo))


if __name__ == "__main__":
    main(sys.argv)
