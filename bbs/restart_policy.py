"""Diego's crash restart policy, as pure functions of (crash count, crash time, now).

Crashes 1..immediate_restarts-1 restart at once; after that the instance waits 30 s, doubling per
crash up to 16 min; after max_restarts crashes it is not restarted at all. The count starts over when
the instance had been RUNNING for crash_reset_after seconds before it crashed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    immediate_restarts: int = 3
    backoff_min: float = 30.0
    backoff_max: float = 960.0
    max_restarts: int = 200
    reset_after: float = 300.0

    def crash_count_after(self, crash_count: int, was_running: bool, running_since: float, now: float) -> int:
        """The count after this crash: reset first when the instance had run long enough."""
        if was_running and now - running_since >= self.reset_after:
            crash_count = 0
        return crash_count + 1

    def restart_at_once(self, crash_count: int) -> bool:
        return crash_count < self.immediate_restarts

    def backoff(self, crash_count: int) -> float | None:
        """Seconds to wait after the crash before restarting; None when it is never restarted."""
        if self.restart_at_once(crash_count):
            return 0.0
        if crash_count > self.max_restarts:
            return None
        doublings = crash_count - self.immediate_restarts
        if doublings >= 64:  # avoid huge floats; far past the cap anyway
            return self.backoff_max
        return min(self.backoff_min * (2**doublings), self.backoff_max)

    def should_restart(self, crash_count: int, crashed_at: float, now: float) -> bool:
        wait = self.backoff(crash_count)
        return wait is not None and now - crashed_at >= wait
