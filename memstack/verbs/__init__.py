"""The verbs of :class:`memstack.AsyncMemory` beyond writing and assembling context, one
mixin per noun: reading memory back (``reading``), correcting facts (``facts``),
erasing (``erasure``), API keys (``keys``) and moving memory between deployments
(``transfer``). Each names the stores it uses; ``AsyncMemory`` supplies them."""
