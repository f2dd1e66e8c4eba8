""":class:`Verbs`, the base of every verb mixin and of :class:`memstack.AsyncMemory`: what
each verb reaches is the deployment's :class:`~memstack.parts.Stores`, and the read
path over them."""

from __future__ import annotations

from memstack.parts import Stores
from memstack.recall import Recall


class Verbs:
    stores: Stores

    def __init__(self, stores: Stores) -> None:
        self.stores = stores
        self._recall: Recall | None = None

    @property
    def recall(self) -> Recall:
        """The read path over the stores; built on first use (a misconfigured query
        rewrite then fails the first read, not the open)."""
        if self._recall is None:
            self._recall = Recall(self.stores)
        return self._recall
