"""Small golden sets whose quality the local judge tells apart: grounded answers, and answers
that invent what the context does not say (numbers, names, places)."""

from __future__ import annotations

import json
from pathlib import Path

CITIES = (
    "Paris", "Lyon", "Nantes", "Lille", "Rouen", "Tours", "Dijon", "Reims", "Brest", "Metz",
    "Nancy", "Angers", "Amiens", "Caen", "Limoges", "Orleans", "Poitiers", "Rennes", "Toulon", "Nice",
)  # fmt: skip
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def golden_items(n: int = 20, *, invented: set[int] | None = None) -> list[dict]:
    """`n` items answered from their context; those numbered in `invented` (default: none)
    answer with facts the context does not hold."""
    items = []
    for i in range(n):
        city = CITIES[i % len(CITIES)]
        bridges, year = 3 + i, 1650 + 7 * i
        context = [
            f"{city} has {bridges} bridges across its river, the oldest built in {year}.",
            f"The market of {city} opens every {DAYS[i % 7]} morning.",
        ]
        response = f"{city} has {bridges} bridges across its river."
        if invented and i in invented:
            response = f"Mayor Quentin Vasseur closed {city} airport in {2031 + i} after {90 + i} storms."
        items.append({"id": f"q{i}", "question": f"How many bridges cross the river in {city}?",
                      "contexts": context, "response": response})  # fmt: skip
    return items


def write_set(path: Path, items: list[dict]) -> Path:
    path.write_text("".join(json.dumps(item) + "\n" for item in items))
    return path
