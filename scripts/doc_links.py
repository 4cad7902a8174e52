#!/usr/bin/env python3
"""Every relative link of the Markdown pages leads somewhere: the file exists and, for a link
to a heading (page.md#anchor), the page has that heading (GitHub's anchors: lower case, spaces
to hyphens, punctuation dropped). Links inside code blocks and to other sites are not checked.

    scripts/doc_links.py [ROOT]     (exit 1 and one line per broken link)
"""
import glob
import os
import re
import sys


def anchor(heading):
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def headings(path, cache={}):
    if path not in cache:
        found, in_code = set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.startswith("```"):
                    in_code = not in_code
                elif not in_code and line.startswith("#"):
                    found.add(anchor(line.lstrip("#")))
        cache[path] = found
    return cache[path]


def pages(root):
    names = ["README.md", "CHANGELOG.md", "CONTRIBUTING.md"]
    for folder in ("docs", "examples", "tools", "python"):
        names += glob.glob(f"{folder}/**/*.md", root_dir=root, recursive=True)
    return [os.path.join(root, n) for n in names if os.path.exists(os.path.join(root, n))]


def broken(root):
    out = []
    for page in pages(root):
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
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    bad = broken(os.path.abspath(root))
    for line in bad:
        print(line)
    print(f"doc_links: {len(pages(os.path.abspath(root)))} pages, {len(bad)} broken links")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
