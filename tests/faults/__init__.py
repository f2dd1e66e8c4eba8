"""The fault suite: memstack on its own Redis, PostgreSQL and Chroma, broken on purpose.

The harness, from the bottom up (each module imports only the ones above it):

- ``processes``: tracking, ending and reaping every process the harness starts.
- ``servers``: :class:`RedisInstance`, :class:`PostgresInstance`, :class:`ChromaServer`
  (each on a free port with its own data) and :class:`SlowEmbeddings`.
- ``deployment``: one memstack deployment on those servers and its worker processes.
- ``workload``: the planned conversation and the :class:`Loader` that sends it.
- ``stores``: what a deployment's ledger, facts and vectors hold; draining.
- ``checker``: a run against a clean replay of the same messages, as a :class:`Row`.
- ``lab``: the servers of a run (:class:`Lab`) and one :class:`Scenario`.
- ``scenarios``: the fault scenarios (``SCENARIOS``), which ``test_faults``
  asserts and ``benchmarks/faults.py`` tabulates.
"""
