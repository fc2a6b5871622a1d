"""``shufflepoint audit --exclude K`` for real: exclusion at the save point, judged in fresh processes.

One audit (2 launches): a shufflepoint loader resumed on another world size excludes exactly
(EXACTLY_ONCE, no excluded sample served; the exclude() call's cross-rank check runs on Gloo). The
verdict for a loader that ignores exclude() (SERVED_EXCLUDED) is judged without launches in
tests/tools/test_audit_exclusion.py, on the records of such a loader.
"""

from __future__ import annotations

import os

from integration_checks import run_audit

TARGETS = os.path.join(os.path.dirname(__file__), "targets", "loaders.py")


def audit(tmp_path, capsys, target, *flags):
    code, out, _, report = run_audit(tmp_path, capsys, TARGETS, target, *flags)
    return code, out, report


def test_excluded_samples_stay_out_after_a_resume_on_three_processes(tmp_path, capsys):
    code, out, report = audit(tmp_path, capsys, "shufflepoint_loader", "--nproc", "2", "--resume-nproc", "3",
                              "--save-at", "0:3", "--exclude", "9")
    assert (code, report["verdict"]) == (0, "EXACTLY_ONCE"), out
    assert "9 samples excluded at the save point; none was served after it" in report["notes"]
    later = report["epoch_checks"][-1]  # a whole epoch after the exclusion: 67 - 9 samples, each once
    assert later["distinct"] == 58 and later["missing"] == 0



def test_a_sharded_corpus_excludes_under_spans_across_a_resume_on_three_processes(tmp_path, capsys):
    """The same under the spans deal (a Shards corpus's default): the exclusion at the save point re-deals
    what is left (the state's ``handed``), and 3 processes read on without the excluded samples."""
    code, out, report = audit(tmp_path, capsys, "sharded_loader", "--nproc", "2", "--resume-nproc", "3",
                              "--save-at", "0:3", "--exclude", "9")
    assert (code, report["verdict"]) == (0, "EXACTLY_ONCE"), out
    assert "9 samples excluded at the save point; none was served after it" in report["notes"]
    for epoch in report["epoch_checks"]:  # the corpus's 383 rows but the 9 excluded, each once, none missing
        assert (epoch["distinct"], epoch["missing"]) == (383 - 9, 0), epoch
