"""Instructions per review on the review path alone, without the server: valgrind, hot.

Each figure is what one call of the review path costs (``Plans.review`` and its parts), counted
by callgrind over two runs of the same process that differ only in the number of calls
(1,000 and 3,000: the difference, divided by 2,000, leaves out the start-up), with the
garbage collector off and a fixed hash seed, so that it repeats exactly. The bodies are those
of bench/webhook_http.py's main stream (pytorchjob-worker.yaml, 8 pods per job, 4 jobs).

    .venv/bin/python bench/review_instructions.py [--out bench/results/review_instructions.md]

Needs valgrind.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# what each row counts; the rows "of which" are parts of the last review above them
CASES = (
    "whole review, no answer kept (webhook.review.review)",
    "answer kept, found by the shape of the parsed pod (review with Plans)",
    "answer kept, found by the body's keys (Plans.review without stencils)",
    "of which: the decode (msgspec, typed)",
    "of which: reading the body (quick.read, the decode included)",
    "of which: the key as sent",
    "RANK per pod: answer kept, found by the body's keys (Plans.review without stencils)",
    "answer kept, the body fits a stencil (Plans.review)",
    "of which: the match (re)",
    "RANK per pod: the body fits a stencil (Plans.review)",
)


def child(case: str, n: int) -> None:
    import yaml
    from webhook_http import one, template

    from webhook import quick
    from webhook.plans import Plans
    from webhook.policy import load_policies
    from webhook.review import review

    policies = load_policies(ROOT / "policies")
    plans = Plans(policies, "roce", stencils=0)
    fitted = Plans(policies, "roce")
    t = template(yaml.safe_load((ROOT / "examples" / "pods" / "pytorchjob-worker.yaml").read_text()))
    bodies = [one(t, job, pod) for job in range(4) for pod in range(8)]
    rank = b'"name":"RANK","value":"1"'
    ranked = [b.replace(rank, b'"name":"RANK","value":"%d"' % (i % 8)) for i, b in enumerate(bodies)]
    for b in bodies + ranked:
        plans.review(b)
        fitted.review(b)
    assert len(fitted.stencils) == 1  # one stencil fits both streams: RANK is a hole
    reads = [quick.read(b, plans.values_read) for b in bodies]
    calls = dict(
        zip(
            CASES,
            (
                lambda i: review(bodies[i], policies, "roce"),
                lambda i: review(bodies[i], policies, "roce", plans),
                lambda i: plans.review(bodies[i]),
                lambda i: quick._decode(bodies[i]),
                lambda i: quick.read(bodies[i], plans.values_read),
                lambda i: reads[i].key(False, True),
                lambda i: plans.review(ranked[i]),
                lambda i: fitted.review(bodies[i]),
                lambda i: fitted.stencils[0].pattern.fullmatch(bodies[i]),
                lambda i: fitted.review(ranked[i]),
            ),
            strict=True,
        )
    )
    call = calls[case]
    gc.disable()
    for i in range(n):
        call(i & 31)


def count(case: str, n: int, tmp: Path) -> int:
    out = tmp / f"cg.{n}"
    env = dict(os.environ, PYTHONHASHSEED="0")
    run = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={out}",
            sys.executable,
            __file__,
            "--child",
            case,
            str(n),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return int(re.search(r"Collected : (\d+)", run.stderr).group(1))


def main() -> int:
    if sys.argv[1:2] == ["--child"]:
        sys.path.insert(0, str(ROOT / "bench"))
        child(sys.argv[2], int(sys.argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "review_instructions.md"))
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("error: valgrind not found; on Debian: apt-get install valgrind", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "bench"))
    import results

    rows = []
    with tempfile.TemporaryDirectory(prefix="trainyard-bench-") as tmp:
        for case in CASES:
            per_call = (count(case, 3_000, Path(tmp)) - count(case, 1_000, Path(tmp))) / 2_000
            rows.append(f"| {case} | {per_call / 1000:.1f} k |")
            print(f"{case:70} {per_call / 1000:8.1f} k instructions", flush=True)
    caption = (
        "Instructions per call on the review path, hot (callgrind, 3,000 calls less 1,000, garbage collector off), "
        'bodies of bench/webhook_http.py\'s main stream; the rows "of which" are parts of the last review above them.'
    )
    table = results.table(caption, "| call | instructions |", "|---|---:|", rows)
    results.publish(table, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
