"""The *how* of the Dataflow model: how the panes of one window relate to each other.

When a trigger fires several times for one key and window, each pane is a refinement of
the ones before it:

* ``DISCARDING``: each pane carries only the data that arrived since the previous pane.
  Downstream sums of panes give the total.
* ``ACCUMULATING``: each pane carries everything so far; the latest pane is the result,
  earlier panes are superseded (a downstream sum would count data twice).
* ``ACCUMULATING_AND_RETRACTING``: each pane carries the new total *and* a retraction of the
  previous one, so a downstream consumer (even one that re-keys or re-groups the results)
  can undo what it did with the previous pane. Beam has no retractions
  (``AccumulationMode`` reserves ``RETRACTING`` but never implemented it): we run the
  window ``ACCUMULATING`` and add :class:`triggers.retractions.WithRetractions`
  downstream, which emits :class:`~triggers.retractions.Refinement` records.

>>> How.ACCUMULATING_AND_RETRACTING.beam_mode == How.ACCUMULATING.beam_mode
True
>>> How.DISCARDING.retracting
False
"""

from __future__ import annotations

import enum

from apache_beam.transforms.trigger import AccumulationMode


class How(enum.Enum):
    """Accumulation of panes: discarding, accumulating, or accumulating and retracting."""

    DISCARDING = "discarding"
    ACCUMULATING = "accumulating"
    ACCUMULATING_AND_RETRACTING = "accumulating_and_retracting"

    @property
    def beam_mode(self) -> int:
        """Beam's ``AccumulationMode`` for the window (retracting accumulates in Beam)."""
        if self is How.DISCARDING:
            return AccumulationMode.DISCARDING
        return AccumulationMode.ACCUMULATING

    @property
    def retracting(self) -> bool:
        """True when panes must be followed by retractions of the previous pane."""
        return self is How.ACCUMULATING_AND_RETRACTING
