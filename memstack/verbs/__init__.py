"""The verbs of :class:`memstack.AsyncMemory` beyond writing and assembling context, one
mixin per noun: reading memory back (``reading``), correcting facts (``facts``),
erasing (``erasure``), API keys (``keys``) and moving memory between deployments
(``transfer``). Each builds on :class:`~memstack.verbs.base.Verbs`, which holds the
deployment's :class:`~memstack.parts.Stores`."""
