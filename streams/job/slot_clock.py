"""Slot arithmetic (:class:`SlotClock`): which slot an event time falls in, and where a slot
starts and ends. Shared by the settings (:meth:`~streams.job.config.JobConfig.clock`), the
partition side's slotting and the coordinator."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["SlotClock"]


@dataclass(frozen=True, slots=True)
class SlotClock:
    """Slot arithmetic: ``length`` ms per slot, slot 0 starting at ``origin`` (epoch ms)."""

    length: int
    origin: int = 0

    def __post_init__(self) -> None:
        if self.length < 1:
            raise ValueError("slot length must be at least 1 ms")

    def slot_of(self, times: np.ndarray | int) -> np.ndarray:
        """Slot index of each event time (floor division; times before origin give negatives)."""
        return (np.asarray(times, dtype=np.int64) - self.origin) // self.length

    def start(self, slot: int) -> int:
        """First millisecond of ``slot``."""
        return self.origin + slot * self.length

    def end(self, slot: int) -> int:
        """First millisecond after ``slot``."""
        return self.origin + (slot + 1) * self.length

    def last_closed(self, watermark: int) -> int:
        """The highest slot whose end the watermark has reached."""
        return (watermark - self.origin) // self.length - 1
