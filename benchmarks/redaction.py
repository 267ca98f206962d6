"""Cost of redacting personal data before a judge call: µs per interaction.

An interaction is a query, a response and 5 chunks of ~800 characters of encyclopaedic prose
with numbers (years, populations, prices, dates: the look-alikes the detectors must reject).
"with PII" plants, per interaction, 2 e-mail addresses, 2 phone numbers, a card number, an IPv4
and an IPv6 address and an IBAN across the texts. Each interaction is distinct (a counter is
mixed in), so nothing is served from the wrapper's memo; the figure is the redactor itself.

    python benchmarks/redaction.py [--interactions 2000]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.redact import Redactor
from benchmarks.harness import Benchmark, line

PROSE = (
    "Paris is the capital and largest city of France, with an estimated population of 2,102,650 "
    "residents in January 2023 in an area of more than 105 km2. Since the 17th century, Paris has "
    "been one of the world's major centres of finance, diplomacy, commerce, culture, fashion and "
    "gastronomy. The Eiffel Tower was completed on 31 March 1889 for the Exposition Universelle; "
    "it is 330 metres tall and received 6.3 million visitors in 2022, at a ticket price of 29.40 "
    "euros for the summit. The city is divided into 20 arrondissements, and its metro, opened on "
    "19 July 1900, carries 4.1 million passengers a day over 16 lines and 308 stations. Version "
    "2.4.1 of the guide was published on 2023-05-14. "
)


def chunk(i: int, n: int) -> str:
    return f"[doc {n}-{i}] " + (PROSE * 2)[:790]


PII = (
    "Contact jane.doe{n}@example.com or +44 20 7946 0958; card 4111 1111 1111 1111.",
    "Server 192.0.2.{m} and 2001:db8::{n:x} logged the request; call (415) 555-2671.",
    "Refunds to GB82 WEST 1234 5698 7654 32, questions to bob{n}@mail.example.org.",
)


def interaction(n: int, pii: bool) -> list[str]:
    query = f"What should I know about Paris (question {n})?"
    response = "Paris is the capital of France and its metro opened in 1900."
    chunks = [chunk(i, n) for i in range(5)]
    if pii:
        query += " " + PII[0].format(n=n)
        chunks[1] = chunks[1][:600] + " " + PII[1].format(n=n, m=n % 250 + 1)
        chunks[3] = chunks[3][:600] + " " + PII[2].format(n=n)
        response += f" Write to jane.doe{n}@example.com."
    return [query, response, *chunks]


def measure(redactor: Redactor, count: int, pii: bool) -> tuple[float, float, float, int]:
    texts = [interaction(n, pii) for n in range(count)]
    timings = []
    replaced = 0
    for item in texts:
        started = time.perf_counter()
        redaction = redactor.redact(item)
        timings.append(time.perf_counter() - started)
        replaced += redaction.total
    timings.sort()
    p50, p99 = timings[len(timings) // 2], timings[int(len(timings) * 0.99)]
    return statistics.fmean(timings) * 1e6, p50 * 1e6, p99 * 1e6, replaced


def main() -> None:
    bench = Benchmark(__doc__)
    parser = bench.parser
    parser.add_argument("--interactions", type=int, default=2000)
    args = bench.parse()
    redactor = Redactor()
    redactor.redact(interaction(0, True))  # warm-up: imports, compiled patterns, phone metadata
    chars = sum(map(len, interaction(0, False)))
    line(f"{args.interactions} interactions of {chars} characters (query, response, 5 chunks)")
    for pii in (False, True):
        mean, p50, p99, replaced = measure(redactor, args.interactions, pii)
        label = "with PII   " if pii else "without PII"
        line(
            f"{label}: {mean:6.0f} µs per interaction (median {p50:.0f} µs, p99 {p99:.0f} µs), "
            f"{replaced / args.interactions:.1f} values replaced per interaction"
        )


if __name__ == "__main__":
    main()
