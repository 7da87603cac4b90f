#!/usr/bin/env python3
"""Print one version's section of a Keep a Changelog file.

    changelog-section.py CHANGELOG.md VERSION

Prints the lines under `## [VERSION]` (with or without a date after it) up
to the next `## ` heading; exits 1 when there is no such section or it is
empty.
"""
import re
import sys


def section(text, version):
    heading = re.compile(r"^## \[" + re.escape(version) + r"\]( .*)?$")
    lines, inside = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            if inside:
                break
            inside = bool(heading.match(line))
            continue
        if inside:
            lines.append(line)
    body = "\n".join(lines).strip()
    return body or None


def main():
    path, version = sys.argv[1], sys.argv[2]
    with open(path, encoding="utf-8") as f:
        body = section(f.read(), version)
    if body is None:
        sys.exit(1)
    print(body)


if __name__ == "__main__":
    main()
