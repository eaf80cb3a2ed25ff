"""Runs of any mechanism stepped one by one behind the batch interface (one dynamic run alone,
or runs of no batched kind)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.release.rule import ReleaseRule
from mechanisms.run.mechanism import BatchRelease, Released, RuleRelease, release_std


class BatchedSteppers:
    """Runs of any mechanism stepped one by one behind the batch interface (one dynamic run
    alone, or runs of no batched kind), whose state is kept per run."""

    def __init__(self, steppers: Sequence) -> None:
        if not steppers:
            raise ValueError("a batch needs at least one run")
        self.steppers = list(steppers)
        self.runs = len(self.steppers)
        self.slot = 1

    def step(self, cells: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from (runs, users) cells (-1: no report)."""
        return self._collect([s.step(c) for s, c in zip(self.steppers, cells, strict=True)])

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell): runs whose
        mechanism needs only counts (``step_classes``) are fed those."""
        return self._collect([s.step_classes(cc, cls) for s, cc, cls in
                              zip(self.steppers, class_counts, classes, strict=True)])

    def _collect(self, releases: list[Released]) -> BatchRelease:
        slot = self.slot
        self.slot += 1
        histogram = np.stack([np.asarray(r.histogram, dtype=np.float64) for r in releases])
        published = np.array([bool(r.published) for r in releases])
        thresholds = [getattr(r, "threshold", None) for r in releases]
        rules = [getattr(s, "rule", None) for s in self.steppers]
        if all(isinstance(t, float) for t in thresholds) and all(
                isinstance(r, ReleaseRule) for r in rules):
            std = np.array([release_std(published[b : b + 1], np.array([t]), rule)[0]
                            for b, (t, rule) in enumerate(zip(thresholds, rules, strict=True))])
            return RuleRelease(slot, histogram, published, std)
        return BatchRelease(slot, histogram, published)
