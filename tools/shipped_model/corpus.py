#!/usr/bin/env python3
"""Build the training corpus of the shipped model from Debian 12 packages (not committed: rebuilt).

Sources (each a Debian 12 package; the .deb files are fetched with `apt-get download` and unpacked
with `dpkg-deb -x` into the work folder, so nothing is installed and no root is needed):
  libpython3.11-minimal, libpython3.11-stdlib   Python 3.11 standard library, *.py
  libpython3.11-testsuite                         Python 3.11 regression tests, *.py
  python3.11-doc                                  Python 3.11 documentation, reStructuredText sources
                                                  (html/_sources/**/*.rst.txt)
plus a small generated chat set: ChatML conversations made from the library reference's
`.. function::` / `.. method::` / `.. class::` entries ("What does X do?" -> its first paragraph),
so `sluice run --chat` answers in the format it was taught.

Every file is one document. Documents are deduplicated by the SHA-256 of their bytes (first one
wins), then split: a file whose path hash falls in the held-out bucket (1 in HOLDOUT_EVERY) goes
to heldout.txt, the rest to train.txt. Documents are separated by <|endoftext|>.

  python3 tools/shipped_model/corpus.py --out .shipped/corpus
writes train.txt, heldout.txt and stats.json (per package: files, bytes, duplicates dropped).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import re
import subprocess
import sys

EOT = "<|endoftext|>"
HOLDOUT_EVERY = 40  # ~2.5% of files held out for perplexity / routing statistics
PACKAGES = {
    # package: (glob under the unpacked tree, kind)
    "libpython3.11-minimal": ("usr/lib/python3.11/**/*.py", "code"),
    "libpython3.11-stdlib": ("usr/lib/python3.11/**/*.py", "code"),
    "libpython3.11-testsuite": ("usr/lib/python3.11/test/**/*.py", "code"),
    "python3.11-doc": ("usr/share/doc/python3.11/html/_sources/**/*.rst.txt", "prose"),
}
MAX_DOC_BYTES = 200_000  # a few generated test files are megabytes of data tables: skip those


def fetch(pkg: str, debs: pathlib.Path) -> pathlib.Path:
    """apt-get download + dpkg-deb -x; returns the unpacked root. Works as any user."""
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{pkg}_*.deb"))
    if not found:
        subprocess.run(["apt-get", "download", pkg], cwd=debs, check=True)
        found = sorted(debs.glob(f"{pkg}_*.deb"))
    if not found:
        sys.exit(f"corpus: apt-get download {pkg} left no .deb in {debs}")
    root = debs / ("x_" + pkg)
    if not root.exists():
        subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(root)], check=True)
    return root


def package_version(deb_dir: pathlib.Path, pkg: str) -> str:
    f = sorted(deb_dir.glob(f"{pkg}_*.deb"))[-1]
    return f.name.split("_")[1]


def doc_text(raw: bytes) -> str | None:
    if len(raw) > MAX_DOC_BYTES:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if EOT in text or "<|im_start|>" in text or "<|im_end|>" in text:
        return None
    return text.replace("\r\n", "\n")


ENTRY = re.compile(r"^\.\. (function|method|class|exception)::\s+(.+)$", re.M)


def chat_pairs(rst: str) -> list[tuple[str, str]]:
    """('What does json.dumps(obj, ...) do?', first paragraph of its description) from one page."""
    out = []
    module = re.search(r"^\.\. module::\s+(\S+)", rst, re.M)
    prefix = module.group(1) + "." if module else ""
    for m in ENTRY.finditer(rst):
        sig = m.group(2).strip()
        rest = rst[m.end():].split("\n")
        para, started = [], False
        for line in rest[1:]:
            if line.startswith("   ") and not line.strip().startswith(".. ") and not line.strip().startswith(":"):
                para.append(line.strip())
                started = True
            elif started or (line.strip() and not line.startswith("   ")):
                break
        answer = " ".join(para).strip()
        if len(answer) < 40 or len(answer) > 1200:
            continue
        name = sig.split("(")[0]
        kind = {"function": "function", "method": "method", "class": "class", "exception": "exception"}[m.group(1)]
        q = f"What does the {kind} {prefix}{name} do?" if kind != "exception" else f"When is {prefix}{name} raised?"
        out.append((q, answer))
    return out


def chatml(q: str, a: str) -> str:
    return f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n{a}<|im_end|>\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=pathlib.Path, required=True)
    ap.add_argument("--debs", type=pathlib.Path, default=None, help="where the .deb files go (default OUT/debs)")
    args = ap.parse_args()
    out: pathlib.Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    debs = args.debs or out / "debs"

    seen: set[str] = set()
    train, held = [], []
    stats: dict = {"holdout_every": HOLDOUT_EVERY, "packages": {}}
    pairs: list[tuple[str, str]] = []
    for pkg, (pattern, kind) in PACKAGES.items():
        root = fetch(pkg, debs)
        st = {"version": package_version(debs, pkg), "kind": kind, "files": 0, "bytes": 0,
              "duplicates": 0, "skipped": 0, "heldout_files": 0, "heldout_bytes": 0}
        for f in sorted(root.glob(pattern)):
            if not f.is_file() or "site-packages" in f.parts or "dist-packages" in f.parts:
                continue
            raw = f.read_bytes()
            text = doc_text(raw)
            if text is None or not text.strip():
                st["skipped"] += 1
                continue
            h = hashlib.sha256(raw).hexdigest()
            if h in seen:
                st["duplicates"] += 1
                continue
            seen.add(h)
            rel = str(f.relative_to(root))
            is_held = int(hashlib.sha256(rel.encode()).hexdigest(), 16) % HOLDOUT_EVERY == 0
            (held if is_held else train).append(text)
            st["files"] += 1
            st["bytes"] += len(raw)
            if is_held:
                st["heldout_files"] += 1
                st["heldout_bytes"] += len(raw)
            elif kind == "prose" and "/library/" in rel:
                pairs += chat_pairs(text)
        stats["packages"][pkg] = st
        print(f"{pkg} {st['version']}: {st['files']} files, {st['bytes']:,} bytes "
              f"({st['duplicates']} duplicates, {st['skipped']} skipped, {st['heldout_files']} held out)", flush=True)

    chats = [chatml(q, a) for q, a in pairs]
    stats["chat"] = {"conversations": len(chats), "bytes": sum(len(c.encode()) for c in chats),
                     "source": "python3.11-doc library reference entries"}
    print(f"chat: {len(chats)} conversations", flush=True)
    # Chat conversations are short documents of their own, appended after the files.
    (out / "train.txt").write_text(EOT.join(train + chats), encoding="utf-8")
    (out / "heldout.txt").write_text(EOT.join(held), encoding="utf-8")
    stats["train_bytes"] = (out / "train.txt").stat().st_size
    stats["heldout_bytes"] = (out / "heldout.txt").stat().st_size
    (out / "stats.json").write_text(json.dumps(stats, indent=1) + "\n")
    print(f"train.txt {stats['train_bytes']:,} bytes, heldout.txt {stats['heldout_bytes']:,} bytes")


if __name__ == "__main__":
    main()
