"""Small GSM8K and FinQA files in their real formats, written by the tests themselves (no hub)."""

from __future__ import annotations

import json
import random
from pathlib import Path

NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Mark"]
ITEMS = ["clips", "apples", "books", "stamps", "marbles", "pencils", "cards", "shells"]


def gsm8k_rows(n: int, seed: int = 0) -> list[dict[str, str]]:
    """Rows like openai/gsm8k's: a word problem, and a worked solution ending in ``#### <answer>``.

    Every fifth answer is above 1,000 and written with a thousands separator, as GSM8K does.
    """
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        name, item = NAMES[i % len(NAMES)], ITEMS[(i // len(NAMES)) % len(ITEMS)]
        a, b = rng.randint(2, 60), rng.randint(2, 60)
        if i % 5 == 0:
            a *= 100
        total = a + b
        rows.append(
            {
                "question": f"{name} had {a} {item} (problem {i}). Then {name} got {b} more {item}. "
                f"How many {item} does {name} have now?",
                "answer": f"{name} has {a} + {b} = <<{a}+{b}={total}>>{total} {item}.\n#### {total:,}",
            }
        )
    return rows


def finqa_rows(n: int, seed: int = 0) -> list[dict]:
    """Records in the original FinQA release format (pre_text, table, post_text, qa.exe_ans ...)."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        old, new = rng.randint(100, 900), rng.randint(100, 900)
        change = (new - old) / old
        rows.append(
            {
                "pre_text": [f"company {i} reported the following revenue .", "amounts in millions ."],
                "post_text": ["see note 7 for details ."],
                "filename": f"CO{i}/2019/page_{i}.pdf",
                "table_ori": [["", "2019", "2018"], ["revenue", f"${new}", f"${old}"]],
                "table": [["", "2019", "2018"], ["revenue", f"$ {new}", f"$ {old}"]],
                "id": f"CO{i}/2019/page_{i}.pdf-1",
                "qa": {
                    "question": f"what was the percentage change in revenue for company {i} from 2018 to 2019?",
                    "answer": f"{change * 100:.1f}%",
                    "explanation": "",
                    "program": f"subtract({new}, {old}), divide(#0, {old})",
                    "exe_ans": round(change, 5),
                },
            }
        )
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def write_json(path: Path, rows: list[dict]) -> Path:
    path.write_text(json.dumps(rows, indent=1))
    return path
