"""Settings are read when used, never at import: a bad value leaves ``import shufflepoint`` working and is
refused by name where the setting is read."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shufflepoint import _settings as settings


@pytest.mark.parametrize("name", [settings.RANGED_READS, settings.DECODED_BYTES, settings.KEPT_IDS_BYTES])
def test_a_bad_value_does_not_break_the_import(name):
    code = "import shufflepoint; print('imported')"
    run = subprocess.run([sys.executable, "-c", code], env={**os.environ, name: "lots"}, capture_output=True,
                         text=True)
    assert run.returncode == 0 and run.stdout.strip() == "imported", run.stderr


@pytest.mark.parametrize(("name", "read"), [(settings.RANGED_READS, settings.ranged_reads),
                                            (settings.DECODED_BYTES, settings.decoded_bytes),
                                            (settings.KEPT_IDS_BYTES, settings.kept_ids_bytes)])
def test_a_bad_value_is_refused_by_name_where_it_is_used(monkeypatch, name, read):
    monkeypatch.setenv(name, "lots")
    with pytest.raises(ValueError, match=rf"{name}: found 'lots'"):
        read()


def test_a_change_inside_the_process_is_seen_at_the_next_use(monkeypatch):
    from shufflepoint._shards.storage import ranged

    monkeypatch.setenv(settings.RANGED_READS, "0")
    assert not ranged.enabled_for("parquet")
    monkeypatch.setenv(settings.RANGED_READS, "1")
    assert ranged.enabled_for("jsonl")
    monkeypatch.delenv(settings.RANGED_READS)
    assert ranged.enabled_for("parquet") and not ranged.enabled_for("jsonl")


def test_the_byte_budgets_default_when_unset(monkeypatch):
    monkeypatch.delenv(settings.DECODED_BYTES, raising=False)
    monkeypatch.delenv(settings.KEPT_IDS_BYTES, raising=False)
    assert settings.decoded_bytes() == 256 << 20 and settings.kept_ids_bytes() == 8 << 30
    monkeypatch.setenv(settings.DECODED_BYTES, "0")
    assert settings.decoded_bytes() == 0
