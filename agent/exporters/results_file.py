"""Each evaluated interaction as one line of a local JSONL file, rotated by size and bounded.

A line is the record the results topic carries (agent/exporters/kafka_results.py): an
ExportTraceServiceRequest holding one `ragpulse.evaluation` span with the scores, the judge's
verdicts per document and the labelling marks (agent/exporters/result_spans.py says what it
carries), written as OTLP/JSON — the format of the Collector's file exporter, readable by its
`otlpjsonfile` receiver and by `ragpulse label-queue --results-file`.

Rotation: when a line would take the file past `max_bytes`, the file becomes `FILE.1` (`FILE.1`
becomes `FILE.2`, ...) and at most `keep` rotated files are kept; with keep 0 the file starts over.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

from agent.config import ConfigError
from agent.exporters.result_spans import evaluation_request
from agent.infra.otlp_json import to_line
from agent.model import Evaluated


def rotated(path: Path, index: int) -> Path:
    return path.with_name(f"{path.name}.{index}")


class ResultsFileExporter:
    """Durable exporter: `export` returns once the line is written and flushed to the OS (a local
    write of about a kilobyte: done on the event loop). A write that fails raises; the pipeline
    counts it and retries the interaction."""

    def __init__(
        self, path: Path, *, max_bytes: int, keep: int, include_text: bool = False,
        documents_key: str | None = None,
    ) -> None:  # fmt: skip
        self.path = path
        self._max_bytes = max_bytes
        self._keep = keep
        self._include_text = include_text
        self._documents_key = documents_key
        self._file: IO[bytes] | None = None
        self._size = 0

    async def start(self) -> None:
        if self._file is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("ab")
            except OSError as exc:  # the operator's path: name the setting, no traceback
                raise ConfigError(
                    f"results_file (env RAGPULSE_RESULTS_FILE): cannot write {self.path}: {exc.strerror}"
                ) from None
            self._size = self._file.tell()

    def _rotate(self) -> None:
        if self._file is not None:
            self._file.close()
        if self._keep == 0:
            self.path.unlink(missing_ok=True)
        else:
            rotated(self.path, self._keep).unlink(missing_ok=True)
            for index in range(self._keep - 1, 0, -1):
                if rotated(self.path, index).exists():
                    os.replace(rotated(self.path, index), rotated(self.path, index + 1))
            os.replace(self.path, rotated(self.path, 1))
        self._file = self.path.open("ab")
        self._size = 0

    async def export(self, evaluated: Evaluated) -> None:
        if self._file is None:
            raise RuntimeError("results file exporter used before start()")
        request = evaluation_request(
            evaluated.interaction, evaluated.results, include_text=self._include_text,
            extra_attributes=evaluated.mark_attributes() or None, documents_key=self._documents_key,
        )  # fmt: skip
        line = (to_line(request) + "\n").encode()
        if self._size and self._size + len(line) > self._max_bytes:
            self._rotate()
        assert self._file is not None
        self._file.write(line)
        self._file.flush()
        self._size += len(line)

    async def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    async def shutdown(self, timeout: float) -> None:
        file, self._file = self._file, None
        if file is not None:
            file.close()
