"""The speculative decoding engine: requests in, one step at a time (see :mod:`.step`).

* :mod:`.decoder`: :class:`SpeculativeDecoder` (``start``/``add``/``cancel``/``step``, ``generate``).
* :mod:`.step`: one step: draft, target pass, verify, commit.
* :mod:`.state`: the batch between steps.
* :mod:`.requests`: :class:`Request`, :class:`RequestOutput`, :class:`Completion`.
* :mod:`.kpolicy`: draft-length policies, per row.
* :mod:`.text`: incremental text and stop strings.
* :mod:`.stats`: :class:`GenerationStats`.
"""

from .decoder import GenerationStream, SpeculativeDecoder, TextDelta
from .kpolicy import KPolicy
from .requests import Completion, Request, RequestOutput
from .state import BatchState
from .stats import GenerationResult, GenerationStats, accepted_slot, add_counts

__all__ = ["SpeculativeDecoder", "GenerationResult", "GenerationStats", "GenerationStream", "TextDelta", "KPolicy",
           "Request", "RequestOutput", "Completion", "BatchState", "add_counts", "accepted_slot"]
