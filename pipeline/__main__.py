"""``python -m binlogd.pipeline index|changes|zip`` (also usable as the application file of spark-submit).

Exit codes: 0 done; 1 the job failed (a corrupt or unreadable file, a Spark error), with one line
on stderr naming the file and offset where the decoder names them; 2 usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import zipfile
from pathlib import Path

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
# What an executor imports (pure Python): folder in the repo -> its place in the binlogd namespace.
PACKAGES = {"binlogd": "binlogd", "protocol": "binlogd/protocol", "library": "binlogd/library",
            "pipeline": "binlogd/pipeline"}


def build_zip(out: str | os.PathLike) -> Path:
    """A zip of the pure-Python packages the executors import, for ``--py-files`` / ``addPyFile``.

    Executors still need the binary dependencies installed: orjson, zstandard, pyarrow.
    """
    root = Path(__file__).resolve().parent.parent
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for folder, arc in PACKAGES.items():
            for path in sorted((root / folder).rglob("*.py")):
                if "__pycache__" not in path.parts:
                    zf.write(path, f"{arc}/{path.relative_to(root / folder).as_posix()}")
    return out


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", help="binlog files, directories or globs")
    p.add_argument("--out", required=True, help="output directory (Parquet)")
    p.add_argument("--mode", default="errorifexists", choices=("errorifexists", "overwrite", "append", "ignore"),
                   help="Spark save mode when --out exists (default: errorifexists)")
    p.add_argument("--skip-corrupt", action="store_true",
                   help="report corrupt files (_corrupt column) instead of failing the job")
    p.add_argument("--glob", dest="glob_filter", help="only files whose name matches (pathGlobFilter)")
    p.add_argument("--master", help="Spark master (default: spark-submit's, else local[*])")


def build_parser(prog: str = "python -m binlogd.pipeline") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="binlogd jobs on Spark")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("index", help="one row per binlog file (binlogd info) to Parquet")
    _common(p)
    p = sub.add_parser("changes", help="row changes to Parquet partitioned by schema, table, date")
    _common(p)
    p.add_argument("--input", default="auto", choices=("auto", "binlog", "jsonl"),
                   help="binlog files or the daemon's JSON-lines files (default: by name, *.jsonl)")
    p.add_argument("--daemon-checkpoint", help="the daemon's checkpoint: JSON lines after its commit are left out")
    p = sub.add_parser("zip", help="zip protocol/, pipeline/, daemon/, binlogd/ for spark-submit --py-files")
    p.add_argument("--out", default="binlogd-pipeline.zip")
    return parser


def _one_line(exc: BaseException) -> str:
    """Our decoder's message (file and offset) out of a Spark/Py4J exception, else its first line."""
    text = str(exc)
    m = re.search(r"(?:CorruptFile|ConversionError|FileNotFoundError|ValueError): (.+)", text)
    if m:
        return m.group(1).strip()
    return (text.strip().splitlines() or [type(exc).__name__])[0]


def main(argv: list[str] | None = None, prog: str = "python -m binlogd.pipeline") -> int:
    args = build_parser(prog).parse_args(argv)
    if args.command == "zip":
        print(build_zip(args.out))
        return EXIT_OK
    from pyspark.sql import SparkSession

    from binlogd.pipeline import jobs

    existing = SparkSession.getActiveSession()  # called from a program that has one: leave it running
    spark = jobs.session(f"binlogd {args.command}", args.master)
    try:
        if args.command == "index":
            jobs.index_job(spark, args.paths, args.out, args.mode, args.skip_corrupt, args.glob_filter)
        else:
            jobs.changes_job(spark, args.paths, args.out, args.mode, args.skip_corrupt, args.input,
                             args.daemon_checkpoint, args.glob_filter)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # Spark wraps task errors; print ours in one line
        print(f"pipeline {args.command}: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        if existing is None:
            spark.stop()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
