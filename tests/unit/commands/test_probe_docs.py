"""What docs/probes.md shows is what ragpulse reads: its settings blocks load as a settings file,
its golden set reads as `ragpulse probe` reads one, and every deploy file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

from agent.commands.probe import golden_items, prober_config
from agent.config import load_settings
from tests.support.repo import ROOT

DOC = (ROOT / "docs/probes.md").read_text()


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", DOC, re.M | re.S)


def test_settings_blocks_load_as_ragpulse_settings(tmp_path: Path) -> None:
    shown = blocks("yaml")
    assert len(shown) >= 2
    for number, text in enumerate(shown):
        path = tmp_path / f"probes-{number}.yaml"
        path.write_text(text)
        settings = load_settings(config_file=path, environ={})
        assert settings.probes.golden_set and prober_config(settings).endpoints


def test_golden_set_block_reads_as_a_golden_set(tmp_path: Path) -> None:
    (text,) = blocks("jsonl")
    path = tmp_path / "golden.jsonl"
    path.write_text(text)
    items = golden_items(path)
    assert [item.id for item in items] == ["g-fr", "g-de"]
    assert all(item.reference and item.relevant_ids for item in items)


def test_named_deploy_files_exist() -> None:
    named = set(re.findall(r"deploy/[\w./-]+\.ya?ml", DOC))
    assert {"deploy/k8s/probe-cronjob.yaml", "deploy/k8s/canary-cronjob.yaml"} <= named
    for relative in named:
        assert (ROOT / relative).is_file(), relative
