"""A local Hugging Face Hub for the tests: the file API huggingface_hub (and datasets) use, on 127.0.0.1.

It answers repo info (`/api/{models,datasets}/ORG/NAME[/revision/REV]`, with sizes, blob ids and LFS SHA-256
when asked), the tree (`/api/.../tree/REV[/PATH]`), paths-info, and `HEAD`/`GET .../resolve/REV/FILE` with
`ETag`, `X-Repo-Commit` and byte ranges, as the hub does. Faults are set per repo file: `truncate` (the
connection cut mid-file), `truncate_once` (the first answer cut, then whole ones), `corrupt` (the same size, other
bytes than the announced hash), `stall` (headers, then silence), `slow` (0.3 s before the body); and per repo:
`gated` (401 GatedRepo on every file unless the request carries its `token`), `stalls` (its repo info never
answers). An unknown repo answers 404 RepoNotFound.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS = (".safetensors", ".parquet", ".bin")


@dataclass
class Repo:
    """A repo's commits ({sha: {path: bytes}}), its refs ({name: sha}), faults ({path: kind}) and gating."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)
    faults: dict[str, str] = field(default_factory=dict)
    gated: bool = False  # files answer 401 GatedRepo unless the request carries `token`
    token: str | None = None
    stalls: bool = False  # its repo info answers nothing (until the server stops or a minute passes)

    def commit(self, files: dict[str, bytes], ref: str = "main") -> str:
        """Add a commit of `files` under `ref`; its sha."""
        sha = hashlib.sha1(json.dumps(sorted((k, hashlib.sha256(v).hexdigest()) for k, v in files.items()))
                           .encode() + ref.encode()).hexdigest()
        self.commits[sha] = dict(files)
        self.refs[ref] = sha
        return sha

    def resolve(self, revision: str) -> str | None:
        """The commit sha of a ref or a sha, or None."""
        revision = urllib.parse.unquote(revision)
        return self.refs.get(revision) or (revision if revision in self.commits else None)


def folder_files(folder: Path, prefix: str = "") -> dict[str, bytes]:
    """{prefix + relative path: bytes} of every file under `folder`."""
    return {prefix + p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}


def _oid(path: str, data: bytes) -> str:
    if path.endswith(LFS):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()


def _entry(path: str, data: bytes, tree: bool) -> dict:
    lfs = path.endswith(LFS)
    sha1 = hashlib.sha1(f"blob {len(data)}\0".encode() + data).hexdigest()
    if tree:
        out = {"type": "file", "path": path, "size": len(data), "oid": sha1}
        if lfs:
            out["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
        return out
    out = {"rfilename": path, "size": len(data), "blobId": sha1}
    if lfs:
        out["lfs"] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
    return out


class Hub:
    """The server: `repos[(kind, 'org/name')]`, `requests` (method, path) as they came, `url` for HF_ENDPOINT."""

    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.stop = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                hub.handle(self, "GET")

            def do_HEAD(self) -> None:
                hub.handle(self, "HEAD")

            def do_POST(self) -> None:
                hub.handle(self, "POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def repo(self, name: str, kind: str = "model") -> Repo:
        """The repo `name` of `kind`, created empty when new."""
        return self.repos.setdefault((kind, name), Repo())

    def close(self) -> None:
        """Stop serving (a stalled answer gives up)."""
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    # --- answering -------------------------------------------------------------------------------------------
    def handle(self, req: BaseHTTPRequestHandler, method: str) -> None:
        url = urllib.parse.urlsplit(req.path)
        path = urllib.parse.unquote(url.path)
        self.requests.append((method, path))
        query = urllib.parse.parse_qs(url.query)
        body = b""
        if method == "POST":
            body = req.rfile.read(int(req.headers.get("Content-Length") or 0))
        parts = path.strip("/").split("/")
        try:
            if parts[0] == "api" and parts[1] in ("models", "datasets"):
                return self.api(req, parts[1][:-1], parts[2:], query, body)
            kind = "model"
            if parts[0] == "datasets":
                kind, parts = "dataset", parts[1:]
            if len(parts) >= 5 and parts[2] == "resolve":
                return self.resolve(req, method, kind, "/".join(parts[:2]), parts[3], "/".join(parts[4:]))
        except (BrokenPipeError, ConnectionResetError):
            return
        self.error(req, 404, "EntryNotFound", f"no route {path}")

    def error(self, req: BaseHTTPRequestHandler, status: int, code: str, message: str) -> None:
        data = json.dumps({"error": message}).encode()
        req.send_response(status)
        req.send_header("X-Error-Code", code)
        req.send_header("X-Error-Message", message)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        if req.command != "HEAD":
            req.wfile.write(data)

    def json(self, req: BaseHTTPRequestHandler, value: object) -> None:
        data = json.dumps(value).encode()
        req.send_response(200)
        req.send_header("Content-Type", "application/json")
        req.send_header("Content-Length", str(len(data)))
        req.end_headers()
        req.wfile.write(data)

    def api(self, req: BaseHTTPRequestHandler, kind: str, parts: list[str], query: dict, body: bytes) -> None:
        name = "/".join(parts[:2])
        repo = self.repos.get((kind, name))
        if repo is None:
            return self.error(req, 404, "RepoNotFound", f"Repository Not Found for url: {name}")
        if repo.stalls:
            return self.stall(req)
        rest = parts[2:]
        revision = rest[1] if len(rest) >= 2 else "main"
        sha = repo.resolve(revision)
        if sha is None:
            return self.error(req, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = repo.commits[sha]
        if not rest or rest[0] == "revision":
            return self.json(req, {"id": name, "sha": sha, "private": False, "gated": repo.gated,
                                   "siblings": [_entry(p, d, False) for p, d in sorted(files.items())]})
        if rest[0] == "tree":
            base = "/".join(rest[2:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            return self.json(req, self.tree(files, base, recursive))
        if rest[0] == "paths-info":
            wanted = urllib.parse.parse_qs(body.decode()).get("paths", [])
            if not wanted and body.strip().startswith(b"{"):
                wanted = json.loads(body).get("paths", [])
            out = []
            for item in wanted:
                if item in files:
                    out.append(_entry(item, files[item], True))
                elif any(p.startswith(item.rstrip("/") + "/") for p in files):
                    out.append({"type": "directory", "path": item, "oid": "0" * 40})
            return self.json(req, out)
        return self.error(req, 404, "EntryNotFound", f"no api route {'/'.join(parts)}")

    def stall(self, req: BaseHTTPRequestHandler) -> None:
        """Send nothing more until the server stops or a minute passes, then drop the connection."""
        deadline = time.monotonic() + 60
        while not self.stop.is_set() and time.monotonic() < deadline:
            time.sleep(0.05)
        req.close_connection = True

    @staticmethod
    def tree(files: dict[str, bytes], base: str, recursive: bool) -> list[dict]:
        prefix = f"{base.strip('/')}/" if base.strip("/") else ""
        out, dirs = [], set()
        for path, data in sorted(files.items()):
            if not path.startswith(prefix):
                continue
            inner = path[len(prefix):].split("/")
            for depth in range(1, len(inner)):
                if depth == 1 or recursive:
                    dirs.add(prefix + "/".join(inner[:depth]))
            if len(inner) == 1 or recursive:
                out.append(_entry(path, data, True))
        return [{"type": "directory", "path": d, "oid": "0" * 40} for d in sorted(dirs)] + out

    def resolve(self, req: BaseHTTPRequestHandler, method: str, kind: str, name: str, revision: str,
                file: str) -> None:
        repo = self.repos.get((kind, name))
        if repo is None:
            return self.error(req, 404, "RepoNotFound", f"Repository Not Found for url: {name}")
        if repo.gated and (repo.token is None or req.headers.get("Authorization") != f"Bearer {repo.token}"):
            return self.error(req, 401, "GatedRepo", f"Access to model {name} is restricted")
        sha = repo.resolve(revision)
        if sha is None:
            return self.error(req, 404, "RevisionNotFound", f"Invalid rev id: {revision}")
        files = repo.commits[sha]
        if file not in files:
            return self.error(req, 404, "EntryNotFound", f"{file} does not exist at {revision}")
        data, fault = files[file], repo.faults.get(file)
        start, end = 0, len(data)
        ranged = req.headers.get("Range")
        if ranged and ranged.startswith("bytes="):
            first, _, last = ranged[len("bytes="):].partition("-")
            start = int(first or 0)
            end = min(int(last) + 1, len(data)) if last else len(data)
        req.send_response(206 if ranged else 200)
        req.send_header("ETag", f'"{_oid(file, data)}"')
        req.send_header("X-Repo-Commit", sha)
        req.send_header("Accept-Ranges", "bytes")
        req.send_header("Content-Length", str(end - start))
        if ranged:
            req.send_header("Content-Range", f"bytes {start}-{end - 1}/{len(data)}")
        req.end_headers()
        if method == "HEAD":
            return
        chunk = data[start:end]
        if fault == "truncate_once":  # the first answer cut off, later ones whole: a download that resumes
            repo.faults[file] = "served"
            fault = "truncate"
        if fault == "truncate":
            req.wfile.write(chunk[: len(chunk) // 2])
            req.wfile.flush()
            req.close_connection = True
            return
        if fault == "corrupt":
            chunk = bytes(b ^ 0xFF for b in chunk[:64]) + chunk[64:]
        if fault == "stall":
            return self.stall(req)
        if fault == "slow":
            time.sleep(0.3)
        req.wfile.write(chunk)
