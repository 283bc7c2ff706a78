"""The ``oci://HOST[:PORT]/REPO`` backend: a small client for the OCI distribution API.

Each entry is an OCI artifact tagged with its input hash: an image manifest with
``artifactType`` :data:`ARTIFACT_TYPE`, the empty config, one layer per file (title annotation =
file name, the layer digest = the file's sha256) and the entry's identity and informational meta
in annotations, the way ORAS and Spack store non-image content. Blobs are shared by digest across
entries. An entry's acceptance runs (the manifest's ``accepted``) are a second artifact, tagged
``<hash>.accepted`` (:data:`RUNS_SUFFIX`), of artifactType :data:`RUNS_TYPE`: one titled layer
per run. The entry's own artifact is never replaced (the first push wins); the runs' tag moves
to a new artifact when a push adds runs, and a reader that does not know it never asks for it.
A small ``http.client`` client suffices (no SDK): one keep-alive connection per
backend, blobs uploaded monolithically with ``sendfile`` and downloaded with ``readinto``; see
docs/performance.md ("Binary caches") for its throughput against ``curl``.

Loopback hosts are spoken to over http, every other host over https. Credentials come from the
usual places, never from recipes: ``$ROCMFORGE_OCI_USERNAME``/``$ROCMFORGE_OCI_PASSWORD``, else
the docker config (``$DOCKER_CONFIG/config.json`` or ``~/.docker/config.json``, ``auths``); a
registry asking for a bearer token gets one from its realm with those credentials.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from email.message import Message
from pathlib import Path
from typing import Any, BinaryIO, cast

from rocmforge.cache.backend import (
    TIMEOUT_ENV,
    CacheError,
    CacheFullError,
    ManifestInfo,
    cache_timeout,
)
from rocmforge.util.fsutil import loads_untrusted

ARTIFACT_TYPE = "application/vnd.rocmforge.entry.v1+json"
#: artifactType of an entry's acceptance runs, tagged ``<hash>`` + :data:`RUNS_SUFFIX`
RUNS_TYPE = "application/vnd.rocmforge.accepted.v1+json"
RUNS_SUFFIX = ".accepted"
#: media type of one run's layer (an in-toto statement, or a DSSE envelope over one)
RUN_LAYER_TYPE = "application/json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
EMPTY_TYPE = "application/vnd.oci.empty.v1+json"
EMPTY = b"{}"
#: sha256 of :data:`EMPTY` (a literal: hashlib costs ~8 ms to import, a cache miss pays it).
EMPTY_DIGEST = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
LAYER_TYPE = "application/octet-stream"
TITLE = "org.opencontainers.image.title"
CREATED = "org.opencontainers.image.created"
_PREFIX = "dev.rocmforge."
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _credentials(host: str) -> tuple[str, str] | None:
    user, password = (
        os.environ.get("ROCMFORGE_OCI_USERNAME"),
        os.environ.get("ROCMFORGE_OCI_PASSWORD"),
    )
    if user and password:
        return user, password
    cfg_dir = os.environ.get("DOCKER_CONFIG") or str(Path.home() / ".docker")
    try:
        with open(os.path.join(cfg_dir, "config.json"), "rb") as f:
            auths = json.loads(f.read()).get("auths", {})
    except (OSError, ValueError, AttributeError):
        return None
    for key in (host, f"https://{host}", f"http://{host}"):
        auth = (auths.get(key) or {}).get("auth") if isinstance(auths, dict) else None
        if auth:
            try:
                u, _, p = base64.b64decode(auth).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return None
            return u, p
    return None


def _send_file(conn: http.client.HTTPConnection, f: BinaryIO) -> None:
    """Send the file ``f`` as the request body: ``sendfile`` on a plain socket (no copy
    through Python), 1 MiB writes through TLS."""
    sock = conn.sock
    if sock is None:  # pragma: no cover - endheaders() connected it
        raise http.client.NotConnected()
    import ssl  # ~10 ms to import: only an upload pays for it

    if not isinstance(sock, ssl.SSLSocket):
        sock.sendfile(f)
        return
    buf = memoryview(bytearray(1 << 20))
    while n := f.readinto(buf):  # type: ignore[attr-defined]
        sock.sendall(buf[:n])


class _Body(io.RawIOBase):
    """A streamed response body (a blob): ``readinto`` straight from the socket; closing it
    before the end drops the connection, which then cannot carry another request."""

    def __init__(self, resp: http.client.HTTPResponse, owner: OciCache) -> None:
        self._resp = resp
        self._owner = owner

    def readable(self) -> bool:
        """A body is readable."""
        return True

    def readinto(self, buf: Any) -> int:
        """Read into ``buf`` (a short read only at the end); a registry that stops sending
        for the timeout, or breaks off, is a :class:`CacheError` naming it."""
        try:
            return self._resp.readinto(buf)
        except (OSError, http.client.HTTPException) as exc:
            raise self._owner._no_answer(exc) from None

    def close(self) -> None:
        """Close the body; a body not read to its end closes the connection too."""
        if not self.closed:
            if not self._resp.isclosed():
                self._owner._drop()
            self._resp.close()
        super().close()


class _Reply:
    """A response read to its end: status, headers and body."""

    def __init__(self, resp: http.client.HTTPResponse, body: bytes) -> None:
        self.status = resp.status
        self.headers = resp.headers
        self.body = body


class OciCache:
    """A cache in an OCI distribution registry repository: ``oci://HOST[:PORT]/REPO``.

    Requests go over one keep-alive ``http.client`` connection per backend (a second push is a
    few requests on it); a blob is uploaded monolithically from the file with ``sendfile`` and
    downloaded with ``readinto`` into the caller's buffer.
    """

    def __init__(self, host: str, repo: str, url: str) -> None:
        self.url = url
        self.host = host
        self.repo = repo
        self._loopback = host.rsplit(":", 1)[0] in _LOOPBACK or host in _LOOPBACK
        self._scheme = "http" if self._loopback else "https"
        # A loopback registry is never reached through a proxy from the environment.
        handlers = [urllib.request.ProxyHandler({})] if self._loopback else []
        self._opener = urllib.request.build_opener(*handlers)
        self.base = f"{self._scheme}://{host}/v2/{repo}"
        self._auth: str | None = None
        self._creds = _credentials(host)
        self._conn: http.client.HTTPConnection | None = None
        #: seconds each connect, send and receive may take (:func:`cache_timeout`)
        self.timeout = cache_timeout()

    def _no_answer(self, exc: BaseException) -> CacheError:
        """The error for a request the registry did not answer in time, or broke off."""
        if isinstance(exc, TimeoutError):
            return CacheError(
                f"{self.url}: the registry did not answer within {self.timeout:g} s (a hung "
                f"registry or network?); ${TIMEOUT_ENV}=SECONDS waits longer"
            )
        return CacheError(f"{self.url}: cannot reach the registry: {exc}")

    # -- HTTP -------------------------------------------------------------------------------
    def _connect(self, scheme: str, netloc: str) -> http.client.HTTPConnection:
        """Open a connection to ``netloc`` (through the environment's proxy unless loopback)."""
        host = urllib.parse.urlsplit(f"//{netloc}").hostname or netloc
        proxy = None
        if not self._loopback and not urllib.request.proxy_bypass(host):
            proxy = urllib.request.getproxies().get(scheme)
        if proxy is None:
            if scheme == "https":
                return http.client.HTTPSConnection(netloc, timeout=self.timeout)
            return http.client.HTTPConnection(netloc, timeout=self.timeout)
        p = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        headers = {}
        if p.username:
            cred = f"{urllib.parse.unquote(p.username)}:{urllib.parse.unquote(p.password or '')}"
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(cred.encode()).decode()
        proxy_netloc = f"{p.hostname}:{p.port or 80}"
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                proxy_netloc, timeout=self.timeout
            )
            conn.set_tunnel(netloc, headers=headers)
        else:
            conn = http.client.HTTPConnection(proxy_netloc, timeout=self.timeout)
            conn.set_tunnel(netloc, headers=headers)
        return conn

    def _drop(self) -> None:
        """Close the keep-alive connection (a body left unread, an error)."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _send(
        self,
        method: str,
        url: str,
        body: bytes | BinaryIO | None,
        headers: dict[str, str],
    ) -> http.client.HTTPResponse:
        """Send one request; a keep-alive connection the server closed meanwhile is reopened
        once (the body is rewound)."""
        parts = urllib.parse.urlsplit(url)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        own = (parts.scheme, parts.netloc) == (self._scheme, self.host)
        for attempt in (0, 1):
            if own:
                reused = self._conn is not None
                if self._conn is None:
                    self._conn = self._connect(parts.scheme, parts.netloc)
                conn = self._conn
            else:  # a redirect to another host (a blob store): a connection of its own
                reused = False
                conn = self._connect(parts.scheme, parts.netloc)
            try:
                if body is None or isinstance(body, bytes):
                    conn.request(method, path, body=body, headers=headers)
                else:
                    body.seek(0)  # a file body is sent whole, from its start
                    conn.putrequest(method, path, skip_accept_encoding=True)
                    for k, v in headers.items():
                        conn.putheader(k, v)
                    conn.endheaders()
                    _send_file(conn, body)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                conn.close()
                if own:
                    self._conn = None
                if not reused or attempt:
                    raise
            except BaseException:
                conn.close()
                if own:
                    self._conn = None
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _request(
        self,
        method: str,
        url: str,
        *,
        data: bytes | BinaryIO | None = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200,),
        missing_ok: bool = False,
        stream: bool = False,
    ) -> Any:
        """Send one request (with auth on a 401 challenge, redirects followed for GET and HEAD).

        Return a :class:`_Reply`, or with ``stream`` the open body (:class:`_Body`); None for
        a 404 with ``missing_ok``.
        """
        authed = False
        for _hop in range(6):
            own = urllib.parse.urlsplit(url).netloc == self.host
            hdrs = dict(headers or {})
            if self._auth and own:
                hdrs["Authorization"] = self._auth
            if data is None and method in ("POST", "PUT"):
                hdrs.setdefault("Content-Length", "0")
            try:
                resp = self._send(method, url, data, hdrs)
                status = resp.status
                if stream and status in ok:
                    return _Body(resp, self)
                body = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self._drop()
                raise self._no_answer(exc) from None
            if status in (301, 302, 303, 307, 308) and method in ("GET", "HEAD"):
                location = resp.headers.get("Location")
                if location:
                    url = urllib.parse.urljoin(url, location)
                    continue
            if status == 401 and not authed and own:
                authed = True
                if self._authenticate(resp.headers):
                    continue
            if status == 404 and missing_ok:
                return None
            if status not in ok:
                text = body[:300].decode("utf-8", "replace").strip()
                if method in ("POST", "PUT", "PATCH") and _full(status, body):
                    raise self._full_error(method, url, status, body)
                raise CacheError(
                    f"{self.url}: {method} {urllib.parse.urlsplit(url).path}: HTTP {status}"
                    + (f" ({text})" if text else "")
                )
            return _Reply(resp, body)
        raise CacheError(f"{self.url}: {method} {url}: too many redirects")

    def _full_error(self, method: str, url: str, status: int, body: bytes) -> CacheFullError:
        """The error for an upload the registry refused for lack of space: the registry is
        named, never the store, with what frees it."""
        said = "no space left on device" if _FULL_TEXT in body[:4096].lower() else "full"
        path = urllib.parse.urlsplit(url).path
        return CacheFullError(
            f"the cache {self.url} is full: the registry answered {method} {path} with HTTP "
            f"{status} ({said}) "
            "(the store is not what is full); free space in the registry's storage: "
            f"`rocmforge cache gc {self.url} --keep-last N` (or --older-than) removes old entries, "
            "then the registry's garbage collection frees their blobs (docker-registry "
            "garbage-collect CONFIG, the registry stopped), or push to a larger one"
        )

    def _authenticate(self, headers: Message) -> bool:
        challenge = headers.get("WWW-Authenticate", "")
        basic = None
        if self._creds:
            basic = "Basic " + base64.b64encode(":".join(self._creds).encode()).decode()
        if challenge.lower().startswith("basic"):
            if basic is None or self._auth == basic:
                return False
            self._auth = basic
            return True
        if not challenge.lower().startswith("bearer"):
            return False
        params = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
        realm = params.pop("realm", None)
        if not realm:
            return False
        query = urllib.parse.urlencode(
            {k: v for k, v in params.items() if k in ("service", "scope")}
        )
        req = urllib.request.Request(f"{realm}?{query}")
        if basic:
            req.add_header("Authorization", basic)
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                doc = loads_untrusted(resp.read())
        except (urllib.error.URLError, OSError, ValueError) as err:
            raise CacheError(f"{self.url}: cannot get a token from {realm}: {err}") from None
        token = doc.get("token") or doc.get("access_token")
        if not token:
            return False
        self._auth = f"Bearer {token}"
        return True

    # -- Backend ----------------------------------------------------------------------------
    def _oci_manifest(self, ref: str) -> dict[str, Any] | None:
        resp = self._request(
            "GET",
            f"{self.base}/manifests/{ref}",
            headers={"Accept": MANIFEST_TYPE},
            missing_ok=True,
        )
        if resp is None:
            return None
        try:
            doc = loads_untrusted(resp.body)
        except ValueError as exc:
            raise CacheError(f"{self.url}: manifest {ref} is not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise CacheError(f"{self.url}: manifest {ref} is not a JSON object")
        return doc

    def get_manifest(self, hash: str) -> bytes | None:
        """Fetch the artifact tagged ``hash`` and return it as a rocmforge manifest."""
        doc = self._oci_manifest(hash)
        if doc is None:
            return None
        ann = doc.get("annotations") or {}
        files = _files(doc)
        try:
            meta = loads_untrusted(ann.get(_PREFIX + "meta", "{}"))
        except ValueError:
            meta = None
        out = {
            "schema": 1 if doc.get("artifactType") == ARTIFACT_TYPE else None,
            "hash": ann.get(_PREFIX + "hash"),
            "name": ann.get(_PREFIX + "name"),
            "version": ann.get(_PREFIX + "version"),
            "files": files,
            "meta": meta,
        }
        runs = self._oci_manifest(hash + RUNS_SUFFIX)
        if runs is not None and runs.get("artifactType") == RUNS_TYPE:
            out["accepted"] = _files(runs)
        return json.dumps(out).encode()

    def _has_tag(self, ref: str) -> bool:
        resp = self._request(
            "HEAD",
            f"{self.base}/manifests/{ref}",
            headers={"Accept": MANIFEST_TYPE},
            missing_ok=True,
        )
        return resp is not None

    def _put_artifact(
        self,
        ref: str,
        artifact_type: str,
        layer_type: str,
        files: list[dict[str, Any]],
        annotations: dict[str, str],
    ) -> None:
        """PUT an image manifest tagged ``ref``: the empty config, one titled layer per file."""
        if not self.has_blob(EMPTY_DIGEST.removeprefix("sha256:")):
            self._upload(EMPTY_DIGEST, EMPTY, len(EMPTY))
        import time

        doc = {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "artifactType": artifact_type,
            "config": {"mediaType": EMPTY_TYPE, "digest": EMPTY_DIGEST, "size": len(EMPTY)},
            "layers": [
                {
                    "mediaType": layer_type,
                    "digest": f"sha256:{f['sha256']}",
                    "size": f["size"],
                    "annotations": {TITLE: f["name"]},
                }
                for f in files
            ],
            "annotations": {
                **annotations,
                CREATED: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            },
        }
        body = json.dumps(doc, sort_keys=True).encode()
        self._request(
            "PUT",
            f"{self.base}/manifests/{ref}",
            data=body,
            headers={"Content-Type": MANIFEST_TYPE},
            ok=(200, 201),
        )

    def _put_entry(self, hash: str, m: dict[str, Any]) -> None:
        self._put_artifact(
            hash,
            ARTIFACT_TYPE,
            LAYER_TYPE,
            m["files"],
            {
                _PREFIX + "hash": m["hash"],
                _PREFIX + "name": m["name"],
                _PREFIX + "version": m["version"],
                _PREFIX + "meta": json.dumps(m.get("meta") or {}, sort_keys=True),
            },
        )

    def _put_runs(self, hash: str, m: dict[str, Any]) -> None:
        """Tag ``<hash>.accepted`` with an artifact of the manifest's runs (none: nothing)."""
        if m.get("accepted"):
            self._put_artifact(
                hash + RUNS_SUFFIX, RUNS_TYPE, RUN_LAYER_TYPE, m["accepted"],
                {_PREFIX + "hash": m["hash"]},
            )  # fmt: skip

    def put_manifest(self, hash: str, data: bytes) -> bool:
        """Push the artifact for ``hash`` (config, then the manifest) unless the tag exists,
        then its runs' artifact when the manifest lists runs."""
        if self._has_tag(hash):
            return False
        m = json.loads(data)
        self._put_entry(hash, m)
        self._put_runs(hash, m)
        return True

    def replace_manifest(self, hash: str, data: bytes) -> None:
        """Tag ``<hash>.accepted`` with the manifest's runs; the entry's own artifact is put
        again only when missing or when its files differ (a push merged signatures into its
        envelope, or replaced an unsigned copy): the tag then names the new artifact, the old
        one is left untagged for the registry's garbage collection."""
        m = json.loads(data)
        doc = self._oci_manifest(hash)
        want = sorted((f["name"], f["sha256"], f["size"]) for f in m["files"])
        have = None if doc is None else sorted(
            (f["name"], f["sha256"], f["size"]) for f in _files(doc)
        )  # fmt: skip
        if have != want:
            self._put_entry(hash, m)
        self._put_runs(hash, m)

    def has_blob(self, sha256: str) -> bool:
        """HEAD the blob."""
        resp = self._request("HEAD", f"{self.base}/blobs/sha256:{sha256}", missing_ok=True)
        return resp is not None

    def _upload(self, digest: str, body: bytes | BinaryIO, size: int) -> None:
        """Upload one blob monolithically: POST for a location, then one PUT of the body."""
        resp = self._request("POST", f"{self.base}/blobs/uploads/", data=b"", ok=(202,))
        location = resp.headers.get("Location", "")
        if not location:
            raise CacheError(f"{self.url}: the registry gave no upload location")
        target = urllib.parse.urljoin(self.base + "/", location)
        sep = "&" if "?" in target else "?"
        headers = {"Content-Type": "application/octet-stream", "Content-Length": str(size)}
        self._request(
            "PUT", f"{target}{sep}digest={digest}", data=body, headers=headers, ok=(201, 204)
        )

    def put_blob(self, sha256: str, path: Path) -> bool:
        """Upload ``path`` as blob ``sha256`` (monolithic, ``sendfile`` from the file)."""
        if self.has_blob(sha256):
            return False
        with open(path, "rb") as f:
            self._upload(f"sha256:{sha256}", f, os.fstat(f.fileno()).st_size)
        return True

    def open_blob(self, sha256: str) -> BinaryIO:
        """GET the blob (redirects followed) as a stream."""
        body = self._request("GET", f"{self.base}/blobs/sha256:{sha256}", stream=True)
        return cast(BinaryIO, body)

    def delete_manifest(self, hash: str) -> None:
        """Delete the artifacts tagged ``hash`` and ``<hash>.accepted`` by their digests (the
        registry must allow deletes)."""
        for ref in (hash + RUNS_SUFFIX, hash):
            resp = self._request(
                "HEAD",
                f"{self.base}/manifests/{ref}",
                headers={"Accept": MANIFEST_TYPE},
                missing_ok=True,
            )
            if resp is None:
                continue
            digest = resp.headers.get("Docker-Content-Digest", "")
            if not digest:
                raise CacheError(f"{self.url}: the registry gave no digest for {ref}")
            self._request("DELETE", f"{self.base}/manifests/{digest}", ok=(200, 202))

    def clean_interrupted(self, *, grace: float = 0.0) -> int:
        """Nothing: an interrupted upload session is the registry's to expire."""
        return 0

    def prune_blobs(self, referenced: set[str], *, grace: float, dry_run: bool) -> tuple[int, int]:
        """Nothing: a registry frees unreferenced blobs with its own garbage collection."""
        return 0, 0

    def manifests(self) -> Iterator[ManifestInfo]:
        """List the tags that are input hashes, with each artifact's size and creation time."""
        resp = self._request("GET", f"{self.base}/tags/list", missing_ok=True)
        if resp is None:
            return
        try:
            doc = loads_untrusted(resp.body)
        except ValueError as exc:
            raise CacheError(f"{self.url}: the tag list is not JSON ({exc})") from None
        tags = (doc.get("tags") if isinstance(doc, dict) else None) or []
        import calendar
        import time

        for tag in sorted(tags):
            if tag.endswith(RUNS_SUFFIX):  # an entry's runs, listed with the entry
                continue
            doc = self._oci_manifest(tag)
            if doc is None or doc.get("artifactType") != ARTIFACT_TYPE:
                continue
            size = sum(int(layer.get("size", 0)) for layer in doc.get("layers") or [])
            created = (doc.get("annotations") or {}).get(CREATED, "")
            try:
                mtime = float(calendar.timegm(time.strptime(created, "%Y-%m-%dT%H:%M:%SZ")))
            except ValueError:
                mtime = 0.0
            yield ManifestInfo(tag, size, mtime)


#: What a registry's storage driver says when its disk is full (distribution: HTTP 500,
#: ``{"errors":[{"code":"UNKNOWN",...,"detail":"write .../data: no space left on device"}]}``).
_FULL_TEXT = b"no space left on device"


def _full(status: int, body: bytes) -> bool:
    """Whether an upload's answer says the registry's storage is full: 507 Insufficient
    Storage, or an error naming ENOSPC or a quota (the body is read in part, lower-cased)."""
    text = body[:4096].lower()
    return status == 507 or (
        status >= 400 and (_FULL_TEXT in text or b"disk quota exceeded" in text)
    )


def _files(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The files of an artifact: ``{name, sha256, size}`` of each titled layer."""
    files = []
    for layer in doc.get("layers") or []:
        if not isinstance(layer, dict):
            continue
        digest = str(layer.get("digest", ""))
        files.append(
            {
                "name": (layer.get("annotations") or {}).get(TITLE, ""),
                "sha256": digest.removeprefix("sha256:"),
                "size": layer.get("size", -1),
            }
        )
    return files


def open_oci(url: str) -> OciCache:
    """Parse ``oci://HOST[:PORT]/REPO`` into a backend."""
    rest = url[len("oci://") :]
    host, _, repo = rest.partition("/")
    if not host or not repo or not re.fullmatch(r"[a-z0-9]+([._/-][a-z0-9]+)*", repo):
        from rocmforge.errors import UsageError

        raise UsageError(f"cache {url}: expected oci://HOST[:PORT]/REPO (lowercase repository)")
    return OciCache(host, repo, f"oci://{host}/{repo}")
