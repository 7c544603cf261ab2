"""What giving an instance its copy of a cached artifact costs: a copy of a 50 MB tree (500 files of 100 kB)
against hard links to it, and (as root) a read-only bind mount of it, which also serves an instance whose
directory is a filesystem of its own, where links cannot reach (rep/artifact_cache.py, docs/artifacts.md
"The cell's cache"). `bind`'s `undo_median_s`: the unmount at the instance's stop.

    python tests/bench/artifact_give.py [--files N] [--file-kb K] [--repeat R]

Prints ONE JSON object: the median seconds per instance of each, and the bytes each adds to the disk.
Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from rep.artifact_cache import bind_read_only, unmount  # noqa: E402


def link_tree(src: Path, dst: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(src):
        rel = Path(dirpath).relative_to(src)
        (dst / rel).mkdir(parents=True, exist_ok=True)
        for d in dirnames:
            (dst / rel / d).mkdir(exist_ok=True)
        for f in filenames:
            os.link(Path(dirpath) / f, dst / rel / f)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--file-kb", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="vendue-bench-"))
    try:
        src = root / "cached"
        for n in range(args.files):
            path = src / f"d{n % 10}" / f"f{n}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(os.urandom(args.file_kb * 1000))
        result: dict[str, object] = {"files": args.files, "tree_bytes": args.files * args.file_kb * 1000}
        def bind(d: Path) -> None:
            d.mkdir()
            bind_read_only(src, d)
            bound.append(d)

        bound: list[Path] = []
        ways: list[tuple[str, Callable[[Path], object]]] = [
            ("copy", lambda d: shutil.copytree(src, d)), ("hardlink", lambda d: link_tree(src, d))]
        if os.geteuid() == 0:
            ways.append(("bind", bind))
        for name, give in ways:
            seconds = []
            for i in range(args.repeat):
                dst = root / f"{name}-{i}"
                before = shutil.disk_usage(root).used
                start = time.perf_counter()
                give(dst)
                os.sync()  # the copy's bytes on disk count too
                seconds.append(time.perf_counter() - start)
                added = shutil.disk_usage(root).used - before
            result[name] = {"median_s": round(statistics.median(seconds), 4), "disk_bytes_added": added}
        undo = []
        for d in bound:
            start = time.perf_counter()
            unmount(d)
            undo.append(time.perf_counter() - start)
        if undo:
            result["bind"]["undo_median_s"] = round(statistics.median(undo), 5)  # type: ignore[index]
        print(json.dumps(result))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
