"""How a run ended: the one vocabulary of the run record, the scheduler, notifications, metrics and
`rebal runs`. A `StrEnum`, so it is stored, compared and printed as its word ("failed")."""

from enum import StrEnum


class Outcome(StrEnum):
    OK = "ok"
    WARNING = "warning"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    STOPPED = "stopped"  # a rebalance stopped at its deadline or on a refusal mid-way (resumable)
    INCOMPLETE = "incomplete"  # a rebalance that ended short of its target

    @property
    def succeeded(self) -> bool:
        """The run did its job (a warning says something beside it)."""
        return self in (Outcome.OK, Outcome.WARNING)
