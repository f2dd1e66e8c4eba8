"""API keys in SQL (``memory_api_key``): created, listed, revoked, found by id.

Only the SHA-256 of a key's secret is written; every query names the deployment (the
key prefix), so deployments sharing a database never see each other's keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from memstack.core.api_keys import ApiKey
from memstack.stores.sql.models import ApiKeyRow


@dataclass(frozen=True)
class StoredKey:
    """A key with the digest its secret is checked against."""

    key: ApiKey
    secret_sha256: str


def _key(row: ApiKeyRow) -> ApiKey:
    return ApiKey(
        key_id=row.key_id,
        user_id=row.user_id,
        scopes=frozenset(row.scopes.split()),
        created_at=row.created_at,
        revoked_at=row.revoked_at,
    )


async def insert(s: AsyncSession, deployment: str, key: ApiKey, secret_sha256: str) -> None:
    s.add(
        ApiKeyRow(
            key_id=key.key_id,
            deployment=deployment,
            user_id=key.user_id,
            scopes=" ".join(sorted(key.scopes)),
            secret_sha256=secret_sha256,
            created_at=key.created_at,
            revoked_at=None,
        )
    )


async def find(s: AsyncSession, deployment: str, key_id: str) -> StoredKey | None:
    row = await s.scalar(
        select(ApiKeyRow).where(ApiKeyRow.key_id == key_id, ApiKeyRow.deployment == deployment)
    )
    return None if row is None else StoredKey(_key(row), row.secret_sha256)


async def all_keys(s: AsyncSession, deployment: str) -> list[ApiKey]:
    """Every key of the deployment, revoked ones included, oldest first."""
    rows = await s.scalars(
        select(ApiKeyRow)
        .where(ApiKeyRow.deployment == deployment)
        .order_by(ApiKeyRow.created_at, ApiKeyRow.key_id)
    )
    return [_key(r) for r in rows]


async def revoke(s: AsyncSession, deployment: str, key_id: str, at: datetime) -> ApiKey | None:
    """Revoke the key (a revoked one keeps its first revocation time); None when the
    deployment has no such key."""
    await s.execute(
        update(ApiKeyRow)
        .where(
            ApiKeyRow.key_id == key_id,
            ApiKeyRow.deployment == deployment,
            ApiKeyRow.revoked_at.is_(None),
        )
        .values(revoked_at=at)
    )
    found = await find(s, deployment, key_id)
    return None if found is None else found.key


async def revoke_user(s: AsyncSession, deployment: str, user_id: str, at: datetime) -> list[str]:
    """Revoke every live key bound to ``user_id`` (its erasure); the ids of those revoked
    now, in key id order. Keys revoked before keep their first revocation time."""
    revoked = await s.scalars(
        update(ApiKeyRow)
        .where(
            ApiKeyRow.deployment == deployment,
            ApiKeyRow.user_id == user_id,
            ApiKeyRow.revoked_at.is_(None),
        )
        .values(revoked_at=at)
        .returning(ApiKeyRow.key_id)
    )
    return sorted(revoked)


async def any_live(s: AsyncSession, deployment: str) -> bool:
    """Whether the deployment has an unrevoked key: one probe of the index."""
    query = select(ApiKeyRow.key_id).where(
        ApiKeyRow.deployment == deployment, ApiKeyRow.revoked_at.is_(None)
    )
    return await s.scalar(query.limit(1)) is not None
