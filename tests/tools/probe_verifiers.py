"""Run every reasoning-gym verifier on answers that touch a file if evaluated as code.

Usage: python probe_verifiers.py <marker_dir>   (prints one JSON object: task -> status)

Each task gets a real entry from its own generator, then ``score_answer`` is called with hostile
answers in the syntaxes an ``eval`` or ``sympy.parse_expr`` would run; a file named after the
task appears in <marker_dir> if any of them executed. Each call is bounded by SIGALRM, so a
verifier that hangs is recorded, not waited for. Run it in a throwaway process.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import warnings


class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout


def answers(marker: str) -> list[str]:
    touch = f"open({marker!r}, 'w')"
    system = f"__import__('os').system('touch {marker}')"
    compact = f"__import__('pathlib').Path({marker!r}).touch()"  # no space, no comma: survives split/strip
    statement = f"import pathlib\npathlib.Path({marker!r}).touch()"  # for a verifier that exec()s
    return [
        touch,
        system,
        f"[{touch}]",
        f"[[{touch}]]",
        f"1 + {touch}.write('x')",
        f"({system})",
        compact,
        statement,
    ]


def main(out_dir: str) -> None:
    import reasoning_gym
    from reasoning_gym.factory import DATASETS

    warnings.simplefilter("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    status: dict[str, str] = {}
    for task in sorted(DATASETS):
        marker = os.path.join(out_dir, task)
        try:
            signal.alarm(10)
            dataset = reasoning_gym.create_dataset(task, size=1, seed=0)
            entry = dataset[0]
            signal.alarm(0)
        except BaseException as exc:  # noqa: BLE001 - a task that cannot be built is recorded as such
            signal.alarm(0)
            status[task] = f"no entry ({type(exc).__name__})"
            continue
        status[task] = "ok"
        for answer in answers(marker):
            try:
                signal.alarm(3)
                dataset.score_answer(answer, entry)
            except _Timeout:
                status[task] = "timeout"
            except BaseException:  # noqa: BLE001,S110 - verifiers raise anything on hostile input
                pass
            finally:
                signal.alarm(0)
            if os.path.exists(marker):
                status[task] = "executed"
                break
    print("\nPROBE " + json.dumps(status))  # verifiers may print to stdout themselves


if __name__ == "__main__":
    main(sys.argv[1])
