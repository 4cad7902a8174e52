#!/usr/bin/env python3
"""Every relative link of the Markdown pages leads somewhere: the file exists and, for a link
to a heading (page.md#anchor), the page has that heading (GitHub's anchors: lower case, spaces
to hyphens, punctuation dropped). Links inside code blocks and to other sites are not checked.

    scripts/doc_links.py [ROOT]     (exit 1 and one line per broken link)
"""
import functools
import glob
import os
import re
import sys


def anchor(heading):
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


@functools.lru_cache(maxsize=None)
def headings(path):
    found, in_code = set(), False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("```"):
                in_code = not in_code
            elif not in_code and line.startswith("#"):
                found.add(anchor(line.lstrip("#")))
    return found


def pages(root):
    names = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md"]
    for folder in ("docs", "examples", "tools", "python"):
        names += glob.glob(f"{folder}/**/*.md", root_dir=root, recursive=True)
    return [os.path.join(root, n) for n in names if os.path.exists(os.path.join(root, n))]


def broken(root, names):
    out = []
    for page in names:
        with open(page, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            url = m.group(1)
            if re.match(r"[a-z]+:", url):
                continue
            path, _, frag = url.partition("#")
            target = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            rel = os.path.relpath(page, root)
            if not os.path.exists(target):
                out.append(f"{rel}: {url}: no such file")
            elif frag and target.endswith(".md") and frag not in headings(target):
                out.append(f"{rel}: {url}: no such heading")
    return out


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    names = pages(root)
    bad = broken(root, names)
    for line in bad:
        print(line)
    print(f"doc_links: {len(names)} pages, {len(bad)} broken links")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
