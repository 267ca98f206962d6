"""Agent traces per stack: interactions scored per answer and the context-precision sum.

Runs the agent apps of tests/integration/test_agent_frameworks.py (real frameworks, real
instrumentors, scripted models, offline), assembles their spans, and scores context precision
with the lexical judge (the embedded default) on the assembled chunks, against the same score on
the chunks the framework itself gave each answering call (the expected context), and against
"the last search only" (what ragpulse read before agents were supported).

    python benchmarks/agent_traces.py
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.judges.local import LexicalJudge
from agent.metrics.context import ContextPrecision
from agent.model import Chunk, RagInteraction
from tests.support.agent_apps import APPS, DOCS, expectation, run_app
from tests.support.otlp import assembler, total


def cp(interaction: RagInteraction, chunks: list[str]) -> float:
    scored = RagInteraction(**{**{f: getattr(interaction, f) for f in interaction.__slots__},  # type: ignore[attr-defined]
                               "chunks": tuple(Chunk(c) for c in chunks)})  # fmt: skip
    result = asyncio.run(ContextPrecision().evaluate(scored, LexicalJudge()))
    return result.value or 0.0


def main() -> None:
    print(f"{'stack':36s} answers  interactions  per answer   CP sum  expected  last-search-only")
    for app in sorted(APPS):
        with tempfile.TemporaryDirectory() as tmp:
            expected, spans = run_app(app, Path(tmp))
        a = assembler()
        interactions = sorted(
            total([a.add(spans), a.flush()]).interactions, key=lambda i: i.end_time_unix_nano
        )
        answers = expected["answers"]
        got = want = last = 0.0
        for interaction, answer in zip(interactions, answers, strict=True):
            searched, chunks = expectation(answer)
            got += cp(interaction, [c.content for c in interaction.chunks])
            want += cp(interaction, chunks)
            last += cp(interaction, DOCS[searched[-1]])
        per_answer = len(interactions) / len(answers)
        print(f"{app:36s} {len(answers):7d}  {len(interactions):12d}  {per_answer:10.2f}"
              f"  {got:7.3f}  {want:8.3f}  {last:16.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
