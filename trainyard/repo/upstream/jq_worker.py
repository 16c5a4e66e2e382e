"""The process that runs jq programs for :mod:`trainyard.repo.upstream.diffing`, one request a line.

jq (the C library behind the ``jq`` package) cannot be interrupted, and Argo CD gives each jq patch
one second (argo-cd@v3.5.1:util/argo/normalizers/diff_normalizer.go DefaultJQExecutionTimeout), so
the diff runs programs here and kills this process when one runs past its time. Its address space
is capped so that a program that grows without end fails here instead of taking the machine.

Request: ``{"program": str, "input": any}``; reply: ``{"outputs": [at most two]}`` (the diff needs
the first output and whether there is a second) or ``{"error": str}``.

Started by path, with only the standard library and ``jq`` imported.
"""

import contextlib
import itertools
import json
import resource
import sys

ADDRESS_SPACE = 2 << 30  # bytes; jq's own data for one Kubernetes object is a few MiB at most


def main() -> None:
    with contextlib.suppress(ValueError, OSError):  # a lower hard limit already: keep it
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    import jq

    for line in sys.stdin:
        try:
            request = json.loads(line)
            program = jq.compile(request["program"])
            outputs = list(itertools.islice(iter(program.input_value(request["input"])), 2))
            reply = {"outputs": outputs}
        except MemoryError:
            reply = {"error": "out of memory"}
        except Exception as exc:  # jq's own error (compile or run), said as jq says it
            reply = {"error": str(exc) or type(exc).__name__}
        sys.stdout.write(json.dumps(reply, ensure_ascii=True) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
