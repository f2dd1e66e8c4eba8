"""The fault suite: memstack on its own Redis, PostgreSQL and Chroma, broken on purpose."""
