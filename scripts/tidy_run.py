#!/usr/bin/env python3
"""clang-tidy over FILEs with BUILD's compile database, two at a time, with a result cache.

    scripts/tidy_run.py BUILD FILE...

A file is checked again only when something clang-tidy sees of it changed. Its cache key is a
SHA-256 over: `clang-tidy --version`, the .clang-tidy file, the file's compile command and its
preprocessed text (the compiler's -E output: every header it includes, expanded), with the
checkout's and the build directory's absolute paths replaced, so that a second clone of the same
commit (CI) hits the same entries. Only clean results are cached (an empty file named by the
key, in $PRIZMA_TIDY_CACHE, default ~/.cache/prizma-tidy); a file with findings is checked on
every run until fixed. PRIZMA_TIDY_CACHE=off checks everything. Exit status 1 on any finding.
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    build = os.path.abspath(sys.argv[1])
    root = os.getcwd()
    files = sys.argv[2:]
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        db = {os.path.normpath(e["file"]): e for e in json.load(f)}
    cache = os.environ.get("PRIZMA_TIDY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "prizma-tidy")
    use_cache = cache != "off"
    if use_cache:
        os.makedirs(cache, exist_ok=True)
    version = subprocess.run(["clang-tidy", "--version"], capture_output=True, check=True).stdout
    with open(os.path.join(root, ".clang-tidy"), "rb") as f:
        config = f.read()

    def portable(data: bytes) -> bytes:
        # The longer path first: the build directory usually lies inside the checkout.
        for path, name in sorted(((build, b"<build>"), (root, b"<root>")),
                                 key=lambda p: -len(p[0])):
            data = data.replace(path.encode(), name)
        return data

    def key_of(path: str) -> str | None:
        entry = db.get(os.path.normpath(os.path.join(root, path)))
        if entry is None:
            return None  # not in the database: clang-tidy will say so
        args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
        pre = []
        skip = False
        for a in args:
            if skip:
                skip = False
                continue
            if a == "-o":
                skip = True
                continue
            if a == "-c":
                continue
            pre.append(a)
        out = subprocess.run(pre + ["-E", "-P", "-o", "-"], cwd=entry["directory"],
                             capture_output=True, check=False)
        if out.returncode != 0:
            return None
        h = hashlib.sha256()
        for part in (version, config, portable(" ".join(args).encode()), portable(out.stdout)):
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return h.hexdigest()

    def check(path: str) -> tuple[str, bool, bool, str]:
        key = key_of(path) if use_cache else None
        if key is not None and os.path.exists(os.path.join(cache, key)):
            return path, True, True, ""
        r = subprocess.run(["clang-tidy", "-p", build, "--quiet", "--warnings-as-errors=*", path],
                           capture_output=True, text=True, check=False)
        text = r.stdout + r.stderr
        clean = r.returncode == 0 and " warning: " not in text and " error: " not in text
        if clean and key is not None:
            with open(os.path.join(cache, key), "w", encoding="utf-8"):
                pass
        return path, clean, False, text

    findings = 0
    cached = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for path, clean, hit, text in pool.map(check, files):
            cached += 1 if hit else 0
            if not clean:
                findings += 1
                print(f"== {path}")
                print(text.rstrip())
    if findings:
        print(f"tidy: findings in {findings} of {len(files)} files")
        return 1
    print(f"tidy: {len(files)} files clean ({cached} unchanged since a clean check: cached)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
