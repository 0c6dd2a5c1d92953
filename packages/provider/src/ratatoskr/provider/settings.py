"""Provider settings: one pydantic-settings model, read from ``RATATOSKR_*``.

Only the provider reads the environment; the planes and bifrost take what they
need as arguments. Tests pass keyword arguments instead of mutating the
environment. A leaf module: it imports no plane and no database driver (the plane
registry reads it, not the other way round; a test holds the import to that).
"""

from __future__ import annotations

import difflib
import re
import stat
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from bifrost.fields import fields_setting

__all__ = [
    "VMP_DSN_REFUSED",
    "ConfigError",
    "Plane",
    "Settings",
    "is_dsn",
    "read_key_file",
    "redact_dsn",
    "unknown_variables",
]

# A plane's name: a key of the registry's PLANE_TABLE (the command line offers exactly those).
Plane = str

# Why VMP_DB takes no DSN (the registry's VMP entry says the same to the operator commands).
VMP_DSN_REFUSED = (
    "VMP stays on SQLite: its determinism needs one global sequence and "
    "byte-identical snapshots; give a file path"
)

# RFC 7518 §3.2: an HS256 key has at least as many bytes as the hash output.
MIN_HEIMDALL_KEY_BYTES = 32
MIN_VMP_KEY_CHARS = 16
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


DSN_SCHEMES = ("postgresql://", "postgres://")


def is_dsn(value: str) -> bool:
    """Whether a plane's database setting is a PostgreSQL DSN (a libpq URI), not a path."""
    return value.lower().startswith(DSN_SCHEMES)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with its password (in the userinfo or a ``password=`` parameter) replaced
    by ``***``, for messages and logs."""
    scheme, sep, rest = dsn.partition("://")
    authority, slash, tail = rest.partition("/")
    if "@" in authority:
        userinfo, _, hostpart = authority.rpartition("@")
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        authority = f"{userinfo}@{hostpart}"
    tail = re.sub(r"(?i)(password=)[^&]*", r"\1***", tail)
    return f"{scheme}{sep}{authority}{slash}{tail}"


class ConfigError(Exception):
    """A setting is wrong; the message names the setting and says what to do."""


class Settings(BaseSettings):
    """Everything the provider can be told, each as ``RATATOSKR_<NAME>``."""

    # hide_input_in_errors: a refused DSN must not be echoed with its password.
    model_config = SettingsConfigDict(
        env_prefix="RATATOSKR_", extra="forbid", hide_input_in_errors=True
    )

    memory_db: str = Field(
        "var/memory.db",
        description="Memory plane database: a file path, `:memory:`, or a postgresql:// DSN "
        "(schema `ratatoskr_memory`).",
    )
    memory_embedding_dim: int = Field(
        384,
        ge=1,
        le=8192,
        description="Embedding dimension of the memory plane; fixed when its file is created.",
    )
    affect_db: str = Field(
        "var/affect.db",
        description="Affect plane database: a file path, `:memory:`, or a postgresql:// DSN "
        "(schema `ratatoskr_affect`).",
    )
    memory_read_db: str | None = Field(
        None,
        description="A read replica (streaming standby) of the memory plane's PostgreSQL "
        "database, as a postgresql:// DSN: search, get, get_many and scan run there once it has "
        "replayed every acknowledged write, else on the primary; unset: the primary.",
    )
    affect_read_db: str | None = Field(
        None,
        description="A read replica of the affect plane's PostgreSQL database (as "
        "MEMORY_READ_DB): get, get_many, history and list.",
    )
    postgres_require_sync_standby: bool = Field(
        False,
        description="Refuse to start on a PostgreSQL database without a synchronous standby "
        "(synchronous_standby_names set, synchronous_commit on or remote_apply); false: "
        "a warning.",
    )
    postgres_sync_wait_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="Seconds a PostgreSQL write waits for the synchronous standby to confirm "
        "its commit; then it answers 503 bifrost.unavailable, not acknowledged (it may be "
        "committed on the primary only: a retry with the same idempotency key replays it "
        "once the standby confirms). See docs/scaling.md.",
    )
    vmp_db: str = Field("var/vmp.db", description="VMP plane database file (or `:memory:`).")
    vmp_dim: int = Field(
        16, ge=1, le=4096, description="VMP vector dimension; fixed when its file is created."
    )
    vmp_api_key: SecretStr | None = Field(
        None,
        description="Bearer key VMP clients send; may be unset only when listening on loopback.",
    )
    vmp_previous_api_key: SecretStr | None = Field(
        None, description="A VMP key still accepted during a rotation (same procedure)."
    )
    vmp_max_records: int = Field(
        1_000_000, ge=1, description="VMP capacity; upserts beyond it answer 507."
    )
    vmp_max_snapshot_bytes: int | None = Field(
        None,
        ge=1,
        description="Largest VMP snapshot upload (larger → 413, refused before it is read); "
        "unset: 76 + VMP_MAX_RECORDS × (47 + 4·VMP_DIM + 2048), 2,159,000,076 for the defaults.",
    )
    memory_max_page: int = Field(
        1000,
        ge=1,
        description="Most records one memory `scan` page may hold (its `limit`: 1 … this; "
        "default page 100); `health` reports it as max_page.",
    )
    memory_filterable_fields: str = Field(
        "",
        description="Record fields a memory `metadata_filter` may name, comma-separated: "
        "top-level keys or dotted paths such as metadata.kind, never `embedding` or `vector` "
        "(where the embedding sits) (listed by describe_store; indexed in memory at open, "
        "existing rows included). Empty: no filters (v1).",
    )
    memory_retention_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Seconds after its last successful write at which a memory chunk expires: from "
        "then no verb returns it, delete_many does not count it, an upsert of its id "
        "starts again at revision 1, and a background sweep (every 30 s) erases it like "
        "a delete; unset: chunks never expire.",
    )
    memory_quota_chunks: int = Field(
        1_000_000,
        ge=0,
        description="Most memory chunks one `tenant` scope value may hold; a write past it "
        "answers 413 memory.quota_exceeded and writes nothing; 0: no limit. Records "
        "without a tenant are never limited. 1,000,000 is about 8 GB of 384-dim "
        "chunks: well past one agent's memory, far from a shared disk.",
    )
    memory_quota_bytes: int = Field(
        4 * 1024**3,
        ge=0,
        description="Most bytes of memory records one `tenant` may hold, counted as each record's"
        " canonical JSON (embedding included); past it 413 memory.quota_exceeded; 0: "
        "no limit. 4 GiB is about 500,000 chunks of 384 floats: a tenant cannot fill "
        "a shared disk alone.",
    )
    affect_quota_keys: int = Field(
        1_000_000,
        ge=0,
        description="Most affect keys one `tenant` may hold; past it 413 affect.quota_exceeded, "
        "nothing written; 0: no limit. Records without a tenant are never limited. "
        "1,000,000 keys is far more than one tenant's live state.",
    )
    affect_quota_bytes: int = Field(
        4 * 1024**3,
        ge=0,
        description="Most bytes of affect records one `tenant` may keep, every revision of every "
        "key counted (history is what grows); past it 413 affect.quota_exceeded; 0: "
        "no limit. 4 GiB bounds one tenant's history on a shared disk; delete_many "
        "frees a key's whole history.",
    )
    disk_reserve_bytes: int = Field(
        64 * 1024 * 1024,
        ge=0,
        description="Free space held back on the filesystem of each SQLite plane file: below "
        "it, writes that would grow a file answer 507 (insufficient storage) and /readyz "
        "says 'disk full', while reads, deletes and token records use the reserve; 0: none. "
        "64 MiB holds a few largest batches (8 MiB bodies, about twice that in the file and "
        "WAL) and the WALs of deletes meanwhile.",
    )
    group_commit: bool = Field(
        True,
        description="SQLite planes: concurrent writes (memory upsert_many, affect put_many) of "
        "one process share a transaction and its COMMIT, one fsync for the batches queued "
        "together (at most 64), each batch still atomic, idempotent and checked on its own "
        "(revision, grant, quota) in a savepoint; a lone write never waits. false: every "
        "write commits alone.",
    )
    heimdall_key: SecretStr | None = Field(
        None, description="HS256 key shared with Heimdall, which signs every per-call JWT."
    )
    heimdall_previous_key: SecretStr | None = Field(
        None,
        description="A key still accepted during a rotation (never used to mint); unset it "
        "once Heimdall signs with the new key and the longest token lifetime has passed.",
    )
    heimdall_key_file: Path | None = Field(
        None,
        description="File holding the Heimdall key (instead of HEIMDALL_KEY): the first line "
        "is the current key, further lines keys still accepted during a rotation; must not be "
        "readable by group or others.",
    )
    issuer: str = Field("heimdall", min_length=1, description="Expected JWT `iss` claim.")
    consumer_id: str = Field(
        "ratatoskr", min_length=1, description="This consumer's id: the expected JWT `aud`."
    )
    host: str = Field("127.0.0.1", description="Address to listen on.")
    allowed_hosts: str = Field(
        "",
        description="Comma-separated names clients may send in `Host` (`*.example.com` "
        "allowed) besides the loopback names and RATATOSKR_HOST; others get 400 (DNS "
        "rebinding).",
    )
    port: int = Field(8765, ge=0, le=65535, description="TCP port to listen on.")
    request_timeout_s: float = Field(
        15.0,
        gt=0,
        le=3600,
        description="Longest a request may take to arrive whole (head and body) before its "
        "connection is closed; also how long a new connection may stay silent.",
    )
    keep_alive_s: float = Field(
        5.0, gt=0, le=3600, description="Idle keep-alive connections are closed after this."
    )
    max_connections: int = Field(
        1024,
        ge=1,
        description="Open connections per process (kept below the open-file limit, which is "
        "raised to its hard limit at start); at the cap a new connection closes the one "
        "that has waited longest with no request in flight, or is closed if none waits.",
    )
    max_head_bytes: int = Field(
        64 * 1024,
        ge=1024,
        le=16 * 1024 * 1024,
        description="Largest request head (request line and headers), counted as it arrives; "
        "larger → 431 and the connection closed. Clients send under 2 KiB (a token is about "
        "1 KiB); 64 KiB leaves room for large tokens and proxy headers.",
    )
    max_headers: int = Field(
        100,
        ge=1,
        le=10_000,
        description="Most header lines in one request head; more → 431 and the connection "
        "closed. Clients send about 10; 100 is also Apache's default.",
    )
    workers: int = Field(
        1,
        ge=1,
        le=64,
        description="Server processes sharing the listening socket and the database files "
        "(one per core; a worker that dies is restarted).",
    )
    max_body_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Largest request body accepted (larger → 413)."
    )
    max_inflight_body_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        description="Request-body bytes a process holds at once across all calls; calls past "
        "it wait for room instead of growing memory.",
    )
    max_heavy_calls: int = Field(
        1,
        ge=1,
        le=64,
        description="Heavy calls (bodies of 256 KiB and more; top_k, limit or id lists of 100 "
        "and more) running at once per process; the rest wait, so small calls keep their "
        "latency.",
    )
    max_batch: int = Field(
        1000, ge=1, description="Most records or ids in one upsert / put / get_many / delete."
    )
    max_top_k: int = Field(1000, ge=1, le=4096, description="Largest `top_k` a search may ask.")
    max_page: int = Field(500, ge=1, description="Largest page of affect `history` / `list`.")
    max_scope_any: int = Field(
        256,
        ge=1,
        le=65536,
        description="Most members of a `scope_any` union (memory search, affect list).",
    )
    max_json_containers: int = Field(
        100_000,
        ge=100,
        description="Most JSON objects and arrays in one request body; more is refused before "
        "parsing (a parse bomb).",
    )
    token_max_lifetime_s: int = Field(
        300, ge=1, description="Longest allowed JWT lifetime (`exp - iat`), seconds."
    )
    clock_skew_s: int = Field(30, ge=0, description="Clock skew tolerated on JWT times, seconds.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Log level (logs never hold content, scopes or tokens)."
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="`text`: one line per record; `json`: one JSON object per line (time, "
        "level, logger, message; call lines add plane, verb, status, code, duration_ms, call_id).",
    )
    metrics_token: SecretStr | None = Field(
        None,
        description="Bearer token a scrape of `/metrics` must send; unset: `/metrics` is open "
        "on a loopback listener and refused (403) on any other.",
    )

    @field_validator("memory_filterable_fields")
    @classmethod
    def _filterable_fields(cls, value: str) -> str:
        try:
            fields_setting(value)
        except ValueError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("memory_read_db", "affect_read_db")
    @classmethod
    def _a_read_dsn(cls, value: str | None) -> str | None:
        if value is not None and not is_dsn(value):
            # No echo of the value: it may hold a password.
            raise PydanticCustomError("read_dsn", "give a postgresql:// DSN of a read replica")
        return value

    @field_validator("vmp_db")
    @classmethod
    def _a_vmp_file(cls, value: str) -> str:
        if is_dsn(value):
            # Refused before pydantic can echo the value (and its password).
            raise PydanticCustomError("vmp_dsn", VMP_DSN_REFUSED)
        return value

    # Each plane's database setting (vmp_db's DSN is refused above, before this runs).
    @field_validator("memory_db", "affect_db", "vmp_db")
    @classmethod
    def _a_plain_path(cls, value: str) -> str:
        if is_dsn(value):
            return value
        # A URI's parameters (shared cache, vfs, a relative path resolved elsewhere) put
        # two planes in one file and defeated the deleted-file guard.
        if value.lower().startswith("file:"):
            raise ValueError("give a file path, not an SQLite URI")
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("vmp_api_key", "vmp_previous_api_key", "metrics_token")
    @classmethod
    def _long_vmp_key(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_VMP_KEY_CHARS:
            raise ValueError(f"must be at least {MIN_VMP_KEY_CHARS} characters")
        return value

    @model_validator(mode="after")
    def _one_key_source(self) -> Settings:
        if self.heimdall_key is not None and self.heimdall_key_file is not None:
            raise ValueError("set RATATOSKR_HEIMDALL_KEY or RATATOSKR_HEIMDALL_KEY_FILE, not both")
        return self

    def db_path(self, plane: Plane) -> str:
        """The database file, ``:memory:`` or DSN configured for ``plane``. Raises
        KeyError for a name that is no plane."""
        return self.databases()[plane]

    def databases(self) -> dict[Plane, str]:
        """Each plane's database setting, by plane (the registry's PLANE_TABLE has an
        entry for each name here, and a test holds both to the same planes)."""
        return {"memory": self.memory_db, "affect": self.affect_db, "vmp": self.vmp_db}

    def heimdall_key_bytes(self) -> bytes:
        """The Heimdall key, from the setting or the key file.

        Raises ConfigError naming the setting when it is missing, unreadable or
        readable by others.
        """
        if self.heimdall_key is not None:
            key = self.heimdall_key.get_secret_value().encode()
        elif self.heimdall_key_file is not None:
            # The first line is the current key; further lines are previous keys.
            key = read_key_file(self.heimdall_key_file, "RATATOSKR_HEIMDALL_KEY_FILE")
            key = key.splitlines()[0].strip() if key else key
        else:
            raise ConfigError(
                "no Heimdall key: set RATATOSKR_HEIMDALL_KEY or RATATOSKR_HEIMDALL_KEY_FILE "
                "(or run `ratatoskr serve --dev` for a local development key)"
            )
        if not key:
            raise ConfigError("RATATOSKR_HEIMDALL_KEY is empty")
        if len(key) < MIN_HEIMDALL_KEY_BYTES:
            setting = "HEIMDALL_KEY" if self.heimdall_key is not None else "HEIMDALL_KEY_FILE"
            raise ConfigError(
                f"RATATOSKR_{setting}: the key has {len(key)} bytes; HS256 needs at least "
                f"{MIN_HEIMDALL_KEY_BYTES} (e.g. `openssl rand -hex 32`)"
            )
        return key

    def heimdall_previous_keys(self) -> list[bytes]:
        """Keys still accepted while Heimdall moves to the current one: the setting, and
        the key file's lines after the first. Raises ConfigError for a short one."""
        keys: list[bytes] = []
        if self.heimdall_previous_key is not None:
            keys.append(self.heimdall_previous_key.get_secret_value().encode())
        if self.heimdall_key_file is not None:
            lines = read_key_file(self.heimdall_key_file, "RATATOSKR_HEIMDALL_KEY_FILE")
            keys += [line.strip() for line in lines.splitlines()[1:] if line.strip()]
        for key in keys:
            if len(key) < MIN_HEIMDALL_KEY_BYTES:
                raise ConfigError(
                    f"RATATOSKR_HEIMDALL_PREVIOUS_KEY: a key has {len(key)} bytes; HS256 needs "
                    f"at least {MIN_HEIMDALL_KEY_BYTES}"
                )
        return keys

    def host_names(self) -> list[str]:
        """Every name a request's ``Host`` may carry: loopback, the listening address
        (unless it is a wildcard) and ``allowed_hosts``."""
        names = list(LOOPBACK_NAMES)
        if self.host not in ("0.0.0.0", "::", "") and self.host not in names:  # noqa: S104
            names.append(self.host)
        names += [n.strip() for n in self.allowed_hosts.split(",") if n.strip()]
        return names


def read_key_file(path: Path, setting: str) -> bytes:
    """Read a key file, refusing one that group or others may read."""
    try:
        mode = path.stat().st_mode
        data = path.read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path} ({exc.strerror})") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{setting}: {path} is readable by others; chmod 600 it")
    if not data:
        raise ConfigError(f"{setting}: {path} is empty")
    return data


def unknown_variables(environ: dict[str, str]) -> list[str]:
    """One line per ``RATATOSKR_*`` variable that is no setting, naming the closest one
    (a mistyped dimension would otherwise be ignored, and it is fixed forever)."""
    known = {f"RATATOSKR_{name.upper()}" for name in Settings.model_fields}
    lines = []
    for name in sorted(n for n in environ if n.upper().startswith("RATATOSKR_")):
        # RATATOSKR_TEST_* belong to the test suite (e.g. RATATOSKR_TEST_PG_DSN).
        if name.upper() in known or name.upper().startswith("RATATOSKR_TEST_"):
            continue
        close = _closest(name.upper(), known)
        hint = f"; did you mean {close}?" if close else ""
        lines.append(f"{name}: not a setting{hint}")
    return lines


def _closest(name: str, known: set[str]) -> str | None:
    """The setting sharing most words with ``name`` (then the most similar spelling):
    ``MEMORY_DIM`` means ``MEMORY_EMBEDDING_DIM``, not ``MEMORY_DB``."""
    bare = name.removeprefix("RATATOSKR_")
    words = set(bare.split("_"))

    def score(candidate: str) -> tuple[int, float]:
        other = candidate.removeprefix("RATATOSKR_")
        shared = len(words & set(other.split("_")))
        return shared, difflib.SequenceMatcher(None, bare, other).ratio()

    best = max(sorted(known), key=score)
    shared, ratio = score(best)
    return best if shared or ratio >= 0.6 else None
