"""What the benchmark scripts write: run metadata, JSON, and markdown sections.

A markdown file such as docs/performance.md holds sections between marker comments,

    <!-- begin: bench_gemm bars -->
    ...
    <!-- end: bench_gemm bars -->

and each benchmark run (or rendering of a JSON result) replaces the sections it produced and
leaves the rest of the file as it is; a section not yet in the file is appended, and a missing
file is created.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"
NEW_FILE_TITLE = "# Performance\n"


OUTPUT_OPTIONS = ("--json", "--markdown", "--plot", "--out")  # where results go: not part of what they measure


def command_line(module: str, argv: list[str]) -> str:
    """The command as typed from the repository root, less the options that only name output files."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in OUTPUT_OPTIONS:
            skip = True
        elif not arg.startswith(tuple(f"{opt}=" for opt in OUTPUT_OPTIONS)):
            kept.append(arg)
    return shlex.join(["python3", "-m", module, *kept])


def query_clocks(device: torch.device) -> Optional[dict[str, str]]:
    """Current and maximum SM and memory clocks and the power limit from nvidia-smi, if present."""
    fields = ("clocks.sm", "clocks.max.sm", "clocks.mem", "clocks.max.mem", "power.limit")
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    target = f"GPU-{uuid}" if uuid is not None else str(device.index)
    cmd = ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader", "-i", target]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    values = [v.strip() for v in out.stdout.strip().split(",")]
    return dict(zip(fields, values)) if len(values) == len(fields) else None


def run_metadata(device: torch.device, command: str) -> dict[str, Any]:
    import tcgemm

    props = torch.cuda.get_device_properties(device)
    return {
        "device": props.name,
        "sm_count": props.multi_processor_count,
        "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tcgemm": getattr(tcgemm, "__version__", None),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "clocks": query_clocks(device),
        "command": command,
    }


def add_result_args(p, name: str) -> None:
    """--json, --markdown and --render, the result options every benchmark script shares."""
    p.add_argument("--json", type=Path, default=RESULTS_DIR / f"{name}.json")
    p.add_argument("--markdown", type=Path, default=None, help="write the tables into this markdown file")
    p.add_argument("--render", type=Path, default=None, metavar="RESULTS_JSON",
                   help="no benchmark: read a JSON this script wrote and write its tables")


def result_doc(args, name: str, run: Callable[[Any], Any], needs: Sequence[str] = ()) -> Optional[Any]:
    """The result of a benchmark script: read from --render, or measured by run(args) (which needs a
    CUDA GPU and the Python packages `needs`) and written to --json. None, with the reason on
    stderr, when it cannot run."""
    if args.render:
        return json.loads(args.render.read_text())
    if not torch.cuda.is_available():
        print(f"{name}: needs a CUDA GPU", file=sys.stderr)
        return None
    for package in needs:
        try:
            __import__(package)
        except ImportError:
            print(f"{name}: needs {package} (pip install {package})", file=sys.stderr)
            return None
    doc = run(args)
    write_json(doc, args.json)
    return doc


def select_names(known: Sequence[str], spec: Optional[str], what: str) -> list[str]:
    """The names of the comma-separated ``spec`` (a command-line choice), in the order of ``known``;
    all of them for an empty spec. ValueError naming ``what`` for an unknown name or none."""
    if not spec:
        return list(known)
    wanted = [name.strip() for name in spec.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown or not wanted:
        raise ValueError(f"{what}: unknown or no name ({', '.join(map(repr, unknown))}); "
                         f"known: {', '.join(known)}")
    return [name for name in known if name in wanted]


def write_json(obj: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1) + "\n")
    print(f"wrote {path}")


def header_line(meta: dict[str, Any], command: Optional[str] = None) -> str:
    """One line naming the GPU, the software, the date and the command of a result."""
    date = meta.get("date") or ""
    when = date[:16].replace("T", " ") + " UTC" if len(date) >= 16 else (date or "date unknown")
    parts = [meta.get("device") or "GPU unknown", f"torch {meta.get('torch') or '?'}"]
    if meta.get("cuda"):
        parts[-1] += f" (CUDA {meta['cuda']})"
    limit = (meta.get("clocks") or {}).get("power.limit")
    if limit:
        parts.append(f"power limit {limit.replace('.00 W', ' W')}")
    cmd = command or meta.get("command") or "command not recorded"
    return f"Measured {when} on {', '.join(parts)}: `{cmd}`"


def markdown_table(headers: list[str], rows: list[list[str]], align_left: int = 0) -> str:
    """A pipe table; the first `align_left` columns left-aligned, the rest right-aligned."""
    rule = [":---" if i < align_left else "---:" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(rule) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _markers(key: str) -> tuple[str, str]:
    return f"<!-- begin: {key} -->", f"<!-- end: {key} -->"


def update_markdown(path: Path, sections: dict[str, str]) -> None:
    """Puts each section's text between its markers in `path` (see the module docstring)."""
    text = path.read_text() if path.exists() else NEW_FILE_TITLE
    for key, body in sections.items():
        begin, end = _markers(key)
        block = f"{begin}\n{body.strip()}\n{end}"
        pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.DOTALL)
        if pattern.search(text):
            text = pattern.sub(lambda _: block, text, count=1)
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path} ({', '.join(sections)})")
