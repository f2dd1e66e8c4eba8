"""Moving memory between deployments: an export of users' memory as JSON Lines
(:mod:`~memstack.transfer.records`), written by :mod:`~memstack.transfer.exporting` and read
back, into an empty or a populated deployment, by :mod:`~memstack.transfer.importing`.

A pipeline beside ingest and recall: it reads and writes the stores directly, derives
the vectors as ``memstack reindex`` does, and is called by :class:`memstack.AsyncMemory`.
"""
