"""Measure verifier throughput: reasoning-gym called directly vs through rlvr.verifier.VerifierPool.

Prints a markdown table of scores per second for each task and mode. Answers alternate
between the gold answer and a wrong one, so both verifier paths are exercised; entries are
JSON round-tripped as in the pipeline. Pool start-up (about a second per worker, spent
importing reasoning-gym) is excluded from the rates and reported separately.

    .venv/bin/python benchmarks/verifier_throughput.py --n 2000
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import reasoning_gym

from rlvr.verifier import ScoreRequest, VerifierPool

WRONG_ANSWER = "0"


def make_requests(task: str, n: int, seed: int = 0) -> list[ScoreRequest]:
    entries = json.loads(json.dumps(list(reasoning_gym.create_dataset(task, size=min(n, 500), seed=seed))))
    return [
        ScoreRequest(task, e["answer"] if i % 2 == 0 else WRONG_ANSWER, e)
        for i, e in ((i, entries[i % len(entries)]) for i in range(n))
    ]


def rate_direct(requests: list[ScoreRequest]) -> float:
    score = reasoning_gym.get_score_answer_fn(requests[0].task)
    start = time.perf_counter()
    for r in requests:
        score(answer=r.answer, entry=r.entry)
    return len(requests) / (time.perf_counter() - start)


def rate_pool(pool: VerifierPool, requests: list[ScoreRequest], batch: int) -> float:
    pool.score(requests[:4])  # workers up and verifier objects built before the clock starts
    start = time.perf_counter()
    for i in range(0, len(requests), batch):
        scores = pool.score(requests[i : i + batch])
        assert all(s.status == "ok" for s in scores), scores
    return len(requests) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="answers scored per task and mode")
    parser.add_argument("--tasks", nargs="+", default=["basic_arithmetic", "leg_counting", "countdown"])
    parser.add_argument("--batch", type=int, default=64, help="batch size of the 'batched' pool rows")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")

    requests = {task: make_requests(task, args.n) for task in args.tasks}
    rows: dict[str, dict[str, float]] = {"direct (in-process, no screen)": {}}
    for task, reqs in requests.items():
        rows["direct (in-process, no screen)"][task] = rate_direct(reqs)
    startup: dict[int, float] = {}
    for workers in (0, 1, 2):
        start = time.perf_counter()
        limits = {"timeout_s": 5.0, "memory_limit_mb": 1024, "max_answer_chars": 2048, "failure_reward": 0.0}
        with VerifierPool(num_workers=workers, **limits) as pool:
            pool.score(requests[args.tasks[0]][:1])
            startup[workers] = time.perf_counter() - start
            for label, batch in ((f"one call of {args.n}", args.n), (f"calls of {args.batch}", args.batch)):
                name = f"pool, {workers} worker{'s' if workers != 1 else ''}, {label}"
                if workers == 0:
                    name = f"pool, in-process (num_workers=0), {label}"
                rows[name] = {task: rate_pool(pool, reqs, batch) for task, reqs in requests.items()}

    print(f"scores/second, {args.n} answers per task (half gold, half wrong)\n")
    print("| mode | " + " | ".join(args.tasks) + " |")
    print("|---|" + "---:|" * len(args.tasks))
    for name, rates in rows.items():
        print(f"| {name} | " + " | ".join(f"{rates[t]:,.0f}" for t in args.tasks) + " |")
    print(
        "\npool start-up until the first score returns: "
        + ", ".join(f"{w} workers {s:.2f} s" for w, s in startup.items())
    )


if __name__ == "__main__":
    main()
